#!/usr/bin/env python3
"""The README's shell blocks as one bash script that runs them, in order, in
one shell (an `export` carries on), from the root of a source tree.

  readme_commands.py README.md > run.sh

Every command of every ```sh block is classified, first rule first:

  skip     what cannot or need not run in a test, with the reason (the build,
           the suite itself, benchmarks that take minutes to time, LEONARDO's
           module system); a stand-in makes what later commands read;
  render   `meshslurm.py render`: as written, then with --stdout for every
           system profile (a LEONARDO command must render on any);
  leonardo `sbatch JOB` or `bash .../submit.sh` of a LEONARDO job or campaign
           (decided when it runs, from the rendered file): rendered, not run;
           a train job's outputs are stood in by a 2-step tiny run;
  tiny     `mpirun -n N build/bin/meshtrain ...` that trains: checked as
           written (`meshtrain --check ... --ranks N`), then run with a tiny
           model for 3 steps (same options, overrides appended); a campaign
           --submit: checked as written (--dry-run: meshtrain --check of every
           point), then submitted with a tiny model for 3 steps (--set); a
           campaign --emulate: as written, its points up to 8 ranks, 1 step;
  run      everything else: as written (a `cat` of a report "when the report
           job is done" first waits for the queue to empty).

A command that fails is reported with its output and the script goes on; it
exits 1 when one failed. Where the local cluster cannot start (exit 77: not
root, no Slurm), the blocks that need it are skipped and the script exits 77
after everything else ran."""
import re
import shlex
import sys

SKIP = [
    (r"^bash apps/scripts/run-default\.sh", "the default job (minutes on 2 cores; "
     "tests/slurm/default_report.sh plays its shape in small)",
     "[ -f inputs/data/corpus.txt ] || build/bin/meshdata corpus inputs/data/corpus.txt"),
    (r"^bash tests/run\.sh", "the test suite itself", None),
    (r"^(\w+=\S* )*bash apps/scripts/bench-", "a benchmark script (timings over minutes)", None),
    (r"^bash apps/scripts/fuzz-", "a fuzzing run (libFuzzer for minutes; not part of the suite)", None),
    (r"meshbench (gemm --model small --threads|attention --threads|ckpt|collectives)", "a benchmark (timings)", None),
    (r"meshbench allreduce --min-bytes 1K --max-bytes 256M", "a benchmark (allreduces up to 256 MiB)", None),
    (r"^source slurm/leonardo/env\.sh", "LEONARDO's module system (slurm.render_leonardo runs "
     "it against a stand-in module command)", None),
    (r"^bash apps/scripts/setup\.sh", "the build, done before the tests", None),
]
TINY = ["--set", "model.preset=tiny", "--set", "train.steps=3", "--set", "train.eval_every=0",
        "--set", "train.threads=1"]


def blocks(path):
    """(line number, [command, ...]) of each ```sh block"""
    out, cur, start, line_no = [], None, 0, 0
    for line_no, line in enumerate(open(path), 1):
        s = line.strip()
        if s.startswith("```"):
            if cur is None and s[3:].strip() == "sh":
                cur, start = [], line_no
            elif cur is not None:
                out.append((start, cur))
                cur = None
            continue
        if cur is not None:
            cur.append((line_no, line.rstrip("\n")))
    cmds = []
    for start, lines in out:
        block, pending, first = [], "", 0
        for n, text in lines:
            t = text.strip()
            if not pending and (not t or t.startswith("#")):
                continue
            if not pending:
                first = n
            if t.endswith("\\"):
                pending += t[:-1].rstrip() + " "
                continue
            block.append((first, pending + t))
            pending = ""
        cmds.append((start, block))
    return cmds


def strip_comment(cmd):
    """the command without a trailing # comment (outside quotes)"""
    lex = shlex.shlex(cmd, posix=True, punctuation_chars=False)
    lex.whitespace_split, lex.commenters = True, "#"
    try:
        words = list(lex)
    except ValueError:
        return cmd, []
    i = cmd.find(" #")
    return (cmd[:i].rstrip() if i >= 0 else cmd), words


def q(s):
    return shlex.quote(s)


def emit(n, cmd, kind, body, cluster_block):
    print("begin %d %s %s" % (n, q(kind), q(cmd)))
    if cluster_block:
        print("if [ \"$NOSLURM\" = 1 ]; then skip_noslurm %d %s; else" % (n, q(cmd)))
    print(body)
    if cluster_block:
        print("fi")


def main(readme):
    print("# generated from %s by tests/slurm/readme_commands.py" % readme)
    for start, block in blocks(readme):
        cluster_block = any("cluster start" in c or "sbatch --wait" in c for _, c in block)
        print("\n# ---- the block at README line %d" % start)
        for n, raw in block:
            cmd, words = strip_comment(raw)
            rule = next((r for r in SKIP if re.search(r[0], cmd)), None)
            if rule:
                body = "skip %d %s" % (n, q(rule[1]))
                if rule[2]:
                    body += "\nstandin %d %s" % (n, q(rule[2]))
                emit(n, cmd, "skip", body, False)
                continue
            if re.match(r"^sbatch ", cmd) and "--wait" not in cmd or \
                    re.match(r"^bash \S+/submit\.sh$", cmd):
                target = words[-1]
                emit(n, cmd, "leonardo?", "maybe_leonardo %d %s %s" % (n, q(cmd), target), cluster_block
                     and "sbatch" in cmd)
                continue
            if re.search(r"meshslurm\.py render ", cmd):
                emit(n, cmd, "render", "run %d %s\nrender_everywhere %d %s" % (n, q(cmd), n, q(cmd)),
                     cluster_block)
                continue
            m = re.match(r"^mpirun -n (\d+) (build/bin/meshtrain) (.*)$", cmd)
            if m and not re.search(r"--(check|plan|help|print-schedule)\b", cmd):
                check = "%s --check %s --ranks %s" % (m.group(2), m.group(3), m.group(1))
                emit(n, cmd, "tiny", "run %d %s\nrun %d %s" % (
                    n, q(check), n, q(cmd + " " + " ".join(TINY))), cluster_block)
                continue
            if re.search(r"meshslurm\.py campaign .*--submit", cmd):
                dry = cmd.replace("--submit", "--dry-run")
                emit(n, cmd, "tiny", "run %d %s\nrun %d %s" % (
                    n, q(dry), n, q(cmd + " " + " ".join(TINY[:4]))), cluster_block)
                continue
            if re.search(r"meshslurm\.py campaign .*--emulate", cmd):
                # as written, but the points up to 8 ranks, 1 step each
                emit(n, cmd, "tiny", "run %d %s" % (n, q(cmd + " --emulate-max-ranks 8 --emulate-steps 1")),
                     cluster_block)
                continue
            body = "run %d %s" % (n, q(cmd))
            if "when the report job is done" in raw:
                body = "wait_queue %d\n" % n + body
            emit(n, cmd, "run", body, cluster_block)
    print("\nfinish")


if __name__ == "__main__":
    main(sys.argv[1])
