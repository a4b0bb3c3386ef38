"""The job script: one skeleton for every job (train, bench, ckpt-convert,
a campaign's report), its #SBATCH directives, module loading, TMPDIR, the
signal trap and what each exit code of the application does."""
import os
import re
import shlex

from .common import (EXIT_CANCELLED, EXIT_REQUEUE, SRC, BadInput, format_walltime, parse_walltime,
                     q)

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
MAX_FAILURES=@MAX_FAILURES@
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

# Stop signals. The application runs in the background and the script waits
# for it: bash runs a trap only between commands, so a foreground application
# would delay it until the end. Both signals are forwarded to the application:
#   USR1  Slurm's warning @SIGNAL_S@ s before the walltime (--signal=B:USR1), or a
#         preemption drill (scancel --batch --signal=USR1 JOBID): meshtrain
#         writes a checkpoint and exits @EXIT_REQUEUE@; the job requeues itself and resumes.
#   TERM  scancel JOBID (Slurm sends it to the job's steps too): meshtrain
#         writes a checkpoint and exits @EXIT_CANCELLED@; the job ends for good (status
#         "cancelled after a checkpoint at step N"), never requeued.
APP_PID=""
CANCELLED=0
PREEMPTED=""  # the time (s) USR1 was forwarded, or empty
FINISHING=0  # the application has ended: this attempt only writes its status now
forward() {
  log "received SIG$1; forwarding it to the application${APP_PID:+ (pid $APP_PID)}"
  if [ -n "$APP_PID" ]; then kill -s "$1" "$APP_PID" 2>/dev/null; fi
}
on_term() {
  # Slurm ends the old attempt of a job this script requeued with TERM too
  if [ "$FINISHING" = 1 ]; then log "received SIGTERM while finishing (exit $FINISH_RC); ignored"; return; fi
  CANCELLED=1
  set_status "cancelling: SIGTERM received${APP_PID:+, the application is writing a checkpoint}"
  forward TERM
}
on_usr1() {
  [ -n "$PREEMPTED" ] || PREEMPTED=$(date +%s)
  forward USR1
}
trap on_usr1 USR1
trap on_term TERM

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
# a task that dies (a lost rank) ends the step at once: the others are not
# left waiting for it until the watchdog's deadline
if [ "${LAUNCH[0]}" = srun ]; then LAUNCH+=(--kill-on-bad-exit=1); fi

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

# the step of the run's newest checkpoint (checkpoints/latest names it), or ""
checkpoint_step() {
  local latest
  latest=$(cat "$RUN_DIR/checkpoints/latest" 2>/dev/null) || return 0
  latest=${latest##*step_}
  case "$latest" in '' | *[!0-9]*) ;; *) echo "$latest" ;; esac
}

# cancelled RC: scancel (SIGTERM) stopped the job; it is never requeued
cancelled() {
  local rc=$1 step
  step=$(checkpoint_step)
  if [ "$rc" -eq @EXIT_CANCELLED@ ] && [ -n "$step" ]; then
    set_status "cancelled after a checkpoint at step $step"
    log "cancelled: the application wrote a checkpoint at step $step and stopped (exit $rc);" \
        "not requeued. To go on: sbatch $RUN_DIR/job.sh (it resumes from that checkpoint)"
  else
    set_status "cancelled (exit $rc${step:+; newest checkpoint: step $step})"
    log "cancelled (exit $rc); not requeued"
  fi
  exit "$rc"
}

# requeue RC STATUS: the job goes again (scontrol requeue, else a new
# submission after this one) and resumes from the newest checkpoint
requeue() {
  local rc=$1
  set_status "$2"
  if scontrol requeue "${SLURM_JOB_ID:-}"; then log "requeued; it resumes from the latest checkpoint"; exit 0; fi
  log "scontrol requeue failed; resubmitting $RUN_DIR/job.sh after this job"
  if sbatch --dependency="afterany:${SLURM_JOB_ID:-0}" "$RUN_DIR/job.sh"; then exit 0; fi
  set_status "failed: exit $rc, and the job could not be requeued"; exit "$rc"
}

# failed RC: 3 (a runtime failure: the watchdog ended a hang, a rank was
# lost, a disk failed) or a rank killed by a signal (above 128) requeue when
# a checkpoint exists, at most MAX_FAILURES times a run (RUN_DIR/failures
# counts them); bad input (2) and the rest end the job
failed() {
  local rc=$1 step n
  step=$(checkpoint_step)
  if [ "$rc" -eq 3 ] || [ "$rc" -gt 128 ]; then
    n=$(( $(cat "$RUN_DIR/failures" 2>/dev/null || echo 0) + 1 ))
    echo "$n" > "$RUN_DIR/failures"
    if [ -n "$step" ] && [ "$n" -le "$MAX_FAILURES" ] && [ "$RESTART" -lt "$MAX_RESTARTS" ]; then
      log "application failed with exit code $rc (3: a runtime failure, e.g. the watchdog or a" \
          "lost rank; above 128: killed by a signal); failure $n of at most $MAX_FAILURES:" \
          "the job requeues and resumes from the checkpoint at step $step"
      requeue "$rc" "requeued: failed (exit $rc), resumes from step $step"
    fi
    log "not requeued: ${step:+failure $n, at most $MAX_FAILURES; }${step:-no checkpoint to resume from}"
  fi
  set_status "failed: exit $rc"; log "application failed with exit code $rc"; exit "$rc"
}

# finish RC: 0 done; @EXIT_REQUEUE@ checkpointed -> requeue (or resubmit); @EXIT_CANCELLED@ or any exit
# after SIGTERM -> cancelled for good; else failed
finish() {
  local rc=$1 written
  FINISHING=1 FINISH_RC=$rc
  if [ "$CANCELLED" = 1 ] && [ "$rc" -ne 0 ]; then cancelled "$rc"; fi
  # after USR1, a checkpoint written since then is the preemption's, whatever
  # srun reports: with --kill-on-bad-exit the first rank to exit
  # @EXIT_REQUEUE@ makes srun terminate the others, and their status (76
  # from the SIGTERM, or a signal's) can be the step's
  if [ -n "$PREEMPTED" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne @EXIT_REQUEUE@ ]; then
    written=$(stat -c %Y "$RUN_DIR/checkpoints/latest" 2>/dev/null || echo 0)
    if [ "$written" -ge "$PREEMPTED" ]; then
      log "srun reported exit $rc after the checkpoint that SIGUSR1 asked for" \
          "(ranks ended by srun once one exited @EXIT_REQUEUE@): taken as exit @EXIT_REQUEUE@"
      rc=@EXIT_REQUEUE@
    fi
  fi
  case "$rc" in
    0) set_status done; log "finished"; exit 0 ;;
    @EXIT_CANCELLED@) cancelled "$rc" ;;
    @EXIT_REQUEUE@)
      # srun has just reported "exited with exit code @EXIT_REQUEUE@": that is this
      local step; step=$(checkpoint_step)
      log "the application wrote a checkpoint${step:+ at step $step} and stopped (exit @EXIT_REQUEUE@:" \
          "preempted or near the walltime); the job requeues and resumes from that checkpoint"
      if [ "$RESTART" -ge "$MAX_RESTARTS" ]; then
        set_status "failed: checkpointed, but $MAX_RESTARTS restarts used"
        log "not requeueing: restart limit $MAX_RESTARTS reached"; exit "$rc"
      fi
      requeue "$rc" "requeued: checkpointed (exit $rc)${step:+ at step $step}" ;;
    *) failed "$rc" ;;
  esac
}

# run_step CMD...: one application run; stop the job unless it succeeded
run_step() {
  if [ "$CANCELLED" = 1 ]; then cancelled @EXIT_CANCELLED@; fi  # scancel before it started
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


def modules_block(system, modules, which):
    """The job's module loading: modules ((name, module) of the profile's
    [modules], which says which of them), or a note."""
    if not modules:
        return "# (no modules in the profile's [modules])\n"
    rel = os.path.relpath(system.path, SRC)
    return "\n".join([
        "# %s of the profile ([modules] in %s; the build modules," % (which, rel),
        "# [build_modules], are for building only), loaded one by one: one that",
        "# does not load ends the job here, naming it",
        "MODULES=(%s)" % " ".join(q(m) for _, m in modules),
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

    def unless_unset(directive, key):
        """a resource the profile may leave unset (empty or 0): no directive then"""
        if res[key]:
            lines.append(directive % res[key])

    unless_unset("--partition=%s", "partition")
    unless_unset("--qos=%s", "qos")
    unless_unset("--account=%s", "account")
    lines.append("--nodes=%d" % res["nodes"])
    if res["ranks"] == res["nodes"] * res["tasks_per_node"]:
        lines.append("--ntasks-per-node=%d" % res["tasks_per_node"])
    else:
        lines.append("--ntasks=%d" % res["ranks"])
    unless_unset("--cpus-per-task=%d", "cpus_per_task")
    unless_unset("--gpus-per-node=%d", "gpus_per_node")
    unless_unset("--mem=%d", "mem_mb")
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
            raise BadInput("%d ranks do not fit on %d nodes x %d tasks per node (--nodes %d, or "
                           "--tasks-per-node %d)" % (ranks, nodes, tpn, -(-ranks // tpn),
                                                    -(-ranks // nodes)))
        if ranks < nodes:
            raise BadInput("%d ranks cannot fill %d nodes (--nodes %d or fewer)" % (ranks, nodes, ranks))
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
                  env_args=(), max_restarts=10, job_name=None, requeue=True, exclusive=True,
                  report=False, max_failures=3):
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
        "@NOTES@": notes, "@MODULES@": modules_block(system, system.report_module_list() if report else system.modules,
                                   "the report job's modules (report_modules)" if report and
                                   system.report_modules else "the run modules"), "@TMPDIR@": tmpdir_block(system),
        "@DIRECTIVES@": sbatch_directives(system, res, job_name or "mt-" + job, run_dir, workdir,
                                          exclusive=exclusive, requeue=requeue),
        "@JOB@": job, "@SYSTEM@": system.name, "@PROFILE@": os.path.relpath(system.path, SRC),
        "@COMMAND@": command_line, "@MT_SRC@": q(SRC), "@MT_BIN@": q(bin_dir),
        "@RUN_DIR@": q(run_dir), "@MAX_RESTARTS@": str(int(max_restarts)),
        "@MAX_FAILURES@": str(int(max_failures)), "@WORKDIR@": q(workdir),
        "@ENV_FILE@": q(env_file), "@EXPORTS@": env_exports(system, env_args),
        "@LAUNCH@": " ".join(q(a) for a in system.launcher), "@SIGNAL_S@": str(res["signal_s"]),
        "@EXIT_REQUEUE@": str(EXIT_REQUEUE), "@EXIT_CANCELLED@": str(EXIT_CANCELLED), "@BODY@": body,
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


