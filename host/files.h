/* files.h — the file edges that data crosses: opening an input (a token shard, a text file) as
 * a regular file only, never blocking on a FIFO or reading a device, and creating an output
 * beside its final name with the user's umask (0666 & ~umask) for an atomic rename.
 * Not for: the shard format (data.h), configurations (config.h) or checkpoints.
 */
#ifndef CTRAIN_HOST_FILES_H
#define CTRAIN_HOST_FILES_H

#include <ctrain/ctrain.h>

#include <sys/stat.h>

/* "a FIFO (named pipe)", "a directory", "a character device", ... for st_mode; "a regular file"
 * for S_ISREG. A static string. */
const char *file_type_name(mode_t mode);

/* Open `path` for reading, refusing anything that is not a regular file (after following
 * symbolic links) without blocking: stat first, then open with O_NONBLOCK (a FIFO never
 * blocks) and check the opened descriptor again, so a file swapped in between is refused too.
 * `what` names the role in messages ("token shard", "text file"); `hint` follows "--->".
 * On success *fd (O_CLOEXEC, blocking mode restored) and, when st is not NULL, *st are set.
 * Errors (*fd is -1 then): CT_ERR_IO "cannot read <what> PATH: <strerror> ---> <hint>";
 * CT_ERR_INVALID "<what> PATH is a FIFO (named pipe), not a regular file ---> <hint>". */
int32_t open_regular(const char *path, const char *what, const char *hint, int *fd,
                     struct stat *st, ct_error *err);

/* Create a new, empty file beside `path` for writing: "<path>.tmp.<pid>.<n>", opened with
 * O_CREAT | O_EXCL | O_NOFOLLOW and mode 0666, so the kernel applies the user's umask (an
 * output renamed onto `path` gets the same mode as any file the user creates). *tmp is
 * malloc'd (the caller frees it, and unlinks the file when it gives up). CT_ERR_IO naming the
 * folder on failure (*fd = -1, *tmp = NULL). */
int32_t create_beside(const char *path, char **tmp, int *fd, ct_error *err);

#endif /* CTRAIN_HOST_FILES_H */
