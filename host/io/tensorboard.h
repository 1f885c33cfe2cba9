/* tensorboard.h — TensorBoard event files written by ctrain itself: TFRecord framing (a
 * little-endian uint64 length, its masked CRC32C, the bytes, their masked CRC32C) around
 * hand-encoded tensorflow.Event protobufs (wall_time, step, a Summary of tag/simple_value
 * pairs; a SessionLog START on resume, so TensorBoard drops the steps the resumed run writes
 * again). Each log step's records go out in one checked write, so the file is readable while
 * the run goes on and holds whole records only. Not for: metrics.jsonl (metrics.c).
 */
#ifndef CTRAIN_HOST_TENSORBOARD_H
#define CTRAIN_HOST_TENSORBOARD_H

#include <ctrain/ctrain.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct tb_writer {
    int   fd;          /* -1 when closed */
    off_t length;      /* bytes of whole records written */
    char  path[4096];
} tb_writer;

/* CRC32C (Castagnoli) of n bytes, and TFRecord's mask of it. */
uint32_t tb_crc32c(const void *p, size_t n);
uint32_t tb_masked_crc(uint32_t crc);

/* A new event file DIR/events.out.tfevents.<seconds>.<host>.<pid> (DIR created with its
 * parents; the seconds after any earlier file's there, so names sort in the order written),
 * starting with the file_version record; with resume_step >= 0 also a SessionLog
 * START at step resume_step + 1. CT_ERR_IO naming the file. */
int32_t tb_open(tb_writer *w, const char *dir, int64_t resume_step, ct_error *err);

/* One Event at `step` holding n scalars tags[i] = values[i] (stored as float32, TensorBoard's
 * simple_value; NaN and infinities kept). One checked write; on failure the partial record
 * is cut off again and err names the file. */
int32_t tb_write_scalars(tb_writer *w, int64_t step, const char *const *tags,
                         const double *values, int32_t n, ct_error *err);

/* fsync and close; safe on a closed writer. */
int32_t tb_close(tb_writer *w, ct_error *err);

#endif /* CTRAIN_HOST_TENSORBOARD_H */
