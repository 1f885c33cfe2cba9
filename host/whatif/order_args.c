/* order_args.c — the order options and value parsers that what-if and reduce share (see
 * order_args.h). Not for: the commands' other options.
 */
#include "whatif/order_args.h"

#include "../plugins/comm/threads/tuner.h"

#include "base/printable.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const order_args_algos[] = {"ring", "tree", "dbtree", "hier", "nvls",
                                        "nvls_tree", "nccl", NULL};
const char *const order_args_splits[] = {"nccl", "even", NULL};
const char *const order_args_protos[] = {"simple", "ll", "ll128", NULL};
const char *const order_args_gpus[] = {"a100", "h100", "h200", NULL};
const char *const order_args_versions[] = {"2.18", "2.19", "2.20", "2.30", NULL};

int order_args_int(const char *cmd, const char *flag, const char *v, int64_t lo, int64_t hi,
                   int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!v[0] || *end || errno || x < lo || x > hi) {
        char shown[256];
        fprintf(stderr, "ctrain %s: %s '%s' is not an integer in [%lld, %lld] ---> see "
                "`ctrain %s --help`\n", cmd, flag, printable(v, shown, sizeof shown),
                (long long)lo, (long long)hi, cmd);
        return 2;
    }
    *out = x;
    return 0;
}

int order_args_usage(const char *cmd, const char *usage, const char *fmt, const char *a,
                     const char *b) {
    fprintf(stderr, "ctrain %s: ", cmd);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n%s", usage);
    return 2;
}

int order_args_choice(const char *cmd, const char *flag, const char *v,
                      const char *const *choices, int32_t *out) {
    char all[160] = "";
    for (int32_t i = 0; choices[i]; i++) {
        if (!strcmp(v, choices[i])) return *out = i, 0;
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", i ? ", " : "", choices[i]);
    }
    char shown[256];
    fprintf(stderr, "ctrain %s: %s '%s' is not one of %s ---> see `ctrain %s --help`\n", cmd,
            flag, printable(v, shown, sizeof shown), all, cmd);
    return 2;
}

int order_args_option(const char *cmd, const char *flag, const char *value, order_config *oc,
                      int *takes_value) {
    *takes_value = strcmp(flag, "--no-nvswitch") != 0;
    if (!*takes_value) {
        oc->nvswitch = 0;
        return 0;
    }
    static const char *const valued[] = {"--channels", "--gpus-per-node", "--split", "--proto",
                                         "--gpu", "--nccl-version", NULL};
    int known = 0;
    for (int k = 0; valued[k]; k++) known |= !strcmp(flag, valued[k]);
    if (!known) return -1;
    if (!value) {
        fprintf(stderr, "ctrain %s: %s needs a value ---> see `ctrain %s --help`\n", cmd, flag,
                cmd);
        return 2;
    }
    int64_t x = 0;
    int bad;
    if (!strcmp(flag, "--channels")) {
        bad = order_args_int(cmd, flag, value, 1, ORDER_MAX_CHANNELS, &x);
        if (!bad) oc->channels = (int32_t)x;
    } else if (!strcmp(flag, "--gpus-per-node")) {
        bad = order_args_int(cmd, flag, value, 0, 65536, &x);
        if (!bad) oc->gpus_per_node = (int32_t)x;
    } else if (!strcmp(flag, "--split")) {
        bad = order_args_choice(cmd, flag, value, order_args_splits, &oc->split);
    } else if (!strcmp(flag, "--proto")) {
        bad = order_args_choice(cmd, flag, value, order_args_protos, &oc->proto);
    } else if (!strcmp(flag, "--nccl-version")) {
        int32_t i = 0;
        bad = order_args_choice(cmd, flag, value, order_args_versions, &i);
        if (!bad) oc->nccl_version = tuner_version_parse(order_args_versions[i]);
    } else {
        bad = order_args_choice(cmd, flag, value, order_args_gpus, &oc->gpu);
    }
    return bad;
}
