/* init_ckpt.c — [model] init_from = a ctrain checkpoint or run folder (see init_ckpt.h): which
 * checkpoint, whether its model is this one, and its weights unit by unit (checkpoint.c reads
 * and verifies the files). */
#include "run/init_ckpt.h"

#include "base/init.h"
#include "base/launcher.h"
#include "base/printable.h"
#include "run/checkpoint.h"
#include "weights/hf_config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct init_ckpt {
    ckpt_source *src;
    uint32_t     n_units;
};

int init_ckpt_kind(const char *init_from) {
    char probe[PATH_MAX + 32];
    struct stat st;
    if (!init_from || !*init_from || stat(init_from, &st) != 0 || !S_ISDIR(st.st_mode))
        return INIT_CKPT_NONE;
    if (snprintf(probe, sizeof probe, "%s/rank_00000.bin", init_from) < (int)sizeof probe &&
        stat(probe, &st) == 0)
        return INIT_CKPT_STEP;
    if (snprintf(probe, sizeof probe, "%s/checkpoints", init_from) < (int)sizeof probe &&
        stat(probe, &st) == 0 && S_ISDIR(st.st_mode))
        return INIT_CKPT_RUN;
    return INIT_CKPT_NONE;
}

/* err's message without its hint (" ---> ..."), into why: the caller gives its own. */
static void reason(const ct_error *err, char *why, size_t cap) {
    snprintf(why, cap, "%s", err->message);
    char *hint = strstr(why, " ---> ");
    if (hint) *hint = '\0';
}

static int is_free_key(const char *key) {
    static const char *const free_keys[] = INIT_CKPT_FREE_KEYS;
    for (int i = 0; free_keys[i]; i++)
        if (!strcmp(free_keys[i], key)) return 1;
    return 0;
}

/* The fine-tuning run must not read its weights from the folder it writes into. */
static int32_t not_own_out_dir(const host_config *cfg, const char *init_from, ct_error *err) {
    const char *out = config_get(cfg, "run", "out_dir");
    char a[PATH_MAX], b[PATH_MAX];
    if (!out || !realpath(init_from, a) || !realpath(out, b)) return CT_OK;
    size_t n = strlen(b);
    if (strcmp(a, b) && !(strncmp(a, b, n) == 0 && a[n] == '/')) return CT_OK;
    return ct_error_set(err, CT_ERR_INVALID, "%s: [model] init_from = %s is inside this run's "
                        "own [run] out_dir %s, which the run writes into ---> fine-tune into "
                        "another out_dir, or continue that run with `ctrain train --resume`",
                        config_origin(cfg, "model", "init_from"), init_from, out);
}

/* from_config = true: every [model] key cfg leaves out, from the checkpoint's config.ini. */
static int32_t fill_from(host_config *cfg, const char *dir, ct_error *err) {
    int32_t on = 0;
    if (!config_get(cfg, "model", "from_config") ||
        config_get_bool(cfg, "model", "from_config", &on, NULL) != CT_OK || !on)
        return CT_OK; /* a value that is not a bool is [model]'s validation's to report */
    char path[PATH_MAX + 16];
    if (snprintf(path, sizeof path, "%s/config.ini", dir) >= (int)sizeof path)
        return ct_error_set(err, CT_ERR_INVALID, "init_from path too long: %s", dir);
    host_config *saved = config_new();
    if (!saved) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = config_load_file(saved, path, err);
    int32_t n = rc == CT_OK ? config_key_count(saved, "model") : 0;
    for (int32_t i = 0; rc == CT_OK && i < n; i++) {
        const char *key = config_key_name(saved, "model", i);
        if (is_free_key(key) || config_get(cfg, "model", key)) continue;
        rc = config_set(cfg, "model", key, config_get(saved, "model", key), path, err);
    }
    config_free(saved);
    return rc;
}

int32_t init_ckpt_resolve(host_config *cfg, ct_error *err) {
    const char *init = config_get(cfg, "model", "init_from");
    int kind = init_ckpt_kind(init);
    if (kind == INIT_CKPT_NONE) return CT_OK;
    int32_t rc = not_own_out_dir(cfg, init, err);
    if (rc != CT_OK) return rc;
    char dir[PATH_MAX];
    if (kind == INIT_CKPT_RUN) {
        int64_t step = 0;
        char given[PATH_MAX], origin[PATH_MAX + 64], shown[2 * PATH_MAX];
        snprintf(given, sizeof given, "%s", init);
        if ((rc = checkpoint_find(given, dir, sizeof dir, &step, err)) != CT_OK) {
            char why[sizeof err->message];
            reason(err, why, sizeof why);
            return ct_error_set(err, rc, "%s: [model] init_from = %s: %s ---> give a run folder "
                                "with a valid checkpoint, or one of its checkpoint folders "
                                "(OUT/checkpoints/step_NNNNNNNN)",
                                config_origin(cfg, "model", "init_from"), given, why);
        }
        if (launcher_current()->rank == 0)
            fprintf(stderr, "ctrain: [model] init_from = %s is a run folder: its newest valid "
                    "checkpoint is %s (step %lld)\n", printable(given, shown, sizeof shown / 2),
                    printable(dir, shown + sizeof shown / 2, sizeof shown / 2), (long long)step);
        snprintf(origin, sizeof origin, "%s (the newest checkpoint of %s)",
                 config_origin(cfg, "model", "init_from"), given);
        if ((rc = config_set(cfg, "model", "init_from", dir, origin, err)) != CT_OK) return rc;
    } else {
        snprintf(dir, sizeof dir, "%s", init);
    }
    return fill_from(cfg, dir, err);
}


/* This run's [model] against the checkpoint's, key by key (see INIT_CKPT_FREE_KEYS). */
static int32_t same_model(const host_config *cfg, const host_config *saved, const char *dir,
                          ct_error *err) {
    static const char *const free_keys[] = INIT_CKPT_FREE_KEYS;
    const char *key, *now, *then;
    if (checkpoint_model_differs(cfg, saved, free_keys, &key, &now, &then))
        return ct_error_set(err, CT_ERR_INVALID,
                            "%s: [model] %s = %s, but init_from's checkpoint %s was trained "
                            "with %s = %s (%s/config.ini) ---> a checkpoint's weights load "
                            "only into its own model: set [model] %s = %s, or [model] "
                            "from_config = true to take every key [model] leaves out from "
                            "the checkpoint", config_origin(cfg, "model", key), key,
                            now ? now : "(absent)", dir, key, then ? then : "(absent)", dir,
                            key, then ? then : "(remove the key)");
    return CT_OK;
}

int32_t init_ckpt_open(const char *path, const host_config *cfg, const ct_model_desc *d, int say,
                       init_ckpt **out, ct_error *err) {
    *out = NULL;
    char dir[PATH_MAX];
    int64_t step = 0;
    int32_t rc = CT_OK;
    if (init_ckpt_kind(path) == INIT_CKPT_RUN) /* not resolved by wiring: resolve here */
        rc = checkpoint_find(path, dir, sizeof dir, &step, err);
    else snprintf(dir, sizeof dir, "%s", path);
    init_ckpt *c = rc == CT_OK ? calloc(1, sizeof *c) : NULL;
    if (rc == CT_OK && !c) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    if (rc == CT_OK && (rc = checkpoint_source_open(dir, &c->src, err)) != CT_OK) {
        char why[sizeof err->message];
        reason(err, why, sizeof why);
        ct_error_set(err, rc, "checkpoint %s: %s ---> give a complete checkpoint folder "
                     "(OUT/checkpoints/step_NNNNNNNN) or a run folder whose newest valid "
                     "checkpoint is taken", dir, why);
    }
    if (rc == CT_OK) rc = same_model(cfg, checkpoint_source_config(c->src), dir, err);
    if (rc == CT_OK) {
        c->n_units = checkpoint_source_units(c->src);
        if (c->n_units != d->n_units)
            rc = ct_error_set(err, CT_ERR_INVALID, "checkpoint %s has %u parameter units; this "
                              "model has %u ---> give a checkpoint of this model", dir,
                              c->n_units, d->n_units);
    }
    for (uint32_t u = 0; rc == CT_OK && u < c->n_units; u++)
        if (checkpoint_source_numel(c->src, u) != init_unit_numel(d, u))
            rc = ct_error_set(err, CT_ERR_INVALID, "checkpoint %s: unit %u (%s) has %llu "
                              "parameters saved, this model's has %llu ---> give a checkpoint "
                              "of this model (its config.ini's [model])", dir, u,
                              d->units[u].name,
                              (unsigned long long)checkpoint_source_numel(c->src, u),
                              (unsigned long long)init_unit_numel(d, u));
    if (rc != CT_OK) {
        init_ckpt_close(c);
        return rc;
    }
    if (say && launcher_current()->rank == 0) {
        char shown[PATH_MAX * 2];
        fprintf(stderr, "ctrain: [model] init_from = %s: the weights of step %lld (saved by %d "
                "rank%s), reassembled; its optimizer state, data position and step are not "
                "loaded: this run starts at step 0 with a fresh optimizer (fine-tuning) ---> to "
                "continue that run instead, train in its out_dir with --resume\n",
                printable(dir, shown, sizeof shown), (long long)checkpoint_source_step(c->src),
                (int)checkpoint_source_world(c->src),
                checkpoint_source_world(c->src) == 1 ? "" : "s");
    }
    *out = c;
    return CT_OK;
}

int32_t init_ckpt_unit(init_ckpt *c, uint32_t u, float *full, ct_error *err) {
    if (u >= c->n_units)
        return ct_error_set(err, CT_ERR_INVALID, "unit %u is not in the checkpoint", u);
    return checkpoint_source_unit(c->src, u, full, err);
}

void init_ckpt_close(init_ckpt *c) {
    if (!c) return;
    checkpoint_source_close(c->src);
    free(c);
}

/* ---- init_ckpt_source: the same functions behind host_model_source's members ---- */
static int32_t source_settle(host_config *cfg, ct_error *err) {
    int32_t rc = init_ckpt_resolve(cfg, err);
    if (rc != CT_OK || init_ckpt_kind(config_get(cfg, "model", "init_from"))) return rc;
    return hf_config_fill(cfg, err);
}

static int32_t source_open(const char *path, const host_config *cfg, const ct_model_desc *d,
                           int say, void **src, ct_error *err) {
    init_ckpt *c = NULL;
    int32_t rc = init_ckpt_open(path, cfg, d, say, &c, err);
    *src = c;
    return rc;
}

static int32_t source_unit(void *src, uint32_t u, float *full, ct_error *err) {
    return init_ckpt_unit(src, u, full, err);
}

static void source_close(void *src) { init_ckpt_close(src); }

const host_model_source init_ckpt_source = {
    .settle = source_settle,
    .is_checkpoint = init_ckpt_kind,
    .open_source = source_open,
    .unit = source_unit,
    .close_source = source_close,
};
