/* test_mfu.c — claims about model FLOPs utilisation's inputs: the FLOPs per token the host
 * computes (host/run/mfu.c) from the gpt model's description, against a count made here from the
 * shape alone (6 N + 12 L T C, N = parameters without the position table, a tied head once);
 * the fallback 6 * n_params for a model that gives no count; and the cpu device's peak_flops
 * (a positive rate, the BLAS named). Not for: the metrics of a run (tests/cli/test_mfu.sh).
 */
#include "ct_test.h"
#include "harness.h"
#include "run/mfu.h"

#include <string.h>

/* Create the gpt model from INI keys and describe it; 0 (and a failure) when it cannot. */
static int describe_gpt(ct_harness **h, const char *ini, ct_model_desc *d) {
    *h = harness_new(ini);
    if (!*h) return 0;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(*h, "model_gpt.so", "model", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create: %s", err.message);
        return 0;
    }
    memset(d, 0, sizeof *d);
    d->struct_size = sizeof *d;
    CT_CHECK_INT(((const ct_model_vtable *)p.vt)->describe(p.self, d, &err), CT_OK);
    return 1;
}

/* GPT-2 124M at T = 1024, counted by hand: N = V C (wte, also the tied head) + L (12 C^2 +
 * 13 C) (qkv 3C^2 + 3C, proj C^2 + C, fc 4C^2 + 4C, fc2 4C^2 + C, ln1 and ln2 2C each) + 2C
 * (lnf) = 123,653,376 (124,439,808 less wpe's 1024 x 768); 6 N = 741,920,256 and
 * 12 L T C = 113,246,208, so 855,166,464 FLOPs per token. */
CT_TEST(mfu_flops_per_token_gpt2_124m_is_6n_plus_12ltc) {
    ct_harness *h = NULL;
    ct_model_desc d;
    if (describe_gpt(&h, "[model]\nn_layer = 12\nn_head = 12\nd_model = 768\n"
                         "vocab_size = 50257\nseq_len = 1024\n", &d)) {
        const double L = 12, C = 768, V = 50257, T = 1024;
        double n = V * C + L * (12 * C * C + 13 * C) + 2 * C;
        CT_CHECK_CLOSE(n, 123653376.0, 0, 0); /* the hand count above */
        double expect = 6 * n + 12 * L * T * C;
        int32_t from_model = -1;
        double got = mfu_flops_per_token(&d, 1024, &from_model);
        CT_CHECK_INT(from_model, 1);
        CT_CHECK_CLOSE(got, expect, 0, 0);
        CT_CHECK_CLOSE(got, 855166464.0, 0, 0);
        /* T enters only the attention term */
        CT_CHECK_CLOSE(mfu_flops_per_token(&d, 256, NULL), 6 * n + 12 * L * 256 * C, 0, 0);
    }
    harness_free(h);
}

/* open_lm-style (rope: no position table; untied head: wte and lm_head both counted, as
 * nanoGPT; SwiGLU's three matrices): N is every parameter, the attention term unchanged. */
CT_TEST(mfu_flops_per_token_rope_untied_swiglu_counts_every_parameter) {
    ct_harness *h = NULL;
    ct_model_desc d;
    if (describe_gpt(&h, "[model]\nn_layer = 2\nn_head = 2\nd_model = 64\nvocab_size = 300\n"
                         "seq_len = 128\nnorm = rmsnorm\nmlp = swiglu\npos = rope\n"
                         "tie_embeddings = false\nbias = false\n", &d)) {
        const double L = 2, C = 64, V = 300, F = 256; /* 256 * ceil((8 * 64 / 3) / 256) */
        /* wte + lm_head + lnf; per block ln1, ln2 (C each), qkv 3C^2, proj C^2, fc 2FC, fc2 FC */
        double n = 2 * V * C + C + L * (2 * C + 4 * C * C + 3 * F * C);
        CT_CHECK_CLOSE((double)d.n_params, n, 0, 0);
        CT_CHECK_CLOSE(mfu_flops_per_token(&d, 100, NULL), 6 * n + 12 * L * 100 * C, 0, 0);
    }
    harness_free(h);
}

/* A model that gives no count (both members 0, as a plugin built before them): 6 * n_params. */
CT_TEST(mfu_flops_per_token_falls_back_to_6n) {
    ct_model_desc d;
    memset(&d, 0, sizeof d);
    d.n_params = 1000003;
    int32_t from_model = -1;
    CT_CHECK_CLOSE(mfu_flops_per_token(&d, 4096, &from_model), 6.0 * 1000003, 0, 0);
    CT_CHECK_INT(from_model, 0);
}

/* The cpu device measures a positive, finite rate and names the BLAS that cblas_sgemm
 * resolves to (this build links OpenBLAS); a caller with a shorter ct_peak gets only its
 * bytes. No time is asserted. */
CT_TEST(mfu_cpu_device_peak_flops_measures_and_names_the_blas) {
    ct_harness *h = harness_new("[device]\nthreads = 1\n");
    if (!h) return;
    ct_device_ref dev = harness_device(h);
    CT_CHECK(dev.vt && dev.vt->peak_flops);
    if (dev.vt && dev.vt->peak_flops) {
        ct_peak p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        ct_error err = {.struct_size = sizeof err};
        CT_CHECK_INT(dev.vt->peak_flops(dev.self, CT_DTYPE_F32, &p, &err), CT_OK);
        CT_CHECK_MSG(p.flops > 1e6 && p.flops < 1e15, "flops %g", p.flops);
        CT_CHECK_STR_CONTAINS(p.library, "OpenBLAS");
        CT_CHECK_STR_CONTAINS(p.source, "measured: 1 thread x cblas_sgemm");

        /* a caller whose ct_peak ends after flops */
        struct { ct_peak p; char guard[8]; } shortp;
        memset(&shortp, 0x5a, sizeof shortp);
        shortp.p.struct_size = (uint32_t)(offsetof(ct_peak, flops) + sizeof(double));
        CT_CHECK_INT(dev.vt->peak_flops(dev.self, CT_DTYPE_BF16, &shortp.p, &err), CT_OK);
        CT_CHECK_INT(shortp.p.struct_size, offsetof(ct_peak, flops) + sizeof(double));
        CT_CHECK(shortp.p.flops > 0);
        CT_CHECK_INT((unsigned char)shortp.p.source[0], 0x5a); /* untouched */
    }
    harness_free(h);
}
