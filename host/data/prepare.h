/* prepare.h — `ctrain prepare`: text files in, llm.c token shards + meta.ini (+ the trained
 * sentencepiece model or the BPE tokenizer) out, streamed (memory does not grow with the
 * corpus) and tokenized on all cores. Not for: reading shards back (data.h) or reading the
 * inputs (corpus.h).
 *
 * Output folder layout:
 *   DIR/train_000000.bin ...  train tokens, shard_tokens per shard (the last one shorter)
 *   DIR/val_000000.bin ...    validation tokens (the last val_fraction of each text file)
 *   DIR/tokenizer.model       (sentencepiece) the model the tokens come from
 *   DIR/tokenizer.tiktoken    (bpe) the ranks file given, or
 *   DIR/tokenizer.json        (bpe) the tokenizer.json given, or the one vocab.json with
 *                             merges.txt make (the same ids)
 *   DIR/meta.ini              [data] tokenizer, vocab_size, max_token, token and shard
 *                             counts, entropy; [shard NAME] tokens, bytes, max_token, fnv64
 * Each input file's tokens go to train, its last val_fraction (of its tokens) to val. JSON
 * Lines input puts the end-of-text token before every document: 256 with bytes (vocabulary
 * 257), the model's </s> with sentencepiece, <|endoftext|> with bpe. With bpe every plain text
 * file is a document too (<|endoftext|> before it, as llm.c's and nanoGPT's scripts do).
 */
#ifndef CTRAIN_HOST_PREPARE_H
#define CTRAIN_HOST_PREPARE_H

#include <ctrain/ctrain.h>

/* The sentencepiece vocabularies prepare trains: byte fallback needs the 256 byte pieces plus
 * <unk> <s> </s> and some; tokens are stored as uint16. */
#define SP_VOCAB_MIN 260
#define SP_VOCAB_MAX 65535

typedef struct prepare_options {
    const char *const *texts;      /* n_texts text files (any bytes; .gz read through zlib)
                                    * or folders of them (recursively, sorted) */
    int32_t     n_texts;
    const char *out_dir;           /* created when missing; an existing one must be empty */
    int32_t     force;             /* 1: write into an existing, non-empty out_dir */
    double      val_fraction;      /* [0, 0.5]: the tail of each file that goes to val */
    const char *tokenizer;         /* "bytes" (V = 256), "sentencepiece" or "bpe" */
    const char *tokenizer_file;    /* bpe: a *.tiktoken, tokenizer.json or vocab.json (bpe.h) */
    int32_t     vocab_size;        /* sentencepiece only: 260..65535 */
    const char *sp_model_type;     /* "bpe" or "unigram" */
    const char *sp_model;          /* an existing .model to use instead of training; NULL */
    int64_t     sp_max_sentences;  /* lines sampled to train sentencepiece; 0 = all */
    int64_t     sp_sample_bytes;   /* text sampled evenly across the input to train it; 0 all */
    const char *jsonl_field;       /* NULL: plain text; else JSON Lines, this key's string */
    int32_t     threads;           /* tokenizing threads; 0 = one per core */
    int64_t     unit_bytes;        /* text per tokenizing task; 0 = 2 MiB (tests use less) */
    int64_t     shard_tokens;      /* tokens per shard file, >= 1 */
    int32_t     quiet;             /* 1: print nothing (the summary still fills *out) */
} prepare_options;

/* The defaults of the command line: val 0.05, bytes, vocab 8192, bpe, 2M lines, a 100 MB
 * sample, 1e8 tokens per shard, one thread per core. */
prepare_options prepare_default_options(void);

typedef struct prepare_summary {
    int64_t train_tokens, val_tokens;
    int32_t train_shards, val_shards;
    int32_t vocab_size;
    int32_t max_token;       /* the largest token written, -1 when none */
    double  unigram_entropy; /* nats per token, of the train tokens */
} prepare_summary;

/* Do the work. Errors name the file or option and say what to do. */
int32_t prepare_run(const prepare_options *opt, prepare_summary *out, ct_error *err);


#endif /* CTRAIN_HOST_PREPARE_H */
