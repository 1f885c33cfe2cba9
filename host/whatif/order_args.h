/* order_args.h — the command-line options that `ctrain what-if` and `ctrain reduce` share: a
 * whole-string integer in a range, one name of a list, and the threads engine's order keys as
 * options (--channels, --gpus-per-node, --split, --proto, --gpu, --nccl-version, --no-nvswitch:
 * the [comm] keys of the same names, docs/collectives.md). Not for: the orders (plugins/comm/threads/orders.h)
 * or a command's own options.
 */
#ifndef CTRAIN_HOST_ORDER_ARGS_H
#define CTRAIN_HOST_ORDER_ARGS_H

#include "../plugins/comm/threads/orders.h"

#include <stdint.h>

/* *out = v when it is a whole decimal integer in [lo, hi]; else print "ctrain CMD: FLAG 'V' is
 * not an integer in [LO, HI] ---> see `ctrain CMD --help`" and return 2 (a usage error). */
int order_args_int(const char *cmd, const char *flag, const char *v, int64_t lo, int64_t hi,
                   int64_t *out);

/* Print "ctrain CMD: " then fmt with a and b (printf-style, two strings), then the command's
 * usage text; return 2 (a usage error). */
int order_args_usage(const char *cmd, const char *usage, const char *fmt, const char *a,
                     const char *b);

/* *out = the index of v in choices (NULL-ended); else print "ctrain CMD: FLAG 'V' is not one of
 * A, B, ... ---> see `ctrain CMD --help`" and return 2. */
int order_args_choice(const char *cmd, const char *flag, const char *v,
                      const char *const *choices, int32_t *out);

/* The spellings of [comm] algo (by reduce_algo), split, proto and gpu, NULL-ended. */
extern const char *const order_args_algos[];
extern const char *const order_args_splits[];
extern const char *const order_args_protos[];
extern const char *const order_args_gpus[];
extern const char *const order_args_versions[]; /* --nccl-version: "2.18" ... "2.30" */

/* Options of the order: `flag` (with `value`, the next argument or NULL, for the valued ones)
 * into *oc. Returns -1 when flag is none of them, 0 when it was taken, 2 on a usage error
 * (printed; a missing value too). *takes_value says whether it consumed value (--no-nvswitch
 * takes none). */
int order_args_option(const char *cmd, const char *flag, const char *value, order_config *oc,
                      int *takes_value);

#endif /* CTRAIN_HOST_ORDER_ARGS_H */
