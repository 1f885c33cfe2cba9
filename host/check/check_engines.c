/* check_engines.c — check-plugin's checks of the engines, device and comm. A device plugin:
 * repeated create/destroy, memory round trips (H2D, D2D, D2H, zero), row_stats against an fp64
 * reference, sumsq, and the f32 <-> bf16 casts bit for bit against ct_bf16_from_f32. A comm
 * plugin, at world size 1 on device cpu: create/destroy, rank and world size, all_reduce
 * (in and out of place, f32 / f64 / bf16, synchronous and with a request), reduce_scatter,
 * all_gather and broadcast round trips. What is not checked yet is printed as a note.
 * Not for: the comm engines' multi-rank arithmetic (tests/unit/test_comm_threads.c).
 */
#include "check/check.h"

#include "plugin/calls.h"

#include <ctrain/numerics.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { DN = 1000, RS_ROWS = 8, RS_V = 13, CYCLES = 20 };

/* Calls into the plugin under test, recorded (calls.h) so that a crash names the call: DEV in
 * the device checks (d, dev), COMM in the comm checks (cv, self). */
#define DEV(member, ...)      CALLS(c->plugin, #member, d->member(dev.self, __VA_ARGS__))
#define DEV_VOID(member, ...) CALLS_VOID(c->plugin, #member, d->member(dev.self, __VA_ARGS__))
#define COMM(member, ...)     CALLS(c->plugin, #member, cv->member(self, __VA_ARGS__))

/* ---- device ------------------------------------------------------------------------------ */

static void device_checks(host_check *c, ct_device_ref dev) {
    const ct_device_vtable *d = dev.vt;
    ct_error err = {.struct_size = sizeof err};
    static float src[DN], back[DN];
    static uint16_t half[DN];
    for (int i = 0; i < DN; i++) src[i] = (float)(4.0 * check_urand(CHECK_SEED, (uint64_t)i));
    float *a = DEV(alloc, sizeof src, &err);
    float *b = a ? DEV(alloc, sizeof src, &err) : NULL;
    uint16_t *h = b ? DEV(alloc, sizeof half, &err) : NULL;
    int32_t rc = h ? CT_OK : (err.code ? err.code : CT_ERR_NOMEM);
    if (rc != CT_OK) {
        check_verdict(c, 0, "alloc of %zu bytes: %s", sizeof src, err.message);
        goto out_free;
    }
    /* round trip H2D, D2D, D2H */
    memset(back, 0, sizeof back);
    rc = DEV(copy, a, src, sizeof src, CT_COPY_H2D, &err);
    if (rc == CT_OK) rc = DEV(copy, b, a, sizeof src, CT_COPY_D2D, &err);
    if (rc == CT_OK) rc = DEV(copy, back, b, sizeof src, CT_COPY_D2H, &err);
    check_verdict(c, rc == CT_OK && !memcmp(src, back, sizeof src),
                  "copy H2D, D2D, D2H round trip of %d floats is exact%s%s", DN,
                  rc == CT_OK ? "" : ": ", rc == CT_OK ? "" : err.message);
    /* zero */
    rc = DEV(zero, b, sizeof src, &err);
    if (rc == CT_OK) rc = DEV(copy, back, b, sizeof src, CT_COPY_D2H, &err);
    int zeros = 0;
    for (int i = 0; i < DN; i++) zeros += back[i] == 0.0f;
    check_verdict(c, rc == CT_OK && zeros == DN, "zero clears every byte: expected %d zeros got %d",
                  DN, zeros);
    /* casts against the SDK's rounding */
    rc = DEV(cast, h, CT_DTYPE_BF16, a, CT_DTYPE_F32, DN, &err);
    if (rc == CT_OK) rc = DEV(copy, half, h, sizeof half, CT_COPY_D2H, &err);
    int bad = -1;
    for (int i = 0; rc == CT_OK && i < DN && bad < 0; i++)
        if (half[i] != ct_bf16_from_f32(src[i])) bad = i;
    if (rc != CT_OK) check_verdict(c, 0, "cast f32 -> bf16: %s", err.message);
    else
        check_verdict(c, bad < 0, "cast f32 -> bf16 rounds to nearest even (ct_bf16_from_f32) on "
                      "%d values%s", DN, bad < 0 ? "" : ": a value differs");
    rc = DEV(cast, b, CT_DTYPE_F32, h, CT_DTYPE_BF16, DN, &err);
    if (rc == CT_OK) rc = DEV(copy, back, b, sizeof back, CT_COPY_D2H, &err);
    bad = -1;
    for (int i = 0; rc == CT_OK && i < DN && bad < 0; i++)
        if (back[i] != ct_bf16_to_f32(half[i])) bad = i;
    check_verdict(c, rc == CT_OK && bad < 0, "cast bf16 -> f32 is exact on %d values%s%s", DN,
                  rc == CT_OK ? "" : ": ", rc == CT_OK ? "" : err.message);
    /* sumsq against a double sum */
    double ss = NAN, ref = 0;
    for (int i = 0; i < DN; i++) ref += (double)src[i] * src[i];
    rc = DEV(sumsq, a, CT_DTYPE_F32, DN, &ss, &err);
    check_verdict(c, rc == CT_OK && fabs(ss - ref) <= 1e-12 * ref,
                  "sumsq in double: expected %.17g got %.17g tol %.2g", ref, ss, 1e-12 * ref);
    /* row_stats against fp64 */
    float *mx = DEV(alloc, RS_ROWS * sizeof(float), &err);
    float *lse = mx ? DEV(alloc, RS_ROWS * sizeof(float), &err) : NULL;
    if (!lse) {
        check_verdict(c, 0, "row_stats buffers: %s", err.message);
    } else {
        float hmx[RS_ROWS], hlse[RS_ROWS];
        rc = DEV(row_stats, a, RS_ROWS, RS_V, mx, lse, NULL, &err);
        if (rc == CT_OK) rc = DEV(copy, hmx, mx, sizeof hmx, CT_COPY_D2H, &err);
        if (rc == CT_OK) rc = DEV(copy, hlse, lse, sizeof hlse, CT_COPY_D2H, &err);
        double worst = 0, want = 0, got = 0;
        int max_ok = 1;
        for (int i = 0; rc == CT_OK && i < RS_ROWS; i++) {
            double m = -INFINITY, s = 0;
            for (int j = 0; j < RS_V; j++) m = fmax(m, src[i * RS_V + j]);
            for (int j = 0; j < RS_V; j++) s += exp((double)src[i * RS_V + j] - m);
            double l = m + log(s);
            max_ok = max_ok && hmx[i] == (float)m;
            if (fabs(hlse[i] - l) > worst) worst = fabs(hlse[i] - l), want = l, got = hlse[i];
        }
        check_verdict(c, rc == CT_OK && max_ok && worst <= 1e-6 * (1 + fabs(want)),
                      "row_stats: row max exact and log-sum-exp within 1e-6 of fp64 (worst: "
                      "expected %.9g got %.9g)%s%s", want, got, rc == CT_OK ? "" : ": ",
                      rc == CT_OK ? "" : err.message);
    }
    DEV_VOID(free_mem, mx);
    DEV_VOID(free_mem, lse);
out_free:
    DEV_VOID(free_mem, a);
    DEV_VOID(free_mem, b);
    DEV_VOID(free_mem, h);
    check_note(c, "not checked yet: scale, axpy, adamw and cast_bf16_sr against references, "
               "asynchrony and synchronize");
}

void check_device(host_check *c) {
    static const char *const skip[] = {"type", NULL};
    host_config *cfg = NULL;
    ct_error err = {.struct_size = sizeof err};
    if (check_config(c, NULL, "device", skip, &cfg, &err) != CT_OK) {
        check_verdict(c, 0, "[device] from --set and defaults: %s", err.message);
        return;
    }
    ct_device_ref none = {0};
    ct_comm_ref no_comm = {0};
    check_instance inst;
    int i = 0;
    for (; i < CYCLES; i++) {
        if (check_create(&inst, c->plugin, cfg, "device", 0, 1, none, no_comm, NULL, &err) != CT_OK)
            break;
        check_destroy(&inst);
    }
    check_verdict(c, i == CYCLES, "create/destroy %d times%s%s", CYCLES, i == CYCLES ? "" : ": ",
                  i == CYCLES ? "" : err.message);
    if (i == CYCLES &&
        check_create(&inst, c->plugin, cfg, "device", 0, 1, none, no_comm, NULL, &err) == CT_OK) {
        ct_device_ref dev = {c->plugin->vtable, inst.self,
                             (c->plugin->desc.devices & CT_DEVICE_CUDA) ? CT_DEVICE_CUDA
                                                                       : CT_DEVICE_CPU};
        device_checks(c, dev);
        check_destroy(&inst);
    }
    config_free(cfg);
}

/* ---- comm -------------------------------------------------------------------------------- */

/* One collective at world 1 must hand back what it was given. */
static void round_trip(host_check *c, const char *what, int32_t rc, const ct_error *err,
                       const void *want, const void *got, size_t bytes) {
    if (rc != CT_OK) check_verdict(c, 0, "%s at world 1: %s", what, err->message);
    else
        check_verdict(c, !memcmp(want, got, bytes), "%s at world 1 returns its input (%zu bytes)%s",
                      what, bytes, memcmp(want, got, bytes) ? ": it differs" : "");
}

static void comm_checks(host_check *c, const ct_comm_vtable *cv, void *self, ct_device_ref dev) {
    const ct_device_vtable *d = dev.vt;
    ct_error err = {.struct_size = sizeof err};
    int32_t rk = cv->rank ? CALLS(c->plugin, "rank", cv->rank(self)) : 0;
    int32_t ws = cv->world_size ? CALLS(c->plugin, "world_size", cv->world_size(self)) : 1;
    check_verdict(c, rk == 0 && ws == 1, "rank() and world_size() at world 1: expected 0 and 1 "
                  "got %d and %d", (int)rk, (int)ws);
    enum { CN = 257 };
    double h[CN], back[CN];
    for (int i = 0; i < CN; i++) h[i] = 8.0 * check_urand(CHECK_SEED, (uint64_t)i);
    float hf[CN], backf[CN];
    uint16_t hb[CN], backb[CN];
    for (int i = 0; i < CN; i++) hf[i] = (float)h[i], hb[i] = ct_bf16_from_f32(hf[i]);
    void *a = d->alloc(dev.self, sizeof h, &err), *b = a ? d->alloc(dev.self, sizeof h, &err) : NULL;
    if (!b) {
        check_verdict(c, 0, "device buffers: %s", err.message);
        goto out;
    }
    static const struct { int32_t dtype; const char *name; } dts[] = {
        {CT_DTYPE_F32, "f32"}, {CT_DTYPE_F64, "f64"}, {CT_DTYPE_BF16, "bf16"}};
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
        const void *src = dts[t].dtype == CT_DTYPE_F32 ? (const void *)hf
                          : dts[t].dtype == CT_DTYPE_F64 ? (const void *)h : (const void *)hb;
        void *dst = dts[t].dtype == CT_DTYPE_F32 ? (void *)backf
                    : dts[t].dtype == CT_DTYPE_F64 ? (void *)back : (void *)backb;
        size_t bytes = CN * ct_dtype_size(dts[t].dtype);
        char what[64];
        snprintf(what, sizeof what, "all_reduce SUM %s out of place", dts[t].name);
        int32_t rc = d->copy(dev.self, a, src, bytes, CT_COPY_H2D, &err);
        if (rc == CT_OK) rc = d->zero(dev.self, b, bytes, &err);
        if (rc == CT_OK)
            rc = COMM(all_reduce, a, b, CN, dts[t].dtype, CT_REDUCE_SUM, NULL, &err);
        if (rc == CT_OK) rc = d->copy(dev.self, dst, b, bytes, CT_COPY_D2H, &err);
        round_trip(c, what, rc, &err, src, dst, bytes);
    }
    /* in place, asynchronous with a request */
    ct_request *req = NULL;
    int32_t rc = d->copy(dev.self, a, hf, sizeof hf, CT_COPY_H2D, &err);
    if (rc == CT_OK) rc = COMM(all_reduce, a, a, CN, CT_DTYPE_F32, CT_REDUCE_SUM, &req, &err);
    if (rc == CT_OK && req) rc = COMM(wait, req, &err);
    if (rc == CT_OK) rc = d->copy(dev.self, backf, a, sizeof hf, CT_COPY_D2H, &err);
    round_trip(c, "all_reduce SUM f32 in place with a request + wait", rc, &err, hf, backf,
               sizeof hf);
    /* reduce_scatter, all_gather, broadcast */
    rc = d->copy(dev.self, a, hf, sizeof hf, CT_COPY_H2D, &err);
    if (rc == CT_OK) rc = COMM(reduce_scatter, a, b, CN, CT_DTYPE_F32, CT_REDUCE_SUM, NULL, &err);
    if (rc == CT_OK) rc = d->copy(dev.self, backf, b, sizeof hf, CT_COPY_D2H, &err);
    round_trip(c, "reduce_scatter SUM f32", rc, &err, hf, backf, sizeof hf);
    rc = d->zero(dev.self, b, sizeof hf, &err);
    if (rc == CT_OK) rc = COMM(all_gather, a, b, CN, CT_DTYPE_F32, NULL, &err);
    if (rc == CT_OK) rc = d->copy(dev.self, backf, b, sizeof hf, CT_COPY_D2H, &err);
    round_trip(c, "all_gather f32", rc, &err, hf, backf, sizeof hf);
    rc = COMM(broadcast, a, CN, CT_DTYPE_F32, 0, &err);
    if (rc == CT_OK) rc = d->copy(dev.self, backf, a, sizeof hf, CT_COPY_D2H, &err);
    round_trip(c, "broadcast f32 from root 0", rc, &err, hf, backf, sizeof hf);
    rc = COMM(barrier, &err);
    check_verdict(c, rc == CT_OK, "barrier at world 1 returns%s%s", rc == CT_OK ? "" : ": ",
                  rc == CT_OK ? "" : err.message);
out:
    d->free_mem(dev.self, a);
    d->free_mem(dev.self, b);
    check_note(c, "not checked yet: world sizes > 1 (sums in ring order, failure of a peer "
               "within a bounded time), all_to_all, send/recv, abort");
}

void check_comm(host_check *c) {
    host_config *cfg = NULL;
    ct_error err = {.struct_size = sizeof err};
    static const char *const skip[] = {"plugin", "world_size", NULL};
    check_instance dev_inst = {0}, inst = {0};
    ct_device_ref dev = {0};
    void *world = NULL;
    const ct_comm_vtable *cv = c->plugin->vtable;
    int32_t rc = check_config(c, "[device]\nthreads = 1\n", "comm", skip, &cfg, &err);
    if (rc == CT_OK) rc = check_device_section(c, cfg, &err);
    if (rc == CT_OK) rc = check_device_open(c, cfg, 0, &dev_inst, &dev, &err);
    if (rc != CT_OK) {
        check_verdict(c, 0, "set-up ([comm] from --set, device cpu): %s", err.message);
        goto out;
    }
    for (int i = 0; i < CYCLES && rc == CT_OK; i++) {
        ct_create_args wa = {.struct_size = sizeof wa, .api = hostapi_table(), .section = "comm",
                             .world_size = 1, .device = dev, .seed = CHECK_SEED};
        ct_host wh;
        hostapi_init(&wh, cfg, 0, c->plugin->desc.name, NULL);
        wa.host = &wh;
        if (cv->world_create &&
            !(world = CALLS(c->plugin, "world_create", cv->world_create(1, &wa, &err)))) {
            rc = err.code ? err.code : CT_ERR_INTERNAL;
            break;
        }
        ct_comm_ref no_comm = {0};
        rc = check_create(&inst, c->plugin, cfg, "comm", 0, 1, dev, no_comm, world, &err);
        if (rc == CT_OK && i == CYCLES - 1) comm_checks(c, cv, inst.self, dev);
        check_destroy(&inst);
        if (world) CALLS_VOID(c->plugin, "world_destroy", cv->world_destroy(world));
        world = NULL;
    }
    check_verdict(c, rc == CT_OK, "%screate/destroy %d times at world 1%s%s",
                  cv->world_create ? "world_create + " : "", CYCLES, rc == CT_OK ? "" : ": ",
                  rc == CT_OK ? "" : err.message);
out:
    check_destroy(&dev_inst);
    if (cfg) config_free(cfg);
}
