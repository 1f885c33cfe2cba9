/* ce_cuda.h — the CUDA entry of the `ce` loss term (ce_cuda.cu), called by loss_ce.c only when
 * the batch lives on a CUDA device and the plugin was built with nvcc (CT_HAVE_CUDA).
 * Not for: anything the host sees.
 */
#ifndef LOSS_CE_CUDA_H
#define LOSS_CE_CUDA_H

#include <ctrain/ctrain.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ce_cuda ce_cuda; /* device scratch of one instance; NULL until first use */

/* Value of the term into *value (mean over counted rows of lse - z_t); unless b->dlogits is
 * NULL, adds grad_scale * d value / d z into it. Validates every target first (nothing is added
 * when one is >= V). *state is allocated on first use (grown with N). Synchronises. */
int32_t ce_cuda_forward_backward(ce_cuda **state, const ct_loss_batch *b, double *value,
                                 ct_error *err);
void ce_cuda_free(ce_cuda *state);

#ifdef __cplusplus
}
#endif

#endif /* LOSS_CE_CUDA_H */
