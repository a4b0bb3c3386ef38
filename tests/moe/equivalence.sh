# equivalence.sh GROUP: expert parallelism changes the layout and nothing
# else. The tiny MoE model (4 experts, top-2, dropless) trains 20 steps on
# one rank, then on each layout of GROUP; every layout's loss, gradient norm
# and validation loss stay within 1e-5 (relative) of the one-rank run at
# every step, and the first layout of the group, run again, gives the same
# bits (losses, norms, the step's expert loads). The layouts:
#   dp: ep = 1, 2, 4 over dp = 4 with ZeRO 2, 3 and 1; ep = 2 on dp = 2
#   tp: tp = 2 with etp = 1 (ep = 2) and etp = 2, with and without sp;
#       tp = 2 x dp = 2 with (etp, ep) = (2, 2) and (1, 4); shared experts
#   pp: pp = 2 with ep = 1, and with dp = 2, ep = 2 (interleaved 1F1B)
GROUP=$1
MT_NAME=moe_equiv; MT_SUFFIX=$GROUP
source "$(dirname "$0")/common_moe.sh"
MOE+=(--set train.steps=20 --set train.eval_every=10 --set train.eval_batches=1)
case $GROUP in
  dp) layouts=("dp2ep2 2 --set parallel.dp=2 --set parallel.ep=2 --set train.micro_batch=2"
               "dp4ep1z2 4 --set parallel.dp=4 --set parallel.zero=2 --set train.micro_batch=1"
               "dp4ep2z3 4 --set parallel.dp=4 --set parallel.ep=2 --set parallel.zero=3 --set train.micro_batch=2"
               "dp4ep4z1 4 --set parallel.dp=4 --set parallel.ep=4 --set parallel.zero=1 --set train.micro_batch=1") ;;
  tp) MOE+=(--set model.moe_shared=1)
      layouts=("tp2etp1ep2 2 --set parallel.tp=2 --set parallel.ep=2 --set train.micro_batch=4"
               "tp2etp2 2 --set parallel.tp=2 --set parallel.etp=2 --set train.micro_batch=8"
               "tp2sp_etp2 2 --set parallel.tp=2 --set parallel.sp=true --set parallel.etp=2 --set train.micro_batch=4"
               "tp2dp2_etp2ep2 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.etp=2 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=2"
               "tp2dp2_sp_ep4 4 --set parallel.tp=2 --set parallel.dp=2 --set parallel.sp=true --set parallel.ep=4 --set parallel.zero=2 --set train.micro_batch=2") ;;
  pp) MOE+=(--set model.n_layer=4)
      layouts=("pp2 2 --set parallel.pp=2 --set train.micro_batch=2"
               "pp2dp2ep2 4 --set parallel.pp=2 --set parallel.dp=2 --set parallel.ep=2 --set parallel.zero=1 --set train.micro_batch=1 --set parallel.schedule=interleaved --set parallel.virtual_stages=2") ;;
  *) fail "unknown group $GROUP" ;;
esac
run ref 1 --set train.micro_batch=8
names=()
for c in "${layouts[@]}"; do
  read -r name np args <<< "$c"
  # shellcheck disable=SC2086
  run "$name" "$np" $args
  names+=("$WORK/$name")
done
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/ref" "${names[@]}" --rtol 1e-5 --steps 20
read -r first np args <<< "${layouts[0]}"
# shellcheck disable=SC2086
run "${first}_again" "$np" $args
python3 "$MT_SRC/tests/scripts/compare_runs.py" "$WORK/$first" "$WORK/${first}_again" --bitwise
python3 - "$WORK/ref" "$WORK/$first" "$WORK/${first}_again" "${names[@]}" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MT_SRC"], "tests/scripts"))
from mt_numbers import same_bits, within
def recs(d): return [json.loads(l) for l in open(d + "/metrics.jsonl")]
ref, first, again = recs(sys.argv[1]), recs(sys.argv[2]), recs(sys.argv[3])
for a, b in zip(first, again):  # the same layout twice: the same bits everywhere
    for k in ("grad_norm",):
        if not same_bits(a[k], b[k]):  # a null (NaN) norm is never the same
            sys.exit("FAIL: step %d: %s %r then %r" % (a["step"], k, a[k], b[k]))
    if a["moe"]["tokens_per_expert"] != b["moe"]["tokens_per_expert"]:
        sys.exit("FAIL: step %d: expert loads differ between two runs of one layout" % a["step"])
for d in sys.argv[4:]:
    for a, b in zip(ref, recs(d)):
        for k in ("grad_norm", "val_loss"):
            if (k in a) != (k in b):
                sys.exit("FAIL: %s step %d: %s only in one run" % (d, a["step"], k))
            if k in a and not within(b[k], a[k], 1e-5):  # NaN or null fails
                sys.exit("FAIL: %s step %d %s %r vs %r" % (d, a["step"], k, b[k], a[k]))
        m = b["moe"]
        if not (len(m["tokens_per_expert"]) == len(ref[0]["moe"]["tokens_per_expert"]) and
                m["aux_loss"] > 0 and m["z_loss"] > 0 and sum(m["dropped_frac"]) == 0):
            sys.exit("FAIL: %s step %d: MoE metrics %r" % (d, b["step"], m))
print("ok   %d layouts: grad_norm and val_loss within 1e-5 of one rank; %s twice: bitwise"
      % (len(sys.argv) - 4, sys.argv[2].rsplit("/", 1)[1]))
PY
echo PASS
