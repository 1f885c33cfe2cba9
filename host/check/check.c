/* check_plugin.c — `ctrain check-plugin FILE.so [--set key=value]...`: loads the plugin as the
 * host does (registry_resolve with the file's path), runs the checks of its kind and prints
 * "N passed, N failed" (exit 0 only when none failed); plus what the per-kind checks share
 * (see check_plugin.h). Not for: the checks themselves (check_<kind>.c).
 */
#include "check/check.h"

#include "plugin/calls.h"
#include "base/cmdout.h"
#include "cli/commands.h"
#include "plugin/contract.h"

#include <ctrain/numerics.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- verdicts ------------------------------------------------------------------------- */

int check_verdict(host_check *c, int ok, const char *fmt, ...) {
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* a FAIL line always says why: a claim that ends where a reason should follow (an error
     * without a message) gets one */
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == ':' || line[n - 1] == ';')) n--;
    if (!ok && n < strlen(line))
        snprintf(line + n, sizeof line - n, ": no reason given (a call failed without a "
                 "message) ---> the plugin must fill its ct_error when a call fails");
    fprintf(cmdout(), "%s %s: %s\n", ok ? "ok  " : "FAIL", c->label, line);
    fflush(cmdout());
    check_count(c, ok);
    return ok;
}

void check_note(host_check *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(cmdout(), "note %s: ", c->label);
    vfprintf(cmdout(), fmt, ap);
    fprintf(cmdout(), "\n");
    va_end(ap);
    fflush(cmdout());
}

double check_urand(uint64_t seed, uint64_t i) { return 2.0 * ct_uniform01(seed, i) - 1.0; }

/* ---- configuration, instances, the CPU device ------------------------------------------- */

int32_t check_config(host_check *c, const char *ini, const char *section, const char *const *skip,
                     host_config **out, ct_error *err) {
    *out = NULL;
    host_config *cfg = config_new();
    if (!cfg) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = config_load_string(cfg, "check-plugin", ini ? ini : "", err);
    for (int32_t i = 0; rc == CT_OK && i < c->n_sets; i++) {
        const char *eq = strchr(c->sets[i], '=');
        char key[128];
        size_t klen = (size_t)(eq - c->sets[i]);
        if (klen >= sizeof key) klen = sizeof key - 1;
        memcpy(key, c->sets[i], klen);
        key[klen] = '\0';
        rc = config_set(cfg, section, key, eq + 1, "--set", err);
    }
    if (rc == CT_OK)
        rc = config_validate_section(cfg, section, c->plugin->params, sizeof(ct_param_spec),
                                     c->plugin->desc.name, skip, err);
    if (rc != CT_OK) {
        config_free(cfg);
        return rc;
    }
    *out = cfg;
    return CT_OK;
}

int32_t check_create(check_instance *inst, const host_plugin *p, const host_config *cfg,
                     const char *section, int32_t rank, int32_t world, ct_device_ref dev,
                     ct_comm_ref comm, void *comm_world, ct_error *err) {
    memset(inst, 0, sizeof *inst);
    inst->plugin = p;
    hostapi_init(&inst->host, cfg, rank, p->desc.name, NULL);
    ct_create_args a = {
        .struct_size = sizeof a,
        .api = hostapi_table(),
        .host = &inst->host,
        .section = section,
        .rank = rank,
        .world_size = world,
        .device = dev,
        .comm = comm,
        .seed = CHECK_SEED,
        .comm_world = comm_world,
    };
    contract_lifecycle life = contract_lifecycle_of(p->desc.kind, p->vtable);
    if (!life.create)
        return ct_error_set(err, CT_ERR_INVALID, "plugin %s has no create() ---> set .create",
                            p->path);
    err->code = CT_OK;
    err->message[0] = '\0';
    inst->self = CALLS(p, "create", life.create(&a, err));
    if (!inst->self) return contract_name_failed_create(err, p);
    return CT_OK;
}

void check_destroy(check_instance *inst) {
    if (!inst->self) return;
    const host_plugin *p = inst->plugin;
    contract_lifecycle life = contract_lifecycle_of(p->desc.kind, p->vtable);
    if (life.destroy) CALLS_VOID(p, "destroy", life.destroy(inst->self));
    inst->self = NULL;
}

int32_t check_device_section(host_check *c, host_config *cfg, ct_error *err) {
    const host_plugin *p = registry_resolve(c->reg, CT_KIND_DEVICE, "cpu", err);
    if (!p) return err->code;
    static const char *const skip[] = {"type", NULL};
    return config_validate_section(cfg, "device", p->params, sizeof(ct_param_spec), p->desc.name,
                                   skip, err);
}

int32_t check_device_open(host_check *c, const host_config *cfg, int32_t rank, check_instance *inst,
                          ct_device_ref *ref, ct_error *err) {
    const host_plugin *p = registry_resolve(c->reg, CT_KIND_DEVICE, "cpu", err);
    if (!p) return err->code;
    ct_device_ref none = {0};
    ct_comm_ref no_comm = {0};
    int32_t rc = check_create(inst, p, cfg, "device", rank, 1, none, no_comm, NULL, err);
    if (rc != CT_OK) return rc;
    ref->vt = p->vtable;
    ref->self = inst->self;
    ref->type = CT_DEVICE_CPU;
    return CT_OK;
}

/* ---- the command ------------------------------------------------------------------------ */

static int usage(const char *why) {
    fprintf(stderr, "ctrain check-plugin: %s ---> usage: ctrain check-plugin FILE.so "
                    "[--set key=value]... [--timeout SECONDS] (keys of the plugin's own section, "
                    "e.g. --set coef=1e-3; each check's time limit, default %g s)\n", why,
                    CHECK_TIMEOUT_S);
    return 2;
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
    const char *file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *set = NULL;
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
        fprintf(stderr, "ctrain check-plugin: %s\n", err.message);
        return 1;
    }
    c.reg = registry_open(&err);
    if (!c.reg) {
        fprintf(stderr, "ctrain check-plugin: %s\n", err.message);
        return 1;
    }
    c.plugin = resolve_any(c.reg, file, &err);
    if (!c.plugin) {
        fprintf(stderr, "ctrain check-plugin: %s\n", err.message);
        registry_close(c.reg);
        return 1;
    }
    snprintf(c.label, sizeof c.label, "%s %s", kind_name(c.plugin->desc.kind),
             c.plugin->desc.name);
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
