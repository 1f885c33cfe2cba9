/* dropout.c — dropout of the gpt plugin on the CPU: [model] dropout, applied with masks that
 * dropout.h derives from (seed, step, micro-batch, rank, site, element), the same in forward and
 * backward and on every replay. Only a training micro-batch (ct_stage_args.train) drops; with
 * dropout = 0 nothing here runs, so the bits are those of a model without it. Not for: where
 * the sites sit in a block (stages.c, attention.c) or the hash (dropout.h).
 * Shape legend: see gpt.h.
 */
#include "gpt.h"

#include <math.h>

void gpt_dropout_begin(gpt *m, const ct_stage_args *a) {
    int has = a->struct_size >= offsetof(ct_stage_args, seed) + sizeof a->seed;
    m->drop_on = has && a->train && m->dropout > 0.0f;
    if (!m->drop_on) return;
    double thr = floor((double)m->dropout * 4294967296.0 + 0.5);
    m->drop_thr = thr >= 4294967295.0 ? 4294967295u : (uint32_t)thr;
    /* the scale of a kept element, 1/(1-p) as PyTorch's dropout takes it */
    m->drop_scale = (float)(1.0 / (1.0 - (double)m->dropout));
    m->drop_key = gpt_drop_key(a->seed, a->step, a->micro_step, m->rank);
}

void gpt_dropout(const gpt *m, float *y, const float *x, int64_t n, uint32_t site) {
    assert(m->drop_on);
    uint64_t key = gpt_drop_site_key(m->drop_key, site);
    uint32_t thr = m->drop_thr;
    float s = m->drop_scale;
#pragma omp parallel for num_threads(m->threads) if (n > 32768) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float v = gpt_drop_keep(key, (uint64_t)i, thr) ? x[i] * s : 0.0f;
        y[i] = m->bf16 ? gpt_round16(m, v) : v;
    }
}

void gpt_dropout_span(const gpt *m, float *y, const float *x, int64_t n, uint64_t site_key,
                      uint64_t first, int round) {
    uint32_t thr = m->drop_thr;
    float s = m->drop_scale;
    for (int64_t j = 0; j < n; j++) {
        float v = gpt_drop_keep(site_key, first + (uint64_t)j, thr) ? x[j] * s : 0.0f;
        y[j] = round && m->bf16 ? gpt_round16(m, v) : v;
    }
}
