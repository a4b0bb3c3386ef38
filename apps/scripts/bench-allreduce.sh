#!/usr/bin/env bash
# meshbench allreduce against a bare MPI_Allreduce loop, same machine, same
# run: busbw at 1, 16 and 64 MiB on 2 and 4 ranks, and their ratio.
#   bash apps/scripts/bench-allreduce.sh [BUILD_DIR] [ROUNDS]
# The bare loop (compiled here from the C below) times exactly what meshbench
# times: in-place float sum, 5 warm-up calls, then 20 calls between a barrier
# and the slowest rank's clock. Rounds alternate meshbench and bare and each
# figure is the median over rounds: these machines are noisy.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
ROUNDS=${2:-3}
source apps/scripts/env.sh "$BUILD" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat > "$TMP/bare.c" <<'C'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* bare SIZE_BYTES...: busbw of MPI_Allreduce(IN_PLACE, float, SUM) per size */
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  for (int a = 1; a < argc; a++) {
    long bytes = atol(argv[a]);
    int count = (int)(bytes / 4);
    float *buf = calloc((size_t)count, sizeof(float));
    for (int i = 0; i < 5; i++) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < 20; i++) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t /= 20;
    if (rank == 0) printf("%ld %.9g\n", bytes, (double)bytes / t * 1e-9 * 2.0 * (n - 1) / n);
    free(buf);
  }
  MPI_Finalize();
  return 0;
}
C
mpicc -O2 -o "$TMP/bare" "$TMP/bare.c"
SIZES="1048576 16777216 67108864"
for np in 2 4; do
  for r in $(seq 1 "$ROUNDS"); do
    # --check 0: the bare loop checks nothing either (the check would evict the caches between sizes)
    mpirun --oversubscribe -n "$np" "$BUILD/bin/meshbench" allreduce --sizes 1M,16M,64M --iters 20 --warmup 5 --check 0 \
      --json "$TMP/mesh-$np.jsonl" > /dev/null
    # shellcheck disable=SC2086
    mpirun --oversubscribe -n "$np" "$TMP/bare" $SIZES >> "$TMP/bare-$np.txt"
  done
done
python3 - "$TMP" "$ROUNDS" <<'PY'
import json, statistics, sys, os
tmp, rounds = sys.argv[1], int(sys.argv[2])
print("allreduce busbw (GB/s), median of %d alternating rounds; ratio = meshbench / bare MPI_Allreduce" % rounds)
print("%6s %10s %12s %12s %7s" % ("ranks", "size", "meshbench", "bare MPI", "ratio"))
for np in (2, 4):
    mesh, bare = {}, {}
    for l in open(os.path.join(tmp, "mesh-%d.jsonl" % np)):
        r = json.loads(l); mesh.setdefault(int(r["bytes"]), []).append(r["busbw_gbs"])
    for l in open(os.path.join(tmp, "bare-%d.txt" % np)):
        b, bw = l.split(); bare.setdefault(int(b), []).append(float(bw))
    for b in sorted(mesh):
        m, x = statistics.median(mesh[b]), statistics.median(bare[b])
        print("%6d %9dM %12.3f %12.3f %7.3f" % (np, b >> 20, m, x, m / x))
PY
