# Reference losses: a fixed set of layouts, each in fp32 and bf16, whose
# per-step loss and gradient norm must stay BITWISE what losses.txt holds.
# A refactor moves code and keeps its arithmetic: any change of a bit here
# is a change of numerics, and updating losses.txt is a deliberate commit
# that says why (MT_RECORD=1 bash tests/reference/losses.sh rewrites it,
# from a build dir given as MT_BIN, e.g. MT_BIN=build/bin MT_TMP=/tmp).
#
# The runs pin every path chosen at run time, so that the bits depend on
# the code and not on the CPU it runs on: one thread per rank, OpenBLAS's
# Haswell kernels (an AVX2 machine's, present on every x86-64 CPU this
# project supports; the library would otherwise pick SkylakeX, Cooperlake or
# Zen kernels by CPU), and the bf16 matmuls on the converted-sgemm path
# (oneDNN's and AMX's kernels differ by CPU).
#
# With MT_REF_DEVICE=cuda (the build-emu suite: the CUDA backend on the
# CPU's execution model of CUDA) the same runs train on the emulated GPU
# and are held to the section [cuda] of losses.txt.
#   losses.sh [LAYOUT-REGEX]   run the layouts whose names match (default: all)
source "$(dirname "$0")/../scripts/common.sh"
# the bits are the code's on the suite's fixed target; another -march (a
# developer's native build) vectorises other sums and gives other bits
if [ "${MT_BUILD_ARCH:-x86-64-v3}" != x86-64-v3 ] && [ "${MT_RECORD:-0}" != 1 ]; then
  echo "SKIP: the reference losses hold for builds with -DMT_ARCH=x86-64-v3 (tests/run.sh's); this one has -march=$MT_BUILD_ARCH"
  exit 77
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=Haswell MT_BF16_GEMM=sgemm
device=${MT_REF_DEVICE:-cpu}
ref="$MT_SRC/tests/reference/losses.txt"
only=${1:-.}
corpus=$(mt_corpus 300000)
common=(--set model.preset=tiny --set model.n_layer=4 --set train.steps=6
        --set train.global_batch=8 --set train.micro_batch=2 --set data.train="$corpus"
        --set train.eval_every=0 --set train.warmup_steps=2 --set train.lr=3e-3
        --set ckpt.mode=none --set train.device="$device")
moe=(--set model.moe_experts=4 --set model.moe_topk=2 --set model.moe_every=1
     --set train.moe_aux_coef=0.01 --set train.moe_z_coef=0.001)
pp=(--set parallel.pp=2)

# NAME NP ARGS...: one layout
layouts() {
  echo "r1 1"
  echo "dp2z0 2 --set parallel.dp=2 --set parallel.zero=0"
  echo "dp2z1 2 --set parallel.dp=2 --set parallel.zero=1"
  echo "dp2z2 2 --set parallel.dp=2 --set parallel.zero=2"
  echo "dp2z3 2 --set parallel.dp=2 --set parallel.zero=3"
  echo "tp2sp 2 --set parallel.tp=2 --set parallel.sp=true"
  echo "pp2gpipe 2 ${pp[*]} --set parallel.schedule=gpipe"
  echo "pp2_1f1b 2 ${pp[*]} --set parallel.schedule=1f1b --set train.recompute=true"
  echo "pp2inter 2 ${pp[*]} --set parallel.schedule=interleaved --set parallel.virtual_stages=2"
  echo "pp2zbh1 2 ${pp[*]} --set parallel.schedule=zb-h1"
  echo "pp2bfs 2 ${pp[*]} --set parallel.schedule=breadth-first --set parallel.virtual_stages=2"
  echo "pp2zbv 2 ${pp[*]} --set parallel.schedule=zb-v --set parallel.virtual_stages=2"
  echo "cp2ring 2 --set parallel.cp=2 --set parallel.cp_mode=ring"
  echo "cp2uly 2 --set parallel.cp=2 --set parallel.cp_mode=ulysses"
  echo "ep2 2 ${moe[*]} --set parallel.dp=2 --set parallel.ep=2"
}
# bf16 only: gradients held in bf16, and fp32 gradients reduced in bf16
layouts_bf16() {
  echo "dp2z1g16 2 --set parallel.dp=2 --set parallel.zero=1 --set train.grad_dtype=bf16 --set parallel.grad_reduce_dtype=bf16"
  echo "dp2z3g16 2 --set parallel.dp=2 --set parallel.zero=3 --set train.grad_dtype=bf16 --set parallel.grad_reduce_dtype=bf16"
  echo "dp2z2r16 2 --set parallel.dp=2 --set parallel.zero=2 --set parallel.grad_reduce_dtype=bf16"
}

out="$WORK/losses.txt"
: > "$out"
n=0
while read -r prec name np args; do
  [[ "$prec.$name" =~ $only ]] || continue
  dir="$WORK/$prec.$name"
  # shellcheck disable=SC2086
  mt_mpirun "$np" "$MT_BIN/meshtrain" "${common[@]}" --set train.precision="$prec" \
    --set output.dir="$dir" $args < /dev/null > "$dir.log" 2>&1 || { cat "$dir.log"; fail "run $prec.$name failed"; }
  # the loss and gradient norm of each step as cJSON wrote them (the
  # shortest text that reads back to the same double)
  python3 - "$dir/metrics.jsonl" "$prec.$name" >> "$out" <<'PY'
import json, re, sys
for line in open(sys.argv[1]):
    rec = json.loads(line)
    loss = re.search(r'"loss":([^,}]+)', line).group(1)
    norm = re.search(r'"grad_norm":([^,}]+)', line).group(1)
    print("%s %d %s %s" % (sys.argv[2], rec["step"], loss, norm))
PY
  n=$((n + 1))
done < <(layouts | sed 's/^/fp32 /'; layouts | sed 's/^/bf16 /'; layouts_bf16 | sed 's/^/bf16 /')
[ "$n" -gt 0 ] || fail "no layout matches '$only'"

section="[$device]"
if [ "${MT_RECORD:-0}" = 1 ]; then
  # keep the other device's section, replace this one's
  tmp="$WORK/losses.new"
  { if [ -f "$ref" ]; then awk -v s="$section" 'BEGIN { keep = 1 } /^\[/ { keep = ($0 != s) } keep' "$ref"; else
      echo "# tests/reference/losses.sh: RUN STEP LOSS GRAD_NORM, bitwise (see the script)"; fi
    echo "$section"; cat "$out"; } > "$tmp"
  mv "$tmp" "$ref"
  echo "recorded $n layouts of $device into $ref"
  exit 0
fi
[ -f "$ref" ] || fail "no reference file $ref"
python3 - "$ref" "$section" "$out" <<'PY'
import sys
ref_path, section, cur_path = sys.argv[1:4]
ref, keep = {}, False
for line in open(ref_path):
    line = line.strip()
    if line.startswith("["):
        keep = line == section
    elif keep and line and not line.startswith("#"):
        run, step, loss, norm = line.split()
        ref[(run, int(step))] = (loss, norm)
bad, seen = [], set()
for line in open(cur_path):
    run, step, loss, norm = line.split()
    seen.add(run)
    want = ref.get((run, int(step)))
    if want is None:
        bad.append("%s step %s: not in the reference" % (run, step))
    elif (loss, norm) != want:
        bad.append("%s step %s: loss %s norm %s, reference loss %s norm %s"
                   % (run, step, loss, norm, want[0], want[1]))
for line in bad:
    print("FAIL: " + line)
if bad:
    sys.exit(1)
print("ok   %d layouts, every step's loss and gradient norm bitwise the reference's" % len(seen))
PY
