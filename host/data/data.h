/* data.h — token shards in llm.c's format (write, check, read per window) and the training data
 * loader that cuts them into (B, T) micro-batches for one rank of a run.
 * Not for: making shards from text (prepare.c, tokenizer.h) or moving batches to a device.
 *
 * Shard file: a header of 256 little-endian int32 — [0] magic 20240520, [1] version, [2] token
 * count n — then n little-endian tokens whose width the version says:
 *   version 1: uint16 tokens, the file is exactly 1024 + 2n bytes (llm.c's GPT-2 shards; the only
 *              version llm.c's C loaders read);
 *   version 2: uint32 tokens, exactly 1024 + 4n bytes (the layout llm.c's data scripts write for
 *              LLaMA-3's 128,256 tokens); `ctrain prepare` writes it when the vocabulary has
 *              more than 65,536 tokens, version 1 otherwise.
 * Every reader here takes both; the width is the header's (meta.ini's token_bytes, when
 * recorded, must agree).
 *
 * Loader semantics (what the lead's equivalence tests rely on):
 *   - A sequence is a window of T+1 consecutive tokens of one shard: inputs are its first T,
 *     targets its last T. Window k of a shard starts at token k*T, so consecutive windows share
 *     one boundary token and every token is an input at most once and a target at most once
 *     (llm.c's tiling). Windows never cross a shard boundary; a shard of n tokens holds
 *     floor((n-1)/T) windows. Targets are never -1.
 *   - An epoch is a permutation of all windows of all shards, drawn from (seed, epoch) alone.
 *   - The global micro-batch is the next world*B windows of the epoch's order; rank r takes
 *     windows [r*B, (r+1)*B) of it. So one rank with batch B*N reads exactly the sequences that
 *     N ranks with batch B read together, in rank order. A tail of fewer than world*B windows
 *     is skipped and the next epoch (new permutation) begins.
 *   - Position is counted in windows of the epoch, independent of rank: a checkpoint's state
 *     resumes identically on any world size with the same world*B.
 * Shape legend: B sequences per micro-batch on this rank, T tokens per sequence.
 */
#ifndef CTRAIN_HOST_DATA_H
#define CTRAIN_HOST_DATA_H

#include <ctrain/ctrain.h>

#include "io/outfile.h"

#define HOST_SHARD_MAGIC        20240520
#define HOST_SHARD_VERSION      1   /* uint16 tokens */
#define HOST_SHARD_VERSION_U32  2   /* uint32 tokens */
#define HOST_SHARD_U16_VOCAB    65536 /* the largest vocabulary version 1 holds */
#define HOST_SHARD_HEADER_INTS  256
#define HOST_SHARD_HEADER_BYTES (HOST_SHARD_HEADER_INTS * 4)

/* ---- shards ------------------------------------------------------------------------------ */

/* Write n tokens to `path` atomically: to a temporary name beside it, fsync, rename, fsync the
 * folder. A reader never sees a partial file. CT_ERR_IO naming the path on failure.
 * shard_write: version 1 (uint16); shard_write_u32: version 2 (uint32). */
int32_t shard_write(const char *path, const uint16_t *tokens, int64_t n, ct_error *err);
int32_t shard_write_u32(const char *path, const uint32_t *tokens, int64_t n, ct_error *err);

/* The bytes per token of a vocabulary of V tokens as prepare stores it: 2 up to 65,536, else 4. */
int32_t shard_width_for_vocab(int64_t V);

/* A shard written piece by piece (prepare streams its output): tokens go to a temporary
 * file beside `path`; shard_writer_finish writes the header, fsyncs and renames it onto
 * `path`, so a reader never sees a half-written shard. Also counts what meta.ini records:
 * the largest token and the FNV-1a 64-bit hash of the token bytes as stored. */
typedef struct host_shard_writer {
    outfile  out;         /* the shard being written (outfile.h); out.path is the final name */
    int32_t  width;       /* bytes per token: 2 (version 1) or 4 (version 2) */
    int64_t  n;           /* tokens so far */
    int32_t  max;         /* largest token so far, -1 when none */
    uint64_t fnv;         /* FNV-1a 64 over the token bytes as stored (little-endian) */
} host_shard_writer;

#define HOST_FNV64_OFFSET 0xcbf29ce484222325ull
#define HOST_FNV64_PRIME  0x100000001b3ull

/* width: 2 or 4 bytes per token (shard_width_for_vocab). */
int32_t shard_writer_open(host_shard_writer *w, const char *path, int32_t width, ct_error *err);
/* CT_ERR_INVALID when the shard would pass INT32_MAX tokens, or a token does not fit the width
 * (>= 65,536 in a 2-byte shard, > INT32_MAX in any); CT_ERR_IO on a write error. */
int32_t shard_writer_append(host_shard_writer *w, const uint32_t *tokens, int64_t n,
                            ct_error *err);
int32_t shard_writer_finish(host_shard_writer *w, ct_error *err);
/* Remove the temporary file (after an error). */
void shard_writer_abort(host_shard_writer *w);

/* FNV-1a 64 of n bytes, continuing from h (start with HOST_FNV64_OFFSET). */
uint64_t fnv64_update(uint64_t h, const void *bytes, size_t n);

/* One checked shard. No mapping: tokens are read with pread per window (shard_read), so a
 * file truncated or rewritten under a run is an error naming the file and the token position,
 * never a SIGBUS. At most one descriptor is open per shard, and only between shard_read and
 * shard_release (a run over thousands of shards on many ranks stays under the fd limit). */
typedef struct host_token_shard {
    char    *path;      /* owned copy */
    int64_t  n;         /* tokens, from the header (the file is 1024 + width*n bytes) */
    int32_t  width;     /* bytes per token, from the header's version: 2 or 4 */
    uint64_t dev, ino;  /* the file's identity when opened: a replaced file is noticed */
    int      fd;        /* -1 when released */
} host_token_shard;

/* Open and check a shard: a regular file (a FIFO, folder or device is refused without
 * blocking), magic, version (1 or 2), and that the file length is exactly 1024 + width*n.
 * Errors (CT_ERR_IO unreadable, CT_ERR_INVALID malformed or not a regular file) name the file
 * and what is wrong. On success fill *out (release with shard_close). */
int32_t shard_open(const char *path, host_token_shard *out, ct_error *err);
void shard_close(host_token_shard *s);

/* Read tokens [first, first + count) into out. Checks, as read, that the file is still the
 * one opened (same inode, same size); if not, or if the read comes up short, CT_ERR_IO
 * "PATH: token position P: the file changed during the run (...) ---> ...". The descriptor is
 * (re)opened as needed and stays open until shard_release. 0 <= first, first + count <= n. */
int32_t shard_read(host_token_shard *s, int64_t first, int64_t count, uint32_t *out,
                   ct_error *err);
/* Close the shard's descriptor (a later shard_read reopens it and checks its identity). */
void shard_release(host_token_shard *s);

/* The largest token of the shard into *max and its first position into *position (-1 / -1
 * for an empty shard), read in chunks with shard_read (errors as there). Reads the whole
 * file: loader_open does not use it. */
int32_t shard_max_token(host_token_shard *s, int32_t *max, int64_t *position, ct_error *err);

/* ---- meta.ini --------------------------------------------------------------------------- */

/* What `ctrain prepare` recorded in DIR/meta.ini about the shards beside it. */
typedef struct host_shard_meta {
    char    name[256];   /* the shard's file name, without the folder */
    int64_t tokens, bytes;
    int32_t max_token;
} host_shard_meta;

typedef struct host_data_meta {
    int32_t          found;           /* 1 when meta.ini exists and was read */
    char             path[4096];      /* the meta.ini read */
    char             tokenizer[32];   /* "bytes", "sentencepiece", "bpe", or "" */
    char             tokenizer_model[256]; /* the model file's name beside the shards, or "" */
    char             tokenizer_fnv64[20];  /* its FNV-1a 64-bit checksum in hex, or "" */
    int32_t          vocab_size;      /* 0 when not recorded */
    int32_t          token_bytes;     /* the shards' width, 2 or 4; 0 when not recorded */
    int32_t          max_token;       /* -1 when not recorded */
    int32_t          eot_token;       /* the token before each document; -1 when not recorded */
    host_shard_meta *shards;          /* owned */
    int32_t          n_shards;
} host_data_meta;

/* Read DIR/meta.ini. CT_OK with found 0 when there is none (max_token -1), found 1 when read,
 * or CT_ERR_INVALID "PATH:LINE: ... ---> re-run `ctrain prepare` or remove it" when it cannot be
 * parsed. Free with data_meta_free. */
int32_t data_meta_read(const char *dir, host_data_meta *m, ct_error *err);
/* The meta.ini of [data] train/val's value: the folder itself, or the folder of a file or
 * glob. As data_meta_read. */
int32_t data_meta_for(const char *data_path, host_data_meta *m, ct_error *err);
void data_meta_free(host_data_meta *m);
/* Whether two meta.ini describe shards of the same tokenizer: 1 when both record one and they
 * differ in kind or model checksum, else 0 (nothing recorded is no evidence). */
int data_meta_tokenizers_differ(const host_data_meta *a, const host_data_meta *b);
/* "sentencepiece (tokenizer.model, fnv64 0123...)" or "bytes", into buf. */
const char *data_meta_tokenizer_text(const host_data_meta *m, char *buf, size_t cap);
/* The record of the shard named `name` (no folder), or NULL. */
const host_shard_meta *data_meta_shard(const host_data_meta *m, const char *name);

/* ---- the loader -------------------------------------------------------------------------- */

typedef struct host_loader host_loader;

/* Where the loader stands: a plain struct, saved in checkpoints as it is. */
typedef struct host_loader_state {
    uint64_t epoch;    /* 0 for the first pass */
    uint64_t position; /* windows of this epoch's order already consumed (by all ranks) */
} host_loader_state;

/* Open the shards named by `path`:
 *   - a shard file ("data/train_000000.bin");
 *   - a folder, with `split` ("train" or "val"; NULL means "train"): every SPLIT_*.bin in it;
 *   - a glob pattern ("data/fineweb_train_*.bin").
 * Files are taken in sorted name order. Every shard is checked (shard_open: header and size),
 * in constant time: no token is read at open. When the meta.ini beside a shard records it
 * with the shard's very token count and byte size, its recorded max_token is trusted: one
 * >= vocab_size_limit (when > 0) is an error naming the file, meta.ini and the recorded max;
 * a token_bytes there other than the shard header's width is an error naming both.
 * Tokens themselves are checked as each window is read (loader_next). B, T >= 1;
 * 0 <= rank < world. Needs at least world*B windows in all.
 * Returns NULL and fills err on failure. Each window is read with shard_read when it is dealt
 * (see loader_next), so the shards may be far larger than memory. */
host_loader *loader_open(const char *path, const char *split, int64_t vocab_size_limit, int64_t B,
                       int64_t T, int32_t rank, int32_t world, uint64_t seed, ct_error *err);
void loader_close(host_loader *l);

/* This rank's next micro-batch: inputs (B, T) and targets (B, T), caller-owned, as int32.
 * Advances the shared position by world*B windows. Each window is read and checked as it is
 * dealt: a shard that changed since loader_open (truncated, replaced, shorter read) or a token
 * >= vocab_size_limit is CT_ERR_IO / CT_ERR_INVALID naming the file and the token position. */
int32_t loader_next(host_loader *l, int32_t *inputs, int32_t *targets, ct_error *err);

/* Back to the start of epoch 0 (for an evaluation pass over the same sequences each time). */
void loader_reset(host_loader *l);

host_loader_state loader_get_state(const host_loader *l);
/* CT_ERR_INVALID when position is beyond this data's epoch (a checkpoint of other data). */
int32_t loader_set_state(host_loader *l, host_loader_state st, ct_error *err);

/* Global micro-batches in one epoch: floor(windows / (world*B)). */
int64_t loader_batches_per_epoch(const host_loader *l);
/* All windows of all shards, and all tokens of all shards. */
int64_t loader_windows(const host_loader *l);
/* A shard both loaders read (the same file: device and inode) when their sets of shards are
 * not the same, or NULL: a train glob that also matches some validation shards. (The very same
 * shards for both is a choice, e.g. to measure fitting; a partial overlap is a mistake.) The
 * path is a's, owned by it. */
const char *loader_partial_overlap(const host_loader *a, const host_loader *b);
int64_t loader_tokens(const host_loader *l);
int32_t loader_shard_count(const host_loader *l);
/* The largest token that the shards' meta.ini records, or -1 when a shard has no record. */
int32_t loader_recorded_max_token(const host_loader *l);

/* ---- statistics -------------------------------------------------------------------------- */

/* Entropy in nats of the unigram distribution of tokens (counts over vocab entries):
 * -sum p ln p with p = count/total. 0 for fewer than two distinct tokens. */
double unigram_entropy(const uint64_t *counts, int64_t vocab);

#endif /* CTRAIN_HOST_DATA_H */
