/* import.c — [model] init_from (see import.h): a Hugging Face folder or a weights file, its
 * config.json checked (hf_config.c), every tensor found in one of the safetensors files
 * (the shards of an index too) and checked before any is used. */
#include "weights/import.h"

#include "base/printable.h"
#include "weights/export_layout.h"
#include "io/files.h"
#include "weights/hf_config.h"
#include "io/json.h"
#include "weights/llmc.h"
#include "io/safetensors.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_NAME "model.safetensors.index.json"
#define INDEX_MAX (64u << 20)  /* a safetensors index larger than this is refused */
#define MAX_SHARDS 4096

struct ct_import {
    char     path[4096];   /* init_from as given */
    int      is_llmc;
    st_file *st;           /* (n_st) the safetensors files: one, or an index's shards */
    int32_t  n_st;
    int      fd;           /* llm.c file */
    uint64_t *llmc_off;    /* (n entries) byte offset of each entry in the llm.c file */
    layout   lay;
    const st_tensor **src; /* (n entries) the safetensors tensor of each entry */
    int32_t *src_file;     /* (n entries) which of st holds it */
};

void import_close(ct_import *im) {
    if (!im) return;
    if (im->is_llmc) {
        if (im->fd >= 0) close(im->fd);
    }
    for (int32_t i = 0; i < im->n_st; i++) st_close(&im->st[i]);
    free(im->st);
    layout_free(&im->lay);
    free(im->llmc_off);
    free(im->src);
    free(im->src_file);
    free(im);
}

/* Append "; text" to a mismatch list held in buf (cap bytes); counts what did not fit. Every
 * line also goes to stderr once one has not fitted (the first ones then too), so the whole list
 * is always shown. */
static void note(char *buf, size_t cap, int *n, int *dropped, const char *text,
                 const char *path) {
    size_t at = strlen(buf);
    char shown[2048]; /* a path or a tensor name of the file, escaped: one line each */
    if (*dropped == 0 && at + strlen(text) + 3 >= cap) { /* the first that does not fit */
        fprintf(stderr, "ctrain: init_from %s: every mismatch:\n",
                printable(path, shown, sizeof shown));
        for (const char *p = buf; *p;) {
            size_t k = strcspn(p, ";");
            char line[512];
            snprintf(line, sizeof line, "%.*s", (int)k, p);
            fprintf(stderr, "  %s\n", printable(line, shown, sizeof shown));
            p += k;
            while (*p == ';' || *p == ' ') p++;
        }
    }
    if (*dropped || at + strlen(text) + 3 >= cap) {
        fprintf(stderr, "  %s\n", printable(text, shown, sizeof shown));
        (*dropped)++;
    } else {
        snprintf(buf + at, cap - at, "%s%s", *n ? "; " : "", text);
    }
    (*n)++;
}

static void shape_text(char *buf, size_t cap, int32_t ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int32_t i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Tensors a Hugging Face file may hold that are not parameters (buffers) or are tied. */
static int ignorable(int32_t target, int tied, const char *name) {
    if (target == LAYOUT_HF_GPT2)
        return !strcmp(name, "lm_head.weight") || ends_with(name, ".attn.bias") ||
               ends_with(name, ".attn.masked_bias");
    if (target == LAYOUT_HF_LLAMA)
        return ends_with(name, ".rotary_emb.inv_freq") || (tied && !strcmp(name, "lm_head.weight"));
    return 0;
}

/* The tensor `name` in any of the files; *file set. */
static const st_tensor *find_tensor(const ct_import *im, const char *name, int32_t *file) {
    for (int32_t f = 0; f < im->n_st; f++) {
        const st_tensor *t = st_find(&im->st[f], name);
        if (t) return *file = f, t;
    }
    return NULL;
}

/* One more safetensors file: opened by name, or (fd >= 0) the file already open on fd, which
 * it owns from here on. */
static int32_t add_file(ct_import *im, const char *path, int fd, uint64_t size, ct_error *err) {
    st_file *st = realloc(im->st, (size_t)(im->n_st + 1) * sizeof *st);
    if (!st) {
        if (fd >= 0) close(fd);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    im->st = st;
    int32_t rc = fd >= 0 ? st_open_fd(fd, path, size, &im->st[im->n_st], err)
                         : st_open(path, &im->st[im->n_st], err);
    if (rc == CT_OK) im->n_st++;
    return rc;
}

typedef struct shard_name {
    const char *name;
    int32_t     file;
} shard_name;

static int by_shard_name(const void *a, const void *b) {
    const shard_name *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->file > y->file) - (x->file < y->file);
}

/* A tensor name held by two shards refused, naming both: sorted, O(n log n) in all tensors. */
static int32_t no_tensor_twice(const ct_import *im, const char *index, ct_error *err) {
    size_t n = 0;
    for (int32_t k = 0; k < im->n_st; k++) n += (size_t)im->st[k].n;
    shard_name *all = malloc((n + 1) * sizeof *all);
    if (!all) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    n = 0;
    for (int32_t k = 0; k < im->n_st; k++)
        for (int32_t j = 0; j < im->st[k].n; j++) all[n++] = (shard_name){im->st[k].t[j].name, k};
    qsort(all, n, sizeof *all, by_shard_name);
    int32_t rc = CT_OK;
    for (size_t i = 1; rc == CT_OK && i < n; i++)
        if (!strcmp(all[i - 1].name, all[i].name))
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: tensor %s is in both shard %s and shard "
                              "%s ---> each tensor belongs to one shard: give the folder "
                              "save_pretrained wrote, whole, or remove the stray copy", index,
                              all[i].name, im->st[all[i - 1].file].path, im->st[all[i].file].path);
    free(all);
    return rc;
}

/* The shards an index names (its weight_map's files, plain names in its folder), each opened
 * once, every tensor of the map found in its shard, and no tensor in two shards. */
static int32_t open_index(ct_import *im, const char *index, ct_error *err) {
    json_doc *doc = NULL;
    const char *hint = "give the folder save_pretrained wrote, whole";
    int32_t rc = json_read_file(index, "safetensors index", hint, INDEX_MAX, &doc, err);
    if (rc != CT_OK) return rc;
    const json_value *map = json_get(json_root(doc), "weight_map");
    char dir[PATH_MAX], path[2 * PATH_MAX];
    const char *slash = strrchr(index, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - index) : 1, slash ? index : ".");
    char **names = calloc(MAX_SHARDS, sizeof *names);
    int32_t *by = calloc(MAX_SHARDS, sizeof *by); /* names' indices sorted by name */
    int32_t n_names = 0;
    if (!names || !by) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    if (rc == CT_OK && (!map || map->type != JSON_OBJECT || map->n == 0))
        rc = ct_error_set(err, CT_ERR_INVALID, "%s has no weight_map object ---> %s", index, hint);
    for (size_t i = 0; rc == CT_OK && i < map->n; i++) {
        const char *file = json_string(&map->items[i]);
        if (!file || !*file || strchr(file, '/') || !strcmp(file, "..") || !ends_with(file, ".safetensors")) {
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: weight_map[\"%s\"] is not a .safetensors "
                              "file of the index's folder ---> %s", index, map->keys[i], hint);
            break;
        }
        int32_t lo = 0, hi = n_names, k = -1; /* a binary search: O(log shards) a key */
        while (lo < hi && k < 0) {
            int32_t mid = lo + (hi - lo) / 2, c = strcmp(file, names[by[mid]]);
            if (c == 0) k = by[mid];
            else if (c < 0) hi = mid;
            else lo = mid + 1;
        }
        if (k < 0) {
            if (n_names == MAX_SHARDS) {
                rc = ct_error_set(err, CT_ERR_INVALID, "%s names more than %d shards", index,
                                  MAX_SHARDS);
                break;
            }
            memmove(by + lo + 1, by + lo, (size_t)(n_names - lo) * sizeof *by);
            by[lo] = k = n_names;
            if (!(names[n_names++] = strdup(file))) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
            snprintf(path, sizeof path, "%s/%s", dir, file);
            if (rc == CT_OK) rc = add_file(im, path, -1, 0, err);
        }
        if (rc == CT_OK && !st_find(&im->st[k], map->keys[i]))
            rc = ct_error_set(err, CT_ERR_INVALID, "%s maps %s to %s, which does not hold it ---> "
                              "%s", index, map->keys[i], file, hint);
    }
    if (rc == CT_OK && im->n_st > 1) rc = no_tensor_twice(im, index, err);
    for (int32_t k = 0; names && k < n_names; k++) free(names[k]);
    free(names);
    free(by);
    json_free(doc);
    return rc;
}

/* The weights of init_from: the file open on fd (a safetensors file, or an index), else the
 * folder's model.safetensors or index. */
static int32_t open_weights(ct_import *im, int fd, uint64_t size, ct_error *err) {
    char path[PATH_MAX + 64];
    if (fd >= 0 && ends_with(im->path, ".index.json")) {
        close(fd);
        return open_index(im, im->path, err);
    }
    if (fd >= 0) return add_file(im, im->path, fd, size, err);
    snprintf(path, sizeof path, "%s/model.safetensors", im->path);
    if (access(path, F_OK) == 0) return add_file(im, path, -1, 0, err);
    snprintf(path, sizeof path, "%s/" INDEX_NAME, im->path);
    if (access(path, F_OK) == 0) return open_index(im, path, err);
    snprintf(path, sizeof path, "%s/pytorch_model.bin", im->path);
    return ct_error_set(err, CT_ERR_INVALID, "folder %s holds neither model.safetensors nor "
                        INDEX_NAME "%s ---> save the model with safetensors (save_pretrained's "
                        "default) or give the weights file", im->path,
                        access(path, F_OK) == 0 ? " (only pytorch_model.bin, which ctrain does "
                        "not read)" : "");
}

/* The weights (see open_weights) and every tensor of this model found and checked. */
static int32_t open_safetensors(ct_import *im, int fd, uint64_t size, const host_config *cfg,
                                const ct_model_desc *d, int say, ct_error *err) {
    int32_t rc = open_weights(im, fd, size, err);
    if (rc != CT_OK) return rc;
    const char *named = st_meta(&im->st[0], "ctrain.layout");
    int32_t f;
    int32_t target = named ? layout_target_from_name(named)
                     : find_tensor(im, "transformer.wte.weight", &f)    ? LAYOUT_HF_GPT2
                     : find_tensor(im, "model.embed_tokens.weight", &f) ? LAYOUT_HF_LLAMA
                                                                        : LAYOUT_CTRAIN;
    if (target < 0 || target == LAYOUT_LLMC)
        return ct_error_set(err, CT_ERR_INVALID, "%s: metadata ctrain.layout = '%s' is not "
                            "ctrain, hf-gpt2 or hf-llama ---> the file was not written by "
                            "`ctrain export`", im->path, named);
    if ((rc = layout_build(cfg, d, target, &im->lay, err)) != CT_OK) {
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        return ct_error_set(err, rc, "%s holds a %s model, which cannot be loaded into this "
                            "one: %s", im->path, layout_target_name(target), why);
    }
    im->src = calloc((size_t)im->lay.n + 1, sizeof *im->src);
    im->src_file = calloc((size_t)im->lay.n + 1, sizeof *im->src_file);
    char **used = calloc((size_t)im->n_st, sizeof *used);
    for (int32_t k = 0; used && k < im->n_st; k++)
        if (!(used[k] = calloc((size_t)im->st[k].n + 1, 1))) {
            for (int32_t j = 0; j < k; j++) free(used[j]);
            free(used);
            used = NULL;
        }
    if (!im->src || !im->src_file || !used) {
        free(used);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    char list[200] = "", line[480], a[64], b[64], dtypes[64] = "";
    int bad = 0, dropped = 0, converted = 0;
    for (int32_t i = 0; i < im->lay.n; i++) {
        const layout_entry *e = &im->lay.e[i];
        const st_tensor *t = find_tensor(im, e->name, &im->src_file[i]);
        shape_text(a, sizeof a, e->ndim, e->shape);
        if (!t) {
            snprintf(line, sizeof line, "%s %s missing", e->name, a);
            note(list, sizeof list, &bad, &dropped, line, im->path);
            continue;
        }
        used[im->src_file[i]][t - im->st[im->src_file[i]].t] = 1;
        int same = t->ndim == e->ndim;
        for (int32_t k = 0; same && k < e->ndim; k++) same = t->shape[k] == e->shape[k];
        if (!same) {
            shape_text(b, sizeof b, t->ndim, t->shape);
            snprintf(line, sizeof line, "%s expected %s, found %s", e->name, a, b);
            note(list, sizeof list, &bad, &dropped, line, im->path);
        } else if (!st_dtype_readable(t->dtype)) {
            snprintf(line, sizeof line, "%s is %s, not F32, BF16 or F16", e->name, t->dtype);
            note(list, sizeof list, &bad, &dropped, line, im->path);
        } else if (strcmp(t->dtype, "F32")) {
            converted++;
            if (!strstr(dtypes, t->dtype) && strlen(dtypes) + strlen(t->dtype) + 3 < sizeof dtypes)
                snprintf(dtypes + strlen(dtypes), sizeof dtypes - strlen(dtypes), "%s%s",
                         *dtypes ? " and " : "", t->dtype);
        }
        im->src[i] = t;
    }
    for (int32_t k = 0; k < im->n_st; k++)
        for (int32_t j = 0; j < im->st[k].n; j++)
            if (!used[k][j] && !ignorable(target, im->lay.s.tie, im->st[k].t[j].name)) {
                snprintf(line, sizeof line, "%s unexpected (this model has no such tensor)",
                         im->st[k].t[j].name);
                note(list, sizeof list, &bad, &dropped, line, im->path);
            }
    for (int32_t k = 0; k < im->n_st; k++) free(used[k]);
    free(used);
    if (bad)
        return ct_error_set(err, CT_ERR_INVALID, "%s (%s layout): %d tensor%s do not match this "
                            "model: %s%s ---> set [model] to the shape the file was exported "
                            "from", im->path, layout_target_name(target), bad, bad > 1 ? "s" : "",
                            list, dropped ? " (and more: the whole list is above)" : "");
    if (say && converted) {
        char shown[2048];
        fprintf(stderr, "ctrain: init_from %s: %d tensor%s stored as %s, converted to f32 on "
                "load (exactly)\n", printable(im->path, shown, sizeof shown), converted,
                converted > 1 ? "s" : "", dtypes);
    }
    return CT_OK;
}

/* The llm.c file on fd (owned by im from here on). */
static int32_t open_llmc(ct_import *im, int fd, const host_config *cfg, const ct_model_desc *d,
                         ct_error *err) {
    im->fd = fd;
    int32_t rc = layout_build(cfg, d, LAYOUT_LLMC, &im->lay, err);
    if (rc != CT_OK) {
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        return ct_error_set(err, rc, "%s is an llm.c GPT-2 model file, which cannot be loaded "
                            "into this model: %s", im->path, why);
    }
    uint64_t at = 0;
    rc = llmc_check(im->fd, im->path, &im->lay, &at, err);
    if (rc != CT_OK) return rc;
    im->llmc_off = calloc((size_t)im->lay.n + 1, sizeof *im->llmc_off);
    if (!im->llmc_off) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < im->lay.n; i++) {
        im->llmc_off[i] = at;
        at += 4 * layout_numel(&im->lay.e[i]);
    }
    return CT_OK;
}

int32_t import_open(const char *path, const host_config *cfg, const ct_model_desc *d, int say,
                    ct_import **out, ct_error *err) {
    *out = NULL;
    ct_import *im = calloc(1, sizeof *im);
    if (!im) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    im->fd = -1;
    snprintf(im->path, sizeof im->path, "%s", path);
    /* the architecture first: a config.json that disagrees says which key, not which tensor */
    char config[PATH_MAX];
    int32_t rc = CT_OK;
    if (hf_config_path(path, config, sizeof config)) {
        hf_arch a;
        rc = hf_config_read(config, &a, err);
        if (rc == CT_OK) rc = hf_config_check(&a, cfg, err);
    }
    /* a folder's files are found in it; a file is opened once, through the one reader, and its
     * first word tells the format */
    int fd = -1;
    struct stat st = {0};
    int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (rc == CT_OK && !is_dir)
        rc = open_regular(path, "init_from file", "give a Hugging Face folder, a safetensors or "
                          "an llm.c model file ([model] init_from)", &fd, &st, err);
    if (rc == CT_OK) {
        /* a safetensors header of 20-21 MB has a first word like llm.c's date magic: its
         * second word is 0 (a header is under 4 GB) and its JSON opens at byte 8 */
        unsigned char head[9] = {0};
        int32_t first = 0, second = 0;
        int have = fd >= 0 && pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head;
        memcpy(&first, head, 4);
        memcpy(&second, head + 4, 4);
        im->is_llmc = have && llmc_looks_like(first) && !(second == 0 && head[8] == '{');
        rc = im->is_llmc ? open_llmc(im, fd, cfg, d, err)
                         : open_safetensors(im, fd, (uint64_t)st.st_size, cfg, d, say, err);
    }
    if (rc != CT_OK) {
        import_close(im);
        return rc;
    }
    *out = im;
    return CT_OK;
}

int32_t import_unit(ct_import *im, uint32_t u, float *full, ct_error *err) {
    uint64_t max = 1;
    for (int32_t i = 0; i < im->lay.n; i++)
        if (im->lay.e[i].unit == u && layout_numel(&im->lay.e[i]) > max)
            max = layout_numel(&im->lay.e[i]);
    float *buf = malloc(max * sizeof *buf);
    if (!buf) return ct_error_set(err, CT_ERR_NOMEM, "out of memory reading %s", im->path);
    int32_t rc = CT_OK;
    for (int32_t i = 0; rc == CT_OK && i < im->lay.n; i++) {
        const layout_entry *e = &im->lay.e[i];
        if (e->unit != u) continue;
        if (im->is_llmc) {
            uint64_t n = 4 * layout_numel(e), done = 0;
            while (rc == CT_OK && done < n) {
                ssize_t k = pread(im->fd, (char *)buf + done, n - done,
                                  (off_t)(im->llmc_off[i] + done));
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0)
                    rc = ct_error_set(err, CT_ERR_IO, "cannot read %s of %s: %s", e->name,
                                      im->path, k < 0 ? strerror(errno) : "file shrank");
                else done += (uint64_t)k;
            }
        } else {
            rc = st_read_f32(&im->st[im->src_file[i]], im->src[i], buf, err);
        }
        for (uint64_t k = 0, n = layout_numel(e); rc == CT_OK && k < n; k++)
            if (!isfinite(buf[k]))
                rc = ct_error_set(err, CT_ERR_INVALID, "%s: tensor %s holds %s at element %llu "
                                  "---> the file's weights are not usable: give a file saved "
                                  "from a healthy model", im->path, e->name,
                                  isnan(buf[k]) ? "NaN" : "Inf", (unsigned long long)k);
        if (rc == CT_OK && full) layout_put(e, buf, full);
    }
    free(buf);
    return rc;
}

int32_t import_check_values(ct_import *im, ct_error *err) {
    uint32_t units = 0;
    for (int32_t i = 0; i < im->lay.n; i++)
        if (im->lay.e[i].unit + 1 > units) units = im->lay.e[i].unit + 1;
    int32_t rc = CT_OK;
    for (uint32_t u = 0; u < units && rc == CT_OK; u++) rc = import_unit(im, u, NULL, err);
    return rc;
}
