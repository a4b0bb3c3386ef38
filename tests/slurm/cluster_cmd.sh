# The local cluster command users run (`python3 slurm/meshslurm.py cluster
# start|status|stop`), with no environment at all (env -i) from an empty
# directory: it starts and returns with the cluster up, reports status, runs a
# 2-node job, stops, and leaves no daemon behind and nothing outside its
# directory. Where strace exists, every file the command, its daemons and the
# job's steps create, write, rename or remove is checked against that
# directory; always, the places munge and Slurm write by default, the file
# system root and the working directory are checked.
source "$(dirname "$0")/../scripts/common.sh"
C="$WORK/c"
# the system python (a shim such as pyenv's is slow without its environment)
PY=$(command -v /usr/bin/python3 || command -v python3)
CLUSTER=(env -i "$PY" "$MT_SRC/slurm/meshslurm.py" cluster)
mkdir -p "$WORK/cwd"
cd "$WORK/cwd"
trap '"${CLUSTER[@]}" stop --dir "$C" > /dev/null 2>&1 || true' EXIT
touch "$WORK/marker"
sleep 1  # file times after the marker's
root_before=$(ls -A /)

# start (traced when strace is here: it follows the daemons until they stop)
TRACE=""
if command -v strace > /dev/null; then
  TRACE="$WORK/trace.log"
  strace -f -qq -o "$TRACE" -e trace=open,openat,creat,mkdir,mkdirat,mknod,mknodat,rename,renameat,renameat2,link,linkat,symlink,symlinkat,unlink,unlinkat,rmdir,truncate \
    "${CLUSTER[0]}" -i /bin/sh -c '"$0" "$@"; echo "start exit $?"' "$PY" "$MT_SRC/slurm/meshslurm.py" cluster start --dir "$C" \
    > "$WORK/start.out" 2>&1 &
  STRACE_PID=$!
  for _ in $(seq 1 $((2 * ${MT_TIMEOUT:-300}))); do  # the hang guard: 0.5 s a turn
    grep -q '^start exit' "$WORK/start.out" && break
    kill -0 "$STRACE_PID" 2>/dev/null || break
    sleep 0.5
  done
  rc=$(sed -n 's/^start exit //p' "$WORK/start.out")
else
  echo "(no strace here: checking the default places of munge and Slurm only)"
  rc=0; "${CLUSTER[@]}" start --dir "$C" > "$WORK/start.out" 2>&1 || rc=$?
fi
cat "$WORK/start.out"
[ "$rc" != 77 ] || { echo "SKIP: $(grep unavailable "$WORK/start.out")"; exit 77; }
[ "$rc" = 0 ] || fail "cluster start exited '$rc'"
grep -qx "export SLURM_CONF=$C/slurm.conf" "$WORK/start.out" || fail "start did not print the export line"

# it stays up after the command returned
"${CLUSTER[@]}" status --dir "$C" > "$WORK/status.out" || { cat "$WORK/status.out"; fail "status after start"; }
cat "$WORK/status.out"
grep -Eq '^n1 boost_usr_prod\* idle 32 494000 gpu:4$' "$WORK/status.out" &&
  grep -Eq '^n2 boost_usr_prod\* idle 32 494000 gpu:4$' "$WORK/status.out" || fail "status: nodes not idle"
pids=$(awk '$NF ~ /^[0-9]+$/ && $(NF-1) == "pid" {print $NF}' "$WORK/status.out")
[ "$(wc -w <<< "$pids")" = 4 ] || fail "status lists $(wc -w <<< "$pids") daemon pids, expected 4"
"${CLUSTER[@]}" start --dir "$C" | grep -q "already running" || fail "a second start did not notice the first"

# a job on both nodes, as a user submits it
export SLURM_CONF="$C/slurm.conf"
sbatch --wait --nodes 2 --ntasks-per-node 2 --output "$WORK/job.out" --chdir "$WORK" \
  --wrap 'srun hostname | wc -l' > /dev/null || { cat "$WORK/job.out"; fail "the job failed"; }
[ "$(cat "$WORK/job.out")" = 4 ] || fail "the job ran '$(cat "$WORK/job.out")' tasks, expected 4"

# stop: every daemon gone, status says so
"${CLUSTER[@]}" stop --dir "$C" | grep -q "^cluster: stopped" || fail "stop"
set +e; "${CLUSTER[@]}" status --dir "$C" > "$WORK/status2.out"; rc=$?; set -e
[ "$rc" = 3 ] && grep -q "cluster: not running" "$WORK/status2.out" || fail "status after stop: exit $rc"
for pid in $pids; do
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
  [ -z "$state" ] || [ "$state" = Z ] || fail "daemon $pid still alive after stop (state $state)"
done
for p in /proc/[0-9]*; do
  case "$(cat "$p/comm" 2>/dev/null)" in slurmd|slurmctld|slurmstepd|munged) ;; *) continue ;; esac
  if { tr '\0' '\n' < "$p/environ" | grep -qx "SLURM_CONF=$C/slurm.conf" ||
       tr '\0' ' ' < "$p/cmdline" | grep -q "$C"; } 2>/dev/null; then
    fail "process ${p#/proc/} ($(cat "$p/comm")) of this cluster outlived stop"
  fi
done

# nothing written outside its directory
[ -z "$(ls -A "$WORK/cwd")" ] || fail "the command wrote into its working directory: $(ls -A "$WORK/cwd")"
[ "$(ls -A /)" = "$root_before" ] || fail "the file system root changed: $(ls -A /)"
# where munge and Slurm write unless told otherwise (not /tmp: other users' files
# come and go there; the trace below covers it)
stray=$(find /var/log /var/lib /var/spool /var/run /run /etc -maxdepth 3 -newer "$WORK/marker" \
  \( -name 'munge*' -o -name 'slurm*' \) 2>/dev/null || true)
[ -z "$stray" ] || fail "munge or Slurm files outside $C: $stray"
if [ -n "$TRACE" ]; then
  for _ in $(seq 1 40); do kill -0 "$STRACE_PID" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$STRACE_PID" 2>/dev/null && fail "traced daemons still running 20 s after stop"
  python3 - "$TRACE" "$C" "$WORK/job.out" <<'PY' || fail "files written outside the cluster directory"
import re, sys
trace, cdir, job_out = sys.argv[1:]
pending, bad, n = {}, set(), 0
for line in open(trace):
    pid, rest = line.rstrip("\n").split(" ", 1)
    if rest.endswith("<unfinished ...>"):
        pending[pid] = rest[:-len("<unfinished ...>")]
        continue
    m = re.match(r"<\.\.\. (\w+) resumed>(.*)", rest)
    if m:
        rest = pending.pop(pid, m.group(1) + "(") + m.group(2)
    m = re.match(r"(\w+)\((.*)\)\s+= (-?\d+)", rest)
    if not m or int(m.group(3)) < 0:
        continue  # failed calls change nothing
    name, args = m.group(1), m.group(2)
    if name in ("open", "openat") and not re.search(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC", args):
        continue
    n += 1
    for path in re.findall(r'"((?:[^"\\]|\\.)*)"', args)[:2]:
        if path.startswith((cdir + "/", "/dev/", "/proc/")) or path in (cdir, job_out):
            continue
        if not path.startswith("/"):
            continue  # relative to a directory descriptor: opened below the cluster directory
        bad.add("%s %s" % (name, path))
print("trace: %d successful writing calls, %d outside %s" % (n, len(bad), cdir))
for b in sorted(bad):
    print("  outside:", b)
sys.exit(1 if bad else 0)
PY
fi
echo "PASS: cluster start/status/job/stop under env -i, no daemon left, nothing written outside $C"
