/* gpu-emu: the calling line of runtime and NCCL calls. Included before the
 * sources of the emulated build that call them (the .cu files, comm's
 * nccl.c), it routes each call that moves or frees memory through a twin
 * that knows its caller's file and line, so that a copy past an allocation
 * or a bad NCCL buffer is reported where the call is written. C and C++. */
#ifndef MT_EMU_API_H
#define MT_EMU_API_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the caller's line for the next runtime or NCCL call (file NULL: none) */
void mt_emu_call_site(const char *file, int line);

#ifdef __cplusplus
}
#endif

#define MT_EMU_AT(call) (mt_emu_call_site(__FILE__, __LINE__), call)
#define cudaMemcpy(...) MT_EMU_AT(cudaMemcpy(__VA_ARGS__))
#define cudaMemcpyAsync(...) MT_EMU_AT(cudaMemcpyAsync(__VA_ARGS__))
#define cudaMemcpy2DAsync(...) MT_EMU_AT(cudaMemcpy2DAsync(__VA_ARGS__))
#define cudaMemset(...) MT_EMU_AT(cudaMemset(__VA_ARGS__))
#define cudaMemsetAsync(...) MT_EMU_AT(cudaMemsetAsync(__VA_ARGS__))
#define cudaMemset2DAsync(...) MT_EMU_AT(cudaMemset2DAsync(__VA_ARGS__))
#define cudaFree(...) MT_EMU_AT(cudaFree(__VA_ARGS__))
#define cudaFreeAsync(...) MT_EMU_AT(cudaFreeAsync(__VA_ARGS__))
#define cudaFreeHost(...) MT_EMU_AT(cudaFreeHost(__VA_ARGS__))
#define cudaStreamSynchronize(...) MT_EMU_AT(cudaStreamSynchronize(__VA_ARGS__))
#define cudaEventSynchronize(...) MT_EMU_AT(cudaEventSynchronize(__VA_ARGS__))
#define ncclAllReduce(...) MT_EMU_AT(ncclAllReduce(__VA_ARGS__))
#define ncclAllGather(...) MT_EMU_AT(ncclAllGather(__VA_ARGS__))
#define ncclReduceScatter(...) MT_EMU_AT(ncclReduceScatter(__VA_ARGS__))
#define ncclBroadcast(...) MT_EMU_AT(ncclBroadcast(__VA_ARGS__))
#define ncclSend(...) MT_EMU_AT(ncclSend(__VA_ARGS__))
#define ncclRecv(...) MT_EMU_AT(ncclRecv(__VA_ARGS__))

#endif
