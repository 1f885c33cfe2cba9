/* runtok.h — the tokenizer a run was trained with, kept with the run: recorded at the start of
 * `ctrain train` from the meta.ini that `ctrain prepare` wrote beside the shards (the
 * sentencepiece model copied into the run folder, checked by its content checksum), and loaded
 * back by `ctrain sample` and [run] sample_every to turn text into tokens and back.
 * Not for: training sentencepiece models or reading shards (tokenizer.h, prepare.c, data.c).
 *
 * Run folder files: OUT/tokenizer.ini ([tokenizer] kind = bytes | sentencepiece, model,
 * model_fnv1a64, vocab_size, source) and, for sentencepiece, OUT/tokenizer.model.
 */
#ifndef CTRAIN_HOST_RUNTOK_H
#define CTRAIN_HOST_RUNTOK_H

#include "config.h"

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

/* The run's tokenizer: `spec` "bytes" or a .model file overrides; else OUT/tokenizer.ini of
 * run_dir (checksum of OUT/tokenizer.model verified). Errors name the file and what to do. */
runtok *runtok_open(const char *run_dir, const char *spec, ct_error *err);
void runtok_free(runtok *t);
/* Tokens of the vocabulary (256 for bytes). */
int64_t runtok_vocab(const runtok *t);
/* "bytes" or "sentencepiece". */
const char *runtok_kind(const runtok *t);
/* len bytes of text -> *ids (malloc'ed, *n of them). */
int32_t runtok_encode(const runtok *t, const char *text, size_t len, int32_t **ids, int64_t *n,
                      ct_error *err);
/* n ids -> *text (malloc'ed, NUL-terminated, *len bytes; may hold any bytes). */
int32_t runtok_decode(const runtok *t, const int32_t *ids, int64_t n, char **text, size_t *len,
                      ct_error *err);

#endif /* CTRAIN_HOST_RUNTOK_H */
