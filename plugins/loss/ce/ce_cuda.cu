/* ce_cuda.cu — the `ce` loss term on a CUDA device (see loss_ce.c for the formulas).
 * Value: one double per row, summed by one block in a fixed order (deterministic), read back.
 * Gradient: one block per counted row adds grad_scale/n * ct_ce_dlogit into dlogits.
 * Not for: the CPU path (loss_ce.c). Shape legend: N rows, V vocabulary.
 */
#include "ce_cuda.h"

#include <ctrain/companion.h>

#include <ctrain/loss_kit_cuda.cuh>
#include <ctrain/numerics.h>

#include <cuda_runtime.h>

#define THREADS CT_LKIT_THREADS /* threads per block; a power of two */
#define TRY(call, what) CT_LKIT_CUDA_TRY("loss ce", call, what)

/* The scratch (ct_lkit_cuda): rows (N) per-row contributions; res (3) [0] the sum, [1] the first
 * bad row's target, [2] that row (-1: none), as doubles; flag: the first row with target >= V
 * (INT32_MAX: none); pinned (3) res read back. */

/* rows[i] = lse_i - z[i,t_i] for counted rows, 0 otherwise; the first bad row into *bad. */
__global__ void k_ce_rows(const float *z, const int32_t *t, const float *lse, int64_t N,
                          int64_t V, double *rows, int32_t *bad) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N;
         i += (int64_t)gridDim.x * blockDim.x) {
        int32_t ti = t[i];
        double v = 0.0;
        if (ti >= V) atomicMin(bad, (int32_t)i);
        else if (ti >= 0) v = (double)lse[i] - (double)z[i * V + ti];
        rows[i] = v;
    }
}

/* One block: res[0] = sum of rows (fixed order), res[1] = the bad row's target, res[2] = it. */
__global__ void k_ce_sum(const double *rows, int64_t N, const int32_t *t, const int32_t *bad,
                         double *res) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) s += rows[i];
    s = ct_lkit_block_sum(s);
    if (threadIdx.x == 0) {
        res[0] = s;
        res[1] = *bad < N ? (double)t[*bad] : 0.0;
        res[2] = *bad < N ? (double)*bad : -1.0;
    }
}

/* dz[i,j] += g * (softmax_j - [j == t_i]) for counted rows; one block per row. Adds nothing
 * when any target of the batch is outside the vocabulary (*bad < N): the call fails then. */
__global__ void k_ce_grad(const float *z, const int32_t *t, const float *lse, int64_t V,
                          const int32_t *bad, int64_t N, float g, float *dz) {
    int64_t i = blockIdx.x;
    int32_t ti = t[i];
    if (ti < 0 || *bad < N) return;
    const float *zr = z + i * V;
    float *dr = dz + i * V;
    float l = lse[i];
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dr[j] += g * ct_ce_dlogit(zr[j], l, j == ti);
}

void ce_cuda_free(ct_lkit_cuda *s) { ct_lkit_cuda_free(s); }

/* Queues rows, sum, read-back and (when dlogits) the gradient, then waits once: the value must
 * reach the host (ct_loss_result), and the bad-target check rides on the same wait. */
extern "C" int32_t ce_cuda_forward_backward(ct_lkit_cuda **state, const ct_loss_batch *b,
                                            double *value, ct_error *err) {
    const int64_t N = b->n_rows, V = b->vocab;
    *value = 0.0;
    if (N <= 0) return CT_OK;
    int32_t rc = ct_lkit_cuda_reserve(state, N, 3, 1, "loss ce", err);
    if (rc != CT_OK) return rc;
    ct_lkit_cuda *s = *state;
    cudaStream_t st = ct_lkit_cuda_stream(b);
    const int32_t none = INT32_MAX;
    TRY(cudaMemcpyAsync(s->flag, &none, sizeof none, cudaMemcpyHostToDevice, st), "cudaMemcpy");
    unsigned blocks = (unsigned)((N + THREADS - 1) / THREADS);
    k_ce_rows<<<blocks, THREADS, 0, st>>>(b->logits, b->targets, b->row_lse, N, V, s->rows,
                                          s->flag);
    TRY(cudaGetLastError(), "k_ce_rows");
    k_ce_sum<<<1, THREADS, 0, st>>>(s->rows, N, b->targets, s->flag, s->res);
    TRY(cudaGetLastError(), "k_ce_sum");
    TRY(cudaMemcpyAsync(s->pinned, s->res, 3 * sizeof(double), cudaMemcpyDeviceToHost, st),
        "read-back");
    const double n = (double)b->n_counted;
    if (b->dlogits && b->n_counted > 0) {
        const float g = (float)(b->grad_scale / n);
        k_ce_grad<<<(unsigned)N, THREADS, 0, st>>>(b->logits, b->targets, b->row_lse, V, s->flag,
                                                   N, g, b->dlogits);
        TRY(cudaGetLastError(), "k_ce_grad");
    }
    TRY(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    if (s->pinned[2] >= 0)
        return ct_error_set(err, CT_ERR_INVALID, "loss ce: target %d at row %lld is outside "
                            "the vocabulary [0, %lld) ---> check that the data's tokenizer "
                            "matches [model] vocab_size",
                            (int)s->pinned[1], (long long)(b->row_begin + (int64_t)s->pinned[2]),
                            (long long)V);
    if (b->n_counted > 0) *value = s->pinned[0] / n;
    return CT_OK;
}

/* What this companion implements: loss_ce.c refuses it when this does not match its build. */
CT_COMPANION_INFO(CE_CUDA_INTERFACE, sizeof(ct_loss_batch))
