/* test_messages.c — claims about messages longer than ct_error's 512 bytes (issue 31): they keep
 * their end, the hint that says what to do (ct_error_set, ct_message_fit in ctrain.h), and the
 * host's longest one, the refusal of an init_from whose config.json disagrees with [model] in
 * many settings, names every setting and ends with its hint (weights/hf_config.c).
 * Not for: the text of shorter messages (each module's own tests).
 */
#include "ct_test.h"
#include "config/config.h"
#include "weights/hf_config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *ends_with(const char *s, const char *end) {
    size_t n = strlen(s), k = strlen(end);
    return n >= k && !strcmp(s + n - k, end) ? s : NULL;
}

CT_TEST(error_set_keeps_the_hint_of_a_message_longer_than_its_buffer) {
    ct_error err = {.struct_size = sizeof err};
    char path[701];
    memset(path, 'p', sizeof path - 1);
    path[sizeof path - 1] = '\0';
    int32_t rc = ct_error_set(&err, CT_ERR_INVALID, "data %s: no shards ---> give a folder of "
                              "shards made by `ctrain prepare`", path);
    CT_CHECK_INT(rc, CT_ERR_INVALID);
    CT_CHECK_INT(err.code, CT_ERR_INVALID);
    CT_CHECK(strlen(err.message) < sizeof err.message);
    CT_CHECK_MSG(!strncmp(err.message, "data ppp", 8), "beginning lost: %s", err.message);
    CT_CHECK_MSG(ends_with(err.message, "pp: no shards ---> give a folder of shards made by "
                           "`ctrain prepare`") != NULL, "end lost: %s", err.message);
    CT_CHECK(strstr(err.message, "p … p") != NULL);
    /* a hint longer than the last third is kept whole, from its "--->" */
    char hint[201];
    memset(hint, 'h', sizeof hint - 1);
    hint[sizeof hint - 1] = '\0';
    ct_error_set(&err, CT_ERR_INVALID, "data %s: no shards ---> %s", path, hint);
    CT_CHECK(strlen(err.message) < sizeof err.message);
    CT_CHECK_MSG(strstr(err.message, "p … ---> hhh") != NULL, "hint cut: %s", err.message);
    CT_CHECK(ends_with(err.message, hint) != NULL);
}

CT_TEST(error_set_without_a_hint_keeps_its_last_third) {
    ct_error err = {.struct_size = sizeof err};
    char text[2001];
    for (size_t i = 0; i < sizeof text - 1; i++) text[i] = (char)('a' + i % 26);
    text[sizeof text - 1] = '\0';
    ct_error_set(&err, CT_ERR_IO, "%s|END", text);
    CT_CHECK(strlen(err.message) == sizeof err.message - 1);
    CT_CHECK_MSG(ends_with(err.message, "|END") != NULL, "end lost: %s", err.message);
    CT_CHECK(strstr(err.message, " … ") != NULL);
}

CT_TEST(message_fit_never_splits_a_utf8_sequence) {
    char src[1200] = "", dst[512];
    for (int i = 0; i < 380; i++) strcat(src, "é"); /* two bytes each */
    size_t len = strlen(src);
    for (size_t cap = 64; cap <= sizeof dst; cap += 37) {
        ct_message_fit(dst, cap, src, len);
        CT_CHECK(strlen(dst) < cap);
        /* every byte that starts a sequence is followed by its continuation */
        for (size_t i = 0; dst[i]; i++)
            if ((unsigned char)dst[i] == 0xC3)
                CT_CHECK_MSG((unsigned char)dst[i + 1] == 0xA9, "split at %zu (cap %zu)", i, cap);
        CT_CHECK_MSG(((unsigned char)dst[0] == 0xC3), "starts inside a sequence (cap %zu)", cap);
    }
}

CT_TEST(llama_refusal_names_every_setting_and_ends_with_its_hint) {
    char dir[] = "/tmp/ctrain-msg-XXXXXX";
    CT_CHECK(mkdtemp(dir) != NULL);
    char json[256], log[256];
    snprintf(json, sizeof json, "%s/config.json", dir);
    snprintf(log, sizeof log, "%s/stderr", dir);
    FILE *f = fopen(json, "w");
    CT_CHECK(f != NULL);
    if (!f) return;
    fputs("{\"model_type\": \"llama\", \"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
          "\"hidden_size\": 4096, \"vocab_size\": 32000, \"intermediate_size\": 11008, "
          "\"max_position_embeddings\": 2048, \"rms_norm_eps\": 1e-5}", f);
    fclose(f);
    hf_arch a;
    ct_error err = {.struct_size = sizeof err};
    CT_CHECK_MSG(hf_config_read(json, &a, &err) == CT_OK, "%s", err.message);
    host_config *cfg = config_new();
    CT_CHECK(config_load_string(cfg, "ini/long.ini", "[model]\nplugin = gpt\nn_layer = 2\n"
                                "n_head = 2\nd_model = 32\nvocab_size = 256\nseq_len = 4096\n"
                                "norm = layernorm\nmlp = gelu\npos = learned\n", &err) == CT_OK);
    /* the list goes to stderr: catch it */
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CT_CHECK(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    int32_t rc = hf_config_check(&a, cfg, &err);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    CT_CHECK_INT(rc, CT_ERR_INVALID);
    CT_CHECK(strlen(err.message) < sizeof err.message);
    CT_CHECK_MSG(ends_with(err.message, "from_config = true to take the model's settings from "
                           "config.json") != NULL, "hint lost: %s", err.message);
    CT_CHECK_STR_CONTAINS(err.message, "(listed above)");
    char listed[8192] = "";
    f = fopen(log, "r");
    size_t n = f ? fread(listed, 1, sizeof listed - 1, f) : 0;
    listed[n] = '\0';
    if (f) fclose(f);
    static const char *const keys[] = {"n_layer = 32 in config.json", "n_head = 32 in",
                                       "d_model = 4096 in", "vocab_size = 32000 in",
                                       "seq_len = 2048 in", "norm = rmsnorm in",
                                       "mlp = swiglu in", "pos = rope in", "norm_eps = 1e-05 in"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        CT_CHECK_MSG(strstr(listed, keys[i]) != NULL, "'%s' not listed: %s", keys[i], listed);
    config_free(cfg);
    unlink(json);
    unlink(log);
    rmdir(dir);
}
