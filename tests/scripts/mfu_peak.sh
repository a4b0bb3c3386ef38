# The MFU's peak: a bf16 run on the CPU measures its peak on its bf16
# matmuls (not fp32 sgemm, which bf16 on AMX passes: an MFU of 142%), an
# fp32 run on sgemm; an MFU above 100% (a peak given too low) is marked on
# the step line as not real, with one warning naming the peak and its source.
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 200000)
C=(--set model.preset=tiny --set data.train="$corpus" --set train.global_batch=8 --set train.micro_batch=2
   --set train.eval_every=0 --set ckpt.mode=none --set train.log_every=1)
mt_train bf16 1 "${C[@]}" --set train.steps=2 --set train.precision=bf16 --set output.dir="$WORK/bf16"
# ... on the path the note of the start names (oneDNN, or sgemm after a conversion)
path=sgemm
grep -q "bf16 matmuls: oneDNN" "$WORK/bf16.log" && path=onednn
grep -Eq "peak [0-9.]+ GFLOP/s per rank \(measured-bf16-$path\)" "$WORK/bf16.log" \
  || { cat "$WORK/bf16.log"; fail "the bf16 run's peak is not its bf16 matmuls' ($path)"; }
grep -Eq "\"peak_source\":[[:space:]]*\"measured-bf16-$path\"" "$WORK/bf16/summary.json" \
  || fail "summary.json's peak_source is not measured-bf16-$path"
mt_train fp32 1 "${C[@]}" --set train.steps=2 --set output.dir="$WORK/fp32"
grep -Eq "peak [0-9.]+ GFLOP/s per rank \(measured-sgemm\)" "$WORK/fp32.log" \
  || { cat "$WORK/fp32.log"; fail "the fp32 run's peak is not sgemm's"; }
mt_train low 1 "${C[@]}" --set train.steps=3 --set metrics.peak_gflops=0.001 --set output.dir="$WORK/low"
[ "$(grep -c "warning: MFU [0-9.]*% at step 1 is above 100%: the peak of 0.0 GFLOP/s per rank (metrics.peak_gflops)" "$WORK/low.log")" -eq 1 ] \
  || { cat "$WORK/low.log"; fail "not one warning for an MFU above 100%"; }
[ "$(grep -c "MFU [0-9.]*% (over the peak: not real)" "$WORK/low.log")" -eq 3 ] \
  || { cat "$WORK/low.log"; fail "the step lines do not mark an MFU above 100%"; }
# (no check that a measured peak keeps the MFU under 100%: on a machine other
# jobs share, the 0.15 s measurement can land in a busy moment and a tiny
# model's cache-resident step pass it; that is timing, which tests leave alone)
echo PASS
