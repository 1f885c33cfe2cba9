/* logitreg_cuda.h — the CUDA entry of the `logitreg` loss term (logitreg_cuda.cu). With nvcc
 * it is built into the companion plugins/cuda/loss_logitreg_cuda.so (the only symbols it
 * exports), which loss_logitreg.c opens on the first batch that lives on a CUDA device
 * (CT_HAVE_CUDA) and calls through ct_lkit_cuda_fns, so loss_logitreg.so links no CUDA
 * library. Not for: anything the host sees.
 */
#ifndef LOSS_LOGITREG_CUDA_H
#define LOSS_LOGITREG_CUDA_H

#include <ctrain/loss_kit.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A ct_lkit_sum_fn (loss_kit.h: *sum, the gradient, *state) for the sum of z^2; the scratch's
 * free. */
CT_EXPORT int32_t logitreg_cuda_run(ct_lkit_cuda **state, const ct_loss_batch *b,
                                    int32_t mask_ignored, float g, int32_t with_grad,
                                    double *sum, ct_error *err);
CT_EXPORT void logitreg_cuda_free(ct_lkit_cuda *state);

/* The entries above in the order of ct_lkit_cuda_fns (run, free). */
#define LOGITREG_CUDA_NAMES {"logitreg_cuda_run", "logitreg_cuda_free"}

#ifdef __cplusplus
}
#endif

#endif /* LOSS_LOGITREG_CUDA_H */
