/* plugin_host.h — the minimal host of the standalone plugin comparison programs
 * (the tests/gpu programs named *_vs_cpu.c): log to stderr, host memory, configuration values from a
 * small table of "section:key=value" overrides, else the plugin's schema default; dlopen of
 * PLUGIN_DIR/<file>.so. Header-only, one includer per program (model_vs_cpu.c, loss_vs_cpu.c,
 * cuda_vs_cpu.c). Not for: the unit tests (tests/unit/harness.h runs the real host code).
 */
#ifndef CT_GPU_PLUGIN_HOST_H
#define CT_GPU_PLUGIN_HOST_H

#include <ctrain/ctrain.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *ph_dir = "build/plugins";    /* PLUGIN_DIR */
static const ct_param_spec *ph_params;          /* schema of the plugin being created */
static const char *const *ph_over;              /* NULL-terminated "section:key=value" list */
/* Helpers not every includer calls are marked unused, so -Wall -Werror accepts any subset. */

static void ph_log(ct_host *h, int32_t level, const char *msg) {
    (void)h;
    if (level <= CT_LOG_WARN) fprintf(stderr, "[%s] %s\n", level == CT_LOG_ERROR ? "error" : "warn", msg);
}
static void *ph_alloc(ct_host *h, uint64_t bytes) {
    (void)h;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1)) return NULL;
    memset(p, 0, bytes);
    return p;
}
static void ph_free(ct_host *h, void *p) { (void)h, free(p); }

/* The text of [sec] key: an override, else the schema default; NULL when neither exists. */
static const char *ph_value(const char *sec, const char *key) {
    size_t ls = strlen(sec), lk = strlen(key);
    for (const char *const *o = ph_over; o && *o; o++)
        if (!strncmp(*o, sec, ls) && (*o)[ls] == ':' && !strncmp(*o + ls + 1, key, lk) &&
            (*o)[ls + 1 + lk] == '=')
            return *o + ls + 2 + lk;
    for (const ct_param_spec *s = ph_params; s && s->key; s++)
        if (!strcmp(s->key, key)) return s->default_value;
    return NULL;
}
#define PH_GET(sec, key, e)                                                               \
    const char *v_ = ph_value(sec, key);                                                  \
    if (!v_) return ct_error_set(e, CT_ERR_INVALID, "no key [%s] %s", sec, key)

static int32_t ph_get_int(ct_host *h, const char *sec, const char *key, int64_t *out, ct_error *e) {
    (void)h;
    PH_GET(sec, key, e);
    *out = strtoll(v_, NULL, 10);
    return CT_OK;
}
static int32_t ph_get_float(ct_host *h, const char *sec, const char *key, double *out,
                            ct_error *e) {
    (void)h;
    PH_GET(sec, key, e);
    *out = strtod(v_, NULL);
    return CT_OK;
}
static int32_t ph_get_bool(ct_host *h, const char *sec, const char *key, int32_t *out,
                           ct_error *e) {
    (void)h;
    PH_GET(sec, key, e);
    *out = !strcmp(v_, "true") || !strcmp(v_, "1") || !strcmp(v_, "yes") || !strcmp(v_, "on");
    return CT_OK;
}
static int32_t ph_get_string(ct_host *h, const char *sec, const char *key, const char **out,
                             ct_error *e) {
    (void)h;
    PH_GET(sec, key, e);
    *out = v_;
    return CT_OK;
}
static void ph_metric(ct_host *h, const char *name, double v, int32_t r) {
    (void)h, (void)name, (void)v, (void)r;
}

static const ct_host_api ph_api = {
    .struct_size = sizeof(ct_host_api), .log = ph_log, .alloc = ph_alloc, .free_mem = ph_free,
    .get_bool = ph_get_bool, .get_int = ph_get_int, .get_float = ph_get_float,
    .get_string = ph_get_string, .metric = ph_metric,
};

static const ct_plugin_desc *ph_load(const char *so) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", ph_dir, so);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        printf("cannot load %s: %s\n", path, dlerror());
        return NULL;
    }
    ct_plugin_entry_fn entry = (ct_plugin_entry_fn)dlsym(dl, CT_ENTRY_SYMBOL);
    return entry ? entry() : NULL;
}

/* create() of so's plugin for [section] on `device` with the overrides `over`; NULL (and a
 * printed reason) on failure. *vt gets the kind's vtable. */
__attribute__((unused)) static void *ph_create(const char *so, const char *section, ct_device_ref device,
                       const char *const *over, const void **vt) {
    const ct_plugin_desc *d = ph_load(so);
    if (!d) return NULL;
    ph_params = d->params;
    ph_over = over;
    ct_create_args a = {.struct_size = sizeof a, .api = &ph_api, .section = section,
                        .world_size = 1, .device = device, .seed = 1};
    ct_error err = {.struct_size = sizeof err};
    /* every kind's vtable starts with struct_size, then create */
    typedef struct { uint32_t struct_size; void *(*create)(const ct_create_args *, ct_error *); } head;
    const head *h = (const head *)d->vtable;
    void *self = h->create(&a, &err);
    if (!self) printf("%s [%s]: create failed: %s\n", so, section, err.message);
    *vt = d->vtable;
    return self;
}

static ct_device_ref ph_device(const char *so, int32_t type) {
    ct_device_ref ref = {0};
    const ct_device_vtable *vt = NULL;
    void *self = ph_create(so, "device", ref, NULL, (const void **)&vt);
    if (self) ref = (ct_device_ref){vt, self, type};
    return ref;
}

/* Device memory holding a copy of n bytes of host (NULL: zeros); NULL on failure. */
__attribute__((unused)) static void *ph_upload(ct_device_ref d, const void *host, uint64_t n) {
    ct_error err = {.struct_size = sizeof err};
    void *p = d.vt->alloc(d.self, n, &err);
    if (!p) {
        printf("alloc %llu bytes: %s\n", (unsigned long long)n, err.message);
        return NULL;
    }
    if (host && d.vt->copy(d.self, p, host, n, CT_COPY_H2D, &err) != CT_OK) {
        printf("copy: %s\n", err.message);
        d.vt->free_mem(d.self, p);
        return NULL;
    }
    return p;
}

/* Host copy (malloc) of n bytes of device memory; NULL on failure. */
__attribute__((unused)) static void *ph_download(ct_device_ref d, const void *dev, uint64_t n) {
    ct_error err = {.struct_size = sizeof err};
    void *h = malloc(n ? n : 1);
    if (h && d.vt->copy(d.self, h, dev, n, CT_COPY_D2H, &err) != CT_OK) {
        printf("copy back: %s\n", err.message);
        free(h);
        return NULL;
    }
    return h;
}

static double ph_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Deterministic N(0,1) (Box-Muller over a 64-bit LCG). */
static uint64_t ph_rng = 88172645463325252ull;
__attribute__((unused)) static double ph_uniform(void) {
    ph_rng = ph_rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(ph_rng >> 11) + 0.5) / 9007199254740992.0;
}
__attribute__((unused)) static double ph_normal(void) {
    double u = ph_uniform(), v = ph_uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif /* CT_GPU_PLUGIN_HOST_H */
