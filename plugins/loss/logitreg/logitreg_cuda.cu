/* logitreg_cuda.cu — the `logitreg` term on a CUDA device (formulas in loss_logitreg.c): the sum
 * of z^2 over counted rows (one block per row forms its row sum in double in a fixed tree
 * order; one block sums the rows in a fixed order; read back) and the gradient g * z added by
 * one block per counted row. Not for: the CPU path (loss_logitreg.c).
 * Shape legend: N rows, V vocabulary.
 */
#include "logitreg_cuda.h"

#include <ctrain/companion.h>

#include <ctrain/loss_kit_cuda.cuh>

#include <cuda_runtime.h>

#define THREADS CT_LKIT_THREADS /* threads per block; a power of two */
#define TRY(call, what) CT_LKIT_CUDA_TRY("loss logitreg", call, what)

/* The scratch (ct_lkit_cuda): rows (N) per-row sum of z^2 (0 for rows left out), res[0] their
 * sum. */

/* rows[i] = sum_j z[i,j]^2 for counted rows; one block per row. */
__global__ void k_logitreg_rows(const float *z, const int32_t *t, int64_t V, int32_t mask,
                                double *rows) {
    int64_t i = blockIdx.x;
    double s = 0.0;
    if (ct_lkit_row_counts(mask, t[i])) {
        const float *zr = z + i * V;
        for (int64_t j = threadIdx.x; j < V; j += THREADS) s += (double)zr[j] * (double)zr[j];
    }
    s = ct_lkit_block_sum(s);
    if (threadIdx.x == 0) rows[i] = s;
}

__global__ void k_logitreg_grad(const float *z, const int32_t *t, int64_t V, int32_t mask,
                                float g, float *dz) {
    int64_t i = blockIdx.x;
    if (!ct_lkit_row_counts(mask, t[i])) return;
    const float *zr = z + i * V;
    float *dr = dz + i * V;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dr[j] += g * zr[j];
}

void logitreg_cuda_free(ct_lkit_cuda *s) { ct_lkit_cuda_free(s); }

extern "C" int32_t logitreg_cuda_run(ct_lkit_cuda **state, const ct_loss_batch *b,
                                     int32_t mask_ignored, float g, int32_t with_grad,
                                     double *sum, ct_error *err) {
    const int64_t N = b->n_rows, V = b->vocab;
    *sum = 0.0;
    if (N <= 0) return CT_OK;
    int32_t rc = ct_lkit_cuda_reserve(state, N, 1, 0, "loss logitreg", err);
    if (rc != CT_OK) return rc;
    ct_lkit_cuda *s = *state;
    cudaStream_t st = ct_lkit_cuda_stream(b);
    k_logitreg_rows<<<(unsigned)N, THREADS, 0, st>>>(b->logits, b->targets, V, mask_ignored,
                                                     s->rows);
    TRY(cudaGetLastError(), "k_logitreg_rows");
    /* the value's read-back and the gradient queued before the one wait */
    if ((rc = ct_lkit_cuda_sum_start(s, N, st, "loss logitreg", err)) != CT_OK) return rc;
    if (with_grad && b->dlogits) {
        k_logitreg_grad<<<(unsigned)N, THREADS, 0, st>>>(b->logits, b->targets, V, mask_ignored,
                                                         g, b->dlogits);
        TRY(cudaGetLastError(), "k_logitreg_grad");
    }
    return ct_lkit_cuda_sum_finish(s, st, "loss logitreg", sum, err);
}

/* What this companion implements: the plugin (loss_kit.h) refuses it when this does not match. */
CT_COMPANION_INFO(CT_LKIT_CUDA_INTERFACE, sizeof(ct_loss_batch))
