/* runtok.h — the tokenizer a run was trained with, kept with the run: recorded at the start of
 * `ctrain train` from the meta.ini that `ctrain prepare` wrote beside the shards (the
 * sentencepiece model or BPE file copied into the run folder, checked by its content
 * checksum), and loaded back by `ctrain sample`, [run] sample_every and `ctrain export` to turn
 * text into tokens and back. Not for: training sentencepiece models, BPE itself or reading
 * shards (tokenizer.h, bpe.h, prepare.c, data.c).
 *
 * Run folder files: OUT/tokenizer.ini ([tokenizer] kind = bytes | sentencepiece | bpe, model,
 * model_fnv1a64, vocab_size, eot_token, source) and the model file it names: tokenizer.model
 * (sentencepiece), tokenizer.json or tokenizer.tiktoken (bpe).
 */
#ifndef CTRAIN_HOST_RUNTOK_H
#define CTRAIN_HOST_RUNTOK_H

#include "config/config.h"

#include <ctrain/ctrain.h>
#include <stddef.h>

/* At the start of a run (the process that writes OUT/config.ini): find meta.ini in the folder
 * of [data] train; when it names a tokenizer, write OUT/tokenizer.ini and copy a sentencepiece
 * model to OUT/tokenizer.model (both through temporaries and renames), after checking the
 * model's checksum against meta.ini's. Without meta.ini nothing is recorded (a stale
 * OUT/tokenizer.ini is removed) and *found = 0; with `required` (sample_every > 0) that is an
 * error saying what to do. */
int32_t runtok_record(const host_config *cfg, const char *out_dir, int required, int *found,
                      ct_error *err);

typedef struct runtok runtok;

/* The run's tokenizer: `spec` overrides ("bytes", a sentencepiece .model file, or a BPE file
 * as bpe_load takes it); else OUT/tokenizer.ini of run_dir (the checksum of its model file
 * verified). Errors name the file and what to do. */
runtok *runtok_open(const char *run_dir, const char *spec, ct_error *err);
void runtok_free(runtok *t);
/* Tokens of the vocabulary (256 for bytes). */
int64_t runtok_vocab(const runtok *t);
/* "bytes", "sentencepiece" or "bpe". */
const char *runtok_kind(const runtok *t);
/* The end-of-text token the data put before documents (sentencepiece: </s>), -1 when none. */
int32_t runtok_eot(const runtok *t);
/* The beginning-of-text token: sentencepiece's <s>, else the end-of-text one; -1 when none. */
int32_t runtok_bos(const runtok *t);
/* The model file (sentencepiece and bpe; NULL for bytes), e.g. for copying it into an export. */
const char *runtok_model_path(const runtok *t);
/* The BPE model (bpe only; NULL otherwise). */
struct bpe_model *runtok_bpe(const runtok *t);
/* len bytes of text -> *ids (malloc'ed, *n of them). Special tokens' text is ordinary text. */
int32_t runtok_encode(const runtok *t, const char *text, size_t len, int32_t **ids, int64_t *n,
                      ct_error *err);
/* The same; with `specials` a BPE tokenizer's added tokens in the text become their ids (the
 * tokenizers library's encode; bpe.h BPE_ENCODE_SPECIALS). Other kinds ignore it. */
int32_t runtok_encode_ex(const runtok *t, const char *text, size_t len, int specials,
                         int32_t **ids, int64_t *n, ct_error *err);
/* Token ids written as text ("1 2 3", "1,2,3", newlines) into *ids (malloc'ed, *n of them).
 * CT_ERR_INVALID "<what>: 'x' is not a token id ---> ..." for anything else. */
int32_t runtok_parse_ids(const char *s, const char *what, int32_t **ids, int64_t *n,
                         ct_error *err);
/* n ids -> *text (malloc'ed, NUL-terminated, *len bytes; may hold any bytes). */
int32_t runtok_decode(const runtok *t, const int32_t *ids, int64_t n, char **text, size_t *len,
                      ct_error *err);

#endif /* CTRAIN_HOST_RUNTOK_H */
