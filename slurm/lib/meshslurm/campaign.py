"""`meshslurm.py campaign`: a sweep spec -> point directories, submit.sh
(a chain or all at once) and the report job."""
import datetime
import json
import os
import shutil
import subprocess
import sys

from .common import (DP_ONLY, EXIT_RUNTIME, SRC, BadInput, absdir, job_layout, layout_name,
                     parse_assignment, parse_int_list, parse_layout, q, read_ini,
                     write_executable)
from .checks import Checker
from .emulate import emulate
from .render import data_values, say_data, train_sets, warn_if_home, write_run_dir
from .script import bench_body, render_script, resources, train_body
from .system import System

# ---------------------------------------------------------------------------
# campaigns

def read_sweep(path):
    if not os.path.isfile(path):
        raise BadInput("%s: cannot open sweep spec" % path)
    cp = read_ini(path, "campaign", ("#", ";"))
    c = dict(cp.items("campaign"))
    known = {"name", "system", "job", "scaling", "nodes", "ranks", "tasks_per_node", "layouts",
             "repeats", "steps", "time", "config", "submit", "account", "qos", "bench", "env"}
    for k in c:
        if k not in known:
            raise BadInput("%s: [campaign] unknown key '%s' (%s)" % (path, k, ", ".join(sorted(known))))
    sets = [("%s=%s" % (k, v)) for k, v in cp.items("set")] if cp.has_section("set") else []
    return c, sets


def plan_campaign(path, out, account_arg=None, profile_set=(), extra_sets=()):
    """The points of a sweep spec; extra_sets (campaign --set) come after its
    [set] section and its steps key, and win"""
    c, user_sets = read_sweep(path)
    if extra_sets and c.get("job", "train") != "train":
        raise BadInput("--set: campaign %s runs meshbench (job = %s), which has no meshtrain keys"
                       % (path, c.get("job")))
    name = c.get("name") or os.path.splitext(os.path.basename(path))[0]
    system = System(c.get("system", "local"), profile_set)
    job = c.get("job", "train")
    if job not in ("train", "bench"):
        raise BadInput("%s: job = %s (train or bench)" % (path, job))
    scaling = c.get("scaling", "strong")
    if scaling not in ("strong", "weak"):
        raise BadInput("%s: scaling = %s (strong or weak)" % (path, scaling))
    if ("nodes" in c) == ("ranks" in c):
        raise BadInput("%s: give exactly one of nodes = ... or ranks = ..." % path)
    tpn = int(c["tasks_per_node"]) if c.get("tasks_per_node") else None
    sizes = parse_int_list(c.get("nodes") or c.get("ranks"), "%s: %s" % (path, "nodes" if "nodes" in c else "ranks"))
    repeats = parse_int_list(c.get("repeats", "1"), path + ": repeats")[0]
    given = c.get("layouts")
    layouts = [s.strip() for s in (given or DP_ONLY).split(";") if s.strip()] or [DP_ONLY]
    submit = c.get("submit", "chain")
    if submit not in ("chain", "parallel"):
        raise BadInput("%s: submit = %s (chain: one point after another; parallel)" % (path, submit))
    account = account_arg or c.get("account", "")
    config = c.get("config", "")
    if config and not os.path.isabs(config):
        config = os.path.join(SRC, config)
    if config and not os.path.isfile(config):
        raise BadInput("%s: config = %s: cannot open" % (path, c["config"]))
    env_kv = [parse_assignment(s, path + ": env") for s in c.get("env", "").split() if s]
    benches = [b.strip() for b in c.get("bench", "allreduce").split(";") if b.strip()]
    base_sets = list(user_sets)
    if c.get("steps"):
        base_sets.append("train.steps=%s" % c["steps"])
    base_sets += list(extra_sets)
    # weak scaling keeps the batch per rank: the global batch grows with ranks
    gb = None
    for s in base_sets:
        k, v = parse_assignment(s, "[set]")
        if k == "train.global_batch":
            gb = int(v)
    if scaling == "weak" and job == "train" and gb is None:
        raise BadInput("%s: weak scaling needs train.global_batch in [set] (the batch of the smallest point)" % path)

    out = absdir(out or os.path.join(system.default_output_root(), "campaigns", name))
    points = []
    res_list = []
    for size in sizes:
        res = resources(system, size if "nodes" in c else None, size if "ranks" in c else None,
                        tpn, None, None, c.get("time"), c.get("qos"), account, None)
        res_list.append(res)
    ranks0 = min(r["ranks"] for r in res_list)
    for res in res_list:
        for lay_text in layouts:
            if job == "train":
                lay = job_layout(lay_text if given else None, res["ranks"], base_sets,
                                 "%s: layouts entry" % path)
            else:
                lay = parse_layout(lay_text, res["ranks"], "%s: layouts entry" % path)
            for rep in range(repeats):
                pid = "n%d-r%d-%s-rep%d" % (res["nodes"], res["ranks"], layout_name(lay), rep)
                run_dir = os.path.join(out, "points", pid)
                sets = [s for s in base_sets]
                point_gb = gb
                if scaling == "weak" and gb is not None:
                    if (gb * res["ranks"]) % ranks0:
                        raise BadInput("%s: weak scaling: global_batch %d x %d/%d ranks is not an integer"
                                       % (path, gb, res["ranks"], ranks0))
                    point_gb = gb * res["ranks"] // ranks0
                    sets = [s for s in sets if not s.startswith("train.global_batch=")]
                    sets.append("train.global_batch=%d" % point_gb)
                points.append({"id": pid, "dir": os.path.join("points", pid), "job": job,
                               "system": system.name, "nodes": res["nodes"], "ranks": res["ranks"],
                               "tasks_per_node": res["tasks_per_node"], "layout": lay,
                               "layout_name": layout_name(lay), "repeat": rep, "qos": res["qos"],
                               "global_batch": point_gb, "scaling": scaling, "_res": res,
                               "_run_dir": run_dir, "_sets": sets})
    return {"name": name, "sweep": absdir(path), "system": system, "job": job, "scaling": scaling,
            "submit": submit, "out": out, "points": points, "config": config, "env": env_kv,
            "benches": benches, "account": account, "time": c.get("time"), "qos": c.get("qos")}


def qos_summary(plan):
    """One line: which QoS the points run under, and why"""
    by_qos = {}
    for p in plan["points"]:
        by_qos.setdefault(p["qos"] or "-", []).append(p["nodes"])
    if plan["qos"]:
        return "QoS: %s for every point (qos = %s in the sweep)" % (plan["qos"], plan["qos"])
    if list(by_qos) == ["-"]:
        return "QoS: none (the profile has no QoS table; the partition's default applies)"
    parts = ["%s for %s" % (q, node_range(n)) for q, n in by_qos.items()]
    if len(by_qos) == 1:
        return ("QoS: %s for every point (chosen by size and walltime from the profile's table; "
                "qos = NAME under [campaign] pins one)" % list(by_qos)[0])
    return ("QoS: %d of them, chosen per point by size and walltime from the profile's table: %s. "
            "Their queues and limits differ; qos = NAME under [campaign] pins one for every point "
            "(it must allow the largest)" % (len(by_qos), "; ".join(parts)))


def node_range(nodes):
    lo, hi = min(nodes), max(nodes)
    return "%d node%s" % (lo, "" if lo == 1 else "s") if lo == hi else "%d-%d nodes" % (lo, hi)


def submit_script(plan):
    chain = plan["submit"] == "chain"
    lines = [
        "#!/bin/bash",
        "# Submits campaign '%s': %d points (%s), then the report job after all of them"
        % (plan["name"], len(plan["points"]), "one after another" if chain else "all at once"),
        "# (afterany: it runs even when points fail, and lists them).",
        "#   bash submit.sh            submit; job ids go to jobs.txt",
        "#   bash submit.sh --dry-run  print the sbatch commands, submit nothing",
        "set -euo pipefail",
        "CAMPAIGN=%s" % q(plan["out"]),
        "DRY=0",
        "[ \"${1:-}\" = --dry-run ] && DRY=1",
        "n=0",
        "# submit NAME [sbatch options] SCRIPT: prints the job id",
        "submit() {",
        "  local name=$1; shift",
        "  if [ \"$DRY\" = 1 ]; then echo \"sbatch --parsable $*\" >&2; echo \"<$name>\"; return; fi",
        "  local out; out=$(sbatch --parsable \"$@\") || { echo \"submit: sbatch failed for $name\" >&2; exit 3; }",
        "  echo \"${out%%;*}\"",
        "}",
        "ids=()",
        "prev=\"\"",
        "[ \"$DRY\" = 1 ] || : > \"$CAMPAIGN/jobs.txt\"",
    ]
    for p in plan["points"]:
        dep = "${prev:+--dependency=afterany:$prev} " if chain else ""
        lines.append("id=$(submit %s %s\"$CAMPAIGN/%s/job.sh\")" % (q(p["id"]), dep, p["dir"]))
        lines.append("ids+=(\"$id\"); prev=$id")
        lines.append("[ \"$DRY\" = 1 ] || echo \"$id %s\" >> \"$CAMPAIGN/jobs.txt\"" % p["id"])
    lines += [
        "deps=$(IFS=:; echo \"${ids[*]}\")",
        "rid=$(submit report --dependency=afterany:$deps \"$CAMPAIGN/report.sh\")",
        "[ \"$DRY\" = 1 ] || echo \"$rid report\" >> \"$CAMPAIGN/jobs.txt\"",
        "echo \"campaign %s: %d point jobs (${ids[*]}), report job $rid\"" % (plan["name"], len(plan["points"])),
        "echo \"report: $CAMPAIGN/report/report.md\"",
    ]
    return "\n".join(lines) + "\n"


def report_script(plan, bin_dir, workdir):
    """The report job: one task, no GPU, after all points. With the profile's
    report_partition (LEONARDO: lrd_all_serial, the free post-processing
    partition) it runs there under report_qos (none: the partition's default)
    and without the compute partition's --mem."""
    system = plan["system"]
    if system.report_partition:
        res = resources(system, 1, 1, 1, 0, 1, "00:10:00", "-", plan["account"], None)
        res.update(partition=system.report_partition, qos=system.report_qos or None, mem_mb=0)
    else:
        res = resources(system, 1, 1, 1, 0, 1, "00:10:00", None, plan["account"], None)
    # meshreport prints the table once (report.md holds it too)
    body = "run_step \"$MT_BIN/meshreport\" \"$CAMPAIGN\" --out \"$CAMPAIGN/report\""
    text = render_script("report", system, res, os.path.join(plan["out"], "report"), body,
                         "slurm/meshslurm.py campaign " + q(plan["sweep"]), workdir, bin_dir,
                         (), 0, "mt-report-" + plan["name"], requeue=False, exclusive=False,
                         report=True)
    return text.replace("RUN_DIR=", "CAMPAIGN=%s\nRUN_DIR=" % q(plan["out"]), 1)


def cmd_campaign(a):
    if a.emulate and a.dry_run:
        raise BadInput("--emulate writes predicted results into the campaign's points: not with --dry-run")
    for opt, v in (("--emulate-steps", a.emulate_steps), ("--emulate-max-ranks", a.emulate_max_ranks),
                   ("--emulate-timeout", a.emulate_timeout)):
        if v < 1:
            raise BadInput("%s %d: 1 or more" % (opt, v))
    plan = plan_campaign(a.sweep, a.out, a.account, [parse_assignment(s, "--profile-set") for s in a.profile_set],
                         a.set)
    system = plan["system"]
    bin_dir = absdir(a.bin or os.path.join(SRC, "build", "bin"))
    workdir = absdir(a.workdir or SRC)
    checker = Checker(bin_dir, workdir)
    # every point's meshtrain configuration and data, checked before anything
    # is written (points that differ only in their run directory are checked once)
    checked = {}  # configuration -> the layout its check planned (parallel.layout = auto)
    for p in plan["points"]:
        if plan["job"] != "train":
            continue
        p["_data"] = data_values(checker, plan["config"], p["_sets"])
        p["_train_sets"] = train_sets(p["_run_dir"], p["layout"], system, p["_sets"], p["_data"])
        key = (p["ranks"], tuple(x for x in p["_train_sets"] if not x.startswith("output.dir=")))
        if not a.no_check and key not in checked:
            checker.train(plan["config"], p["_train_sets"], p["_res"], p["layout"], "point %s" % p["id"],
                          system)
            checked[key] = p["layout"].get("planned")
        if key in checked and p["layout"].get("planner"):
            p["layout"]["planned"] = checked[key]
        p["layout_name"] = layout_name(p["layout"])  # the planned layout, where one was
    print("campaign %s: %s scaling, system %s, %d points, submit %s, into %s"
          % (plan["name"], plan["scaling"], system.name, len(plan["points"]), plan["submit"], plan["out"]))
    if checked:
        print("meshtrain --check: %d distinct configurations OK (and their data files)" % len(checked))
    if plan["job"] == "train" and plan["points"]:
        say_data(system, plan["points"][0]["_data"])
    print("  %-28s %5s %5s %-16s %-12s %s" % ("point", "nodes", "ranks", "qos", "global_batch", "layout"))
    for p in plan["points"]:
        print("  %-28s %5d %5d %-16s %-12s %s" % (p["id"], p["nodes"], p["ranks"], p["qos"] or "-",
                                                 p["global_batch"] or "-", p["layout_name"]))
    if any(p["layout"].get("planner") for p in plan["points"]):
        print("layout auto:...: parallel.layout = auto, the layout meshtrain --check planned for the "
              "point's ranks (the job plans again at start, from the same inputs)")
    print(qos_summary(plan))
    if a.dry_run:
        print("dry run: nothing written. Would submit:")
        prev = None
        for i, p in enumerate(plan["points"]):
            dep = " --dependency=afterany:<%s>" % prev if prev and plan["submit"] == "chain" else ""
            print("  sbatch --parsable%s %s/%s/job.sh" % (dep, plan["out"], p["dir"]))
            prev = p["id"]
        print("  sbatch --parsable --dependency=afterany:%s %s/report.sh"
              % (":".join("<%s>" % p["id"] for p in plan["points"]), plan["out"]))
        return 0
    if os.path.exists(os.path.join(plan["out"], "manifest.json")) and not a.force:
        raise BadInput("%s already holds a campaign; pass --force to overwrite it" % plan["out"])
    warn_if_home(system, plan["out"])
    os.makedirs(plan["out"], exist_ok=True)
    cmdline = " ".join(q(x) for x in ["slurm/meshslurm.py"] + sys.argv[1:])
    for p in plan["points"]:
        if plan["job"] == "train":
            body = train_body(p["_run_dir"], p["_train_sets"])
        else:
            body = bench_body(plan["benches"])
        script = render_script(plan["job"], system, p["_res"], p["_run_dir"], body, cmdline, workdir,
                               bin_dir, plan["env"], a.max_restarts, "mt-%s-%s" % (plan["name"], p["id"]),
                               max_failures=a.max_failures)
        write_run_dir(p["_run_dir"], script, plan["config"] if plan["job"] == "train" else None,
                      {k: v for k, v in p.items() if not k.startswith("_")})
    # Slurm opens --output before the script runs: the directory must exist
    os.makedirs(os.path.join(plan["out"], "report"), exist_ok=True)
    write_executable(os.path.join(plan["out"], "report.sh"), report_script(plan, bin_dir, workdir))
    write_executable(os.path.join(plan["out"], "submit.sh"), submit_script(plan))
    shutil.copyfile(plan["sweep"], os.path.join(plan["out"], "sweep.ini"))
    manifest = {"name": plan["name"], "system": system.name, "job": plan["job"],
                "scaling": plan["scaling"], "submit": plan["submit"], "sweep": plan["sweep"],
                "created": datetime.datetime.now().isoformat(timespec="seconds"),
                "points": [{k: v for k, v in p.items() if not k.startswith("_")} for p in plan["points"]]}
    with open(os.path.join(plan["out"], "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print("wrote %s/{manifest.json,submit.sh,report.sh,points/*/job.sh}" % plan["out"])
    if a.emulate and emulate(plan, bin_dir, a.emulate_hw, a.emulate_steps, a.emulate_max_ranks,
                             a.emulate_timeout) and not a.submit:
        return EXIT_RUNTIME
    if a.submit:
        r = subprocess.run(["bash", os.path.join(plan["out"], "submit.sh")])
        return 0 if r.returncode == 0 else EXIT_RUNTIME
    print("submit with: bash %s/submit.sh   (--dry-run to see the sbatch commands)" % plan["out"])
    return 0


