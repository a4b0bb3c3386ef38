"""Helpers of tests/data/tokenize.sh, independent of the tool they check.

  train TEXT OUT [--vocab V] [--special NAME] [--added N]
      a byte-level BPE tokenizer.json trained on TEXT, with the special token
      NAME (default <|endoftext|>) and N added tokens <t00000>... (to make a
      vocabulary beyond 65536)
  inputs CORPUS DIR [--added N]
      test inputs from the corpus's lines: DIR/txt/{a,b,c}.txt (a document
      each), DIR/data/docs.jsonl and docs.jsonl.gz (field "body", blank
      lines between), DIR/lines.txt (a document per line); the documents in
      the order the tool reads `DIR/txt 'DIR/data/*.jsonl*'` in
      DIR/docs.json, those of lines.txt in DIR/lines.json; with --added, the
      jsonl documents also name added tokens
  check OUT TOKENIZER DOCS --version V
      OUT's shards (val, then train) hold, bit for bit, the end-of-text token
      and the tokenizer's own encoding of each document of DOCS in turn; they
      decode back to the documents; headers, sizes, shard limits and the
      manifest's counts and sha256 agree
"""
import argparse
import gzip
import hashlib
import json
import os
import struct
import sys
from array import array


def train(a):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab, special_tokens=[a.special],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([a.text], trainer)
    if a.added:
        tok.add_tokens([f"<t{i:05d}>" for i in range(a.added)])
    tok.save(a.out)
    print(f"{a.out}: vocabulary {tok.get_vocab_size()}")


def inputs(a):
    lines = [l for l in open(a.corpus, encoding="utf-8").read().split("\n") if l.strip()]
    lines[1] = "Ünïcödé: 日本語, émoji 🙂, tabs\tand  spaces"
    os.makedirs(os.path.join(a.dir, "txt"))
    os.makedirs(os.path.join(a.dir, "data"))
    docs = []
    for i, name in enumerate("abc"):
        text = "\n".join(lines[i * 5:(i + 1) * 5]) + "\n"
        with open(os.path.join(a.dir, "txt", name + ".txt"), "w", encoding="utf-8") as f:
            f.write(text)
        docs.append(text)
    body = lines[15:] if not a.added else [
        f"{l} <t{(i * 7919) % a.added:05d}>" for i, l in enumerate(lines[15:])]
    jsonl = "".join(json.dumps({"id": i, "body": l}) + "\n" + ("\n" if i % 50 == 49 else "")
                    for i, l in enumerate(body))
    with open(os.path.join(a.dir, "data", "docs.jsonl"), "w", encoding="utf-8") as f:
        f.write(jsonl)
    half = body[:len(body) // 2]
    with gzip.open(os.path.join(a.dir, "data", "docs.jsonl.gz"), "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps({"body": l}) + "\n" for l in half))
    docs += body + half
    json.dump(docs, open(os.path.join(a.dir, "docs.json"), "w"))
    with open(os.path.join(a.dir, "lines.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(lines) + "\n")
    json.dump(lines, open(os.path.join(a.dir, "lines.json"), "w"))
    print(f"{a.dir}: {len(docs)} documents, {len(lines)} lines")


def read_shard(path):
    """(version, tokens) of an llm.c .bin, its size checked"""
    data = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", data[:12])
    assert magic == 20240520, f"{path}: magic {magic}"
    assert version in (1, 2), f"{path}: version {version}"
    width = 2 if version == 1 else 4
    assert len(data) == 1024 + width * count, f"{path}: {len(data)} bytes for {count} tokens"
    tokens = array("H" if version == 1 else "I")
    tokens.frombytes(data[1024:])
    if sys.byteorder != "little":
        tokens.byteswap()
    return version, tokens, hashlib.sha256(data).hexdigest()


def check(a):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(a.tokenizer)
    docs = json.load(open(a.docs))
    m = json.load(open(os.path.join(a.out, "manifest.json")))
    eot = m["tokenizer"]["eot_id"]
    assert tok.id_to_token(eot) == m["tokenizer"]["eot_token"]
    assert m["tokenizer"]["vocab_size"] == tok.get_vocab_size()
    assert m["format"]["version"] == a.version, f"version {m['format']['version']}, want {a.version}"
    shards = m["shards"]["val"] + m["shards"]["train"]
    written = [os.path.relpath(os.path.join(d, f), a.out) for d, _, fs in os.walk(a.out) for f in fs]
    assert sorted([s["file"] for s in shards] + ["manifest.json"]) == sorted(written), written
    assert all(s["file"].startswith("val/") for s in m["shards"]["val"]), m["shards"]["val"]
    got = []
    for s in shards:
        version, tokens, sha = read_shard(os.path.join(a.out, s["file"]))
        assert version == a.version and sha == s["sha256"] and len(tokens) == s["tokens"], s
        assert 0 < len(tokens) <= m["options"]["shard_tokens"], s
        assert s["documents"] == tokens.count(eot), s
        got.extend(tokens)
    want = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        want += [eot] + enc.ids
    assert got == want, f"{len(got)} tokens, want {len(want)}; first difference at " + str(
        next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want))))
    assert m["totals"]["tokens"] == len(want) and m["totals"]["documents"] == len(docs)
    val_docs = sum(s["documents"] for s in m["shards"]["val"])
    assert val_docs == min(m["options"]["val_docs"], len(docs)), val_docs
    # the round trip: split at the end-of-text tokens, decode each document
    starts = [i for i, t in enumerate(got) if t == eot] + [len(got)]
    decoded = [tok.decode(got[s + 1:e], skip_special_tokens=False)
               for s, e in zip(starts, starts[1:])]
    bad = next((i for i, (x, y) in enumerate(zip(decoded, docs)) if x != y), None)
    assert len(decoded) == len(docs) and bad is None, f"document {bad} does not decode back"
    top = max(got)
    assert a.version == 1 or top >= 65536, f"version 2 but no id above 65535 (largest {top})"
    print(f"ok   {a.out}: {len(shards)} shards (version {a.version}), {len(docs)} documents, "
          f"{len(got)} tokens as tokenizer.encode gives them, largest id {top}; decoded back")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("text"), t.add_argument("out")
    t.add_argument("--vocab", type=int, default=512)
    t.add_argument("--special", default="<|endoftext|>")
    t.add_argument("--added", type=int, default=0)
    i = sub.add_parser("inputs")
    i.add_argument("corpus"), i.add_argument("dir")
    i.add_argument("--added", type=int, default=0)
    c = sub.add_parser("check")
    c.add_argument("out"), c.add_argument("tokenizer"), c.add_argument("docs")
    c.add_argument("--version", type=int, required=True)
    a = p.parse_args()
    {"train": train, "inputs": inputs, "check": check}[a.cmd](a)


if __name__ == "__main__":
    main()
