/* files.c — the one reader (see files.h): regular files opened without blocking, bounded
 * whole-file reads, folders listed, and the set of files this process reads.
 * Not for: what is inside the files (data.c, config.c, ...) or writing (outfile.c).
 */
#include "io/files.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *file_type_name(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "not a regular file";
}

/* ---- the files being read ----------------------------------------------------------------
 * Every (device, inode) open_regular opened, for the writer's "never over an input" check.
 * Process-wide (every rank thread reads through here), append-only, under one mutex; a file
 * opened again is not added twice. */

typedef struct file_id {
    dev_t dev;
    ino_t ino;
} file_id;

static pthread_mutex_t reading_lock = PTHREAD_MUTEX_INITIALIZER;
static file_id *reading;
static size_t n_reading, cap_reading;

static int find_locked(dev_t dev, ino_t ino) {
    for (size_t i = 0; i < n_reading; i++)
        if (reading[i].dev == dev && reading[i].ino == ino) return 1;
    return 0;
}

/* Remember (dev, ino); CT_ERR_NOMEM when the set cannot grow (the open then fails: a file
 * that could not be remembered could be written over). */
static int32_t remember(const struct stat *st, const char *path, ct_error *err) {
    int32_t rc = CT_OK;
    pthread_mutex_lock(&reading_lock);
    if (!find_locked(st->st_dev, st->st_ino)) {
        if (n_reading == cap_reading) {
            size_t cap = cap_reading ? 2 * cap_reading : 64;
            file_id *more = realloc(reading, cap * sizeof *more);
            if (!more) {
                rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory opening %s", path);
                goto out_unlock;
            }
            reading = more;
            cap_reading = cap;
        }
        reading[n_reading++] = (file_id){st->st_dev, st->st_ino};
    }
out_unlock:
    pthread_mutex_unlock(&reading_lock);
    return rc;
}

int files_being_read(dev_t dev, ino_t ino) {
    pthread_mutex_lock(&reading_lock);
    int found = find_locked(dev, ino);
    pthread_mutex_unlock(&reading_lock);
    return found;
}

/* ---- opening ------------------------------------------------------------------------------ */

static int32_t not_regular(const char *path, const char *what, const char *hint, mode_t mode,
                           ct_error *err) {
    return ct_error_set(err, CT_ERR_INVALID, "%s %s is %s, not a regular file ---> %s", what,
                        path, file_type_name(mode), hint);
}

int32_t check_regular(const char *path, const char *what, const char *hint, ct_error *err) {
    struct stat st;
    if (stat(path, &st) != 0)
        return ct_error_set(err, CT_ERR_IO, "cannot read %s %s: %s ---> %s", what, path,
                            strerror(errno), hint);
    return S_ISREG(st.st_mode) ? CT_OK : not_regular(path, what, hint, st.st_mode, err);
}

/* open_regular; the file joins the set being read when `remembered`. */
static int32_t open_checked(const char *path, const char *what, const char *hint, int *fd,
                            struct stat *st, int remembered, ct_error *err) {
    *fd = -1;
    struct stat after;
    int32_t rc = check_regular(path, what, hint, err);
    if (rc != CT_OK) return rc;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    /* out of descriptors is the process's state, not the file's: CT_ERR_NOMEM, so that no
     * caller takes it for a damaged file (--resume would skip to an older checkpoint) */
    if (f < 0) {
        int out_of_descriptors = errno == EMFILE || errno == ENFILE;
        return ct_error_set(err, out_of_descriptors ? CT_ERR_NOMEM : CT_ERR_IO,
                            "cannot read %s %s: %s ---> %s", what, path, strerror(errno),
                            out_of_descriptors ? "the process may not open more files: raise "
                                                 "the limit (ulimit -n) or run fewer ranks per "
                                                 "process"
                                               : hint);
    }
    if (fstat(f, &after) != 0) {
        rc = ct_error_set(err, CT_ERR_IO, "cannot stat %s %s: %s", what, path, strerror(errno));
        goto out_close;
    }
    if (!S_ISREG(after.st_mode)) { /* swapped between stat and open */
        rc = not_regular(path, what, hint, after.st_mode, err);
        goto out_close;
    }
    int flags = fcntl(f, F_GETFL);
    if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        rc = ct_error_set(err, CT_ERR_IO, "cannot read %s %s: %s", what, path, strerror(errno));
        goto out_close;
    }
    if (remembered && (rc = remember(&after, path, err)) != CT_OK) goto out_close;
    if (st) *st = after;
    *fd = f;
    return CT_OK;

out_close:
    close(f);
    return rc;
}

int32_t open_regular(const char *path, const char *what, const char *hint, int *fd,
                     struct stat *st, ct_error *err) {
    return open_checked(path, what, hint, fd, st, 1, err);
}

/* fopen_regular; the file joins the set being read when `remembered`. */
static int32_t fopen_checked(const char *path, const char *what, const char *hint, FILE **f,
                             int remembered, ct_error *err) {
    *f = NULL;
    int fd;
    int32_t rc = open_checked(path, what, hint, &fd, NULL, remembered, err);
    if (rc != CT_OK) return rc;
    if (!(*f = fdopen(fd, "rb"))) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "cannot read %s %s: %s", what, path,
                          strerror(errno));
        close(fd);
    }
    return rc;
}

int32_t fopen_regular(const char *path, const char *what, const char *hint, FILE **f,
                      ct_error *err) {
    return fopen_checked(path, what, hint, f, 1, err);
}

int32_t fopen_own_output(const char *path, const char *what, const char *hint, FILE **f,
                         ct_error *err) {
    return fopen_checked(path, what, hint, f, 0, err);
}

int32_t read_bounded(const char *path, const char *what, const char *hint, uint64_t max_bytes,
                     char **data, size_t *len, ct_error *err) {
    *data = NULL;
    *len = 0;
    int fd;
    struct stat st;
    int32_t rc = open_regular(path, what, hint, &fd, &st, err);
    if (rc != CT_OK) return rc;
    if ((uint64_t)st.st_size > max_bytes) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s %s is %llu bytes; at most %llu are read ---> "
                          "%s", what, path, (unsigned long long)st.st_size,
                          (unsigned long long)max_bytes, hint);
        goto out_close;
    }
    /* the size is the stat's: a file that changes size while it is read is refused */
    size_t want = (size_t)st.st_size, n = 0;
    char *buf = malloc(want + 1);
    if (!buf) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s %s (%llu bytes)", what,
                          path, (unsigned long long)st.st_size);
        goto out_close;
    }
    for (;;) {
        char probe;
        ssize_t k = n < want ? read(fd, buf + n, want - n) : read(fd, &probe, 1);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            rc = ct_error_set(err, CT_ERR_IO, "cannot read %s %s: %s ---> %s", what, path,
                              strerror(errno), hint);
            break;
        }
        if (k == 0 || n == want) {
            if (k != 0 || n != want)
                rc = ct_error_set(err, CT_ERR_IO, "%s %s changed size while being read ---> "
                                  "read it when nothing writes to it", what, path);
            break;
        }
        n += (size_t)k;
    }
    if (rc != CT_OK) {
        free(buf);
        goto out_close;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
out_close:
    close(fd);
    return rc;
}

int32_t open_folder(const char *path, const char *what, const char *hint, DIR **d,
                    ct_error *err) {
    *d = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return ct_error_set(err, CT_ERR_IO, "cannot read %s %s: %s ---> %s", what, path,
                            strerror(errno), hint);
    if (!S_ISDIR(st.st_mode))
        return ct_error_set(err, CT_ERR_INVALID, "%s %s is %s, not a folder ---> %s", what, path,
                            file_type_name(st.st_mode), hint);
    /* opendir opens with O_DIRECTORY | O_NONBLOCK: a swapped-in FIFO fails, never blocks */
    if (!(*d = opendir(path)))
        return ct_error_set(err, CT_ERR_IO, "cannot read %s %s: %s ---> %s", what, path,
                            strerror(errno), hint);
    return CT_OK;
}
