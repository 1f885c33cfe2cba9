/* zloss_cuda.cu — the `zloss` term on a CUDA device (formulas in loss_zloss.c): the sum of
 * lse_i^2 over counted rows (one double per row, summed by one block in a fixed order, read
 * back) and the gradient g * ct_zloss_dlogit added by one block per counted row.
 * Not for: the CPU path (loss_zloss.c). Shape legend: N rows, V vocabulary.
 */
#include "zloss_cuda.h"

#include <ctrain/companion.h>

#include <ctrain/loss_kit_cuda.cuh>
#include <ctrain/numerics.h>

#include <cuda_runtime.h>

#define THREADS CT_LKIT_THREADS /* threads per block; a power of two */
#define TRY(call, what) CT_LKIT_CUDA_TRY("loss zloss", call, what)

/* The scratch (ct_lkit_cuda): rows (N) per-row lse^2 (0 for rows left out), res[0] their sum. */

__global__ void k_zloss_rows(const int32_t *t, const float *lse, int64_t N, int32_t mask,
                             double *rows) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N;
         i += (int64_t)gridDim.x * blockDim.x)
        rows[i] = ct_lkit_row_counts(mask, t[i]) ? (double)lse[i] * (double)lse[i] : 0.0;
}

__global__ void k_zloss_grad(const float *z, const int32_t *t, const float *lse, int64_t V,
                             int32_t mask, float g, float *dz) {
    int64_t i = blockIdx.x;
    if (!ct_lkit_row_counts(mask, t[i])) return;
    const float *zr = z + i * V;
    float *dr = dz + i * V;
    float l = lse[i];
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dr[j] += g * ct_zloss_dlogit(zr[j], l);
}

void zloss_cuda_free(ct_lkit_cuda *s) { ct_lkit_cuda_free(s); }

extern "C" int32_t zloss_cuda_run(ct_lkit_cuda **state, const ct_loss_batch *b,
                                  int32_t mask_ignored, float g, int32_t with_grad, double *sum,
                                  ct_error *err) {
    const int64_t N = b->n_rows, V = b->vocab;
    *sum = 0.0;
    if (N <= 0) return CT_OK;
    int32_t rc = ct_lkit_cuda_reserve(state, N, 1, 0, "loss zloss", err);
    if (rc != CT_OK) return rc;
    ct_lkit_cuda *s = *state;
    cudaStream_t st = ct_lkit_cuda_stream(b);
    k_zloss_rows<<<(unsigned)((N + THREADS - 1) / THREADS), THREADS, 0, st>>>(
        b->targets, b->row_lse, N, mask_ignored, s->rows);
    TRY(cudaGetLastError(), "k_zloss_rows");
    /* the value's read-back and the gradient queued before the one wait */
    if ((rc = ct_lkit_cuda_sum_start(s, N, st, "loss zloss", err)) != CT_OK) return rc;
    if (with_grad && b->dlogits) {
        k_zloss_grad<<<(unsigned)N, THREADS, 0, st>>>(b->logits, b->targets, b->row_lse, V,
                                                      mask_ignored, g, b->dlogits);
        TRY(cudaGetLastError(), "k_zloss_grad");
    }
    return ct_lkit_cuda_sum_finish(s, st, "loss zloss", sum, err);
}

/* What this companion implements: the plugin (loss_kit.h) refuses it when this does not match. */
CT_COMPANION_INFO(CT_LKIT_CUDA_INTERFACE, sizeof(ct_loss_batch))
