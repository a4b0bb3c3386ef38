# The loss comparison itself, on made-up metrics (no training): equal
# finite losses pass, bitwise and within a tolerance; a loss one float64 ulp
# away passes --rtol and fails --bitwise; a null loss (cJSON's NaN or
# infinity) fails against anything, a null in the same place in both runs
# included, bitwise or not; a step missing, a step renumbered, an empty run
# fail; and mt_numbers' own verdicts on NaN, null, text and bools. (One
# Python process for the cases, and the command line once each way.)
source "$(dirname "$0")/common.sh"
CMP="$MT_SRC/tests/scripts/compare_runs.py"
python3 - "$WORK" "$MT_SRC/tests/scripts" <<'PY'
import io, os, sys
work = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from compare_runs import main as compare
from mt_numbers import rel_err, same_bits, value, within, worst

def run(name, *losses, steps=None):
    """a run directory whose metrics.jsonl holds these losses, as JSON text"""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for i, l in enumerate(losses):
            step = steps[i] if steps else i + 1
            f.write('{"step":%d,"loss":%s,"tokens":256}\n' % (step, l))
    return d

a = run("a", "5.5", "4.25", "3.125")
same = run("same", "5.5", "4.25", "3.125")
ulp = run("ulp", "5.5", "4.250000000000001", "3.125")
off = run("off", "5.5", "4.3", "3.125")
null_a = run("null_a", "5.5", "null", "3.125")
null_b = run("null_b", "5.5", "null", "3.125")
short = run("short", "5.5", "4.25")
empty = run("empty")
renumbered = run("renumbered", "5.5", "4.25", "3.125", steps=[1, 7, 3])
cases = [  # (verdict, arguments)
    ("pass", [a, same, "--bitwise", "--steps", "3"]),
    ("pass", [a, same, "--rtol", "0"]),
    ("pass", [a, ulp, "--rtol", "1e-12"]),
    ("fail", [a, ulp, "--bitwise"]),
    ("fail", [a, off, "--rtol", "1e-5"]),
    ("fail", [null_a, null_b, "--bitwise"]),
    ("fail", [null_a, null_b, "--rtol", "1e-5"]),
    ("fail", [a, null_b, "--bitwise"]),
    ("fail", [null_a, a, "--rtol", "1"]),
    ("fail", [a, short, "--bitwise"]),
    ("pass", [a, short, "--bitwise", "--subset"]),
    ("fail", [null_a, short, "--bitwise", "--subset"]),
    ("fail", [a, empty, "--subset"]),
    ("fail", [a, same, "--bitwise", "--steps", "4"]),
    ("fail", [a, renumbered, "--bitwise"]),
]
bad = 0
for want, args in cases:
    out = io.StringIO()
    rc = compare(args, out)
    got = "pass" if rc == 0 else "fail"
    line = out.getvalue().splitlines()[0] if out.getvalue() else ""
    print("%s %-4s %s: %s" % ("ok  " if got == want else "FAIL", want,
                              " ".join(os.path.basename(x) for x in args), line))
    bad += got != want
nan, inf = float("nan"), float("inf")
verdicts = [
    (same_bits(1.5, 1.5), True), (same_bits(1, 1.0), True), (same_bits(0.1 + 0.2, 0.3), False),
    (same_bits(None, None), False), (same_bits(nan, nan), False), (same_bits(inf, inf), False),
    (same_bits("1.5", "1.5"), False), (same_bits(True, True), False), (same_bits(0.0, -0.0), False),
    (within(1.0, 1.0 + 1e-7, 1e-6), True), (within(None, 1.0, 1e9), False),
    (within(1.0, None, 1e9), False), (within(nan, nan, 1e9), False), (within(inf, inf, 1e9), False),
    (within(0.0, 0.0, 0.0), True), (within(1e-9, 0.0, 1e-6), True),
    (rel_err(2.0, 4.0) == 0.5, True), (value(None) != value(None), True),
    (worst(0.1, nan) != worst(0.1, nan), True), (worst(0.1, 0.2) == 0.2, True),
]
wrong = [i for i, (got, want) in enumerate(verdicts) if got is not want]
if wrong:
    print("FAIL: mt_numbers cases %s give the wrong verdict" % wrong)
print("ok   mt_numbers: %d verdicts on NaN, null, inf, text, bools and zeros" % len(verdicts))
sys.exit(1 if bad or wrong else 0)
PY
# the command line, once each way (exit status and a FAIL line)
python3 "$CMP" "$WORK/a" "$WORK/same" --bitwise --steps 3 || fail "compare_runs.py: equal runs refused"
! python3 "$CMP" "$WORK/null_a" "$WORK/null_b" --bitwise > "$WORK/null.txt" \
  || fail "compare_runs.py: two null losses called bitwise equal"
grep -q "^FAIL: .*null_b step 2 loss nan vs nan" "$WORK/null.txt" || { cat "$WORK/null.txt"; fail "no FAIL line"; }
echo PASS
