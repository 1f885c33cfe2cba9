/* check_loss.c — check-plugin's checks of a loss term, called exactly as step.c calls it: the
 * logits, targets and row statistics in device memory of device cpu, the row max and
 * log-sum-exp computed once by the device plugin's row_stats, n_counted the rows with a target
 * >= 0, and the term ADDING d(value)/d(logits) * grad_scale into a shared dlogits buffer.
 * Claims: the value is finite; the gradient added equals central finite differences (in double)
 * of the returned value, with grad_scale 1 and 0.25 and with some targets ignored; the term adds
 * rather than overwrites; dlogits == NULL (evaluation) gives the same value; a batch with every
 * target ignored stays finite; forward_backward_rows (ABI 1.3, when provided) on row ranges
 * gives the whole batch's value and gradient; 50 create/destroy cycles neither crash nor grow
 * the heap. Each check runs in a child process of its own (check_child.c), with the batch's
 * buffers fenced (check_guard.c): a write past a buffer or into a const input fails naming it.
 * Not for: CUDA batches (the checks run on device cpu).
 * Shape legend: N rows (B*T positions), V vocabulary.
 */
#include "check/check.h"

#include "plugin/calls.h"
#include "plugin/contract.h"

#include <ctrain/numerics.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { LB = 2, LT = 4, LN = LB * LT, LV = 13, NV = LN * LV, CYCLES = 50, WARM_UP = 16 };

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
    float                 *logits, *dlogits, *row_max, *row_lse; /* fenced (check_guard.c) */
    int32_t               *targets;                              /* fenced */
    float                  h_logits[NV];
    int32_t                h_targets[LN];
} loss_rig;

static int64_t count_targets(const int32_t *t) {
    int64_t n = 0;
    for (int i = 0; i < LN; i++) n += t[i] >= 0;
    return n;
}

/* The term's call on batch b (a whole batch, or a range with forward_backward_rows), recorded
 * (calls.h) and fenced: the const inputs must keep their bytes and nothing may be written past
 * a buffer (check_guard.c); either is an error naming the buffer. */
static int32_t term_call(loss_rig *r, const ct_loss_batch *b, int rows, ct_loss_result *res,
                         ct_error *err) {
    const char *name = rows ? "forward_backward_rows" : "forward_backward";
    const host_plugin *p = r->c->plugin;
    err->code = CT_OK;
    err->message[0] = '\0';
    check_buf_seal(NULL);
    int32_t rc = rows ? CALLS(p, "forward_backward_rows",
                              r->vt->forward_backward_rows(r->loss.self, b, res, err))
                      : CALLS(p, "forward_backward",
                              r->vt->forward_backward(r->loss.self, b, res, err));
    char why[sizeof err->message];
    if (!check_buf_verify(NULL, name, why, sizeof why))
        return ct_error_set(err, CT_ERR_INVALID, "%s", why);
    return contract_name_silent_error(rc, err, p, name);
}

/* One micro-batch as step.c runs it: logits and targets to the device, row stats, dlogits
 * pre-filled with `prefill` (host, NV floats; NULL: evaluation, dlogits NULL), the term (one
 * forward_backward when `ranges` is 0, else forward_backward_rows on ranges of `ranges` rows,
 * in order, *value their sum), the resulting dlogits back into `out` (when non-NULL). */
static int32_t run_ranges(loss_rig *r, const float *logits, const float *prefill,
                          double grad_scale, int64_t ranges, double *value, float *out,
                          ct_error *err) {
    const ct_device_vtable *d = r->dev.vt;
    const host_plugin *dp = r->dev_inst.plugin;
    int32_t rc = CALLS(dp, "copy", d->copy(r->dev.self, r->logits, logits, sizeof(float) * NV,
                                           CT_COPY_H2D, err));
    if (rc == CT_OK)
        rc = CALLS(dp, "copy", d->copy(r->dev.self, r->targets, r->h_targets,
                                       sizeof(int32_t) * LN, CT_COPY_H2D, err));
    if (rc == CT_OK)
        rc = CALLS(dp, "row_stats", d->row_stats(r->dev.self, r->logits, LN, LV, r->row_max,
                                                 r->row_lse, NULL, err));
    if (rc == CT_OK && prefill)
        rc = CALLS(dp, "copy", d->copy(r->dev.self, r->dlogits, prefill, sizeof(float) * NV,
                                       CT_COPY_H2D, err));
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
    if (!ranges) {
        rc = term_call(r, &b, 0, &res, err);
        *value = res.value;
    } else {
        *value = 0;
        for (int64_t r0 = 0; rc == CT_OK && r0 < LN; r0 += ranges) {
            ct_loss_batch rb = b;
            rb.n_rows = LN - r0 < ranges ? LN - r0 : ranges;
            rb.row_begin = r0;
            rb.logits += r0 * LV, rb.targets += r0, rb.row_max += r0, rb.row_lse += r0;
            if (rb.dlogits) rb.dlogits += r0 * LV;
            rc = term_call(r, &rb, 1, &res, err);
            *value += res.value;
        }
    }
    if (rc != CT_OK) return rc;
    if (out && prefill)
        rc = CALLS(dp, "copy", d->copy(r->dev.self, out, r->dlogits, sizeof(float) * NV,
                                       CT_COPY_D2H, err));
    return rc;
}

static int32_t run_term(loss_rig *r, const float *logits, const float *prefill, double grad_scale,
                        double *value, float *out, ct_error *err) {
    return run_ranges(r, logits, prefill, grad_scale, 0, value, out, err);
}

static int32_t rig_open(loss_rig *r, host_check *c, ct_error *err) {
    memset(r, 0, sizeof *r);
    r->c = c;
    snprintf(r->section, sizeof r->section, "loss.%s", c->plugin->desc.name);
    int32_t rc = check_config(c, "[device]\nthreads = 1\n", r->section, NULL, &r->cfg, err);
    if (rc == CT_OK) rc = check_device_section(c, r->cfg, err);
    if (rc == CT_OK) rc = check_device_open(c, r->cfg, 0, &r->dev_inst, &r->dev, err);
    if (rc != CT_OK) return rc;
    /* host memory is device cpu's memory: fenced buffers stand in for its alloc() */
    r->logits = check_buf_alloc("logits", sizeof(float) * NV, 1);
    r->dlogits = check_buf_alloc("dlogits", sizeof(float) * NV, 0);
    r->row_max = check_buf_alloc("row_max", sizeof(float) * LN, 1);
    r->row_lse = check_buf_alloc("row_lse", sizeof(float) * LN, 1);
    r->targets = check_buf_alloc("targets", sizeof(int32_t) * LN, 1);
    if (!r->logits || !r->dlogits || !r->row_max || !r->row_lse || !r->targets)
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory for the batch's buffers");
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
    void *bufs[] = {r->logits, r->dlogits, r->row_max, r->row_lse, r->targets};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) check_buf_free(bufs[i]);
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

/* ---- the checks, each in a child process of its own (check_child.c) ------------------------ */

/* What every check starts from: the rig, the value v0 and gradient out0 with dlogits zeroed, and
 * a pre-fill pattern of the gradient's own size (so that subtracting it again loses no digits of
 * a small term's gradient). */
typedef struct loss_base {
    loss_rig r;
    double   v0;
    float    out0[NV], pre[NV];
    double   gmax;
} loss_base;

/* Open the rig and run the baseline; on failure a FAIL line for `claim` and 0. */
static int base_open(loss_base *b, host_check *c, const char *claim) {
    ct_error err = {.struct_size = sizeof err};
    if (rig_open(&b->r, c, &err) != CT_OK) {
        check_verdict(c, 0, "%s: create with [%s] from --set and defaults: %s", claim,
                      b->r.section, err.message);
        return 0;
    }
    float zero[NV];
    memset(zero, 0, sizeof zero);
    b->v0 = NAN;
    if (run_term(&b->r, b->r.h_logits, zero, 1.0, &b->v0, b->out0, &err) != CT_OK) {
        check_verdict(c, 0, "%s: forward_backward on %d rows (2 ignored) of %d logits: %s", claim,
                      LN, LV, err.message);
        return 0;
    }
    b->gmax = 0;
    for (int k = 0; k < NV; k++) b->gmax = fmax(b->gmax, fabs((double)b->out0[k]));
    if (!(b->gmax > 0) || !isfinite(b->gmax)) b->gmax = 1;
    for (int k = 0; k < NV; k++)
        b->pre[k] = (float)(0.37 * b->gmax * check_urand(CHECK_SEED + 2, (uint64_t)k));
    return 1;
}

static void body_create(host_check *c, void *ctx, void *out) {
    (void)ctx, (void)out;
    loss_rig r;
    ct_error err = {.struct_size = sizeof err};
    int ok = rig_open(&r, c, &err) == CT_OK;
    check_verdict(c, ok, "create with [%s] from --set and defaults%s%s", r.section,
                  ok ? "" : ": ", ok ? "" : err.message);
    if (!ok) check_stop(c);
    rig_close(&r);
}

static void body_value(host_check *c, void *ctx, void *out) {
    (void)ctx, (void)out;
    static loss_base b;
    if (!base_open(&b, c, "value is finite")) goto out;
    check_verdict(c, isfinite(b.v0), "value is finite (%.9g on %d rows, 2 ignored, V %d)", b.v0,
                  LN, LV);
    /* adds rather than overwrites: the pre-filled pattern must survive */
    ct_error err = {.struct_size = sizeof err};
    float res[NV];
    double v;
    if (run_term(&b.r, b.r.h_logits, b.pre, 1.0, &v, res, &err) != CT_OK) {
        check_verdict(c, 0, "forward_backward with dlogits pre-filled: %s", err.message);
        goto out;
    }
    double ratio = 0, tol = 0;
    int at = 0;
    for (int k = 0; k < NV; k++) {
        double e = fabs(((double)res[k] - (double)b.out0[k]) - (double)b.pre[k]);
        double t = 1e-6 * (fabs((double)b.pre[k]) + fabs((double)b.out0[k]) + b.gmax) + 1e-30;
        if (!(e / t <= ratio)) ratio = isnan(e) ? INFINITY : e / t, tol = t, at = k;
    }
    if (ratio <= 1)
        check_verdict(c, 1, "adds into dlogits rather than overwriting (a pre-filled pattern is "
                      "kept, rel tol 1e-6)");
    else
        check_verdict(c, 0, "adds into dlogits rather than overwriting: row %d col %d (pre-filled "
                      "%.6g): expected %.6g got %.6g tol %.2g", at / LV, at % LV,
                      (double)b.pre[at], (double)b.pre[at] + (double)b.out0[at], (double)res[at],
                      tol);
out:
    rig_close(&b.r);
}

static void body_gradient(host_check *c, void *ctx, void *out) {
    (void)ctx, (void)out;
    static loss_base b;
    static double fd[NV];
    const char *claim = "gradient (added minus pre-fill) matches central differences";
    if (!base_open(&b, c, claim)) goto out;
    ct_error err = {.struct_size = sizeof err};
    float res[NV];
    double v, vs;
    int at;
    if (run_term(&b.r, b.r.h_logits, b.pre, 1.0, &v, res, &err) != CT_OK ||
        finite_differences(&b.r, fd, &err) != CT_OK) {
        check_verdict(c, 0, "%s: forward_backward failed: %s", claim, err.message);
        goto out;
    }
    double rel = grad_error(res, b.pre, fd, 1.0, &at);
    check_verdict(c, rel <= FD_TOL, "%s (max rel err %.2g, tol %.0e; worst element row %d col %d: "
                  "expected %.6g got %.6g)", claim, rel, FD_TOL, at / LV, at % LV, fd[at],
                  (double)res[at] - b.pre[at]);
    if (run_term(&b.r, b.r.h_logits, b.pre, 0.25, &vs, res, &err) != CT_OK) {
        check_verdict(c, 0, "forward_backward with grad_scale 0.25: %s", err.message);
        goto out;
    }
    rel = grad_error(res, b.pre, fd, 0.25, &at);
    check_verdict(c, rel <= FD_TOL, "gradient with grad_scale 0.25 matches 0.25 x central "
                  "differences (max rel err %.2g, tol %.0e; worst row %d col %d: expected %.6g "
                  "got %.6g)", rel, FD_TOL, at / LV, at % LV, 0.25 * fd[at],
                  (double)res[at] - b.pre[at]);
    check_verdict(c, vs == v, "grad_scale does not change the value: expected %.9g got %.9g tol 0",
                  v, vs);
    double ign = 0;
    for (int j = 0; j < LV; j++) ign = fmax(ign, fabs(fd[2 * LV + j]) + fabs(fd[5 * LV + j]));
    check_note(c, "rows with target < 0: max |d value / d logit| %.3g (0 when the term masks them)",
               ign);
out:
    rig_close(&b.r);
}

/* evaluation: dlogits NULL gives the value of the training call */
static void body_evaluation(host_check *c, void *ctx, void *out) {
    (void)ctx, (void)out;
    static loss_base b;
    const char *claim = "evaluation (dlogits NULL) gives the training value";
    if (!base_open(&b, c, claim)) goto out;
    ct_error err = {.struct_size = sizeof err};
    double veval = NAN;
    if (run_term(&b.r, b.r.h_logits, NULL, 1.0, &veval, NULL, &err) != CT_OK) {
        check_verdict(c, 0, "evaluation (dlogits NULL): forward_backward failed: %s", err.message);
        goto out;
    }
    check_verdict(c, veval == b.v0, "%s: expected %.17g got %.17g tol 0", claim, b.v0, veval);
out:
    rig_close(&b.r);
}

/* ABI 1.3: forward_backward_rows on ranges of 3 rows (not dividing LN = 8) gives the whole
 * call's value (the ranges' values summed; rel tol 1e-12: a sum in another order) and the same
 * gradient (rel tol 1e-6 of the gradient's largest element: each row's arithmetic is the
 * term's own business, the built-ins give it bit for bit). */
static void body_ranges(host_check *c, void *ctx, void *out) {
    (void)ctx, (void)out;
    static loss_base b;
    if (!c->plugin->vtable || !((const ct_loss_vtable *)c->plugin->vtable)->forward_backward_rows) {
        check_note(c, "row ranges: not provided (forward_backward_rows NULL): the host gives "
                   "every term whole micro-batches, so the (N,V) logits exist at once");
        return;
    }
    if (!base_open(&b, c, "row ranges of 3 rows")) goto out;
    float zero[NV], res[NV];
    memset(zero, 0, sizeof zero);
    double v = NAN;
    ct_error err = {.struct_size = sizeof err};
    if (run_ranges(&b.r, b.r.h_logits, zero, 1.0, 3, &v, res, &err) != CT_OK) {
        check_verdict(c, 0, "row ranges of 3 rows: forward_backward_rows failed: %s", err.message);
        goto out;
    }
    check_verdict(c, fabs(v - b.v0) <= 1e-12 * fabs(b.v0) + 1e-300,
                  "row ranges of 3 rows: the ranges' values add up to the whole batch's: "
                  "expected %.17g got %.17g rel tol 1e-12", b.v0, v);
    double worst = 0;
    int at = 0;
    for (int k = 0; k < NV; k++) {
        double e = fabs((double)res[k] - (double)b.out0[k]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e, at = k;
    }
    check_verdict(c, worst <= 1e-6 * b.gmax, "row ranges of 3 rows: the same gradient as the whole "
                  "batch (row %d col %d: expected %.9g got %.9g tol %.2g)", at / LV, at % LV,
                  (double)b.out0[at], (double)res[at], 1e-6 * b.gmax);
out:
    rig_close(&b.r);
}

/* every target ignored: n_counted 0 */
static void body_ignored(host_check *c, void *ctx, void *out) {
    (void)ctx, (void)out;
    static loss_rig r;
    ct_error err = {.struct_size = sizeof err};
    const char *claim = "every target ignored (n_counted 0): value and gradient finite";
    if (rig_open(&r, c, &err) != CT_OK) {
        check_verdict(c, 0, "%s: create: %s", claim, err.message);
        goto out;
    }
    for (int i = 0; i < LN; i++) r.h_targets[i] = -1;
    float zero[NV], res[NV];
    memset(zero, 0, sizeof zero);
    double vnone = NAN;
    int32_t rc = run_term(&r, r.h_logits, zero, 1.0, &vnone, res, &err);
    int finite = rc == CT_OK && isfinite(vnone);
    for (int k = 0; finite && k < NV; k++) finite = isfinite(res[k]);
    check_verdict(c, finite, "%s (value %.6g%s%s)", claim, vnone, rc == CT_OK ? "" : "; ",
                  rc == CT_OK ? "" : err.message);
out:
    rig_close(&r);
}

/* CYCLES times: create, one forward_backward, destroy; the heap must come back. */
static void body_cycles(host_check *c, void *ctx, void *out) {
    (void)ctx, (void)out;
    static loss_rig r;
    ct_error err = {.struct_size = sizeof err};
    ct_comm_ref no_comm = {0};
    float pre[NV], res[NV];
    memset(pre, 0, sizeof pre);
    size_t before = 0;
    if (rig_open(&r, c, &err) != CT_OK) {
        check_verdict(c, 0, "create, forward_backward, destroy %d times: %s", CYCLES, err.message);
        goto out;
    }
    for (int i = 0; i < WARM_UP + CYCLES; i++) {
        check_instance inst;
        double v;
        /* after warm-up cycles: malloc's per-thread caches (counted as in use) are full then */
        if (i == WARM_UP) before = heap_in_use();
        int32_t rc = check_create(&inst, c->plugin, r.cfg, r.section, 0, 1, r.dev, no_comm,
                                  NULL, &err);
        if (rc == CT_OK) {
            void *keep = r.loss.self;
            r.loss.self = inst.self;
            rc = run_term(&r, r.h_logits, pre, 1.0, &v, res, &err);
            r.loss.self = keep;
            check_destroy(&inst);
        }
        if (rc != CT_OK) {
            check_verdict(c, 0, "create, forward_backward, destroy %d times: cycle %d failed: %s",
                          CYCLES, i, err.message);
            goto out;
        }
    }
    long long grown = (long long)heap_in_use() - (long long)before;
    check_verdict(c, grown <= HEAP_SLACK, "create, forward_backward, destroy %d times: no crash, "
                  "heap grew by %lld bytes (tol %d)", CYCLES, grown, HEAP_SLACK);
out:
    rig_close(&r);
}

void check_loss(host_check *c) {
    static const struct {
        const char *what;
        check_body  body;
    } checks[] = {
        {"create with the plugin's section from --set and defaults", body_create},
        {"value is finite; adds into dlogits rather than overwriting", body_value},
        {"gradient (added minus pre-fill) matches central differences", body_gradient},
        {"evaluation (dlogits NULL) gives the training value", body_evaluation},
        {"row ranges of 3 rows", body_ranges},
        {"every target ignored (n_counted 0)", body_ignored},
        {"create, forward_backward, destroy 50 times", body_cycles},
    };
    for (size_t i = 0; i < sizeof checks / sizeof *checks && !c->stop; i++)
        check_in_child(c, checks[i].what, checks[i].body, NULL, NULL, 0);
    if (c->stop)
        check_note(c, "the remaining checks were not run: each begins with create(), and "
                   "create() or a call after it failed or did not return above");
}

/* ---- an author's own batch (check-plugin --logits/--targets) ------------------------------ */

int32_t check_loss_apply(host_check *c, const float *logits, const int32_t *targets, int64_t N,
                         int64_t V, double *value, float *grad, ct_error *err) {
    for (int64_t i = 0; i < N; i++)
        if (targets[i] >= V)
            return ct_error_set(err, CT_ERR_INVALID, "--targets: row %lld's target %d is not "
                                "below the logits' %lld columns ---> a target is a column of "
                                "its row (negative: the row is ignored)", (long long)i,
                                (int)targets[i], (long long)V);
    char section[80];
    snprintf(section, sizeof section, "loss.%s", c->plugin->desc.name);
    host_config *cfg = NULL;
    check_instance dev_inst, loss;
    memset(&dev_inst, 0, sizeof dev_inst);
    memset(&loss, 0, sizeof loss);
    ct_device_ref dev = {0};
    float *d_logits = NULL, *d_dlogits = NULL, *row_max = NULL, *row_lse = NULL;
    int32_t *d_targets = NULL;
    size_t nv = (size_t)(N * V);
    int32_t rc = check_config(c, "", section, NULL, &cfg, err);
    if (rc == CT_OK) rc = check_device_section(c, cfg, err);
    if (rc == CT_OK) rc = check_device_open(c, cfg, 0, &dev_inst, &dev, err);
    if (rc != CT_OK) goto out_free;
    /* host memory is device cpu's memory */
    if (posix_memalign((void **)&d_logits, 64, nv * sizeof(float) + 64) ||
        posix_memalign((void **)&d_dlogits, 64, nv * sizeof(float) + 64) ||
        posix_memalign((void **)&row_max, 64, (size_t)N * sizeof(float) + 64) ||
        posix_memalign((void **)&row_lse, 64, (size_t)N * sizeof(float) + 64) ||
        posix_memalign((void **)&d_targets, 64, (size_t)N * sizeof(int32_t) + 64)) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory for a batch of %lld x %lld logits",
                          (long long)N, (long long)V);
        goto out_free;
    }
    memcpy(d_logits, logits, nv * sizeof(float));
    memcpy(d_targets, targets, (size_t)N * sizeof(int32_t));
    memset(d_dlogits, 0, nv * sizeof(float));
    rc = CALLS(dev_inst.plugin, "row_stats", dev.vt->row_stats(dev.self, d_logits, N, V, row_max,
                                                               row_lse, NULL, err));
    ct_comm_ref no_comm = {0};
    if (rc == CT_OK)
        rc = check_create(&loss, c->plugin, cfg, section, 0, 1, dev, no_comm, NULL, err);
    if (rc != CT_OK) goto out_free;
    int64_t counted = 0;
    for (int64_t i = 0; i < N; i++) counted += targets[i] >= 0;
    ct_loss_batch b = {
        .struct_size = sizeof b,
        .logits = d_logits,
        .targets = d_targets,
        .row_max = row_max,
        .row_lse = row_lse,
        .n_rows = N,
        .vocab = V,
        .n_counted = counted,
        .dlogits = d_dlogits,
        .grad_scale = 1.0,
        .device = dev,
        .batch_rows = N,
    };
    ct_loss_result res = {.struct_size = sizeof res};
    const ct_loss_vtable *vt = c->plugin->vtable;
    rc = CALLS(c->plugin, "forward_backward", vt->forward_backward(loss.self, &b, &res, err));
    rc = contract_name_silent_error(rc, err, c->plugin, "forward_backward");
    if (rc == CT_OK) {
        *value = res.value;
        memcpy(grad, d_dlogits, nv * sizeof(float));
    }
out_free:
    check_destroy(&loss);
    free(d_logits);
    free(d_dlogits);
    free(row_max);
    free(row_lse);
    free(d_targets);
    check_destroy(&dev_inst);
    if (cfg) config_free(cfg);
    return rc;
}
