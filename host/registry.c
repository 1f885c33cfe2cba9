/* registry.c — finds plugin .so files on the search path, loads them (RTLD_NOW|RTLD_LOCAL, never
 * unloaded while open), checks the ABI and copies descriptor, vtable and schema into host-owned
 * structs of this build's sizes (zero-extended). See registry.h for the search order.
 * Not for: section ownership (wiring.c) or creating plugin instances (rank.c).
 */
#include "registry.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct problem {
    char *path;
    char *message;
} problem;

struct ct_registry {
    char      **dirs;
    int32_t     n_dirs;
    ct_plugin **plugins;   /* active, first of each kind+name */
    int32_t     n_plugins, cap_plugins;
    ct_plugin **shadowed;
    int32_t     n_shadowed, cap_shadowed;
    problem    *problems;
    int32_t     n_problems, cap_problems;
    void      **handles;   /* every dlopen handle; never closed (see registry_close) */
    int32_t     n_handles, cap_handles;
};

/* ---- kinds --------------------------------------------------------------------------- */

static const char *const kind_names[] = {NULL,        "model", "loss",  "strategy",
                                         "precision", "comm",  "device"};
#define N_KINDS 6

const char *kind_name(int32_t kind) {
    return kind >= 1 && kind <= N_KINDS ? kind_names[kind] : "?";
}

int32_t kind_from_name(const char *name) {
    for (int32_t k = 1; k <= N_KINDS; k++)
        if (!strcmp(kind_names[k], name)) return k;
    return 0;
}

/* sizeof the host's vtable for a kind; 0 for an unknown kind. */
static size_t vtable_size(int32_t kind) {
    switch (kind) {
    case CT_KIND_MODEL: return sizeof(ct_model_vtable);
    case CT_KIND_LOSS: return sizeof(ct_loss_vtable);
    case CT_KIND_STRATEGY: return sizeof(ct_strategy_vtable);
    case CT_KIND_PRECISION: return sizeof(ct_precision_vtable);
    case CT_KIND_COMM: return sizeof(struct ct_comm_vtable);
    case CT_KIND_DEVICE: return sizeof(struct ct_device_vtable);
    default: return 0;
    }
}

/* ---- growable arrays ----------------------------------------------------------------- */

static int grow(void **arr, int32_t *cap, int32_t n, size_t elem) {
    if (n < *cap) return 1;
    int32_t c = *cap ? 2 * *cap : 16;
    void *p = realloc(*arr, (size_t)c * elem);
    if (!p) return 0;
    *arr = p;
    *cap = c;
    return 1;
}

static int add_problem(ct_registry *reg, const char *path, const char *msg) {
    if (!grow((void **)&reg->problems, &reg->cap_problems, reg->n_problems, sizeof(problem)))
        return 0;
    problem *p = &reg->problems[reg->n_problems];
    p->path = strdup(path);
    p->message = strdup(msg);
    if (!p->path || !p->message) {
        free(p->path);
        free(p->message);
        return 0;
    }
    reg->n_problems++;
    return 1;
}

static void free_plugin(ct_plugin *p) {
    if (!p) return;
    free((void *)p->path);
    free((void *)p->vtable);
    free((void *)p->params);
    free(p);
}

/* ---- loading one file ---------------------------------------------------------------- */

static int valid_name(const char *s) {
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

/* Copy the plugin's schema (stride param_struct_size) into our layout. */
static int32_t convert_params(ct_plugin *p, const char *path, ct_error *err) {
    const ct_plugin_desc *d = &p->desc;
    size_t stride = d->param_struct_size;
    int32_t n = 0;
    if (d->params) {
        if (stride < offsetof(ct_param_spec, help) + sizeof(const char *))
            return ct_error_set(err, CT_ERR_INVALID, "plugin %s: param_struct_size %u is smaller "
                                "than a v1.0 ct_param_spec ---> set it to sizeof(ct_param_spec)",
                                path, d->param_struct_size);
        const char *base = (const char *)d->params;
        while (((const ct_param_spec *)(base + (size_t)n * stride))->key) {
            if (++n > 4096)
                return ct_error_set(err, CT_ERR_INVALID, "plugin %s: its parameter list has no "
                                    "CT_PARAM_END ---> end the array with CT_PARAM_END", path);
        }
    }
    ct_param_spec *out = calloc((size_t)n + 1, sizeof *out);
    if (!out) return ct_error_set(err, CT_ERR_NOMEM, "out of memory loading %s", path);
    size_t copy = stride < sizeof *out ? stride : sizeof *out;
    for (int32_t i = 0; i < n; i++) {
        memcpy(&out[i], (const char *)d->params + (size_t)i * stride, copy);
        const ct_param_spec *s = &out[i];
        if (!valid_name(s->key) || s->type < CT_PARAM_TYPE_BOOL || s->type > CT_PARAM_TYPE_ENUM ||
            (s->type == CT_PARAM_TYPE_ENUM && !s->choices)) {
            free(out);
            return ct_error_set(err, CT_ERR_INVALID, "plugin %s: parameter %d ('%s') has a bad "
                                "key, type or choices ---> keys are [a-z0-9_]+, enums need "
                                "choices", path, (int)i, s->key ? s->key : "(null)");
        }
    }
    p->params = out;
    p->n_params = n;
    return CT_OK;
}

/* Load `path`: a new ct_plugin on success (*handle_out set, caller keeps it open), NULL with
 * err filled otherwise (the handle is closed again). */
static ct_plugin *load_file(const char *path, void **handle_out, ct_error *err) {
    *handle_out = NULL;
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        ct_error_set(err, CT_ERR_INVALID, "cannot load %s: %s ---> install the library it "
                     "needs or rebuild it", path, why ? why : "unknown dlopen error");
        return NULL;
    }
    ct_plugin *p = NULL;
    ct_plugin_entry_fn entry = (ct_plugin_entry_fn)(uintptr_t)dlsym(h, CT_ENTRY_SYMBOL);
    if (!entry) {
        for (int major = CT_ABI_MAJOR + 1; major <= 9; major++) {
            char sym[32];
            snprintf(sym, sizeof sym, "ctrain_plugin_v%d", major);
            if (dlsym(h, sym)) {
                ct_error_set(err, CT_ERR_INVALID, "plugin %s was built for ctrain ABI %d.x "
                             "(it exports %s); this ctrain speaks %d.%d ---> upgrade ctrain or "
                             "rebuild the plugin against this SDK", path, major, sym,
                             CT_ABI_MAJOR, CT_ABI_MINOR);
                goto out_close;
            }
        }
        ct_error_set(err, CT_ERR_INVALID, "%s is not a ctrain plugin: it has no symbol %s ---> "
                     "export it with CT_EXPORT (see docs/plugin-guide.md)", path,
                     CT_ENTRY_SYMBOL);
        goto out_close;
    }
    const ct_plugin_desc *d = entry();
    if (!d) {
        ct_error_set(err, CT_ERR_INVALID, "plugin %s: %s() returned NULL", path, CT_ENTRY_SYMBOL);
        goto out_close;
    }
    if (d->struct_size < offsetof(ct_plugin_desc, abi_minor) + sizeof(uint16_t)) {
        ct_error_set(err, CT_ERR_INVALID, "plugin %s: descriptor struct_size %u is too small "
                     "---> set .struct_size = sizeof(ct_plugin_desc)", path, d->struct_size);
        goto out_close;
    }
    if (d->abi_major != CT_ABI_MAJOR || d->abi_minor > CT_ABI_MINOR) {
        ct_error_set(err, CT_ERR_INVALID, "plugin %s was built for ctrain ABI %u.%u; this ctrain "
                     "speaks %d.%d ---> rebuild the plugin against this SDK or upgrade ctrain",
                     path, d->abi_major, d->abi_minor, CT_ABI_MAJOR, CT_ABI_MINOR);
        goto out_close;
    }
    p = calloc(1, sizeof *p);
    if (!p) {
        ct_error_set(err, CT_ERR_NOMEM, "out of memory loading %s", path);
        goto out_close;
    }
    memcpy(&p->desc, d, d->struct_size < sizeof p->desc ? d->struct_size : sizeof p->desc);
    p->path = strdup(path);
    if (!p->path) {
        ct_error_set(err, CT_ERR_NOMEM, "out of memory loading %s", path);
        goto out_free_plugin;
    }
    size_t vsize = vtable_size(p->desc.kind);
    if (!vsize) {
        ct_error_set(err, CT_ERR_INVALID, "plugin %s: unknown kind %d ---> use a ct_kind value",
                     path, (int)p->desc.kind);
        goto out_free_plugin;
    }
    if (!valid_name(p->desc.name)) {
        ct_error_set(err, CT_ERR_INVALID, "plugin %s: name '%s' is not [a-z0-9_]+", path,
                     p->desc.name ? p->desc.name : "(null)");
        goto out_free_plugin;
    }
    if (!p->desc.vtable) {
        ct_error_set(err, CT_ERR_INVALID, "plugin %s: descriptor has no vtable", path);
        goto out_free_plugin;
    }
    uint32_t theirs = *(const uint32_t *)p->desc.vtable;
    if (theirs < sizeof(uint32_t) + sizeof(void *) || theirs > (1u << 16)) {
        ct_error_set(err, CT_ERR_INVALID, "plugin %s: vtable struct_size %u is not plausible "
                     "---> set .struct_size = sizeof(ct_%s_vtable)", path, theirs,
                     kind_name(p->desc.kind));
        goto out_free_plugin;
    }
    void *vt = calloc(1, vsize);
    if (!vt) {
        ct_error_set(err, CT_ERR_NOMEM, "out of memory loading %s", path);
        goto out_free_plugin;
    }
    memcpy(vt, p->desc.vtable, theirs < vsize ? theirs : vsize);
    p->vtable = vt;
    if (!p->desc.version) p->desc.version = "?";
    if (!p->desc.summary) p->desc.summary = "";
    if (convert_params(p, path, err) != CT_OK) goto out_free_plugin;
    *handle_out = h;
    return p;

out_free_plugin:
    free_plugin(p);
out_close:
    dlclose(h);
    return NULL;
}

/* ---- the registry -------------------------------------------------------------------- */

static ct_plugin *find_active(const ct_registry *reg, int32_t kind, const char *name) {
    for (int32_t i = 0; i < reg->n_plugins; i++)
        if (reg->plugins[i]->desc.kind == kind && !strcmp(reg->plugins[i]->desc.name, name))
            return reg->plugins[i];
    return NULL;
}

static ct_plugin *find_by_path(const ct_registry *reg, const char *path) {
    char *want = realpath(path, NULL);
    if (!want) return NULL;
    ct_plugin *found = NULL;
    for (int32_t pass = 0; pass < 2 && !found; pass++) {
        ct_plugin **list = pass ? reg->shadowed : reg->plugins;
        int32_t n = pass ? reg->n_shadowed : reg->n_plugins;
        for (int32_t i = 0; i < n && !found; i++) {
            char *have = realpath(list[i]->path, NULL);
            if (have && !strcmp(have, want)) found = list[i];
            free(have);
        }
    }
    free(want);
    return found;
}

/* Keep handle and plugin: active when its kind+name is new, else shadowed. */
static int keep(ct_registry *reg, ct_plugin *p, void *h, int shadow_ok) {
    if (!grow((void **)&reg->handles, &reg->cap_handles, reg->n_handles, sizeof(void *)))
        return 0;
    reg->handles[reg->n_handles++] = h;
    if (find_active(reg, p->desc.kind, p->desc.name) && shadow_ok) {
        if (!grow((void **)&reg->shadowed, &reg->cap_shadowed, reg->n_shadowed,
                  sizeof(ct_plugin *)))
            return 0;
        reg->shadowed[reg->n_shadowed++] = p;
        return 1;
    }
    if (!grow((void **)&reg->plugins, &reg->cap_plugins, reg->n_plugins, sizeof(ct_plugin *)))
        return 0;
    reg->plugins[reg->n_plugins++] = p;
    return 1;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int so_filter(const struct dirent *e) {
    size_t n = strlen(e->d_name);
    return n > 3 && !strcmp(e->d_name + n - 3, ".so") && e->d_name[0] != '.';
}

static int32_t scan_dir(ct_registry *reg, const char *dir, ct_error *err) {
    struct dirent **names = NULL;
    int n = scandir(dir, &names, so_filter, by_name);
    if (n < 0) return CT_OK; /* a missing folder is fine */
    int32_t rc = CT_OK;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (rc == CT_OK && !find_by_path(reg, path)) {
            ct_error e = {.struct_size = sizeof e};
            void *h;
            ct_plugin *p = load_file(path, &h, &e);
            if (!p) {
                if (!add_problem(reg, path, e.message))
                    rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory scanning %s", dir);
            } else if (!keep(reg, p, h, 1)) {
                free_plugin(p);
                dlclose(h);
                rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory scanning %s", dir);
            }
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

static int kind_then_name(const void *a, const void *b) {
    const ct_plugin *x = *(ct_plugin *const *)a, *y = *(ct_plugin *const *)b;
    if (x->desc.kind != y->desc.kind) return x->desc.kind - y->desc.kind;
    return strcmp(x->desc.name, y->desc.name);
}

ct_registry *registry_open_dirs(const char *const *dirs, ct_error *err) {
    ct_registry *reg = calloc(1, sizeof *reg);
    if (!reg) return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    int32_t n = 0;
    while (dirs && dirs[n]) n++;
    reg->dirs = calloc((size_t)n + 1, sizeof *reg->dirs);
    if (!reg->dirs) goto out_nomem;
    for (int32_t i = 0; i < n; i++) {
        reg->dirs[i] = strdup(dirs[i]);
        if (!reg->dirs[i]) goto out_nomem;
        reg->n_dirs++;
    }
    for (int32_t i = 0; i < n; i++)
        if (scan_dir(reg, reg->dirs[i], err) != CT_OK) goto out_close;
    if (reg->n_plugins > 1)
        qsort(reg->plugins, (size_t)reg->n_plugins, sizeof *reg->plugins, kind_then_name);
    return reg;
out_nomem:
    ct_error_set(err, CT_ERR_NOMEM, "out of memory");
out_close:
    registry_close(reg);
    return NULL;
}

ct_registry *registry_open(ct_error *err) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *list[64];
    int32_t n = 0;
    char a[PATH_MAX + 16], b[PATH_MAX + 32];
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        snprintf(a, sizeof a, "%s/plugins", exe);
        snprintf(b, sizeof b, "%s/../lib/ctrain/plugins", exe);
        char *real = realpath(b, NULL); /* show <prefix>/lib/..., not <prefix>/bin/../lib/... */
        if (real) {
            snprintf(b, sizeof b, "%s", real);
            free(real);
        }
        list[n++] = a;
        list[n++] = b;
    }
    char *env = getenv("CTRAIN_PLUGIN_PATH") ? strdup(getenv("CTRAIN_PLUGIN_PATH")) : NULL;
    if (env) {
        char *save = NULL;
        for (char *tok = strtok_r(env, ":", &save); tok && n < 63;
             tok = strtok_r(NULL, ":", &save))
            if (*tok) list[n++] = tok;
    }
    list[n] = NULL;
    ct_registry *reg = registry_open_dirs((const char *const *)list, err);
    free(env);
    return reg;
}

void registry_close(ct_registry *reg) {
    if (!reg) return;
    for (int32_t i = 0; i < reg->n_plugins; i++) free_plugin(reg->plugins[i]);
    for (int32_t i = 0; i < reg->n_shadowed; i++) free_plugin(reg->shadowed[i]);
    for (int32_t i = 0; i < reg->n_problems; i++) {
        free(reg->problems[i].path);
        free(reg->problems[i].message);
    }
    for (int32_t i = 0; i < reg->n_dirs; i++) free(reg->dirs[i]);
    /* The objects stay loaded (no dlclose): a plugin may have started threads (OpenMP pools,
     * CUDA, MPI progress threads) that would run unmapped code after an unload. dlopen counts
     * references, so loading the same file again later costs nothing. */
    free(reg->plugins);
    free(reg->shadowed);
    free(reg->problems);
    free(reg->dirs);
    free(reg->handles);
    free(reg);
}

/* ---- resolving ----------------------------------------------------------------------- */

static int names_file(const char *s) {
    size_t n = strlen(s);
    return strchr(s, '/') || (n > 3 && !strcmp(s + n - 3, ".so"));
}

/* Load a file named in the configuration (or find it loaded already). */
static const ct_plugin *resolve_file(ct_registry *reg, const char *value, ct_error *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", value);
    if (!strchr(value, '/')) {
        /* a bare file name: the search folders first, then the current directory */
        for (int32_t i = 0; i < reg->n_dirs; i++) {
            char cand[PATH_MAX];
            snprintf(cand, sizeof cand, "%s/%s", reg->dirs[i], value);
            if (access(cand, F_OK) == 0) {
                snprintf(path, sizeof path, "%s", cand);
                break;
            }
        }
        if (!strchr(path, '/')) snprintf(path, sizeof path, "./%s", value);
    }
    if (access(path, F_OK) != 0)
        return ct_error_set(err, CT_ERR_INVALID, "plugin file %s: %s ---> check the path",
                            path, strerror(errno)), NULL;
    const ct_plugin *known = find_by_path(reg, path);
    if (known) return known;
    void *h;
    ct_plugin *p = load_file(path, &h, err);
    if (!p) return NULL;
    /* A file asked for by path is used even when a plugin of the same name exists. */
    if (!keep(reg, p, h, 0)) {
        free_plugin(p);
        dlclose(h);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    }
    return p;
}

const ct_plugin *registry_resolve(ct_registry *reg, int32_t kind, const char *name_or_path,
                                  ct_error *err) {
    const char *kname = kind_name(kind);
    if (!name_or_path || !*name_or_path)
        return ct_error_set(err, CT_ERR_INVALID, "no %s plugin named ---> name one", kname),
               NULL;
    const ct_plugin *p = NULL;
    if (names_file(name_or_path)) {
        /* a file that failed during the scan: report why */
        for (int32_t i = 0; i < reg->n_problems; i++) {
            char *a = realpath(reg->problems[i].path, NULL), *b = realpath(name_or_path, NULL);
            int same = a && b && !strcmp(a, b);
            free(a);
            free(b);
            if (same)
                return ct_error_set(err, CT_ERR_INVALID, "%s", reg->problems[i].message), NULL;
        }
        p = resolve_file(reg, name_or_path, err);
        if (!p) return NULL;
    } else {
        p = find_active(reg, kind, name_or_path);
        if (!p) {
            for (int32_t k = 1; k <= N_KINDS && !p; k++)
                if (k != kind) p = find_active(reg, k, name_or_path);
            if (!p) {
                /* The expected file failed to load? Say why. */
                char want[128];
                snprintf(want, sizeof want, "/%s_%s.so", kname, name_or_path);
                for (int32_t i = 0; i < reg->n_problems; i++) {
                    const char *path = reg->problems[i].path;
                    size_t lp = strlen(path), lw = strlen(want);
                    if (lp >= lw && !strcmp(path + lp - lw, want))
                        return ct_error_set(err, CT_ERR_INVALID, "%s plugin '%s': %s", kname,
                                            name_or_path, reg->problems[i].message), NULL;
                }
                char avail[300] = "";
                size_t used = 0;
                for (int32_t i = 0; i < reg->n_plugins; i++) {
                    if (reg->plugins[i]->desc.kind != kind) continue;
                    int w = snprintf(avail + used, sizeof avail - used, "%s%s", used ? ", " : "",
                                     reg->plugins[i]->desc.name);
                    if (w < 0 || (size_t)w >= sizeof avail - used) break;
                    used += (size_t)w;
                }
                return ct_error_set(err, CT_ERR_INVALID, "unknown %s plugin '%s' ---> available "
                                    "%s plugins: %s (searched %d folders; see `ctrain plugins`)",
                                    kname, name_or_path, kname, used ? avail : "none",
                                    (int)reg->n_dirs), NULL;
            }
        }
    }
    if (p->desc.kind != kind)
        return ct_error_set(err, CT_ERR_INVALID, "'%s' is a %s plugin; [%s] needs a %s plugin "
                            "---> name a %s plugin (`ctrain plugins` lists them)", name_or_path,
                            kind_name(p->desc.kind), kname, kname, kname), NULL;
    return p;
}

/* ---- listing ------------------------------------------------------------------------- */

int32_t registry_count(const ct_registry *reg) { return reg->n_plugins; }
const ct_plugin *registry_at(const ct_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_plugins ? reg->plugins[i] : NULL;
}
int32_t registry_shadowed_count(const ct_registry *reg) { return reg->n_shadowed; }
const ct_plugin *registry_shadowed_at(const ct_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_shadowed ? reg->shadowed[i] : NULL;
}
int32_t registry_problem_count(const ct_registry *reg) { return reg->n_problems; }
const char *registry_problem_path(const ct_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_problems ? reg->problems[i].path : NULL;
}
const char *registry_problem_message(const ct_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_problems ? reg->problems[i].message : NULL;
}
int32_t registry_dir_count(const ct_registry *reg) { return reg->n_dirs; }
const char *registry_dir_at(const ct_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_dirs ? reg->dirs[i] : NULL;
}
