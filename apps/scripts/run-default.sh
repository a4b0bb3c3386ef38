#!/usr/bin/env bash
# The default job: install and build if needed, make the default corpus, then
# train the `small` GPT data-parallel on 4 MPI ranks (inputs/default.ini).
# Results: outputs/default/{metrics.jsonl,summary.json,config.ini}.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash apps/scripts/setup.sh build
source apps/scripts/env.sh build
mkdir -p inputs/data outputs
[ -f inputs/data/corpus.txt ] || build/bin/meshdata corpus inputs/data/corpus.txt
launcher=(mpirun --oversubscribe -n 4)
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
# one compute thread per rank: 4 ranks share the machine's cores
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${launcher[@]}" build/bin/meshtrain inputs/default.ini "$@"
