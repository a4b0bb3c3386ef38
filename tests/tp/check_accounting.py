#!/usr/bin/env python3
"""Communication and parameter-memory accounting of meshtrain runs against
the analytical formulas of the layout, exactly (no tolerance).

check_accounting.py L C NH T V GLOBAL_BATCH RUN_DIR:DP:TP:SP:MICRO_BATCH:ZERO ...

The formulas below are written from the design (Megatron tensor and sequence
parallelism, data parallelism with buckets or ZeRO-1), not from the code:

bytes one rank sends, ring algorithms: all-reduce 2(n-1)/n * S, all-gather
and reduce-scatter (n-1)/n * S, for a buffer of S bytes in total.

tp group, per micro-batch of B sequences, A = one (B,T,C) fp32 activation:
  without sp: all-reduces of the embedding output, of each block's two
    row-parallel outputs (forward) and two column-parallel input gradients
    (backward), of the LM head's input gradient: (4L + 2) all-reduces of A;
  with sp: per block, forward gathers the inputs of QKV and fc and
    reduce-scatters the outputs of attn.proj and mlp.proj (4), backward
    gathers the two output gradients, re-gathers the two inputs for the
    weight gradients and reduce-scatters the two input gradients (6); the
    embedding reduce-scatters (forward) and gathers (backward) (2); the LM
    head gathers, re-gathers and reduce-scatters (3): (10L + 5) of A at the
    all-gather rate;
  cross-entropy: all-reduce of B*T float row maxima and of B*T x 2 double
    (sum of exps, target logit).
tp group, per step: under sp one all-reduce of the LayerNorm gradients (4C
  per block + 2C final); the global grad norm's sum of squares (1 double).
dp group, per step: the gradient buckets (all-reduce, or reduce-scatter +
  all-gather under ZeRO-1) over this rank's parameters; the loss (1 double);
  under ZeRO-1 the grad norm's sum of squares (1 double, 2 with tp > 1:
  sharded and replicated parts).
parameters per rank: the vocabulary padded to a multiple of 64*tp; the
  tp-sharded tensors (wte, QKV, attn.proj, mlp.fc, mlp.proj and the QKV and fc
  biases) divided by tp, plus the replicated ones (wpe, LayerNorms, attn.proj
  and mlp.proj biases), 4 bytes each.
"""
import json
import sys


def ar(nbytes, n):
    return 0.0 if n <= 1 else 2.0 * (n - 1) / n * nbytes


def ag(nbytes, n):
    return 0.0 if n <= 1 else (n - 1) / n * nbytes


def param_numel(L, C, T, V, tp):
    Vp = -(-V // (64 * tp)) * 64 * tp
    sharded = Vp * C + L * (3 * C * C + 3 * C + C * C + 4 * C * C + 4 * C + 4 * C * C)
    replicated = T * C + L * (4 * C + 2 * C) + 2 * C
    assert sharded % tp == 0
    return sharded // tp + replicated


def main():
    L, C, NH, T, V, G = (int(x) for x in sys.argv[1:7])
    bad = 0
    for spec in sys.argv[7:]:
        run, dp, tp, sp, mb, zero = spec.split(":")
        dp, tp, mb, zero, sp = int(dp), int(tp), int(mb), int(zero), sp == "true"
        accum = G // (dp * mb)
        A, BT = 4 * mb * T * C, mb * T
        xent = ar(4 * BT, tp) + ar(16 * BT, tp)
        per_mb = ((10 * L + 5) * ag(A, tp) if sp else (4 * L + 2) * ar(A, tp)) + xent
        tp_step = accum * per_mb + (ar(4 * (4 * L * C + 2 * C), tp) if sp else 0.0) + ar(8, tp)
        numel = param_numel(L, C, T, V, tp)
        P = 4 * numel
        dp_step = 2 * ag(P, dp) if zero else ar(P, dp)
        dp_step += ar(8, dp) + (ar(16 if tp > 1 else 8, dp) if zero else 0.0)
        recs = [json.loads(line) for line in open(run + "/metrics.jsonl")]
        summ = json.load(open(run + "/summary.json"))
        checks = [("summary tp_bytes_per_step", summ["tp_bytes_per_step"], tp_step),
                  ("summary params_bytes_per_rank", summ["params_bytes_per_rank"], P)]
        for r in recs:
            checks += [("step %d tp_bytes" % r["step"], r["tp_bytes"], tp_step),
                       ("step %d dp_bytes" % r["step"], r["dp_bytes"], dp_step),
                       ("step %d params bytes allocated" % r["step"],
                        r["mem_peak_bytes"]["params"], P)]
        ok = True
        for what, got, want in checks:
            if got != want:
                print("FAIL: %s: %s = %r, formula %r" % (run, what, got, want))
                ok = False
        bad += not ok
        if ok:
            print("ok   dp=%d tp=%d sp=%d zero=%d micro=%d: tp %.0f B/step, dp %.0f B/step, "
                  "params %d B/rank" % (dp, tp, sp, zero, mb, tp_step, dp_step, P))
    sys.exit(1 if bad else 0)


main()
