# gpu-emu finds what it is there to find: every defect planted in
# selftest.cu is reported as an error naming its source line (the case's
# "// MARK" line), the process ends non-zero, and the clean cases give the
# right numbers whatever the resume order of a block's threads (device
# memory read or written out of bounds among them, reported at the
# faulting thread with the offset in its allocation). Also: a
# race between barriers shows as a result that changes with MT_EMU_ORDER,
# memory nothing wrote reads as NaN, and an NCCL receive that no send
# matches is reported as a hang (the watchdog) with what each stream waits
# for. Streams as a GPU runs them (MT_EMU_STREAMS=deferred, the default):
# a host read before the wait for the stream that writes it sees the old
# data (eager mode hides it); two streams without an event between them
# give a wrong result in some MT_EMU_SEED order, and with the event, or
# ordered by the legacy default stream's implicit synchronisation, the
# right one in every order; an unknown MT_EMU_STREAMS is a one-line error.
source "$MT_SRC/tests/scripts/common.sh"
P="$MT_TESTBIN/gpu_emu_selftest"
SRC="tests/gpu/emu/selftest.cu"
export MT_EMU_GPUS=2
line_of() { grep -nE "// MARK $1( |\$)" "$MT_SRC/$SRC" | cut -d: -f1; }
# expect CASE REGEX [NP]: fails, with one gpu-emu error matching REGEX
expect() {
  local name=$1 regex=$2 np=${3:-1}
  set +e
  MT_EMU_WATCHDOG_S=3 mt_mpirun "$np" "$P" "$name" > "$WORK/$name.log" 2>&1
  local rc=$?
  set -e
  [ $rc -ne 0 ] || { cat "$WORK/$name.log"; fail "$name: exit 0 for a planted defect"; }
  grep -q "gpu-emu: error: .*$regex" "$WORK/$name.log" ||
    { cat "$WORK/$name.log"; fail "$name: no report matching /$regex/"; }
  echo "ok   $name: $(grep -m1 'gpu-emu: error' "$WORK/$name.log" | cut -c1-200)"
}
at() { echo "$MT_SRC/$SRC:$(line_of "$1"): "; }
expect barriers "$(at barriers)threads of one block wait at different barriers"
expect exited "$(at exited)__syncthreads reached by 63 of the block's 64 threads"
expect shfl_exited "$(at shfl_exited)__shfl_xor_sync with mask ffffffff: lane 17 of warp 0 has exited"
expect shfl_barrier "$(at shfl_barrier)__shfl_down_sync with mask ffffffff: lane 16 of warp 0 waits at __syncthreads"
expect block "$(at block)kernel noop: a block of (1025,1,1)"
expect grid_y "$(at grid_y)kernel noop: a grid of (1,65536,1) blocks exceeds"
expect smem "$(at smem)kernel noop: 65536 bytes of dynamic shared memory, above the default"
expect smem_optin "$(at smem_optin)kernel noop: .* bytes of dynamic shared memory exceed the device's"
expect pointer "$(at pointer)kernel noop: pointer argument 1 .* lies outside every device allocation"
expect copy "$(at copy)cudaMemcpyAsync destination: 800 bytes at offset 16000 of a 16384-byte device allocation run 416 bytes past its end"
expect memset "$(at memset)cudaMemsetAsync destination: 16384 bytes at offset 4 .* run 4 bytes past its end"
expect dynamic_overflow "$(at dynamic_overflow)a read or write past the end of the block's dynamic shared memory .* kernel write_past_dynamic"
expect static_overflow "$(at static_overflow)a read or write past the end of a static __shared__ variable .* kernel write_past_static"
# device memory out of bounds, at the faulting thread: past the end into the
# guard page (a write, a read), into the canary of the slack before it, and
# before the start
B="of a 4096-byte device allocation (kernel argument 1 points at its offset 64) in kernel"
expect oob_write "$(at oob_write)a read or write out of bounds of device memory at offset 4096, 0 bytes after the end, $B write_one_past .* block (3,0,0), thread 240 "
expect oob_read "$(at oob_read)a read or write out of bounds of device memory at offset 4096, 0 bytes after the end, $B read_one_past .* block (3,0,0), thread 239 "
expect oob_slack "a write out of bounds of device memory, at offset 4000, 0 bytes after the end, of a 4000-byte .* kernel write_one_past .* block (3,0,0), thread 216 .*before it exited"
expect oob_before "$(at oob_before)a read or write out of bounds of device memory at offset -4, 4 bytes before the start, of a 4096-byte .* kernel write_one_before .* block (0,0,0), thread 0 "
expect nccl_size "$(at nccl)ncclRecv of 12 elements .*the matching ncclSend carried 40 bytes" 2
expect nccl_hang "no operation moved for 3 s .* a hang.*" 2
grep -q "ncclRecv of 12 elements" "$WORK/nccl_hang.log" || fail "nccl_hang: the report does not name the waiting receive"
# clean: the same bits in every order
for order in forward reverse random; do
  MT_EMU_ORDER=$order mt_mpirun 1 "$P" ok_sum > "$WORK/ok_$order.log" 2>&1 ||
    { cat "$WORK/ok_$order.log"; fail "ok_sum ($order)"; }
done
[ "$(cat "$WORK/ok_forward.log")" = "$(cat "$WORK/ok_reverse.log")" ] &&
  [ "$(cat "$WORK/ok_forward.log")" = "$(cat "$WORK/ok_random.log")" ] ||
  fail "ok_sum differs between resume orders"
echo "ok   ok_sum: the right sums, the same bits forward, reverse and random"
# a race: the result depends on the order (and reads NaN when thread 0 is late)
MT_EMU_ORDER=forward mt_mpirun 1 "$P" race > "$WORK/race_f.log" 2>&1 || fail "race (forward)"
MT_EMU_ORDER=reverse mt_mpirun 1 "$P" race > "$WORK/race_r.log" 2>&1 || fail "race (reverse)"
grep -q "^nan 0$" "$WORK/race_f.log" && grep -q "^nan 63$" "$WORK/race_r.log" ||
  { cat "$WORK/race_f.log" "$WORK/race_r.log"; fail "race: expected no NaN forward, 63 reverse"; }
echo "ok   race: forward and reverse resume orders give different results"
mt_mpirun 1 "$P" fresh > "$WORK/fresh.log" 2>&1 || fail "fresh"
grep -q "^nan 64$" "$WORK/fresh.log" || { cat "$WORK/fresh.log"; fail "fresh memory did not read as NaN"; }
echo "ok   fresh: device memory nothing wrote reads as NaN"
# stale: page-locked memory a queued copy writes, read before and after the wait
MT_EMU_STREAMS=deferred mt_mpirun 1 "$P" stale > "$WORK/stale.log" 2>&1 ||
  { cat "$WORK/stale.log"; fail "stale"; }
grep -q "^before -1 after 64$" "$WORK/stale.log" ||
  { cat "$WORK/stale.log"; fail "stale: a host read before the wait did not see the old data"; }
MT_EMU_STREAMS=eager mt_mpirun 1 "$P" stale > "$WORK/stale_eager.log" 2>&1 || fail "stale (eager)"
grep -q "^before 64 after 64$" "$WORK/stale_eager.log" ||
  { cat "$WORK/stale_eager.log"; fail "stale (eager): expected the work done at once"; }
echo "ok   stale: deferred, the host reads -1 before the wait and 64 after (eager: 64 both)"
# a mode the emulator does not know: one line naming it, non-zero exit
set +e
MT_EMU_STREAMS=sometimes mt_mpirun 1 "$P" ok_sum > "$WORK/bad_mode.log" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "gpu-emu: error: MT_EMU_STREAMS = 'sometimes': one of deferred, eager" \
  "$WORK/bad_mode.log" || { cat "$WORK/bad_mode.log"; fail "MT_EMU_STREAMS=sometimes: rc $rc"; }
echo "ok   bad mode: $(grep -m1 'gpu-emu: error' "$WORK/bad_mode.log")"
# two streams, eight seeded orders each
wrong_orders() { # HOW: the number of seeds 1..8 with a wrong result
  local how=$1 seed n=0
  for seed in 1 2 3 4 5 6 7 8; do
    MT_EMU_STREAMS=deferred MT_EMU_SEED=$seed mt_mpirun 1 "$P" "streams_$how" \
      > "$WORK/streams_$how.$seed.log" 2>&1 ||
      { cat "$WORK/streams_$how.$seed.log"; fail "streams_$how (seed $seed)"; }
    grep -q "^wrong 0$" "$WORK/streams_$how.$seed.log" || n=$((n + 1))
  done
  echo $n
}
for how in none nonblocking; do
  n=$(wrong_orders $how)
  [ "$n" -ge 1 ] || fail "streams_$how: no order of eight showed the missing synchronisation"
  echo "ok   streams_$how: wrong in $n of 8 seeded orders"
done
for how in event legacy; do
  n=$(wrong_orders $how)
  [ "$n" -eq 0 ] || fail "streams_$how: wrong in $n of 8 seeded orders"
  echo "ok   streams_$how: right in all 8 seeded orders"
done
echo PASS
