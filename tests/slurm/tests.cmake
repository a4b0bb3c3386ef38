# Slurm templates, campaigns, meshreport and meshbench collectives
# (included from tests/CMakeLists.txt). Tests that need a real Slurm start a
# private cluster (cluster.sh) and SKIP (exit 77) when it cannot run here; they
# take turns (RESOURCE_LOCK): the emulated nodes share this machine's cores.
function(mt_slurm_test name label script)
  mt_script_test(${name} ${label} ${script} ${ARGN})
  set_tests_properties(${label}.${name} PROPERTIES SKIP_RETURN_CODE 77)
  if(NOT label STREQUAL "slurm")
    set_property(TEST ${label}.${name} APPEND PROPERTY LABELS slurm)
  endif()
endfunction()

mt_slurm_test(train_job slurm train_job.sh)
set_tests_properties(slurm.train_job PROPERTIES RESOURCE_LOCK mt_slurm_cluster TIMEOUT 400)

# preemption: the contract played by a stand-in app, and meshtrain itself
mt_slurm_test(requeue_stub slurm requeue.sh stub)
mt_slurm_test(requeue slurm requeue.sh real)
set_tests_properties(slurm.requeue_stub slurm.requeue PROPERTIES RESOURCE_LOCK mt_slurm_cluster TIMEOUT 400)

# meshreport on synthetic runs with known numbers (no Slurm, no MPI)
mt_slurm_test(meshreport report report.sh)

# rendering and campaign planning (no Slurm needed: always runs)
mt_slurm_test(render_leonardo slurm render_leonardo.sh)

# a 2-point campaign end to end, report job included
mt_slurm_test(campaign slurm campaign.sh)
set_tests_properties(slurm.campaign PROPERTIES RESOURCE_LOCK mt_slurm_cluster TIMEOUT 400)

# meshbench collectives under mpirun
mt_slurm_test(collectives bench collectives.sh)
