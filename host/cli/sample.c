/* sample_cmd.c — `ctrain sample RUN_DIR|CHECKPOINT_DIR [options]`: load the newest valid
 * checkpoint of a run (or the given checkpoint folder) with its own config.ini into one rank
 * (world 1, comm local, the run's device, model, strategy and precision), encode the prompt
 * with the run's tokenizer and print the generated text as it comes, token by token.
 * `--init CONFIG.ini` samples a freshly initialised model instead (benchmarks).
 * Not for: the decode loop and token choice (sample.c) or tokenizers (runtok.c). */
#include "run/checkpoint.h"
#include "base/printable.h"
#include "base/cmdout.h"
#include "cli/commands.h"
#include "run/rank.h"
#include "data/runtok.h"
#include "run/sample.h"
#include "plugin/wiring.h"
#include "run/init_ckpt.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLE_USAGE                                                                           \
    "usage: ctrain sample RUN_DIR|CHECKPOINT_DIR [--prompt TEXT] [--tokens N]\n"               \
    "           [--temperature T] [--top-k K] [--top-p P] [--seed S] [--greedy]\n"            \
    "           [--tokenizer bytes|FILE.model] [--ids] [--specials] [--echo] [--no-cache]\n"  \
    "           [--stats]\n"                                                                  \
    "       ctrain sample --init CONFIG.ini [same options]   (a freshly initialised model)\n" \
    "Prints the text generated after the prompt (an empty prompt is \"\\n\"), token by token.\n" \
    "Defaults: --tokens 64, --temperature 1, --top-k 0 (all), --top-p 1, --seed 1337; the\n"  \
    "run's own tokenizer (OUT/tokenizer.ini). --ids: prompt and output are token ids.\n"     \
    "--specials: a BPE tokenizer's added tokens in the prompt (<|im_start|>, ...) are ids.\n" \
    "--echo: print the prompt first (as given), then the text generated after it.\n"          \
    "--no-cache: recompute the window with forward() for every token. --stats: tokens/s.\n"

typedef struct cmd_opts {
    const char *path, *init, *prompt, *tokenizer;
    int32_t     ids, stats, echo, specials;
    sample_opts so;
} cmd_opts;

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "ctrain sample: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", SAMPLE_USAGE);
    return 2;
}

/* A whole-string number (integer: a signed 64-bit one; seed: unsigned, no sign), or usage
 * error (2). */
static int parse_num(const char *flag, const char *v, char kind, double *d, int64_t *i,
                     uint64_t *u) {
    char *end = NULL;
    errno = 0;
    if (kind == 'f') *d = strtod(v, &end);
    else if (kind == 'i') *i = strtoll(v, &end, 10);
    else if (v[0] != '-' && v[0] != '+') *u = strtoull(v, &end, 10);
    if (!v[0] || !end || *end || errno) {
        fprintf(stderr, "ctrain sample: %s '%s' is not %s ---> see `ctrain sample --help`\n",
                flag, v, kind == 'f' ? "a number" : kind == 'i' ? "an integer"
                                                  : "an integer in [0, 2^64)");
        return 2;
    }
    return 0;
}

static int parse_args(int argc, char **argv, cmd_opts *o) {
    memset(o, 0, sizeof *o);
    o->so = (sample_opts){.n_tokens = 64, .temperature = 1.0, .top_p = 1.0, .seed = 1337,
                          .fit_window = 1};
    o->prompt = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fprintf(cmdout(), "%s", SAMPLE_USAGE);
            return -1;
        }
        if (!strcmp(a, "--greedy")) { o->so.greedy = 1; continue; }
        if (!strcmp(a, "--ids")) { o->ids = 1; continue; }
        if (!strcmp(a, "--specials")) { o->specials = 1; continue; }
        if (!strcmp(a, "--echo")) { o->echo = 1; continue; }
        if (!strcmp(a, "--no-cache")) { o->so.no_cache = 1; continue; }
        if (!strcmp(a, "--stats")) { o->stats = 1; continue; }
        if (a[0] != '-') {
            if (o->path) return usage_error("a second folder '%s' ---> give one", a);
            o->path = a;
            continue;
        }
        static const char *const valued[] = {"--prompt", "--tokens", "--temperature", "--top-k",
                                             "--top-p", "--seed", "--tokenizer", "--init", NULL};
        int known = 0;
        for (int k = 0; valued[k]; k++) known |= !strcmp(a, valued[k]);
        if (!known) return usage_error("unknown option '%s'", a);
        if (i + 1 >= argc) return usage_error("%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "--tokenizer")) o->tokenizer = v;
        else if (!strcmp(a, "--init")) o->init = v;
        else if (!strcmp(a, "--tokens")) {
            if (parse_num(a, v, 'i', NULL, &o->so.n_tokens, NULL)) return 2;
        } else if (!strcmp(a, "--top-k")) {
            if (parse_num(a, v, 'i', NULL, &o->so.top_k, NULL)) return 2;
        } else if (!strcmp(a, "--temperature")) {
            if (parse_num(a, v, 'f', &o->so.temperature, NULL, NULL)) return 2;
        } else if (!strcmp(a, "--top-p")) {
            if (parse_num(a, v, 'f', &o->so.top_p, NULL, NULL)) return 2;
        } else if (parse_num(a, v, 's', NULL, NULL, &o->so.seed)) {
            return 2;
        }
    }
    if (!o->path == !o->init)
        return usage_error("%s", o->init ? "--init and a folder exclude each other"
                                         : "no run or checkpoint folder given");
    return 0;
}

/* Streaming text out: the decoded text of every token so far, printed as it grows. A decoder
 * may show an incomplete UTF-8 character as U+FFFD until its last byte arrives, so trailing
 * U+FFFD bytes are held back until the end. */
typedef struct printer {
    const runtok *tok;
    sample_ids    got;     /* the ids so far */
    size_t        printed;
    int           raw_ids; /* --ids: print the ids themselves */
} printer;

static int32_t print_pending(printer *p, int final, ct_error *err) {
    char *text = NULL;
    size_t len = 0;
    int32_t rc = runtok_decode(p->tok, p->got.ids, p->got.n, &text, &len, err);
    if (rc != CT_OK) return rc;
    size_t end = len;
    while (!final && end >= 3 && !memcmp(text + end - 3, "\xef\xbf\xbd", 3)) end -= 3;
    if (end > p->printed) {
        fwrite(text + p->printed, 1, end - p->printed, cmdout());
        p->printed = end;
    }
    free(text);
    fflush(cmdout());
    return ferror(cmdout()) ? ct_error_set(err, CT_ERR_IO, "cannot write to stdout") : CT_OK;
}

static int32_t emit_token(void *ctx, int32_t tok, ct_error *err) {
    printer *p = ctx;
    if (p->raw_ids) {
        fprintf(cmdout(), "%s%d", p->got.n++ ? " " : "", (int)tok);
        fflush(cmdout());
        return ferror(cmdout()) ? ct_error_set(err, CT_ERR_IO, "cannot write to stdout") : CT_OK;
    }
    int32_t rc = sample_ids_push(&p->got, tok, err);
    if (rc != CT_OK) return rc;
    return print_pending(p, 0, err);
}

int cmd_sample(int argc, char **argv) {
    cmd_opts o;
    int status = parse_args(argc, argv, &o);
    if (status) return status < 0 ? 0 : status;
    ct_error err = {.struct_size = sizeof err};
    if (sample_check_opts(&o.so, &err) != CT_OK) {
        print_message_line(stderr, "ctrain sample: ", err.message);
        return 2;
    }
    status = 1;
    char dir[PATH_MAX], cfg_path[PATH_MAX + 16], run_dir[PATH_MAX + 16];
    int64_t step = 0;
    host_config *cfg = NULL;
    host_registry *reg = NULL;
    runtok *tok = NULL;
    int32_t *prompt = NULL;
    int64_t n_prompt = 0;
    printer pr = {.raw_ids = o.ids};
    host_rank r;
    int rank_open_ok = 0;
    int32_t rc;
    if (o.path) {
        rc = checkpoint_find(o.path, dir, sizeof dir, &step, &err);
        if (rc != CT_OK) goto out_fail;
        snprintf(cfg_path, sizeof cfg_path, "%s/config.ini", dir);
        /* a checkpoint folder's run is two levels up (OUT/checkpoints/step_N) */
        if (strcmp(dir, o.path) == 0) snprintf(run_dir, sizeof run_dir, "%s/../..", dir);
        else snprintf(run_dir, sizeof run_dir, "%s", o.path);
    } else {
        snprintf(cfg_path, sizeof cfg_path, "%s", o.init);
        run_dir[0] = '\0';
    }
    host_wiring w;
    if ((rc = config_load_world1(cfg_path, &cfg, &err)) != CT_OK) goto out_fail;
    if (!(reg = registry_open(&err))) goto out_fail;
    if ((rc = wiring_resolve(cfg, reg, &w, &init_ckpt_source, &err)) != CT_OK) goto out_fail;
    if ((rc = rank_open_model(&r, cfg, &w, o.path != NULL, &err)) != CT_OK) goto out_fail;
    rank_open_ok = 1;
    if (o.path && (rc = checkpoint_load_weights(&r, dir, &err)) != CT_OK) goto out_fail;

    const char *text = *o.prompt ? o.prompt : "\n";
    if (o.ids) {
        if ((rc = runtok_parse_ids(o.prompt, "--prompt with --ids", &prompt, &n_prompt, &err)) !=
            CT_OK)
            goto out_fail;
        for (int64_t i = 0; i < n_prompt; i++)
            if (prompt[i] >= r.V) {
                ct_error_set(&err, CT_ERR_INVALID, "--prompt: token %d is outside the model's "
                             "vocabulary 0..%lld", (int)prompt[i], (long long)(r.V - 1));
                goto out_fail;
            }
        if (n_prompt == 0) {
            ct_error_set(&err, CT_ERR_INVALID, "--ids needs a --prompt of at least one token id");
            goto out_fail;
        }
    } else {
        if (!(tok = runtok_open(run_dir[0] ? run_dir : ".", o.tokenizer, &err))) {
            if (!run_dir[0] && !o.tokenizer)
                ct_error_set(&err, CT_ERR_INVALID, "--init %s has no run and so no tokenizer "
                             "---> pass --tokenizer bytes|FILE.model, or --ids", o.init);
            goto out_fail;
        }
        if (runtok_vocab(tok) > r.V) {
            ct_error_set(&err, CT_ERR_INVALID, "the tokenizer (%s) has %lld tokens, the model "
                         "only %lld ---> pass the run's own tokenizer", runtok_kind(tok),
                         (long long)runtok_vocab(tok), (long long)r.V);
            goto out_fail;
        }
        if ((rc = runtok_encode_ex(tok, text, strlen(text), o.specials, &prompt, &n_prompt,
                                   &err)) != CT_OK)
            goto out_fail;
        pr.tok = tok;
    }
    if (n_prompt > r.T) {
        ct_error_set(&err, CT_ERR_INVALID, "the prompt is %lld tokens, longer than the model's "
                     "context of %lld tokens ([model] seq_len in %s) ---> shorten --prompt",
                     (long long)n_prompt, (long long)r.T, cfg_path);
        goto out_fail;
    }
    if (o.echo && o.ids) { /* the prompt's ids, then the generated ones after a space */
        for (int64_t i = 0; i < n_prompt; i++) fprintf(cmdout(), "%s%d", i ? " " : "", (int)prompt[i]);
        pr.got.n = n_prompt;
    } else if (o.echo) {
        fputs(o.prompt, cmdout());
    }
    sample_stats st;
    rc = sample_generate(&r, 1, prompt, n_prompt, &o.so, emit_token, &pr, &st, &err);
    if (rc == CT_OK && !o.ids) rc = print_pending(&pr, 1, &err);
    fprintf(cmdout(), "\n");
    fflush(cmdout());
    if (rc != CT_OK) goto out_fail;
    if (o.stats)
        fprintf(stderr, "sample: %lld tokens in %.3f s: %.1f tokens/s (%s)\n",
                (long long)st.generated, st.seconds,
                st.seconds > 0 ? (double)st.generated / st.seconds : 0.0,
                st.used_cache ? "kv cache" : "recompute");
    status = 0;
    goto out_free;
out_fail:
    print_message_line(stderr, "ctrain sample: ", err.message);
out_free:
    free(pr.got.ids);
    free(prompt);
    runtok_free(tok);
    if (rank_open_ok) rank_close(&r);
    registry_close(reg);
    config_free(cfg);
    return status;
}
