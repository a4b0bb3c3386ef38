# Thread placement: ranks confined to one CPU (taskset, inherited through
# mpirun --bind-to none) with 2 compute threads get one warning line per node
# from rank 0, naming the fix; the run still completes. One thread on one CPU:
# no warning. With OpenMP binding on, the same verdicts from OpenMP's places.
source "$(dirname "$0")/common.sh"
command -v taskset >/dev/null || { echo "SKIP: taskset (util-linux) is not installed"; exit 77; }
corpus=$(mt_corpus 100000)
run() { # NAME NP THREADS [CPUS]
  taskset -c "${4:-0}" "${MT_GUARD[@]}" "$MT_MPIEXEC" --oversubscribe --bind-to none -n "$2" \
    "$MT_BIN/meshtrain" --set model.preset=tiny --set train.steps=1 --set train.threads="$3" \
    --set parallel.dp="$2" --set train.global_batch=4 --set train.micro_batch=1 \
    --set train.eval_every=0 --set ckpt.mode=none --set data.train="$corpus" \
    --set output.dir="$WORK/$1" > "$WORK/$1.out" 2> "$WORK/$1.err" \
    || { cat "$WORK/$1.err"; fail "$1: run failed"; }
  grep -c "^meshtrain: warning: node " "$WORK/$1.err" || true
}
n=$(run one_rank 1 2)
[ "$n" -eq 1 ] || { cat "$WORK/one_rank.err"; fail "1 rank, 2 threads on 1 CPU: $n warning lines, expected 1"; }
grep "^meshtrain: warning: node " "$WORK/one_rank.err" | grep -q "rank 0 (CPUs 0; 1 of the node's 1 ranks alike) has 2 compute threads but an affinity mask of 1 CPU.*mpirun --bind-to none, or --map-by slot:PE=2; Slurm: --cpus-per-task=2" \
  || { cat "$WORK/one_rank.err"; fail "the warning does not say what and how"; }
n=$(run two_ranks 2 2)
[ "$n" -eq 1 ] || { cat "$WORK/two_ranks.err"; fail "2 ranks on one node: $n warning lines, expected 1 (one per node)"; }
grep -q "2 of the node's 2 ranks alike" "$WORK/two_ranks.err" || { cat "$WORK/two_ranks.err"; fail "2 ranks: not counted"; }
n=$(run fits 1 1)
[ "$n" -eq 0 ] || { cat "$WORK/fits.err"; fail "1 thread on 1 CPU warned"; }
# OpenMP binding on (OMP_PLACES, OMP_PROC_BIND: LEONARDO's env.sh sets them)
# binds the main thread to one place before the check: the check takes the
# places' CPUs, so 2 threads on 2 CPUs do not warn, 2 on 1 CPU still do
n=$(OMP_PLACES=cores OMP_PROC_BIND=close run bound_short 1 2 0)
[ "$n" -eq 1 ] || { cat "$WORK/bound_short.err"; fail "OpenMP binding, 2 threads on 1 CPU: $n warning lines, expected 1"; }
if [ "$(nproc)" -ge 2 ]; then
  n=$(OMP_PLACES=cores OMP_PROC_BIND=close run bound 1 2 0-1)
  [ "$n" -eq 0 ] || { cat "$WORK/bound.err"; fail "OpenMP binding, 2 threads on 2 CPUs warned"; }
fi
echo "PASS: $(grep '^meshtrain: warning: node' "$WORK/one_rank.err")"
