"""Comparisons of the numbers meshtrain writes (losses, norms), for the tests.

meshtrain writes JSON with cJSON, which prints a NaN or an infinity as
`null`. A comparison of text would then call two failed runs equal (`null`
is `null`), and Python's `None == None` and `abs(x - y) > tol` (False for
NaN) lie the same way. Every comparison here fails on anything that is not
a finite number:

  value(x)              a float; NaN for null, a string, a bool, or nothing
  same_bits(a, b)       both finite and the same IEEE-754 binary64 bits
  rel_err(a, ref)       |a - ref| / |ref| (|a - ref| where ref is 0); NaN
                        unless both are finite
  within(a, ref, rtol)  rel_err(a, ref) <= rtol (so NaN fails)
  worst(a, b)           the larger error; NaN once either is NaN
  records(run)          the metrics.jsonl records of a run directory

Used by compare_runs.py and by the test scripts' inline Python (put
$MT_SRC/tests/scripts on sys.path).
"""
import json
import math
import os
import struct


def value(x):
    """x as a float, or NaN when it is not a number (null, text, bool)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return float("nan")
    return float(x)


def finite(x):
    return math.isfinite(value(x))


def same_bits(a, b):
    """True when a and b are finite numbers with the same float64 bits."""
    a, b = value(a), value(b)
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return struct.pack("<d", a) == struct.pack("<d", b)


def rel_err(a, ref):
    a, ref = value(a), value(ref)
    if not (math.isfinite(a) and math.isfinite(ref)):
        return float("nan")
    d = abs(a - ref)
    return d / abs(ref) if ref != 0 else d


def within(a, ref, rtol):
    return rel_err(a, ref) <= rtol  # NaN fails


def worst(a, b):
    if math.isnan(a) or math.isnan(b):
        return float("nan")
    return max(a, b)


def records(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]
