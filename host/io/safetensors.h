/* safetensors.h — the safetensors format (Hugging Face), read and written by ctrain itself:
 * uint64 little-endian N, then N bytes of JSON {"NAME": {"dtype": "F32", "shape": [..],
 * "data_offsets": [BEGIN, END]}, ..., "__metadata__": {"KEY": "VALUE", ...}} (written padded
 * with spaces to a multiple of 8), then the tensors' raw little-endian bytes, offsets relative
 * to the end of the header. Tensors are read from F32, BF16 or F16 (converted to f32 exactly)
 * and written as F32 or BF16 (rounded to nearest even).
 * Not for: which tensors a model has or what they are called (export_layout.h). */
#ifndef CTRAIN_HOST_SAFETENSORS_H
#define CTRAIN_HOST_SAFETENSORS_H

#include <ctrain/ctrain.h>

#include <limits.h>

#define ST_MAX_DIMS 8
#define ST_NAME_MAX 256
#define ST_HEADER_MAX (100u << 20) /* bytes of JSON header accepted (as the reference reader) */

typedef struct st_tensor {
    const char *name;        /* in the file's names (st_file.names), NUL-terminated */
    char        dtype[16];
    int32_t     ndim;
    int64_t     shape[ST_MAX_DIMS];
    uint64_t    begin, end;  /* byte offsets after the header */
} st_tensor;

typedef struct st_file {
    char       path[PATH_MAX];
    int        fd;
    uint64_t   data_start; /* 8 + header length */
    uint64_t   file_size;
    st_tensor *t;
    int32_t    n;
    int32_t   *by_name;    /* (n) indices of t sorted by name: st_find's binary search */
    char      *names;      /* the tensors' names, one after another */
    char     **meta;       /* key, value, key, value ... (2 * n_meta strings) */
    int32_t    n_meta;
} st_file;

/* Open and parse `path`: the header's JSON, every tensor's dtype, shape and offsets (inside
 * the file, matching the shape's size). CT_ERR_IO when it cannot be read, CT_ERR_INVALID
 * naming the file and the byte of the header that is wrong. Close with st_close. */
int32_t st_open(const char *path, st_file *f, ct_error *err);
/* The same on a file already opened through files.h (fd, file_size bytes): f owns fd from here
 * on, also on error (it is closed then). The tensors' data must tile the data area exactly:
 * no overlap, no gap, no trailing bytes (as the reference reader). */
int32_t st_open_fd(int fd, const char *path, uint64_t file_size, st_file *f, ct_error *err);
void st_close(st_file *f);
/* The tensor called `name`, or NULL: a binary search (opening sorts the names once, so a
 * header of n tensors costs O(n log n) to open and O(log n) per name). */
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta(const st_file *f, const char *key); /* NULL when absent */
/* 1 when st_read_f32 reads a tensor of this dtype: "F32", "BF16", "F16". */
int st_dtype_readable(const char *dtype);
/* Read a tensor's elements into out (numel floats), converted from BF16 or F16 when it is
 * stored so (exactly: every value of both is an f32). CT_ERR_UNSUPPORTED for other dtypes. */
int32_t st_read_f32(const st_file *f, const st_tensor *t, float *out, ct_error *err);

/* One tensor to write: its name, shape, and a function that fills its numel floats. */
typedef struct st_out {
    const char *name;
    int32_t     ndim;
    int64_t     shape[2];
} st_out;
typedef int32_t (*st_fill_fn)(void *ctx, int32_t i, float *buf, ct_error *err);

/* Write `path` atomically (outfile.h): n tensors in order, each filled by fill(ctx, i, buf)
 * into a buffer of its numel floats and stored as `dtype` ("F32", or "BF16": rounded to
 * nearest even), and the metadata pairs meta[2k] = meta[2k+1]. */
int32_t st_write(const char *path, const st_out *t, int32_t n, const char *const *meta,
                 int32_t n_meta, const char *dtype, st_fill_fn fill, void *ctx, ct_error *err);

#endif /* CTRAIN_HOST_SAFETENSORS_H */
