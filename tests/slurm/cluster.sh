# A real, private Slurm cluster for one test: munged, slurmctld and two
# emulated nodes n1 n2 (slurmd -N), shaped like LEONARDO Booster nodes (32
# CPUs, 4 fake GPUs, partition boost_usr_prod), all on this host. Sourced by
# the tests after common.sh:
#   source "$(dirname "$0")/cluster.sh"
#   cluster_start            # SKIPs (exit 77) when Slurm cannot run here
#   jid=$(cluster_submit SCRIPT [sbatch options])
#   cluster_wait JOBID SECONDS   # prints the final state, e.g. COMPLETED 0:0
# Everything lives in a private temp dir with its own SLURM_CONF and munge
# socket; the daemons are stopped by their PIDs on exit (trap EXIT), and
# their logs are copied to $WORK/cluster-logs.
# See ../shared/notes/local-slurm.md for why each setting is what it is.

CLUSTER_DIR=""
CLUSTER_PIDS=()

skip() { echo "SKIP: $*"; exit 77; }

cluster_stop() {
  local pid f
  [ -n "$CLUSTER_DIR" ] || return 0
  for f in "$CLUSTER_DIR"/slurmd-n1.pid "$CLUSTER_DIR"/slurmd-n2.pid "$CLUSTER_DIR"/slurmctld.pid \
           "$CLUSTER_DIR"/munged.pid; do
    [ -f "$f" ] && CLUSTER_PIDS+=("$(cat "$f")")
  done
  for pid in "${CLUSTER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  # slurmstepd children of slurmd die with their steps; wait a moment for all
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    local alive=0
    for pid in "${CLUSTER_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.5
  done
  for pid in "${CLUSTER_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  mkdir -p "$WORK/cluster-logs"
  cp "$CLUSTER_DIR"/*.log "$CLUSTER_DIR"/slurm.conf "$WORK/cluster-logs/" 2>/dev/null || true
  rm -rf "$CLUSTER_DIR"
  CLUSTER_DIR=""
}

# Slurm comes from the setup script (apps/scripts/setup.sh installs slurmctld,
# slurmd, slurm-client and munge with the other Debian packages); a test never
# installs software: without them it is skipped, with the reason.
cluster_need_packages() {
  local missing="" cmd
  for cmd in slurmctld slurmd sbatch munged munge unmunge; do
    command -v "$cmd" >/dev/null || [ -x "/usr/sbin/$cmd" ] || missing="$missing $cmd"
  done
  [ -z "$missing" ] ||
    skip "Slurm is not installed (missing:$missing); apps/scripts/setup.sh installs it (as root on Debian: apt-get install slurmctld slurmd slurm-client munge)"
}

cluster_start() {
  cluster_need_packages
  [ "$(id -u)" = 0 ] || skip "the local Slurm cluster runs its daemons as root (SlurmUser=root); not root here"
  CLUSTER_DIR=$(mktemp -d /tmp/mtslurm.XXXXXX)
  trap cluster_stop EXIT
  local d=$CLUSTER_DIR host
  host=$(hostname -s)
  # distinct ports per test, so a lingering socket of a previous test is harmless
  local base=$((17100 + ($(printf '%s' "$MT_NAME${MT_SUFFIX:-}" | cksum | cut -d' ' -f1) % 200) * 4))
  mkdir -p "$d/state" "$d/munge" "$d/spool-n1" "$d/spool-n2" "$d/tmp-n1" "$d/tmp-n2"
  chmod 700 "$d/munge"

  # a private munged with its own key and socket
  dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$d/munge/munge.key"
  /usr/sbin/munged --force --socket="$d/munge/socket" --key-file="$d/munge/munge.key" \
    --pid-file="$d/munged.pid" --log-file="$d/munged.log" --seed-file="$d/munge/seed" \
    >"$d/munged.out" 2>&1 || { cat "$d/munged.out" "$d/munged.log" 2>/dev/null; skip "munged does not start here"; }
  munge --socket="$d/munge/socket" -n | unmunge --socket="$d/munge/socket" >/dev/null 2>&1 ||
    skip "munge does not work here (munge -n | unmunge)"

  cat > "$d/slurm.conf" <<EOF
ClusterName=mtlocal
SlurmctldHost=$host
SlurmctldPort=$base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it starts again
AuthInfo=socket=$d/munge/socket,cred_expire=10
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
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool-%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd-%n.log
SlurmdParameters=config_overrides
TmpFS=$d/tmp-%n
GresTypes=gpu
KillWait=5
MinJobAge=600
InactiveLimit=0
NodeName=n[1-2] NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + 1))-$((base + 2)) CPUs=32 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=494000 Gres=gpu:4 State=UNKNOWN
PartitionName=boost_usr_prod Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
EOF
  # fake GPUs must be character devices
  cat > "$d/gres.conf" <<EOF
NodeName=n[1-2] Name=gpu File=/dev/null
NodeName=n[1-2] Name=gpu File=/dev/zero
NodeName=n[1-2] Name=gpu File=/dev/full
NodeName=n[1-2] Name=gpu File=/dev/urandom
EOF
  export SLURM_CONF="$d/slurm.conf"
  # keep the submitting test's Slurm variables (if ctest itself ran in a job) out
  unset SLURM_JOB_ID SLURM_JOBID SLURM_NODELIST SLURM_JOB_NODELIST SLURM_NTASKS SLURM_NNODES SLURM_JOB_NUM_NODES SLURM_RESTART_COUNT

  slurmctld -i >"$d/slurmctld.out" 2>&1 || { cat "$d/slurmctld.out" "$d/slurmctld.log"; fail "slurmctld did not start"; }
  slurmd -N n1 >"$d/slurmd-n1.out" 2>&1 || { cat "$d/slurmd-n1.out" "$d/slurmd-n1.log"; fail "slurmd n1 did not start"; }
  slurmd -N n2 >"$d/slurmd-n2.out" 2>&1 || { cat "$d/slurmd-n2.out" "$d/slurmd-n2.log"; fail "slurmd n2 did not start"; }
  local i
  for i in $(seq 1 60); do
    if [ "$(sinfo -h -o '%t' -p boost_usr_prod 2>/dev/null | sort -u | tr -d '\n')" = "idle" ] &&
       [ "$(sinfo -h -N -o '%N' 2>/dev/null | sort -u | wc -l)" = 2 ]; then
      echo "cluster: 2 nodes idle after $((i / 2)) s (SLURM_CONF=$SLURM_CONF)"
      return 0
    fi
    sleep 0.5
  done
  sinfo -N -l || true
  tail -20 "$d/slurmctld.log" "$d/slurmd-n1.log" || true
  fail "the local Slurm cluster did not come up in 30 s"
}

# cluster_submit SCRIPT [sbatch options...]: the job id
cluster_submit() {
  local script=$1; shift
  local out
  out=$(sbatch --parsable "$@" "$script") || fail "sbatch $script failed"
  echo "${out%%;*}"
}

# cluster_state JOBID: "STATE EXITCODE RESTARTS" from scontrol
cluster_state() {
  scontrol show job "$1" 2>/dev/null | tr ' ' '\n' |
    awk -F= '$1=="JobState"{s=$2} $1=="ExitCode"{e=$2} $1=="Restarts"{r=$2} END{print s, e, r}'
}

# cluster_wait JOBID SECONDS: waits until the job ended; prints "STATE EXITCODE RESTARTS"
cluster_wait() {
  local jid=$1 limit=$2 t=0 st
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
