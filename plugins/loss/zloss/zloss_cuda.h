/* zloss_cuda.h — the CUDA entry of the `zloss` loss term (zloss_cuda.cu). With nvcc it is built
 * into the companion plugins/cuda/loss_zloss_cuda.so (the only symbols it exports), which
 * loss_zloss.c opens on the first batch that lives on a CUDA device (CT_HAVE_CUDA) and calls
 * through zloss_cuda_fns, so loss_zloss.so links no CUDA library. Not for: anything the host sees.
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
CT_EXPORT int32_t zloss_cuda_run(zloss_cuda **state, const ct_loss_batch *b,
                                 int32_t mask_ignored, float g, int32_t with_grad,
                                 double *sum, ct_error *err);
CT_EXPORT void zloss_cuda_free(zloss_cuda *state);

/* The entries above as loss_zloss.c holds them after opening the companion (order of
 * ZLOSS_CUDA_NAMES); NULL until the first CUDA batch. */
typedef struct zloss_cuda_fns {
    int32_t (*run)(zloss_cuda **state, const ct_loss_batch *b, int32_t mask_ignored, float g,
                   int32_t with_grad, double *sum, ct_error *err);
    void (*free)(zloss_cuda *state);
} zloss_cuda_fns;
#define ZLOSS_CUDA_NAMES {"zloss_cuda_run", "zloss_cuda_free"}

#ifdef __cplusplus
}
#endif

#endif /* LOSS_ZLOSS_CUDA_H */
