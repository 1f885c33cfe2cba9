/* files.h — the one reader: every file ctrain reads is opened here (a config, a token shard, a
 * text file, a tokenizer, a checkpoint's rank file, a metrics file, an init_from file, a
 * plugin before dlopen). Regular files only, never blocking on a FIFO or reading a device;
 * whole-file reads bounded where the format has a bound; every file opened is remembered
 * (device, inode) so that the one writer (outfile.h) never writes over a file this command
 * reads.
 * Not for: what is inside the files (data.h, config.h, checkpoint.h) or writing (outfile.h).
 */
#ifndef CTRAIN_HOST_FILES_H
#define CTRAIN_HOST_FILES_H

#include <ctrain/ctrain.h>

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "a FIFO (named pipe)", "a directory", "a character device", ... for st_mode; "a regular file"
 * for S_ISREG. A static string. */
const char *file_type_name(mode_t mode);

/* Open `path` for reading, refusing anything that is not a regular file (after following
 * symbolic links) without blocking: stat first, then open with O_NONBLOCK (a FIFO never
 * blocks) and check the opened descriptor again, so a file swapped in between is refused too.
 * `what` names the role in messages ("token shard", "text file"); `hint` follows "--->".
 * On success *fd (O_CLOEXEC, blocking mode restored) and, when st is not NULL, *st are set,
 * and the file's (device, inode) joins the set files_being_read() consults.
 * Errors (*fd is -1 then): CT_ERR_IO "cannot read <what> PATH: <strerror> ---> <hint>";
 * CT_ERR_INVALID "<what> PATH is a FIFO (named pipe), not a regular file ---> <hint>". */
int32_t open_regular(const char *path, const char *what, const char *hint, int *fd,
                     struct stat *st, ct_error *err);

/* open_regular as a stdio stream ("rb"); *f is NULL on error. The caller fcloses it. */
int32_t fopen_regular(const char *path, const char *what, const char *hint, FILE **f,
                      ct_error *err);

/* fopen_regular for a file the command itself writes and reads back to rewrite it (a run's
 * metrics.jsonl cut back to the resumed step): it does not join the set being read, so the
 * writer may replace it. Never for an input. */
int32_t fopen_own_output(const char *path, const char *what, const char *hint, FILE **f,
                         ct_error *err);

/* The whole of `path` (open_regular) into a new buffer *data of *len bytes plus a '\0' after
 * them (the caller frees it). A file larger than max_bytes is refused before anything is read:
 * CT_ERR_INVALID "<what> PATH is N bytes; at most M are read ---> <hint>". */
int32_t read_bounded(const char *path, const char *what, const char *hint, uint64_t max_bytes,
                     char **data, size_t *len, ct_error *err);

/* `path` must be a regular file (stat follows links): for the files another library opens by
 * name (dlopen of a plugin), so that a FIFO or a device is refused before it could block.
 * Errors as open_regular's. */
int32_t check_regular(const char *path, const char *what, const char *hint, ct_error *err);

/* Open the folder `path` for listing (never blocks: a FIFO or a device is refused by type).
 * *d is NULL on error; CT_ERR_IO names the folder. A missing folder gives CT_ERR_IO with
 * errno ENOENT left in place, for callers to whom that means "empty". */
int32_t open_folder(const char *path, const char *what, const char *hint, DIR **d,
                    ct_error *err);

/* 1 when a file of (dev, ino) was opened for reading by this process (the writer's check). */
int files_being_read(dev_t dev, ino_t ino);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_HOST_FILES_H */
