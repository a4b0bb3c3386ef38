#!/usr/bin/env python3
"""List the tests CTest did not run, with the reason each gave.

list_skipped.py JUNIT.xml [JUNIT.xml ...]   (ctest --output-junit FILE)

A test that cannot run here prints "SKIP: <reason>" and exits 77 (its
SKIP_RETURN_CODE); the reason is the last such line of its output, else
CTest's own note (e.g. "Disabled"). Prints nothing but a count when every
test ran. Always exits 0: skipping is reported, not judged, here.
"""
import os
import sys
import xml.etree.ElementTree as ET


def skipped(path):
    for case in ET.parse(path).getroot().iter("testcase"):
        mark = case.find("skipped")
        if case.get("status") != "notrun" and mark is None:
            continue
        out = case.findtext("system-out") or ""
        reasons = [l[len("SKIP:"):].strip() for l in out.splitlines() if l.startswith("SKIP:")]
        note = mark.get("message", "") if mark is not None else ""
        if reasons:
            yield case.get("name"), reasons[-1]
        else:
            yield case.get("name"), "no reason printed (%s)" % (note or "not run")


def main():
    rows = []
    for path in sys.argv[1:]:
        if not os.path.exists(path):
            print("(no results in %s: that ctest run did not finish)" % path)
            continue
        build = os.path.basename(os.path.dirname(os.path.abspath(path)))
        rows += [(build, name, why) for name, why in skipped(path)]
    print("%d test%s skipped" % (len(rows), "" if len(rows) == 1 else "s") + (":" if rows else ""))
    for build, name, why in rows:
        print("  %s %s: %s" % (build, name, why))


main()
