/* test_precision.c — claims about the precision policies fp32, amp, pure_bf16, bf16_master and
 * scaled_amp (build/plugins/precision_*.so): the dtypes each one reports are FSDP MixedPrecision's
 * (DESIGN.md §3), the grad_accum_dtype option, native collectives (NULL reduce hooks), and
 * scaled_amp's loss scale against a transcription of torch.amp.GradScaler's update rule.
 * Not for: how a strategy applies the policy (the strategy tests).
 */
#include "ct_test.h"
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t param, reduce, master, accum, buffer;
} dtypes;

/* Create the policy of `so` in [precision] (INI `ini`), read it, check it against `want`. */
static void check_policy(const char *so, const char *ini, dtypes want) {
    ct_harness *h = harness_new(ini);
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(h, so, "precision", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create %s: %s", so, err.message);
        harness_free(h);
        return;
    }
    CT_CHECK_INT(p.desc->kind, CT_KIND_PRECISION);
    const ct_precision_vtable *vt = p.vt;
    ct_precision_policy pol;
    memset(&pol, 0xff, sizeof pol); /* every field must be written */
    pol.struct_size = sizeof pol;
    CT_CHECK_INT(vt->policy(p.self, &pol, &err), CT_OK);
    CT_CHECK_MSG(pol.param_dtype == want.param, "%s param %s", so, ct_dtype_name(pol.param_dtype));
    CT_CHECK_MSG(pol.reduce_dtype == want.reduce, "%s reduce %s", so,
                 ct_dtype_name(pol.reduce_dtype));
    CT_CHECK_MSG(pol.master_dtype == want.master, "%s master %s", so,
                 ct_dtype_name(pol.master_dtype));
    CT_CHECK_MSG(pol.grad_accum_dtype == want.accum, "%s grad_accum %s", so,
                 ct_dtype_name(pol.grad_accum_dtype));
    CT_CHECK_MSG(pol.buffer_dtype == want.buffer, "%s buffer %s", so,
                 ct_dtype_name(pol.buffer_dtype));
    CT_CHECK(vt->reduce_scatter == NULL && vt->all_reduce == NULL);
    harness_free(h);
}

enum { F32 = CT_DTYPE_F32, BF16 = CT_DTYPE_BF16 };

CT_TEST(precision_fp32_keeps_everything_in_f32) {
    check_policy("precision_fp32.so", "[precision]\n", (dtypes){F32, F32, F32, F32, F32});
}

CT_TEST(precision_amp_is_fsdp_mixed_bf16_compute_f32_reduce_f32_master) {
    check_policy("precision_amp.so", "[precision]\n", (dtypes){BF16, F32, F32, BF16, BF16});
    check_policy("precision_amp.so", "[precision]\ngrad_accum_dtype = f32\n",
                 (dtypes){BF16, F32, F32, F32, BF16});
}

/* grad_accum_dtype = auto (the default): DDP under autocast holds f32 gradients, FSDP the bf16
 * flat parameter's; the strategy is read from [strategy] plugin, by name or path. */
CT_TEST(precision_amp_holds_f32_gradients_under_ddp_and_bf16_under_fsdp) {
    check_policy("precision_amp.so", "[strategy]\nplugin = ddp\n[precision]\n",
                 (dtypes){BF16, F32, F32, F32, BF16});
    check_policy("precision_amp.so", "[strategy]\nplugin = build/plugins/strategy_ddp.so\n"
                 "[precision]\n", (dtypes){BF16, F32, F32, F32, BF16});
    check_policy("precision_amp.so", "[strategy]\nplugin = full_shard\n[precision]\n",
                 (dtypes){BF16, F32, F32, BF16, BF16});
    check_policy("precision_amp.so", "[strategy]\nplugin = no_shard\n[precision]\n",
                 (dtypes){BF16, F32, F32, BF16, BF16});
    check_policy("precision_amp.so", "[strategy]\nplugin = ddp\n[precision]\n"
                 "grad_accum_dtype = bf16\n", (dtypes){BF16, F32, F32, BF16, BF16});
    check_policy("precision_amp.so", "[strategy]\nplugin = full_shard\n[precision]\n"
                 "grad_accum_dtype = f32\n", (dtypes){BF16, F32, F32, F32, BF16});
}

CT_TEST(precision_pure_bf16_reduces_in_bf16_and_keeps_f32_master) {
    check_policy("precision_pure_bf16.so", "[precision]\n", (dtypes){BF16, BF16, F32, BF16, BF16});
    check_policy("precision_pure_bf16.so", "[precision]\ngrad_accum_dtype = f32\n",
                 (dtypes){BF16, BF16, F32, F32, BF16});
}

CT_TEST(precision_pure_f16_reduces_in_f16_and_keeps_f32_master) {
    check_policy("precision_pure_f16.so", "[precision]\n",
                 (dtypes){CT_DTYPE_F16, CT_DTYPE_F16, F32, CT_DTYPE_F16, CT_DTYPE_F16});
    check_policy("precision_pure_f16.so", "[precision]\ngrad_accum_dtype = f32\n",
                 (dtypes){CT_DTYPE_F16, CT_DTYPE_F16, F32, F32, CT_DTYPE_F16});
}

/* bf16_master: amp's dtypes (wire f32 by default, or bf16) with a bf16 master and the update
 * rule of its `update` key (kahan by default). */
static void check_master(const char *ini, int32_t reduce, int32_t rule) {
    ct_harness *h = harness_new(ini);
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(h, "precision_bf16_master.so", "precision", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create bf16_master: %s", err.message);
        harness_free(h);
        return;
    }
    const ct_precision_vtable *vt = p.vt;
    ct_precision_policy pol;
    memset(&pol, 0xff, sizeof pol);
    pol.struct_size = sizeof pol;
    CT_CHECK_INT(vt->policy(p.self, &pol, &err), CT_OK);
    CT_CHECK_INT(pol.param_dtype, BF16);
    CT_CHECK_INT(pol.reduce_dtype, reduce);
    CT_CHECK_INT(pol.master_dtype, BF16);
    CT_CHECK_INT(pol.master_update, rule);
    CT_CHECK_INT(pol.grad_accum_dtype, BF16);
    CT_CHECK(vt->reduce_scatter == NULL && vt->all_reduce == NULL);
    harness_free(h);
}

CT_TEST(precision_bf16_master_keeps_a_bf16_master_with_the_chosen_update_rule) {
    check_master("[precision]\n", F32, CT_MASTER_KAHAN);
    check_master("[precision]\nupdate = sr\n", F32, CT_MASTER_SR);
    check_master("[precision]\nupdate = nearest\nreduce_dtype = bf16\n", BF16,
                 CT_MASTER_NEAREST);
}

CT_TEST(precision_amp_rejects_an_unknown_grad_accum_dtype) {
    ct_harness *h = harness_new("[precision]\ngrad_accum_dtype = fp16\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    CT_CHECK(harness_create(h, "precision_amp.so", "precision", &p, &err) != CT_OK);
    CT_CHECK_STR_CONTAINS(err.message, "grad_accum_dtype");
    harness_free(h);
}

/* ---- scaled_amp: loss scaling owned by the policy (ABI 1.7) ------------------------------- */

/* torch.amp.GradScaler.update (_amp_update_scale_, aten/src/ATen/native/cpu/AmpGradScalerKernels
 * .cpp), transcribed: the scale is an f32 tensor; an overflow multiplies it by backoff_factor and
 * resets the growth tracker; growth_interval clean steps in a row multiply it by growth_factor,
 * kept only when the product is finite. GradScaler.step skips optimizer.step on an overflow. */
typedef struct {
    float   scale, growth, backoff;
    int32_t tracker, interval;
} ref_scaler;

static int ref_update(ref_scaler *s, int found_inf) {
    if (found_inf) {
        s->scale = s->scale * s->backoff;
        s->tracker = 0;
        return 1; /* skipped */
    }
    int32_t successful = s->tracker + 1;
    if (successful == s->interval) {
        float grown = s->scale * s->growth;
        if (isfinite(grown)) s->scale = grown;
        s->tracker = 0;
    } else {
        s->tracker = successful;
    }
    return 0;
}

/* Drive scaled_amp (INI `ini`) with n verdicts (xorshift, overflow 1 in `every`, plus the
 * steps in `inject`) and compare scales and skips with ref; at step `reload` the state goes
 * through state_save into a fresh instance, which goes on. The stream is appended to `trace`
 * (when not NULL) as "finite scale_before skip" lines for tests/loss_scale_reference.py. */
static void check_scaler(const char *ini, ref_scaler ref, int n, uint32_t every,
                         const int *inject, int n_inject, int reload, FILE *trace) {
    ct_harness *h = harness_new(ini);
    if (!h) return;
    ct_harness_plugin p, q;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(h, "precision_scaled_amp.so", "precision", &p, &err) != CT_OK ||
        harness_create(h, "precision_scaled_amp.so", "precision", &q, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create scaled_amp: %s", err.message);
        harness_free(h);
        return;
    }
    const ct_precision_vtable *vt = p.vt;
    CT_CHECK(vt->loss_scale && vt->after_reduce && vt->state_save && vt->state_load);
    void *self = p.self;
    uint32_t x = 12345u;
    int mismatches = 0, skips = 0;
    if (trace) fprintf(trace, "run %.9g %.9g %.9g %d\n", (double)ref.scale, (double)ref.growth,
                       (double)ref.backoff, (int)ref.interval);
    for (int i = 0; i < n; i++) {
        if (i == reload) { /* checkpoint and resume into the second instance */
            unsigned char blob[CT_PRECISION_STATE_MAX];
            uint64_t size = 0;
            CT_CHECK_INT(vt->state_save(self, blob, sizeof blob, &size, &err), CT_OK);
            CT_CHECK(size > 0 && size <= sizeof blob);
            CT_CHECK_INT(vt->state_load(q.self, blob, size, &err), CT_OK);
            self = q.self;
        }
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        int finite = x % every != 0;
        for (int k = 0; k < n_inject; k++) finite &= inject[k] != i;
        double scale = vt->loss_scale(self);
        if (scale != (double)ref.scale) mismatches++;
        int32_t skip = -1;
        CT_CHECK_INT(vt->after_reduce(self, finite, &skip, &err), CT_OK);
        float before = ref.scale;
        int want = ref_update(&ref, !finite);
        if (skip != want) mismatches++;
        skips += skip == 1;
        if (trace) fprintf(trace, "%d %.9g %d\n", finite, (double)before, (int)skip);
    }
    CT_CHECK_MSG(mismatches == 0, "%d mismatches with GradScaler's rule (%s)", mismatches, ini);
    CT_CHECK_MSG(skips > 0, "no overflow in the stream (%s)", ini);
    CT_CHECK(vt->loss_scale(self) == (double)ref.scale);
    harness_free(h);
}

CT_TEST(precision_scaled_amp_follows_gradscalers_update_rule) {
    const char *path = getenv("CTRAIN_SCALER_TRACE"); /* tests/loss_scale_reference.py */
    FILE *trace = path ? fopen(path, "w") : NULL;
    static const int injected[] = {0, 1, 2, 40, 41, 150};
    /* the defaults: 2^16, x2, x0.5, 2000 (overflows rare enough to grow now and then) */
    check_scaler("[precision]\n", (ref_scaler){65536.0f, 2.0f, 0.5f, 0, 2000}, 9000, 2500,
                 injected, 6, 4500, trace);
    /* growth_interval 3, frequent overflows */
    check_scaler("[precision]\ngrowth_interval = 3\n", (ref_scaler){65536.0f, 2.0f, 0.5f, 0, 3},
                 400, 5, injected, 6, 123, trace);
    /* near the top of f32: 2^127 never grows to inf; a non-power-of-two backoff */
    check_scaler("[precision]\ninit_scale = 1.7014118346046923e38\ngrowth_interval = 1\n"
                 "backoff_factor = 0.3\ngrowth_factor = 3\n",
                 (ref_scaler){1.7014118346046923e38f, 3.0f, 0.3f, 0, 1}, 300, 4, injected, 6,
                 77, trace);
    if (trace) fclose(trace);
}

CT_TEST(precision_scaled_amp_refuses_a_foreign_state) {
    ct_harness *h = harness_new("[precision]\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(h, "precision_scaled_amp.so", "precision", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create scaled_amp: %s", err.message);
        harness_free(h);
        return;
    }
    const ct_precision_vtable *vt = p.vt;
    unsigned char junk[16] = {1, 2, 3};
    CT_CHECK_INT(vt->state_load(p.self, junk, sizeof junk, &err), CT_ERR_INVALID);
    CT_CHECK_INT(vt->state_load(p.self, junk, 8, &err), CT_ERR_INVALID);
    CT_CHECK(vt->loss_scale(p.self) == 65536.0); /* untouched */
    harness_free(h);
}

/* amp, fp32 and pure_bf16 scale nothing: the members are NULL (the host's behaviour of old) */
CT_TEST(precision_policies_without_loss_scaling_leave_the_members_null) {
    static const char *const sos[] = {"precision_amp.so", "precision_fp32.so",
                                      "precision_pure_bf16.so"};
    for (int i = 0; i < 3; i++) {
        ct_harness *h = harness_new("[precision]\n");
        if (!h) return;
        ct_harness_plugin p;
        ct_error err = {.struct_size = sizeof err};
        CT_CHECK_INT(harness_create(h, sos[i], "precision", &p, &err), CT_OK);
        const ct_precision_vtable *vt = p.vt;
        CT_CHECK(vt && !vt->loss_scale && !vt->after_reduce && !vt->state_save &&
                 !vt->state_load);
        harness_free(h);
    }
}
