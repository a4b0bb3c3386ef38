"""walk.py BINARY EDGES CMAKELISTS [--roots=f,g] [-v]: the route of a step
through the modules, from the call triples the tracer recorded.

Over the functions of lib/ (a function's module is the folder of its source
file; apps are left out), it counts: the modules and files entered;
hand-offs, the distinct caller -> callee pairs whose modules differ; upward
ones, where the callee's module is not among the caller module's
dependencies (the target_link_libraries of CMAKELISTS, transitively);
callbacks, hand-offs made through a function pointer (the call instruction
before the call site is indirect), the op table's calls into kernels
excepted. --roots: only what the calls into these functions reach (the step
proper), their caller's module included."""
import collections
import re
import subprocess
import sys

binary, edges_path, cmake = sys.argv[1:4]
roots = None
for arg in sys.argv[4:]:
    if arg.startswith("--roots="):
        roots = set(arg[len("--roots="):].split(","))

deps = {}
for m in re.finditer(r"target_link_libraries\(mt_(\w+) PUBLIC ([^)]*)\)", open(cmake).read()):
    deps.setdefault(m.group(1), set()).update(re.findall(r"\bmt_(\w+)", m.group(2)))


def closure(m):
    seen, todo = set(), [m]
    while todo:
        for d in deps.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


raw = [tuple(int(x, 16) for x in l.split()) for l in open(edges_path)]
insns = []
for line in subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary], capture_output=True,
                           text=True).stdout.split("\n"):
    m = re.match(r"\s*([0-9a-f]+):\t(.*)", line)
    if m:
        insns.append((int(m.group(1), 16), m.group(2).strip()))
after_indirect = set(insns[i + 1][0] for i in range(len(insns) - 1)
                     if insns[i][1].startswith("call") and "*" in insns[i][1])
indirect = set((a, b) for a, b, c in raw if c in after_indirect)
edges = set((a, b) for a, b, c in raw)
addrs = sorted(set(x for e in edges for x in e))
out = subprocess.run(["addr2line", "-f", "-e", binary] + ["%x" % a for a in addrs],
                     capture_output=True, text=True).stdout.split("\n")
info = {}
for i, a in enumerate(addrs):
    path = out[2 * i + 1].split(":")[0]
    k = path.find("/lib/")
    rel = path[k + 1:] if k >= 0 else None
    info[a] = (out[2 * i], rel, rel.split("/")[1] if rel else None)

if roots:
    adj = collections.defaultdict(set)
    for a, b in edges:
        adj[a].add(b)
    start = [a for a in addrs if info[a][0] in roots]
    seen, todo = set(start), list(start)
    while todo:
        for y in adj[todo.pop()]:
            if y not in seen:
                seen.add(y)
                todo.append(y)
    edges = set((a, b) for a, b in edges if a in seen or b in start)

mods, files, hand, up, cb = set(), set(), set(), set(), set()
for a, b in edges:
    fa, ra, ma = info[a]
    fb, rb, mb = info[b]
    if mb is None:
        continue
    mods.add(mb)
    files.add(rb)
    if ma is not None:
        mods.add(ma)
        files.add(ra)
    if ma is None or ma == mb:
        continue
    hand.add((fa, fb, ma, mb))
    if mb not in closure(ma):
        up.add((fa, fb, ma, mb))
    if (a, b) in indirect and mb != "kernels":
        cb.add((fa, fb, ma, mb))
print("modules entered: %d (%s; without core: %d)" % (len(mods), " ".join(sorted(mods)),
                                                      len(mods - {"core"})))
print("files entered: %d" % len(files))
print("hand-offs: %d, upward: %d, callbacks: %d" % (len(hand), len(up), len(cb)))
pairs = collections.Counter((h[2], h[3]) for h in hand)
print("module edges: " + ", ".join("%s->%s %d%s" % (a, b, n, " UP" if b not in closure(a) else "")
                                   for (a, b), n in sorted(pairs.items())))
if "-v" in sys.argv:
    for h in sorted(up):
        print("  upward   %s (%s) -> %s (%s)" % (h[0], h[2], h[1], h[3]))
    for h in sorted(cb):
        print("  callback %s (%s) -> %s (%s)" % (h[0], h[2], h[1], h[3]))
