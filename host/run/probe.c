/* probe.c — the reduction-error probe (see probe.h).
 *
 * For sampled local values x_r (rank r, as held in the gradient buffer) the exact reduced value
 * is e = (1/N) * sum_r x_r in f64; the policy's value is
 *     p = post( reduce_sum( round_reduce_dtype( x_r / f ) ) ),   post(y) = y / (N / f),
 * with f FSDP1's pre-divide factor, round_reduce_dtype the cast to the policy's reduce dtype and
 * reduce_sum the precision plugin's hook if it has one, else the comm's SUM in that dtype.
 *   rel_err = ||p - e|| / ||e||          bias = sum(p - e) / sum|e|   (signed)
 * Head: E = p - e over the whole head weight (V, C); ebar_c = mean_v E[v, c]; with hbar the
 * mean final hidden state over all ranks' rows, an SGD step of rate 1 moves the batch-mean
 * logit by -(ebar . hbar) because of the reduction error alone: logit_push (> 0: pushes up). */
#include "run/probe.h"

#include "base/init.h"
#include "run/optim.h"

#include <ctrain/numerics.h>
#include <ctrain/strategy_kit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Host copy, as f32, of n elements of a device buffer of dtype f32, bf16 or f16. */
static int32_t fetch_f32(host_rank *r, const void *src, int32_t dtype, uint64_t n, float *out,
                         ct_error *err) {
    if (dtype == CT_DTYPE_F32)
        return RANK_DEV(r, copy, out, src, n * sizeof(float), CT_COPY_D2H, err);
    uint16_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return ct_error_set(err, CT_ERR_NOMEM, "probe: out of memory");
    int32_t rc = RANK_DEV(r, copy, tmp, src, n * sizeof *tmp, CT_COPY_D2H, err);
    for (uint64_t i = 0; rc == CT_OK && i < n; i++)
        out[i] = dtype == CT_DTYPE_F16 ? ct_f16_to_f32(tmp[i]) : ct_bf16_to_f32(tmp[i]);
    free(tmp);
    return rc;
}

/* p (policy) and e (exact) for the n values x of this rank. */
static int32_t reduce_both(host_rank *r, const float *x, uint64_t n, double *p, double *e,
                           ct_error *err) {
    int32_t N = r->world, dt = r->policy.reduce_dtype;
    int32_t f = ct_skit_predivide_factor(N);
    double post = ct_skit_postdivide_factor(N);
    size_t es = ct_dtype_size(dt);
    void *host = malloc(n * es), *dev = RANK_DEV(r, alloc, n * es, err);
    int32_t rc = CT_OK;
    if (!host || !dev) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "probe: out of memory for %llu values",
                          (unsigned long long)n);
        goto out_free;
    }
    for (uint64_t i = 0; i < n; i++) {
        float v = x[i] / (float)f;
        if (dt == CT_DTYPE_BF16) ((uint16_t *)host)[i] = ct_bf16_from_f32(v);
        else if (dt == CT_DTYPE_F16) ((uint16_t *)host)[i] = ct_f16_from_f32(v);
        else ((float *)host)[i] = v;
        e[i] = x[i];
    }
    ct_skit_reducer red = {r->comm_ref, r->dev, r->precision.vt, r->precision.self};
    rc = RANK_DEV(r, copy, dev, host, n * es, CT_COPY_H2D, err);
    if (rc == CT_OK && N > 1) rc = ct_skit_all_reduce_sum(&red, dev, dev, n, dt, NULL, err);
    if (rc == CT_OK) rc = RANK_DEV(r, copy, host, dev, n * es, CT_COPY_D2H, err);
    if (rc == CT_OK) rc = optim_allreduce_f64(r, e, n, CT_REDUCE_SUM, err);
    for (uint64_t i = 0; rc == CT_OK && i < n; i++) {
        const uint16_t *h = host;
        double y = dt == CT_DTYPE_BF16   ? ct_bf16_to_f32(h[i])
                   : dt == CT_DTYPE_F16 ? ct_f16_to_f32(h[i])
                                        : ((float *)host)[i];
        p[i] = y / post;
        e[i] /= N;
    }
out_free:
    free(host);
    RANK_DEV_VOID(r, free_mem, dev);
    return rc;
}

static void report(host_rank *r, const char *unit, const char *what, double v) {
    char name[HOST_METRIC_NAME_MAX];
    snprintf(name, sizeof name, "probe/%s/%s", unit, what);
    metrics_add(&r->metrics, name, v, CT_METRIC_MEAN);
}

static void report_errors(host_rank *r, const char *unit, const double *p, const double *e,
                          uint64_t n) {
    double d2 = 0, e2 = 0, ds = 0, ea = 0;
    for (uint64_t i = 0; i < n; i++) {
        double d = p[i] - e[i];
        d2 += d * d;
        e2 += e[i] * e[i];
        ds += d;
        ea += fabs(e[i]);
    }
    report(r, unit, "rel_err", e2 > 0 ? sqrt(d2 / e2) : 0);
    report(r, unit, "bias", ea > 0 ? ds / ea : 0);
}

/* The head: the whole (V, C) weight gradient, and the logit push through hbar. */
static int32_t probe_head(host_rank *r, const float *grad, ct_error *err) {
    uint32_t u = (uint32_t)r->mdesc.head_unit, k = (uint32_t)r->mdesc.head_tensor;
    const ct_tensor_spec *t = init_tensor(&r->mdesc, u, k);
    uint64_t off = init_tensor_offset(&r->mdesc, u, k), n = ct_tensor_numel(t);
    int64_t V = t->shape[0], C = t->shape[1];
    double *p = malloc(n * sizeof *p), *e = malloc(n * sizeof *e);
    double *hbar = calloc((size_t)C, sizeof *hbar);
    float *h = calloc((size_t)C, sizeof *h);
    int32_t rc = CT_OK;
    if (!p || !e || !hbar || !h) rc = ct_error_set(err, CT_ERR_NOMEM, "probe: out of memory");
    if (rc == CT_OK) rc = reduce_both(r, grad + off, n, p, e, err);
    if (rc == CT_OK) rc = RANK_MODEL(r, mean_hidden, h, err);
    for (int64_t c = 0; rc == CT_OK && c < C; c++) hbar[c] = h[c] / r->world;
    if (rc == CT_OK) rc = optim_allreduce_f64(r, hbar, (uint64_t)C, CT_REDUCE_SUM, err);
    if (rc == CT_OK) {
        report_errors(r, "head", p, e, n);
        double push = 0;
        for (int64_t c = 0; c < C; c++) {
            double ebar = 0;
            for (int64_t v = 0; v < V; v++) ebar += p[v * C + c] - e[v * C + c];
            push -= ebar / (double)V * hbar[c];
        }
        report(r, "head", "logit_push", push);
    }
    free(p);
    free(e);
    free(hbar);
    free(h);
    return rc;
}

int32_t probe_unit(host_rank *r, uint32_t u, ct_error *err) {
    int64_t sample = 4096;
    config_get_int(r->cfg, "run", "probe_sample", &sample, NULL);
    void *g = NULL;
    int32_t rc = RANK_STRATEGY(r, grad_buffer, u, &g, err);
    if (rc != CT_OK) return rc;
    uint64_t n = r->units[u].numel;
    float *x = malloc(n * sizeof *x);
    uint64_t K = (uint64_t)sample < n ? (uint64_t)sample : n;
    double *p = malloc(K * sizeof *p), *e = malloc(K * sizeof *e);
    float *xs = malloc(K * sizeof *xs);
    if (!x || !p || !e || !xs) rc = ct_error_set(err, CT_ERR_NOMEM, "probe: out of memory");
    if (rc == CT_OK) rc = fetch_f32(r, g, r->policy.grad_accum_dtype, n, x, err);
    /* K values spread evenly over the unit */
    for (uint64_t k = 0; rc == CT_OK && k < K; k++) xs[k] = x[k * n / K];
    if (rc == CT_OK) rc = reduce_both(r, xs, K, p, e, err);
    if (rc == CT_OK) report_errors(r, r->mdesc.units[u].name, p, e, K);
    const ct_model_vtable *mv = r->model.vt;
    if (rc == CT_OK && (int32_t)u == r->mdesc.head_unit && mv->mean_hidden)
        rc = probe_head(r, x, err);
    free(x);
    free(p);
    free(e);
    free(xs);
    return rc;
}
