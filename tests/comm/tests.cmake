# comm: the MPI backend with buffers in device memory (staged through host).
add_executable(comm_device_staging ${CMAKE_CURRENT_LIST_DIR}/device_staging.c)
target_link_libraries(comm_device_staging PRIVATE ${MT_ALL_LIBS})
set_target_properties(comm_device_staging PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
mt_script_test(device_staging comm device_staging.sh)

# comm: the direct (NCCL) path for device buffers, with a stand-in backend
add_executable(comm_device_direct ${CMAKE_CURRENT_LIST_DIR}/device_direct.c)
target_link_libraries(comm_device_direct PRIVATE ${MT_ALL_LIBS})
set_target_properties(comm_device_direct PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
mt_script_test(device_direct comm device_direct.sh)
set_tests_properties(comm.device_direct PROPERTIES LABELS "comm;sanitize")

# the mesh's table of groups and the NCCL estimate, without MPI
add_executable(comm_mesh_table ${CMAKE_CURRENT_LIST_DIR}/mesh_table.c)
target_link_libraries(comm_mesh_table PRIVATE ${MT_ALL_LIBS})
set_target_properties(comm_mesh_table PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_test(NAME comm.mesh_table COMMAND $<TARGET_FILE:comm_mesh_table>)
set_tests_properties(comm.mesh_table PROPERTIES LABELS "comm;unit" TIMEOUT 60)
