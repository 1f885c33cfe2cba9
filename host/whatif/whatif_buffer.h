/* whatif_buffer.h — the buffer `ctrain what-if` reduces the head in, and NCCL's pick for it.
 * NCCL picks an algorithm per collective, by the collective's size: the head's gradient is
 * all-reduced inside a larger buffer — a DDP bucket (--bucket-bytes B: the head at the bucket's
 * start, as DDP's buckets take the parameters in reverse order and the head comes last), or
 * the FlatParameter of the FSDP unit that holds it (--fsdp-units MODEL: NO_SHARD all-reduces
 * each unit's flat gradient in one collective; open_lm's wrapping puts every Block in its own
 * unit and the embedding, the final norm and the untied head in the root unit). Without
 * either, the buffer is the replayed head itself (as before).
 * The replayed rows are the run's head (V x C); the buffer only sets the collective's size
 * (the tuner model's pick, NCCL's channel split) and where the rows sit in it.
 * Not for: the replay's arithmetic (whatif_replay.h) or the tuner model (tuner.h).
 */
#ifndef CTRAIN_HOST_WHATIF_BUFFER_H
#define CTRAIN_HOST_WHATIF_BUFFER_H

#include "../plugins/comm/threads/tuner.h"

#include <stdint.h>
#include <stdio.h>

/* A model's parameter shapes as open_lm builds them (model.py: Block = attention (in_proj
 * 3C x C, out_proj C x C, q_norm and k_norm C each with qk_norm), SwiGLU (w12 2H x C, w3
 * C x H, H = 256 ceil(floor(8C/3) / 256)), attention_norm and ffn_norm C each; Transformer =
 * tok_embeddings V x C, the blocks, norm C, output V x C (untied)); norms gain-only. */
typedef struct whatif_fsdp_model {
    const char *name;   /* --fsdp-units NAME */
    const char *what;   /* where the shape comes from */
    int64_t     V, C, blocks, heads;
    int32_t     qk_norm;
} whatif_fsdp_model;

/* The named model (NULL: none), and the names as "a, b" for messages. */
const whatif_fsdp_model *whatif_fsdp_find(const char *name);
const char *whatif_fsdp_names(void);

/* Elements of one Block unit, of the root unit, and the head's first element in the root
 * unit's FlatParameter (tok_embeddings, norm, output in registration order). */
int64_t whatif_fsdp_block_elems(const whatif_fsdp_model *m);
int64_t whatif_fsdp_root_elems(const whatif_fsdp_model *m);
int64_t whatif_fsdp_head_offset(const whatif_fsdp_model *m);

/* Print the unit layout in bytes of a reduce dtype of esize bytes ("what-if: ..." lines). */
void whatif_fsdp_print(FILE *f, const whatif_fsdp_model *m, uint32_t esize);

/* The buffer a head of head_elems elements is all-reduced in, in elements of esize bytes:
 * *count (the collective) and *base (the head's first element in it). bucket_bytes > 0: a
 * DDP bucket of that many bytes; m: the root unit of m; neither: the head alone. Returns 0,
 * or -1 with what is wrong in why (the head does not fit). */
int whatif_buffer_of(uint64_t bucket_bytes, const whatif_fsdp_model *m, uint64_t head_elems,
                     uint32_t esize, uint64_t *count, uint64_t *base, char *why, size_t len);

/* NCCL's pick for one all-reduce and its closest rival of another algorithm. */
typedef struct whatif_pick {
    uint64_t   nbytes;      /* the collective's bytes */
    tuner_pick pick;
    int32_t    rival;       /* tuner algo of the fastest other algorithm (-1: none) */
    int32_t    rival_proto; /* its fastest protocol */
    double     rival_us;    /* its time */
    double     margin;      /* rival_us / pick time - 1 */
    int32_t    fragile;     /* margin < WHATIF_FRAGILE */
} whatif_pick;

/* A pick that wins by less than this (relative predicted time) is fragile. */
#define WHATIF_FRAGILE 0.10

void whatif_pick_of(const tuner_query *q, whatif_pick *out);

/* The engine's order (reduce_algo) that runs tuner algo a. */
int32_t whatif_engine_algo(int32_t tuner_algo);

#endif /* CTRAIN_HOST_WHATIF_BUFFER_H */
