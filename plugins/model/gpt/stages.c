/* stages.c — the gpt plugin's stages (embed, block.0..L-1, head), forward and backward side
 * by side: which kernel runs on which buffer, where bf16 rounding happens, and how parameter
 * gradients reach the host's buffer. Not for: the kernels themselves (layers.c, attention.c).
 *
 * bf16 (param_dtype BF16) emulates a GPU: weights are widened exactly to f32, products
 * accumulate in f32 (sgemm), and every activation and activation gradient a GPU would store in
 * bf16 (outputs of each op, the residual stream, the logits, dlogits) is rounded with
 * ct_round_bf16. Parameter gradients are summed in f32 within a stage, then added once into the
 * host's buffer in grad_dtype. With f32 params nothing is rounded. On the oneDNN path
 * (m->use_dnnl) the products take the same bf16 values as bf16 bits (the weights straight from
 * the params, the activations through gpt_to_bf16) and accumulate in f32 as well: only the order
 * of the f32 sums differs from the OpenBLAS path. f16 (param_dtype F16, pure_f16) is emulated
 * the same way with ct_round_f16 (m->f16; gpt_round16), always on the OpenBLAS path (oneDNN's
 * is bf16 only).
 *
 * Dropout ([model] dropout, training micro-batches only; dropout.c) sits where nanoGPT puts it:
 * on the embedding output, the attention probabilities (attention.c), and each branch's output
 * before it joins the residual stream; backward applies the same masks to the gradients.
 * Recompute ([model] recompute): with blocks, the blocks share one set of activation buffers
 * and a block's backward first runs its forward again from its input (the residual stream,
 * always kept); with attention, only the attention half's buffers (norm1 .. attention output)
 * are shared and recomputed. The kernels are deterministic and the dropout masks are hashes, so
 * the recomputed values, and the gradients, are the same bits as when they are kept.
 * Shape legend: see gpt.h.
 */
#include "gpt.h"

#include <string.h>

/* bf16 storage of an activation buffer (a no-op in f32). */
static void store(const gpt *m, float *x, int64_t n) {
    if (m->bf16) gpt_round_bf16(m, x, n);
}

/* Add a vector pair of norm parameter gradients (gain, bias: n each, n <= C) held in gbuf at
 * 0 and n. */
static void norm_grads_begin(gpt *m) { memset(m->gbuf, 0, (size_t)(2 * m->C) * sizeof(float)); }
static void norm_grads_end(gpt *m, const ct_stage_args *a, int64_t w_off, int64_t b_off,
                           int64_t n) {
    gpt_grad_add(a, w_off, m->gbuf, n);
    if (b_off >= 0) gpt_grad_add(a, b_off, m->gbuf + n, n);
}

/* A linear layer's bias gradient: column sums of dy (N,M) into gbuf, then added. */
static void bias_grad(gpt *m, const ct_stage_args *a, int64_t b_off, const float *dy, int64_t M) {
    if (b_off < 0) return;
    gpt_colsum(m->gbuf, dy, m->N, M);
    gpt_grad_add(a, b_off, m->gbuf, M);
}

/* Backward of y = x W^T + b (x (N,K), W (M,K) at w_off, b at b_off or -1): the weight and bias
 * gradients added, dx (N,K) = dy W written. On the oneDNN path dy and x become bf16 once for
 * both products. */
static void linear_backward(gpt *m, const ct_stage_args *a, int64_t w_off, int64_t b_off,
                            const float *w, float *dx, const float *dy, const float *x, int64_t K,
                            int64_t M) {
    int64_t N = m->N;
    const uint16_t *w16 = gpt_w16(m, a, w_off);
    if (w16) {
        gpt_to_bf16(m, m->yb, dy, N, M, M);
        gpt_to_bf16(m, m->xb, x, N, K, K);
        gpt_grad_matmul_bf16(m, a, w_off, m->yb, M, m->xb, K, N, M, K);
        bias_grad(m, a, b_off, dy, M);
        gpt_gemm_bf16(m, m->dnnl, 0, 0, N, K, M, 1.0f, m->yb, M, w16, K, 0.0f, dx, K);
        return;
    }
    gpt_grad_matmul(m, a, w_off, dy, M, x, K, N, M, K);
    bias_grad(m, a, b_off, dy, M);
    gpt_linear_backward_dx(m, dx, dy, w, N, K, M, 0.0f);
}

/* ---------------------------------------------------------------------------------------
 * embed: x0[n] = wte[token[n]] (+ wpe[t])          (unit root)
 * ------------------------------------------------------------------------------------- */

/* Element i of a params tensor at offset off, as f32. */
static inline float param_at(const ct_stage_args *a, int64_t off) {
    if (a->param_dtype == CT_DTYPE_F32) return ((const float *)a->params)[off];
    return gpt_h16_to_f32(a->param_dtype, ((const uint16_t *)a->params)[off]);
}

static int32_t embed_forward(gpt *m, const ct_stage_args *a, ct_error *err) {
    int64_t N = m->N, T = m->T, C = m->C;
    if (!a->tokens)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: stage embed got no tokens (NULL)");
    for (int64_t n = 0; n < N; n++) {
        int32_t tok = a->tokens[n];
        if (tok < 0 || tok >= m->V)
            return ct_error_set(err, CT_ERR_INVALID,
                                "model gpt: token %d at position %lld is outside the vocabulary "
                                "0..%lld ---> check the data's tokenizer against [model] vocab_size",
                                (int)tok, (long long)n, (long long)(m->V - 1));
        m->tokens[n] = tok;
    }
    /* document starts (ct_stage_args.doc_mask): a separator opens its document */
    for (int64_t n = 0; n < N; n++) {
        int64_t t = n % T;
        m->doc_start[n] = !m->doc_on || t == 0 ? 0
                          : m->tokens[n] == a->eot_token ? (int32_t)t : m->doc_start[n - 1];
    }
    float *x = m->res;
#pragma omp parallel for num_threads(m->threads) if (N * C > 32768) schedule(static)
    for (int64_t n = 0; n < N; n++) {
        int64_t te = m->root.wte + (int64_t)m->tokens[n] * C;
        int64_t pe = m->root.wpe >= 0 ? m->root.wpe + (n % T) * C : -1;
        for (int64_t i = 0; i < C; i++)
            x[n * C + i] = param_at(a, te + i) + (pe >= 0 ? param_at(a, pe + i) : 0.0f);
    }
    store(m, x, N * C);
    if (m->drop_on) gpt_dropout(m, x, x, N * C, GPT_DROP_SITE_EMBED);
    return CT_OK;
}

static int32_t embed_backward(gpt *m, const ct_stage_args *a, ct_error *err) {
    int64_t N = m->N, T = m->T, C = m->C, V = m->V;
    const float *dx = m->dres;
    (void)err;
    if (m->drop_on) gpt_dropout(m, m->dres, m->dres, N * C, GPT_DROP_SITE_EMBED); /* its mask */
    if (m->root.wpe >= 0) { /* dwpe[t] = sum over b of dx[b,t] */
        float *g = m->gbuf;
        memset(g, 0, (size_t)(T * C) * sizeof(float));
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < C; i++) g[(n % T) * C + i] += dx[n * C + i];
        gpt_grad_add(a, m->root.wpe, g, T * C);
    }
    /* dwte[v] = sum of dx rows whose token is v: positions grouped by token (counting sort),
     * each group summed in f32 and added once */
    int32_t *start = m->tok_start, *order = m->tok_order;
    memset(start, 0, (size_t)(V + 1) * sizeof *start);
    for (int64_t n = 0; n < N; n++) start[m->tokens[n] + 1]++;
    for (int64_t v = 0; v < V; v++) start[v + 1] += start[v];
    for (int64_t n = 0; n < N; n++) order[start[m->tokens[n]]++] = (int32_t)n;
    /* start[v] is now the end of group v; group v begins where group v-1 ended */
    int64_t begin = 0;
    float *row = m->gbuf;
    while (begin < N) {
        int32_t v = m->tokens[order[begin]];
        int64_t end = start[v];
        memset(row, 0, (size_t)C * sizeof(float));
        for (int64_t k = begin; k < end; k++)
            for (int64_t i = 0; i < C; i++) row[i] += dx[(int64_t)order[k] * C + i];
        gpt_grad_add(a, m->root.wte + (int64_t)v * C, row, C);
        begin = end;
    }
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * block l: x_mid = x + proj(attn(norm1(x))); out = x_mid + mlp(norm2(x_mid))   (unit l+1)
 * ------------------------------------------------------------------------------------- */

#define W(off) ((off) >= 0 ? P + (off) : NULL)
#define W16(off) gpt_w16(m, a, off)

/* The attention half up to the attention output: ln1, qkv, qkv_att, att, lse of block l from
 * its input x (what recompute = attention runs again in backward). P: the unit's f32 view. */
static void attention_half_forward(gpt *m, const ct_stage_args *a, int64_t l, const float *P) {
    int64_t N = m->N, C = m->C, QW = m->QW, KC = m->KC;
    const gpt_block_layout *o = &m->blk;
    gpt_block_acts *A = &m->acts[l];
    const float *x = m->res + l * N * C;

    gpt_norm_forward(m, A->ln1, C, A->ln1_mean, A->ln1_rstd, x, C, W(o->ln1_w), W(o->ln1_b), N, C);
    store(m, A->ln1, N * C);
    gpt_linear_forward(m, A->qkv, A->ln1, W(o->qkv_w), W16(o->qkv_w), W(o->qkv_b), N, C, QW);
    store(m, A->qkv, N * QW);
    if (A->qkv_att != A->qkv) {
        memcpy(A->qkv_att, A->qkv, (size_t)(N * QW) * sizeof(float));
        if (m->qk_norm) {
            gpt_norm_forward(m, A->qkv_att, QW, A->q_mean, A->q_rstd, A->qkv, QW,
                             W(o->qn_w), W(o->qn_b), N, C);
            gpt_norm_forward(m, A->qkv_att + C, QW, A->k_mean, A->k_rstd, A->qkv + C, QW,
                             W(o->kn_w), W(o->kn_b), N, KC);
            store(m, A->qkv_att, N * QW);
        }
        if (m->pos == GPT_POS_ROPE) {
            gpt_rope(m, A->qkv_att, N, 0);
            store(m, A->qkv_att, N * QW);
        }
    }
    gpt_attention_forward(m, A->att, A->lse, A->qkv_att, l);
    store(m, A->att, N * C);
}

/* Block l forward: its output into res[l+1], its activations into acts[l]. */
static void block_forward(gpt *m, const ct_stage_args *a, int64_t l) {
    int64_t N = m->N, C = m->C, F = m->F;
    int64_t FH = m->mlp == GPT_MLP_SWIGLU ? 2 * F : F;
    const gpt_block_layout *o = &m->blk;
    const float *P = gpt_unit_weights(m, a, &m->units[l + 1], (int64_t)m->block_numel);
    gpt_block_acts *A = &m->acts[l];
    const float *x = m->res + l * N * C;
    float *out = m->res + (l + 1) * N * C;
    float *tmp = m->dnc; /* (N,C) branch outputs; free during forward */

    attention_half_forward(m, a, l, P);
    gpt_linear_forward(m, tmp, A->att, W(o->proj_w), W16(o->proj_w), W(o->proj_b), N, C, C);
    store(m, tmp, N * C);
    if (m->drop_on) gpt_dropout(m, tmp, tmp, N * C, GPT_DROP_SITE_ATT_OUT(l));
    for (int64_t i = 0; i < N * C; i++) A->xmid[i] = x[i] + tmp[i];
    store(m, A->xmid, N * C);

    gpt_norm_forward(m, A->ln2, C, A->ln2_mean, A->ln2_rstd, A->xmid, C, W(o->ln2_w),
                     W(o->ln2_b), N, C);
    store(m, A->ln2, N * C);
    gpt_linear_forward(m, A->h, A->ln2, W(o->fc_w), W16(o->fc_w), W(o->fc_b), N, C, FH);
    store(m, A->h, N * FH);
    gpt_act_forward(m, A->g, A->h, N);
    store(m, A->g, N * F);
    gpt_linear_forward(m, tmp, A->g, W(o->fc2_w), W16(o->fc2_w), W(o->fc2_b), N, F, C);
    store(m, tmp, N * C);
    if (m->drop_on) gpt_dropout(m, tmp, tmp, N * C, GPT_DROP_SITE_MLP_OUT(l));
    for (int64_t i = 0; i < N * C; i++) out[i] = A->xmid[i] + tmp[i];
    store(m, out, N * C);
}
#undef W16

/* m->dres: d loss / d out on entry, d loss / d x on return. */
static void block_backward(gpt *m, const ct_stage_args *a, int64_t l) {
    int64_t N = m->N, C = m->C, F = m->F, QW = m->QW, KC = m->KC;
    int64_t FH = m->mlp == GPT_MLP_SWIGLU ? 2 * F : F;
    const gpt_block_layout *o = &m->blk;
    if (m->recompute == GPT_RECOMPUTE_BLOCKS) /* res[l+1] is written again with the same bits */
        block_forward(m, a, l);
    const float *P = gpt_unit_weights(m, a, &m->units[l + 1], (int64_t)m->block_numel);
    if (m->recompute == GPT_RECOMPUTE_ATTENTION) attention_half_forward(m, a, l, P);
    gpt_block_acts *A = &m->acts[l];
    const float *x = m->res + l * N * C;
    float *dres = m->dres, *dnc = m->dnc;

    /* MLP branch: its output's gradient is dres (through its dropout mask, into dnc) */
    const float *dy = dres;
    if (m->drop_on) gpt_dropout(m, dnc, dres, N * C, GPT_DROP_SITE_MLP_OUT(l)), dy = dnc;
    linear_backward(m, a, o->fc2_w, o->fc2_b, W(o->fc2_w), m->dg, dy, A->g, F, C);
    store(m, m->dg, N * F);
    gpt_act_backward(m, m->dh, m->dg, A->h, N);
    store(m, m->dh, N * FH);
    linear_backward(m, a, o->fc_w, o->fc_b, W(o->fc_w), dnc, m->dh, A->ln2, C, FH);
    store(m, dnc, N * C);
    norm_grads_begin(m);
    gpt_norm_backward(m, dres, C, m->gbuf, o->ln2_b >= 0 ? m->gbuf + C : NULL, dnc, C, A->xmid,
                      C, A->ln2_mean, A->ln2_rstd, W(o->ln2_w), N, C, 1);
    norm_grads_end(m, a, o->ln2_w, o->ln2_b, C);
    store(m, dres, N * C); /* now d loss / d x_mid */

    /* attention branch (the masked gradient in dqkv's first N*C, free until attention's) */
    dy = dres;
    if (m->drop_on) gpt_dropout(m, m->dqkv, dres, N * C, GPT_DROP_SITE_ATT_OUT(l)), dy = m->dqkv;
    linear_backward(m, a, o->proj_w, o->proj_b, W(o->proj_w), dnc, dy, A->att, C, C);
    store(m, dnc, N * C);
    gpt_attention_backward(m, m->dqkv, dnc, A->qkv_att, A->lse, l);
    store(m, m->dqkv, N * QW);
    if (m->pos == GPT_POS_ROPE) {
        gpt_rope(m, m->dqkv, N, 1);
        store(m, m->dqkv, N * QW);
    }
    if (m->qk_norm) {
        norm_grads_begin(m);
        gpt_norm_backward(m, m->dqkv, QW, m->gbuf, o->qn_b >= 0 ? m->gbuf + C : NULL, m->dqkv,
                          QW, A->qkv, QW, A->q_mean, A->q_rstd, W(o->qn_w), N, C, 0);
        norm_grads_end(m, a, o->qn_w, o->qn_b, C);
        norm_grads_begin(m);
        gpt_norm_backward(m, m->dqkv + C, QW, m->gbuf, o->kn_b >= 0 ? m->gbuf + KC : NULL,
                          m->dqkv + C, QW, A->qkv + C, QW, A->k_mean, A->k_rstd,
                          W(o->kn_w), N, KC, 0);
        norm_grads_end(m, a, o->kn_w, o->kn_b, KC);
        store(m, m->dqkv, N * QW);
    }
    linear_backward(m, a, o->qkv_w, o->qkv_b, W(o->qkv_w), dnc, m->dqkv, A->ln1, C, QW);
    store(m, dnc, N * C);
    norm_grads_begin(m);
    gpt_norm_backward(m, dres, C, m->gbuf, o->ln1_b >= 0 ? m->gbuf + C : NULL, dnc, C, x, C,
                      A->ln1_mean, A->ln1_rstd, W(o->ln1_w), N, C, 1);
    norm_grads_end(m, a, o->ln1_w, o->ln1_b, C);
    store(m, dres, N * C); /* now d loss / d x */
#undef W
}

/* ---------------------------------------------------------------------------------------
 * head: logits (N,V) = norm_f(x_L) W_head^T        (unit root)
 *
 * By row ranges (ABI 1.3, ctrain.h "Row ranges"): the range [r0, r0+n) gets the logits of its
 * rows (n,V) at a->logits; the final norm of all N rows runs once, in the range that starts at
 * 0. Backward of a range adds its head gradient and writes its rows of dlnf (m->dnc); the range
 * that ends at N runs the final norm's backward over all N rows, as a whole-batch call does.
 * ------------------------------------------------------------------------------------- */

/* The head's weights (V,C) as f32 (the OpenBLAS path). With bf16 params they are widened into
 * wbuf once per micro-batch, by the forward range that starts at row 0, and the later ranges of
 * the micro-batch, forward and backward, read that copy: the params of a micro-batch do not
 * change between its stages (ctrain.h), and every other stage clears head_w_ready (gpt_forward,
 * gpt_backward), since a block's weights reuse wbuf. */
static const float *head_weights(gpt *m, const ct_stage_args *a, int64_t r0, int forward) {
    int64_t V = m->V, C = m->C;
    if (a->param_dtype == CT_DTYPE_F32) return (const float *)a->params + m->root.head;
    if (!m->head_w_ready || (forward && r0 == 0)) {
        gpt_weights(m, a, m->root.head, V * C);
        m->head_w_ready = 1;
    }
    return m->wbuf + m->root.head;
}

static int32_t head_forward(gpt *m, const ct_stage_args *a, ct_error *err) {
    int64_t N = m->N, C = m->C, V = m->V, r0, n;
    if (!a->logits)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: stage head got no logits buffer (NULL)");
    gpt_head_rows(m, a, &r0, &n);
    if (r0 == 0) { /* the final norm of every row, once per micro-batch */
        const float *x = m->res + m->L * N * C;
        const float *w = gpt_weights(m, a, m->root.lnf_w, C);
        const float *b = m->root.lnf_b >= 0 ? gpt_weights(m, a, m->root.lnf_b, C) : NULL;
        gpt_norm_forward(m, m->lnf, C, m->lnf_mean, m->lnf_rstd, x, C, w, b, N, C);
        store(m, m->lnf, N * C);
    }
    const uint16_t *wh16 = gpt_w16(m, a, m->root.head);
    const float *wh = wh16 ? NULL : head_weights(m, a, r0, 1);
    gpt_linear_forward(m, a->logits, m->lnf + r0 * C, wh, wh16, NULL, n, C, V);
    store(m, a->logits, n * V);
    return CT_OK;
}

/* The range's dlogits columns [v0, v0+vc) rounded to bf16 (the values a GPU's bf16 dlogits
 * hold): as f32 into d (n,vc), or as bf16 bits into d16 (n,vc). */
static void dlogits_slice(const gpt *m, const ct_stage_args *a, int64_t n, int64_t v0, int64_t vc,
                          float *d, uint16_t *d16) {
    const float *src = a->dlogits + v0;
    int64_t V = m->V;
    if (d16) {
        gpt_to_bf16(m, d16, src, n, vc, V);
        return;
    }
#pragma omp parallel for num_threads(m->threads) if (n * vc > 32768) schedule(static)
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < vc; j++) d[i * vc + j] = gpt_round16(m, src[i * V + j]);
}

static int32_t head_backward(gpt *m, const ct_stage_args *a, ct_error *err) {
    int64_t N = m->N, C = m->C, V = m->V, r0, n;
    if (!a->dlogits)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: stage head got no dlogits (NULL)");
    gpt_head_rows(m, a, &r0, &n);
    const uint16_t *wh16 = gpt_w16(m, a, m->root.head);
    const float *wh = wh16 ? NULL : head_weights(m, a, r0, 0);
    const float *lnf = m->lnf + r0 * C; /* (n,C) the range's rows */
    float *dlnf = m->dnc + r0 * C;
    if (!m->bf16) {
        gpt_linear_backward_dx(m, dlnf, a->dlogits, wh, n, C, V, 0.0f);
        gpt_grad_matmul(m, a, m->root.head, a->dlogits, V, lnf, C, n, V, C);
    } else if (wh16) { /* oneDNN: the same slices as below, as bf16 bits */
        uint16_t *d16 = (uint16_t *)m->dlog;
        gpt_to_bf16(m, m->xb, lnf, n, C, C);
        for (int64_t v0 = 0; v0 < V; v0 += GPT_VCHUNK) {
            int64_t vc = V - v0 < GPT_VCHUNK ? V - v0 : GPT_VCHUNK;
            dlogits_slice(m, a, n, v0, vc, NULL, d16);
            gpt_gemm_bf16(m, m->dnnl, 0, 0, n, C, vc, 1.0f, d16, vc, wh16 + v0 * C, C,
                          v0 ? 1.0f : 0.0f, dlnf, C);
            gpt_grad_matmul_bf16(m, a, m->root.head + v0 * C, d16, vc, m->xb, C, n, vc, C);
        }
    } else { /* slices of GPT_VCHUNK vocabulary columns: dlogits rounded to bf16 first */
        for (int64_t v0 = 0; v0 < V; v0 += GPT_VCHUNK) {
            int64_t vc = V - v0 < GPT_VCHUNK ? V - v0 : GPT_VCHUNK;
            float *d = m->dlog;
            dlogits_slice(m, a, n, v0, vc, d, NULL);
            gpt_sgemm(m, 0, 0, n, C, vc, 1.0f, d, vc, wh + v0 * C, C, v0 ? 1.0f : 0.0f, dlnf, C);
            gpt_grad_matmul(m, a, m->root.head + v0 * C, d, vc, lnf, C, n, vc, C);
        }
    }
    store(m, dlnf, n * C);
    if (r0 + n < N) return CT_OK; /* the final norm's backward waits for the last range */
    const float *x = m->res + m->L * N * C;
    const float *w = gpt_weights(m, a, m->root.lnf_w, C);
    norm_grads_begin(m);
    gpt_norm_backward(m, m->dres, C, m->gbuf, m->root.lnf_b >= 0 ? m->gbuf + C : NULL, m->dnc, C,
                      x, C, m->lnf_mean, m->lnf_rstd, w, N, C, 0);
    norm_grads_end(m, a, m->root.lnf_w, m->root.lnf_b, C);
    store(m, m->dres, N * C);
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------------------- */

static int32_t check_args(gpt *m, const ct_stage_args *a, int backward, ct_error *err) {
    if (!m->arena)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: %s before prepare() ---> call "
                            "prepare(B, T, dtype) first", backward ? "backward" : "forward");
    if (a->stage < 0 || a->stage > m->L + 1)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: stage %d does not exist (0..%lld)",
                            (int)a->stage, (long long)(m->L + 1));
    if (!a->params)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: stage %d got no params (NULL)",
                            (int)a->stage);
    if (a->param_dtype != CT_DTYPE_F32 && a->param_dtype != CT_DTYPE_BF16 &&
        a->param_dtype != CT_DTYPE_F16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: param dtype %s is not supported "
                            "---> use f32, bf16 or f16", ct_dtype_name(a->param_dtype));
    if (a->param_dtype != CT_DTYPE_F32 && m->dtype != a->param_dtype)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: %s params but prepare() was given "
                            "%s ---> prepare with the compute dtype (%s)",
                            ct_dtype_name(a->param_dtype), ct_dtype_name(m->dtype),
                            ct_dtype_name(a->param_dtype));
    if (backward) {
        if (!a->grads)
            return ct_error_set(err, CT_ERR_INVALID, "model gpt: backward of stage %d got no "
                                "grads buffer (NULL)", (int)a->stage);
        if (a->grad_dtype != CT_DTYPE_F32 && a->grad_dtype != CT_DTYPE_BF16 &&
            a->grad_dtype != CT_DTYPE_F16)
            return ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: grad dtype %s is not "
                                "supported ---> use f32, bf16 or f16",
                                ct_dtype_name(a->grad_dtype));
    }
    if ((a->row_begin || a->row_count) && a->stage != m->L + 1)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: stage %d got a row range; only the "
                            "head (stage %lld) takes one", (int)a->stage, (long long)(m->L + 1));
    if (a->row_count && (a->row_begin < 0 || a->row_count < 0 || a->row_begin > m->N - a->row_count))
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: head rows [%lld, %lld) are outside "
                            "the micro-batch's %lld rows (a host bug; please report it)",
                            (long long)a->row_begin, (long long)(a->row_begin + a->row_count),
                            (long long)m->N);
    m->bf16 = a->param_dtype != CT_DTYPE_F32;
    m->f16 = a->param_dtype == CT_DTYPE_F16;
    /* since ABI 1.7: training or not, document masking, the micro-batch's place in the run */
    int has17 = a->struct_size >= offsetof(ct_stage_args, seed) + sizeof a->seed;
    m->doc_on = has17 && a->doc_mask;
    if (m->doc_on && (a->eot_token < 0 || a->eot_token >= m->V))
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: document separator %d is outside "
                            "the vocabulary 0..%lld ---> set [data] eot_token to the data's "
                            "end-of-text id", (int)a->eot_token, (long long)(m->V - 1));
    gpt_dropout_begin(m, a);
    return CT_OK;
}

int32_t gpt_forward(void *self, const ct_stage_args *a, ct_error *err) {
    gpt *m = self;
    int32_t rc = check_args(m, a, 0, err);
    if (rc != CT_OK) return rc;
    if (m->on_cuda) return m->cu.forward(m, a, err); /* the companion's gpt_cuda.cu */
    if (a->stage == m->L + 1) return head_forward(m, a, err);
    m->head_w_ready = 0; /* head_weights */
    if (a->stage == 0) return embed_forward(m, a, err);
    block_forward(m, a, a->stage - 1);
    return CT_OK;
}

int32_t gpt_backward(void *self, const ct_stage_args *a, ct_error *err) {
    gpt *m = self;
    int32_t rc = check_args(m, a, 1, err);
    if (rc != CT_OK) return rc;
    if (m->on_cuda) return m->cu.backward(m, a, err);
    if (a->stage == m->L + 1) return head_backward(m, a, err);
    m->head_w_ready = 0;
    if (a->stage == 0) return embed_backward(m, a, err);
    block_backward(m, a, a->stage - 1);
    return CT_OK;
}
