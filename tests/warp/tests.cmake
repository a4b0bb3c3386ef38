# The virtual device: time-warp emulation (issue: time-warp emulation).
mt_script_test(virtual16 warp virtual.sh 16)
mt_script_test(virtual64 warp virtual.sh 64)
set_tests_properties(warp.virtual64 PROPERTIES RUN_SERIAL TRUE)

set(T --set model.preset=tiny --set data.train=@CORPUS@ --set train.global_batch=8 --set train.micro_batch=2 --set parallel.dp=4 --set train.device=virtual)
mt_script_test(virtual_no_cost badinput ../scripts/expect_fail.sh virtual_no_cost 4
  "train.virtual_hw = a100-sxm: .*\\[cost\\] key 'devices_per_node' missing" ${T} --set train.virtual_hw=a100-sxm --set ckpt.mode=none)
mt_script_test(virtual_no_profile badinput ../scripts/expect_fail.sh virtual_no_profile 4
  "train.device = virtual needs train.virtual_hw" ${T} --set ckpt.mode=none)
# an op of the op table without a price on the virtual device (a test hook
# leaves gelu_forward unpriced, as a newly added op would be)
mt_script_test(virtual_unpriced badinput ../scripts/expect_fail.sh virtual_unpriced 4
  "train.device = virtual: the cost model has no price for op gelu_forward" ${T} --set train.virtual_hw=h200 --set ckpt.mode=none)
set_property(TEST badinput.virtual_unpriced APPEND PROPERTY ENVIRONMENT MT_TEST_VIRTUAL_UNPRICED=gelu_forward)
mt_script_test(virtual_ckpt badinput ../scripts/expect_fail.sh virtual_ckpt 4
  "train.device = virtual computes no values to checkpoint: set ckpt.mode = none" ${T} --set train.virtual_hw=h200 --set ckpt.mode=shared)
# with ckpt.mode left out the virtual device takes none (and zb-v its 2 chunks)
mt_script_test(follow_defaults warp follow_defaults.sh)
mt_script_test(trace warp trace.sh)
# the CPU's traced table times bf16 ops as it does fp32's
mt_script_test(trace_bf16 warp trace_bf16.sh)
# meshreport timeline over a virtual and a real traced pp 2 run
mt_script_test(timeline warp timeline.sh)
# (meshreport timeline's C and the trace writer under the sanitizers too)
set_property(TEST warp.timeline APPEND PROPERTY LABELS sanitize)
# virtual.moe_skew: a Zipf load over the experts on the virtual device
mt_script_test(moe_skew warp moe_skew.sh)
# the virtual device prices messages in its profile's dtypes (bytes counted as sent)
mt_script_test(dtypes warp dtypes.sh)
# one cost model: the virtual device's step time within 5% of meshplan's
# on 16 ranks across nodes (hierarchical collectives, overlap, pipelines)
mt_script_test(vs_plan warp vs_plan.sh)
set_tests_properties(warp.vs_plan PROPERTIES RUN_SERIAL TRUE)
# ZeRO-3 with MoE blocks: the backward's expert gathers and reduce-scatters
# hide behind its compute (rank 0's wait on edp within one gather and one
# reduce-scatter)
mt_script_test(moe_prefetch warp moe_prefetch.sh)
# whether this machine can start N virtual ranks (meshtrain --check), and a
# run launched anyway that the node's memory cannot hold: one line, exit 2
mt_script_test(host_fit warp host_fit.sh)
mt_script_test(virtual_host_memory badinput ../scripts/expect_fail.sh virtual_host_memory 4
  "train.device = virtual: 4 ranks do not fit this machine: they need about [0-9]+ MiB of host memory .*\\(SLURM_MEM_PER_NODE\\)" ${T} --set train.virtual_hw=h200 --set ckpt.mode=none)
set_property(TEST badinput.virtual_host_memory APPEND PROPERTY ENVIRONMENT SLURM_MEM_PER_NODE=60)
