/* check_plugin.c — `ctrain check-plugin FILE.so [--set key=value]...`: loads the plugin as the
 * host does (registry_resolve with the file's path), runs the checks of its kind (host/check/)
 * and prints "N passed, N failed" (exit 0 only when none failed). With --logits L.npy --targets
 * T.npy [--out G.npy] a loss term instead runs once on the author's own batch: its value on
 * stdout, its gradient into G.npy. Not for: the checks themselves (check/check_<kind>.c) or
 * what they share (check/check.c).
 */
#include "check/check.h"

#include "base/printable.h"
#include "base/cmdout.h"
#include "cli/commands.h"
#include "io/npy.h"
#include "io/outfile.h"
#include "plugin/calls.h"
#include "plugin/contract.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the command ------------------------------------------------------------------------ */

static int usage(const char *why) {
    fprintf(stderr, "ctrain check-plugin: %s ---> usage: ctrain check-plugin FILE.so "
                    "[--set key=value]... [--timeout SECONDS] (keys of the plugin's own section, "
                    "e.g. --set coef=1e-3; each check's time limit, default %g s); a loss term "
                    "on your own batch: ctrain check-plugin LOSS.so --logits L.npy --targets "
                    "T.npy [--out G.npy [--force]]\n", why, CHECK_TIMEOUT_S);
    return 2;
}

/* The author's batch: the loss term under test once on L.npy (N,V) and T.npy (N), its value on
 * stdout, d(value)/d(logits) into G.npy when --out names it. 0, or 1 naming what failed. */
static int run_on_batch(host_check *c, const char *lpath, const char *tpath, const char *gpath,
                        int force) {
    ct_error err = {.struct_size = sizeof err};
    npy_array L, T;
    memset(&T, 0, sizeof T);
    float *grad = NULL;
    double value = 0;
    int status = 1;
    if (c->plugin->desc.kind != CT_KIND_LOSS) {
        ct_error_set(&err, CT_ERR_INVALID, "--logits and --targets run a loss term; %s is a %s "
                     "plugin ---> run check-plugin without them", c->plugin->path,
                     kind_name(c->plugin->desc.kind));
        print_message_line(stderr, "ctrain check-plugin: ", err.message);
        return 1;
    }
    if (npy_read(lpath, "--logits", CT_DTYPE_F32, &L, &err) != CT_OK) goto out_print;
    if (npy_read(tpath, "--targets", CT_DTYPE_I32, &T, &err) != CT_OK) goto out_free;
    if (L.ndim != 2 || T.ndim != 1 || T.shape[0] != L.shape[0] || L.shape[1] < 1) {
        ct_error_set(&err, CT_ERR_INVALID, "--logits %s has shape (%lld, %lld) and --targets %s "
                     "(%lld%s): logits are (N, V) and targets (N,) ---> one target per row of "
                     "logits", lpath, (long long)L.shape[0], (long long)L.shape[1], tpath,
                     (long long)T.shape[0], T.ndim == 1 ? ",)" : ", ...)");
        goto out_free;
    }
    grad = malloc((size_t)L.count * sizeof *grad + 1);
    if (!grad) {
        ct_error_set(&err, CT_ERR_NOMEM, "out of memory for the gradient");
        goto out_free;
    }
    if (check_loss_apply(c, L.data, T.data, L.shape[0], L.shape[1], &value, grad, &err) != CT_OK)
        goto out_free;
    if (gpath && npy_write_f32(gpath, grad, L.shape[0], L.shape[1],
                               OUTFILE_USER | (force ? OUTFILE_FORCE : 0), &err) != CT_OK)
        goto out_free;
    fprintf(cmdout(), "%s on %lld rows x %lld: value %.17g\n", c->label, (long long)L.shape[0],
            (long long)L.shape[1], value);
    if (gpath)
        fprintf(cmdout(), "gradient d(value)/d(logits): %s (%lld x %lld f32)\n", gpath,
                (long long)L.shape[0], (long long)L.shape[1]);
    status = 0;
out_free:
    free(grad);
    free(L.data);
    free(T.data);
out_print:
    if (status) print_message_line(stderr, "ctrain check-plugin: ", err.message);
    return status;
}

/* A kind whose checks build on each other: one child process runs them all (run_kind). */
typedef struct kind_job {
    void (*checks)(host_check *c);
    const char *what;
} kind_job;

static void run_kind(host_check *c, void *ctx, void *out) {
    (void)out;
    ((const kind_job *)ctx)->checks(c);
}

/* The plugin file as whatever kind it declares (registry_resolve wants a kind). */
static const host_plugin *resolve_any(host_registry *reg, const char *path, ct_error *err) {
    for (int32_t k = 1; k <= 6; k++) {
        ct_error e = {.struct_size = sizeof e};
        const host_plugin *p = registry_resolve(reg, k, path, &e);
        if (p) return p;
        if (!strstr(e.message, " plugin; [")) { /* not "is a loss plugin; [model] needs ..." */
            *err = e;
            return NULL;
        }
    }
    ct_error_set(err, CT_ERR_INVALID, "%s: no kind matched", path);
    return NULL;
}

int cmd_check_plugin(int argc, char **argv) {
    host_check c;
    memset(&c, 0, sizeof c);
    c.timeout_s = CHECK_TIMEOUT_S;
    const char *file = NULL, *logits = NULL, *targets = NULL, *grad_out = NULL;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        const char *set = NULL;
        const char **path = !strcmp(argv[i], "--logits")    ? &logits
                            : !strcmp(argv[i], "--targets") ? &targets
                            : !strcmp(argv[i], "--out")     ? &grad_out
                                                            : NULL;
        if (path) {
            if (i + 1 >= argc) return usage("--logits, --targets and --out need a file");
            *path = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--force")) {
            force = 1;
            continue;
        }
        if (!strcmp(argv[i], "--timeout")) {
            char *end = NULL;
            double t = i + 1 < argc ? strtod(argv[i + 1], &end) : 0;
            if (i + 1 >= argc || end == argv[i + 1] || *end || !(t > 0 && t <= 86400))
                return usage("--timeout needs a number of seconds in (0, 86400]");
            c.timeout_s = t;
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--set")) {
            if (i + 1 >= argc) return usage("--set needs key=value");
            set = argv[++i];
        } else if (!strncmp(argv[i], "--set=", 6)) {
            set = argv[i] + 6;
        } else if (argv[i][0] == '-') {
            char why[300];
            snprintf(why, sizeof why, "unknown option '%s'", argv[i]);
            return usage(why);
        } else if (file) {
            char why[300];
            snprintf(why, sizeof why, "one plugin file at a time ('%s' and '%s')", file, argv[i]);
            return usage(why);
        } else {
            file = argv[i];
        }
        if (!set) continue;
        const char *eq = strchr(set, '=');
        if (!eq || eq == set || memchr(set, '.', (size_t)(eq - set)) || eq - set >= 120) {
            char why[400];
            snprintf(why, sizeof why, "--set '%s' is not key=value with a key of the plugin's "
                     "own section (no section prefix)", set);
            return usage(why);
        }
        if (c.n_sets == CHECK_MAX_SETS) return usage("too many --set");
        c.sets[c.n_sets++] = set;
    }
    if (!file) return usage("no plugin file named");
    if (!logits != !targets || (grad_out && !logits))
        return usage("--logits and --targets go together (--out with them)");
    size_t n = strlen(file);
    if (!strchr(file, '/') && !(n > 3 && !strcmp(file + n - 3, ".so")))
        return usage("name the plugin's .so file (a path or a name ending in .so), e.g. "
                     "build/plugins/loss_ce.so");

    /* Tiny shapes: a plugin's OpenMP loops on one thread (set before any plugin loads the
     * OpenMP runtime, which reads it once; a value the user set wins). On a busy machine, a
     * second thread only adds spinning to the hundreds of small calls the checks make. */
    setenv("OMP_NUM_THREADS", "1", 0);
    ct_error err = {.struct_size = sizeof err};
    /* the checks run in child processes (check_child.c): the call records are shared with
     * them, and the file is loaded in a child first, so a constructor that crashes, exits or
     * hangs is reported instead of ending the checker */
    calls_share();
    if (registry_probe_file(file, &err) != CT_OK) {
        print_message_line(stderr, "ctrain check-plugin: ", err.message);
        return 1;
    }
    c.reg = registry_open(&err);
    if (!c.reg) {
        print_message_line(stderr, "ctrain check-plugin: ", err.message);
        return 1;
    }
    c.plugin = resolve_any(c.reg, file, &err);
    if (!c.plugin) {
        print_message_line(stderr, "ctrain check-plugin: ", err.message);
        registry_close(c.reg);
        return 1;
    }
    snprintf(c.label, sizeof c.label, "%s %s", kind_name(c.plugin->desc.kind),
             c.plugin->desc.name);
    if (logits) {
        int status = run_on_batch(&c, logits, targets, grad_out, force);
        registry_close(c.reg);
        return status;
    }
    char devs[32];
    uint32_t dm = c.plugin->desc.devices;
    snprintf(devs, sizeof devs, "%s%s%s", dm & CT_DEVICE_CPU ? "cpu" : "",
             (dm & CT_DEVICE_CPU) && (dm & CT_DEVICE_CUDA) ? "," : "",
             dm & CT_DEVICE_CUDA ? "cuda" : "");
    int is_device = c.plugin->desc.kind == CT_KIND_DEVICE; /* checked as the device itself */
    fprintf(cmdout(), "checking %s plugin '%s' %s (%s) on %s (the plugin declares %s), seed %u, "
            "each check in a child process (time limit %g s)\n",
            kind_name(c.plugin->desc.kind), c.plugin->desc.name, c.plugin->desc.version,
            c.plugin->path, is_device ? "itself" : "device cpu", devs, CHECK_SEED, c.timeout_s);
    fflush(cmdout());
    if (!is_device && !(dm & CT_DEVICE_CPU)) {
        check_verdict(&c, 0, "runs on device cpu: the plugin declares device %s only, and "
                      "check-plugin checks on device cpu ---> a CUDA-only plugin needs a GPU: "
                      "check it there in a run (`ctrain train` with [device] type = cuda)", devs);
        c.plugin = NULL; /* nothing else is checked */
    }
    kind_job job = {NULL, NULL};
    switch (c.plugin ? c.plugin->desc.kind : 0) {
    case CT_KIND_LOSS: check_loss(&c); break;
    case CT_KIND_PRECISION: check_precision(&c); break;
    case CT_KIND_STRATEGY: check_strategy(&c); break;
    case CT_KIND_MODEL: job = (kind_job){check_model, "the model's checks"}; break;
    case CT_KIND_DEVICE: job = (kind_job){check_device, "the device's checks"}; break;
    case CT_KIND_COMM: job = (kind_job){check_comm, "the comm engine's checks"}; break;
    default: break;
    }
    if (job.checks) check_in_child(&c, job.what, run_kind, &job, NULL, 0);
    fprintf(cmdout(), "%d passed, %d failed\n", (int)c.passed, (int)c.failed);
    registry_close(c.reg);
    return c.failed ? 1 : 0;
}
