/* loader_open.c — bench/bench_data.sh's timer of loader_open on a folder of shards: the
 * seconds one open takes (B=8, T=1024, vocab limit 65536, so the old full scan runs).
 * Built against the data.c being measured (today's, or an older one from git).
 * Usage: loader_open DIR */
#include "data/data.h"

#include <stdio.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: loader_open DIR\n");
        return 2;
    }
    ct_error err = {.struct_size = sizeof err};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    host_loader *l = loader_open(argv[1], "train", 65536, 8, 1024, 0, 1, 1, &err);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (!l) {
        fprintf(stderr, "loader_open: %s\n", err.message);
        return 1;
    }
    printf("%.4f s to open %d shards, %lld tokens\n",
           (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec),
           loader_shard_count(l), (long long)loader_tokens(l));
    loader_close(l);
    return 0;
}
