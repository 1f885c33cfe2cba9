/* plugin.c — the names of the plugin kinds (plugin.h). */
#include "plugin/plugin.h"

#include <string.h>

static const char *const kind_names[] = {NULL,        "model", "loss",  "strategy",
                                         "precision", "comm",  "device", "optimizer"};

const char *kind_name(int32_t kind) {
    return kind >= 1 && kind <= N_KINDS ? kind_names[kind] : "?";
}

int32_t kind_from_name(const char *name) {
    for (int32_t k = 1; k <= N_KINDS; k++)
        if (!strcmp(kind_names[k], name)) return k;
    return 0;
}

