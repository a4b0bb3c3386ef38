# expect_fail.sh NAME NP REGEX [meshtrain args...]
# Bad input must give: a non-zero exit on every rank, each by itself (mpirun
# is told not to kill the others; no hang, no signal), exactly one error line
# (from rank 0) that matches REGEX, and nothing written to output.dir.
# Placeholders in the arguments become files made here:
#   @CORPUS@       the default corpus (text, 200 kB, bytes 10..121)
#   @CORPUS_LLMC@  the corpus as an llm.c .bin (uint16 ids)
#   @BAD_MAGIC@    that .bin with its magic overwritten (a damaged llm.c file)
#   @VAL_BAD@      the corpus with byte 250 as its last token: only the
#                  held-out validation tail has an id >= 200
#   @FIFO@         a named pipe (opening it for reading would block)
#   @NUL_INI@      an INI file whose data.train value holds a NUL byte
#   @SHARDS@       a directory of 4 llm.c shards of the corpus (part0N.bin)
#   @EMPTY_DIR@    a directory with no token file (a README only)
#   @MIXED_DIR@    an llm.c shard beside a raw .bin (u16 from its name alone)
#   @SHORT_DIR@    a directory of shards of 10 tokens each (no window)
MT_SUFFIX=$1; NP=$2; REGEX=$3; shift 3
source "$(dirname "$0")/common.sh"
corpus=$(mt_corpus 200000)
out="$WORK/out"
mkdir -p "$out"; echo "earlier result" > "$out/metrics.jsonl"
make_input() { # NAME: create the file behind @NAME@, print its path
  case $1 in
    CORPUS) echo "$corpus" ;;
    CORPUS_LLMC) "$MT_INPUT_BIN/meshdata" encode "$corpus" "$WORK/corpus.bin" --format llmc >/dev/null
                 echo "$WORK/corpus.bin" ;;
    BAD_MAGIC) "$MT_INPUT_BIN/meshdata" encode "$corpus" "$WORK/damaged.bin" --format llmc >/dev/null
               printf 'XXXX' | dd of="$WORK/damaged.bin" bs=1 conv=notrunc status=none
               echo "$WORK/damaged.bin" ;;
    VAL_BAD) { cat "$corpus"; printf '\372'; } > "$WORK/val_bad.txt"; echo "$WORK/val_bad.txt" ;;
    FIFO) rm -f "$WORK/tokens.fifo"; mkfifo "$WORK/tokens.fifo"; echo "$WORK/tokens.fifo" ;;
    NUL_INI) printf '[data]\ntrain = %s\000.more\n' "$corpus" > "$WORK/nul.ini"
             echo "$WORK/nul.ini" ;;
    SHARDS) mkdir -p "$WORK/shards"
            split -b 50000 -d -a 2 "$corpus" "$WORK/shards/part"
            for p in "$WORK"/shards/part0?; do
              "$MT_INPUT_BIN/meshdata" encode "$p" "$p.bin" --format llmc >/dev/null; rm "$p"; done
            echo "$WORK/shards" ;;
    EMPTY_DIR) mkdir -p "$WORK/empty"; echo "no tokens here" > "$WORK/empty/README"
               echo "$WORK/empty" ;;
    MIXED_DIR) mkdir -p "$WORK/mixed"
               "$MT_INPUT_BIN/meshdata" encode "$corpus" "$WORK/mixed/a.bin" --format llmc >/dev/null
               "$MT_INPUT_BIN/meshdata" encode "$corpus" "$WORK/mixed/b.bin" --format u16 >/dev/null
               echo "$WORK/mixed" ;;
    SHORT_DIR) mkdir -p "$WORK/short"
               for i in 0 1 2; do printf '0123456789' > "$WORK/short/s$i.txt"
                 "$MT_INPUT_BIN/meshdata" encode "$WORK/short/s$i.txt" "$WORK/short/s$i.bin" >/dev/null
                 rm "$WORK/short/s$i.txt"; done
               echo "$WORK/short" ;;
    *) fail "unknown placeholder @$1@" ;;
  esac
}
args=()
for a in "$@"; do
  while [[ $a =~ @([A-Z_0-9]+)@ ]]; do
    ph=${BASH_REMATCH[0]}
    path=$(make_input "${BASH_REMATCH[1]}") || fail "cannot make the input for $ph"
    a=${a//"$ph"/$path}
  done
  args+=("$a")
done
set +e
mt_mpirun_each "$NP" "$WORK/exits" "$MT_BIN/meshtrain" "${args[@]}" --set "output.dir=$out" \
  > "$WORK/stdout" 2> "$WORK/stderr"
rc=$?
set -e
cat "$WORK/stderr"
[ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "hung: stopped by the hang guard"
# every rank exits by itself, non-zero, not killed by a signal
codes=$(awk '{print $1}' "$WORK/exits" 2>/dev/null | sort | uniq -c | xargs)
mt_each_failed "$WORK/exits" "$NP" \
  || fail "not every rank exited non-zero by itself for bad input (exit codes, counted: $codes)"
rc=$(awk 'NR == 1 {print $1}' "$WORK/exits")
n=$(grep -c "^meshtrain: error:" "$WORK/stderr" || true)
[ "$n" -eq 1 ] || fail "expected exactly one error line, got $n"
grep "^meshtrain: error:" "$WORK/stderr" | grep -Eq -- "$REGEX" || fail "error line does not match /$REGEX/"
! grep -q "^\[rank" "$WORK/stderr" || fail "a rank printed a fatal message: bad input must be caught before any collective work"
! grep -Eq "ERROR: (Address|Leak)Sanitizer|runtime error:" "$WORK/stderr" || fail "sanitizer report"
[ "$(cat "$out/metrics.jsonl")" = "earlier result" ] || fail "earlier output was damaged"
[ ! -f "$out/config.ini" ] || fail "config.ini written for a refused run"
echo "PASS: rc=$rc: $(grep '^meshtrain: error:' "$WORK/stderr")"
