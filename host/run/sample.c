/* sample.c — generating tokens from a rank's model (see sample.h): the choice of the next token,
 * the decode loop with the plugin's key/value cache or forward() over the window, and the
 * [run] sample_every hook of training. */
#include "run/sample.h"

#include "io/outfile.h"

#include "base/cmdout.h"
#include "run/optim.h"
#include "io/json.h"
#include "data/runtok.h"

#include <ctrain/numerics.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SAMPLE_STREAM 0x73616d706c65ull /* "sample": keeps the draws apart from other streams */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int32_t sample_check_opts(const sample_opts *o, ct_error *err) {
    if (!o->greedy && !(o->temperature > 0))
        return ct_error_set(err, CT_ERR_INVALID, "--temperature %g must be > 0 ---> use --greedy "
                            "for the most likely token (the limit of temperature 0)",
                            o->temperature);
    if (!(o->top_p > 0 && o->top_p <= 1))
        return ct_error_set(err, CT_ERR_INVALID, "--top-p %g is outside (0, 1] ---> 1 keeps "
                            "every token, 0.9 the smallest set holding 90%% of the probability",
                            o->top_p);
    if (o->top_k < 0)
        return ct_error_set(err, CT_ERR_INVALID, "--top-k %lld must be >= 0 (0 = all tokens)",
                            (long long)o->top_k);
    if (o->n_tokens < 0)
        return ct_error_set(err, CT_ERR_INVALID, "--tokens %lld must be >= 0",
                            (long long)o->n_tokens);
    return CT_OK;
}

/* ---- choosing the next token ------------------------------------------------------------ */

typedef struct cand {
    float   logit;
    int32_t id;
} cand;

/* Larger logit first; the lower id among equals. */
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t sample_pick(const float *logits, int64_t V, const sample_opts *o, double u, int32_t *out,
                    ct_error *err) {
    assert(V >= 1);
    if (o->greedy) {
        int64_t best = 0;
        for (int64_t j = 1; j < V; j++)
            if (logits[j] > logits[best]) best = j;
        *out = (int32_t)best;
        return CT_OK;
    }
    cand *c = malloc((size_t)V * sizeof *c);
    double *p = malloc((size_t)V * sizeof *p);
    if (!c || !p) {
        free(c);
        free(p);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory for %lld candidates", (long long)V);
    }
    for (int64_t j = 0; j < V; j++) c[j] = (cand){logits[j], (int32_t)j};
    int64_t n = V;
    int sorted = o->top_k > 0 || o->top_p < 1;
    if (sorted) qsort(c, (size_t)V, sizeof *c, cand_cmp);
    if (o->top_k > 0 && o->top_k < n) n = o->top_k;
    /* softmax of logit / temperature over the n kept, in f64 */
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++) mx = fmax(mx, (double)c[j].logit / o->temperature);
    for (int64_t j = 0; j < n; j++) sum += p[j] = exp((double)c[j].logit / o->temperature - mx);
    if (o->top_p < 1) { /* the smallest prefix (most likely first) holding >= top_p */
        double acc = 0;
        int64_t keep = n;
        for (int64_t j = 0; j < n; j++) {
            acc += p[j] / sum;
            if (acc >= o->top_p) {
                keep = j + 1;
                break;
            }
        }
        n = keep;
        sum = 0;
        for (int64_t j = 0; j < n; j++) sum += p[j];
    }
    double target = u * sum, acc = 0;
    int64_t pick = n - 1; /* rounding may leave target just above the last partial sum */
    for (int64_t j = 0; j < n; j++) {
        acc += p[j];
        if (target < acc) {
            pick = j;
            break;
        }
    }
    *out = c[pick].id;
    free(c);
    free(p);
    return CT_OK;
}

/* ---- the decode loop -------------------------------------------------------------------- */

void sample_params_free(host_rank *r, param_copy *pc) {
    for (uint32_t u = 0; pc->unit && u < pc->n; u++) RANK_DEV_VOID(r, free_mem, pc->unit[u]);
    free(pc->unit);
    pc->unit = NULL;
}

int32_t sample_params_make(host_rank *r, int active, param_copy *pc, ct_error *err) {
    size_t es = ct_dtype_size(r->policy.param_dtype);
    pc->n = r->mdesc.n_units;
    pc->unit = active ? calloc(pc->n, sizeof *pc->unit) : NULL;
    if (active && !pc->unit) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = CT_OK;
    for (uint32_t u = 0; u < pc->n && rc == CT_OK; u++) {
        const void *params = NULL;
        rc = RANK_STRATEGY(r, acquire, u, CT_PHASE_FORWARD, &params, err);
        if (rc != CT_OK) break;
        if (active) {
            uint64_t bytes = r->units[u].numel * es;
            pc->unit[u] = RANK_DEV(r, alloc, bytes ? bytes : es, err);
            if (!pc->unit[u])
                rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory for a copy of unit %u "
                                  "(%llu bytes) to sample from", u, (unsigned long long)bytes);
            else
                rc = RANK_DEV(r, copy, pc->unit[u], params, bytes, CT_COPY_D2D, err);
        }
        int32_t rc2 = RANK_STRATEGY(r, release, u, CT_PHASE_FORWARD, err);
        if (rc == CT_OK) rc = rc2;
    }
    if (rc != CT_OK) sample_params_free(r, pc);
    return rc;
}

int32_t sample_forward_window(host_rank *r, const param_copy *pc, const int32_t *window,
                                 int64_t n, int fit, float *logits, ct_error *err) {
    int64_t rows = fit ? n : r->B * r->T; /* fit: the model is prepared for (1, n) */
    int32_t rc = fit ? RANK_MODEL(r, prepare, 1, n, r->policy.param_dtype, err) : CT_OK;
    if (rc != CT_OK) return rc;
    memset(r->h_tokens, 0, (size_t)rows * sizeof *r->h_tokens);
    memcpy(r->h_tokens, window, (size_t)n * sizeof *window);
    rc = RANK_DEV(r, copy, r->tokens, r->h_tokens, (uint64_t)rows * sizeof(int32_t),
                  CT_COPY_H2D, err);
    for (uint32_t s = 0; s < r->mdesc.n_stages && rc == CT_OK; s++) {
        ct_stage_args a = {
            .struct_size = sizeof a,
            .stage = (int32_t)s,
            .params = pc->unit[r->mdesc.stages[s].unit],
            .param_dtype = r->policy.param_dtype,
            .grad_dtype = r->policy.grad_accum_dtype,
            .tokens = r->tokens,
            .logits = r->logits,
            .dlogits = r->dlogits,
        };
        rc = RANK_MODEL(r, forward, &a, err);
    }
    if (rc == CT_OK)
        rc = RANK_DEV(r, copy, logits, r->logits + (n - 1) * r->V,
                      (uint64_t)r->V * sizeof(float), CT_COPY_D2H, err);
    return rc;
}

int32_t sample_generate(host_rank *r, int active, const int32_t *prompt, int64_t n_prompt,
                        const sample_opts *o, sample_emit_fn emit, void *ctx, sample_stats *st,
                        ct_error *err) {
    memset(st, 0, sizeof *st);
    int64_t W = r->T, V = r->V;
    if (active && (n_prompt < 1 || n_prompt > W))
        return ct_error_set(err, CT_ERR_INVALID, "the prompt is %lld tokens; the model's context "
                            "is %lld ---> shorten the prompt", (long long)n_prompt, (long long)W);
    param_copy pc = {0};
    int32_t rc = sample_params_make(r, active, &pc, err);
    if (rc != CT_OK || !active) return rc;

    const ct_model_vtable *mv = r->model.vt;
    int use_cache = !o->no_cache && mv->prepare_decode && mv->decode;
    if (use_cache) {
        ct_error why = {.struct_size = sizeof why};
        rc = RANK_MODEL(r, prepare_decode, W, r->policy.param_dtype, &why);
        if (rc == CT_ERR_UNSUPPORTED) use_cache = 0, rc = CT_OK; /* the plugin says: recompute */
        else if (rc != CT_OK) *err = why;
    }
    int64_t cap = n_prompt + o->n_tokens;
    int32_t *seq = malloc((size_t)cap * sizeof *seq);
    float *logits = malloc((size_t)V * sizeof *logits);
    if (rc == CT_OK && (!seq || !logits))
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory for %lld tokens", (long long)cap);
    if (rc == CT_OK) memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    int64_t len = n_prompt, start = 0, cached = 0; /* the window is seq[start, len) */
    double t0 = now_s();
    for (int64_t k = 0; k < o->n_tokens && rc == CT_OK; k++) {
        if (len - start > W) { /* outgrown: continue from the last max(1, W/2) tokens */
            start = len - (W / 2 > 0 ? W / 2 : 1);
            cached = 0;
        }
        if (use_cache) {
            ct_decode_args a = {
                .struct_size = sizeof a,
                .params = (const void *const *)pc.unit,
                .param_dtype = r->policy.param_dtype,
                .tokens = seq + start + cached,
                .n_new = len - start - cached,
                .position = cached,
                .logits = logits,
            };
            rc = RANK_MODEL(r, decode, &a, err);
            cached = len - start;
        } else {
            rc = sample_forward_window(r, &pc, seq + start, len - start, o->fit_window, logits, err);
        }
        int32_t tok = 0;
        if (rc == CT_OK)
            rc = sample_pick(logits, V, o, (double)(ct_hash64(o->seed, (uint64_t)k) >> 11) *
                             (1.0 / 9007199254740992.0), &tok, err);
        if (rc != CT_OK) break;
        seq[len++] = tok;
        st->generated++;
        if (emit && (rc = emit(ctx, tok, err)) != CT_OK) break;
    }
    st->seconds = now_s() - t0;
    st->used_cache = use_cache;
    free(seq);
    free(logits);
    sample_params_free(r, &pc);
    return rc;
}

int32_t sample_ids_push(sample_ids *l, int32_t tok, ct_error *err) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 64;
        int32_t *g = realloc(l->ids, (size_t)cap * sizeof *g);
        if (!g) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        l->ids = g;
        l->cap = cap;
    }
    l->ids[l->n++] = tok;
    return CT_OK;
}

/* ---- [run] sample_every ----------------------------------------------------------------- */

static int32_t collect_token(void *ctx, int32_t tok, ct_error *err) {
    return sample_ids_push(ctx, tok, err);
}

/* Append one line {"step": S, "prompt": ..., "text": ...} to OUT/samples.jsonl with one
 * write(), checked. */
static int32_t append_sample(const char *out_dir, int64_t step, const char *prompt,
                             const char *text, size_t text_len, ct_error *err) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/samples.jsonl", out_dir) >= (int)sizeof path)
        return ct_error_set(err, CT_ERR_INVALID, "path %s/samples.jsonl is too long", out_dir);
    char *line = NULL;
    size_t line_len = 0;
    FILE *m = open_memstream(&line, &line_len);
    if (!m) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    fprintf(m, "{\"step\": %lld, \"prompt\": \"", (long long)step);
    int bad = json_put_string(m, prompt, strlen(prompt));
    fputs("\", \"text\": \"", m);
    bad |= json_put_string(m, text, text_len);
    fputs("\"}\n", m);
    bad |= fclose(m) != 0;
    if (bad) {
        free(line);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory formatting a sample");
    }
    int fd;
    int32_t rc = outfile_append_open(path, 0, &fd, err);
    if (rc == CT_OK) {
        int bad = fd_write_all(fd, line, line_len) != 0;
        int saved = errno;
        if (close(fd) != 0 && !bad) bad = 1, saved = errno;
        if (bad)
            rc = ct_error_set(err, CT_ERR_IO, "cannot write %s: %s ---> check free disk space",
                              path, strerror(saved ? saved : EIO));
    }
    free(line);
    return rc;
}

int32_t sample_train_hook(host_rank *r, const char *out_dir, int64_t step, ct_error *err) {
    int64_t every = 0, n_tokens = 64, seed = 0;
    const char *prompt = "";
    config_get_int(r->cfg, "run", "sample_every", &every, NULL);
    if (every <= 0 || step % every != 0) return CT_OK;
    config_get_int(r->cfg, "run", "sample_tokens", &n_tokens, NULL);
    config_get_string(r->cfg, "run", "sample_prompt", &prompt, NULL);
    config_get_int(r->cfg, "run", "seed", &seed, NULL);
    int active = r->rank == 0;
    runtok *tok = NULL;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    int32_t rc = CT_OK;
    if (active) { /* everything rank 0 alone can fail at, before the collectives */
        tok = runtok_open(out_dir, NULL, err);
        const char *text = *prompt ? prompt : "\n";
        if (!tok) rc = err->code;
        else rc = runtok_encode(tok, text, strlen(text), &ids, &n_ids, err);
        if (rc == CT_OK && (n_ids < 1 || n_ids > r->T))
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: [run] sample_prompt is %lld tokens; the "
                              "context is %lld ([data] seq_len) ---> shorten it",
                              config_origin(r->cfg, "run", "sample_prompt"), (long long)n_ids,
                              (long long)r->T);
        if (rc == CT_OK && runtok_vocab(tok) > r->V)
            rc = ct_error_set(err, CT_ERR_INVALID, "the run's tokenizer has %lld tokens, the "
                              "model %lld ---> set [model] vocab_size to the tokenizer's",
                              (long long)runtok_vocab(tok), (long long)r->V);
    }
    double bad = rc != CT_OK;
    ct_error scratch = {.struct_size = sizeof scratch};
    int32_t rc2 = optim_allreduce_f64(r, &bad, 1, CT_REDUCE_MAX, rc != CT_OK ? &scratch : err);
    if (rc == CT_OK && rc2 != CT_OK) rc = rc2;
    if (rc == CT_OK && bad > 0)
        rc = ct_error_set(err, CT_ERR_COMM, "step %lld: sampling failed on rank 0",
                          (long long)step);
    sample_opts o = {.n_tokens = n_tokens, .temperature = 1.0, .top_p = 1.0,
                     .seed = ct_hash64((uint64_t)seed ^ SAMPLE_STREAM, (uint64_t)step)};
    sample_ids c = {0};
    sample_stats st;
    if (rc == CT_OK) rc = sample_generate(r, active, ids, n_ids, &o, collect_token, &c, &st, err);
    char *text = NULL;
    size_t text_len = 0;
    if (rc == CT_OK && active) rc = runtok_decode(tok, c.ids, c.n, &text, &text_len, err);
    if (rc == CT_OK && active) {
        fprintf(cmdout(), "step %lld | sample: %s", (long long)step, prompt);
        fwrite(text, 1, text_len, cmdout());
        fprintf(cmdout(), "\n");
        fflush(cmdout());
        rc = append_sample(out_dir, step, prompt, text, text_len, err);
    }
    free(text);
    free(c.ids);
    free(ids);
    runtok_free(tok);
    return rc;
}
