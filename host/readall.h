/* readall.h — the whole of a small input file in memory (a tokenizer, a config.json, a
 * safetensors index), opened through open_regular and bounded in size.
 * Not for: large or streamed inputs (corpus.c, data.c) or outputs (outfile.h). */
#ifndef CTRAIN_HOST_READALL_H
#define CTRAIN_HOST_READALL_H

#include <ctrain/ctrain.h>

#include <stddef.h>

/* Read the regular file `path` whole into *buf (malloc'ed, NUL-terminated after its *n bytes;
 * the caller frees it). `what` names the file's role in messages ("tokenizer file"), `hint`
 * follows "--->". A file larger than max_bytes is CT_ERR_INVALID naming both sizes; an
 * unreadable one CT_ERR_IO; a FIFO or device is refused by open_regular without blocking. */
int32_t read_all(const char *path, const char *what, const char *hint, size_t max_bytes,
                 char **buf, size_t *n, ct_error *err);

#endif /* CTRAIN_HOST_READALL_H */
