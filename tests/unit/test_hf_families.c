/* test_hf_families.c — claims about how the config.json of today's checkpoint families reads as
 * the gpt model's [model] settings (weights/hf_config.c), without torch: Llama 3's rope scaling
 * in both spellings transformers has written (rope_scaling with rope_theta beside it, and
 * rope_parameters), grouped-query attention and the MLP width, Qwen2's q/k/v biases, a Mistral
 * sliding window narrower than the context capping seq_len (and Qwen2's, unused, not), Llama's
 * attention_bias and mlp_bias; refusals that name the key (yarn, a head_dim of its own, key
 * heads that do not divide the heads); and hf_config_check taking [model]'s defaults (n_kv_head
 * 0, intermediate_size 0, attn_bias auto) as the values they stand for.
 * Not for: the tensors (test_export.sh) or torch's numbers (test_families.sh).
 */
#include "ct_test.h"
#include "config/config.h"
#include "weights/hf_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Read a config.json made of `text`; rc of hf_config_read, its error in err. */
static int32_t read_json(const char *text, hf_arch *a, ct_error *err) {
    char dir[] = "/tmp/ctrain-hf-XXXXXX", path[64];
    if (!mkdtemp(dir)) return CT_ERR_IO;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return CT_ERR_IO;
    fputs(text, f);
    fclose(f);
    int32_t rc = hf_config_read(path, a, err);
    unlink(path);
    rmdir(dir);
    return rc;
}

/* The setting of key (its value), or NULL. */
static const hf_setting *setting(const hf_arch *a, const char *key) {
    for (int32_t i = 0; i < a->n; i++)
        if (!strcmp(a->s[i].key, key)) return &a->s[i];
    return NULL;
}

static void expect(const hf_arch *a, const char *key, const char *value, int at_most) {
    const hf_setting *s = setting(a, key);
    CT_CHECK_MSG(s != NULL, "%s: no setting %s", a->kind, key);
    if (!s) return;
    CT_CHECK_MSG(!strcmp(s->value, value), "%s: %s = %s, expected %s", a->kind, key, s->value,
                 value);
    CT_CHECK_MSG(s->at_most == at_most, "%s: %s at_most %d, expected %d", a->kind, key,
                 s->at_most, at_most);
}

#define LLAMA3_HEAD                                                                            \
    "{\"model_type\": \"llama\", \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "    \
    "\"num_key_value_heads\": 8, \"hidden_size\": 4096, \"vocab_size\": 128256, "             \
    "\"intermediate_size\": 14336, \"max_position_embeddings\": 131072, "                     \
    "\"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": false, "

CT_TEST(hf_llama3_rope_scaling_reads_in_both_spellings) {
    const char *files[] = {
        LLAMA3_HEAD "\"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", "
                    "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                    "\"original_max_position_embeddings\": 8192}}",
        LLAMA3_HEAD "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, "
                    "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                    "\"original_max_position_embeddings\": 8192}}"};
    for (int i = 0; i < 2; i++) {
        hf_arch a;
        ct_error err = {.struct_size = sizeof err};
        CT_CHECK_MSG(read_json(files[i], &a, &err) == CT_OK, "file %d: %s", i, err.message);
        expect(&a, "n_kv_head", "8", 0);
        expect(&a, "intermediate_size", "14336", 0);
        expect(&a, "vocab_size", "128256", 0);
        expect(&a, "seq_len", "131072", 1);
        expect(&a, "rope_theta", "500000", 0);
        expect(&a, "rope_scaling", "llama3", 0);
        expect(&a, "rope_factor", "8", 0);
        expect(&a, "rope_low_freq_factor", "1", 0);
        expect(&a, "rope_high_freq_factor", "4", 0);
        expect(&a, "rope_original_max_position", "8192", 0);
        expect(&a, "attn_bias", "none", 0);
        expect(&a, "bias", "false", 0);
        expect(&a, "tie_embeddings", "false", 0);
    }
}

CT_TEST(hf_qwen2_mistral_and_llama_biases_read_as_the_gpt_model_keys) {
    hf_arch a;
    ct_error err = {.struct_size = sizeof err};
    /* Qwen2: q/k/v biases always; a sliding window it does not use caps nothing */
    CT_CHECK_MSG(read_json("{\"model_type\": \"qwen2\", \"num_hidden_layers\": 24, "
                           "\"num_attention_heads\": 14, \"num_key_value_heads\": 2, "
                           "\"hidden_size\": 896, \"vocab_size\": 151936, "
                           "\"intermediate_size\": 4864, \"max_position_embeddings\": 32768, "
                           "\"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true, "
                           "\"rope_theta\": 1000000.0, \"use_sliding_window\": false, "
                           "\"sliding_window\": 32768, \"rope_scaling\": null}", &a, &err) == CT_OK,
                 "qwen2: %s", err.message);
    CT_CHECK_MSG(!strcmp(a.kind, "qwen2"), "kind %s", a.kind);
    expect(&a, "attn_bias", "qkv", 0);
    expect(&a, "n_kv_head", "2", 0);
    expect(&a, "tie_embeddings", "true", 0);
    expect(&a, "seq_len", "32768", 1);
    expect(&a, "rope_scaling", "none", 0);
    /* Mistral: a window narrower than the context caps seq_len at the window */
    CT_CHECK_MSG(read_json("{\"model_type\": \"mistral\", \"num_hidden_layers\": 32, "
                           "\"num_attention_heads\": 32, \"num_key_value_heads\": 8, "
                           "\"hidden_size\": 4096, \"vocab_size\": 32000, "
                           "\"intermediate_size\": 14336, \"max_position_embeddings\": 32768, "
                           "\"sliding_window\": 4096, \"rope_theta\": 10000.0}", &a, &err) == CT_OK,
                 "mistral: %s", err.message);
    CT_CHECK_MSG(!strcmp(a.kind, "mistral"), "kind %s", a.kind);
    expect(&a, "seq_len", "4096", 1);
    CT_CHECK_STR_CONTAINS(setting(&a, "seq_len")->from, "sliding_window");
    expect(&a, "norm_eps", "1e-06", 0); /* MistralConfig's default */
    /* Llama's attention_bias (q, k, v and o) and mlp_bias */
    CT_CHECK_MSG(read_json("{\"model_type\": \"llama\", \"num_hidden_layers\": 2, "
                           "\"num_attention_heads\": 4, \"hidden_size\": 64, "
                           "\"vocab_size\": 300, \"intermediate_size\": 100, "
                           "\"attention_bias\": true, \"mlp_bias\": true}", &a, &err) == CT_OK,
                 "llama biases: %s", err.message);
    expect(&a, "attn_bias", "qkv_o", 0);
    expect(&a, "bias", "true", 0);
    expect(&a, "n_kv_head", "4", 0);
    expect(&a, "intermediate_size", "100", 0);
}

CT_TEST(hf_refusals_name_the_key) {
    static const struct { const char *json, *needle; } cases[] = {
        {"{\"model_type\": \"llama\", \"num_attention_heads\": 32, \"hidden_size\": 4096, "
         "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}",
         "rope_scaling rope_type \"yarn\""},
        {"{\"model_type\": \"llama\", \"num_attention_heads\": 32, \"hidden_size\": 4096, "
         "\"rope_parameters\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}",
         "rope_parameters rope_type \"dynamic\""},
        {"{\"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_key_value_heads\": 3, "
         "\"hidden_size\": 4096}", "num_key_value_heads = 3 does not divide"},
        {"{\"model_type\": \"qwen2\", \"num_attention_heads\": 16, \"hidden_size\": 2048, "
         "\"head_dim\": 256}", "head_dim = 256"},
        {"{\"model_type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"llama3\", "
         "\"factor\": 8.0, \"low_freq_factor\": 4.0, \"high_freq_factor\": 1.0}}",
         "high_freq_factor (1) > low_freq_factor (4)"},
        {"{\"model_type\": \"gemma\"}", "model_type \"gemma\" is not gpt2, llama, mistral or qwen2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        hf_arch a;
        ct_error err = {.struct_size = sizeof err};
        CT_CHECK_MSG(read_json(cases[i].json, &a, &err) != CT_OK, "case %zu accepted", i);
        CT_CHECK_STR_CONTAINS(err.message, cases[i].needle);
    }
}

/* [model]'s defaults stand for the values they give: n_kv_head 0 is n_head, intermediate_size
 * 0 the rule's width (swiglu, C = 64: 256), attn_bias auto is none under bias = false; a value
 * that differs is still a mismatch naming the key. */
CT_TEST(hf_check_takes_model_defaults_as_their_values) {
    hf_arch a;
    ct_error err = {.struct_size = sizeof err};
    CT_CHECK_MSG(read_json("{\"model_type\": \"llama\", \"num_hidden_layers\": 2, "
                           "\"num_attention_heads\": 4, \"num_key_value_heads\": 4, "
                           "\"hidden_size\": 64, \"vocab_size\": 300, "
                           "\"intermediate_size\": 256, \"max_position_embeddings\": 64, "
                           "\"rms_norm_eps\": 1e-5}", &a, &err) == CT_OK, "%s", err.message);
    const char *base = "[model]\nplugin = gpt\nn_layer = 2\nn_head = 4\nd_model = 64\n"
                       "vocab_size = 300\nseq_len = 64\nnorm = rmsnorm\nmlp = swiglu\n"
                       "pos = rope\nbias = false\ntie_embeddings = false\nqk_norm = false\n"
                       "norm_eps = 1e-5\nrope_theta = 10000\nrope_scaling = none\n";
    const char *extra[] = {"n_kv_head = 0\nintermediate_size = 0\nattn_bias = auto\n",
                           "n_kv_head = 4\nintermediate_size = 256\nattn_bias = none\n",
                           "n_kv_head = 2\nintermediate_size = 0\nattn_bias = auto\n",
                           "n_kv_head = 0\nintermediate_size = 0\nattn_bias = qkv\n"};
    const char *bad[] = {NULL, NULL, "n_kv_head = 4 in config.json", "attn_bias = none in"};
    for (int i = 0; i < 4; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", base, extra[i]);
        host_config *cfg = config_new();
        CT_CHECK(config_load_string(cfg, "t.ini", text, &err) == CT_OK);
        int32_t rc = hf_config_check(&a, cfg, &err);
        if (!bad[i]) {
            CT_CHECK_MSG(rc == CT_OK, "case %d: %s", i, err.message);
        } else {
            CT_CHECK_MSG(rc == CT_ERR_INVALID, "case %d accepted", i);
            CT_CHECK_STR_CONTAINS(err.message, bad[i]);
        }
        config_free(cfg);
    }
}
