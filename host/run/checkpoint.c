/* checkpoint.c — atomic per-rank checkpoints and resharding resume (see checkpoint.h).
 *
 * rank_NNNNN.bin, little-endian:
 *   char magic[8] "CTCKPT01"; uint32 version (1, 2 or 3); int32 rank; int32 world; int64 step;
 *   uint32 n_units; [version 2, 3: uint32 n_state;] [version 3: uint32 n_comp;]
 *   uint64 loader_epoch; uint64 loader_position;
 *   per unit: uint64 unit_numel; uint64 offset; uint64 numel; int32 replicated;
 *             float master[numel]; then n_state optimizer state buffers float s[numel]
 *             (version 1: n_state = 2, AdamW's m and v); then n_comp (0 or 1) compensation
 *             buffers float c[numel] (version 3);
 *   uint64 fnv1a64 of every byte before it.
 * An optimizer with two state buffers (adamw) writes version 1, the format of every ctrain
 * before the optimizer kind (ABI 1.7); any other count writes version 2; a master with a
 * compensation buffer (bf16 master, kahan rule: master.h) writes version 3. A bf16 master and
 * its bf16 compensation are stored widened to f32: exact, so loading rounds them back to the
 * same bits (a resume is bit for bit; resharding slices the f32 copies as any other part). The state belongs to
 * [optimizer] plugin of the folder's config.ini: a resume with another optimizer is refused.
 *
 * precision.bin (rank 0, ABI 1.7): the precision policy's state_save blob and the count of
 *   updates it skipped, see below.
 * data.bin (rank 0, when [data] train is a mixture of datasets): the mixture's position, see
 * below; the rank files' loader_position then holds its global window count (loader_epoch 0).
 *
 * manifest.ini: "run_id = <16 hex>" (the run that wrote the folder: OUT/run_id) and
 * "config_fnv1a64 = <16 hex>" (config.ini's checksum); a folder without one (saved before
 * manifests) is read without the config check.
 *
 * A save: check every value is finite (all ranks), rank 0 makes step_N.tmp with config.ini and
 * manifest.ini, every rank writes and fsyncs its file, rank 0 fsyncs the folder and renames it
 * to step_N. Any failure removes step_N.tmp. Only folders of the run's own lineage are pruned,
 * replaced or removed; a damaged one a resume skips is renamed step_N.skipped. Folders are
 * removed in-process (openat/unlinkat, links never followed); no shell ever sees a path.
 */
#include "run/checkpoint.h"

#include "io/files.h"
#include "plugin/contract.h"
#include "run/master.h"
#include "run/optim.h"
#include "io/outfile.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_MAGIC "CTCKPT01"
#define CKPT_VERSION 1u   /* n_state = 2 (m, v) */
#define CKPT_VERSION_N 2u /* n_state in the header */
#define CKPT_VERSION_C 3u /* n_state and n_comp in the header */
#define CKPT_MAX_LISTED 65536 /* checkpoint folders considered in one listing */

/* The arrays saved per unit, in file order: the master weights, then the optimizer's state. */
static const char *part_name(int k) {
    static const char *const names[] = {"master weights", "optimizer state 0 (AdamW m)",
                                        "optimizer state 1 (AdamW v)"};
    return k < 3 ? names[k] : "optimizer state";
}

/* ---- paths and folders ------------------------------------------------------------------ */

/* snprintf into buf; CT_ERR_INVALID when the path does not fit (never a truncated path). */
__attribute__((format(printf, 4, 5)))
static int32_t path_fmt(char *buf, size_t n, ct_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= n)
        return ct_error_set(err, CT_ERR_INVALID,
                            "path too long (%d bytes, at most %zu) starting '%.80s' ---> use a "
                            "shorter [run] out_dir", len, n - 1, buf);
    return CT_OK;
}

/* The step of a complete checkpoint folder's name "step_" + digits (at least 8, nothing
 * else); -1 for anything else (step_N.tmp, step_N.old, other files). */
static long long parse_step_name(const char *name) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    const char *p = name + 5;
    size_t n = strlen(p);
    if (n < 8 || n > 18) return -1;
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9') return -1;
    return strtoll(p, NULL, 10);
}

/* A temporary left by an interrupted save: "step_" + digits + ".tmp" or ".old". */
static int is_stale_name(const char *name) {
    size_t n = strlen(name);
    if (n < 9 || strncmp(name, "step_", 5) != 0) return 0;
    return strcmp(name + n - 4, ".tmp") == 0 || strcmp(name + n - 4, ".old") == 0;
}

static int cmp_desc(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x < y) - (x > y);
}

/* Steps of the complete checkpoint folders under root, newest first, into a new array. */
static int32_t list_steps(const char *root, long long **steps, int *n, ct_error *err) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(root);
    if (!d) return errno == ENOENT ? CT_OK : ct_error_set(err, CT_ERR_IO, "cannot list %s: %s",
                                                          root, strerror(errno));
    int cap = 0;
    struct dirent *e;
    int32_t rc = CT_OK;
    while ((e = readdir(d)) && *n < CKPT_MAX_LISTED) {
        long long s = parse_step_name(e->d_name);
        if (s < 0) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            long long *g = realloc(*steps, (size_t)cap * sizeof *g);
            if (!g) {
                rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory listing %s", root);
                break;
            }
            *steps = g;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (rc != CT_OK) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return rc;
    }
    if (*n) qsort(*steps, (size_t)*n, sizeof **steps, cmp_desc);
    return CT_OK;
}

/* ---- lineage: which run wrote a step folder ------------------------------------------ */

/* OUT/run_id holds the run's id (16 hex digits), made by a fresh run and kept by its resumes;
 * each step folder's manifest.ini records the id of the run that wrote it and the checksum of
 * its config.ini. A run prunes, replaces or abandons only folders of its own id; a folder
 * without manifest.ini (saved before lineage was recorded) counts as the run's own only in a
 * checkpoints/ that is a real folder of its out_dir, never behind a link. */
#define RUN_ID_HEX 16
#define MANIFEST_MAX 4096

enum { LINE_OWN, LINE_OTHER, LINE_DAMAGED };

static int valid_id(const char *s, size_t n) {
    if (n != RUN_ID_HEX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* The value of `key` in the "key = value" lines of text (NUL-terminated) into val (cap bytes);
 * 1 when found. */
static int manifest_value(const char *text, const char *key, char *val, size_t cap) {
    size_t kn = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, key, kn) != 0 || strncmp(l + kn, " = ", 3) != 0) continue;
        const char *v = l + kn + 3;
        size_t n = strcspn(v, "\n");
        if (!v[n] || n >= cap) return 0; /* a line cut short */
        memcpy(val, v, n);
        val[n] = '\0';
        return 1;
    }
    return 0;
}

/* The whole of a checkpoint's small text file (a manifest, a config.ini) into a new buffer,
 * NUL-terminated, through the one reader without joining the set of files being read (a
 * training run reads every step folder's manifest at each save; the folders are removed
 * later). A file over max bytes is refused. */
static int32_t read_small(const char *path, const char *what, size_t max, char **buf, size_t *n,
                          ct_error *err) {
    FILE *f = NULL;
    *buf = NULL;
    *n = 0;
    int32_t rc = fopen_own_output(path, what, "the checkpoint folder is damaged", &f, err);
    if (rc != CT_OK) return rc;
    struct stat st;
    size_t size = fstat(fileno(f), &st) == 0 ? (size_t)st.st_size : max + 1;
    char *b = size <= max ? malloc(size + 1) : NULL;
    size_t got = b ? fread(b, 1, size + 1, f) : 0;
    int bad = !b || ferror(f) || got != size;
    fclose(f);
    if (bad) {
        free(b);
        return ct_error_set(err, CT_ERR_INVALID, "%s %s cannot be read whole or is over %zu "
                            "bytes ---> the checkpoint folder is damaged", what, path, max);
    }
    b[got] = '\0';
    *buf = b;
    *n = got;
    return CT_OK;
}

/* The step folder dir's manifest: 0 when it has none, 1 with the run id (and, when cfg_hash is
 * not NULL, config.ini's checksum), -1 when it is there but damaged (why in err). */
static int read_manifest(const char *dir, char id[RUN_ID_HEX + 1], uint64_t *cfg_hash,
                         ct_error *err) {
    char path[PATH_MAX], hash[32];
    struct stat st;
    if (path_fmt(path, sizeof path, err, "%s/manifest.ini", dir) != CT_OK) return -1;
    if (lstat(path, &st) != 0 && errno == ENOENT) return 0;
    char *text = NULL;
    size_t n = 0;
    if (read_small(path, "checkpoint manifest", MANIFEST_MAX, &text, &n, err) != CT_OK) return -1;
    int ok = strlen(text) == n && manifest_value(text, "run_id", id, RUN_ID_HEX + 1) &&
             valid_id(id, strlen(id)) && manifest_value(text, "config_fnv1a64", hash, sizeof hash) &&
             strlen(hash) == 16 && strspn(hash, "0123456789abcdef") == 16;
    free(text);
    if (!ok) {
        ct_error_set(err, CT_ERR_INVALID, "%s is truncated or corrupt", path);
        return -1;
    }
    if (cfg_hash) *cfg_hash = strtoull(hash, NULL, 16);
    return 1;
}

/* The run id in OUT/run_id for the checkpoints folder root (OUT/checkpoints) into id; "" when
 * there is none (a run folder older than lineage records, or not a run's). */
static void own_id(const char *root, char id[RUN_ID_HEX + 1]) {
    char path[PATH_MAX], buf[64];
    id[0] = '\0';
    ct_error scratch = {.struct_size = sizeof scratch};
    size_t n = strlen(root);
    if (n < 12 || strcmp(root + n - 12, "/checkpoints") != 0) return;
    if (path_fmt(path, sizeof path, &scratch, "%.*s/run_id", (int)(n - 12), root) != CT_OK) return;
    FILE *f = NULL;
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
        fopen_own_output(path, "run id", "check [run] out_dir", &f, &scratch) != CT_OK)
        return;
    if (fgets(buf, sizeof buf, f)) {
        size_t k = strcspn(buf, "\n");
        if (valid_id(buf, k)) {
            memcpy(id, buf, k);
            id[k] = '\0';
        }
    }
    fclose(f);
}

/* Whose is the folder `name` under root, for the run of id ("" = a run without an id)? A
 * manifest compared with the id decides. Without that comparison (a folder saved before
 * manifests, or a run without an id) the folder counts as the out_dir's own for `reading`
 * (choosing a checkpoint to resume from, never removing), and for removing only when
 * checkpoints/ is a folder of the out_dir's own, not a link another run may share. */
static int lineage_of(const char *root, const char *name, const char *id, int reading) {
    char dir[PATH_MAX], got[RUN_ID_HEX + 1];
    ct_error scratch = {.struct_size = sizeof scratch};
    if (path_fmt(dir, sizeof dir, &scratch, "%s/%s", root, name) != CT_OK) return LINE_DAMAGED;
    int m = read_manifest(dir, got, NULL, &scratch);
    if (m < 0) return LINE_DAMAGED;
    if (id[0] && m == 1) return strcmp(got, id) == 0 ? LINE_OWN : LINE_OTHER;
    if (reading) return LINE_OWN;
    struct stat st;
    return lstat(root, &st) == 0 && S_ISDIR(st.st_mode) ? LINE_OWN : LINE_OTHER;
}

static int32_t new_id(char id[RUN_ID_HEX + 1], ct_error *err) {
    unsigned char b[RUN_ID_HEX / 2];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        return ct_error_set(err, CT_ERR_IO, "cannot make a run id: %s", strerror(errno));
    for (size_t i = 0; i < sizeof b; i++) snprintf(id + 2 * i, 3, "%02x", b[i]);
    return CT_OK;
}

int32_t checkpoint_run_id(const char *out_dir, int fresh, ct_error *err) {
    char root[PATH_MAX], path[PATH_MAX], id[RUN_ID_HEX + 1], text[64];
    int32_t rc = path_fmt(root, sizeof root, err, "%s/checkpoints", out_dir);
    if (rc == CT_OK) rc = path_fmt(path, sizeof path, err, "%s/run_id", out_dir);
    if (rc != CT_OK) return rc;
    if (!fresh) {
        own_id(root, id);
        if (id[0]) return CT_OK;
    }
    if ((rc = new_id(id, err)) != CT_OK) return rc;
    snprintf(text, sizeof text, "%s\n", id);
    return outfile_write_whole(path, text, strlen(text), 0, err);
}

/* ---- small file helpers: a writer that hashes what it writes --------------------------- */

typedef struct hfile {
    FILE       *f;
    uint64_t    hash;
    const char *path;
    int         failed;
    int         err_no; /* errno of the first failed write */
} hfile;

static void hash_bytes(uint64_t *h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 0x100000001b3ull;
}

static void hwrite(hfile *hf, const void *p, size_t n) {
    if (hf->failed) return;
    hash_bytes(&hf->hash, p, n);
    if (fwrite(p, 1, n, hf->f) != n) {
        hf->failed = 1;
        hf->err_no = errno;
    }
}

/* The checkpoint files are written and read through stdio streams over the one writer and the
 * one reader (outfile.h, files.h). */
static int hread(hfile *hf, void *p, size_t n) {
    if (hf->failed) return -1;
    if (fread(p, 1, n, hf->f) != n) {
        hf->failed = 1;
        return -1;
    }
    hash_bytes(&hf->hash, p, n);
    return 0;
}

/* DIR/config.ini: the resolved configuration, its FNV-1a 64 into *hash when not NULL. */
static int32_t write_config(const host_config *cfg, const char *dir, uint64_t *hash,
                            ct_error *err) {
    char path[PATH_MAX], *text = NULL;
    size_t n = 0;
    int32_t rc = path_fmt(path, sizeof path, err, "%s/config.ini", dir);
    if (rc != CT_OK) return rc;
    FILE *m = open_memstream(&text, &n);
    if (!m) return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", path);
    config_print(cfg, m);
    if (fclose(m) != 0 || !text) {
        free(text);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", path);
    }
    if (hash) {
        *hash = 0xcbf29ce484222325ull;
        hash_bytes(hash, text, n);
    }
    rc = outfile_write_whole(path, text, n, OUTFILE_IN_CHECKPOINTS, err);
    free(text);
    return rc;
}

int32_t checkpoint_write_config(const host_config *cfg, const char *out_dir, ct_error *err) {
    return write_config(cfg, out_dir, NULL, err);
}

/* A step folder's config.ini and manifest.ini (the run id and config.ini's checksum). */
static int32_t write_config_and_manifest(const host_config *cfg, const char *root,
                                         const char *dir, ct_error *err) {
    char id[RUN_ID_HEX + 1], path[PATH_MAX], text[256];
    uint64_t hash = 0;
    own_id(root, id);
    int32_t rc = write_config(cfg, dir, &hash, err);
    if (rc == CT_OK && !id[0]) rc = new_id(id, err); /* a run folder without run_id */
    if (rc == CT_OK) rc = path_fmt(path, sizeof path, err, "%s/manifest.ini", dir);
    if (rc != CT_OK) return rc;
    snprintf(text, sizeof text, "; ctrain checkpoint: the run that wrote it, and config.ini's "
             "checksum\nrun_id = %s\nconfig_fnv1a64 = %016llx\n", id, (unsigned long long)hash);
    return outfile_write_whole(path, text, strlen(text), OUTFILE_IN_CHECKPOINTS, err);
}

/* Agree over ranks on a collective phase: CT_OK only when every rank's rc is CT_OK. A rank
 * that failed returns its own error; the others CT_ERR_COMM saying another rank failed. */
static int32_t agree(host_rank *r, int32_t rc, const char *phase, ct_error *err) {
    double bad = rc != CT_OK;
    ct_error scratch = {.struct_size = sizeof scratch};
    int32_t rc2 = optim_allreduce_f64(r, &bad, 1, CT_REDUCE_MAX, rc != CT_OK ? &scratch : err);
    if (rc != CT_OK) return rc;
    if (rc2 != CT_OK) return rc2;
    if (bad > 0)
        return ct_error_set(err, CT_ERR_COMM, "checkpoint: %s failed on another rank", phase);
    return CT_OK;
}


static int32_t write_rank_file(host_rank *r, const char *dir, int64_t step, ct_error *err) {
    char path[PATH_MAX];
    int32_t rc = path_fmt(path, sizeof path, err, "%s/rank_%05d.bin", dir, r->rank);
    if (rc != CT_OK) return rc;
    outfile out;
    if ((rc = outfile_open_as(&out, path, OUTFILE_IN_CHECKPOINTS, err)) != CT_OK) return rc;
    hfile hf = {.f = outfile_stream(&out, err), .hash = 0xcbf29ce484222325ull, .path = path};
    if (!hf.f) {
        outfile_abort(&out);
        return err->code;
    }
    uint32_t n_comp = master_comp_bytes(r) ? 1 : 0;
    uint32_t version = n_comp ? CKPT_VERSION_C : r->n_state == 2 ? CKPT_VERSION : CKPT_VERSION_N;
    uint32_t nu = r->mdesc.n_units;
    int32_t rank = r->rank, world = r->world;
    /* a mixture's position is in data.bin; the rank file holds its global window count */
    host_loader_state ls = r->train_mix ? (host_loader_state){0, mixture_drawn(r->train_mix)}
                                        : loader_get_state(r->train_data);
    hwrite(&hf, CKPT_MAGIC, 8);
    hwrite(&hf, &version, 4);
    hwrite(&hf, &rank, 4);
    hwrite(&hf, &world, 4);
    hwrite(&hf, &step, 8);
    hwrite(&hf, &nu, 4);
    if (version != CKPT_VERSION) hwrite(&hf, &r->n_state, 4);
    if (version == CKPT_VERSION_C) hwrite(&hf, &n_comp, 4);
    hwrite(&hf, &ls.epoch, 8);
    hwrite(&hf, &ls.position, 8);
    float *buf = NULL;
    for (uint32_t u = 0; u < nu && rc == CT_OK && !hf.failed; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        if ((rc = RANK_STRATEGY(r, shard, u, &sh, err)) != CT_OK) break;
        uint64_t numel = sh.numel;
        float *nb = realloc(buf, (numel ? numel : 1) * sizeof(float));
        if (!nb) {
            rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", path);
            break;
        }
        buf = nb;
        hwrite(&hf, &r->units[u].numel, 8);
        hwrite(&hf, &sh.offset, 8);
        hwrite(&hf, &numel, 8);
        hwrite(&hf, &sh.replicated, 4);
        for (uint32_t k = 0; k <= r->n_state + n_comp && rc == CT_OK; k++) {
            /* master (its dtype), the optimizer's f32 state, the compensation (master's dtype) */
            const void *part = k == 0 ? (const void *)sh.master
                               : k <= r->n_state ? (const void *)r->units[u].state[k - 1]
                                                 : r->units[u].comp;
            int32_t dt = k == 0 || k > r->n_state ? r->policy.master_dtype : CT_DTYPE_F32;
            rc = master_to_host_f32(r, buf, part, dt, numel, err);
            /* the host copy is checked too: a non-finite value never reaches the disk */
            for (uint64_t i = 0; rc == CT_OK && i < numel; i++)
                if (!isfinite(buf[i]))
                    rc = ct_error_set(err, CT_ERR_INVALID,
                                      "step %lld: unit %u (%s) holds %s in its %s at element "
                                      "%llu; checkpoint not written ---> lower [optim] lr, then "
                                      "resume with --resume",
                                      (long long)step, u, r->mdesc.units[u].name,
                                      isnan(buf[i]) ? "NaN" : "Inf",
                                      k == 0 ? "master weights"
                                      : k <= r->n_state ? r->state_names[k - 1]
                                                        : "compensation buffer",
                                      (unsigned long long)(sh.offset + i));
            if (rc == CT_OK) hwrite(&hf, buf, numel * sizeof(float));
        }
    }
    free(buf);
    uint64_t h = hf.hash;
    hwrite(&hf, &h, 8);
    if (rc == CT_OK && hf.failed) {
        outfile_abort(&out);
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s ---> free disk space under the "
                            "out_dir; the newest complete checkpoint is intact (resume with "
                            "--resume)", path, strerror(hf.err_no ? hf.err_no : EIO));
    }
    if (rc != CT_OK) {
        outfile_abort(&out);
        return rc;
    }
    if ((rc = outfile_commit(&out, err)) != CT_OK) {
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        rc = ct_error_set(err, rc, "%s; the newest complete checkpoint is intact (resume with "
                          "--resume)", why);
    }
    return rc;
}

/* Remove this run's complete checkpoints of steps after `step` (named on stderr when
 * `announce`) and beyond the newest `keep` of the others, and its stale temporaries: only
 * folders of the run's own lineage (lineage_of), never another run's. Rank 0, after a
 * successful save of `step` or a resume from it. A failure to remove is reported on stderr and
 * does not fail the run. */
static void prune(const char *root, int64_t step, int32_t keep, int announce) {
    long long *steps = NULL;
    int n = 0;
    ct_error err = {.struct_size = sizeof err};
    if (list_steps(root, &steps, &n, &err) != CT_OK) {
        fprintf(stderr, "ctrain: warning: %s\n", err.message);
        return;
    }
    char id[RUN_ID_HEX + 1], path[PATH_MAX], name[64];
    own_id(root, id);
    int kept = 0;
    for (int i = 0; i < n; i++) { /* newest first */
        snprintf(name, sizeof name, "step_%08lld", steps[i]);
        if (lineage_of(root, name, id, 0) != LINE_OWN) continue;
        if (steps[i] <= step && kept < keep) {
            kept++;
            continue;
        }
        if (path_fmt(path, sizeof path, &err, "%s/%s", root, name) != CT_OK) continue;
        if (out_remove_tree(path) != 0)
            fprintf(stderr, "ctrain: warning: could not remove %s: %s\n", path, strerror(errno));
        else if (announce && steps[i] > step)
            fprintf(stderr, "ctrain: removed %s: newer than the resumed step %lld\n", path,
                    (long long)step);
    }
    free(steps);
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!is_stale_name(e->d_name) || lineage_of(root, e->d_name, id, 0) != LINE_OWN) continue;
        if (path_fmt(path, sizeof path, &err, "%s/%s", root, e->d_name) != CT_OK) continue;
        if (out_remove_tree(path) != 0)
            fprintf(stderr, "ctrain: warning: could not remove %s: %s\n", path, strerror(errno));
    }
    if (d) closedir(d);
}

/* CT_OK when the folder `path` (name under root) is missing or this run's own; else an error
 * saying it belongs to another run. */
static int32_t check_own(const char *root, const char *path, ct_error *err) {
    struct stat st;
    if (lstat(path, &st) != 0) return CT_OK;
    char id[RUN_ID_HEX + 1];
    own_id(root, id);
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    int l = lineage_of(root, name, id, 0);
    if (l == LINE_OWN) return CT_OK;
    DIR *d = NULL; /* a save cut before its manifest */
    ct_error scratch = {.struct_size = sizeof scratch};
    if (is_stale_name(name)) open_folder(path, "checkpoint folder", "check [run] out_dir", &d, &scratch);
    if (d) {
        struct dirent *e;
        int empty = 1;
        while (empty && (e = readdir(d))) empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
        closedir(d);
        if (empty) return CT_OK;
    }
    return ct_error_set(err, CT_ERR_INVALID, "%s exists and was not written by this run (%s) "
                        "---> give each run its own checkpoints folder (a link to a shared disk "
                        "should point to a folder of its own)",
                        path, l == LINE_OTHER ? "another run's id in its manifest.ini"
                                              : "its manifest.ini is damaged");
}

/* Rank 0: a fresh, empty tmp folder (a stale one of this run's interrupted save removed
 * first) holding config.ini and manifest.ini, so the folder names its run from the start. */
static int32_t make_tmp(const host_rank *r, const char *root, const char *tmp, const char *dir,
                        ct_error *err) {
    if (mkdir(root, 0755) != 0 && errno != EEXIST)
        return ct_error_set(err, CT_ERR_IO, "cannot create %s: %s ---> check [run] out_dir",
                            root, strerror(errno));
    int32_t rc = check_own(root, dir, err);
    if (rc == CT_OK) rc = check_own(root, tmp, err);
    if (rc != CT_OK) return rc;
    if (out_remove_tree(tmp) != 0)
        return ct_error_set(err, CT_ERR_IO, "cannot remove the stale %s: %s", tmp,
                            strerror(errno));
    if (mkdir(tmp, 0755) != 0)
        return ct_error_set(err, CT_ERR_IO, "cannot create %s: %s ---> check free disk space",
                            tmp, strerror(errno));
    return write_config_and_manifest(r->cfg, root, tmp, err);
}

/* Rank 0: tmp becomes dir. An older folder of the same step of this run (a save before a
 * resume from an older checkpoint) is set aside as dir.old and removed after. */
static int32_t finish_save(const char *root, const char *tmp, const char *dir, ct_error *err) {
    char old[PATH_MAX];
    int32_t rc = path_fmt(old, sizeof old, err, "%s.old", dir);
    if (rc == CT_OK) rc = check_own(root, dir, err);
    if (rc == CT_OK) rc = check_own(root, old, err);
    if (rc != CT_OK) return rc;
    if (out_fsync_folder(tmp) != 0)
        return ct_error_set(err, CT_ERR_IO, "cannot sync %s: %s", tmp, strerror(errno));
    struct stat st;
    int had_old = lstat(dir, &st) == 0;
    if (had_old && (out_remove_tree(old) != 0 || rename(dir, old) != 0))
        return ct_error_set(err, CT_ERR_IO, "cannot set aside the older %s: %s", dir,
                            strerror(errno));
    if (rename(tmp, dir) != 0) {
        int saved = errno;
        if (had_old) rename(old, dir);
        return ct_error_set(err, CT_ERR_IO, "cannot rename %s to %s: %s", tmp, dir,
                            strerror(saved));
    }
    if (out_fsync_folder(root) != 0)
        fprintf(stderr, "ctrain: warning: cannot sync %s: %s\n", root, strerror(errno));
    if (had_old && out_remove_tree(old) != 0)
        fprintf(stderr, "ctrain: warning: could not remove %s: %s\n", old, strerror(errno));
    return CT_OK;
}

/* ---- the precision policy's state (ABI 1.7 state_save / state_load) --------------------
 * precision.bin, written by rank 0 (the state is the same on every rank), little-endian:
 *   char magic[8] "CTPREC02"; int64 updates_skipped (host_rank.updates_skipped: the optimizer's
 *   step counts only updates applied); uint64 size; uint8 blob[size]; uint64 fnv1a64 of every
 *   byte before it. "CTPREC01" (written before the skipped count was kept) lacks the count,
 *   which reads as 0. Absent when the policy has neither state_save nor after_reduce; a folder
 *   without it resumes the policy from its configured start with no skipped update. */
#define PREC_MAGIC    "CTPREC02"
#define PREC_MAGIC_V1 "CTPREC01"

static int32_t write_precision_state(host_rank *r, const char *dir, ct_error *err) {
    const ct_precision_vtable *pv = r->precision.vt;
    int32_t has_state = CT_HAS_MEMBER(pv, ct_precision_vtable, state_save);
    if (!has_state && !CT_HAS_MEMBER(pv, ct_precision_vtable, after_reduce)) return CT_OK;
    unsigned char blob[CT_PRECISION_STATE_MAX];
    uint64_t size = 0;
    int32_t rc = has_state ? CALLS(r->precision.plugin, "state_save",
                                   pv->state_save(r->precision.self, blob, sizeof blob, &size, err))
                           : CT_OK;
    if (rc != CT_OK) return contract_name_silent_error(rc, err, r->precision.plugin, "state_save");
    if (size > sizeof blob)
        return ct_error_set(err, CT_ERR_INVALID, "precision %s: state_save wrote %llu bytes, more "
                            "than CT_PRECISION_STATE_MAX (%d) ---> report this to the plugin's "
                            "author", r->precision.plugin->desc.name, (unsigned long long)size,
                            CT_PRECISION_STATE_MAX);
    char path[PATH_MAX];
    if ((rc = path_fmt(path, sizeof path, err, "%s/precision.bin", dir)) != CT_OK) return rc;
    outfile out;
    if ((rc = outfile_open_as(&out, path, OUTFILE_IN_CHECKPOINTS, err)) != CT_OK) return rc;
    hfile hf = {.f = outfile_stream(&out, err), .hash = 0xcbf29ce484222325ull, .path = path};
    if (!hf.f) {
        outfile_abort(&out);
        return err->code;
    }
    hwrite(&hf, PREC_MAGIC, 8);
    hwrite(&hf, &r->updates_skipped, 8);
    hwrite(&hf, &size, 8);
    hwrite(&hf, blob, (size_t)size);
    uint64_t h = hf.hash;
    hwrite(&hf, &h, 8);
    if (hf.failed) {
        outfile_abort(&out);
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s ---> free disk space under the "
                            "out_dir", path, strerror(hf.err_no ? hf.err_no : EIO));
    }
    return outfile_commit(&out, err);
}

static int32_t read_precision_state(host_rank *r, const char *dir, ct_error *err) {
    const ct_precision_vtable *pv = r->precision.vt;
    r->updates_skipped = 0;
    char path[PATH_MAX];
    int32_t rc = path_fmt(path, sizeof path, err, "%s/precision.bin", dir);
    if (rc != CT_OK) return rc;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return CT_OK; /* saved without one */
    char *data = NULL;
    size_t n = 0;
    rc = read_bounded(path, "precision state", "resume from another checkpoint with "
                      "--resume-from", 8 + 8 + 8 + CT_PRECISION_STATE_MAX + 8, &data, &n, err);
    if (rc != CT_OK) return rc;
    uint64_t size = 0, want = 0, h = 0xcbf29ce484222325ull;
    int64_t skipped = 0;
    unsigned char blob[CT_PRECISION_STATE_MAX];
    size_t head = n >= 8 && memcmp(data, PREC_MAGIC_V1, 8) == 0 ? 16 : 24; /* v1: no count */
    int bad = n < head + 8 || (head == 24 && memcmp(data, PREC_MAGIC, 8) != 0);
    if (!bad) {
        if (head == 24) memcpy(&skipped, data + 8, 8);
        memcpy(&size, data + head - 8, 8);
        bad = size > sizeof blob || n != head + 8 + size || skipped < 0;
    }
    if (!bad) {
        hash_bytes(&h, data, (size_t)(head + size));
        memcpy(blob, data + head, (size_t)size);
        memcpy(&want, data + head + size, 8);
        bad = want != h;
    }
    free(data);
    if (bad)
        return ct_error_set(err, CT_ERR_INVALID, "%s is damaged (magic, size or checksum) ---> "
                            "resume from an older checkpoint with --resume-from", path);
    r->updates_skipped = skipped;
    if (!CT_HAS_MEMBER(pv, ct_precision_vtable, state_load)) return CT_OK;
    rc = CALLS(r->precision.plugin, "state_load",
               pv->state_load(r->precision.self, blob, size, err));
    return contract_name_silent_error(rc, err, r->precision.plugin, "state_load");
}

/* ---- the data mixture's state --------------------------------------------------------
 * A state file of one blob, written by rank 0 into the checkpoint folder dir: char magic[8];
 * uint64 size; uint8 blob[size]; uint64 fnv1a64 of every byte before it. */
static int32_t write_blob(const char *dir, const char *name, const char *magic, const void *blob,
                          uint64_t size, ct_error *err) {
    char path[PATH_MAX];
    int32_t rc = path_fmt(path, sizeof path, err, "%s/%s", dir, name);
    if (rc != CT_OK) return rc;
    outfile out;
    if ((rc = outfile_open_as(&out, path, OUTFILE_IN_CHECKPOINTS, err)) != CT_OK) return rc;
    hfile hf = {.f = outfile_stream(&out, err), .hash = 0xcbf29ce484222325ull, .path = path};
    if (!hf.f) {
        outfile_abort(&out);
        return err->code;
    }
    hwrite(&hf, magic, 8);
    hwrite(&hf, &size, 8);
    hwrite(&hf, blob, (size_t)size);
    uint64_t h = hf.hash;
    hwrite(&hf, &h, 8);
    if (hf.failed) {
        outfile_abort(&out);
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s ---> free disk space under the "
                            "out_dir", path, strerror(hf.err_no ? hf.err_no : EIO));
    }
    return outfile_commit(&out, err);
}

/* The blob of the state file dir/name (write_blob's format, at most max bytes) into blob;
 * *size its length; *absent 1 (and CT_OK) when the folder has no such file. `what` names it in
 * messages. */
static int32_t read_blob(const char *dir, const char *name, const char *magic, const char *what,
                         void *blob, uint64_t max, uint64_t *size, int *absent, ct_error *err) {
    char path[PATH_MAX];
    int32_t rc = path_fmt(path, sizeof path, err, "%s/%s", dir, name);
    if (rc != CT_OK) return rc;
    struct stat st;
    *absent = stat(path, &st) != 0 && errno == ENOENT;
    if (*absent) return CT_OK;
    char *data = NULL;
    size_t n = 0;
    rc = read_bounded(path, what, "resume from another checkpoint with --resume-from",
                      8 + 8 + max + 8, &data, &n, err);
    if (rc != CT_OK) return rc;
    uint64_t want = 0, h = 0xcbf29ce484222325ull;
    int bad = n < 24 || memcmp(data, magic, 8) != 0;
    if (!bad) {
        memcpy(size, data + 8, 8);
        bad = *size > max || n != 24 + *size;
    }
    if (!bad) {
        hash_bytes(&h, data, (size_t)(16 + *size));
        memcpy(blob, data + 16, (size_t)*size);
        memcpy(&want, data + 16 + *size, 8);
        bad = want != h;
    }
    free(data);
    if (bad)
        return ct_error_set(err, CT_ERR_INVALID, "%s is damaged (magic, size or checksum) ---> "
                            "resume from an older checkpoint with --resume-from", path);
    return CT_OK;
}

/* data.bin, written by rank 0 when [data] train is a mixture (mixture.h): the mixture's state
 * (windows drawn, each dataset's epoch and position) as mixture_save writes it, in
 * write_blob's format with magic "CTDATA01". A folder of a run on one dataset has none. */
#define DATA_MAGIC "CTDATA01"

static int32_t write_data_state(host_rank *r, const char *dir, ct_error *err) {
    if (!r->train_mix) return CT_OK;
    unsigned char blob[MIX_STATE_MAX];
    size_t size = 0;
    int32_t rc = mixture_save(r->train_mix, blob, sizeof blob, &size, err);
    return rc == CT_OK ? write_blob(dir, "data.bin", DATA_MAGIC, blob, size, err) : rc;
}

/* The training data's position: the rank file's for one dataset, data.bin's for a mixture
 * (the two must match the run's [data] train). */
static int32_t read_data_state(host_rank *r, const char *dir, host_loader_state ls,
                               ct_error *err) {
    unsigned char blob[MIX_STATE_MAX];
    uint64_t size = 0;
    int absent = 0;
    char path[PATH_MAX];
    int32_t rc = read_blob(dir, "data.bin", DATA_MAGIC, "data mixture state", blob, sizeof blob,
                           &size, &absent, err);
    if (rc == CT_OK) rc = path_fmt(path, sizeof path, err, "%s/data.bin", dir);
    if (rc != CT_OK) return rc;
    if (!r->train_mix && !absent)
        return ct_error_set(err, CT_ERR_INVALID, "%s: the checkpoint was trained on a mixture "
                            "of datasets; this run's [data] train (%s) is one dataset ---> "
                            "resume with the checkpoint's [data] train (%s/config.ini)", path,
                            config_origin(r->cfg, "data", "train"), dir);
    if (r->train_mix && absent)
        return ct_error_set(err, CT_ERR_INVALID, "%s: the checkpoint was trained on one dataset "
                            "(it has no data.bin); this run's [data] train (%s) is a mixture "
                            "---> resume with the checkpoint's [data] train (%s/config.ini)",
                            dir, config_origin(r->cfg, "data", "train"), dir);
    if (r->train_mix) return mixture_load(r->train_mix, blob, (size_t)size, path, err);
    return loader_set_state(r->train_data, ls, err);
}

int32_t checkpoint_save(host_rank *r, const char *out_dir, int64_t step, int32_t keep,
                        ct_error *err) {
    char dir[PATH_MAX], tmp[PATH_MAX], root[PATH_MAX];
    int32_t rc = path_fmt(root, sizeof root, err, "%s/checkpoints", out_dir);
    if (rc == CT_OK) rc = path_fmt(dir, sizeof dir, err, "%s/step_%08lld", root, (long long)step);
    if (rc == CT_OK) rc = path_fmt(tmp, sizeof tmp, err, "%s.tmp", dir);
    if ((rc = agree(r, rc, "naming the folder", err)) != CT_OK) return rc;
    /* every rank gets the same verdict; nothing is on disk yet */
    if ((rc = optim_check_finite(r, step, err)) != CT_OK) return rc;

    if (r->rank == 0) rc = make_tmp(r, root, tmp, dir, err);
    if ((rc = agree(r, rc, "creating the folder", err)) != CT_OK) goto out_remove_tmp;
    rc = write_rank_file(r, tmp, step, err);
    if (rc == CT_OK && r->rank == 0) rc = write_precision_state(r, tmp, err);
    if (rc == CT_OK && r->rank == 0) rc = write_data_state(r, tmp, err);
    if ((rc = agree(r, rc, "writing a rank file", err)) != CT_OK) goto out_remove_tmp;
    if (r->rank == 0) rc = finish_save(root, tmp, dir, err);
    if ((rc = agree(r, rc, "finishing the folder", err)) != CT_OK) goto out_remove_tmp;
    if (r->rank == 0) prune(root, step, keep, 0);
    return CT_OK;

out_remove_tmp:
    /* every rank is past its writes (agree is a barrier): rank 0 removes what was made, never
     * another run's folder of the same name */
    if (r->rank == 0 && check_own(root, tmp, &(ct_error){.struct_size = sizeof(ct_error)}) ==
                            CT_OK && out_remove_tree(tmp) != 0)
        fprintf(stderr, "ctrain: warning: could not remove %s: %s\n", tmp, strerror(errno));
    return rc;
}

int32_t checkpoint_count(const char *out_dir, int *own, int *all, ct_error *err) {
    char root[PATH_MAX], id[RUN_ID_HEX + 1], name[64];
    long long *steps = NULL;
    int n = 0;
    *own = *all = 0;
    int32_t rc = path_fmt(root, sizeof root, err, "%s/checkpoints", out_dir);
    if (rc == CT_OK) rc = list_steps(root, &steps, &n, err);
    if (rc != CT_OK) return rc;
    own_id(root, id);
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "step_%08lld", steps[i]);
        if (lineage_of(root, name, id, 1) != LINE_OTHER) ++*own;
    }
    *all = n;
    free(steps);
    return CT_OK;
}

/* Remove OUT/name (a file, or a folder's files when `files_in` names their prefix) and say so. */
static void remove_named(const char *out_dir, const char *name, int *removed) {
    char path[PATH_MAX];
    ct_error scratch = {.struct_size = sizeof scratch};
    struct stat st;
    if (path_fmt(path, sizeof path, &scratch, "%s/%s", out_dir, name) != CT_OK ||
        lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode) || out_remove_tree(path) != 0) {
        fprintf(stderr, "ctrain train: --force: kept %s (%s)\n", path,
                S_ISDIR(st.st_mode) ? "a folder" : strerror(errno));
        return;
    }
    fprintf(stderr, "ctrain train: --force: removed %s\n", path);
    ++*removed;
}

int32_t checkpoint_start_over(const char *out_dir, ct_error *err) {
    char root[PATH_MAX], id[RUN_ID_HEX + 1], path[PATH_MAX];
    int32_t rc = path_fmt(root, sizeof root, err, "%s/checkpoints", out_dir);
    if (rc != CT_OK) return rc;
    own_id(root, id);
    int removed = 0, kept = 0;
    DIR *d = NULL; /* no checkpoints folder: nothing of it to remove */
    ct_error scratch = {.struct_size = sizeof scratch};
    open_folder(root, "checkpoints folder", "check [run] out_dir", &d, &scratch);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int step = parse_step_name(e->d_name) >= 0, stale = is_stale_name(e->d_name);
        if (!step && !stale) {
            if (strncmp(e->d_name, "step_", 5) == 0) kept++; /* set aside (.skipped), others */
            continue;
        }
        if (lineage_of(root, e->d_name, id, 0) != LINE_OWN) {
            kept++;
            continue;
        }
        if (path_fmt(path, sizeof path, err, "%s/%s", root, e->d_name) != CT_OK) continue;
        if (out_remove_tree(path) != 0) {
            int saved = errno;
            closedir(d);
            return ct_error_set(err, CT_ERR_IO, "--force: cannot remove %s: %s", path,
                                strerror(saved));
        }
        fprintf(stderr, "ctrain train: --force: removed %s\n", path);
        removed++;
    }
    if (d) closedir(d);
    remove_named(out_dir, "metrics.jsonl", &removed);
    remove_named(out_dir, "samples.jsonl", &removed);
    /* TensorBoard's files are this out_dir's only when tb/ is a folder of its own */
    char tb[PATH_MAX];
    struct stat st;
    if (path_fmt(tb, sizeof tb, err, "%s/tb", out_dir) == CT_OK && lstat(tb, &st) == 0) {
        if (S_ISDIR(st.st_mode) &&
            open_folder(tb, "TensorBoard folder", "check [run] out_dir", &d, &scratch) == CT_OK) {
            while ((e = readdir(d))) {
                if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0) continue;
                char name[PATH_MAX];
                if (path_fmt(name, sizeof name, err, "tb/%s", e->d_name) == CT_OK)
                    remove_named(out_dir, name, &removed);
            }
            closedir(d);
        } else {
            fprintf(stderr, "ctrain train: --force: kept %s (not a folder of this out_dir)\n", tb);
        }
    }
    if (kept)
        fprintf(stderr, "ctrain train: --force: kept %d folder(s) under %s that this run did "
                "not write (another run's, or set aside as damaged)\n", kept, root);
    fprintf(stderr, "ctrain train: --force: starting over in %s (%d removed)\n", out_dir,
            removed);
    return CT_OK;
}

int32_t checkpoint_latest(const char *out_dir, char *buf, size_t n, int64_t *step, ct_error *err) {
    char root[PATH_MAX];
    int32_t rc = path_fmt(root, sizeof root, err, "%s/checkpoints", out_dir);
    long long *steps = NULL;
    int count = 0;
    if (rc == CT_OK) rc = list_steps(root, &steps, &count, err);
    if (rc != CT_OK) return rc;
    long long best = count ? steps[0] : -1;
    free(steps);
    if (best < 0)
        return ct_error_set(err, CT_ERR_IO,
                            "no checkpoint under %s ---> train without --resume first", root);
    *step = best;
    return path_fmt(buf, n, err, "%s/step_%08lld", root, best);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* One saved rank file, parsed up to its unit table. */
typedef struct saved_unit {
    uint64_t unit_numel, offset, numel;
    int32_t  replicated;
    long     data_pos; /* file offset of master[0] */
} saved_unit;

/* A verified rank file is closed again: a rank of N reads all N files, and N ranks on threads of
 * one process holding N files each would need N^2 descriptors (65,536 at N = 256). Each is
 * opened again, one at a time, to read a unit (gather_parts), and must be the file verified. */
typedef struct saved_rank {
    FILE           *f;     /* open while verifying and while a unit is read, else NULL */
    struct stat     st;    /* the verified file: device, inode, size, modification time */
    char            path[PATH_MAX];
    int32_t         world;
    int64_t         step;
    host_loader_state ls;
    saved_unit     *units;
    uint32_t        n_units;
    uint32_t        n_state; /* optimizer state buffers per unit (version 1: 2) */
    uint32_t        n_comp;  /* compensation buffers per unit after them (version 3: 0 or 1) */
} saved_rank;

/* s->f = the rank file s->path, opened through the one reader. */
static int32_t open_rank_file(saved_rank *s, ct_error *err) {
    return fopen_regular(s->path, "checkpoint file", "the checkpoint folder is damaged: resume "
                         "from another one (--resume-from)", &s->f, err);
}

/* Open and verify one rank file: header, checksum over the whole file, every value finite. */
static int32_t open_saved(const char *dir, int32_t rank, saved_rank *s, ct_error *err) {
    memset(s, 0, sizeof *s);
    int32_t rc = path_fmt(s->path, sizeof s->path, err, "%s/rank_%05d.bin", dir, rank);
    if (rc != CT_OK) return rc;
    if ((rc = open_rank_file(s, err)) != CT_OK) return rc;
    hfile hf = {.f = s->f, .hash = 0xcbf29ce484222325ull, .path = s->path};
    char magic[8];
    uint32_t version;
    int32_t rank_saved;
    hread(&hf, magic, 8);
    hread(&hf, &version, 4);
    hread(&hf, &rank_saved, 4);
    hread(&hf, &s->world, 4);
    hread(&hf, &s->step, 8);
    hread(&hf, &s->n_units, 4);
    s->n_state = 2;
    if (version == CKPT_VERSION_N || version == CKPT_VERSION_C) hread(&hf, &s->n_state, 4);
    if (version == CKPT_VERSION_C) hread(&hf, &s->n_comp, 4);
    hread(&hf, &s->ls.epoch, 8);
    hread(&hf, &s->ls.position, 8);
    if (hf.failed || memcmp(magic, CKPT_MAGIC, 8) != 0 ||
        (version != CKPT_VERSION && version != CKPT_VERSION_N && version != CKPT_VERSION_C) ||
        s->n_state > CT_OPTIM_MAX_STATE || s->n_comp > 1 || rank_saved != rank || s->n_units > 1u << 20 || s->world < 1 || s->world > 1 << 20)
        return ct_error_set(err, CT_ERR_INVALID, "%s is not a ctrain v%u checkpoint of rank %d",
                            s->path, CKPT_VERSION, rank);
    s->units = calloc(s->n_units ? s->n_units : 1, sizeof *s->units);
    if (!s->units) return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", s->path);
    /* walk the whole file once to verify the checksum and the values before anything is loaded */
    float chunk[4096];
    for (uint32_t u = 0; u < s->n_units && !hf.failed; u++) {
        saved_unit *su = &s->units[u];
        hread(&hf, &su->unit_numel, 8);
        hread(&hf, &su->offset, 8);
        hread(&hf, &su->numel, 8);
        hread(&hf, &su->replicated, 4);
        su->data_pos = ftell(s->f);
        for (int k = 0; k < 1 + (int)s->n_state + (int)s->n_comp && !hf.failed; k++)
            for (uint64_t left = su->numel; left > 0 && !hf.failed;) {
                uint64_t n = left < 4096 ? left : 4096;
                if (hread(&hf, chunk, n * sizeof(float)) != 0) break;
                for (uint64_t i = 0; i < n; i++)
                    if (!isfinite(chunk[i]))
                        return ct_error_set(err, CT_ERR_INVALID,
                                            "%s: unit %u holds %s in its %s (element %llu)",
                                            s->path, u, isnan(chunk[i]) ? "NaN" : "Inf",
                                            k > (int)s->n_state ? "compensation buffer"
                                                                : part_name(k),
                                            (unsigned long long)(su->offset + su->numel - left + i));
                left -= n;
            }
    }
    uint64_t want = hf.hash, got = 0;
    if (hf.failed || fread(&got, 8, 1, s->f) != 1 || got != want)
        return ct_error_set(err, CT_ERR_INVALID, "%s is truncated or corrupt (checksum mismatch)",
                            s->path);
    if (fstat(fileno(s->f), &s->st) != 0)
        return ct_error_set(err, CT_ERR_IO, "cannot stat %s: %s", s->path, strerror(errno));
    fclose(s->f);
    s->f = NULL;
    return CT_OK;
}

/* Open the verified file s again (s->f); it must still be the same file, unchanged. */
static int32_t reopen_saved(saved_rank *s, ct_error *err) {
    struct stat now;
    int32_t rc = open_rank_file(s, err);
    if (rc != CT_OK) return rc;
    if (fstat(fileno(s->f), &now) != 0 || now.st_dev != s->st.st_dev ||
        now.st_ino != s->st.st_ino || now.st_size != s->st.st_size ||
        now.st_mtim.tv_sec != s->st.st_mtim.tv_sec || now.st_mtim.tv_nsec != s->st.st_mtim.tv_nsec) {
        fclose(s->f);
        s->f = NULL;
        return ct_error_set(err, CT_ERR_IO, "%s changed while it was being loaded ---> nothing "
                            "may write into a checkpoint folder that a run resumes from", s->path);
    }
    return CT_OK;
}

static void close_saved(saved_rank *s) {
    if (s->f) fclose(s->f);
    free(s->units);
    memset(s, 0, sizeof *s);
}

/* The folder's config.ini against the checksum its manifest.ini records (a folder saved before
 * manifests has none to check). */
static int32_t check_config_sum(const char *dir, const char *cfg_path, ct_error *err) {
    char id[RUN_ID_HEX + 1];
    uint64_t want = 0;
    int m = read_manifest(dir, id, &want, err);
    if (m < 0) return CT_ERR_INVALID;
    if (m == 0) return CT_OK;
    char *text = NULL;
    size_t n = 0;
    int32_t rc = read_small(cfg_path, "configuration", 64u << 20, &text, &n, err);
    if (rc != CT_OK) return rc;
    uint64_t got = 0xcbf29ce484222325ull;
    hash_bytes(&got, text, n);
    free(text);
    if (got != want)
        return ct_error_set(err, CT_ERR_INVALID, "%s is truncated or corrupt (checksum mismatch "
                            "with manifest.ini)", cfg_path);
    return CT_OK;
}

/* Every rank file of the checkpoint folder dir, verified (open_saved) and consistent with rank
 * 0's (world, step, units), plus a readable config.ini, into *out (world entries; close each
 * with close_saved and free the array). The folder's config.ini, loaded, into *saved_cfg. */
static int32_t open_checkpoint(const char *dir, saved_rank **out, int32_t *world,
                               host_config **saved_cfg, ct_error *err) {
    *out = NULL;
    *saved_cfg = NULL;
    saved_rank first;
    int32_t rc = open_saved(dir, 0, &first, err);
    if (rc != CT_OK) {
        close_saved(&first);
        return rc;
    }
    saved_rank *saved = calloc((size_t)first.world, sizeof *saved);
    if (!saved) {
        close_saved(&first);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    saved[0] = first;
    int32_t q = 1;
    for (; q < first.world && rc == CT_OK; q++) {
        rc = open_saved(dir, q, &saved[q], err);
        if (rc == CT_OK && (saved[q].world != first.world || saved[q].step != first.step ||
                            saved[q].n_units != first.n_units ||
                            saved[q].n_state != first.n_state ||
                            saved[q].n_comp != first.n_comp))
            rc = ct_error_set(err, CT_ERR_INVALID,
                              "%s does not match %s (world, step or units differ)", saved[q].path,
                              first.path);
    }
    char cfg_path[PATH_MAX];
    if (rc == CT_OK) rc = path_fmt(cfg_path, sizeof cfg_path, err, "%s/config.ini", dir);
    if (rc == CT_OK) rc = check_config_sum(dir, cfg_path, err);
    if (rc == CT_OK) {
        *saved_cfg = config_new();
        if (!*saved_cfg) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        else rc = config_load_file(*saved_cfg, cfg_path, err);
    }
    if (rc != CT_OK) {
        for (int32_t i = 0; i < first.world; i++) close_saved(&saved[i]);
        free(saved);
        config_free(*saved_cfg);
        *saved_cfg = NULL;
        return rc;
    }
    *out = saved;
    *world = first.world;
    return CT_OK;
}

/* Two values of a key are the same when the texts are, or both are numbers that are equal. */
static int same_value(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return 1;
    char *ea, *eb;
    double x = strtod(a, &ea), y = strtod(b, &eb);
    return ea != a && eb != b && *ea == 0 && *eb == 0 && x == y;
}

/* The run's [model] section must be the checkpoint's: any key that differs, or is present on
 * one side only, is an error naming the key, both values and the checkpoint's config.ini. */
static int32_t check_model(const host_config *cfg, const host_config *saved, const char *dir,
                           ct_error *err) {
    for (int pass = 0; pass < 2; pass++) {
        const host_config *a = pass ? cfg : saved, *b = pass ? saved : cfg;
        int32_t n = config_key_count(a, "model");
        for (int32_t i = 0; i < n; i++) {
            const char *key = config_key_name(a, "model", i);
            /* where the first weights came from does not bind a resume (the checkpoint holds
             * the weights; a run folder's newest checkpoint moves on as that run trains) */
            if (!strcmp(key, "init_from") || !strcmp(key, "from_config")) continue;
            const char *va = config_get(a, "model", key), *vb = config_get(b, "model", key);
            if (vb && same_value(va, vb)) continue;
            /* a key the plugin gained since the save, left at its default, changes nothing */
            if (!vb && pass && strcmp(config_origin(cfg, "model", key), "default") == 0) continue;
            const char *now = pass ? va : vb, *then = pass ? vb : va;
            return ct_error_set(err, CT_ERR_INVALID,
                                "%s: [model] %s = %s, but the checkpoint was trained with %s = "
                                "%s (%s/config.ini) ---> a checkpoint resumes only with its own "
                                "model: set [model] %s = %s, or train into another out_dir "
                                "without --resume",
                                config_origin(cfg, "model", key), key, now ? now : "(absent)",
                                key, then ? then : "(absent)", dir, key,
                                then ? then : "(remove the key)");
        }
    }
    return CT_OK;
}

/* The optimizer whose state the checkpoint holds ([optimizer] plugin of its config.ini; adamw
 * in a folder saved before the optimizer kind) must be this run's: another plugin's buffers
 * would be read as its own. */
static int32_t check_optimizer(const host_config *cfg, const host_config *saved, const char *dir,
                               ct_error *err) {
    const char *now = config_get(cfg, "optimizer", "plugin");
    const char *then = config_get(saved, "optimizer", "plugin");
    if (!now) now = "adamw";
    if (!then) then = "adamw";
    if (same_value(now, then)) return CT_OK;
    return ct_error_set(err, CT_ERR_INVALID,
                        "%s: [optimizer] plugin = %s, but the checkpoint's optimizer state is "
                        "%s's (%s/config.ini) ---> resume with [optimizer] plugin = %s, or start "
                        "from its weights only with [model] init_from (a new run)",
                        config_origin(cfg, "optimizer", "plugin"), now, then, dir, then);
}

/* Reassemble parts 0..n_parts-1 (0 master, 1.. the optimizer's state, then the compensation) of
 * unit u, unpadded, from every saved rank into full[k] (unit_numel floats each; a NULL full[k]
 * is skipped), opening each rank file once. */
static int32_t gather_parts(saved_rank *saved, int32_t world, uint32_t u, int n_parts,
                            float *const *full, uint64_t unit_numel, ct_error *err) {
    for (int32_t q = 0; q < world; q++) {
        saved_unit *su = &saved[q].units[u];
        if (su->replicated && q > 0) break;
        if (su->offset >= unit_numel) continue;
        uint64_t n = su->numel;
        if (su->offset + n > unit_numel) n = unit_numel - su->offset;
        int32_t rc = reopen_saved(&saved[q], err);
        for (int k = 0; rc == CT_OK && k < n_parts; k++)
            if (full[k] &&
                (fseek(saved[q].f, su->data_pos + (long)(k * su->numel * sizeof(float)),
                       SEEK_SET) != 0 ||
                 fread(full[k] + su->offset, sizeof(float), n, saved[q].f) != n))
                rc = ct_error_set(err, CT_ERR_IO, "cannot read %s", saved[q].path);
        if (saved[q].f) fclose(saved[q].f);
        saved[q].f = NULL;
        if (rc != CT_OK) return rc;
    }
    return CT_OK;
}

/* Load the verified checkpoint `saved` (world files of folder dir) into the rank; with
 * weights_only the master weights only (no AdamW moments, no data position). */
static int32_t load(host_rank *r, const char *dir, saved_rank *saved, int32_t world,
                    int weights_only, ct_error *err) {
    const saved_rank *first = &saved[0];
    if (first->n_units != r->mdesc.n_units)
        return ct_error_set(err, CT_ERR_INVALID,
                            "%s has %u parameter units; this model has %u ---> resume with the "
                            "configuration in %s/config.ini",
                            dir, first->n_units, r->mdesc.n_units, dir);
    if (!weights_only && first->n_state != r->n_state)
        return ct_error_set(err, CT_ERR_INVALID,
                            "%s holds %u optimizer state buffers per unit; [optimizer] plugin = "
                            "%s keeps %u ---> resume with the optimizer in %s/config.ini",
                            dir, first->n_state, r->optimizer.plugin ?
                            r->optimizer.plugin->desc.name : "?", r->n_state, dir);
    int32_t rc = CT_OK;
    for (uint32_t u = 0; rc == CT_OK && u < r->mdesc.n_units; u++) {
        uint64_t n = r->units[u].numel;
        if (first->units[u].unit_numel != n)
            return ct_error_set(err, CT_ERR_INVALID,
                                "%s: unit %u has %llu parameters saved, the model has %llu ---> "
                                "resume with the configuration in %s/config.ini",
                                dir, u, (unsigned long long)first->units[u].unit_numel,
                                (unsigned long long)n, dir);
        /* full[k]: part k of the whole unit (master; with the optimizer state m and v too, and
         * the compensation when both the checkpoint and this run keep one: a run without one
         * drops it, a checkpoint without one leaves this run's at zero) */
        int n_state = weights_only ? 0 : (int)r->n_state;
        int comp = !weights_only && r->units[u].comp && first->n_comp;
        int n_parts = 1 + n_state + (comp ? 1 : 0);
        float *full[2 + CT_OPTIM_MAX_STATE] = {NULL};
        ct_shard sh = {.struct_size = sizeof sh};
        for (int k = 0; k < n_parts; k++)
            if (!(full[k] = calloc(n ? n : 1, sizeof *full[k])))
                rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        if (rc == CT_OK) rc = gather_parts(saved, world, u, n_parts, full, n, err);
        if (rc == CT_OK) rc = RANK_STRATEGY(r, load_unit, u, full[0], err);
        if (rc == CT_OK) rc = RANK_STRATEGY(r, shard, u, &sh, err);
        float *part = NULL;
        if (rc == CT_OK && !weights_only && !(part = calloc(sh.numel ? sh.numel : 1, sizeof *part)))
            rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        for (int k = 1; k <= n_state + (r->units[u].comp && !weights_only) && rc == CT_OK; k++) {
            memset(part, 0, sh.numel * sizeof *part);
            if (k < n_parts)
                for (uint64_t i = 0; i < sh.numel; i++)
                    if (sh.offset + i < n) part[i] = full[k][sh.offset + i];
            if (k <= n_state)
                rc = RANK_DEV(r, copy, r->units[u].state[k - 1], part, sh.numel * sizeof(float),
                              CT_COPY_H2D, err);
            else /* the compensation, in the master's dtype (exact: saved widened) */
                rc = master_from_host_f32(r, r->units[u].comp, r->policy.master_dtype, part,
                                          sh.numel, err);
        }
        free(part);
        for (int k = 0; k < 2 + CT_OPTIM_MAX_STATE; k++) free(full[k]);
    }
    if (rc == CT_OK && !weights_only) rc = read_data_state(r, dir, first->ls, err);
    return rc;
}

static void close_checkpoint(saved_rank *saved, int32_t world, host_config *saved_cfg) {
    for (int32_t q = 0; saved && q < world; q++) close_saved(&saved[q]);
    free(saved);
    config_free(saved_cfg);
}

/* Steps of the folders a resume skipped as damaged (set aside after the resume agreed). */
#define SKIPPED_MAX 64
typedef struct skipped_list {
    long long step[SKIPPED_MAX];
    int       n;
} skipped_list;

/* The checkpoint to read: the folder `from` when it is not NULL, else the newest valid one
 * under root (OUT/checkpoints) of the run's own lineage (another run's folders in a shared
 * folder are passed over), skipping invalid ones with a warning on stderr when `warn` (their
 * steps into *skipped when not NULL). `what` names `from` in messages ("--resume-from"). The
 * chosen folder's path into dir (PATH_MAX bytes), its verified files and config as
 * open_checkpoint gives them. */
static int32_t open_chosen(const char *root, const char *from, const char *what, int warn,
                           char *dir, saved_rank **saved, int32_t *world, host_config **saved_cfg,
                           skipped_list *skipped_out, ct_error *err) {
    int32_t rc;
    if (from) {
        if ((rc = path_fmt(dir, PATH_MAX, err, "%s", from)) != CT_OK) return rc;
        struct stat st;
        if (stat(from, &st) != 0 && errno == ENOENT) {
            char cwd[PATH_MAX] = "";
            if (from[0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
            return ct_error_set(err, CT_ERR_IO, "%s %s: not found (%s%s%s) ---> pass an existing "
                                "checkpoint folder (OUT/checkpoints/step_NNNNNNNN)", what, from,
                                cwd, cwd[0] ? "/" : "", from);
        }
        rc = open_checkpoint(dir, saved, world, saved_cfg, err);
        if (rc != CT_OK) {
            char why[sizeof err->message];
            snprintf(why, sizeof why, "%s", err->message);
            return ct_error_set(err, rc, "%s %s: %s ---> pass a complete checkpoint "
                                "folder (OUT/checkpoints/step_NNNNNNNN)", what, from, why);
        }
        return CT_OK;
    }
    long long *steps = NULL;
    int n = 0, skipped = 0, others = 0;
    char id[RUN_ID_HEX + 1], name[64];
    own_id(root, id);
    if ((rc = list_steps(root, &steps, &n, err)) != CT_OK) return rc;
    rc = CT_ERR_IO;
    for (int i = 0; i < n && rc != CT_OK; i++) {
        snprintf(name, sizeof name, "step_%08lld", steps[i]);
        if (lineage_of(root, name, id, 1) == LINE_OTHER) {
            others++;
            continue;
        }
        if (path_fmt(dir, PATH_MAX, err, "%s/%s", root, name) != CT_OK) continue;
        ct_error why = {.struct_size = sizeof why};
        rc = open_checkpoint(dir, saved, world, saved_cfg, &why);
        if (rc == CT_OK && (*saved)[0].step != steps[i]) {
            rc = ct_error_set(&why, CT_ERR_INVALID, "its files are of step %lld",
                              (long long)(*saved)[0].step);
            close_checkpoint(*saved, *world, *saved_cfg);
            *saved = NULL;
            *saved_cfg = NULL;
        }
        if (rc == CT_OK) break;
        if (rc == CT_ERR_NOMEM) {
            *err = why;
            break;
        }
        skipped++;
        if (skipped_out && skipped_out->n < SKIPPED_MAX)
            skipped_out->step[skipped_out->n++] = steps[i];
        if (warn)
            fprintf(stderr, "ctrain: warning: skipping checkpoint %s: %s ---> using "
                    "the next older one\n", dir, why.message);
    }
    free(steps);
    if (rc == CT_ERR_NOMEM) return rc;
    if (rc != CT_OK) {
        if (skipped)
            return ct_error_set(err, CT_ERR_IO, "no valid checkpoint under %s (%d skipped: "
                                "see the warnings above) ---> train without --resume", root,
                                skipped);
        if (others)
            return ct_error_set(err, CT_ERR_IO, "no checkpoint of this run under %s (%d of "
                                "other runs) ---> train without --resume first", root, others);
        return ct_error_set(err, CT_ERR_IO, "no checkpoint under %s ---> train without "
                            "--resume first", root);
    }
    return CT_OK;
}

int32_t checkpoint_read_master(const char *path, ckpt_master *out, ct_error *err) {
    memset(out, 0, sizeof *out);
    char root[PATH_MAX], probe[PATH_MAX];
    saved_rank *saved = NULL;
    host_config *saved_cfg = NULL;
    int32_t world = 0, rc;
    struct stat st;
    /* a checkpoint folder holds rank_00000.bin; anything else is a run folder */
    int is_ckpt = path_fmt(probe, sizeof probe, err, "%s/rank_00000.bin", path) == CT_OK &&
                  stat(probe, &st) == 0;
    if ((rc = path_fmt(root, sizeof root, err, "%s/checkpoints", path)) != CT_OK) return rc;
    rc = open_chosen(root, is_ckpt ? path : NULL, "checkpoint", 1, out->dir, &saved, &world,
                     &saved_cfg, NULL, err);
    if (rc == CT_ERR_IO && !is_ckpt)
        return ct_error_set(err, rc, "no valid checkpoint in %s: it is neither a checkpoint "
                            "folder (holding rank_00000.bin) nor a run folder with a valid "
                            "checkpoints/step_NNNNNNNN (skipped ones are named above) ---> pass "
                            "a run's out_dir or one of its checkpoint folders", path);
    if (rc != CT_OK) return rc;
    out->n_units = saved[0].n_units;
    out->step = saved[0].step;
    out->world = world;
    out->cfg = saved_cfg;
    saved_cfg = NULL;
    out->numel = calloc(out->n_units ? out->n_units : 1, sizeof *out->numel);
    out->units = calloc(out->n_units ? out->n_units : 1, sizeof *out->units);
    if (!out->numel || !out->units) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (uint32_t u = 0; rc == CT_OK && u < out->n_units; u++) {
        uint64_t n = out->numel[u] = saved[0].units[u].unit_numel;
        if (n > (1ull << 40)) {
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: unit %u claims %llu parameters",
                              saved[0].path, u, (unsigned long long)n);
            break;
        }
        if (!(out->units[u] = calloc(n ? n : 1, sizeof(float))))
            rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory for unit %u (%llu floats)", u,
                              (unsigned long long)n);
        else rc = gather_parts(saved, world, u, 1, &out->units[u], n, err);
    }
    close_checkpoint(saved, world, NULL);
    if (rc != CT_OK) checkpoint_master_free(out);
    return rc;
}

void checkpoint_master_free(ckpt_master *m) {
    for (uint32_t u = 0; m->units && u < m->n_units; u++) free(m->units[u]);
    free(m->units);
    free(m->numel);
    config_free(m->cfg);
    memset(m, 0, sizeof *m);
}

/* Rank 0 after a resume: each folder the search skipped as damaged renamed step_N.skipped
 * (step_N.skipped.2, ... when that exists), so it is kept and never picked again. */
static void set_aside(const char *root, const skipped_list *sk) {
    char from[PATH_MAX], to[PATH_MAX];
    ct_error scratch = {.struct_size = sizeof scratch};
    for (int i = 0; i < sk->n; i++) {
        if (path_fmt(from, sizeof from, &scratch, "%s/step_%08lld", root, sk->step[i]) != CT_OK)
            continue;
        struct stat st;
        int k = 1;
        for (; k < 1000; k++) {
            if (path_fmt(to, sizeof to, &scratch, k == 1 ? "%s.skipped" : "%s.skipped.%d", from,
                         k) != CT_OK || lstat(to, &st) != 0)
                break;
        }
        if (lstat(from, &st) != 0) continue; /* gone meanwhile */
        /* RENAME_NOREPLACE: a name that appeared since the lstat above is never replaced */
        if (k < 1000 && renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
            fprintf(stderr, "ctrain: set aside the damaged checkpoint %s as %s (kept, never "
                    "resumed from) ---> inspect it, or remove it yourself\n", from, to);
        else
            fprintf(stderr, "ctrain: warning: could not set aside the damaged checkpoint %s: %s\n",
                    from, strerror(errno));
    }
}

/* Rank 0: say when the learning-rate schedule's length differs from the checkpoint's. */
static void warn_schedule(const host_config *cfg, const host_config *saved, const char *dir,
                          int64_t step) {
    int64_t now_steps = 0, now_sched = 0;
    config_get_int(cfg, "run", "steps", &now_steps, NULL);
    config_get_int(cfg, "optim", "schedule_steps", &now_sched, NULL);
    const char *ts = config_get(saved, "run", "steps");
    const char *tsch = config_get(saved, "optim", "schedule_steps");
    long long then_steps = ts ? strtoll(ts, NULL, 10) : 0, then_sched = tsch ? strtoll(tsch, NULL, 10) : 0;
    const char *sched = NULL;
    config_get_string(cfg, "optim", "schedule", &sched, NULL);
    if (sched && !strcmp(sched, "constant")) return; /* no length to it */
    long long now_len = now_sched > 0 ? now_sched : now_steps;
    long long then_len = then_sched > 0 ? then_sched : then_steps;
    if (!ts || now_len == then_len) return;
    fprintf(stderr, "ctrain: warning: resuming step %lld with a learning-rate schedule of %lld "
            "steps; the checkpoint (%s/config.ini) followed one of %lld ([run] steps = %lld): "
            "the lr from here on differs from what that run would have used ---> set [optim] "
            "schedule_steps = %lld to keep its schedule\n", (long long)step, now_len, dir,
            then_len, then_steps, then_len);
}

int32_t checkpoint_resume(host_rank *r, const char *out_dir, const char *from, int64_t *step,
                          ct_error *err) {
    char dir[PATH_MAX], root[PATH_MAX];
    saved_rank *saved = NULL;
    host_config *saved_cfg = NULL;
    skipped_list sk = {.n = 0};
    int32_t world = 0, rc;
    if ((rc = path_fmt(root, sizeof root, err, "%s/checkpoints", out_dir)) != CT_OK) return rc;
    rc = open_chosen(root, from, "--resume-from", r->rank == 0, dir, &saved, &world, &saved_cfg,
                     &sk, err);
    if (rc != CT_OK) return rc;
    rc = check_model(r->cfg, saved_cfg, dir, err);
    if (rc == CT_OK) rc = check_optimizer(r->cfg, saved_cfg, dir, err);
    if (rc == CT_OK) rc = load(r, dir, saved, world, 0, err);
    if (rc == CT_OK) rc = read_precision_state(r, dir, err);
    if (rc == CT_OK) *step = saved[0].step;
    if (rc == CT_OK && r->rank == 0) warn_schedule(r->cfg, saved_cfg, dir, *step);
    close_checkpoint(saved, world, saved_cfg);
    /* every rank has read its files: damaged folders are set aside, and this run's history
     * after the resumed step is abandoned (as the rows of metrics.jsonl after it), so a later
     * --resume can never jump back onto it */
    if ((rc = agree(r, rc, "loading the checkpoint", err)) != CT_OK) return rc;
    if (r->rank == 0) {
        set_aside(root, &sk);
        prune(root, *step, INT32_MAX, 1);
    }
    return CT_OK;
}

/* ---- inference: the newest valid checkpoint of a run, its master weights ------------------ */

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int32_t checkpoint_find(const char *path, char *buf, size_t n, int64_t *step, ct_error *err) {
    char probe[PATH_MAX], root[PATH_MAX], dir[PATH_MAX];
    int32_t rc = path_fmt(probe, sizeof probe, err, "%s/rank_00000.bin", path);
    if (rc == CT_OK) rc = path_fmt(root, sizeof root, err, "%s/checkpoints", path);
    if (rc != CT_OK) return rc;
    int is_ckpt = access(probe, F_OK) == 0;
    if (!is_ckpt && !is_dir(root))
        return ct_error_set(err, CT_ERR_INVALID, "%s is neither a run folder (no checkpoints/ "
                            "in it) nor a checkpoint folder (no rank_00000.bin in it) ---> pass "
                            "the [run] out_dir of a run that saved a checkpoint, or one of its "
                            "OUT/checkpoints/step_NNNNNNNN folders", path);
    /* the same search and verification as resume and export */
    saved_rank *saved = NULL;
    host_config *saved_cfg = NULL;
    int32_t world = 0;
    rc = open_chosen(root, is_ckpt ? path : NULL, "checkpoint", 1, dir, &saved, &world,
                     &saved_cfg, NULL, err);
    if (rc == CT_OK) {
        *step = saved[0].step;
        rc = path_fmt(buf, n, err, "%s", dir);
    }
    close_checkpoint(saved, world, saved_cfg);
    return rc;
}

int32_t checkpoint_load_weights(host_rank *r, const char *dir, ct_error *err) {
    saved_rank *saved = NULL;
    host_config *saved_cfg = NULL;
    int32_t world = 0;
    int32_t rc = open_checkpoint(dir, &saved, &world, &saved_cfg, err);
    if (rc != CT_OK) return rc;
    rc = check_model(r->cfg, saved_cfg, dir, err);
    if (rc == CT_OK) rc = load(r, dir, saved, world, 1, err);
    close_checkpoint(saved, world, saved_cfg);
    return rc;
}

int32_t checkpoint_data_position(const char *dir, host_loader_state *ls, int32_t *world,
                                 ct_error *err) {
    saved_rank first;
    int32_t rc = open_saved(dir, 0, &first, err);
    if (rc == CT_OK) {
        *ls = first.ls;
        *world = first.world;
    }
    close_saved(&first);
    return rc;
}

/* ---- fine-tuning: a checkpoint's weights unit by unit (init_ckpt.c) ------------------------ */

struct ckpt_source {
    char         dir[PATH_MAX];
    saved_rank  *saved;  /* (world) the verified rank files */
    int32_t      world;
    host_config *cfg;    /* the folder's config.ini */
};

int32_t checkpoint_source_open(const char *dir, ckpt_source **out, ct_error *err) {
    *out = NULL;
    ckpt_source *s = calloc(1, sizeof *s);
    if (!s) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = path_fmt(s->dir, sizeof s->dir, err, "%s", dir);
    if (rc == CT_OK) rc = open_checkpoint(s->dir, &s->saved, &s->world, &s->cfg, err);
    if (rc != CT_OK) {
        free(s);
        return rc;
    }
    *out = s;
    return CT_OK;
}

const host_config *checkpoint_source_config(const ckpt_source *s) { return s->cfg; }
int64_t checkpoint_source_step(const ckpt_source *s) { return s->saved[0].step; }
int32_t checkpoint_source_world(const ckpt_source *s) { return s->world; }
uint32_t checkpoint_source_units(const ckpt_source *s) { return s->saved[0].n_units; }
uint64_t checkpoint_source_numel(const ckpt_source *s, uint32_t u) {
    assert(u < s->saved[0].n_units);
    return s->saved[0].units[u].unit_numel;
}

int32_t checkpoint_source_unit(ckpt_source *s, uint32_t u, float *full, ct_error *err) {
    assert(u < s->saved[0].n_units);
    return gather_parts(s->saved, s->world, u, 1, &full, s->saved[0].units[u].unit_numel, err);
}

void checkpoint_source_close(ckpt_source *s) {
    if (!s) return;
    close_checkpoint(s->saved, s->world, s->cfg);
    free(s);
}
