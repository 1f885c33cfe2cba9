/* outfile.c — atomic, checked output files (see outfile.h). */
#include "outfile.h"

#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int32_t outfile_open(outfile *o, const char *path, ct_error *err) {
    memset(o, 0, sizeof *o);
    o->path = path;
    o->fd = -1;
    return create_beside(path, &o->tmp, &o->fd, err);
}

void outfile_write(outfile *o, const void *p, size_t n) {
    const char *b = p;
    while (n > 0 && !o->err_no) {
        ssize_t k = write(o->fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            o->err_no = k < 0 ? errno : EIO;
            break;
        }
        b += k;
        n -= (size_t)k;
    }
}

void outfile_abort(outfile *o) {
    if (o->fd >= 0) close(o->fd);
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    o->tmp = NULL;
    o->fd = -1;
}

int32_t outfile_commit(outfile *o, ct_error *err) {
    int e = o->err_no;
    if (!e && fsync(o->fd) != 0) e = errno;
    if (close(o->fd) != 0 && !e) e = errno;
    o->fd = -1;
    if (!e && rename(o->tmp, o->path) != 0) e = errno;
    if (e) {
        outfile_abort(o);
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s ---> check free disk space and "
                            "that the folder is writable", o->path, strerror(e));
    }
    free(o->tmp);
    o->tmp = NULL;
    return CT_OK;
}

int32_t outfile_copy(const char *src, const char *dst, ct_error *err) {
    int in = -1;
    int32_t rc = open_regular(src, "file", "check the path", &in, NULL, err);
    if (rc != CT_OK) return rc;
    outfile o;
    if ((rc = outfile_open(&o, dst, err)) != CT_OK) {
        close(in);
        return rc;
    }
    char buf[65536];
    for (;;) {
        ssize_t k = read(in, buf, sizeof buf);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            rc = ct_error_set(err, CT_ERR_IO, "cannot read %s: %s", src, strerror(errno));
            break;
        }
        if (k == 0) break;
        outfile_write(&o, buf, (size_t)k);
    }
    close(in);
    if (rc != CT_OK) {
        outfile_abort(&o);
        return rc;
    }
    return outfile_commit(&o, err);
}
