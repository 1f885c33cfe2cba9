/* npy.h — NumPy .npy arrays in and out (format versions 1.0 to 3.0, little-endian, C order), for
 * `ctrain check-plugin LOSS.so --logits L.npy --targets T.npy --out G.npy`: an author's own
 * batch in, the term's gradient out. Reading goes through the one reader (files.h), writing
 * through the one writer (outfile.h). Not for: any other array format (safetensors.h, llmc.h).
 */
#ifndef CTRAIN_HOST_NPY_H
#define CTRAIN_HOST_NPY_H

#include <ctrain/ctrain.h>

#include <stdint.h>

#define NPY_MAX_BYTES (1ull << 32) /* a file larger than 4 GiB is refused */

typedef struct npy_array {
    int32_t dtype;    /* CT_DTYPE_F32 or CT_DTYPE_I32: what the caller asked for */
    int32_t ndim;     /* 1 or 2 */
    int64_t shape[2]; /* shape[1] is 1 for a vector */
    int64_t count;    /* shape[0] * shape[1] */
    void   *data;     /* count elements of dtype; the caller frees it */
} npy_array;

/* Read `path` (the role `what` names it in messages: "--logits") as an array of 1 or 2
 * dimensions converted to `want`: CT_DTYPE_F32 takes '<f2', '<f4' and '<f8' (f8 rounded to
 * nearest); CT_DTYPE_I32 takes '<i1' .. '<i8' and '<u1' .. '<u4' whose values fit an int32_t.
 * Anything else — another magic, a big-endian or Fortran-order array, a header the file does
 * not hold, a size that disagrees with the shape, a value out of range — is CT_ERR_INVALID
 * naming the file and the field, with what to do (np.save(path, np.ascontiguousarray(x,
 * dtype=...))). */
int32_t npy_read(const char *path, const char *what, int32_t want, npy_array *out, ct_error *err);

/* Write `count` f32 values of shape (rows, cols) (cols 0: a vector of rows) as a '<f4' array
 * through the one writer with outfile flags `flags` (outfile.h). */
int32_t npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols,
                      uint32_t flags, ct_error *err);

#endif /* CTRAIN_HOST_NPY_H */
