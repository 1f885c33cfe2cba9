/* gpt_cuda.h — the CUDA entry points of the gpt plugin (gpt_cuda.cu), called by gpt.c and
 * stages.c only when the model was created on a CUDA device (gpt.on_cuda) and the plugin was
 * built with nvcc (CT_HAVE_CUDA). Not for: anything the host sees (ctrain.h) or CPU code.
 */
#ifndef GPT_PLUGIN_GPT_CUDA_H
#define GPT_PLUGIN_GPT_CUDA_H

#include <ctrain/ctrain.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gpt;

/* Size the device buffers for micro-batches of B x T in dtype (validated by the caller):
 * activations (gpt's res/acts/... fields become device pointers, m->arena the device arena),
 * attention scratch, GEMM operand scratch, cuBLAS handle on the device's stream. */
int32_t gpt_cuda_prepare(struct gpt *m, int64_t B, int64_t T, int32_t dtype, ct_error *err);
/* Free everything gpt_cuda_prepare made (m->arena becomes NULL). Safe to call twice. */
void gpt_cuda_free(struct gpt *m);

/* One stage, as gpt_forward / gpt_backward (args already checked). Asynchronous on the
 * device's stream, except embed forward, which reads the tokens back to validate them. */
int32_t gpt_cuda_forward(struct gpt *m, const ct_stage_args *a, ct_error *err);
int32_t gpt_cuda_backward(struct gpt *m, const ct_stage_args *a, ct_error *err);

/* ct_model_vtable.mean_hidden on the device's buffers (synchronises). */
int32_t gpt_cuda_mean_hidden(struct gpt *m, float *out, ct_error *err);

#ifdef __cplusplus
}
#endif

#endif /* GPT_PLUGIN_GPT_CUDA_H */
