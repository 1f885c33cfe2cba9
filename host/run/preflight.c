/* preflight.c — the checks `validate` and `train` share before any rank starts (see
 * preflight.h): optimizer settings, world size against the engine, the tokenizers of train and
 * val data, an out_dir that can be a folder, and a dry build of rank 0
 * (rank_dry_open: the same plugin creation, shape check and data opening as rank_open).
 * Not for: schema checks (config.c, wiring.c) or starting ranks (train.c).
 */
#include "run/preflight.h"
#include "data/mixture.h"

#include "plugin/contract.h"
#include "plugin/hostapi.h"
#include "base/launcher.h"
#include "data/data.h"
#include "run/optim.h"
#include "run/rank.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the comm reference create() gets: rank 0 of the configured world, no engine ----- */

static int32_t no_comm(ct_error *err) {
    return ct_error_set(err, CT_ERR_COMM, "no communication before the ranks start ---> a "
                        "plugin's create() may keep its comm reference but not use it");
}
static int32_t nc_rank(void *self) { return (void)self, 0; }
static int32_t nc_world_size(void *self) { return (void)self, 1; }
static int32_t nc_reduce(void *self, const void *send, void *recv, uint64_t count, int32_t dtype,
                         int32_t op, ct_request **req, ct_error *err) {
    (void)self, (void)send, (void)recv, (void)count, (void)dtype, (void)op, (void)req;
    return no_comm(err);
}
static int32_t nc_gather(void *self, const void *send, void *recv, uint64_t count, int32_t dtype,
                         ct_request **req, ct_error *err) {
    (void)self, (void)send, (void)recv, (void)count, (void)dtype, (void)req;
    return no_comm(err);
}
static int32_t nc_broadcast(void *self, void *buf, uint64_t count, int32_t dtype, int32_t root,
                            ct_error *err) {
    (void)self, (void)buf, (void)count, (void)dtype, (void)root;
    return no_comm(err);
}
static int32_t nc_barrier(void *self, ct_error *err) { return (void)self, no_comm(err); }
static int32_t nc_send(void *self, const void *buf, uint64_t count, int32_t dtype, int32_t peer,
                       int32_t tag, ct_error *err) {
    (void)self, (void)buf, (void)count, (void)dtype, (void)peer, (void)tag;
    return no_comm(err);
}
static int32_t nc_recv(void *self, void *buf, uint64_t count, int32_t dtype, int32_t peer,
                       int32_t tag, ct_error *err) {
    (void)self, (void)buf, (void)count, (void)dtype, (void)peer, (void)tag;
    return no_comm(err);
}
static int32_t nc_wait(void *self, ct_request *req, ct_error *err) {
    (void)self, (void)req;
    return no_comm(err);
}
static void nc_abort(void *self, const char *why) { (void)self, (void)why; }

static const ct_comm_vtable no_comm_vtable = {
    .struct_size = sizeof(ct_comm_vtable),
    .rank = nc_rank,
    .world_size = nc_world_size,
    .all_reduce = nc_reduce,
    .reduce_scatter = nc_reduce,
    .all_gather = nc_gather,
    .all_to_all = nc_gather,
    .broadcast = nc_broadcast,
    .barrier = nc_barrier,
    .send = nc_send,
    .recv = nc_recv,
    .wait = nc_wait,
    .abort = nc_abort,
};

/* ---- naming the place in the configuration ------------------------------------------- */

/* err->message = prefix + ": " + err->message; a result too long keeps its end, the hint
 * (ct_message_fit). */
static void prefix_message(ct_error *err, const char *prefix) {
    char full[sizeof err->message + 2 + 2 * CT_VALUE_MAX];
    int n = snprintf(full, sizeof full, "%s: %s", prefix, err->message);
    if (n > 0) ct_message_fit(err->message, sizeof err->message, full, strlen(full));
}

/* Where a plugin's create() error points: the first "[SECTION] KEY" in its message that names
 * a key of the configuration (its FILE:LINE, or its section's when the key took its default),
 * else NULL. */
static const char *plugin_error_origin(const host_config *cfg, const char *msg) {
    for (const char *p = strchr(msg, '['); p; p = strchr(p + 1, '[')) {
        const char *close = strchr(p, ']');
        if (!close || close[1] != ' ' || close - p - 1 >= CT_VALUE_MAX / 4) continue;
        char section[CT_VALUE_MAX / 4], key[CT_VALUE_MAX / 4];
        snprintf(section, sizeof section, "%.*s", (int)(close - p - 1), p + 1);
        if (!config_has_section(cfg, section)) continue;
        size_t n = strspn(close + 2, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "0123456789_.-");
        if (n == 0 || n >= sizeof key) continue;
        snprintf(key, sizeof key, "%.*s", (int)n, close + 2);
        if (!config_get(cfg, section, key)) continue;
        const char *origin = config_origin(cfg, section, key);
        return strcmp(origin, "default") ? origin : config_section_origin(cfg, section);
    }
    return NULL;
}

/* Each plugin's own validate hook (ct_plugin_desc.validate, since ABI 1.2), before anything is
 * created: rank 0 of a world of `world`, the section's resolved values through the host API. An
 * error gets the FILE:LINE of the first "[section] key" it names (else of the section) in front,
 * as create() errors do. */
static int32_t plugin_hooks(const host_config *cfg, const host_wiring *w, int32_t world,
                            ct_error *err) {
    const host_plugin *p[5 + HOST_WIRING_MAX_LOSS] = {w->device, w->comm, w->precision, w->strategy,
                                                  w->model};
    const char *section[5 + HOST_WIRING_MAX_LOSS] = {"device", "comm", "precision", "strategy",
                                                   "model"};
    int32_t n = 5;
    for (int32_t i = 0; i < w->n_loss; i++, n++) {
        p[n] = w->loss[i];
        section[n] = w->loss_section[i];
    }
    for (int32_t i = 0; i < n; i++) {
        if (!p[i]->desc.validate) continue;
        ct_host host;
        hostapi_init(&host, cfg, 0, p[i]->desc.name, NULL);
        ct_create_args a = {.struct_size = sizeof a, .api = hostapi_table(), .host = &host,
                            .section = section[i], .rank = 0, .world_size = world};
        err->code = CT_OK;
        err->message[0] = '\0';
        int32_t rc = p[i]->desc.validate(&a, err);
        if (rc == CT_OK) continue;
        contract_name_silent_error(rc, err, p[i], "validate");
        const char *origin = plugin_error_origin(cfg, err->message);
        if (!origin) origin = config_section_origin(cfg, section[i]);
        if (!origin) origin = config_path(cfg);
        if (strncmp(err->message, origin, strlen(origin))) prefix_message(err, origin);
        return rc;
    }
    return CT_OK;
}

/* [data] train and val must hold tokens of one tokenizer: a validation loss under another
 * tokenizer's ids means nothing. meta.ini beside each (written by `ctrain prepare`) records
 * the tokenizer and its model's checksum; data without one is not judged. */
static int32_t same_tokenizer(const host_config *cfg, ct_error *err) {
    const char *train = mixture_train_path(cfg), *val = config_get(cfg, "data", "val");
    if (!train || !*train || !val || !*val) return CT_OK;
    host_data_meta mt, mv;
    if (data_meta_for(train, &mt, err) != CT_OK) return CT_OK; /* the loader reports it */
    if (data_meta_for(val, &mv, err) != CT_OK) {
        data_meta_free(&mt);
        return CT_OK;
    }
    err->code = CT_OK;
    err->message[0] = '\0';
    int32_t rc = CT_OK;
    if (data_meta_tokenizers_differ(&mt, &mv)) {
        char tt[400], tv[400], dir[PATH_MAX];
        struct stat st;
        if (stat(train, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(dir, sizeof dir, "%s", train);
        else {
            const char *slash = strrchr(train, '/');
            snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - train) : 1,
                     slash ? train : ".");
        }
        rc = ct_error_set(err, CT_ERR_INVALID, "[data] train = %s (%s) and [data] val = %s (%s) "
                          "hold tokens of different tokenizers: train's is %s, says %s; val's is %s, "
                          "says %s: a validation loss across tokenizers means nothing ---> give "
                          "validation shards made with train's tokenizer, e.g. --set "
                          "data.val=%s (its val_*.bin), or none: --set data.val=",
                          train, config_origin(cfg, "data", "train"), val,
                          config_origin(cfg, "data", "val"),
                          data_meta_tokenizer_text(&mt, tt, sizeof tt), mt.path,
                          data_meta_tokenizer_text(&mv, tv, sizeof tv), mv.path, dir);
    }
    data_meta_free(&mt);
    data_meta_free(&mv);
    return rc;
}

/* [run] out_dir, or the nearest of its parents that exists, must be a folder: the path is
 * named as given and as resolved (relative paths are taken from the working directory). */
static int32_t out_dir_usable(const host_config *cfg, ct_error *err) {
    const char *dir = config_get(cfg, "run", "out_dir");
    char abs[PATH_MAX], up[PATH_MAX];
    if (!dir || !*dir) return CT_OK;
    const char *a = config_abs_path(dir, abs, sizeof abs);
    snprintf(up, sizeof up, "%s", a);
    for (;;) {
        struct stat st;
        if (stat(up, &st) == 0) {
            if (S_ISDIR(st.st_mode)) return CT_OK;
            return ct_error_set(err, CT_ERR_INVALID, "%s: [run] out_dir = %s%s%s%s: %s is not a "
                                "folder ---> choose another out_dir",
                                config_origin(cfg, "run", "out_dir"), dir, a != dir ? " (" : "",
                                a != dir ? a : "", a != dir ? ", from the working directory)" : "",
                                up);
        }
        char *slash = strrchr(up, '/');
        if (!slash || slash == up) return CT_OK; /* nothing of it exists: train creates it */
        *slash = '\0';
    }
}

int32_t preflight_check(const host_config *cfg, const host_wiring *w, ct_error *err) {
    host_optim_config oc;
    int32_t rc = optim_config(cfg, &oc, err);
    if (rc != CT_OK) return rc;

    int64_t world = 1;
    config_get_int(cfg, "comm", "world_size", &world, NULL);
    const ct_comm_vtable *cv = w->comm->vtable;
    if (!cv->world_create && world > 1)
        return ct_error_set(err, CT_ERR_INVALID,
                            "%s: [comm] world_size = %lld needs an in-process engine; comm %s "
                            "takes its world from its launcher ---> set [comm] plugin = "
                            "threads, or start with mpirun and drop world_size",
                            config_origin(cfg, "comm", "world_size"), (long long)world,
                            w->comm->desc.name);
    if (!cv->world_create) world = 1;
    /* several launched processes need an engine that takes its world from the launcher */
    if ((rc = launcher_check_comm(launcher_current(), w->comm->desc.name,
                                  cv->world_create != NULL, err)) != CT_OK) {
        char where[CT_VALUE_MAX];
        snprintf(where, sizeof where, "%s: [comm] plugin", config_origin(cfg, "comm", "plugin"));
        prefix_message(err, where);
        return rc;
    }

    if ((rc = plugin_hooks(cfg, w, (int32_t)world, err)) != CT_OK) return rc;
    if ((rc = same_tokenizer(cfg, err)) != CT_OK) return rc;
    if ((rc = out_dir_usable(cfg, err)) != CT_OK) return rc;

    ct_comm_ref comm = {.vt = &no_comm_vtable, .rank = 0, .world_size = (int32_t)world};
    const char *failed = NULL;
    rc = rank_dry_open(cfg, w, (int32_t)world, comm, &failed, err);
    if (rc == CT_OK || !failed) return rc;
    /* a message that already starts at a place in the configuration (rank.c's checks of the
     * data against [model] and [run]) keeps it: no second prefix */
    size_t pl = strlen(config_path(cfg));
    int placed = (!strncmp(err->message, config_path(cfg), pl) && err->message[pl] == ':') ||
                 !strncmp(err->message, "--set: ", 7);
    if (placed) return rc;
    if (!strcmp(failed, "train") || !strcmp(failed, "val")) {
        /* the loader names the shard; add the key that named the data, and where a relative
         * path led (paths are taken from the working directory) */
        char where[2 * CT_VALUE_MAX], abs[PATH_MAX];
        const char *v = config_get(cfg, "data", failed);
        /* a mixture's message names its dataset's section and path itself */
        const char *a = mixture_is_spec(v) ? v : config_abs_path(v, abs, sizeof abs);
        snprintf(where, sizeof where, "%s: [data] %s%s%s%s", config_origin(cfg, "data", failed),
                 failed, a != v ? " (" : "", a != v ? a : "",
                 a != v ? ", from the working directory)" : "");
        prefix_message(err, where);
    } else if (!strcmp(failed, "init_from")) {
        char where[2 * CT_VALUE_MAX], abs[PATH_MAX];
        const char *v = config_get(cfg, "model", "init_from");
        const char *a = config_abs_path(v, abs, sizeof abs);
        snprintf(where, sizeof where, "%s: [model] init_from%s%s%s",
                 config_origin(cfg, "model", "init_from"), a != v ? " (" : "", a != v ? a : "",
                 a != v ? ", from the working directory)" : "");
        prefix_message(err, where);
    } else if (!strcmp(failed, "plugins")) {
        const char *origin = plugin_error_origin(cfg, err->message);
        if (origin && strncmp(err->message, origin, strlen(origin)))
            prefix_message(err, origin);
    }
    return rc;
}

int32_t preflight_print_groups(const host_config *cfg, const host_wiring *w, FILE *out,
                               ct_error *err) {
    int64_t world = 1;
    config_get_int(cfg, "comm", "world_size", &world, NULL);
    ct_comm_ref comm = {.vt = &no_comm_vtable, .rank = 0, .world_size = (int32_t)world};
    return rank_print_groups(cfg, w, comm, out, err);
}
