/* shards_read.h — a unit-test helper defined in test_data.c: every shard of a split that
 * `ctrain prepare` wrote, read back through the real shard reader (data.h).
 * Not for: the host (it has its own loader). */
#ifndef CT_TEST_SHARDS_READ_H
#define CT_TEST_SHARDS_READ_H

#include <stdint.h>

/* Append all shards SPLIT_000000.bin, ... of dir to one int32 array (malloc'ed; *n tokens);
 * a shard that does not open fails the current test. */
int32_t *read_split(const char *dir, const char *split, int64_t *n);

#endif /* CT_TEST_SHARDS_READ_H */
