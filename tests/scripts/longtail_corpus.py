#!/usr/bin/env python3
"""A long-tail mix of documents as a uint16 token file, for the documents'
tests and benchmarks: document lengths log-normal (median e^6 = 403 tokens,
sigma 1.2: 90th percentile ~1900, 99th ~6600), clipped to [16, 32768], each
document opened by the end-of-text token 50256 and filled with ids drawn
below it (GPT-2's vocabulary); a seeded generator, the same file each time.

  longtail_corpus.py OUT TOKENS [EOT]

EOT (default 50256) is the end-of-text id; the other ids are drawn below it
(EOT 255: a byte-level vocabulary of 256).
"""
import array
import math
import random
import sys

out, tokens = sys.argv[1], int(sys.argv[2])
eot = int(sys.argv[3]) if len(sys.argv) > 3 else 50256
rng, toks = random.Random(11), array.array("H")
while len(toks) < tokens:
    n = max(16, min(32768, int(round(math.exp(rng.gauss(6.0, 1.2))))))
    toks.append(eot)
    toks.extend(rng.randrange(0, eot) for _ in range(n - 1))
open(out, "wb").write(toks.tobytes())
