/* outfile.h — the one writer: every file ctrain writes goes through here. An output is created
 * beside its final name (mode 0666 & ~umask), every write checked, fsync'd, then renamed onto
 * the name; appended files (metrics.jsonl, samples) are opened here too. Before anything is
 * written, and again before the rename, the target is checked: an existing target that is not
 * a regular file (a FIFO, a device, a folder) or is a symbolic link is refused, so is a file
 * this command reads (files.h: files_being_read, by device and inode), and so is any target
 * inside a run's checkpoints folder, at any depth (only checkpoint.c writes there). A file a
 * user named (OUTFILE_USER) may not be one of a run's own records (config.ini, metrics.jsonl,
 * tb/, ...), and replaces an existing file or writes inside a run's folder only with --force
 * (OUTFILE_FORCE). Temporaries still open when SIGTERM/SIGINT/SIGHUP ends a command that has no
 * handler of its own are removed on the way out. Missing parent folders are created. Folder outputs (an export, prepare's shards) are checked by outdir_prepare.
 * Not for: what the files hold (export.c, safetensors.c, llmc.c, checkpoint.c, data.c). */
#ifndef CTRAIN_HOST_OUTFILE_H
#define CTRAIN_HOST_OUTFILE_H

#include <ctrain/ctrain.h>

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

/* Flags of outfile_open_as / outfile_append_open. */
enum {
    OUTFILE_NO_REPLACE     = 1u << 0, /* an existing target is refused ("use --force") */
    OUTFILE_IN_CHECKPOINTS = 1u << 1, /* checkpoint.c's own files: may be inside checkpoints/ */
    OUTFILE_TRUNCATE       = 1u << 2, /* outfile_append_open: start with a new, empty file
                                         * (renamed onto the name, never truncated in place) */
    OUTFILE_USER           = 1u << 3, /* a file a user named (--out ...): an existing file, or
                                         * one inside a folder that holds a run, needs
                                         * OUTFILE_FORCE; a run's own records are refused */
    OUTFILE_FORCE          = 1u << 4, /* with OUTFILE_USER: the user gave --force */
};

/* 1 when the folder `dir` holds a run: a config.ini beside a .lock, run_id, metrics.jsonl or
 * checkpoints/ folder (what `ctrain train` writes into its out_dir). */
int out_holds_run(const char *dir);

typedef struct outfile {
    char       *path;   /* the final name (a copy, freed by commit and abort) */
    char       *tmp;    /* the temporary beside it */
    int         fd;
    int         err_no; /* errno of the first failed write, 0 while all went well */
    uint32_t    flags;
    FILE       *stream; /* outfile_stream's stdio stream over fd, or NULL */
} outfile;

/* Check `path` as a target (see above) and create its temporary; missing parent folders are
 * created first. CT_ERR_INVALID naming the target and why it is refused, or CT_ERR_IO naming
 * the folder. outfile_open is outfile_open_as with no flags (an existing regular file is
 * replaced at commit). */
int32_t outfile_open(outfile *o, const char *path, ct_error *err);
int32_t outfile_open_as(outfile *o, const char *path, uint32_t flags, ct_error *err);
/* The checks outfile_open_as makes on `path`, alone: for a command that learns its output
 * path long before it writes it (refused before the work, not after). Creates nothing. */
int32_t outfile_check(const char *path, uint32_t flags, ct_error *err);
/* Append n bytes (partial writes retried); a failure is remembered and reported by commit. */
void outfile_write(outfile *o, const void *p, size_t n);
/* Write n bytes at byte offset `at` of the temporary (a header filled in at the end). */
void outfile_pwrite(outfile *o, const void *p, size_t n, uint64_t at);
/* A stdio stream writing into the temporary (for text written with fprintf); owned by o, closed
 * by commit (whose check covers its writes) or abort. NULL with err set on failure. Do not mix
 * with outfile_write. */
FILE *outfile_stream(outfile *o, ct_error *err);
/* fsync, close, check the target again and rename onto it, then fsync its folder (best
 * effort); on any failure (including an earlier write) the temporary is removed and
 * CT_ERR_IO names the file and the reason. */
int32_t outfile_commit(outfile *o, ct_error *err);
/* Give up: close and remove the temporary (no-op after commit). */
void outfile_abort(outfile *o);

/* The n bytes at data, as the whole of `path` (outfile_open_as with flags, write, commit). */
int32_t outfile_write_whole(const char *path, const void *data, size_t n, uint32_t flags,
                            ct_error *err);
/* The whole of `src` (read through files.h) into a new file `dst`. */
int32_t outfile_copy(const char *src, const char *dst, uint32_t flags, ct_error *err);

/* A file written by appending (metrics.jsonl, a samples log): checked as a target like an
 * outfile (an existing one must be a regular file, not a link, not an input), opened with
 * O_APPEND | O_NOFOLLOW (and O_TRUNC with OUTFILE_TRUNCATE), created when missing. *fd is -1
 * on error. Write with fd_write_all. */
int32_t outfile_append_open(const char *path, uint32_t flags, int *fd, ct_error *err);
/* A run's lock file (runlock.c), opened for reading and writing in place: checked as a target,
 * created when missing, O_NOFOLLOW | O_NONBLOCK, a regular file only. *fd is -1 on error. */
int32_t outfile_lock_open(const char *path, int *fd, ct_error *err);
/* An existing lock file opened read-only (O_NOFOLLOW | O_NONBLOCK), to see whether a run holds
 * it without changing it: the descriptor, or -1 when it is missing, a link or not a regular
 * file. */
int outfile_lock_peek(const char *path);
/* All n bytes to fd (partial writes and EINTR retried); 0, or -1 with errno set. */
int fd_write_all(int fd, const void *p, size_t n);

/* A folder output: `path` may not be a symbolic link or anything but a folder, nor a run's
 * folder, one of its records or inside its checkpoints; inside a folder that holds a run only
 * with `force`; an existing folder that is not empty is refused unless `force` ("---> use --force to write over its
 * files, or choose another folder"); missing folders (parents included) are created. `what`
 * names the option ("--out"). */
int32_t outdir_prepare(const char *path, const char *what, int force, ct_error *err);
/* A scratch file in the folder `dir` for reading and writing, already unlinked (nothing is
 * left behind whatever happens); the caller closes *fd. CT_ERR_IO naming the folder. */
int32_t scratch_open(const char *dir, int *fd, ct_error *err);
/* Remove `path` and, when it is a folder, everything in it, in-process (openat/unlinkat; a
 * symbolic link is removed itself, never followed; at most 32 levels). 0 on success or when it
 * does not exist; -1 with errno set. */
int out_remove_tree(const char *path);
/* fsync the folder `path` (not followed when it is a link). 0, or -1 with errno set. */
int out_fsync_folder(const char *path);
/* mkdir -p of the folder `dir` itself (a run's out_dir); CT_ERR_INVALID when a part of it is
 * not a folder, CT_ERR_IO naming the folder that could not be made. */
int32_t out_make_folders(const char *dir, ct_error *err);
/* mkdir -p of path's parent folders (not path itself). */
int32_t out_make_parents(const char *path, ct_error *err);

#endif /* CTRAIN_HOST_OUTFILE_H */
