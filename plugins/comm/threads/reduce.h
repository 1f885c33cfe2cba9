/* reduce.h — the arithmetic of the threads engine's reductions: in which order the ranks'
 * contributions to one element are combined (ring as NCCL does it, or a binary tree) and the
 * rounding of every partial result to the wire dtype. Pure functions over host arrays.
 * Not for: waiting, threads or plugin glue (world.c, comm_threads.c). docs/collectives.md
 * explains the orders with pictures.
 */
#ifndef COMM_THREADS_REDUCE_H
#define COMM_THREADS_REDUCE_H

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

typedef enum reduce_algo {
    REDUCE_RING = 0, /* NCCL's ring: chunk c starts at rank c+1 and ends at rank c */
    REDUCE_TREE = 1, /* binary tree in heap order rooted at rank 0 (for comparison) */
} reduce_algo;

/* Elements handled per pass; the scratch of reduce_range holds (world_size + 1) blocks. */
#define REDUCE_BLOCK 256

/* --- one combine, rounded to the wire dtype ---------------------------------------------
 * Partial results are kept in double between combines, but every combine first rounds to the
 * wire dtype, so the value held is always exactly representable in it. For f32 and bf16 the
 * add is done in f32 (what a GPU kernel does) and then rounded: bf16(f32(a + b)) equals the
 * correctly rounded bf16 sum because f32 has more than 2*8+2 bits (double rounding is
 * innocuous). i32 sums are exact in double for |sum| < 2^53 and wrap modulo 2^32 on store. */

CT_HD double wire_add_f32(double a, double b) { return (double)((float)a + (float)b); }

CT_HD double wire_add_bf16(double a, double b) {
    return (double)ct_round_bf16((float)a + (float)b);
}

/* max/min propagate NaN (a diverged rank must not be hidden by the others). */
CT_HD double wire_max(double a, double b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }
CT_HD double wire_min(double a, double b) { return (a != a || b != b) ? NAN : (a < b ? a : b); }

/* 1 when op over dtype is something reduce_range can do. */
static inline int reduce_supported(int32_t dtype, int32_t op) {
    int dtype_ok = dtype == CT_DTYPE_F32 || dtype == CT_DTYPE_BF16 || dtype == CT_DTYPE_F64 ||
                   dtype == CT_DTYPE_I32;
    int op_ok = op == CT_REDUCE_SUM || op == CT_REDUCE_MAX || op == CT_REDUCE_MIN;
    return dtype_ok && op_ok;
}

/* The k-th rank (k = 0 .. N-1) whose contribution enters the ring sum of chunk c: the partial
 * sum is born at rank c+1 (it sends its own value unrounded), each next rank adds its value
 * and rounds, and rank c adds last and owns the result. N-1 combines, N-1 roundings. */
static inline int32_t ring_rank(int32_t chunk, int32_t k, int32_t world_size) {
    return (int32_t)((chunk + 1 + k) % world_size);
}

/* Elements [begin, end) of chunk c when `count` elements are split into N ring chunks for an
 * all-reduce: chunk c holds [c*count/N, (c+1)*count/N) (floor division), so sizes differ by
 * at most one and the short chunks come first. */
static inline void ring_chunk_range(uint64_t count, int32_t chunk, int32_t world_size,
                                    uint64_t *begin, uint64_t *end) {
    *begin = count * (uint64_t)chunk / (uint64_t)world_size;
    *end = count * (uint64_t)(chunk + 1) / (uint64_t)world_size;
}

/* Reduce n elements: result[i] = op over ranks r of srcs[r][i], combined in the order `algo`
 * gives for ring chunk `chunk` (ignored by the tree), each combine rounded to dtype. The result
 * is stored into each of the n_dsts buffers dsts[j][0 .. n-1]. srcs has world_size pointers,
 * already offset to the first element. A dst may be one of the srcs (in place) as long as no
 * other thread reads it meanwhile. scratch holds (world_size + 1) * REDUCE_BLOCK doubles.
 * The caller has checked reduce_supported(dtype, op). */
void reduce_range(const void *const *srcs, int32_t world_size, int32_t chunk, int32_t algo,
                  void *const *dsts, int32_t n_dsts, uint64_t n, int32_t dtype, int32_t op,
                  double *scratch);

#endif /* COMM_THREADS_REDUCE_H */
