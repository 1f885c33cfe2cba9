/* model_vs_cpu.c — the gpt model on a GPU against the same plugin on the CPU: for eight small
 * variants (GPT-2: layernorm, gelu, learned positions, tied head, biases; the same with
 * [model] mlp_epilogue = kernels and with bias = false, so the gelu MLP runs through both
 * cuBLASLt epilogue pairs and its kernels; open_lm: gain-only layernorm, swiglu, rope, qk-norm,
 * untied, no biases; rmsnorm + swiglu + qk-norm, learned; grouped-query attention: Llama-3-shaped
 * and Qwen2-shaped multi-query, on flash and naive attention) and five dtype pairs (params/grads
 * f32/f32, bf16/f32, bf16/bf16, f16/f32, f16/f16), both devices get the same
 * weights, two micro-batches of tokens and the same dlogits; compared: the logits of each
 * forward, mean_hidden, and every tensor's gradient after both backwards (it ADDS), as a
 * relative L2 error ||dut - cpu|| / ||cpu||. Tolerances: f32 1e-4 (order of f32 sums,
 * expf/logf ulps: on the CPU alone a 3e-7 relative perturbation of dlogits moves the f32
 * gradients by < 1e-6). bf16 2.5e-2, and it is loose because bf16 compute is chaotic: an
 * activation whose f32 value sits within the noise of a bf16 rounding boundary rounds the other
 * way (one bf16 ulp, 2^-8) and the flips cascade; measured on the CPU alone, that same 3e-7
 * perturbation of dlogits moves bf16 gradients by 2e-3..8e-3 and bf16 differs from f32 by
 * 7e-3..3e-2. So under bf16 the claims are also structural: every logit is a bf16 value.
 * f16 (pure_f16, fp16; its CUDA path has not yet run on a GPU) takes bf16's tolerance and the
 * same structural claim (every logit an f16 value, and not merely a bf16 one): on the CPU alone
 * the 3e-7 perturbation of dlogits moves f16 gradients (gpt2, open_lm; f16 and f32 grads) by
 * 4.8e-4..9.1e-4, where its narrow range adds subnormal gradients whose last bit is a larger
 * relative step.
 * The first three again with attention = naive and mlp_epilogue = kernels (f32/f32, bf16/bf16,
 * f16/f16),
 * so a failing fused path does not hide the state of the rest. Then the attention kernels
 * around their tile sizes (attention_cases), and document masking ([data] doc_mask) on flash,
 * naive and GQA attention with documents ending across tiles (doc_mask_cases; each first checks
 * that the mask changes the reference's logits). A token outside the
 * vocabulary must fail naming its position (bad_token_case). Then GPT-2 124M forward+backward
 * timings on the device under test (bf16, B=8, T=1024; attention flash and naive).
 * Prints "ok NAME ..." / "FAIL NAME ..." and "N passed, N failed".
 * Usage: model_vs_cpu [--cpu] [PLUGIN_DIR]  (--cpu: the device under test is a second cpu
 * device, a dry run on any machine; the 124M timing is skipped). Not for: losses.
 */
#define _GNU_SOURCE
#include "plugin_host.h"

#include <ctrain/numerics.h>

#include <math.h>

static int passed, failed;

typedef struct {
    ct_device_ref          dev;
    const ct_model_vtable *vt;
    void                  *self;
    ct_model_desc          d;
    void                 **params, **grads; /* per unit, device memory */
    int32_t               *tokens;          /* (2, N): two micro-batches */
    float                 *logits, *dlogits;
    int32_t                doc_mask, eot;   /* ct_stage_args.doc_mask and eot_token */
} side;

/* >= 0: compare_case runs with document masking, this token the separator (doc_mask_cases) */
static int32_t doc_eot = -1;

/* Padded element count of unit u (tensor k starts at the sum of aligned sizes before it). */
static uint64_t unit_len(const ct_model_desc *d, uint32_t u) {
    uint64_t n = 0;
    const ct_unit_spec *us = &d->units[u];
    for (uint32_t k = 0; k < us->n_tensors; k++) {
        const ct_tensor_spec *t = (const ct_tensor_spec *)((const char *)us->tensors +
                                                           (size_t)k * d->tensor_struct_size);
        n += ct_align_up(ct_tensor_numel(t), CT_TENSOR_ALIGN);
    }
    return n;
}

static const ct_tensor_spec *tensor_of(const ct_model_desc *d, uint32_t u, uint32_t k) {
    return (const ct_tensor_spec *)((const char *)d->units[u].tensors +
                                    (size_t)k * d->tensor_struct_size);
}

/* ||a - b|| / ||b|| in double (0 when both are 0). */
static double rel_l2(const float *a, const float *b, uint64_t n) {
    double num = 0, den = 0;
    for (uint64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

static void to_f32(float *dst, const void *src, uint64_t n, int32_t dtype) {
    for (uint64_t i = 0; i < n; i++)
        dst[i] = dtype == CT_DTYPE_BF16  ? ct_bf16_to_f32(((const uint16_t *)src)[i])
                 : dtype == CT_DTYPE_F16 ? ct_f16_to_f32(((const uint16_t *)src)[i])
                                         : ((const float *)src)[i];
}

static void side_free(side *s) {
    if (!s->dev.vt) return;
    ct_device_ref d = s->dev;
    for (uint32_t u = 0; s->params && u < s->d.n_units; u++) {
        d.vt->free_mem(d.self, s->params[u]);
        d.vt->free_mem(d.self, s->grads[u]);
    }
    free(s->params), free(s->grads);
    d.vt->free_mem(d.self, s->tokens);
    d.vt->free_mem(d.self, s->logits);
    d.vt->free_mem(d.self, s->dlogits);
    if (s->self) s->vt->destroy(s->self);
    s->params = s->grads = NULL;
    s->self = NULL;
}

/* Create the model, upload weights (host f32 values per unit), tokens and dlogits. */
static int side_setup(side *s, const char *const *over, float **w, int32_t pdt, int32_t gdt,
                      const int32_t *tok, const float *dlog, int64_t B, int64_t T) {
    ct_error err = {.struct_size = sizeof err};
    s->self = ph_create("model_gpt.so", "model", s->dev, over, (const void **)&s->vt);
    if (!s->self) return 0;
    s->d.struct_size = sizeof s->d;
    if (s->vt->describe(s->self, &s->d, &err) != CT_OK) return printf("describe: %s\n", err.message), 0;
    int64_t N = B * T, V = s->d.vocab_size;
    s->params = calloc(s->d.n_units, sizeof *s->params);
    s->grads = calloc(s->d.n_units, sizeof *s->grads);
    for (uint32_t u = 0; u < s->d.n_units; u++) {
        uint64_t n = unit_len(&s->d, u);
        void *host = malloc(n * 4);
        if (pdt == CT_DTYPE_BF16)
            for (uint64_t i = 0; i < n; i++) ((uint16_t *)host)[i] = ct_bf16_from_f32(w[u][i]);
        else if (pdt == CT_DTYPE_F16)
            for (uint64_t i = 0; i < n; i++) ((uint16_t *)host)[i] = ct_f16_from_f32(w[u][i]);
        else
            memcpy(host, w[u], n * 4);
        s->params[u] = ph_upload(s->dev, host, n * ct_dtype_size(pdt));
        s->grads[u] = ph_upload(s->dev, NULL, n * ct_dtype_size(gdt));
        free(host);
        if (!s->params[u] || !s->grads[u]) return 0;
    }
    s->tokens = ph_upload(s->dev, tok, (uint64_t)(2 * N) * 4);
    s->logits = ph_upload(s->dev, NULL, (uint64_t)(N * V) * 4);
    s->dlogits = ph_upload(s->dev, dlog, (uint64_t)(N * V) * 4);
    if (!s->tokens || !s->logits || !s->dlogits) return 0;
    if (s->vt->prepare(s->self, B, T, pdt, &err) != CT_OK)
        return printf("prepare: %s\n", err.message), 0;
    return 1;
}

static int run_pass(side *s, int micro, int backward, int32_t pdt, int32_t gdt, int64_t N) {
    ct_error err = {.struct_size = sizeof err};
    for (int32_t i = 0; i < (int32_t)s->d.n_stages; i++) {
        int32_t st = backward ? (int32_t)s->d.n_stages - 1 - i : i;
        int32_t u = s->d.stages[st].unit;
        ct_stage_args a = {.struct_size = sizeof a, .stage = st, .params = s->params[u],
                           .grads = s->grads[u], .param_dtype = pdt, .grad_dtype = gdt,
                           .tokens = s->tokens + micro * N, .logits = s->logits,
                           .dlogits = s->dlogits, .micro_step = micro,
                           .doc_mask = s->doc_mask, .eot_token = s->eot};
        int32_t rc = backward ? s->vt->backward(s->self, &a, &err) : s->vt->forward(s->self, &a, &err);
        if (rc != CT_OK) return printf("%s stage %d: %s\n", backward ? "backward" : "forward", st, err.message), 0;
    }
    return s->dev.vt->synchronize(s->dev.self, &err) == CT_OK;
}

static void check(int ok, const char *name, const char *what, double v, double tol) {
    printf("%s %s: %s %.3e (tol %.1e)\n", ok ? "ok" : "FAIL", name, what, v, tol);
    ok ? passed++ : failed++;
}

/* One comparison at B = 2 and sequence length T (<= the overrides' seq_len). */
static void compare_case(const char *label, const char *const *over, int32_t pdt, int32_t gdt,
                         int64_t T, ct_device_ref ref_dev, ct_device_ref dut_dev) {
    char name[128];
    snprintf(name, sizeof name, "%s_%s_%s", label, ct_dtype_name(pdt), ct_dtype_name(gdt));
    const int64_t B = 2, N = B * T;
    double tol = pdt == CT_DTYPE_F32 ? 1e-4 : 2.5e-2;
    side r = {.dev = ref_dev}, d = {.dev = dut_dev};
    /* weights from the reference's description (both describe the same units) */
    const ct_model_vtable *vt0;
    void *m0 = ph_create("model_gpt.so", "model", ref_dev, over, (const void **)&vt0);
    if (!m0) {
        check(0, name, "create", 0, 0);
        return;
    }
    ct_model_desc d0 = {.struct_size = sizeof d0};
    ct_error err = {.struct_size = sizeof err};
    vt0->describe(m0, &d0, &err);
    int64_t V = d0.vocab_size;
    float **w = calloc(d0.n_units, sizeof *w);
    for (uint32_t u = 0; u < d0.n_units; u++) {
        w[u] = calloc(unit_len(&d0, u), 4);
        uint64_t off = 0;
        for (uint32_t k = 0; k < d0.units[u].n_tensors; k++) {
            const ct_tensor_spec *t = tensor_of(&d0, u, k);
            uint64_t n = ct_tensor_numel(t);
            for (uint64_t i = 0; i < n; i++) {
                double x = ph_normal();
                w[u][off + i] = (float)(t->init == CT_INIT_ONES ? 1.0 + 0.1 * x
                                        : t->init == CT_INIT_ZEROS ? 0.02 * x
                                        : 2.0 * (t->init_std > 0 ? t->init_std : 0.02) * x);
            }
            off += ct_align_up(n, CT_TENSOR_ALIGN);
        }
    }
    int32_t *tok = malloc((size_t)(2 * N) * 4);
    for (int64_t i = 0; i < 2 * N; i++) tok[i] = (int32_t)(ph_uniform() * (double)V);
    if (N > 9) /* a token seen several times (the embedding gradient groups); T = 1 has N = 2 */
        tok[5] = tok[9] = tok[N + 3];
    if (doc_eot >= 0) /* three documents' ends in each sequence, the last across a 64-row tile */
        for (int64_t sq = 0; sq < 2 * B; sq++)
            for (int64_t t = T / 4; t < T; t += T / 4 + 1) tok[sq * T + t] = doc_eot;
    float *dlog = malloc((size_t)(N * V) * 4);
    for (int64_t i = 0; i < N * V; i++) dlog[i] = (float)(ph_normal() / (double)N);
    if (!side_setup(&r, over, w, pdt, gdt, tok, dlog, B, T) ||
        !side_setup(&d, over, w, pdt, gdt, tok, dlog, B, T)) {
        check(0, name, "setup", 0, 0);
        goto out;
    }
    char what[160];
    if (doc_eot >= 0) { /* the mask must matter: the reference's logits without it differ */
        uint64_t bytes = (uint64_t)(N * V) * 4;
        float *l0 = run_pass(&r, 0, 0, pdt, gdt, N) ? ph_download(r.dev, r.logits, bytes) : NULL;
        r.doc_mask = d.doc_mask = 1, r.eot = d.eot = doc_eot;
        float *l1 = run_pass(&r, 0, 0, pdt, gdt, N) ? ph_download(r.dev, r.logits, bytes) : NULL;
        double e = l0 && l1 ? rel_l2(l0, l1, (uint64_t)(N * V)) : 0;
        check(e > 4 * tol, name, "reference logits with the mask against without it, rel L2", e,
              4 * tol); /* far above what the comparison below allows */
        free(l0), free(l1);
    }
    for (int micro = 0; micro < 2; micro++) {
        if (!run_pass(&r, micro, 0, pdt, gdt, N) || !run_pass(&d, micro, 0, pdt, gdt, N)) {
            check(0, name, "forward failed", 0, 0);
            goto out;
        }
        float *l1 = ph_download(r.dev, r.logits, (uint64_t)(N * V) * 4);
        float *l2 = ph_download(d.dev, d.logits, (uint64_t)(N * V) * 4);
        snprintf(what, sizeof what, "micro-batch %d logits rel L2", micro);
        double e = l1 && l2 ? rel_l2(l2, l1, (uint64_t)(N * V)) : INFINITY;
        check(e <= tol, name, what, e, tol);
        if (pdt != CT_DTYPE_F32 && l2) { /* bf16 (f16) compute stores bf16 (f16) logits */
            uint64_t nb = 0;
            for (int64_t i = 0; i < N * V; i++)
                nb += l2[i] != (pdt == CT_DTYPE_F16 ? ct_round_f16(l2[i]) : ct_round_bf16(l2[i]));
            snprintf(what, sizeof what, "micro-batch %d logits that are not %s values", micro,
                     ct_dtype_name(pdt));
            check(nb == 0, name, what, (double)nb, 0);
        }
        if (pdt == CT_DTYPE_F16 && l2) { /* ... and really f16: 11 significant bits, of which a
                                            bf16 value keeps 8 (an f16 logit is one ~1/8 of the
                                            time; all are, should the DUT compute in bf16) */
            uint64_t nb = 0;
            for (int64_t i = 0; i < N * V; i++) nb += l2[i] == ct_round_bf16(l2[i]);
            snprintf(what, sizeof what, "micro-batch %d share of logits that are also bf16 values",
                     micro);
            check((double)nb < 0.5 * (double)(N * V), name, what, (double)nb / (double)(N * V),
                  0.5);
        }
        free(l1), free(l2);
        if (micro == 0 && r.vt->mean_hidden && d.vt->mean_hidden) {
            int64_t C = r.d.d_model;
            float *h1 = calloc((size_t)C, 4), *h2 = calloc((size_t)C, 4);
            int ok = r.vt->mean_hidden(r.self, h1, &err) == CT_OK &&
                     d.vt->mean_hidden(d.self, h2, &err) == CT_OK;
            e = ok ? rel_l2(h2, h1, (uint64_t)C) : INFINITY;
            check(e <= tol, name, "mean_hidden rel L2", e, tol);
            free(h1), free(h2);
        }
        if (micro == 0 && r.vt->hidden_rows && d.vt->hidden_rows) { /* ABI 1.4 */
            int64_t C = r.d.d_model;
            float *h1 = calloc((size_t)(N * C), 4), *h2 = calloc((size_t)(N * C), 4);
            int ok = h1 && h2 && r.vt->hidden_rows(r.self, 0, N, h1, &err) == CT_OK &&
                     d.vt->hidden_rows(d.self, 0, N, h2, &err) == CT_OK;
            e = ok ? rel_l2(h2, h1, (uint64_t)(N * C)) : INFINITY;
            check(e <= tol, name, "hidden_rows rel L2", e, tol);
            free(h1), free(h2);
        }
        if (!run_pass(&r, micro, 1, pdt, gdt, N) || !run_pass(&d, micro, 1, pdt, gdt, N)) {
            check(0, name, "backward failed", 0, 0);
            goto out;
        }
    }
    /* every tensor's gradient after both micro-batches */
    double worst = -1;
    char worst_name[96] = "";
    int bad = 0;
    for (uint32_t u = 0; u < r.d.n_units; u++) {
        uint64_t n = unit_len(&r.d, u), es = ct_dtype_size(gdt);
        void *g1 = ph_download(r.dev, r.grads[u], n * es), *g2 = ph_download(d.dev, d.grads[u], n * es);
        float *f1 = malloc(n * 4), *f2 = malloc(n * 4);
        if (!g1 || !g2) {
            bad++;
        } else {
            to_f32(f1, g1, n, gdt), to_f32(f2, g2, n, gdt);
            uint64_t off = 0;
            for (uint32_t k = 0; k < r.d.units[u].n_tensors; k++) {
                const ct_tensor_spec *t = tensor_of(&r.d, u, k);
                uint64_t nt = ct_tensor_numel(t);
                double e = rel_l2(f2 + off, f1 + off, nt);
                if (!(e <= tol)) {
                    printf("  %s: grad %s rel L2 %.3e\n", name, t->name, e);
                    bad++;
                }
                if (!(e <= worst)) worst = e, snprintf(worst_name, sizeof worst_name, "%s", t->name);
                off += ct_align_up(nt, CT_TENSOR_ALIGN);
            }
        }
        free(g1), free(g2), free(f1), free(f2);
    }
    snprintf(what, sizeof what, "every gradient (worst %s) rel L2", worst_name);
    check(bad == 0, name, what, worst, tol);
out:
    side_free(&r), side_free(&d);
    vt0->destroy(m0);
    for (uint32_t u = 0; u < d0.n_units; u++) free(w[u]);
    free(w), free(tok), free(dlog);
}

/* A token outside the vocabulary (= V, at position 7 of micro-batch 0) makes the model fail
 * with the vocabulary hint naming position 7, on the cpu at the forward and on a GPU at the
 * latest by the micro-batch's embed backward (the GPU does not wait for the tokens in forward:
 * see gpt_cuda.cu); the logits of the bad row are NaN there, never a read out of bounds. */
static void bad_token_case(const char *const *over, ct_device_ref dev, const char *who) {
    char name[96];
    snprintf(name, sizeof name, "token_outside_vocab_fails_by_backward_%s", who);
    const int64_t B = 2, T = 32, N = B * T;
    side s = {.dev = dev};
    const ct_model_vtable *vt0;
    void *m0 = ph_create("model_gpt.so", "model", dev, over, (const void **)&vt0);
    if (!m0) {
        check(0, name, "create", 0, 0);
        return;
    }
    ct_model_desc d0 = {.struct_size = sizeof d0};
    ct_error err = {.struct_size = sizeof err};
    vt0->describe(m0, &d0, &err);
    int64_t V = d0.vocab_size;
    float **w = calloc(d0.n_units, sizeof *w);
    for (uint32_t u = 0; u < d0.n_units; u++) {
        uint64_t n = unit_len(&d0, u);
        w[u] = malloc(n * 4);
        for (uint64_t i = 0; i < n; i++) w[u][i] = (float)(0.02 * ph_normal());
    }
    int32_t *tok = malloc((size_t)(2 * N) * 4);
    for (int64_t i = 0; i < 2 * N; i++) tok[i] = (int32_t)(i % V);
    tok[7] = (int32_t)V;
    int fails_at = -1; /* 0 forward, 1 backward */
    if (side_setup(&s, over, w, CT_DTYPE_F32, CT_DTYPE_F32, tok, NULL, B, T)) {
        for (int pass = 0; pass < 2 && fails_at < 0; pass++)
            for (int32_t i = 0; i < (int32_t)s.d.n_stages; i++) {
                int32_t st = pass ? (int32_t)s.d.n_stages - 1 - i : i;
                int32_t u = s.d.stages[st].unit;
                ct_stage_args a = {.struct_size = sizeof a, .stage = st, .params = s.params[u],
                                   .grads = s.grads[u], .param_dtype = CT_DTYPE_F32,
                                   .grad_dtype = CT_DTYPE_F32, .tokens = s.tokens,
                                   .logits = s.logits, .dlogits = s.dlogits};
                int32_t rc = pass ? s.vt->backward(s.self, &a, &err) : s.vt->forward(s.self, &a, &err);
                if (rc != CT_OK) {
                    fails_at = pass;
                    break;
                }
            }
    }
    int named = fails_at >= 0 && strstr(err.message, "outside the vocabulary") &&
                strstr(err.message, "position 7 ") && strstr(err.message, "--->");
    if (!named) printf("  %s: failed at %d with '%s'\n", name, fails_at, err.message);
    check(named, name, fails_at == 0 ? "failed at forward, message named position 7 (1 = yes)"
                                     : "failed at backward, message named position 7 (1 = yes)",
          named, 1);
    side_free(&s);
    vt0->destroy(m0);
    for (uint32_t u = 0; u < d0.n_units; u++) free(w[u]);
    free(w), free(tok);
}

/* A head dim over the flash kernels' 128 (d_model 136, one head) is refused at prepare on a
 * GPU with the hint to use attention = naive, and prepares with attention = naive; the CPU
 * ignores the key and prepares both. */
static void flash_head_dim_case(ct_device_ref dev, int is_cuda) {
    static const char *const big[] = {"model:n_layer=1", "model:n_head=1", "model:d_model=136",
                                      "model:vocab_size=64", "model:seq_len=8", NULL};
    static const char *const big_naive[] = {"model:n_layer=1", "model:n_head=1",
                                            "model:d_model=136", "model:vocab_size=64",
                                            "model:seq_len=8", "model:attention=naive", NULL};
    ct_error err = {.struct_size = sizeof err};
    int32_t rc[2] = {-1, -1};
    char msg[sizeof err.message] = "";
    for (int k = 0; k < 2; k++) {
        const ct_model_vtable *vt;
        void *m = ph_create("model_gpt.so", "model", dev, k ? big_naive : big, (const void **)&vt);
        if (!m) continue;
        err.message[0] = 0;
        rc[k] = vt->prepare(m, 1, 8, CT_DTYPE_F32, &err);
        if (k == 0) snprintf(msg, sizeof msg, "%s", err.message);
        vt->destroy(m);
    }
    int ok = is_cuda ? rc[0] == CT_ERR_UNSUPPORTED && strstr(msg, "head dims 1..128") &&
                           strstr(msg, "attention = naive") && rc[1] == CT_OK
                     : rc[0] == CT_OK && rc[1] == CT_OK;
    if (!ok) printf("  flash_head_dim: prepare gave %d ('%s'), with naive %d\n", rc[0], msg, rc[1]);
    check(ok, is_cuda ? "flash_head_dim_136_refused_naive_prepares"
                      : "flash_head_dim_136_cpu_ignores_attention_key",
          "outcome as claimed (1 = yes)", ok, 1);
}

/* GPT-2 124M, bf16 params and grads, B=8 T=1024: ms per forward+backward with the given
 * [model] attention (reports only). */
static void timing_124m(ct_device_ref dev, const char *attention) {
    char att_key[64];
    snprintf(att_key, sizeof att_key, "model:attention=%s", attention);
    const char *const o[] = {"model:n_layer=12", "model:n_head=12", "model:d_model=768",
                             "model:vocab_size=50257", "model:seq_len=1024", att_key, NULL};
    const int64_t B = 8, T = 1024, N = B * T;
    side s = {.dev = dev};
    const ct_model_vtable *vt0;
    void *m0 = ph_create("model_gpt.so", "model", dev, o, (const void **)&vt0);
    if (!m0) return;
    ct_model_desc d0 = {.struct_size = sizeof d0};
    ct_error err = {.struct_size = sizeof err};
    vt0->describe(m0, &d0, &err);
    float **w = calloc(d0.n_units, sizeof *w);
    for (uint32_t u = 0; u < d0.n_units; u++) {
        uint64_t n = unit_len(&d0, u);
        w[u] = malloc(n * 4);
        for (uint64_t i = 0; i < n; i++) w[u][i] = (float)(0.02 * (ph_uniform() - 0.5));
    }
    int32_t *tok = malloc((size_t)(2 * N) * 4);
    for (int64_t i = 0; i < 2 * N; i++) tok[i] = (int32_t)(ph_uniform() * 50257.0);
    if (side_setup(&s, o, w, CT_DTYPE_BF16, CT_DTYPE_BF16, tok, NULL, B, T)) {
        run_pass(&s, 0, 0, CT_DTYPE_BF16, CT_DTYPE_BF16, N);
        run_pass(&s, 0, 1, CT_DTYPE_BF16, CT_DTYPE_BF16, N);
        double t0 = ph_now();
        int it = 5;
        for (int i = 0; i < it; i++) {
            run_pass(&s, 0, 0, CT_DTYPE_BF16, CT_DTYPE_BF16, N);
            run_pass(&s, 0, 1, CT_DTYPE_BF16, CT_DTYPE_BF16, N);
        }
        double dt = (ph_now() - t0) / it;
        double flops = 6.0 * (double)d0.n_params * (double)N + 12.0 * 12 * 768 * 1024.0 * (double)N;
        printf("bench model_gpt2_124M_fwd_bwd_bf16 attention=%s: %.1f ms per B=8 T=1024 "
               "micro-batch, %.0f tokens/s, %.1f%% MFU of 989 TFLOP/s (H200 dense bf16 datasheet; "
               "model only: no loss, no optimizer)\n", attention, dt * 1e3, (double)N / dt,
               100.0 * flops / dt / 989e12);
    }
    side_free(&s);
    vt0->destroy(m0);
    for (uint32_t u = 0; u < d0.n_units; u++) free(w[u]);
    free(w), free(tok);
}

/* The CUDA attention kernels (flash_attention.cu, and the naive fallback) at sequence lengths
 * around their tiles (bf16 tiles of 64 rows, f32 of 32): T = 1, T not a multiple of a tile
 * (37, 130), T a multiple (64); head dims 16, 64 (GPT-2's) and 24 (zero-padded to 32 inside
 * the kernels) with rope and qk-norm in front of attention; f32, bf16 and f16. One block, so the
 * logits and every gradient go through one attention forward and backward. */
static void attention_cases(ct_device_ref ref, ct_device_ref dut) {
    static const char *const hd16[] = {"model:n_layer=1", "model:n_head=4", "model:d_model=64",
                                       "model:vocab_size=96", "model:seq_len=130", NULL};
    static const char *const hd64[] = {"model:n_layer=1", "model:n_head=2", "model:d_model=128",
                                       "model:vocab_size=96", "model:seq_len=130", NULL};
    static const char *const hd24[] = {"model:n_layer=1", "model:n_head=4", "model:d_model=96",
                                       "model:vocab_size=96", "model:seq_len=130",
                                       "model:pos=rope", "model:qk_norm=true",
                                       "model:mlp=swiglu", "model:bias=false", NULL};
    static const char *const naive[] = {"model:n_layer=1", "model:n_head=4", "model:d_model=64",
                                        "model:vocab_size=96", "model:seq_len=130",
                                        "model:attention=naive", NULL};
    static const char *const gqa[] = {"model:n_layer=1", "model:n_head=4", "model:n_kv_head=2",
                                      "model:d_model=64", "model:vocab_size=96",
                                      "model:seq_len=130", "model:pos=rope", NULL};
    struct { const char *label; const char *const *over; int64_t T; } at[] = {
        {"att_flash_hd16_T1", hd16, 1},    {"att_flash_hd16_T37", hd16, 37},
        {"att_flash_hd16_T64", hd16, 64},  {"att_flash_hd16_T130", hd16, 130},
        {"att_flash_hd64_T37", hd64, 37},  {"att_flash_hd64_T130", hd64, 130},
        {"att_flash_hd24_rope_qknorm_T37", hd24, 37},
        {"att_flash_hd24_rope_qknorm_T130", hd24, 130},
        {"att_naive_hd16_T37", naive, 37}, {"att_flash_gqa_hd16_T130", gqa, 130}};
    for (size_t c = 0; c < sizeof at / sizeof at[0]; c++) {
        compare_case(at[c].label, at[c].over, CT_DTYPE_F32, CT_DTYPE_F32, at[c].T, ref, dut);
        compare_case(at[c].label, at[c].over, CT_DTYPE_BF16, CT_DTYPE_BF16, at[c].T, ref, dut);
        compare_case(at[c].label, at[c].over, CT_DTYPE_F16, CT_DTYPE_F16, at[c].T, ref, dut);
    }
}

/* Document masking ([data] doc_mask): the attention of each position sees only its own
 * document (from the last eot_token at or before it), on the CUDA flash and naive kernels
 * against attention.c; three documents' ends per sequence, at T = 32 and at T = 130 (ends
 * at 32, 65 and 98: across the 64-row bf16 tiles and the 32-row f32 ones), with rope and GQA. */
static void doc_mask_cases(ct_device_ref ref, ct_device_ref dut) {
    static const char *const flash[] = {"model:n_layer=2", "model:n_head=4", "model:d_model=64",
                                        "model:vocab_size=300", "model:seq_len=130", NULL};
    static const char *const naive[] = {"model:n_layer=2", "model:n_head=4", "model:d_model=64",
                                        "model:vocab_size=300", "model:seq_len=130",
                                        "model:attention=naive", NULL};
    static const char *const gqa[] = {"model:n_layer=2", "model:n_head=4", "model:n_kv_head=2",
                                      "model:d_model=64", "model:vocab_size=300",
                                      "model:seq_len=130", "model:norm=rmsnorm",
                                      "model:mlp=swiglu", "model:pos=rope", "model:bias=false",
                                      NULL};
    struct { const char *label; const char *const *over; int64_t T; } dc[] = {
        {"docmask_flash_T32", flash, 32},   {"docmask_flash_T130", flash, 130},
        {"docmask_naive_T130", naive, 130}, {"docmask_gqa_rope_T130", gqa, 130}};
    doc_eot = 7;
    for (size_t c = 0; c < sizeof dc / sizeof dc[0]; c++) {
        compare_case(dc[c].label, dc[c].over, CT_DTYPE_F32, CT_DTYPE_F32, dc[c].T, ref, dut);
        compare_case(dc[c].label, dc[c].over, CT_DTYPE_BF16, CT_DTYPE_BF16, dc[c].T, ref, dut);
        compare_case(dc[c].label, dc[c].over, CT_DTYPE_F16, CT_DTYPE_F16, dc[c].T, ref, dut);
    }
    doc_eot = -1;
}

int main(int argc, char **argv) {
    int cpu_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu")) cpu_only = 1;
        else ph_dir = argv[i];
    }
    ct_device_ref ref = ph_device("device_cpu.so", CT_DEVICE_CPU);
    ct_device_ref dut = cpu_only ? ph_device("device_cpu.so", CT_DEVICE_CPU)
                                 : ph_device("device_cuda.so", CT_DEVICE_CUDA);
    if (!ref.vt || !dut.vt) {
        printf("FAIL setup: the cpu and %s devices must both load and open\n0 passed, 1 failed\n",
               cpu_only ? "second cpu" : "cuda");
        return 1;
    }
    static const char *const gpt2[] = {"model:n_layer=2", "model:n_head=4", "model:d_model=64",
                                       "model:vocab_size=300", "model:seq_len=32", NULL};
    static const char *const openlm[] = {"model:n_layer=2", "model:n_head=4", "model:d_model=64",
                                         "model:vocab_size=300", "model:seq_len=32",
                                         "model:norm=gain_only_layernorm", "model:mlp=swiglu",
                                         "model:pos=rope", "model:qk_norm=true",
                                         "model:tie_embeddings=false", "model:bias=false",
                                         "model:init=open_lm", NULL};
    static const char *const rms[] = {"model:n_layer=2", "model:n_head=2", "model:d_model=64",
                                      "model:vocab_size=300", "model:seq_len=32",
                                      "model:norm=rmsnorm", "model:mlp=swiglu",
                                      "model:qk_norm=true", "model:bias=false", NULL};
    /* the gelu MLP through its kernels instead of the cuBLASLt epilogues (mlp_lt.cu), and
     * without biases (epilogues GELU_AUX and DGELU, no bias gradient) */
    static const char *const gpt2_kernels[] = {"model:n_layer=2", "model:n_head=4",
                                               "model:d_model=64", "model:vocab_size=300",
                                               "model:seq_len=32", "model:mlp_epilogue=kernels",
                                               NULL};
    static const char *const gelu_nobias[] = {"model:n_layer=2", "model:n_head=4",
                                              "model:d_model=64", "model:vocab_size=300",
                                              "model:seq_len=32", "model:bias=false", NULL};
    /* grouped-query attention (gpt_cuda.cu: the key/value heads repeated for the multi-head
     * kernels, their gradients summed back) against the CPU's attention.c, which indexes the
     * shared head: Llama-3-shaped (4 heads over 2, llama3 rope scaling, an MLP width of its
     * own, untied) and Qwen2-shaped multi-query (4 over 1, q/k/v biases without an output
     * bias, tied, qk-norm over the one key head), each on flash and on naive attention */
    static const char *const llama3[] = {"model:n_layer=2", "model:n_head=4", "model:n_kv_head=2",
                                         "model:d_model=64", "model:vocab_size=300",
                                         "model:seq_len=32", "model:norm=rmsnorm",
                                         "model:mlp=swiglu", "model:pos=rope",
                                         "model:intermediate_size=176", "model:bias=false",
                                         "model:tie_embeddings=false", "model:rope_scaling=llama3",
                                         "model:rope_factor=8", "model:rope_original_max_position=16",
                                         NULL};
    static const char *const qwen2[] = {"model:n_layer=2", "model:n_head=4", "model:n_kv_head=1",
                                        "model:d_model=64", "model:vocab_size=300",
                                        "model:seq_len=32", "model:norm=rmsnorm",
                                        "model:mlp=swiglu", "model:pos=rope", "model:bias=false",
                                        "model:attn_bias=qkv", "model:qk_norm=true",
                                        "model:intermediate_size=136", NULL};
    static const char *const llama3_naive[] = {"model:n_layer=2", "model:n_head=4",
                                               "model:n_kv_head=2", "model:d_model=64",
                                               "model:vocab_size=300", "model:seq_len=32",
                                               "model:norm=rmsnorm", "model:mlp=swiglu",
                                               "model:pos=rope", "model:bias=false",
                                               "model:attention=naive", NULL};
    struct { const char *label; const char *const *over; } cases[] = {
        {"gpt2", gpt2}, {"openlm", openlm}, {"rmsnorm", rms},
        {"gpt2_mlp_kernels", gpt2_kernels}, {"gelu_nobias", gelu_nobias},
        {"gqa_llama3", llama3}, {"mqa_qwen2", qwen2}, {"gqa_naive", llama3_naive}};
    int32_t dt[5][2] = {{CT_DTYPE_F32, CT_DTYPE_F32}, {CT_DTYPE_BF16, CT_DTYPE_F32},
                        {CT_DTYPE_BF16, CT_DTYPE_BF16}, {CT_DTYPE_F16, CT_DTYPE_F32},
                        {CT_DTYPE_F16, CT_DTYPE_F16}};
    double t0 = ph_now();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int k = 0; k < 5; k++)
            compare_case(cases[c].label, cases[c].over, dt[k][0], dt[k][1], 32, ref, dut);
    /* the first three again on the plain kernels (attention = naive, mlp_epilogue = kernels):
     * should a fused path fail on a GPU, these say whether the rest of the model is right */
    for (size_t c = 0; c < 3; c++) {
        const char *plain[24];
        size_t n = 0;
        for (const char *const *o = cases[c].over; *o && n < 20; o++) plain[n++] = *o;
        plain[n++] = "model:attention=naive";
        plain[n++] = "model:mlp_epilogue=kernels";
        plain[n] = NULL;
        char label[64];
        snprintf(label, sizeof label, "%s_plain", cases[c].label);
        for (int k = 0; k < 5; k += 2) compare_case(label, plain, dt[k][0], dt[k][1], 32, ref, dut);
    }
    attention_cases(ref, dut);
    doc_mask_cases(ref, dut);
    flash_head_dim_case(dut, !cpu_only);
    bad_token_case(gpt2, ref, "cpu");
    bad_token_case(gpt2, dut, cpu_only ? "second_cpu" : "cuda");
    printf("model comparisons took %.1f s\n", ph_now() - t0);
    if (!cpu_only) timing_124m(dut, "flash"), timing_124m(dut, "naive");
    dut.vt->destroy(dut.self);
    ref.vt->destroy(ref.self);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
