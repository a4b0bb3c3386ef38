#!/usr/bin/env python3
"""meshslurm: renders meshtrain Slurm job scripts and scaling-study campaigns.

One generator, one skeleton, a system profile per machine (slurm/systems/*.ini):

  meshslurm.py render train --system leonardo-booster --nodes 16 --account A \\
      --config inputs/default.ini --set model.preset=gpt2-124m --run-dir runs/x
  meshslurm.py render bench --system local --ranks 4 --bench "allreduce --max-bytes 64M"
  meshslurm.py render ckpt-convert --system generic --args "consolidate ckpt/latest out.h5"
  meshslurm.py campaign inputs/sweeps/small-strong-local.ini [--out DIR] [--dry-run] [--submit]
  meshslurm.py systems
  meshslurm.py modules --system leonardo-booster     (shell code; slurm/leonardo/env.sh uses it)
  meshslurm.py cluster start|status|stop [--dir DIR] (a local Slurm on this machine)

Every rendered script: #SBATCH directives from the profile (partition, QoS by
node count and walltime, account, tasks/GPUs/CPUs per node, memory, exclusive
where the QoS allows), --signal=B:USR1@S, --requeue, --open-mode=append,
output in its run directory, the profile's modules (each checked: one that
does not load fails the job at once, naming it), its env file and TMPDIR, and
a trap that forwards USR1/TERM to the application (started in the background
so the trap runs at once). An application exit code of 75 (checkpoint
written, EX_TEMPFAIL) requeues the job with `scontrol requeue`; a restarted
job passes --set train.resume=auto. A train job is written only after
`meshtrain --check` accepts its configuration for its rank count.

Python 3 standard library only. Exit codes: 0, 2 bad input, 3 runtime,
77 cannot run here (cluster start without Slurm or root).
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
EXIT_BADINPUT, EXIT_RUNTIME, EXIT_UNAVAILABLE = 2, 3, 77
EXIT_REQUEUE = 75  # the application's "checkpoint written, please requeue" code
JOBS = ("train", "bench", "ckpt-convert")


class BadInput(Exception):
    """A user error: one line naming the bad input, exit code 2."""


class Failure(Exception):
    """Something here does not work (a tool missing, a daemon that does not
    start): one line, exit code 3."""


class Unavailable(Exception):
    """What was asked cannot run on this machine (no Slurm, not root): one
    line, exit code 77, what test harnesses read as "skipped"."""


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


# layout keys beyond the mesh axes (meshplan's sweeps): key -> (meshtrain key, kind)
LAYOUT_SETTINGS = {
    "zero": ("parallel.zero", "int"), "mb": ("train.micro_batch", "int"),
    "sp": ("parallel.sp", "bool"), "recompute": ("train.recompute", "bool"),
    "schedule": ("parallel.schedule", "word"), "v": ("parallel.virtual_stages", "int"),
    "ep": ("parallel.ep", "int"), "cp_mode": ("parallel.cp_mode", "word"),
    "pp_first": ("parallel.pp_first_layers", "int"), "pp_last": ("parallel.pp_last_layers", "int"),
}


def parse_layout(text, ranks):
    """'auto' or 'tp=2,pp=2[,cp=1][,dp=N][,zero=1,mb=4,sp=1,recompute=0,schedule=1f1b,v=1,ep=1]'
    -> dict(dp,tp,pp,cp, settings=[meshtrain --set ...]) for `ranks` ranks."""
    lay = {"dp": 0, "tp": 1, "pp": 1, "cp": 1}
    settings = []
    t = str(text).strip()
    if t not in ("", "auto"):
        for part in re.split(r"[,\s]+", t):
            if not part:
                continue
            k, v = parse_assignment(part, "layout '%s'" % text)
            if k in LAYOUT_SETTINGS:
                key, kind = LAYOUT_SETTINGS[k]
                if kind == "int" and not re.fullmatch(r"\d+", v):
                    raise BadInput("layout '%s': %s must be an integer" % (text, k))
                if kind == "bool":
                    if v not in ("0", "1", "true", "false"):
                        raise BadInput("layout '%s': %s must be 0 or 1" % (text, k))
                    v = "true" if v in ("1", "true") else "false"
                if kind == "word" and not re.fullmatch(r"[a-z0-9-]+", v):
                    raise BadInput("layout '%s': %s = '%s' is not a name" % (text, k, v))
                settings.append((k, key, v))
                continue
            if k not in lay:
                raise BadInput("layout '%s': unknown key '%s' (dp, tp, pp, cp, %s)"
                               % (text, k, ", ".join(LAYOUT_SETTINGS)))
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
    lay["settings"] = settings
    return lay


def layout_name(lay):
    name = "dp%d-tp%d-pp%d-cp%d" % (lay["dp"], lay["tp"], lay["pp"], lay["cp"])
    for k, _, v in lay.get("settings", []):
        name += "-%s%s" % (k, {"true": "1", "false": "0"}.get(v, v))
    return name


# ---------------------------------------------------------------------------
# system profiles

class System:
    """A machine: partition, QoS table, node shape, env file, launcher."""

    KEYS = ("name", "description", "partition", "account_required", "tasks_per_node",
            "gpus_per_node", "cpus_per_task", "exclusive", "max_nodes", "env_file", "launcher",
            "default_time", "signal_s", "hw")
    # keys a profile may leave out, with what leaving them out means
    OPTIONAL = {
        "mem_per_node": "0",       # MB per node for --mem (0: no --mem)
        "tmpdir": "",              # the jobs' TMPDIR root, expanded in the job ("": keep the node's)
        "output_root": "",         # default home of run and campaign directories ("": outputs/)
        "no_exclusive_qos": "",    # QoS names that cannot be combined with --exclusive
        "report_partition": "",    # partition of a campaign's report job ("": the profile's)
        "report_qos": "",          # its QoS when report_partition is set ("": none)
        "device": "",              # train.device of its train jobs ("": meshtrain's default)
        "precision": "",           # train.precision of its train jobs ("": meshtrain's default)
    }

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
        s = dict(self.OPTIONAL)
        s.update(cp.items("system"))
        # [modules]: one key per module, loaded in file order by every job
        modules = list(cp.items("modules")) if cp.has_section("modules") else []
        for k, v in overrides:
            if k.startswith("modules."):
                name = k[len("modules."):]  # replaced in place, added at the end, or
                if name not in [n for n, _ in modules]:  # dropped by an empty value
                    modules.append((name, v))
                modules = [(n, v if n == name else m) for n, m in modules]
                continue
            if k not in self.KEYS and k not in self.OPTIONAL:
                raise BadInput("--profile-set %s: unknown profile key (%s, modules.NAME)"
                               % (k, ", ".join(self.KEYS + tuple(self.OPTIONAL))))
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
        self.mem_per_node = num("mem_per_node")
        self.tmpdir = s["tmpdir"].strip()
        if not re.fullmatch(r"[A-Za-z0-9_./${}:+@-]*", self.tmpdir):
            raise BadInput("%s: tmpdir = '%s': use a path with $VARIABLES, nothing else"
                           % (path, self.tmpdir))
        self.output_root = s["output_root"].strip()
        self.no_exclusive_qos = set(s["no_exclusive_qos"].replace(",", " ").split())
        self.report_partition = s["report_partition"].strip()
        self.report_qos = s["report_qos"].strip()
        self.device = s["device"].strip()
        if self.device not in ("", "cpu", "cuda", "auto"):
            raise BadInput("%s: device = '%s': expected cpu, cuda or auto" % (path, self.device))
        self.precision = s["precision"].strip()
        if self.precision not in ("", "fp32", "bf16"):
            raise BadInput("%s: precision = '%s': expected fp32 or bf16" % (path, self.precision))
        self.modules = []
        for name, mod in modules:
            mod = mod.strip()
            if mod and not re.fullmatch(r"[A-Za-z0-9_.+/@:=~-]+", mod):
                raise BadInput("%s: [modules] %s = '%s': not a module name" % (path, name, mod))
            if mod:
                self.modules.append((name, mod))
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

    def check_qos(self, qos, nodes, seconds):
        """A QoS the user named: refused when the profile's table says it cannot fit."""
        for name, lo, hi, tmax in self.qos:
            if name == qos and not (lo <= nodes <= hi and seconds <= tmax):
                raise BadInput("QoS %s allows %d-%d nodes and at most %s; the job asks for %d node%s "
                               "for %s" % (qos, lo, hi, format_walltime(tmax), nodes,
                                           "" if nodes == 1 else "s", format_walltime(seconds)))
        return qos

    def default_output_root(self):
        """Where run and campaign directories go unless told: output_root (its
        $VARIABLES expanded now: Slurm's --output cannot expand them), else
        outputs/ of the source tree."""
        if not self.output_root:
            return os.path.join(SRC, "outputs")
        root = os.path.expanduser(os.path.expandvars(self.output_root))
        unset = re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", root)
        if unset:
            raise BadInput("system %s: output_root = %s, but $%s is not set here (render on the "
                           "cluster's login node, give the directory with --run-dir or --out, or "
                           "--profile-set output_root=DIR)" % (self.name, self.output_root, unset[0]))
        return os.path.abspath(root)

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
@NOTES@set -u
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

@MODULES@
# software environment of the system profile
# shellcheck disable=SC1090
source @ENV_FILE@ || { log "cannot source @ENV_FILE@"; set_status "failed: env file"; exit 3; }
@EXPORTS@
@TMPDIR@
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
  # since Slurm 22.05, srun no longer takes --cpus-per-task from sbatch's
  # allocation: SRUN_CPUS_PER_TASK passes it on to every srun of this job
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
      # srun has just reported "exited with exit code @EXIT_REQUEUE@": that is this
      log "the application wrote a checkpoint and stopped (exit @EXIT_REQUEUE@: preempted or" \
          "near the walltime); the job requeues and resumes from that checkpoint"
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

# ranks of this job on this machine: one node's share, or more where several
# nodes are one machine (a local test cluster); meshreport flags a run whose
# ranks x threads outnumber the machine's CPUs
ranks_on_host() {
  local here
  here=$(scontrol show node -o "${SLURM_JOB_NODELIST:-}" 2>/dev/null | grep -c "NodeHostName=$(hostname -s) ")
  [ "${here:-0}" -ge 1 ] 2>/dev/null || here=1
  echo $(( ${SLURM_NTASKS:-1} * here / ${SLURM_JOB_NUM_NODES:-1} ))
}
set_status running
{
  echo "job_id=${SLURM_JOB_ID:-} restart=$RESTART nodes=${SLURM_JOB_NUM_NODES:-} ntasks=${SLURM_NTASKS:-}"
  echo "nodelist=${SLURM_JOB_NODELIST:-} cpus_on_node=${SLURM_CPUS_ON_NODE:-} tmpdir=${TMPDIR:-} start=$(date +%s)"
  echo "host=$(hostname -s) host_cpus=$(nproc --all 2>/dev/null) host_ranks=$(ranks_on_host)"
} >> "$RUN_DIR/slurm-env.txt"
@BODY@
finish 0
'''


def q(x):
    return shlex.quote(str(x))


# Loads modules one by one and names the first that fails. Shared by the job
# scripts and `meshslurm.py modules` (what slurm/leonardo/env.sh evaluates).
MODULE_LOADER = r'''mt_load_modules() {  # NAME...: load each; MT_MODULE_FAILED names the first that fails
  MT_MODULE_FAILED=""
  [ $# -gt 0 ] || return 0
  local restore_u="" init m rc=0
  case $- in *u*) restore_u=1; set +u ;; esac  # module scripts read unset variables
  if ! type module >/dev/null 2>&1; then
    for init in /etc/profile.d/modules.sh /etc/profile.d/lmod.sh /usr/share/lmod/lmod/init/bash; do
      if [ -r "$init" ]; then . "$init"; break; fi
    done
  fi
  if ! type module >/dev/null 2>&1; then
    MT_MODULE_FAILED="$1 (no module command in this shell)"; rc=1
  else
    module purge >/dev/null 2>&1 || true
    for m in "$@"; do
      # a failed load must stop us: trust the exit status, and LOADEDMODULES
      # where it is kept (some module versions exit 0 after an error)
      if ! module load "$m" || { [ -n "${LOADEDMODULES:-}" ] &&
          case ":$LOADEDMODULES:" in *":$m:"* | *":$m/"*) false ;; *) true ;; esac; }; then
        MT_MODULE_FAILED=$m; rc=1; break
      fi
    done
  fi
  [ -z "$restore_u" ] || set -u
  return "$rc"
}'''


def modules_block(system):
    """The job's module loading: every module of the profile, or a note."""
    if not system.modules:
        return "# (no modules in the profile's [modules])\n"
    rel = os.path.relpath(system.path, SRC)
    return "\n".join([
        "# modules of the profile ([modules] in %s)," % rel,
        "# loaded one by one: one that does not load ends the job here, naming it",
        "MODULES=(%s)" % " ".join(q(m) for _, m in system.modules),
        MODULE_LOADER,
        "if ! mt_load_modules \"${MODULES[@]}\"; then",
        "  log \"module $MT_MODULE_FAILED did not load: check \\`module avail\\` and [modules] in %s\"" % rel,
        "  set_status \"failed: module $MT_MODULE_FAILED did not load\"",
        "  exit 3",
        "fi",
        "export MT_MODULES_LOADED=1  # the env file need not load them again",
        ""])


def tmpdir_block(system):
    """TMPDIR under the profile's tmpdir (e.g. the scratch file system instead
    of a diskless node's in-memory /tmp), one directory per job, removed at the end"""
    if not system.tmpdir:
        return "# (TMPDIR left as the node sets it: the profile has no tmpdir)"
    names = sorted(set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", system.tmpdir)))
    lines = ["# temporary files (MPI session directories, libraries' scratch) go to the",
             "# profile's tmpdir, not the node's /tmp (on diskless nodes: a few GB of RAM)"]
    for v in names:
        why = "tmpdir %s: $%s is not set" % (system.tmpdir, v)
        lines.append("[ -n \"${%s:-}\" ] || { log %s; set_status %s; exit 3; }"
                     % (v, q(why), q("failed: " + why)))
    lines += ["export TMPDIR=\"%s/meshtrain-${SLURM_JOB_ID:-$$}\"" % system.tmpdir,
              "mkdir -p \"$TMPDIR\" || { log \"cannot create TMPDIR $TMPDIR\"; "
              "set_status \"failed: cannot create TMPDIR\"; exit 3; }",
              "trap 'rm -rf \"$TMPDIR\"' EXIT"]
    return "\n".join(lines)


def exclusive_allowed(system, res, exclusive=True):
    """--exclusive when the profile asks for it, unless the QoS forbids it"""
    return system.exclusive and exclusive and res["qos"] not in system.no_exclusive_qos


def sbatch_directives(system, res, job_name, run_dir, workdir, exclusive=True, requeue=True):
    lines = ["--job-name=%s" % job_name]
    if res["partition"]:
        lines.append("--partition=%s" % res["partition"])
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
    if res["mem_mb"]:
        lines.append("--mem=%d" % res["mem_mb"])
    lines.append("--time=%s" % format_walltime(res["time_s"]))
    if exclusive_allowed(system, res, exclusive):
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
        "time_s": time_s,
        "qos": system.check_qos(qos, nodes, time_s) if qos else system.choose_qos(nodes, time_s),
        "account": account or "", "signal_s": sig,
        "partition": system.partition, "mem_mb": system.mem_per_node,
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
    notes = ""
    if system.exclusive and exclusive and not exclusive_allowed(system, res, exclusive):
        notes = ("# No --exclusive: QoS %s cannot be combined with it (profile key\n"
                 "# no_exclusive_qos); the job asks for whole nodes' GPUs, CPUs and memory.\n"
                 % res["qos"])
    text = SKELETON
    subs = {
        "@NOTES@": notes, "@MODULES@": modules_block(system), "@TMPDIR@": tmpdir_block(system),
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


def train_sets(run_dir, lay, system, user_sets):
    keys = {k for k, _ in (parse_assignment(s, "--set") for s in user_sets)}
    sets = ["output.dir=%s" % run_dir]
    for axis in ("dp", "tp", "pp", "cp"):
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
        if k in ("output.dir",) or k.startswith("parallel.") and k[9:] in lay or k in layout_keys:
            raise BadInput("--set %s: set by the generator (use --run-dir / --layout)" % k)
        if not re.fullmatch(r"[a-z_]+\.[a-z_0-9]+", k):
            raise BadInput("--set %s: expected section.key=value" % s)
        sets.append(s)
    return sets


def check_train_config(bin_dir, workdir, config, sets, ranks, what):
    """Runs `meshtrain --check CONFIG --set ... --ranks N` in the job's working
    directory: the checks meshtrain makes at start (every key and value, the
    model shape, mesh, batch and pipeline for N ranks), made now rather than
    after the queue wait. Refuses the job with meshtrain's own message."""
    exe = os.path.join(bin_dir, "meshtrain")
    if not os.access(exe, os.X_OK):
        raise BadInput("%s: cannot check the configuration: no %s (build first: bash "
                       "apps/scripts/setup.sh; or --bin DIR; --no-check skips the check)" % (what, exe))
    argv = [exe, "--check"] + ([config] if config else [])
    for s in sets:
        argv += ["--set", s]
    argv += ["--ranks", str(ranks)]
    try:
        r = subprocess.run(argv, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise Failure("%s: cannot run %s --check: %s (--no-check skips the check)" % (what, exe, e))
    if r.returncode == 0:
        return
    lines = r.stderr.strip().splitlines()
    errors = [l for l in lines if l.startswith("meshtrain: error: ")]
    if r.returncode == EXIT_BADINPUT and errors:
        raise BadInput("%s: %s" % (what, errors[0]))
    raise Failure("%s: %s --check exited with %d%s (is the build's environment loaded? --no-check "
                  "skips the check)" % (what, exe, r.returncode, ": " + lines[-1] if lines else ""))


def warn_if_home(system, path):
    """Run directories under $HOME on a machine with an output_root: say so once"""
    home = os.environ.get("HOME", "")
    if system.output_root and home and home != "/" and \
            (path + "/").startswith(os.path.abspath(home).rstrip("/") + "/"):
        print("%s: warning: %s is under $HOME; on %s run directories and checkpoints belong "
              "under %s (profile key output_root)" % (PROG, path, system.name, system.output_root),
              file=sys.stderr)


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
    run_dir = absdir(a.run_dir or os.path.join(system.default_output_root(), "runs", "%s-%s-n%d-%s" % (
        a.job, system.name, res["nodes"], datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))))
    workdir = absdir(a.workdir or SRC)
    bin_dir = absdir(a.bin or os.path.join(SRC, "build", "bin"))
    lay = parse_layout(a.layout, res["ranks"])
    config = absdir(a.config) if a.config and a.job == "train" else None
    if config and not os.path.isfile(config):
        raise BadInput("--config %s: cannot open" % a.config)
    if a.job == "train":
        sets = train_sets(run_dir, lay, system, a.set)
        if not a.no_check:
            check_train_config(bin_dir, workdir, config, sets, res["ranks"], "job not written")
        body = train_body(run_dir, sets)
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
    warn_if_home(system, run_dir)
    write_run_dir(run_dir, script, config, point)
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
                         (), 0, "mt-report-" + plan["name"], requeue=False, exclusive=False)
    return text.replace("RUN_DIR=", "CAMPAIGN=%s\nRUN_DIR=" % q(plan["out"]), 1)


def cmd_campaign(a):
    plan = plan_campaign(a.sweep, a.out, a.account, [parse_assignment(s, "--profile-set") for s in a.profile_set])
    system = plan["system"]
    bin_dir = absdir(a.bin or os.path.join(SRC, "build", "bin"))
    workdir = absdir(a.workdir or SRC)
    # every point's meshtrain configuration, checked before anything is written
    # (points that differ only in their run directory are checked once)
    checked = set()
    for p in plan["points"]:
        if plan["job"] != "train":
            continue
        p["_train_sets"] = train_sets(p["_run_dir"], p["layout"], system, p["_sets"])
        key = (p["ranks"], tuple(x for x in p["_train_sets"] if not x.startswith("output.dir=")))
        if not a.no_check and key not in checked:
            check_train_config(bin_dir, workdir, plan["config"], p["_train_sets"], p["ranks"],
                               "point %s" % p["id"])
            checked.add(key)
    print("campaign %s: %s scaling, system %s, %d points, submit %s, into %s"
          % (plan["name"], plan["scaling"], system.name, len(plan["points"]), plan["submit"], plan["out"]))
    if checked:
        print("meshtrain --check: %d distinct configurations OK" % len(checked))
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
    warn_if_home(system, plan["out"])
    os.makedirs(plan["out"], exist_ok=True)
    cmdline = " ".join(q(x) for x in ["slurm/meshslurm.py"] + sys.argv[1:])
    for p in plan["points"]:
        if plan["job"] == "train":
            body = train_body(p["_run_dir"], p["_train_sets"])
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
        extra = []
        if s.mem_per_node:
            extra.append("--mem=%d" % s.mem_per_node)
        if s.modules:
            extra.append("modules " + " ".join(m for _, m in s.modules))
        if s.tmpdir:
            extra.append("TMPDIR under " + s.tmpdir)
        if s.output_root:
            extra.append("runs under " + s.output_root)
        if s.report_partition:
            extra.append("report job on " + s.report_partition)
        if extra:
            print("%18s %s" % ("", "; ".join(extra)))
    return 0



# ---------------------------------------------------------------------------
# modules: the profile's module loading, for `source slurm/leonardo/env.sh`

def cmd_modules(a):
    system = System(a.system, [parse_assignment(s, "--profile-set") for s in a.profile_set])
    if not system.modules:
        print(": no modules in %s" % os.path.relpath(system.path, SRC))
        return 0
    print(MODULE_LOADER)
    print("mt_load_modules %s || { echo \"module $MT_MODULE_FAILED did not load: check \\`module "
          "avail\\` and [modules] in %s\" >&2; false; }"
          % (" ".join(q(m) for _, m in system.modules), os.path.relpath(system.path, SRC)))
    return 0


# ---------------------------------------------------------------------------
# a local Slurm cluster: a private munged, slurmctld and emulated nodes shaped
# like LEONARDO Booster nodes (32 CPUs, 494000 MB, 4 fake GPUs, partition
# boost_usr_prod), all on this machine and all inside one directory: its
# configuration, munge key and socket, state, spool, logs and pid files. The
# daemons outlive the command; `cluster stop` ends them by their pids. What
# each setting is for: the project notes on a local Slurm.

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CLUSTER_TOOLS = ("munged", "munge", "unmunge", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue",
                 "scancel", "scontrol")
CLUSTER_CONF = """\
ClusterName=mtlocal
SlurmctldHost={host}
SlurmctldPort={port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it starts again
AuthInfo=socket={dir}/munge/socket,cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool-%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
SlurmdParameters=config_overrides
TmpFS={dir}/tmp-%n
GresTypes=gpu
KillWait=5
MinJobAge=600
InactiveLimit=0
NodeName={nodes} NodeHostname={host} NodeAddr=127.0.0.1 Port={node_ports} CPUs=32 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=494000 Gres=gpu:4 State=UNKNOWN
PartitionName=boost_usr_prod Nodes={nodes} Default=YES MaxTime=INFINITE State=UP
"""
# fake GPUs must be character devices (file-less ones are dropped)
GRES_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")


class LocalCluster:
    def __init__(self, directory, n_nodes=2):
        self.dir = absdir(directory)
        self.names = ["n%d" % (i + 1) for i in range(n_nodes)]
        self.conf = os.path.join(self.dir, "slurm.conf")
        path = os.environ.get("PATH") or DEFAULT_PATH
        self.path = path + ":" + DEFAULT_PATH  # munged and the daemons live in sbin
        self.tools = {t: shutil.which(t, path=self.path) for t in CLUSTER_TOOLS}

    def env(self):
        """The clients' and daemons' environment: this cluster's SLURM_CONF and
        none of the SLURM_* variables of a job this command may run in"""
        e = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        e["PATH"] = self.path
        e["SLURM_CONF"] = self.conf
        return e

    def run(self, argv, timeout=30, check=True):
        r = subprocess.run([self.tools.get(argv[0]) or argv[0]] + list(argv[1:]), env=self.env(),
                           cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=timeout)
        if check and r.returncode != 0:
            raise Failure("cluster: %s failed (exit %d): %s%s" % (
                " ".join(argv), r.returncode, r.stdout.strip().replace("\n", " | ")[-300:],
                self.log_hint()))
        return r

    def log_hint(self):
        return " (logs: %s/*.log)" % self.dir

    def daemons(self):
        """(name, pid file, program) of every daemon, munged last to stop"""
        ds = [("slurmd " + n, os.path.join(self.dir, "slurmd-%s.pid" % n), "slurmd") for n in self.names]
        return ds + [("slurmctld", os.path.join(self.dir, "slurmctld.pid"), "slurmctld"),
                     ("munged", os.path.join(self.dir, "munged.pid"), "munged")]

    @staticmethod
    def pid_of(pid_file, program):
        """The pid in pid_file when that process is alive and is `program`"""
        try:
            pid = int(open(pid_file).read().split()[0])
            cmd = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")[0]
        except (OSError, ValueError, IndexError):
            return None
        return pid if os.path.basename(cmd.decode(errors="replace")) == program else None

    def alive(self):
        return {name: self.pid_of(f, prog) for name, f, prog in self.daemons()}

    def export_line(self):
        return "export SLURM_CONF=%s" % q(self.conf)

    def pick_ports(self):
        """SlurmctldPort and one port per node, all free now; the search starts
        at a place given by the directory, so two clusters rarely collide"""
        import socket
        n = 1 + len(self.names)
        start = sum(self.dir.encode()) % 400
        for k in range(400):
            base = 17100 + ((start + k) % 400) * 8
            try:
                for port in range(base, base + n):
                    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as so:
                        so.bind(("", port))
                return base
            except OSError:
                continue
        raise Failure("cluster: no free TCP ports between 17100 and 20300")

    def start(self):
        missing = [t for t, p in self.tools.items() if not p]
        if missing:
            raise Unavailable("cluster: Slurm and munge are not installed here (no %s): apt-get "
                              "install slurmctld slurmd slurm-client munge, as apps/scripts/setup.sh "
                              "does" % ", ".join(missing))
        if os.geteuid() != 0:
            raise Unavailable("cluster: the local cluster runs its daemons as root (SlurmUser=root); "
                              "not root here")
        up = self.alive()
        if all(up.values()):
            print("cluster: already running in %s" % self.dir)
            print(self.export_line())
            return 0
        if any(up.values()):
            raise Failure("cluster: partly running in %s (%s); run `cluster stop` first"
                          % (self.dir, ", ".join(k for k, v in up.items() if v)))
        # a job's step sockets live in the spool directories: keep the paths short
        if len(self.dir) > 80:
            raise BadInput("cluster: --dir %s is %d characters; UNIX socket paths under it need "
                           "it under 80" % (self.dir, len(self.dir)))
        os.makedirs(self.dir, exist_ok=True)
        for name in os.listdir(self.dir):  # a fresh cluster: no state of a previous one
            if name in ("state", "munge") or name.startswith(("spool-", "tmp-")):
                shutil.rmtree(os.path.join(self.dir, name))
            elif name.endswith((".log", ".pid", ".out")):
                os.remove(os.path.join(self.dir, name))
        for sub in ["state", "munge"] + ["spool-" + n for n in self.names] + ["tmp-" + n for n in self.names]:
            os.makedirs(os.path.join(self.dir, sub))
        os.chmod(os.path.join(self.dir, "munge"), 0o700)
        try:
            self._start_daemons()
        except BaseException:
            self.stop(quiet=True)
            raise
        return 0

    def _start_daemons(self):
        d = self.dir
        key = os.path.join(d, "munge", "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(os.urandom(1024))
        sock = os.path.join(d, "munge", "socket")
        r = self.run(["munged", "--force", "--socket=" + sock, "--key-file=" + key,
                      "--pid-file=" + os.path.join(d, "munged.pid"),
                      "--log-file=" + os.path.join(d, "munged.log"),
                      "--seed-file=" + os.path.join(d, "munge", "seed")], check=False)
        if r.returncode != 0:
            raise Unavailable("cluster: munged does not start here: %s" % r.stdout.strip()[-200:])
        cred = self.run(["munge", "--socket=" + sock, "-n"], check=False)
        if cred.returncode != 0 or subprocess.run(
                [self.tools["unmunge"], "--socket=" + sock], input=cred.stdout, env=self.env(),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                universal_newlines=True).returncode != 0:
            raise Unavailable("cluster: munge does not work here (munge -n | unmunge)")
        base = self.pick_ports()
        import socket
        host = socket.gethostname().split(".")[0]
        nodes = "n[1-%d]" % len(self.names) if len(self.names) > 1 else "n1"
        ports = "%d-%d" % (base + 1, base + len(self.names)) if len(self.names) > 1 else str(base + 1)
        with open(self.conf, "w") as f:
            f.write(CLUSTER_CONF.format(host=host, port=base, dir=d, nodes=nodes, node_ports=ports))
        with open(os.path.join(d, "gres.conf"), "w") as f:
            for dev in GRES_DEVICES:
                f.write("NodeName=%s Name=gpu File=%s\n" % (nodes, dev))
        t0 = datetime.datetime.now()
        self.run(["slurmctld", "-i"])
        for n in self.names:
            self.run(["slurmd", "-N", n])
        for _ in range(60):
            r = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
            states = dict(l.split() for l in r.stdout.splitlines() if len(l.split()) == 2)
            if r.returncode == 0 and sorted(states) == sorted(self.names) and \
                    set(states.values()) == {"idle"}:
                secs = (datetime.datetime.now() - t0).total_seconds()
                print("cluster: %d nodes idle after %.1f s in %s (partition boost_usr_prod, ports %d-%d)"
                      % (len(self.names), secs, d, base, base + len(self.names)))
                print("use it from a shell with:")
                print(self.export_line())
                return
            import time
            time.sleep(0.5)
        raise Failure("cluster: the nodes did not become idle in 30 s: %s%s"
                      % (r.stdout.strip().replace("\n", " | "), self.log_hint()))

    def stray_steps(self):
        """slurmstepd processes of this cluster's jobs (their environment names our
        slurm.conf): left running when a daemon dies under them"""
        pids, mark = [], ("SLURM_CONF=" + self.conf).encode() + b"\0"
        for e in os.listdir("/proc"):
            if not e.isdigit():
                continue
            try:
                comm = open("/proc/%s/comm" % e).read().strip()
                environ = open("/proc/%s/environ" % e, "rb").read() + b"\0"
            except OSError:
                continue
            if comm.startswith("slurmstepd") and (b"\0" + mark) in b"\0" + environ:
                pids.append(int(e))
        return pids

    def stop(self, quiet=False):
        import signal
        import time
        up = self.alive()
        if up.get("slurmctld"):  # end the jobs first: their steps would outlive slurmd
            r = self.run(["squeue", "-h", "-o", "%i"], check=False)
            jobs = r.stdout.split() if r.returncode == 0 else []
            if jobs:
                self.run(["scancel"] + jobs, check=False)
                for _ in range(30):
                    r = self.run(["squeue", "-h", "-o", "%i"], check=False)
                    if r.returncode != 0 or not r.stdout.split():
                        break
                    time.sleep(0.5)
        pids = [p for p in up.values() if p]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        for _ in range(20):
            if not any(self.pid_of(f, prog) for _, f, prog in self.daemons()):
                break
            time.sleep(0.25)
        for name, f, prog in self.daemons():
            pid = self.pid_of(f, prog)
            if pid:
                os.kill(pid, signal.SIGKILL)
        for pid in self.stray_steps():
            os.kill(pid, signal.SIGKILL)
        for _, f, _ in self.daemons():
            if os.path.exists(f):
                os.remove(f)
        if not quiet:
            print("cluster: %s in %s" % ("stopped" if pids else "not running", self.dir))
        return 0

    def status(self):
        up = self.alive()
        for name, pid in up.items():
            print("%-10s %s" % (name, "pid %d" % pid if pid else "not running"))
        if not all(up.values()):
            print("cluster: %s in %s" % ("partly running" if any(up.values()) else "not running", self.dir))
            return EXIT_RUNTIME
        print(self.run(["sinfo", "-N", "-o", "%N %P %t %c %m %G"], check=False).stdout.rstrip())
        jobs = self.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
        print("cluster: running in %s, %d jobs queued or running (accounting is off: read jobs "
              "with scontrol show job)" % (self.dir, len(jobs)))
        print(self.export_line())
        return 0


def cmd_cluster(a):
    c = LocalCluster(a.dir or os.path.join(SRC, "outputs", "local-cluster"), a.nodes)
    return {"start": c.start, "stop": c.stop, "status": c.status}[a.action]()


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
    p.add_argument("--no-check", action="store_true",
                   help="do not run meshtrain --check on the configuration of each train job")


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
    r.add_argument("--layout", default="auto", help="auto (all dp) or tp=2,pp=2,... (dp fills the rest); "
                   "--set parallel.layout=auto lets meshtrain plan it at every (re)start")
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
    m = sub.add_parser("modules", help="print shell code that loads the profile's modules "
                                       "(what slurm/leonardo/env.sh evaluates)")
    m.add_argument("--system", required=True)
    m.add_argument("--profile-set", action="append", default=[], metavar="KEY=VALUE")
    k = sub.add_parser("cluster", help="a local Slurm cluster on this machine (root, Debian's "
                                       "slurmctld slurmd slurm-client munge): start, status, stop")
    k.add_argument("action", choices=("start", "status", "stop"))
    k.add_argument("--dir", help="its directory: configuration, state, logs (default "
                                 "outputs/local-cluster); nothing is written outside it")
    k.add_argument("--nodes", type=positive_int, default=2, help="emulated nodes (default 2)")
    a = ap.parse_args(argv)
    if a.cmd is None:
        ap.print_help()
        return EXIT_BADINPUT
    if a.cmd == "render":
        a.env_kv = [parse_assignment(s, "--env") for s in a.env]
        return cmd_render(a)
    if a.cmd == "campaign":
        return cmd_campaign(a)
    if a.cmd == "modules":
        return cmd_modules(a)
    if a.cmd == "cluster":
        return cmd_cluster(a)
    return cmd_systems(a)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        sys.exit(EXIT_BADINPUT)
    except Unavailable as e:
        print("%s: unavailable: %s" % (PROG, e), file=sys.stderr)
        sys.exit(EXIT_UNAVAILABLE)
    except (Failure, OSError, subprocess.SubprocessError) as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        sys.exit(EXIT_RUNTIME)
