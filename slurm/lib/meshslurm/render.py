"""`meshslurm.py render`: one job into a run directory, checked first."""
import datetime
import json
import os
import re
import shutil
import sys

from .common import (PROG, SRC, BadInput, absdir, job_layout, layout_name, parse_assignment,
                     parse_layout, q, write_executable)
from .checks import Checker, config_values
from .script import bench_body, convert_body, render_script, resources, train_body
from .system import System

DATA_KEYS = ("data.train", "data.val")
AXES = ("dp", "tp", "pp", "cp")


def train_sets(run_dir, lay, system, user_sets, data=None):
    """meshtrain's --set list of a train job: the generator's keys (output
    directory, mesh, layout settings, the profile's hardware and device),
    then the user's, then the data files moved under the profile's data_root
    (data: their values as configured; relative paths only)."""
    keys = {k for k, _ in (parse_assignment(s, "--set") for s in user_sets)}
    sets = ["output.dir=%s" % run_dir]
    for axis in ("dp", "tp", "pp", "cp"):
        if not lay.get("planner"):  # parallel.layout = auto: meshtrain plans them at start
            sets.append("parallel.%s=%d" % (axis, lay[axis]))
    layout_keys = set()
    for _, key, v in lay.get("settings", []):
        sets.append("%s=%s" % (key, v))
        layout_keys.add(key)
    if "metrics.hw" not in keys and system.hw:
        sets.append("metrics.hw=%s" % system.hw)
    # the profile's device (a GPU system: cuda, one GPU per task) unless --set says otherwise
    if "train.device" not in keys and system.device:
        sets.append("train.device=%s" % system.device)
    if "train.precision" not in keys and system.precision:
        sets.append("train.precision=%s" % system.precision)
    for s in user_sets:
        k, _ = parse_assignment(s, "--set")
        if k in ("output.dir",) or k.startswith("parallel.") and k[9:] in AXES or k in layout_keys:
            raise BadInput("--set %s: set by the generator (use --run-dir / --layout)" % k)
        if not re.fullmatch(r"[a-z_]+\.[a-z_0-9]+", k):
            raise BadInput("--set %s: expected section.key=value" % s)
        sets.append(s)
    for key, path in moved_data(system, data):
        sets.append("%s=%s" % (key, path))
    return sets


def moved_data(system, data):
    """(key, path under data_root) of each relative data file of data"""
    moved = [(k, data[k]) for k in DATA_KEYS
             if system.data_root and data and data.get(k) and not os.path.isabs(data[k])]
    if not moved:
        return []
    root = system.expand_root("data_root", system.data_root)
    return [(k, os.path.join(root, v)) for k, v in moved]


def data_values(checker, config, user_sets):
    """data.train and data.val as configured: the --set list, the INI file,
    else meshtrain's defaults (asked only then, and only when it is there)"""
    vals = config_values(config, user_sets, DATA_KEYS, {})
    exe = os.path.join(checker.bin_dir, "meshtrain")
    if not vals["data.train"] and os.access(exe, os.X_OK):
        vals = config_values(config, user_sets, DATA_KEYS, checker.defaults(exe, "meshtrain --help"))
    return vals


def say_data(system, data):
    """Where the job's data comes from, when the profile moved it (stderr:
    --stdout prints the script alone)"""
    for key, path in moved_data(system, data):
        print("%s: %s = %s, taken under the profile's data_root (%s): %s"
              % (PROG, key, data[key], system.data_root, path), file=sys.stderr)


def warn_if_home(system, path):
    """Run directories under $HOME on a machine with an output_root: say so once"""
    home = os.environ.get("HOME", "")
    if system.output_root and home and home != "/" and \
            (path + "/").startswith(os.path.abspath(home).rstrip("/") + "/"):
        print("%s: warning: %s is under $HOME; on %s run directories and checkpoints belong "
              "under %s (profile key output_root)" % (PROG, path, system.name, system.output_root),
              file=sys.stderr)


def write_run_dir(run_dir, script, config, point):
    os.makedirs(run_dir, exist_ok=True)
    write_executable(os.path.join(run_dir, "job.sh"), script)
    ini = os.path.join(run_dir, "input.ini")
    if config:
        if not os.path.isfile(config):
            raise BadInput("--config %s: cannot open" % config)
        shutil.copyfile(config, ini)
    else:
        with open(ini, "w") as f:
            f.write("# meshtrain defaults; the job script adds --set overrides\n")
    with open(os.path.join(run_dir, "point.json"), "w") as f:
        json.dump(point, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------
# render

def cmd_render(a):
    system = System(a.system, [parse_assignment(s, "--profile-set") for s in a.profile_set])
    res = resources(system, a.nodes, a.ranks, a.tasks_per_node, a.gpus_per_node, a.cpus_per_task,
                    a.time, a.qos, a.account, a.signal_s)
    run_dir = absdir(a.run_dir or os.path.join(system.default_output_root(), "runs", "%s-%s-n%d-%s" % (
        a.job, system.name, res["nodes"], datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))))
    workdir = absdir(a.workdir or SRC)
    bin_dir = absdir(a.bin or os.path.join(SRC, "build", "bin"))
    if a.job == "train":
        lay = job_layout(a.layout, res["ranks"], a.set)
    else:
        lay = parse_layout(a.layout or "dp-only", res["ranks"])
    config = absdir(a.config) if a.config and a.job == "train" else None
    if config and not os.path.isfile(config):
        raise BadInput("--config %s: cannot open" % a.config)
    checker = Checker(bin_dir, workdir)
    if a.job == "train":
        data = data_values(checker, config, a.set)
        sets = train_sets(run_dir, lay, system, a.set, data)
        if not a.no_check:
            checker.train(config, sets, res, lay, "job not written", system,
                          "train job %s" % os.path.basename(run_dir))
        body = train_body(run_dir, sets)
        say_data(system, data)
    elif a.job == "bench":
        body = bench_body(a.bench or ["allreduce"])
    else:
        body = convert_body(a.args)
        if not a.no_check:
            checker.ckpt(a.args, "job not written")
    cmdline = " ".join(q(x) for x in ["slurm/meshslurm.py"] + sys.argv[1:])
    script = render_script(a.job, system, res, run_dir, body, cmdline, workdir, bin_dir, a.env_kv,
                           a.max_restarts, a.name, max_failures=a.max_failures)
    point = {"id": os.path.basename(run_dir), "job": a.job, "system": system.name,
             "nodes": res["nodes"], "ranks": res["ranks"], "tasks_per_node": res["tasks_per_node"],
             "layout": lay, "layout_name": layout_name(lay), "qos": res["qos"], "repeat": 0}
    if a.stdout:
        sys.stdout.write(script)
        return 0
    warn_if_home(system, run_dir)
    write_run_dir(run_dir, script, config, point)
    print(os.path.join(run_dir, "job.sh"))
    return 0


