/* test_cuda_build.c — the CPU-side claims of the GPU path: the device comparison suite that
 * tests/gpu/ runs on a GPU machine passes here with the cpu device on both sides (so the suite
 * itself is exercised in CI), and choosing device cuda or comm nccl on a machine without a GPU
 * fails with one clear sentence. Not for: CUDA numerics (tests/gpu/, on a GPU machine).
 */
#include "ct_test.h"
#include "harness.h"

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

static char dc_last[512];   /* the last failure the suite reported */
static int  dc_expect_fail; /* 1: a test provokes failures on purpose; record, don't fail */

static void dc_fail(const char *test, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(dc_last, sizeof dc_last, "%s: %s", test, msg);
    if (!dc_expect_fail) ct_test_fail(__FILE__, __LINE__, "%s", dc_last);
}

#include "gpu/device_compare.h"

/* 1 when build/plugins/<so> exists (CUDA plugins are skipped when nvcc is absent). */
static int plugin_built(const char *so) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", ct_test_plugin_dir(), so);
    return access(path, R_OK) == 0;
}

CT_TEST(device_compare_suite_passes_with_the_cpu_device_on_both_sides) {
    ct_harness *h = harness_new("[device]\nthreads = 2\n[device1]\nthreads = 1\n");
    if (!h) return;
    ct_harness_plugin p1;
    ct_error err = {.struct_size = sizeof err};
    dc_pair pair = {.ref = harness_device(h)};
    if (!pair.ref.vt) goto out;
    if (harness_create(h, "device_cpu.so", "device1", &p1, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create device1: %s", err.message);
        goto out;
    }
    pair.dut = (ct_device_ref){(const ct_device_vtable *)p1.vt, p1.self, CT_DEVICE_CPU};
    dc_result r = dc_run_all(&pair, 0);
    CT_CHECK_INT(r.failed, 0);
    CT_CHECK_INT(r.passed, 9);
out:
    harness_free(h);
}

/* The suite must be able to fail: a device whose axpy is off by one ulp is caught. */
static int32_t (*real_axpy)(void *, float *, float, const void *, int32_t, uint64_t, ct_error *);
static int32_t off_by_one_ulp_axpy(void *self, float *y, float a, const void *x, int32_t dt,
                                   uint64_t n, ct_error *err) {
    int32_t rc = real_axpy(self, y, a, x, dt, n, err);
    if (n > 5) y[5] = nextafterf(y[5], INFINITY);
    return rc;
}

CT_TEST(device_compare_suite_catches_a_one_ulp_axpy_error) {
    ct_harness *h = harness_new("[device]\nthreads = 1\n");
    if (!h) return;
    ct_device_ref d = harness_device(h);
    if (!d.vt) goto out;
    ct_device_vtable broken = *d.vt;
    real_axpy = d.vt->axpy;
    broken.axpy = off_by_one_ulp_axpy;
    dc_pair pair = {.ref = d, .dut = {&broken, d.self, CT_DEVICE_CPU}};
    dc_expect_fail = 1;
    dc_last[0] = 0;
    int fails = dc_scale_axpy_bits_identical(&pair, 1000);
    dc_expect_fail = 0;
    CT_CHECK_INT(fails, 1);
    CT_CHECK_STR_CONTAINS(dc_last, "axpy f32: 1 of 1000 differ (first at 5)");
out:
    harness_free(h);
}

/* ... and so are a device whose f16 scale is one f16 ulp off in one element, and one whose
 * f32 -> f16 cast truncates instead of rounding to nearest even. */
static int32_t (*real_scale)(void *, void *, int32_t, uint64_t, float, ct_error *);
static int32_t off_by_one_f16_scale(void *self, void *x, int32_t dt, uint64_t n, float a,
                                    ct_error *err) {
    int32_t rc = real_scale(self, x, dt, n, a, err);
    if (dt == CT_DTYPE_F16 && n > 5) ((uint16_t *)x)[5] ^= 1;
    return rc;
}
static int32_t (*real_cast)(void *, void *, int32_t, const void *, int32_t, uint64_t, ct_error *);
static int32_t truncating_f16_cast(void *self, void *dst, int32_t dt, const void *src,
                                   int32_t st, uint64_t n, ct_error *err) {
    if (dt != CT_DTYPE_F16 || st != CT_DTYPE_F32) return real_cast(self, dst, dt, src, st, n, err);
    for (uint64_t i = 0; i < n; i++) { /* toward zero: the nearest f16 not above |x| */
        float x = ((const float *)src)[i];
        uint16_t h = ct_f16_from_f32(x);
        if (isfinite(x) && fabsf(ct_f16_to_f32(h)) > fabsf(x)) h--;
        ((uint16_t *)dst)[i] = h;
    }
    return CT_OK;
}

CT_TEST(device_compare_suite_catches_f16_scale_and_cast_errors) {
    ct_harness *h = harness_new("[device]\nthreads = 1\n");
    if (!h) return;
    ct_device_ref d = harness_device(h);
    if (!d.vt) goto out;
    ct_device_vtable broken = *d.vt;
    real_scale = d.vt->scale;
    real_cast = d.vt->cast;
    broken.scale = off_by_one_f16_scale;
    dc_pair pair = {.ref = d, .dut = {&broken, d.self, CT_DEVICE_CPU}};
    dc_expect_fail = 1;
    dc_last[0] = 0;
    int fails = dc_scale_axpy_bits_identical(&pair, 1000);
    CT_CHECK_INT(fails, 1);
    CT_CHECK_STR_CONTAINS(dc_last, "scale f16: 1 of 1000 differ (first at 5)");
    broken.scale = d.vt->scale;
    broken.cast = truncating_f16_cast;
    dc_last[0] = 0;
    fails = dc_cast_bits_identical(&pair, 4099, CT_DTYPE_F16);
    dc_expect_fail = 0;
    CT_CHECK_MSG(fails >= 1, "a truncating f16 cast passed");
    CT_CHECK_STR_CONTAINS(dc_last, "cast_f32_f16_f32_bits_identical");
    dc_expect_fail = 0;
    (void)dc_cast_bits_identical(&pair, 4099, CT_DTYPE_BF16); /* bf16 is untouched: passes */
out:
    harness_free(h);
}

CT_TEST(cuda_device_without_a_gpu_fails_with_one_sentence_naming_the_fix) {
    if (!plugin_built("device_cuda.so")) {
        printf("note: device_cuda.so not built (no nvcc): nothing to check\n");
        return;
    }
    ct_harness *h = harness_new("[device]\nordinal = -1\n");
    if (!h) return;
    const ct_plugin_desc *desc = harness_load("device_cuda.so");
    if (!desc) goto out;
    CT_CHECK_INT(desc->kind, CT_KIND_DEVICE);
    CT_CHECK(!strcmp(desc->name, "cuda"));
    CT_CHECK_INT(desc->devices, CT_DEVICE_CUDA);
    const ct_device_vtable *vt = desc->vtable;
    CT_CHECK(vt->alloc && vt->copy && vt->cast && vt->scale && vt->axpy && vt->sumsq &&
             vt->adamw && vt->row_stats && vt->synchronize && vt->native_stream &&
             vt->cast_bf16_sr);
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    int32_t rc = harness_create(h, "device_cuda.so", "device", &p, &err);
    if (rc == CT_OK) { /* a GPU machine: the device works instead */
        printf("note: a GPU is present: device cuda created\n");
        CT_CHECK(((const ct_device_vtable *)p.vt)->native_stream(p.self) != NULL);
        goto out;
    }
    CT_CHECK_INT(rc, CT_ERR_DEVICE);
    CT_CHECK_STR_CONTAINS(err.message, "device cuda: no CUDA-capable GPU found (cudaGetDeviceCount: ");
    CT_CHECK_STR_CONTAINS(err.message, ") ---> use [device] type = cpu");
    CT_CHECK(strchr(err.message, '\n') == NULL);
out:
    harness_free(h);
}

CT_TEST(cuda_device_rejects_an_ordinal_outside_the_schema) {
    if (!plugin_built("device_cuda.so")) return;
    ct_harness *h = harness_new("[device]\nordinal = -2\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    CT_CHECK(harness_create(h, "device_cuda.so", "device", &p, &err) != CT_OK);
    CT_CHECK_STR_CONTAINS(err.message, "ordinal");
    harness_free(h);
}

CT_TEST(nccl_comm_on_a_cpu_device_fails_with_one_sentence_naming_the_fix) {
    if (!plugin_built("comm_nccl.so")) {
        printf("note: comm_nccl.so not built (no nvcc): nothing to check\n");
        return;
    }
    ct_harness *h = harness_new("[comm]\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    int32_t rc = harness_create(h, "comm_nccl.so", "comm", &p, &err);
    CT_CHECK(rc != CT_OK);
    CT_CHECK_STR_CONTAINS(err.message, "comm nccl: ");
    CT_CHECK_STR_CONTAINS(err.message, "---> use [device] type = cuda");
    CT_CHECK(strchr(err.message, '\n') == NULL);
    harness_free(h);
}
