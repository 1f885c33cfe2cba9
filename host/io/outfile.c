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

/* 1 when the existing folder `dir` is a run's checkpoints folder or one of its step folders:
 * its real path ends in ".../checkpoints" holding step_* entries, or in
 * ".../checkpoints/step_<digits>..." (a saved step, or a save in progress). */
static int in_checkpoints(const char *dir) {
    char real[PATH_MAX];
    if (!realpath(dir, real)) return 0;
    char *last = strrchr(real, '/');
    if (!last) return 0;
    if (!strcmp(last + 1, "checkpoints")) return holds_steps(real);
    if (!is_step_name(last + 1) || last == real) return 0;
    *last = '\0';
    char *prev = strrchr(real, '/');
    return prev && !strcmp(prev + 1, "checkpoints");
}

/* in_checkpoints of `dir`, or of its nearest existing ancestor when it does not exist yet
 * (checked before any folder is created). */
static int would_be_in_checkpoints(const char *dir) {
    char at[PATH_MAX];
    if (snprintf(at, sizeof at, "%s", dir) >= (int)sizeof at) return 0;
    struct stat st;
    while (stat(at, &st) != 0) {
        ct_error scratch = {.struct_size = sizeof scratch};
        char up[PATH_MAX];
        if (parent_of(at, up, sizeof up, &scratch) != CT_OK || !strcmp(up, at)) return 0;
        memcpy(at, up, sizeof at);
    }
    return in_checkpoints(at);
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
        if (flags & OUTFILE_NO_REPLACE)
            return ct_error_set(err, CT_ERR_INVALID, "output %s exists ---> use --force to "
                                "replace it, or choose another path", path);
    } else if (errno != ENOENT) {
        return ct_error_set(err, CT_ERR_IO, "cannot check output %s: %s", path, strerror(errno));
    }
    char dir[PATH_MAX];
    int32_t rc = parent_of(path, dir, sizeof dir, err);
    if (rc != CT_OK) return rc;
    if (!(flags & OUTFILE_IN_CHECKPOINTS) && would_be_in_checkpoints(dir))
        return ct_error_set(err, CT_ERR_INVALID, "output %s is inside a run's checkpoints "
                            "folder, which only training writes ---> choose a path outside "
                            "checkpoints/", path);
    return CT_OK;
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

/* ---- whole files ------------------------------------------------------------------------ */

int32_t outfile_open_as(outfile *o, const char *path, uint32_t flags, ct_error *err) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->flags = flags;
    if (!(o->path = strdup(path))) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = check_target(path, flags, err);
    if (rc == CT_OK) rc = out_make_parents(path, err);
    if (rc == CT_OK) rc = create_beside(path, O_WRONLY, &o->tmp, &o->fd, err);
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
    if (flags & OUTFILE_TRUNCATE) oflags |= O_TRUNC;
    int f = open(path, oflags, 0666);
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

/* ---- folder outputs ----------------------------------------------------------------------- */

int32_t outdir_prepare(const char *path, const char *what, int force, ct_error *err) {
    if (would_be_in_checkpoints(path))
        return ct_error_set(err, CT_ERR_INVALID, "%s %s is inside a run's checkpoints folder, "
                            "which only training writes ---> choose a folder outside "
                            "checkpoints/", what, path);
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
