/* session.c — a command's configuration, resolved and checked before any rank starts
 * (session.h). Not for: which plugin owns which section (plugin/wiring.c).
 */
#include "run/session.h"

#include "base/launcher.h"
#include "run/init_ckpt.h"
#include "run/preflight.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t session_configure(int argc, char **argv, int *n_rest, char **rest, host_config **cfg,
                          host_registry **reg, host_wiring *w, ct_error *err) {
    *cfg = NULL;
    *reg = NULL;
    *n_rest = 0;
    const char *path = NULL;
    int32_t rc;
    /* the launcher's rank and world, before [comm] plugin = auto is resolved */
    host_launch launch;
    if ((rc = launcher_read(launcher_getenv, &launch, err)) != CT_OK) return rc;
    launcher_set(&launch);
    host_config *c = config_new();
    if (!c) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    /* pass 1: find the configuration file and the other arguments */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--unset")) {
            if (i + 1 == argc) {
                rc = ct_error_set(err, CT_ERR_INVALID, "%s needs an argument ---> expected "
                                  "the form %s", argv[i], argv[i][2] == 's'
                                  ? "--set section.key=value" : "--unset section.key");
                goto out_free_config;
            }
            i++;
        } else if (!strncmp(argv[i], "--set=", 6) || !strncmp(argv[i], "--unset=", 8)) {
            continue;
        } else if (!path && argv[i][0] != '-') {
            path = argv[i];
        } else {
            rest[(*n_rest)++] = argv[i];
        }
    }
    if (!path) {
        rc = ct_error_set(err, CT_ERR_INVALID, "no configuration file given ---> usage: ctrain "
                          "<command> CONFIG.ini [--set section.key=value ...]");
        goto out_free_config;
    }
    rc = config_load_file(c, path, err);
    if (rc != CT_OK) goto out_free_config;
    /* pass 2: overrides and removals, in order, after the file */
    for (int i = 1; i < argc; i++) {
        const char *a = NULL, *u = NULL;
        if (!strcmp(argv[i], "--set")) a = argv[++i];
        else if (!strncmp(argv[i], "--set=", 6)) a = argv[i] + 6;
        else if (!strcmp(argv[i], "--unset")) u = argv[++i];
        else if (!strncmp(argv[i], "--unset=", 8)) u = argv[i] + 8;
        int32_t found = 1;
        if (a) rc = config_apply_override(c, a, err);
        else if (u) rc = config_apply_unset(c, u, &found, err);
        else continue;
        if (rc != CT_OK) goto out_free_config;
        if (!found && launcher_current()->rank == 0)
            fprintf(stderr, "note: --unset %s: %s has no such key; nothing removed\n", u, path);
    }
    host_registry *r = registry_open(err);
    if (!r) {
        rc = err ? err->code : CT_ERR_NOMEM;
        goto out_free_config;
    }
    rc = wiring_resolve(c, r, w, &init_ckpt_source, err);
    for (int32_t i = 0; i < registry_warning_count(r); i++) /* the search path's risks */
        fprintf(stderr, "warning: %s\n", registry_warning_at(r, i));
    if (rc != CT_OK) goto out_close_registry;
    rc = preflight_check(c, w, err);
    if (rc != CT_OK) goto out_close_registry;
    *cfg = c;
    *reg = r;
    return CT_OK;

out_close_registry:
    registry_close(r);
out_free_config:
    config_free(c);
    return rc;
}
