/* outfile.h — an output file written whole or not at all: created beside its final name
 * (files.h: create_beside, the user's umask), every write checked, fsync'd, then renamed onto
 * the name. What export.c, safetensors.c and llmc.c write goes through it.
 * Not for: checkpoints (checkpoint.c has its own folder-level protocol). */
#ifndef CTRAIN_HOST_OUTFILE_H
#define CTRAIN_HOST_OUTFILE_H

#include <ctrain/ctrain.h>

#include <stddef.h>

typedef struct outfile {
    const char *path;   /* the final name (the caller's string, kept until commit/abort) */
    char       *tmp;    /* the temporary beside it */
    int         fd;
    int         err_no; /* errno of the first failed write, 0 while all went well */
} outfile;

/* Create the temporary of `path`. CT_ERR_IO naming the folder on failure. */
int32_t outfile_open(outfile *o, const char *path, ct_error *err);
/* Append n bytes (partial writes retried); a failure is remembered and reported by commit. */
void outfile_write(outfile *o, const void *p, size_t n);
/* fsync, close and rename onto the final name; on any failure (including an earlier write)
 * the temporary is removed and CT_ERR_IO names the file and the reason. */
int32_t outfile_commit(outfile *o, ct_error *err);
/* Give up: close and remove the temporary (no-op after commit). */
void outfile_abort(outfile *o);

/* The whole of `src` into a new file `dst` through outfile (for the tokenizer model). */
int32_t outfile_copy(const char *src, const char *dst, ct_error *err);

#endif /* CTRAIN_HOST_OUTFILE_H */
