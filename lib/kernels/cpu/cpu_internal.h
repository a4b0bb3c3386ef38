/* Functions shared between the CPU backend's files (not public). */
#ifndef MT_KERNELS_CPU_INTERNAL_H
#define MT_KERNELS_CPU_INTERNAL_H

#include <stddef.h>

void mt_cpu_gelu_forward(float *out, const float *inp, size_t n);
void mt_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

#endif
