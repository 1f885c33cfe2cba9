/* contract.c — the load-time contract of a plugin (see contract.h): the REQUIRED members of each
 * kind's vtable, as ctrain.h marks them, and the self-consistency of a parameter schema.
 * Not for: loading files (registry.c) or validating an INI section (config.c, which this reuses
 * to check defaults, so a default is held to exactly the rules of a written value).
 */
#include "plugin/contract.h"

#include "config/config.h"
#include "plugin/plugin.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct member {
    size_t      offset; /* of the function pointer in the kind's vtable */
    const char *name;
} member;

#define M(type, field) {offsetof(type, field), #field}

static const member device_required[] = {
    M(struct ct_device_vtable, create),    M(struct ct_device_vtable, destroy),
    M(struct ct_device_vtable, alloc),     M(struct ct_device_vtable, free_mem),
    M(struct ct_device_vtable, copy),      M(struct ct_device_vtable, zero),
    M(struct ct_device_vtable, cast),      M(struct ct_device_vtable, scale),
    M(struct ct_device_vtable, axpy),      M(struct ct_device_vtable, sumsq),
    M(struct ct_device_vtable, adamw),     M(struct ct_device_vtable, row_stats),
    M(struct ct_device_vtable, synchronize), {0, NULL},
};
static const member comm_required[] = {
    M(struct ct_comm_vtable, create),         M(struct ct_comm_vtable, destroy),
    M(struct ct_comm_vtable, all_reduce),     M(struct ct_comm_vtable, reduce_scatter),
    M(struct ct_comm_vtable, all_gather),     M(struct ct_comm_vtable, all_to_all),
    M(struct ct_comm_vtable, broadcast),      M(struct ct_comm_vtable, barrier),
    M(struct ct_comm_vtable, send),           M(struct ct_comm_vtable, recv),
    M(struct ct_comm_vtable, wait),           {0, NULL},
};
static const member precision_required[] = {
    M(ct_precision_vtable, create), M(ct_precision_vtable, destroy),
    M(ct_precision_vtable, policy), {0, NULL},
};
static const member model_required[] = {
    M(ct_model_vtable, create),  M(ct_model_vtable, destroy), M(ct_model_vtable, describe),
    M(ct_model_vtable, prepare), M(ct_model_vtable, forward), M(ct_model_vtable, backward),
    {0, NULL},
};
static const member loss_required[] = {
    M(ct_loss_vtable, create), M(ct_loss_vtable, destroy), M(ct_loss_vtable, forward_backward),
    {0, NULL},
};
static const member strategy_required[] = {
    M(ct_strategy_vtable, create),         M(ct_strategy_vtable, destroy),
    M(ct_strategy_vtable, setup),          M(ct_strategy_vtable, load_unit),
    M(ct_strategy_vtable, save_unit),      M(ct_strategy_vtable, acquire),
    M(ct_strategy_vtable, release),        M(ct_strategy_vtable, grad_buffer),
    M(ct_strategy_vtable, begin_step),     M(ct_strategy_vtable, unit_backward_done),
    M(ct_strategy_vtable, finish_backward), M(ct_strategy_vtable, shard),
    M(ct_strategy_vtable, step_done),      {0, NULL},
};
static const member optimizer_required[] = {
    M(ct_optimizer_vtable, create),      M(ct_optimizer_vtable, destroy),
    M(ct_optimizer_vtable, state_names), M(ct_optimizer_vtable, update), {0, NULL},
};
#undef M

static const member *required_of(int32_t kind) {
    switch (kind) {
    case CT_KIND_MODEL: return model_required;
    case CT_KIND_LOSS: return loss_required;
    case CT_KIND_STRATEGY: return strategy_required;
    case CT_KIND_PRECISION: return precision_required;
    case CT_KIND_COMM: return comm_required;
    case CT_KIND_DEVICE: return device_required;
    case CT_KIND_OPTIMIZER: return optimizer_required;
    default: return NULL;
    }
}

static int present(const void *vtable, size_t offset) {
    void (*fn)(void);
    memcpy(&fn, (const char *)vtable + offset, sizeof fn);
    return fn != NULL;
}

const char *contract_missing_member(int32_t kind, const void *vtable, size_t *offset) {
    const member *m = required_of(kind);
    for (; m && m->name; m++)
        if (!present(vtable, m->offset)) {
            if (offset) *offset = m->offset;
            return m->name;
        }
    size_t wd = offsetof(struct ct_comm_vtable, world_destroy);
    if (kind == CT_KIND_COMM && present(vtable, offsetof(struct ct_comm_vtable, world_create)) &&
        !present(vtable, wd)) {
        if (offset) *offset = wd;
        return "world_destroy";
    }
    return NULL;
}

contract_lifecycle contract_lifecycle_of(int32_t kind, const void *vtable) {
    contract_lifecycle life = {NULL, NULL};
    if (!vtable) return life;
    if (kind == CT_KIND_COMM) {
        const struct ct_comm_vtable *c = vtable;
        life.create = c->create;
        life.destroy = c->destroy;
    } else {
        /* model, loss, strategy, precision, device: struct_size, create, destroy, ... */
        const ct_loss_vtable *first_members = vtable;
        life.create = first_members->create;
        life.destroy = first_members->destroy;
    }
    return life;
}

const char *contract_status_name(int32_t rc) {
    static const char *const names[] = {"CT_OK", "CT_ERR_INVALID", "CT_ERR_NOMEM", "CT_ERR_IO",
                                        "CT_ERR_UNSUPPORTED", "CT_ERR_COMM", "CT_ERR_DEVICE",
                                        "CT_ERR_INTERNAL"};
    return rc >= 0 && rc < (int32_t)(sizeof names / sizeof *names) ? names[rc]
                                                                    : "an unknown status";
}

int32_t contract_name_silent_error(int32_t rc, ct_error *err, const host_plugin *p,
                                   const char *member) {
    if (rc == CT_OK || !err || err->message[0]) return rc;
    ct_error_set(err, rc, "%s %s (%s): %s failed with %s (%d) but no message ---> the plugin "
                 "must fill its ct_error (ct_error_set); report this to its author",
                 kind_name(p->desc.kind), p->desc.name, p->path, member,
                 contract_status_name(rc), (int)rc);
    return rc;
}

int32_t contract_name_failed_create(ct_error *err, const host_plugin *p) {
    if (err->code != CT_OK) return contract_name_silent_error(err->code, err, p, "create");
    if (!err->message[0])
        return ct_error_set(err, CT_ERR_INVALID, "%s %s (%s): create returned NULL and set no "
                            "error (no code, no message) ---> the plugin must fill its ct_error "
                            "when create fails (ct_error_set); report this to its author",
                            kind_name(p->desc.kind), p->desc.name, p->path);
    err->code = CT_ERR_INVALID; /* a message without a code: keep the message */
    return err->code;
}

static int valid_key(const char *s) {
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

int32_t contract_check_schema(const ct_param_spec *specs, int32_t n, const char *who,
                              ct_error *err) {
    for (int32_t i = 0; i < n; i++) {
        const ct_param_spec *s = &specs[i];
        if (!valid_key(s->key))
            return ct_error_set(err, CT_ERR_INVALID, "%s: parameter %d has key '%s' ---> keys "
                                "are [a-z0-9_]+", who, (int)i, s->key ? s->key : "(null)");
        if (s->type < CT_PARAM_TYPE_BOOL || s->type > CT_PARAM_TYPE_ENUM)
            return ct_error_set(err, CT_ERR_INVALID, "%s: parameter '%s' has unknown type %d "
                                "---> use a ct_param_type (CT_PARAM_INT, ...)", who, s->key,
                                (int)s->type);
        if (s->type == CT_PARAM_TYPE_ENUM && (!s->choices || !s->choices[0]))
            return ct_error_set(err, CT_ERR_INVALID, "%s: enum parameter '%s' has no choices "
                                "---> give CT_PARAM_ENUM a NULL-terminated list of words", who,
                                s->key);
        for (int32_t j = 0; j < i; j++)
            if (!strcmp(specs[j].key, s->key))
                return ct_error_set(err, CT_ERR_INVALID, "%s: parameter '%s' is declared twice "
                                    "(entries %d and %d) ---> keep one", who, s->key, (int)j,
                                    (int)i);
    }
    /* every default, validated as if it were written in an INI section [default]; keys
     * without a default (required ones) are skipped */
    host_config *scratch = config_new();
    const char **required = calloc((size_t)n + 1, sizeof *required);
    int32_t rc = CT_OK, n_required = 0;
    if (!scratch || !required) rc = ct_error_set(err, CT_ERR_NOMEM, "%s: out of memory", who);
    for (int32_t i = 0; i < n && rc == CT_OK; i++) {
        if (specs[i].default_value)
            rc = config_set(scratch, "default", specs[i].key, specs[i].default_value, who, err);
        else
            required[n_required++] = specs[i].key;
    }
    if (rc == CT_OK)
        rc = config_validate_section(scratch, "default", specs, sizeof *specs, who, required,
                                     err);
    free(required);
    config_free(scratch);
    if (rc != CT_OK && err) {
        char *hint = strstr(err->message, " ---> ");
        if (hint) *hint = '\0';
        char msg[sizeof err->message];
        snprintf(msg, sizeof msg, "%.400s ---> the plugin's schema contradicts itself: fix "
                 "that default", err->message);
        memcpy(err->message, msg, sizeof msg);
    }
    return rc;
}
