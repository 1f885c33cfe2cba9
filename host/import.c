/* import.c — [model] init_from (see import.h). */
#include "import.h"

#include "export_layout.h"
#include "files.h"
#include "llmc.h"
#include "safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ct_import {
    char     path[4096];
    int      is_llmc;
    st_file  st;
    int      fd;          /* llm.c file */
    uint64_t *llmc_off;   /* (n entries) byte offset of each entry in the llm.c file */
    layout   lay;
    const st_tensor **src; /* (n entries) the safetensors tensor of each entry */
};

void import_close(ct_import *im) {
    if (!im) return;
    if (im->is_llmc) {
        if (im->fd >= 0) close(im->fd);
    } else {
        st_close(&im->st);
    }
    layout_free(&im->lay);
    free(im->llmc_off);
    free(im->src);
    free(im);
}

/* Append "; text" to a mismatch list held in buf (cap bytes); counts what did not fit. Every
 * line also goes to stderr once one has not fitted (the first ones then too), so the whole list
 * is always shown. */
static void note(char *buf, size_t cap, int *n, int *dropped, const char *text,
                 const char *path) {
    size_t at = strlen(buf);
    if (*dropped == 0 && at + strlen(text) + 3 >= cap) { /* the first that does not fit */
        fprintf(stderr, "ctrain: init_from %s: every mismatch:\n", path);
        for (const char *p = buf; *p;) {
            size_t k = strcspn(p, ";");
            fprintf(stderr, "  %.*s\n", (int)k, p);
            p += k;
            while (*p == ';' || *p == ' ') p++;
        }
    }
    if (*dropped || at + strlen(text) + 3 >= cap) {
        fprintf(stderr, "  %s\n", text);
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

/* Tensors a Hugging Face GPT-2 file may hold that are not parameters (or are tied). */
static int gpt2_ignorable(const char *name) {
    size_t n = strlen(name);
    return !strcmp(name, "lm_head.weight") ||
           (n > 10 && !strcmp(name + n - 10, ".attn.bias")) ||
           (n > 17 && !strcmp(name + n - 17, ".attn.masked_bias"));
}

/* The safetensors file on fd (owned by im->st from here on). */
static int32_t open_safetensors(ct_import *im, int fd, uint64_t size, const host_config *cfg,
                                const ct_model_desc *d, ct_error *err) {
    int32_t rc = st_open_fd(fd, im->path, size, &im->st, err);
    if (rc != CT_OK) return rc;
    const char *named = st_meta(&im->st, "ctrain.layout");
    int32_t target = named ? layout_target_from_name(named)
                     : st_find(&im->st, "transformer.wte.weight")    ? LAYOUT_HF_GPT2
                     : st_find(&im->st, "model.embed_tokens.weight") ? LAYOUT_HF_LLAMA
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
    char *used = calloc((size_t)im->st.n + 1, 1);
    if (!im->src || !used) {
        free(used);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    char list[200] = "", line[480], a[64], b[64];
    int bad = 0, dropped = 0;
    for (int32_t i = 0; i < im->lay.n; i++) {
        const layout_entry *e = &im->lay.e[i];
        const st_tensor *t = st_find(&im->st, e->name);
        shape_text(a, sizeof a, e->ndim, e->shape);
        if (!t) {
            snprintf(line, sizeof line, "%s %s missing", e->name, a);
            note(list, sizeof list, &bad, &dropped, line, im->path);
            continue;
        }
        used[t - im->st.t] = 1;
        int same = t->ndim == e->ndim;
        for (int32_t k = 0; same && k < e->ndim; k++) same = t->shape[k] == e->shape[k];
        if (!same) {
            shape_text(b, sizeof b, t->ndim, t->shape);
            snprintf(line, sizeof line, "%s expected %s, found %s", e->name, a, b);
            note(list, sizeof list, &bad, &dropped, line, im->path);
        } else if (strcmp(t->dtype, "F32") != 0) {
            snprintf(line, sizeof line, "%s is %s, expected F32", e->name, t->dtype);
            note(list, sizeof list, &bad, &dropped, line, im->path);
        }
        im->src[i] = t;
    }
    for (int32_t j = 0; j < im->st.n; j++)
        if (!used[j] && !(target == LAYOUT_HF_GPT2 && gpt2_ignorable(im->st.t[j].name))) {
            snprintf(line, sizeof line, "%s unexpected (this model has no such tensor)",
                     im->st.t[j].name);
            note(list, sizeof list, &bad, &dropped, line, im->path);
        }
    free(used);
    if (bad)
        return ct_error_set(err, CT_ERR_INVALID, "%s (%s layout): %d tensor%s do not match this "
                            "model: %s%s ---> set [model] to the shape the file was exported "
                            "from", im->path, layout_target_name(target), bad, bad > 1 ? "s" : "",
                            list, dropped ? " (and more: the whole list is above)" : "");
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

int32_t import_open(const char *path, const host_config *cfg, const ct_model_desc *d,
                    ct_import **out, ct_error *err) {
    *out = NULL;
    ct_import *im = calloc(1, sizeof *im);
    if (!im) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    im->fd = -1;
    im->st.fd = -1;
    snprintf(im->path, sizeof im->path, "%s", path);
    /* opened once, through the one reader; the first word tells the format */
    int fd;
    struct stat st;
    int32_t rc = open_regular(path, "init_from file", "give a safetensors or llm.c model file "
                              "([model] init_from)", &fd, &st, err);
    if (rc != CT_OK) {
        import_close(im);
        return rc;
    }
    int32_t first = 0;
    im->is_llmc = pread(fd, &first, 4, 0) == 4 && llmc_looks_like(first);
    rc = im->is_llmc ? open_llmc(im, fd, cfg, d, err)
                     : open_safetensors(im, fd, (uint64_t)st.st_size, cfg, d, err);
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
            rc = st_read_f32(&im->st, im->src[i], buf, err);
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
