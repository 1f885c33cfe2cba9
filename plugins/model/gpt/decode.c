/* decode.c — incremental decoding of the gpt plugin on the CPU (ct_model_vtable.prepare_decode
 * and decode): new tokens run through every block against a key/value cache of the earlier
 * positions, so a sampler pays one row per token instead of the whole window.
 * Not for: training (stages.c) — nothing here touches the activation buffers of prepare().
 *
 * The arithmetic is the forward of stages.c restricted to the new rows: the same kernels
 * (layers.c), the same bf16 roundings, the same attention formula (scores scaled, row
 * log-sum-exp, probabilities rounded in bf16, then P V), so the logits agree with forward()'s
 * up to summation order. The cache holds keys after qk-norm and rope, as attention reads them:
 * KVH heads a position (KC floats), so grouped-query attention caches NH/KVH times less.
 * Shape legend: see gpt.h; n is the number of new rows, P the positions cached before them.
 */
#include "gpt.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

void gpt_decode_free(gpt *m) {
    if (m->dec_arena) m->api->free_mem(m->host, m->dec_arena);
    m->dec_arena = NULL;
    m->dec_max_T = m->dec_len = 0;
}

/* Carve n floats (64-byte aligned) from the arena cursor; with base == NULL only count. */
static float *carve(char *base, uint64_t *cursor, uint64_t n) {
    uint64_t at = *cursor;
    *cursor += ct_align_up(n * sizeof(float), 64);
    return base ? (float *)(base + at) : NULL;
}

static uint64_t layout(gpt *m, char *base, int64_t T, int32_t dtype) {
    uint64_t c = 0, C = (uint64_t)m->C, F = (uint64_t)m->F, t = (uint64_t)T;
    uint64_t FH = m->mlp == GPT_MLP_SWIGLU ? 2 * F : F, KC = (uint64_t)m->KC, QW = (uint64_t)m->QW;
    m->dec_k = carve(base, &c, (uint64_t)m->L * t * KC);
    m->dec_v = carve(base, &c, (uint64_t)m->L * t * KC);
    m->dec_x = carve(base, &c, t * C);
    m->dec_xmid = carve(base, &c, t * C);
    m->dec_ln = carve(base, &c, t * C);
    m->dec_tmp = carve(base, &c, t * C);
    m->dec_att = carve(base, &c, t * C);
    m->dec_qkv = carve(base, &c, t * QW);
    m->dec_qkv_att = carve(base, &c, t * QW);
    m->dec_h = carve(base, &c, t * FH);
    m->dec_g = carve(base, &c, t * F);
    m->dec_mean = carve(base, &c, t);
    m->dec_rstd = carve(base, &c, t);
    m->dec_s = carve(base, &c, (uint64_t)m->threads * t);
    m->dec_wbuf = dtype != CT_DTYPE_F32 ? carve(base, &c, m->unit_numel_max) : NULL;
    return c;
}

int32_t gpt_prepare_decode(void *self, int64_t max_T, int32_t dtype, ct_error *err) {
    gpt *m = self;
    if (m->on_cuda)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: incremental decoding runs on "
                            "the CPU only (the host recomputes with forward() on CUDA)");
    if (max_T < 1 || max_T > m->max_T)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: prepare_decode(max_T=%lld): max_T "
                            "must be in 1..seq_len=%lld", (long long)max_T, (long long)m->max_T);
    if (dtype != CT_DTYPE_F32 && dtype != CT_DTYPE_BF16 && dtype != CT_DTYPE_F16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: compute dtype %s is not "
                            "supported ---> use f32, bf16 or f16", ct_dtype_name(dtype));
    gpt_decode_free(m);
    uint64_t bytes = layout(m, NULL, max_T, dtype);
    m->dec_arena = m->api->alloc(m->host, bytes);
    if (!m->dec_arena)
        return ct_error_set(err, CT_ERR_NOMEM, "model gpt: cannot allocate %.1f MiB for a "
                            "key/value cache of %lld tokens", (double)bytes / 1048576.0,
                            (long long)max_T);
    layout(m, m->dec_arena, max_T, dtype);
    m->dec_max_T = max_T;
    m->dec_dtype = dtype;
    m->dec_len = 0;
    return CT_OK;
}

/* y (n,M) = x (n,K) W^T + b. One row (a token at a time) is a matrix-vector product: sgemm
 * would pack all of W for it, which costs more than the product. */
static void linear(gpt *m, float *y, const float *x, const float *w, const float *b,
                   int64_t n, int64_t K, int64_t M) {
    if (n > 1) {
        gpt_linear_forward(m, y, x, w, NULL, b, n, K, M); /* f32 weights: OpenBLAS */
        return;
    }
    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)M, (int)K, 1.0f, w, (int)K, x, 1, 0.0f, y, 1);
    if (b)
        for (int64_t j = 0; j < M; j++) y[j] += b[j];
}

/* bf16 storage of an activation buffer (a no-op in f32), as stages.c's store(). */
static void store(const gpt *m, float *x, int64_t n) {
    if (m->bf16) gpt_round_bf16(m, x, n);
}

static inline float param_at(const ct_stage_args *a, int64_t off) {
    if (a->param_dtype == CT_DTYPE_F32) return ((const float *)a->params)[off];
    return gpt_h16_to_f32(a->param_dtype, ((const uint16_t *)a->params)[off]);
}

/* x (n,C) = wte[tokens] (+ wpe[P + i]) */
static void embed(gpt *m, const ct_stage_args *a, const int32_t *tokens, int64_t n, int64_t P) {
    int64_t C = m->C;
    for (int64_t i = 0; i < n; i++) {
        int64_t te = m->root.wte + (int64_t)tokens[i] * C;
        int64_t pe = m->root.wpe >= 0 ? m->root.wpe + (P + i) * C : -1;
        for (int64_t k = 0; k < C; k++)
            m->dec_x[i * C + k] = param_at(a, te + k) + (pe >= 0 ? param_at(a, pe + k) : 0.0f);
    }
    store(m, m->dec_x, n * C);
}

/* Rotary embedding of the q and k parts of qkv (n,QW) at positions P..P+n-1 (gpt_rope's
 * rotation, with the position taken from P instead of the row's place in a window). */
static void rope_at(const gpt *m, float *qkv, int64_t n, int64_t P) {
    int64_t C = m->C, HD = m->HD, half = HD / 2, QW = m->QW;
    for (int64_t i = 0; i < n; i++) {
        const float *cs = m->rope_cos + (P + i) * half, *sn = m->rope_sin + (P + i) * half;
        for (int64_t part = 0; part < 2; part++) /* q (NH heads), then k (KVH heads) */
            for (int64_t h = 0; h < (part ? m->KVH : m->NH); h++) {
                float *x = qkv + i * QW + part * C + h * HD;
                for (int64_t d = 0; d < half; d++) {
                    float x1 = x[d], x2 = x[d + half];
                    x[d] = x1 * cs[d] - x2 * sn[d];
                    x[d + half] = x2 * cs[d] + x1 * sn[d];
                }
            }
    }
}

/* att (n,C): new row i (position P+i), head h attends to cached positions 0..P+i of layer l,
 * through the keys and values of its key head h / (NH/KVH). */
static void attend(gpt *m, int64_t l, int64_t n, int64_t P) {
    int64_t C = m->C, HD = m->HD, NH = m->NH, T = m->dec_max_T, KC = m->KC, QW = m->QW;
    int64_t G = NH / m->KVH;
    const float *Kc = m->dec_k + l * T * KC, *Vc = m->dec_v + l * T * KC;
    float scale = 1.0f / sqrtf((float)HD);
#pragma omp parallel for num_threads(m->threads) if (n * NH * (P + n) * HD > 262144) \
    schedule(dynamic, 1)
    for (int64_t ih = 0; ih < n * NH; ih++) {
        int64_t i = ih / NH, h = ih % NH, t = P + i;
        float *S = m->dec_s + (int64_t)omp_get_thread_num() * T;
        const float *q = m->dec_qkv_att + i * QW + h * HD;
        for (int64_t j = 0; j <= t; j++) {
            const float *k = Kc + j * KC + (h / G) * HD;
            float dot = 0.0f;
            for (int64_t d = 0; d < HD; d++) dot += q[d] * k[d];
            S[j] = scale * dot;
        }
        float mx = S[0];
        for (int64_t j = 1; j <= t; j++) mx = S[j] > mx ? S[j] : mx;
        float sum = 0.0f;
        for (int64_t j = 0; j <= t; j++) sum += expf(S[j] - mx);
        float lse = mx + logf(sum);
        float *o = m->dec_att + i * C + h * HD;
        for (int64_t d = 0; d < HD; d++) o[d] = 0.0f;
        for (int64_t j = 0; j <= t; j++) {
            float p = expf(S[j] - lse);
            if (m->bf16) p = gpt_round16(m, p);
            const float *v = Vc + j * KC + (h / G) * HD;
            for (int64_t d = 0; d < HD; d++) o[d] += p * v[d];
        }
    }
}

/* Block l on the n new rows of dec_x (in place: dec_x becomes the block's output). */
static void block(gpt *m, const ct_stage_args *a, int64_t l, int64_t n, int64_t P) {
    int64_t C = m->C, F = m->F, T = m->dec_max_T, QW = m->QW, KC = m->KC;
    int64_t FH = m->mlp == GPT_MLP_SWIGLU ? 2 * F : F;
    const gpt_block_layout *o = &m->blk;
    const float *W0 = gpt_weights(m, a, 0, (int64_t)m->block_numel);
#define W(off) ((off) >= 0 ? W0 + (off) : NULL)
    float *x = m->dec_x, *qkv = m->dec_qkv, *qa = m->dec_qkv_att;
    gpt_norm_forward(m, m->dec_ln, C, m->dec_mean, m->dec_rstd, x, C, W(o->ln1_w), W(o->ln1_b),
                     n, C);
    store(m, m->dec_ln, n * C);
    linear(m, qkv, m->dec_ln, W(o->qkv_w), W(o->qkv_b), n, C, QW);
    store(m, qkv, n * QW);
    memcpy(qa, qkv, (size_t)(n * QW) * sizeof(float));
    if (m->qk_norm) {
        gpt_norm_forward(m, qa, QW, m->dec_mean, m->dec_rstd, qkv, QW, W(o->qn_w),
                         W(o->qn_b), n, C);
        gpt_norm_forward(m, qa + C, QW, m->dec_mean, m->dec_rstd, qkv + C, QW, W(o->kn_w),
                         W(o->kn_b), n, KC);
        store(m, qa, n * QW);
    }
    if (m->pos == GPT_POS_ROPE) {
        rope_at(m, qa, n, P);
        store(m, qa, n * QW);
    }
    for (int64_t i = 0; i < n; i++) { /* append k and v of the new rows to the cache */
        memcpy(m->dec_k + (l * T + P + i) * KC, qa + i * QW + C, (size_t)KC * sizeof(float));
        memcpy(m->dec_v + (l * T + P + i) * KC, qa + i * QW + C + KC, (size_t)KC * sizeof(float));
    }
    attend(m, l, n, P);
    store(m, m->dec_att, n * C);
    linear(m, m->dec_tmp, m->dec_att, W(o->proj_w), W(o->proj_b), n, C, C);
    store(m, m->dec_tmp, n * C);
    for (int64_t i = 0; i < n * C; i++) m->dec_xmid[i] = x[i] + m->dec_tmp[i];
    store(m, m->dec_xmid, n * C);
    gpt_norm_forward(m, m->dec_ln, C, m->dec_mean, m->dec_rstd, m->dec_xmid, C, W(o->ln2_w),
                     W(o->ln2_b), n, C);
    store(m, m->dec_ln, n * C);
    linear(m, m->dec_h, m->dec_ln, W(o->fc_w), W(o->fc_b), n, C, FH);
    store(m, m->dec_h, n * FH);
    gpt_act_forward(m, m->dec_g, m->dec_h, n);
    store(m, m->dec_g, n * F);
    linear(m, m->dec_tmp, m->dec_g, W(o->fc2_w), W(o->fc2_b), n, F, C);
    store(m, m->dec_tmp, n * C);
    for (int64_t i = 0; i < n * C; i++) x[i] = m->dec_xmid[i] + m->dec_tmp[i];
    store(m, x, n * C);
#undef W
}

/* logits (V) of the last new row: final norm, then the head. */
static void head(gpt *m, const ct_stage_args *a, int64_t n, float *logits) {
    int64_t C = m->C, V = m->V;
    const float *x = m->dec_x + (n - 1) * C;
    const float *w = gpt_weights(m, a, m->root.lnf_w, C);
    const float *b = m->root.lnf_b >= 0 ? gpt_weights(m, a, m->root.lnf_b, C) : NULL;
    gpt_norm_forward(m, m->dec_ln, C, m->dec_mean, m->dec_rstd, x, C, w, b, 1, C);
    store(m, m->dec_ln, C);
    const float *wh = gpt_weights(m, a, m->root.head, V * C);
    linear(m, logits, m->dec_ln, wh, NULL, 1, C, V);
    store(m, logits, V);
}

int32_t gpt_decode(void *self, const ct_decode_args *a, ct_error *err) {
    gpt *m = self;
    if (!m->dec_arena)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: decode before prepare_decode() "
                            "---> call prepare_decode(max_T, dtype) first");
    if (!a || !a->params || !a->tokens || !a->logits || a->n_new < 1)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: decode got NULL params, tokens or "
                            "logits, or n_new < 1");
    if (a->param_dtype != CT_DTYPE_F32 && a->param_dtype != CT_DTYPE_BF16 &&
        a->param_dtype != CT_DTYPE_F16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: param dtype %s is not supported "
                            "---> use f32, bf16 or f16", ct_dtype_name(a->param_dtype));
    if (a->param_dtype != CT_DTYPE_F32 && m->dec_dtype != a->param_dtype)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: %s params but prepare_decode() was "
                            "given %s ---> prepare with the compute dtype (%s)",
                            ct_dtype_name(a->param_dtype), ct_dtype_name(m->dec_dtype),
                            ct_dtype_name(a->param_dtype));
    int64_t P = a->position, n = a->n_new;
    if (P != 0 && P != m->dec_len)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: decode at position %lld, but the "
                            "cache holds %lld tokens ---> pass position 0 (a new sequence) or "
                            "the number of tokens decoded so far", (long long)P,
                            (long long)m->dec_len);
    if (P < 0 || P + n > m->dec_max_T)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: decode of %lld tokens at position "
                            "%lld exceeds the cache of %lld tokens ---> prepare_decode with a "
                            "larger max_T", (long long)n, (long long)P, (long long)m->dec_max_T);
    for (int64_t i = 0; i < n; i++)
        if (a->tokens[i] < 0 || a->tokens[i] >= m->V)
            return ct_error_set(err, CT_ERR_INVALID, "model gpt: token %d (new row %lld) is "
                                "outside the vocabulary 0..%lld", (int)a->tokens[i], (long long)i,
                                (long long)(m->V - 1));
    m->dec_len = P; /* position 0 empties the cache */
    m->bf16 = a->param_dtype != CT_DTYPE_F32;
    m->f16 = a->param_dtype == CT_DTYPE_F16;
    float *saved_wbuf = m->wbuf; /* gpt_weights converts bf16 into m->wbuf: ours meanwhile */
    m->wbuf = m->dec_wbuf;
    ct_stage_args sa = {.struct_size = sizeof sa, .param_dtype = a->param_dtype};
    sa.params = a->params[0];
    embed(m, &sa, a->tokens, n, P);
    for (int64_t l = 0; l < m->L; l++) {
        sa.params = a->params[l + 1];
        block(m, &sa, l, n, P);
    }
    sa.params = a->params[0];
    head(m, &sa, n, a->logits);
    m->wbuf = saved_wbuf;
    m->dec_len = P + n;
    return CT_OK;
}
