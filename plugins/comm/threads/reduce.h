/* reduce.h — the arithmetic of the threads engine's reductions: in which order the ranks'
 * contributions to one element are combined is a program (orders.h); this is the rounding of
 * every partial result to the wire dtype and the loop that runs a program over blocks.
 * Not for: waiting, threads or plugin glue (world.c, comm_threads.c). docs/collectives.md
 * explains the orders with pictures.
 */
#ifndef COMM_THREADS_REDUCE_H
#define COMM_THREADS_REDUCE_H

#include <ctrain/ctrain.h>
#include <ctrain/numerics.h>

#include "orders.h"

/* Elements handled per pass; the scratch of reduce_run holds REDUCE_SCRATCH doubles. */
#define REDUCE_BLOCK 256
#define REDUCE_SCRATCH ((ORDER_MAX_SLOTS + 1) * REDUCE_BLOCK)

/* --- one combine, rounded to the wire dtype ---------------------------------------------
 * Partial results are kept in double between combines, but every combine first rounds to the
 * wire dtype, so the value held is always exactly representable in it. For f32 and bf16 the
 * add is done in f32 (what a GPU kernel does) and then rounded: bf16(f32(a + b)) equals the
 * correctly rounded bf16 sum because f32 has more than 2*8+2 bits (double rounding is
 * innocuous); f16 the same way (24 >= 2*11+2). i32 sums are exact in double for |sum| < 2^53 and wrap modulo 2^32 on store. */

CT_HD double wire_add_f32(double a, double b) { return (double)((float)a + (float)b); }

CT_HD double wire_add_bf16(double a, double b) {
    return (double)ct_round_bf16((float)a + (float)b);
}

/* f16 (ABI 1.7): f32 has 24 >= 2*11+2 bits, so f16(f32(a + b)) is the correctly rounded f16
 * sum too (what a GPU's half add gives). */
CT_HD double wire_add_f16(double a, double b) {
    return (double)ct_round_f16((float)a + (float)b);
}

/* max/min propagate NaN (a diverged rank must not be hidden by the others). */
CT_HD double wire_max(double a, double b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }
CT_HD double wire_min(double a, double b) { return (a != a || b != b) ? NAN : (a < b ? a : b); }

/* 1 when op over dtype is something reduce_run can do. AVG (NCCL's ncclAvg) is for the
 * floating dtypes only. */
static inline int reduce_supported(int32_t dtype, int32_t op) {
    int dtype_ok = dtype == CT_DTYPE_F32 || dtype == CT_DTYPE_BF16 || dtype == CT_DTYPE_F64 ||
                   dtype == CT_DTYPE_I32 || dtype == CT_DTYPE_F16;
    int op_ok = op == CT_REDUCE_SUM || op == CT_REDUCE_MAX || op == CT_REDUCE_MIN ||
                (op == CT_REDUCE_AVG && dtype != CT_DTYPE_I32);
    return dtype_ok && op_ok;
}

/* ncclAvg's premultiplier for world_size ranks as a value of dtype (numerics.h's for bf16 and
 * f32; 1/N in double for f64). */
static inline double reduce_avg_scalar(int32_t dtype, int32_t world_size) {
    if (dtype == CT_DTYPE_BF16 || dtype == CT_DTYPE_F32)
        return ct_avg_scalar(world_size, dtype == CT_DTYPE_BF16);
    if (dtype == CT_DTYPE_F16) return ct_round_f16((float)(1.0 / (double)world_size));
    return 1.0 / (double)world_size;
}

/* One contribution x premultiplied as ncclAvg does before the sum (PreMulSum), in dtype (f16:
 * the f32 product of two f16 values is exact, so rounding it is the correctly rounded half
 * product). */
CT_HD double reduce_premul(double x, double s, int32_t dtype) {
    if (dtype == CT_DTYPE_BF16 || dtype == CT_DTYPE_F32)
        return ct_avg_premul((float)x, (float)s, dtype == CT_DTYPE_BF16);
    if (dtype == CT_DTYPE_F16) return ct_round_f16((float)x * (float)s);
    return x * s;
}

/* Stochastic rounding of a bf16 SUM (ABI 1.5's all_reduce_sr / reduce_scatter_sr): the
 * program's k-th combine (k = 1, 2, ... in step order, ADD_RANK and ADD_SLOT alike; the
 * switch's f32 accumulation and its rounding do not count and round to nearest) of the run's
 * element i is ct_bf16_add_sr(a, b, stream, element0 + i, k, world_size). */
typedef struct reduce_sr {
    uint64_t stream;
    uint64_t element0;   /* the index, in the caller's whole buffer, of the run's element 0 */
    int32_t  world_size;
} reduce_sr;

/* What a run computes: the dtype, the op (SUM, MAX, MIN, or AVG: every contribution
 * premultiplied by reduce_avg_scalar(dtype, world_size), then summed), the world size, and
 * sr: NULL rounds every combine to nearest; otherwise dtype is bf16, op SUM, and every combine
 * is rounded stochastically as reduce_sr says. */
typedef struct reduce_arith {
    int32_t          dtype, op, world_size;
    const reduce_sr *sr;
} reduce_arith;

/* Reduce n elements by the program prog (n_steps steps, see orders.h): result[i] = the
 * program run over x[r] = srcs[r][i], each combine rounded to the dtype. The result is stored
 * into each of the n_dsts buffers dsts[j][0 .. n-1]. srcs has world_size pointers, already
 * offset to the first element. A dst may be one of the srcs (in place) as long as no other
 * thread reads it meanwhile. scratch holds REDUCE_SCRATCH doubles. The caller has checked
 * reduce_supported(a->dtype, a->op). */
void reduce_run(const void *const *srcs, const order_step *prog, int32_t n_steps,
                void *const *dsts, int32_t n_dsts, uint64_t n, const reduce_arith *a,
                double *scratch);

#endif /* COMM_THREADS_REDUCE_H */
