/* test_losses.c — claims about the loss terms ce, zloss and logitreg (build/plugins/loss_*.so):
 * each value equals its formula (docs/losses.md) computed in double by the test, and each
 * gradient equals central finite differences of that double formula, scaled by grad_scale and
 * ADDED into dlogits; ignored targets, value-only calls and empty batches behave as the ABI says.
 * Not for: the host's row statistics (test_device_cpu.c).
 * Legend: N rows, V vocabulary.
 */
#include "ct_test.h"
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 7, V = 13 };

static const char *LOSS_INI =
    "[loss.ce]\n"
    "[loss.zloss]\ncoef = 0.01\n"
    "[loss.zloss_all]\ncoef = 0.01\nmask_ignored = false\n"
    "[loss.logitreg]\ncoef = 0.05\n"
    "[loss.logitreg_all]\ncoef = 0.05\nmask_ignored = false\n";

/* ---- the formulas, in double, from the logits alone (lse recomputed) ------------------ */

typedef enum { TERM_CE, TERM_ZLOSS, TERM_LOGITREG } term_kind;

typedef struct {
    term_kind kind;
    double    coef;
    int       mask_ignored;
} term_ref;

static double lse_of(const double *z) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) m = fmax(m, z[j]);
    for (int j = 0; j < V; j++) s += exp(z[j] - m);
    return m + log(s);
}

/* The term's value: ce = mean over counted rows of lse - z_t; zloss = coef * mean lse^2;
 * logitreg = coef * mean over rows of ||z||^2 / V. Rows counted: target >= 0, or every row
 * when mask_ignored is 0. */
static double term_value(const term_ref *t, const double *z, const int32_t *tg) {
    double sum = 0;
    int rows = 0;
    for (int i = 0; i < N; i++) {
        int counted = t->kind == TERM_CE || t->mask_ignored ? tg[i] >= 0 : 1;
        if (!counted) continue;
        rows++;
        const double *zi = z + i * V;
        double l = lse_of(zi);
        if (t->kind == TERM_CE) sum += l - zi[tg[i]];
        else if (t->kind == TERM_ZLOSS) sum += t->coef * l * l;
        else {
            double sq = 0;
            for (int j = 0; j < V; j++) sq += zi[j] * zi[j];
            sum += t->coef * sq / V;
        }
    }
    return rows ? sum / rows : 0.0;
}

/* ---- a batch ----------------------------------------------------------------------------- */

typedef struct {
    float   logits[N * V];
    int32_t targets[N];
    float   row_max[N], row_lse[N];
    float   dlogits[N * V];
    int64_t n_counted;
} batch_data;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(double lo, double hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

/* What dlogits holds before a term runs: small (so float rounding of base + grad stays far
 * below the gradients checked) and not zero (so "adds" is tested, not "stores"). */
static float base_dlogit(int k) { return (float)(k % 3 - 1) * 1e-4f; }

/* Logits of various scales and offsets (so lse is far from 0), rows 2 and 5 ignored. */
static void make_batch(batch_data *b) {
    b->n_counted = 0;
    for (int i = 0; i < N; i++) {
        double scale = 0.5 + i, offset = (i % 3) - 1.0;
        for (int j = 0; j < V; j++) b->logits[i * V + j] = (float)(uniform(-1, 1) * scale + offset);
        b->targets[i] = (i == 2 || i == 5) ? -1 : (int32_t)((i * 5 + 3) % V);
        b->n_counted += b->targets[i] >= 0;
    }
    for (int i = 0; i < N; i++) { /* the host's row stats, in double */
        double z[V], m = -INFINITY;
        for (int j = 0; j < V; j++) z[j] = b->logits[i * V + j], m = fmax(m, z[j]);
        b->row_max[i] = (float)m;
        b->row_lse[i] = (float)lse_of(z);
    }
    for (int k = 0; k < N * V; k++) b->dlogits[k] = base_dlogit(k); /* the term ADDS to it */
}

static ct_loss_batch loss_batch(batch_data *b, ct_device_ref dev, double grad_scale,
                                int with_grad) {
    ct_loss_batch lb = {
        .struct_size = sizeof lb, .logits = b->logits, .targets = b->targets,
        .row_max = b->row_max, .row_lse = b->row_lse, .n_rows = N, .vocab = V,
        .n_counted = b->n_counted, .dlogits = with_grad ? b->dlogits : NULL,
        .grad_scale = grad_scale, .device = dev,
    };
    return lb;
}

/* A harness with LOSS_INI and the term of `section` from `so` in *p; NULL (and a test
 * failure) when it cannot be created. */
static ct_harness *open_term(const char *so, const char *section, ct_harness_plugin *p) {
    ct_harness *h = harness_new(LOSS_INI);
    if (!h) return NULL;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(h, so, section, p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create %s [%s]: %s", so, section, err.message);
        harness_free(h);
        return NULL;
    }
    return h;
}

/* Create the term of `section` from `so`, run it on a fresh batch with grad_scale 0.25 and
 * check value (against the double formula) and gradient (against central differences of the
 * formula, h = 1e-4 in double). */
static void check_term(const char *so, const char *section, term_ref ref) {
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    ct_harness *h = open_term(so, section, &p);
    if (!h) return;
    const ct_loss_vtable *vt = p.vt;
    static batch_data b;
    make_batch(&b);
    double z[N * V];
    for (int k = 0; k < N * V; k++) z[k] = b.logits[k];
    double want = term_value(&ref, z, b.targets);

    ct_loss_result r = {.struct_size = sizeof r, .value = -1};
    ct_loss_batch lb = loss_batch(&b, harness_device(h), 0.25, 1);
    CT_CHECK_INT(vt->forward_backward(p.self, &lb, &r, &err), CT_OK);
    CT_CHECK_CLOSE(r.value, want, 1e-6, 1e-9);

    const double hstep = 1e-4;
    for (int k = 0; k < N * V; k++) {
        double keep = z[k];
        z[k] = keep + hstep;
        double fp = term_value(&ref, z, b.targets);
        z[k] = keep - hstep;
        double fm = term_value(&ref, z, b.targets);
        z[k] = keep;
        double fd = 0.25 * (fp - fm) / (2 * hstep);
        double got = (double)b.dlogits[k] - base_dlogit(k);
        CT_CHECK_CLOSE(got, fd, 1e-4, 1e-9);
        int counted = ref.kind == TERM_CE || ref.mask_ignored ? b.targets[k / V] >= 0 : 1;
        if (!counted)
            CT_CHECK_MSG(b.dlogits[k] == base_dlogit(k), "ignored row %d changed", k / V);
    }
    /* value only: the same value, dlogits untouched */
    float before[N * V];
    memcpy(before, b.dlogits, sizeof before);
    ct_loss_result r2 = {.struct_size = sizeof r2, .value = -1};
    ct_loss_batch lb2 = loss_batch(&b, harness_device(h), 0.25, 0);
    CT_CHECK_INT(vt->forward_backward(p.self, &lb2, &r2, &err), CT_OK);
    CT_CHECK(r2.value == r.value);
    CT_CHECK(memcmp(before, b.dlogits, sizeof before) == 0);
    harness_free(h);
}

CT_TEST(loss_ce_value_and_gradient_match_formula_and_finite_differences) {
    check_term("loss_ce.so", "loss.ce", (term_ref){TERM_CE, 1.0, 1});
}

CT_TEST(loss_zloss_masked_value_and_gradient_match_formula_and_finite_differences) {
    check_term("loss_zloss.so", "loss.zloss", (term_ref){TERM_ZLOSS, 0.01, 1});
}

CT_TEST(loss_zloss_unmasked_counts_every_row_as_open_lm) {
    check_term("loss_zloss.so", "loss.zloss_all", (term_ref){TERM_ZLOSS, 0.01, 0});
}

CT_TEST(loss_logitreg_value_and_gradient_match_formula_and_finite_differences) {
    check_term("loss_logitreg.so", "loss.logitreg", (term_ref){TERM_LOGITREG, 0.05, 1});
    check_term("loss_logitreg.so", "loss.logitreg_all", (term_ref){TERM_LOGITREG, 0.05, 0});
}

/* A term run on row ranges of `rows` rows (ABI 1.3, forward_backward_rows) against one
 * whole-batch call on the same batch: every dlogit bit for bit (each row's per-element math is
 * the same), the values of the ranges summing to the whole value within 1e-14 relative (one
 * double sum split into parts: reordering only), and a term's metric reported once per
 * micro-batch with the whole call's value. */
static void check_ranges(const char *so, const char *section, const char *metric, int64_t rows) {
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    ct_harness *h = open_term(so, section, &p);
    if (!h) return;
    const ct_loss_vtable *vt = p.vt;
    CT_CHECK_MSG(vt->forward_backward_rows != NULL, "%s: no forward_backward_rows", so);
    if (!vt->forward_backward_rows) {
        harness_free(h);
        return;
    }
    static batch_data whole, part;
    make_batch(&whole);
    part = whole;
    ct_loss_result r = {.struct_size = sizeof r};
    ct_loss_batch lb = loss_batch(&whole, harness_device(h), 0.25, 1);
    lb.batch_rows = N;
    CT_CHECK_INT(vt->forward_backward(p.self, &lb, &r, &err), CT_OK);
    int64_t reports = 0;
    double whole_metric = metric ? harness_metric(h, metric, &reports) : 0;
    double sum = 0;
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
        int64_t n = N - r0 < rows ? N - r0 : rows;
        ct_loss_batch rb = loss_batch(&part, harness_device(h), 0.25, 1);
        rb.logits += r0 * V, rb.targets += r0, rb.row_max += r0, rb.row_lse += r0;
        rb.dlogits += r0 * V, rb.n_rows = n, rb.row_begin = r0, rb.batch_rows = N;
        ct_loss_result rr = {.struct_size = sizeof rr};
        CT_CHECK_INT(vt->forward_backward_rows(p.self, &rb, &rr, &err), CT_OK);
        sum += rr.value;
    }
    CT_CHECK_CLOSE(sum, r.value, 1e-14, 1e-300);
    int differ = 0;
    for (int k = 0; k < N * V; k++) differ += whole.dlogits[k] != part.dlogits[k];
    CT_CHECK_MSG(differ == 0, "%s, ranges of %lld rows: %d of %d dlogits differ from the whole "
                 "batch's", section, (long long)rows, differ, N * V);
    if (metric) { /* one report per micro-batch, the same value as the whole call's */
        int64_t after = 0;
        double m = harness_metric(h, metric, &after);
        CT_CHECK_MSG(reports == 1 && after == 2, "%s: %lld reports after the whole call, %lld "
                     "after the ranges (expected 1 and 2)", metric, (long long)reports,
                     (long long)after);
        CT_CHECK_CLOSE(m, whole_metric, 1e-14, 1e-300);
    }
    harness_free(h);
}

CT_TEST(loss_terms_on_row_ranges_equal_the_whole_batch) {
    static const int64_t rows[] = {1, 3, 7}; /* 3 does not divide N = 7 */
    for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
        check_ranges("loss_ce.so", "loss.ce", NULL, rows[k]);
        check_ranges("loss_zloss.so", "loss.zloss", "loss/zloss/lse_sq", rows[k]);
        check_ranges("loss_zloss.so", "loss.zloss_all", "loss/zloss/lse_sq", rows[k]);
        check_ranges("loss_logitreg.so", "loss.logitreg", "loss/logitreg/mean_sq_logit", rows[k]);
        check_ranges("loss_logitreg.so", "loss.logitreg_all", "loss/logitreg/mean_sq_logit",
                     rows[k]);
    }
}

/* With ct_loss_batch.probs (ABI 1.3) a term takes the softmax from it: the device's softmax
 * (here the exact one, rounded to f32) gives the gradient of exp(z - lse) within 1e-6 relative
 * to the largest element; a different probs buffer changes the gradient (it is read). */
static void check_probs(const char *so, const char *section) {
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    ct_harness *h = open_term(so, section, &p);
    if (!h) return;
    const ct_loss_vtable *vt = p.vt;
    static batch_data a, b, c;
    static float probs[N * V], half[N * V];
    make_batch(&a);
    b = a, c = a;
    for (int i = 0; i < N; i++) {
        double z[V];
        for (int j = 0; j < V; j++) z[j] = a.logits[i * V + j];
        double l = lse_of(z);
        for (int j = 0; j < V; j++) probs[i * V + j] = (float)exp(z[j] - l);
        for (int j = 0; j < V; j++) half[i * V + j] = 0.5f * probs[i * V + j];
    }
    ct_loss_result r = {.struct_size = sizeof r};
    ct_loss_batch la = loss_batch(&a, harness_device(h), 0.25, 1);
    CT_CHECK_INT(vt->forward_backward(p.self, &la, &r, &err), CT_OK);
    ct_loss_batch lb = loss_batch(&b, harness_device(h), 0.25, 1);
    lb.probs = probs;
    CT_CHECK_INT(vt->forward_backward(p.self, &lb, &r, &err), CT_OK);
    ct_loss_batch lc = loss_batch(&c, harness_device(h), 0.25, 1);
    lc.probs = half;
    CT_CHECK_INT(vt->forward_backward(p.self, &lc, &r, &err), CT_OK);
    double gmax = 0, worst = 0, moved = 0;
    for (int k = 0; k < N * V; k++) gmax = fmax(gmax, fabs(a.dlogits[k] - base_dlogit(k)));
    for (int k = 0; k < N * V; k++) {
        worst = fmax(worst, fabs((double)b.dlogits[k] - a.dlogits[k]));
        moved = fmax(moved, fabs((double)c.dlogits[k] - a.dlogits[k]));
    }
    CT_CHECK_MSG(worst <= 1e-6 * gmax, "%s: the gradient from probs differs by %.3g (tolerance "
                 "%.3g)", section, worst, 1e-6 * gmax);
    CT_CHECK_MSG(moved > 0.1 * gmax, "%s: halving probs moved the gradient by %.3g only: probs "
                 "are not read", section, moved);
    harness_free(h);
}

CT_TEST(loss_ce_and_zloss_take_the_softmax_from_probs_when_given) {
    check_probs("loss_ce.so", "loss.ce");
    check_probs("loss_zloss.so", "loss.zloss");
}

CT_TEST(loss_zloss_default_coef_is_1e_4) {
    ct_harness *h = harness_new("[loss.zloss]\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(h, "loss_zloss.so", "loss.zloss", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create: %s", err.message);
        harness_free(h);
        return;
    }
    static batch_data b;
    make_batch(&b);
    double z[N * V];
    for (int k = 0; k < N * V; k++) z[k] = b.logits[k];
    term_ref ref = {TERM_ZLOSS, 1e-4, 1};
    ct_loss_result r = {.struct_size = sizeof r};
    ct_loss_batch lb = loss_batch(&b, harness_device(h), 1.0, 0);
    CT_CHECK_INT(((const ct_loss_vtable *)p.vt)->forward_backward(p.self, &lb, &r, &err), CT_OK);
    CT_CHECK_CLOSE(r.value, term_value(&ref, z, b.targets), 1e-6, 0);
    harness_free(h);
}

CT_TEST(losses_with_no_counted_rows_report_zero_and_add_nothing) {
    const char *so[] = {"loss_ce.so", "loss_zloss.so", "loss_logitreg.so"};
    const char *sec[] = {"loss.ce", "loss.zloss", "loss.logitreg"};
    for (int t = 0; t < 3; t++) {
        ct_harness *h = harness_new(LOSS_INI);
        if (!h) return;
        ct_harness_plugin p;
        ct_error err = {.struct_size = sizeof err};
        if (harness_create(h, so[t], sec[t], &p, &err) != CT_OK) {
            CT_CHECK_MSG(0, "create %s: %s", so[t], err.message);
            harness_free(h);
            continue;
        }
        static batch_data b;
        make_batch(&b);
        for (int i = 0; i < N; i++) b.targets[i] = -1;
        b.n_counted = 0;
        ct_loss_result r = {.struct_size = sizeof r, .value = 7};
        ct_loss_batch lb = loss_batch(&b, harness_device(h), 1.0, 1);
        CT_CHECK_INT(((const ct_loss_vtable *)p.vt)->forward_backward(p.self, &lb, &r, &err),
                     CT_OK);
        CT_CHECK_CLOSE(r.value, 0.0, 0, 0);
        int changed = 0;
        for (int k = 0; k < N * V; k++) changed += b.dlogits[k] != base_dlogit(k);
        CT_CHECK_INT(changed, 0);
        harness_free(h);
    }
}

CT_TEST(loss_ce_rejects_a_target_outside_the_vocabulary_without_touching_dlogits) {
    ct_harness *h = harness_new(LOSS_INI);
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(h, "loss_ce.so", "loss.ce", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create: %s", err.message);
        harness_free(h);
        return;
    }
    static batch_data b;
    make_batch(&b);
    b.targets[N - 1] = V; /* one past the end */
    ct_loss_result r = {.struct_size = sizeof r};
    ct_loss_batch lb = loss_batch(&b, harness_device(h), 1.0, 1);
    CT_CHECK_INT(((const ct_loss_vtable *)p.vt)->forward_backward(p.self, &lb, &r, &err),
                 CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "outside the vocabulary");
    int changed = 0;
    for (int k = 0; k < N * V; k++) changed += b.dlogits[k] != base_dlogit(k);
    CT_CHECK_INT(changed, 0);
    harness_free(h);
}

CT_TEST(loss_ce_of_uniform_logits_is_log_v) {
    /* all logits equal: softmax is uniform, ce = log V exactly, gradient (1/V - onehot)/n */
    ct_harness *h = harness_new(LOSS_INI);
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(h, "loss_ce.so", "loss.ce", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create: %s", err.message);
        harness_free(h);
        return;
    }
    static batch_data b;
    make_batch(&b);
    for (int k = 0; k < N * V; k++) b.logits[k] = 3.0f, b.dlogits[k] = 0.0f;
    for (int i = 0; i < N; i++) b.row_max[i] = 3.0f, b.row_lse[i] = (float)(3.0 + log(V));
    ct_loss_result r = {.struct_size = sizeof r};
    ct_loss_batch lb = loss_batch(&b, harness_device(h), 1.0, 1);
    CT_CHECK_INT(((const ct_loss_vtable *)p.vt)->forward_backward(p.self, &lb, &r, &err), CT_OK);
    CT_CHECK_CLOSE(r.value, log((double)V), 1e-6, 0);
    double n = (double)b.n_counted;
    CT_CHECK_CLOSE(b.dlogits[0 * V + b.targets[0]], (1.0 / V - 1.0) / n, 1e-5, 0);
    CT_CHECK_CLOSE(b.dlogits[0 * V + (b.targets[0] + 1) % V], (1.0 / V) / n, 1e-5, 0);
    harness_free(h);
}
