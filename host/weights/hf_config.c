/* hf_config.c — config.json beside init_from, read as [model] settings (see hf_config.h).
 * Hugging Face's defaults (GPT2Config, LlamaConfig) stand for keys a file leaves out. */
#include "weights/hf_config.h"

#include "weights/export_layout.h"

#include "base/printable.h"
#include "io/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define HF_CONFIG_MAX (16u << 20) /* a config.json larger than this is refused */
#define HINT_FROM "set [model] from_config = true to take the model's settings from config.json"

const char *hf_config_path(const char *init_from, char *buf, size_t cap) {
    struct stat st;
    if (!init_from || !*init_from || stat(init_from, &st) != 0) return NULL;
    int n;
    if (S_ISDIR(st.st_mode)) {
        n = snprintf(buf, cap, "%s/config.json", init_from);
    } else {
        const char *slash = strrchr(init_from, '/');
        n = slash ? snprintf(buf, cap, "%.*s/config.json", (int)(slash - init_from), init_from)
                  : snprintf(buf, cap, "config.json");
    }
    if (n < 0 || (size_t)n >= cap) return NULL;
    /* lstat: a config.json that is a link to nothing is there (and refused by name when read),
     * never silently absent */
    return lstat(buf, &st) == 0 ? buf : NULL;
}

typedef struct reader {
    const json_value *root;
    hf_arch          *a;
    ct_error         *err;
    int32_t           rc;
} reader;

static void add(reader *r, const char *key, const char *from, int at_most, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void add(reader *r, const char *key, const char *from, int at_most, const char *fmt, ...) {
    if (r->a->n == HF_MAX_SETTINGS) return;
    hf_setting *s = &r->a->s[r->a->n++];
    snprintf(s->key, sizeof s->key, "%s", key);
    snprintf(s->from, sizeof s->from, "%s", from);
    s->at_most = at_most;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->value, sizeof s->value, fmt, ap);
    va_end(ap);
}

/* A number of the file (its default when absent or null); an error for another type. */
static double num(reader *r, const json_value *obj, const char *key, double dflt) {
    const json_value *v = json_get(obj, key);
    if (!v || v->type == JSON_NULL) return dflt;
    if (v->type != JSON_NUMBER && r->rc == CT_OK)
        r->rc = ct_error_set(r->err, CT_ERR_INVALID, "%s: \"%s\" is not a number ---> the file "
                             "is damaged", r->a->path, key);
    return v->type == JSON_NUMBER ? v->number : dflt;
}

/* A bool of the file (its default when absent or null). */
static int flag(reader *r, const char *key, int dflt) {
    const json_value *v = json_get(r->root, key);
    if (!v || v->type == JSON_NULL) return dflt;
    if (v->type != JSON_TRUE && v->type != JSON_FALSE && r->rc == CT_OK)
        r->rc = ct_error_set(r->err, CT_ERR_INVALID, "%s: \"%s\" is not true or false ---> the "
                             "file is damaged", r->a->path, key);
    return v->type == JSON_TRUE;
}

static const char *text(const json_value *obj, const char *key, const char *dflt) {
    const char *s = json_string(json_get(obj, key));
    return s ? s : dflt;
}

static int32_t refuse(reader *r, const char *why) {
    if (r->rc == CT_OK)
        r->rc = ct_error_set(r->err, CT_ERR_UNSUPPORTED, "%s: %s ---> the gpt model cannot "
                             "represent this architecture; start from a model it can (GPT-2; "
                             "Llama, Mistral, Qwen2 with head_dim = hidden_size / heads, "
                             "silu, no MLP bias, rope default, linear or llama3)",
                             r->a->path, why);
    return r->rc;
}

/* A positive integer setting from config.json key `from`. */
static int64_t count(reader *r, const char *from, double dflt) {
    double v = num(r, r->root, from, dflt);
    if (!(v >= 1 && v <= 9e15 && v == floor(v))) { /* never converted: 1e300 is no int64_t */
        if (r->rc == CT_OK)
            r->rc = ct_error_set(r->err, CT_ERR_INVALID, "%s: \"%s\" = %g is not a positive "
                                 "integer ---> the file is damaged", r->a->path, from, v);
        return 1;
    }
    return (int64_t)v;
}

/* What a family fixes: its norm, MLP, positions and biases (and no qk_norm). */
typedef struct arch_kind {
    const char *family, *norm, *mlp_from, *mlp, *pos, *bias_from, *bias;
} arch_kind;

/* The five sizes (n_layer, n_head, d_model, vocab_size, seq_len) from config.json's keys
 * from[], the context possibly smaller with ctx_at_most, then the family's fixed settings. */
static void add_shape(reader *r, const char *const from[5], const int64_t sizes[5],
                      int ctx_at_most, const arch_kind *k) {
    static const char *const keys[] = {"n_layer", "n_head", "d_model", "vocab_size", "seq_len"};
    for (int i = 0; i < 5; i++)
        add(r, keys[i], from[i], i == 4 && ctx_at_most, "%lld", (long long)sizes[i]);
    add(r, "norm", k->family, 0, "%s", k->norm);
    add(r, "mlp", k->mlp_from, 0, "%s", k->mlp);
    add(r, "pos", k->family, 0, "%s", k->pos);
    add(r, "bias", k->bias_from, 0, "%s", k->bias);
    add(r, "qk_norm", k->family, 0, "false");
}

/* GPT2Config's keys and defaults. */
static void read_gpt2(reader *r) {
    int64_t L = count(r, "n_layer", 12), NH = count(r, "n_head", 12), C = count(r, "n_embd", 768);
    int64_t V = count(r, "vocab_size", 50257), T = count(r, "n_positions", 1024);
    double eps = num(r, r->root, "layer_norm_epsilon", 1e-5);
    double inner = num(r, r->root, "n_inner", 0);
    const char *act = text(r->root, "activation_function", "gelu_new");
    char why[256];
    if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_fast")) {
        snprintf(why, sizeof why, "activation_function \"%.64s\": the gpt model's GELU is the "
                 "tanh approximation (gelu_new, gelu_pytorch_tanh); %s", act,
                 !strcmp(act, "gelu") ? "the exact (erf) GELU differs from it by up to 3e-4 per "
                 "activation" : "another activation is not available");
        refuse(r, why);
    }
    if (inner != 0 && !(inner >= 1 && inner <= 1048576 && inner == floor(inner))) {
        snprintf(why, sizeof why, "n_inner = %g: the gpt model's MLP width is a whole number "
                 "1..1048576", inner);
        refuse(r, why);
    }
    if (!flag(r, "scale_attn_weights", 1))
        refuse(r, "scale_attn_weights = false: the gpt model scales attention by 1/sqrt(head size)");
    if (flag(r, "scale_attn_by_inverse_layer_idx", 0))
        refuse(r, "scale_attn_by_inverse_layer_idx = true: the gpt model does not scale "
               "attention by layer");
    if (!flag(r, "tie_word_embeddings", 1))
        refuse(r, "tie_word_embeddings = false: a GPT-2 file's output head is its token "
               "embedding");
    static const char *const from[] = {"n_layer", "n_head", "n_embd", "vocab_size",
                                       "n_positions"};
    const int64_t sizes[] = {L, NH, C, V, T};
    static const arch_kind gpt2 = {"(GPT-2)", "layernorm", "activation_function", "gelu",
                                   "learned", "(GPT-2)", "true"};
    add_shape(r, from, sizes, 0, &gpt2);
    add(r, "tie_embeddings", "tie_word_embeddings", 0, "true");
    add(r, "norm_eps", "layer_norm_epsilon", 0, "%.9g", eps);
    if (inner > 0 && inner != 4.0 * (double)C) /* else [model]'s rule, 4C, gives it */
        add(r, "intermediate_size", "n_inner", 0, "%lld", (long long)inner);
    add(r, "n_kv_head", "(GPT-2)", 0, "%lld", (long long)NH);
    add(r, "attn_bias", "(GPT-2)", 0, "qkv_o");
}

/* A family of Llama's shape: its config class's defaults for the keys a file leaves out. */
typedef struct llama_family {
    const char *name;       /* "(Llama)", "(Mistral)", "(Qwen2)" */
    double      L, NH, C, V, T, F, eps;
    int         qkv_bias;   /* Qwen2: q/k/v biases always, no output bias */
    int         window;     /* the file may name a sliding window (Mistral, Qwen2) */
} llama_family;

static const llama_family LLAMA = {"(Llama)", 32, 32, 4096, 32000, 2048, 11008, 1e-6, 0, 0};
static const llama_family MISTRAL = {"(Mistral)", 32, 32, 4096, 32000, 131072, 14336, 1e-6, 0, 1};
static const llama_family QWEN2 = {"(Qwen2)", 32, 32, 4096, 151936, 32768, 22016, 1e-6, 1, 1};

/* rope_scaling (or, in newer files, rope_parameters with a rope_type other than default):
 * linear and llama3 as [model] rope_scaling with their factors; every other type refused. */
static void read_rope_scaling(reader *r, const json_value *rp, int64_t T) {
    const json_value *sc = json_get(r->root, "rope_scaling");
    if (!sc || sc->type == JSON_NULL) sc = rp;
    const char *type = sc && sc->type == JSON_OBJECT ? text(sc, "rope_type", text(sc, "type",
                                                       "default")) : "default";
    const char *from = sc == rp ? "rope_parameters" : "rope_scaling";
    char why[256];
    if (!strcmp(type, "default")) {
        add(r, "rope_scaling", from, 0, "none");
        return;
    }
    if (strcmp(type, "linear") && strcmp(type, "llama3")) {
        snprintf(why, sizeof why, "%s rope_type \"%.32s\": the gpt model scales rope as "
                 "linear or llama3 only (dynamic, yarn, longrope change it with the length)",
                 from, type);
        refuse(r, why);
        return;
    }
    double factor = num(r, sc, "factor", 1);
    if (!(factor > 0)) {
        snprintf(why, sizeof why, "%s factor = %g: a scaling factor is > 0", from, factor);
        refuse(r, why);
        return;
    }
    add(r, "rope_scaling", from, 0, "%s", type);
    add(r, "rope_factor", from, 0, "%.9g", factor);
    if (!strcmp(type, "llama3")) {
        double lo = num(r, sc, "low_freq_factor", 1), hi = num(r, sc, "high_freq_factor", 4);
        double orig = num(r, sc, "original_max_position_embeddings", (double)T);
        if (!(hi > lo) || !(orig >= 1 && orig <= 1073741824.0 && orig == floor(orig))) {
            snprintf(why, sizeof why, "%s: llama3 needs high_freq_factor (%g) > low_freq_factor "
                     "(%g) and a positive original_max_position_embeddings (%g)", from, hi, lo,
                     orig);
            refuse(r, why);
            return;
        }
        add(r, "rope_low_freq_factor", from, 0, "%.9g", lo);
        add(r, "rope_high_freq_factor", from, 0, "%.9g", hi);
        add(r, "rope_original_max_position", from, 0, "%lld", (long long)orig);
    }
}

/* LlamaConfig's keys (MistralConfig's and Qwen2Config's are the same names) and the family's
 * defaults; rope_theta also inside rope_parameters (newer files). [model] bias is the MLP's
 * (mlp_bias), attn_bias the attention's (attention_bias: q, k, v and o; Qwen2: q, k, v). */
static void read_llama(reader *r, const llama_family *fam) {
    int64_t L = count(r, "num_hidden_layers", fam->L), NH = count(r, "num_attention_heads", fam->NH);
    int64_t C = count(r, "hidden_size", fam->C), V = count(r, "vocab_size", fam->V);
    int64_t T = count(r, "max_position_embeddings", fam->T);
    int64_t KV = count(r, "num_key_value_heads", (double)NH);
    int64_t F = count(r, "intermediate_size", fam->F);
    int64_t HD = count(r, "head_dim", (double)(C / (NH > 0 ? NH : 1)));
    double eps = num(r, r->root, "rms_norm_eps", fam->eps);
    const json_value *rp = json_get(r->root, "rope_parameters");
    double theta = num(r, r->root, "rope_theta", rp ? num(r, rp, "rope_theta", 10000) : 10000);
    const char *act = text(r->root, "hidden_act", "silu");
    char why[256];
    if (NH % KV != 0) {
        snprintf(why, sizeof why, "num_key_value_heads = %lld does not divide "
                 "num_attention_heads = %lld", (long long)KV, (long long)NH);
        refuse(r, why);
    }
    int64_t width = 0; /* head_dim x heads: both up to 9e15, so the product is checked */
    if (__builtin_mul_overflow(HD, NH, &width) || width != C) {
        snprintf(why, sizeof why, "head_dim = %lld: the gpt model's heads are hidden_size / "
                 "num_attention_heads = %lld wide", (long long)HD, (long long)(C / NH));
        refuse(r, why);
    }
    if (strcmp(act, "silu")) {
        snprintf(why, sizeof why, "hidden_act \"%.64s\": the gpt model's gated MLP is SwiGLU "
                 "(silu)", act);
        refuse(r, why);
    }
    if (json_get(r->root, "pretraining_tp") && num(r, r->root, "pretraining_tp", 1) != 1)
        refuse(r, "pretraining_tp != 1: the gpt model computes the projections whole");
    /* a sliding window no wider than the context: [model] seq_len may then be at most the
     * window, where no position is outside it and attention is the full causal one */
    int64_t ctx = T;
    const char *ctx_from = "max_position_embeddings";
    const json_value *sw = json_get(r->root, "sliding_window");
    int windowed = sw && sw->type != JSON_NULL &&
                   (!json_get(r->root, "use_sliding_window") || flag(r, "use_sliding_window", 0));
    if (windowed) {
        int64_t w = count(r, "sliding_window", 1);
        if (w < ctx) ctx = w, ctx_from = "sliding_window (no wider than max_position_embeddings)";
    }
    static const char *const from_tail[] = {"num_hidden_layers", "num_attention_heads",
                                            "hidden_size", "vocab_size"};
    const char *from[5] = {from_tail[0], from_tail[1], from_tail[2], from_tail[3], ctx_from};
    const int64_t sizes[] = {L, NH, C, V, ctx};
    arch_kind k = {fam->name, "rmsnorm", "hidden_act", "swiglu", "rope", "mlp_bias",
                   flag(r, "mlp_bias", 0) ? "true" : "false"}; /* RMSNorm has no bias either way */
    add_shape(r, from, sizes, 1, &k);
    add(r, "n_kv_head", "num_key_value_heads", 0, "%lld", (long long)KV);
    add(r, "intermediate_size", "intermediate_size", 0, "%lld", (long long)F);
    if (fam->qkv_bias)
        add(r, "attn_bias", "(Qwen2: q/k/v biases)", 0, "qkv");
    else
        add(r, "attn_bias", "attention_bias", 0, "%s", flag(r, "attention_bias", 0) ? "qkv_o" : "none");
    add(r, "tie_embeddings", "tie_word_embeddings", 0, "%s",
        flag(r, "tie_word_embeddings", 0) ? "true" : "false");
    add(r, "norm_eps", "rms_norm_eps", 0, "%.9g", eps);
    add(r, "rope_theta", rp && !json_get(r->root, "rope_theta") ? "rope_parameters.rope_theta"
                                                                 : "rope_theta",
        0, "%.9g", theta);
    read_rope_scaling(r, rp, T);
}

/* ctrain's own config.json (--target ctrain): [model]'s keys as they are. */
static void read_ctrain(reader *r) {
    static const char *const ints[] = {"n_layer", "n_head", "d_model", "vocab_size", "seq_len"};
    static const char *const strs[] = {"norm", "mlp", "pos"};
    static const char *const bools[] = {"qk_norm", "tie_embeddings", "bias"};
    for (int i = 0; i < 5; i++) {
        int64_t v = count(r, ints[i], 0);
        add(r, ints[i], ints[i], 0, "%lld", (long long)v);
    }
    for (int i = 0; i < 3; i++) {
        const char *v = text(r->root, strs[i], NULL);
        if (!v && r->rc == CT_OK)
            r->rc = ct_error_set(r->err, CT_ERR_INVALID, "%s: \"%s\" is missing ---> the file "
                                 "is damaged", r->a->path, strs[i]);
        add(r, strs[i], strs[i], 0, "%.60s", v ? v : "");
    }
    for (int i = 0; i < 3; i++) add(r, bools[i], bools[i], 0, "%s", flag(r, bools[i], 0) ? "true" : "false");
    add(r, "norm_eps", "norm_eps", 0, "%.9g", num(r, r->root, "norm_eps", 1e-5));
    add(r, "rope_theta", "rope_theta", 0, "%.9g", num(r, r->root, "rope_theta", 10000));
    /* the keys of grouped-query attention, MLP width, attention biases and rope scaling;
     * absent in earlier exports, whose models are their defaults */
    add(r, "n_kv_head", "n_kv_head", 0, "%lld", (long long)num(r, r->root, "n_kv_head", 0));
    add(r, "intermediate_size", "intermediate_size", 0, "%lld",
        (long long)num(r, r->root, "intermediate_size", 0));
    const char *ab = text(r->root, "attn_bias", "auto"), *rs = text(r->root, "rope_scaling", "none");
    add(r, "attn_bias", "attn_bias", 0, "%.16s", ab);
    add(r, "rope_scaling", "rope_scaling", 0, "%.16s", rs);
    if (strcmp(rs, "none")) {
        add(r, "rope_factor", "rope_factor", 0, "%.9g", num(r, r->root, "rope_factor", 1));
        add(r, "rope_low_freq_factor", "rope_low_freq_factor", 0, "%.9g",
            num(r, r->root, "rope_low_freq_factor", 1));
        add(r, "rope_high_freq_factor", "rope_high_freq_factor", 0, "%.9g",
            num(r, r->root, "rope_high_freq_factor", 4));
        add(r, "rope_original_max_position", "rope_original_max_position", 0, "%lld",
            (long long)num(r, r->root, "rope_original_max_position", 8192));
    }
}

int32_t hf_config_read(const char *path, hf_arch *a, ct_error *err) {
    memset(a, 0, sizeof *a);
    snprintf(a->path, sizeof a->path, "%s", path);
    json_doc *doc = NULL;
    int32_t rc = json_read_file(path, "model configuration", "give the config.json saved with "
                                "the weights", HF_CONFIG_MAX, &doc, err);
    if (rc != CT_OK) return rc;
    reader r = {json_root(doc), a, err, CT_OK};
    const char *type = text(r.root, "model_type", "");
    const json_value *archs = json_get(r.root, "architectures");
    const char *arch = archs && archs->type == JSON_ARRAY && archs->n ? json_string(&archs->items[0])
                                                                     : NULL;
    if (r.root->type != JSON_OBJECT)
        rc = ct_error_set(err, CT_ERR_INVALID, "%s is not a JSON object ---> give the "
                          "config.json saved with the weights", path);
    else if (!strcmp(type, "gpt2") || (!*type && arch && !strcmp(arch, "GPT2LMHeadModel")))
        snprintf(a->kind, sizeof a->kind, "gpt2"), read_gpt2(&r);
    else if (!strcmp(type, "llama") || (!*type && arch && !strcmp(arch, "LlamaForCausalLM")))
        snprintf(a->kind, sizeof a->kind, "llama"), read_llama(&r, &LLAMA);
    else if (!strcmp(type, "mistral") || (!*type && arch && !strcmp(arch, "MistralForCausalLM")))
        snprintf(a->kind, sizeof a->kind, "mistral"), read_llama(&r, &MISTRAL);
    else if (!strcmp(type, "qwen2") || (!*type && arch && !strcmp(arch, "Qwen2ForCausalLM")))
        snprintf(a->kind, sizeof a->kind, "qwen2"), read_llama(&r, &QWEN2);
    else if (!strcmp(type, "ctrain-gpt") || !strcmp(text(r.root, "format", ""), "ctrain"))
        snprintf(a->kind, sizeof a->kind, "ctrain"), read_ctrain(&r);
    else
        rc = ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not gpt2, llama, "
                          "mistral or qwen2 ---> ctrain reads GPT-2, Llama (SmolLM, TinyLlama), "
                          "Mistral and Qwen2 folders (and its own exports)", path,
                          *type ? type : arch ? arch : "(none)");
    if (rc == CT_OK) rc = r.rc;
    json_free(doc);
    return rc;
}

static int is_int_key(const char *k) {
    return !strcmp(k, "n_layer") || !strcmp(k, "n_head") || !strcmp(k, "d_model") ||
           !strcmp(k, "vocab_size") || !strcmp(k, "seq_len") || !strcmp(k, "n_kv_head") ||
           !strcmp(k, "intermediate_size") || !strcmp(k, "rope_original_max_position");
}

static int is_float_key(const char *k) {
    return !strcmp(k, "norm_eps") || !strcmp(k, "rope_theta") || !strcmp(k, "rope_factor") ||
           !strcmp(k, "rope_low_freq_factor") || !strcmp(k, "rope_high_freq_factor");
}

/* An int key of [model] as the model takes it: n_kv_head 0 is n_head, intermediate_size 0
 * the width of the gpt model's rule. */
static int64_t effective_int(const host_config *cfg, const char *key, int64_t v) {
    if (v != 0) return v;
    int64_t x = 0;
    if (!strcmp(key, "n_kv_head") && config_get_int(cfg, "model", "n_head", &x, NULL) == CT_OK)
        return x;
    if (!strcmp(key, "intermediate_size") &&
        config_get_int(cfg, "model", "d_model", &x, NULL) == CT_OK) {
        const char *mlp = config_get(cfg, "model", "mlp");
        return layout_mlp_width(0, mlp ? mlp : "gelu", x);
    }
    return v;
}

/* [model] attn_bias as the model takes it: auto follows bias. */
static const char *effective_attn_bias(const host_config *cfg, const char *have) {
    int32_t b = 0;
    if (strcmp(have, "auto")) return have;
    if (config_get_bool(cfg, "model", "bias", &b, NULL) != CT_OK) return have;
    return b ? "qkv_o" : "none";
}

/* 1 when [model]'s value `have` satisfies the setting. */
static int agrees(const host_config *cfg, const hf_setting *s, const char *have) {
    if (is_int_key(s->key)) {
        int64_t a = 0;
        if (config_get_int(cfg, "model", s->key, &a, NULL) != CT_OK) return 0;
        a = effective_int(cfg, s->key, a);
        long long b = strtoll(s->value, NULL, 10);
        return s->at_most ? a <= b : a == effective_int(cfg, s->key, b);
    }
    if (!strcmp(s->key, "attn_bias"))
        return !strcmp(effective_attn_bias(cfg, have), effective_attn_bias(cfg, s->value));
    if (is_float_key(s->key)) {
        double a = 0, b = strtod(s->value, NULL);
        if (config_get_float(cfg, "model", s->key, &a, NULL) != CT_OK) return 0;
        return fabs(a - b) <= 1e-6 * fmax(fabs(a), fabs(b));
    }
    if (!strcmp(s->value, "true") || !strcmp(s->value, "false")) {
        int32_t a = 0;
        if (config_get_bool(cfg, "model", s->key, &a, NULL) != CT_OK) return 0;
        return a == !strcmp(s->value, "true");
    }
    return !strcmp(have, s->value);
}

/* The refusal names every setting that differs and ends with what to set. A message holds 511
 * bytes (ct_error); when the whole list does not fit (six Llama settings do not), the list goes
 * to stderr first, one setting a line, and the message says "N settings differ (listed
 * above)" before its hint, so no setting and no hint is lost. */
int32_t hf_config_check(const hf_arch *a, const host_config *cfg, ct_error *err) {
    const char *plugin = config_get(cfg, "model", "plugin");
    if (plugin && strcmp(plugin, "gpt")) return CT_OK;
    char list[HF_MAX_SETTINGS][320], sets[1024] = "";
    int bad = 0;
    size_t at_sets = 0;
    for (int32_t i = 0; i < a->n && bad < HF_MAX_SETTINGS; i++) {
        const hf_setting *s = &a->s[i];
        const char *have = config_get(cfg, "model", s->key);
        if (have && agrees(cfg, s, have)) continue;
        snprintf(list[bad], sizeof list[bad], "%s = %s in config.json (%s), [model] %s = %.64s "
                 "(%s)%s", s->key, s->value, s->from, s->key, have ? have : "unset",
                 config_origin(cfg, "model", s->key), s->at_most ? ", which may be no larger" : "");
        int k = snprintf(sets + at_sets, sizeof sets - at_sets, "%s%s = %s", bad ? ", " : "",
                         s->key, s->value);
        if (k > 0) at_sets = at_sets + (size_t)k < sizeof sets ? at_sets + (size_t)k : sizeof sets - 1;
        bad++;
    }
    if (!bad) return CT_OK;
    char whole[HF_MAX_SETTINGS * 322 + 64] = "";
    for (int i = 0, at = 0; i < bad; i++)
        at += snprintf(whole + at, sizeof whole - (size_t)at, "%s%s", i ? "; " : "", list[i]);
    int n = snprintf(NULL, 0, "%s (%s) disagrees with [model] in %d setting%s: %s ---> set "
                     "[model] %s, or " HINT_FROM, a->path, a->kind, bad, bad > 1 ? "s" : "",
                     whole, sets);
    if (n >= 0 && (size_t)n < sizeof err->message)
        return ct_error_set(err, CT_ERR_INVALID, "%s (%s) disagrees with [model] in %d setting%s: "
                            "%s ---> set [model] %s, or " HINT_FROM, a->path, a->kind, bad,
                            bad > 1 ? "s" : "", whole, sets);
    char shown[2048];
    fprintf(stderr, "ctrain: %s (%s) disagrees with [model] in %d settings:\n",
            printable(a->path, shown, sizeof shown), a->kind, bad);
    for (int i = 0; i < bad; i++) fprintf(stderr, "  %s\n", printable(list[i], shown, sizeof shown));
    return ct_error_set(err, CT_ERR_INVALID, "%s (%s): %d settings differ from [model] (listed "
                        "above) ---> set [model] %s, or " HINT_FROM, a->path, a->kind, bad, sets);
}

int32_t hf_config_fill(host_config *cfg, ct_error *err) {
    int32_t on = 0;
    if (!config_get(cfg, "model", "from_config") ||
        config_get_bool(cfg, "model", "from_config", &on, NULL) != CT_OK || !on)
        return CT_OK; /* a value that is not a bool is [model]'s validation's to report */
    const char *origin = config_origin(cfg, "model", "from_config");
    const char *plugin = config_get(cfg, "model", "plugin");
    if (plugin && strcmp(plugin, "gpt"))
        return ct_error_set(err, CT_ERR_INVALID, "%s: [model] from_config = true sets the gpt "
                            "model's keys; [model] plugin is %s ---> set plugin = gpt or "
                            "from_config = false", origin, plugin);
    /* a configuration that already sets every key config.json could (a run's resolved
     * config.ini, read again by sample or export) needs nothing from it */
    static const char *const keys[] = {"n_layer", "n_head", "d_model", "vocab_size", "seq_len",
                                       "norm", "mlp", "pos", "bias", "tie_embeddings", "qk_norm",
                                       "norm_eps", "rope_theta", "n_kv_head",
                                       "intermediate_size", "attn_bias", "rope_scaling",
                                       "rope_factor", "rope_low_freq_factor",
                                       "rope_high_freq_factor", "rope_original_max_position"};
    int all = 1;
    for (size_t i = 0; all && i < sizeof keys / sizeof *keys; i++) all = !!config_get(cfg, "model", keys[i]);
    if (all) return CT_OK;
    const char *init = config_get(cfg, "model", "init_from");
    char path[PATH_MAX];
    if (!init || !*init)
        return ct_error_set(err, CT_ERR_INVALID, "%s: [model] from_config = true needs [model] "
                            "init_from (a folder with config.json) ---> set init_from", origin);
    if (!hf_config_path(init, path, sizeof path))
        return ct_error_set(err, CT_ERR_INVALID, "%s: [model] from_config = true, but init_from "
                            "%s has no config.json %s ---> give a folder saved by "
                            "save_pretrained or `ctrain export`, or set the [model] keys", origin,
                            init, strrchr(init, '/') ? "beside it" : "");
    hf_arch a;
    int32_t rc = hf_config_read(path, &a, err);
    for (int32_t i = 0; rc == CT_OK && i < a.n; i++)
        if (!config_get(cfg, "model", a.s[i].key))
            rc = config_set(cfg, "model", a.s[i].key, a.s[i].value, a.path, err);
    return rc;
}
