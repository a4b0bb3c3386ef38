#!/usr/bin/env python3
"""No MPI return code in lib/ (or apps/) is dropped.

Every MPI_* call in the C and CUDA sources of lib/ and apps/ (which run with
MPI_ERRORS_RETURN on MPI_COMM_WORLD, mt_mpi_init) must hand its return code to
something: MT_MPI_CHECK / MT_MPI_TRY, an assignment, a test, a return, an
argument. A call that stands alone as a statement (`MPI_Bcast(...);`, also
after `if (...)`, `else`, or a `(void)` cast) drops it: with
MPI_ERRORS_RETURN on every communicator a failure there goes unnoticed.
Not codes: MPI_Wtime and MPI_Wtick return seconds; MPI_Abort does not
return.

The scan works on the text with comments and string literals blanked, so a
call that spans lines, or sits in a macro body, is seen as one call. A
function-like macro whose body is one MPI call returns its code: its
invocations are checked like the call. Not seen: a code dropped by a
ternary or comma expression that is a statement of its own (none in lib/).

An allow-list (mpi_unchecked_allow.txt, empty: none is allowed) may name a
site, one `path: function: MPI_Call` a line (a function with two such calls
listed twice). The check fails on a dropped code that is not listed, and on
a listed entry that no longer matches a site: the list can only shrink.

  mpi_checked.py [--root DIR] [--allow FILE]   check DIR/lib and DIR/apps (default: the
                                               repository this script is in)
  mpi_checked.py --self-test                   show that planted drops are caught
"""
import argparse
import collections
import os
import re
import sys
import tempfile

NOT_CODES = {"MPI_Wtime", "MPI_Wtick", "MPI_Abort"}
SOURCES = (".c", ".h", ".cu", ".cuh")
CALL = re.compile(r"\bMPI_[A-Z][a-z][A-Za-z0-9_]*(?=\s*\()")
CONTROL = {"if", "for", "while", "switch"}


def blank_comments_and_strings(src):
    """src with comments and the insides of literals replaced by spaces
    (newlines kept, so offsets and line numbers stay)."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
            continue
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def skip_space_back(s, p):
    while p >= 0 and (s[p].isspace() or (s[p] == "\\" and p + 1 < len(s) and s[p + 1] == "\n")):
        p -= 1
    return p


def matching(s, p):
    """s[p] is '(' or ')': the index of its partner (searching forward from
    '(', back from ')'), or -1."""
    step, opener = (1, "(") if s[p] == "(" else (-1, ")")
    closer = ")" if opener == "(" else "("
    depth = 0
    for k in range(p, len(s) if step > 0 else -1, step):
        if s[k] == opener:
            depth += 1
        elif s[k] == closer:
            depth -= 1
            if depth == 0:
                return k
    return -1


def word_before(s, p):
    q = skip_space_back(s, p)
    end = q + 1
    while q >= 0 and (s[q].isalnum() or s[q] == "_"):
        q -= 1
    return s[q + 1:end]


def at_statement_start(s, start):
    """Whether the expression starting at s[start] begins a statement: what
    precedes it is ; { } a label's or case's ':' , else/do, or the ')' of a
    control header; a (void) cast in front counts as the statement's start."""
    p = skip_space_back(s, start - 1)
    if p < 0 or s[p] in ";{}":
        return True
    if s[p] == ":":  # a label or case, not the ':' of a ternary
        stmt_start = max(s.rfind(c, 0, p) for c in ";{}")
        return "?" not in s[stmt_start + 1:p]
    if s[p] == ")":
        o = matching(s, p)
        inside = s[o + 1:p].strip()
        if inside == "void":
            return at_statement_start(s, o)
        if word_before(s, o - 1) in CONTROL:
            return True
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_ ]*\**", inside):  # another cast
            return at_statement_start(s, o)
        return False
    if s[p].isalnum() or s[p] == "_":
        return word_before(s, p) in ("else", "do")
    return False


def line_of(s, p):
    return s.count("\n", 0, p) + 1


def function_of(s, p):
    """The name of the function (or macro) whose body holds s[p]."""
    line_start = s.rfind("\n", 0, p) + 1
    # a macro body: the #define this line continues
    k = line_start
    while True:
        m = re.match(r"\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)", s[k:])
        if m:
            return m.group(1)
        prev_end = k - 1
        if prev_end <= 0:
            break
        prev_start = s.rfind("\n", 0, prev_end) + 1
        if not s[prev_start:prev_end].rstrip().endswith("\\"):
            break
        k = prev_start
    depth, top = 0, -1
    for k in range(p):
        c = s[k]
        if c == "{":
            if depth == 0:
                top = k
            depth += 1
        elif c == "}":
            depth -= 1
    if top < 0:
        return "?"
    q = skip_space_back(s, top - 1)
    if s[q] != ")":
        return "?"
    return word_before(s, matching(s, q) - 1) or "?"


DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_][A-Za-z0-9_]*)\(([^)]*)\)((?:[^\n]*\\\n)*[^\n]*)",
                    re.M)


def code_macros(s):
    """Function-like macros whose body is one MPI call (in parentheses or
    not): an invocation returns that call's code, so it is checked as one."""
    names = set()
    for m in DEFINE.finditer(s):
        body = m.group(3).replace("\\\n", " ").strip()
        while body.startswith("(") and matching(body, 0) == len(body) - 1:
            body = body[1:-1].strip()
        c = CALL.match(body)
        if c and c.group(0) not in NOT_CODES:
            close = matching(body, body.index("(", c.end()))
            if close == len(body) - 1:
                names.add(m.group(1))
    return names


def source_files(root):
    for top in ("lib", "apps"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SOURCES):
                    yield os.path.join(dirpath, f)


def read_blanked(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return blank_comments_and_strings(f.read())


def dropped_calls(s, rel, macros):
    """(rel, line, function, call) for each MPI call (or invocation of a
    macro in macros) in the blanked source s that drops its code."""
    found = []
    pattern = CALL
    if macros:
        pattern = re.compile(r"\b(?:MPI_[A-Z][a-z][A-Za-z0-9_]*|%s)(?=\s*\()"
                             % "|".join(sorted(macros)))
    for m in pattern.finditer(s):
        name = m.group(0)
        if name in NOT_CODES or word_before(s, m.start() - 1) == "define":
            continue
        open_paren = s.index("(", m.end())
        close = matching(s, open_paren)
        if close < 0:
            continue
        after = s[close + 1:].lstrip()
        if not after.startswith(";"):
            continue  # compared, combined or passed on: the code is used
        if not at_statement_start(s, m.start()):
            continue  # assigned, returned, an argument (MT_MPI_CHECK(...)), tested
        found.append((rel, line_of(s, m.start()), function_of(s, m.start()), name))
    return found


def scan(root):
    blanked = {p: read_blanked(p) for p in source_files(root)}
    macros = set()
    for s in blanked.values():
        macros |= code_macros(s)
    sites = []
    for path, s in blanked.items():
        sites += dropped_calls(s, os.path.relpath(path, root), macros)
    return sites


def read_allow(path):
    entries = collections.Counter()
    if not path or not os.path.exists(path):
        return entries
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = [x.strip() for x in line.split(":")]
            if len(parts) != 3 or not all(parts):
                sys.exit("%s:%d: expected 'path: function: MPI_Call', got '%s'" % (path, n, line))
            entries[tuple(parts)] += 1
    return entries


def check(root, allow_path):
    sites = scan(root)
    allowed = read_allow(allow_path)
    by_key = collections.defaultdict(list)
    for rel, line, func, call in sites:
        by_key[(rel, func, call)].append(line)
    bad = 0
    unlisted = []
    for key in sorted(by_key):
        lines = by_key[key]
        extra = len(lines) - allowed.get(key, 0)
        if extra > 0:  # which of a function's sites is the new one is unknown: name them all
            unlisted += [(key[0], line, key[1], key[2]) for line in lines]
            bad += extra
    for rel, line, func, call in sorted(unlisted):
        print("%s:%d: %s drops the return code of %s (wrap it in MT_MPI_TRY or MT_MPI_CHECK)"
              % (rel, line, func, call))
    for key in sorted(allowed):
        stale = allowed[key] - len(by_key.get(key, []))
        if stale > 0:
            print("%s: %s: %s: on the allow-list %d time(s) more than there are unchecked "
                  "sites: remove it from %s" % (key[0], key[1], key[2], stale,
                                                os.path.relpath(allow_path, root)))
            bad += 1
    listed = sum(allowed.values())
    per_dir = collections.Counter(os.path.dirname(s[0]) for s in sites)
    print("mpi_checked: %d MPI calls that drop their return code (%d on the allow-list)"
          % (len(sites), listed))
    for d in sorted(per_dir):
        print("  %-24s %d" % (d, per_dir[d]))
    if bad:
        print("mpi_checked: FAIL: %d problem(s)" % bad)
        return 1
    print("mpi_checked: PASS")
    return 0


PLANTED = r'''
#include <mpi.h>
#define BCAST_ALL(buf) MPI_Bcast((buf), 1, MPI_INT, 0, \
                                 MPI_COMM_WORLD)
#define CHECKED(call) MT_MPI_CHECK(call)
static int fine(int *v, mt_err *e) {
  int rc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS) return -1;
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD,
                             v));
  MT_MPI_TRY(e, MPI_Bcast(v, 1, MPI_INT, 0, MPI_COMM_WORLD));
  CHECKED(MPI_Barrier(MPI_COMM_WORLD));
  double t = MPI_Wtime(); /* MPI_Barrier(MPI_COMM_WORLD); in a comment */
  const char *s = "MPI_Barrier(MPI_COMM_WORLD);";
  (void)t; (void)s;
  if (BCAST_ALL(v) != MPI_SUCCESS) return -1;
  return rc == MPI_SUCCESS ? (int)MPI_Barrier(MPI_COMM_WORLD) : -1;
}
static void planted(int *v, int n) {
  MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT, MPI_SUM,
                MPI_COMM_WORLD);
  if (n > 1) MPI_Barrier(MPI_COMM_WORLD);
  else
    MPI_Bcast(v, 1, MPI_INT, 0, MPI_COMM_WORLD);
  (void)MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int i = 0; i < n; i++) MPI_Barrier(MPI_COMM_WORLD);
  switch (n) {
  case 1: MPI_Barrier(MPI_COMM_WORLD);
  }
  BCAST_ALL(v);
}
'''
# what the scan must find in PLANTED: (line, function, call)
PLANTED_EXPECT = [
    (20, "planted", "MPI_Allreduce"),
    (22, "planted", "MPI_Barrier"),
    (24, "planted", "MPI_Bcast"),
    (25, "planted", "MPI_Comm_size"),
    (26, "planted", "MPI_Barrier"),
    (28, "planted", "MPI_Barrier"),
    (30, "planted", "BCAST_ALL"),
]


def self_test():
    ok = True
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "lib", "x"))
        src = os.path.join(root, "lib", "x", "planted.c")
        with open(src, "w") as f:
            f.write(PLANTED)
        got = [(l, fn, c) for _, l, fn, c in scan(root)]
        if got != PLANTED_EXPECT:
            print("self-test: the scan found\n  %s\nexpected\n  %s" % (got, PLANTED_EXPECT))
            ok = False
        allow = os.path.join(root, "allow.txt")
        with open(allow, "w") as f:
            f.write("# planted\n")
            for _, fn, c in PLANTED_EXPECT:
                f.write("lib/x/planted.c: %s: %s\n" % (fn, c))
        if check(root, allow) != 0:
            print("self-test: every planted site listed, yet the check failed")
            ok = False
        with open(allow, "a") as f:  # a stale entry must fail
            f.write("lib/x/planted.c: fine: MPI_Gather\n")
        if check(root, allow) == 0:
            print("self-test: a stale allow-list entry passed")
            ok = False
        with open(allow, "w") as f:  # one planted site not listed must fail
            for _, fn, c in PLANTED_EXPECT[:-1]:
                f.write("lib/x/planted.c: %s: %s\n" % (fn, c))
        if check(root, allow) == 0:
            print("self-test: an unlisted dropped code passed")
            ok = False
    print("self-test: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(here)))
    ap.add_argument("--allow", default=os.path.join(here, "mpi_unchecked_allow.txt"))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    return check(a.root, a.allow)


if __name__ == "__main__":
    sys.exit(main())
