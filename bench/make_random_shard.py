#!/usr/bin/env python3
"""Write an llm.c-format token shard of uniform random tokens (for throughput benchmarks only:
the numbers it produces measure speed, never learning)."""
import random, struct, sys
path, vocab, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(1234)
header = [20240520, 1, count] + [0] * 253
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%dH" % count, *[rng.randrange(vocab) for _ in range(count)]))
