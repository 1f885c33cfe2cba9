/* logitreg_cuda.h — the CUDA entry of the `logitreg` loss term (logitreg_cuda.cu), called by
 * loss_logitreg.c only when the batch lives on a CUDA device and the plugin was built with nvcc
 * (CT_HAVE_CUDA). Not for: anything the host sees.
 */
#ifndef LOSS_LOGITREG_CUDA_H
#define LOSS_LOGITREG_CUDA_H

#include <ctrain/ctrain.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct logitreg_cuda logitreg_cuda; /* device scratch of one instance; NULL until first use */

/* *sum = the term's sum over counted rows (before coef and the mean), read back; unless
 * b->dlogits is NULL, adds g * d(row term)/dz into it for counted rows (g already holds coef,
 * grad_scale and the mean's 1/n). mask_ignored: rows with target < 0 are skipped. *state is
 * allocated on first use. The gradient is queued on the device's stream. */
int32_t logitreg_cuda_run(logitreg_cuda **state, const ct_loss_batch *b, int32_t mask_ignored,
                         float g, int32_t with_grad, double *sum, ct_error *err);
void logitreg_cuda_free(logitreg_cuda *state);

#ifdef __cplusplus
}
#endif

#endif /* LOSS_LOGITREG_CUDA_H */
