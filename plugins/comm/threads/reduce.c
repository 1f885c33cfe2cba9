/* reduce.c — block loops of the threads engine's reductions (see reduce.h for the orders and
 * the rounding). Runs an order's program (orders.h) over blocks: loads each rank's
 * contribution into double, combines with the per-element functions of reduce.h, stores the
 * result in the dtype. Not for: the orders (orders.c) or who reduces which unit
 * (comm_threads.c).
 */
#include "reduce.h"

#include <assert.h>

/* dst[i] = src[i] as double, i < n. */
static void load_block(const void *src, int32_t dtype, uint64_t n, double *dst) {
    switch (dtype) {
    case CT_DTYPE_F32: {
        const float *s = src;
        for (uint64_t i = 0; i < n; i++) dst[i] = s[i];
        break;
    }
    case CT_DTYPE_BF16: {
        const uint16_t *s = src;
        for (uint64_t i = 0; i < n; i++) dst[i] = ct_bf16_to_f32(s[i]);
        break;
    }
    case CT_DTYPE_F16: {
        const uint16_t *s = src;
        for (uint64_t i = 0; i < n; i++) dst[i] = ct_f16_to_f32(s[i]);
        break;
    }
    case CT_DTYPE_F64: {
        const double *s = src;
        for (uint64_t i = 0; i < n; i++) dst[i] = s[i];
        break;
    }
    case CT_DTYPE_I32: {
        const int32_t *s = src;
        for (uint64_t i = 0; i < n; i++) dst[i] = s[i];
        break;
    }
    default: assert(!"reduce: unsupported dtype");
    }
}

/* dst[i] = src[i] in dtype, i < n. Values are already representable (the combines rounded
 * them), except i32 sums, which wrap modulo 2^32 as an int32_t add would. */
static void store_block(const double *src, int32_t dtype, uint64_t n, void *dst) {
    switch (dtype) {
    case CT_DTYPE_F32: {
        float *d = dst;
        for (uint64_t i = 0; i < n; i++) d[i] = (float)src[i];
        break;
    }
    case CT_DTYPE_BF16: {
        uint16_t *d = dst;
        for (uint64_t i = 0; i < n; i++) d[i] = ct_bf16_from_f32((float)src[i]);
        break;
    }
    case CT_DTYPE_F16: {
        uint16_t *d = dst;
        for (uint64_t i = 0; i < n; i++) d[i] = ct_f16_from_f32((float)src[i]);
        break;
    }
    case CT_DTYPE_F64: {
        double *d = dst;
        for (uint64_t i = 0; i < n; i++) d[i] = src[i];
        break;
    }
    case CT_DTYPE_I32: {
        int32_t *d = dst;
        for (uint64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)(uint64_t)(int64_t)src[i];
            memcpy(&d[i], &u, sizeof u);
        }
        break;
    }
    default: assert(!"reduce: unsupported dtype");
    }
}

/* acc[i] = acc[i] op x[i], rounded to dtype, i < n. */
static void combine_block(double *acc, const double *x, uint64_t n, int32_t dtype, int32_t op) {
    if (op == CT_REDUCE_MAX) {
        for (uint64_t i = 0; i < n; i++) acc[i] = wire_max(acc[i], x[i]);
    } else if (op == CT_REDUCE_MIN) {
        for (uint64_t i = 0; i < n; i++) acc[i] = wire_min(acc[i], x[i]);
    } else if (dtype == CT_DTYPE_BF16) {
        for (uint64_t i = 0; i < n; i++) acc[i] = wire_add_bf16(acc[i], x[i]);
    } else if (dtype == CT_DTYPE_F16) {
        for (uint64_t i = 0; i < n; i++) acc[i] = wire_add_f16(acc[i], x[i]);
    } else if (dtype == CT_DTYPE_F32) {
        for (uint64_t i = 0; i < n; i++) acc[i] = wire_add_f32(acc[i], x[i]);
    } else { /* f64, and i32 (exact in double) */
        for (uint64_t i = 0; i < n; i++) acc[i] += x[i];
    }
}

/* combine_block with stochastic rounding: acc[i] = ct_bf16_add_sr(acc[i], x[i]) for the
 * element sr->element0 + first + i, combine k. acc and x hold bf16 values (exact in double). */
static void combine_block_sr(double *acc, const double *x, uint64_t n, const reduce_sr *sr,
                             uint64_t first, int32_t k) {
    for (uint64_t i = 0; i < n; i++) {
        uint16_t a = ct_bf16_from_f32((float)acc[i]), b = ct_bf16_from_f32((float)x[i]);
        acc[i] = ct_bf16_to_f32(
            ct_bf16_add_sr(a, b, sr->stream, sr->element0 + first + i, k, sr->world_size));
    }
}

/* The switch's f32 accumulation (NVLS's multimem ld_reduce with an f32 accumulator): acc[i] +=
 * x[i] in f32 for bf16 and f32 wires, exactly in double for f64 and i32, not rounded to the
 * wire; MAX/MIN as their combine. */
static void accumulate_block(double *acc, const double *x, uint64_t n, int32_t dtype,
                             int32_t op) {
    if (op == CT_REDUCE_MAX || op == CT_REDUCE_MIN) {
        combine_block(acc, x, n, dtype, op);
    } else if (dtype == CT_DTYPE_BF16 || dtype == CT_DTYPE_F16 || dtype == CT_DTYPE_F32) {
        for (uint64_t i = 0; i < n; i++) acc[i] = wire_add_f32(acc[i], x[i]);
    } else {
        for (uint64_t i = 0; i < n; i++) acc[i] += x[i];
    }
}

/* The switch's one rounding of its accumulator to the wire dtype. */
static void round_block(double *acc, uint64_t n, int32_t dtype) {
    if (dtype == CT_DTYPE_BF16)
        for (uint64_t i = 0; i < n; i++) acc[i] = ct_round_bf16((float)acc[i]);
    else if (dtype == CT_DTYPE_F16)
        for (uint64_t i = 0; i < n; i++) acc[i] = ct_round_f16((float)acc[i]);
    else if (dtype == CT_DTYPE_F32)
        for (uint64_t i = 0; i < n; i++) acc[i] = (float)acc[i];
}

static const void *offset_c(const void *p, uint64_t elems, size_t esize) {
    return (const char *)p + elems * esize;
}

static void *offset(void *p, uint64_t elems, size_t esize) { return (char *)p + elems * esize; }

void reduce_run(const void *const *srcs, const order_step *prog, int32_t n_steps,
                void *const *dsts, int32_t n_dsts, uint64_t n, const reduce_arith *a,
                double *scratch) {
    const int32_t dtype = a->dtype, avg = a->op == CT_REDUCE_AVG;
    const int32_t op = avg ? CT_REDUCE_SUM : a->op; /* AVG: premultiplied contributions, SUM */
    const reduce_sr *sr = a->sr;
    assert(reduce_supported(dtype, a->op) && n_steps >= 1);
    assert(!sr || (dtype == CT_DTYPE_BF16 && a->op == CT_REDUCE_SUM));
    const double s = avg ? reduce_avg_scalar(dtype, a->world_size) : 1.0;
    size_t es = ct_dtype_size(dtype);
    double *x = scratch + (size_t)ORDER_MAX_SLOTS * REDUCE_BLOCK; /* (BLOCK) a rank's input */
    for (uint64_t base = 0; base < n; base += REDUCE_BLOCK) {
        uint64_t m = n - base < REDUCE_BLOCK ? n - base : REDUCE_BLOCK;
        int32_t k = 0; /* rounded combines so far */
        for (int32_t st_i = 0; st_i < n_steps; st_i++) {
            const order_step *st = &prog[st_i];
            double *slot = scratch + (size_t)st->slot * REDUCE_BLOCK;
            if (st->op == STEP_ROUND) {
                round_block(slot, m, dtype);
                continue;
            }
            const double *y = scratch + (size_t)st->arg * REDUCE_BLOCK; /* ADD_SLOT */
            if (st->op != STEP_ADD_SLOT) { /* a rank's contribution */
                double *dst = st->op == STEP_LOAD ? slot : x;
                load_block(offset_c(srcs[st->arg], base, es), dtype, m, dst);
                if (avg)
                    for (uint64_t i = 0; i < m; i++) dst[i] = reduce_premul(dst[i], s, dtype);
                if (st->op == STEP_LOAD) continue;
                y = x;
            }
            if (st->op == STEP_ACC_RANK) accumulate_block(slot, y, m, dtype, op);
            else if (sr) combine_block_sr(slot, y, m, sr, base, ++k);
            else combine_block(slot, y, m, dtype, op);
        }
        for (int32_t j = 0; j < n_dsts; j++)
            store_block(scratch, dtype, m, offset(dsts[j], base, es));
    }
}
