# The loss comparison itself, on made-up metrics (no training): equal
# finite losses pass, bitwise and within a tolerance; a loss one float64 ulp
# away passes --rtol and fails --bitwise; a null loss (cJSON's NaN or
# infinity) fails against anything, a null in the same place in both runs
# included, bitwise or not; a step missing, a step renumbered, an empty run
# fail; and mt_numbers' own verdicts on NaN, null, text and bools.
source "$(dirname "$0")/common.sh"
CMP="$MT_SRC/tests/scripts/compare_runs.py"
# run NAME LOSS... : a run directory whose metrics.jsonl holds these losses
# (written as JSON text: null, 4.25, 4.250000000000001, ...)
run() {
  local d="$WORK/$1" step=0; shift
  mkdir -p "$d"; : > "$d/metrics.jsonl"
  for l in "$@"; do
    step=$((step + 1))
    echo "{\"step\":$step,\"loss\":$l,\"tokens\":256}" >> "$d/metrics.jsonl"
  done
}
expect() { # pass|fail ARGS... : compare_runs.py must give that verdict
  local want=$1; shift
  local rc=0
  python3 "$CMP" "$@" > "$WORK/out" 2>&1 || rc=$?
  if { [ "$want" = pass ] && [ $rc -ne 0 ]; } || { [ "$want" = fail ] && [ $rc -eq 0 ]; }; then
    cat "$WORK/out"; fail "compare_runs.py $* should $want (exit $rc)"
  fi
  echo "ok   $want: $(head -1 "$WORK/out")"
}
run a 5.5 4.25 3.125
run same 5.5 4.25 3.125
run ulp 5.5 4.250000000000001 3.125
run off 5.5 4.3 3.125
run null_a 5.5 null 3.125
run null_b 5.5 null 3.125
run short 5.5 4.25
run empty
expect pass "$WORK/a" "$WORK/same" --bitwise --steps 3
expect pass "$WORK/a" "$WORK/same" --rtol 0
expect pass "$WORK/a" "$WORK/ulp" --rtol 1e-12
expect fail "$WORK/a" "$WORK/ulp" --bitwise
expect fail "$WORK/a" "$WORK/off" --rtol 1e-5
expect fail "$WORK/null_a" "$WORK/null_b" --bitwise
expect fail "$WORK/null_a" "$WORK/null_b" --rtol 1e-5
expect fail "$WORK/a" "$WORK/null_b" --bitwise
expect fail "$WORK/null_a" "$WORK/a" --rtol 1
expect fail "$WORK/a" "$WORK/short" --bitwise
expect pass "$WORK/a" "$WORK/short" --bitwise --subset
expect fail "$WORK/null_a" "$WORK/short" --bitwise --subset
expect fail "$WORK/a" "$WORK/empty" --subset
expect fail "$WORK/a" "$WORK/same" --bitwise --steps 4
# a renumbered step: same losses, another step
sed 's/"step":2/"step":7/' "$WORK/same/metrics.jsonl" > "$WORK/renumbered.jsonl"
mkdir -p "$WORK/renumbered"; mv "$WORK/renumbered.jsonl" "$WORK/renumbered/metrics.jsonl"
expect fail "$WORK/a" "$WORK/renumbered" --bitwise
python3 - "$MT_SRC/tests/scripts" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from mt_numbers import rel_err, same_bits, value, within, worst
nan, inf = float("nan"), float("inf")
cases = [
    (same_bits(1.5, 1.5), True), (same_bits(1, 1.0), True), (same_bits(0.1 + 0.2, 0.3), False),
    (same_bits(None, None), False), (same_bits(nan, nan), False), (same_bits(inf, inf), False),
    (same_bits("1.5", "1.5"), False), (same_bits(True, True), False), (same_bits(0.0, -0.0), False),
    (within(1.0, 1.0 + 1e-7, 1e-6), True), (within(None, 1.0, 1e9), False),
    (within(1.0, None, 1e9), False), (within(nan, nan, 1e9), False), (within(inf, inf, 1e9), False),
    (within(0.0, 0.0, 0.0), True), (within(1e-9, 0.0, 1e-6), True),
    (rel_err(2.0, 4.0) == 0.5, True), (value(None) != value(None), True),
    (worst(0.1, nan) != worst(0.1, nan), True), (worst(0.1, 0.2) == 0.2, True),
]
bad = [i for i, (got, want) in enumerate(cases) if got is not want]
if bad:
    sys.exit("FAIL: mt_numbers cases %s give the wrong verdict" % bad)
print("ok   mt_numbers: %d verdicts on NaN, null, inf, text, bools and zeros" % len(cases))
PY
echo PASS
