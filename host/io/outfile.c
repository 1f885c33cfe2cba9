/* outfile.c — the one writer (see outfile.h): targets checked before and after writing,
 * temporaries beside them, checked writes, fsync and rename, appended files, folder outputs.
 * Not for: reading (files.c) or the formats written (export.c, checkpoint.c, data.c, ...).
 */
#include "io/outfile.h"

#include "io/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int fd_write_all(int fd, const void *p, size_t n) {
    const char *b = p;
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) return errno = EIO, -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ---- folders -------------------------------------------------------------------------- */

/* The folder part of path into buf ("." when there is none). */
static int32_t parent_of(const char *path, char *buf, size_t cap, ct_error *err) {
    if (snprintf(buf, cap, "%s", path) >= (int)cap)
        return ct_error_set(err, CT_ERR_INVALID, "path too long: %.200s...", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0'; /* "a/b/" is the folder a/b */
    char *slash = strrchr(buf, '/');
    if (!slash) snprintf(buf, cap, ".");
    else if (slash == buf) buf[1] = '\0';
    else *slash = '\0';
    return CT_OK;
}

int32_t out_make_folders(const char *dir, ct_error *err) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return ct_error_set(err, CT_ERR_INVALID, "folder name too long: %.200s...", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) goto fail;
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) goto fail;
    struct stat st;
    if (stat(dir, &st) != 0) goto fail;
    if (!S_ISDIR(st.st_mode))
        return ct_error_set(err, CT_ERR_INVALID, "%s is %s, not a folder ---> choose another "
                            "output path", dir, file_type_name(st.st_mode));
    return CT_OK;
fail:
    return ct_error_set(err, CT_ERR_IO, "cannot create folder %s: %s ---> check that its parent "
                        "is writable", tmp, strerror(errno));
}

int32_t out_make_parents(const char *path, ct_error *err) {
    char dir[PATH_MAX];
    int32_t rc = parent_of(path, dir, sizeof dir, err);
    return rc != CT_OK ? rc : out_make_folders(dir, err);
}

static int is_step_name(const char *s) {
    return strncmp(s, "step_", 5) == 0 && s[5] >= '0' && s[5] <= '9';
}

/* 1 when the folder `dir` holds an entry named step_<digit>... (a run's checkpoints folder). */
static int holds_steps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) found = is_step_name(e->d_name);
    closedir(d);
    return found;
}

/* 1 when the folder `dir` holds an entry `name` (links followed) of the type S_IFMT bits `type`
 * (0: any). */
static int holds(const char *dir, const char *name, mode_t type) {
    char p[PATH_MAX];
    struct stat st;
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p || stat(p, &st) != 0) return 0;
    return !type || (st.st_mode & S_IFMT) == type;
}

int out_holds_run(const char *dir) {
    return holds(dir, "config.ini", S_IFREG) &&
           (holds(dir, ".lock", S_IFREG) || holds(dir, "metrics.jsonl", 0) ||
            holds(dir, "checkpoints", S_IFDIR) || holds(dir, "run_id", S_IFREG));
}

/* The names training writes directly inside a run's folder (its own records): no other command
 * writes them, --force or not. */
static const char *const run_records[] = {
    "config.ini", "metrics.jsonl", ".lock", "run_id", "tokenizer.ini", "tokenizer.model",
    "tokenizer.json", "tokenizer.tiktoken", "samples.jsonl", "tb", "checkpoints", NULL};

/* Where an output path lies, from every one of its ancestors (the path as given, made absolute,
 * and its real path, so a linked folder is seen from both sides). */
typedef struct out_place {
    int  in_checkpoints;  /* an ancestor is a run's checkpoints/ folder or one of its steps */
    char run[PATH_MAX];   /* the nearest ancestor (or the path itself) holding a run; "" if none */
    char record[64];      /* the run's own record the path is or is under; "" if none */
} out_place;

/* The prefix `p` (an absolute path of an existing or future folder) checked as one ancestor;
 * `rest` is what follows it in the full path ("" for the path itself). */
static void check_ancestor(const char *p, const char *rest, out_place *pl) {
    const char *last = strrchr(p, '/');
    const char *name = last ? last + 1 : p;
    if (!strcmp(name, "checkpoints") && holds_steps(p)) pl->in_checkpoints = 1;
    if (is_step_name(name)) {
        int parent_is_ckpts = 0;
        if (last && last > p) {
            const char *q = last;
            while (q > p && q[-1] != '/') q--;
            parent_is_ckpts = (size_t)(last - q) == 11 && !strncmp(q, "checkpoints", 11);
        }
        if (parent_is_ckpts || holds(p, "rank_00000.bin", 0) || holds(p, "manifest.ini", 0))
            pl->in_checkpoints = 1;
    }
    if (!pl->run[0] && out_holds_run(p)) {
        snprintf(pl->run, sizeof pl->run, "%s", *p ? p : "/");
        size_t n = strcspn(rest, "/");
        for (int i = 0; run_records[i] && n; i++)
            if (strlen(run_records[i]) == n && !strncmp(rest, run_records[i], n))
                snprintf(pl->record, sizeof pl->record, "%s", run_records[i]);
    }
}

/* Every ancestor of the absolute path `full`, the path itself included, nearest first. */
static void walk_ancestors(const char *full, out_place *pl) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", full) >= (int)sizeof p) return;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
    for (;;) {
        check_ancestor(p, full + strlen(p) + (full[strlen(p)] == '/'), pl);
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) break;
        *slash = '\0';
    }
}

static void locate(const char *path, out_place *pl) {
    memset(pl, 0, sizeof *pl);
    char full[PATH_MAX], at[PATH_MAX], real[PATH_MAX], tail[PATH_MAX] = "", t2[PATH_MAX];
    char cwd[PATH_MAX];
    if (path[0] == '/') snprintf(full, sizeof full, "%s", path);
    else if (!getcwd(cwd, sizeof cwd) ||
             snprintf(full, sizeof full, "%s/%s", cwd, path) >= (int)sizeof full)
        return;
    walk_ancestors(full, pl);
    /* the real path of the nearest existing ancestor, and the part not made yet */
    if (snprintf(at, sizeof at, "%s", full) >= (int)sizeof at) return;
    while (!realpath(at, real)) {
        size_t n = strlen(at);
        while (n > 1 && at[n - 1] == '/') at[--n] = '\0';
        char *slash = strrchr(at, '/');
        if (!slash || slash == at) return;
        if (snprintf(t2, sizeof t2, "%s%s%s", slash + 1, tail[0] ? "/" : "", tail) >=
            (int)sizeof t2)
            return;
        memcpy(tail, t2, sizeof tail);
        *slash = '\0';
    }
    if (snprintf(full, sizeof full, "%s%s%s", real, tail[0] && strcmp(real, "/") ? "/" : "",
                 tail) >= (int)sizeof full)
        return;
    walk_ancestors(full, pl);
}

/* Remove `name` (relative to the open folder dirfd, or a path with AT_FDCWD) and, when it is a
 * folder, everything in it. A symbolic link is removed itself, never followed. */
static int remove_at(int dirfd, const char *name, int depth) {
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT) return 0;
    if (errno != EISDIR && errno != EPERM) return -1;
    if (depth > 32) return errno = ELOOP, -1; /* ctrain's folders are two levels deep */
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            rc = remove_at(fd, e->d_name, depth + 1);
    int saved = errno;
    closedir(d);
    if (rc != 0) return errno = saved, -1;
    if (unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) return -1;
    return 0;
}

int out_remove_tree(const char *path) { return remove_at(AT_FDCWD, path, 0); }

int out_fsync_folder(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* ---- targets ---------------------------------------------------------------------------- */

/* The checks of outfile.h on an output file's target. The parent folder exists. */
static int32_t check_target(const char *path, uint32_t flags, ct_error *err) {
    struct stat st;
    int user = (flags & OUTFILE_USER) != 0, force = (flags & OUTFILE_FORCE) != 0;
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return ct_error_set(err, CT_ERR_INVALID, "output %s is a symbolic link; ctrain does "
                                "not write through links ---> give the path it points to, if "
                                "that is the file you mean", path);
        if (!S_ISREG(st.st_mode))
            return ct_error_set(err, CT_ERR_INVALID, "output %s is %s, not a regular file; it "
                                "is left as it is ---> choose another output path", path,
                                file_type_name(st.st_mode));
        if (files_being_read(st.st_dev, st.st_ino))
            return ct_error_set(err, CT_ERR_INVALID, "output %s is a file this command reads; "
                                "writing it would destroy its input ---> choose another output "
                                "path", path);
        if ((flags & OUTFILE_NO_REPLACE) || (user && !force))
            return ct_error_set(err, CT_ERR_INVALID, "output %s exists ---> use --force to "
                                "replace it, or choose another path", path);
    } else if (errno != ENOENT) {
        return ct_error_set(err, CT_ERR_IO, "cannot check output %s: %s", path, strerror(errno));
    }
    out_place pl;
    locate(path, &pl);
    if (!(flags & OUTFILE_IN_CHECKPOINTS) && pl.in_checkpoints)
        return ct_error_set(err, CT_ERR_INVALID, "output %s is inside a run's checkpoints "
                            "folder, which only training writes ---> choose a path outside "
                            "checkpoints/", path);
    if (user && pl.record[0])
        return ct_error_set(err, CT_ERR_INVALID, "output %s would write over %s, a record of the "
                            "run in %s, which only training writes ---> choose a path outside "
                            "that run's folder", path, pl.record, pl.run);
    if (user && !force && pl.run[0])
        return ct_error_set(err, CT_ERR_INVALID, "output %s is inside %s, a folder that holds a "
                            "run ---> use --force to write there anyway, or choose a path "
                            "outside the run's folder", path, pl.run);
    return CT_OK;
}

int32_t outfile_check(const char *path, uint32_t flags, ct_error *err) {
    return check_target(path, flags, err);
}

/* A new, empty file beside `path`: "<path>.tmp.<pid>.<n>", O_CREAT | O_EXCL | O_NOFOLLOW, mode
 * 0666 so the kernel applies the user's umask. *tmp is malloc'd. */
static int32_t create_beside(const char *path, int access_mode, char **tmp, int *fd,
                             ct_error *err) {
    *fd = -1;
    *tmp = NULL;
    size_t cap = strlen(path) + 64;
    char *name = malloc(cap);
    if (!name) return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", path);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned salt = (unsigned)ts.tv_nsec;
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(name, cap, "%s.tmp.%ld.%u", path, (long)getpid(), salt + (unsigned)attempt);
        int f = open(name, access_mode | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (f >= 0) {
            *fd = f;
            *tmp = name;
            return CT_OK;
        }
        if (errno != EEXIST) break;
    }
    int32_t rc = ct_error_set(err, CT_ERR_IO, "cannot create %s: %s ---> check that the folder "
                              "is writable", name, strerror(errno));
    free(name);
    return rc;
}

/* ---- live temporaries: removed when SIGTERM / SIGINT / SIGHUP ends the command ---------- */

/* The temporaries being written now. A command that has not installed its own handlers
 * (train has: run/preempt.c) gets one at its first output: it unlinks every live temporary
 * (unlink is async-signal-safe) and re-raises the signal with its default action.
 * Threads: the handler runs on one thread while the others go on, so a name it has read
 * from a slot must not be freed under it. `stopping` (set by the handler before it reads a
 * slot) and live_remove (clears its slot, then reads `stopping`) order that: a remover that
 * sees `stopping` never returns (the process is about to end with the signal), so its caller
 * never frees a name the handler may hold; one that does not see it cleared the slot before
 * the handler read it (both sequentially consistent). */
#define LIVE_MAX 64
static char *live_tmp[LIVE_MAX];
static int stopping;

static void on_stop_signal(int sig) {
    __atomic_store_n(&stopping, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < LIVE_MAX; i++) {
        char *p = __atomic_load_n(&live_tmp[i], __ATOMIC_SEQ_CST);
        if (p) unlink(p);
    }
    raise(sig); /* SA_RESETHAND: the default action, once this handler returns */
}

static void install_stop_cleanup(void) {
    static int installed;
    if (__atomic_exchange_n(&installed, 1, __ATOMIC_SEQ_CST)) return;
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
            (old.sa_flags & SA_SIGINFO))
            continue; /* the command handles it itself (or ignores it) */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

static void live_add(char *p) {
    install_stop_cleanup();
    for (int i = 0; i < LIVE_MAX; i++) {
        char *none = NULL;
        if (__atomic_compare_exchange_n(&live_tmp[i], &none, p, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return;
    }
}

/* Forget p; returns only when the caller may free it (see live_tmp above). */
static void live_remove(const char *p) {
    for (int i = 0; p && i < LIVE_MAX; i++)
        if (__atomic_load_n(&live_tmp[i], __ATOMIC_SEQ_CST) == p)
            __atomic_store_n(&live_tmp[i], NULL, __ATOMIC_SEQ_CST);
    while (p && __atomic_load_n(&stopping, __ATOMIC_SEQ_CST)) pause();
}

/* ---- whole files ------------------------------------------------------------------------ */

int32_t outfile_open_as(outfile *o, const char *path, uint32_t flags, ct_error *err) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->flags = flags;
    if (!(o->path = strdup(path))) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = check_target(path, flags, err);
    if (rc == CT_OK) rc = out_make_parents(path, err);
    if (rc == CT_OK) rc = create_beside(path, O_WRONLY, &o->tmp, &o->fd, err);
    if (rc == CT_OK) live_add(o->tmp);
    if (rc != CT_OK) outfile_abort(o);
    return rc;
}

int32_t outfile_open(outfile *o, const char *path, ct_error *err) {
    return outfile_open_as(o, path, 0, err);
}

void outfile_write(outfile *o, const void *p, size_t n) {
    if (!o->err_no && fd_write_all(o->fd, p, n) != 0) o->err_no = errno ? errno : EIO;
}

void outfile_pwrite(outfile *o, const void *p, size_t n, uint64_t at) {
    const char *b = p;
    while (n > 0 && !o->err_no) {
        ssize_t k = pwrite(o->fd, b, n, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            o->err_no = k < 0 ? errno : EIO;
            break;
        }
        b += k;
        at += (uint64_t)k;
        n -= (size_t)k;
    }
}

FILE *outfile_stream(outfile *o, ct_error *err) {
    if (!o->stream && !(o->stream = fdopen(o->fd, "w")))
        ct_error_set(err, CT_ERR_IO, "cannot write %s: %s", o->tmp, strerror(errno));
    return o->stream;
}

/* Close the temporary's descriptor (through its stream when there is one); errno or 0. */
static int close_tmp(outfile *o) {
    int e = 0;
    if (o->stream) {
        if (fclose(o->stream) != 0) e = errno ? errno : EIO;
    } else if (o->fd >= 0 && close(o->fd) != 0) {
        e = errno;
    }
    o->stream = NULL;
    o->fd = -1;
    return e;
}

void outfile_abort(outfile *o) {
    close_tmp(o);
    live_remove(o->tmp);
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    o->tmp = o->path = NULL;
    o->fd = -1;
}

static void fsync_folder_of(const char *path) {
    char dir[PATH_MAX];
    ct_error scratch = {.struct_size = sizeof scratch};
    if (parent_of(path, dir, sizeof dir, &scratch) == CT_OK)
        (void)out_fsync_folder(dir); /* best effort: some file systems refuse it */
}

int32_t outfile_commit(outfile *o, ct_error *err) {
    int e = o->err_no;
    if (!e && o->stream && (fflush(o->stream) != 0 || ferror(o->stream))) e = errno ? errno : EIO;
    if (!e && fsync(o->fd) != 0) e = errno;
    int ce = close_tmp(o);
    if (!e) e = ce;
    if (!e) { /* the target may have been swapped for a FIFO or a link meanwhile */
        int32_t rc = check_target(o->path, o->flags, err);
        if (rc != CT_OK) {
            outfile_abort(o);
            return rc;
        }
    }
    if (!e && rename(o->tmp, o->path) != 0) e = errno;
    if (e) {
        ct_error_set(err, CT_ERR_IO, "cannot write %s: %s ---> check free disk space and that "
                     "the folder is writable", o->path, strerror(e));
        outfile_abort(o);
        return CT_ERR_IO;
    }
    fsync_folder_of(o->path);
    live_remove(o->tmp);
    free(o->tmp);
    free(o->path);
    o->tmp = o->path = NULL;
    return CT_OK;
}

int32_t outfile_write_whole(const char *path, const void *data, size_t n, uint32_t flags,
                            ct_error *err) {
    outfile o;
    int32_t rc = outfile_open_as(&o, path, flags, err);
    if (rc != CT_OK) return rc;
    outfile_write(&o, data, n);
    return outfile_commit(&o, err);
}

int32_t outfile_copy(const char *src, const char *dst, uint32_t flags, ct_error *err) {
    int in = -1;
    int32_t rc = open_regular(src, "file", "check the path", &in, NULL, err);
    if (rc != CT_OK) return rc;
    outfile o;
    if ((rc = outfile_open_as(&o, dst, flags, err)) != CT_OK) {
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

int32_t scratch_open(const char *dir, int *fd, ct_error *err) {
    *fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (*fd >= 0) return CT_OK;
    char name[PATH_MAX], *tmp = NULL; /* a file system without O_TMPFILE */
    if (snprintf(name, sizeof name, "%s/scratch", dir) >= (int)sizeof name)
        return ct_error_set(err, CT_ERR_INVALID, "folder name too long: %.200s...", dir);
    int32_t rc = create_beside(name, O_RDWR, &tmp, fd, err);
    if (rc == CT_OK) unlink(tmp);
    free(tmp);
    return rc;
}

/* ---- appended files ----------------------------------------------------------------------- */

int32_t outfile_append_open(const char *path, uint32_t flags, int *fd, ct_error *err) {
    *fd = -1;
    int32_t rc = check_target(path, flags & ~OUTFILE_NO_REPLACE, err);
    if (rc == CT_OK) rc = out_make_parents(path, err);
    if (rc != CT_OK) return rc;
    int oflags = O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
    int f = -1;
    if (flags & OUTFILE_TRUNCATE) {
        /* never truncated in place (a hard link's other name keeps its bytes): a new, empty
         * file renamed onto the name */
        char *tmp = NULL;
        if ((rc = create_beside(path, O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY, &tmp, &f,
                                err)) != CT_OK)
            return rc;
        if (rename(tmp, path) != 0) {
            int e = errno;
            close(f);
            unlink(tmp);
            free(tmp);
            return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s ---> check that its "
                                "folder is writable", path, strerror(e));
        }
        free(tmp);
    } else {
        f = open(path, oflags, 0666);
    }
    if (f < 0)
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s ---> check that its folder is "
                            "writable", path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode) || files_being_read(st.st_dev, st.st_ino)) {
        close(f); /* swapped between the check and the open */
        return check_target(path, flags & ~OUTFILE_NO_REPLACE, err) != CT_OK
                   ? err->code
                   : ct_error_set(err, CT_ERR_INVALID, "output %s changed while being opened "
                                  "---> run again", path);
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        close(f);
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    *fd = f;
    return CT_OK;
}

int32_t outfile_lock_open(const char *path, int *fd, ct_error *err) {
    *fd = -1;
    int32_t rc = check_target(path, 0, err);
    if (rc != CT_OK) return rc;
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
    if (f < 0)
        return ct_error_set(err, CT_ERR_IO, "cannot open %s: %s ---> %s", path, strerror(errno),
                            errno == ELOOP ? "it is a symbolic link; remove it (ctrain makes "
                                             "its own)" : "check [run] out_dir");
    struct stat st;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(f);
        return ct_error_set(err, CT_ERR_IO, "%s is not a regular file ---> remove it (ctrain "
                            "makes its own)", path);
    }
    *fd = f;
    return CT_OK;
}

int outfile_lock_peek(const char *path) {
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    if (f >= 0 && (fstat(f, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(f);
        f = -1;
    }
    return f;
}

/* ---- folder outputs ----------------------------------------------------------------------- */

int32_t outdir_prepare(const char *path, const char *what, int force, ct_error *err) {
    out_place pl;
    locate(path, &pl);
    if (pl.in_checkpoints)
        return ct_error_set(err, CT_ERR_INVALID, "%s %s is inside a run's checkpoints folder, "
                            "which only training writes ---> choose a folder outside "
                            "checkpoints/", what, path);
    if (pl.run[0] && (pl.record[0] || out_holds_run(path)))
        return ct_error_set(err, CT_ERR_INVALID, "%s %s is %s of the run in %s, which only "
                            "training writes ---> choose a folder outside that run's folder",
                            what, path, pl.record[0] ? "a record" : "the folder", pl.run);
    if (pl.run[0] && !force)
        return ct_error_set(err, CT_ERR_INVALID, "%s %s is inside %s, a folder that holds a run "
                            "---> use --force to write there anyway, or choose a folder outside "
                            "the run's folder", what, path, pl.run);
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT)
            return ct_error_set(err, CT_ERR_IO, "cannot create output folder %s (%s): %s ---> "
                                "choose another folder", path, what, strerror(errno));
        int32_t rc = out_make_folders(path, err);
        if (rc != CT_OK) return rc;
    } else if (S_ISLNK(st.st_mode)) {
        return ct_error_set(err, CT_ERR_INVALID, "%s %s is a symbolic link; ctrain does not "
                            "write through links ---> give the folder it points to, if that is "
                            "the one you mean", what, path);
    } else if (!S_ISDIR(st.st_mode)) {
        return ct_error_set(err, CT_ERR_INVALID, "%s %s is %s, not a folder; it is left as it "
                            "is ---> choose another folder", what, path,
                            file_type_name(st.st_mode));
    } else if (!force) {
        DIR *d = opendir(path);
        if (!d)
            return ct_error_set(err, CT_ERR_IO, "cannot read %s %s: %s", what, path,
                                strerror(errno));
        struct dirent *e;
        int empty = 1;
        while (empty && (e = readdir(d)))
            empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
        closedir(d);
        if (!empty)
            return ct_error_set(err, CT_ERR_INVALID, "%s %s exists and is not empty ---> use "
                                "--force to write over its files, or choose another folder",
                                what, path);
    }
    if (access(path, W_OK) != 0)
        return ct_error_set(err, CT_ERR_IO, "%s %s is not writable: %s ---> choose another "
                            "folder", what, path, strerror(errno));
    return CT_OK;
}
