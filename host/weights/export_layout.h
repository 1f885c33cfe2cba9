/* export_layout.h — how ctrain's parameter tensors map onto the tensors of an exported file
 * and back: Hugging Face GPT-2 (GPT2LMHeadModel: Conv1D weights stored (in, out)), Hugging
 * Face Llama (LlamaForCausalLM, and the Llama-shaped Mistral and Qwen2 files: q/k/v and
 * gate/up split out of ctrain's fused matrices, grouped-query k/v, attention biases),
 * llm.c's GPT-2 model file (per-layer tensors stacked, vocabulary padded), or ctrain's own
 * names. One table serves export (layout_get) and import (layout_put), so the two cannot
 * disagree. Not for: file formats (safetensors.c, llmc.c) or reading checkpoints. */
#ifndef CTRAIN_HOST_EXPORT_LAYOUT_H
#define CTRAIN_HOST_EXPORT_LAYOUT_H

#include "config/config.h"

#include <ctrain/ctrain.h>

enum {
    LAYOUT_AUTO     = -1, /* hf-gpt2 or hf-llama when the model is shaped so, else ctrain */
    LAYOUT_CTRAIN   = 0,
    LAYOUT_HF_GPT2  = 1,
    LAYOUT_HF_LLAMA = 2,
    LAYOUT_LLMC     = 3,
};

/* The gpt plugin's options as [model] holds them (defaults filled by wiring_resolve). */
typedef struct model_shape {
    int     is_gpt; /* [model] plugin = gpt; other plugins export with ctrain names only */
    int64_t L, NH, C, V, T, F, HD;
    int64_t KVH;    /* key/value heads (n_kv_head; 0 there: NH) */
    char    norm[32], mlp[32], pos[32];
    int32_t qk_norm, tie, bias;
    int32_t qkv_bias, proj_bias; /* attention biases ([model] attn_bias resolved against bias) */
    double  eps, theta;
    char    rope_scaling[16];    /* none, linear, llama3 */
    double  rope_factor, rope_low, rope_high;
    int64_t rope_orig;           /* original_max_position_embeddings (llama3) */
} model_shape;

/* [model] intermediate_size resolved: the value, or (0) the gpt model's rule for mlp and C. */
int64_t layout_mlp_width(int64_t intermediate_size, const char *mlp, int64_t C);

typedef struct layout_entry {
    char     name[256];   /* the tensor's name in the file */
    int32_t  ndim;
    int64_t  shape[2];    /* in the file */
    uint32_t unit, tensor;
    uint64_t offset;      /* element offset of the ctrain tensor in its unit */
    int64_t  cols;        /* the ctrain tensor's columns (1 for a vector) */
    int64_t  row0, nrows; /* the ctrain rows this entry holds */
    int32_t  transpose;   /* the file holds them (cols, nrows) */
} layout_entry;

typedef struct layout {
    int32_t       target;
    model_shape   s;
    layout_entry *e;
    int32_t       n;
} layout;

/* "ctrain", "hf-gpt2", "hf-llama", "llmc", "auto" <-> LAYOUT_*; -2 for an unknown name. */
int32_t layout_target_from_name(const char *name);
const char *layout_target_name(int32_t target);

/* Read [model] of cfg into *s. */
void layout_model_shape(const host_config *cfg, const ct_model_desc *d, model_shape *s);

/* NULL when `target` can express the model, else why not (a sentence to show the user). */
const char *layout_refusal(const model_shape *s, int32_t target, char *buf, size_t cap);

/* The table for target (LAYOUT_AUTO resolved) of the model cfg/d describes, into *out.
 * CT_ERR_UNSUPPORTED with layout_refusal's reason when the target cannot express the model. */
int32_t layout_build(const host_config *cfg, const ct_model_desc *d, int32_t target, layout *out,
                     ct_error *err);
void layout_free(layout *l);

/* Elements of an entry in the file. */
uint64_t layout_numel(const layout_entry *e);
/* ctrain unit -> file tensor (rows beyond the ctrain tensor, llm.c's vocabulary padding, are
 * zero), and back (padding rows ignored). */
void layout_get(const layout_entry *e, const float *unit, float *out);
void layout_put(const layout_entry *e, const float *in, float *unit);

#endif /* CTRAIN_HOST_EXPORT_LAYOUT_H */
