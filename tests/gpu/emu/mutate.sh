#!/usr/bin/env bash
# The mutation check of the emulated GPU tests (a benchmark-style script,
# run by hand, not in CI): realistic GPU defects, each planted alone in a
# copy of the tree; for each, the gpu-emu tests that should catch it must
# fail AND their failure output must name the kernel or op involved.
#   flash_sync     a __syncthreads removed from the flash forward (V then
#                  overwrites K in shared memory while threads still read K)
#   smem_row       the flash forward's shared buffer one row short
#   router_warp    a partial-warp early return in the MoE router, before
#                  its full-mask shuffles
#   red_sync       the tree of the block reduction under the sums and norms
#                  (backend.cu) without its barrier between levels
#   guard_write    the bias fill's element guard one too far (matmul.cu
#                  bias_fill_kernel, i <= n: the bias's first value written
#                  one element past the output)
#   bf16_trunc     the casts' bf16 stores (ops.cu rows_cast_kernel: the
#                  convert op, the weights' bf16 copy) truncated, not rounded
#   ld_call        the reference attention's K Q^T product given Q's leading
#                  dimension as C, not 3C (attention.cu)
#   gemm_lda       the GEMM's A layout (matmul.cu) given m rows as its
#                  leading dimension, not lda (right for packed operands)
#   nccl_count     the all-gather of a whole buffer given a count in bytes,
#                  not elements (comm/nccl.c)
#   stream_sync    no stream synchronisation between the copy of the largest
#                  token id and its host read (ops.cu encoder_backward)
#   scatter_stride the MoE combine reading the weight row n at stride 1, not
#                  k (right for top-1 only)
#   skip_diag      the flash forward skipping its last key tile (the
#                  diagonal one of a causal block)
#   oob_read       the column sums' row loop one row too far (n <= n1: a
#                  read past the end of the matrix)
#   bash tests/gpu/emu/mutate.sh [WORK_DIR] [NAME...]
#        (default /tmp/meshtrain-mutate; NAMEs: only those mutations)
# Copies the working tree (git's tracked and untracked files) to
# WORK_DIR/src, files that differ only, and builds it there with
# -DMT_CUDA_EMU=ON (incrementally when WORK_DIR holds an earlier build);
# runs the tests the mutations use unmutated (they must pass), then per
# mutation rebuilds target gpu_emu_all (the one file changed) and
# runs the gpu-emu tests listed for it. Prints a table (mutation, caught,
# failed tests, the kernel or op named, seconds) and exits 0 when every
# mutation is caught, 1 otherwise. stream_sync needs the emulator's deferred
# streams (MT_EMU_STREAMS, set for it): in a tree without them it is listed
# as "expected with deferred streams" and does not fail the run.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
WORK=${1:-/tmp/meshtrain-mutate}
shift $(($# > 0 ? 1 : 0))
ONLY=" $* "
JOBS=$(nproc 2>/dev/null || echo 2)
START=$SECONDS
mkdir -p "$WORK/src"
# the tree as git sees it, copying only what changed (an earlier build stays valid)
(cd "$SRC" && git ls-files -co --exclude-standard -z) | while IFS= read -r -d '' f; do
  [ -f "$SRC/$f" ] || continue
  cmp -s "$SRC/$f" "$WORK/src/$f" 2>/dev/null && continue
  mkdir -p "$WORK/src/$(dirname "$f")" && cp -p "$SRC/$f" "$WORK/src/$f"
done
cd "$WORK/src" || exit 1
echo "== build ($WORK/src/build-emu)"
cmake -S . -B build-emu -DCMAKE_BUILD_TYPE=Release -DMT_CUDA_EMU=ON > "$WORK/configure.log" 2>&1 &&
  cmake --build build-emu -j "$JOBS" --target gpu_emu_all > "$WORK/build.log" 2>&1 ||
  { tail -20 "$WORK/build.log"; exit 1; }
echo "   built in $((SECONDS - START)) s"
# the tests the mutations run must pass on the tree as it is, or a
# "caught" means nothing
BASE='ops|ops_bf16|edges|moe_ops|attn_bf16|gemm_ld|nccl16'
echo "== unmutated: gpu-emu.($BASE)"
(cd build-emu && ctest -R "^gpu-emu\.($BASE)\$" -j "$JOBS" --output-on-failure \
  > "$WORK/unmutated.ctest.log" 2>&1) ||
  { grep -E 'FAIL|gpu-emu: ' "$WORK/unmutated.ctest.log" | head -5
    echo "the unmutated tree fails (above; $WORK/unmutated.ctest.log)"; exit 1; }
echo "   passed at $((SECONDS - START)) s"
DEFERRED=0
grep -q MT_EMU_STREAMS tests/gpu/emu/*.cc 2>/dev/null && DEFERRED=1

# mutate FILE OLD NEW: FILE with the one OLD replaced by NEW (OLD must occur once)
mutate() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
s = open(path).read()
if s.count(old) != 1: sys.exit("mutation: %s holds the text to replace %d times, not once" % (path, s.count(old)))
open(path, "w").write(s.replace(old, new, 1))
PY
}
ROWS=()
missed=0
# run NAME TESTS NAMED FILE OLD NEW [VAR=VALUE...]: TESTS the gpu-emu tests
# (a regex alternation of their names), NAMED the kernel or op the failure
# output must name: regexes separated by |, the kernel's first
run() {
  local name=$1 tests=$2 named=$3 file=$4 old=$5 new=$6
  shift 6
  case $ONLY in "  ") ;; *" $name "*) ;; *) return ;; esac
  local t0=$SECONDS
  cp "$file" "$WORK/$name.orig"
  # the tree is restored whatever happens to this mutation
  trap 'cp "$WORK/'"$name"'.orig" "'"$file"'"' EXIT INT TERM
  mutate "$file" "$old" "$new" || exit 1
  echo "== $name: $(diff "$WORK/$name.orig" "$file" | grep '^[<>]' | head -2 | tr '\n' ' ' | cut -c1-200)"
  if ! cmake --build build-emu -j "$JOBS" --target gpu_emu_all > "$WORK/$name.build.log" 2>&1; then
    tail -20 "$WORK/$name.build.log"
    exit 1
  fi
  rm -rf build-emu/test-tmp
  (cd build-emu && env "$@" ctest -R "^gpu-emu\.($tests)\$" -j "$JOBS" --output-on-failure \
    > "$WORK/$name.ctest.log" 2>&1)
  cp "$WORK/$name.orig" "$file"
  trap - EXIT INT TERM
  local failed said='' caught=no
  failed=$(sed -n 's/^[[:space:]]*[0-9]* - gpu-emu\.\([a-z_0-9]*\) (.*/\1/p' "$WORK/$name.ctest.log" |
    paste -sd, -)
  # what the failing tests said (the failed checks and the emulator's
  # errors): the first of NAMED's alternatives found there
  local alt alts
  IFS='|' read -ra alts <<< "$named"
  for alt in "${alts[@]}"; do
    said=$(grep -hE 'FAIL|gpu-emu: |error' "$WORK/$name.ctest.log" build-emu/test-tmp/emu-*/*.log \
      2>/dev/null | grep -oE "$alt" | head -1)
    [ -n "$said" ] && break
  done
  if [ -n "$failed" ] && [ -n "$said" ]; then
    caught=yes
  elif [ "$name" = stream_sync ] && [ $DEFERRED -eq 0 ]; then
    caught="expected with deferred streams (MT_EMU_STREAMS)"
  else
    missed=$((missed + 1))
    [ -n "$failed" ] && caught="no (failed, but named no $named)"
  fi
  echo "   $caught; failed: ${failed:--}; named: ${said:--}"
  grep -hE 'FAIL|gpu-emu: ' "$WORK/$name.ctest.log" | sort | uniq -c | sort -rn | head -3 |
    cut -c1-220 | sed 's/^/   /'
  ROWS+=("$(printf '%-15s %-50s %-22s %-30s %5d' "$name" "$caught" "${failed:--}" "${said:--}" \
    $((SECONDS - t0)))")
}

FLASH=lib/kernels/cuda/attention_flash.cu OPS=lib/kernels/cuda/ops.cu MOE=lib/kernels/cuda/moe.cu
run flash_sync 'ops|edges|attn_bf16' 'attn_forward[a-z_]*|attention' $FLASH \
  "    __syncthreads(); /* S is whole; every read of K is done */" \
  "    /* mutation: no barrier before V replaces K */"
run smem_row 'ops|edges|attn_bf16' 'attn_forward[a-z_]*|attention' $FLASH \
  "  return (size_t)(BR + BC) * (hs + 1) + (size_t)BR * (BC + 1) + BR;" \
  "  return (size_t)(BR + BC - 1) * (hs + 1) + (size_t)BR * (BC + 1) + BR;"
run router_warp 'moe_ops|edges' 'moe_router[a-z_]*' $MOE \
  "  const float *x = logits + (size_t)n * E;
  float *p = probs + (size_t)n * E;
  float m = -INFINITY;" \
  "  const float *x = logits + (size_t)n * E;
  float *p = probs + (size_t)n * E;
  if (lane >= E) return; /* mutation: lanes without an expert leave early */
  float m = -INFINITY;"
run red_sync 'ops|ops_bf16' 'reduce_partial_kernel|sumsq|[a-z_]*norm[a-z_]*' \
  lib/kernels/cuda/backend.cu \
  "    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();" \
  "    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s]; /* mutation: no barrier */"
run guard_write 'edges|ops' 'bias_fill_kernel' lib/kernels/cuda/matmul.cu \
  "  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t c = i / (size_t)rows, r = i % (size_t)rows;" \
  "  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i <= n; /* mutation */
       i += (size_t)gridDim.x * blockDim.x) {
    size_t c = i / (size_t)rows, r = i % (size_t)rows;"
run bf16_trunc 'ops_bf16' 'rows_cast_kernel|convert[a-z_ ]*' $OPS \
  "    *y = mt_st<To>(ADD ? mt_ld(*y) + v : v);" \
  "    const float w = ADD ? mt_ld(*y) + v : v; /* mutation: bf16 truncated */
    *y = sizeof(To) == 2 ? (To)__bfloat16_as_ushort(__float2bfloat16_rz(w)) : mt_st<To>(w);"
run ld_call 'ops' 'attention_forward|attention_backward' lib/kernels/cuda/attention.cu \
  "    mt_cuda_gemm(1, 0, T, T, hs, scale, q + (size_t)C * es, C3, hs, q, C3, hs, 0.0f, att_b, T," \
  "    mt_cuda_gemm(1, 0, T, T, hs, scale, q + (size_t)C * es, C3, hs, q, C, hs, 0.0f, att_b, T,"
run gemm_lda 'gemm_ld' 'gemm' lib/kernels/cuda/matmul.cu \
  "                     : layout(ab, key->m, key->k, key->lda, key->batch, key->sa);" \
  "                     : layout(ab, key->m, key->k, key->m, key->batch, key->sa); /* mutation */"
run nccl_count 'nccl16' 'ncclAllGather|all_?gather[a-z_]*' lib/comm/nccl.c \
  "    NC(ncclAllGather(send, recv, n, nc_type(dt), c->comm, c->stream));" \
  "    NC(ncclAllGather(send, recv, n * es, nc_type(dt), c->comm, c->stream));"
run stream_sync 'ops' 'encoder_backward|encoder_dwte_kernel|max_token_kernel' $OPS \
  "    CUDA_CHECK(cudaStreamSynchronize(g_cu.stream));
    memcpy(&top, g_cu.red_host, sizeof(int));" \
  "    memcpy(&top, g_cu.red_host, sizeof(int)); /* mutation: read before the stream is done */" \
  MT_EMU_STREAMS=deferred
run scatter_stride 'moe_ops' 'moe_combine[a-z_]*' $MOE \
  "    const float *wn = w + (size_t)n * k;" \
  "    const float *wn = w + (size_t)n; /* mutation: stride 1, not k */"
run skip_diag 'ops|edges|attn_bf16' 'attn_forward[a-z_]*|attention' $FLASH \
  "  for (int j0 = attn_keys_begin(a, b, i0); j0 < kend; j0 += BC) {" \
  "  for (int j0 = attn_keys_begin(a, b, i0); j0 + BC < kend; j0 += BC) { /* mutation */"
run oob_read 'ops|edges' 'colsum_partial_kernel|matmul_backward|layernorm_backward' $OPS \
  "  for (int n = n0; n < n1; n++) {
    float v = mt_ld(x[(size_t)n * ld + c]);" \
  "  for (int n = n0; n <= n1; n++) { /* mutation: one row too far */
    float v = mt_ld(x[(size_t)n * ld + c]);"

echo
printf '%-15s %-50s %-22s %-30s %5s\n' mutation caught "failed tests" "kernel/op named" "s"
printf '%s\n' "${ROWS[@]}"
echo "== ${#ROWS[@]} mutations, $missed missed, $((SECONDS - START)) s in all"
[ "$missed" -eq 0 ]
