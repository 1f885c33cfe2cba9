/* thread_start.c — rank threads started, a failure named (see thread_start.h). */
#include "base/thread_start.h"

#include <string.h>

int32_t thread_start_ranks(pthread_t *th, int32_t n, void *(*fn)(void *), void *args,
                           size_t arg_size, int32_t first_rank, const char *hint,
                           int32_t *started, ct_error *err) {
    int32_t i = 0;
    int e = 0;
    for (; i < n; i++)
        if ((e = pthread_create(&th[i], NULL, fn, (char *)args + (size_t)i * arg_size)) != 0) break;
    *started = i;
    if (i == n) return CT_OK;
    size_t stack = 0;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) == 0) {
        pthread_attr_getstacksize(&attr, &stack);
        pthread_attr_destroy(&attr);
    }
    return ct_error_set(err, CT_ERR_NOMEM, "cannot start the thread of rank %d (of %d; %d "
                        "started): %s ---> %s; each thread reserves %zu MiB of address space "
                        "for its stack (ulimit -s), so ulimit -v and ulimit -u must leave room "
                        "for all of them", (int)(first_rank + i), (int)n, (int)i, strerror(e),
                        hint, stack >> 20);
}
