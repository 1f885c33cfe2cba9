/* checkpoint.c — atomic per-rank checkpoints and resharding resume (see checkpoint.h).
 *
 * rank_NNNNN.bin, little-endian:
 *   char magic[8] "CTCKPT01"; uint32 version (1); int32 rank; int32 world; int64 step;
 *   uint32 n_units; uint64 loader_epoch; uint64 loader_position;
 *   per unit: uint64 unit_numel; uint64 offset; uint64 numel; int32 replicated;
 *             float master[numel]; float m[numel]; float v[numel];
 *   uint64 fnv1a64 of every byte before it.
 */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_MAGIC "CTCKPT01"
#define CKPT_VERSION 1u

/* ---- small file helpers: a writer that hashes what it writes --------------------------- */

typedef struct hfile {
    FILE       *f;
    uint64_t    hash;
    const char *path;
    int         failed;
} hfile;

static void hash_bytes(uint64_t *h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 0x100000001b3ull;
}

static void hwrite(hfile *hf, const void *p, size_t n) {
    if (hf->failed) return;
    hash_bytes(&hf->hash, p, n);
    if (fwrite(p, 1, n, hf->f) != n) hf->failed = 1;
}

static int hread(hfile *hf, void *p, size_t n) {
    if (hf->failed) return -1;
    if (fread(p, 1, n, hf->f) != n) {
        hf->failed = 1;
        return -1;
    }
    hash_bytes(&hf->hash, p, n);
    return 0;
}

static int32_t fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int32_t checkpoint_write_config(const ct_config *cfg, const char *out_dir, ct_error *err) {
    char path[1100], tmp[1110];
    snprintf(path, sizeof path, "%s/config.ini", out_dir);
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    config_print(cfg, f);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0)
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return CT_OK;
}

static int32_t barrier(ct_rank *r, ct_error *err) {
    if (r->world == 1) return CT_OK;
    return r->comm_ref.vt->barrier(r->comm_ref.self, err);
}

static int32_t copy_d2h(ct_rank *r, void *dst, const void *src, uint64_t bytes, ct_error *err) {
    return r->dev.vt->copy(r->dev.self, dst, src, bytes, CT_COPY_D2H, err);
}

static int32_t write_rank_file(ct_rank *r, const char *dir, int64_t step, ct_error *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/rank_%05d.bin", dir, r->rank);
    hfile hf = {.f = fopen(path, "wb"), .hash = 0xcbf29ce484222325ull, .path = path};
    if (!hf.f) return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    const ct_strategy_vtable *st = r->strategy.vt;
    uint32_t version = CKPT_VERSION, nu = r->mdesc.n_units;
    int32_t rank = r->rank, world = r->world;
    ct_loader_state ls = loader_get_state(r->train_data);
    hwrite(&hf, CKPT_MAGIC, 8);
    hwrite(&hf, &version, 4);
    hwrite(&hf, &rank, 4);
    hwrite(&hf, &world, 4);
    hwrite(&hf, &step, 8);
    hwrite(&hf, &nu, 4);
    hwrite(&hf, &ls.epoch, 8);
    hwrite(&hf, &ls.position, 8);
    int32_t rc = CT_OK;
    float *buf = NULL;
    for (uint32_t u = 0; u < nu && rc == CT_OK; u++) {
        ct_shard sh = {.struct_size = sizeof sh};
        if ((rc = st->shard(r->strategy.self, u, &sh, err)) != CT_OK) break;
        uint64_t numel = sh.numel;
        float *nb = realloc(buf, numel * sizeof(float));
        if (!nb) {
            rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", path);
            break;
        }
        buf = nb;
        hwrite(&hf, &r->units[u].numel, 8);
        hwrite(&hf, &sh.offset, 8);
        hwrite(&hf, &numel, 8);
        hwrite(&hf, &sh.replicated, 4);
        const float *parts[3] = {sh.master, r->units[u].m, r->units[u].v};
        for (int k = 0; k < 3 && rc == CT_OK; k++) {
            rc = copy_d2h(r, buf, parts[k], numel * sizeof(float), err);
            hwrite(&hf, buf, numel * sizeof(float));
        }
    }
    free(buf);
    uint64_t h = hf.hash;
    hwrite(&hf, &h, 8);
    int bad = hf.failed || fflush(hf.f) != 0 || fsync(fileno(hf.f)) != 0;
    bad |= fclose(hf.f) != 0;
    if (rc == CT_OK && bad)
        rc = ct_error_set(err, CT_ERR_IO, "cannot write %s: %s ---> check free disk space", path,
                          strerror(errno));
    return rc;
}

static void checkpoint_dir(const char *out_dir, int64_t step, char *buf, size_t n) {
    snprintf(buf, n, "%s/checkpoints/step_%08lld", out_dir, (long long)step);
}

/* Remove complete checkpoints beyond the newest `keep`, and stale temporary folders. */
static void prune(const char *out_dir, int32_t keep) {
    char root[1100];
    snprintf(root, sizeof root, "%s/checkpoints", out_dir);
    DIR *d = opendir(root);
    if (!d) return;
    long long steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        long long s;
        char tail[8];
        if (sscanf(e->d_name, "step_%lld%7s", &s, tail) == 1) steps[n++] = s;
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (newer < keep) continue;
        char cmd[1300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s/step_%08lld'", root, steps[i]);
        if (system(cmd) != 0) fprintf(stderr, "ctrain: could not prune %s/step_%08lld\n", root, steps[i]);
    }
}

int32_t checkpoint_save(ct_rank *r, const char *out_dir, int64_t step, int32_t keep,
                        ct_error *err) {
    char dir[1100], tmp[1120], root[1100];
    checkpoint_dir(out_dir, step, dir, sizeof dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    snprintf(root, sizeof root, "%s/checkpoints", out_dir);
    int32_t rc = barrier(r, err);
    if (rc != CT_OK) return rc;
    if (r->rank == 0) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        if (system(cmd) != 0 || (mkdir(root, 0755) != 0 && errno != EEXIST) ||
            mkdir(tmp, 0755) != 0)
            rc = ct_error_set(err, CT_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    }
    /* every rank waits for the folder; a failure on rank 0 surfaces as its own error */
    int32_t rc2 = barrier(r, err);
    if (rc != CT_OK || rc2 != CT_OK) return rc != CT_OK ? rc : rc2;
    rc = write_rank_file(r, tmp, step, err);
    if (rc != CT_OK) return rc;
    if ((rc = barrier(r, err)) != CT_OK) return rc;
    if (r->rank == 0) {
        rc = checkpoint_write_config(r->cfg, tmp, err);
        char cmd[2400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir); /* an older save of the same step */
        if (rc == CT_OK && (fsync_path(tmp) != 0 || system(cmd) != 0 || rename(tmp, dir) != 0 ||
                            fsync_path(root) != 0))
            rc = ct_error_set(err, CT_ERR_IO, "cannot finish checkpoint %s: %s", dir,
                              strerror(errno));
        if (rc == CT_OK) prune(out_dir, keep);
    }
    rc2 = barrier(r, err);
    return rc != CT_OK ? rc : rc2;
}

int32_t checkpoint_latest(const char *out_dir, char *buf, size_t n, int64_t *step, ct_error *err) {
    char root[1100];
    snprintf(root, sizeof root, "%s/checkpoints", out_dir);
    DIR *d = opendir(root);
    long long best = -1;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            long long s;
            char tail[8];
            if (sscanf(e->d_name, "step_%lld%7s", &s, tail) == 1 && s > best) best = s;
        }
        closedir(d);
    }
    if (best < 0)
        return ct_error_set(err, CT_ERR_IO,
                            "no checkpoint under %s ---> train without --resume first", root);
    checkpoint_dir(out_dir, best, buf, n);
    *step = best;
    return CT_OK;
}

/* One saved rank file, parsed up to its unit table. */
typedef struct saved_unit {
    uint64_t unit_numel, offset, numel;
    int32_t  replicated;
    long     data_pos; /* file offset of master[0] */
} saved_unit;

typedef struct saved_rank {
    FILE           *f;
    char            path[1200];
    int32_t         world;
    int64_t         step;
    ct_loader_state ls;
    saved_unit     *units;
    uint32_t        n_units;
} saved_rank;

static int32_t open_saved(const char *dir, int32_t rank, saved_rank *s, ct_error *err) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s/rank_%05d.bin", dir, rank);
    s->f = fopen(s->path, "rb");
    if (!s->f) return ct_error_set(err, CT_ERR_IO, "cannot read %s: %s", s->path, strerror(errno));
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
    hread(&hf, &s->ls.epoch, 8);
    hread(&hf, &s->ls.position, 8);
    if (hf.failed || memcmp(magic, CKPT_MAGIC, 8) != 0 || version != CKPT_VERSION ||
        rank_saved != rank || s->n_units > 1u << 20)
        return ct_error_set(err, CT_ERR_INVALID, "%s is not a ctrain v%u checkpoint of rank %d",
                            s->path, CKPT_VERSION, rank);
    s->units = calloc(s->n_units, sizeof *s->units);
    if (!s->units) return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", s->path);
    /* walk the whole file once to verify the checksum before anything is loaded */
    float chunk[4096];
    for (uint32_t u = 0; u < s->n_units; u++) {
        saved_unit *su = &s->units[u];
        hread(&hf, &su->unit_numel, 8);
        hread(&hf, &su->offset, 8);
        hread(&hf, &su->numel, 8);
        hread(&hf, &su->replicated, 4);
        su->data_pos = ftell(s->f);
        for (uint64_t left = 3 * su->numel; left > 0 && !hf.failed;) {
            uint64_t k = left < 4096 ? left : 4096;
            hread(&hf, chunk, k * sizeof(float));
            left -= k;
        }
    }
    uint64_t want = hf.hash, got = 0;
    if (hf.failed || fread(&got, 8, 1, s->f) != 1 || got != want)
        return ct_error_set(err, CT_ERR_INVALID,
                            "%s is truncated or corrupt (checksum mismatch) ---> resume from an "
                            "older checkpoint folder",
                            s->path);
    return CT_OK;
}

static void close_saved(saved_rank *s) {
    if (s->f) fclose(s->f);
    free(s->units);
    memset(s, 0, sizeof *s);
}

/* Reassemble part k (0 master, 1 m, 2 v) of unit u, unpadded, from every saved rank. */
static int32_t gather_part(saved_rank *saved, int32_t world, uint32_t u, int k, float *full,
                           uint64_t unit_numel, ct_error *err) {
    for (int32_t q = 0; q < world; q++) {
        saved_unit *su = &saved[q].units[u];
        if (su->replicated && q > 0) break;
        if (su->offset >= unit_numel) continue;
        uint64_t n = su->numel;
        if (su->offset + n > unit_numel) n = unit_numel - su->offset;
        if (fseek(saved[q].f, su->data_pos + (long)(k * su->numel * sizeof(float)), SEEK_SET) != 0 ||
            fread(full + su->offset, sizeof(float), n, saved[q].f) != n)
            return ct_error_set(err, CT_ERR_IO, "cannot read %s", saved[q].path);
    }
    return CT_OK;
}

int32_t checkpoint_resume(ct_rank *r, const char *out_dir, int64_t *step, ct_error *err) {
    char dir[1100];
    int32_t rc = checkpoint_latest(out_dir, dir, sizeof dir, step, err);
    if (rc != CT_OK) return rc;
    saved_rank first;
    if ((rc = open_saved(dir, 0, &first, err)) != CT_OK) {
        close_saved(&first);
        return rc;
    }
    int32_t world = first.world;
    saved_rank *saved = calloc((size_t)world, sizeof *saved);
    if (!saved) {
        close_saved(&first);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    saved[0] = first;
    for (int32_t q = 1; q < world && rc == CT_OK; q++) rc = open_saved(dir, q, &saved[q], err);
    if (rc == CT_OK && first.n_units != r->mdesc.n_units)
        rc = ct_error_set(err, CT_ERR_INVALID,
                          "%s has %u parameter units; this model has %u ---> resume with the "
                          "configuration in %s/config.ini",
                          dir, first.n_units, r->mdesc.n_units, dir);
    const ct_strategy_vtable *st = r->strategy.vt;
    for (uint32_t u = 0; rc == CT_OK && u < r->mdesc.n_units; u++) {
        uint64_t n = r->units[u].numel;
        if (first.units[u].unit_numel != n) {
            rc = ct_error_set(err, CT_ERR_INVALID,
                              "%s: unit %u has %llu parameters saved, the model has %llu ---> "
                              "resume with the configuration in %s/config.ini",
                              dir, u, (unsigned long long)first.units[u].unit_numel,
                              (unsigned long long)n, dir);
            break;
        }
        float *full = calloc(n, sizeof *full);
        ct_shard sh = {.struct_size = sizeof sh};
        if (!full) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        if (rc == CT_OK) rc = gather_part(saved, world, u, 0, full, n, err);
        if (rc == CT_OK) rc = st->load_unit(r->strategy.self, u, full, err);
        if (rc == CT_OK) rc = st->shard(r->strategy.self, u, &sh, err);
        float *part = NULL;
        if (rc == CT_OK && !(part = calloc(sh.numel, sizeof *part)))
            rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        for (int k = 1; k <= 2 && rc == CT_OK; k++) {
            memset(full, 0, n * sizeof *full);
            rc = gather_part(saved, world, u, k, full, n, err);
            memset(part, 0, sh.numel * sizeof *part);
            for (uint64_t i = 0; i < sh.numel; i++)
                if (sh.offset + i < n) part[i] = full[sh.offset + i];
            float *dst = k == 1 ? r->units[u].m : r->units[u].v;
            if (rc == CT_OK)
                rc = r->dev.vt->copy(r->dev.self, dst, part, sh.numel * sizeof(float),
                                     CT_COPY_H2D, err);
        }
        free(part);
        free(full);
    }
    if (rc == CT_OK) rc = loader_set_state(r->train_data, first.ls, err);
    for (int32_t q = 0; q < world; q++) close_saved(&saved[q]);
    free(saved);
    return rc;
}
