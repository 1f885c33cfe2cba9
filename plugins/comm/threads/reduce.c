/* reduce.c — block loops of the threads engine's reductions (see reduce.h for the orders and
 * the rounding). Loads a block of each rank's contribution into double, combines them in ring
 * or tree order with the per-element functions of reduce.h, stores the result in the dtype.
 * Not for: deciding who reduces which chunk (comm_threads.c).
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
    } else if (dtype == CT_DTYPE_F32) {
        for (uint64_t i = 0; i < n; i++) acc[i] = wire_add_f32(acc[i], x[i]);
    } else { /* f64, and i32 (exact in double) */
        for (uint64_t i = 0; i < n; i++) acc[i] += x[i];
    }
}

static const void *offset_c(const void *p, uint64_t elems, size_t esize) {
    return (const char *)p + elems * esize;
}

static void *offset(void *p, uint64_t elems, size_t esize) { return (char *)p + elems * esize; }

void reduce_range(const void *const *srcs, int32_t world_size, int32_t chunk, int32_t algo,
                  void *const *dsts, int32_t n_dsts, uint64_t n, int32_t dtype, int32_t op,
                  double *scratch) {
    assert(reduce_supported(dtype, op) && world_size >= 1);
    size_t es = ct_dtype_size(dtype);
    double *acc = scratch;            /* (BLOCK) the running result */
    double *node = scratch + REDUCE_BLOCK; /* (N, BLOCK) tree: per-node partial results */
    for (uint64_t base = 0; base < n; base += REDUCE_BLOCK) {
        uint64_t m = n - base < REDUCE_BLOCK ? n - base : REDUCE_BLOCK;
        if (algo == REDUCE_TREE) {
            /* Bottom-up over the heap: node r = x_r, then + subtree(2r+1), then + subtree(2r+2),
             * each combine rounded. Children have larger indices, so a reverse sweep sees them
             * finished. */
            for (int32_t r = world_size - 1; r >= 0; r--) {
                double *nr = node + (size_t)r * REDUCE_BLOCK;
                load_block(offset_c(srcs[r], base, es), dtype, m, nr);
                for (int32_t ch = 2 * r + 1; ch <= 2 * r + 2 && ch < world_size; ch++)
                    combine_block(nr, node + (size_t)ch * REDUCE_BLOCK, m, dtype, op);
            }
            memcpy(acc, node, m * sizeof *acc);
        } else {
            double *x = node; /* (BLOCK) the next rank's contribution */
            load_block(offset_c(srcs[ring_rank(chunk, 0, world_size)], base, es), dtype, m, acc);
            for (int32_t k = 1; k < world_size; k++) {
                load_block(offset_c(srcs[ring_rank(chunk, k, world_size)], base, es), dtype, m,
                           x);
                combine_block(acc, x, m, dtype, op);
            }
        }
        for (int32_t j = 0; j < n_dsts; j++) store_block(acc, dtype, m, offset(dsts[j], base, es));
    }
}
