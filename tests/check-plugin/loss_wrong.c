/* loss_wrong.c — a deliberately wrong loss term for tests/cli/test_check_plugin.sh: mean
 * cross-entropy whose gradient has one mistake, chosen at compile time, which
 * `ctrain check-plugin` must name:
 *   -DWRONG_SIGN       d/dz = (onehot - softmax) / n: the sign of the gradient is flipped
 *   -DWRONG_OVERWRITE  dlogits[...] = g instead of += g: the shared buffer is overwritten
 *   -DWRONG_RANGE_MEAN offers forward_backward_rows (ABI 1.3) but divides by the counted rows
 *                      of the call instead of the micro-batch's n_counted: right on a whole
 *                      batch, wrong on a range of rows
 * Built only by the test (cc -shared -fPIC -fvisibility=hidden -Wl,-z,defs -Isdk/include).
 * Not for: anything else. Shape legend: N rows, V vocabulary.
 */
#include <ctrain/ctrain.h>

#include <math.h>
#include <stdlib.h>

#if defined(WRONG_SIGN)
#define WRONG_NAME "ce_sign_error"
#define SIGN (-1.0f)
#elif defined(WRONG_RANGE_MEAN)
#define WRONG_NAME "ce_range_mean"
#define SIGN 1.0f
#else
#define WRONG_NAME "ce_overwrite"
#define SIGN 1.0f
#endif

static void *w_create(const ct_create_args *a, ct_error *err) {
    (void)a;
    void *self = calloc(1, 8);
    if (!self) ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    return self;
}

static void w_destroy(void *self) { free(self); }

static int32_t w_forward_backward(void *self, const ct_loss_batch *b, ct_loss_result *out,
                                  ct_error *err) {
    (void)self;
    (void)err;
    out->value = 0;
    if (b->n_counted == 0) return CT_OK;
    double n = (double)b->n_counted;
#if defined(WRONG_RANGE_MEAN)
    n = 0;
    for (int64_t i = 0; i < b->n_rows; i++) n += b->targets[i] >= 0;
    if (n == 0) return CT_OK;
#endif
    double sum = 0;
    for (int64_t i = 0; i < b->n_rows; i++) {
        int32_t t = b->targets[i];
        if (t < 0) continue;
        sum += (double)b->row_lse[i] - (double)b->logits[i * b->vocab + t];
    }
    out->value = sum / n;
    if (!b->dlogits) return CT_OK;
    const float scale = (float)(b->grad_scale / n);
    for (int64_t i = 0; i < b->n_rows; i++) {
        int32_t t = b->targets[i];
        if (t < 0) continue;
        for (int64_t j = 0; j < b->vocab; j++) {
            float p = expf(b->logits[i * b->vocab + j] - b->row_lse[i]);
            float g = SIGN * scale * (p - (j == t ? 1.0f : 0.0f));
#if defined(WRONG_OVERWRITE)
            b->dlogits[i * b->vocab + j] = g;
#else
            b->dlogits[i * b->vocab + j] += g;
#endif
        }
    }
    return CT_OK;
}

static const ct_param_spec w_params[] = {CT_PARAM_END};
static const ct_loss_vtable w_vtable = {
    .struct_size = sizeof(ct_loss_vtable), .create = w_create, .destroy = w_destroy,
    .forward_backward = w_forward_backward,
#if defined(WRONG_RANGE_MEAN)
    .forward_backward_rows = w_forward_backward,
#endif
};
static const ct_plugin_desc w_desc = {
    .struct_size = sizeof(ct_plugin_desc), .abi_major = CT_ABI_MAJOR, .abi_minor = CT_ABI_MINOR,
    .kind = CT_KIND_LOSS, .name = WRONG_NAME, .version = "0.0.1",
    .summary = "deliberately wrong cross-entropy (tests of check-plugin)", .params = w_params,
    .param_struct_size = sizeof(ct_param_spec), .devices = CT_DEVICE_CPU, .vtable = &w_vtable,
};
CT_EXPORT const ct_plugin_desc *ctrain_plugin_v1(void) { return &w_desc; }
