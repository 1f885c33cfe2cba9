/* memory.c — the start-of-training memory line (see memory.h). Not for: the peaks logged after
 * the first step (loop.c) or allocating anything. */
#include "run/memory.h"

#include "run/master.h"

#include <ctrain/precision_kit.h>
#include <stdio.h>
#include <string.h>

int32_t memory_measure(host_rank *r, host_memory *m, ct_error *err) {
    const ct_strategy_vtable *st = r->strategy.vt;
    uint64_t params = 0, grads = UINT64_MAX, gathered = 0;
    int32_t rc = CT_OK;
    memset(m, 0, sizeof *m);
    for (uint32_t u = 0; rc == CT_OK && u < r->mdesc.n_units; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        rc = RANK_STRATEGY(r, shard, u, &sh, err);
        m->elements += sh.numel;
    }
    if (rc == CT_OK && st->memory) rc = RANK_STRATEGY(r, memory, &params, &grads, &gathered, err);
    if (rc != CT_OK) return rc;
    if (!st->memory) params = m->elements * master_bytes(r);
    m->weights = params;
    m->grads = grads;
    m->optim = m->elements * r->n_state * sizeof(float);
    m->comp = m->elements * master_comp_bytes(r);
    return CT_OK;
}

/* "<B/param> B/param <MB> MB" of `bytes` over `elements` */
static int part(char *buf, size_t n, uint64_t bytes, uint64_t elements) {
    return snprintf(buf, n, "%.2f B/param %.2f MB", elements ? (double)bytes / elements : 0.0,
                    (double)bytes / 1e6);
}

void memory_format(const host_rank *r, const host_memory *m, char *buf, size_t n) {
    size_t k = 0;
#define ADD(...)                                                                               \
    do {                                                                                       \
        if (k < n) k += (size_t)snprintf(buf + k, n - k, __VA_ARGS__);                         \
    } while (0)
#define ADD_PART(bytes)                                                                        \
    do {                                                                                       \
        if (k < n) k += (size_t)part(buf + k, n - k, (bytes), m->elements);                    \
    } while (0)
    const int32_t md = r->policy.master_dtype, pd = r->policy.param_dtype;
    ADD("memory per rank (rank %d of %d, before the first step, %llu parameter elements held): "
        "weights ", r->rank, r->world, (unsigned long long)m->elements);
    ADD_PART(m->weights);
    if (md == pd) ADD(" (master %s, also the compute copy)", ct_dtype_name(md));
    else ADD(" (master %s + compute %s)", ct_dtype_name(md), ct_dtype_name(pd));
    ADD(" | grads ");
    if (m->grads == UINT64_MAX) ADD("? (the strategy has no memory())");
    else ADD_PART(m->grads);
    ADD(" | optimizer state ");
    ADD_PART(m->optim);
    ADD(" (%s: %u f32 buffers)", r->optimizer.plugin ? r->optimizer.plugin->desc.name : "?",
        r->n_state);
    ADD(" | compensation ");
    ADD_PART(m->comp);
    if (m->comp) ADD(" (%s, kahan)", ct_dtype_name(md));
    else if (md != CT_DTYPE_F32)
        ADD(" (none: update = %s)", ct_pkit_master_update_name(r->policy.master_update));
    uint64_t total = m->weights + (m->grads == UINT64_MAX ? 0 : m->grads) + m->optim + m->comp;
    ADD(" | total ");
    ADD_PART(total);
#undef ADD
#undef ADD_PART
}
