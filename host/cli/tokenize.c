/* tokenize_cmd.c — `ctrain tokenize TOKENIZER FILE...`: the ids of each text file under a
 * tokenizer (bytes, a sentencepiece .model, a BPE file), one line of ids per file, or with
 * --decode the text of files of ids; --stats times the encoding alone (one thread), for
 * comparisons with other tokenizers (bench/bench_tokenizer.sh); FILE - is standard input.
 * Not for: shards (prepare.c).
 */
#include "data/bpe_write.h"
#include "base/printable.h"
#include "cli/commands.h"
#include "io/files.h"
#include "data/runtok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOKENIZE_USAGE                                                                        \
    "usage: ctrain tokenize TOKENIZER FILE... [--specials] [--decode] [--count] [--stats]\n"   \
    "           [--repeat N]\n"                                                                 \
    "       ctrain tokenize TOKENIZER --hf-out DIR\n"                                          \
    "  TOKENIZER: bytes, a sentencepiece FILE.model, or a BPE file (NAME.tiktoken,\n"          \
    "  tokenizer.json, vocab.json with merges.txt beside it).\n"                               \
    "  Prints the ids of each text FILE on one line (FILE - is standard input, read to its\n"  \
    "  end); --decode: each FILE holds ids (spaces or commas between them) and its text is\n"  \
    "  printed; --count: the number of ids only; --specials: a BPE tokenizer's added tokens\n" \
    "  (<|endoftext|>, <|im_start|>, ...) written in the text become their ids, as the\n"      \
    "  tokenizers library's encode does (without it they are ordinary text, as in prepare);\n" \
    "  --stats: bytes, ids and the encoding's MB/s (one thread, N repeats) on stderr.\n"      \
    "  --hf-out DIR: a BPE tokenizer (or bytes) written as Hugging Face's tokenizer.json,\n"  \
    "  vocab.json, merges.txt, tokenizer_config.json into the existing folder DIR.\n"

#define TOKENIZE_MAX_FILE (4ull << 30)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Standard input to its end (FILE "-"), at most max bytes, NUL-terminated, into *text. */
static int32_t read_stdin(size_t max, char **text, size_t *len, ct_error *err) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
        if (n == cap) {
            if (cap >= max) {
                free(buf);
                return ct_error_set(err, CT_ERR_INVALID, "standard input holds more than %zu "
                                    "bytes ---> tokenize it in parts", max);
            }
            cap = cap * 2 < max ? cap * 2 : max;
            char *more = realloc(buf, cap + 1);
            if (!more) free(buf);
            buf = more;
        }
    }
    if (!buf) return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading standard input");
    if (ferror(stdin)) {
        free(buf);
        return ct_error_set(err, CT_ERR_IO, "cannot read standard input");
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return CT_OK;
}

int cmd_tokenize(int argc, char **argv) {
    const char *spec = NULL, *hf_out = NULL;
    int decode = 0, count = 0, stats = 0, specials = 0;
    long repeat = 1;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    int n_files = 0, status = 2;
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s", TOKENIZE_USAGE);
            status = 0;
            goto out_free_files;
        }
        if (!strcmp(argv[i], "--decode")) decode = 1;
        else if (!strcmp(argv[i], "--specials")) specials = 1;
        else if (!strcmp(argv[i], "--hf-out") && i + 1 < argc) hf_out = argv[++i];
        else if (!strcmp(argv[i], "--count")) count = 1;
        else if (!strcmp(argv[i], "--stats")) stats = 1;
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
            char *end;
            repeat = strtol(argv[++i], &end, 10);
            if (*end || repeat < 1 || repeat > 1000000) {
                fprintf(stderr, "ctrain tokenize: --repeat %s is not an integer 1..1000000\n%s",
                        argv[i], TOKENIZE_USAGE);
                goto out_free_files;
            }
        } else if (argv[i][0] == '-' && argv[i][1]) { /* "-" alone is standard input */
            fprintf(stderr, "ctrain tokenize: unknown option %s\n%s", argv[i], TOKENIZE_USAGE);
            goto out_free_files;
        } else if (!spec) spec = argv[i];
        else files[n_files++] = argv[i];
    }
    if (!spec || !n_files == !hf_out) {
        fprintf(stderr, "ctrain tokenize: give a tokenizer and files, or a tokenizer and "
                "--hf-out DIR\n%s",
                TOKENIZE_USAGE);
        goto out_free_files;
    }
    status = 1;
    ct_error err = {.struct_size = sizeof err};
    runtok *tok = runtok_open(NULL, spec, &err);
    int32_t rc = tok ? CT_OK : err.code;
    if (rc == CT_OK && hf_out) {
        bpe_model *m = runtok_bpe(tok), *own = NULL;
        if (!m && !strcmp(runtok_kind(tok), "bytes") && !(m = own = bpe_bytes_model(0, &err)))
            rc = err.code;
        else if (!m)
            rc = ct_error_set(&err, CT_ERR_INVALID, "--hf-out writes byte-level BPE tokenizers; "
                              "%s is %s ---> give a BPE file or bytes", spec, runtok_kind(tok));
        if (rc == CT_OK) rc = bpe_write_hf(m, hf_out, 1024, &err);
        bpe_free(own);
    }
    for (int f = 0; rc == CT_OK && f < n_files; f++) {
        char *text = NULL, *out = NULL;
        size_t len = 0, out_len = 0;
        int32_t *ids = NULL;
        int64_t n = 0;
        rc = !strcmp(files[f], "-")
                 ? read_stdin(TOKENIZE_MAX_FILE, &text, &len, &err)
                 : read_bounded(files[f], decode ? "file of ids" : "text file",
                                "give a regular file, or - for standard input",
                                TOKENIZE_MAX_FILE, &text, &len, &err);
        if (rc == CT_OK && decode) {
            rc = runtok_parse_ids(text, files[f], &ids, &n, &err);
            if (rc == CT_OK) rc = runtok_decode(tok, ids, n, &out, &out_len, &err);
            if (rc == CT_OK) fwrite(out, 1, out_len, stdout);
        } else if (rc == CT_OK) {
            double t0 = now_s();
            for (long r = 0; rc == CT_OK && r < repeat; r++) {
                free(ids);
                ids = NULL;
                rc = runtok_encode_ex(tok, text, len, specials, &ids, &n, &err);
            }
            double dt = now_s() - t0;
            if (rc == CT_OK && stats)
                fprintf(stderr, "tokenize: %s: %zu bytes -> %lld ids (%s), %.3f s for %ld: "
                        "%.2f MB/s on one thread\n", files[f], len, (long long)n,
                        runtok_kind(tok), dt, repeat,
                        dt > 0 ? (double)len * (double)repeat / dt / 1e6 : 0.0);
            if (rc == CT_OK && count) printf("%lld\n", (long long)n);
            for (int64_t i = 0; rc == CT_OK && !count && i < n; i++)
                printf(i ? " %d" : "%d", (int)ids[i]);
            if (rc == CT_OK && !count) printf("\n");
        }
        free(text);
        free(out);
        free(ids);
    }
    if (rc == CT_OK && (fflush(stdout) != 0 || ferror(stdout)))
        rc = ct_error_set(&err, CT_ERR_IO, "cannot write to stdout");
    if (rc != CT_OK) print_message_line(stderr, "ctrain tokenize: ", err.message);
    else status = 0;
    runtok_free(tok);
out_free_files:
    free(files);
    return status;
}
