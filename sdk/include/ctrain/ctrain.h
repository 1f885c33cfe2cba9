/* ctrain.h — the ctrain plugin ABI, version 1 (the SDK's one public header).
 *
 * A plugin is a shared object that exports exactly one symbol, ctrain_plugin_v1, returning a
 * descriptor (ct_plugin_desc) that names the plugin, its kind, its parameter schema and the
 * vtable of its kind. The host (the `ctrain` program) loads it with dlopen and wires it from an
 * INI file. This header is not for host internals: nothing here refers to host structures.
 *
 * A complete loss plugin (build: cc -shared -fPIC -fvisibility=hidden -Wl,-z,defs \
 *   $(pkg-config --cflags ctrain-sdk) mse_logit.c -o loss_mse_logit.so -lm):
 *
 *   #include <ctrain/ctrain.h>
 *   #include <stdlib.h>
 *
 *   typedef struct { float coef; } mse_logit;          // one instance per rank
 *
 *   static void *mse_create(const ct_create_args *a, ct_error *err) {
 *       mse_logit *self = calloc(1, sizeof *self);
 *       if (!self) return ct_error_set(err, CT_ERR_NOMEM, "out of memory"), NULL;
 *       double coef;
 *       if (a->api->get_float(a->host, a->section, "coef", &coef, err) != CT_OK) {
 *           free(self); return NULL;
 *       }
 *       self->coef = (float)coef;
 *       return self;
 *   }
 *   static void mse_destroy(void *self) { free(self); }
 *
 *   // value = coef * mean over counted rows of mean_v(logit^2); d/dlogit = 2*coef*logit/(V*rows)
 *   // The batch may be a range of the micro-batch's rows (ABI 1.3, forward_backward_rows):
 *   // b->n_rows rows from row b->row_begin on, while b->n_counted counts the whole
 *   // micro-batch, so the values of its ranges add up to the micro-batch's mean.
 *   static int32_t mse_forward_backward(void *p, const ct_loss_batch *b, ct_loss_result *r,
 *                                       ct_error *err) {
 *       mse_logit *self = p; double sum = 0; int64_t rows = b->n_counted;
 *       (void)err;
 *       for (int64_t i = 0; i < b->n_rows; i++) {
 *           if (b->targets[i] < 0) continue;
 *           for (int64_t j = 0; j < b->vocab; j++) {
 *               float z = b->logits[i * b->vocab + j]; sum += (double)z * z;
 *           }
 *       }
 *       if (rows == 0) { r->value = 0; return CT_OK; }
 *       r->value = self->coef * sum / ((double)rows * b->vocab);
 *       if (!b->dlogits) return CT_OK;                  // evaluation: the value only
 *       float g = (float)(2.0 * self->coef / ((double)rows * b->vocab) * b->grad_scale);
 *       for (int64_t i = 0; i < b->n_rows; i++) {
 *           if (b->targets[i] < 0) continue;
 *           for (int64_t j = 0; j < b->vocab; j++)
 *               b->dlogits[i * b->vocab + j] += g * b->logits[i * b->vocab + j];
 *       }
 *       return CT_OK;
 *   }
 *
 *   static const ct_param_spec mse_params[] = {
 *       CT_PARAM_FLOAT("coef", "1e-4", 0.0, 1e3, "weight of the term"),
 *       CT_PARAM_END
 *   };
 *   static const ct_loss_vtable mse_vtable = {
 *       .struct_size = sizeof(ct_loss_vtable), .create = mse_create,
 *       .destroy = mse_destroy, .forward_backward = mse_forward_backward,
 *       .forward_backward_rows = mse_forward_backward, // rows are independent: ranges work
 *   };
 *   CT_DEFINE_PLUGIN(.kind = CT_KIND_LOSS, .name = "mse_logit", .version = "1.0.0",
 *                    .summary = "mean squared logit penalty", .params = mse_params,
 *                    .devices = CT_DEVICE_CPU, .vtable = &mse_vtable)
 *
 * Check it before a real run: `ctrain check-plugin loss_mse_logit.so` compares its gradient
 * with finite differences, calls it as evaluation does (dlogits NULL) and creates and
 * destroys it repeatedly; it prints one line per check.
 *
 * Rules every plugin follows (the host relies on them):
 *   - Compatibility: the host accepts a plugin when abi_major equals its own and abi_minor is
 *     not newer than its own. Structs that cross the boundary start with struct_size and only
 *     ever grow at the end; the reader copies min(struct_size, its own size) into a zeroed
 *     struct, so a member a plugin does not know reads as 0 / NULL. A NULL function pointer
 *     means "not provided". A major bump renames the entry symbol (ctrain_plugin_v2).
 *   - Errors: every fallible call returns a ct_status (CT_OK == 0) and fills the caller-owned
 *     ct_error. A plugin never calls exit() or abort() and never frees memory it did not
 *     allocate; nothing is freed across the boundary. The host contains what a plugin does
 *     anyway and names it: an exit() during a call ends ctrain with status 5 naming the plugin
 *     and the call, a crash names them before the process dies of the signal, a call that does
 *     not return is named when the run is stopped (docs: plugin-guide.md, "Faults").
 *   - Output: stdout belongs to the host (while plugins run, fd 1 points at stderr); log
 *     through ct_host_api.log. The host logs each loss term's value itself (loss/NAME).
 *   - Threading: create and destroy are called on one thread; one instance is used by one rank
 *     thread only. Several ranks may live in one process (the threads engine), each with its
 *     own instance of every plugin, so a plugin keeps no mutable global state. A plugin may
 *     start threads (and OpenMP regions); it joins them in destroy. A rank's instances are
 *     destroyed in the reverse order of creation (optimizer, loss terms, model, strategy,
 *     precision, comm, device), so the device and comm references are valid in every other kind's destroy.
 *     There is no host call that loads or returns another plugin: wrapping one is not
 *     supported.
 *   - Linking: build with -fvisibility=hidden and -Wl,-z,defs; export only the entry symbol.
 *     Host services reach a plugin only through ct_host_api, never as undefined symbols.
 *     CT_DEFINE_PLUGIN writes the entry symbol and the descriptor's fixed fields.
 *   - Members: every vtable member is marked REQUIRED or OPTIONAL below. The host refuses at
 *     load a plugin whose vtable lacks a REQUIRED member (NULL, or beyond its struct_size),
 *     naming the member; an OPTIONAL member may be NULL (test it with CT_HAS_MEMBER).
 *   - History: 1.1 added ct_model_vtable.mean_hidden; 1.2 added ct_plugin_desc.validate,
 *     ct_param_spec.flags (exclusive bounds), ct_model_vtable.prepare_decode/decode
 *     (incremental decoding), ct_model_desc.flops_per_token_fixed/_per_t and
 *     ct_device_vtable.peak_flops (model FLOPs utilisation); 1.3 added row ranges, so the
 *     logits never exist for the whole micro-batch at once: ct_model_desc.head_row_range,
 *     ct_stage_args.row_begin/row_count, ct_loss_batch.row_begin/batch_rows and
 *     ct_loss_vtable.forward_backward_rows (see "Row ranges" below), and the softmax taken
 *     once with the row statistics: ct_device_vtable.row_softmax, ct_loss_batch.probs;
 *     1.4 added ct_model_vtable.hidden_rows (the head's input rows of the latest forward, so
 *     `ctrain what-if` needs one forward per sequence, not one per prefix); 1.5 added
 *     ct_comm_vtable.all_reduce_sr / reduce_scatter_sr (bf16 sums stochastically rounded at
 *     every combine of the engine's own order, so the bf16_sr policy needs no ring of its own
 *     where the engine offers them); 1.6 added CT_REDUCE_AVG (NCCL's ncclAvg, for
 *     strategies that average in the collective as PyTorch FSDP2 does); 1.7 added the
 *     optimizer kind (CT_KIND_OPTIMIZER, ct_optimizer_vtable: the update of each owned
 *     shard, with state buffers the host allocates, checkpoints and reshards) and the
 *     precision policy's loss scaling (ct_precision_vtable.loss_scale, after_reduce,
 *     state_save, state_load: torch.amp.GradScaler's protocol), bf16 master weights
 *     (ct_precision_policy.master_update, ct_master_update, ct_shard.master_dtype), and at the
 *     end of ct_stage_args train, doc_mask, eot_token, step and seed (dropout that is the same
 *     on every replay; document masking) with ct_model_desc.doc_mask. Plugins
 *     built for 1.0 .. 1.6 keep loading.
 *
 * Shape legend used in the comments: B batch (sequences per micro-batch on this rank),
 * T time (tokens per sequence), N = B*T rows, C channels (d_model), V vocabulary size.
 * Matrices are row-major. "Device memory" means memory of the run's device plugin (host
 * memory for device `cpu`, GPU memory for device `cuda`).
 */
#ifndef CTRAIN_CTRAIN_H
#define CTRAIN_CTRAIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * Versions, export macro
 * ------------------------------------------------------------------------------------- */

#define CT_ABI_MAJOR 1
#define CT_ABI_MINOR 7
#define CT_ENTRY_SYMBOL "ctrain_plugin_v1" /* the one exported symbol of ABI major 1 */

#if defined(__GNUC__)
#define CT_EXPORT __attribute__((visibility("default")))
#else
#define CT_EXPORT
#endif

/* Does the vtable `vt` (struct_size first; may be NULL) reach `member` of `type`, and is that
 * member non-NULL? How a caller tests an OPTIONAL member of a plugin that may have been built
 * against an older header (a shorter vtable). */
#define CT_HAS_MEMBER(vt, type, member) \
    ((vt) && (vt)->struct_size >= offsetof(type, member) + sizeof((vt)->member) && (vt)->member)

/* ---------------------------------------------------------------------------------------
 * Status codes and the caller-owned error struct
 * ------------------------------------------------------------------------------------- */

typedef enum ct_status {
    CT_OK              = 0,
    CT_ERR_INVALID     = 1, /* bad argument or configuration value */
    CT_ERR_NOMEM       = 2, /* an allocation failed */
    CT_ERR_IO          = 3, /* a file could not be read or written */
    CT_ERR_UNSUPPORTED = 4, /* this plugin cannot do that (dtype, device, option) */
    CT_ERR_COMM        = 5, /* a collective failed or a peer rank went away */
    CT_ERR_DEVICE      = 6, /* the device (driver, kernel launch) failed */
    CT_ERR_INTERNAL    = 7, /* a broken invariant: a bug, please report it */
} ct_status;

/* Owned by the caller (usually on its stack). A callee that fails sets code and a one-line
 * message that names the thing and says what to do; on success it leaves the struct alone. */
typedef struct ct_error {
    uint32_t struct_size; /* sizeof(ct_error) of the caller */
    int32_t  code;        /* a ct_status; CT_OK while nothing failed */
    char     message[512];
} ct_error;

/* Copy the message `src` (len bytes) into dst (cap bytes, cap >= 64), keeping its end: a text
 * longer than cap - 1 bytes keeps its beginning and its end joined by " … ", the end being its
 * last third of dst, or the hint from the last "--->" on when that is longer and takes at most
 * half of dst; no UTF-8 sequence is split. The end of a message says what to do, so it is never
 * the part lost. */
static inline void ct_message_fit(char *dst, size_t cap, const char *src, size_t len) {
    static const char cut[] = " \xe2\x80\xa6 "; /* " … " */
    if (len < cap) {
        memmove(dst, src, len);
        dst[len] = '\0';
        return;
    }
    size_t tail = len - (cap - 1) / 3, hint = tail;
    for (size_t i = 0; i + 4 <= len; i++)
        if (!memcmp(src + i, "--->", 4)) hint = i;
    if (hint < tail && len - hint <= cap / 2) tail = hint;
    while (tail < len && ((unsigned char)src[tail] & 0xC0) == 0x80) tail++;
    size_t head = cap - 1 - (sizeof cut - 1) - (len - tail);
    while (head > 0 && ((unsigned char)src[head] & 0xC0) == 0x80) head--;
    memmove(dst, src, head);
    memcpy(dst + head, cut, sizeof cut - 1);
    memmove(dst + head + sizeof cut - 1, src + tail, len - tail);
    dst[head + sizeof cut - 1 + len - tail] = '\0';
}

/* Fill err (if non-NULL) with code and a printf-style message; returns code, so a plugin can
 * write `return ct_error_set(err, CT_ERR_INVALID, "n_head %d must divide d_model %d", h, c);`
 * A message longer than err->message keeps its beginning and its end (ct_message_fit). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int32_t ct_error_set(ct_error *err, int32_t code, const char *fmt, ...) {
    if (err) {
        va_list ap, again;
        va_start(ap, fmt);
        va_copy(again, ap);
        err->code = code;
        int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
        char *all = n >= (int)sizeof err->message ? (char *)malloc((size_t)n + 1) : NULL;
        if (all) {
            vsnprintf(all, (size_t)n + 1, fmt, again);
            ct_message_fit(err->message, sizeof err->message, all, (size_t)n);
            free(all);
        }
        va_end(again);
        va_end(ap);
    }
    return code;
}

/* ---------------------------------------------------------------------------------------
 * Enumerations shared by all kinds
 * ------------------------------------------------------------------------------------- */

typedef enum ct_kind {
    CT_KIND_MODEL     = 1,
    CT_KIND_LOSS      = 2,
    CT_KIND_STRATEGY  = 3,
    CT_KIND_PRECISION = 4,
    CT_KIND_COMM      = 5,
    CT_KIND_DEVICE    = 6,
    CT_KIND_OPTIMIZER = 7, /* since ABI 1.7: ct_optimizer_vtable */
} ct_kind;

typedef enum ct_dtype {
    CT_DTYPE_F32  = 1, /* IEEE binary32 */
    CT_DTYPE_BF16 = 2, /* bfloat16 stored as uint16_t: the top half of a binary32 */
    CT_DTYPE_F64  = 3,
    CT_DTYPE_I32  = 4,
    CT_DTYPE_U16  = 5,
    CT_DTYPE_F16  = 6, /* since ABI 1.7: IEEE binary16 stored as uint16_t (numerics.h); a
                        * plugin of an older host never sees it */
} ct_dtype;

/* Bytes per element of a dtype; 0 for an unknown value. */
static inline size_t ct_dtype_size(int32_t dtype) {
    switch (dtype) {
    case CT_DTYPE_F32: case CT_DTYPE_I32: return 4;
    case CT_DTYPE_BF16: case CT_DTYPE_U16: case CT_DTYPE_F16: return 2;
    case CT_DTYPE_F64: return 8;
    default: return 0;
    }
}

/* Lower-case name of a dtype ("f32", "bf16", ...); "?" for an unknown value. */
static inline const char *ct_dtype_name(int32_t dtype) {
    switch (dtype) {
    case CT_DTYPE_F32: return "f32";
    case CT_DTYPE_BF16: return "bf16";
    case CT_DTYPE_F64: return "f64";
    case CT_DTYPE_I32: return "i32";
    case CT_DTYPE_U16: return "u16";
    case CT_DTYPE_F16: return "f16";
    default: return "?";
    }
}

/* Devices a plugin supports: a bit mask in ct_plugin_desc.devices. */
typedef enum ct_device_type {
    CT_DEVICE_CPU  = 1u << 0,
    CT_DEVICE_CUDA = 1u << 1,
} ct_device_type;

typedef enum ct_log_level {
    CT_LOG_ERROR = 0,
    CT_LOG_WARN  = 1,
    CT_LOG_INFO  = 2,
    CT_LOG_DEBUG = 3,
} ct_log_level;

/* How a metric reported by a plugin is combined over ranks before it is logged. */
typedef enum ct_metric_reduce {
    CT_METRIC_MEAN = 0,
    CT_METRIC_SUM  = 1,
    CT_METRIC_MAX  = 2,
    CT_METRIC_MIN  = 3,
} ct_metric_reduce;

/* ---------------------------------------------------------------------------------------
 * Parameter schema
 *
 * A plugin lists the INI keys it accepts as an array of ct_param_spec ended by an entry whose
 * key is NULL (CT_PARAM_END). The host validates every key of the plugin's section against it
 * before create(): unknown keys, wrong types, values out of range or not among the choices are
 * errors that name the file, line and key. A plugin reads the resolved (validated, defaulted)
 * values through ct_host_api's getters, so it never parses text itself.
 * ------------------------------------------------------------------------------------- */

typedef enum ct_param_type {
    CT_PARAM_TYPE_BOOL   = 1, /* true/false, yes/no, on/off, 1/0 */
    CT_PARAM_TYPE_INT    = 2, /* decimal 64-bit integer */
    CT_PARAM_TYPE_FLOAT  = 3, /* decimal or exponent notation; finite */
    CT_PARAM_TYPE_STRING = 4, /* any text up to CT_VALUE_MAX-1 bytes */
    CT_PARAM_TYPE_ENUM   = 5, /* one of choices */
} ct_param_type;

#define CT_VALUE_MAX 1024 /* longest value, in bytes with the terminating NUL */

/* Flags of a ct_param_spec (since ABI 1.2): which ends of [min, max] are excluded. */
typedef enum ct_param_flags {
    CT_PARAM_MIN_EXCLUSIVE = 1u << 0, /* value > min instead of value >= min */
    CT_PARAM_MAX_EXCLUSIVE = 1u << 1, /* value < max instead of value <= max */
} ct_param_flags;

typedef struct ct_param_spec {
    const char        *key;           /* [a-z0-9_]+; NULL ends the array */
    int32_t            type;          /* a ct_param_type */
    const char        *default_value; /* textual default; NULL: the key is required. Checked at
                                         load like an INI value: a default outside the range or
                                         not among the choices refuses the plugin */
    double             min, max;      /* range for INT and FLOAT (inclusive unless flags say
                                         otherwise); ignored if min > max */
    const char *const *choices;       /* ENUM only: NULL-terminated, non-empty list of words */
    const char        *help;          /* one line, shown by `ctrain inspect` */
    uint32_t           flags;         /* since 1.2: ct_param_flags; 0 for older plugins */
} ct_param_spec;

/* The array's element size is given by ct_plugin_desc.param_struct_size, so this struct may
 * grow at the end in a later minor version without breaking older plugins. Keys must be
 * unique within a schema (the host refuses a plugin that repeats one). */

#define CT_PARAM_BOOL(k, def, help) {(k), CT_PARAM_TYPE_BOOL, (def), 1, 0, NULL, (help), 0}
#define CT_PARAM_INT(k, def, lo, hi, help) \
    {(k), CT_PARAM_TYPE_INT, (def), (lo), (hi), NULL, (help), 0}
#define CT_PARAM_FLOAT(k, def, lo, hi, help) \
    {(k), CT_PARAM_TYPE_FLOAT, (def), (lo), (hi), NULL, (help), 0}
/* A float in a range with excluded ends: flags is CT_PARAM_MIN_EXCLUSIVE and/or
 * CT_PARAM_MAX_EXCLUSIVE, e.g. CT_PARAM_FLOAT_X("beta2", "0.95", 0, 1, CT_PARAM_MAX_EXCLUSIVE,
 * "...") accepts [0, 1). */
#define CT_PARAM_FLOAT_X(k, def, lo, hi, flags, help) \
    {(k), CT_PARAM_TYPE_FLOAT, (def), (lo), (hi), NULL, (help), (flags)}
#define CT_PARAM_STRING(k, def, help) {(k), CT_PARAM_TYPE_STRING, (def), 1, 0, NULL, (help), 0}
#define CT_PARAM_ENUM(k, def, choices, help) \
    {(k), CT_PARAM_TYPE_ENUM, (def), 1, 0, (choices), (help), 0}
#define CT_PARAM_END {NULL, 0, NULL, 0, 0, NULL, NULL, 0}

/* ---------------------------------------------------------------------------------------
 * Handles to the device and comm instances of the same rank
 *
 * A plugin that needs memory, casts or collectives calls the rank's device and comm plugins
 * through these references: `ref.vt->alloc(ref.self, ...)`. vt is the host's zero-extended
 * copy of the plugin's vtable, so every member this header declares may be read (NULL = not
 * provided). Both stay valid from create() to destroy().
 * ------------------------------------------------------------------------------------- */

typedef struct ct_device_vtable ct_device_vtable;
typedef struct ct_comm_vtable   ct_comm_vtable;

typedef struct ct_device_ref {
    const ct_device_vtable *vt;
    void                   *self;
    int32_t                 type; /* a ct_device_type: CT_DEVICE_CPU or CT_DEVICE_CUDA */
} ct_device_ref;

typedef struct ct_comm_ref {
    const ct_comm_vtable *vt;
    void                 *self;
    int32_t               rank;       /* 0 .. world_size-1 */
    int32_t               world_size; /* >= 1 */
} ct_comm_ref;

/* ---------------------------------------------------------------------------------------
 * Host services (SQLite/Redis style function table)
 *
 * Every plugin instance receives the table and an opaque ct_host pointer (one per rank) in
 * ct_create_args. All functions are safe to call from the rank thread that owns the instance.
 * ------------------------------------------------------------------------------------- */

typedef struct ct_host ct_host; /* opaque: one per rank */

typedef struct ct_host_api {
    uint32_t struct_size;

    /* Write one log line, prefixed by the rank and the plugin's name. msg has no newline. */
    void (*log)(ct_host *host, int32_t level, const char *msg);

    /* Host memory: 64-byte aligned and zero-filled; NULL when out of memory. Release with
     * free_mem only. For device memory use the device plugin. */
    void *(*alloc)(ct_host *host, uint64_t bytes);
    void (*free_mem)(ct_host *host, void *ptr);

    /* Resolved configuration values of `section` (the instance's own section is
     * ct_create_args.section; a plugin may also read the host's sections: run, data, ...).
     * A key absent from a kind's section ("precision", "comm", "strategy", "device") is looked
     * up in the selected plugin's own section ([precision.amp]: where a plugin's keys live,
     * so a swap of the plugin leaves them inert), so get_*(host, args->section, ...) reads
     * the plugin's keys and the host's ([comm] world_size) alike.
     * Return CT_OK and store the value, or fill err and return CT_ERR_INVALID when the key
     * does not exist or has another type. get_string's result is owned by the host and lives
     * until the run ends. One key is the host's, not the INI file's: get_int(host, "device",
     * "local_rank") is the rank's index on its node as its launcher says (mpirun, srun or
     * torchrun-style variables; an in-process engine's rank; 0 without a launcher): a device
     * plugin picks its GPU by it. get_int(host, "device", "auto_threads") (ctrain 0.1.0
     * hosts of late 2026 on; CT_ERR_INVALID from older ones) is the CPU threads one rank should use when [device]
     * threads = 0: the CPUs this process may use, capped at its share of the node's CPUs among
     * the processes its launcher started there, divided among the ranks of this process; >= 1.
     * Every CPU plugin of a rank takes the same count from it. Two more, under a torchrun-style launch only (CT_ERR_INVALID
     * under any other launcher or none): get_string(host, "comm", "master_addr") and
     * get_int(host, "comm", "master_port") are its MASTER_ADDR and MASTER_PORT (the port 0 when
     * not a number 1..65535), where rank 0 of comm nccl's rendezvous listens. */
    int32_t (*get_bool)(ct_host *host, const char *section, const char *key, int32_t *out,
                        ct_error *err);
    int32_t (*get_int)(ct_host *host, const char *section, const char *key, int64_t *out,
                       ct_error *err);
    int32_t (*get_float)(ct_host *host, const char *section, const char *key, double *out,
                         ct_error *err);
    int32_t (*get_string)(ct_host *host, const char *section, const char *key,
                          const char **out, ct_error *err);

    /* Report a scalar for the current log step, e.g. "loss/zloss/lse_sq". The host combines
     * the reports of all ranks with `reduce` and writes them to metrics.jsonl. */
    void (*metric)(ct_host *host, const char *name, double value, int32_t reduce);
} ct_host_api;

/* What every create() receives. Owned by the host; valid only during create(), but the
 * pointers inside (api, host, section, device, comm) stay valid until destroy(). */
typedef struct ct_create_args {
    uint32_t           struct_size;
    const ct_host_api *api;
    ct_host           *host;
    const char        *section;    /* INI section of this instance: "model", "precision",
                                    * "loss.zloss", ... (a kind's section also reads the
                                    * plugin's own [precision.NAME]: ct_host_api get_*) */
    int32_t            rank;       /* this instance's rank */
    int32_t            world_size;
    ct_device_ref      device;     /* vt == NULL when creating the device plugin itself */
    ct_comm_ref        comm;       /* vt == NULL when creating device and comm plugins */
    uint64_t           seed;       /* [run] seed; the same on every rank */
    void              *comm_world; /* comm plugins of in-process engines: see world_create */
} ct_create_args;

/* ---------------------------------------------------------------------------------------
 * The descriptor: what ctrain_plugin_v1() returns
 * ------------------------------------------------------------------------------------- */

typedef struct ct_plugin_desc {
    uint32_t             struct_size;       /* sizeof(ct_plugin_desc) of the plugin's build */
    uint16_t             abi_major;         /* CT_ABI_MAJOR the plugin was built with */
    uint16_t             abi_minor;         /* CT_ABI_MINOR the plugin was built with */
    int32_t              kind;              /* a ct_kind */
    const char          *name;              /* [a-z0-9_]+, unique within its kind */
    const char          *version;           /* the plugin's own version, e.g. "1.2.0" */
    const char          *summary;           /* one line for `ctrain plugins` */
    const ct_param_spec *params;            /* schema, ended by CT_PARAM_END; may be NULL */
    uint32_t             param_struct_size; /* sizeof(ct_param_spec) of the plugin's build */
    uint32_t             devices;           /* mask of ct_device_type it runs on */
    const void          *vtable;            /* the kind's vtable (ct_loss_vtable, ...) */

    /* Since 1.2, OPTIONAL: check the plugin's section as a whole, beyond what the schema can
     * say (e.g. "n_head must divide d_model"), without creating anything. Called by `ctrain
     * validate` and by `ctrain train` before any rank starts, after the schema check, with
     * args->api / args->host / args->section set (the getters see the resolved values; a
     * plugin may read the host's sections too, e.g. [data] seq_len); rank 0, world_size 1,
     * device and comm unset (vt NULL). Return CT_OK, or fill err with a message naming the
     * key(s) and saying what to do; the host prefixes the file and section. */
    int32_t (*validate)(const struct ct_create_args *args, ct_error *err);
} ct_plugin_desc;

/* The entry point. Must be callable before anything else, any number of times, and return a
 * pointer to static storage. */
typedef const ct_plugin_desc *(*ct_plugin_entry_fn)(void);

/* Define the entry point and the descriptor. Arguments are designated initializers of
 * ct_plugin_desc's own members (.kind, .name, .version, .summary, .params, .devices, .vtable,
 * .validate); struct_size, the ABI version and param_struct_size are filled in. C only. */
#define CT_DEFINE_PLUGIN(...)                                                                  \
    static const ct_plugin_desc ct_plugin_descriptor_ = {                                     \
        .struct_size       = sizeof(ct_plugin_desc),                                         \
        .abi_major         = CT_ABI_MAJOR,                                                   \
        .abi_minor         = CT_ABI_MINOR,                                                   \
        .param_struct_size = sizeof(ct_param_spec),                                          \
        __VA_ARGS__};                                                                        \
    CT_EXPORT const ct_plugin_desc *ctrain_plugin_v1(void) { return &ct_plugin_descriptor_; }

/* ---------------------------------------------------------------------------------------
 * kind: device — memory, casts, element-wise kernels, AdamW on one accelerator (or the CPU);
 * since ABI 1.7 the update is the optimizer kind's, and the adamw optimizer calls the device's
 * adamw kernel where it has no loop of its own (cuda)
 *
 * Pointers named "device memory" come from alloc() of the same instance. Calls run on the
 * instance's compute stream in call order; a call may return before the work is done
 * (asynchronous) unless its comment says it synchronises. synchronize() waits for all of it.
 * ------------------------------------------------------------------------------------- */

typedef enum ct_copy_dir {
    CT_COPY_H2D = 1, /* host memory -> device memory */
    CT_COPY_D2H = 2, /* device memory -> host memory; synchronises */
    CT_COPY_D2D = 3,
} ct_copy_dir;

/* Hyper-parameters of one AdamW update (decoupled weight decay, PyTorch's AdamW). */
typedef struct ct_adamw_args {
    uint32_t struct_size;
    float    lr;           /* learning rate of this step */
    float    beta1, beta2;
    float    eps;
    float    weight_decay; /* applied as p -= lr * weight_decay * p; 0 for no decay */
    int64_t  step;         /* 1-based step, for bias correction */
    float    grad_scale;   /* grad is multiplied by this first (global-norm clipping) */
} ct_adamw_args;

/* A device's peak rate of matrix products (ct_device_vtable.peak_flops). Strings are
 * NUL-terminated, host memory, truncated to fit. */
typedef struct ct_peak {
    uint32_t struct_size;
    double   flops;        /* FLOP/s of this instance (on a cpu, of the threads it was given) */
    char     source[160];  /* how it was found: "measured: 2 threads x cblas_sgemm 256^3, ..."
                              or "datasheet: NVIDIA H100 80GB HBM3, bf16 tensor core dense" */
    char     library[256]; /* the math library behind it ("OpenBLAS 0.3.21 ... kernel
                              Prescott (path)"), or "" */
    char     warning[320]; /* "" or why the figure is below what the hardware can do, with a
                              ---> hint (e.g. OpenBLAS's generic kernel on an AVX-512 CPU) */
} ct_peak;

/* Statistics of a block of logits: the host combines them over micro-batches and ranks. */
typedef struct ct_logit_stats {
    uint32_t struct_size;
    double   sum_logit;    /* sum over rows and vocab of z: for the logit mean */
    double   sum_row_norm; /* sum over rows of ||z_row||_2: for the mean per-token norm */
    double   max_row_norm; /* max over rows of ||z_row||_2 */
    double   sum_lse;      /* sum over rows of logsumexp(z_row) */
    double   max_abs;      /* max |z| */
    int64_t  rows;         /* rows counted */
} ct_logit_stats;

struct ct_device_vtable {
    uint32_t struct_size;

    /* Open the device. args->section is "device". NULL + err on failure (e.g. no GPU:
     * "device cuda: no CUDA-capable GPU found; use [device] type = cpu"). */
    void *(*create)(const ct_create_args *args, ct_error *err); /* REQUIRED */
    void (*destroy)(void *self); /* REQUIRED */

    /* Zero-filled device memory aligned to at least 64 bytes; NULL + err when out of memory.
     * free_mem(NULL) is a no-op. */
    void *(*alloc)(void *self, uint64_t bytes, ct_error *err); /* REQUIRED */
    void (*free_mem)(void *self, void *ptr); /* REQUIRED */

    /* Copy `bytes` in direction `dir` (a ct_copy_dir). */
    int32_t (*copy)(void *self, void *dst, const void *src, uint64_t bytes, int32_t dir,
                    ct_error *err); /* REQUIRED */
    int32_t (*zero)(void *self, void *ptr, uint64_t bytes, ct_error *err); /* REQUIRED */

    /* dst[i] = src[i] converted, for n elements of device memory; to bf16 (and, since 1.7, f16)
     * rounds to nearest even (ct_bf16_from_f32, ct_f16_from_f32). dst and src may be the same
     * buffer only if the dtypes have the same size. Unsupported pairs return
     * CT_ERR_UNSUPPORTED. */
    int32_t (*cast)(void *self, void *dst, int32_t dst_dtype, const void *src, int32_t src_dtype,
                    uint64_t n, ct_error *err); /* REQUIRED */

    /* x[i] *= a (x of dtype, result rounded to dtype). */
    /* REQUIRED: */
    int32_t (*scale)(void *self, void *x, int32_t dtype, uint64_t n, float a, ct_error *err);

    /* y[i] += a * x[i]; y is f32, x is f32 or bf16 (or, since 1.7, f16: the cpu and cuda
     * devices take it). */
    int32_t (*axpy)(void *self, float *y, float a, const void *x, int32_t x_dtype, uint64_t n,
                    ct_error *err); /* REQUIRED */

    /* *out = sum of x[i]^2 in double precision. Synchronises. */
    int32_t (*sumsq)(void *self, const void *x, int32_t dtype, uint64_t n, double *out,
                     ct_error *err); /* REQUIRED */

    /* One AdamW update of n fp32 elements: param, m, v updated in place from grad (all device
     * memory, f32). decay_mask may be NULL (decay all) or n bytes, 1 = apply weight decay. */
    int32_t (*adamw)(void *self, float *param, const float *grad, float *m, float *v,
                     const uint8_t *decay_mask, uint64_t n, const ct_adamw_args *args,
                     ct_error *err); /* REQUIRED */

    /* Row statistics of logits (N rows of V, f32 device memory): row_max[i] = max_j z[i,j],
     * row_lse[i] = logsumexp_j z[i,j] (both device memory, f32, N). If stats is non-NULL the
     * rows' figures are added into it (host memory). Synchronises when stats is non-NULL. */
    /* REQUIRED: */
    int32_t (*row_stats)(void *self, const float *logits, int64_t rows, int64_t vocab,
                         float *row_max, float *row_lse, ct_logit_stats *stats, ct_error *err);

    /* Wait until all work queued on this instance is done. */
    int32_t (*synchronize)(void *self, ct_error *err); /* REQUIRED */

    /* Optional (NULL on devices without streams): the native stream of the compute queue
     * (cudaStream_t for cuda), so a comm plugin can order its work after the compute. */
    void *(*native_stream)(void *self); /* OPTIONAL */

    /* Optional (NULL: not provided): dst (n bf16) = src (n f32) rounded stochastically,
     * element i with ct_bf16_from_f32_sr(src[i], ct_hash64(seed, i) & 0xffff) — the same bits
     * on every device. Pass a new seed per call. dst and src must not overlap. */
    int32_t (*cast_bf16_sr)(void *self, uint16_t *dst, const float *src, uint64_t n,
                            uint64_t seed, ct_error *err); /* OPTIONAL */

    /* Since ABI 1.2, optional (NULL: the host needs [device] peak_tflops for MFU): the peak
     * rate of matrix products in `dtype` (the compute dtype: CT_DTYPE_F32, CT_DTYPE_BF16 or,
     * since 1.7, CT_DTYPE_F16) this instance can reach, into *out (host memory; the caller sets
     * out->struct_size, the plugin fills min(that, its own size) bytes). The cpu device
     * measures (sgemm on its threads, 0.2 s at most), so the host calls it once per rank
     * before step 1; a GPU device looks its name up in a datasheet table. CT_ERR_UNSUPPORTED
     * when the figure is unknown (a GPU not in the table). Synchronises. */
    int32_t (*peak_flops)(void *self, int32_t dtype, ct_peak *out,
                          ct_error *err); /* OPTIONAL */

    /* Since ABI 1.3, optional (NULL: the host calls row_stats, and each loss term takes its
     * own exponentials): row_stats, and also the softmax of every row into probs (rows x
     * vocab f32, device memory): probs[i,j] = exp(z[i,j] - row_max[i]) / sum_j exp(z[i,j] -
     * row_max[i]), from the same exponentials the log-sum-exp sums, so each logit's
     * exponential is taken once for the row statistics and every loss term (ct_loss_batch.
     * probs). row_max, row_lse and stats equal row_stats' bit for bit; probs equals
     * exp(z - row_lse) within a few f32 ulps (a row whose max is not finite gets
     * exp(z - row_lse) itself). Synchronises when stats is non-NULL. */
    int32_t (*row_softmax)(void *self, const float *logits, int64_t rows, int64_t vocab,
                           float *row_max, float *row_lse, float *probs, ct_logit_stats *stats,
                           ct_error *err); /* OPTIONAL */
};

/* ---------------------------------------------------------------------------------------
 * kind: comm — the collective engine of one rank
 *
 * Buffers are device memory of the rank's device. Counts are in elements. A collective is
 * called by every rank of the world in the same order with the same count and dtype (as in
 * MPI and NCCL). Sums in a low-precision dtype round the partial sum to that dtype after every
 * combine (NCCL's ring arithmetic); engines document their order. If `req` is non-NULL the
 * call may return before it is complete and *req receives a handle that must be passed to
 * wait() exactly once before the buffers are touched; if req is NULL the call completes
 * before it returns. On failure of any rank, every rank's next call fails with CT_ERR_COMM and
 * a message that names the failed rank and why, within a bounded time.
 * ------------------------------------------------------------------------------------- */

typedef enum ct_reduce_op {
    CT_REDUCE_SUM = 0,
    CT_REDUCE_MAX = 1,
    CT_REDUCE_MIN = 2,
    /* Since ABI 1.6: the mean over ranks as NCCL's ncclAvg computes it for floating dtypes
     * (f32, bf16, f64): every rank's contribution is first multiplied by 1/world_size rounded
     * to the dtype (bf16(1/3) = 0.333984375) with the product rounded to the dtype, then summed
     * like SUM; nothing is divided afterwards. An engine that cannot do it (an older build)
     * returns CT_ERR_UNSUPPORTED on every rank; over integer dtypes an engine refuses it too
     * (threads, mpi, local) or divides the sum (nccl: NCCL's SumPostDiv). A call with req
     * non-NULL may complete before it returns (mpi does: it premultiplies a copy). */
    CT_REDUCE_AVG = 3,
} ct_reduce_op;

typedef struct ct_request ct_request; /* opaque, owned by the comm instance */

struct ct_comm_vtable {
    uint32_t struct_size;

    /* In-process engines only (threads): create the state the ranks of one world share, for
     * world_size ranks. When this is non-NULL the host runs world_size rank threads in this
     * process and passes the world to each rank's create() as args->comm_world. NULL for
     * engines whose world lives outside the process (local, mpi, nccl). args carries api,
     * host and section ("comm") as create() gets them, so the engine reads its own keys here
     * (threads: algo, timeout_s); rank is 0, device and comm are unset, comm_world is NULL.
     * args->host stays valid until world_destroy. */
    /* OPTIONAL: */
    void *(*world_create)(int32_t world_size, const ct_create_args *args, ct_error *err);
    void (*world_destroy)(void *world); /* OPTIONAL; REQUIRED with world_create */

    /* Join the world. args->device is the rank's device; args->comm is unset. In-process
     * engines take rank and world size from args; the others decide them (mpi: mpirun) and
     * report them through rank() and world_size(). */
    void *(*create)(const ct_create_args *args, ct_error *err); /* REQUIRED */
    void (*destroy)(void *self); /* REQUIRED */

    int32_t (*rank)(void *self); /* OPTIONAL */
    int32_t (*world_size)(void *self); /* OPTIONAL */

    /* recv[i] = op over ranks of send[i], i < count, on every rank. send == recv allowed. */
    /* REQUIRED: */
    int32_t (*all_reduce)(void *self, const void *send, void *recv, uint64_t count,
                          int32_t dtype, int32_t op, ct_request **req, ct_error *err);

    /* send holds world_size*count elements; rank r receives op over ranks of
     * send[r*count .. r*count+count-1] into recv (count elements). */
    /* REQUIRED: */
    int32_t (*reduce_scatter)(void *self, const void *send, void *recv, uint64_t count,
                              int32_t dtype, int32_t op, ct_request **req, ct_error *err);

    /* recv (world_size*count) = the concatenation in rank order of every rank's send (count). */
    int32_t (*all_gather)(void *self, const void *send, void *recv, uint64_t count,
                          int32_t dtype, ct_request **req, ct_error *err); /* REQUIRED */

    /* send and recv hold world_size*count elements: block j of rank i's send arrives as block
     * i of rank j's recv. */
    int32_t (*all_to_all)(void *self, const void *send, void *recv, uint64_t count,
                          int32_t dtype, ct_request **req, ct_error *err); /* REQUIRED */

    /* buf (count) of rank `root` is copied to every rank's buf. Completes before return. */
    int32_t (*broadcast)(void *self, void *buf, uint64_t count, int32_t dtype, int32_t root,
                         ct_error *err); /* REQUIRED */

    int32_t (*barrier)(void *self, ct_error *err); /* REQUIRED */

    /* Point-to-point, blocking: matched by (peer, tag) in call order. */
    int32_t (*send)(void *self, const void *buf, uint64_t count, int32_t dtype, int32_t peer,
                    int32_t tag, ct_error *err); /* REQUIRED */
    int32_t (*recv)(void *self, void *buf, uint64_t count, int32_t dtype, int32_t peer,
                    int32_t tag, ct_error *err); /* REQUIRED */

    /* Complete an asynchronous call. The request is released whether or not it failed. */
    int32_t (*wait)(void *self, ct_request *req, ct_error *err); /* REQUIRED */

    /* Tell every other rank that this one is failing (why: one line) so their collectives end
     * with an error naming this rank instead of hanging. Never blocks for long. */
    void (*abort)(void *self, const char *why); /* OPTIONAL */

    /* Since ABI 1.5, OPTIONAL (both or neither): SUM all_reduce / reduce_scatter of bf16
     * (dtype must be CT_DTYPE_BF16, else CT_ERR_UNSUPPORTED) with stochastic rounding: every
     * combine of the engine's reduction order is ct_bf16_add_sr (numerics.h) with this call's
     * `stream`, element = the index into send (reduce_scatter: block * count + j) and k = the
     * combine's place among that element's world_size-1 combines. Same buffers and aliasing as
     * all_reduce / reduce_scatter; synchronous. Every rank passes the same stream. For a flat
     * ring k is the hop, so an engine whose order is the ring gives the bits of the bf16_sr
     * policy's own ring over send/recv (which it runs where these are NULL). */
    int32_t (*all_reduce_sr)(void *self, const void *send, void *recv, uint64_t count,
                             int32_t dtype, uint64_t stream, ct_error *err); /* OPTIONAL */
    int32_t (*reduce_scatter_sr)(void *self, const void *send, void *recv, uint64_t count,
                                 int32_t dtype, uint64_t stream, ct_error *err); /* OPTIONAL */
};

/* ---------------------------------------------------------------------------------------
 * kind: precision — which dtypes hold what, and how a reduction is done numerically
 * ------------------------------------------------------------------------------------- */

typedef struct ct_precision_policy {
    uint32_t struct_size;
    int32_t  param_dtype;      /* compute dtype of gathered params and activations */
    int32_t  reduce_dtype;     /* dtype gradients are cast to before the collective */
    int32_t  master_dtype;     /* master weights: f32, or since 1.7 bf16 (bf16_master); the
                                  optimizer's state stays f32 (see master_update) */
    int32_t  grad_accum_dtype; /* dtype of the local gradient buffer (micro-batch sums) */
    int32_t  buffer_dtype;     /* non-parameter buffers; informational */
    int32_t  result_dtype;     /* since 1.2: dtype in which this plugin's reduction hooks write
                                  recv; 0 (older plugins) = reduce_dtype. CT_DTYPE_F32 lets a
                                  hook that accumulates in f32 hand back its f32 sums, so they
                                  are not rounded to a bf16 reduce_dtype before the strategy's
                                  post-divide. Applies only to the hooks the plugin provides. */
    int32_t  master_update;    /* since 1.7: how a master_dtype other than f32 takes each step's
                                  update (a ct_master_update). The host widens the owned shard
                                  to an f32 scratch, the optimizer plugin updates that scratch
                                  with its f32 state as for an f32 master, and the host writes
                                  the result back with this rule (precision_kit.h has the
                                  per-element arithmetic). 0 (older plugins, f32 masters):
                                  nearest; ignored for an f32 master. */
} ct_precision_policy;

/* Since ABI 1.7: the rule that writes the optimizer's f32 result x back into a low-precision
 * master weight w (ct_precision_policy.master_update). */
typedef enum ct_master_update {
    CT_MASTER_NEAREST = 0, /* w = round-to-nearest-even(x): an update below half an ulp of w is
                              lost (the baseline that stalls at small learning rates) */
    CT_MASTER_SR      = 1, /* w = stochastically rounded x (E[w] = x): the random bits are
                              ct_hash64 of ([run] seed, step) at the element's index in the
                              unit's flat buffer, so any world size and a resume give the
                              same bits */
    CT_MASTER_KAHAN   = 2, /* Kahan summation: a compensation buffer c (master_dtype, one per
                              master element, zero at the start, sharded and checkpointed
                              like the master) carries what the last rounding lost:
                              y = (x - w) + c; w' = round(w + y); c' = round(y - (w' - w)) */
} ct_master_update;

typedef struct ct_precision_vtable {
    uint32_t struct_size;

    void *(*create)(const ct_create_args *args, ct_error *err); /* REQUIRED */
    void (*destroy)(void *self); /* REQUIRED */

    /* Fill *out (the caller sets out->struct_size). */
    int32_t (*policy)(void *self, ct_precision_policy *out, ct_error *err); /* REQUIRED */

    /* Optional custom reductions, for research policies (stochastic rounding, low-precision
     * wire with fp32 accumulation, ...). NULL: the strategy calls the comm's own collective in
     * reduce_dtype. Same contract as ct_comm_vtable's SUM reduce_scatter / all_reduce,
     * synchronous, device memory; send in reduce_dtype (`dtype`), recv in the policy's
     * result_dtype (reduce_dtype unless the policy says otherwise; then send and recv are never
     * the same buffer). */
    int32_t (*reduce_scatter)(void *self, ct_comm_ref comm, ct_device_ref device,
                              const void *send, void *recv, uint64_t count, int32_t dtype,
                              ct_error *err); /* OPTIONAL */
    int32_t (*all_reduce)(void *self, ct_comm_ref comm, ct_device_ref device, const void *send,
                          void *recv, uint64_t count, int32_t dtype, ct_error *err); /* OPTIONAL */

    /* Since ABI 1.7, OPTIONAL: loss scaling owned by the policy (torch.amp.GradScaler's
     * protocol). NULL (and every plugin built before these members): no scaling, and a
     * non-finite gradient norm stops the run.
     * loss_scale: the factor S of this step; the host multiplies the loss gradient by S and
     *   divides the reduced gradients by S before clipping and the optimizer (a power of two
     *   changes no bit when nothing overflows). Called once per step, before the forward.
     * after_reduce: called once per step on every rank with the same verdict grads_finite
     *   (1: every reduced gradient of every rank is finite; the host agrees it over ranks);
     *   the policy updates its scale and sets *skip (1: the host skips the optimizer update
     *   on every rank alike). With after_reduce, a non-finite gradient no longer stops the run
     *   (a non-finite loss value still does).
     * state_save / state_load: the policy's state (at most CT_PRECISION_STATE_MAX bytes, the
     *   same on every rank), checkpointed by the host with the rank files; state_save writes
     *   *size bytes into buf (cap bytes), state_load reads what state_save wrote. */
    double (*loss_scale)(void *self); /* OPTIONAL */
    int32_t (*after_reduce)(void *self, int32_t grads_finite, int32_t *skip,
                            ct_error *err); /* OPTIONAL */
    int32_t (*state_save)(void *self, void *buf, uint64_t cap, uint64_t *size,
                          ct_error *err); /* OPTIONAL */
    int32_t (*state_load)(void *self, const void *buf, uint64_t size,
                          ct_error *err); /* OPTIONAL */
} ct_precision_vtable;

#define CT_PRECISION_STATE_MAX 256 /* bytes of a policy's state_save blob, at most */

/* ---------------------------------------------------------------------------------------
 * kind: model — parameters as units, computation as stages
 *
 * The model declares its parameters as units (FSDP's wrapping: one per transformer block
 * plus a root unit). The host lays each unit out as one flat buffer: tensor k starts at
 * ct_unit_offset(k) elements (tensors in declaration order, each rounded up to
 * CT_TENSOR_ALIGN elements), and the unit is padded at the end so it splits evenly over the
 * ranks. The model runs as an ordered list of stages; each stage uses one unit. The host
 * calls forward on stages 0..S-1 and backward on S-1..0, handing each call the gathered
 * parameters of the stage's unit, and never asks the model to call back. Activations needed
 * by backward live in the model's own buffers (sized by prepare()).
 * ------------------------------------------------------------------------------------- */

#define CT_TENSOR_ALIGN 64 /* elements */

typedef enum ct_init {
    CT_INIT_ZEROS        = 0,
    CT_INIT_ONES         = 1,
    CT_INIT_NORMAL       = 2, /* N(0, std^2) */
    CT_INIT_TRUNC_NORMAL = 3, /* N(0, std^2) truncated to [-3 std, 3 std] (open_lm) */
} ct_init;

typedef struct ct_tensor_spec {
    const char *name;     /* e.g. "blocks.3.attn.qkv.weight" */
    int32_t     ndim;     /* 1..4 */
    int64_t     shape[4]; /* row-major; unused dims are 0 */
    int32_t     init;     /* a ct_init */
    float       init_std; /* for NORMAL and TRUNC_NORMAL */
    int32_t     decay;    /* 1: AdamW weight decay applies by default (matrices) */
} ct_tensor_spec;

typedef struct ct_unit_spec {
    const char           *name;      /* "root", "block.0", ... */
    uint32_t              n_tensors;
    const ct_tensor_spec *tensors;   /* n_tensors entries, stride tensor_struct_size */
} ct_unit_spec;

typedef struct ct_stage_spec {
    const char *name;  /* "embed", "block.0", ..., "head" */
    int32_t     unit;  /* index into units */
} ct_stage_spec;

typedef struct ct_model_desc {
    uint32_t             struct_size;
    uint32_t             n_units;
    const ct_unit_spec  *units;
    uint32_t             n_stages;
    const ct_stage_spec *stages;
    uint32_t             tensor_struct_size; /* sizeof(ct_tensor_spec) of the plugin's build */
    int64_t              vocab_size;         /* V: logits per row */
    int64_t              max_seq_len;        /* largest T accepted by prepare() */
    int64_t              d_model;            /* C */
    int32_t              head_unit;          /* unit and tensor index of the output-head weight */
    int32_t              head_tensor;        /*   (V, C); for the head weight-norm metric */
    uint64_t             n_params;           /* parameters, counting tied ones once */
    /* Since ABI 1.2, optional (0 and 0: not given; the host then counts 6 * n_params): the
     * model's FLOPs of one training step (forward + backward) per token, for sequences of T
     * tokens, as fixed + per_t * T. The host's MFU uses T = [data] seq_len. Only the model
     * knows which parameters multiply activations and what its attention costs, so it gives
     * the count; describe() runs before prepare(), so T stays a coefficient. Dense transformer
     * convention (PaLM appendix B, nanoGPT's estimate_mfu): fixed = 6 * N (2 forward, 4
     * backward per parameter per token) with N the parameters less the position table (a
     * tied head once; gpt keeps norms and biases in, as nanoGPT), per_t = 12 * L * C (QK^T
     * and AV: 2 * 2 * C per layer per attended position forward, backward twice that; causal
     * masking not discounted). */
    double               flops_per_token_fixed; /* FLOPs per token that do not depend on T */
    double               flops_per_token_per_t; /* FLOPs per token per position of T */
    /* Since ABI 1.3 (0, older plugins: no): 1 when the last stage is a row-local head that
     * may be run over row ranges (ct_stage_args.row_begin/row_count; "Row ranges" below). */
    int32_t              head_row_range;
    /* Since ABI 1.7 (0, older plugins: no): 1 when forward() honours ct_stage_args.doc_mask
     * (attention that does not cross a document boundary; "Document masking" below). The host
     * refuses [data] doc_mask = true with a model that does not declare it. */
    int32_t              doc_mask;
} ct_model_desc;

/* n rounded up to a multiple of a. Tensor k of a unit starts at the sum over j < k of
 * ct_align_up(numel_j, CT_TENSOR_ALIGN); ct_tensor_numel gives numel. */
static inline uint64_t ct_align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

static inline uint64_t ct_tensor_numel(const ct_tensor_spec *t) {
    uint64_t n = 1;
    for (int32_t d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

/* Row ranges (since ABI 1.3). A model whose ct_model_desc.head_row_range is 1 lets the host
 * run its last stage (the head: logits = f(hidden state of the same row)) over ranges of the
 * micro-batch's N rows, so that only a range's logits and dlogits exist at once; the loss
 * terms then see the same range (ct_loss_vtable.forward_backward_rows). For one micro-batch:
 *   - the host calls the head's forward on ranges [row_begin, row_begin + row_count) in
 *     ascending order that cover [0, N) without gaps; the first starts at 0, and the model does
 *     its row-independent work there (gpt: the final norm of all N rows, so mean_hidden and
 *     everything before the head stay exactly as without ranges);
 *   - in training, each range's backward follows that range's forward (and the loss terms),
 *     before the next range's forward: it reads the range's dlogits, ADDS the head's weight
 *     gradient of those rows into args->grads, and keeps the rows' input gradient; the range
 *     that ends at N finishes the stage (gpt: the final norm's backward over all N rows), so
 *     the stages below see the same input gradient as after a whole-batch backward;
 *   - logits / dlogits then point at the range's own (row_count, V) block, not at row 0 of an
 *     (N, V) buffer.
 * row_count 0 (what an older host or any other stage passes) means the whole micro-batch.
 * The results equal the whole-batch ones up to the order of f32 sums over rows (the head's
 * weight gradient is summed range by range). The host adds a range's head gradient in the
 * grad dtype, so it uses ranges in training only when grad_dtype is f32 (one bf16 rounding per
 * range would change the numerics the precision policy chose). */

/* What a stage call receives. Owned by the host for the duration of the call. */
typedef struct ct_stage_args {
    uint32_t     struct_size;
    int32_t      stage;         /* index into the model's stages */
    const void  *params;        /* the stage's unit, gathered, in param_dtype (device memory) */
    void        *grads;         /* backward only: the unit's gradient, in grad_dtype; ADD into */
    int32_t      param_dtype;   /* CT_DTYPE_F32 or CT_DTYPE_BF16 */
    int32_t      grad_dtype;    /* CT_DTYPE_F32 or CT_DTYPE_BF16 */
    const int32_t *tokens;      /* (B,T) input ids, device memory; read by the first stage */
    float       *logits;        /* (N,V) f32 device memory: the last stage's forward writes it;
                                   values are rounded to param_dtype when that is bf16 */
    const float *dlogits;       /* (N,V) f32: the last stage's backward reads it */
    int32_t      micro_step;    /* 0-based index of the micro-batch within the step */
    /* Since ABI 1.3, the last stage of a head_row_range model only ("Row ranges" above):
     * the rows [row_begin, row_begin + row_count) of the micro-batch; logits and dlogits are
     * then (row_count,V). row_count 0 (older hosts, other stages): all N rows. */
    int64_t      row_begin;
    int64_t      row_count;
    /* Since ABI 1.7 (appended; a host older than that passes a shorter struct: a plugin reads
     * these members only when struct_size reaches them, else takes 0 for each). */
    /* 1: a training micro-batch (backward follows this forward; the model may use randomness
     * such as dropout); 0: evaluation, `ctrain logits`, sampling, what-if, check-plugin: the
     * forward must be deterministic and free of training-only noise. The same value is passed
     * to every forward and backward stage of one micro-batch. */
    int32_t      train;
    /* Document masking ([data] doc_mask; "Document masking" below): 1 when the attention of
     * this micro-batch must not cross the document boundaries that eot_token marks; only
     * passed to a model whose ct_model_desc.doc_mask is 1. */
    int32_t      doc_mask;
    int32_t      eot_token;     /* the separator token id (0 <= eot_token < V) when doc_mask */
    int32_t      reserved0;     /* 0 */
    /* Where this micro-batch sits in the run, for randomness that must be the same on every
     * replay (dropout masks) and different from one micro-batch to the next: the optimizer
     * step (1-based, as checkpoints count), and [run] seed. With micro_step and the rank
     * (ct_create_args.rank) they name the micro-batch; a resumed run passes the same values
     * again, so its masks are the same. 0 and 0 outside training. */
    int64_t      step;
    uint64_t     seed;
} ct_stage_args;

/* Document masking (since ABI 1.7). Packed training windows hold several documents, each
 * preceded by the end-of-text token (the layout `ctrain prepare` and GPT-2's data use). With
 * ct_stage_args.doc_mask set, the token at window position t belongs to the document that
 * begins at the last position s <= t holding eot_token (or at 0 when there is none): the
 * separator opens its document, as a beginning-of-sequence token would. Position t attends
 * only to positions s..t. Positions are not restarted: rope and learned positions keep the
 * window's index, as Llama 3's and torchtitan's document masking do (with rope, attention
 * inside a document depends on relative positions only). The separator is then the document's
 * first token in the mask (torchtitan's eos_id rule puts it last: with separators before
 * documents, this is the placement that keeps a document's first token from seeing the
 * previous document). */

/* Since ABI 1.2: what decode() receives (incremental decoding, e.g. `ctrain sample`). Owned by
 * the host for the duration of the call. One sequence (B = 1). */
typedef struct ct_decode_args {
    uint32_t           struct_size;
    const void *const *params;      /* (n_units) every unit's gathered parameters in param_dtype
                                       (device memory), as the strategy's acquire() gives them */
    int32_t            param_dtype; /* CT_DTYPE_F32 or CT_DTYPE_BF16 */
    const int32_t     *tokens;      /* (n_new) ids of the tokens appended, HOST memory */
    int64_t            n_new;       /* >= 1 */
    int64_t            position;    /* tokens already in the cache (their positions are
                                       0..position-1); 0 starts a new sequence */
    float             *logits;      /* (V) f32 HOST memory: the logits of the last new token,
                                       as forward's last stage gives that row */
} ct_decode_args;

typedef struct ct_model_vtable {
    uint32_t struct_size;

    /* args->section is "model". Validate the shape (e.g. n_head divides d_model) here. */
    void *(*create)(const ct_create_args *args, ct_error *err); /* REQUIRED */
    void (*destroy)(void *self); /* REQUIRED */

    /* Describe units and stages. The pointed-to arrays belong to the instance and stay valid
     * until destroy(). */
    int32_t (*describe)(void *self, ct_model_desc *out, ct_error *err); /* REQUIRED */

    /* Size the activation buffers for micro-batches of B sequences of T tokens in
     * compute_dtype. Called before the first forward and whenever B or T changes. */
    /* REQUIRED: */
    int32_t (*prepare)(void *self, int64_t B, int64_t T, int32_t compute_dtype, ct_error *err);

    /* Run one stage forward / backward. Backward of stage s follows forward of all stages of
     * the same micro-batch and backward of stages > s; it ADDS the stage's parameter gradient
     * into args->grads (the host zeroes it at the start of a step). Asynchronous on devices
     * with streams. */
    int32_t (*forward)(void *self, const ct_stage_args *args, ct_error *err); /* REQUIRED */
    int32_t (*backward)(void *self, const ct_stage_args *args, ct_error *err); /* REQUIRED */

    /* Since ABI 1.1, optional: the mean over the rows of the latest forward micro-batch of the
     * final hidden state — the (C) vector the output head multiplies — into `out` (C floats,
     * host memory). Synchronises. Used by the reduction-error probe to turn an error in the
     * head's gradient into the change of the mean logit it causes. */
    int32_t (*mean_hidden)(void *self, float *out, ct_error *err); /* OPTIONAL */

    /* Since ABI 1.2, optional, as a pair: incremental decoding with a key/value cache that the
     * plugin owns. The host uses them only when both are provided; otherwise (an older plugin)
     * it recomputes the whole window with forward() for every new token.
     * prepare_decode sizes the cache for one sequence (B = 1) of up to max_T tokens
     * (1 <= max_T <= max_seq_len) computed in compute_dtype. It is independent of prepare():
     * the activation buffers of training are left alone, so a run may sample between steps.
     * Calling it again re-sizes the cache and empties it. The cache belongs to the instance:
     * it lives until the next prepare_decode() or destroy(), and prepare(), forward() and
     * backward() between decode calls leave it alone. It may return CT_ERR_UNSUPPORTED (e.g.
     * on a device its decode does not cover); the host then falls back to forward(). */
    /* OPTIONAL: */
    int32_t (*prepare_decode)(void *self, int64_t max_T, int32_t compute_dtype, ct_error *err);

    /* Run args->n_new tokens at positions position .. position+n_new-1 through the model,
     * attending to the cached keys and values of positions 0 .. position-1, append their keys
     * and values to the cache, and write the logits of the last new token into args->logits.
     * position 0 empties the cache (a new sequence); any other position must equal the number
     * of tokens cached so far, and position + n_new must not exceed prepare_decode's max_T
     * (else CT_ERR_INVALID, nothing changed). The logits equal those forward() gives the same
     * row of the same window up to summation order (~1e-6 relative in f32). The pointers in
     * args are valid for the call only (the plugin copies what it keeps). Synchronous. */
    int32_t (*decode)(void *self, const ct_decode_args *args, ct_error *err); /* OPTIONAL */

    /* Since ABI 1.4, optional: rows row0 .. row0+n_rows-1 of the latest forward micro-batch's
     * final hidden state — the (N,C) rows the output head multiplies, whose mean mean_hidden
     * gives — into `out` ((n_rows,C) f32, host memory, row-major), as the head read them (so
     * bf16 values under bf16 compute). row0 >= 0, n_rows >= 0 and row0 + n_rows <= N, else
     * CT_ERR_INVALID and nothing is written. Synchronises. `ctrain what-if` forms each token's
     * head gradient from them; without it, it recovers them from mean_hidden of every prefix
     * (T forwards per sequence instead of one). */
    /* OPTIONAL: */
    int32_t (*hidden_rows)(void *self, int64_t row0, int64_t n_rows, float *out, ct_error *err);
} ct_model_vtable;

/* ---------------------------------------------------------------------------------------
 * kind: loss — one term of the training objective
 *
 * The host runs every configured loss term on the same logits and sums their values. Each
 * term ADDS its gradient, times grad_scale, into the shared dlogits buffer.
 * ------------------------------------------------------------------------------------- */

/* In a whole-batch call (forward_backward) the rows are the micro-batch's N rows. In a
 * row-range call (forward_backward_rows, ABI 1.3) they are n_rows rows from row_begin on: every
 * row pointer below points at the range's first row, while n_counted and batch_rows still count
 * the whole micro-batch, so a mean over the micro-batch divides by them and the values of the
 * ranges add up to the micro-batch's value. */
typedef struct ct_loss_batch {
    uint32_t       struct_size;
    const float   *logits;     /* (n_rows,V) f32, device memory */
    const int32_t *targets;    /* (n_rows) next-token ids; < 0 marks a position to ignore */
    const float   *row_max;    /* (n_rows) max_j logits[i,j] */
    const float   *row_lse;    /* (n_rows) logsumexp_j logits[i,j] */
    int64_t        n_rows;     /* rows of this call: N = B*T, or the range's rows */
    int64_t        vocab;      /* V */
    int64_t        n_counted;  /* rows with targets >= 0 in this micro-batch (all of it) */
    float         *dlogits;    /* (n_rows,V) f32, device memory: ADD
                                  d(value)/d(logits)*grad_scale; NULL during evaluation:
                                  compute the value only */
    double         grad_scale; /* the host's weight of this micro-batch (1/grad_accum) */
    ct_device_ref  device;     /* where the buffers live */
    /* Since ABI 1.3 (a plugin built for 1.2 never gets a range): the range's first row within
     * the micro-batch (0 in a whole-batch call), and the micro-batch's rows N (== n_rows in a
     * whole-batch call). The host calls the ranges of a micro-batch in ascending order, ending
     * with the one where row_begin + n_rows == batch_rows. */
    int64_t        row_begin;
    int64_t        batch_rows;
    /* Since ABI 1.3, may be NULL (always NULL for a plugin built for 1.2): (n_rows,V) f32,
     * device memory, the softmax of each row as the device's row_softmax computed it with
     * the row statistics (within a few f32 ulps of exp(logits - row_lse)). A term that needs
     * softmax values may read them instead of taking exponentials again; NULL: compute them
     * from logits and row_lse. */
    const float   *probs;
} ct_loss_batch;

typedef struct ct_loss_result {
    uint32_t struct_size;
    double   value; /* the term's value for this micro-batch (a mean over positions), or in a
                       row-range call the range's share of it */
} ct_loss_result;

typedef struct ct_loss_vtable {
    uint32_t struct_size;

    /* args->section is "loss.<name>". */
    void *(*create)(const ct_create_args *args, ct_error *err); /* REQUIRED */
    void (*destroy)(void *self); /* REQUIRED */

    /* Compute the term's value into *out and, unless batch->dlogits is NULL, add its
     * gradient into it. Synchronous: value is on the host when it returns. A term whose
     * counted rows are zero reports value 0 and adds nothing. */
    int32_t (*forward_backward)(void *self, const ct_loss_batch *batch, ct_loss_result *out,
                                ct_error *err); /* REQUIRED */

    /* Since ABI 1.3, optional: the same on a range of the micro-batch's rows (ct_loss_batch's
     * comment): out->value is the range's share of the micro-batch's value, and the gradient
     * goes into the range's dlogits. A term whose rows are independent given n_counted and
     * batch_rows (ce, zloss, logitreg) sets it to its forward_backward. A term that reports a
     * metric per micro-batch reports it once, on the last range. When any configured term
     * leaves it NULL (a 1.2 plugin), the host gives every term the whole micro-batch. */
    int32_t (*forward_backward_rows)(void *self, const ct_loss_batch *batch,
                                     ct_loss_result *out, ct_error *err); /* OPTIONAL */
} ct_loss_vtable;

/* ---------------------------------------------------------------------------------------
 * kind: strategy — where parameters, gradients and optimizer state live, and which
 * collectives run when (DDP, NO_SHARD, FULL_SHARD)
 *
 * The strategy owns every parameter and gradient buffer. The host asks it for a unit's
 * gathered parameters around each stage, hands it the unit's gradient when the unit's last
 * backward stage is done, and asks for the shards the optimizer plugin must update.
 * ------------------------------------------------------------------------------------- */

typedef struct ct_strategy_setup {
    uint32_t                   struct_size;
    uint32_t                   n_units;
    const uint64_t            *unit_numel;  /* (n_units) elements per unit, before padding */
    const ct_precision_policy *policy;
    const ct_precision_vtable *precision;   /* for custom reductions (may have NULL hooks) */
    void                      *precision_self;
} ct_strategy_setup;

/* The slice of a unit this rank updates (with the optimizer plugin). */
typedef struct ct_shard {
    uint32_t struct_size;
    float   *master;     /* (numel) master weights, device memory, owned by the strategy: f32,
                            or master_dtype elements when that member says otherwise (then
                            cast the pointer: the type stays for source compatibility) */
    float   *grad;       /* (numel) f32 reduced, averaged gradient, valid after finish_backward */
    uint64_t numel;      /* elements in this shard (padding included) */
    uint64_t offset;     /* element offset of master[0] within the unit's padded flat buffer */
    uint64_t padded_numel; /* the unit's padded length: a multiple of world_size*CT_TENSOR_ALIGN */
    int32_t  replicated; /* 1: every rank holds the same shard (DDP, NO_SHARD): a global norm
                            counts it once, not once per rank */
    int32_t  master_dtype; /* since 1.7: the dtype `master` holds, the policy's master_dtype
                              (0, from a strategy built before 1.7: f32) */
} ct_shard;

/* Where a gather happens, for prefetch and freeing decisions. */
typedef enum ct_phase {
    CT_PHASE_FORWARD  = 0,
    CT_PHASE_BACKWARD = 1,
} ct_phase;

typedef struct ct_strategy_vtable {
    uint32_t struct_size;

    /* args->device and args->comm are the rank's engines. */
    void *(*create)(const ct_create_args *args, ct_error *err); /* REQUIRED */
    void (*destroy)(void *self); /* REQUIRED */

    /* Allocate the units' buffers (master shards, gradient buffers, gather buffers). */
    int32_t (*setup)(void *self, const ct_strategy_setup *setup, ct_error *err); /* REQUIRED */

    /* Load unit u's master weights from a full unpadded f32 copy in host memory (every rank
     * passes the same values; each keeps what it owns), rounded to nearest even when the
     * policy's master_dtype is not f32. Used for initialisation and to reshard a checkpoint.
     * Then the compute copy is refreshed as after step_done(). */
    int32_t (*load_unit)(void *self, uint32_t u, const float *full, ct_error *err); /* REQUIRED */

    /* Write unit u's full unpadded master weights into host memory `full` as f32 (a bf16
     * master widened, exactly). Collective: every rank calls it (full_shard all-gathers). */
    int32_t (*save_unit)(void *self, uint32_t u, float *full, ct_error *err); /* REQUIRED */

    /* Make unit u's parameters available in param_dtype for a stage of `phase`; *params gets
     * the gathered flat buffer (device memory). Calls nest: every acquire is followed by one
     * release of the same unit, and a unit may be acquired again while held. */
    int32_t (*acquire)(void *self, uint32_t u, int32_t phase, const void **params,
                       ct_error *err); /* REQUIRED */
    int32_t (*release)(void *self, uint32_t u, int32_t phase, ct_error *err); /* REQUIRED */

    /* The unit's local gradient buffer (grad_accum_dtype, padded length, device memory) into
     * which backward stages add. Zeroed by begin_step(). */
    int32_t (*grad_buffer)(void *self, uint32_t u, void **grads, ct_error *err); /* REQUIRED */

    /* Start of a step (zero the gradient buffers). */
    int32_t (*begin_step)(void *self, ct_error *err); /* REQUIRED */

    /* Unit u's backward is complete for the current micro-batch. On the last micro-batch
     * (last != 0) the strategy reduces the gradient over ranks — it may start the collective
     * asynchronously and return. */
    /* REQUIRED: */
    int32_t (*unit_backward_done)(void *self, uint32_t u, int32_t last, ct_error *err);

    /* Wait for all reductions of the step; afterwards every shard's grad is the global mean
     * gradient in f32. */
    int32_t (*finish_backward)(void *self, ct_error *err); /* REQUIRED */

    /* The shard of unit u this rank updates. */
    int32_t (*shard)(void *self, uint32_t u, ct_shard *out, ct_error *err); /* REQUIRED */

    /* The optimizer has updated the master shards: refresh the compute copies (cast master to
     * param_dtype, as FSDP does before its all-gather). */
    int32_t (*step_done)(void *self, ct_error *err); /* REQUIRED */

    /* Optional: bytes per rank held now, for the memory report (host memory stats).
     * Fills params (master + compute copies), grads, gathered (peak gather buffers). */
    int32_t (*memory)(void *self, uint64_t *params, uint64_t *grads, uint64_t *gathered,
                      ct_error *err); /* OPTIONAL */
} ct_strategy_vtable;


/* ---------------------------------------------------------------------------------------
 * kind: optimizer (since ABI 1.7) — the update of the shards this rank owns
 *
 * The host keeps everything around the update: the learning-rate schedule, global-norm
 * clipping (a factor, ct_optim_step.grad_scale), the non-finite checks and checkpoints.
 * Per step it calls update() once per unit, in unit order, on every rank (so an update may
 * call a collective of args->comm, as muon does on full_shard), with the shard the strategy
 * gives this rank (ct_shard: the whole unit under ddp and no_shard, a contiguous 1/world of
 * the unit's padded flat buffer under full_shard, which may cut a matrix between rows or
 * inside a row).
 *
 * State: the plugin declares up to CT_OPTIM_MAX_STATE named f32 buffers with one element per
 * parameter element (AdamW: "m", "v"). The host allocates them per shard in device memory
 * (zero at the start), saves them in every checkpoint and, when a run resumes on another
 * world size, reshards them exactly like the master weights. State that is not one value per
 * element (a step counter, a scalar) is not supported: the step number comes from the host.
 *
 * Tensors: the shard says which part of which tensor it holds (ct_optim_tensor: the whole
 * tensor's name and shape, the part's first element and length), and its role, so an
 * optimizer may treat hidden 2-D matrices differently from embeddings, the head, norms and
 * biases. Every tensor of the unit is listed on every rank (part_numel 0 where the shard holds
 * none of it), so all ranks see the same list.
 * ------------------------------------------------------------------------------------- */

#define CT_OPTIM_MAX_STATE 8

/* A tensor's role, as the host classifies it (the parameter groups of nanoGPT and torchtitan). */
typedef enum ct_optim_role {
    CT_ROLE_MATRIX    = 0, /* a 2-D (or more) weight inside the network: muon's matrices */
    CT_ROLE_EMBEDDING = 1, /* a 2-D token or position table in the model's root unit */
    CT_ROLE_HEAD      = 2, /* the output head (ct_model_desc.head_tensor; tied: the embedding) */
    CT_ROLE_NORM      = 3, /* a 1-D norm gain or bias (its name holds "ln" or "norm") */
    CT_ROLE_BIAS      = 4, /* any other 1-D tensor */
} ct_optim_role;

typedef struct ct_optim_tensor {
    uint32_t    struct_size;
    const char *name;         /* "blocks.3.attn.qkv.weight"; owned by the host */
    int32_t     ndim;         /* 1..4 */
    int64_t     shape[4];     /* the WHOLE tensor's shape, row-major; unused dims 0 */
    uint64_t    unit_offset;  /* element where the whole tensor starts in the unit's flat buffer */
    uint64_t    part_begin;   /* first element (row-major index into the tensor) in this shard */
    uint64_t    part_numel;   /* elements of the tensor in this shard (0: none) */
    uint64_t    shard_offset; /* where the part starts in the shard's buffers (param, grad,
                                 state); = unit_offset + part_begin - ct_optim_shard.offset */
    int32_t     role;         /* a ct_optim_role */
    float       weight_decay; /* the decay of this tensor's group: [optim] weight_decay, or 0 */
    float       lr_mult;      /* its group's lr multiplier ([optim] lr_mult_ROLE; 1 by default) */
} ct_optim_tensor;

/* The shard of one unit. Pointers are device memory of the rank's device and stay valid
 * during the call only. */
typedef struct ct_optim_shard {
    uint32_t               struct_size;
    uint32_t               unit;          /* the unit's index */
    const char            *unit_name;     /* "root", "block.0", ... */
    float                 *param;         /* (numel) f32 master weights: update in place
                                             (a bf16 master: the host's exact f32 widening of
                                             it, written back by ct_master_update after) */
    const float           *grad;          /* (numel) f32 global mean gradient, not yet
                                             multiplied by ct_optim_step.grad_scale */
    float *const          *state;         /* n_state buffers of (numel) f32, in the order of
                                             ct_optimizer_vtable.state_names */
    uint32_t               n_state;
    uint64_t               numel;         /* elements of the shard (end padding included) */
    uint64_t               offset;        /* element of param[0] in the unit's flat buffer */
    uint64_t               padded_numel;  /* the unit's padded length (= numel * world on
                                             full_shard; = numel when replicated) */
    int32_t                replicated;    /* 1: every rank updates the same whole unit (ddp,
                                             no_shard); 0: each rank a 1/world slice */
    const uint8_t         *decay_mask;    /* (numel) 1 = weight decay applies (0 in padding) */
    uint32_t               n_tensors;     /* every tensor of the unit, in its order */
    const ct_optim_tensor *tensors;       /* n_tensors entries (struct_size each) */
} ct_optim_shard;

/* The hyper-parameters of one step: the host's [optim] keys after the schedule. */
typedef struct ct_optim_step {
    uint32_t struct_size;
    int64_t  step;         /* 1-based count of the updates applied, this one included: a step
                              the precision policy skipped (after_reduce) is not counted, as
                              torch's optimizers never see a step GradScaler skipped */
    float    lr;           /* this step's scheduled lr; a tensor's lr is lr * its lr_mult */
    float    grad_scale;   /* multiply every gradient by this first (global-norm clipping) */
    float    weight_decay; /* [optim] weight_decay (each tensor's own: ct_optim_tensor) */
    float    beta1, beta2; /* [optim] beta1, beta2 (AdamW's; other plugins have own keys) */
    float    eps;          /* [optim] eps */
} ct_optim_step;

typedef struct ct_optimizer_vtable {
    uint32_t struct_size;

    /* args->section is "optimizer", which reads [optimizer.NAME] (the plugin's own keys);
     * args->device and args->comm are the rank's engines. NULL + err on failure. */
    void *(*create)(const ct_create_args *args, ct_error *err); /* REQUIRED */
    void (*destroy)(void *self); /* REQUIRED */

    /* The names of the per-element state buffers, into *names (static storage of the plugin)
     * and their count into *n (0 .. CT_OPTIM_MAX_STATE); e.g. {"m", "v"}. Called once after
     * create; the names go into checkpoints and error messages. */
    int32_t (*state_names)(void *self, uint32_t *n, const char *const **names,
                           ct_error *err); /* REQUIRED */

    /* Update shard->param (and the state) from shard->grad for step `step`. Called for every
     * unit in order on every rank; it may call collectives of the rank's comm (the same on
     * every rank). Synchronous: the host reads param and state after it returns. On error the
     * run stops; the host writes no checkpoint of this step. */
    int32_t (*update)(void *self, const ct_optim_step *step, const ct_optim_shard *shard,
                      ct_error *err); /* REQUIRED */
} ct_optimizer_vtable;

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_CTRAIN_H */
