#!/usr/bin/env python3
"""meshplan against published training runs (inputs/published_runs.csv).

  python3 apps/scripts/plan-published.py [--bin build/bin] [--only ID,...] [--no-search]
         [--search-timeout S] [--out outputs/plan-published.csv]
  python3 apps/scripts/plan-published.py --cv loso [--jobs N] [--only ID,...]
         [--out outputs/plan-published-cv.csv]

For each run of the table: the published throughput as tokens per second per
GPU (converted with the FLOP count the source itself used: column `metric`),
meshplan's prediction for the published layout on the row's hardware profile
(a field the source does not give, e.g. the micro-batch, the schedule,
recomputation or a MoE's ep, takes the value meshplan predicts fastest), and
their ratio. Each row is priced in its own architecture: columns arch
(empty: gpt2; llama: RMSNorm, rotary, SwiGLU, grouped-query attention,
untied head), n_kv_head, ffn, and for MoE moe_experts, moe_topk, moe_ffn,
moe_shared, moe_router (empty: meshplan's defaults). Where the real model
still differs from what meshplan prices (multi-head latent attention, an
attention width other than n_embd, layers added for an even pipeline:
true_layers), the ratio compares FLOP rates, each side counted as 6 N + 12 L
T W a token (N its matmul weights a token, W its attention width):
flops_params and attn_width give the real model's where our shape cannot.
Each row's software stack is priced with its meshplan preset (column
preset: `meshplan --stack NAME`, docs/planner.md's table of what each
sets); columns dtypes (CATEGORY=BYTES;...) and attention (block,
materialized, flat, hierarchical, per-node;...) add per-run flags, which
override the preset's values (per-node: meshplan --ep-dispatch per-node,
the runs whose source names DeepEP).
Then, unless --no-search, the search on the row's GPU count: the rank among
its ten fastest of the first layout with the published mesh (tp, pp, cp, ep;
dp the rest), '=' when one of the ten also has every other published field
(ZeRO level, sp, recomputation, micro-batch, schedule, split), '>10' when
none has the mesh, 't/o' when the search takes longer than --search-timeout
seconds (the largest MoE models on hundreds of GPUs).

Prints the table, the median absolute error, the mean signed error by
group and by stack, and writes every row to --out. The profiles are public
figures (inputs/hw), the cost model is lib/plan; one number a stack is
fitted to this table: the presets' compute efficiency (lib/plan/stacks.c),
so the error printed without --cv is in-sample.

--cv loso: leave-one-source-out cross-validation of that fit. Rows are
grouped by publication (source_key: a paper's arXiv id, else its project);
for each source, each stack's efficiency is fitted on the rows of all the
other sources (the geometric mean of predicted over published brought to 1
over the stack's rows there; where the stack has none there, one efficiency
over all of them) and the held-out rows are priced with it by meshplan
(--compute-efficiency; the price is not linear in it). Prints per run the
ratio at efficiency 1, in-sample (the whole-table fit) and cross-validated;
the whole-table fit (the presets' values); the median absolute error and
the signs of the errors, overall and by stack, CV beside in-sample. Only
the published layouts are priced (no search)."""
import argparse
import concurrent.futures
import csv
import itertools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def num(row, key, default=None):
    v = row.get(key, "")
    return default if v == "" else float(v)


def inum(row, key, default=None):
    v = row.get(key, "")
    return default if v == "" else int(v)


def flops_per_token(n_mm, L, T, W):
    """training FLOPs a token: 6 N (forward and backward of the matmuls) and
    12 L T W for attention's QK^T and PV over the whole sequence"""
    return 6.0 * n_mm + 12.0 * L * T * W


def matmul_weights(r, layers):
    """the matmul weights a token uses in the row's shape (as meshtrain
    counts them: q, k, v, proj; the MLP, or the router and the top-k and
    shared experts; the head), with `layers` blocks"""
    C, V, H = inum(r, "n_embd"), inum(r, "vocab"), inum(r, "n_head")
    kv_width = inum(r, "n_kv_head", H) * (C // H)
    mlp_mats = 3 if r["arch"] == "llama" else 2  # SwiGLU: gate, up, down
    E = inum(r, "moe_experts", 0)
    if E:
        mlp = C * E + mlp_mats * C * inum(r, "moe_ffn") * (inum(r, "moe_topk") +
                                                          inum(r, "moe_shared", 0))
    else:
        mlp = mlp_mats * C * inum(r, "ffn", 4 * C)
    return layers * (2 * C * C + 2 * C * kv_width + mlp) + V * C


def priced_flops_per_token(r):
    """training FLOPs a token of the shape meshplan prices"""
    L = inum(r, "n_layer")
    return flops_per_token(matmul_weights(r, L), L, inum(r, "seq_len"), inum(r, "n_embd"))


def true_flops_per_token(r):
    """training FLOPs a token of the source's model: its own depth, and
    flops_params / attn_width where its shape is not one meshplan builds"""
    L = inum(r, "true_layers", inum(r, "n_layer"))
    n_mm = num(r, "flops_params") or matmul_weights(r, L)
    return flops_per_token(n_mm, L, inum(r, "seq_len"), num(r, "attn_width", inum(r, "n_embd")))


def published_tokens_per_gpu(r):
    m, v = r["metric"], float(r["value"])
    L, C, T, V = inum(r, "n_layer"), inum(r, "n_embd"), inum(r, "seq_len"), inum(r, "vocab")
    gpus, gbs = inum(r, "gpus"), inum(r, "global_batch")
    if m == "megatron_tflops":  # Narayanan et al. eq. 3 (with recomputation), a token
        return v * 1e12 / (96.0 * L * C * C * (1 + T / (6.0 * C) + V / (16.0 * L * C)))
    if m == "bigscience_tflops":  # 8 x parameters a token (with recomputation)
        return v * 1e12 / (8.0 * float(r["metric_params"]))
    if m == "step_s":
        return gbs * T / v / gpus
    if m == "tokens_per_gpu":
        return v
    if m == "tflops_6n":
        return v * 1e12 / true_flops_per_token(r)
    sys.exit("%s: unknown metric %s" % (r["id"], m))


# the table's shape columns and the config keys they set (an empty cell: meshplan's default)
SHAPE_KEYS = {"n_layer": "model.n_layer", "n_embd": "model.n_embd", "n_head": "model.n_head",
              "seq_len": "model.seq_len", "vocab": "model.vocab_size", "arch": "model.arch",
              "n_kv_head": "model.n_kv_head", "ffn": "model.ffn_size",
              "moe_experts": "model.moe_experts", "moe_topk": "model.moe_topk",
              "moe_ffn": "model.moe_ffn", "moe_shared": "model.moe_shared",
              "moe_router": "model.moe_router", "global_batch": "train.global_batch"}


def base_sets(r):
    s = {"model.preset": "custom", "model.arch": "gpt2"}
    s.update({key: r[col] for col, key in SHAPE_KEYS.items() if r[col]})
    return s


def published(r, col, accepted):
    """a layout field: the source's value, or every value the run accepts"""
    return [inum(r, col)] if r[col] else accepted


def layout_options(r):
    """every layout the row allows: the published fields fixed, the others
    over the values the run accepts"""
    gpus, tp, pp, cp = inum(r, "gpus"), inum(r, "tp"), inum(r, "pp"), inum(r, "cp", 1)
    dp = gpus // (tp * pp * cp)
    per_rank = inum(r, "global_batch") // dp
    E = inum(r, "moe_experts", 0)
    mbs = published(r, "micro_batch", [b for b in (1, 2, 4, 8) if per_rank % b == 0])
    zeros = published(r, "zero", [0, 1])
    sps = published(r, "sp", [0, 1] if tp > 1 else [0])
    recomputes = published(r, "recompute", [0, 1])
    eps = published(r, "ep", [e for e in range(1, dp + 1) if dp % e == 0 and E % e == 0]
                    if E else [1])
    if pp == 1:
        scheds = [("1f1b", 1)]
    elif r["schedule"]:
        scheds = [(r["schedule"], inum(r, "virtual_stages", 1))]
    else:
        scheds = [("1f1b", 1), ("interleaved", 2), ("interleaved", 4)]
    out = []
    for mb, z, (sched, v), sp, rc, ep in itertools.product(mbs, zeros, scheds, sps, recomputes,
                                                           eps):
        s = {"parallel.tp": tp, "parallel.pp": pp, "parallel.cp": cp, "parallel.dp": dp,
             "parallel.ep": ep, "parallel.zero": z, "train.micro_batch": mb,
             "parallel.sp": "true" if sp else "false",
             "train.recompute": "true" if rc else "false",
             "parallel.schedule": sched, "parallel.virtual_stages": v}
        if r["pp_first"]:
            s["parallel.pp_first_layers"] = r["pp_first"]
            s["parallel.pp_last_layers"] = r["pp_last"]
        out.append(s)
    return out


def meshplan(binary, r, sets, extra, timeout=None, efficiency=None):
    args = [binary, "--hw", r["profile"]] + extra
    for k, v in sets.items():
        args += ["--set", "%s=%s" % (k, v)]
    if r["preset"]:  # the stack's attention, collectives, dtypes, efficiency (meshplan --stack)
        args += ["--stack", r["preset"]]
    if efficiency is not None:  # over the preset's
        args += ["--compute-efficiency", "%.9g" % efficiency]
    for d in filter(None, r["dtypes"].split(";")):
        args += ["--dtype", d]
    for o in filter(None, r["attention"].split(";")):  # per-run kernels and collectives
        flag = ("--collectives" if o in ("flat", "hierarchical") else
                "--ep-dispatch" if o == "per-node" else "--attention")
        args += [flag, o]
    return subprocess.run(args, capture_output=True, text=True, cwd=SRC, timeout=timeout)


def stack_name(r):
    """the row's stack as priced: its preset, '+' where per-run flags add to it"""
    extra = "+" if r["dtypes"] or r["attention"] else ""
    return (r["preset"] or "meshtrain") + extra


def price_row(binary, r, efficiency=None):
    """the published layout's fastest completion (every field the source
    left open, over the values the run accepts): (layout, meshplan's JSON),
    or (None, the last refusal); efficiency: --compute-efficiency (None: the
    preset's)"""
    best, why = None, ""
    for lay in layout_options(r):
        sets = dict(base_sets(r), **lay)
        p = meshplan(binary, r, sets, ["--only"], efficiency=efficiency)
        # exit 2 with the figures on stdout: priced, but over meshtrain's own memory
        if p.returncode and not (p.returncode == 2 and p.stdout.lstrip().startswith("{")):
            why = p.stderr.strip()
            continue
        d = json.loads(p.stdout.splitlines()[0])
        # a layout that fits beats any that does not; then the faster
        key = (not d["fits"], d["step_s"])
        if best is None or key < (not best[1]["fits"], best[1]["step_s"]):
            best = (lay, d)
    return best if best else (None, why)


def ratio_of(r, d):
    """predicted over published, as FLOP rates of the source's own model"""
    pred = d["tokens_per_s"] / inum(r, "gpus")
    return (pred * priced_flops_per_token(r) /
            (published_tokens_per_gpu(r) * true_flops_per_token(r)))


# ---------------------------------------------------------------------------
# leave-one-source-out cross-validation of the stacks' compute efficiency

def source_key(text):
    """the publication a row comes from, so that a paper's or a project's
    rows share one key: its first arXiv id; else the words before the first
    path, or up to the first ':' or ',' ('torchtitan benchmarks/a.md' and
    'torchtitan benchmarks/b.md' are both 'torchtitan')"""
    m = re.search(r"arXiv:\s*(\d{4}\.\d{4,5})", text)
    if m:
        return "arXiv:" + m.group(1)
    words = []
    for w in text.split():
        if "/" in w:
            break
        words.append(w.rstrip(":,;"))
        if w[-1] in ":,;":
            break
    return " ".join(words) or text


def stack_key(r):
    """the preset whose compute efficiency prices the row"""
    return r["preset"] or "meshtrain"


# The fit's bounds: the profiles' matmul curves are the best measured rates
# (MAMF), so no stack's kernels run above them: a fit above 1 would stand for
# something else the model misprices (hidden communication, another
# machine), not for the kernels. meshplan itself accepts (0, 1.5].
FIT_MIN, FIT_MAX = 0.05, 1.0


def fit_efficiency(rows, ratio_at, tol=1e-4, iters=20):
    """the compute efficiency e at which the geometric mean of ratio_at(r, e)
    (predicted over published) over rows is 1, within [FIT_MIN, FIT_MAX]: a
    secant on log e (the price is not linear in e: the collectives and the
    elementwise work keep their rates). None where no row prices."""
    lo, hi = math.log(FIT_MIN), math.log(FIT_MAX)

    def g(x):
        rs = [ratio_at(r, round_eff(math.exp(x))) for r in rows]
        rs = [v for v in rs if v]
        return statistics.mean(math.log(v) for v in rs) if rs else None

    x0, g0 = 0.0, g(0.0)
    if g0 is None:
        return None
    x1 = min(hi, max(lo, x0 - g0))  # a price all compute would move by exactly -g0
    for _ in range(iters):
        if abs(g0) < tol or x1 == x0:
            break
        g1 = g(x1)
        if abs(g1) < tol:
            x0 = x1
            break
        slope = (g1 - g0) / (x1 - x0)
        x0, g0 = x1, g1
        x1 = min(hi, max(lo, x1 - g1 / (slope if slope > 0.05 else 1.0)))
    return round_eff(math.exp(x0))


def round_eff(e):
    """the efficiency as meshplan is given it (so that a memo of prices hits)"""
    return float("%.6g" % e)


def loso(rows, ratio_at, fit=None):
    """Leave-one-source-out: for each source S, each stack's efficiency
    fitted on the rows of every other source (the stack's own rows there, or
    where it has none, one efficiency over all of them), and S's rows priced
    with it. Returns (fold list, per-row list): a fold is (source, {stack:
    (efficiency, 'stack' or 'global', ids fitted on)}); a row (row, source,
    stack, efficiency, CV ratio or None)."""
    fit = fit or fit_efficiency
    sources = sorted(set(source_key(r["source"]) for r in rows))
    folds, out = [], []
    for src in sources:
        held = [r for r in rows if source_key(r["source"]) == src]
        train = [r for r in rows if source_key(r["source"]) != src]
        effs, pooled = {}, None
        for st in sorted(set(stack_key(r) for r in held)):
            own = [r for r in train if stack_key(r) == st]
            used, how = (own, "stack") if own else (train, "global")
            if how == "global":
                pooled = pooled if pooled is not None else fit(train, ratio_at)
                e = pooled
            else:
                e = fit(own, ratio_at)
            effs[st] = (e, how, [r["id"] for r in used])
        folds.append((src, effs))
        for r in held:
            e = effs[stack_key(r)][0]
            out.append((r, src, stack_key(r), e, ratio_at(r, e) if e else None))
    return folds, out


def median_abs(ratios):
    return statistics.median(abs(x - 1) for x in ratios) if ratios else float("nan")


def cv_report(binary, rows, jobs):
    """prints the LOSO table and returns its rows for --out"""
    memo, lock = {}, threading.Lock()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs))

    def ratio_at(r, e):
        k = (r["id"], e)
        with lock:
            if k in memo:
                return memo[k]
        lay, d = price_row(binary, r, e)
        v = ratio_of(r, d) if lay else None
        with lock:
            memo[k] = v
        return v

    def prefetch(pairs):  # the prices a fit or a report asks for, several meshplans at once
        list(pool.map(lambda p: ratio_at(*p), pairs))

    def fit(rs, ra):
        def batched(r, e):  # a fit asks for every row at one efficiency: price them together
            with lock:
                new = (r["id"], e) not in memo
            if new:
                prefetch([(x, e) for x in rs])
            return ra(r, e)
        return fit_efficiency(rs, batched)

    prefetch([(r, 1.0) for r in rows])
    stacks = sorted(set(stack_key(r) for r in rows))
    whole = {st: fit([r for r in rows if stack_key(r) == st], ratio_at) for st in stacks}
    prefetch([(r, whole[stack_key(r)]) for r in rows])
    folds, cv = loso(rows, ratio_at, fit)
    prefetch([(r, e) for r, _, _, e, _ in cv if e])
    pool.shutdown()

    print("Leave-one-source-out cross-validation over %d sources (each held-out source priced "
          "with efficiencies fitted on the other sources' rows). Predicted over published at "
          "efficiency 1, in-sample (the whole table's fit), and cross-validated (the fold's "
          "efficiency, fitted on the stack's rows of the other sources or, where it has none, "
          "on all of them):" % len(folds))
    print("%-18s %-24s %-18s %8s %9s | %7s %-6s %8s" % (
        "run", "source", "stack", "e = 1", "in-sample", "CV e", "fit on", "CV"))
    results = []
    for r, src, st, e, cvr in cv:
        r1, ins = ratio_at(r, 1.0), ratio_at(r, whole[st])
        how = dict(folds)[src][st][1]
        print("%-18s %-24s %-18s %8s %9s | %7s %-6s %8s" % (
            r["id"], src[:24], st, "%.3f" % r1 if r1 else "-", "%.3f" % ins if ins else "-",
            "%.4g" % e if e else "-", how, "%.3f" % cvr if cvr else "-"))
        results.append(dict(id=r["id"], source=src, stack=st, ratio_eff1=r1,
                            efficiency_in_sample=whole[st], ratio_in_sample=ins,
                            efficiency_cv=e, fit_on=how, ratio_cv=cvr))
    print("\ncompute efficiency fitted on the whole table (the presets' values in "
          "lib/plan/stacks.c):")
    for st in stacks:
        n = sum(1 for r in rows if stack_key(r) == st)
        print("  %-18s %.4g (%d runs)" % (st, whole[st], n))
    every = [x for x in results if x["ratio_cv"] and x["ratio_in_sample"] and x["ratio_eff1"]]

    def line(label, key, goal=""):
        rs = [x[key] for x in every]
        pos, neg = sum(1 for v in rs if v > 1), sum(1 for v in rs if v < 1)
        print("  %-40s median absolute error %5.1f%%, worst %5.1f%%, %2d over / %2d under%s" % (
            label, 100 * median_abs(rs), 100 * max(abs(v - 1) for v in rs), pos, neg, goal))
    print("\n%d runs:" % len(every))
    line("LOSO cross-validated", "ratio_cv", " (goal <= 12%, both signs)")
    line("in-sample (fit on the whole table)", "ratio_in_sample")
    line("efficiency 1 (no fit)", "ratio_eff1")
    # one paper holds over half the runs: each source counted once as well
    per_src = {}
    for x in every:
        per_src.setdefault(x["source"], []).append(x["ratio_cv"])
    print("  %-40s median over the %d sources of each one's LOSO median absolute error %.1f%%" % (
        "each source once", len(per_src),
        100 * statistics.median(median_abs(v) for v in per_src.values())))
    print("by stack (LOSO; in-sample beside it; goal: no stack over 20%):")
    for st in stacks:
        xs = [x for x in every if x["stack"] == st]
        cvs = [x["ratio_cv"] for x in xs]
        print("  %-18s %2d runs: CV median absolute %5.1f%% (median signed %+6.1f%%, %d over / %d "
              "under); in-sample %5.1f%%" % (
                  st, len(xs), 100 * median_abs(cvs), 100 * (statistics.median(cvs) - 1),
                  sum(1 for v in cvs if v > 1), sum(1 for v in cvs if v < 1),
                  100 * median_abs([x["ratio_in_sample"] for x in xs])))
    return results


def same_mesh(row, r):
    """a search row (meshplan JSON) splits the GPUs as the source did: tp, pp,
    cp, ep as published (dp the rest); the options a stack of its time had or
    not (ZeRO, sp, recompute, schedules) aside"""
    return all(row[k] == inum(r, k) for k in ("tp", "pp", "cp", "ep") if r[k])


def matches(row, r):
    """a search row (meshplan JSON) has every field the source published"""
    want = {"tp": inum(r, "tp"), "pp": inum(r, "pp"), "cp": inum(r, "cp"),
            "ep": inum(r, "ep"), "zero": inum(r, "zero"), "micro_batch": inum(r, "micro_batch"),
            "sp": inum(r, "sp"), "recompute": inum(r, "recompute"),
            "virtual_stages": inum(r, "virtual_stages"), "pp_first_layers": inum(r, "pp_first")}
    if r["schedule"] and row["schedule"] != r["schedule"]:
        return False
    return all(v is None or row[k] == v for k, v in want.items())


def table_rows(text):
    """the ranked rows of meshplan's table (stdout) as its JSON names their
    fields: the search prunes to its top K there, where --json would price
    every layout that may fit"""
    out, seen = [], False
    for line in text.splitlines():
        f = line.split()
        if f[:2] == ["rank", "tp"]:
            seen = True
            continue
        if not seen or len(f) < 12 or not f[0].isdigit():
            continue
        sched, _, v = f[8].split("+")[0].partition("/")  # (+sK: K token slices)
        first = f[9].split("..")[0] if ".." in f[9] else "0"
        out.append({"tp": int(f[1]), "pp": int(f[2]), "cp": int(f[3]), "ep": int(f[4]),
                    "zero": int(f[6]), "micro_batch": int(f[7]),
                    "schedule": "1f1b" if sched == "-" else sched,
                    "virtual_stages": int(v or 1), "pp_first_layers": int(first),
                    "sp": int(f[10]), "recompute": int(f[11])})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(SRC, "build", "bin"))
    ap.add_argument("--table", default=os.path.join(SRC, "inputs", "published_runs.csv"))
    ap.add_argument("--only", default="")
    ap.add_argument("--no-search", action="store_true")
    ap.add_argument("--search-timeout", type=float, default=600)
    ap.add_argument("--out", help="every row as CSV (default outputs/plan-published.csv, "
                    "under --cv outputs/plan-published-cv.csv)")
    ap.add_argument("--cv", choices=["loso"], help="leave-one-source-out cross-validation of the "
                    "stacks' compute efficiency (the published layouts priced alone: no search)")
    ap.add_argument("--jobs", type=int, default=2, help="meshplans at once under --cv")
    a = ap.parse_args()
    a.out = a.out or os.path.join(SRC, "outputs", "plan-published%s.csv" % ("-cv" if a.cv else ""))
    binary = os.path.join(a.bin, "meshplan")
    rows = list(csv.DictReader(open(a.table)))
    if a.only:
        keep = set(a.only.split(","))
        rows = [r for r in rows if r["id"] in keep]
    if a.cv:
        results = cv_report(binary, rows, a.jobs)
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(results[0].keys()))
            w.writeheader()
            w.writerows(results)
        print("rows written to %s" % a.out)
        return
    results = []
    print("%-18s %-13s %-18s %5s %3s %3s %4s | %9s %9s %6s | %5s %s" % (
        "run", "group", "stack", "GPUs", "tp", "pp", "dp", "published", "predicted", "ratio", "rank",
        "predicted layout / search"))
    for r in rows:
        pub = published_tokens_per_gpu(r)
        lay, d = price_row(binary, r)
        if lay is None:
            print("%-18s refused: %s" % (r["id"], d))
            continue
        gpus = inum(r, "gpus")
        pred = d["tokens_per_s"] / gpus
        ratio = ratio_of(r, d)
        rank, search = "-", ""
        if not a.no_search:
            try:
                p = meshplan(binary, r, base_sets(r), ["--ranks", str(gpus), "--top", "10"],
                             a.search_timeout)
            except subprocess.TimeoutExpired:
                p = None
            if p is None:
                rank = "t/o"
            elif p.returncode == 0:
                ranked = table_rows(p.stdout)[:10]
                hit = [i for i, x in enumerate(ranked) if same_mesh(x, r)]
                exact = [i for i, x in enumerate(ranked) if matches(x, r)]
                rank = str(hit[0] + 1) if hit else ">10"
                if exact:
                    rank += "=" # every published field too
                head = [l for l in p.stdout.splitlines() if l.startswith("# ") and "enumerated" in l]
                search = head[0].split("(")[-1].rstrip(")") if head else ""
            else:
                rank = "err"
                search = p.stderr.strip()[:60]
        sched = lay["parallel.schedule"] + ("/%d" % lay["parallel.virtual_stages"]
                                            if lay["parallel.virtual_stages"] > 1 else "")
        desc = "mb %d zero %d%s%s %s mem %.0f GiB%s" % (
            lay["train.micro_batch"], lay["parallel.zero"],
            " ep %d" % lay["parallel.ep"] if lay["parallel.ep"] > 1 else "",
            " recompute" if lay["train.recompute"] == "true" else "", sched,
            d["mem_bytes"] / 2**30, "" if d["fits"] else " (!)")
        print("%-18s %-13s %-18s %5d %3d %3d %4d | %9.1f %9.1f %6.2f | %5s %s; %s" % (
            r["id"], r["group"], stack_name(r), gpus, lay["parallel.tp"], lay["parallel.pp"], lay["parallel.dp"],
            pub, pred, ratio, rank, desc, search))
        sys.stdout.flush()
        st = d["step_s"]
        results.append(dict(id=r["id"], group=r["group"], stack=stack_name(r), chosen=r["chosen"],
                            gpus=gpus,
                            published=pub, predicted=pred, ratio=ratio, rank=rank,
                            fits=d["fits"], mem_gib=d["mem_bytes"] / 2**30,
                            **{k: d[k] / st for k in ("compute_s", "tp_s", "cp_s", "ep_s",
                                                       "pp_bubble_s", "pp_p2p_s",
                                                       "dp_exposed_s")}))
    if not results:
        return
    errs = [abs(x["ratio"] - 1) for x in results]
    print("\nmedian absolute error %.1f%% over %d runs, in-sample (the presets' compute "
          "efficiencies are fitted on this table; --cv loso for the figure that counts, goal <= "
          "12%%); worst %.1f%%" % (100 * statistics.median(errs), len(results), 100 * max(errs)))
    groups = sorted(set(x["group"] for x in results))
    for g in groups:
        rs = [x["ratio"] - 1 for x in results if x["group"] == g]
        print("  %-14s %2d runs: mean signed error %+6.1f%%, median %+6.1f%% (goal: within 20%%)" % (
            g, len(rs), 100 * statistics.mean(rs), 100 * statistics.median(rs)))
    for st in sorted(set(x["stack"] for x in results)):
        rs = [x["ratio"] - 1 for x in results if x["stack"] == st]
        print("  stack %-18s %2d runs: mean signed error %+6.1f%%, median %+6.1f%%, median absolute "
              "%5.1f%%" % (st, len(rs), 100 * statistics.mean(rs), 100 * statistics.median(rs),
                           100 * statistics.median(abs(x) for x in rs)))
    chosen = [x for x in results if x["chosen"] == "1" and x["rank"] not in ("-", "err", "t/o")]
    if chosen:
        top = sum(1 for x in chosen if x["rank"] != ">10")
        print("published meshes (the authors' choices) in the search's top 10: %d of %d" % (
            top, len(chosen)))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(results[0].keys()))
        w.writeheader()
        w.writerows(results)
    print("rows written to %s" % a.out)


if __name__ == "__main__":
    main()
