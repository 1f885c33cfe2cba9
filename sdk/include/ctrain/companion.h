/* companion.h — header-only helper for a plugin that keeps its CUDA code in a companion shared
 * object, so the plugin itself links no CUDA library and loads on a machine without them. The
 * companion lives next to the plugin, in its cuda/ subfolder (build/plugins/cuda/<id>_cuda.so
 * beside build/plugins/<id>.so; installed likewise), and is opened only when a CUDA device is
 * actually used. Not part of the ABI: nothing here crosses the plugin boundary, and it keeps no
 * state. Not for: CUDA-only plugins (device cuda, comm nccl), which link CUDA directly.
 *
 * Usage, at create() on a CUDA device (or on the first CUDA batch):
 *   static const char *const names[] = {"my_cuda_run", "my_cuda_free"};
 *   static const ct_companion_info want = {sizeof(ct_companion_info), MY_CUDA_INTERFACE,
 *                                          sizeof(my_shared_struct)};
 *   void *fn[2];
 *   if (ct_companion_load("loss my", "loss_my_cuda.so", &want, names, fn, 2, err) != CT_OK)
 *       return ...;
 *   self->run = (my_run_fn *)fn[0];   ...
 * and in the companion's source, once: CT_COMPANION_INFO(MY_CUDA_INTERFACE,
 * sizeof(my_shared_struct)). A companion exports only its entry functions and
 * ct_companion_about (build it with -fvisibility=hidden and mark them CT_EXPORT). A companion
 * that does not report the interface version and shared-structure size its plugin expects
 * (a stale build left beside a newer plugin) is refused, never called. The handle is never
 * closed: the functions stay valid for the process.
 * Needs dladdr: compile with _GNU_SOURCE (the ctrain build does; g++ defines it).
 */
#ifndef CTRAIN_COMPANION_H
#define CTRAIN_COMPANION_H

#include <ctrain/ctrain.h>

#ifndef _GNU_SOURCE
#error "ctrain/companion.h needs dladdr ---> compile with -D_GNU_SOURCE"
#endif

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* What a companion says of itself (returned by its ct_companion_about()). */
typedef struct ct_companion_info {
    uint32_t struct_size;       /* sizeof(ct_companion_info) */
    uint32_t interface_version; /* the plugin's own number for its companion interface: bump it
                                   whenever an entry point's arguments or meaning change */
    uint64_t shared_size;       /* sizeof the structure both sides read (e.g. the model's own
                                   struct, or ct_loss_batch), as the companion was compiled */
} ct_companion_info;

#ifdef __cplusplus
#define CT_COMPANION_LINKAGE extern "C"
#else
#define CT_COMPANION_LINKAGE
#endif

/* Defines the companion's ct_companion_about(); use once in the companion's source. */
#define CT_COMPANION_INFO(version, shared)                                                     \
    CT_COMPANION_LINKAGE CT_EXPORT const ct_companion_info *ct_companion_about(void) {        \
        static const ct_companion_info info = {sizeof(ct_companion_info), (version),          \
                                               (uint64_t)(shared)};                           \
        return &info;                                                                         \
    }

#define CT_COMPANION_HINT "this build's CUDA support is missing or the CUDA libraries are not " \
                          "installed; use [device] type = cpu"

/* Writes "<folder of the calling plugin .so>/cuda/<file>" into path (size bytes). The folder
 * is found with dladdr on an object inside this translation unit, so inside the plugin: the
 * companion is looked up beside the plugin that was loaded, wherever that was. `who` starts
 * error messages ("model gpt"). */
static inline int32_t ct_companion_path(const char *who, const char *file, char *path,
                                        size_t size, ct_error *err) {
    static const char here = 0; /* an address inside the plugin that includes this header */
    Dl_info info;
    if (!dladdr(&here, &info) || !info.dli_fname)
        return ct_error_set(err, CT_ERR_INTERNAL, "%s: cannot find the folder of its own .so "
                            "to load %s (dladdr failed; please report it)", who, file);
    const char *slash = strrchr(info.dli_fname, '/');
    int dir_len = slash ? (int)(slash - info.dli_fname) : 1;
    const char *dir = slash ? info.dli_fname : ".";
    int n = snprintf(path, size, "%.*s/cuda/%s", dir_len, dir, file);
    if (n < 0 || (size_t)n >= size)
        return ct_error_set(err, CT_ERR_INVALID, "%s: the path of %s beside %s is longer than "
                            "%zu bytes ---> install the plugins in a shorter folder", who, file,
                            info.dli_fname, size - 1);
    return CT_OK;
}

/* Opens the companion `file` (e.g. "model_gpt_cuda.so") from the calling plugin's cuda/
 * subfolder (RTLD_NOW | RTLD_LOCAL), checks that its ct_companion_about() reports want's
 * interface_version and shared_size, and resolves names[0..n) into fns[0..n). On failure, fills
 * err with one sentence naming the file and what is wrong (dlerror's text, or the versions and
 * sizes found and expected), sets every fns[i] to NULL, and returns CT_ERR_UNSUPPORTED. The handle stays open (never dlclose'd: the functions may be in
 * use on other ranks of the process); opening again only bumps the loader's reference count. */
static inline int32_t ct_companion_load(const char *who, const char *file,
                                        const ct_companion_info *want,
                                        const char *const *names, void **fns, int n,
                                        ct_error *err) {
    char path[PATH_MAX];
    int32_t rc = ct_companion_path(who, file, path, sizeof path, err);
    if (rc != CT_OK) return rc;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: cannot load its CUDA companion %s: "
                            "%s ---> " CT_COMPANION_HINT, who, path, why ? why : "unknown error");
    }
    memset(fns, 0, (size_t)n * sizeof *fns);
    typedef const ct_companion_info *(*about_fn)(void);
    dlerror();
    about_fn about = (about_fn)dlsym(h, "ct_companion_about");
    const ct_companion_info *got = about ? about() : NULL;
    if (!got)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: its CUDA companion %s does not report "
                            "its interface version (a build older than this plugin) ---> "
                            "rebuild both with one `make`", who, path);
    if (got->interface_version != want->interface_version || got->shared_size != want->shared_size)
        return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: its CUDA companion %s implements "
                            "interface %u with a %llu-byte shared structure; this plugin needs "
                            "interface %u with %llu bytes (a stale build) ---> rebuild both "
                            "with one `make`", who, path, got->interface_version,
                            (unsigned long long)got->shared_size, want->interface_version,
                            (unsigned long long)want->shared_size);
    for (int i = 0; i < n; i++) {
        dlerror(); /* clear, so a NULL below is told apart from a stale message */
        fns[i] = dlsym(h, names[i]);
        if (!fns[i]) {
            const char *why = dlerror();
            memset(fns, 0, (size_t)n * sizeof *fns);
            return ct_error_set(err, CT_ERR_UNSUPPORTED, "%s: its CUDA companion %s lacks %s: "
                                "%s ---> " CT_COMPANION_HINT, who, path, names[i],
                                why ? why : "the symbol is NULL");
        }
    }
    return CT_OK;
}

#endif /* CTRAIN_COMPANION_H */
