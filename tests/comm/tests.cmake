# comm: the MPI backend with buffers in device memory (staged through host).
add_executable(comm_device_staging ${CMAKE_CURRENT_LIST_DIR}/device_staging.c)
target_link_libraries(comm_device_staging PRIVATE ${MT_ALL_LIBS})
set_target_properties(comm_device_staging PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
mt_script_test(device_staging comm device_staging.sh)
