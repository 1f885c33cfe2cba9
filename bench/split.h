/* split.h — the part of a product C (M,N) that OpenMP thread t of nt computes when a product is
 * split as the gpt plugin splits it (plugins/model/gpt/layers.c, gpt_sgemm): C's longer side in
 * multiples of 16, one single-threaded call per thread. For bench/gemm_ceiling.c and
 * bench/onednn_products.c. Not for: the plugin itself (it keeps its own copy in layers.c).
 */
#ifndef CTRAIN_BENCH_SPLIT_H
#define CTRAIN_BENCH_SPLIT_H

#include <stdint.h>

/* The part [s, e) of C's rows (*rows = 1, when M >= N) or columns (*rows = 0); s >= e: none. */
static inline void split_part(int64_t M, int64_t N, int64_t nt, int64_t t, int *rows, int64_t *s,
                              int64_t *e) {
    *rows = M >= N;
    int64_t len = *rows ? M : N;
    int64_t per = ((len + nt - 1) / nt + 15) / 16 * 16;
    *s = t * per;
    *e = *s + per < len ? *s + per : len;
}

#endif /* CTRAIN_BENCH_SPLIT_H */
