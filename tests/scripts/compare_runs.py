#!/usr/bin/env python3
"""Compare the loss curves (and optionally final parameters) of meshtrain runs.

compare_runs.py REF RUN [RUN ...] [--rtol R] [--bitwise] [--param-atol A] [--steps N]

Exits non-zero, naming the run, step and values, when any run differs from
REF by more than the tolerance at any step.
"""
import argparse
import json
import math
import os
import struct
import sys


def worst_of(a, b):
    """The larger error; NaN once either is NaN (max() would drop it). Every
    tolerance test below is written `not err <= tol`, so NaN fails it."""
    if math.isnan(a) or math.isnan(b):
        return float("nan")
    return max(a, b)


def losses(run):
    path = os.path.join(run, "metrics.jsonl")
    out = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            # cJSON writes a NaN or infinite loss as null: keep it as NaN, which fails below
            loss = float("nan") if rec["loss"] is None else rec["loss"]
            out.append((rec["step"], loss, line.split('"loss":')[1].split(",")[0]))
    return out


def params(run):
    with open(os.path.join(run, "params.f32"), "rb") as f:
        data = f.read()
    return struct.unpack("<%df" % (len(data) // 4), data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--bitwise", action="store_true")
    ap.add_argument("--param-atol", type=float, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--subset", action="store_true",
                    help="RUN may hold only some of REF's steps (a resumed run); compare those")
    a = ap.parse_args()
    ref = losses(a.ref)
    if a.steps is not None and len(ref) != a.steps:
        sys.exit("FAIL: %s has %d steps, expected %d" % (a.ref, len(ref), a.steps))
    bad = 0
    for run in a.runs:
        cur = losses(run)
        if a.subset:
            by_step = {s: (s, l, t) for s, l, t in ref}
            if not cur or any(s not in by_step for s, _, _ in cur):
                print("FAIL: %s steps %s are not a non-empty subset of %s's"
                      % (run, [s for s, _, _ in cur], a.ref))
                bad += 1
                continue
            pairs = [(by_step[s], (s, l, t)) for s, l, t in cur]
        elif len(cur) != len(ref):
            print("FAIL: %s has %d steps, %s has %d" % (run, len(cur), a.ref, len(ref)))
            bad += 1
            continue
        else:
            pairs = list(zip(ref, cur))
        worst, failed = 0.0, False
        for (s, l0, t0), (_, l1, t1) in pairs:
            rel = abs(l1 - l0) / max(abs(l0), 1e-30)
            worst = worst_of(worst, rel)
            if (a.bitwise and t0 != t1) or (not a.bitwise and not rel <= a.rtol):
                print("FAIL: %s step %d loss %s vs %s (rel %.3g)" % (run, s, t1, t0, rel))
                bad += 1
                failed = True
                break
        if failed:
            continue  # no "ok" line for a run that failed
        msg = "%s: %d steps, max relative loss difference %.3g" % (run, len(cur), worst)
        if a.param_atol is not None:
            p0, p1 = params(a.ref), params(run)
            if len(p0) != len(p1):
                print("FAIL: %s has %d parameters, %s has %d" % (run, len(p1), a.ref, len(p0)))
                bad += 1
                continue
            diffs = [abs(x - y) for x, y in zip(p0, p1)]
            d = float("nan") if any(math.isnan(x) for x in diffs) else max(diffs, default=0.0)
            msg += ", max parameter difference %.3g (bound %.3g)" % (d, a.param_atol)
            if not d <= a.param_atol:
                print("FAIL: " + msg)
                bad += 1
                continue
        print("ok   " + msg)
    sys.exit(1 if bad else 0)


main()
