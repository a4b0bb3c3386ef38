#!/usr/bin/env python3
"""meshdata tokenize: text or JSONL -> llm.c token shards, with a Hugging Face
tokenizer.json (the `tokenizers` library). `meshdata tokenize ARGS` runs this
script with the same arguments; see docs/data.md.

Layout of the output directory OUT (written under a temporary name beside it
and renamed when complete, so a refused or failed run leaves nothing):
  PREFIX_000000.bin ...       training shards, at most --shard-tokens tokens each
  val/PREFIX_000000.bin ...   the first --val-docs documents, when asked for
                              (a directory of their own: data.train=OUT reads
                              OUT's *.bin, never these)
  manifest.json               shards (file, tokens, documents, sha256), totals,
                              the tokenizer, the inputs, this tool's version
Each shard is an llm.c .bin: 256 int32 (magic 20240520, version, token
count), then the tokens, uint16 (version 1) when the vocabulary fits in 65536
ids, else uint32 (version 2). Every document is preceded by the end-of-text
token, as llm.c's own scripts write them.

Determinism: the work is cut into units (a file, or a range of whole lines of
an uncompressed line-based file) that depend on the inputs only; workers
tokenize units and the results are written in unit order, so the shards do
not depend on --workers.
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import shutil
import struct
import sys
import time
from array import array

# workers give the parallelism; the library's own thread pool would make
# "--workers 1" use every core, and does not survive a fork
os.environ["TOKENIZERS_PARALLELISM"] = "false"

TOOL_VERSION = "1"
LLMC_MAGIC = 20240520
HEADER_INTS = 256
EOT_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>")
# the size of a work unit cut from a line-based file (bytes; tests make it
# small to cut small files)
UNIT_BYTES = int(os.environ.get("MESHDATA_TOKENIZE_UNIT_BYTES", 8 << 20))
EXIT_BADINPUT = 2


class Refusal(Exception):
    """A bad input or option: one line to stderr, exit 2."""


def refuse(msg):
    raise Refusal(msg)


# ---------------------------------------------------------------------------
# inputs

def input_kind(path):
    """'jsonl' or 'text' by the file's name, or None."""
    name = path[:-3] if path.endswith(".gz") else path
    return {".jsonl": "jsonl", ".txt": "text"}.get(os.path.splitext(name)[1])


def expand_inputs(args):
    """Files, directories (every .txt/.jsonl[.gz] under them) and globs, in
    the order given; directories and globs sorted by path."""
    files = []
    for spec in args:
        if any(c in spec for c in "*?["):
            matches = sorted(p for p in glob.glob(spec, recursive=True) if os.path.isfile(p))
            if not matches:
                refuse(f"input '{spec}' matches no file")
        elif os.path.isdir(spec):
            matches = sorted(os.path.join(d, f) for d, _, fs in os.walk(spec) for f in fs
                             if input_kind(f))
            if not matches:
                refuse(f"input directory '{spec}' holds no .txt, .jsonl or .jsonl.gz file")
        elif os.path.isfile(spec):
            matches = [spec]
        else:
            refuse(f"input '{spec}': no such file or directory")
        for p in matches:
            if not input_kind(p):
                refuse(f"input '{p}': not a .txt, .txt.gz, .jsonl or .jsonl.gz file")
        files.extend(matches)
    return files


def plan_units(files, lines):
    """(file, kind, start, end) units: line-based uncompressed files are cut
    at the first newline after every UNIT_BYTES; others are one unit
    (end -1: to the end of the file)."""
    units = []
    for path in files:
        kind = input_kind(path)
        size = os.path.getsize(path)
        if path.endswith(".gz") or (kind == "text" and not lines) or size <= UNIT_BYTES:
            units.append((path, kind, 0, -1))
            continue
        with open(path, "rb") as f:
            start = 0
            while start < size:
                f.seek(min(start + UNIT_BYTES, size))
                f.readline()
                end = min(f.tell(), size)
                units.append((path, kind, start, end))
                start = end
    return units


# ---------------------------------------------------------------------------
# workers: one unit -> its tokens

_tok = None  # the worker's tokenizer
_opts = None  # (field, lines, eot id, token typecode)


def worker_init(tokenizer_path, opts):
    global _tok, _opts
    from tokenizers import Tokenizer
    _tok = Tokenizer.from_file(tokenizer_path)
    _opts = opts


def read_unit(path, start, end):
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        f.seek(start)
        return f.read() if end < 0 else f.read(end - start)


def tokenize_unit(unit):
    """-> (tokens as bytes, tokens per document including its end-of-text,
    newlines in the unit, error or None); an error is (line in the unit,
    message)."""
    path, kind, start, end = unit
    field, lines, eot, typecode = _opts
    data = read_unit(path, start, end)
    newlines = data.count(b"\n")
    docs = []
    if kind == "text" and not lines:
        rows = [(1, data)]
    else:
        rows = [(i + 1, r) for i, r in enumerate(data.split(b"\n")) if r.strip()]
    for line, raw in rows:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            return b"", [], newlines, (line, f"not UTF-8 ({err.reason} at byte {err.start})")
        if kind == "jsonl":
            try:
                obj = json.loads(text)
            except ValueError as err:
                return b"", [], newlines, (line, f"not JSON ({err})")
            text = obj.get(field) if isinstance(obj, dict) else None
            if not isinstance(text, str):
                return b"", [], newlines, (line, f"no string field '{field}'")
        docs.append(text)
    tokens, lengths = array(typecode), []
    for enc in _tok.encode_batch(docs, add_special_tokens=False):
        tokens.append(eot)
        tokens.extend(enc.ids)
        lengths.append(len(enc.ids) + 1)
    if sys.byteorder != "little":
        tokens.byteswap()
    return tokens.tobytes(), lengths, newlines, None


# ---------------------------------------------------------------------------
# shards

class ShardSet:
    """Shards PREFIX_000000.bin, ... in a directory, each at most max_tokens
    tokens; a document that does not fit goes on in the next shard (it
    counts in the shard it starts in)."""

    def __init__(self, directory, prefix, max_tokens, version, sub=""):
        self.directory, self.prefix, self.max_tokens = os.path.join(directory, sub), prefix, max_tokens
        self.sub = sub  # the shards' folder inside the output, as the manifest names them
        self.version, self.width = version, 2 if version == 1 else 4
        self.shards, self.f = [], None

    def _open(self):
        name = f"{self.prefix}_{len(self.shards):06d}.bin"
        os.makedirs(self.directory, exist_ok=True)
        self.f = open(os.path.join(self.directory, name), "wb")
        self.f.write(bytes(4 * HEADER_INTS))
        self.shards.append({"file": os.path.join(self.sub, name) if self.sub else name,
                            "tokens": 0, "documents": 0})

    def _close(self):
        shard = self.shards[-1]
        self.f.seek(0)
        self.f.write(struct.pack("<3i", LLMC_MAGIC, self.version, shard["tokens"]))
        self.f.close()
        self.f = None
        h = hashlib.sha256()
        with open(os.path.join(self.directory, os.path.basename(shard["file"])), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        shard["sha256"] = h.hexdigest()

    def put(self, data, ntokens):
        """One document's tokens (bytes) or the rest of one."""
        first = True
        while ntokens:
            if self.f is None or self.shards[-1]["tokens"] == self.max_tokens:
                if self.f:
                    self._close()
                self._open()
            shard = self.shards[-1]
            n = min(ntokens, self.max_tokens - shard["tokens"])
            self.f.write(data[:n * self.width])
            shard["tokens"] += n
            shard["documents"] += first
            first, data, ntokens = False, data[n * self.width:], ntokens - n

    def finish(self):
        if self.f:
            self._close()
        return self.shards


# ---------------------------------------------------------------------------
# progress: tqdm when importable, else a plain line; nothing when stderr is
# not a terminal

class Progress:
    def __init__(self, total_bytes):
        self.total, self.done, self.bar, self.t0 = total_bytes, 0, None, time.time()
        self.on = sys.stderr.isatty()
        if self.on:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="tokenize")
            except ImportError:
                pass

    def update(self, nbytes, ntokens):
        self.done += nbytes
        if self.bar:
            self.bar.update(nbytes)
        elif self.on:
            pct = 100.0 * self.done / max(self.total, 1)
            rate = ntokens / max(time.time() - self.t0, 1e-9)
            sys.stderr.write(f"\rtokenize: {pct:5.1f}% of {self.total} bytes, "
                             f"{ntokens} tokens ({rate:.3g} tokens/s)")

    def close(self):
        if self.bar:
            self.bar.close()
        elif self.on:
            sys.stderr.write("\n")


# ---------------------------------------------------------------------------
# the run

def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_tokenizer(path):
    from tokenizers import Tokenizer
    if not os.path.isfile(path):
        refuse(f"--tokenizer '{path}': no such file")
    try:
        return Tokenizer.from_file(path)
    except Exception as err:  # the library raises plain Exceptions
        refuse(f"--tokenizer '{path}' does not load as a Hugging Face tokenizer.json: "
               f"{str(err).splitlines()[0] if str(err) else type(err).__name__}")


def find_eot(tok, name):
    if name is not None:
        eot = tok.token_to_id(name)
        if eot is None:
            refuse(f"--eot-token '{name}' is not in the tokenizer's vocabulary")
        return name, eot
    for name in EOT_NAMES:
        eot = tok.token_to_id(name)
        if eot is not None:
            return name, eot
    refuse(f"the tokenizer has none of {', '.join(EOT_NAMES)}; name its end-of-text token "
           "with --eot-token")


def prepare_out(out, overwrite):
    """A fresh temporary directory beside OUT."""
    if os.path.exists(out) and not os.path.isdir(out):
        refuse(f"--out '{out}' exists and is not a directory")
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        refuse(f"--out '{out}' exists and is not empty (--overwrite replaces it)")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        refuse(f"--out '{out}': its parent directory does not exist")
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.mkdir(tmp)
    return tmp


def commit_out(tmp, out):
    """Rename the finished temporary directory to OUT (replacing OUT)."""
    old = None
    if os.path.isdir(out):
        old = tmp + ".old"
        os.rename(out, old)
    os.rename(tmp, out)
    if old:
        shutil.rmtree(old)


def results(units, args, opts):
    """Each unit's result, in unit order, whatever the number of workers."""
    if args.workers == 1:
        worker_init(args.tokenizer, opts)
        yield from map(tokenize_unit, units)
        return
    import multiprocessing
    with multiprocessing.Pool(args.workers, worker_init, (args.tokenizer, opts)) as pool:
        yield from pool.imap(tokenize_unit, units)


def run(args):
    t0 = time.time()
    if args.workers < 1:
        refuse(f"--workers {args.workers}: want at least 1")
    if not 1 <= args.shard_tokens <= 2**31 - 1:
        refuse(f"--shard-tokens {args.shard_tokens}: want 1 .. {2**31 - 1} (the llm.c header "
               "counts a shard's tokens in an int32)")
    if args.val_docs < 0:
        refuse(f"--val-docs {args.val_docs}: want 0 or more")
    files = expand_inputs(args.inputs)
    tok = load_tokenizer(args.tokenizer)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if args.vocab_limit is not None and args.vocab_limit < vocab:
        refuse(f"the tokenizer's vocabulary ({vocab}) is larger than --vocab-limit "
               f"{args.vocab_limit} (model.vocab_size)")
    eot_name, eot = find_eot(tok, args.eot_token)
    version = 1 if vocab <= 65536 else 2
    opts = (args.field, args.lines, eot, "H" if version == 1 else "I")
    units = plan_units(files, args.lines)
    tmp = prepare_out(args.out, args.overwrite)
    try:
        train = ShardSet(tmp, args.prefix, args.shard_tokens, version)
        val = ShardSet(tmp, args.prefix, args.shard_tokens, version, sub="val")
        progress = Progress(sum(os.path.getsize(p) for p in files))
        width, ndocs, ntokens, lines_before = train.width, 0, 0, {}
        for (path, _, start, end), (data, lengths, newlines, err) in zip(units, results(units, args, opts)):
            if err:
                progress.close()
                refuse(f"{path}:{lines_before.get(path, 0) + err[0]}: {err[1]}")
            lines_before[path] = lines_before.get(path, 0) + newlines
            pos = 0
            for n in lengths:
                (val if ndocs < args.val_docs else train).put(data[pos:pos + n * width], n)
                pos, ndocs = pos + n * width, ndocs + 1
            ntokens += pos // width
            progress.update((end if end >= 0 else os.path.getsize(path)) - start, ntokens)
        progress.close()
        if ndocs == 0:
            refuse("the inputs hold no document")
        shards = {"train": train.finish(), "val": val.finish()}
        seconds = time.time() - t0
        manifest = {
            "tool": {"name": "meshdata tokenize", "version": TOOL_VERSION,
                     "tokenizers": __import__("tokenizers").__version__},
            "format": {"name": "llmc", "version": version, "magic": LLMC_MAGIC,
                       "header_bytes": 4 * HEADER_INTS, "token_bytes": width},
            "tokenizer": {"file": os.path.basename(args.tokenizer),
                          "sha256": sha256_file(args.tokenizer), "vocab_size": vocab,
                          "eot_token": eot_name, "eot_id": eot},
            "options": {"field": args.field, "lines": args.lines,
                        "shard_tokens": args.shard_tokens, "val_docs": args.val_docs},
            "inputs": [{"file": p, "bytes": os.path.getsize(p)} for p in files],
            "shards": shards,
            "totals": {"documents": ndocs, "tokens": ntokens,
                       "train_tokens": sum(s["tokens"] for s in shards["train"]),
                       "val_tokens": sum(s["tokens"] for s in shards["val"])},
        }
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=2)
            f.write("\n")
        commit_out(tmp, args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    nshards = len(shards["train"]) + len(shards["val"])
    print(f"tokenize: {ndocs} documents, {ntokens} tokens (llmc version {version}, vocab {vocab}) "
          f"in {nshards} shard{'s' if nshards != 1 else ''} in {args.out}; "
          f"{seconds:.2f} s, {ntokens / max(seconds, 1e-9):.0f} tokens/s with "
          f"{args.workers} worker{'s' if args.workers != 1 else ''}")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="meshdata tokenize",
        description="Tokenize text or JSONL into llm.c token shards with a Hugging Face "
                    "tokenizer.json.")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="files, directories or globs: .txt, .txt.gz (a document per file, or "
                        "per line with --lines), .jsonl, .jsonl.gz (a document per line)")
    p.add_argument("--tokenizer", required=True, metavar="FILE",
                   help="a Hugging Face tokenizer.json")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the output directory: absent or empty (or --overwrite)")
    p.add_argument("--prefix", default="tokens",
                   help="shard names: DIR/PREFIX_000000.bin ... (default tokens)")
    p.add_argument("--field", default="text", help="the JSONL field holding the text (default text)")
    p.add_argument("--lines", action="store_true",
                   help=".txt: one document per non-blank line (default: one per file)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, metavar="N",
                   help="at most N tokens per shard (default 100000000)")
    p.add_argument("--eot-token", metavar="NAME",
                   help="the token before every document (default: the first of "
                        + ", ".join(EOT_NAMES) + " in the vocabulary)")
    p.add_argument("--vocab-limit", type=int, metavar="N",
                   help="refuse a tokenizer whose vocabulary exceeds N (model.vocab_size)")
    p.add_argument("--val-docs", type=int, default=0, metavar="N",
                   help="the first N documents go to val/PREFIX_*.bin (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty DIR")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        print(f"meshdata: error: tokenize needs the Python package tokenizers: "
              f"{sys.executable} -m pip install tokenizers", file=sys.stderr)
        return EXIT_BADINPUT
    try:
        run(args)
    except Refusal as r:
        print(f"meshdata: error: tokenize: {r}", file=sys.stderr)
        return EXIT_BADINPUT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
