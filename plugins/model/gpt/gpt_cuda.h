/* gpt_cuda.h — the CUDA entry points of the gpt plugin (gpt_cuda.cu). With nvcc they are built
 * into the companion plugins/cuda/model_gpt_cuda.so (the only symbols it exports); gpt.c opens
 * it when the model is created on a CUDA device and calls them through gpt.cu (gpt_cuda_fns),
 * so model_gpt.so links no CUDA library. Not for: anything the host sees (ctrain.h) or CPU code.
 */
#ifndef GPT_PLUGIN_GPT_CUDA_H
#define GPT_PLUGIN_GPT_CUDA_H

#include <ctrain/ctrain.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gpt;

/* The companion interface (companion.h): bump when an entry below changes. The structure both
 * sides read is struct gpt (gpt.h), checked by size. 5: prepare, forward and backward take
 * f16 (gpt.c no longer refuses it on CUDA, so an older companion must not be opened). */
#define GPT_CUDA_INTERFACE 5

/* Size the device buffers for micro-batches of B x T in dtype (f32, bf16 or f16; validated by
 * the caller): activations (gpt's res/acts/... fields become device pointers, m->arena the
 * device arena), attention scratch, GEMM operand scratch, cuBLAS handle on the device's
 * stream. */
CT_EXPORT int32_t gpt_cuda_prepare(struct gpt *m, int64_t B, int64_t T, int32_t dtype,
                                   ct_error *err);
/* Free everything gpt_cuda_prepare made (m->arena becomes NULL). Safe to call twice. */
CT_EXPORT void gpt_cuda_free(struct gpt *m);

/* One stage, as gpt_forward / gpt_backward (args already checked). Asynchronous on the
 * device's stream, except embed forward, which reads the tokens back to validate them. */
CT_EXPORT int32_t gpt_cuda_forward(struct gpt *m, const ct_stage_args *a, ct_error *err);
CT_EXPORT int32_t gpt_cuda_backward(struct gpt *m, const ct_stage_args *a, ct_error *err);

/* ct_model_vtable.mean_hidden on the device's buffers (synchronises). */
CT_EXPORT int32_t gpt_cuda_mean_hidden(struct gpt *m, float *out, ct_error *err);
/* ct_model_vtable.hidden_rows on the device's buffers (rows checked by the caller;
 * synchronises). */
CT_EXPORT int32_t gpt_cuda_hidden_rows(struct gpt *m, int64_t row0, int64_t n_rows, float *out,
                                       ct_error *err);

/* The entry points above as the plugin holds them after opening the companion (gpt.c,
 * gpt_cuda_load); all NULL on the CPU. Keep in the order of GPT_CUDA_NAMES. */
typedef struct gpt_cuda_fns {
    int32_t (*prepare)(struct gpt *m, int64_t B, int64_t T, int32_t dtype, ct_error *err);
    void (*free)(struct gpt *m);
    int32_t (*forward)(struct gpt *m, const ct_stage_args *a, ct_error *err);
    int32_t (*backward)(struct gpt *m, const ct_stage_args *a, ct_error *err);
    int32_t (*mean_hidden)(struct gpt *m, float *out, ct_error *err);
    int32_t (*hidden_rows)(struct gpt *m, int64_t row0, int64_t n_rows, float *out, ct_error *err);
} gpt_cuda_fns;

#define GPT_CUDA_NAMES \
    {"gpt_cuda_prepare", "gpt_cuda_free", "gpt_cuda_forward", "gpt_cuda_backward", \
     "gpt_cuda_mean_hidden", "gpt_cuda_hidden_rows"}

#ifdef __cplusplus
}
#endif

#endif /* GPT_PLUGIN_GPT_CUDA_H */
