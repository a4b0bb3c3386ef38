"""campaign --emulate: every training point of a campaign run on this
machine under meshtrain's virtual device (train.device = virtual), a few
steps each, as many ranks as the point asks (once per point: its repeats
would give the same virtual times); the predicted results go to
the point's predicted/ directory (summary.json, metrics.jsonl: virtual step
time, tokens/s, MFU, memory), and predicted.csv in the campaign directory
lists them. meshreport puts them beside the measured ones."""
import csv
import json
import os
import shutil
import subprocess

from .common import BadInput, PROG, layout_name, parse_assignment

# the keys the emulation sets over a point's own (they win)
def emulation_sets(hw, steps, out):
    # (a bf16 job emulates its bf16 state: memory and messages as it runs;
    # the data do not change what is priced, and the job's may live on the
    # cluster only: synthetic tokens of the model's vocabulary, any batch)
    return ["train.device=virtual", "train.virtual_hw=%s" % hw,
            "ckpt.mode=none", "train.steps=%d" % steps,
            "train.eval_every=0", "data.train=synthetic", "data.blend=", "data.val=",
            "output.dir=%s" % out]


PROG_TRAIN = "meshtrain"


def planned_name(lay):
    """summary.json's layout of a run that planned its own (parallel.layout =
    auto) named as the campaign names it (layout_name of the planner's text:
    tp,pp,cp,dp,zero,mb,sp,recompute,schedule,v[,ep][,pp_first,pp_last][,slices])"""
    def flag(k):
        return "true" if lay.get(k) else "false"
    settings = [("zero", "", str(lay.get("zero", 0))), ("mb", "", str(lay.get("micro_batch", 0))),
                ("sp", "", flag("sp")), ("recompute", "", flag("recompute")),
                ("schedule", "", str(lay.get("schedule", ""))),
                ("v", "", str(lay.get("virtual_stages", 1)))]
    if lay.get("ep", 1) > 1:
        settings.append(("ep", "", str(lay["ep"])))
    if lay.get("pp_first_layers"):
        settings += [("pp_first", "", str(lay["pp_first_layers"])),
                     ("pp_last", "", str(lay.get("pp_last_layers", 0)))]
    if lay.get("pp_token_slices", 1) > 1:
        settings.append(("slices", "", str(lay["pp_token_slices"])))
    mesh = {k: lay.get(k, 1) for k in ("dp", "tp", "pp", "cp")}
    mesh["settings"] = settings
    return "auto:" + layout_name(mesh)


def launcher():
    exe = os.environ.get("MT_MPIEXEC") or shutil.which("mpirun") or shutil.which("mpiexec")
    if not exe:
        raise BadInput("--emulate: no mpirun on PATH (MT_MPIEXEC names one)")
    return exe


def emulate(plan, bin_dir, hw, steps, max_ranks, timeout_s):
    """runs the points; returns the number that failed"""
    if plan["job"] != "train":
        raise BadInput("--emulate: campaign %s runs meshbench (job = %s): only training points "
                       "are emulated" % (plan["name"], plan["job"]))
    hw = hw or plan["system"].hw
    if not hw:
        raise BadInput("--emulate: system %s names no hardware profile (hw); give --emulate-hw"
                       % plan["system"].name)
    exe = os.path.join(bin_dir, "meshtrain")
    mpirun = launcher()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print("emulating %d points on this machine: train.device = virtual as %s, %d steps each"
          % (len(plan["points"]), hw, steps))
    rows, failed = [], 0
    for p in plan["points"]:
        out = os.path.join(p["_run_dir"], "predicted")
        row = {"point": p["id"], "nodes": p["nodes"], "ranks": p["ranks"], "layout": p["layout_name"],
               "hw": hw, "status": "", "tokens_per_s": "", "step_s": "", "mfu": "", "mem_gib": ""}
        rows.append(row)
        if p["repeat"] > 0:  # the virtual device is deterministic: repeat 0 stands for all
            row["status"] = "as repeat 0"
            continue
        if p["ranks"] > max_ranks:
            row["status"] = "skipped: %d ranks, more than --emulate-max-ranks %d" % (p["ranks"], max_ranks)
            print("  %-28s %s" % (p["id"], row["status"]))
            continue
        sets = [s for s in p["_train_sets"]
                if parse_assignment(s, "--set")[0] not in ("output.dir", "train.resume")]
        sets += emulation_sets(hw, steps, out)
        cmd = [exe, os.path.join(p["_run_dir"], "input.ini")]
        for s in sets:
            cmd += ["--set", s]
        # whether this machine can start the point's ranks (memory, threads,
        # open files, /dev/shm), before minutes of start-up find out
        chk = subprocess.run(cmd + ["--check", "--ranks", str(p["ranks"])], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, universal_newlines=True, env=env)
        if chk.returncode != 0:
            line = (chk.stderr.strip().splitlines() or ["exit %d" % chk.returncode])[-1]
            line = line.replace(PROG_TRAIN + ": error: ", "")
            if "do not fit this machine" in line:
                row["status"] = "skipped: %s" % line
            else:
                failed += 1
                row["status"] = "failed (exit %d): %s" % (chk.returncode, line)
            print("  %-28s %s" % (p["id"], row["status"]))
            continue
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        cmd = [mpirun, "--oversubscribe", "-n", str(p["ranks"])] + cmd
        with open(os.path.join(out, "emulate.log"), "w") as log:
            try:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    timeout=timeout_s).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout after %d s" % timeout_s
        summary = os.path.join(out, "summary.json")
        if rc != 0 or not os.path.exists(summary):
            failed += 1
            with open(os.path.join(out, "emulate.log")) as f:
                err = [l.strip() for l in f if "error:" in l] or ["(see %s/emulate.log)" % out]
            row["status"] = "failed (exit %s): %s" % (rc, err[0])
            print("  %-28s %s" % (p["id"], row["status"]))
            continue
        with open(summary) as f:
            s = json.load(f)
        # the fullest rank: its peak bytes over every category
        mem = max((sum(r.get("mem_peak_bytes", {}).values()) for r in s.get("ranks", [])), default=0)
        lay = s.get("layout") or {}
        if lay.get("planned"):  # parallel.layout = auto: the layout it was planned and run under
            row["layout"] = planned_name(lay)
        row.update(status="done", tokens_per_s="%.6g" % s["tokens_per_s"],
                   step_s="%.6g" % s["mean_step_s"], mfu="%.6g" % s["mfu"],
                   mem_gib="%.4g" % (mem / 2**30) if mem else "")
        print("  %-28s %5d ranks: %12.0f tokens/s, step %.4f s, MFU %.3f%s"
              % (p["id"], p["ranks"], s["tokens_per_s"], s["mean_step_s"], s["mfu"],
                 ", %s GiB on the fullest rank" % row["mem_gib"] if row["mem_gib"] else ""))
    path = os.path.join(plan["out"], "predicted.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["point"])
        w.writeheader()
        w.writerows(rows)
    print("predicted results: %s and points/*/predicted/ (%s %s draws them beside measured ones)"
          % (path, os.path.join(bin_dir, "meshreport"), plan["out"]))
    if failed:
        print("%s: %d of %d emulated points failed (their emulate.log says why)" % (PROG, failed, len(rows)))
    return failed
