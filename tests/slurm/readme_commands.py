#!/usr/bin/env python3
"""The shell blocks of the README and of docs/*.md as one bash script that
runs them, file after file and in order, in one shell (an `export` carries
on), from the root of a source tree.

  readme_commands.py README.md docs/*.md > run.sh

Every command of every ```sh block is classified, first rule first:

  not run  a block whose fence is preceded by the line
           `<!-- not run: REASON -->` (REASON: what it needs that CI lacks,
           a GPU or a real cluster); each of its commands is listed as
           skipped with that reason;
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
           model for 3 steps (6 when it resumes a checkpoint, so that it
           trains past it; same options, overrides appended); a campaign
           --submit: checked as written (--dry-run: meshtrain --check of every
           point), then submitted with a tiny model for 3 steps (--set); a
           campaign --emulate: as written, its points up to 8 ranks, 1 step;
  run      everything else: as written (a `cat` of a report "when the report
           job is done" first waits for the queue to empty).

A shell block fenced as anything but ```sh (```bash, ```shell, ```console)
is an error: the test would not run it. A command that fails is reported
with its output and the script goes on; it exits 1 when one failed. Where
the local cluster cannot start (exit 77: not root, no Slurm), the blocks
that need it are skipped and the script exits 77 after everything else
ran."""
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
    (r"^cmake (-S \. -B|--build) build-emu", "the build of the CUDA emulator (minutes; tests/run.sh "
     "builds it and runs its tests)", None),
    (r"^\(cd build-emu && ctest", "the gpu-emu tests (part of the suite: tests/run.sh runs them)", None),
]
TINY = ["--set", "model.preset=tiny", "--set", "train.steps=3", "--set", "train.eval_every=0",
        "--set", "train.threads=1"]


SHELLISH = {"bash", "shell", "console", "shell-session", "zsh"}
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->$")


def blocks(path):
    """(line number, reason or None, [(line, command), ...]) of each ```sh
    block; reason: why a block marked `<!-- not run: ... -->` is not run"""
    out, cur, start, line_no, prev, reason = [], None, 0, 0, "", None
    for line_no, line in enumerate(open(path), 1):
        s = line.strip()
        if s.startswith("```"):
            lang = s[3:].strip().split(" ")[0] if s[3:].strip() else ""
            if cur is None and lang == "sh":
                m = NOT_RUN.match(prev)
                if m and not m.group(1):
                    sys.exit("%s line %d: a `not run` mark needs its reason (what CI lacks)"
                             % (path, line_no - 1))
                cur, start, reason = [], line_no, m.group(1) if m else None
            elif cur is None and lang in SHELLISH:
                sys.exit("%s line %d: a ```%s block; fence commands as ```sh, which the docs test "
                         "runs" % (path, line_no, lang))
            elif cur is None:
                cur, start, reason = "other", line_no, None
            else:
                if cur != "other":
                    out.append((start, reason, cur))
                cur = None
            prev = s
            continue
        if cur is not None and cur != "other":
            cur.append((line_no, line.rstrip("\n")))
        if s:
            prev = s
    cmds = []
    for start, reason, lines in out:
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
        cmds.append((start, reason, block))
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


def emit(where, cmd, kind, body, cluster_block):
    print("begin %s %s %s" % (q(where), q(kind), q(cmd)))
    if cluster_block:
        print("if [ \"$NOSLURM\" = 1 ]; then skip_noslurm %s %s; else" % (q(where), q(cmd)))
    print(body)
    if cluster_block:
        print("fi")


def tiny(cmd):
    """the overrides that make a training command a tiny run: 3 steps, or 6
    when it resumes a checkpoint (an earlier tiny run's, of 3 steps)"""
    steps = "6" if "train.resume=" in cmd else "3"
    return " ".join(TINY).replace("train.steps=3", "train.steps=" + steps)


def commands(doc):
    for start, reason, block in blocks(doc):
        cluster_block = any("cluster start" in c or "sbatch --wait" in c for _, c in block)
        print("\n# ---- the block at %s line %d" % (doc, start))
        for n, raw in block:
            cmd, words = strip_comment(raw)
            where = "%s:%d" % (doc, n)
            if reason:
                emit(where, cmd, "not run", "skip %s %s" % (q(where), q(reason)), False)
                continue
            rule = next((r for r in SKIP if re.search(r[0], cmd)), None)
            if rule:
                body = "skip %s %s" % (q(where), q(rule[1]))
                if rule[2]:
                    body += "\nstandin %s %s" % (q(where), q(rule[2]))
                emit(where, cmd, "skip", body, False)
                continue
            if re.match(r"^sbatch ", cmd) and "--wait" not in cmd or \
                    re.match(r"^bash \S+/submit\.sh$", cmd):
                target = words[-1]
                emit(where, cmd, "leonardo?", "maybe_leonardo %s %s %s" % (q(where), q(cmd), target),
                     cluster_block and "sbatch" in cmd)
                continue
            if re.search(r"meshslurm\.py render ", cmd):
                emit(where, cmd, "render", "run %s %s\nrender_everywhere %s %s" % (
                    q(where), q(cmd), q(where), q(cmd)), cluster_block)
                continue
            m = re.match(r"^mpirun -n (\d+) (build/bin/meshtrain) (.*)$", cmd)
            if m and not re.search(r"--(check|plan|help|print-schedule)\b", cmd):
                check = "%s --check %s --ranks %s" % (m.group(2), m.group(3), m.group(1))
                emit(where, cmd, "tiny", "run %s %s\nrun %s %s" % (
                    q(where), q(check), q(where), q(cmd + " " + tiny(cmd))), cluster_block)
                continue
            if re.search(r"meshslurm\.py campaign .*--submit", cmd):
                dry = cmd.replace("--submit", "--dry-run")
                emit(where, cmd, "tiny", "run %s %s\nrun %s %s" % (
                    q(where), q(dry), q(where), q(cmd + " " + " ".join(TINY[:4]))), cluster_block)
                continue
            if re.search(r"meshslurm\.py campaign .*--emulate", cmd):
                # as written, but the points up to 8 ranks, 1 step each
                emit(where, cmd, "tiny", "run %s %s" % (
                    q(where), q(cmd + " --emulate-max-ranks 8 --emulate-steps 1")), cluster_block)
                continue
            body = "run %s %s" % (q(where), q(cmd))
            if "when the report job is done" in raw:
                body = "wait_queue %s\n" % q(where) + body
            emit(where, cmd, "run", body, cluster_block)


def main(docs):
    print("# generated from %s by tests/slurm/readme_commands.py" % " ".join(docs))
    for doc in docs:
        commands(doc)
    print("\nfinish")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
