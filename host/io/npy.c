/* npy.c — NumPy .npy arrays in and out (see npy.h). The header is a Python dict literal; only
 * the three keys NumPy writes are read ('descr', 'fortran_order', 'shape'), by a small parser
 * that accepts NumPy's own spacing and nothing executable. */
#include "io/npy.h"

#include "io/files.h"
#include "io/outfile.h"

#include <ctrain/numerics.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPY_HINT "write it with np.save(path, np.ascontiguousarray(x, dtype=...))"

/* The value after 'key': in the header text; NULL when absent. */
static const char *dict_value(const char *hdr, const char *key) {
    char quoted[32];
    snprintf(quoted, sizeof quoted, "'%s'", key);
    const char *p = strstr(hdr, quoted);
    if (!p) return NULL;
    p += strlen(quoted);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

/* The shape tuple "(N,)" or "(N, V)" at p: 1 or 2 dimensions, each in [0, 2^40). */
static int parse_shape(const char *p, int64_t shape[2], int32_t *ndim) {
    if (*p++ != '(') return 0;
    *ndim = 0;
    shape[0] = shape[1] = 1;
    for (;;) {
        while (*p == ' ') p++;
        if (*p == ')') return *ndim >= 1;
        if (*ndim == 2 || *p < '0' || *p > '9') return 0;
        char *end = NULL;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || v >= (1ll << 40)) return 0;
        shape[(*ndim)++] = v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        else if (*p != ')') return 0;
    }
}

/* Element i of raw data of descr kind ('f', 'i', 'u') and size es as a double. */
static double element(const unsigned char *raw, char kind, int es, int64_t i) {
    const unsigned char *b = raw + (size_t)i * (size_t)es;
    uint64_t u = 0;
    for (int k = 0; k < es; k++) u |= (uint64_t)b[k] << (8 * k); /* little-endian */
    if (kind == 'f') {
        if (es == 2) return ct_f16_to_f32((uint16_t)u);
        if (es == 4) {
            uint32_t w = (uint32_t)u;
            return ct_f32_from_bits(w);
        }
        double d;
        memcpy(&d, &u, sizeof d);
        return d;
    }
    if (kind == 'u') return (double)u;
    int64_t s = es == 8 ? (int64_t)u : (int64_t)(u << (64 - 8 * es)) >> (64 - 8 * es);
    return (double)s;
}

int32_t npy_read(const char *path, const char *what, int32_t want, npy_array *out,
                 ct_error *err) {
    memset(out, 0, sizeof *out);
    char *buf = NULL;
    size_t len = 0;
    int32_t rc = read_bounded(path, what, NPY_HINT, NPY_MAX_BYTES, &buf, &len, err);
    if (rc != CT_OK) return rc;
    const unsigned char *u = (const unsigned char *)buf;
    size_t hlen = 0, start = 0;
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s %s is not a NumPy .npy file (no \\x93NUMPY "
                          "magic) ---> " NPY_HINT, what, path);
        goto out_free;
    }
    if (u[6] == 1) hlen = (size_t)u[8] | (size_t)u[9] << 8, start = 10;
    else if ((u[6] == 2 || u[6] == 3) && len >= 12)
        hlen = (size_t)u[8] | (size_t)u[9] << 8 | (size_t)u[10] << 16 | (size_t)u[11] << 24,
        start = 12;
    if (!start || hlen > len - start) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s %s: .npy format version %d.%d or a header of "
                          "%zu bytes in a file of %zu ---> " NPY_HINT, what, path, u[6], u[7],
                          hlen, len);
        goto out_free;
    }
    char hdr[4096];
    if (hlen >= sizeof hdr) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s %s: a header of %zu bytes (NumPy writes "
                          "under 4096) ---> " NPY_HINT, what, path, hlen);
        goto out_free;
    }
    memcpy(hdr, buf + start, hlen);
    hdr[hlen] = '\0';
    const char *descr = dict_value(hdr, "descr"), *fo = dict_value(hdr, "fortran_order"),
               *shape = dict_value(hdr, "shape");
    char order = 0, kind = 0;
    int es = 0;
    if (descr && descr[0] == '\'' && descr[1] && descr[2] && descr[3] && descr[4] == '\'')
        order = descr[1], kind = descr[2], es = descr[3] - '0'; /* '<f4', '|u1' */
    int ok_f = want == CT_DTYPE_F32 && kind == 'f' && (es == 2 || es == 4 || es == 8);
    int ok_i = want == CT_DTYPE_I32 && ((kind == 'i' && (es == 1 || es == 2 || es == 4 || es == 8)) ||
                                        (kind == 'u' && (es == 1 || es == 2 || es == 4)));
    if (!(ok_f || ok_i) || !(order == '<' || (order == '|' && es == 1))) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s %s: 'descr' is %.12s; %s ---> " NPY_HINT, what,
                          path, descr ? descr : "(absent)",
                          want == CT_DTYPE_F32 ? "logits are little-endian floats ('<f2', '<f4' "
                          "or '<f8')" : "targets are little-endian integers ('<i4', '<i8', ...)");
        goto out_free;
    }
    if (!fo || strncmp(fo, "False", 5) != 0) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s %s: 'fortran_order' is not False (a Fortran-"
                          "order array) ---> " NPY_HINT, what, path);
        goto out_free;
    }
    if (!shape || !parse_shape(shape, out->shape, &out->ndim)) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s %s: 'shape' is not a tuple of one or two "
                          "sizes ---> " NPY_HINT, what, path);
        goto out_free;
    }
    out->count = out->shape[0] * out->shape[1];
    size_t data_at = start + hlen;
    if ((uint64_t)(len - data_at) != (uint64_t)out->count * (uint64_t)es) {
        rc = ct_error_set(err, CT_ERR_INVALID, "%s %s: shape (%lld, %lld) of %d-byte elements "
                          "needs %llu bytes after the header; the file holds %zu ---> " NPY_HINT,
                          what, path, (long long)out->shape[0], (long long)out->shape[1], es,
                          (unsigned long long)out->count * (unsigned long long)es, len - data_at);
        goto out_free;
    }
    out->dtype = want;
    out->data = malloc(out->count ? (size_t)out->count * 4 : 4);
    if (!out->data) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory for %s %s", what, path);
        goto out_free;
    }
    for (int64_t i = 0; i < out->count; i++) {
        double v = element(u + data_at, kind, es, i);
        if (want == CT_DTYPE_F32) {
            ((float *)out->data)[i] = (float)v;
        } else if (v < -2147483648.0 || v > 2147483647.0) {
            rc = ct_error_set(err, CT_ERR_INVALID, "%s %s: element %lld is %.0f, outside int32 "
                              "---> targets are token ids (or negative to ignore a row)", what,
                              path, (long long)i, v);
            free(out->data);
            out->data = NULL;
            goto out_free;
        } else {
            ((int32_t *)out->data)[i] = (int32_t)v;
        }
    }
out_free:
    free(buf);
    return rc;
}

int32_t npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols,
                      uint32_t flags, ct_error *err) {
    char dict[128];
    int n = cols ? snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, "
                            "'shape': (%lld, %lld), }", (long long)rows, (long long)cols)
                 : snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, "
                            "'shape': (%lld,), }", (long long)rows);
    /* version 1.0: magic, version, header length; the header padded with spaces and ended by
     * a newline so that the data starts at a multiple of 64 bytes */
    size_t total = ((size_t)10 + (size_t)n + 1 + 63) / 64 * 64, hlen = total - 10;
    unsigned char head[256];
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (unsigned char)(hlen & 0xff), head[9] = (unsigned char)(hlen >> 8);
    memset(head + 10, ' ', hlen);
    memcpy(head + 10, dict, (size_t)n);
    head[total - 1] = '\n';
    outfile o;
    int32_t rc = outfile_open_as(&o, path, flags, err);
    if (rc != CT_OK) return rc;
    outfile_write(&o, head, total);
    uint64_t count = (uint64_t)rows * (uint64_t)(cols ? cols : 1);
    unsigned char chunk[4096 * 4];
    for (uint64_t i0 = 0; i0 < count; i0 += 4096) { /* little-endian on any host */
        uint64_t m = count - i0 < 4096 ? count - i0 : 4096;
        for (uint64_t i = 0; i < m; i++) {
            uint32_t w = ct_f32_bits(data[i0 + i]);
            for (int k = 0; k < 4; k++) chunk[4 * i + (uint64_t)k] = (unsigned char)(w >> (8 * k));
        }
        outfile_write(&o, chunk, (size_t)m * 4);
    }
    return outfile_commit(&o, err);
}
