/* check_guard.c — the buffers check-plugin hands to a plugin, fenced: each lies in its own
 * mapping between two inaccessible guard pages, the bytes between it and the guards hold a
 * pattern, and a const buffer's bytes are copied when sealed. A write past either end faults at
 * once (the fault handler of check_child.c names the buffer) or spoils the pattern; a write into
 * a const buffer changes its bytes; check_buf_verify names the buffer either way.
 * Not for: the host's own buffers during training (those are the device plugin's).
 *
 * Layout of one buffer of `bytes` bytes (rounded up to 64 for the end, so its start keeps the
 * 64-byte alignment device memory has):
 *     [guard page][pattern ... | buffer (bytes) | pattern up to the page end][guard page]
 */
#include "check/check.h"

#include "base/fatal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GUARD_MAX     64   /* buffers alive at once */
#define GUARD_PATTERN 0xA5 /* the fence bytes */

typedef struct guarded {
    unsigned char *map;       /* the whole mapping, guard pages included; NULL: slot free */
    size_t         map_len;
    unsigned char *lo, *hi;   /* the accessible pages [lo, hi) */
    unsigned char *p;         /* the buffer */
    size_t         bytes;
    int            is_const;
    unsigned char *copy;      /* const: the bytes when sealed */
    char           name[48];
} guarded;

static guarded bufs[GUARD_MAX];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static size_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

void *check_buf_alloc(const char *name, size_t bytes, int is_const) {
    size_t pg = page_size(), end = (bytes + 63) / 64 * 64;
    if (end == 0) end = 64;
    size_t data = (end + pg - 1) / pg * pg, len = data + 2 * pg;
    pthread_mutex_lock(&mu);
    guarded *g = NULL;
    for (int i = 0; i < GUARD_MAX && !g; i++)
        if (!bufs[i].map) g = &bufs[i];
    void *ret = NULL;
    if (!g) goto out_unlock;
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) goto out_unlock;
    unsigned char *copy = is_const ? calloc(1, bytes ? bytes : 1) : NULL;
    if (is_const && !copy) {
        munmap(m, len);
        goto out_unlock;
    }
    mprotect(m, pg, PROT_NONE);
    mprotect(m + pg + data, pg, PROT_NONE);
    g->map = m;
    g->map_len = len;
    g->lo = m + pg;
    g->hi = m + pg + data;
    g->p = g->hi - end;
    g->bytes = bytes;
    g->is_const = is_const;
    g->copy = copy;
    snprintf(g->name, sizeof g->name, "%s", name);
    memset(g->lo, GUARD_PATTERN, data);
    memset(g->p, 0, bytes); /* zero-filled, as device memory from alloc() is */
    ret = g->p;
out_unlock:
    pthread_mutex_unlock(&mu);
    return ret;
}

void check_buf_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < GUARD_MAX; i++)
        if (bufs[i].map && bufs[i].p == p) {
            munmap(bufs[i].map, bufs[i].map_len);
            free(bufs[i].copy);
            memset(&bufs[i], 0, sizeof bufs[i]);
        }
    pthread_mutex_unlock(&mu);
}

void check_buf_seal(const void *p) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < GUARD_MAX; i++)
        if (bufs[i].map && bufs[i].is_const && (!p || bufs[i].p == p))
            memcpy(bufs[i].copy, bufs[i].p, bufs[i].bytes);
    pthread_mutex_unlock(&mu);
}

int check_buf_verify(const void *p, const char *call, char *why, size_t cap) {
    int ok = 1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < GUARD_MAX && ok; i++) {
        const guarded *g = &bufs[i];
        if (!g->map || (p && g->p != p)) continue;
        const unsigned char *end = g->p + g->bytes;
        for (const unsigned char *q = end; q < g->hi && ok; q++)
            if (*q != GUARD_PATTERN) {
                ok = 0;
                snprintf(why, cap, "%s wrote past the end of %s (%zu bytes): byte %zu after its "
                         "end changed ---> keep every write inside the buffer's rows x columns",
                         call, g->name, g->bytes, (size_t)(q - end));
            }
        for (const unsigned char *q = g->p; q > g->lo && ok; q--)
            if (q[-1] != GUARD_PATTERN) {
                ok = 0;
                snprintf(why, cap, "%s wrote before the start of %s: byte %zu before it changed",
                         call, g->name, (size_t)(g->p - (q - 1)));
            }
        if (ok && g->is_const && memcmp(g->copy, g->p, g->bytes)) {
            size_t k = 0;
            while (k < g->bytes && g->copy[k] == g->p[k]) k++;
            ok = 0;
            snprintf(why, cap, "%s wrote into its const input %s (byte %zu of %zu changed) "
                     "---> a const buffer is read only", call, g->name, k, g->bytes);
        }
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

size_t check_buf_where(const void *addr, char *buf, size_t n, size_t cap) {
    const unsigned char *a = addr;
    for (int i = 0; i < GUARD_MAX; i++) {
        const guarded *g = &bufs[i];
        if (!g->map || a < g->map || a >= g->map + g->map_len) continue;
        if (a >= g->hi) {
            n = fatal_put_str(buf, n, cap, "it wrote (or read) past the end of ");
            n = fatal_put_str(buf, n, cap, g->name);
            n = fatal_put_str(buf, n, cap, ": byte ");
            n = fatal_put_int(buf, n, cap, (long)(a - (g->p + g->bytes)));
            n = fatal_put_str(buf, n, cap, " after its end is a guard page");
        } else if (a < g->lo) {
            n = fatal_put_str(buf, n, cap, "it wrote (or read) before the start of ");
            n = fatal_put_str(buf, n, cap, g->name);
            n = fatal_put_str(buf, n, cap, " (a guard page)");
        } else {
            n = fatal_put_str(buf, n, cap, "the fault is inside ");
            n = fatal_put_str(buf, n, cap, g->name);
        }
        return n;
    }
    return n;
}
