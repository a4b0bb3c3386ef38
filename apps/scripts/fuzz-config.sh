#!/usr/bin/env bash
# Fuzz the configuration loader (INI files and --set overrides) with
# libFuzzer, under AddressSanitizer and UndefinedBehaviorSanitizer; not part
# of the suite. The target (tests/fuzz/config_fuzz.c) also checks that every
# error is one line and that an accepted configuration survives
# mt_config_write_ini -> mt_config_load unchanged. Seeds: the INI files of
# the repository. A finding is a crash-* file under OUT and exit 1.
#   apps/scripts/fuzz-config.sh [SECONDS (default 300)] [OUT (default outputs/fuzz-config)]
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-300}
OUT=${2:-outputs/fuzz-config}
CC=${CC:-clang}
command -v "$CC" > /dev/null || { echo "fuzz-config: needs clang with libFuzzer ($CC not found)" >&2; exit 2; }
mkdir -p "$OUT/corpus" "$OUT/seeds"
find inputs tests slurm -name '*.ini' -size -64k 2>/dev/null | while read -r f; do
  { printf '\0'; cat "$f"; } > "$OUT/seeds/$(echo "$f" | tr / _)"
done
printf '\001train.lr=3e-4\nparallel.dp=2\nmodel.preset=tiny\n' > "$OUT/seeds/overrides"
# shellcheck disable=SC2046
"$CC" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Ilib $(mpicc -showme:compile) -o "$OUT/config_fuzz" \
  tests/fuzz/config_fuzz.c lib/core/config.c lib/core/log.c lib/core/mem.c \
  $(mpicc -showme:link) $(pkg-config --libs inih) -lm
echo "fuzz-config: $SECS s of libFuzzer on mt_config_load ($(ls "$OUT/seeds" | wc -l) seeds)"
set +e
(cd "$OUT" && ./config_fuzz -max_total_time="$SECS" -max_len=4096 -timeout=10 \
  -artifact_prefix=./ -print_final_stats=1 corpus seeds) > "$OUT/fuzz.log" 2>&1
rc=$?
set -e
grep -E "^stat::|Done|ERROR|SUMMARY|fuzz:" "$OUT/fuzz.log" | head -20
if ls "$OUT"/crash-* "$OUT"/leak-* "$OUT"/timeout-* > /dev/null 2>&1; then
  echo "fuzz-config: findings (inputs under $OUT):"
  ls "$OUT"/crash-* "$OUT"/leak-* "$OUT"/timeout-* 2>/dev/null
  exit 1
fi
[ $rc -eq 0 ] || { tail -30 "$OUT/fuzz.log"; exit 1; }
echo "fuzz-config: no finding in $SECS s ($(ls "$OUT/corpus" | wc -l) inputs in the corpus)"
