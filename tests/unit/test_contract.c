/* test_contract.c — the load-time contract (host/contract.c): a vtable lacking any REQUIRED
 * member of its kind is named, OPTIONAL members may be NULL, and a schema that contradicts
 * itself (default out of its range, enum default not a choice, enum without choices, a key
 * twice, a bad key) is refused naming the key. Not for: loading files (test_registry.c).
 */
#include "contract.h"
#include "ct_test.h"

#include <stdlib.h>
#include <string.h>

static void dummy(void) {}

/* A vtable of `size` bytes whose every pointer slot is set (struct_size first). */
static void *full_vtable(size_t size) {
    unsigned char *vt = calloc(1, size);
    void (*fn)(void) = dummy;
    for (size_t off = sizeof(void *); off + sizeof fn <= size; off += sizeof fn)
        memcpy(vt + off, &fn, sizeof fn);
    *(uint32_t *)vt = (uint32_t)size;
    return vt;
}

static void clear_at(void *vt, size_t off) { memset((char *)vt + off, 0, sizeof(void (*)(void))); }

CT_TEST(every_required_member_missing_is_named_and_optional_ones_may_be_null) {
    static const struct {
        int32_t kind;
        size_t size, off;
        const char *name;
        int required;
    } cases[] = {
        {CT_KIND_LOSS, sizeof(ct_loss_vtable), offsetof(ct_loss_vtable, forward_backward),
         "forward_backward", 1},
        {CT_KIND_LOSS, sizeof(ct_loss_vtable), offsetof(ct_loss_vtable, destroy), "destroy", 1},
        {CT_KIND_PRECISION, sizeof(ct_precision_vtable), offsetof(ct_precision_vtable, policy),
         "policy", 1},
        {CT_KIND_PRECISION, sizeof(ct_precision_vtable),
         offsetof(ct_precision_vtable, reduce_scatter), "reduce_scatter", 0},
        {CT_KIND_MODEL, sizeof(ct_model_vtable), offsetof(ct_model_vtable, backward), "backward",
         1},
        {CT_KIND_MODEL, sizeof(ct_model_vtable), offsetof(ct_model_vtable, mean_hidden),
         "mean_hidden", 0},
        {CT_KIND_STRATEGY, sizeof(ct_strategy_vtable),
         offsetof(ct_strategy_vtable, unit_backward_done), "unit_backward_done", 1},
        {CT_KIND_STRATEGY, sizeof(ct_strategy_vtable), offsetof(ct_strategy_vtable, memory),
         "memory", 0},
        {CT_KIND_COMM, sizeof(struct ct_comm_vtable), offsetof(struct ct_comm_vtable, barrier),
         "barrier", 1},
        {CT_KIND_COMM, sizeof(struct ct_comm_vtable), offsetof(struct ct_comm_vtable, abort),
         "abort", 0},
        {CT_KIND_COMM, sizeof(struct ct_comm_vtable),
         offsetof(struct ct_comm_vtable, world_destroy), "world_destroy", 1},
        {CT_KIND_DEVICE, sizeof(struct ct_device_vtable),
         offsetof(struct ct_device_vtable, row_stats), "row_stats", 1},
        {CT_KIND_DEVICE, sizeof(struct ct_device_vtable),
         offsetof(struct ct_device_vtable, cast_bf16_sr), "cast_bf16_sr", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        void *vt = full_vtable(cases[i].size);
        CT_CHECK_MSG(contract_missing_member(cases[i].kind, vt, NULL) == NULL,
                     "a complete vtable of kind %d reported missing", cases[i].kind);
        clear_at(vt, cases[i].off);
        const char *missing = contract_missing_member(cases[i].kind, vt, NULL);
        if (cases[i].required)
            CT_CHECK_MSG(missing && !strcmp(missing, cases[i].name), "kind %d without %s: got %s",
                         cases[i].kind, cases[i].name, missing ? missing : "(nothing)");
        else
            CT_CHECK_MSG(!missing, "kind %d without optional %s reported %s", cases[i].kind,
                         cases[i].name, missing);
        free(vt);
    }
    /* a comm engine without world_create needs no world_destroy */
    void *vt = full_vtable(sizeof(struct ct_comm_vtable));
    clear_at(vt, offsetof(struct ct_comm_vtable, world_create));
    clear_at(vt, offsetof(struct ct_comm_vtable, world_destroy));
    CT_CHECK(contract_missing_member(CT_KIND_COMM, vt, NULL) == NULL);
    free(vt);
}

static const char *const modes[] = {"fast", "slow", NULL};
static const char *const no_choices[] = {NULL};

/* err's message after checking specs (CT_PARAM_END-terminated), or "" when accepted. */
static const char *check(const ct_param_spec *specs, ct_error *err) {
    int32_t n = 0;
    while (specs[n].key) n++;
    *err = (ct_error){.struct_size = sizeof *err};
    return contract_check_schema(specs, n, "loss fx (/p/loss_fx.so)", err) == CT_OK ? ""
                                                                                  : err->message;
}

CT_TEST(schema_that_contradicts_itself_is_refused_naming_the_key) {
    ct_error err;
    const ct_param_spec good[] = {
        CT_PARAM_FLOAT("coef", "0.5", 0, 1, "w"), CT_PARAM_ENUM("mode", "fast", modes, "m"),
        CT_PARAM_INT("count", NULL, 1, 10, "required, no default"),
        CT_PARAM_FLOAT_X("beta", "0", 0, 1, CT_PARAM_MAX_EXCLUSIVE, "[0, 1)"), CT_PARAM_END};
    CT_CHECK_STR_CONTAINS(check(good, &err), "");
    CT_CHECK(err.code == CT_OK);

    const ct_param_spec out_of_range[] = {CT_PARAM_FLOAT("coef", "5", 0, 1, "w"), CT_PARAM_END};
    const char *m = check(out_of_range, &err);
    CT_CHECK_STR_CONTAINS(m, "loss fx (/p/loss_fx.so)");
    CT_CHECK_STR_CONTAINS(m, "coef = 5 is out of range");
    CT_CHECK_STR_CONTAINS(m, "---> the plugin's schema contradicts itself");

    const ct_param_spec bad_enum[] = {CT_PARAM_ENUM("mode", "medium", modes, "m"), CT_PARAM_END};
    CT_CHECK_STR_CONTAINS(check(bad_enum, &err), "mode = 'medium' is not one of: fast, slow");

    const ct_param_spec empty_enum[] = {CT_PARAM_ENUM("mode", NULL, no_choices, "m"),
                                        CT_PARAM_END};
    CT_CHECK_STR_CONTAINS(check(empty_enum, &err), "enum parameter 'mode' has no choices");

    const ct_param_spec twice[] = {CT_PARAM_INT("count", "1", 0, 9, "a"),
                                   CT_PARAM_INT("count", "2", 0, 9, "b"), CT_PARAM_END};
    CT_CHECK_STR_CONTAINS(check(twice, &err), "parameter 'count' is declared twice");

    const ct_param_spec bad_key[] = {CT_PARAM_INT("Count", "1", 0, 9, "a"), CT_PARAM_END};
    CT_CHECK_STR_CONTAINS(check(bad_key, &err), "has key 'Count' ---> keys are [a-z0-9_]+");

    const ct_param_spec not_int[] = {CT_PARAM_INT("count", "2.5", 0, 9, "a"), CT_PARAM_END};
    CT_CHECK_STR_CONTAINS(check(not_int, &err), "count = '2.5' is not an integer");
}
