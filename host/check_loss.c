/* check_loss.c — check-plugin's checks of a loss term, called exactly as step.c calls it: the
 * logits, targets and row statistics in device memory of device cpu, the row max and
 * log-sum-exp computed once by the device plugin's row_stats, n_counted the rows with a target
 * >= 0, and the term ADDING d(value)/d(logits) * grad_scale into a shared dlogits buffer.
 * Claims: the value is finite; the gradient added equals central finite differences (in double)
 * of the returned value, with grad_scale 1 and 0.25 and with some targets ignored; the term adds
 * rather than overwrites; dlogits == NULL (evaluation) gives the same value; a batch with every
 * target ignored stays finite; forward_backward_rows (ABI 1.3, when provided) on row ranges
 * gives the whole batch's value and gradient; 50 create/destroy cycles neither crash nor grow
 * the heap.
 * Not for: CUDA batches (the checks run on device cpu).
 * Shape legend: N rows (B*T positions), V vocabulary.
 */
#include "check_plugin.h"

#include <ctrain/numerics.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { LB = 2, LT = 4, LN = LB * LT, LV = 13, NV = LN * LV, CYCLES = 50 };

#define FD_EPS    1e-2 /* central-difference step on each logit */
#define FD_TOL    1e-3 /* max |g - fd| / max |fd| */
#define HEAP_SLACK 1024 /* bytes the heap may grow over CYCLES create/destroy cycles */

typedef struct loss_rig {
    host_check              *c;
    host_config             *cfg;
    char                   section[80]; /* "loss.<name>" */
    check_instance         dev_inst, loss;
    ct_device_ref          dev;
    const ct_loss_vtable  *vt;
    float                 *logits, *dlogits, *row_max, *row_lse; /* device memory */
    int32_t               *targets;                              /* device memory */
    float                  h_logits[NV];
    int32_t                h_targets[LN];
} loss_rig;

static int64_t count_targets(const int32_t *t) {
    int64_t n = 0;
    for (int i = 0; i < LN; i++) n += t[i] >= 0;
    return n;
}

/* One micro-batch as step.c runs it: logits and targets to the device, row stats, dlogits
 * pre-filled with `prefill` (host, NV floats; NULL: evaluation, dlogits NULL), the term (one
 * forward_backward when `ranges` is 0, else forward_backward_rows on ranges of `ranges` rows,
 * in order, *value their sum), the resulting dlogits back into `out` (when non-NULL). */
static int32_t run_ranges(loss_rig *r, const float *logits, const float *prefill,
                          double grad_scale, int64_t ranges, double *value, float *out,
                          ct_error *err) {
    const ct_device_vtable *d = r->dev.vt;
    int32_t rc = d->copy(r->dev.self, r->logits, logits, sizeof(float) * NV, CT_COPY_H2D, err);
    if (rc == CT_OK)
        rc = d->copy(r->dev.self, r->targets, r->h_targets, sizeof(int32_t) * LN, CT_COPY_H2D,
                     err);
    if (rc == CT_OK) rc = d->row_stats(r->dev.self, r->logits, LN, LV, r->row_max, r->row_lse,
                                       NULL, err);
    if (rc == CT_OK && prefill)
        rc = d->copy(r->dev.self, r->dlogits, prefill, sizeof(float) * NV, CT_COPY_H2D, err);
    if (rc != CT_OK) return rc;
    ct_loss_batch b = {
        .struct_size = sizeof b,
        .logits = r->logits,
        .targets = r->targets,
        .row_max = r->row_max,
        .row_lse = r->row_lse,
        .n_rows = LN,
        .vocab = LV,
        .n_counted = count_targets(r->h_targets),
        .dlogits = prefill ? r->dlogits : NULL,
        .grad_scale = grad_scale,
        .device = r->dev,
        .batch_rows = LN,
    };
    ct_loss_result res = {.struct_size = sizeof res};
    err->code = CT_OK;
    if (!ranges) {
        rc = r->vt->forward_backward(r->loss.self, &b, &res, err);
        *value = res.value;
    } else {
        *value = 0;
        for (int64_t r0 = 0; rc == CT_OK && r0 < LN; r0 += ranges) {
            ct_loss_batch rb = b;
            rb.n_rows = LN - r0 < ranges ? LN - r0 : ranges;
            rb.row_begin = r0;
            rb.logits += r0 * LV, rb.targets += r0, rb.row_max += r0, rb.row_lse += r0;
            if (rb.dlogits) rb.dlogits += r0 * LV;
            rc = r->vt->forward_backward_rows(r->loss.self, &rb, &res, err);
            *value += res.value;
        }
    }
    if (rc != CT_OK) return rc;
    if (out && prefill)
        rc = d->copy(r->dev.self, out, r->dlogits, sizeof(float) * NV, CT_COPY_D2H, err);
    return rc;
}

static int32_t run_term(loss_rig *r, const float *logits, const float *prefill, double grad_scale,
                        double *value, float *out, ct_error *err) {
    return run_ranges(r, logits, prefill, grad_scale, 0, value, out, err);
}

/* ABI 1.3: forward_backward_rows on ranges of 3 rows (not dividing LN = 8) gives the whole
 * call's value (the ranges' values summed; rel tol 1e-12: a sum in another order) and the same
 * gradient (rel tol 1e-6 of the gradient's largest element: each row's arithmetic is the
 * term's own business, the built-ins give it bit for bit). */
static void check_ranges(loss_rig *r, double v_whole, const float *g_whole) {
    host_check *c = r->c;
    if (!r->vt->forward_backward_rows) {
        check_note(c, "row ranges: not provided (forward_backward_rows NULL): the host gives "
                   "every term whole micro-batches, so the (N,V) logits exist at once");
        return;
    }
    float zero[NV], out[NV];
    memset(zero, 0, sizeof zero);
    double v = NAN;
    ct_error err = {.struct_size = sizeof err};
    if (run_ranges(r, r->h_logits, zero, 1.0, 3, &v, out, &err) != CT_OK) {
        check_verdict(c, 0, "row ranges of 3 rows: forward_backward_rows failed: %s", err.message);
        return;
    }
    check_verdict(c, fabs(v - v_whole) <= 1e-12 * fabs(v_whole) + 1e-300,
                  "row ranges of 3 rows: the ranges' values add up to the whole batch's: "
                  "expected %.17g got %.17g rel tol 1e-12", v_whole, v);
    double gmax = 0, worst = 0;
    int at = 0;
    for (int k = 0; k < NV; k++) gmax = fmax(gmax, fabs((double)g_whole[k]));
    for (int k = 0; k < NV; k++) {
        double e = fabs((double)out[k] - (double)g_whole[k]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e, at = k;
    }
    check_verdict(c, worst <= 1e-6 * gmax, "row ranges of 3 rows: the same gradient as the whole "
                  "batch (row %d col %d: expected %.9g got %.9g tol %.2g)", at / LV, at % LV,
                  (double)g_whole[at], (double)out[at], 1e-6 * gmax);
}

static int32_t rig_open(loss_rig *r, host_check *c, ct_error *err) {
    memset(r, 0, sizeof *r);
    r->c = c;
    snprintf(r->section, sizeof r->section, "loss.%s", c->plugin->desc.name);
    int32_t rc = check_config(c, "[device]\nthreads = 1\n", r->section, NULL, &r->cfg, err);
    if (rc == CT_OK) rc = check_device_section(c, r->cfg, err);
    if (rc == CT_OK) rc = check_device_open(c, r->cfg, 0, &r->dev_inst, &r->dev, err);
    if (rc != CT_OK) return rc;
    const ct_device_vtable *d = r->dev.vt;
    r->logits = d->alloc(r->dev.self, sizeof(float) * NV, err);
    r->dlogits = d->alloc(r->dev.self, sizeof(float) * NV, err);
    r->row_max = d->alloc(r->dev.self, sizeof(float) * LN, err);
    r->row_lse = d->alloc(r->dev.self, sizeof(float) * LN, err);
    r->targets = d->alloc(r->dev.self, sizeof(int32_t) * LN, err);
    if (!r->logits || !r->dlogits || !r->row_max || !r->row_lse || !r->targets)
        return err->code ? err->code : CT_ERR_NOMEM;
    /* logits ~ U(-3, 3); targets uniform, two rows ignored (-1 and -100: any negative) */
    for (int i = 0; i < NV; i++) r->h_logits[i] = (float)(3.0 * check_urand(CHECK_SEED, (uint64_t)i));
    for (int i = 0; i < LN; i++)
        r->h_targets[i] = (int32_t)(ct_hash64(CHECK_SEED + 1, (uint64_t)i) % LV);
    r->h_targets[2] = -1;
    r->h_targets[5] = -100;
    ct_comm_ref no_comm = {0};
    r->vt = c->plugin->vtable;
    return check_create(&r->loss, c->plugin, r->cfg, r->section, 0, 1, r->dev, no_comm, NULL, err);
}

static void rig_close(loss_rig *r) {
    check_destroy(&r->loss);
    if (r->dev.vt) {
        void *bufs[] = {r->logits, r->dlogits, r->row_max, r->row_lse, r->targets};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) r->dev.vt->free_mem(r->dev.self, bufs[i]);
    }
    check_destroy(&r->dev_inst);
    if (r->cfg) config_free(r->cfg);
}

/* fd[k] = central difference of the returned value in logit k (double; the step actually taken
 * after rounding the perturbed logit to f32). */
static int32_t finite_differences(loss_rig *r, double *fd, ct_error *err) {
    float z[NV], scratch[NV];
    memcpy(z, r->h_logits, sizeof z);
    memset(scratch, 0, sizeof scratch);
    for (int k = 0; k < NV; k++) {
        const float keep = z[k];
        double vp, vm;
        z[k] = (float)(keep + FD_EPS);
        const double zp = z[k];
        int32_t rc = run_term(r, z, scratch, 1.0, &vp, NULL, err);
        z[k] = (float)(keep - FD_EPS);
        const double zm = z[k];
        if (rc == CT_OK) rc = run_term(r, z, scratch, 1.0, &vm, NULL, err);
        z[k] = keep;
        if (rc != CT_OK) return rc;
        fd[k] = (vp - vm) / (zp - zm);
    }
    return CT_OK;
}

/* max |(out - prefill) - scale * fd| / max |scale * fd|; *where the worst element. */
static double grad_error(const float *out, const float *prefill, const double *fd, double scale,
                         int *where) {
    double worst = 0, big = 0;
    *where = 0;
    for (int k = 0; k < NV; k++) {
        double e = fabs(((double)out[k] - (double)prefill[k]) - scale * fd[k]);
        if (!isfinite(e)) return *where = k, INFINITY; /* a NaN gradient or value */
        if (e > worst) worst = e, *where = k;
        if (fabs(scale * fd[k]) > big) big = fabs(scale * fd[k]);
    }
    return big > 0 ? worst / big : worst;
}

static size_t heap_in_use(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* CYCLES times: create, one forward_backward, destroy; the heap must come back. */
static void check_cycles(loss_rig *r) {
    host_check *c = r->c;
    ct_comm_ref no_comm = {0};
    float pre[NV], out[NV];
    memset(pre, 0, sizeof pre);
    size_t before = 0;
    for (int i = 0; i <= CYCLES; i++) {
        ct_error err = {.struct_size = sizeof err};
        check_instance inst;
        double v;
        if (i == 1) before = heap_in_use(); /* after one warm-up cycle */
        int32_t rc = check_create(&inst, c->plugin, r->cfg, r->section, 0, 1, r->dev, no_comm,
                                  NULL, &err);
        if (rc == CT_OK) {
            void *keep = r->loss.self;
            r->loss.self = inst.self;
            rc = run_term(r, r->h_logits, pre, 1.0, &v, out, &err);
            r->loss.self = keep;
            check_destroy(&inst);
        }
        if (rc != CT_OK) {
            check_verdict(c, 0, "create, forward_backward, destroy %d times: cycle %d failed: %s",
                          CYCLES, i, err.message);
            return;
        }
    }
    long long grown = (long long)heap_in_use() - (long long)before;
    check_verdict(c, grown <= HEAP_SLACK, "create, forward_backward, destroy %d times: no crash, "
                  "heap grew by %lld bytes (tol %d)", CYCLES, grown, HEAP_SLACK);
}

void check_loss(host_check *c) {
    loss_rig r;
    ct_error err = {.struct_size = sizeof err};
    if (rig_open(&r, c, &err) != CT_OK) {
        check_verdict(c, 0, "create with [%s] from --set and defaults: %s", r.section, err.message);
        rig_close(&r);
        return;
    }
    check_verdict(c, 1, "create with [%s] from --set and defaults", r.section);

    /* the value with dlogits zeroed */
    float pre[NV], out[NV], zero[NV], out0[NV];
    memset(zero, 0, sizeof zero);
    double v = NAN, v0 = NAN, veval = NAN;
    int32_t rc = run_term(&r, r.h_logits, zero, 1.0, &v0, out0, &err);
    if (rc != CT_OK) {
        check_verdict(c, 0, "forward_backward on %d rows (2 ignored) of %d logits: %s", LN, LV,
                      err.message);
        goto out;
    }
    check_verdict(c, isfinite(v0), "value is finite (%.9g on %d rows, 2 ignored, V %d)", v0, LN,
                  LV);

    /* adds rather than overwrites: a pre-filled pattern, of the gradient's own size (so that
     * subtracting it again loses no digits of a small term's gradient), must survive */
    double gmax = 0;
    for (int k = 0; k < NV; k++) gmax = fmax(gmax, fabs((double)out0[k]));
    if (!(gmax > 0) || !isfinite(gmax)) gmax = 1;
    for (int k = 0; k < NV; k++)
        pre[k] = (float)(0.37 * gmax * check_urand(CHECK_SEED + 2, (uint64_t)k));
    if ((rc = run_term(&r, r.h_logits, pre, 1.0, &v, out, &err)) != CT_OK) {
        check_verdict(c, 0, "forward_backward with dlogits pre-filled: %s", err.message);
        goto out;
    }
    double ratio = 0, tol = 0;
    int at = 0;
    for (int k = 0; k < NV; k++) {
        double e = fabs(((double)out[k] - (double)out0[k]) - (double)pre[k]);
        double t = 1e-6 * (fabs((double)pre[k]) + fabs((double)out0[k]) + gmax) + 1e-30;
        if (!(e / t <= ratio)) ratio = isnan(e) ? INFINITY : e / t, tol = t, at = k;
    }
    if (ratio <= 1)
        check_verdict(c, 1, "adds into dlogits rather than overwriting (a pre-filled pattern is "
                      "kept, rel tol 1e-6)");
    else
        check_verdict(c, 0, "adds into dlogits rather than overwriting: row %d col %d (pre-filled "
                      "%.6g): expected %.6g got %.6g tol %.2g", at / LV, at % LV, (double)pre[at],
                      (double)pre[at] + (double)out0[at], (double)out[at], tol);

    /* the gradient against central differences, grad_scale 1 and 0.25 */
    double fd[NV];
    if ((rc = finite_differences(&r, fd, &err)) != CT_OK) {
        check_verdict(c, 0, "finite differences: forward_backward failed: %s", err.message);
        goto out;
    }
    double rel = grad_error(out, pre, fd, 1.0, &at);
    check_verdict(c, rel <= FD_TOL, "gradient (added minus pre-fill) matches central differences "
                  "(max rel err %.2g, tol %.0e; worst element row %d col %d: expected %.6g got "
                  "%.6g)", rel, FD_TOL, at / LV, at % LV, fd[at], (double)out[at] - pre[at]);
    double vs;
    if ((rc = run_term(&r, r.h_logits, pre, 0.25, &vs, out, &err)) != CT_OK) {
        check_verdict(c, 0, "forward_backward with grad_scale 0.25: %s", err.message);
        goto out;
    }
    rel = grad_error(out, pre, fd, 0.25, &at);
    check_verdict(c, rel <= FD_TOL, "gradient with grad_scale 0.25 matches 0.25 x central "
                  "differences (max rel err %.2g, tol %.0e; worst row %d col %d: expected %.6g "
                  "got %.6g)", rel, FD_TOL, at / LV, at % LV, 0.25 * fd[at],
                  (double)out[at] - pre[at]);
    check_verdict(c, vs == v, "grad_scale does not change the value: expected %.9g got %.9g tol 0",
                  v, vs);
    double ign = 0;
    for (int j = 0; j < LV; j++) ign = fmax(ign, fabs(fd[2 * LV + j]) + fabs(fd[5 * LV + j]));
    check_note(c, "rows with target < 0: max |d value / d logit| %.3g (0 when the term masks them)",
               ign);

    /* evaluation: dlogits NULL */
    if ((rc = run_term(&r, r.h_logits, NULL, 1.0, &veval, NULL, &err)) != CT_OK) {
        check_verdict(c, 0, "evaluation (dlogits NULL): forward_backward failed: %s", err.message);
        goto out;
    }
    check_verdict(c, veval == v, "evaluation (dlogits NULL) gives the training value: expected "
                  "%.17g got %.17g tol 0", v, veval);

    check_ranges(&r, v0, out0);

    /* every target ignored: n_counted 0 */
    int32_t keep_t[LN];
    memcpy(keep_t, r.h_targets, sizeof keep_t);
    for (int i = 0; i < LN; i++) r.h_targets[i] = -1;
    double vnone = NAN;
    rc = run_term(&r, r.h_logits, zero, 1.0, &vnone, out, &err);
    memcpy(r.h_targets, keep_t, sizeof keep_t);
    int finite = rc == CT_OK && isfinite(vnone);
    for (int k = 0; finite && k < NV; k++) finite = isfinite(out[k]);
    check_verdict(c, finite, "every target ignored (n_counted 0): value and gradient finite "
                  "(value %.6g%s%s)", vnone, rc == CT_OK ? "" : "; ", rc == CT_OK ? "" : err.message);

    check_cycles(&r);
out:
    rig_close(&r);
}
