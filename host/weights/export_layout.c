/* export_layout.c — the tensor tables of each export target (see export_layout.h).
 *
 * ctrain's gpt tensors (plugins/model/gpt/gpt.c, build_units), all row-major (out, in):
 *   unit 0:  wte.weight (V,C), wpe.weight (T,C) [pos=learned], lnf.weight (C), lnf.bias (C)
 *            [layernorm], lm_head.weight (V,C) [untied]
 *   unit l+1: blocks.l.ln1.weight/bias, attn.qkv.weight (C+2KC,C) rows q|k|v (C rows of q,
 *            KC = n_kv_head*HD rows each of k and v; head h at rows h*HD.. of each),
 *            attn.qkv.bias [qkv bias], attn.q_norm / k_norm [qk_norm], attn.proj.weight (C,C),
 *            attn.proj.bias [output bias], ln2.weight/bias, mlp.fc.weight (F or 2F, C) (swiglu:
 *            rows gate|up), mlp.fc.bias, mlp.proj.weight (C,F), mlp.proj.bias
 * RoPE is rotate-half (element d pairs with d + HD/2), as Hugging Face Llama: no permutation.
 */
#include "weights/export_layout.h"

#include "base/init.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const target_names[] = {"ctrain", "hf-gpt2", "hf-llama", "llmc"};

int32_t layout_target_from_name(const char *name) {
    if (!strcmp(name, "auto")) return LAYOUT_AUTO;
    for (int32_t i = 0; i < 4; i++)
        if (!strcmp(name, target_names[i])) return i;
    return -2;
}

const char *layout_target_name(int32_t t) {
    return t >= 0 && t < 4 ? target_names[t] : "auto";
}

int64_t layout_mlp_width(int64_t intermediate_size, const char *mlp, int64_t C) {
    if (intermediate_size > 0) return intermediate_size;
    if (!strcmp(mlp, "swiglu")) return 256 * (((int64_t)(2.0 * 4.0 * (double)C / 3.0) + 256 - 1) / 256);
    return 4 * C;
}

void layout_model_shape(const host_config *cfg, const ct_model_desc *d, model_shape *s) {
    memset(s, 0, sizeof *s);
    const char *plugin = config_get(cfg, "model", "plugin"), *v;
    s->is_gpt = plugin && !strcmp(plugin, "gpt");
    config_get_int(cfg, "model", "n_layer", &s->L, NULL);
    config_get_int(cfg, "model", "n_head", &s->NH, NULL);
    s->C = d->d_model;
    s->V = d->vocab_size;
    s->T = d->max_seq_len;
    s->HD = s->NH > 0 ? s->C / s->NH : 0;
    snprintf(s->norm, sizeof s->norm, "%s", (v = config_get(cfg, "model", "norm")) ? v : "");
    snprintf(s->mlp, sizeof s->mlp, "%s", (v = config_get(cfg, "model", "mlp")) ? v : "");
    snprintf(s->pos, sizeof s->pos, "%s", (v = config_get(cfg, "model", "pos")) ? v : "");
    config_get_bool(cfg, "model", "qk_norm", &s->qk_norm, NULL);
    config_get_bool(cfg, "model", "tie_embeddings", &s->tie, NULL);
    config_get_bool(cfg, "model", "bias", &s->bias, NULL);
    config_get_float(cfg, "model", "norm_eps", &s->eps, NULL);
    config_get_float(cfg, "model", "rope_theta", &s->theta, NULL);
    int64_t inter = 0;
    config_get_int(cfg, "model", "intermediate_size", &inter, NULL);
    s->F = layout_mlp_width(inter, s->mlp, s->C);
    config_get_int(cfg, "model", "n_kv_head", &s->KVH, NULL);
    if (s->KVH <= 0) s->KVH = s->NH;
    const char *ab = config_get(cfg, "model", "attn_bias");
    if (!ab || !strcmp(ab, "auto")) s->qkv_bias = s->proj_bias = s->bias;
    else s->qkv_bias = !strcmp(ab, "qkv") || !strcmp(ab, "qkv_o"), s->proj_bias = !strcmp(ab, "qkv_o");
    snprintf(s->rope_scaling, sizeof s->rope_scaling, "%s",
             (v = config_get(cfg, "model", "rope_scaling")) ? v : "none");
    s->rope_factor = 1, s->rope_low = 1, s->rope_high = 4, s->rope_orig = 8192;
    config_get_float(cfg, "model", "rope_factor", &s->rope_factor, NULL);
    config_get_float(cfg, "model", "rope_low_freq_factor", &s->rope_low, NULL);
    config_get_float(cfg, "model", "rope_high_freq_factor", &s->rope_high, NULL);
    config_get_int(cfg, "model", "rope_original_max_position", &s->rope_orig, NULL);
}

static int gpt2_shaped(const model_shape *s) {
    return s->is_gpt && !strcmp(s->norm, "layernorm") && !strcmp(s->mlp, "gelu") &&
           !strcmp(s->pos, "learned") && s->bias && s->qkv_bias && s->proj_bias && s->tie &&
           !s->qk_norm && s->KVH == s->NH;
}

/* Llama, and the files of its shape: Mistral (no sliding window), Qwen2 (q/k/v biases only,
 * and no MLP bias); Llama's attention_bias is q, k, v and o, its mlp_bias [model] bias. */
static int llama_shaped(const model_shape *s) {
    int qwen2 = s->qkv_bias && !s->proj_bias;
    return s->is_gpt && !strcmp(s->norm, "rmsnorm") && !strcmp(s->mlp, "swiglu") &&
           !strcmp(s->pos, "rope") && !s->qk_norm && (s->qkv_bias || !s->proj_bias) &&
           !(qwen2 && s->bias);
}

const char *layout_refusal(const model_shape *s, int32_t target, char *buf, size_t cap) {
    if (target == LAYOUT_CTRAIN) return NULL;
    if (!s->is_gpt) {
        snprintf(buf, cap, "%s needs the gpt model plugin; this model is another plugin's "
                 "---> use --target ctrain", layout_target_name(target));
        return buf;
    }
    if ((target == LAYOUT_HF_GPT2 || target == LAYOUT_LLMC) && !gpt2_shaped(s)) {
        snprintf(buf, cap, "%s expresses GPT-2 only (norm = layernorm, mlp = gelu, pos = "
                 "learned, bias = true, tie_embeddings = true, qk_norm = false, attention "
                 "biases, n_kv_head = n_head); this model has norm = %s, mlp = %s, "
                 "pos = %s, bias = %s, tie_embeddings = %s, qk_norm = %s, an MLP %lld wide, "
                 "attention biases %s, %lld of %lld key/value heads ---> %s",
                 layout_target_name(target), s->norm, s->mlp, s->pos, s->bias ? "true" : "false",
                 s->tie ? "true" : "false", s->qk_norm ? "true" : "false", (long long)s->F,
                 s->qkv_bias ? s->proj_bias ? "qkv_o" : "qkv" : "none", (long long)s->KVH,
                 (long long)s->NH,
                 target == LAYOUT_LLMC    ? "use --format safetensors"
                 : llama_shaped(s)        ? "use --target hf-llama or ctrain"
                                          : "use --target ctrain");
        return buf;
    }
    if (target == LAYOUT_LLMC && s->F != 4 * s->C) {
        snprintf(buf, cap, "llmc: llm.c's MLP is 4 * d_model = %lld wide; this model has "
                 "intermediate_size %lld ---> use --format safetensors", (long long)(4 * s->C),
                 (long long)s->F);
        return buf;
    }
    if (target == LAYOUT_LLMC && fabs(s->eps - 1e-5) > 1e-12) {
        snprintf(buf, cap, "llmc: llm.c's layernorm epsilon is fixed at 1e-5; this model has "
                 "norm_eps = %g ---> use --format safetensors", s->eps);
        return buf;
    }
    if (target == LAYOUT_HF_LLAMA && !llama_shaped(s)) {
        snprintf(buf, cap, "hf-llama expresses norm = rmsnorm, mlp = swiglu, pos = rope, "
                 "qk_norm = false, attn_bias none or qkv_o (Llama, with any bias) or qkv (Qwen2, "
                 "bias = false); this model has norm = %s, mlp = %s, pos = %s, bias = %s, "
                 "attn_bias %s, qk_norm = %s ---> use --target ctrain%s", s->norm, s->mlp, s->pos,
                 s->bias ? "true" : "false", s->qkv_bias ? s->proj_bias ? "qkv_o" : "qkv" : "none",
                 s->qk_norm ? "true" : "false", gpt2_shaped(s) ? " or hf-gpt2" : "");
        return buf;
    }
    return NULL;
}

/* ---- building a table ----------------------------------------------------------------- */

typedef struct builder {
    const ct_model_desc *d;
    layout              *l;
    int32_t              cap;
    ct_error            *err;
    int32_t              rc;
} builder;

/* The ctrain tensor called `name`: unit, index, offset, spec; NULL when absent. */
static const ct_tensor_spec *find(const ct_model_desc *d, const char *name, uint32_t *unit,
                                  uint32_t *k) {
    for (uint32_t u = 0; u < d->n_units; u++)
        for (uint32_t j = 0; j < d->units[u].n_tensors; j++) {
            const ct_tensor_spec *t = init_tensor(d, u, j);
            if (!strcmp(t->name, name)) return *unit = u, *k = j, t;
        }
    return NULL;
}

/* Add file tensor `fname` holding rows [row0, row0+nrows) of ctrain tensor `cname` (all rows
 * when nrows is 0), transposed or not; pad_rows extra zero rows (llm.c's vocabulary). */
static void add(builder *b, const char *fname, const char *cname, int64_t row0, int64_t nrows,
                int32_t transpose, int64_t pad_rows) {
    if (b->rc != CT_OK) return;
    uint32_t u, k;
    const ct_tensor_spec *t = find(b->d, cname, &u, &k);
    if (!t) {
        b->rc = ct_error_set(b->err, CT_ERR_INTERNAL, "export: the model has no tensor %s",
                             cname);
        return;
    }
    if (b->l->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        layout_entry *e = realloc(b->l->e, (size_t)b->cap * sizeof *e);
        if (!e) {
            b->rc = ct_error_set(b->err, CT_ERR_NOMEM, "out of memory");
            return;
        }
        b->l->e = e;
    }
    layout_entry *e = &b->l->e[b->l->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", fname);
    e->unit = u;
    e->tensor = k;
    e->offset = init_tensor_offset(b->d, u, k);
    int64_t rows = t->shape[0];
    e->cols = 1;
    for (int32_t i = 1; i < t->ndim; i++) e->cols *= t->shape[i];
    e->row0 = row0;
    e->nrows = nrows ? nrows : rows;
    e->transpose = transpose;
    if (t->ndim == 1) {
        e->ndim = 1;
        e->shape[0] = e->nrows + pad_rows;
    } else if (transpose) {
        e->ndim = 2;
        e->shape[0] = e->cols;
        e->shape[1] = e->nrows;
    } else {
        e->ndim = 2;
        e->shape[0] = e->nrows + pad_rows;
        e->shape[1] = e->cols;
    }
}

static void build_gpt2(builder *b, const model_shape *s) {
    char f[256], c[256];
    add(b, "transformer.wte.weight", "wte.weight", 0, 0, 0, 0);
    add(b, "transformer.wpe.weight", "wpe.weight", 0, 0, 0, 0);
    static const char *const map[][3] = {
        /* file suffix, ctrain suffix, transpose (Conv1D weights are (in, out)) */
        {"ln_1.weight", "ln1.weight", ""},         {"ln_1.bias", "ln1.bias", ""},
        {"attn.c_attn.weight", "attn.qkv.weight", "T"}, {"attn.c_attn.bias", "attn.qkv.bias", ""},
        {"attn.c_proj.weight", "attn.proj.weight", "T"}, {"attn.c_proj.bias", "attn.proj.bias", ""},
        {"ln_2.weight", "ln2.weight", ""},         {"ln_2.bias", "ln2.bias", ""},
        {"mlp.c_fc.weight", "mlp.fc.weight", "T"}, {"mlp.c_fc.bias", "mlp.fc.bias", ""},
        {"mlp.c_proj.weight", "mlp.proj.weight", "T"}, {"mlp.c_proj.bias", "mlp.proj.bias", ""},
    };
    for (int64_t l = 0; l < s->L; l++)
        for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
            snprintf(f, sizeof f, "transformer.h.%lld.%s", (long long)l, map[i][0]);
            snprintf(c, sizeof c, "blocks.%lld.%s", (long long)l, map[i][1]);
            add(b, f, c, 0, 0, map[i][2][0] == 'T', 0);
        }
    add(b, "transformer.ln_f.weight", "lnf.weight", 0, 0, 0, 0);
    add(b, "transformer.ln_f.bias", "lnf.bias", 0, 0, 0, 0);
}

static void build_llama(builder *b, const model_shape *s) {
    char f[256], c[256];
    int64_t C = s->C, F = s->F, KC = s->KVH * s->HD;
    add(b, "model.embed_tokens.weight", "wte.weight", 0, 0, 0, 0);
    for (int64_t l = 0; l < s->L; l++) {
#define P(fs, cs, r0, nr)                                                                      \
    do {                                                                                       \
        snprintf(f, sizeof f, "model.layers.%lld.%s", (long long)l, fs);                       \
        snprintf(c, sizeof c, "blocks.%lld.%s", (long long)l, cs);                             \
        add(b, f, c, r0, nr, 0, 0);                                                            \
    } while (0)
        P("input_layernorm.weight", "ln1.weight", 0, 0);
        P("self_attn.q_proj.weight", "attn.qkv.weight", 0, C);
        P("self_attn.k_proj.weight", "attn.qkv.weight", C, KC);
        P("self_attn.v_proj.weight", "attn.qkv.weight", C + KC, KC);
        if (s->qkv_bias) {
            P("self_attn.q_proj.bias", "attn.qkv.bias", 0, C);
            P("self_attn.k_proj.bias", "attn.qkv.bias", C, KC);
            P("self_attn.v_proj.bias", "attn.qkv.bias", C + KC, KC);
        }
        P("self_attn.o_proj.weight", "attn.proj.weight", 0, 0);
        if (s->proj_bias) P("self_attn.o_proj.bias", "attn.proj.bias", 0, 0);
        P("post_attention_layernorm.weight", "ln2.weight", 0, 0);
        P("mlp.gate_proj.weight", "mlp.fc.weight", 0, F);
        P("mlp.up_proj.weight", "mlp.fc.weight", F, F);
        P("mlp.down_proj.weight", "mlp.proj.weight", 0, 0);
        if (s->bias) { /* Llama's mlp_bias */
            P("mlp.gate_proj.bias", "mlp.fc.bias", 0, F);
            P("mlp.up_proj.bias", "mlp.fc.bias", F, F);
            P("mlp.down_proj.bias", "mlp.proj.bias", 0, 0);
        }
#undef P
    }
    add(b, "model.norm.weight", "lnf.weight", 0, 0, 0, 0);
    if (!s->tie) add(b, "lm_head.weight", "lm_head.weight", 0, 0, 0, 0);
}

/* llm.c's order: wte (padded to a multiple of 128 rows), wpe, then each per-layer kind stacked
 * over the layers, then lnf. Names are llm.c's with the layer: "qkvw.3". */
static void build_llmc(builder *b, const model_shape *s) {
    int64_t Vp = (s->V + 127) / 128 * 128;
    add(b, "wte", "wte.weight", 0, 0, 0, Vp - s->V);
    add(b, "wpe", "wpe.weight", 0, 0, 0, 0);
    static const char *const kinds[][2] = {
        {"ln1w", "ln1.weight"}, {"ln1b", "ln1.bias"}, {"qkvw", "attn.qkv.weight"},
        {"qkvb", "attn.qkv.bias"}, {"attprojw", "attn.proj.weight"},
        {"attprojb", "attn.proj.bias"}, {"ln2w", "ln2.weight"}, {"ln2b", "ln2.bias"},
        {"fcw", "mlp.fc.weight"}, {"fcb", "mlp.fc.bias"}, {"fcprojw", "mlp.proj.weight"},
        {"fcprojb", "mlp.proj.bias"},
    };
    char f[256], c[256];
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        for (int64_t l = 0; l < s->L; l++) {
            snprintf(f, sizeof f, "%s.%lld", kinds[i][0], (long long)l);
            snprintf(c, sizeof c, "blocks.%lld.%s", (long long)l, kinds[i][1]);
            add(b, f, c, 0, 0, 0, 0);
        }
    add(b, "lnfw", "lnf.weight", 0, 0, 0, 0);
    add(b, "lnfb", "lnf.bias", 0, 0, 0, 0);
}

static void build_ctrain(builder *b) {
    for (uint32_t u = 0; u < b->d->n_units; u++)
        for (uint32_t k = 0; k < b->d->units[u].n_tensors; k++) {
            const char *name = init_tensor(b->d, u, k)->name;
            add(b, name, name, 0, 0, 0, 0);
        }
}

int32_t layout_build(const host_config *cfg, const ct_model_desc *d, int32_t target, layout *out,
                     ct_error *err) {
    memset(out, 0, sizeof *out);
    layout_model_shape(cfg, d, &out->s);
    if (target == LAYOUT_AUTO)
        target = gpt2_shaped(&out->s)    ? LAYOUT_HF_GPT2
                 : llama_shaped(&out->s) ? LAYOUT_HF_LLAMA
                                         : LAYOUT_CTRAIN;
    out->target = target;
    char why[512];
    if (layout_refusal(&out->s, target, why, sizeof why))
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s", why);
    builder b = {d, out, 0, err, CT_OK};
    switch (target) {
    case LAYOUT_HF_GPT2: build_gpt2(&b, &out->s); break;
    case LAYOUT_HF_LLAMA: build_llama(&b, &out->s); break;
    case LAYOUT_LLMC: build_llmc(&b, &out->s); break;
    default: build_ctrain(&b); break;
    }
    if (b.rc != CT_OK) layout_free(out);
    return b.rc;
}

void layout_free(layout *l) {
    free(l->e);
    l->e = NULL;
    l->n = 0;
}

uint64_t layout_numel(const layout_entry *e) {
    uint64_t n = 1;
    for (int32_t i = 0; i < e->ndim; i++) n *= (uint64_t)e->shape[i];
    return n;
}

void layout_get(const layout_entry *e, const float *unit, float *out) {
    const float *src = unit + e->offset + (uint64_t)e->row0 * (uint64_t)e->cols;
    uint64_t n = (uint64_t)e->nrows * (uint64_t)e->cols;
    if (e->transpose) {
        for (int64_t r = 0; r < e->nrows; r++)
            for (int64_t c = 0; c < e->cols; c++) out[c * e->nrows + r] = src[r * e->cols + c];
        return;
    }
    memcpy(out, src, n * sizeof *out);
    memset(out + n, 0, (layout_numel(e) - n) * sizeof *out);
}

void layout_put(const layout_entry *e, const float *in, float *unit) {
    float *dst = unit + e->offset + (uint64_t)e->row0 * (uint64_t)e->cols;
    if (e->transpose) {
        for (int64_t r = 0; r < e->nrows; r++)
            for (int64_t c = 0; c < e->cols; c++) dst[r * e->cols + c] = in[c * e->nrows + r];
        return;
    }
    memcpy(dst, in, (uint64_t)e->nrows * (uint64_t)e->cols * sizeof *dst);
}
