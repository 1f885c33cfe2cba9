/* llmc.c — llm.c's fp32 GPT-2 model files, written and checked (see llmc.h). */
#include "weights/llmc.h"

#include "io/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void header_of(const layout *l, int32_t h[256]) {
    memset(h, 0, 256 * sizeof *h);
    h[0] = LLMC_MAGIC;
    h[1] = LLMC_VERSION;
    h[2] = (int32_t)l->s.T;
    h[3] = (int32_t)l->s.V;
    h[4] = (int32_t)l->s.L;
    h[5] = (int32_t)l->s.NH;
    h[6] = (int32_t)l->s.C;
    h[7] = (int32_t)((l->s.V + 127) / 128 * 128);
}

int32_t llmc_write(const char *path, const layout *l, float *const *units, uint32_t flags,
                   ct_error *err) {
    int32_t h[256];
    header_of(l, h);
    uint64_t max = 1;
    for (int32_t i = 0; i < l->n; i++)
        if (layout_numel(&l->e[i]) > max) max = layout_numel(&l->e[i]);
    float *buf = malloc(max * sizeof *buf);
    if (!buf) return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", path);
    outfile o;
    int32_t rc = outfile_open_as(&o, path, flags, err);
    if (rc == CT_OK) {
        outfile_write(&o, h, sizeof h);
        for (int32_t i = 0; i < l->n; i++) {
            layout_get(&l->e[i], units[l->e[i].unit], buf);
            outfile_write(&o, buf, layout_numel(&l->e[i]) * sizeof *buf);
        }
        rc = outfile_commit(&o, err);
    }
    free(buf);
    return rc;
}

int llmc_looks_like(int32_t first_word) {
    /* llm.c's magics are dates: 20240326 (models), 20240520 (token shards), ... */
    return first_word >= 20230101 && first_word <= 20991231;
}

int32_t llmc_check(int fd, const char *path, const layout *l, uint64_t *data_start,
                   ct_error *err) {
    int32_t want[256], got[256];
    header_of(l, want);
    if (pread(fd, got, sizeof got, 0) != (ssize_t)sizeof got)
        return ct_error_set(err, CT_ERR_INVALID, "%s is shorter than llm.c's header (1024 "
                            "bytes) ---> give an llm.c model file", path);
    if (got[0] != LLMC_MAGIC || got[1] != LLMC_VERSION)
        return ct_error_set(err, CT_ERR_INVALID, "%s: magic %d version %d; ctrain reads llm.c's "
                            "fp32 model files (magic %d, version %d) ---> export the model in "
                            "fp32 (llm.c's version 5 files are bf16)", path, got[0], got[1],
                            LLMC_MAGIC, LLMC_VERSION);
    static const char *const field[8] = {"", "", "max_seq_len (seq_len)", "vocab_size",
                                         "num_layers (n_layer)", "num_heads (n_head)",
                                         "channels (d_model)", "padded_vocab_size"};
    char list[400] = "";
    size_t at = 0;
    int bad = 0;
    for (int i = 2; i < 8; i++)
        if (got[i] != want[i]) {
            bad++;
            int k = snprintf(list + at, sizeof list - at, "%s%s: this model %d, the file %d",
                             at ? "; " : "", field[i], want[i], got[i]);
            if (k > 0 && at + (size_t)k < sizeof list) at += (size_t)k;
        }
    if (bad)
        return ct_error_set(err, CT_ERR_INVALID, "%s does not match this model: %s ---> set "
                            "[model] to the file's shape", path, list);
    uint64_t total = 0;
    for (int32_t i = 0; i < l->n; i++) total += layout_numel(&l->e[i]);
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != LLMC_HEADER_BYTES + 4 * total)
        return ct_error_set(err, CT_ERR_INVALID, "%s holds %lld bytes; a model of this shape "
                            "takes %llu (1024 + 4 x %llu parameters) ---> the file is truncated "
                            "or of another model", path, (long long)st.st_size,
                            (unsigned long long)(LLMC_HEADER_BYTES + 4 * total),
                            (unsigned long long)total);
    *data_start = LLMC_HEADER_BYTES;
    return CT_OK;
}
