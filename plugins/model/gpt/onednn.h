/* onednn.h — the gpt plugin's matrix products through oneDNN's matmul primitive: bf16 x bf16
 * -> f32 (AMX or AVX512-BF16 kernels) and f32 x f32 -> f32, one primitive per shape, created on
 * first use and kept. Not for: choosing when to use it (gpt.c: [model] bf16_matmul) or the
 * OpenBLAS path (layers.c). Without oneDNN at build time (GPT_HAVE_ONEDNN undefined) every
 * call says "not available" and the plugin runs OpenBLAS.
 * Knows nothing of the gpt struct, so tests/cli/onednn_check.c builds it on its own.
 */
#ifndef GPT_PLUGIN_ONEDNN_H
#define GPT_PLUGIN_ONEDNN_H

#include <stddef.h>
#include <stdint.h>

/* What oneDNN offers this process (a property of the machine, the library and its max-ISA
 * variables ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA). */
typedef struct {
    int  built;        /* this plugin was built with oneDNN */
    char version[24];  /* "2.6.3"; "" when not built */
    char isa[40];      /* the ISA oneDNN dispatches to: "avx512_core_amx", "avx512_core_bf16",
                          "avx512_core", "avx2", ... */
    int  bf16;         /* the ISA has bf16 instructions (AVX512-BF16 or AMX): bf16 products run
                          natively, not emulated */
    int  amx;          /* the ISA has AMX tiles */
    char impl[48];     /* the implementation oneDNN picks for a (256 x 768 x 768) bf16 product,
                          e.g. "brg:avx512_core_amx"; "" when it has none */
} gpt_dnnl_info;

/* Fill *info (nothing is kept; cheap after the first call in a process). */
void gpt_dnnl_probe(gpt_dnnl_info *info);

typedef struct gpt_dnnl gpt_dnnl;

/* A context: engine, stream, primitive cache and scratchpad, for one thread of calls (a gpt
 * instance has one for its products and one per OpenMP thread for attention). Primitives are
 * planned for `threads` threads (1: to be called inside an OpenMP parallel region). NULL when
 * oneDNN is not built in or out of memory. */
gpt_dnnl *gpt_dnnl_new(int threads);
void gpt_dnnl_free(gpt_dnnl *d);

/* C (M,N) = alpha op(A) op(B) + beta C, row-major, in f32 accumulation; A, B in `dtype`
 * (CT_DTYPE_BF16: uint16 bf16 bits; CT_DTYPE_F32: float), C f32; op(X) = X or X^T (ta/tb 1),
 * lda/ldb/ldc row strides of the stored matrices; beta 0 or 1. Returns 0, or -1 when oneDNN
 * refused the product (the reason in gpt_dnnl_error(d)); C is then untouched. */
int gpt_dnnl_gemm(gpt_dnnl *d, int32_t dtype, int ta, int tb, int64_t M, int64_t N, int64_t K,
                  float alpha, const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                  float *C, int64_t ldc);

/* The last refusal, "" if none. */
const char *gpt_dnnl_error(const gpt_dnnl *d);

/* Primitives created so far (tests: one per shape, reused). */
int gpt_dnnl_primitives(const gpt_dnnl *d);

#endif /* GPT_PLUGIN_ONEDNN_H */
