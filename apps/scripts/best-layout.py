#!/usr/bin/env python3
"""The fastest layout meshplan predicts for a model on N ranks, as --set keys.

  python3 apps/scripts/best-layout.py --hw PROFILE --ranks N [--zero Z] [--grid]
         [--json OUT.json] -- MESHPLAN_SETS...

Without --grid: meshplan --json prices every layout that may fit and the
fastest that fits (at ZeRO level Z if given) is taken. With --grid (for
MoE models, whose full search meshplan does not finish in useful time on a
small machine: ep multiplies the layouts): meshplan --only prices each
layout of a grid (tp 1, 2, 4; pp 1, 2, 4; ep every power of two dividing
the experts and the ranks; ZeRO 1 and 3; micro-batch 1 and 2;
recomputation off and on; sp with tp; 1F1B, interleaved 2 with pp) and the
fastest that fits is taken. Prints the keys on stdout; --json writes the
chosen layout's meshplan record."""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = {"tp": "parallel.tp", "pp": "parallel.pp", "cp": "parallel.cp", "dp": "parallel.dp",
        "ep": "parallel.ep", "zero": "parallel.zero", "micro_batch": "train.micro_batch",
        "sp": "parallel.sp", "recompute": "train.recompute", "schedule": "parallel.schedule",
        "virtual_stages": "parallel.virtual_stages", "pp_first_layers": "parallel.pp_first_layers",
        "pp_last_layers": "parallel.pp_last_layers", "pp_token_slices": "parallel.pp_token_slices"}


def as_keys(best):
    def val(f):
        return {0: "false", 1: "true"}[best[f]] if f in ("sp", "recompute") else best[f]
    return " ".join("--set %s=%s" % (k, val(f)) for f, k in KEYS.items()
                    if f in best and not (f.startswith("pp_") and best[f] == 0))


def meshplan(args, sets, extra):
    cmd = [os.path.join(SRC, "build/bin/meshplan"), os.path.join(SRC, "inputs/default.ini"),
           "--hw", args.hw] + extra
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd, capture_output=True, text=True)


def full_search(args, sets):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        p = meshplan(args, sets, ["--ranks", str(args.ranks), "--top", "1", "--json", f.name])
        if p.returncode:
            sys.exit("meshplan: " + p.stderr.strip())
        return json.load(open(f.name))


def grid(args, sets, experts, layers):
    rows = []
    for tp, pp in itertools.product((1, 2, 4), (1, 2, 4)):
        if args.ranks % (tp * pp) or layers % pp:
            continue
        dp = args.ranks // (tp * pp)
        eps = [e for e in (1, 2, 4, 8, 16, 32, 64) if experts % e == 0 and (tp * dp) % e == 0]
        scheds = [("1f1b", 1)] + ([("interleaved", 2)] if pp > 1 else [])
        for ep, zero, mb, rc, sp, (sched, v) in itertools.product(
                eps, (1, 3), (1, 2), (0, 1), (0, 1) if tp > 1 else (0,), scheds):
            lay = ["parallel.tp=%d" % tp, "parallel.pp=%d" % pp, "parallel.dp=%d" % dp,
                   "parallel.ep=%d" % ep, "parallel.zero=%d" % zero, "train.micro_batch=%d" % mb,
                   "train.recompute=%s" % ("true" if rc else "false"),
                   "parallel.sp=%s" % ("true" if sp else "false"),
                   "parallel.schedule=" + sched, "parallel.virtual_stages=%d" % v]
            p = meshplan(args, sets + lay, ["--only"])
            if p.returncode == 0 and p.stdout.strip():
                rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hw", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--zero", type=int)
    ap.add_argument("--grid", action="store_true")
    ap.add_argument("--experts", type=int, default=1)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("sets", nargs="*")
    args = ap.parse_args()
    rows = grid(args, args.sets, args.experts, args.layers) if args.grid \
        else full_search(args, args.sets)
    fit = [r for r in rows if r["fits"] and (args.zero is None or r["zero"] == args.zero)]
    if not fit:
        sys.exit("no layout fits")
    best = min(fit, key=lambda r: r["step_s"])
    best["layouts_priced"] = len(rows)
    if args.json:
        json.dump(best, open(args.json, "w"))
    print(as_keys(best))


if __name__ == "__main__":
    main()
