#!/usr/bin/env python3
"""Compare the loss curves (and optionally final parameters) of meshtrain runs.

compare_runs.py REF RUN [RUN ...] [--rtol R] [--bitwise] [--param-atol A] [--steps N]

Exits non-zero, naming the run, step and values, when any run differs from
REF by more than the tolerance at any step. Losses are compared as numbers:
--bitwise wants the same float64 bits, and a NaN or null loss (cJSON writes
NaN and infinities as null) equals nothing, itself included.
"""
import argparse
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mt_numbers import records, rel_err, same_bits, value, worst  # noqa: E402


def losses(run):
    """(step, loss) per record; a null loss (cJSON's NaN or infinity) is NaN,
    which fails every comparison below, bitwise ones included"""
    return [(rec["step"], value(rec.get("loss"))) for rec in records(run)]


def params(run):
    with open(os.path.join(run, "params.f32"), "rb") as f:
        data = f.read()
    return struct.unpack("<%df" % (len(data) // 4), data)


def main(argv=None, out=None):
    """the command with arguments argv; prints to out; returns the exit status"""
    out = out or sys.stdout
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--bitwise", action="store_true")
    ap.add_argument("--param-atol", type=float, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--subset", action="store_true",
                    help="RUN may hold only some of REF's steps (a resumed run); compare those")
    a = ap.parse_args(argv)
    ref = losses(a.ref)
    if a.steps is not None and len(ref) != a.steps:
        print("FAIL: %s has %d steps, expected %d" % (a.ref, len(ref), a.steps), file=out)
        return 1
    bad = 0
    for run in a.runs:
        cur = losses(run)
        if not cur:
            print("FAIL: %s has no steps" % run, file=out)
            bad += 1
            continue
        if a.subset:
            by_step = {s: (s, l) for s, l in ref}
            if not cur or any(s not in by_step for s, _ in cur):
                print("FAIL: %s steps %s are not a non-empty subset of %s's"
                      % (run, [s for s, _ in cur], a.ref), file=out)
                bad += 1
                continue
            pairs = [(by_step[s], (s, l)) for s, l in cur]
        elif len(cur) != len(ref):
            print("FAIL: %s has %d steps, %s has %d" % (run, len(cur), a.ref, len(ref)), file=out)
            bad += 1
            continue
        else:
            pairs = list(zip(ref, cur))
        worst_rel, failed = 0.0, False
        for (s, l0), (s1, l1) in pairs:
            rel = rel_err(l1, l0)
            worst_rel = worst(worst_rel, rel)
            ok = same_bits(l1, l0) if a.bitwise else rel <= a.rtol  # NaN fails both
            if s1 != s or not ok:
                print("FAIL: %s step %d loss %r vs %r at step %d (rel %.3g)"
                      % (run, s1, l1, l0, s, rel), file=out)
                bad += 1
                failed = True
                break
        if failed:
            continue  # no "ok" line for a run that failed
        msg = "%s: %d steps, max relative loss difference %.3g" % (run, len(cur), worst_rel)
        if a.param_atol is not None:
            p0, p1 = params(a.ref), params(run)
            if len(p0) != len(p1):
                print("FAIL: %s has %d parameters, %s has %d" % (run, len(p1), a.ref, len(p0)),
                      file=out)
                bad += 1
                continue
            diffs = [abs(x - y) for x, y in zip(p0, p1)]
            d = float("nan") if any(math.isnan(x) for x in diffs) else max(diffs, default=0.0)
            msg += ", max parameter difference %.3g (bound %.3g)" % (d, a.param_atol)
            if not d <= a.param_atol:
                print("FAIL: " + msg, file=out)
                bad += 1
                continue
        print("ok   " + msg, file=out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
