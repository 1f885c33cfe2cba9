/* master.c — master weights in a dtype other than f32: widen to an f32 scratch, write back with
 * the policy's rule, the Kahan compensation buffers (see master.h). Not for: the per-element
 * rounding (precision_kit.h) or the optimizer's arithmetic (plugins/optimizer/). */
#include "run/master.h"

#include <ctrain/numerics.h>
#include <ctrain/precision_kit.h>
#include <stdlib.h>
#include <string.h>

int32_t master_check_policy(const host_rank *r, ct_error *err) {
    if (ct_pkit_master_ok(&r->policy)) return CT_OK;
    const char *name = r->precision.plugin ? r->precision.plugin->desc.name : "?";
    if (r->policy.master_dtype != CT_DTYPE_BF16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "precision %s: master dtype %s; the host "
                            "keeps master weights in f32 or bf16 only ---> use a policy with "
                            "master f32 (amp) or bf16 (bf16_master)", name,
                            ct_dtype_name(r->policy.master_dtype));
    return ct_error_set(err, CT_ERR_UNSUPPORTED, "precision %s: master_update = %d is not a "
                        "ct_master_update (0 nearest, 1 sr, 2 kahan) ---> fix the plugin's "
                        "policy()", name, (int)r->policy.master_update);
}

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

int32_t master_setup(host_rank *r, ct_error *err) {
    int64_t seed = 0;
    config_get_int(r->cfg, "run", "seed", &seed, NULL);
    r->seed = (uint64_t)seed;
    if (!master_is_low(r)) return CT_OK;
    const int kahan = r->policy.master_update == CT_MASTER_KAHAN;
    uint64_t cap = 1;
    for (uint32_t u = 0; u < r->mdesc.n_units; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        int32_t rc = RANK_STRATEGY(r, shard, u, &sh, err);
        if (rc != CT_OK) return rc;
        int32_t have = sh.struct_size >= offsetof(ct_shard, master_dtype) + sizeof(int32_t) &&
                               sh.master_dtype ? sh.master_dtype : CT_DTYPE_F32;
        if (have != r->policy.master_dtype)
            return ct_error_set(err, CT_ERR_UNSUPPORTED, "strategy %s (%s) keeps unit %u's master "
                                "in %s, but precision %s asks for %s master weights ---> use a "
                                "strategy built against ABI 1.7 or later (ddp, no_shard, "
                                "full_shard), or a policy with an f32 master",
                                r->strategy.plugin->desc.name, r->strategy.plugin->path, u,
                                ct_dtype_name(have), r->precision.plugin->desc.name,
                                ct_dtype_name(r->policy.master_dtype));
        if (sh.numel > cap) cap = sh.numel;
        if (kahan) {
            host_unit_state *us = &r->units[u];
            uint64_t bytes = (sh.numel ? sh.numel : 1) * sizeof(uint16_t);
            if (!(us->comp = RANK_DEV(r, alloc, bytes, err)))
                return err->code ? err->code
                                 : ct_error_set(err, CT_ERR_NOMEM, "out of memory for unit %u's "
                                                "compensation buffer (%llu bytes)", u,
                                                (unsigned long long)bytes);
            if ((rc = RANK_DEV(r, zero, us->comp, bytes, err)) != CT_OK) return rc;
        }
    }
    r->master_cap = cap;
    r->master_hf = malloc(cap * sizeof *r->master_hf);
    r->master_hw = malloc(cap * sizeof *r->master_hw);
    r->master_hc = kahan ? malloc(cap * sizeof *r->master_hc) : NULL;
    if (!r->master_hf || !r->master_hw || (kahan && !r->master_hc))
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory for the master's f32 staging");
    if (!(r->master_scratch = RANK_DEV(r, alloc, cap * sizeof(float), err)))
        return err->code ? err->code
                         : ct_error_set(err, CT_ERR_NOMEM, "out of memory for the master's f32 "
                                        "scratch (%llu bytes)",
                                        (unsigned long long)(cap * sizeof(float)));
    return CT_OK;
}

void master_free(host_rank *r) {
    if (r->dev.vt) {
        for (uint32_t u = 0; r->units && u < r->mdesc.n_units; u++)
            RANK_DEV_VOID(r, free_mem, r->units[u].comp);
        RANK_DEV_VOID(r, free_mem, r->master_scratch);
    }
    free(r->master_hf);
    free(r->master_hw);
    free(r->master_hc);
    r->master_scratch = r->master_hf = NULL;
    r->master_hw = r->master_hc = NULL;
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
