#!/usr/bin/env python3
"""Compare the gradients of two runs of one layout at step 1 (GPU against CPU).

grad_check.py REF RUN --dtype fp32|bf16 [--what TEXT]

Each run (its output.dir RUN) was made with MT_TEST_GRAD_SUMS=RUN.grads (the
test hook of lib/parallel/dp_update.c): every rank wrote RUN.grads.<rank>, one line per
tensor part it holds, "name first count sum sumsq wsum" over the reduced
gradients of the first step, before clipping (wsum: weighted by the
element's place, so that a permutation shows). Checked, with the tolerance
rtol of the dtype (the run's gradients', below):

  - the global gradient norm of step 1 (metrics.jsonl): relative error
    <= rtol;
  - every rank's lines name the same tensor parts;
  - per part, with r = sqrt(sumsq) of REF (the part's norm): |norm - r|
    <= rtol * r, and |sum - sum_ref| and |wsum - wsum_ref| <= 2 * rtol *
    sqrt(count) * r (what an error of norm rtol * r can change them by).

A NaN anywhere fails (comparisons are !(err <= tol)). Prints the worst of
each; exits 1 naming the first failures.
"""
import argparse
import glob
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mt_numbers import records, rel_err, value, worst  # noqa: E402

# the step-1 gradients' tolerance by dtype. fp32: both backends sum the same
# fp32 values in other orders (the emulated GPU is within 1e-7 of the CPU on
# the tiny layouts: norm and every part); bf16: both round the same values to
# bf16 (within 3e-7 on one emulated GPU, dp 2 and tp 2). A gradient bug (a
# MoE gather stride, bf16 stores truncated, the flash backward skipping the
# diagonal) moves the norm by 1e-3 or more.
RTOL = {"fp32": 1e-5, "bf16": 1e-4}


def sums(run):
    """{rank: [(name, first, count, sum, sumsq, wsum)]}"""
    out = {}
    for path in sorted(glob.glob(run.rstrip("/") + ".grads.*")):
        rank = int(path.rsplit(".", 1)[1])
        rows = []
        with open(path) as f:
            for line in f:
                name, first, count, s, q, w = line.split()
                rows.append((name, int(first), int(count), value(float(s)), value(float(q)),
                             value(float(w))))
        out[rank] = rows
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("run")
    ap.add_argument("--dtype", choices=sorted(RTOL), required=True)
    ap.add_argument("--what", default="")
    a = ap.parse_args(argv)
    rtol = RTOL[a.dtype]
    what = a.what or "%s vs %s" % (a.run, a.ref)
    bad = []
    n0, n1 = (value(records(r)[0].get("grad_norm")) for r in (a.ref, a.run))
    norm_err = rel_err(n1, n0)
    if not norm_err <= rtol:
        bad.append("grad_norm at step 1: %r vs %r (rel %.3g)" % (n1, n0, norm_err))
    ref, run = sums(a.ref), sums(a.run)
    if not ref or sorted(ref) != sorted(run):
        bad.append("ranks with gradient sums: %s vs %s" % (sorted(run), sorted(ref)))
    worst_norm, worst_sum, parts = 0.0, 0.0, 0
    for rank in sorted(ref):
        r_rows, g_rows = ref[rank], run.get(rank, [])
        if [x[:3] for x in r_rows] != [x[:3] for x in g_rows]:
            bad.append("rank %d: the tensor parts differ" % rank)
            continue
        for (name, first, count, s0, q0, w0), (_, _, _, s1, q1, w1) in zip(r_rows, g_rows):
            parts += 1
            r = math.sqrt(q0) if q0 >= 0 else float("nan")
            e_norm = rel_err(math.sqrt(q1) if q1 >= 0 else float("nan"), r)
            if r == 0:  # a part with no gradient (rel_err gives the absolute one)
                e_norm = e_norm / 1e-30 if e_norm > 0 else e_norm
            bound = 2.0 * math.sqrt(count) * r + 1e-30
            e_sum = worst(abs(s1 - s0) / bound, abs(w1 - w0) / bound)
            worst_norm, worst_sum = worst(worst_norm, e_norm), worst(worst_sum, e_sum)
            if not (e_norm <= rtol and e_sum <= rtol):
                bad.append("rank %d %s [%d, +%d): norm %.9g vs %.9g (rel %.3g), sum %.9g vs %.9g, "
                           "wsum %.9g vs %.9g (%.3g of the bound)"
                           % (rank, name, first, count, math.sqrt(max(q1, 0)), r, e_norm, s1, s0,
                              w1, w0, e_sum))
    print("%-34s step-1 grad norm rel %.2e; %d tensor parts: norm rel <= %.2e, sums <= %.2e "
          "of their bound (%s tolerance %.0e)"
          % (what, norm_err, parts, worst_norm, worst_sum, a.dtype, rtol))
    if bad or not parts:
        for b in bad[:10]:
            print("FAIL: %s: %s" % (what, b))
        if not parts:
            print("FAIL: %s: no gradient sums (MT_TEST_GRAD_SUMS)" % what)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
