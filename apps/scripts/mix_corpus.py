#!/usr/bin/env python3
"""A long-tail mix of short and long documents as a uint16 token file, for
the documents' balance and varlen tests: 85% of documents of 8-15 tokens,
15% of 60-460 (the long ones skewed short), each opened by the end-of-text
token 255 and filled with byte ids below it; a seeded generator, the same
file each time.

  mix_corpus.py OUT [TOKENS]      (default 400000 tokens)
"""
import array
import random
import sys

out = sys.argv[1]
tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 400000
rng, toks = random.Random(7), array.array("H")
while len(toks) < tokens:
    n = int(8 + 8 * rng.random()) if rng.random() < 0.85 else int(60 + 400 * rng.random() ** 2)
    toks.append(255)
    toks.extend(rng.randrange(0, 255) for _ in range(n - 1))
open(out, "wb").write(toks.tobytes())
