# Whether this machine can start N virtual ranks: meshtrain --check --ranks N
# with train.device = virtual says so before a launch, or refuses in one line
# with exit 2 naming the limit (host memory, the launcher's open files) and
# the most ranks that fit; nothing is written. A run launched anyway that
# the node's memory cannot hold (Slurm's limit here) is refused on every
# rank (badinput.virtual_host_memory). A refused check prints no OK line.
source "$(dirname "$0")/../scripts/common.sh"
corpus=$(mt_corpus 200000)
V=(--set model.preset=tiny --set data.train="$corpus" --set train.micro_batch=1 --set train.device=virtual
   --set train.virtual_hw=h200 --set ckpt.mode=none --set output.dir="$WORK/out")
check() { # NAME RANKS REGEX [ulimit -n]
  local name=$1 n=$2 re=$3 fds=${4:-}
  set +e
  ( [ -z "$fds" ] || ulimit -n "$fds"
    mt_guard "$MT_BIN/meshtrain" --check --ranks "$n" "${V[@]}" --set parallel.dp="$n" \
      --set train.global_batch="$n" ) > "$WORK/$name.out" 2> "$WORK/$name.err"
  local rc=$?
  set -e
  [ $rc -eq 2 ] && [ "$(grep -c . "$WORK/$name.err")" -eq 1 ] && grep -Eq -- "$re" "$WORK/$name.err" ||
    { cat "$WORK/$name.out" "$WORK/$name.err"; fail "$name: rc $rc, want exit 2 and one line matching /$re/"; }
  ! grep -q "check: OK" "$WORK/$name.out" || { cat "$WORK/$name.out"; fail "$name: refused, yet says OK"; }
  echo "ok   $name: $(cat "$WORK/$name.err")"
}
# 65536 ranks need terabytes here (a rank's MPI state grows with its peers)
check memory 65536 "^meshtrain: error: train.device = virtual: 65536 ranks do not fit this machine: they need about [0-9.]+ (GiB|MiB) of host memory .*; at most [0-9]+ ranks fit here$"
# the launcher's open files: 64 ranks under ulimit -n 200
check open_files 64 "64 ranks do not fit this machine: the launcher holds about [0-9]+ open files a rank \([0-9]+\), more than ulimit -n 200 .*at most [0-9]+ ranks fit here$" 200
# the number of ranks the refusal offers does start (it fits by the same test)
most=$(sed -E 's/.* at most ([0-9]+) ranks fit here$/\1/' "$WORK/open_files.err")
[ "$most" -ge 1 ] || fail "the refusal offers no rank count"
(ulimit -n 200; mt_guard "$MT_BIN/meshtrain" --check --ranks "$most" "${V[@]}" --set parallel.dp="$most" \
  --set train.global_batch="$most") > "$WORK/most.out" 2>&1 || { cat "$WORK/most.out"; fail "$most ranks, offered, refused"; }
# 16 ranks start here, and say what they take
mt_guard "$MT_BIN/meshtrain" --check --ranks 16 "${V[@]}" --set parallel.dp=16 --set train.global_batch=16 \
  > "$WORK/ok.out" 2>&1 || { cat "$WORK/ok.out"; fail "16 virtual ranks refused"; }
grep -Eq "^meshtrain: check: this machine can start 16 virtual ranks: about [0-9.]+ GiB of host memory of [0-9.]+ GiB usable" "$WORK/ok.out" ||
  { cat "$WORK/ok.out"; fail "no host line for 16 ranks"; }
[ ! -e "$WORK/out" ] || fail "--check wrote output.dir"
echo PASS
