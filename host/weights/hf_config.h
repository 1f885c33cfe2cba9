/* hf_config.h — the config.json beside [model] init_from's weights (Hugging Face GPT-2, Llama
 * (and the Llama-shaped SmolLM, TinyLlama), Mistral, Qwen2, or ctrain's own export) read as the
 * gpt model's [model] settings it implies: checked against the resolved [model] (a mismatch
 * names the key, both values and what to set), or, with [model] from_config = true, filling the
 * keys [model] leaves out. Architectures the gpt model cannot represent (exact GELU, rope types
 * other than linear and llama3, MLP biases in Llama, a head_dim that is not hidden_size/heads)
 * are refused with the reason; a sliding window caps [model] seq_len at its width.
 * Not for: the tensors themselves (import.c, export_layout.c) or writing config.json (export.c).
 */
#ifndef CTRAIN_HOST_HF_CONFIG_H
#define CTRAIN_HOST_HF_CONFIG_H

#include "config/config.h"

#include <ctrain/ctrain.h>

#include <limits.h>

#define HF_MAX_SETTINGS 32

/* One [model] key as config.json sets it. */
typedef struct hf_setting {
    char key[32];   /* the gpt model's key: n_layer, d_model, norm_eps, rope_theta, ... */
    char value[64]; /* its value as [model] takes it */
    char from[64];  /* the config.json key(s) it comes from, for messages */
    int  at_most;   /* 1: [model] may be smaller (a rope model's context) */
} hf_setting;

typedef struct hf_arch {
    char       path[PATH_MAX]; /* the config.json */
    char       kind[16];       /* "gpt2", "llama", "mistral", "qwen2" or "ctrain" */
    hf_setting s[HF_MAX_SETTINGS];
    int32_t    n;
} hf_arch;

/* The config.json of init_from into buf: DIR/config.json for a folder, else the file beside
 * the weights file; NULL when there is none (a weights file alone is checked by its tensors). */
const char *hf_config_path(const char *init_from, char *buf, size_t cap);

/* Read a config.json. CT_ERR_INVALID naming the file and key when it is not JSON, not a GPT-2,
 * Llama or ctrain model, or an architecture the gpt model cannot represent (with why). */
int32_t hf_config_read(const char *path, hf_arch *a, ct_error *err);

/* Every setting of a against cfg's [model] (resolved: defaults filled). CT_ERR_INVALID listing
 * each mismatch: "KEY = VALUE in config.json (its key), [model] KEY = VALUE (origin)", with the
 * hint to set them or [model] from_config = true. CT_OK when [model] plugin is not gpt. */
int32_t hf_config_check(const hf_arch *a, const host_config *cfg, ct_error *err);

/* [model] from_config = true (read from the raw value, before [model] is validated) and an
 * init_from with a config.json: every [model] key the file sets that the configuration leaves
 * out is set from it, with the config.json as its origin (validate shows it). CT_OK doing
 * nothing otherwise, and without reading the file when [model] sets every key it could (a
 * run's resolved config.ini: its init_from folder need not exist any more); a config.json that
 * cannot be read or represented is an error. */
int32_t hf_config_fill(host_config *cfg, ct_error *err);

#endif /* CTRAIN_HOST_HF_CONFIG_H */
