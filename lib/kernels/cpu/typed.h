/* One body per op, instantiated per storage type (see kernels.h: every
 * compute op takes the element type t of its `void *` operands).
 *
 * A CPU file that implements ops over the storage type keeps their bodies
 * in a body file (<name>_t.h) and instantiates it with
 *     #define MT_TYPED_BODY "kernels/cpu/<name>_t.h"
 *     #include "kernels/cpu/typed.h"
 * which includes the body twice: with T = float, then with T = mt_bf16.
 * Each instantiation is a real function the compiler specialises (its
 * loops vectorise as if written for that type; bf16's loads and stores
 * are integer shifts). In a body:
 *   T          the storage type (float or mt_bf16)
 *   FN(op)     the instantiation's name, mt_cpu_<op>_f32 or mt_cpu_<op>_bf16
 *              (cpu_internal.h declares them for every op of kernels.h's
 *              lists, with the table's parameters: `void *` operands)
 *   LD(x)      the T value x widened to float (exact)
 *   ST(v)      the float v stored as a T (bf16: rounded to nearest even)
 *   IS_BF16    0 or 1, a constant: where the two types take different
 *              library calls (the GEMM engine) or different scratch
 * On float, LD and ST are the identity: an fp32 body computes exactly what
 * the same expression written for float does. */
#ifndef MT_TYPED_BODY
#error "define MT_TYPED_BODY (the body file) before including kernels/cpu/typed.h"
#endif

#define T float
#define FN(op) mt_cpu_##op##_f32
#define LD(x) (x)
#define ST(v) (v)
#define IS_BF16 0
#include MT_TYPED_BODY
#undef T
#undef FN
#undef LD
#undef ST
#undef IS_BF16

#define T mt_bf16
#define FN(op) mt_cpu_##op##_bf16
#define LD(x) mt_bf16_to_f32(x)
#define ST(v) mt_bf16_from_f32(v)
#define IS_BF16 1
#include MT_TYPED_BODY
#undef T
#undef FN
#undef LD
#undef ST
#undef IS_BF16

#undef MT_TYPED_BODY
