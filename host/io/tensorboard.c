/* tensorboard.c — TensorBoard event files (see tensorboard.h): CRC32C, protobuf wire format
 * (varints, fixed64/fixed32, length-delimited fields) and the checked appending writer.
 *
 * The messages (tensorflow/core/util/event.proto, framework/summary.proto):
 *   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
 *                Summary summary = 5; SessionLog session_log = 7; }
 *   Summary    { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
 *   SessionLog { SessionStatus status = 1; }   START = 1
 */
#include "io/tensorboard.h"

#include "base/printable.h"
#include "io/outfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TB_HINT "---> free disk space under [run] out_dir, or set [run] tensorboard = false"

uint32_t tb_crc32c(const void *p, size_t n) {
    const unsigned char *b = p; /* bit by bit: records are small, and no table is shared */
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= b[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

uint32_t tb_masked_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

/* ---- protobuf wire format into a growable buffer ----------------------------------------- */

typedef struct pbuf {
    unsigned char *p;
    size_t         n, cap;
    int            oom;
} pbuf;

static void put(pbuf *b, const void *data, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_varint(pbuf *b, uint64_t v) {
    unsigned char t[10];
    size_t k = 0;
    do {
        t[k++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, t, k);
}

static void put_le(pbuf *b, uint64_t v, int bytes) {
    unsigned char t[8];
    for (int i = 0; i < bytes; i++) t[i] = (unsigned char)(v >> (8 * i));
    put(b, t, (size_t)bytes);
}

/* field `f` of wire type 2 (length-delimited) holding n bytes */
static void put_bytes_field(pbuf *b, int f, const void *data, size_t n) {
    put_varint(b, (uint64_t)f << 3 | 2);
    put_varint(b, n);
    put(b, data, n);
}

/* Event header: wall_time (field 1, fixed64) and step (field 2, varint). */
static void put_event_head(pbuf *b, int64_t step) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    uint64_t bits;
    memcpy(&bits, &wall, 8);
    put_varint(b, 1 << 3 | 1);
    put_le(b, bits, 8);
    put_varint(b, 2 << 3 | 0);
    put_varint(b, (uint64_t)step);
}

/* The TFRecord of one message appended to out. */
static void put_record(pbuf *out, const pbuf *msg) {
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)msg->n >> (8 * i));
    put(out, len, 8);
    put_le(out, tb_masked_crc(tb_crc32c(len, 8)), 4);
    put(out, msg->p, msg->n);
    put_le(out, tb_masked_crc(tb_crc32c(msg->p, msg->n)), 4);
}

/* ---- the file ------------------------------------------------------------------------------ */

/* Write all n bytes at the end; on failure cut the file back to its whole records. */
static int32_t append(tb_writer *w, const pbuf *b, ct_error *err) {
    if (b->oom) return ct_error_set(err, CT_ERR_NOMEM, "out of memory writing %s", w->path);
    if (fd_write_all(w->fd, b->p, b->n) != 0) {
        int saved = errno ? errno : ENOSPC;
        if (ftruncate(w->fd, w->length) != 0 && errno != EINVAL) {
            char shown[2048];
            fprintf(stderr, "ctrain: warning: cannot cut the partial record of %s: %s\n",
                    printable(w->path, shown, sizeof shown), strerror(errno));
        }
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s " TB_HINT, w->path,
                            strerror(saved));
    }
    w->length += (off_t)b->n;
    return CT_OK;
}

/* The seconds in the new file's name: now, or one more than the folder's newest event file,
 * so the names sort in the order written (TensorBoard reads a folder's files by name, and a
 * resumed run's START must come after the events it drops). */
static int32_t file_seconds(const char *dir, long long *out, ct_error *err) {
    long long t = (long long)time(NULL);
    int32_t rc = CT_OK;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (rc == CT_OK && d && (e = readdir(d))) {
        const char *prefix = "events.out.tfevents.";
        if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
        errno = 0;
        long long s = strtoll(e->d_name + strlen(prefix), NULL, 10);
        if (errno == ERANGE || s == LLONG_MAX) /* one more would overflow */
            rc = ct_error_set(err, CT_ERR_INVALID, "%s/%.200s: an event file whose name's "
                              "seconds are beyond any clock ---> move it out of the folder",
                              dir, e->d_name);
        else if (s >= t)
            t = s + 1;
    }
    if (d) closedir(d);
    *out = t;
    return rc;
}

int32_t tb_open(tb_writer *w, const char *dir, int64_t resume_step, ct_error *err) {
    w->fd = -1;
    w->length = 0;
    char host[64] = "host";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "host");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++) /* a file name: letters, digits, '-', '_' and '.' only */
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '_' || *c == '.'))
            *c = '_';
    long long seconds = 0;
    int32_t rc = file_seconds(dir, &seconds, err);
    if (rc != CT_OK) return rc;
    int len = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", dir,
                       seconds, host, (int)getpid());
    if (len < 0 || (size_t)len >= sizeof w->path)
        return ct_error_set(err, CT_ERR_INVALID, "path too long: %s/events.out.tfevents... "
                            "---> use a shorter [run] out_dir", dir);
    /* the one writer's appended file (outfile.h): OUT/tb made, links and inputs refused */
    rc = outfile_append_open(w->path, OUTFILE_TRUNCATE, &w->fd, err);
    if (rc != CT_OK) return rc;
    pbuf msg = {0}, rec = {0};
    put_event_head(&msg, 0);
    put_bytes_field(&msg, 3, "brain.Event:2", strlen("brain.Event:2"));
    put_record(&rec, &msg);
    if (resume_step >= 0) { /* TensorBoard drops what the earlier run logged after this step */
        pbuf log = {0};
        msg.n = 0;
        put_event_head(&msg, resume_step + 1);
        put_varint(&log, 1 << 3 | 0);
        put_varint(&log, 1); /* START */
        put_bytes_field(&msg, 7, log.p, log.n);
        msg.oom |= log.oom;
        put_record(&rec, &msg);
        free(log.p);
    }
    rec.oom |= msg.oom;
    rc = append(w, &rec, err);
    free(msg.p);
    free(rec.p);
    if (rc != CT_OK) {
        close(w->fd);
        w->fd = -1;
    }
    return rc;
}

int32_t tb_write_scalars(tb_writer *w, int64_t step, const char *const *tags,
                         const double *values, int32_t n, ct_error *err) {
    if (w->fd < 0) return CT_OK;
    pbuf summary = {0}, value = {0}, msg = {0}, rec = {0};
    for (int32_t i = 0; i < n; i++) {
        value.n = 0;
        put_bytes_field(&value, 1, tags[i], strlen(tags[i]));
        float f = (float)values[i];
        uint32_t bits;
        memcpy(&bits, &f, 4);
        put_varint(&value, 2 << 3 | 5);
        put_le(&value, bits, 4);
        summary.oom |= value.oom;
        put_bytes_field(&summary, 1, value.p, value.n);
    }
    put_event_head(&msg, step);
    msg.oom |= summary.oom;
    put_bytes_field(&msg, 5, summary.p, summary.n);
    rec.oom |= msg.oom;
    put_record(&rec, &msg);
    int32_t rc = append(w, &rec, err);
    free(summary.p);
    free(value.p);
    free(msg.p);
    free(rec.p);
    return rc;
}

int32_t tb_close(tb_writer *w, ct_error *err) {
    if (w->fd < 0) return CT_OK;
    int bad = fsync(w->fd) != 0 && errno != EINVAL && errno != EROFS;
    int saved = errno;
    if (close(w->fd) != 0 && !bad) bad = 1, saved = errno;
    w->fd = -1;
    if (bad)
        return ct_error_set(err, CT_ERR_IO, "cannot write %s: %s " TB_HINT, w->path,
                            strerror(saved));
    return CT_OK;
}
