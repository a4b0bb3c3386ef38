# A real, private Slurm cluster for one test: `meshslurm.py cluster start`
# (munged, slurmctld and two emulated LEONARDO-shaped nodes n1 n2 in
# $WORK/cluster, the same command users run). Sourced by the tests after
# common.sh:
#   source "$(dirname "$0")/cluster.sh"
#   cluster_start            # SKIPs (exit 77, with the reason) when Slurm cannot run here
#   jid=$(cluster_submit SCRIPT [sbatch options])
#   cluster_wait JOBID SECONDS   # prints the final state, e.g. COMPLETED 0:0 1
# The cluster is stopped by its daemons' PIDs when the test exits (trap EXIT);
# its configuration and logs stay in $WORK/cluster for a look after a failure.

CLUSTER_DIR=""

skip() { echo "SKIP: $*"; exit 77; }

cluster_cmd() { python3 "$MT_SRC/slurm/meshslurm.py" cluster "$@" --dir "$CLUSTER_DIR"; }

cluster_stop() {
  local rc=$?
  [ -n "$CLUSTER_DIR" ] || return 0
  # a failed test shows how its jobs ended (a crash's backtrace, a rank's
  # last words): the tail of every job log under $WORK
  if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
    local f
    while IFS= read -r f; do
      echo "--- tail of ${f#"$WORK"/}"; tail -n 40 "$f"
    done < <(find "$WORK" -name 'slurm-*.out' 2>/dev/null | sort)
  fi
  cluster_cmd stop || true
  CLUSTER_DIR=""
}

cluster_start() {
  CLUSTER_DIR="$WORK/cluster"
  trap cluster_stop EXIT
  local out rc=0
  out=$(cluster_cmd start 2>&1) || rc=$?
  echo "$out"
  [ "$rc" != 77 ] || skip "$(tail -1 <<< "$out")"
  [ "$rc" = 0 ] || fail "meshslurm.py cluster start failed (exit $rc)"
  eval "$(grep '^export SLURM_CONF=' <<< "$out")"
  [ -n "${SLURM_CONF:-}" ] || fail "cluster start printed no SLURM_CONF line"
  # keep the submitting test's Slurm variables (if ctest itself ran in a job) out
  unset SLURM_JOB_ID SLURM_JOBID SLURM_NODELIST SLURM_JOB_NODELIST SLURM_NTASKS SLURM_NNODES \
    SLURM_JOB_NUM_NODES SLURM_RESTART_COUNT
}

# cluster_submit SCRIPT [sbatch options...]: the job id
cluster_submit() {
  local script=$1; shift
  local out
  out=$(sbatch --parsable "$@" "$script") || fail "sbatch $script failed"
  echo "${out%%;*}"
}

# cluster_state JOBID: "STATE EXITCODE RESTARTS" from scontrol (accounting,
# and so sacct, is off on this cluster)
cluster_state() {
  scontrol show job "$1" 2>/dev/null | tr ' ' '\n' |
    awk -F= '$1=="JobState"{s=$2} $1=="ExitCode"{e=$2} $1=="Restarts"{r=$2} END{print s, e, r}'
}

# cluster_wait JOBID SECONDS: waits until the job ended; prints "STATE EXITCODE RESTARTS".
# SECONDS is a hang guard, never below the suite's (MT_TIMEOUT): a slow job is not a failed one.
cluster_wait() {
  local jid=$1 limit=$2 t=0 st
  [ "$limit" -ge "${MT_TIMEOUT:-300}" ] || limit=${MT_TIMEOUT:-300}
  while :; do
    st=$(cluster_state "$jid")
    case "${st%% *}" in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) echo "$st"; return 0 ;;
    esac
    if [ "$t" -ge $((limit * 2)) ]; then
      echo "cluster: job $jid still '$st' after $limit s; cancelling" >&2
      scancel "$jid" 2>/dev/null || true
      echo "TIMEOUT_IN_TEST"
      return 0
    fi
    sleep 0.5; t=$((t + 1))
  done
}
