/* test_decode.c — claims about incremental decoding (ct_model_vtable.prepare_decode/decode) of
 * the gpt plugin: greedy decoding with the key/value cache chooses exactly the tokens that
 * recomputing the whole window with forward() chooses, and the logits of the last position
 * agree within 1e-5 (relative to the row's largest logit), for learned and rope positions and
 * every norm/mlp/qk-norm/tying variant; a wrong position or an overfull cache is an error.
 * Legend: T context (seq_len), V vocabulary, C channels.
 */
#include "ct_test.h"
#include "harness.h"

#include <ctrain/numerics.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DT = 20, DV = 37, DC = 16, MAXU = 8, PROMPT = 3, GEN = 14 };

typedef struct {
    ct_harness            *h;
    const ct_model_vtable *vt;
    void                  *self;
    ct_model_desc          d;
    float                 *p[MAXU];
} model;

static int model_new(model *m, const char *keys) {
    memset(m, 0, sizeof *m);
    char ini[1024];
    snprintf(ini, sizeof ini, "[model]\nn_layer = 2\n%sd_model = %d\nvocab_size = %d\n"
             "seq_len = %d\n%s\n[device]\nthreads = 2\n", strstr(keys, "n_head") ? "" :
             "n_head = 2\n", DC, DV, DT, keys);
    m->h = harness_new(ini);
    if (!m->h) return 0;
    ct_harness_plugin hp;
    ct_error err = {sizeof err, 0, {0}};
    if (harness_create(m->h, "model_gpt.so", "model", &hp, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create model gpt with {%s}: %s", keys, err.message);
        return 0;
    }
    m->vt = hp.vt;
    m->self = hp.self;
    m->d.struct_size = sizeof m->d;
    CT_CHECK_INT(m->vt->describe(m->self, &m->d, &err), CT_OK);
    for (uint32_t u = 0; u < m->d.n_units && u < MAXU; u++) {
        const ct_unit_spec *us = &m->d.units[u];
        uint64_t off = 0;
        for (uint32_t k = 0; k < us->n_tensors; k++)
            off += ct_align_up(ct_tensor_numel(&us->tensors[k]), CT_TENSOR_ALIGN);
        m->p[u] = calloc(off, sizeof(float));
        off = 0;
        for (uint32_t k = 0; k < us->n_tensors; k++) {
            const ct_tensor_spec *t = &us->tensors[k];
            uint64_t n = ct_tensor_numel(t);
            for (uint64_t i = 0; i < n; i++) {
                double r = 2.0 * ct_uniform01(1000 * u + k, i) - 1.0;
                m->p[u][off + i] = (float)(t->init == CT_INIT_ONES    ? 1.0 + 0.2 * r
                                           : t->init == CT_INIT_ZEROS ? 0.2 * r
                                                                      : 0.5 * r);
            }
            off += ct_align_up(n, CT_TENSOR_ALIGN);
        }
    }
    return 1;
}

static void model_free(model *m) {
    for (int u = 0; u < MAXU; u++) free(m->p[u]);
    if (m->h) harness_free(m->h);
}

/* Logits (V) of position n-1 from forward() over the window seq[0..n) padded to DT. */
static int logits_forward(model *m, const int32_t *seq, int n, float *out) {
    static float all[DT * DV];
    int32_t tok[DT] = {0};
    memcpy(tok, seq, (size_t)n * sizeof *seq);
    ct_error err = {sizeof err, 0, {0}};
    for (uint32_t s = 0; s < m->d.n_stages; s++) {
        ct_stage_args a = {.struct_size = sizeof a, .stage = (int32_t)s,
                           .params = m->p[m->d.stages[s].unit], .param_dtype = CT_DTYPE_F32,
                           .grad_dtype = CT_DTYPE_F32, .tokens = tok, .logits = all};
        if (m->vt->forward(m->self, &a, &err) != CT_OK) {
            CT_CHECK_MSG(0, "forward stage %u: %s", s, err.message);
            return 0;
        }
    }
    memcpy(out, all + (n - 1) * DV, DV * sizeof *out);
    return 1;
}

static int argmax(const float *x) {
    int b = 0;
    for (int j = 1; j < DV; j++)
        if (x[j] > x[b]) b = j;
    return b;
}

static void check_variant(const char *keys) {
    model m;
    if (!model_new(&m, keys)) goto out;
    ct_error err = {sizeof err, 0, {0}};
    CT_CHECK_MSG(m.vt->prepare_decode && m.vt->decode, "{%s}: decode not provided", keys);
    CT_CHECK_INT(m.vt->prepare(m.self, 1, DT, CT_DTYPE_F32, &err), CT_OK);
    CT_CHECK_INT(m.vt->prepare_decode(m.self, DT, CT_DTYPE_F32, &err), CT_OK);
    int32_t a[PROMPT + GEN], b[PROMPT + GEN];
    for (int i = 0; i < PROMPT; i++) a[i] = b[i] = (int32_t)(ct_hash64(3, (uint64_t)i) % DV);
    float la[DV], lb[DV];
    const void *params[MAXU];
    for (int u = 0; u < MAXU; u++) params[u] = m.p[u];
    double worst = 0, moved = 0;
    float prev[DV];
    int same = 1;
    char flat[256];
    snprintf(flat, sizeof flat, "%s", keys);
    for (char *c = flat; *c; c++)
        if (*c == '\n') *c = ',';
    for (int n = PROMPT; n < PROMPT + GEN; n++) {
        if (!logits_forward(&m, a, n, la)) goto out;
        int first = n == PROMPT;
        ct_decode_args d = {.struct_size = sizeof d, .params = params,
                            .param_dtype = CT_DTYPE_F32, .tokens = first ? b : b + n - 1,
                            .n_new = first ? PROMPT : 1, .position = first ? 0 : n - 1,
                            .logits = lb};
        int32_t rc = m.vt->decode(m.self, &d, &err);
        CT_CHECK_MSG(rc == CT_OK, "{%s}: decode at %d: %s", keys, n, err.message);
        if (rc != CT_OK) goto out;
        double mx = 0, diff = 0;
        for (int j = 0; j < DV; j++) {
            mx = fmax(mx, fabs(la[j]));
            diff = fmax(diff, fabs((double)la[j] - lb[j]));
        }
        worst = fmax(worst, diff / mx);
        if (!first)
            for (int j = 0; j < DV; j++) moved = fmax(moved, fabs((double)prev[j] - lb[j]));
        memcpy(prev, lb, sizeof prev);
        a[n] = argmax(la);
        b[n] = argmax(lb);
        same &= a[n] == b[n];
    }
    CT_CHECK_MSG(same, "{%s}: greedy tokens differ between forward() and decode()", keys);
    CT_CHECK_MSG(worst <= 1e-5, "{%s}: last-position logits: expected relative difference "
                 "<= 1e-5, got %.3g", keys, worst);
    /* the logits move from position to position (a cache that ignored the new token or its
     * position would give the same row every time) */
    CT_CHECK_MSG(moved > 1e-3, "{%s}: logits change by at most %.3g between positions: the "
                 "test proves little", keys, moved);
    printf("  %s: %d greedy tokens equal, logits within %.2g\n", flat, GEN, worst);
out:
    model_free(&m);
}

CT_TEST(decode_with_the_cache_matches_forward_learned_positions) {
    check_variant("pos = learned");
    check_variant("pos = learned\nnorm = rmsnorm\nmlp = swiglu\ntie_embeddings = false\nbias = false");
}

CT_TEST(decode_with_the_cache_matches_forward_rope_positions) {
    check_variant("pos = rope");
    check_variant("pos = rope\nnorm = gain_only_layernorm\nmlp = swiglu\nqk_norm = true\n"
                  "tie_embeddings = false\nbias = false");
}

/* Grouped-query and multi-query attention: the cache holds the key heads only (KVH of NH) */
CT_TEST(decode_with_the_cache_matches_forward_grouped_query) {
    check_variant("n_head = 4\nn_kv_head = 2\npos = rope\nnorm = rmsnorm\nmlp = swiglu\n"
                  "bias = false\ntie_embeddings = false\nintermediate_size = 24\n"
                  "rope_scaling = llama3\nrope_factor = 8\nrope_original_max_position = 8");
    check_variant("n_head = 4\nn_kv_head = 1\npos = rope\nbias = false\nattn_bias = qkv\n"
                  "qk_norm = true");
    check_variant("n_head = 4\nn_kv_head = 2\npos = learned");
}

CT_TEST(decode_refuses_a_wrong_position_and_an_overfull_cache) {
    model m;
    if (!model_new(&m, "pos = rope")) goto out;
    ct_error err = {sizeof err, 0, {0}};
    const void *params[MAXU];
    for (int u = 0; u < MAXU; u++) params[u] = m.p[u];
    int32_t tok[DT + 1] = {0};
    float lg[DV];
    ct_decode_args d = {.struct_size = sizeof d, .params = params, .param_dtype = CT_DTYPE_F32,
                        .tokens = tok, .n_new = 2, .position = 0, .logits = lg};
    CT_CHECK_INT(m.vt->decode(m.self, &d, &err), CT_ERR_INVALID); /* before prepare_decode */
    CT_CHECK_INT(m.vt->prepare_decode(m.self, DT + 1, CT_DTYPE_F32, &err), CT_ERR_INVALID);
    CT_CHECK_INT(m.vt->prepare_decode(m.self, 8, CT_DTYPE_F32, &err), CT_OK);
    CT_CHECK_INT(m.vt->decode(m.self, &d, &err), CT_OK);
    d.position = 3; /* the cache holds 2 */
    CT_CHECK_INT(m.vt->decode(m.self, &d, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "the cache holds 2 tokens");
    d.position = 2;
    d.n_new = 7; /* 2 + 7 > 8 */
    CT_CHECK_INT(m.vt->decode(m.self, &d, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "exceeds the cache of 8 tokens");
    d.n_new = 6;
    CT_CHECK_INT(m.vt->decode(m.self, &d, &err), CT_OK);
out:
    model_free(&m);
}
