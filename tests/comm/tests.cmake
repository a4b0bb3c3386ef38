# comm: the MPI backend with buffers in device memory (staged through host).
mt_test_program(comm_device_staging ${CMAKE_CURRENT_LIST_DIR}/device_staging.c)
mt_script_test(device_staging comm device_staging.sh)

# comm: the direct (NCCL) path for device buffers, with a stand-in backend
mt_test_program(comm_device_direct ${CMAKE_CURRENT_LIST_DIR}/device_direct.c)
mt_script_test(device_direct comm device_direct.sh)
set_tests_properties(comm.device_direct PROPERTIES LABELS "comm;sanitize")

# the mesh's table of groups and the NCCL estimate, without MPI
mt_test_program(comm_mesh_table ${CMAKE_CURRENT_LIST_DIR}/mesh_table.c)
add_test(NAME comm.mesh_table COMMAND $<TARGET_FILE:comm_mesh_table>)
set_tests_properties(comm.mesh_table PROPERTIES LABELS "comm;unit" TIMEOUT 60)

# the virtual backend: a group's collective channel in issue order
mt_test_program(comm_virtual_order ${CMAKE_CURRENT_LIST_DIR}/virtual_order.c)
mt_script_test(virtual_order comm virtual_order.sh)
set_tests_properties(comm.virtual_order PROPERTIES LABELS "comm;sanitize")
