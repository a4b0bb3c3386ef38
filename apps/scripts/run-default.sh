#!/usr/bin/env bash
# The default job: install and build if needed, make the default corpus, then
# train the `small` GPT data-parallel on 4 MPI ranks (inputs/default.ini),
# checkpoint at step 60 and stop, and resume on 2 ranks (another layout) to
# finish the 100 steps: the loss curve continues where it left off.
# Results: outputs/default/{metrics.jsonl,summary.json,config.ini,checkpoints/}.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash apps/scripts/setup.sh build
source apps/scripts/env.sh build
mkdir -p inputs/data outputs
[ -f inputs/data/corpus.txt ] || build/bin/meshdata corpus inputs/data/corpus.txt
launcher=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
out=outputs/default
rm -rf "$out/checkpoints"
# one compute thread per rank: the ranks share the machine's cores
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "== part 1: dp=4 (ZeRO-1) on 4 ranks, steps 1-60, then checkpoint and stop"
"${launcher[@]}" -n 4 build/bin/meshtrain inputs/default.ini --set train.stop_after=60 \
  --set train.log_every=10 "$@"
echo "== part 2: resume the step-60 checkpoint as dp=2 (no ZeRO) on 2 ranks, steps 61-100"
"${launcher[@]}" -n 2 build/bin/meshtrain inputs/default.ini --set parallel.dp=2 \
  --set parallel.zero=0 --set train.resume=auto --set train.log_every=10 "$@"
build/bin/meshckpt verify "$out/checkpoints"
python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
by = {r["step"]: r["loss"] for r in recs}
print("loss: step 1 %.3f, step 58-60 %s | resumed on another layout: step 61-63 %s, step %d %.3f"
      % (by[1], " ".join("%.3f" % by[s] for s in (58, 59, 60)),
         " ".join("%.3f" % by[s] for s in (61, 62, 63)), max(by), by[max(by)]))
PY
build/bin/meshreport "$out" --out "$out/report" --name "default job"
