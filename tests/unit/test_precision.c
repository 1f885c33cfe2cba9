/* test_precision.c — claims about the precision policies fp32, amp and pure_bf16
 * (build/plugins/precision_*.so): the dtypes each one reports are FSDP MixedPrecision's
 * (DESIGN.md §3), the grad_accum_dtype option, and native collectives (NULL reduce hooks).
 * Not for: how a strategy applies the policy (the strategy tests).
 */
#include "ct_test.h"
#include "harness.h"

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

CT_TEST(precision_amp_rejects_an_unknown_grad_accum_dtype) {
    ct_harness *h = harness_new("[precision]\ngrad_accum_dtype = fp16\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    CT_CHECK(harness_create(h, "precision_amp.so", "precision", &p, &err) != CT_OK);
    CT_CHECK_STR_CONTAINS(err.message, "grad_accum_dtype");
    harness_free(h);
}
