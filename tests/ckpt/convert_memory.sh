# meshckpt convert streams (issue 14): converting a gpt2-124m-shaped state
# (parameters and both AdamW moments, 1.49 GB; 0.75 GB per rank at 2 ranks)
# keeps each rank's peak RSS (the kernel's high-water mark, ru_maxrss, as
# convert reports it) under the stated bound: --buffer-mb plus 48 MiB for the
# libraries (MPI, HDF5; about 22 MiB here) and the index. Both directions.
source "$(dirname "$0")/../scripts/common.sh"
M="$MT_BIN/meshckpt"
mt_mpirun 2 "$MT_BIN/meshbench" ckpt --save-to "$WORK/src" --mode per-writer > "$WORK/save.log" \
  || { cat "$WORK/save.log"; fail "saving the gpt2-124m-shaped state"; }
check() {
  local name=$1 buf=$2; shift 2
  mt_mpirun 2 "$M" convert "$@" "$WORK/$name" --buffer-mb "$buf" > "$WORK/$name.log" 2>&1 \
    || { cat "$WORK/$name.log"; fail "$name failed"; }
  cat "$WORK/$name.log"
  python3 - "$WORK/$name.log" "$buf" <<'PY' || fail "$name: peak RSS above the bound"
import re, sys
text, buf = open(sys.argv[1]).read(), float(sys.argv[2])
rss = float(re.search(r"peak RSS ([0-9.]+) MiB", text).group(1))
gb = float(re.search(r"read ([0-9.]+) GB", text).group(1))
bound = buf + 48
print(f"peak RSS {rss:.1f} MiB for {gb:.2f} GB converted ({gb * 1e3 / 2 / 1.048576:.0f} MiB per rank): bound {bound:.0f} MiB")
sys.exit(0 if rss <= bound and gb > 1.4 else 1)
PY
}
check to_shared 32 "$WORK/src/step_1" --mode shared
check to_bf16_pw 16 "$WORK/to_shared/step_1" --mode per-writer --dtype bf16
"$M" diff "$WORK/src/step_1" "$WORK/to_shared/step_1" | tail -1 | grep -q "^diff: equal" || fail "to_shared differs"
echo PASS
