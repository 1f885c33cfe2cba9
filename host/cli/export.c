/* export.c — `ctrain export RUN_DIR|CHECKPOINT_DIR --format safetensors|llmc --out PATH
 * [--target auto|hf-gpt2|hf-llama|ctrain] [--dtype f32|bf16]`: a checkpoint's master weights,
 * reassembled from whatever world size and strategy saved them (checkpoint_read_master),
 * written for other programs: a folder (created with its parents) with model.safetensors,
 * config.json (Hugging Face GPT-2 or Llama with the tokenizer's bos/eos ids, or ctrain's own
 * names) and the run's tokenizer (export_tokenizer.c); or an llm.c fp32 GPT-2 model file.
 * Not for: the tensor tables (export_layout.c) or the file formats (safetensors.c, llmc.c). */
#include "run/checkpoint.h"
#include "base/printable.h"
#include "base/cmdout.h"
#include "cli/commands.h"
#include "plugin/contract.h"
#include "weights/export_layout.h"
#include "weights/export_tokenizer.h"
#include "io/files.h"
#include "config/host_schema.h"
#include "plugin/hostapi.h"
#include "base/init.h"
#include "weights/llmc.h"
#include "io/outfile.h"
#include "run/rank.h"
#include "io/safetensors.h"
#include "run/step.h"
#include "plugin/wiring.h"
#include "run/session.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct fill_ctx {
    const layout *l;
    float *const *units;
} fill_ctx;

static int32_t fill_entry(void *ctx, int32_t i, float *buf, ct_error *err) {
    fill_ctx *c = ctx;
    (void)err;
    layout_get(&c->l->e[i], c->units[c->l->e[i].unit], buf);
    return CT_OK;
}

/* A special token's id for config.json: the number, or null. */
static const char *id_text(int32_t id, char *buf, size_t cap) {
    if (id < 0) return "null";
    snprintf(buf, cap, "%d", (int)id);
    return buf;
}

/* transformers' rope_scaling of the model ("null", or the object of its rope_type). */
static const char *rope_scaling_json(const model_shape *s, char *buf, size_t cap) {
    if (!strcmp(s->rope_scaling, "linear"))
        snprintf(buf, cap, "{\"rope_type\": \"linear\", \"factor\": %.9g}", s->rope_factor);
    else if (!strcmp(s->rope_scaling, "llama3"))
        snprintf(buf, cap, "{\"rope_type\": \"llama3\", \"factor\": %.9g, \"low_freq_factor\": "
                 "%.9g, \"high_freq_factor\": %.9g, \"original_max_position_embeddings\": %lld}",
                 s->rope_factor, s->rope_low, s->rope_high, (long long)s->rope_orig);
    else
        snprintf(buf, cap, "null");
    return buf;
}

/* config.json: Hugging Face's keys for hf-gpt2 and hf-llama (a Llama-shaped model with q/k/v
 * biases and no output bias is Qwen2's, which LlamaForCausalLM cannot hold: written as
 * Qwen2ForCausalLM); every option for ctrain. */
static int32_t write_config_json(const char *path, const layout *l, const export_tok *tk,
                                 const char *dtype, ct_error *err) {
    const model_shape *s = &l->s;
    const char *tokenizer = tk->kind;
    char j[6144], bos[16], eos[16], ids[160], rs[320];
    int n;
    int qwen2 = s->qkv_bias && !s->proj_bias;
    char inner[32] = "null"; /* GPT-2's n_inner: null is 4 * n_embd */
    if (s->F != 4 * s->C) snprintf(inner, sizeof inner, "%lld", (long long)s->F);
    /* bos, eos (and no pad) of the run's tokenizer, then the dtype and the tokenizer's kind */
    snprintf(ids, sizeof ids, "  \"bos_token_id\": %s,\n  \"eos_token_id\": %s,\n"
             "  \"pad_token_id\": null,\n  \"torch_dtype\": \"%s\",\n",
             id_text(tk->bos, bos, sizeof bos), id_text(tk->eos, eos, sizeof eos), dtype);
    if (l->target == LAYOUT_HF_GPT2)
        n = snprintf(j, sizeof j,
                     "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                     "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n"
                     "  \"n_embd\": %lld,\n  \"n_layer\": %lld,\n  \"n_head\": %lld,\n"
                     "  \"n_inner\": %s,\n  \"activation_function\": \"gelu_new\",\n"
                     "  \"layer_norm_epsilon\": %.9g,\n  \"resid_pdrop\": 0.0,\n"
                     "  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
                     "  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": true,\n"
                     "%s  \"ctrain_tokenizer\": \"%s\"\n}\n",
                     (long long)s->V, (long long)s->T, (long long)s->T, (long long)s->C,
                     (long long)s->L, (long long)s->NH, inner, s->eps, ids, tokenizer);
    else if (l->target == LAYOUT_HF_LLAMA)
        n = snprintf(j, sizeof j,
                     "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
                     "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n"
                     "  \"intermediate_size\": %lld,\n  \"num_hidden_layers\": %lld,\n"
                     "  \"num_attention_heads\": %lld,\n  \"num_key_value_heads\": %lld,\n"
                     "  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n"
                     "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": %.9g,\n"
                     "  \"rope_theta\": %.9g,\n  \"rope_scaling\": %s,\n"
                     "  \"attention_bias\": %s,\n  \"mlp_bias\": %s,\n"
                     "%s  \"tie_word_embeddings\": %s,\n"
                     "%s  \"ctrain_tokenizer\": \"%s\"\n}\n",
                     qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM", qwen2 ? "qwen2" : "llama",
                     (long long)s->V, (long long)s->C, (long long)s->F, (long long)s->L,
                     (long long)s->NH, (long long)s->KVH, (long long)s->HD, (long long)s->T,
                     s->eps, s->theta, rope_scaling_json(s, rs, sizeof rs),
                     s->proj_bias ? "true" : "false", s->bias ? "true" : "false",
                     qwen2 ? "  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n" : "",
                     s->tie ? "true" : "false", ids, tokenizer);
    else
        n = snprintf(j, sizeof j,
                     "{\n  \"format\": \"ctrain\",\n  \"model_type\": \"ctrain-gpt\",\n"
                     "  \"vocab_size\": %lld,\n  \"seq_len\": %lld,\n  \"d_model\": %lld,\n"
                     "  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_kv_head\": %lld,\n"
                     "  \"mlp_hidden\": %lld,\n  \"intermediate_size\": %lld,\n"
                     "  \"norm\": \"%s\",\n  \"mlp\": \"%s\",\n  \"pos\": \"%s\",\n"
                     "  \"qk_norm\": %s,\n  \"tie_embeddings\": %s,\n  \"bias\": %s,\n"
                     "  \"attn_bias\": \"%s\",\n"
                     "  \"norm_eps\": %.9g,\n  \"rope_theta\": %.9g,\n"
                     "  \"rope_scaling\": \"%s\",\n  \"rope_factor\": %.9g,\n"
                     "  \"rope_low_freq_factor\": %.9g,\n  \"rope_high_freq_factor\": %.9g,\n"
                     "  \"rope_original_max_position\": %lld,\n"
                     "  \"rope\": \"rotate_half (element d with d + head_dim/2)\",\n"
                     "  \"weights\": \"row-major (out, in); attn.qkv rows q|k|v; swiglu mlp.fc "
                     "rows gate|up\",\n%s  \"ctrain_tokenizer\": \"%s\"\n}\n",
                     (long long)s->V, (long long)s->T, (long long)s->C, (long long)s->L,
                     (long long)s->NH, (long long)s->KVH, (long long)s->F, (long long)s->F,
                     s->norm, s->mlp, s->pos, s->qk_norm ? "true" : "false",
                     s->tie ? "true" : "false", s->bias ? "true" : "false",
                     s->qkv_bias ? s->proj_bias ? "qkv_o" : "qkv" : "none", s->eps, s->theta,
                     s->rope_scaling, s->rope_factor, s->rope_low, s->rope_high,
                     (long long)s->rope_orig, ids, tokenizer);
    if (n < 0 || (size_t)n >= sizeof j)
        return ct_error_set(err, CT_ERR_INTERNAL, "config.json does not fit its buffer");
    return outfile_write_whole(path, j, (size_t)n, 0, err);
}

/* The model plugin of the checkpoint's configuration, with [model] validated against the host's
 * keys and the plugin's (defaults filled). Only the model: a checkpoint of a CUDA or MPI run
 * exports on a machine without those plugins. */
static const host_plugin *resolve_model(host_config *cfg, host_registry *reg, ct_error *err) {
    const host_section *hm = host_schema_find("model");
    const char *name = config_get(cfg, "model", "plugin");
    if (!name) name = hm->specs[0].default_value; /* "plugin" */
    const host_plugin *p = registry_resolve(reg, CT_KIND_MODEL, name, err);
    if (!p) return NULL;
    int32_t nh = 0;
    while (hm->specs[nh].key) nh++;
    ct_param_spec *all = calloc((size_t)(nh + p->n_params + 1), sizeof *all);
    if (!all) return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    memcpy(all, hm->specs, (size_t)nh * sizeof *all);
    memcpy(all + nh, p->params, (size_t)p->n_params * sizeof *all);
    char owner[128];
    snprintf(owner, sizeof owner, "model plugin %s", p->desc.name);
    int32_t rc = config_validate_section(cfg, "model", all, sizeof(ct_param_spec), owner, NULL, err);
    free(all);
    return rc == CT_OK ? p : NULL;
}

static int usage(const char *why) {
    fprintf(stderr, "ctrain export: %s ---> usage: ctrain export RUN_DIR|CHECKPOINT_DIR --format "
            "safetensors|llmc --out PATH [--target auto|hf-gpt2|hf-llama|ctrain] "
            "[--dtype f32|bf16] [--force]\n"
            "  --force   replace an existing --out file, write into a non-empty --out folder, or "
            "write inside a run's folder (never over its records)\n",
            why);
    return 2;
}

int cmd_export(int argc, char **argv) {
    const char *src = NULL, *format = NULL, *out = NULL, *target_name = "auto", *dtype = "f32";
    int force = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--force")) force = 1;
        else if (!strcmp(argv[i], "--format") && i + 1 < argc) format = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--target") && i + 1 < argc) target_name = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dtype = argv[++i];
        else if (argv[i][0] != '-' && !src) src = argv[i];
        else {
            char why[300];
            snprintf(why, sizeof why, "unexpected argument '%.200s'", argv[i]);
            return usage(why);
        }
    }
    if (!src || !format || !out) return usage("RUN_DIR, --format and --out are needed");
    int llmc = !strcmp(format, "llmc");
    if (!llmc && strcmp(format, "safetensors") != 0)
        return usage("--format is safetensors or llmc");
    int32_t target = layout_target_from_name(target_name);
    if (target == -2 || target == LAYOUT_LLMC)
        return usage("--target is auto, hf-gpt2, hf-llama or ctrain");
    if (llmc && target != LAYOUT_AUTO) return usage("--target is for --format safetensors");
    int bf16 = !strcmp(dtype, "bf16");
    if (!bf16 && strcmp(dtype, "f32") != 0) return usage("--dtype is f32 or bf16");
    if (llmc && bf16) return usage("--dtype bf16 is for --format safetensors (llm.c files are f32)");
    if (llmc) target = LAYOUT_LLMC;

    ct_error err = {.struct_size = sizeof err};
    ckpt_master m;
    host_registry *reg = NULL;
    const host_plugin *mp = NULL;
    ct_host host;
    void *model = NULL;
    contract_lifecycle life = {0};
    layout lay = {0};
    int status = 1;
    if (checkpoint_read_master(src, &m, &err) != CT_OK) {
        print_message_line(stderr, "ctrain export: ", err.message);
        return 1;
    }
    /* the checkpoint's own configuration says what the model is */
    if (!(reg = registry_open(&err)) || !(mp = resolve_model(m.cfg, reg, &err))) {
        char dir[1024], prefix[1100];
        snprintf(prefix, sizeof prefix, "ctrain export: %s/config.ini: ",
                 printable(m.dir, dir, sizeof dir));
        print_message_line(stderr, prefix, err.message);
        goto out_free;
    }
    hostapi_init(&host, m.cfg, 0, mp->desc.name, NULL);
    ct_create_args a = {.struct_size = sizeof a, .api = hostapi_table(), .host = &host,
                        .section = "model", .rank = 0, .world_size = 1,
                        .device = {.type = CT_DEVICE_CPU}};
    life = contract_lifecycle_of(CT_KIND_MODEL, mp->vtable);
    ct_model_desc d = {.struct_size = sizeof d};
    const ct_model_vtable *mv = mp->vtable;
    if (!(model = life.create(&a, &err)) || mv->describe(model, &d, &err) != CT_OK) {
        fprintf(stderr, "ctrain export: model %s: %s\n", mp->desc.name, err.message);
        goto out_free;
    }
    if (d.tensor_struct_size == 0) d.tensor_struct_size = sizeof(ct_tensor_spec);
    if (d.n_units != m.n_units) {
        fprintf(stderr, "ctrain export: %s holds %u units; its model has %u ---> the "
                "checkpoint and its config.ini disagree\n", m.dir, m.n_units, d.n_units);
        goto out_free;
    }
    for (uint32_t u = 0; u < d.n_units; u++)
        if (m.numel[u] != init_unit_numel(&d, u)) {
            fprintf(stderr, "ctrain export: %s: unit %u holds %llu values; its model's has %llu "
                    "---> the checkpoint and its config.ini disagree\n", m.dir, u,
                    (unsigned long long)m.numel[u], (unsigned long long)init_unit_numel(&d, u));
            goto out_free;
        }
    if (layout_build(m.cfg, &d, target, &lay, &err) != CT_OK) {
        print_message_line(stderr, "ctrain export: refused: ", err.message);
        status = 1;
        goto out_free;
    }
    if (llmc) {
        if (llmc_write(out, &lay, m.units, OUTFILE_USER | (force ? OUTFILE_FORCE : 0), &err) !=
            CT_OK)
            goto out_err;
        fprintf(cmdout(), "exported step %lld of %s (saved at world size %d) as llm.c GPT-2 to "
                "%s\n",
                (long long)m.step, m.dir, m.world, out);
        status = 0;
        goto out_free;
    }
    if (outdir_prepare(out, "--out", force, &err) != CT_OK) goto out_err;
    export_tok tok;
    if (export_tokenizer(m.dir, m.cfg, lay.s.V, lay.s.T, out, &tok, &err) != CT_OK) goto out_err;
    char path[PATH_MAX], step_text[32];
    st_out *t = calloc((size_t)lay.n + 1, sizeof *t);
    if (!t) {
        ct_error_set(&err, CT_ERR_NOMEM, "out of memory");
        goto out_err;
    }
    for (int32_t i = 0; i < lay.n; i++) {
        t[i].name = lay.e[i].name;
        t[i].ndim = lay.e[i].ndim;
        t[i].shape[0] = lay.e[i].shape[0];
        t[i].shape[1] = lay.e[i].shape[1];
    }
    snprintf(step_text, sizeof step_text, "%lld", (long long)m.step);
    const char *tok_text = !strcmp(tok.kind, "bytes") ? "bytes (token = byte value 0..255)"
                                                      : tok.kind;
    const char *meta[] = {"format", "pt", "ctrain.layout", layout_target_name(lay.target),
                          "ctrain.step", step_text, "ctrain.tokenizer", tok_text};
    fill_ctx fc = {&lay, m.units};
    int32_t rc = CT_OK;
    if (snprintf(path, sizeof path, "%s/model.safetensors", out) >= (int)sizeof path)
        rc = ct_error_set(&err, CT_ERR_INVALID, "--out %s: path too long", out);
    if (rc == CT_OK)
        rc = st_write(path, t, lay.n, meta, 4, bf16 ? "BF16" : "F32", fill_entry, &fc, &err);
    free(t);
    if (rc == CT_OK && snprintf(path, sizeof path, "%s/config.json", out) < (int)sizeof path)
        rc = write_config_json(path, &lay, &tok, bf16 ? "bfloat16" : "float32", &err);
    if (rc != CT_OK) goto out_err;
    fprintf(cmdout(), "exported step %lld of %s (saved at world size %d) as %s safetensors (%s) "
            "to %s, tokenizer: %s\n", (long long)m.step, m.dir, m.world,
            layout_target_name(lay.target), bf16 ? "bf16" : "f32", out, tok.kind);
    status = 0;
    goto out_free;
out_err:
    print_message_line(stderr, "ctrain export: ", err.message);
out_free:
    layout_free(&lay);
    if (model) life.destroy(model);
    registry_close(reg);
    checkpoint_master_free(&m);
    return status;
}
