# Slurm templates, campaigns, meshreport and meshbench collectives
# (included from tests/CMakeLists.txt). Tests that need a real Slurm start a
# private cluster (cluster.sh: meshslurm.py cluster) and SKIP (exit 77, with
# the reason) when it cannot run here; they
# take turns (RESOURCE_LOCK): the emulated nodes share this machine's cores.
function(mt_slurm_test name label script)
  mt_script_test(${name} ${label} ${script} ${ARGN})
  set_tests_properties(${label}.${name} PROPERTIES SKIP_RETURN_CODE 77)
  if(NOT label STREQUAL "slurm")
    set_property(TEST ${label}.${name} APPEND PROPERTY LABELS slurm)
  endif()
endfunction()

# the local cluster command itself: start, status, a job, stop, nothing left
mt_slurm_test(cluster_cmd slurm cluster_cmd.sh)
set_tests_properties(slurm.cluster_cmd PROPERTIES RESOURCE_LOCK mt_slurm_cluster TIMEOUT 200)

mt_slurm_test(train_job slurm train_job.sh)
set_tests_properties(slurm.train_job PROPERTIES RESOURCE_LOCK mt_slurm_cluster TIMEOUT 400)

# preemption: the contract played by a stand-in app; meshtrain itself
# preempted twice in a campaign (summary and report cover every attempt)
mt_slurm_test(requeue_stub slurm requeue.sh)
mt_slurm_test(preempt_twice slurm preempt_twice.sh)
set_tests_properties(slurm.requeue_stub slurm.preempt_twice PROPERTIES RESOURCE_LOCK mt_slurm_cluster TIMEOUT 400)
# stop means stop: USR1 requeues, scancel (SIGTERM) checkpoints and ends the
# job for good (exit 76); SIGTERM under plain mpirun too
mt_slurm_test(scancel slurm scancel.sh)
set_tests_properties(slurm.scancel PROPERTIES RESOURCE_LOCK mt_slurm_cluster TIMEOUT 400)
mt_slurm_test(stop_term slurm stop_term.sh)

# meshreport on synthetic runs with known numbers (no Slurm, no MPI), and on
# the default job's two parts (dp=4, then resumed as dp=2) in small
mt_slurm_test(meshreport report report.sh)
mt_slurm_test(default_report report default_report.sh)
# predictions (campaign --emulate, virtual runs) alone, reported directly,
# and beside measured runs (hand-made, no MPI)
mt_slurm_test(predicted report report_predicted.sh)
# (meshreport's C also runs under the sanitizers: tests/run.sh runs -L sanitize there)
set_property(TEST report.meshreport report.predicted APPEND PROPERTY LABELS sanitize)

# campaign --emulate: the points on the virtual device here, no Slurm
mt_slurm_test(campaign_emulate slurm campaign_emulate.sh)
# rendering and campaign planning (no Slurm needed: always runs)
mt_slurm_test(render_leonardo slurm render_leonardo.sh)
# configurations checked at submit time (meshtrain --check), no Slurm needed
mt_slurm_test(submit_check slurm submit_check.sh)
# every train job's layout priced against the system's GPU memory when it is
# written; dp-only and the planner's auto, the planned layout recorded
mt_slurm_test(layouts_memory slurm layouts_memory.sh)
# issue 44 item 7: plan, rehearse, emulate a campaign and render, end to end
mt_slurm_test(journey slurm journey.sh)

# a 2-point campaign end to end, report job included
mt_slurm_test(campaign slurm campaign.sh)
set_tests_properties(slurm.campaign PROPERTIES RESOURCE_LOCK mt_slurm_cluster TIMEOUT 400)

# meshbench collectives under mpirun
mt_slurm_test(collectives bench collectives.sh)

# every command in the README that applies to this machine, as written
# (tests/slurm/readme_commands.py says what runs how)
mt_slurm_test(readme slurm readme.sh)
set_tests_properties(slurm.readme PROPERTIES RESOURCE_LOCK mt_slurm_cluster TIMEOUT 900)

# a lost rank (SIGKILL mid-step): the step ends, the job requeues from the
# newest checkpoint and finishes on the same loss curve (issue 39)
mt_slurm_test(lost_rank slurm lost_rank.sh)
set_tests_properties(slurm.lost_rank PROPERTIES RESOURCE_LOCK mt_slurm_cluster TIMEOUT 400)
