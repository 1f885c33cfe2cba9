/* fixture_plugin.c — a configurable loss plugin for the registry and ABI-compatibility tests
 * (compiled by tests with cc into a temporary folder; never built by the Makefile).
 * Knobs (-D): FX_NAME (identifier, default fx), FX_KIND (default CT_KIND_LOSS), FX_MAJOR/FX_MINOR
 * (claimed ABI, default this header's), FX_NO_ENTRY (export no entry symbol), FX_SHORT_VTABLE
 * (a loss: claim a vtable that ends before forward_backward, which is REQUIRED; another kind:
 * one that ends before its last member, which is OPTIONAL), FX_WIDE_PARAMS (param specs with 24
 * extra bytes each, as a later minor version might have), FX_MISSING_DEP (call a function
 * of a library linked in, so deleting that library makes dlopen fail), FX_CRASH_IN_CONSTRUCTOR
 * (raise SIGSEGV from a constructor, i.e. during dlopen). The broken-plugin corpus
 * (tests/cli/test_broken_plugins.sh): FX_SILENT_ERROR (forward_backward fails without a
 * message), FX_SCHEMA=FX_BAD_DEFAULT|FX_ENUM_DEFAULT|FX_NO_CHOICES|FX_TWICE|FX_BAD_KEY (a schema that
 * contradicts itself), FX_NULL_SLOT=k (vtable slot k, 0 = the member after struct_size, left
 * NULL), FX_VALIDATE (an ABI 1.2 validate hook: mode = slow allows count <= 5 only),
 * FX_REAL_TERM (a real term instead of the constant 1: loss logitreg's value and gradient with
 * mask_ignored = true, coef * mean over counted rows of ||z||^2 / V, written for whole
 * micro-batches only: it compiles against the frozen v1.2 header, which has no row ranges).
 * Runtime-contract defects (tests/cli/test_plugin_faults.sh): FX_DEVICES=n (the descriptor's
 * .devices, default CT_DEVICE_CPU; 0 declares no device), FX_DESC_SIZE=n (the descriptor's
 * struct_size, e.g. 8), FX_CREATE_NULL (create() returns NULL and sets no error).
 * Not for: real training (without FX_REAL_TERM its forward_backward adds a constant 1).
 */
#include <ctrain/ctrain.h>
#include <stdlib.h>
#include <string.h>

#ifndef FX_NAME
#define FX_NAME fx
#endif
#ifndef FX_KIND
#define FX_KIND CT_KIND_LOSS
#endif
#ifndef FX_MAJOR
#define FX_MAJOR CT_ABI_MAJOR
#endif
#ifndef FX_MINOR
#define FX_MINOR CT_ABI_MINOR
#endif
#define FX_STR2(x) #x
#define FX_STR(x) FX_STR2(x)

#ifdef FX_MISSING_DEP
int fx_dep_value(void); /* defined in libfxdep.so */
#endif

#ifdef FX_CRASH_IN_CONSTRUCTOR
#include <signal.h>
__attribute__((constructor)) static void fx_crash(void) { raise(SIGSEGV); }
#endif

#ifdef FX_REAL_TERM
typedef struct {
    double coef;
} fx_term;
static void *fx_create(const ct_create_args *a, ct_error *err) {
    fx_term *self = calloc(1, sizeof *self);
    if (self && a->api->get_float(a->host, a->section, "coef", &self->coef, err) != CT_OK) {
        free(self);
        return NULL;
    }
    return self;
}
static void fx_destroy(void *self) { free(self); }
/* loss_logitreg.c's arithmetic, row by row in the same order, so the two agree bit for bit */
static int32_t fx_forward_backward(void *p, const ct_loss_batch *b, ct_loss_result *r,
                                   ct_error *err) {
    fx_term *self = p;
    const int64_t N = b->n_rows, V = b->vocab;
    (void)err;
    r->value = 0.0;
    if (b->n_counted <= 0) return CT_OK;
    const double nv = (double)b->n_counted * (double)V;
    const float g = (float)(2.0 * self->coef * b->grad_scale / nv);
    double sum_sq = 0.0;
    for (int64_t i = 0; i < N; i++) {
        if (b->targets[i] < 0) continue;
        for (int64_t j = 0; j < V; j++) sum_sq += (double)b->logits[i * V + j] * b->logits[i * V + j];
    }
    r->value = self->coef * sum_sq / nv;
    if (!b->dlogits) return CT_OK;
    for (int64_t i = 0; i < N; i++) {
        if (b->targets[i] < 0) continue;
        for (int64_t j = 0; j < V; j++) b->dlogits[i * V + j] += g * b->logits[i * V + j];
    }
    return CT_OK;
}
#else
static void *fx_create(const ct_create_args *a, ct_error *err) {
    (void)a;
    (void)err;
#ifdef FX_CREATE_NULL
    return NULL; /* and no code, no message: the host must say the plugin set no error */
#endif
    return calloc(1, 8);
}
static void fx_destroy(void *self) { free(self); }
static int32_t fx_forward_backward(void *self, const ct_loss_batch *b, ct_loss_result *r,
                                   ct_error *err) {
    (void)self;
    (void)b;
    (void)err;
    r->value = 1.0;
#ifdef FX_SILENT_ERROR
    return CT_ERR_INVALID; /* and no message: the host must say which plugin failed */
#endif
#ifdef FX_MISSING_DEP
    r->value += fx_dep_value();
#endif
    return CT_OK;
}
#endif /* FX_REAL_TERM */

static const char *const fx_modes[] = {"fast", "slow", NULL};

#ifdef FX_WIDE_PARAMS
typedef struct {
    ct_param_spec s;
    double        later_members[3]; /* what a newer ct_param_spec might add */
} fx_spec;
#define FX_SPEC(x) {x, {1, 2, 3}}
static const fx_spec fx_params[] = {
    FX_SPEC(CT_PARAM_FLOAT("coef", "0.5", 0, 2, "a weight")),
    FX_SPEC(CT_PARAM_ENUM("mode", "fast", fx_modes, "a choice")),
    FX_SPEC(CT_PARAM_INT("count", "3", 1, 10, "a count")),
    FX_SPEC(CT_PARAM_END),
};
#else
typedef ct_param_spec fx_spec;
#define FX_BAD_DEFAULT 1
#define FX_ENUM_DEFAULT 2
#define FX_NO_CHOICES 3
#define FX_TWICE 4
#define FX_BAD_KEY 5
static const char *const fx_none[] = {NULL};
static const ct_param_spec fx_params[] = {
#if FX_SCHEMA == FX_BAD_DEFAULT
    CT_PARAM_FLOAT("weight", "5", 0, 2, "a default outside its own range"),
#elif FX_SCHEMA == FX_ENUM_DEFAULT
    CT_PARAM_ENUM("style", "medium", fx_modes, "a default that is not a choice"),
#elif FX_SCHEMA == FX_NO_CHOICES
    CT_PARAM_ENUM("style", "fast", fx_none, "an enum without choices"),
#elif FX_SCHEMA == FX_TWICE
    CT_PARAM_INT("count", "3", 1, 10, "declared twice"),
#elif FX_SCHEMA == FX_BAD_KEY
    CT_PARAM_INT("Count", "3", 1, 10, "a key the registry rejects"),
#endif
    CT_PARAM_FLOAT("coef", "0.5", 0, 2, "a weight"),
    CT_PARAM_ENUM("mode", "fast", fx_modes, "a choice"),
    CT_PARAM_INT("count", "3", 1, 10, "a count"),
    CT_PARAM_END,
};
#endif

static const ct_loss_vtable fx_loss_vtable = {
#ifdef FX_SHORT_VTABLE
    .struct_size = offsetof(ct_loss_vtable, forward_backward),
#else
    .struct_size = sizeof(ct_loss_vtable),
#endif
    .create = fx_create,
    .destroy = fx_destroy,
    .forward_backward = fx_forward_backward,
};

/* Another kind: a vtable of that kind's size with every member set to a stub, for tests that
 * load, list and wire plugins but never call them. FX_SHORT_VTABLE cuts off the last member,
 * which is OPTIONAL in every kind but loss. */
typedef void (*fx_fn)(void);
static void fx_stub(void) {}
#define FX_STUB4 fx_stub, fx_stub, fx_stub, fx_stub
#if CT_ABI_MINOR >= 7 /* the optimizer kind */
#define FX_OPTIMIZER_SIZE(k) ((k) == 7 ? sizeof(ct_optimizer_vtable) : 0)
#else
#define FX_OPTIMIZER_SIZE(k) 0
#endif
#define FX_VTABLE_SIZE                                                                          \
    (FX_OPTIMIZER_SIZE(FX_KIND) ? FX_OPTIMIZER_SIZE(FX_KIND)                                    \
     : (FX_KIND) == CT_KIND_MODEL     ? sizeof(ct_model_vtable)                                 \
     : (FX_KIND) == CT_KIND_STRATEGY  ? sizeof(ct_strategy_vtable)                              \
     : (FX_KIND) == CT_KIND_PRECISION ? sizeof(ct_precision_vtable)                             \
     : (FX_KIND) == CT_KIND_COMM      ? sizeof(struct ct_comm_vtable)                           \
     : (FX_KIND) == CT_KIND_DEVICE    ? sizeof(struct ct_device_vtable)                         \
                                      : sizeof(ct_loss_vtable))
static const struct {
    uint32_t struct_size;
    fx_fn    fn[32];
} fx_stub_vtable = {
#ifdef FX_SHORT_VTABLE
    (uint32_t)(FX_VTABLE_SIZE - sizeof(fx_fn)),
#else
    (uint32_t)FX_VTABLE_SIZE,
#endif
    {FX_STUB4, FX_STUB4, FX_STUB4, FX_STUB4, FX_STUB4, FX_STUB4, FX_STUB4, FX_STUB4}};

/* FX_NULL_SLOT: a copy of the chosen vtable with one member NULL, made at load time */
#ifdef FX_NULL_SLOT
static union {
    ct_loss_vtable loss;
    struct {
        uint32_t struct_size;
        fx_fn    fn[32];
    } any;
} fx_holed;
static const void *fx_vtable_with_hole(const void *vt) {
    memcpy(&fx_holed, vt, *(const uint32_t *)vt);
    fx_holed.any.fn[FX_NULL_SLOT] = NULL;
    return &fx_holed;
}
#endif

#ifdef FX_VALIDATE
static int32_t fx_validate(const ct_create_args *a, ct_error *err) {
    const char *mode;
    int64_t count;
    if (a->api->get_string(a->host, a->section, "mode", &mode, err) != CT_OK ||
        a->api->get_int(a->host, a->section, "count", &count, err) != CT_OK)
        return err->code;
    if (!strcmp(mode, "slow") && count > 5)
        return ct_error_set(err, CT_ERR_INVALID, "loss fx: [%s] count = %lld is too many with "
                            "mode = slow ---> set count <= 5 or mode = fast", a->section,
                            (long long)count);
    return CT_OK;
}
#endif

#ifndef FX_DEVICES
#define FX_DEVICES CT_DEVICE_CPU
#endif
#ifndef FX_DESC_SIZE
#define FX_DESC_SIZE sizeof(ct_plugin_desc)
#endif

static const ct_plugin_desc fx_desc = {
    .struct_size = FX_DESC_SIZE,
    .abi_major = FX_MAJOR,
    .abi_minor = FX_MINOR,
    .kind = FX_KIND,
    .name = FX_STR(FX_NAME),
    .version = "0.0.1",
    .summary = "ABI test fixture",
    .params = (const ct_param_spec *)fx_params,
    .param_struct_size = sizeof(fx_spec),
    .devices = FX_DEVICES,
    .vtable = (FX_KIND) == CT_KIND_LOSS ? (const void *)&fx_loss_vtable
                                        : (const void *)&fx_stub_vtable,
#ifdef FX_VALIDATE
    .validate = fx_validate,
#endif
};

#ifndef FX_NO_ENTRY
CT_EXPORT const ct_plugin_desc *ctrain_plugin_v1(void) {
#ifdef FX_NULL_SLOT
    static ct_plugin_desc holed;
    holed = fx_desc;
    holed.vtable = fx_vtable_with_hole(fx_desc.vtable);
    return &holed;
#else
    return &fx_desc;
#endif
}
#else
CT_EXPORT const ct_plugin_desc *not_the_entry(void) { return &fx_desc; }
#endif
