/* logitreg_cuda.h — the CUDA entry of the `logitreg` loss term (logitreg_cuda.cu). With nvcc
 * it is built into the companion plugins/cuda/loss_logitreg_cuda.so (the only symbols it
 * exports), which loss_logitreg.c opens on the first batch that lives on a CUDA device
 * (CT_HAVE_CUDA) and calls through logitreg_cuda_fns, so loss_logitreg.so links no CUDA
 * library. Not for: anything the host sees.
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
CT_EXPORT int32_t logitreg_cuda_run(logitreg_cuda **state, const ct_loss_batch *b,
                                    int32_t mask_ignored, float g, int32_t with_grad,
                                    double *sum, ct_error *err);
CT_EXPORT void logitreg_cuda_free(logitreg_cuda *state);

/* The entries above as loss_logitreg.c holds them after opening the companion (order of
 * LOGITREG_CUDA_NAMES); NULL until the first CUDA batch. */
typedef struct logitreg_cuda_fns {
    int32_t (*run)(logitreg_cuda **state, const ct_loss_batch *b, int32_t mask_ignored, float g,
                   int32_t with_grad, double *sum, ct_error *err);
    void (*free)(logitreg_cuda *state);
} logitreg_cuda_fns;
#define LOGITREG_CUDA_NAMES {"logitreg_cuda_run", "logitreg_cuda_free"}

#ifdef __cplusplus
}
#endif

#endif /* LOSS_LOGITREG_CUDA_H */
