# The reference losses (tests/reference/losses.sh): 33 layouts of tiny in
# fp32 and bf16 held bitwise to losses.txt.
mt_script_test(losses mpi losses.sh)
set_property(TEST mpi.losses APPEND PROPERTY ENVIRONMENT MT_BUILD_ARCH=${MT_EFFECTIVE_ARCH})
