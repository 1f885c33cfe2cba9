/* sample.h — generating text from a model: choosing the next token from logits (greedy,
 * temperature, top-k, top-p), running the model one token at a time (the plugin's key/value
 * cache when it has one, else the whole window recomputed with forward()), and the
 * [run] sample_every hook of training (OUT/samples.jsonl).
 * Not for: the `ctrain sample` command line (sample_cmd.c) or tokenizers (runtok.h).
 */
#ifndef CTRAIN_HOST_SAMPLE_H
#define CTRAIN_HOST_SAMPLE_H

#include "run/rank.h"

#include <stdio.h>

typedef struct sample_opts {
    int64_t  n_tokens;    /* tokens to generate, >= 0 */
    double   temperature; /* > 0 (ignored when greedy) */
    int64_t  top_k;       /* keep the k most likely tokens; 0 = all */
    double   top_p;       /* keep the smallest set whose probability is >= top_p; (0, 1] */
    uint64_t seed;        /* of the counter-based stream: draw i is ct_hash64(seed', i) */
    int32_t  greedy;      /* 1: the most likely token (the lowest id among equals) */
    int32_t  no_cache;    /* 1: recompute with forward() even when the model can decode */
    int32_t  fit_window;  /* recompute: prepare() the model for (1, window) before each
                             forward, so it computes the window only, not the rank's (B,T);
                             for a rank whose activation buffers serve nothing else (`ctrain
                             sample`); 0 keeps the rank's shape (training) */
} sample_opts;

/* CT_ERR_INVALID naming the option when temperature <= 0 without greedy, top_p outside (0, 1],
 * top_k < 0 or n_tokens < 0. */
int32_t sample_check_opts(const sample_opts *o, ct_error *err);

/* The next token from logits (V) with uniform draw u in [0, 1): softmax of logits/temperature,
 * restricted to the top_k largest (ties: lower id first), then to the smallest prefix of them
 * (by probability, descending) whose probability sums to >= top_p, renormalised; u picks by
 * the cumulative sum in that order. greedy ignores u. CT_ERR_NOMEM only. */
int32_t sample_pick(const float *logits, int64_t V, const sample_opts *o, double u, int32_t *out,
                    ct_error *err);

/* Called with every generated token, as soon as it is chosen. */
typedef int32_t (*sample_emit_fn)(void *ctx, int32_t token, ct_error *err);

/* A growing list of token ids, e.g. what an emit callback collects. Starts zeroed; the owner
 * frees ids. */
typedef struct sample_ids {
    int32_t *ids;
    int64_t  n, cap;
} sample_ids;

/* Append tok (CT_ERR_NOMEM: the list is unchanged). */
int32_t sample_ids_push(sample_ids *l, int32_t tok, ct_error *err);

typedef struct sample_stats {
    int64_t generated;   /* tokens generated */
    int32_t used_cache;  /* 1: the model's decode(), 0: forward() over the window */
    double  seconds;     /* wall time of the generation after the parameters were copied */
} sample_stats;

/* Generate o->n_tokens tokens after the n_prompt >= 1 tokens of prompt, on this rank's model.
 * Collective over the rank's world: every rank calls it (the strategy gathers every unit once,
 * acquire/release per unit as the forward pass does); only the rank with active != 0 computes
 * (its copy of the gathered parameters lives for the call). The context is the rank's T: the
 * prompt must fit it (CT_ERR_INVALID); when the sequence outgrows it, the model continues from
 * its last max(1, T/2) tokens (with or without the cache alike). The draws use the stream
 * o->seed only: nothing of training's state is read or changed except r->tokens and r->logits
 * (rewritten by the next step anyway). */
int32_t sample_generate(host_rank *r, int active, const int32_t *prompt, int64_t n_prompt,
                        const sample_opts *o, sample_emit_fn emit, void *ctx, sample_stats *st,
                        ct_error *err);

/* This rank's copy of every unit's gathered parameters (device memory, param_dtype). */
typedef struct param_copy {
    void   **unit;   /* (n_units) */
    uint32_t n;
} param_copy;

/* Gather every unit once (acquire/release, as the forward pass does: collective for sharded
 * strategies) and, on the active rank, copy it into *pc. Every rank runs every acquire and
 * release. Free with sample_params_free. */
int32_t sample_params_make(host_rank *r, int active, param_copy *pc, ct_error *err);
void sample_params_free(host_rank *r, param_copy *pc);

/* Logits (V, host) of the last of the n window tokens, recomputed with forward() over the
 * window: row 0 of the rank's (B,T) token buffer holds the window, the rest zeros (causal
 * attention: later positions never reach earlier rows). fit: the model is first prepared for
 * (1, n), so the forward's rows are exactly the window's (mean_hidden then averages them). */
int32_t sample_forward_window(host_rank *r, const param_copy *pc, const int32_t *window,
                              int64_t n, int fit, float *logits, ct_error *err);

/* [run] sample_every = K: every rank calls this after every step; after steps K, 2K, ... rank
 * 0 prints a sample of [run] sample_tokens tokens after [run] sample_prompt (an empty prompt
 * is the text "\n") drawn at temperature 1 from a stream keyed by [run] seed and the step,
 * and appends {"step": S, "prompt": ..., "text": ...} to OUT/samples.jsonl (one write per
 * line, checked). The run's tokenizer is OUT/tokenizer.ini (runtok.h). */
int32_t sample_train_hook(host_rank *r, const char *out_dir, int64_t step, ct_error *err);

#endif /* CTRAIN_HOST_SAMPLE_H */
