/* gpt.c — the gpt model plugin's face to the host: descriptor, INI schema, create (reading and
 * validating the shape), the units/stages description with init rules, and prepare (the
 * activation buffers). Not for: the arithmetic (stages.c, layers.c, attention.c).
 *
 * Variants: GPT-2 (layernorm, gelu, learned positions, tied head, biases) and open_lm
 * (gain-only layernorm, swiglu, rope, qk-norm, untied head, no biases), and mixes of them; the
 * shapes of Llama-3, Mistral, Qwen2 and SmolLM through grouped-query attention (n_kv_head), any
 * MLP width (intermediate_size), q/k/v biases without an output bias (attn_bias) and rope
 * scaling (rope_scaling: linear, llama3) as transformers defines them.
 * Shape legend: see gpt.h.
 */
#include "gpt.h"

#ifdef CT_HAVE_CUDA
#include <ctrain/companion.h>
#define GPT_DEVICES (CT_DEVICE_CPU | CT_DEVICE_CUDA)
#else
#define GPT_DEVICES CT_DEVICE_CPU
#endif

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void openblas_set_num_threads(int num_threads); /* OpenBLAS's own cblas.h declares it */

/* ---------------------------------------------------------------------------------------
 * Schema
 * ------------------------------------------------------------------------------------- */

static const char *const norm_choices[] = {"layernorm", "rmsnorm", "gain_only_layernorm", NULL};
static const char *const mlp_choices[] = {"gelu", "swiglu", NULL};
static const char *const pos_choices[] = {"learned", "rope", NULL};
static const char *const init_choices[] = {"gpt2", "open_lm", NULL};
static const char *const attention_choices[] = {"flash", "naive", NULL}; /* gpt_att_kind order */
static const char *const epilogue_choices[] = {"cublaslt", "kernels", NULL}; /* gpt_epi_kind */
static const char *const bf16_mm_choices[] = {"auto", "onednn", "openblas", NULL}; /* gpt_mm_kind */
static const char *const abias_choices[] = {"auto", "none", "qkv", "qkv_o", NULL}; /* gpt_abias */
static const char *const rope_scaling_choices[] = {"none", "linear", "llama3", NULL};
static const char *const recompute_choices[] = {"none", "blocks", "attention", NULL}; /* gpt_recompute */

static const ct_param_spec gpt_params[] = {
    CT_PARAM_INT("n_layer", "4", 1, 1024, "L: transformer blocks"),
    CT_PARAM_INT("n_head", "4", 1, 4096, "NH: attention heads; must divide d_model"),
    CT_PARAM_INT("n_kv_head", "0", 0, 4096,
                 "key/value heads (grouped-query attention; 1: multi-query); must divide n_head; "
                 "0: n_head (multi-head attention)"),
    CT_PARAM_INT("d_model", "256", 1, 65536, "C: channels of the residual stream"),
    CT_PARAM_INT("vocab_size", "50257", 1, 2147483647.0, "V: tokens of the vocabulary (logits per row)"),
    CT_PARAM_INT("seq_len", "1024", 1, 1048576, "largest sequence length T (rows of wpe)"),
    CT_PARAM_ENUM("norm", "layernorm", norm_choices,
                  "layernorm (gain+bias), rmsnorm (gain), gain_only_layernorm (open_lm)"),
    CT_PARAM_ENUM("mlp", "gelu", mlp_choices,
                  "gelu (GPT-2) or swiglu (open_lm, Llama): the MLP's activation"),
    CT_PARAM_INT("intermediate_size", "0", 0, 1048576,
                 "F: the MLP's hidden width; 0: 4C for gelu (GPT-2), 256*ceil((8C/3)/256) for "
                 "swiglu (open_lm)"),
    CT_PARAM_ENUM("pos", "learned", pos_choices, "learned position table or rotary (rope)"),
    CT_PARAM_BOOL("qk_norm", "false", "normalise q and k over all heads before attention (open_lm)"),
    CT_PARAM_BOOL("tie_embeddings", "true", "the output head is the token embedding (GPT-2)"),
    CT_PARAM_BOOL("bias", "true", "biases in the linear layers (GPT-2); norms keep their own"),
    CT_PARAM_ENUM("attn_bias", "auto", abias_choices,
                  "biases of the attention projections: auto (as bias), none, qkv (q, k, v only: "
                  "Qwen2), qkv_o (q, k, v and the output: Llama's attention_bias)"),
    CT_PARAM_ENUM("init", "gpt2", init_choices,
                  "gpt2: N(0,0.02), output projections /sqrt(2L); open_lm: trunc normal 1/sqrt(fan_in), "
                  "output projections /sqrt(2(layer+1))"),
    CT_PARAM_ENUM("attention", "flash", attention_choices,
                  "CUDA attention: flash (fused, online softmax, no (B*n_head,T,T) scores) or naive "
                  "(materialises the scores; the fallback); the CPU always runs its blocked attention"),
    CT_PARAM_ENUM("mlp_epilogue", "cublaslt", epilogue_choices,
                  "CUDA gelu MLP: cublaslt (bias+GELU and GELU-gradient+bias-gradient fused into the "
                  "GEMMs) or kernels (separate passes; the fallback); swiglu and the CPU ignore it"),
    CT_PARAM_ENUM("bf16_matmul", "auto", bf16_mm_choices,
                  "CPU products of bf16 operands (amp, pure_bf16): onednn (oneDNN's bf16 x bf16 -> "
                  "f32 matmul: AMX or AVX512-BF16 kernels), openblas (f32 products of the same bf16 "
                  "values), auto (onednn where oneDNN runs AMX, else openblas); the start-up line "
                  "'cpu bf16:' says which runs"),
    CT_PARAM_FLOAT("norm_eps", "1e-5", 1e-12, 1.0, "epsilon of every norm"),
    CT_PARAM_FLOAT("rope_theta", "10000", 1.0, 1e12, "rotary base (pos = rope)"),
    CT_PARAM_ENUM("rope_scaling", "none", rope_scaling_choices,
                  "rotary frequencies as transformers' rope_type: none (default), linear "
                  "(divided by rope_factor), llama3 (Llama 3.1's by wavelength)"),
    CT_PARAM_FLOAT("rope_factor", "1", 1e-6, 1e6, "rope_scaling's factor"),
    CT_PARAM_FLOAT("rope_low_freq_factor", "1", 1e-6, 1e6, "llama3: low_freq_factor"),
    CT_PARAM_FLOAT("rope_high_freq_factor", "4", 1e-6, 1e6, "llama3: high_freq_factor"),
    CT_PARAM_INT("rope_original_max_position", "8192", 1, 1073741824.0,
                 "llama3: original_max_position_embeddings"),
    CT_PARAM_FLOAT("dropout", "0", 0.0, 0.95,
                   "probability of dropping an element in training (nanoGPT's places: embedding "
                   "output, attention probabilities, each branch's output); masks hashed from "
                   "[run] seed, step, micro-batch and rank; 0: off, the bits of no dropout"),
    CT_PARAM_ENUM("recompute", "none", recompute_choices,
                  "activation checkpointing: blocks (backward reruns each block's forward from "
                  "its input; only the residual stream is kept), attention (only norm1..attention "
                  "output rerun), none; the same bits either way (CPU)"),
    CT_PARAM_END
};

/* ---------------------------------------------------------------------------------------
 * Units: tensor specs and their offsets
 * ------------------------------------------------------------------------------------- */

typedef struct {
    gpt            *m;
    ct_tensor_spec *t;      /* next free spec */
    uint64_t        off;    /* running offset within the current unit */
    char           *names;  /* next free name byte */
    char           *names_end;
} unit_builder;

/* Append a tensor to the current unit; returns its element offset. */
static int64_t add_tensor(unit_builder *ub, const char *prefix, const char *name, int64_t d0,
                          int64_t d1, int32_t init, double std) {
    ct_tensor_spec *t = ub->t++;
    int len = snprintf(ub->names, (size_t)(ub->names_end - ub->names), "%s%s", prefix, name);
    assert(len > 0 && ub->names + len < ub->names_end);
    t->name = ub->names;
    ub->names += len + 1;
    t->ndim = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1 > 0 ? d1 : 0;
    t->init = init;
    t->init_std = (float)std;
    t->decay = t->ndim >= 2;
    int64_t off = (int64_t)ub->off;
    ub->off += ct_align_up(ct_tensor_numel(t), CT_TENSOR_ALIGN);
    return off;
}

/* A weight matrix's init rule: gpt2 N(0, std_gpt2), open_lm trunc normal std_openlm. */
static int64_t add_matrix(unit_builder *ub, const char *prefix, const char *name, int64_t rows,
                          int64_t cols, double std_gpt2, double std_openlm) {
    gpt *m = ub->m;
    if (m->init == GPT_INIT_OPENLM)
        return add_tensor(ub, prefix, name, rows, cols, CT_INIT_TRUNC_NORMAL, std_openlm);
    return add_tensor(ub, prefix, name, rows, cols, CT_INIT_NORMAL, std_gpt2);
}

/* A norm of width n: its gain (ones) and, for layernorm, its bias (zeros). */
static void add_norm(unit_builder *ub, const char *prefix, const char *name, int64_t n_el,
                     int64_t *w, int64_t *b) {
    char n[64];
    snprintf(n, sizeof n, "%s.weight", name);
    *w = add_tensor(ub, prefix, n, n_el, 0, CT_INIT_ONES, 0);
    *b = -1;
    if (ub->m->norm == GPT_NORM_LAYERNORM) {
        snprintf(n, sizeof n, "%s.bias", name);
        *b = add_tensor(ub, prefix, n, n_el, 0, CT_INIT_ZEROS, 0);
    }
}

/* A linear layer's bias (zeros) when `on`, else -1. */
static int64_t add_bias(unit_builder *ub, int on, const char *prefix, const char *name, int64_t n) {
    if (!on) return -1;
    return add_tensor(ub, prefix, name, n, 0, CT_INIT_ZEROS, 0);
}

#define GPT_MAX_TENSORS_PER_UNIT 20
#define GPT_NAME_BYTES 64

static int32_t build_units(gpt *m, ct_error *err) {
    int64_t L = m->L, C = m->C, F = m->F;
    size_t n_tensors = (size_t)(L + 1) * GPT_MAX_TENSORS_PER_UNIT;
    size_t name_bytes = n_tensors * GPT_NAME_BYTES + (size_t)(L + 1 + L + 2) * 32;
    m->units = calloc((size_t)L + 1, sizeof *m->units);
    m->stages = calloc((size_t)L + 2, sizeof *m->stages);
    m->tensors = calloc(n_tensors, sizeof *m->tensors);
    m->names = calloc(name_bytes, 1);
    if (!m->units || !m->stages || !m->tensors || !m->names)
        return ct_error_set(err, CT_ERR_NOMEM, "model gpt: out of memory describing %lld layers",
                            (long long)L);
    unit_builder ub = {m, m->tensors, 0, m->names, m->names + name_bytes};
    double s_lm = 1.0 / sqrt((double)C);                 /* open_lm: 1/sqrt(fan_in = C) */
    double s_out_gpt2 = 0.02 / sqrt(2.0 * (double)L);    /* GPT-2 residual projections */

    /* unit 0: root */
    m->units[0].tensors = ub.t;
    m->root.wte = add_matrix(&ub, "", "wte.weight", m->V, C, 0.02, s_lm);
    m->root.wpe = m->pos == GPT_POS_LEARNED ? add_matrix(&ub, "", "wpe.weight", m->max_T, C, 0.02, s_lm)
                                           : -1;
    add_norm(&ub, "", "lnf", C, &m->root.lnf_w, &m->root.lnf_b);
    m->head_tensor = 0; /* wte */
    m->root.head = m->root.wte;
    if (!m->tie) {
        m->head_tensor = (int32_t)(ub.t - m->units[0].tensors);
        m->root.head = add_matrix(&ub, "", "lm_head.weight", m->V, C, 0.02, s_lm);
    }
    m->units[0].name = "root";
    m->units[0].n_tensors = (uint32_t)(ub.t - m->units[0].tensors);
    m->unit_numel_max = ub.off;
    uint64_t n_params = 0;
    for (uint32_t k = 0; k < m->units[0].n_tensors; k++)
        n_params += ct_tensor_numel(&m->units[0].tensors[k]);

    /* units 1..L: blocks; offsets are the same in each, init stds depend on depth (open_lm) */
    for (int64_t l = 0; l < L; l++) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "blocks.%lld.", (long long)l);
        ct_unit_spec *u = &m->units[l + 1];
        u->tensors = ub.t;
        ub.off = 0;
        gpt_block_layout b;
        double depth = sqrt(2.0 * (double)(l + 1));
        add_norm(&ub, prefix, "ln1", C, &b.ln1_w, &b.ln1_b);
        b.qkv_w = add_matrix(&ub, prefix, "attn.qkv.weight", m->QW, C, 0.02, s_lm);
        b.qkv_b = add_bias(&ub, m->qkv_bias, prefix, "attn.qkv.bias", m->QW);
        b.qn_w = b.qn_b = b.kn_w = b.kn_b = -1;
        if (m->qk_norm) {
            add_norm(&ub, prefix, "attn.q_norm", C, &b.qn_w, &b.qn_b);
            add_norm(&ub, prefix, "attn.k_norm", m->KC, &b.kn_w, &b.kn_b);
        }
        b.proj_w = add_matrix(&ub, prefix, "attn.proj.weight", C, C, s_out_gpt2, s_lm / depth);
        b.proj_b = add_bias(&ub, m->proj_bias, prefix, "attn.proj.bias", C);
        add_norm(&ub, prefix, "ln2", C, &b.ln2_w, &b.ln2_b);
        int64_t fc_rows = m->mlp == GPT_MLP_SWIGLU ? 2 * F : F;
        b.fc_w = add_matrix(&ub, prefix, "mlp.fc.weight", fc_rows, C, 0.02, s_lm);
        b.fc_b = add_bias(&ub, m->bias, prefix, "mlp.fc.bias", fc_rows);
        b.fc2_w = add_matrix(&ub, prefix, "mlp.proj.weight", C, F, s_out_gpt2,
                             1.0 / sqrt((double)F) / depth);
        b.fc2_b = add_bias(&ub, m->bias, prefix, "mlp.proj.bias", C);
        m->blk = b;
        int len = snprintf(ub.names, (size_t)(ub.names_end - ub.names), "block.%lld", (long long)l);
        u->name = ub.names;
        ub.names += len + 1;
        u->n_tensors = (uint32_t)(ub.t - u->tensors);
        assert(u->n_tensors <= GPT_MAX_TENSORS_PER_UNIT);
        const ct_tensor_spec *last = ub.t - 1; /* end of the last tensor, without its padding */
        m->block_numel = ub.off - ct_align_up(ct_tensor_numel(last), CT_TENSOR_ALIGN) +
                         ct_tensor_numel(last);
        if (ub.off > m->unit_numel_max) m->unit_numel_max = ub.off;
        for (uint32_t k = 0; k < u->n_tensors; k++) n_params += ct_tensor_numel(&u->tensors[k]);
    }
    m->n_params = n_params;

    /* stages: embed, block.0 .. block.L-1, head */
    m->stages[0].name = "embed";
    m->stages[0].unit = 0;
    for (int64_t l = 0; l < L; l++) {
        m->stages[l + 1].name = m->units[l + 1].name;
        m->stages[l + 1].unit = (int32_t)(l + 1);
    }
    m->stages[L + 1].name = "head";
    m->stages[L + 1].unit = 0;
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * create / destroy
 * ------------------------------------------------------------------------------------- */

static void dnnl_contexts_free(gpt *m); /* below, with the bf16 products */

static void gpt_destroy(void *self) {
    gpt *m = self;
    if (!m) return;
    if (m->on_cuda) m->cu.free(m); /* the device arena; m->arena becomes NULL */
    if (m->arena) m->api->free_mem(m->host, m->arena);
    dnnl_contexts_free(m);
    gpt_decode_free(m);
    free(m->units);
    free(m->stages);
    free(m->tensors);
    free(m->names);
    free(m->rope_cos);
    free(m->rope_sin);
    free(m->acts);
    free(m);
}

/* Look up one enum key and map it to its index in choices. */
static int32_t get_enum(const ct_create_args *a, const char *key, const char *const *choices,
                        int *out, ct_error *err) {
    const char *s = NULL;
    if (a->api->get_string(a->host, a->section, key, &s, err) != CT_OK) return CT_ERR_INVALID;
    for (int i = 0; choices[i]; i++)
        if (strcmp(s, choices[i]) == 0) return *out = i, CT_OK;
    return ct_error_set(err, CT_ERR_INVALID, "model gpt: [%s] %s = '%s' is not one of the choices "
                        "---> see `ctrain inspect gpt`", a->section, key, s);
}

static int32_t read_config(gpt *m, const ct_create_args *a, ct_error *err) {
    const ct_host_api *api = a->api;
    const char *sec = a->section;
    int64_t v[5], kvh = 0, inter = 0, orig_T = 0;
    const char *ikeys[5] = {"n_layer", "n_head", "d_model", "vocab_size", "seq_len"};
    if (api->get_int(a->host, sec, "n_kv_head", &kvh, err) != CT_OK ||
        api->get_int(a->host, sec, "intermediate_size", &inter, err) != CT_OK ||
        api->get_int(a->host, sec, "rope_original_max_position", &orig_T, err) != CT_OK)
        return CT_ERR_INVALID;
    for (int i = 0; i < 5; i++) {
        if (api->get_int(a->host, sec, ikeys[i], &v[i], err) != CT_OK) return CT_ERR_INVALID;
        if (v[i] < 1)
            return ct_error_set(err, CT_ERR_INVALID, "model gpt: [%s] %s = %lld must be >= 1",
                                sec, ikeys[i], (long long)v[i]);
    }
    m->L = v[0], m->NH = v[1], m->C = v[2], m->V = v[3], m->max_T = v[4];
    int32_t b;
    if (api->get_bool(a->host, sec, "qk_norm", &b, err) != CT_OK) return CT_ERR_INVALID;
    m->qk_norm = b != 0;
    if (api->get_bool(a->host, sec, "tie_embeddings", &b, err) != CT_OK) return CT_ERR_INVALID;
    m->tie = b != 0;
    if (api->get_bool(a->host, sec, "bias", &b, err) != CT_OK) return CT_ERR_INVALID;
    m->bias = b != 0;
    if (get_enum(a, "norm", norm_choices, &m->norm, err) != CT_OK ||
        get_enum(a, "mlp", mlp_choices, &m->mlp, err) != CT_OK ||
        get_enum(a, "pos", pos_choices, &m->pos, err) != CT_OK ||
        get_enum(a, "init", init_choices, &m->init, err) != CT_OK ||
        get_enum(a, "attention", attention_choices, &m->attention, err) != CT_OK ||
        get_enum(a, "mlp_epilogue", epilogue_choices, &m->mlp_epilogue, err) != CT_OK ||
        get_enum(a, "bf16_matmul", bf16_mm_choices, &m->bf16_matmul, err) != CT_OK ||
        get_enum(a, "rope_scaling", rope_scaling_choices, &m->rope_scaling, err) != CT_OK ||
        get_enum(a, "recompute", recompute_choices, &m->recompute, err) != CT_OK)
        return CT_ERR_INVALID;
    int abias = GPT_ABIAS_AUTO;
    if (get_enum(a, "attn_bias", abias_choices, &abias, err) != CT_OK) return CT_ERR_INVALID;
    m->qkv_bias = abias == GPT_ABIAS_AUTO ? m->bias : abias == GPT_ABIAS_QKV || abias == GPT_ABIAS_QKV_O;
    m->proj_bias = abias == GPT_ABIAS_AUTO ? m->bias : abias == GPT_ABIAS_QKV_O;
    double dropout;
    if (api->get_float(a->host, sec, "dropout", &dropout, err) != CT_OK) return CT_ERR_INVALID;
    if (!(dropout >= 0 && dropout < 1))
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: [%s] dropout = %g must be in [0, 1)",
                            sec, dropout);
    m->dropout = (float)dropout;
    double eps, theta;
    if (api->get_float(a->host, sec, "norm_eps", &eps, err) != CT_OK ||
        api->get_float(a->host, sec, "rope_theta", &theta, err) != CT_OK ||
        api->get_float(a->host, sec, "rope_factor", &m->rope_factor, err) != CT_OK ||
        api->get_float(a->host, sec, "rope_low_freq_factor", &m->rope_low, err) != CT_OK ||
        api->get_float(a->host, sec, "rope_high_freq_factor", &m->rope_high, err) != CT_OK)
        return CT_ERR_INVALID;
    m->rope_orig_T = orig_T;
    if (m->rope_scaling != GPT_ROPE_NONE && !(m->rope_factor > 0))
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: [%s] rope_factor = %g must be > 0",
                            sec, m->rope_factor);
    if (m->rope_scaling == GPT_ROPE_LLAMA3 && !(m->rope_high > m->rope_low))
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: [%s] rope_scaling = llama3 needs "
                            "rope_high_freq_factor (%g) > rope_low_freq_factor (%g) ---> set them "
                            "as the model's config.json does", sec, m->rope_high, m->rope_low);
    if (!(eps > 0))
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: [%s] norm_eps = %g must be > 0", sec, eps);
    m->eps = (float)eps;
    m->rope_theta = (float)theta;

    if (m->C % m->NH != 0)
        return ct_error_set(err, CT_ERR_INVALID,
                            "model gpt: [%s] n_head = %lld must divide d_model = %lld "
                            "---> pick n_head among the divisors of d_model", sec,
                            (long long)m->NH, (long long)m->C);
    m->HD = m->C / m->NH;
    m->KVH = kvh > 0 ? kvh : m->NH;
    if (m->NH % m->KVH != 0)
        return ct_error_set(err, CT_ERR_INVALID,
                            "model gpt: [%s] n_kv_head = %lld must divide n_head = %lld "
                            "---> pick n_kv_head among the divisors of n_head (1: multi-query; "
                            "n_head or 0: multi-head)", sec, (long long)m->KVH, (long long)m->NH);
    m->KC = m->KVH * m->HD;
    m->QW = m->C + 2 * m->KC;
    if (m->pos == GPT_POS_ROPE && m->HD % 2 != 0)
        return ct_error_set(err, CT_ERR_INVALID,
                            "model gpt: [%s] pos = rope needs an even head dim, but d_model/n_head "
                            "= %lld ---> change n_head or d_model", sec, (long long)m->HD);
    if (inter > 0)
        m->F = inter;
    else if (m->mlp == GPT_MLP_SWIGLU) /* open_lm: 2/3 of 4C rounded up to 256 */
        m->F = 256 * (((int64_t)(2.0 * 4.0 * (double)m->C / 3.0) + 256 - 1) / 256);
    else
        m->F = 4 * m->C;

    /* [device] threads: 0 or absent = the host's count for this rank ([device] auto_threads,
     * ctrain.h: the same the device plugin takes); a host without it: all cores. The products'
     * bits do not depend on it (gpt_sgemm's tiles). */
    int64_t threads = 0, host_auto = 0;
    ct_error ignored = {sizeof ignored, 0, {0}};
    if (api->get_int(a->host, "device", "threads", &threads, &ignored) != CT_OK) threads = 0;
    if (threads <= 0 &&
        api->get_int(a->host, "device", "auto_threads", &host_auto, &ignored) != CT_OK)
        host_auto = 0;
    m->threads = threads > 0 ? (int)threads : host_auto > 0 ? (int)host_auto : omp_get_num_procs();
    if (m->threads < 1) m->threads = 1;
    /* one thread pool: the plugin splits products over OpenMP threads itself, so OpenBLAS
     * runs each part on the calling thread (a second spinning pool halves the throughput) */
    openblas_set_num_threads(1);
    return CT_OK;
}

/* One inverse frequency after [model] rope_scaling, in f32 as transformers computes it
 * (modeling_rope_utils: _compute_linear_scaling_rope_parameters, _compute_llama3_parameters;
 * both keep attention_factor 1, so cos and sin are not scaled). */
static float rope_scaled(const gpt *m, float inv) {
    float factor = (float)m->rope_factor;
    if (m->rope_scaling == GPT_ROPE_LINEAR) return inv / factor;
    if (m->rope_scaling != GPT_ROPE_LLAMA3) return inv;
    float lo = (float)m->rope_low, hi = (float)m->rope_high, old = (float)m->rope_orig_T;
    float low_wavelen = old / lo, high_wavelen = old / hi;
    float wavelen = 2.0f * 3.14159265358979323846f / inv;
    float scaled = wavelen > low_wavelen ? inv / factor : inv; /* long waves: divided */
    if (wavelen < high_wavelen || wavelen > low_wavelen) return scaled;
    float smooth = (old / wavelen - lo) / (hi - lo); /* the medium band: interpolated */
    return (1.0f - smooth) * scaled / factor + smooth * scaled;
}

static int32_t build_rope(gpt *m, ct_error *err) {
    if (m->pos != GPT_POS_ROPE) return CT_OK;
    int64_t half = m->HD / 2;
    m->rope_cos = malloc((size_t)(m->max_T * half) * sizeof(float));
    m->rope_sin = malloc((size_t)(m->max_T * half) * sizeof(float));
    if (!m->rope_cos || !m->rope_sin)
        return ct_error_set(err, CT_ERR_NOMEM, "model gpt: out of memory for the rope table "
                            "(seq_len %lld) ---> lower seq_len", (long long)m->max_T);
    for (int64_t t = 0; t < m->max_T; t++)
        for (int64_t d = 0; d < half; d++) {
            /* inv_freq = theta^(-2d/HD), scaled; angle = t * inv_freq (f32 as PyTorch computes it) */
            float inv = (float)(1.0 / pow((double)m->rope_theta, (double)(2 * d) / (double)m->HD));
            inv = rope_scaled(m, inv);
            float ang = (float)t * inv;
            m->rope_cos[t * half + d] = cosf(ang);
            m->rope_sin[t * half + d] = sinf(ang);
        }
    return CT_OK;
}

#ifdef CT_HAVE_CUDA
/* Open the companion cuda/model_gpt_cuda.so beside this plugin and fill m->cu. Only on a CUDA
 * device: the CPU path never touches the companion or the CUDA libraries it links. */
static int32_t gpt_cuda_load(gpt *m, ct_error *err) {
    static const char *const names[] = GPT_CUDA_NAMES;
    static const ct_companion_info want = {sizeof(ct_companion_info), GPT_CUDA_INTERFACE,
                                           sizeof(gpt)};
    void *fn[sizeof names / sizeof names[0]];
    int32_t rc = ct_companion_load("model gpt", "model_gpt_cuda.so", &want, names, fn,
                                   (int)(sizeof names / sizeof names[0]), err);
    if (rc != CT_OK) return rc;
    m->cu.prepare = (int32_t (*)(gpt *, int64_t, int64_t, int32_t, ct_error *))fn[0];
    m->cu.free = (void (*)(gpt *))fn[1];
    m->cu.forward = (int32_t (*)(gpt *, const ct_stage_args *, ct_error *))fn[2];
    m->cu.backward = (int32_t (*)(gpt *, const ct_stage_args *, ct_error *))fn[3];
    m->cu.mean_hidden = (int32_t (*)(gpt *, float *, ct_error *))fn[4];
    m->cu.hidden_rows = (int32_t (*)(gpt *, int64_t, int64_t, float *, ct_error *))fn[5];
    return CT_OK;
}
#endif

/* ct_plugin_desc.validate: every check of the section that create() makes (read_config on a
 * scratch instance), without building anything. */
static int32_t gpt_validate(const ct_create_args *a, ct_error *err) {
    gpt scratch;
    memset(&scratch, 0, sizeof scratch);
    return read_config(&scratch, a, err);
}

static void *gpt_create(const ct_create_args *a, ct_error *err) {
    gpt *m = calloc(1, sizeof *m);
    if (!m) return ct_error_set(err, CT_ERR_NOMEM, "model gpt: out of memory"), NULL;
    m->api = a->api;
    m->host = a->host;
    m->dev = a->device;
    m->rank = a->rank;
    if (a->device.type == CT_DEVICE_CUDA) {
#ifdef CT_HAVE_CUDA
        if (gpt_cuda_load(m, err) != CT_OK) goto out_destroy;
        m->on_cuda = 1;
#else
        ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: [device] type = cuda, but this build "
                     "of model_gpt.so has no CUDA code ---> rebuild with nvcc (CUDA=1), or use "
                     "[device] type = cpu");
        goto out_destroy;
#endif
    }
    if (read_config(m, a, err) != CT_OK) goto out_destroy;
    if (build_units(m, err) != CT_OK) goto out_destroy;
    if (build_rope(m, err) != CT_OK) goto out_destroy;
    return m;

out_destroy:
    gpt_destroy(m);
    return NULL;
}

/* ---------------------------------------------------------------------------------------
 * describe / prepare
 * ------------------------------------------------------------------------------------- */

/* FLOPs per token of a training step (see ct_model_desc): 6 per parameter that multiplies
 * activations — every parameter counted once (a tied head once: the embedding lookup is no
 * product, the head is) except the learned position table, as nanoGPT's estimate_mfu; norm
 * gains and biases are kept in (under 0.1% of GPT-2's count) — plus 12·L·C per position of T
 * for QK^T and AV. SwiGLU's three matrices are all in n_params, so it needs no special case. */
static void flops_per_token(const gpt *m, double *fixed, double *per_t) {
    double n = (double)m->n_params;
    if (m->pos == GPT_POS_LEARNED) n -= (double)m->max_T * (double)m->C;
    *fixed = 6.0 * n;
    *per_t = 12.0 * (double)m->L * (double)m->C;
}

static int32_t gpt_describe(void *self, ct_model_desc *out, ct_error *err) {
    gpt *m = self;
    double fpt_fixed, fpt_per_t;
    flops_per_token(m, &fpt_fixed, &fpt_per_t);
    ct_model_desc d = {
        .struct_size = sizeof d,
        .n_units = (uint32_t)(m->L + 1),
        .units = m->units,
        .n_stages = (uint32_t)(m->L + 2),
        .stages = m->stages,
        .tensor_struct_size = sizeof(ct_tensor_spec),
        .vocab_size = m->V,
        .max_seq_len = m->max_T,
        .d_model = m->C,
        .head_unit = 0,
        .head_tensor = m->head_tensor,
        .n_params = m->n_params,
        .flops_per_token_fixed = fpt_fixed,
        .flops_per_token_per_t = fpt_per_t,
        .head_row_range = 1, /* the head takes row ranges (stages.c, gpt_cuda.cu) */
        .doc_mask = 1,       /* attention.c's and the CUDA kernels' document masking */
    };
    if (!out) return ct_error_set(err, CT_ERR_INVALID, "model gpt: describe() got a NULL desc");
    uint32_t size = out->struct_size && out->struct_size < sizeof d ? out->struct_size : sizeof d;
    memcpy(out, &d, size);
    out->struct_size = size;
    return CT_OK;
}

/* Carve n floats (64-byte aligned) from the arena cursor; with base == NULL only count. */
static float *carve(char *base, uint64_t *cursor, uint64_t n) {
    uint64_t at = *cursor;
    *cursor += ct_align_up(n * sizeof(float), 64);
    return base ? (float *)(base + at) : NULL;
}

/* Lay out every activation buffer; with base == NULL just compute the total bytes. */
static uint64_t layout(gpt *m, char *base) {
    uint64_t c = 0;
    uint64_t N = (uint64_t)m->N, C = (uint64_t)m->C, T = (uint64_t)m->T, F = (uint64_t)m->F;
    uint64_t FH = m->mlp == GPT_MLP_SWIGLU ? 2 * F : F, QW = (uint64_t)m->QW;
    m->tokens = (int32_t *)carve(base, &c, N);
    m->doc_start = (int32_t *)carve(base, &c, N);
    if (base) memset(m->doc_start, 0, N * sizeof(int32_t));
    m->tok_order = (int32_t *)carve(base, &c, N);
    m->tok_start = (int32_t *)carve(base, &c, (uint64_t)m->V + 1);
    m->res = carve(base, &c, (uint64_t)(m->L + 1) * N * C);
    /* [model] recompute: blocks share one set of buffers (copies of acts[0]); attention shares
     * the attention half's (ln1 .. lse) and keeps the rest per block */
    uint64_t acts_from = c;
    for (int64_t l = 0; l < m->L; l++) {
        gpt_block_acts *b = &m->acts[l];
        if (l > 0 && m->recompute == GPT_RECOMPUTE_BLOCKS) {
            *b = m->acts[0];
            continue;
        }
        if (l > 0 && m->recompute == GPT_RECOMPUTE_ATTENTION) {
            *b = m->acts[0];
            goto mlp_half;
        }
        b->ln1 = carve(base, &c, N * C);
        b->ln1_mean = carve(base, &c, N);
        b->ln1_rstd = carve(base, &c, N);
        b->qkv = carve(base, &c, N * QW);
        b->q_mean = b->q_rstd = b->k_mean = b->k_rstd = NULL;
        if (m->qk_norm) {
            b->q_mean = carve(base, &c, N);
            b->q_rstd = carve(base, &c, N);
            b->k_mean = carve(base, &c, N);
            b->k_rstd = carve(base, &c, N);
        }
        b->qkv_att = (m->qk_norm || m->pos == GPT_POS_ROPE) ? carve(base, &c, N * QW) : b->qkv;
        b->att = carve(base, &c, N * C);
        b->lse = carve(base, &c, N * (uint64_t)m->NH);
    mlp_half:
        b->xmid = carve(base, &c, N * C);
        b->ln2 = carve(base, &c, N * C);
        b->ln2_mean = carve(base, &c, N);
        b->ln2_rstd = carve(base, &c, N);
        b->h = carve(base, &c, N * FH);
        b->g = carve(base, &c, N * F);
    }
    m->act_bytes = c - acts_from;
    m->lnf = carve(base, &c, N * C);
    m->lnf_mean = carve(base, &c, N);
    m->lnf_rstd = carve(base, &c, N);
    m->dres = carve(base, &c, N * C);
    m->dnc = carve(base, &c, N * C);
    m->dqkv = carve(base, &c, N * QW);
    m->dh = carve(base, &c, N * FH);
    m->dg = carve(base, &c, N * F);
    m->att_s = carve(base, &c, (uint64_t)m->threads * GPT_ATT_QB * T);
    m->att_dp = carve(base, &c, (uint64_t)m->threads * GPT_ATT_QB * T);
    m->att_pd = m->dropout > 0 ? carve(base, &c, (uint64_t)m->threads * GPT_ATT_QB * T) : NULL;
    /* gradient scratch: whole bias/norm vectors, the wpe gradient (T,C), and >= one row chunk */
    uint64_t g = 1u << 20;
    if (g < T * C) g = T * C;
    if (g < 4 * FH) g = 4 * FH;
    if (g < 8 * C) g = 8 * C;
    m->gbuf_n = (int64_t)g;
    m->gbuf = carve(base, &c, g);
    m->wbuf = NULL;
    m->dlog = NULL;
    m->xb = m->yb = m->qkvb = m->att_b = NULL;
    if (m->dtype == CT_DTYPE_BF16 || m->dtype == CT_DTYPE_F16) {
        m->wbuf = carve(base, &c, m->unit_numel_max);
        m->dlog = carve(base, &c, N * GPT_VCHUNK);
    }
    if (m->dtype == CT_DTYPE_BF16 && m->use_dnnl) { /* bf16 operands: 2 bytes, half a float */
        uint64_t wmax = QW > FH ? QW : FH;
        m->xb = (uint16_t *)carve(base, &c, (N * wmax + 1) / 2);
        m->yb = (uint16_t *)carve(base, &c, (N * wmax + 1) / 2);
        m->qkvb = (uint16_t *)carve(base, &c, (N * QW + 1) / 2);
        m->att_b = (uint16_t *)carve(base, &c, (uint64_t)m->threads * GPT_ATT_QB * T);
    }
    return c;
}

/* ---------------------------------------------------------------------------------------
 * bf16 products: OpenBLAS or oneDNN (onednn.c)
 * ------------------------------------------------------------------------------------- */

static void dnnl_contexts_free(gpt *m) {
    gpt_dnnl_free(m->dnnl);
    m->dnnl = NULL;
    if (m->dnnl_att)
        for (int t = 0; t < m->threads; t++) gpt_dnnl_free(m->dnnl_att[t]);
    free(m->dnnl_att);
    m->dnnl_att = NULL;
}

/* Choose how this instance multiplies bf16 operands (m->use_dnnl), create its oneDNN contexts
 * when that is oneDNN, and write the start-up line into line. Called by the first bf16
 * prepare() on the CPU. */
static void choose_bf16_path(gpt *m, char *line, size_t n) {
    gpt_dnnl_info in;
    gpt_dnnl_probe(&in);
    const char *why = NULL;
    if (m->bf16_matmul == GPT_MM_OPENBLAS) why = "[model] bf16_matmul = openblas";
    else if (!in.built) why = "this build of model_gpt.so has no oneDNN (install libdnnl-dev, rebuild)";
    else if (!in.bf16) why = "that ISA has no bf16 instructions";
    else if (m->bf16_matmul == GPT_MM_AUTO && !in.amx)
        why = "without AMX its bf16 kernels ran at half the f32 rate here (docs/benchmarks.md); "
              "[model] bf16_matmul = onednn uses them";
    if (!why) {
        m->dnnl = gpt_dnnl_new(m->threads);
        m->dnnl_att = calloc((size_t)m->threads, sizeof *m->dnnl_att);
        int ok = m->dnnl && m->dnnl_att;
        for (int t = 0; ok && t < m->threads; t++) ok = (m->dnnl_att[t] = gpt_dnnl_new(1)) != NULL;
        if (!ok) {
            dnnl_contexts_free(m);
            why = "its engine could not be created";
        }
    }
    m->use_dnnl = why == NULL;
    if (m->use_dnnl)
        snprintf(line, n, "cpu bf16: oneDNN %s, %s (%s): bf16 x bf16 -> f32 products", in.version,
                 in.isa, in.impl[0] ? in.impl : "?");
    else if (in.built)
        snprintf(line, n, "cpu bf16: OpenBLAS, f32 products of the bf16 values; oneDNN %s runs %s: "
                 "%s", in.version, in.isa, why);
    else
        snprintf(line, n, "cpu bf16: OpenBLAS, f32 products of the bf16 values: %s", why);
}

static int32_t gpt_prepare(void *self, int64_t B, int64_t T, int32_t dtype, ct_error *err) {
    gpt *m = self;
    if (B < 1 || T < 1 || T > m->max_T)
        return ct_error_set(err, CT_ERR_INVALID,
                            "model gpt: prepare(B=%lld, T=%lld): T must be in 1..seq_len=%lld "
                            "---> raise [model] seq_len or lower [data] seq_len",
                            (long long)B, (long long)T, (long long)m->max_T);
    if (dtype != CT_DTYPE_F32 && dtype != CT_DTYPE_BF16 && dtype != CT_DTYPE_F16)
        return ct_error_set(err, CT_ERR_UNSUPPORTED,
                            "model gpt: compute dtype %s is not supported ---> use f32, bf16 or "
                            "f16", ct_dtype_name(dtype));
    if (m->on_cuda && (m->dropout > 0 || m->recompute != GPT_RECOMPUTE_NONE))
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "model gpt: [model] %s runs on the CPU only "
                            "for now ---> leave it out on [device] type = cuda",
                            m->dropout > 0 ? "dropout" : "recompute");
    if (m->on_cuda) return m->cu.prepare(m, B, T, dtype, err);
    if (dtype == CT_DTYPE_F16 && !m->f16_said) { /* once per instance */
        m->f16_said = 1;
        if (m->rank == 0 && m->api->log)
            m->api->log(m->host, CT_LOG_INFO, "cpu f16: OpenBLAS, f32 products of the f16 "
                        "values (operands and activations rounded to f16; oneDNN's path is "
                        "bf16 only)");
    }
    if (dtype == CT_DTYPE_BF16 && !m->mm_said) { /* once per instance */
        char line[400];
        choose_bf16_path(m, line, sizeof line);
        m->mm_said = 1;
        if (m->rank == 0 && m->api->log) m->api->log(m->host, CT_LOG_INFO, line);
    }
    if (m->arena && m->B == B && m->T == T && m->dtype == dtype) return CT_OK;
    if (m->arena) m->api->free_mem(m->host, m->arena);
    m->arena = NULL;
    free(m->acts);
    m->acts = calloc((size_t)m->L, sizeof *m->acts);
    if (!m->acts) return ct_error_set(err, CT_ERR_NOMEM, "model gpt: out of memory");
    m->B = B, m->T = T, m->N = B * T, m->dtype = dtype;
    uint64_t bytes = layout(m, NULL);
    m->arena = m->api->alloc(m->host, bytes);
    if (!m->arena)
        return ct_error_set(err, CT_ERR_NOMEM,
                            "model gpt: cannot allocate %.1f MiB of activations for B=%lld T=%lld "
                            "---> lower [data] batch_size or seq_len",
                            (double)bytes / 1048576.0, (long long)B, (long long)T);
    layout(m, m->arena);
    if (m->rank == 0 && m->api->log) {
        char line[200];
        snprintf(line, sizeof line, "activations kept for backward: %.1f MiB of "
                 "blocks (recompute = %s), %.1f MiB in all, for B=%lld T=%lld",
                 (double)m->act_bytes / 1048576.0, recompute_choices[m->recompute],
                 (double)bytes / 1048576.0, (long long)B, (long long)T);
        /* said when recompute is chosen; with none only under CTRAIN_DEBUG (a debug line), so
         * the host's start-up line stays the first a run prints */
        m->api->log(m->host, m->recompute ? CT_LOG_INFO : CT_LOG_DEBUG, line);
    }
    return CT_OK;
}

/* Mean over the N rows of the latest forward's final-norm output lnf (N,C): the head's input. */
static int32_t gpt_mean_hidden(void *self, float *out, ct_error *err) {
    gpt *m = self;
    if (!m->arena)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: mean_hidden before any forward");
    if (m->on_cuda) return m->cu.mean_hidden(m, out, err);
    for (int64_t c = 0; c < m->C; c++) {
        double s = 0;
        for (int64_t i = 0; i < m->N; i++) s += m->lnf[i * m->C + c];
        out[c] = (float)(s / (double)m->N);
    }
    return CT_OK;
}

/* Rows row0 .. row0+n_rows-1 of the latest forward's lnf (N,C), the head's input. */
static int32_t gpt_hidden_rows(void *self, int64_t row0, int64_t n_rows, float *out,
                               ct_error *err) {
    gpt *m = self;
    if (!m->arena)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: hidden_rows before any forward");
    if (row0 < 0 || n_rows < 0 || row0 > m->N - n_rows)
        return ct_error_set(err, CT_ERR_INVALID, "model gpt: hidden_rows %lld..%lld outside the "
                            "latest forward's %lld rows", (long long)row0,
                            (long long)(row0 + n_rows), (long long)m->N);
    if (m->on_cuda) return m->cu.hidden_rows(m, row0, n_rows, out, err);
    memcpy(out, m->lnf + row0 * m->C, (size_t)(n_rows * m->C) * sizeof *out);
    return CT_OK;
}

/* ---------------------------------------------------------------------------------------
 * The descriptor
 * ------------------------------------------------------------------------------------- */

static const ct_model_vtable gpt_vtable = {
    .struct_size = sizeof(ct_model_vtable),
    .create = gpt_create,
    .destroy = gpt_destroy,
    .describe = gpt_describe,
    .prepare = gpt_prepare,
    .forward = gpt_forward,
    .backward = gpt_backward,
    .mean_hidden = gpt_mean_hidden,
#ifndef GPT_WITHOUT_HIDDEN_ROWS /* -DGPT_WITHOUT_HIDDEN_ROWS: a model without it, as an ABI 1.3
                                   plugin is (tests/cli/test_whatif.sh: the prefix fallback) */
    .hidden_rows = gpt_hidden_rows,
#endif
#ifndef GPT_WITHOUT_DECODE /* -DGPT_WITHOUT_DECODE: a model without incremental decoding, as
                              an ABI 1.1 plugin is (tests/cli/test_sample.sh: the host's
                              fallback to forward()) */
    .prepare_decode = gpt_prepare_decode,
    .decode = gpt_decode,
#endif
};

#ifdef CT_HAVE_CUDA
#define GPT_SUMMARY "GPT-2 / open_lm / Llama-style transformer (norm, mlp, pos, GQA, rope scaling, qk-norm, tying options), CPU+CUDA"
#else
#define GPT_SUMMARY "GPT-2 / open_lm / Llama-style transformer (norm, mlp, pos, GQA, rope scaling, qk-norm, tying options), CPU"
#endif

CT_DEFINE_PLUGIN(
    .kind = CT_KIND_MODEL,
    .name = "gpt",
    .version = "1.0.0",
    .summary = GPT_SUMMARY,
    .params = gpt_params,
    .devices = GPT_DEVICES,
    .vtable = &gpt_vtable,
    .validate = gpt_validate,)

