/* thread_start.h — one thread per rank started, and a thread that cannot start named at once:
 * which rank, pthread_create's reason and what to do (the address space a thread's stack
 * reserves). Shared by `train`'s ranks (run/loop.c) and `reduce --policy`'s (cli/reduce.c).
 * Not for: what the threads do, or waiting for them (each caller's own supervision).
 */
#ifndef CTRAIN_HOST_THREAD_START_H
#define CTRAIN_HOST_THREAD_START_H

#include <ctrain/ctrain.h>

#include <pthread.h>
#include <stddef.h>

/* Start th[i] = fn(args + i * arg_size) for i = 0..n-1, rank first_rank + i, in order, with
 * the default attributes. *started is how many started (n on success). CT_OK when all did;
 * otherwise the first that did not is named in err ("cannot start the thread of rank R (of
 * n): reason ---> hint; ..."), with `hint` (what the command's user lowers) and the stack each
 * thread reserves. The started ones run on: the caller makes them stop and joins them. */
int32_t thread_start_ranks(pthread_t *th, int32_t n, void *(*fn)(void *), void *args,
                           size_t arg_size, int32_t first_rank, const char *hint,
                           int32_t *started, ct_error *err);

#endif /* CTRAIN_HOST_THREAD_START_H */
