# gpu-emu: the CUDA backend built for the host execution model
# (-DMT_CUDA_EMU=ON; a test configuration, see docs/cuda.md).
# Included by the top-level CMakeLists in place of the CUDA toolchain:
#   - lib/kernels/cuda/*.cu are rewritten line for line (rewrite_cu.py:
#     launches and __shared__ declarations) and compiled as C++ by the host
#     compiler with mt_emu_device.h in front; nvcc is not used;
#   - the CUDA runtime and NCCL functions come from libmt_cuda_emu (this
#     folder), cuBLASLt from libmt_emu_cublaslt, which the backend opens by
#     path as it opens NVIDIA's; comm's nccl.c is compiled against the real
#     nccl.h and linked with the emulated NCCL;
#   - the CUDA toolkit's headers are used for the types and declarations.
# Sets MT_HAVE_CUDA and MT_HAVE_NCCL, MT_EMU_CU_SOURCES, and the functions
# mt_emu_kernels(target) and mt_emu_comm(target) the top level calls.

enable_language(CXX)
find_package(Python3 REQUIRED COMPONENTS Interpreter)
find_package(CUDAToolkit REQUIRED) # headers only
find_path(MT_EMU_NCCL_INCLUDE nccl.h HINTS ${MT_NCCL_ROOT} $ENV{NCCL_HOME} $ENV{NCCL_ROOT}
          ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include REQUIRED)
set(MT_HAVE_CUDA ON)
set(MT_HAVE_NCCL ON)
set(MT_EMU_DIR ${CMAKE_CURRENT_LIST_DIR})

# C++ flags of everything built here: ISO C++17 (so no contraction of a*b+c
# into FMAs: the host's arithmetic is plain IEEE), the project's warnings
# line tables (-g1): a fault in shared memory is reported with its line
set(MT_EMU_CXX_FLAGS -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -g1)
if(MT_WERROR)
  list(APPEND MT_EMU_CXX_FLAGS -Werror)
endif()
# the build machine's instructions, or MT_ARCH's (fmaf inline, vectorised tiles) unless
# sanitised; ISO C++ still never contracts an expression into an FMA
if(MT_NATIVE AND NOT MT_SANITIZE)
  list(APPEND MT_EMU_CXX_FLAGS -march=${MT_ARCH})
endif()
if(MT_SANITIZE)
  # -O1 even in the Debug build the sanitizers use: every thread of every
  # block runs this code, and unoptimised it is several times slower
  list(APPEND MT_EMU_CXX_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
       -fno-sanitize-recover=undefined -O1)
endif()

# the runtime: CUDA runtime API, kernels on fibers, streams, NCCL over MPI
add_library(mt_cuda_emu SHARED ${MT_EMU_DIR}/core.cc ${MT_EMU_DIR}/memory.cc
            ${MT_EMU_DIR}/streams.cc ${MT_EMU_DIR}/kernels.cc ${MT_EMU_DIR}/nccl.cc)
target_compile_features(mt_cuda_emu PUBLIC cxx_std_17)
set_target_properties(mt_cuda_emu PROPERTIES CXX_EXTENSIONS OFF
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
target_compile_options(mt_cuda_emu PRIVATE ${MT_EMU_CXX_FLAGS})
target_include_directories(mt_cuda_emu PUBLIC ${MT_EMU_DIR}/include ${CUDAToolkit_INCLUDE_DIRS}
                           ${MT_EMU_NCCL_INCLUDE})
target_link_libraries(mt_cuda_emu PUBLIC MPI::MPI_C)
# MPI's C API only (Open MPI's C++ bindings would be linked otherwise)
target_compile_definitions(mt_cuda_emu PUBLIC OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)

# the cuBLASLt reference, opened by path (as the real one is opened)
add_library(mt_emu_cublaslt SHARED ${MT_EMU_DIR}/cublaslt.cc)
set_target_properties(mt_emu_cublaslt PROPERTIES CXX_EXTENSIONS OFF
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
target_compile_options(mt_emu_cublaslt PRIVATE ${MT_EMU_CXX_FLAGS} -O3)
target_link_libraries(mt_emu_cublaslt PRIVATE mt_cuda_emu)

# .cu files rewritten line for line into the build tree (gpu-emu/); the
# list of the C++ files in out_var
function(mt_emu_rewrite out_var)
  set(outs)
  foreach(cu ${ARGN})
    get_filename_component(name ${cu} NAME)
    file(RELATIVE_PATH shown ${CMAKE_SOURCE_DIR} ${cu})
    set(out ${CMAKE_BINARY_DIR}/gpu-emu/${name}.cc)
    # the .cu file's own path in reports and line tables (as gcc names C files)
    add_custom_command(OUTPUT ${out}
      COMMAND ${Python3_EXECUTABLE} ${MT_EMU_DIR}/rewrite_cu.py ${cu} ${out} ${cu}
      DEPENDS ${cu} ${MT_EMU_DIR}/rewrite_cu.py
      COMMENT "gpu-emu: ${shown} as host C++")
    list(APPEND outs ${out})
  endforeach()
  set_source_files_properties(${outs} PROPERTIES
    COMPILE_OPTIONS "-include;mt_emu_device.h;-include;mt_emu_api.h;${MT_EMU_CXX_FLAGS}")
  set(${out_var} ${outs} PARENT_SCOPE)
endfunction()

file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-emu)
file(GLOB MT_EMU_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/lib/kernels/cuda/*.cu)
mt_emu_rewrite(MT_EMU_CU_SOURCES ${MT_EMU_CU})

# a program of .cu files of its own on the emulator (tests/gpu/emu/selftest.cu)
function(mt_emu_program target)
  mt_emu_rewrite(srcs ${ARGN})
  add_executable(${target} ${srcs})
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_features(${target} PRIVATE cxx_std_17)
  target_link_libraries(${target} PRIVATE mt_cuda_emu)
endfunction()

# mt_kernels with the rewritten .cu files: device code as host C++
function(mt_emu_kernels target)
  target_sources(${target} PRIVATE ${MT_EMU_CU_SOURCES})
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_features(${target} PRIVATE cxx_std_17)
  target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR}/lib/kernels/cuda)
  target_compile_definitions(${target} PUBLIC MT_HAVE_CUDA=1 MT_CUDA_EMU=1)
  # the backend opens this cuBLASLt first (cublaslt.cu), never NVIDIA's
  target_compile_definitions(${target} PRIVATE
    MT_CUBLASLT_SONAME="$<TARGET_FILE:mt_emu_cublaslt>")
  add_dependencies(${target} mt_emu_cublaslt)
  target_link_libraries(${target} PUBLIC mt_cuda_emu ${CMAKE_DL_LIBS})
endfunction()

# mt_comm with nccl.c against the real nccl.h, linked with the emulated NCCL
function(mt_emu_comm target)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/lib/comm/nccl.c PROPERTIES
    COMPILE_OPTIONS "-include;mt_emu_api.h")
  target_compile_definitions(${target} PUBLIC MT_HAVE_NCCL=1)
  target_link_libraries(${target} PUBLIC mt_cuda_emu)
endfunction()
