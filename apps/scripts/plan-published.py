#!/usr/bin/env python3
"""meshplan against published training runs (inputs/published_runs.csv).

  python3 apps/scripts/plan-published.py [--bin build/bin] [--only ID,...] [--no-search]
         [--search-timeout S] [--out outputs/plan-published.csv]

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
materialized, flat, hierarchical;...) add per-run flags, which override
the preset's values (empty in the table: every run's stack is a preset).
Then, unless --no-search, the search on the row's GPU count: the rank among
its ten fastest of the first layout with the published mesh (tp, pp, cp, ep;
dp the rest), '=' when one of the ten also has every other published field
(ZeRO level, sp, recomputation, micro-batch, schedule, split), '>10' when
none has the mesh, 't/o' when the search takes longer than --search-timeout
seconds (the largest MoE models on hundreds of GPUs).

Prints the table, the median absolute error, the mean signed error by
group and by stack, and writes every row to --out. Nothing here is fitted to the rows:
the profiles are public figures (inputs/hw), the cost model is lib/plan."""
import argparse
import csv
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile

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


def meshplan(binary, r, sets, extra, timeout=None):
    args = [binary, "--hw", r["profile"]] + extra
    for k, v in sets.items():
        args += ["--set", "%s=%s" % (k, v)]
    if r["preset"]:  # the stack's attention, collectives and dtypes (meshplan --stack)
        args += ["--stack", r["preset"]]
    for d in filter(None, r["dtypes"].split(";")):
        args += ["--dtype", d]
    for o in filter(None, r["attention"].split(";")):  # per-run kernels and collectives
        args += ["--collectives" if o in ("flat", "hierarchical") else "--attention", o]
    return subprocess.run(args, capture_output=True, text=True, cwd=SRC, timeout=timeout)


def stack_name(r):
    """the row's stack as priced: its preset, '+' where per-run flags add to it"""
    extra = "+" if r["dtypes"] or r["attention"] else ""
    return (r["preset"] or "meshtrain") + extra


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(SRC, "build", "bin"))
    ap.add_argument("--table", default=os.path.join(SRC, "inputs", "published_runs.csv"))
    ap.add_argument("--only", default="")
    ap.add_argument("--no-search", action="store_true")
    ap.add_argument("--search-timeout", type=float, default=600)
    ap.add_argument("--out", default=os.path.join(SRC, "outputs", "plan-published.csv"))
    a = ap.parse_args()
    binary = os.path.join(a.bin, "meshplan")
    rows = list(csv.DictReader(open(a.table)))
    if a.only:
        keep = set(a.only.split(","))
        rows = [r for r in rows if r["id"] in keep]
    results = []
    print("%-18s %-13s %-18s %5s %3s %3s %4s | %9s %9s %6s | %5s %s" % (
        "run", "group", "stack", "GPUs", "tp", "pp", "dp", "published", "predicted", "ratio", "rank",
        "predicted layout / search"))
    for r in rows:
        pub = published_tokens_per_gpu(r)
        best = None
        for lay in layout_options(r):
            sets = dict(base_sets(r), **lay)
            p = meshplan(binary, r, sets, ["--only"])
            # exit 2 with the figures on stdout: priced, but over meshtrain's own memory
            if p.returncode and not (p.returncode == 2 and p.stdout.lstrip().startswith("{")):
                continue
            d = json.loads(p.stdout.splitlines()[0])
            # a layout that fits beats any that does not; then the faster
            key = (not d["fits"], d["step_s"])
            if best is None or key < (not best[1]["fits"], best[1]["step_s"]):
                best = (lay, d)
        if best is None:
            print("%-18s refused: %s" % (r["id"], p.stderr.strip()))
            continue
        lay, d = best
        gpus = inum(r, "gpus")
        pred = d["tokens_per_s"] / gpus
        ratio = pred * priced_flops_per_token(r) / (pub * true_flops_per_token(r))
        rank, search = "-", ""
        if not a.no_search:
            with tempfile.NamedTemporaryFile(suffix=".json") as tf:
                try:
                    p = meshplan(binary, r, base_sets(r), ["--ranks", str(gpus), "--top", "10",
                                                            "--json", tf.name], a.search_timeout)
                except subprocess.TimeoutExpired:
                    p = None
                if p is None:
                    rank = "t/o"
                elif p.returncode == 0:
                    ranked = json.load(open(tf.name))[:10]
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
    print("\nmedian absolute error %.1f%% over %d runs (goal <= 12%%); worst %.1f%%" % (
        100 * statistics.median(errs), len(results), 100 * max(errs)))
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
