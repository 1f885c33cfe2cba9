/* cuda_vs_cpu.c — the GPU machine's device test: loads build/plugins/device_cpu.so and
 * device_cuda.so, runs tests/gpu/device_compare.h on GPT-2-sized inputs (cuda against cpu),
 * then checks comm_nccl.so in a world of one (every collective, async requests) and times
 * AdamW over 124M parameters. Prints "ok NAME" / "FAIL NAME" lines and "N passed, N failed".
 * Standalone: needs no host code, no inih or BLAS (cc cuda_vs_cpu.c -ldl -lm).
 * Not for: models and losses (slots: tests/gpu/README.md).
 * Usage: cuda_vs_cpu [--cpu] [PLUGIN_DIR]   (default build/plugins)
 *   --cpu: the device under test is a second cpu device (a dry run of this program anywhere)
 */
#define _GNU_SOURCE
#include <ctrain/ctrain.h>

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void dc_fail(const char *test, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("  %s: ", test);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

#include "device_compare.h"

/* The minimal host (log, memory, every plugin key at its schema default, dlopen) is shared with
 * the other comparison programs. */
#include "plugin_host.h"

/* ---- comm nccl, world of one: every collective leaves the data as a 1-rank op must ---- */

static int nccl_world1(ct_device_ref dev) {
    const char *t = "nccl_world1";
    const ct_plugin_desc *d = ph_load("comm_nccl.so");
    if (!d) return 1;
    const ct_comm_vtable *vt = d->vtable; /* comm's create is not second: no ph_create */
    ph_params = d->params;
    ct_create_args a = {.struct_size = sizeof a, .api = &ph_api, .section = "comm",
                        .world_size = 1, .device = dev};
    ct_error err = {.struct_size = sizeof err};
    void *c = vt->create(&a, &err);
    if (!c) {
        dc_fail(t, "create: %s", err.message);
        return 1;
    }
    int fails = 0;
    if (vt->rank(c) != 0 || vt->world_size(c) != 1)
        dc_fail(t, "rank %d of %d, expected 0 of 1", vt->rank(c), vt->world_size(c)), fails++;
    const uint64_t n = 1 << 20;
    float *x = malloc(n * 4);
    for (uint64_t i = 0; i < n; i++) x[i] = (float)dc_uniform(-1, 1);
    float *dx = dc_upload(t, dev, x, n * 4), *dy = dc_upload(t, dev, NULL, n * 4);
    uint16_t *db = dc_upload(t, dev, NULL, n * 2);
    double *dd = dc_upload(t, dev, NULL, n * 8);
    if (!dx || !dy || !db || !dd) { fails++; goto out; }
    /* f32 sum / max / min out of place, bf16 and f64 in place */
    for (int op = CT_REDUCE_SUM; op <= CT_REDUCE_MIN; op++) {
        dev.vt->zero(dev.self, dy, n * 4, &err);
        if (vt->all_reduce(c, dx, dy, n, CT_DTYPE_F32, op, NULL, &err) != CT_OK) {
            dc_fail(t, "all_reduce op %d: %s", op, err.message);
            fails++;
            continue;
        }
        float *y = dc_download(t, dev, dy, n * 4);
        if (!y || memcmp(x, y, n * 4)) dc_fail(t, "all_reduce f32 op %d changed the data", op), fails++;
        free(y);
    }
    dev.vt->cast(dev.self, db, CT_DTYPE_BF16, dx, CT_DTYPE_F32, n, &err);
    uint16_t *b0 = dc_download(t, dev, db, n * 2);
    ct_request *req = NULL;
    if (vt->all_reduce(c, db, db, n, CT_DTYPE_BF16, CT_REDUCE_SUM, &req, &err) != CT_OK ||
        vt->wait(c, req, &err) != CT_OK) {
        dc_fail(t, "async all_reduce bf16: %s", err.message);
        fails++;
    } else {
        uint16_t *b1 = dc_download(t, dev, db, n * 2);
        if (!b0 || !b1 || memcmp(b0, b1, n * 2)) dc_fail(t, "all_reduce bf16 changed the data"), fails++;
        free(b1);
    }
    free(b0);
    if (vt->all_reduce(c, dd, dd, n, CT_DTYPE_F64, CT_REDUCE_SUM, NULL, &err) != CT_OK)
        dc_fail(t, "all_reduce f64: %s", err.message), fails++;
    /* data movers: gather / scatter / all-to-all of one rank copy send to recv */
    const char *names[3] = {"all_gather", "reduce_scatter", "all_to_all"};
    for (int k = 0; k < 3; k++) {
        dev.vt->zero(dev.self, dy, n * 4, &err);
        int32_t rc = k == 0 ? vt->all_gather(c, dx, dy, n, CT_DTYPE_F32, &req, &err)
                   : k == 1 ? vt->reduce_scatter(c, dx, dy, n, CT_DTYPE_F32, CT_REDUCE_SUM, &req, &err)
                            : vt->all_to_all(c, dx, dy, n, CT_DTYPE_F32, &req, &err);
        if (rc == CT_OK) rc = vt->wait(c, req, &err);
        if (rc != CT_OK) {
            dc_fail(t, "%s: %s", names[k], err.message);
            fails++;
            continue;
        }
        float *y = dc_download(t, dev, dy, n * 4);
        if (!y || memcmp(x, y, n * 4)) dc_fail(t, "%s: recv != send", names[k]), fails++;
        free(y);
    }
    if (vt->broadcast(c, dx, n, CT_DTYPE_F32, 0, &err) != CT_OK ||
        vt->barrier(c, &err) != CT_OK)
        dc_fail(t, "broadcast/barrier: %s", err.message), fails++;
    /* ordering after the compute stream: scale on the device, reduce at once, read back */
    dev.vt->scale(dev.self, dx, CT_DTYPE_F32, n, 2.0f, &err);
    if (vt->all_reduce(c, dx, dy, n, CT_DTYPE_F32, CT_REDUCE_SUM, NULL, &err) == CT_OK) {
        float *y = dc_download(t, dev, dy, n * 4);
        uint64_t bad = 0;
        for (uint64_t i = 0; y && i < n; i++) bad += y[i] != 2.0f * x[i];
        if (!y || bad) dc_fail(t, "collective not ordered after compute: %llu stale", (unsigned long long)bad), fails++;
        free(y);
    } else {
        dc_fail(t, "all_reduce after scale: %s", err.message), fails++;
    }
    /* error paths name the fix */
    if (vt->send(c, dx, 1, CT_DTYPE_F32, 0, 0, &err) == CT_OK || !strstr(err.message, "--->"))
        dc_fail(t, "send to self was accepted or unclear: %s", err.message), fails++;
out:
    dev.vt->free_mem(dev.self, dx), dev.vt->free_mem(dev.self, dy);
    dev.vt->free_mem(dev.self, db), dev.vt->free_mem(dev.self, dd);
    free(x);
    vt->destroy(c);
    return fails;
}

/* ---- throughput: AdamW over GPT-2 124M parameters (reports, never fails) --------------- */

static void adamw_throughput(ct_device_ref dev) {
    const uint64_t n = 124439808;
    ct_error err = {.struct_size = sizeof err};
    float *w = dev.vt->alloc(dev.self, n * 4, &err), *g = dev.vt->alloc(dev.self, n * 4, &err);
    float *m = dev.vt->alloc(dev.self, n * 4, &err), *v = dev.vt->alloc(dev.self, n * 4, &err);
    if (w && g && m && v) {
        ct_adamw_args a = {.struct_size = sizeof a, .lr = 6e-4f, .beta1 = 0.9f, .beta2 = 0.95f,
                           .eps = 1e-8f, .weight_decay = 0.1f, .step = 1, .grad_scale = 1};
        dev.vt->adamw(dev.self, w, g, m, v, NULL, n, &a, &err);
        dev.vt->synchronize(dev.self, &err);
        double t0 = ph_now();
        for (int s = 2; s < 12; s++) {
            a.step = s;
            dev.vt->adamw(dev.self, w, g, m, v, NULL, n, &a, &err);
        }
        dev.vt->synchronize(dev.self, &err);
        double dt = (ph_now() - t0) / 10;
        printf("bench adamw_124M: %.3f ms per step, %.0f GB/s (7 f32 streams)\n", dt * 1e3,
               7.0 * 4 * n / dt / 1e9);
        double ss = 0;
        t0 = ph_now();
        dev.vt->sumsq(dev.self, w, CT_DTYPE_F32, n, &ss, &err);
        printf("bench sumsq_124M: %.3f ms\n", (ph_now() - t0) * 1e3);
    }
    dev.vt->free_mem(dev.self, w), dev.vt->free_mem(dev.self, g);
    dev.vt->free_mem(dev.self, m), dev.vt->free_mem(dev.self, v);
}

int main(int argc, char **argv) {
    int cpu_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu")) cpu_only = 1;
        else ph_dir = argv[i];
    }
    int passed = 0, failed = 0;
    dc_pair p = {.ref = ph_device("device_cpu.so", CT_DEVICE_CPU),
                 .dut = cpu_only ? ph_device("device_cpu.so", CT_DEVICE_CPU)
                                 : ph_device("device_cuda.so", CT_DEVICE_CUDA)};
    if (!p.ref.vt || !p.dut.vt) {
        printf("FAIL setup: the cpu and cuda devices must both load and open\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    double t0 = ph_now();
    dc_result r = dc_run_all(&p, 1);
    passed += r.passed;
    failed += r.failed;
    printf("device comparisons took %.1f s\n", ph_now() - t0);
    if (!cpu_only) {
        int nf = nccl_world1(p.dut);
        printf("%s nccl_world1\n", nf ? "FAIL" : "ok");
        nf ? failed++ : passed++;
        adamw_throughput(p.dut);
    }
    p.dut.vt->destroy(p.dut.self);
    p.ref.vt->destroy(p.ref.self);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
