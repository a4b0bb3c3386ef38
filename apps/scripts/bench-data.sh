#!/usr/bin/env bash
# The loader against the training's consumption (issue 38): a 100-shard
# blend (0.7 of 70 llm.c shards, 0.3 of 30 version-2 shards) read by
# `meshbench data` at T = 1024 on one thread, and gpt2-124m training at
# T = 1024 on one rank (all the machine's cores, a thread each), in one
# invocation. Prints both tokens/s and their ratio (goal: >= 20).
#   apps/scripts/bench-data.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${1:-build}
OUT=outputs/bench-data
rm -rf "$OUT"
mkdir -p "$OUT/web" "$OUT/code"
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $cores cores" | tee "$OUT/summary.txt"
# 100 shards of 256 KiB of the generated corpus each (about 256 windows each)
"$BUILD/bin/meshdata" corpus "$OUT/corpus.txt" --bytes 25M > /dev/null
split -b 262144 -d -a 3 "$OUT/corpus.txt" "$OUT/part"
i=0
for p in "$OUT"/part*; do
  if [ $i -lt 70 ]; then dst="$OUT/web/$(basename "$p").bin"; fmt=llmc
  else dst="$OUT/code/$(basename "$p").bin"; fmt=llmc2; fi
  [ $i -lt 100 ] && "$BUILD/bin/meshdata" encode "$p" "$dst" --format $fmt > /dev/null
  rm "$p"; i=$((i + 1))
done
blend="0.7 web=$OUT/web, 0.3 code=$OUT/code/*.bin"
# the loader: one thread, pinned to a core of its own
OMP_NUM_THREADS=1 taskset -c 0 "$BUILD/bin/meshbench" data --blend "$blend" --T 1024 \
  --samples 20000 --json "$OUT/data.jsonl" | tee "$OUT/loader.txt"
# the training: gpt2-124m, T = 1024, one rank, micro-batch 1, every core a thread
mpirun --oversubscribe -n 1 --bind-to none -x OMP_NUM_THREADS="$cores" "$BUILD/bin/meshtrain" \
  --set model.preset=gpt2-124m --set model.seq_len=1024 --set data.blend="$blend" \
  --set train.global_batch=1 --set train.micro_batch=1 --set train.steps=3 \
  --set train.warmup_steps=1 --set train.eval_every=0 --set ckpt.mode=none \
  --set output.dir="$OUT/train" > "$OUT/train.log" 2>&1 || { cat "$OUT/train.log"; exit 1; }
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
loader = json.loads(open(out + "/data.jsonl").readline())
steps = [json.loads(l) for l in open(out + "/train/metrics.jsonl")]
train = sorted(r["tokens_per_s"] for r in steps[1:])[len(steps[1:]) // 2]  # median, after step 1
print("loader   %12.4g tokens/s  (%d files, one thread, T=1024)" % (loader["tokens_per_s"], loader["files"]))
print("training %12.4g tokens/s  (gpt2-124m, T=1024, one rank, median of steps 2..%d)" % (train, len(steps)))
print("ratio    %12.1f x  (goal >= 20)" % (loader["tokens_per_s"] / train))
PY
