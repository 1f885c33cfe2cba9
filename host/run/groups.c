/* groups.c — the parameter groups (see groups.h): roles from the model's description, weight
 * decay and lr multipliers from [optim]. Not for: the update (optim.c). */
#include "run/groups.h"

#include "base/init.h"

#include <stdlib.h>
#include <string.h>

const char *const groups_role_names[5] = {"matrix", "embedding", "head", "norm", "bias"};

int32_t groups_role(const ct_model_desc *d, uint32_t u, uint32_t k) {
    const ct_tensor_spec *t = init_tensor(d, u, k);
    int head_unit = (int32_t)u == d->head_unit;
    if (t->ndim >= 2) {
        if (head_unit && (int32_t)k == d->head_tensor)
            return k == 0 ? CT_ROLE_EMBEDDING : CT_ROLE_HEAD; /* tensor 0: tied to the tokens' */
        return head_unit ? CT_ROLE_EMBEDDING : CT_ROLE_MATRIX;
    }
    const char *n = t->name ? t->name : "";
    return strstr(n, "ln") || strstr(n, "norm") ? CT_ROLE_NORM : CT_ROLE_BIAS;
}

int32_t groups_decays(const host_config *cfg, const ct_model_desc *d, uint32_t u, uint32_t k) {
    int32_t all = 0, emb = 1;
    config_get_bool(cfg, "optim", "decay_all", &all, NULL);
    if (config_get(cfg, "optim", "decay_embeddings"))
        config_get_bool(cfg, "optim", "decay_embeddings", &emb, NULL);
    if (all) return 1;
    if (!emb && groups_role(d, u, k) == CT_ROLE_EMBEDDING) return 0;
    return init_tensor(d, u, k)->decay != 0;
}

void groups_decay_mask(const host_config *cfg, const ct_model_desc *d, uint32_t u, uint8_t *out) {
    memset(out, 0, init_unit_numel(d, u));
    for (uint32_t k = 0; k < d->units[u].n_tensors; k++)
        memset(out + init_tensor_offset(d, u, k), groups_decays(cfg, d, u, k) ? 1 : 0,
               ct_tensor_numel(init_tensor(d, u, k)));
}

static double lr_mult_of(const host_config *cfg, int32_t role) {
    char key[40];
    double m = 1;
    snprintf(key, sizeof key, "lr_mult_%s", groups_role_names[role]);
    if (config_get(cfg, "optim", key)) config_get_float(cfg, "optim", key, &m, NULL);
    return m;
}

ct_optim_tensor *groups_tensors(const host_config *cfg, const ct_model_desc *d, uint32_t u,
                                const ct_shard *sh) {
    uint32_t n = d->units[u].n_tensors;
    ct_optim_tensor *t = calloc(n ? n : 1, sizeof *t);
    if (!t) return NULL;
    double wd = 0;
    config_get_float(cfg, "optim", "weight_decay", &wd, NULL);
    for (uint32_t k = 0; k < n; k++) {
        const ct_tensor_spec *s = init_tensor(d, u, k);
        uint64_t lo = init_tensor_offset(d, u, k), hi = lo + ct_tensor_numel(s);
        uint64_t a = lo > sh->offset ? lo : sh->offset;
        uint64_t b = hi < sh->offset + sh->numel ? hi : sh->offset + sh->numel;
        t[k].struct_size = sizeof t[k];
        t[k].name = s->name;
        t[k].ndim = s->ndim;
        memcpy(t[k].shape, s->shape, sizeof t[k].shape);
        t[k].unit_offset = lo;
        if (b > a) {
            t[k].part_begin = a - lo;
            t[k].part_numel = b - a;
            t[k].shard_offset = a - sh->offset;
        }
        t[k].role = groups_role(d, u, k);
        t[k].weight_decay = groups_decays(cfg, d, u, k) ? (float)wd : 0.0f;
        t[k].lr_mult = (float)lr_mult_of(cfg, t[k].role);
    }
    return t;
}

void groups_print(const host_config *cfg, const ct_model_desc *d, FILE *out) {
    double wd = 0;
    config_get_float(cfg, "optim", "weight_decay", &wd, NULL);
    for (int32_t role = 0; role < 5; role++) {
        uint64_t tensors = 0, params = 0, decayed = 0;
        const char *example = NULL;
        for (uint32_t u = 0; u < d->n_units; u++)
            for (uint32_t k = 0; k < d->units[u].n_tensors; k++) {
                if (groups_role(d, u, k) != role) continue;
                const ct_tensor_spec *t = init_tensor(d, u, k);
                tensors++;
                params += ct_tensor_numel(t);
                decayed += groups_decays(cfg, d, u, k) != 0;
                if (!example) example = t->name;
            }
        if (!tensors) continue;
        fprintf(out, "group %-9s %3llu tensors %10llu params  weight_decay %s  lr x %g  (e.g. %s)\n",
                groups_role_names[role], (unsigned long long)tensors, (unsigned long long)params,
                decayed == tensors ? (wd > 0 ? "yes" : "0") : decayed ? "some" : "none",
                lr_mult_of(cfg, role), example ? example : "?");
    }
}
