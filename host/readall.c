/* readall.c — a small input file read whole (see readall.h). */
#include "readall.h"

#include "files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int32_t read_all(const char *path, const char *what, const char *hint, size_t max_bytes,
                 char **buf, size_t *n, ct_error *err) {
    int fd;
    struct stat st;
    *buf = NULL;
    *n = 0;
    int32_t rc = open_regular(path, what, hint, &fd, &st, err);
    if (rc != CT_OK) return rc;
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return ct_error_set(err, CT_ERR_INVALID, "%s %s holds %llu bytes, more than the %zu "
                            "ctrain reads ---> %s", what, path, (unsigned long long)st.st_size,
                            max_bytes, hint);
    }
    size_t want = (size_t)st.st_size, got = 0;
    char *b = malloc(want + 1);
    if (!b) {
        close(fd);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", path);
    }
    int saved = 0;
    while (got < want) {
        ssize_t k = read(fd, b + got, want - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            saved = k < 0 ? errno : 0;
            break;
        }
        got += (size_t)k;
    }
    close(fd);
    if (got != want) {
        free(b);
        return ct_error_set(err, CT_ERR_IO, "cannot read %s %s: %s ---> %s", what, path,
                            saved ? strerror(saved) : "the file shrank while read", hint);
    }
    b[got] = '\0';
    *buf = b;
    *n = got;
    return CT_OK;
}
