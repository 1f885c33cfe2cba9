/* master.c — master weights in a dtype other than f32: widen to an f32 scratch, write back with
 * the policy's rule, the Kahan compensation buffers (see master.h). Not for: the per-element
 * rounding (precision_kit.h) or the optimizer's arithmetic (plugins/optimizer/). */
#include "run/master.h"

#include <ctrain/numerics.h>
#include <ctrain/precision_kit.h>
#include <stdlib.h>
#include <string.h>

int master_is_low(const host_rank *r) { return r->policy.master_dtype == CT_DTYPE_BF16; }

uint32_t master_bytes(const host_rank *r) { return master_is_low(r) ? 2 : 4; }

uint32_t master_comp_bytes(const host_rank *r) { return ct_pkit_master_comp_bytes(&r->policy); }

int32_t master_to_host_f32(host_rank *r, float *dst, const void *src, int32_t dtype, uint64_t n,
                           ct_error *err) {
    if (dtype != CT_DTYPE_BF16)
        return RANK_DEV(r, copy, dst, src, n * sizeof(float), CT_COPY_D2H, err);
    /* widen in place from the back: the bf16 values fill the first half of dst's bytes */
    uint16_t *h = (uint16_t *)dst;
    int32_t rc = RANK_DEV(r, copy, h, src, n * sizeof *h, CT_COPY_D2H, err);
    for (uint64_t i = n; rc == CT_OK && i-- > 0;) dst[i] = ct_bf16_to_f32(h[i]);
    return rc;
}

int32_t master_from_host_f32(host_rank *r, void *dst, int32_t dtype, const float *src,
                             uint64_t n, ct_error *err) {
    if (dtype != CT_DTYPE_BF16)
        return RANK_DEV(r, copy, dst, src, n * sizeof(float), CT_COPY_H2D, err);
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return ct_error_set(err, CT_ERR_NOMEM, "out of memory rounding %llu values to bf16",
                                (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) h[i] = ct_bf16_from_f32(src[i]);
    int32_t rc = RANK_DEV(r, copy, dst, h, n * sizeof *h, CT_COPY_H2D, err);
    free(h);
    return rc;
}

int32_t master_widen(host_rank *r, const ct_shard *sh, float **param, ct_error *err) {
    if (sh->numel > r->master_cap)
        return ct_error_set(err, CT_ERR_INTERNAL, "a shard of %llu elements is larger than the "
                            "master scratch (%llu)", (unsigned long long)sh->numel,
                            (unsigned long long)r->master_cap);
    int32_t rc = master_to_host_f32(r, r->master_hf, sh->master, r->policy.master_dtype,
                                    sh->numel, err);
    if (rc == CT_OK)
        rc = RANK_DEV(r, copy, r->master_scratch, r->master_hf, sh->numel * sizeof(float),
                      CT_COPY_H2D, err);
    *param = r->master_scratch;
    return rc;
}

int32_t master_write_back(host_rank *r, uint32_t u, const ct_shard *sh, int64_t step,
                          ct_error *err) {
    const int32_t rule = r->policy.master_update;
    void *comp = r->units[u].comp;
    uint64_t n = sh->numel;
    int32_t rc = RANK_DEV(r, copy, r->master_hf, r->master_scratch, n * sizeof(float),
                          CT_COPY_D2H, err);
    if (rc == CT_OK)
        rc = RANK_DEV(r, copy, r->master_hw, sh->master, n * sizeof(uint16_t), CT_COPY_D2H, err);
    if (rc == CT_OK && rule == CT_MASTER_KAHAN)
        rc = RANK_DEV(r, copy, r->master_hc, comp, n * sizeof(uint16_t), CT_COPY_D2H, err);
    if (rc != CT_OK) return rc;
    ct_pkit_master_write_bf16(rule, r->master_hw, r->master_hc, r->master_hf, n, r->seed, step, u,
                              sh->offset);
    rc = RANK_DEV(r, copy, sh->master, r->master_hw, n * sizeof(uint16_t), CT_COPY_H2D, err);
    if (rc == CT_OK && rule == CT_MASTER_KAHAN)
        rc = RANK_DEV(r, copy, comp, r->master_hc, n * sizeof(uint16_t), CT_COPY_H2D, err);
    return rc;
}
