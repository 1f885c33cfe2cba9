/* loss_vs_cpu.c — the loss terms on a GPU against the same plugins on the CPU: ce, zloss and
 * logitreg (mask_ignored true and false) get the same logits, targets (some ignored) and row
 * statistics on device cpu and device cuda; their values must agree to 1e-12 relative (both sum
 * per-row doubles; only the order of the final double sum differs) and the dlogits they add
 * (grad_scale 0.5, into zeros) to 2e-6 of the largest |dlogit| (expf of the GPU differs from
 * glibc's by <= 2 ulp). A second call adds again (dlogits exactly doubles), evaluation
 * (dlogits NULL) gives the same value, and a target >= V makes ce fail with the vocabulary
 * hint and add nothing.
 * Prints "ok NAME ..." / "FAIL NAME ..." and "N passed, N failed".
 * Usage: loss_vs_cpu [--cpu] [PLUGIN_DIR]  (--cpu: the device under test is a second cpu
 * device: a dry run of this program on any machine). Not for: the model (model_vs_cpu.c).
 */
#define _GNU_SOURCE
#include "plugin_host.h"

#include <math.h>

typedef struct {
    ct_device_ref dev;
    float *logits, *dlogits, *row_max, *row_lse;
    int32_t *targets;
} side;

static int passed, failed;

static void report(int ok, const char *name, const char *fmt, double a, double b) {
    printf("%s %s: ", ok ? "ok" : "FAIL", name);
    printf(fmt, a, b);
    printf("\n");
    ok ? passed++ : failed++;
}

/* Upload the batch to one side. */
static int put(side *s, const float *z, const float *d0, const float *mx, const float *lse,
               const int32_t *t, int64_t N, int64_t V) {
    s->logits = ph_upload(s->dev, z, (uint64_t)(N * V) * 4);
    s->dlogits = ph_upload(s->dev, d0, (uint64_t)(N * V) * 4);
    s->row_max = ph_upload(s->dev, mx, (uint64_t)N * 4);
    s->row_lse = ph_upload(s->dev, lse, (uint64_t)N * 4);
    s->targets = ph_upload(s->dev, t, (uint64_t)N * 4);
    return s->logits && s->dlogits && s->row_max && s->row_lse && s->targets;
}

static void drop(side *s) {
    void *p[5] = {s->logits, s->dlogits, s->row_max, s->row_lse, s->targets};
    for (int i = 0; i < 5; i++) s->dev.vt->free_mem(s->dev.self, p[i]);
}

static ct_loss_batch batch_of(side *s, int64_t N, int64_t V, int64_t counted, int grad) {
    ct_loss_batch b = {.struct_size = sizeof b, .logits = s->logits, .targets = s->targets,
                       .row_max = s->row_max, .row_lse = s->row_lse, .n_rows = N, .vocab = V,
                       .n_counted = counted, .dlogits = grad ? s->dlogits : NULL,
                       .grad_scale = 0.5, .device = s->dev};
    return b;
}

/* One term on one batch shape: value (train and eval) and dlogits, cpu vs device under test. */
static void compare_term(side *ref, side *dut, const char *so, const char *section,
                         const char *const *over, const char *label, int64_t N, int64_t V,
                         int64_t counted) {
    char name[160];
    snprintf(name, sizeof name, "%s_N%lld_V%lld", label, (long long)N, (long long)V);
    const ct_loss_vtable *vr, *vd;
    void *lr = ph_create(so, section, ref->dev, over, (const void **)&vr);
    void *ld = ph_create(so, section, dut->dev, over, (const void **)&vd);
    if (!lr || !ld) {
        report(0, name, "create failed (%g %g)", 0, 0);
        goto out;
    }
    ct_error e1 = {.struct_size = sizeof e1}, e2 = {.struct_size = sizeof e2};
    ct_loss_result r1 = {.struct_size = sizeof r1}, r2 = {.struct_size = sizeof r2};
    ct_loss_batch b1 = batch_of(ref, N, V, counted, 1), b2 = batch_of(dut, N, V, counted, 1);
    if (vr->forward_backward(lr, &b1, &r1, &e1) != CT_OK ||
        vd->forward_backward(ld, &b2, &r2, &e2) != CT_OK) {
        printf("  %s: %s | %s\n", name, e1.message, e2.message);
        report(0, name, "forward_backward failed (%g %g)", 0, 0);
        goto out;
    }
    double rel = fabs(r1.value - r2.value) / fmax(fabs(r1.value), 1e-300);
    char vname[200];
    snprintf(vname, sizeof vname, "%s_value", name);
    report(rel <= 1e-12, vname, "cpu %.17g, rel diff %.2e (tol 1e-12)", r1.value, rel);
    float *g1 = ph_download(ref->dev, ref->dlogits, (uint64_t)(N * V) * 4);
    float *g2 = ph_download(dut->dev, dut->dlogits, (uint64_t)(N * V) * 4);
    if (g1 && g2) {
        double mx = 0, diff = 0;
        for (int64_t i = 0; i < N * V; i++) {
            mx = fmax(mx, fabs((double)g1[i]));
            diff = fmax(diff, fabs((double)g1[i] - (double)g2[i]));
        }
        snprintf(vname, sizeof vname, "%s_dlogits", name);
        report(diff <= 2e-6 * mx, vname, "max|d| %.3e, max diff / max|d| %.2e (tol 2e-6)", mx,
               diff / fmax(mx, 1e-300));
        /* a second call adds the same gradient again: x + x is exact, so it doubles */
        ct_loss_result r3 = {.struct_size = sizeof r3};
        float *g3 = NULL;
        if (vd->forward_backward(ld, &b2, &r3, &e2) == CT_OK)
            g3 = ph_download(dut->dev, dut->dlogits, (uint64_t)(N * V) * 4);
        int64_t off = 0;
        for (int64_t i = 0; g3 && i < N * V; i++) off += g3[i] != 2.0f * g2[i];
        snprintf(vname, sizeof vname, "%s_adds", name);
        report(g3 && off == 0, vname, "second call: %g of %g elements not doubled", (double)off,
               (double)(N * V));
        free(g3);
    } else {
        report(0, name, "download failed (%g %g)", 0, 0);
    }
    free(g1), free(g2);
    /* evaluation: dlogits NULL, the same value */
    b1 = batch_of(ref, N, V, counted, 0), b2 = batch_of(dut, N, V, counted, 0);
    ct_loss_result q2 = {.struct_size = sizeof q2};
    if (vd->forward_backward(ld, &b2, &q2, &e2) != CT_OK) {
        report(0, name, "eval failed (%g %g)", 0, 0);
    } else {
        snprintf(vname, sizeof vname, "%s_eval_value", name);
        double d = fabs(q2.value - r2.value) / fmax(fabs(r2.value), 1e-300);
        report(d <= 1e-15, vname, "value %.17g, rel diff to train value %.2e", q2.value, d);
    }
out:
    if (lr) vr->destroy(lr);
    if (ld) vd->destroy(ld);
}

static void bad_target(side *dut, int64_t N, int64_t V) {
    const char *name = "ce_target_outside_vocab_fails_and_adds_nothing";
    const ct_loss_vtable *vd;
    void *ld = ph_create("loss_ce.so", "loss.ce", dut->dev, NULL, (const void **)&vd);
    if (!ld) {
        report(0, name, "create failed (%g %g)", 0, 0);
        return;
    }
    float *before = ph_download(dut->dev, dut->dlogits, (uint64_t)(N * V) * 4);
    int32_t bad = (int32_t)V;
    ct_error err = {.struct_size = sizeof err};
    dut->dev.vt->copy(dut->dev.self, dut->targets + N / 2, &bad, 4, CT_COPY_H2D, &err);
    ct_loss_batch b = batch_of(dut, N, V, N, 1);
    ct_loss_result r = {.struct_size = sizeof r};
    int32_t rc = vd->forward_backward(ld, &b, &r, &err);
    float *after = ph_download(dut->dev, dut->dlogits, (uint64_t)(N * V) * 4);
    int same = before && after && !memcmp(before, after, (size_t)(N * V) * 4);
    int ok = rc == CT_ERR_INVALID && strstr(err.message, "outside the vocabulary") && same;
    if (!ok) printf("  rc %d, message '%s', dlogits unchanged %d\n", rc, err.message, same);
    report(ok, name, "rc %g, dlogits unchanged %g", (double)rc, (double)same);
    free(before), free(after);
    vd->destroy(ld);
}

static void run_shape(side *ref, side *dut, int64_t N, int64_t V) {
    float *z = malloc((size_t)(N * V) * 4), *d0 = NULL; /* dlogits start at zero */
    float *mx = malloc((size_t)N * 4), *lse = malloc((size_t)N * 4);
    int32_t *t = malloc((size_t)N * 4);
    int64_t counted = 0;
    for (int64_t i = 0; i < N; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < V; j++) {
            z[i * V + j] = (float)(3.0 * ph_normal() + 0.5);
            m = fmax(m, z[i * V + j]);
        }
        for (int64_t j = 0; j < V; j++) s += exp((double)z[i * V + j] - m);
        mx[i] = (float)m;
        lse[i] = (float)(m + log(s));
        t[i] = i % 5 == 3 ? -1 : (int32_t)(ph_uniform() * (double)V); /* every 5th ignored */
        counted += t[i] >= 0;
    }
    static const char *const unmasked_z[] = {"loss.zloss:coef=0.01", "loss.zloss:mask_ignored=false", NULL};
    static const char *const masked_z[] = {"loss.zloss:coef=0.01", NULL};
    static const char *const unmasked_l[] = {"loss.logitreg:coef=0.01", "loss.logitreg:mask_ignored=false", NULL};
    static const char *const masked_l[] = {"loss.logitreg:coef=0.01", NULL};
    struct { const char *so, *sec, *label; const char *const *over; } terms[] = {
        {"loss_ce.so", "loss.ce", "ce", NULL},
        {"loss_zloss.so", "loss.zloss", "zloss_masked", masked_z},
        {"loss_zloss.so", "loss.zloss", "zloss_unmasked", unmasked_z},
        {"loss_logitreg.so", "loss.logitreg", "logitreg_masked", masked_l},
        {"loss_logitreg.so", "loss.logitreg", "logitreg_unmasked", unmasked_l},
    };
    for (size_t k = 0; k < sizeof terms / sizeof terms[0]; k++) {
        if (!put(ref, z, d0, mx, lse, t, N, V) || !put(dut, z, d0, mx, lse, t, N, V)) {
            report(0, "upload", "failed (%g %g)", 0, 0);
            break;
        }
        compare_term(ref, dut, terms[k].so, terms[k].sec, terms[k].over, terms[k].label, N, V,
                     counted);
        if (k == 0) bad_target(dut, N, V);
        drop(ref), drop(dut);
    }
    free(z), free(mx), free(lse), free(t);
}

int main(int argc, char **argv) {
    int cpu_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu")) cpu_only = 1;
        else ph_dir = argv[i];
    }
    side ref = {.dev = ph_device("device_cpu.so", CT_DEVICE_CPU)};
    side dut = {.dev = cpu_only ? ph_device("device_cpu.so", CT_DEVICE_CPU)
                                : ph_device("device_cuda.so", CT_DEVICE_CUDA)};
    if (!ref.dev.vt || !dut.dev.vt) {
        printf("FAIL setup: the cpu and %s devices must both load and open\n0 passed, 1 failed\n",
               cpu_only ? "second cpu" : "cuda");
        return 1;
    }
    double t0 = ph_now();
    run_shape(&ref, &dut, 7, 13);
    run_shape(&ref, &dut, 64, 50257);
    printf("loss comparisons took %.1f s\n", ph_now() - t0);
    dut.dev.vt->destroy(dut.dev.self);
    ref.dev.vt->destroy(ref.dev.self);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
