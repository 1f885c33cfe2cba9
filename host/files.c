/* files.c — regular-file-only opening of inputs and umask-respecting temporary outputs (see
 * files.h). Not for: what is inside the files (data.c, prepare.c).
 */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static int32_t not_regular(const char *path, const char *what, const char *hint, mode_t mode,
                           ct_error *err) {
    return ct_error_set(err, CT_ERR_INVALID, "%s %s is %s, not a regular file ---> %s", what,
                        path, file_type_name(mode), hint);
}

int32_t open_regular(const char *path, const char *what, const char *hint, int *fd,
                     struct stat *st, ct_error *err) {
    *fd = -1;
    struct stat before, after;
    if (stat(path, &before) != 0)
        return ct_error_set(err, CT_ERR_IO, "cannot read %s %s: %s ---> %s", what, path,
                            strerror(errno), hint);
    if (!S_ISREG(before.st_mode)) return not_regular(path, what, hint, before.st_mode, err);
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0)
        return ct_error_set(err, CT_ERR_IO, "cannot read %s %s: %s ---> %s", what, path,
                            strerror(errno), hint);
    int32_t rc = CT_OK;
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
    if (st) *st = after;
    *fd = f;
    return CT_OK;

out_close:
    close(f);
    return rc;
}

int32_t create_beside(const char *path, char **tmp, int *fd, ct_error *err) {
    *fd = -1;
    size_t cap = strlen(path) + 64;
    char *name = malloc(cap);
    if (!name) return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", path);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned salt = (unsigned)ts.tv_nsec;
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(name, cap, "%s.tmp.%ld.%u", path, (long)getpid(), salt + (unsigned)attempt);
        int f = open(name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (f >= 0) {
            *fd = f;
            *tmp = name;
            return CT_OK;
        }
        if (errno != EEXIST) break;
    }
    int32_t rc = ct_error_set(err, CT_ERR_IO, "cannot create %s: %s ---> check that the folder "
                              "exists and is writable", name, strerror(errno));
    free(name);
    *tmp = NULL;
    return rc;
}
