/* test_contract.c — the load-time contract (host/plugin/contract.c): a vtable lacking any REQUIRED
 * member of its kind is named, OPTIONAL members may be NULL, and a schema that contradicts
 * itself (default out of its range, enum default not a choice, enum without choices, a key
 * twice, a bad key) is refused naming the key. Not for: loading files (test_registry.c).
 */
#include "plugin/contract.h"
#include "ct_test.h"

#include <stdio.h>
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
        {CT_KIND_MODEL, sizeof(ct_model_vtable), offsetof(ct_model_vtable, hidden_rows),
         "hidden_rows", 0},
        {CT_KIND_STRATEGY, sizeof(ct_strategy_vtable),
         offsetof(ct_strategy_vtable, unit_backward_done), "unit_backward_done", 1},
        {CT_KIND_STRATEGY, sizeof(ct_strategy_vtable), offsetof(ct_strategy_vtable, memory),
         "memory", 0},
        {CT_KIND_COMM, sizeof(struct ct_comm_vtable), offsetof(struct ct_comm_vtable, barrier),
         "barrier", 1},
        {CT_KIND_COMM, sizeof(struct ct_comm_vtable), offsetof(struct ct_comm_vtable, abort),
         "abort", 0},
        {CT_KIND_COMM, sizeof(struct ct_comm_vtable),
         offsetof(struct ct_comm_vtable, all_reduce_sr), "all_reduce_sr", 0},
        {CT_KIND_COMM, sizeof(struct ct_comm_vtable),
         offsetof(struct ct_comm_vtable, reduce_scatter_sr), "reduce_scatter_sr", 0},
        {CT_KIND_COMM, sizeof(struct ct_comm_vtable),
         offsetof(struct ct_comm_vtable, world_destroy), "world_destroy", 1},
        {CT_KIND_DEVICE, sizeof(struct ct_device_vtable),
         offsetof(struct ct_device_vtable, row_stats), "row_stats", 1},
        {CT_KIND_DEVICE, sizeof(struct ct_device_vtable),
         offsetof(struct ct_device_vtable, cast_bf16_sr), "cast_bf16_sr", 0},
        {CT_KIND_OPTIMIZER, sizeof(ct_optimizer_vtable), offsetof(ct_optimizer_vtable, update),
         "update", 1},
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

/* The members of one vtable as ctrain.h declares them, in order, with their REQUIRED/OPTIONAL
 * mark: the k-th function pointer of the struct sits at offset 8 + 8k (struct_size first). */
typedef struct marked {
    char name[64];
    int  required;
} marked;

static int header_members(const char *open_line, marked *out, int cap) {
    FILE *f = fopen("sdk/include/ctrain/ctrain.h", "r");
    if (!f) return -1;
    char line[512];
    int inside = 0, n = 0, pending = -1, in_decl = 0;
    while (fgets(line, sizeof line, f)) {
        if (!inside) {
            inside = strstr(line, open_line) == line;
            continue;
        }
        if (line[0] == '}') break;
        if (strstr(line, "/* REQUIRED: */")) pending = 1;
        if (strstr(line, "/* OPTIONAL: */")) pending = 0;
        char *fp = strstr(line, "(*");
        if (fp && n < cap) {
            char *end = strchr(fp, ')');
            size_t len = end ? (size_t)(end - fp - 2) : 0;
            if (len >= sizeof out[n].name) len = sizeof out[n].name - 1;
            memcpy(out[n].name, fp + 2, len);
            out[n].name[len] = '\0';
            out[n].required = pending;
            pending = -1;
            in_decl = 1;
            n++;
        }
        if (in_decl && strchr(line, ';')) {
            if (strstr(line, "/* REQUIRED")) out[n - 1].required = 1;
            else if (strstr(line, "/* OPTIONAL")) out[n - 1].required = 0;
            in_decl = 0;
        }
    }
    fclose(f);
    return n;
}

CT_TEST(the_enforced_required_members_are_exactly_those_ctrain_h_marks_required) {
    static const struct {
        int32_t kind;
        const char *open;
        size_t size;
    } kinds[] = {
        {CT_KIND_DEVICE, "struct ct_device_vtable {", sizeof(struct ct_device_vtable)},
        {CT_KIND_COMM, "struct ct_comm_vtable {", sizeof(struct ct_comm_vtable)},
        {CT_KIND_PRECISION, "typedef struct ct_precision_vtable {", sizeof(ct_precision_vtable)},
        {CT_KIND_MODEL, "typedef struct ct_model_vtable {", sizeof(ct_model_vtable)},
        {CT_KIND_LOSS, "typedef struct ct_loss_vtable {", sizeof(ct_loss_vtable)},
        {CT_KIND_STRATEGY, "typedef struct ct_strategy_vtable {", sizeof(ct_strategy_vtable)},
        {CT_KIND_OPTIMIZER, "typedef struct ct_optimizer_vtable {", sizeof(ct_optimizer_vtable)},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        marked m[64];
        int n = header_members(kinds[k].open, m, 64);
        CT_CHECK_MSG(n > 0 && (size_t)(8 + 8 * n) == kinds[k].size,
                     "%s: %d members parsed for a %zu-byte vtable", kinds[k].open, n,
                     kinds[k].size);
        for (int i = 0; i < n; i++) {
            CT_CHECK_MSG(m[i].required >= 0, "%s: member %s has no REQUIRED/OPTIONAL mark",
                         kinds[k].open, m[i].name);
            void *vt = full_vtable(kinds[k].size);
            clear_at(vt, 8 + 8 * (size_t)i);
            size_t at = 0;
            const char *missing = contract_missing_member(kinds[k].kind, vt, &at);
            /* world_destroy is OPTIONAL alone but REQUIRED beside world_create (set here) */
            int want = m[i].required == 1 || !strcmp(m[i].name, "world_destroy");
            if (want)
                CT_CHECK_MSG(missing && !strcmp(missing, m[i].name) && at == 8 + 8 * (size_t)i,
                             "%s: NULL %s (REQUIRED) reported as %s", kinds[k].open, m[i].name,
                             missing ? missing : "(nothing)");
            else
                CT_CHECK_MSG(!missing, "%s: NULL %s (OPTIONAL) reported as missing %s",
                             kinds[k].open, m[i].name, missing);
            free(vt);
        }
    }
}
