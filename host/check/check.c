/* check.c — what the per-kind checks of `ctrain check-plugin` share (check.h): verdict lines
 * and counters, a configuration of the plugin's own keys, instances created and destroyed, the
 * CPU device from the search path. Not for: the checks themselves (check_<kind>.c) or the
 * command (cli/check_plugin.c).
 */
#include "check/check.h"

#include "plugin/calls.h"
#include "base/cmdout.h"
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
