/* test_gpt.c — claims about the gpt model plugin (build/plugins/model_gpt.so): every parameter
 * tensor's gradient equals central finite differences of a loss computed by the test, for each
 * architecture option; gradients ADD; bf16 params give bf16-representable logits close to f32;
 * the description (units, stages, parameter count, init rules) matches GPT-2 / open_lm; bad
 * shapes and tokens are errors that name the key. Not for: speed (bench/).
 * Legend: B batch, T time, N = B*T rows, C channels, V vocabulary, L layers.
 *
 * The loss is J = sum_{n,v} logits[n,v] * R[n,v] with a fixed random R, so dJ/dlogits = R; J is
 * summed in double from the f32 logits.
 */
#include "ct_test.h"
#include "harness.h"

#include <ctrain/numerics.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TB = 2, TT = 5, TV = 11, TN = TB * TT, MAXU = 8 };

/* Shape of a fixture: the tiny one of the gradient checks, or a wider one whose products are
 * big enough to be split over threads. */
typedef struct {
    int B, T, V, C, NH, threads;
} shape;
static const shape TINY = {TB, TT, TV, 8, 2, 2};

typedef struct {
    ct_harness            *h;
    const ct_model_vtable *vt;
    void                  *self;
    ct_model_desc          d;
    uint64_t               numel[MAXU];  /* unit length incl. alignment, padded to 64 */
    float                 *p32[MAXU];    /* f32 params */
    uint16_t              *p16[MAXU];    /* the same, rounded to bf16 */
    float                 *g32[MAXU];    /* f32 gradients */
    uint16_t              *g16[MAXU];    /* bf16 gradients */
    shape                  sh;
    int                    n_logits;     /* N*V */
    int32_t               *tokens;       /* (N) */
    double                *R;            /* (N,V) d J / d logits */
    float                 *logits;       /* (N,V) */
    float                 *dl;           /* (N,V) R in f32 */
} fixture;

/* Deterministic uniform in [-1, 1) from a counter. */
static double urand(uint64_t seed, uint64_t i) { return 2.0 * ct_uniform01(seed, i) - 1.0; }

static uint64_t unit_len(const ct_unit_spec *u) {
    uint64_t n = 0;
    for (uint32_t k = 0; k < u->n_tensors; k++)
        n += ct_align_up(ct_tensor_numel(&u->tensors[k]), CT_TENSOR_ALIGN);
    return n;
}

static uint64_t tensor_off(const ct_unit_spec *u, uint32_t k) {
    uint64_t off = 0;
    for (uint32_t j = 0; j < k; j++) off += ct_align_up(ct_tensor_numel(&u->tensors[j]), CT_TENSOR_ALIGN);
    return off;
}

/* Create the model from [model] keys (n_layer/n_head/d_model/vocab/seq_len of the tiny config
 * unless `keys` sets them) and fill params: matrices ~ U(-0.5,0.5), norm gains 1 +- 0.2,
 * biases +- 0.2, so that every path carries a gradient of order one. */
static int fixture_shaped(fixture *f, const char *keys, shape sh) {
    memset(f, 0, sizeof *f);
    f->sh = sh;
    int N = sh.B * sh.T;
    f->n_logits = N * sh.V;
    f->tokens = calloc((size_t)N, sizeof *f->tokens);
    f->R = calloc((size_t)f->n_logits, sizeof *f->R);
    f->logits = calloc((size_t)f->n_logits, sizeof *f->logits);
    f->dl = calloc((size_t)f->n_logits, sizeof *f->dl);
    char ini[1024];
    snprintf(ini, sizeof ini, "[model]\nn_layer = 2\nn_head = %d\nd_model = %d\nvocab_size = %d\n"
             "seq_len = %d\n%s\n[device]\nthreads = %d\n", sh.NH, sh.C, sh.V, sh.T + 2, keys,
             sh.threads);
    f->h = harness_new(ini);
    if (!f->h) return 0;
    ct_harness_plugin p;
    ct_error err = {sizeof err, 0, {0}};
    if (harness_create(f->h, "model_gpt.so", "model", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create model gpt with {%s}: %s", keys, err.message);
        return 0;
    }
    f->vt = p.vt;
    f->self = p.self;
    f->d.struct_size = sizeof f->d;
    CT_CHECK_INT(f->vt->describe(f->self, &f->d, &err), CT_OK);
    CT_CHECK(f->d.n_units <= MAXU);
    for (uint32_t u = 0; u < f->d.n_units; u++) {
        const ct_unit_spec *us = &f->d.units[u];
        f->numel[u] = ct_align_up(unit_len(us), 64);
        f->p32[u] = calloc(f->numel[u], sizeof(float));
        f->p16[u] = calloc(f->numel[u], sizeof(uint16_t));
        f->g32[u] = calloc(f->numel[u], sizeof(float));
        f->g16[u] = calloc(f->numel[u], sizeof(uint16_t));
        for (uint32_t k = 0; k < us->n_tensors; k++) {
            const ct_tensor_spec *t = &us->tensors[k];
            uint64_t off = tensor_off(us, k), n = ct_tensor_numel(t);
            for (uint64_t i = 0; i < n; i++) {
                double r = urand(1000 * u + k, i);
                double v = t->init == CT_INIT_ONES ? 1.0 + 0.2 * r : t->init == CT_INIT_ZEROS ? 0.2 * r
                                                                                             : 0.5 * r;
                f->p32[u][off + i] = (float)v;
            }
        }
    }
    for (int n = 0; n < N; n++) f->tokens[n] = (int32_t)(ct_hash64(7, (uint64_t)n) % (uint64_t)sh.V);
    f->tokens[3] = f->tokens[0]; /* a repeated token: its embedding gradient sums two rows */
    for (int i = 0; i < f->n_logits; i++) {
        f->R[i] = urand(99, (uint64_t)i);
        f->dl[i] = (float)f->R[i];
    }
    return 1;
}

static int fixture_new(fixture *f, const char *keys) { return fixture_shaped(f, keys, TINY); }

static void fixture_free(fixture *f) {
    for (uint32_t u = 0; u < MAXU; u++) {
        free(f->p32[u]);
        free(f->p16[u]);
        free(f->g32[u]);
        free(f->g16[u]);
    }
    free(f->tokens);
    free(f->R);
    free(f->logits);
    free(f->dl);
    if (f->h) harness_free(f->h);
}

static void round_params(fixture *f) {
    for (uint32_t u = 0; u < f->d.n_units; u++)
        for (uint64_t i = 0; i < f->numel[u]; i++) f->p16[u][i] = ct_bf16_from_f32(f->p32[u][i]);
}

/* All stages forward; returns J in double. */
static double forward(fixture *f, int32_t dtype) {
    ct_error err = {sizeof err, 0, {0}};
    CT_CHECK_INT(f->vt->prepare(f->self, f->sh.B, f->sh.T, dtype, &err), CT_OK);
    for (uint32_t s = 0; s < f->d.n_stages; s++) {
        int32_t u = f->d.stages[s].unit;
        ct_stage_args a = {.struct_size = sizeof a, .stage = (int32_t)s,
                           .params = dtype == CT_DTYPE_F32 ? (const void *)f->p32[u] : f->p16[u],
                           .param_dtype = dtype, .grad_dtype = dtype, .tokens = f->tokens,
                           .logits = f->logits};
        int32_t rc = f->vt->forward(f->self, &a, &err);
        CT_CHECK_MSG(rc == CT_OK, "forward stage %u: %s", s, err.message);
        if (rc != CT_OK) return NAN;
    }
    double J = 0;
    for (int i = 0; i < f->n_logits; i++) J += f->logits[i] * f->R[i];
    return J;
}

/* All stages backward with dlogits = R, adding into g32 (grad f32) or g16 (grad bf16). */
static void backward(fixture *f, int32_t param_dtype, int32_t grad_dtype) {
    ct_error err = {sizeof err, 0, {0}};
    for (int s = (int)f->d.n_stages - 1; s >= 0; s--) {
        int32_t u = f->d.stages[s].unit;
        ct_stage_args a = {.struct_size = sizeof a, .stage = s,
                           .params = param_dtype == CT_DTYPE_F32 ? (const void *)f->p32[u] : f->p16[u],
                           .grads = grad_dtype == CT_DTYPE_F32 ? (void *)f->g32[u] : f->g16[u],
                           .param_dtype = param_dtype, .grad_dtype = grad_dtype,
                           .dlogits = f->dl};
        int32_t rc = f->vt->backward(f->self, &a, &err);
        CT_CHECK_MSG(rc == CT_OK, "backward stage %d: %s", s, err.message);
    }
}

/* Every tensor: up to 7 elements (first, last, 5 spread) against central differences of J.
 * Tolerance |g - fd| <= 2e-3 + 1e-2 |fd| (f32 forward noise ~1e-5 / eps, truncation eps^2). */
static void check_gradients_shaped(const char *keys, shape sh) {
    fixture f;
    if (!fixture_shaped(&f, keys, sh)) goto out;
    forward(&f, CT_DTYPE_F32);
    backward(&f, CT_DTYPE_F32, CT_DTYPE_F32);
    const float eps = 1e-2f;
    int checked = 0;
    double worst = 0;
    for (uint32_t u = 0; u < f.d.n_units; u++) {
        const ct_unit_spec *us = &f.d.units[u];
        for (uint32_t k = 0; k < us->n_tensors; k++) {
            const ct_tensor_spec *t = &us->tensors[k];
            uint64_t off = tensor_off(us, k), n = ct_tensor_numel(t);
            for (int j = 0; j < 7; j++) {
                uint64_t i = j == 0 ? 0 : j == 6 ? n - 1 : ct_hash64(u * 100 + k, (uint64_t)j) % n;
                float *p = &f.p32[u][off + i];
                float keep = *p;
                *p = keep + eps;
                double jp = forward(&f, CT_DTYPE_F32);
                *p = keep - eps;
                double jm = forward(&f, CT_DTYPE_F32);
                *p = keep;
                double fd = (jp - jm) / (2.0 * (double)eps);
                double g = f.g32[u][off + i];
                double tol = 2e-3 + 1e-2 * fabs(fd);
                if (fabs(g - fd) / tol > worst) worst = fabs(g - fd) / tol;
                CT_CHECK_MSG(fabs(g - fd) <= tol, "{%s} %s[%llu]: gradient %.6g, finite difference "
                             "%.6g (tolerance %.2g)", keys, t->name, (unsigned long long)i, g, fd, tol);
                checked++;
            }
        }
    }
    CT_CHECK(checked > 50);
    if (getenv("GPT_TEST_VERBOSE"))
        printf("  {%s}: %d elements, worst error %.3f of tolerance\n", keys, checked, worst);
out:
    fixture_free(&f);
}

static void check_gradients(const char *keys) { check_gradients_shaped(keys, TINY); }

CT_TEST(gpt_gradients_match_finite_differences_gpt2) { check_gradients(""); }
/* T = 80 > GPT_ATT_QB (64): attention in two query blocks */
CT_TEST(gpt_gradients_match_finite_differences_long_sequence) {
    shape longer = {1, 80, TV, 8, 2, 2};
    check_gradients_shaped("pos = rope", longer);
}
CT_TEST(gpt_gradients_match_finite_differences_rmsnorm) { check_gradients("norm = rmsnorm"); }
CT_TEST(gpt_gradients_match_finite_differences_gain_only_layernorm) {
    check_gradients("norm = gain_only_layernorm");
}
CT_TEST(gpt_gradients_match_finite_differences_swiglu) { check_gradients("mlp = swiglu"); }
CT_TEST(gpt_gradients_match_finite_differences_rope) { check_gradients("pos = rope"); }
CT_TEST(gpt_gradients_match_finite_differences_qk_norm) { check_gradients("qk_norm = true"); }
CT_TEST(gpt_gradients_match_finite_differences_untied) { check_gradients("tie_embeddings = false"); }
CT_TEST(gpt_gradients_match_finite_differences_no_bias) { check_gradients("bias = false"); }
CT_TEST(gpt_gradients_match_finite_differences_open_lm) {
    check_gradients("norm = gain_only_layernorm\nmlp = swiglu\npos = rope\nqk_norm = true\n"
                    "tie_embeddings = false\nbias = false\ninit = open_lm");
}

/* The shapes of current checkpoint families: grouped-query and multi-query attention (4 query
 * heads over 2 or 1 key/value heads), any MLP width, q/k/v biases without an output bias
 * (Qwen2) or with it, rope scaling (linear; llama3 with original_max_position 16, so the head
 * dim 4's two frequencies fall in the medium (smoothed) and the low (divided) band). */
static const shape GQA4 = {TB, TT, TV, 8, 4, 2};
CT_TEST(gpt_gradients_match_finite_differences_grouped_query) {
    check_gradients_shaped("n_kv_head = 2\npos = rope", GQA4);
    check_gradients_shaped("n_kv_head = 2\nqk_norm = true", GQA4); /* k-norm over KC = 4 */
}
CT_TEST(gpt_gradients_match_finite_differences_multi_query) {
    check_gradients_shaped("n_kv_head = 1", GQA4);
}
CT_TEST(gpt_gradients_match_finite_differences_intermediate_size) {
    check_gradients("mlp = swiglu\nintermediate_size = 12");
    check_gradients("intermediate_size = 20");
}
CT_TEST(gpt_gradients_match_finite_differences_attention_bias) {
    check_gradients("bias = false\nattn_bias = qkv");
    check_gradients("bias = false\nattn_bias = qkv_o");
    check_gradients("attn_bias = none");
}
CT_TEST(gpt_gradients_match_finite_differences_rope_scaling) {
    check_gradients("pos = rope\nrope_scaling = linear\nrope_factor = 2");
    check_gradients("pos = rope\nrope_scaling = llama3\nrope_factor = 8\n"
                    "rope_original_max_position = 16");
}
/* Llama-3 / Qwen2-shaped, T = 80: two query blocks accumulate into a shared key head */
CT_TEST(gpt_gradients_match_finite_differences_llama3_and_qwen2_shapes) {
    shape longer = {1, 80, TV, 8, 4, 2};
    check_gradients_shaped("norm = rmsnorm\nmlp = swiglu\npos = rope\nbias = false\n"
                           "tie_embeddings = false\nn_kv_head = 2\nintermediate_size = 24\n"
                           "rope_scaling = llama3\nrope_factor = 8\n"
                           "rope_original_max_position = 16\nrope_theta = 500000", longer);
    check_gradients_shaped("norm = rmsnorm\nmlp = swiglu\npos = rope\nbias = false\n"
                           "attn_bias = qkv\nn_kv_head = 1\nintermediate_size = 20", GQA4);
}

/* A tensor's span in a unit: offset and element count, found by name suffix. */
static int tensor_span(const fixture *f, uint32_t u, const char *suffix, uint64_t *off,
                       uint64_t *n) {
    const ct_unit_spec *us = &f->d.units[u];
    for (uint32_t k = 0; k < us->n_tensors; k++) {
        size_t ln = strlen(us->tensors[k].name), ls = strlen(suffix);
        if (ln >= ls && !strcmp(us->tensors[k].name + ln - ls, suffix))
            return *off = tensor_off(us, k), *n = ct_tensor_numel(&us->tensors[k]), 1;
    }
    return 0;
}

/* Grouped-query attention is multi-head attention whose key/value heads are repeated
 * (transformers' repeat_kv): a model with 4 heads over 2 key heads gives the logits of the
 * 4-head model holding each key/value head twice, and its key/value gradients are the sums
 * of that model's over the copies; every other gradient is the same. Both within 1e-5 of the
 * largest value (the products differ in shape, so not bit for bit). */
CT_TEST(gpt_grouped_query_equals_multi_head_with_repeated_heads) {
    const char *keys[] = {"pos = rope\nbias = false\nattn_bias = qkv\nn_kv_head = 2",
                          "pos = rope\nbias = false\nattn_bias = qkv\nn_kv_head = 1"};
    for (int v = 0; v < 2; v++) {
        fixture g, h;
        int G = v == 0 ? 2 : 4, KC = 8 / G, C = 8, HD = 2;
        if (!fixture_shaped(&g, keys[v], GQA4) ||
            !fixture_shaped(&h, "pos = rope\nbias = false\nattn_bias = qkv", GQA4)) {
            fixture_free(&g);
            fixture_free(&h);
            continue;
        }
        for (uint32_t u = 0; u < h.d.n_units; u++) { /* same tensors, but for qkv */
            const char *sfx[] = {"attn.qkv.weight", "attn.qkv.bias"};
            uint64_t go, gn, ho, hn;
            memcpy(h.p32[u], g.p32[u], (u == 0 ? h.numel[u] : 0) * sizeof(float));
            if (u == 0) continue;
            for (uint32_t k = 0; k < h.d.units[u].n_tensors; k++) {
                const char *nm = h.d.units[u].tensors[k].name;
                if (strstr(nm, "attn.qkv")) continue;
                uint64_t off, n;
                CT_CHECK(tensor_span(&g, u, strchr(nm + 7, '.') + 1, &off, &n));
                memcpy(h.p32[u] + tensor_off(&h.d.units[u], k), g.p32[u] + off, n * sizeof(float));
            }
            for (int t = 0; t < 2; t++) {
                CT_CHECK(tensor_span(&g, u, sfx[t], &go, &gn) && tensor_span(&h, u, sfx[t], &ho, &hn));
                int64_t cols = t == 0 ? C : 1;
                for (int64_t row = 0; row < 3 * C; row++) { /* h's row <- g's row */
                    int64_t part = row / C, w = row % C;
                    int64_t src = part == 0 ? row : C + (part - 1) * KC + (w / HD / G) * HD + w % HD;
                    memcpy(h.p32[u] + ho + row * cols, g.p32[u] + go + src * cols,
                           (size_t)cols * sizeof(float));
                }
            }
        }
        forward(&g, CT_DTYPE_F32);
        float lg[TN * TV];
        memcpy(lg, g.logits, sizeof lg);
        forward(&h, CT_DTYPE_F32);
        double mx = 0, diff = 0;
        for (int i = 0; i < TN * TV; i++) {
            mx = fmax(mx, fabs(lg[i]));
            diff = fmax(diff, fabs((double)lg[i] - h.logits[i]));
        }
        CT_CHECK_MSG(diff <= 1e-5 * mx, "{%s}: logits differ from the repeated-head model by "
                     "%.3g (max %.3g)", keys[v], diff, mx);
        backward(&g, CT_DTYPE_F32, CT_DTYPE_F32);
        backward(&h, CT_DTYPE_F32, CT_DTYPE_F32);
        double gmx = 0, gdiff = 0;
        for (uint32_t u = 0; u < g.d.n_units; u++)
            for (uint32_t k = 0; k < g.d.units[u].n_tensors; k++) {
                const char *nm = g.d.units[u].tensors[k].name;
                uint64_t off = tensor_off(&g.d.units[u], k), n = ct_tensor_numel(&g.d.units[u].tensors[k]);
                uint64_t ho, hn;
                CT_CHECK(tensor_span(&h, u, u == 0 ? nm : strchr(nm + 7, '.') + 1, &ho, &hn));
                int64_t cols = strstr(nm, "weight") && !strstr(nm, "ln") ? C : 1;
                for (uint64_t i = 0; i < n; i++) {
                    int64_t row = (int64_t)i / cols, c = (int64_t)i % cols;
                    double want = 0;
                    if (strstr(nm, "attn.qkv") && row >= C) { /* sum of the copies */
                        int64_t part = (row - C) / KC, w = (row - C) % KC;
                        for (int j = 0; j < G; j++)
                            want += h.g32[u][ho + (C + part * C + ((w / HD) * G + j) * HD + w % HD) * cols + c];
                    } else {
                        want = h.g32[u][ho + i];
                    }
                    gmx = fmax(gmx, fabs(want));
                    gdiff = fmax(gdiff, fabs(want - g.g32[u][off + i]));
                }
            }
        CT_CHECK_MSG(gdiff <= 1e-5 * gmx && gmx > 0, "{%s}: gradients differ from the "
                     "repeated-head model's sums by %.3g (max %.3g)", keys[v], gdiff, gmx);
        if (getenv("GPT_TEST_VERBOSE"))
            printf("  {%s}: logits within %.2g, gradients within %.2g (relative)\n", keys[v],
                   diff / mx, gdiff / gmx);
        fixture_free(&g);
        fixture_free(&h);
    }
}

/* The new keys at the values that mean today's model change no bit: n_kv_head = n_head,
 * intermediate_size = the rule's width, attn_bias = qkv_o under bias = true (none under
 * false), rope_scaling = linear with factor 1; logits and every gradient compared bit for bit
 * with the same model without the keys. */
CT_TEST(gpt_new_keys_at_todays_values_keep_the_bits) {
    const char *pairs[][2] = {
        {"", "n_kv_head = 2\nintermediate_size = 32\nattn_bias = qkv_o"},
        {"norm = gain_only_layernorm\nmlp = swiglu\npos = rope\nqk_norm = true\n"
         "tie_embeddings = false\nbias = false\ninit = open_lm",
         "norm = gain_only_layernorm\nmlp = swiglu\npos = rope\nqk_norm = true\n"
         "tie_embeddings = false\nbias = false\ninit = open_lm\nn_kv_head = 2\n"
         "intermediate_size = 256\nattn_bias = none\nrope_scaling = linear\nrope_factor = 1"},
    };
    for (int v = 0; v < 2; v++) {
        fixture a, b;
        if (!fixture_new(&a, pairs[v][0]) || !fixture_new(&b, pairs[v][1])) {
            fixture_free(&a);
            fixture_free(&b);
            continue;
        }
        CT_CHECK_INT(a.d.n_params, b.d.n_params);
        forward(&a, CT_DTYPE_F32);
        forward(&b, CT_DTYPE_F32);
        CT_CHECK_MSG(!memcmp(a.logits, b.logits, (size_t)a.n_logits * sizeof(float)),
                     "{%s}: logits differ", pairs[v][1]);
        backward(&a, CT_DTYPE_F32, CT_DTYPE_F32);
        backward(&b, CT_DTYPE_F32, CT_DTYPE_F32);
        for (uint32_t u = 0; u < a.d.n_units; u++)
            CT_CHECK_MSG(!memcmp(a.g32[u], b.g32[u], a.numel[u] * sizeof(float)),
                         "{%s}: unit %u gradients differ", pairs[v][1], u);
        fixture_free(&a);
        fixture_free(&b);
    }
}

/* backward ADDS: two identical micro-batches give twice the gradient of one. */
CT_TEST(gpt_backward_adds_into_grads) {
    fixture f;
    if (!fixture_new(&f, "tie_embeddings = false")) goto out;
    forward(&f, CT_DTYPE_F32);
    backward(&f, CT_DTYPE_F32, CT_DTYPE_F32);
    float *once[MAXU];
    for (uint32_t u = 0; u < f.d.n_units; u++) {
        once[u] = malloc(f.numel[u] * sizeof(float));
        memcpy(once[u], f.g32[u], f.numel[u] * sizeof(float));
    }
    forward(&f, CT_DTYPE_F32);
    backward(&f, CT_DTYPE_F32, CT_DTYPE_F32);
    for (uint32_t u = 0; u < f.d.n_units; u++) {
        for (uint64_t i = 0; i < f.numel[u]; i++)
            if (f.g32[u][i] != 2.0f * once[u][i]) {
                CT_CHECK_MSG(0, "unit %u element %llu: %.9g after two passes, %.9g after one", u,
                             (unsigned long long)i, f.g32[u][i], once[u][i]);
                break;
            }
        free(once[u]);
    }
out:
    fixture_free(&f);
}

/* bf16 params: each logit is a bf16 value, and the logits agree with an f32 forward of the
 * same (bf16-valued) weights to within bf16 accuracy: max |diff| <= 2^-5 * max |logit| (a few
 * roundings of 2^-9 relative along the layers), yet are not identical (rounding happened). */
CT_TEST(gpt_bf16_forward_is_bf16_and_close_to_f32) {
    const char *variants[] = {"", "norm = gain_only_layernorm\nmlp = swiglu\npos = rope\n"
                                  "qk_norm = true\ntie_embeddings = false\nbias = false",
                              "n_kv_head = 1\nnorm = rmsnorm\nmlp = swiglu\npos = rope\n"
                              "bias = false\nattn_bias = qkv\nintermediate_size = 12"};
    for (int vi = 0; vi < 3; vi++) {
        fixture f;
        if (!fixture_new(&f, variants[vi])) {
            fixture_free(&f);
            continue;
        }
        round_params(&f);
        for (uint32_t u = 0; u < f.d.n_units; u++) /* f32 copy of the same bf16 weights */
            for (uint64_t i = 0; i < f.numel[u]; i++) f.p32[u][i] = ct_bf16_to_f32(f.p16[u][i]);
        forward(&f, CT_DTYPE_BF16);
        float lb[TN * TV];
        memcpy(lb, f.logits, sizeof lb);
        int not_bf16 = 0;
        for (int i = 0; i < TN * TV; i++) not_bf16 += lb[i] != ct_round_bf16(lb[i]);
        CT_CHECK_INT(not_bf16, 0);
        forward(&f, CT_DTYPE_F32);
        double maxabs = 0, maxdiff = 0;
        for (int i = 0; i < TN * TV; i++) {
            maxabs = fmax(maxabs, fabs(f.logits[i]));
            maxdiff = fmax(maxdiff, fabs(f.logits[i] - lb[i]));
        }
        CT_CHECK_MSG(maxdiff <= maxabs / 32, "{%s} bf16 vs f32 logits differ by %.4g (max |logit| "
                     "%.4g)", variants[vi], maxdiff, maxabs);
        CT_CHECK_MSG(maxdiff > 0, "{%s} bf16 logits equal the f32 ones: nothing was rounded",
                     variants[vi]);
        fixture_free(&f);
    }
}

/* bf16 params with bf16 gradients (pure_bf16) or f32 gradients (amp): each unit's gradient is
 * within 5% (relative L2) of the f32 gradient of the same weights, and not equal to it. */
static void bf16_backward_check(const char *keys) {
    fixture f;
    if (!fixture_new(&f, keys)) goto out;
    round_params(&f);
    for (uint32_t u = 0; u < f.d.n_units; u++)
        for (uint64_t i = 0; i < f.numel[u]; i++) f.p32[u][i] = ct_bf16_to_f32(f.p16[u][i]);
    forward(&f, CT_DTYPE_BF16);
    backward(&f, CT_DTYPE_BF16, CT_DTYPE_BF16); /* pure bf16: into g16 */
    backward(&f, CT_DTYPE_BF16, CT_DTYPE_F32);  /* amp: bf16 compute, f32 gradient, into g32 */
    float *amp[MAXU];
    for (uint32_t u = 0; u < f.d.n_units; u++) {
        amp[u] = malloc(f.numel[u] * sizeof(float));
        memcpy(amp[u], f.g32[u], f.numel[u] * sizeof(float));
        memset(f.g32[u], 0, f.numel[u] * sizeof(float));
    }
    forward(&f, CT_DTYPE_F32);
    backward(&f, CT_DTYPE_F32, CT_DTYPE_F32);
    for (uint32_t u = 0; u < f.d.n_units; u++) {
        double num = 0, num_amp = 0, den = 0;
        for (uint64_t i = 0; i < f.numel[u]; i++) {
            double d = ct_bf16_to_f32(f.g16[u][i]) - (double)f.g32[u][i];
            double da = (double)amp[u][i] - (double)f.g32[u][i];
            num += d * d;
            num_amp += da * da;
            den += (double)f.g32[u][i] * f.g32[u][i];
        }
        CT_CHECK_MSG(den > 0 && sqrt(num / den) < 0.05, "unit %s: bf16 gradient off by %.3g "
                     "(relative L2) from f32", f.d.units[u].name, sqrt(num / fmax(den, 1e-30)));
        CT_CHECK_MSG(den > 0 && sqrt(num_amp / den) < 0.05, "unit %s: amp gradient off by %.3g "
                     "(relative L2) from f32", f.d.units[u].name, sqrt(num_amp / fmax(den, 1e-30)));
        CT_CHECK_MSG(num_amp > 0, "unit %s: amp gradient equals the f32 one: nothing was rounded",
                     f.d.units[u].name);
        free(amp[u]);
    }
out:
    fixture_free(&f);
}

CT_TEST(gpt_bf16_backward_close_to_f32) {
    bf16_backward_check("tie_embeddings = false\nqk_norm = true\npos = rope");
    bf16_backward_check("n_kv_head = 1\nqk_norm = true\npos = rope\nbias = false\n"
                        "attn_bias = qkv"); /* multi-query: both heads add into one dK, dV */
}

/* Products big enough to be split over threads (gpt_sgemm) and attention spread over threads
 * give the logits and gradients of one thread (plain OpenBLAS calls), up to f32 summation
 * order: |diff| <= 1e-4 * max |value| per unit. */
static void forward_backward_wide(fixture *f, const char *keys, int threads) {
    shape wide = {2, 72, 300, 64, 4, threads}; /* 72 > GPT_ATT_QB: two query blocks */
    if (!fixture_shaped(f, keys, wide)) return;
    forward(f, CT_DTYPE_F32);
    backward(f, CT_DTYPE_F32, CT_DTYPE_F32);
}

static double max_abs(const float *x, uint64_t n) {
    double m = 0;
    for (uint64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

CT_TEST(gpt_threaded_products_match_one_thread) {
    const char *variants[] = {"", "norm = rmsnorm\nmlp = swiglu\npos = rope\nqk_norm = true\n"
                                  "tie_embeddings = false\nbias = false",
                              "n_kv_head = 2\nnorm = rmsnorm\nmlp = swiglu\npos = rope\n"
                              "bias = false\nattn_bias = qkv\nrope_scaling = llama3\n"
                              "rope_factor = 8\nrope_original_max_position = 16"};
    for (int vi = 0; vi < 3; vi++) {
        fixture one, two;
        forward_backward_wide(&one, variants[vi], 1);
        forward_backward_wide(&two, variants[vi], 2);
        if (one.h && two.h) {
            double lm = max_abs(one.logits, (uint64_t)one.n_logits), ld = 0;
            for (int i = 0; i < one.n_logits; i++) ld = fmax(ld, fabs(one.logits[i] - two.logits[i]));
            CT_CHECK_MSG(lm > 0 && ld <= 1e-4 * lm, "{%s} logits: 2 threads differ by %.3g (max %.3g)",
                         variants[vi], ld, lm);
            for (uint32_t u = 0; u < one.d.n_units; u++) {
                double gm = max_abs(one.g32[u], one.numel[u]), gd = 0;
                for (uint64_t i = 0; i < one.numel[u]; i++)
                    gd = fmax(gd, fabs(one.g32[u][i] - two.g32[u][i]));
                CT_CHECK_MSG(gm > 0 && gd <= 1e-4 * gm, "{%s} unit %s: 2 threads differ by %.3g "
                             "(max %.3g)", variants[vi], one.d.units[u].name, gd, gm);
            }
        }
        fixture_free(&one);
        fixture_free(&two);
    }
}

/* ---- description ---------------------------------------------------------------------- */

static const ct_tensor_spec *find_tensor(const ct_model_desc *d, const char *name, uint32_t *unit) {
    for (uint32_t u = 0; u < d->n_units; u++)
        for (uint32_t k = 0; k < d->units[u].n_tensors; k++)
            if (strcmp(d->units[u].tensors[k].name, name) == 0) {
                if (unit) *unit = u;
                return &d->units[u].tensors[k];
            }
    return NULL;
}

/* GPT-2 small has 124,439,808 parameters (tied head); units root + 12 blocks; stages embed,
 * block.0..11, head; head tensor = wte; init N(0,0.02), output projections 0.02/sqrt(24). */
CT_TEST(gpt_describes_gpt2_124m) {
    ct_harness *h = harness_new("[model]\nn_layer = 12\nn_head = 12\nd_model = 768\n"
                                "vocab_size = 50257\nseq_len = 1024\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {sizeof err, 0, {0}};
    if (harness_create(h, "model_gpt.so", "model", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create: %s", err.message);
        harness_free(h);
        return;
    }
    const ct_model_vtable *vt = p.vt;
    ct_model_desc d = {.struct_size = sizeof d};
    CT_CHECK_INT(vt->describe(p.self, &d, &err), CT_OK);
    CT_CHECK_INT(d.n_params, 124439808);
    CT_CHECK_INT(d.n_units, 13);
    CT_CHECK_INT(d.n_stages, 14);
    CT_CHECK(strcmp(d.stages[0].name, "embed") == 0 && d.stages[0].unit == 0);
    CT_CHECK(strcmp(d.stages[13].name, "head") == 0 && d.stages[13].unit == 0);
    CT_CHECK(strcmp(d.stages[5].name, "block.4") == 0 && d.stages[5].unit == 5);
    CT_CHECK(strcmp(d.units[0].tensors[d.head_tensor].name, "wte.weight") == 0);
    CT_CHECK_INT(d.head_unit, 0);
    CT_CHECK_INT(d.vocab_size, 50257);
    const ct_tensor_spec *t = find_tensor(&d, "blocks.3.attn.proj.weight", NULL);
    CT_CHECK(t && t->init == CT_INIT_NORMAL);
    if (t) CT_CHECK_CLOSE(t->init_std, 0.02 / sqrt(24.0), 1e-6, 0);
    t = find_tensor(&d, "blocks.3.mlp.fc.weight", NULL);
    CT_CHECK(t && t->shape[0] == 3072 && t->shape[1] == 768 && t->decay == 1);
    if (t) CT_CHECK_CLOSE(t->init_std, 0.02, 1e-6, 0);
    t = find_tensor(&d, "blocks.0.ln1.bias", NULL);
    CT_CHECK(t && t->init == CT_INIT_ZEROS && t->decay == 0);
    harness_free(h);
}

/* open_lm 79m: swiglu hidden 256*ceil(int(8*512/3)/256) = 1536; untied head; trunc normal
 * 1/sqrt(512), out projections / sqrt(2(layer+1)), w3 1/sqrt(1536)/sqrt(2(layer+1)). */
CT_TEST(gpt_describes_open_lm_79m) {
    ct_harness *h = harness_new("[model]\nn_layer = 8\nn_head = 4\nd_model = 512\n"
                                "vocab_size = 50432\nseq_len = 2048\nnorm = gain_only_layernorm\n"
                                "mlp = swiglu\npos = rope\nqk_norm = true\ntie_embeddings = false\n"
                                "bias = false\ninit = open_lm\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {sizeof err, 0, {0}};
    if (harness_create(h, "model_gpt.so", "model", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create: %s", err.message);
        harness_free(h);
        return;
    }
    const ct_model_vtable *vt = p.vt;
    ct_model_desc d = {.struct_size = sizeof d};
    CT_CHECK_INT(vt->describe(p.self, &d, &err), CT_OK);
    uint64_t C = 512, F = 1536, V = 50432, L = 8;
    uint64_t per_block = 2 * C /* ln gains */ + 3 * C * C + 2 * C /* q,k norm gains */ + C * C +
                         2 * F * C + C * F;
    CT_CHECK_INT(d.n_params, 2 * V * C + C + L * per_block);
    CT_CHECK(strcmp(d.units[0].tensors[d.head_tensor].name, "lm_head.weight") == 0);
    const ct_tensor_spec *t = find_tensor(&d, "blocks.2.mlp.fc.weight", NULL);
    CT_CHECK(t && t->shape[0] == 2 * (int64_t)F && t->init == CT_INIT_TRUNC_NORMAL);
    if (t) CT_CHECK_CLOSE(t->init_std, 1 / sqrt(512.0), 1e-6, 0);
    t = find_tensor(&d, "blocks.2.mlp.proj.weight", NULL);
    if (t) CT_CHECK_CLOSE(t->init_std, 1 / sqrt(1536.0) / sqrt(6.0), 1e-6, 0);
    t = find_tensor(&d, "blocks.2.attn.proj.weight", NULL);
    if (t) CT_CHECK_CLOSE(t->init_std, 1 / sqrt(512.0) / sqrt(6.0), 1e-6, 0);
    CT_CHECK(find_tensor(&d, "blocks.0.ln1.bias", NULL) == NULL);
    CT_CHECK(find_tensor(&d, "wpe.weight", NULL) == NULL);
    harness_free(h);
}

/* Llama-3-8B's shape: 32 heads over 8 key/value heads (qkv 4096 + 2*1024 rows), an MLP 14336
 * wide, untied: 8,030,261,248 parameters as Meta's model card counts them; and Qwen2-0.5B's
 * q/k/v biases without an output bias, tied head: 494,032,768. */
CT_TEST(gpt_describes_llama3_8b_and_qwen2_05b) {
    static const struct { const char *ini; uint64_t params; int64_t qkv_rows; int qkv_b, proj_b; }
        cases[] = {
        {"[model]\nn_layer = 32\nn_head = 32\nn_kv_head = 8\nd_model = 4096\n"
         "vocab_size = 128256\nseq_len = 8192\nnorm = rmsnorm\nmlp = swiglu\npos = rope\n"
         "intermediate_size = 14336\nbias = false\ntie_embeddings = false\n",
         8030261248ull, 4096 + 2 * 1024, 0, 0},
        {"[model]\nn_layer = 24\nn_head = 14\nn_kv_head = 2\nd_model = 896\n"
         "vocab_size = 151936\nseq_len = 4096\nnorm = rmsnorm\nmlp = swiglu\npos = rope\n"
         "intermediate_size = 4864\nbias = false\nattn_bias = qkv\ntie_embeddings = true\n",
         494032768ull, 896 + 2 * 128, 1, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ct_harness *h = harness_new(cases[c].ini);
        if (!h) return;
        ct_harness_plugin p;
        ct_error err = {sizeof err, 0, {0}};
        if (harness_create(h, "model_gpt.so", "model", &p, &err) != CT_OK) {
            CT_CHECK_MSG(0, "create: %s", err.message);
            harness_free(h);
            return;
        }
        ct_model_desc d = {.struct_size = sizeof d};
        CT_CHECK_INT(((const ct_model_vtable *)p.vt)->describe(p.self, &d, &err), CT_OK);
        CT_CHECK_INT(d.n_params, cases[c].params);
        const ct_tensor_spec *t = find_tensor(&d, "blocks.3.attn.qkv.weight", NULL);
        CT_CHECK(t && t->shape[0] == cases[c].qkv_rows);
        CT_CHECK((find_tensor(&d, "blocks.3.attn.qkv.bias", NULL) != NULL) == cases[c].qkv_b);
        CT_CHECK((find_tensor(&d, "blocks.3.attn.proj.bias", NULL) != NULL) == cases[c].proj_b);
        CT_CHECK(find_tensor(&d, "blocks.3.mlp.fc.bias", NULL) == NULL);
        harness_free(h);
    }
}

/* ---- errors --------------------------------------------------------------------------- */

static void expect_create_error(const char *keys, const char *needle) {
    char ini[512];
    snprintf(ini, sizeof ini, "[model]\n%s\n", keys);
    ct_harness *h = harness_new(ini);
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {sizeof err, 0, {0}};
    int32_t rc = harness_create(h, "model_gpt.so", "model", &p, &err);
    CT_CHECK_MSG(rc != CT_OK, "{%s} was accepted", keys);
    CT_CHECK_STR_CONTAINS(err.message, needle);
    harness_free(h);
}

CT_TEST(gpt_rejects_bad_shapes_naming_the_key) {
    expect_create_error("n_head = 3\nd_model = 8", "n_head");
    expect_create_error("n_head = 2\nd_model = 6\npos = rope", "rope");
    expect_create_error("n_head = 4\nd_model = 8\nn_kv_head = 3", "n_kv_head = 3 must divide "
                        "n_head = 4");
    expect_create_error("pos = rope\nrope_scaling = llama3\nrope_low_freq_factor = 4\n"
                        "rope_high_freq_factor = 2", "rope_high_freq_factor");
    expect_create_error("attn_bias = some", "attn_bias");
}

CT_TEST(gpt_rejects_out_of_vocabulary_token) {
    fixture f;
    if (!fixture_new(&f, "")) goto out;
    f.tokens[4] = TV;
    ct_error err = {sizeof err, 0, {0}};
    CT_CHECK_INT(f.vt->prepare(f.self, TB, TT, CT_DTYPE_F32, &err), CT_OK);
    ct_stage_args a = {.struct_size = sizeof a, .stage = 0, .params = f.p32[0],
                       .param_dtype = CT_DTYPE_F32, .grad_dtype = CT_DTYPE_F32,
                       .tokens = f.tokens};
    CT_CHECK(f.vt->forward(f.self, &a, &err) == CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "position 4");
    CT_CHECK(f.vt->prepare(f.self, TB, 8, CT_DTYPE_F32, &err) == CT_ERR_INVALID); /* seq_len 7 */
    CT_CHECK_STR_CONTAINS(err.message, "seq_len");
out:
    fixture_free(&f);
}

/* ---- presets -------------------------------------------------------------------------- */

/* The files of ini/presets create a model whose parameter count matches the formula
 * V*C*(tied ? 1 : 2) + [wpe] + final norm + L * block, with open_lm's SwiGLU width
 * F = 256*ceil(int(8C/3)/256); open_lm's names (11m, 79m, 154m, 411m) round these counts. */
static void check_preset(const char *file, int openlm, int64_t L, int64_t C, int64_t V,
                         double expect_millions) {
    char path[1024], text[4096];
    snprintf(path, sizeof path, "%s/../../ini/presets/%s", ct_test_plugin_dir(), file);
    FILE *fp = fopen(path, "r");
    CT_CHECK_MSG(fp != NULL, "cannot open %s", path);
    if (!fp) return;
    size_t len = 0;
    char line[512];
    while (fgets(line, sizeof line, fp)) /* the host consumes `plugin`; the schema does not list it */
        if (strncmp(line, "plugin", 6) != 0 && len + strlen(line) < sizeof text) {
            memcpy(text + len, line, strlen(line));
            len += strlen(line);
        }
    text[len] = 0;
    fclose(fp);
    ct_harness *h = harness_new(text);
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {sizeof err, 0, {0}};
    if (harness_create(h, "model_gpt.so", "model", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "%s: %s", file, err.message);
        harness_free(h);
        return;
    }
    ct_model_desc d = {.struct_size = sizeof d};
    CT_CHECK_INT(((const ct_model_vtable *)p.vt)->describe(p.self, &d, &err), CT_OK);
    uint64_t expect;
    if (openlm) {
        int64_t F = 256 * (((8 * C) / 3 + 255) / 256);
        expect = (uint64_t)(2 * V * C + C + L * (2 * C + 3 * C * C + 2 * C + C * C + 3 * F * C));
    } else { /* gpt2: wpe (1024,C), layernorms with bias, biases everywhere, tied */
        int64_t F = 4 * C;
        expect = (uint64_t)(V * C + 1024 * C + 2 * C +
                            L * (4 * C + 3 * C * C + 3 * C + C * C + C + 2 * F * C + F + C));
    }
    CT_CHECK_INT(d.n_params, expect);
    CT_CHECK_MSG(fabs((double)d.n_params / 1e6 - expect_millions) < 0.05 * expect_millions,
                 "%s: %.1fM parameters, its name says %.0fM", file, (double)d.n_params / 1e6,
                 expect_millions);
    harness_free(h);
}

CT_TEST(gpt_presets_have_their_parameter_counts) {
    check_preset("gpt2-124m.ini", 0, 12, 768, 50257, 124);
    check_preset("openlm-11m.ini", 1, 8, 96, 50432, 11);
    check_preset("openlm-79m.ini", 1, 8, 512, 50432, 79);
    check_preset("openlm-154m.ini", 1, 24, 576, 50432, 154);
    check_preset("openlm-411m.ini", 1, 24, 1024, 50432, 411);
}
