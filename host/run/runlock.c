/* runlock.c — OUT/.lock (see runlock.h): open without truncating, flock(LOCK_EX | LOCK_NB),
 * then write "host NAME\npid N\n" into it. A refused run reads the holder's lines back.
 * Not for: waiting for the other run (a run is refused, never queued). */
#include "run/runlock.h"

#include "io/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The holder's "host NAME" and "pid N" from the file, or "?" when it has not written them yet
 * (it writes them right after taking the lock: a refused run looks a few times). */
static void read_holder(int fd, char *host, size_t host_n, long *pid) {
    snprintf(host, host_n, "?");
    *pid = -1;
    for (int attempt = 0; attempt < 20; attempt++) {
        char buf[512];
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        if (n > 0) {
            buf[n] = 0;
            char name[256];
            const char *h = strstr(buf, "host "), *p = strstr(buf, "pid ");
            if (h && p && sscanf(h, "host %255s", name) == 1 && sscanf(p, "pid %ld", pid) == 1) {
                snprintf(host, host_n, "%s", name);
                return;
            }
        }
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

static int32_t in_use(const char *out_dir, const char *path, int fd, ct_error *err) {
    char host[256];
    long pid;
    read_holder(fd, host, sizeof host, &pid);
    return ct_error_set(err, CT_ERR_IO,
                        "[run] out_dir %s is in use by another run (host %s, pid %ld, lock "
                        "%s) ---> wait for it to end, or choose another out_dir (--set "
                        "run.out_dir=...)",
                        out_dir, host, pid, path);
}

int32_t runlock_check(const char *out_dir, ct_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", out_dir);
    int fd = outfile_lock_peek(path);
    if (fd < 0) return CT_OK;
    int32_t rc = CT_OK;
    if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) rc = in_use(out_dir, path, fd, err);
    } else {
        flock(fd, LOCK_UN);
    }
    close(fd);
    return rc;
}

int32_t runlock_take(host_runlock *lk, const char *out_dir, ct_error *err) {
    lk->fd = -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", out_dir);
    int fd;
    int32_t rc = outfile_lock_open(path, &fd, err); /* the file is truncated below */
    if (rc != CT_OK) return rc;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e != EWOULDBLOCK) {
            close(fd);
            return ct_error_set(err, CT_ERR_IO, "cannot lock %s: %s ---> put [run] out_dir on "
                                "a file system with flock", path, strerror(e));
        }
        rc = in_use(out_dir, path, fd, err);
        close(fd);
        return rc;
    }
    char host[256] = "?";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    char line[400];
    int n = snprintf(line, sizeof line, "host %s\npid %ld\n", host, (long)getpid());
    /* informational: the lock is the flock itself, so a failed write only loses the names */
    int wrote = ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)n, 0) == n;
    (void)wrote;
    lk->fd = fd;
    return CT_OK;
}

void runlock_release(host_runlock *lk) {
    if (lk->fd < 0) return;
    flock(lk->fd, LOCK_UN);
    close(lk->fd);
    lk->fd = -1;
}
