/* ce_cuda.h — the CUDA entry of the `ce` loss term (ce_cuda.cu). With nvcc it is built into
 * the companion plugins/cuda/loss_ce_cuda.so (the only symbols it exports), which loss_ce.c
 * opens on the first batch that lives on a CUDA device (CT_HAVE_CUDA) and calls through
 * ce_cuda_fns, so loss_ce.so links no CUDA library. Not for: anything the host sees.
 */
#ifndef LOSS_CE_CUDA_H
#define LOSS_CE_CUDA_H

#include <ctrain/loss_kit.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The companion interface (companion.h): bump when an entry below changes. */
#define CE_CUDA_INTERFACE 1

/* Value of the term into *value (mean over counted rows of lse - z_t); unless b->dlogits is
 * NULL, adds grad_scale * d value / d z into it. Validates every target first (nothing is added
 * when one is >= V). *state (the kit's scratch, loss_kit_cuda.cuh; NULL until first use) is
 * allocated on first use (grown with N). Synchronises. */
CT_EXPORT int32_t ce_cuda_forward_backward(ct_lkit_cuda **state, const ct_loss_batch *b,
                                           double *value, ct_error *err);
CT_EXPORT void ce_cuda_free(ct_lkit_cuda *state);

/* The entries above as loss_ce.c holds them after opening the companion (order of
 * CE_CUDA_NAMES); NULL until the first CUDA batch. */
typedef struct ce_cuda_fns {
    int32_t (*forward_backward)(ct_lkit_cuda **state, const ct_loss_batch *b, double *value,
                                ct_error *err);
    void (*free)(ct_lkit_cuda *state);
} ce_cuda_fns;
#define CE_CUDA_NAMES {"ce_cuda_forward_backward", "ce_cuda_free"}

#ifdef __cplusplus
}
#endif

#endif /* LOSS_CE_CUDA_H */
