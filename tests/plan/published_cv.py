#!/usr/bin/env python3
"""plan-published.py --cv loso (leave-one-source-out) on a synthetic table,
with a synthetic price in place of meshplan's:

- rows of one publication share a source (two tables of one arXiv paper;
  two files of one project), rows of others do not;
- a held-out source's rows are never among the rows its efficiencies are
  fitted on, and the fit does not depend on them: making the held-out
  source's runs 10x slower leaves its fold's efficiencies exactly as they
  were and moves only its own cross-validated ratios;
- an outlier source whose stack has no other rows: in-sample its stack's
  fit hides it (error under 5%), cross-validated it is priced with the
  other sources' global fit and stays off (over 50%);
- the fit brings the geometric mean of the ratios to 1 through a price that
  is not linear in the efficiency, and never above the curve (at most 1).

  python3 published_cv.py apps/scripts/plan-published.py"""
import importlib.util
import math
import statistics
import sys


def load(path):
    spec = importlib.util.spec_from_file_location("plan_published", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def row(rid, source, preset, base, share):
    # base: predicted over published at efficiency 1; share: the compute's
    # part of the predicted step (the rest keeps its time as e changes)
    return {"id": rid, "source": source, "preset": preset, "base": base, "share": share}


def ratio_at(r, e):
    """predicted over published at efficiency e: the step's compute takes
    1/e of its time, the rest (communication) stays"""
    return r["base"] / (r["share"] / e + 1 - r["share"])


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def main():
    pp = load(sys.argv[1])
    table = [
        row("a1", "Someone et al. 2021 (arXiv:2101.00001) Table 1", "s1", 1.20, 0.9),
        row("a2", "Someone et al. 2021 (arXiv:2101.00001) Table 2", "s1", 1.25, 0.6),
        row("a3", "Someone et al. 2021 (arXiv: 2101.00001) section 4", "s1", 1.15, 0.8),
        row("b1", "proj-b benchmarks/first.md (commit 1234567)", "s1", 1.22, 0.7),
        row("b2", "proj-b benchmarks/second.md, Table 3", "s1", 1.18, 0.95),
        row("c1", "Outlier 2024: a blog post", "s2", 2.00, 0.9),
        row("c2", "Outlier 2024: the same post, a second run", "s2", 2.10, 0.85),
        row("d1", "Another Project docs/perf.md", "s1", 1.30, 0.5),
    ]
    keys = {r["id"]: pp.source_key(r["source"]) for r in table}
    check(keys["a1"] == keys["a2"] == keys["a3"] == "arXiv:2101.00001", "arXiv rows: %s" % keys)
    check(keys["b1"] == keys["b2"] == "proj-b", "project rows: %s" % keys)
    check(keys["c1"] == keys["c2"] == "Outlier 2024", "colon rows: %s" % keys)
    check(len(set(keys.values())) == 4, "four sources: %s" % sorted(set(keys.values())))

    # the fit: geometric mean 1 through the nonlinear price, at most 1
    e5 = pp.fit_efficiency(table[:5], ratio_at)
    gm = math.exp(statistics.mean(math.log(ratio_at(r, e5)) for r in table[:5]))
    check(abs(gm - 1) < 1e-3, "fit %.6g leaves a geometric mean of %.6g" % (e5, gm))
    # not what scaling the ratios at efficiency 1 would give (the price is not linear in it)
    e_lin = 1 / math.exp(statistics.mean(math.log(r["base"]) for r in table[:5]))
    check(e5 < e_lin - 0.01, "fit %.4g against the linear guess %.4g" % (e5, e_lin))
    slow = [dict(r, base=0.5) for r in table[:2]]
    check(pp.fit_efficiency(slow, ratio_at) == pp.FIT_MAX, "a pessimistic stack fits above 1")

    folds, cv = pp.loso(table, ratio_at)
    check([f[0] for f in folds] == sorted(set(keys.values())), "one fold a source: %s" % folds)
    for src, effs in folds:
        held = {r["id"] for r in table if keys[r["id"]] == src}
        for st, (eff, how, used) in effs.items():
            check(not held & set(used), "fold %s: %s fitted on held-out rows %s" % (src, st, used))
            check(eff and 0 < eff <= pp.FIT_MAX, "fold %s: efficiency %s" % (src, eff))
    check(len(cv) == len(table), "every row priced once")
    # the outlier's stack has no other source: the global fit of the others
    fold_c = dict(folds)["Outlier 2024"]
    check(fold_c["s2"][1] == "global" and set(fold_c["s2"][2]) == {"a1", "a2", "a3", "b1", "b2",
                                                                  "d1"}, "fold c: %s" % fold_c)
    check(dict(folds)["proj-b"]["s1"][1] == "stack", "fold b fits s1 on its own rows elsewhere")

    # perturb a held-out source: its fold's efficiencies must not move
    for src in sorted(set(keys.values())):
        moved = [dict(r, base=r["base"] * 10) if keys[r["id"]] == src else r for r in table]
        f2, cv2 = pp.loso(moved, ratio_at)
        check(dict(f2)[src] == dict(folds)[src],
              "fold %s's fit moved with its own rows: %s vs %s" % (src, dict(f2)[src],
                                                                  dict(folds)[src]))
        for (r, s, _, e1, c1), (_, _, _, e2, c2) in zip(cv, cv2):
            if s == src:
                check(e1 == e2 and abs(c2 / c1 - 10) < 1e-9, "%s: cv %s -> %s" % (r["id"], c1, c2))

    # in-sample hides the outlier, cross-validation does not
    ins = {st: pp.fit_efficiency([r for r in table if r["preset"] == st], ratio_at)
           for st in ("s1", "s2")}
    for r, s, st, e, c in cv:
        if s != "Outlier 2024":
            continue
        in_err = abs(ratio_at(r, ins[st]) - 1)
        check(not (c is None) and abs(c - 1) > 0.5 and in_err < 0.05,
              "%s: CV error %.3f, in-sample %.3f" % (r["id"], abs(c - 1), in_err))
        print("%s: in-sample error %.1f%%, cross-validated %.1f%%" % (r["id"], 100 * in_err,
                                                                      100 * abs(c - 1)))
    # a row that does not price (meshplan refused it) is left out of a fit, not counted as 0
    refusing = table[:5] + [row("x1", "Refused docs/x.md", "s1", float("nan"), 0.5)]
    e_ref = pp.fit_efficiency(refusing, lambda r, e: None if r["id"] == "x1" else ratio_at(r, e))
    check(e_ref == e5, "a refused row changed the fit: %s vs %s" % (e_ref, e5))
    print("PASS")


if __name__ == "__main__":
    main()
