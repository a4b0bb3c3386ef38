#!/usr/bin/env python3
"""meshslurm: renders meshtrain Slurm job scripts and scaling-study campaigns.

One generator, one skeleton, a system profile per machine (slurm/systems/*.ini):

  meshslurm.py render train --system leonardo-booster --nodes 16 --account A \\
      --config inputs/default.ini --set model.preset=gpt2-124m --run-dir runs/x
  meshslurm.py render bench --system local --ranks 4 --bench "allreduce --max-bytes 64M"
  meshslurm.py render ckpt-convert --system generic --args "consolidate ckpt/latest out.h5"
  meshslurm.py campaign inputs/sweeps/small-strong-local.ini [--out DIR] [--dry-run] [--submit]
  meshslurm.py systems

Every rendered script: #SBATCH directives from the profile (partition, QoS by
node count and walltime, account, tasks/GPUs/CPUs per node, exclusive),
--signal=B:USR1@S, --requeue, --open-mode=append, output in its run directory,
the profile's env file, and a trap that forwards USR1/TERM to the application
(started in the background so the trap runs at once). An application exit
code of 75 (checkpoint written, EX_TEMPFAIL) requeues the job with
`scontrol requeue`; a restarted job passes --set train.resume=auto.

Python 3 standard library only. Exit codes: 0, 2 bad input, 3 runtime.
"""
import argparse
import configparser
import datetime
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys

PROG = "meshslurm"
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXIT_BADINPUT, EXIT_RUNTIME = 2, 3
EXIT_REQUEUE = 75  # the application's "checkpoint written, please requeue" code
JOBS = ("train", "bench", "ckpt-convert")


class BadInput(Exception):
    """A user error: one line naming the bad input, exit code 2."""


# ---------------------------------------------------------------------------
# small parsers

def parse_walltime(text):
    """Slurm time formats -> seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    t = str(text).strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", t)
    if not m:
        raise BadInput("time '%s' is not a Slurm time (HH:MM:SS, D-HH:MM:SS or minutes)" % text)
    days, a, b, c = m.groups()
    a, b, c = int(a), int(b or 0), int(c or 0)
    if days is not None:  # D-H[:M[:S]]
        return ((int(days) * 24 + a) * 60 + b) * 60 + c
    if m.group(4) is not None:  # H:M:S
        return (a * 60 + b) * 60 + c
    if m.group(3) is not None:  # M:S
        return a * 60 + b
    return a * 60  # minutes


def format_walltime(seconds):
    """HH:MM:SS up to a day (24:00:00 included), D-HH:MM:SS beyond"""
    if int(seconds) <= 86400:
        h, s = divmod(int(seconds), 3600)
        return "%02d:%02d:%02d" % (h, s // 60, s % 60)
    d, s = divmod(int(seconds), 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return ("%d-%02d:%02d:%02d" % (d, h, m, s)) if d else "%02d:%02d:%02d" % (h, m, s)


def parse_int_list(text, what):
    try:
        vals = [int(x) for x in re.split(r"[,\s]+", str(text).strip()) if x]
    except ValueError:
        raise BadInput("%s: expected a list of positive integers, got '%s'" % (what, text))
    if not vals or any(v <= 0 for v in vals):
        raise BadInput("%s: expected a list of positive integers, got '%s'" % (what, text))
    return vals


def parse_bool(text, what):
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off", ""):
        return False
    raise BadInput("%s: expected true or false, got '%s'" % (what, text))


def parse_assignment(text, what):
    if "=" not in text:
        raise BadInput("%s: expected KEY=VALUE, got '%s'" % (what, text))
    k, v = text.split("=", 1)
    k = k.strip()
    if not k:
        raise BadInput("%s: empty key in '%s'" % (what, text))
    return k, v.strip()


def parse_layout(text, ranks):
    """'auto' or 'tp=2,pp=2[,cp=1][,dp=N]' -> dict(dp,tp,pp,cp) for `ranks` ranks."""
    lay = {"dp": 0, "tp": 1, "pp": 1, "cp": 1}
    t = str(text).strip()
    if t not in ("", "auto"):
        for part in re.split(r"[,\s]+", t):
            if not part:
                continue
            k, v = parse_assignment(part, "layout '%s'" % text)
            if k not in lay:
                raise BadInput("layout '%s': unknown axis '%s' (dp, tp, pp, cp)" % (text, k))
            if not re.fullmatch(r"\d+", v) or int(v) <= 0:
                raise BadInput("layout '%s': %s must be a positive integer" % (text, k))
            lay[k] = int(v)
    inner = lay["tp"] * lay["pp"] * lay["cp"]
    if ranks % inner:
        raise BadInput("layout '%s': tp*pp*cp = %d does not divide %d ranks" % (text, inner, ranks))
    if lay["dp"] == 0:
        lay["dp"] = ranks // inner
    if lay["dp"] * inner != ranks:
        raise BadInput("layout '%s': dp*tp*pp*cp = %d but the job has %d ranks"
                       % (text, lay["dp"] * inner, ranks))
    return lay


def layout_name(lay):
    return "dp%d-tp%d-pp%d-cp%d" % (lay["dp"], lay["tp"], lay["pp"], lay["cp"])


# ---------------------------------------------------------------------------
# system profiles

class System:
    """A machine: partition, QoS table, node shape, env file, launcher."""

    KEYS = ("name", "description", "partition", "account_required", "tasks_per_node",
            "gpus_per_node", "cpus_per_task", "exclusive", "max_nodes", "env_file", "launcher",
            "default_time", "signal_s", "hw")

    def __init__(self, name_or_path, overrides=()):
        path = name_or_path
        if not os.path.sep in path and not path.endswith(".ini"):
            path = os.path.join(SRC, "slurm", "systems", name_or_path + ".ini")
        if not os.path.isfile(path):
            known = sorted(f[:-4] for f in os.listdir(os.path.join(SRC, "slurm", "systems"))
                           if f.endswith(".ini"))
            raise BadInput("system '%s': no profile %s (known: %s)"
                           % (name_or_path, path, ", ".join(known)))
        cp = configparser.ConfigParser(inline_comment_prefixes=None, interpolation=None)
        cp.optionxform = str  # env names keep their case
        try:
            cp.read(path)
        except configparser.Error as e:
            raise BadInput("%s: %s" % (path, str(e).splitlines()[0]))
        if not cp.has_section("system"):
            raise BadInput("%s: no [system] section" % path)
        self.path = path
        s = dict(cp.items("system"))
        for k, v in overrides:
            if k not in self.KEYS:
                raise BadInput("--profile-set %s: unknown profile key (%s)" % (k, ", ".join(self.KEYS)))
            s[k] = v
        for k in self.KEYS:
            if k not in s:
                raise BadInput("%s: [system] lacks '%s'" % (path, k))

        def num(key):
            v = s[key].strip()
            if not re.fullmatch(r"\d+", v):
                raise BadInput("%s: %s must be a non-negative integer, got '%s'" % (path, key, v))
            return int(v)

        self.name = s["name"].strip()
        self.description = s["description"].strip()
        self.partition = s["partition"].strip()
        self.account_required = parse_bool(s["account_required"], path + ": account_required")
        self.tasks_per_node = num("tasks_per_node")
        self.gpus_per_node = num("gpus_per_node")
        self.cpus_per_task = num("cpus_per_task")
        self.exclusive = parse_bool(s["exclusive"], path + ": exclusive")
        self.max_nodes = num("max_nodes")
        self.env_file = s["env_file"].strip()
        self.launcher = shlex.split(s["launcher"])
        self.default_time = parse_walltime(s["default_time"])
        self.signal_s = num("signal_s")
        self.hw = s["hw"].strip()
        if self.tasks_per_node < 1:
            raise BadInput("%s: tasks_per_node must be >= 1" % path)
        self.qos = []  # (name, min_nodes, max_nodes, max_seconds), in file order
        if cp.has_section("qos"):
            for qname, spec in cp.items("qos"):
                m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s+(\S+)\s*", spec)
                if not m:
                    raise BadInput("%s: [qos] %s = '%s': expected MIN-MAX WALLTIME" % (path, qname, spec))
                self.qos.append((qname, int(m.group(1)), int(m.group(2)), parse_walltime(m.group(3))))
        self.env = [(k, v.strip()) for k, v in cp.items("env")] if cp.has_section("env") else []

    def choose_qos(self, nodes, seconds):
        """The first QoS whose node range and walltime fit; None if the table is empty."""
        if not self.qos:
            return None
        for name, lo, hi, tmax in self.qos:
            if lo <= nodes <= hi and seconds <= tmax:
                return name
        table = "; ".join("%s %d-%d nodes <= %s" % (n, lo, hi, format_walltime(t))
                          for n, lo, hi, t in self.qos)
        raise BadInput("system %s: no QoS allows %d nodes for %s (%s); pass --qos to choose one"
                       % (self.name, nodes, format_walltime(seconds), table))


# ---------------------------------------------------------------------------
# the job script skeleton

SKELETON = r'''#!/bin/bash
@DIRECTIVES@
#
# meshtrain @JOB@ job for system '@SYSTEM@', rendered by slurm/meshslurm.py.
# Do not edit: change the profile (@PROFILE@) or the options and render again.
#   @COMMAND@
set -u
MT_SRC=@MT_SRC@
MT_BIN=@MT_BIN@
RUN_DIR=@RUN_DIR@
export MT_SRC MT_BIN RUN_DIR
MAX_RESTARTS=@MAX_RESTARTS@
RESTART=${SLURM_RESTART_COUNT:-0}
cd @WORKDIR@ || exit 3
mkdir -p "$RUN_DIR"

log() { echo "[meshslurm $(date +%FT%T) job ${SLURM_JOB_ID:-none} restart $RESTART] $*"; }
# status: one line for meshreport (done | running | requeued | failed ...);
# jobs.log: the history of every attempt
set_status() {
  echo "$*" > "$RUN_DIR/status"
  echo "$(date +%FT%T) job=${SLURM_JOB_ID:-none} restart=$RESTART $*" >> "$RUN_DIR/jobs.log"
}

# software environment of the system profile
# shellcheck disable=SC1090
source @ENV_FILE@ || { log "cannot source @ENV_FILE@"; set_status "failed: env file"; exit 3; }
@EXPORTS@
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
  # srun >= 23.11 no longer inherits --cpus-per-task from sbatch
  export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
fi
LAUNCH=(@LAUNCH@)

# The application runs in the background and the script waits for it: bash
# runs a trap only between commands, so a foreground application would delay
# it until the end. USR1 (sent by Slurm @SIGNAL_S@ s before the walltime,
# --signal=B:USR1) and TERM are forwarded: meshtrain then writes a checkpoint
# and exits with 75, and the job requeues itself.
APP_PID=""
forward() {
  log "received SIG$1; forwarding it to the application${APP_PID:+ (pid $APP_PID)}"
  if [ -n "$APP_PID" ]; then kill -s "$1" "$APP_PID" 2>/dev/null; fi
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

# run_app CMD...: start CMD, wait through forwarded signals, return its status
run_app() {
  "$@" &
  APP_PID=$!
  local rc
  wait "$APP_PID"; rc=$?
  while [ "$rc" -gt 128 ] && kill -0 "$APP_PID" 2>/dev/null; do wait "$APP_PID"; rc=$?; done
  wait "$APP_PID"; rc=$?  # its own status, also when the last wait was interrupted
  APP_PID=""
  return "$rc"
}

# finish RC: 0 done; 75 checkpointed -> requeue (or resubmit); else failed
finish() {
  local rc=$1
  case "$rc" in
    0) set_status done; log "finished"; exit 0 ;;
    @EXIT_REQUEUE@)
      if [ "$RESTART" -ge "$MAX_RESTARTS" ]; then
        set_status "failed: checkpointed, but $MAX_RESTARTS restarts used"
        log "not requeueing: restart limit $MAX_RESTARTS reached"; exit "$rc"
      fi
      set_status "requeued: checkpointed (exit $rc)"
      if scontrol requeue "${SLURM_JOB_ID:-}"; then log "requeued; it resumes from the latest checkpoint"; exit 0; fi
      log "scontrol requeue failed; resubmitting $RUN_DIR/job.sh after this job"
      if sbatch --dependency="afterany:${SLURM_JOB_ID:-0}" "$RUN_DIR/job.sh"; then exit 0; fi
      set_status "failed: checkpointed but could not requeue"; exit "$rc" ;;
    *) set_status "failed: exit $rc"; log "application failed with exit code $rc"; exit "$rc" ;;
  esac
}

# run_step CMD...: one application run; stop the job unless it succeeded
run_step() {
  log "run: $*"
  run_app "$@"
  local rc=$?
  [ "$rc" -eq 0 ] || finish "$rc"
}

set_status running
{
  echo "job_id=${SLURM_JOB_ID:-} restart=$RESTART nodes=${SLURM_JOB_NUM_NODES:-} ntasks=${SLURM_NTASKS:-}"
  echo "nodelist=${SLURM_JOB_NODELIST:-} start=$(date +%s)"
} >> "$RUN_DIR/slurm-env.txt"
@BODY@
finish 0
'''


def q(x):
    return shlex.quote(str(x))


def sbatch_directives(system, res, job_name, run_dir, workdir, exclusive=True, requeue=True):
    lines = ["--job-name=%s" % job_name]
    if system.partition:
        lines.append("--partition=%s" % system.partition)
    if res["qos"]:
        lines.append("--qos=%s" % res["qos"])
    if res["account"]:
        lines.append("--account=%s" % res["account"])
    lines.append("--nodes=%d" % res["nodes"])
    if res["ranks"] == res["nodes"] * res["tasks_per_node"]:
        lines.append("--ntasks-per-node=%d" % res["tasks_per_node"])
    else:
        lines.append("--ntasks=%d" % res["ranks"])
    if res["cpus_per_task"]:
        lines.append("--cpus-per-task=%d" % res["cpus_per_task"])
    if res["gpus_per_node"]:
        lines.append("--gpus-per-node=%d" % res["gpus_per_node"])
    lines.append("--time=%s" % format_walltime(res["time_s"]))
    if system.exclusive and exclusive:
        lines.append("--exclusive")
    if requeue:
        lines.append("--requeue")
        lines.append("--signal=B:USR1@%d" % res["signal_s"])
    lines.append("--open-mode=append")
    lines.append("--output=%s/slurm-%%j.out" % run_dir)
    lines.append("--chdir=%s" % workdir)
    return "\n".join("#SBATCH " + l for l in lines)


def resources(system, args_nodes, args_ranks, tasks_per_node=None, gpus_per_node=None,
              cpus_per_task=None, time=None, qos=None, account=None, signal_s=None):
    """Nodes, ranks, QoS, account... checked against the profile."""
    tpn = system.tasks_per_node if tasks_per_node is None else tasks_per_node
    if tpn < 1:
        raise BadInput("--tasks-per-node must be >= 1")
    if args_ranks:
        ranks = args_ranks
        nodes = args_nodes or -(-ranks // tpn)
        if ranks > nodes * tpn:
            raise BadInput("%d ranks do not fit on %d nodes x %d tasks per node" % (ranks, nodes, tpn))
        if ranks < nodes:
            raise BadInput("%d ranks cannot fill %d nodes" % (ranks, nodes))
    else:
        nodes = args_nodes or 1
        ranks = nodes * tpn
    if system.max_nodes and nodes > system.max_nodes:
        raise BadInput("system %s has %d nodes; asked for %d" % (system.name, system.max_nodes, nodes))
    time_s = parse_walltime(time) if time else system.default_time
    if time_s <= 0:
        raise BadInput("--time must be positive")
    sig = system.signal_s if signal_s is None else signal_s
    if sig >= time_s:
        sig = max(10, time_s // 10)  # a short job still gets its warning
    if system.account_required and not account:
        raise BadInput("system %s requires --account (your project budget; `saldo -b` lists them)"
                       % system.name)
    return {
        "nodes": nodes, "ranks": ranks, "tasks_per_node": tpn,
        "gpus_per_node": system.gpus_per_node if gpus_per_node is None else gpus_per_node,
        "cpus_per_task": system.cpus_per_task if cpus_per_task is None else cpus_per_task,
        "time_s": time_s, "qos": qos or system.choose_qos(nodes, time_s),
        "account": account or "", "signal_s": sig,
    }


def env_exports(system, env_args):
    vals = dict(system.env)
    for k, v in env_args:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise BadInput("--env %s: not a variable name" % k)
        vals[k] = v
    lines = ["export %s=%s" % (k, q(v)) for k, v in vals.items() if v != ""]
    return "\n".join(lines) if lines else "# (no optional variables set; see the profile's [env])"


def render_script(job, system, res, run_dir, body, command_line, workdir, bin_dir,
                  env_args=(), max_restarts=10, job_name=None, requeue=True, exclusive=True):
    env_file = system.env_file
    if not os.path.isabs(env_file):
        env_file = os.path.join(SRC, env_file)
    text = SKELETON
    subs = {
        "@DIRECTIVES@": sbatch_directives(system, res, job_name or "mt-" + job, run_dir, workdir,
                                          exclusive=exclusive, requeue=requeue),
        "@JOB@": job, "@SYSTEM@": system.name, "@PROFILE@": os.path.relpath(system.path, SRC),
        "@COMMAND@": command_line, "@MT_SRC@": q(SRC), "@MT_BIN@": q(bin_dir),
        "@RUN_DIR@": q(run_dir), "@MAX_RESTARTS@": str(int(max_restarts)), "@WORKDIR@": q(workdir),
        "@ENV_FILE@": q(env_file), "@EXPORTS@": env_exports(system, env_args),
        "@LAUNCH@": " ".join(q(a) for a in system.launcher), "@SIGNAL_S@": str(res["signal_s"]),
        "@EXIT_REQUEUE@": str(EXIT_REQUEUE), "@BODY@": body,
    }
    for k, v in subs.items():
        text = text.replace(k, v)
    return text


def train_body(run_dir, sets):
    lines = ["SETS=("]
    lines += ["  --set %s" % q(s) for s in sets]
    lines.append(")")
    lines.append(
        "# a restarted job (requeued, or resubmitted after a checkpoint) resumes\n"
        "RESUME=()\n"
        "if [ \"$RESTART\" -gt 0 ] || [ -e \"$RUN_DIR/checkpoints/latest\" ]; then\n"
        "  RESUME=(--set train.resume=auto)\n"
        "  log \"resuming from $RUN_DIR/checkpoints/latest\"\n"
        "fi\n"
        "run_step \"${LAUNCH[@]}\" \"$MT_BIN/meshtrain\" \"$RUN_DIR/input.ini\" \"${SETS[@]}\" \"${RESUME[@]}\"")
    return "\n".join(lines)


def bench_body(benches):
    lines = []
    for b in benches:
        argv = shlex.split(b)
        if not argv:
            raise BadInput("--bench: empty command")
        lines.append("run_step \"${LAUNCH[@]}\" \"$MT_BIN/meshbench\" %s --json \"$RUN_DIR/bench.jsonl\""
                     % " ".join(q(a) for a in argv))
    return "\n".join(lines)


def convert_body(args):
    argv = shlex.split(args or "")
    if not argv:
        raise BadInput("ckpt-convert needs --args \"SUBCOMMAND ...\" for meshckpt")
    return "run_step \"${LAUNCH[@]}\" \"$MT_BIN/meshckpt\" %s" % " ".join(q(a) for a in argv)


def train_sets(run_dir, lay, hw, user_sets):
    keys = {k for k, _ in (parse_assignment(s, "--set") for s in user_sets)}
    sets = ["output.dir=%s" % run_dir]
    for axis in ("dp", "tp", "pp", "cp"):
        sets.append("parallel.%s=%d" % (axis, lay[axis]))
    if "metrics.hw" not in keys and hw:
        sets.append("metrics.hw=%s" % hw)
    for s in user_sets:
        k, _ = parse_assignment(s, "--set")
        if k in ("output.dir",) or k.startswith("parallel.") and k[9:] in lay:
            raise BadInput("--set %s: set by the generator (use --run-dir / --layout)" % k)
        if not re.fullmatch(r"[a-z_]+\.[a-z_0-9]+", k):
            raise BadInput("--set %s: expected section.key=value" % s)
        sets.append(s)
    return sets


def write_executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


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


def absdir(path):
    return os.path.abspath(os.path.expanduser(path))


# ---------------------------------------------------------------------------
# render

def cmd_render(a):
    system = System(a.system, [parse_assignment(s, "--profile-set") for s in a.profile_set])
    res = resources(system, a.nodes, a.ranks, a.tasks_per_node, a.gpus_per_node, a.cpus_per_task,
                    a.time, a.qos, a.account, a.signal_s)
    run_dir = absdir(a.run_dir or os.path.join(SRC, "outputs", "runs", "%s-%s-n%d-%s" % (
        a.job, system.name, res["nodes"], datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))))
    workdir = absdir(a.workdir or SRC)
    bin_dir = absdir(a.bin or os.path.join(SRC, "build", "bin"))
    lay = parse_layout(a.layout, res["ranks"])
    if a.job == "train":
        body = train_body(run_dir, train_sets(run_dir, lay, system.hw, a.set))
    elif a.job == "bench":
        body = bench_body(a.bench or ["allreduce"])
    else:
        body = convert_body(a.args)
    cmdline = " ".join(q(x) for x in ["slurm/meshslurm.py"] + sys.argv[1:])
    script = render_script(a.job, system, res, run_dir, body, cmdline, workdir, bin_dir, a.env_kv,
                           a.max_restarts, a.name)
    point = {"id": os.path.basename(run_dir), "job": a.job, "system": system.name,
             "nodes": res["nodes"], "ranks": res["ranks"], "tasks_per_node": res["tasks_per_node"],
             "layout": lay, "layout_name": layout_name(lay), "qos": res["qos"], "repeat": 0}
    if a.stdout:
        sys.stdout.write(script)
        return 0
    write_run_dir(run_dir, script, a.config if a.job == "train" else None, point)
    print(os.path.join(run_dir, "job.sh"))
    return 0


# ---------------------------------------------------------------------------
# campaigns

def read_sweep(path):
    if not os.path.isfile(path):
        raise BadInput("%s: cannot open sweep spec" % path)
    cp = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    cp.optionxform = str
    try:
        cp.read(path)
    except configparser.Error as e:
        raise BadInput("%s: %s" % (path, str(e).splitlines()[0]))
    if not cp.has_section("campaign"):
        raise BadInput("%s: no [campaign] section" % path)
    c = dict(cp.items("campaign"))
    known = {"name", "system", "job", "scaling", "nodes", "ranks", "tasks_per_node", "layouts",
             "repeats", "steps", "time", "config", "submit", "account", "qos", "bench", "env"}
    for k in c:
        if k not in known:
            raise BadInput("%s: [campaign] unknown key '%s' (%s)" % (path, k, ", ".join(sorted(known))))
    sets = [("%s=%s" % (k, v)) for k, v in cp.items("set")] if cp.has_section("set") else []
    return c, sets


def plan_campaign(path, out, account_arg=None, profile_set=()):
    c, user_sets = read_sweep(path)
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
    layouts = [s.strip() for s in c.get("layouts", "auto").split(";") if s.strip()] or ["auto"]
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
    # weak scaling keeps the batch per rank: the global batch grows with ranks
    gb = None
    for s in base_sets:
        k, v = parse_assignment(s, "[set]")
        if k == "train.global_batch":
            gb = int(v)
    if scaling == "weak" and job == "train" and gb is None:
        raise BadInput("%s: weak scaling needs train.global_batch in [set] (the batch of the smallest point)" % path)

    out = absdir(out or os.path.join(SRC, "outputs", "campaigns", name))
    points = []
    res_list = []
    for size in sizes:
        res = resources(system, size if "nodes" in c else None, size if "ranks" in c else None,
                        tpn, None, None, c.get("time"), c.get("qos"), account, None)
        res_list.append(res)
    ranks0 = min(r["ranks"] for r in res_list)
    for res in res_list:
        for lay_text in layouts:
            lay = parse_layout(lay_text, res["ranks"])
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
            "benches": benches, "account": account, "time": c.get("time")}


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
    system = plan["system"]
    res = resources(system, 1, 1, 1, 0, 1, "00:10:00", None, plan["account"], None)
    body = ("run_step \"$MT_BIN/meshreport\" \"$CAMPAIGN\" --out \"$CAMPAIGN/report\"\n"
            "cat \"$CAMPAIGN/report/report.md\"")
    text = render_script("report", system, res, os.path.join(plan["out"], "report"), body,
                         "slurm/meshslurm.py campaign " + q(plan["sweep"]), workdir, bin_dir,
                         (), 0, "mt-report-" + plan["name"], requeue=False, exclusive=False)
    return text.replace("RUN_DIR=", "CAMPAIGN=%s\nRUN_DIR=" % q(plan["out"]), 1)


def cmd_campaign(a):
    plan = plan_campaign(a.sweep, a.out, a.account, [parse_assignment(s, "--profile-set") for s in a.profile_set])
    system = plan["system"]
    bin_dir = absdir(a.bin or os.path.join(SRC, "build", "bin"))
    workdir = absdir(a.workdir or SRC)
    print("campaign %s: %s scaling, system %s, %d points, submit %s, into %s"
          % (plan["name"], plan["scaling"], system.name, len(plan["points"]), plan["submit"], plan["out"]))
    print("  %-28s %5s %5s %-18s %-16s %s" % ("point", "nodes", "ranks", "layout", "qos", "global_batch"))
    for p in plan["points"]:
        print("  %-28s %5d %5d %-18s %-16s %s" % (p["id"], p["nodes"], p["ranks"], p["layout_name"],
                                                 p["qos"] or "-", p["global_batch"] or "-"))
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
    os.makedirs(plan["out"], exist_ok=True)
    cmdline = " ".join(q(x) for x in ["slurm/meshslurm.py"] + sys.argv[1:])
    for p in plan["points"]:
        if plan["job"] == "train":
            body = train_body(p["_run_dir"], train_sets(p["_run_dir"], p["layout"], system.hw, p["_sets"]))
        else:
            body = bench_body(plan["benches"])
        script = render_script(plan["job"], system, p["_res"], p["_run_dir"], body, cmdline, workdir,
                               bin_dir, plan["env"], a.max_restarts, "mt-%s-%s" % (plan["name"], p["id"]))
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
    if a.submit:
        r = subprocess.run(["bash", os.path.join(plan["out"], "submit.sh")])
        return 0 if r.returncode == 0 else EXIT_RUNTIME
    print("submit with: bash %s/submit.sh   (--dry-run to see the sbatch commands)" % plan["out"])
    return 0


def cmd_systems(a):
    for f in sorted(os.listdir(os.path.join(SRC, "slurm", "systems"))):
        if not f.endswith(".ini"):
            continue
        s = System(os.path.join(SRC, "slurm", "systems", f))
        qos = ", ".join("%s %d-%d nodes <= %s" % (n, lo, hi, format_walltime(t)) for n, lo, hi, t in s.qos)
        print("%-18s %s\n%18s partition %s, %d tasks/node, %d GPUs/node, %d CPUs/task%s%s%s"
              % (s.name, s.description, "", s.partition or "(default)", s.tasks_per_node,
                 s.gpus_per_node, s.cpus_per_task, ", exclusive" if s.exclusive else "",
                 ", account required" if s.account_required else "", "; QoS: " + qos if qos else ""))
    return 0


# ---------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise BadInput(message)


def positive_int(text):
    if not re.fullmatch(r"\d+", text) or int(text) <= 0:
        raise argparse.ArgumentTypeError("expected a positive integer, got '%s'" % text)
    return int(text)


def nonneg_int(text):
    if not re.fullmatch(r"\d+", text):
        raise argparse.ArgumentTypeError("expected a non-negative integer, got '%s'" % text)
    return int(text)


def add_common(p):
    p.add_argument("--profile-set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the system profile (e.g. env_file=..., launcher=...)")
    p.add_argument("--bin", help="directory of the meshtrain executables (default build/bin)")
    p.add_argument("--workdir", help="the job's working directory (default: the source tree)")
    p.add_argument("--account", help="Slurm account (required on LEONARDO)")
    p.add_argument("--max-restarts", type=nonneg_int, default=10,
                   help="requeue at most this many times (default 10)")


def main(argv):
    ap = Parser(prog=PROG, description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("render", help="render one job script into a run directory")
    r.add_argument("job", choices=JOBS)
    r.add_argument("--system", required=True, help="profile name in slurm/systems/ or a path")
    r.add_argument("--nodes", type=positive_int)
    r.add_argument("--ranks", type=positive_int, help="total ranks (default nodes x tasks per node)")
    r.add_argument("--tasks-per-node", type=positive_int)
    r.add_argument("--gpus-per-node", type=nonneg_int)
    r.add_argument("--cpus-per-task", type=nonneg_int)
    r.add_argument("--time", help="walltime (default: the profile's)")
    r.add_argument("--qos", help="QoS (default: chosen from the profile's table by size and time)")
    r.add_argument("--signal-s", type=positive_int, help="USR1 this many seconds before the walltime")
    r.add_argument("--layout", default="auto", help="auto (all dp) or tp=2,pp=2,... (dp fills the rest)")
    r.add_argument("--config", help="meshtrain INI file copied into the run directory")
    r.add_argument("--set", action="append", default=[], metavar="section.key=value")
    r.add_argument("--env", dest="env", action="append", default=[], metavar="NAME=VALUE",
                   help="export this variable in the job (e.g. NCCL_IB_SL=1)")
    r.add_argument("--bench", action="append", help="a meshbench command line (repeatable)")
    r.add_argument("--args", help="ckpt-convert: the meshckpt command line")
    r.add_argument("--run-dir", help="where the script, config and results go")
    r.add_argument("--name", help="Slurm job name")
    r.add_argument("--stdout", action="store_true", help="print the script, write nothing")
    add_common(r)
    c = sub.add_parser("campaign", help="turn a sweep spec into point directories and a submit script")
    c.add_argument("sweep")
    c.add_argument("--out", help="campaign directory (default outputs/campaigns/<name>)")
    c.add_argument("--dry-run", action="store_true", help="print the plan and the sbatch commands only")
    c.add_argument("--submit", action="store_true", help="run submit.sh after writing")
    c.add_argument("--force", action="store_true", help="overwrite an existing campaign directory")
    add_common(c)
    sub.add_parser("systems", help="list the system profiles")
    a = ap.parse_args(argv)
    if a.cmd is None:
        ap.print_help()
        return EXIT_BADINPUT
    if a.cmd == "render":
        a.env_kv = [parse_assignment(s, "--env") for s in a.env]
        return cmd_render(a)
    if a.cmd == "campaign":
        return cmd_campaign(a)
    return cmd_systems(a)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        sys.exit(EXIT_BADINPUT)
    except OSError as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        sys.exit(EXIT_RUNTIME)
