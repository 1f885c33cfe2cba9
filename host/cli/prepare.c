/* prepare.c — `ctrain prepare [--text] PATH... --out DIR [options]`: the command line of
 * data/prepare.c (options parsed into prepare_options, --help, exit statuses 0 done, 1 failed,
 * 2 bad command line). Not for: the work itself (data/prepare.c).
 */
#include "cli/commands.h"
#include "base/printable.h"
#include "data/prepare.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the command line -------------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctrain prepare [--text] PATH... --out DIR [options]\n"
            "  Tokenize text into llm.c token shards DIR/train_*.bin, DIR/val_*.bin and\n"
            "  DIR/meta.ini; the last fraction of each file is validation data. Streams: memory\n"
            "  does not grow with the text; tokenizes on every core.\n"
            "  [--text] PATH...        text files, .gz files, or folders of them (recursively,\n"
            "                          sorted by name); --text is optional\n"
            "  --out DIR               output folder (created when missing; an existing one\n"
            "                          must be empty, or give --force)\n"
            "  --force                 write into an existing --out folder, replacing its\n"
            "                          shards and meta.ini\n"
            "  --val-fraction F        tail of each file kept for validation (default 0.05)\n"
            "  --tokenizer T           bytes (vocab 256, default), sentencepiece or bpe\n"
            "  --tokenizer-file FILE   bpe: a byte-level BPE (GPT-2's family): NAME.tiktoken,\n"
            "                          tokenizer.json, or vocab.json with merges.txt beside\n"
            "                          it; <|endoftext|> before every document (each plain\n"
            "                          text file, each JSON Lines record)\n"
            "  --jsonl-field NAME      inputs are JSON Lines: one document per line, its text\n"
            "                          the string NAME; an end-of-text token before each\n"
            "                          (bytes: 256, vocab 257; sentencepiece: its </s>;\n"
            "                          bpe: <|endoftext|>)\n"
            "  --vocab-size K          sentencepiece vocabulary, %d..%d (default 8192)\n"
            "  --sp-model FILE         use this sentencepiece .model instead of training one\n"
            "  --sp-type T             model type to train: bpe (default) or unigram\n"
            "  --sp-sample-bytes N     text sampled evenly across the input to train the\n"
            "                          model (default 100000000; 0: all of it)\n"
            "  --sp-max-sentences N    lines of the sample used to train (default 2000000)\n"
            "  --shard-tokens N        tokens per shard file (default 100000000)\n"
            "  --threads N             tokenizing threads (default: one per core)\n"
            "  --unit-bytes N          text per tokenizing task (default 2097152); the tokens\n"
            "                          do not depend on it\n"
            "  --quiet                 print nothing on success (no progress line)\n"
            "  The progress line (stderr) comes every 0.5 s on a terminal, rewritten in place,\n"
            "  else every 2 s; CTRAIN_PROGRESS_S=SECONDS sets another interval.\n",
            SP_VOCAB_MIN, SP_VOCAB_MAX);
}

static int parse_int(const char *opt, const char *s, int64_t *out) {
    char *end;
    errno = 0;
    double d = strtod(s, &end); /* accepts 1e8 */
    if (errno || end == s || *end || d != floor(d) || fabs(d) > 9e15) {
        fprintf(stderr, "ctrain prepare: %s expects an integer, got '%s'\n", opt, s);
        return -1;
    }
    *out = (int64_t)d;
    return 0;
}

int cmd_prepare(int argc, char **argv) {
    prepare_options o = prepare_default_options();
    const char **texts = calloc((size_t)argc + 1, sizeof *texts);
    if (!texts) return 1;
    int status = 2;
    int vocab_given = 0;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        char name[64];
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        const char *value = eq ? eq + 1 : NULL;
        if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
            usage(stdout);
            status = 0;
            goto out_free_texts;
        }
        if (strncmp(arg, "-", 1) != 0 || !strcmp(arg, "-")) { /* a text file */
            texts[o.n_texts++] = arg;
            continue;
        }
        if (!strcmp(name, "--quiet")) {
            o.quiet = 1;
            continue;
        }
        if (!strcmp(name, "--force")) {
            o.force = 1;
            continue;
        }
        if (!strcmp(name, "--text")) {
            if (value) texts[o.n_texts++] = value;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                texts[o.n_texts++] = argv[++i];
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrain prepare: %s needs a value (see --help)\n", name);
                goto out_free_texts;
            }
            value = argv[++i];
        }
        int64_t v;
        if (!strcmp(name, "--out")) o.out_dir = value;
        else if (!strcmp(name, "--tokenizer")) o.tokenizer = value;
        else if (!strcmp(name, "--tokenizer-file")) o.tokenizer_file = value;
        else if (!strcmp(name, "--sp-type")) o.sp_model_type = value;
        else if (!strcmp(name, "--jsonl-field")) o.jsonl_field = value;
        else if (!strcmp(name, "--sp-model")) {
            struct stat st;
            /* before --sp-type, --sp-model named the type: still taken when no such file */
            if ((!strcmp(value, "bpe") || !strcmp(value, "unigram")) && stat(value, &st) != 0)
                o.sp_model_type = value;
            else o.sp_model = value;
        }
        else if (!strcmp(name, "--val-fraction")) {
            char *end;
            o.val_fraction = strtod(value, &end);
            if (end == value || *end) {
                fprintf(stderr, "ctrain prepare: --val-fraction expects a number, got '%s'\n",
                        value);
                goto out_free_texts;
            }
        } else if (!strcmp(name, "--vocab-size")) {
            if (parse_int(name, value, &v)) goto out_free_texts;
            if (v < INT32_MIN || v > INT32_MAX) v = INT32_MAX;
            o.vocab_size = (int32_t)v;
            vocab_given = 1;
        } else if (!strcmp(name, "--shard-tokens")) {
            if (parse_int(name, value, &v)) goto out_free_texts;
            o.shard_tokens = v;
        } else if (!strcmp(name, "--unit-bytes")) {
            if (parse_int(name, value, &v)) goto out_free_texts;
            if (v < 1 || v > (1ll << 30)) {
                fprintf(stderr, "ctrain prepare: --unit-bytes %lld is outside [1, 2^30]\n",
                        (long long)v);
                goto out_free_texts;
            }
            o.unit_bytes = v;
        } else if (!strcmp(name, "--threads")) {
            if (parse_int(name, value, &v)) goto out_free_texts;
            if (v < 0 || v > 1024) {
                fprintf(stderr, "ctrain prepare: --threads %lld is outside [0, 1024] (0: one "
                        "per core)\n", (long long)v);
                goto out_free_texts;
            }
            o.threads = (int32_t)v;
        } else if (!strcmp(name, "--sp-sample-bytes")) {
            if (parse_int(name, value, &v)) goto out_free_texts;
            o.sp_sample_bytes = v;
        } else if (!strcmp(name, "--sp-max-sentences")) {
            if (parse_int(name, value, &v)) goto out_free_texts;
            o.sp_max_sentences = v;
        } else {
            fprintf(stderr, "ctrain prepare: unknown option %s (see --help)\n", name);
            goto out_free_texts;
        }
    }
    if (vocab_given && !strcmp(o.tokenizer, "bpe")) {
        fprintf(stderr, "ctrain prepare: --vocab-size: a BPE tokenizer's vocabulary is its "
                "file's ---> leave --vocab-size out\n");
        goto out_free_texts;
    }
    if (vocab_given && !strcmp(o.tokenizer, "bytes") && o.vocab_size != 256) {
        fprintf(stderr, "ctrain prepare: --vocab-size %d: the bytes tokenizer has exactly 256 "
                "tokens ---> add --tokenizer sentencepiece for another vocabulary\n",
                o.vocab_size);
        goto out_free_texts;
    }
    o.texts = texts;
    ct_error err = {.struct_size = sizeof err};
    prepare_summary s;
    if (prepare_run(&o, &s, &err) != CT_OK) {
        print_message_line(stderr, "ctrain prepare: ", err.message);
        status = err.code == CT_ERR_INVALID && o.n_texts == 0 ? 2 : 1;
        goto out_free_texts;
    }
    status = 0;
out_free_texts:
    free(texts);
    return status;
}
