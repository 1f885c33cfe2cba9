/* check_model.c — check-plugin's checks of a model, driven stage by stage as step.c drives it
 * (forward on stages 0..S-1, backward on S-1..0, each stage handed its unit's parameters), in
 * f32 on device cpu: describe() is consistent (stage units in range, every unit used, the head
 * tensor (V, C)); forward gives finite logits; backward ADDS into the gradient buffers; and
 * every parameter tensor's gradient (up to 7 elements each: first, last, 5 spread) equals
 * central finite differences of J = sum_{n,v} logits[n,v] * R[n,v] for a fixed random R (so
 * dJ/dlogits = R), J summed in double. Parameters are set so every path carries a gradient of
 * order one (matrices U(-0.5, 0.5), ones-initialised gains 1 +- 0.2, zero-initialised biases
 * +- 0.2), as tests/unit/test_gpt.c does. Tolerance |g - fd| <= 2e-3 + 1e-2 |fd| (f32 forward
 * noise ~1e-5 / eps, truncation ~eps^2), eps 1e-2.
 *
 * The model's keys come from --set; keys named n_layer, n_head, d_model, vocab_size, seq_len
 * that the plugin declares and --set does not name get tiny values (2, 2, 8, 11, 8).
 * Not for: bf16 compute (not checked yet; see the note it prints) or speed.
 * Shape legend: B batch, T time, N = B*T rows, V vocabulary.
 */
#include "check/check.h"

#include "plugin/calls.h"
#include "base/init.h"

#include <ctrain/numerics.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MB = 2, MT = 5, MAXU = 64, PER_TENSOR = 7, CYCLES = 10 };

#define FD_EPS  1e-2f
#define FD_ATOL 2e-3
#define FD_RTOL 1e-2

static const char *const tiny_keys[][2] = {
    {"n_layer", "2"}, {"n_head", "2"}, {"d_model", "8"}, {"vocab_size", "11"}, {"seq_len", "8"},
};

typedef struct model_rig {
    host_check              *c;
    host_config             *cfg;
    check_instance         dev_inst, model;
    ct_device_ref          dev;
    const ct_model_vtable *vt;
    ct_model_desc          d;
    int64_t                T, N, V;
    uint64_t               numel[MAXU];   /* init_unit_numel */
    float                 *h_params[MAXU], *h_grads[MAXU];   /* host copies */
    float                 *params[MAXU], *grads[MAXU];       /* device memory */
    int32_t               *tokens;                           /* device (B,T) */
    float                 *logits, *dlogits;                 /* device (N,V) */
    float                 *h_logits;                         /* host (N,V) */
    double                *R;                                /* host (N,V) */
} model_rig;

static int has_key(const host_plugin *p, const char *key) {
    for (int32_t i = 0; i < p->n_params; i++)
        if (!strcmp(p->params[i].key, key)) return 1;
    return 0;
}

static int set_names(const host_check *c, const char *key) {
    size_t n = strlen(key);
    for (int32_t i = 0; i < c->n_sets; i++)
        if (!strncmp(c->sets[i], key, n) && c->sets[i][n] == '=') return 1;
    return 0;
}

/* All stages forward with the host parameters; *J = sum logits * R in double. */
static int32_t forward(model_rig *r, double *J, ct_error *err) {
    const ct_device_vtable *dv = r->dev.vt;
    int32_t rc = CT_OK;
    for (uint32_t u = 0; u < r->d.n_units && rc == CT_OK; u++)
        rc = dv->copy(r->dev.self, r->params[u], r->h_params[u], r->numel[u] * sizeof(float),
                      CT_COPY_H2D, err);
    for (uint32_t s = 0; s < r->d.n_stages && rc == CT_OK; s++) {
        int32_t u = r->d.stages[s].unit;
        ct_stage_args a = {.struct_size = sizeof a, .stage = (int32_t)s, .params = r->params[u],
                           .param_dtype = CT_DTYPE_F32, .grad_dtype = CT_DTYPE_F32,
                           .tokens = r->tokens, .logits = r->logits, .dlogits = r->dlogits};
        rc = CALLS(r->c->plugin, "forward", r->vt->forward(r->model.self, &a, err));
    }
    if (rc == CT_OK)
        rc = dv->copy(r->dev.self, r->h_logits, r->logits, (uint64_t)(r->N * r->V) * sizeof(float),
                      CT_COPY_D2H, err);
    if (rc != CT_OK) return rc;
    double j = 0;
    for (int64_t i = 0; i < r->N * r->V; i++) j += (double)r->h_logits[i] * r->R[i];
    *J = j;
    return CT_OK;
}

/* All stages backward with dlogits = R, the gradient buffers pre-filled with `prefill_seed`'s
 * pattern (0: zeros); results into h_grads. */
static int32_t backward(model_rig *r, uint64_t prefill_seed, ct_error *err) {
    const ct_device_vtable *dv = r->dev.vt;
    int32_t rc = CT_OK;
    for (uint32_t u = 0; u < r->d.n_units && rc == CT_OK; u++) {
        for (uint64_t i = 0; i < r->numel[u]; i++)
            r->h_grads[u][i] = prefill_seed ? (float)(0.37 * check_urand(prefill_seed + u, i)) : 0;
        rc = dv->copy(r->dev.self, r->grads[u], r->h_grads[u], r->numel[u] * sizeof(float),
                      CT_COPY_H2D, err);
    }
    for (int32_t s = (int32_t)r->d.n_stages - 1; s >= 0 && rc == CT_OK; s--) {
        int32_t u = r->d.stages[s].unit;
        ct_stage_args a = {.struct_size = sizeof a, .stage = s, .params = r->params[u],
                           .grads = r->grads[u], .param_dtype = CT_DTYPE_F32,
                           .grad_dtype = CT_DTYPE_F32, .tokens = r->tokens, .logits = r->logits,
                           .dlogits = r->dlogits};
        rc = CALLS(r->c->plugin, "backward", r->vt->backward(r->model.self, &a, err));
    }
    for (uint32_t u = 0; u < r->d.n_units && rc == CT_OK; u++)
        rc = dv->copy(r->dev.self, r->h_grads[u], r->grads[u], r->numel[u] * sizeof(float),
                      CT_COPY_D2H, err);
    return rc;
}

/* describe()'s figures hang together; a message into why otherwise. */
static int describe_ok(const ct_model_desc *d, char *why, size_t cap) {
    if (d->n_units < 1 || d->n_units > MAXU || d->n_stages < 1 || !d->units || !d->stages)
        return snprintf(why, cap, "%u units, %u stages (expected 1..%d units, >= 1 stage)",
                        d->n_units, d->n_stages, MAXU), 0;
    if (d->vocab_size < 1 || d->max_seq_len < 1 || d->d_model < 1)
        return snprintf(why, cap, "vocab_size %lld, max_seq_len %lld, d_model %lld (expected "
                        ">= 1 each)", (long long)d->vocab_size, (long long)d->max_seq_len,
                        (long long)d->d_model), 0;
    for (uint32_t s = 0; s < d->n_stages; s++)
        if (d->stages[s].unit < 0 || (uint32_t)d->stages[s].unit >= d->n_units)
            return snprintf(why, cap, "stage %u uses unit %d of %u", s, d->stages[s].unit,
                            d->n_units), 0;
    uint64_t total = 0;
    for (uint32_t u = 0; u < d->n_units; u++) {
        int used = 0;
        for (uint32_t s = 0; s < d->n_stages; s++) used |= d->stages[s].unit == (int32_t)u;
        if (!used) return snprintf(why, cap, "unit %u (%s) is used by no stage", u,
                                   d->units[u].name ? d->units[u].name : "?"), 0;
        for (uint32_t k = 0; k < d->units[u].n_tensors; k++) {
            const ct_tensor_spec *t = init_tensor(d, u, k);
            int shape_ok = t->ndim >= 1 && t->ndim <= 4;
            for (int32_t j = 0; shape_ok && j < t->ndim; j++) shape_ok = t->shape[j] >= 1;
            if (!shape_ok) return snprintf(why, cap, "tensor %s has ndim %d or a dimension < 1",
                                           t->name ? t->name : "?", t->ndim), 0;
            total += ct_tensor_numel(t);
        }
    }
    if (d->head_unit < 0 || (uint32_t)d->head_unit >= d->n_units || d->head_tensor < 0 ||
        (uint32_t)d->head_tensor >= d->units[d->head_unit].n_tensors)
        return snprintf(why, cap, "head tensor %d of unit %d does not exist", d->head_tensor,
                        d->head_unit), 0;
    const ct_tensor_spec *h = init_tensor(d, (uint32_t)d->head_unit, (uint32_t)d->head_tensor);
    if (h->ndim != 2 || h->shape[0] != d->vocab_size || h->shape[1] != d->d_model)
        return snprintf(why, cap, "head tensor %s is not (V, C) = (%lld, %lld)",
                        h->name ? h->name : "?", (long long)d->vocab_size,
                        (long long)d->d_model), 0;
    if (d->n_params < 1 || d->n_params > total)
        return snprintf(why, cap, "n_params %llu: expected 1..%llu (the tensors' elements)",
                        (unsigned long long)d->n_params, (unsigned long long)total), 0;
    snprintf(why, cap, "%u units, %u stages, %llu parameters, head %s (%lld, %lld)", d->n_units,
             d->n_stages, (unsigned long long)d->n_params, h->name ? h->name : "?",
             (long long)d->vocab_size, (long long)d->d_model);
    return 1;
}

static int32_t rig_open(model_rig *r, host_check *c, ct_error *err, char *why, size_t cap) {
    memset(r, 0, sizeof *r);
    r->c = c;
    char ini[512] = "[device]\nthreads = 1\n[model]\n", tiny[160] = "";
    for (size_t i = 0; i < sizeof tiny_keys / sizeof *tiny_keys; i++) {
        if (!has_key(c->plugin, tiny_keys[i][0]) || set_names(c, tiny_keys[i][0])) continue;
        size_t n = strlen(ini), m = strlen(tiny);
        snprintf(ini + n, sizeof ini - n, "%s = %s\n", tiny_keys[i][0], tiny_keys[i][1]);
        snprintf(tiny + m, sizeof tiny - m, "%s%s %s", m ? ", " : "", tiny_keys[i][0],
                 tiny_keys[i][1]);
    }
    if (*tiny) check_note(c, "tiny shape: %s (--set overrides)", tiny);
    static const char *const skip[] = {"plugin", NULL};
    int32_t rc = check_config(c, ini, "model", skip, &r->cfg, err);
    if (rc == CT_OK) rc = check_device_section(c, r->cfg, err);
    if (rc == CT_OK) rc = check_device_open(c, r->cfg, 0, &r->dev_inst, &r->dev, err);
    ct_comm_ref no_comm = {0};
    if (rc == CT_OK)
        rc = check_create(&r->model, c->plugin, r->cfg, "model", 0, 1, r->dev, no_comm, NULL, err);
    if (rc != CT_OK) return snprintf(why, cap, "create"), rc;
    r->vt = c->plugin->vtable;
    r->d.struct_size = sizeof r->d;
    if ((rc = CALLS(r->c->plugin, "describe", r->vt->describe(r->model.self, &r->d, err))) !=
        CT_OK)
        return snprintf(why, cap, "describe()"), rc;
    if (r->d.tensor_struct_size == 0) r->d.tensor_struct_size = sizeof(ct_tensor_spec);
    char dwhy[300];
    int dok = describe_ok(&r->d, dwhy, sizeof dwhy);
    check_verdict(c, dok, "describe() is consistent: %s", dwhy);
    if (!dok) return snprintf(why, cap, "describe()"), ct_error_set(err, CT_ERR_INVALID, "%s", dwhy);
    r->T = r->d.max_seq_len < MT ? r->d.max_seq_len : MT;
    r->N = MB * r->T;
    r->V = r->d.vocab_size;
    if ((rc = CALLS(r->c->plugin, "prepare",
                    r->vt->prepare(r->model.self, MB, r->T, CT_DTYPE_F32, err))) != CT_OK)
        return snprintf(why, cap, "prepare(B %d, T %lld, f32)", MB, (long long)r->T), rc;
    const ct_device_vtable *dv = r->dev.vt;
    uint64_t nv = (uint64_t)(r->N * r->V);
    r->tokens = dv->alloc(r->dev.self, (uint64_t)r->N * sizeof(int32_t), err);
    r->logits = dv->alloc(r->dev.self, nv * sizeof(float), err);
    r->dlogits = dv->alloc(r->dev.self, nv * sizeof(float), err);
    r->h_logits = malloc(nv * sizeof(float));
    r->R = malloc(nv * sizeof(double));
    float *hR = malloc(nv * sizeof(float));
    int32_t *ht = malloc((size_t)r->N * sizeof(int32_t));
    if (!r->tokens || !r->logits || !r->dlogits || !r->h_logits || !r->R || !hR || !ht) {
        free(hR);
        free(ht);
        return snprintf(why, cap, "buffers"), ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < nv; i++) r->R[i] = check_urand(99, i), hR[i] = (float)r->R[i];
    for (int64_t n = 0; n < r->N; n++) ht[n] = (int32_t)(ct_hash64(7, (uint64_t)n) % (uint64_t)r->V);
    if (r->N > 3) ht[3] = ht[0]; /* a repeated token: its embedding gradient sums two rows */
    rc = dv->copy(r->dev.self, r->tokens, ht, (uint64_t)r->N * sizeof(int32_t), CT_COPY_H2D, err);
    if (rc == CT_OK) rc = dv->copy(r->dev.self, r->dlogits, hR, nv * sizeof(float), CT_COPY_H2D, err);
    free(hR);
    free(ht);
    if (rc != CT_OK) return snprintf(why, cap, "copies"), rc;
    for (uint32_t u = 0; u < r->d.n_units; u++) {
        r->numel[u] = init_unit_numel(&r->d, u);
        r->h_params[u] = calloc(r->numel[u], sizeof(float));
        r->h_grads[u] = calloc(r->numel[u], sizeof(float));
        r->params[u] = dv->alloc(r->dev.self, r->numel[u] * sizeof(float), err);
        r->grads[u] = dv->alloc(r->dev.self, r->numel[u] * sizeof(float), err);
        if (!r->h_params[u] || !r->h_grads[u] || !r->params[u] || !r->grads[u])
            return snprintf(why, cap, "parameter buffers"),
                   ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        for (uint32_t k = 0; k < r->d.units[u].n_tensors; k++) {
            const ct_tensor_spec *t = init_tensor(&r->d, u, k);
            uint64_t off = init_tensor_offset(&r->d, u, k), n = ct_tensor_numel(t);
            for (uint64_t i = 0; i < n; i++) {
                double x = check_urand(1000 * u + k, i);
                r->h_params[u][off + i] = (float)(t->init == CT_INIT_ONES    ? 1.0 + 0.2 * x
                                                  : t->init == CT_INIT_ZEROS ? 0.2 * x
                                                                             : 0.5 * x);
            }
        }
    }
    return CT_OK;
}

static void rig_close(model_rig *r) {
    if (r->dev.vt) {
        for (uint32_t u = 0; u < MAXU; u++) {
            r->dev.vt->free_mem(r->dev.self, r->params[u]);
            r->dev.vt->free_mem(r->dev.self, r->grads[u]);
        }
        r->dev.vt->free_mem(r->dev.self, r->tokens);
        r->dev.vt->free_mem(r->dev.self, r->logits);
        r->dev.vt->free_mem(r->dev.self, r->dlogits);
    }
    for (uint32_t u = 0; u < MAXU; u++) free(r->h_params[u]), free(r->h_grads[u]);
    free(r->h_logits);
    free(r->R);
    check_destroy(&r->model);
    check_destroy(&r->dev_inst);
    if (r->cfg) config_free(r->cfg);
}

/* Every tensor's sampled elements against central differences of J. */
static void check_gradients(model_rig *r, float *const *g) {
    host_check *c = r->c;
    ct_error err = {.struct_size = sizeof err};
    int checked = 0, tensors = 0;
    double worst = 0, w_g = 0, w_fd = 0, w_tol = 0;
    const char *w_name = "";
    uint64_t w_i = 0;
    for (uint32_t u = 0; u < r->d.n_units; u++) {
        for (uint32_t k = 0; k < r->d.units[u].n_tensors; k++, tensors++) {
            const ct_tensor_spec *t = init_tensor(&r->d, u, k);
            uint64_t off = init_tensor_offset(&r->d, u, k), n = ct_tensor_numel(t);
            for (int j = 0; j < PER_TENSOR && (uint64_t)j < n; j++) {
                uint64_t i = j == 0 ? 0 : j == PER_TENSOR - 1 ? n - 1
                                                              : ct_hash64(u * 100 + k, (uint64_t)j) % n;
                float *p = &r->h_params[u][off + i];
                const float keep = *p;
                double jp = NAN, jm = NAN;
                *p = keep + FD_EPS;
                const double xp = *p;
                int32_t rc = forward(r, &jp, &err);
                *p = keep - FD_EPS;
                const double xm = *p;
                if (rc == CT_OK) rc = forward(r, &jm, &err);
                *p = keep;
                if (rc != CT_OK) {
                    check_verdict(c, 0, "gradients against central differences: forward failed: "
                                  "%s", err.message);
                    return;
                }
                double fd = (jp - jm) / (xp - xm), gi = g[u][off + i];
                double tol = FD_ATOL + FD_RTOL * fabs(fd), ratio = fabs(gi - fd) / tol;
                if (!(ratio <= worst)) {
                    worst = isfinite(ratio) ? ratio : INFINITY;
                    w_g = gi, w_fd = fd, w_tol = tol, w_name = t->name ? t->name : "?", w_i = i;
                }
                checked++;
            }
        }
    }
    check_verdict(c, worst <= 1, "gradients of all %d parameter tensors match central differences "
                  "(%d elements, worst %.2g of tol; tol %.0e + %.0e |fd|; worst %s[%llu]: "
                  "expected %.6g got %.6g tol %.2g)", tensors, checked, worst, FD_ATOL, FD_RTOL,
                  w_name, (unsigned long long)w_i, w_fd, w_g, w_tol);
}

/* hidden_rows (ABI 1.4, optional) after the forward above: its rows average to mean_hidden's
 * vector (when the plugin has both), and rows past N are refused without a write. */
static void check_hidden_rows(host_check *c, model_rig *r) {
    if (!r->vt->hidden_rows) {
        check_note(c, "no hidden_rows (optional, ABI 1.4): what-if falls back to prefixes");
        return;
    }
    ct_error err = {.struct_size = sizeof err};
    int64_t C = r->d.d_model;
    float *h = malloc((size_t)(r->N * C + 1) * sizeof *h), *m = malloc((size_t)C * sizeof *m);
    if (!h || !m) {
        check_verdict(c, 0, "hidden_rows: out of memory");
        goto out;
    }
    int32_t rc = CALLS(r->c->plugin, "hidden_rows",
                       r->vt->hidden_rows(r->model.self, 0, r->N, h, &err));
    if (rc != CT_OK) {
        check_verdict(c, 0, "hidden_rows of the %lld rows of the latest forward: %s",
                      (long long)r->N, err.message);
        goto out;
    }
    if (r->vt->mean_hidden &&
        CALLS(r->c->plugin, "mean_hidden", r->vt->mean_hidden(r->model.self, m, &err)) == CT_OK) {
        double worst = 0, big = 0;
        for (int64_t i = 0; i < r->N * C; i++) big = fmax(big, fabs(h[i]));
        for (int64_t j = 0; j < C; j++) {
            double s = 0;
            for (int64_t i = 0; i < r->N; i++) s += h[i * C + j];
            worst = fmax(worst, fabs(s / (double)r->N - m[j]));
        }
        check_verdict(c, worst <= 1e-6 * big + 1e-30, "hidden_rows' %lld rows average to "
                      "mean_hidden's vector (worst %.2g, tol 1e-6 of the largest |h| %.3g)",
                      (long long)r->N, worst, 1e-6 * big);
    }
    float sentinel = h[0] = 12345.0f;
    ct_error e2 = {.struct_size = sizeof e2};
    rc = CALLS(r->c->plugin, "hidden_rows", r->vt->hidden_rows(r->model.self, r->N, 1, h, &e2));
    check_verdict(c, rc == CT_ERR_INVALID && h[0] == sentinel, "hidden_rows refuses row %lld of "
                  "%lld rows without writing (status %d%s%s)", (long long)r->N, (long long)r->N,
                  (int)rc, e2.message[0] ? ": " : "", e2.message);
out:
    free(h);
    free(m);
}

void check_model(host_check *c) {
    model_rig r;
    ct_error err = {.struct_size = sizeof err};
    char why[128] = "";
    if (rig_open(&r, c, &err, why, sizeof why) != CT_OK) {
        check_verdict(c, 0, "%s: %s", why, err.message);
        goto out;
    }
    double J = 0;
    int32_t rc = forward(&r, &J, &err);
    if (rc != CT_OK) {
        check_verdict(c, 0, "forward (B %d, T %lld, f32): %s", MB, (long long)r.T, err.message);
        goto out;
    }
    int64_t bad = -1;
    for (int64_t i = 0; bad < 0 && i < r.N * r.V; i++)
        if (!isfinite(r.h_logits[i])) bad = i;
    int finite = bad < 0;
    if (finite)
        check_verdict(c, 1, "forward (B %d, T %lld, V %lld, f32) gives finite logits", MB,
                      (long long)r.T, (long long)r.V);
    else
        check_verdict(c, 0, "forward (B %d, T %lld, V %lld, f32) gives finite logits: row %lld "
                      "col %lld is %g", MB, (long long)r.T, (long long)r.V,
                      (long long)(bad / r.V), (long long)(bad % r.V), (double)r.h_logits[bad]);
    if (!finite) goto out;
    check_hidden_rows(c, &r);

    /* backward from zeroed buffers, then from a pre-filled pattern: the difference is the
     * pattern when backward adds */
    float *g0[MAXU] = {0};
    if ((rc = backward(&r, 0, &err)) != CT_OK) {
        check_verdict(c, 0, "backward: %s", err.message);
        goto out;
    }
    for (uint32_t u = 0; u < r.d.n_units; u++) {
        g0[u] = malloc(r.numel[u] * sizeof(float));
        if (g0[u]) memcpy(g0[u], r.h_grads[u], r.numel[u] * sizeof(float));
    }
    if ((rc = backward(&r, CHECK_SEED, &err)) != CT_OK) {
        check_verdict(c, 0, "backward into pre-filled gradients: %s", err.message);
        goto out_g0;
    }
    double ratio = 0, w_want = 0, w_got = 0, w_tol = 0;
    uint32_t w_u = 0;
    uint64_t w_i = 0;
    /* the order of the additions may differ: tol 1e-6 of the pattern plus 1e-5 of the unit's
     * largest gradient */
    for (uint32_t u = 0; u < r.d.n_units && g0[u]; u++) {
        double big = 0;
        for (uint64_t i = 0; i < r.numel[u]; i++) big = fmax(big, fabs(g0[u][i]));
        for (uint64_t i = 0; i < r.numel[u]; i++) {
            double pre = (float)(0.37 * check_urand(CHECK_SEED + u, i));
            double want = pre + g0[u][i], tol = 1e-6 * fabs(pre) + 1e-5 * big + 1e-30;
            double e = fabs(r.h_grads[u][i] - want) / tol;
            if (!(e <= ratio)) ratio = isnan(e) ? INFINITY : e, w_want = want, w_got = r.h_grads[u][i], w_tol = tol,
                               w_u = u, w_i = i;
        }
    }
    if (ratio <= 1)
        check_verdict(c, 1, "backward adds into the gradient buffers (a pre-filled pattern is "
                      "kept; tol 1e-6 of it + 1e-5 of the unit's largest gradient)");
    else
        check_verdict(c, 0, "backward adds into the gradient buffers: unit %u element %llu: "
                      "expected %.6g got %.6g tol %.2g", w_u, (unsigned long long)w_i, w_want,
                      w_got, w_tol);
    check_gradients(&r, g0);

    int i = 0;
    for (; i < CYCLES; i++) {
        check_instance inst;
        ct_comm_ref no_comm = {0};
        ct_model_desc d2 = {.struct_size = sizeof d2};
        rc = check_create(&inst, c->plugin, r.cfg, "model", 0, 1, r.dev, no_comm, NULL, &err);
        if (rc == CT_OK) rc = CALLS(c->plugin, "describe", r.vt->describe(inst.self, &d2, &err));
        if (rc == CT_OK)
            rc = CALLS(c->plugin, "prepare", r.vt->prepare(inst.self, MB, r.T, CT_DTYPE_F32, &err));
        check_destroy(&inst);
        if (rc != CT_OK) break;
    }
    check_verdict(c, i == CYCLES, "create, describe, prepare, destroy %d times%s%s", CYCLES,
                  i == CYCLES ? "" : ": ", i == CYCLES ? "" : err.message);
    check_note(c, "not checked yet: bf16 compute and gradients, a second prepare "
               "with another shape");
out_g0:
    for (uint32_t u = 0; u < MAXU; u++) free(g0[u]);
out:
    rig_close(&r);
}
