/* registry.c — finds plugin .so files on the search path, loads only those a command needs
 * (by the conventional file name <kind>_<name>.so; everything only for listings, each unknown
 * file probed in a forked child first), loads them RTLD_NOW|RTLD_LOCAL (never unloaded), checks
 * the ABI and copies descriptor, vtable and schema into host-owned structs of this build's
 * sizes (zero-extended). See registry.h for the search order and the warnings it collects.
 * Not for: section ownership (wiring.c) or creating plugin instances (rank.c).
 */
#include "plugin/registry.h"

#include "io/files.h"

#include "plugin/calls.h"
#include "plugin/contract.h"
#include "base/fatal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <poll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A probe child that has not loaded its file by then is killed (CTRAIN_PROBE_TIMEOUT_S, seconds,
 * overrides: tests, slow file systems). */
#define PROBE_TIMEOUT_S 10.0

typedef struct problem {
    char *path;
    char *message;
} problem;

struct host_registry {
    char      **dirs;
    int32_t     n_dirs;
    host_plugin **plugins;   /* active, first of each kind+name */
    int32_t     n_plugins, cap_plugins;
    host_plugin **shadowed;
    int32_t     n_shadowed, cap_shadowed;
    problem    *problems;
    int32_t     n_problems, cap_problems;
    void      **handles;   /* every dlopen handle; never closed (see registry_close) */
    int32_t     n_handles, cap_handles;
    char      **warnings;  /* world-writable folders and files, shadowing: one line each */
    int32_t     n_warnings, cap_warnings;
    int         scanned;   /* registry_scan has run */
};

/* sizeof the host's vtable for a kind; 0 for an unknown kind. */
static size_t vtable_size(int32_t kind) {
    switch (kind) {
    case CT_KIND_MODEL: return sizeof(ct_model_vtable);
    case CT_KIND_LOSS: return sizeof(ct_loss_vtable);
    case CT_KIND_STRATEGY: return sizeof(ct_strategy_vtable);
    case CT_KIND_PRECISION: return sizeof(ct_precision_vtable);
    case CT_KIND_COMM: return sizeof(struct ct_comm_vtable);
    case CT_KIND_DEVICE: return sizeof(struct ct_device_vtable);
    case CT_KIND_OPTIMIZER: return sizeof(ct_optimizer_vtable);
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

static int add_problem(host_registry *reg, const char *path, const char *msg) {
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

/* Add a warning line unless the same line is there already. 0 only when out of memory. */
static int add_warning(host_registry *reg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int add_warning(host_registry *reg, const char *fmt, ...) {
    char line[PATH_MAX * 2 + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (int32_t i = 0; i < reg->n_warnings; i++)
        if (!strcmp(reg->warnings[i], line)) return 1;
    if (!grow((void **)&reg->warnings, &reg->cap_warnings, reg->n_warnings, sizeof(char *)))
        return 0;
    char *copy = strdup(line);
    if (!copy) return 0;
    reg->warnings[reg->n_warnings++] = copy;
    return 1;
}

/* Warn when `path` (a plugin folder or file) can be written by any user of the machine. */
static int warn_if_world_writable(host_registry *reg, const char *path, int is_folder) {
    struct stat st;
    if (stat(path, &st) != 0 || !(st.st_mode & S_IWOTH)) return 1;
    return add_warning(reg, "plugin %s %s is world-writable: any user of this machine can put "
                       "code into ctrain through it ---> chmod o-w '%s'%s",
                       is_folder ? "folder" : "file", path, path,
                       is_folder ? " or take it off CTRAIN_PLUGIN_PATH" : "");
}

static void free_plugin(host_plugin *p) {
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
static int32_t convert_params(host_plugin *p, const char *path, ct_error *err) {
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
    }
    char who[1200];
    snprintf(who, sizeof who, "%s %s (%s)", kind_name(d->kind), d->name, path);
    /* flags exists since 1.2: an older plugin's wider entries may hold anything there */
    for (int32_t i = 0; i < n && d->abi_minor < 2; i++) out[i].flags = 0;
    int32_t rc = contract_check_schema(out, n, who, err);
    if (rc != CT_OK) {
        free(out);
        return rc;
    }
    p->params = out;
    p->n_params = n;
    return CT_OK;
}

/* Load `path`: a new host_plugin on success (*handle_out set, caller keeps it open), NULL with
 * err filled otherwise (the handle is closed again). */
static host_plugin *load_file(const char *path, void **handle_out, ct_error *err) {
    *handle_out = NULL;
    /* dlopen opens the file itself: a FIFO or a device would block it or be read as a library */
    if (check_regular(path, "plugin", "give a plugin's .so file", err) != CT_OK) return NULL;
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        ct_error_set(err, CT_ERR_INVALID, "cannot load %s: %s ---> install the library it "
                     "needs or rebuild it", path, why ? why : "unknown dlopen error");
        return NULL;
    }
    host_plugin *p = NULL;
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
    /* the smallest descriptor a plugin may have: ABI 1.0's, which ends with vtable */
    const size_t min_desc = offsetof(ct_plugin_desc, vtable) + sizeof(const void *);
    if (d->struct_size < min_desc) {
        ct_error_set(err, CT_ERR_INVALID, "plugin %s: descriptor too small: struct_size %u, "
                     "while every ABI 1.x descriptor has at least %zu bytes (up to .vtable) "
                     "---> build it with CT_DEFINE_PLUGIN, or set .struct_size = "
                     "sizeof(ct_plugin_desc)", path, d->struct_size, min_desc);
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
    if (!(p->desc.devices & (CT_DEVICE_CPU | CT_DEVICE_CUDA))) {
        ct_error_set(err, CT_ERR_INVALID, "plugin %s: it declares no device (.devices = %u) "
                     "---> set .devices = CT_DEVICE_CPU, CT_DEVICE_CUDA or both, the devices it "
                     "runs on", path, p->desc.devices);
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
    size_t at = 0;
    const char *missing = contract_missing_member(p->desc.kind, vt, &at);
    if (missing) {
        if (at + sizeof(void (*)(void)) > theirs)
            ct_error_set(err, CT_ERR_INVALID, "%s %s (%s): vtable ends (struct_size %u) before "
                         "%s (required) ---> set .struct_size = sizeof(ct_%s_vtable) and "
                         "provide %s", kind_name(p->desc.kind), p->desc.name, path, theirs,
                         missing, kind_name(p->desc.kind), missing);
        else
            ct_error_set(err, CT_ERR_INVALID, "%s %s (%s): vtable has no %s (required) ---> "
                         "set .%s in its ct_%s_vtable", kind_name(p->desc.kind), p->desc.name,
                         path, missing, missing, kind_name(p->desc.kind));
        goto out_free_plugin;
    }
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

/* ---- loading without dying silently --------------------------------------------------- */

/* The backstop's one piece of process state: the file being loaded on the loading thread
 * (plugins are loaded before any rank starts, see train.c), written before each dlopen. */
static char crash_path[PATH_MAX];

/* Async-signal-safe: name the file, then die of the same signal (SA_RESETHAND restored the
 * default action, SA_NODEFER lets raise() deliver it at once). */
static void on_crash_while_loading(int sig) {
    const char *name = fatal_signal_abbrev(sig);
    fatal_write("ctrain: ");
    fatal_write(crash_path);
    fatal_write(": crashed while loading (");
    fatal_write(name ? name : "a signal");
    fatal_write(" in its constructor or descriptor) ---> remove it from the search path "
              "(`ctrain plugins` lists the search path) or rebuild it\n");
    raise(sig);
}

/* load_file with the backstop: a crash inside dlopen or the entry function names the file on
 * stderr before the process dies. The previous handlers are restored unless the plugin
 * installed its own. */
static host_plugin *load_file_guarded(const char *path, void **handle_out, ct_error *err) {
    struct sigaction old[FATAL_SIGNAL_COUNT];
    snprintf(crash_path, sizeof crash_path, "%s", path);
    /* the call record (calls.h) names the file should a constructor call exit() */
    static host_plugin being_loaded = {.path = crash_path};
    fatal_install(on_crash_while_loading, old, 0);
    host_plugin *p = CALLS(&being_loaded, "dlopen (its constructors) or " CT_ENTRY_SYMBOL "()",
                           load_file(path, handle_out, err));
    fatal_restore(on_crash_while_loading, old);
    if (p) calls_rearm(); /* the exit guard before any exit handler the file registered */
    return p;
}

/* snprintf into a message buffer; a long path is cut (the message stays one line). */
static void say(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

/* A probe: `path` being loaded in a forked child that writes "OK" or its error message to a
 * pipe and exits. Many run at once (a listing starts all of them, then collects in order). */
typedef struct probe {
    pid_t  pid;      /* -1: no child could be started (the caller loads the file guarded instead) */
    int    fd;       /* read end of the child's pipe */
    double deadline; /* monotonic time at which the child is killed */
} probe;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The probe's time limit in seconds: CTRAIN_PROBE_TIMEOUT_S when it is a number in (0, 3600],
 * else PROBE_TIMEOUT_S. */
static double probe_timeout(void) {
    const char *v = getenv("CTRAIN_PROBE_TIMEOUT_S");
    char *end = NULL;
    double t = v ? strtod(v, &end) : 0;
    return v && end != v && *end == '\0' && t > 0 && t <= 3600 ? t : PROBE_TIMEOUT_S;
}

static probe probe_start(const char *path) {
    probe pr = {.pid = -1, .fd = -1, .deadline = now_s() + probe_timeout()};
    int fds[2];
    if (pipe(fds) != 0) return pr;
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return pr;
    }
    if (pid == 0) {
        close(fds[0]);
        setpgid(0, 0); /* its own group: the parent's kill reaches what a constructor forks */
        /* die by the signal itself, so the parent can name it (a sanitizer's or the parent's
         * handlers would turn a crash into an exit status) */
        for (int i = 0; i < FATAL_SIGNAL_COUNT; i++) signal(fatal_signals[i], SIG_DFL);
        alarm((unsigned)probe_timeout() + 5); /* a backstop should the parent die */
        ct_error e = {.struct_size = sizeof e};
        void *h;
        host_plugin *p = load_file(path, &h, &e);
        const char *msg = p ? "OK" : e.message;
        size_t n = strlen(msg); /* < PIPE_BUF: one write, never blocks on a full pipe */
        if (write(fds[1], msg, n) < 0) _exit(1);
        _exit(0); /* no atexit handlers, no destructors of the plugin's libraries */
    }
    close(fds[1]);
    pr.pid = pid;
    pr.fd = fds[0];
    return pr;
}

/* Wait for a probe: 1 when the child loaded `path` and found a compatible plugin (the caller
 * then loads it here), 0 when not, with the reason in why: the child's error message, or
 * "crashed while loading (SIGSEGV ...)" / "did not finish loading within N s". */
static int probe_finish(probe pr, const char *path, char *why, size_t cap) {
    size_t got = 0;
    int timed_out = 0;
    char buf[sizeof ((ct_error *)0)->message];
    for (;;) {
        double left = pr.deadline - now_s();
        struct pollfd pfd = {.fd = pr.fd, .events = POLLIN};
        int ready = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) { /* the time limit: kill the child and what it started */
            timed_out = 1;
            kill(-pr.pid, SIGKILL);
            kill(pr.pid, SIGKILL);
            break;
        }
        ssize_t r = read(pr.fd, buf + got, sizeof buf - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
        if (got == sizeof buf - 1) break;
    }
    buf[got] = '\0';
    close(pr.fd);
    int status = 0;
    while (waitpid(pr.pid, &status, 0) < 0 && errno == EINTR) {}
    if (timed_out || (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)) {
        say(why, cap, "%s: did not finish loading within %g s (its constructor hangs?); the "
            "probe was killed ---> remove it from the search path", path, probe_timeout());
        return 0;
    }
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *name = fatal_signal_abbrev(sig);
        if (name)
            say(why, cap, "%s: crashed while loading (%s in its constructor or descriptor) "
                "---> remove it from the search path", path, name);
        else
            say(why, cap, "%s: crashed while loading (signal %d in its constructor or "
                "descriptor) ---> remove it from the search path", path, sig);
        return 0;
    }
    if (!strcmp(buf, "OK")) return 1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !got)
        say(why, cap, "%s: exited while loading (status %d, in its constructor?) ---> remove it "
            "from the search path", path, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    else
        say(why, cap, "%s", buf);
    return 0;
}

int32_t registry_probe_file(const char *path, ct_error *err) {
    probe pr = probe_start(path);
    if (pr.pid < 0) return CT_OK; /* no child: the caller's guarded load says what happens */
    char why[sizeof err->message];
    if (probe_finish(pr, path, why, sizeof why)) return CT_OK;
    return ct_error_set(err, CT_ERR_INVALID, "%s", why);
}

/* ---- the registry -------------------------------------------------------------------- */

static host_plugin *find_active(const host_registry *reg, int32_t kind, const char *name) {
    for (int32_t i = 0; i < reg->n_plugins; i++)
        if (reg->plugins[i]->desc.kind == kind && !strcmp(reg->plugins[i]->desc.name, name))
            return reg->plugins[i];
    return NULL;
}

static host_plugin *find_by_path(const host_registry *reg, const char *path) {
    char *want = realpath(path, NULL);
    if (!want) return NULL;
    host_plugin *found = NULL;
    for (int32_t pass = 0; pass < 2 && !found; pass++) {
        host_plugin **list = pass ? reg->shadowed : reg->plugins;
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
static int keep(host_registry *reg, host_plugin *p, void *h, int shadow_ok) {
    if (!grow((void **)&reg->handles, &reg->cap_handles, reg->n_handles, sizeof(void *)))
        return 0;
    reg->handles[reg->n_handles++] = h;
    if (find_active(reg, p->desc.kind, p->desc.name) && shadow_ok) {
        if (!grow((void **)&reg->shadowed, &reg->cap_shadowed, reg->n_shadowed,
                  sizeof(host_plugin *)))
            return 0;
        reg->shadowed[reg->n_shadowed++] = p;
        return 1;
    }
    if (!grow((void **)&reg->plugins, &reg->cap_plugins, reg->n_plugins, sizeof(host_plugin *)))
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

/* Whether path is the file of a recorded problem; its index or -1. */
static int32_t find_problem(const host_registry *reg, const char *path) {
    char *want = realpath(path, NULL);
    if (!want) return -1;
    int32_t found = -1;
    for (int32_t i = 0; i < reg->n_problems && found < 0; i++) {
        char *have = realpath(reg->problems[i].path, NULL);
        if (have && !strcmp(have, want)) found = i;
        free(have);
    }
    free(want);
    return found;
}

/* Load a probed file of a search folder for a listing: only when its probe (or, without one,
 * nothing) said it loads; refusals become problems. CT_OK unless out of memory. */
static int32_t scan_file(host_registry *reg, const char *path, probe pr, ct_error *err) {
    char why[sizeof err->message];
    if (pr.pid > 0 && !probe_finish(pr, path, why, sizeof why))
        return add_problem(reg, path, why) ? CT_OK
               : ct_error_set(err, CT_ERR_NOMEM, "out of memory scanning %s", path);
    ct_error e = {.struct_size = sizeof e};
    void *h;
    host_plugin *p = load_file_guarded(path, &h, &e);
    if (!p)
        return add_problem(reg, path, e.message) ? CT_OK
               : ct_error_set(err, CT_ERR_NOMEM, "out of memory scanning %s", path);
    if (!keep(reg, p, h, 1) || !warn_if_world_writable(reg, path, 0)) {
        free_plugin(p);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory scanning %s", path);
    }
    return CT_OK;
}

#define PROBES_AT_ONCE 64

/* The .so files of one folder not known yet: all probed at once (up to PROBES_AT_ONCE), then
 * loaded in name order. */
static int32_t scan_dir(host_registry *reg, const char *dir, ct_error *err) {
    struct dirent **names = NULL;
    int n = scandir(dir, &names, so_filter, by_name);
    if (n < 0) return CT_OK; /* a missing folder is fine */
    char (*paths)[PATH_MAX] = malloc(PROBES_AT_ONCE * sizeof *paths);
    int32_t rc = paths ? CT_OK : ct_error_set(err, CT_ERR_NOMEM, "out of memory scanning %s", dir);
    for (int start = 0; paths && start < n; start += PROBES_AT_ONCE) {
        int end = start + PROBES_AT_ONCE < n ? start + PROBES_AT_ONCE : n;
        probe probes[PROBES_AT_ONCE];
        int todo[PROBES_AT_ONCE];
        for (int i = start; i < end; i++) {
            snprintf(paths[i - start], PATH_MAX, "%s/%s", dir, names[i]->d_name);
            struct stat st;
            const char *path = paths[i - start];
            todo[i - start] = rc == CT_OK && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
                              !find_by_path(reg, path) && find_problem(reg, path) < 0;
            probe none = {.pid = -1, .fd = -1};
            probes[i - start] = todo[i - start] ? probe_start(path) : none;
        }
        for (int i = start; i < end; i++) {
            const char *path = paths[i - start];
            if (!todo[i - start]) continue;
            if (rc != CT_OK) { /* out of memory: still reap the children */
                char why[8];
                if (probes[i - start].pid > 0) (void)probe_finish(probes[i - start], path, why,
                                                                  sizeof why);
                continue;
            }
            rc = scan_file(reg, path, probes[i - start], err);
        }
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(paths);
    return rc;
}

static int kind_then_name(const void *a, const void *b) {
    const host_plugin *x = *(host_plugin *const *)a, *y = *(host_plugin *const *)b;
    if (x->desc.kind != y->desc.kind) return x->desc.kind - y->desc.kind;
    return strcmp(x->desc.name, y->desc.name);
}

host_registry *registry_open_dirs(const char *const *dirs, ct_error *err) {
    host_registry *reg = calloc(1, sizeof *reg);
    if (!reg) return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    int32_t n = 0;
    while (dirs && dirs[n]) n++;
    reg->dirs = calloc((size_t)n + 1, sizeof *reg->dirs);
    if (!reg->dirs) goto out_nomem;
    for (int32_t i = 0; i < n; i++) {
        reg->dirs[i] = strdup(dirs[i]);
        if (!reg->dirs[i]) goto out_nomem;
        reg->n_dirs++;
        if (!warn_if_world_writable(reg, dirs[i], 1)) goto out_nomem;
    }
    return reg;
out_nomem:
    ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    registry_close(reg);
    return NULL;
}

int32_t registry_scan(host_registry *reg, ct_error *err) {
    if (reg->scanned) return CT_OK;
    for (int32_t i = 0; i < reg->n_dirs; i++) {
        int32_t rc = scan_dir(reg, reg->dirs[i], err);
        if (rc != CT_OK) return rc;
    }
    if (reg->n_plugins > 1)
        qsort(reg->plugins, (size_t)reg->n_plugins, sizeof *reg->plugins, kind_then_name);
    reg->scanned = 1;
    return CT_OK;
}

host_registry *registry_open(ct_error *err) {
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
    host_registry *reg = registry_open_dirs((const char *const *)list, err);
    free(env);
    return reg;
}

void registry_close(host_registry *reg) {
    if (!reg) return;
    for (int32_t i = 0; i < reg->n_plugins; i++) free_plugin(reg->plugins[i]);
    for (int32_t i = 0; i < reg->n_shadowed; i++) free_plugin(reg->shadowed[i]);
    for (int32_t i = 0; i < reg->n_problems; i++) {
        free(reg->problems[i].path);
        free(reg->problems[i].message);
    }
    for (int32_t i = 0; i < reg->n_dirs; i++) free(reg->dirs[i]);
    for (int32_t i = 0; i < reg->n_warnings; i++) free(reg->warnings[i]);
    free(reg->warnings);
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

/* Is `path` a regular file (after links)? */
static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int same_file(const char *a, const char *b) {
    char *x = realpath(a, NULL), *y = realpath(b, NULL);
    int same = x && y && !strcmp(x, y);
    free(x);
    free(y);
    return same;
}

/* Load `path` here (guarded) and keep it; a load failure becomes a problem too, so a listing
 * and a later lookup repeat the reason. */
static host_plugin *load_and_keep(host_registry *reg, const char *path, int shadow_ok,
                                ct_error *err) {
    void *h;
    host_plugin *p = load_file_guarded(path, &h, err);
    if (!p) {
        if (find_problem(reg, path) < 0) (void)add_problem(reg, path, err->message);
        return NULL;
    }
    if (!keep(reg, p, h, shadow_ok) || !warn_if_world_writable(reg, path, 0)) {
        free_plugin(p);
        return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
    }
    return p;
}

/* Warn when a search folder holds <kind>_<name>.so that is not `used` (the plugin of that kind
 * and name this command uses): one of the two hides the other. */
static int32_t warn_shadowing(host_registry *reg, const host_plugin *used, int by_path,
                              ct_error *err) {
    const char *kname = kind_name(used->desc.kind);
    for (int32_t i = 0; i < reg->n_dirs; i++) {
        char cand[PATH_MAX];
        snprintf(cand, sizeof cand, "%s/%s_%s.so", reg->dirs[i], kname, used->desc.name);
        if (!is_file(cand) || same_file(cand, used->path)) continue;
        int ok = by_path
            ? add_warning(reg, "%s plugin '%s': %s (named by path) takes the place of %s from "
                          "the search path ---> name the plugin '%s' to use the one on the "
                          "search path, or rename yours", kname, used->desc.name, used->path,
                          cand, used->desc.name)
            : add_warning(reg, "%s plugin '%s': %s is used; %s, later on the search path, is "
                          "hidden by it ---> rename or remove one of them, or name the file "
                          "by path", kname, used->desc.name, used->path, cand);
        if (!ok) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    return CT_OK;
}

/* Load a file named in the configuration (or find it loaded already). A bare "x.so" is looked
 * up in the search folders only; a value with '/' is a path as given. */
static const host_plugin *resolve_file(host_registry *reg, const char *value, ct_error *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", value);
    if (!strchr(value, '/')) {
        int found = 0;
        for (int32_t i = 0; i < reg->n_dirs && !found; i++) {
            char cand[PATH_MAX];
            snprintf(cand, sizeof cand, "%s/%s", reg->dirs[i], value);
            if (access(cand, F_OK) == 0) {
                snprintf(path, sizeof path, "%s", cand);
                found = 1;
            }
        }
        if (!found)
            return ct_error_set(err, CT_ERR_INVALID, "plugin file %s is in none of the %d "
                                "search folders (a bare file name is not looked for in the "
                                "current folder) ---> give a path with a '/', e.g. ./%s, or "
                                "put its folder on CTRAIN_PLUGIN_PATH", value,
                                (int)reg->n_dirs, value), NULL;
    }
    if (access(path, F_OK) != 0)
        return ct_error_set(err, CT_ERR_INVALID, "plugin file %s: %s ---> check the path",
                            path, strerror(errno)), NULL;
    int32_t bad = find_problem(reg, path);
    if (bad >= 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s", reg->problems[bad].message), NULL;
    const host_plugin *known = find_by_path(reg, path);
    if (known) return known;
    /* A file asked for by path is used even when a plugin of the same name exists. */
    const host_plugin *p = load_and_keep(reg, path, 0, err);
    if (p && warn_shadowing(reg, p, 1, err) != CT_OK) return NULL;
    return p;
}

/* The error for a name that no loaded plugin answers to. */
static const host_plugin *unknown_name(host_registry *reg, int32_t kind, const char *name,
                                     ct_error *err) {
    const char *kname = kind_name(kind);
    char avail[300] = "";
    size_t used = 0;
    for (int32_t i = 0; i < reg->n_plugins; i++) {
        if (reg->plugins[i]->desc.kind != kind) continue;
        int w = snprintf(avail + used, sizeof avail - used, "%s%s", used ? ", " : "",
                         reg->plugins[i]->desc.name);
        if (w < 0 || (size_t)w >= sizeof avail - used) break;
        used += (size_t)w;
    }
    return ct_error_set(err, CT_ERR_INVALID, "unknown %s plugin '%s' ---> available %s plugins: "
                        "%s (searched %d folders; see `ctrain plugins`)", kname, name, kname,
                        used ? avail : "none", (int)reg->n_dirs), NULL;
}

/* A plugin by name: loaded already, else its conventional file <kind>_<name>.so in the first
 * search folder that has one, else (only then) every file of the search path. */
static const host_plugin *resolve_name(host_registry *reg, int32_t kind, const char *name,
                                     ct_error *err) {
    const char *kname = kind_name(kind);
    const host_plugin *p = find_active(reg, kind, name);
    if (p) return p;
    for (int32_t i = 0; i < reg->n_dirs && !reg->scanned; i++) {
        char cand[PATH_MAX];
        snprintf(cand, sizeof cand, "%s/%s_%s.so", reg->dirs[i], kname, name);
        if (!is_file(cand)) continue;
        int32_t bad = find_problem(reg, cand);
        if (bad >= 0 || !(p = load_and_keep(reg, cand, 1, err))) {
            char why[sizeof err->message];
            snprintf(why, sizeof why, "%s", bad >= 0 ? reg->problems[bad].message : err->message);
            return ct_error_set(err, CT_ERR_INVALID, "%s plugin '%s': %s", kname, name, why),
                   NULL;
        }
        if (p->desc.kind == kind && !strcmp(p->desc.name, name)) {
            if (warn_shadowing(reg, p, 0, err) != CT_OK) return NULL;
            return p;
        }
        break; /* the file declares another plugin: look at everything */
    }
    if (registry_scan(reg, err) != CT_OK) return NULL;
    p = find_active(reg, kind, name);
    if (p) return p;
    for (int32_t k = 1; k <= N_KINDS; k++)
        if (k != kind && (p = find_active(reg, k, name))) return p; /* the caller says "is a" */
    /* The expected file failed to load? Say why. */
    char want[128];
    snprintf(want, sizeof want, "/%s_%s.so", kname, name);
    for (int32_t i = 0; i < reg->n_problems; i++) {
        const char *path = reg->problems[i].path;
        size_t lp = strlen(path), lw = strlen(want);
        if (lp >= lw && !strcmp(path + lp - lw, want))
            return ct_error_set(err, CT_ERR_INVALID, "%s plugin '%s': %s", kname, name,
                                reg->problems[i].message), NULL;
    }
    return unknown_name(reg, kind, name, err);
}

const host_plugin *registry_resolve(host_registry *reg, int32_t kind, const char *name_or_path,
                                  ct_error *err) {
    const char *kname = kind_name(kind);
    if (!name_or_path || !*name_or_path)
        return ct_error_set(err, CT_ERR_INVALID, "no %s plugin named ---> name one", kname),
               NULL;
    const host_plugin *p = names_file(name_or_path) ? resolve_file(reg, name_or_path, err)
                                                  : resolve_name(reg, kind, name_or_path, err);
    if (!p) return NULL;
    if (p->desc.kind != kind)
        return ct_error_set(err, CT_ERR_INVALID, "'%s' is a %s plugin; [%s] needs a %s plugin "
                            "---> name a %s plugin (`ctrain plugins` lists them)", name_or_path,
                            kind_name(p->desc.kind), kname, kname, kname), NULL;
    return p;
}

/* ---- listing ------------------------------------------------------------------------- */

int32_t registry_count(const host_registry *reg) { return reg->n_plugins; }
const host_plugin *registry_at(const host_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_plugins ? reg->plugins[i] : NULL;
}
int32_t registry_shadowed_count(const host_registry *reg) { return reg->n_shadowed; }
const host_plugin *registry_shadowed_at(const host_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_shadowed ? reg->shadowed[i] : NULL;
}
int32_t registry_problem_count(const host_registry *reg) { return reg->n_problems; }
const char *registry_problem_path(const host_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_problems ? reg->problems[i].path : NULL;
}
const char *registry_problem_message(const host_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_problems ? reg->problems[i].message : NULL;
}
int32_t registry_warning_count(const host_registry *reg) { return reg->n_warnings; }
const char *registry_warning_at(const host_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_warnings ? reg->warnings[i] : NULL;
}
int32_t registry_dir_count(const host_registry *reg) { return reg->n_dirs; }
const char *registry_dir_at(const host_registry *reg, int32_t i) {
    return i >= 0 && i < reg->n_dirs ? reg->dirs[i] : NULL;
}
