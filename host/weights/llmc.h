/* llmc.h — llm.c's fp32 GPT-2 model file (train_gpt2.c, gpt2_build_from_checkpoint): a header
 * of 256 int32 (magic 20240326, version 3, max_seq_len, vocab_size, num_layers, num_heads,
 * channels, padded_vocab_size), then the parameters as f32 in llm.c's order (the LAYOUT_LLMC
 * table of export_layout.h). Not for: bf16 model files (version 5) or llm.c's state files. */
#ifndef CTRAIN_HOST_LLMC_H
#define CTRAIN_HOST_LLMC_H

#include "weights/export_layout.h"

#define LLMC_MAGIC 20240326
#define LLMC_VERSION 3
#define LLMC_HEADER_BYTES 1024

/* Write `path` atomically: the header from l->s and every entry of l (LAYOUT_LLMC) in order,
 * units[u] holding unit u's f32 values; flags as outfile_open_as's (OUTFILE_NO_REPLACE: an
 * existing file is refused). */
int32_t llmc_write(const char *path, const layout *l, float *const *units, uint32_t flags,
                   ct_error *err);

/* Does a file starting with this little-endian int32 look like one of llm.c's? Its magics are
 * dates (LLMC_MAGIC for fp32 models); a file starting with another date is taken for llm.c's
 * too, so that a wrong magic or version gets llm.c's message (llmc_check), not safetensors'. */
int llmc_looks_like(int32_t first_word);

/* Check the header of an open llm.c file (fd) against the model l->s: every difference is
 * listed in err ("max_seq_len: this model 32, the file 64; ..."); then the file's size.
 * On success *data_start is where the parameters begin. */
int32_t llmc_check(int fd, const char *path, const layout *l, uint64_t *data_start,
                   ct_error *err);

#endif /* CTRAIN_HOST_LLMC_H */
