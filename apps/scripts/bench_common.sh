# Shared by the benchmark scripts: the build, the environment, an empty
# outputs/bench-NAME ($OUT), the default corpus, and the launcher (as root,
# allowed; more ranks than cores, oversubscribed; extra mpirun options after
# the name, e.g. --bind-to none so a rank's threads each get a core).
#   source "$(dirname "$0")/bench_common.sh" NAME [MPIRUN-OPTION...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash apps/scripts/setup.sh build >/dev/null
source apps/scripts/env.sh build
OUT=outputs/bench-$1
shift
rm -rf "$OUT"
mkdir -p "$OUT" inputs/data
[ -f inputs/data/corpus.txt ] || build/bin/meshdata corpus inputs/data/corpus.txt
launcher=(mpirun --oversubscribe "$@")
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
# meshtrain on N ranks, its output in DIR and its log in DIR.log; a failed
# run ends the script
#   train_into DIR N [MESHTRAIN-OPTION...]
train_into() {
  local dir=$1 n=$2
  shift 2
  "${launcher[@]}" -n "$n" build/bin/meshtrain "$@" --set output.dir="$dir" > "$dir.log" 2>&1 \
    || { echo "failed: $dir (see $dir.log)"; exit 1; }
}
