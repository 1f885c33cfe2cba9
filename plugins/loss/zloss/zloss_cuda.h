/* zloss_cuda.h — the CUDA entry of the `zloss` loss term (zloss_cuda.cu), called by
 * loss_zloss.c only when the batch lives on a CUDA device and the plugin was built with nvcc
 * (CT_HAVE_CUDA). Not for: anything the host sees.
 */
#ifndef LOSS_ZLOSS_CUDA_H
#define LOSS_ZLOSS_CUDA_H

#include <ctrain/ctrain.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zloss_cuda zloss_cuda; /* device scratch of one instance; NULL until first use */

/* *sum = the term's sum over counted rows (before coef and the mean), read back; unless
 * b->dlogits is NULL, adds g * d(row term)/dz into it for counted rows (g already holds coef,
 * grad_scale and the mean's 1/n). mask_ignored: rows with target < 0 are skipped. *state is
 * allocated on first use. The gradient is queued on the device's stream. */
int32_t zloss_cuda_run(zloss_cuda **state, const ct_loss_batch *b, int32_t mask_ignored,
                         float g, int32_t with_grad, double *sum, ct_error *err);
void zloss_cuda_free(zloss_cuda *state);

#ifdef __cplusplus
}
#endif

#endif /* LOSS_ZLOSS_CUDA_H */
