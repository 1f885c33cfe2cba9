/* validate.c — `ctrain validate CONFIG.ini [--set ...]`: the configuration resolved and checked
 * exactly as `train` does before any rank starts (run/session.h), printed with every value's
 * origin, the plugins chosen and the sections of plugins not chosen (inert). Not for: the
 * checks themselves (run/preflight.c).
 */
#include "cli/cli.h"
#include "cli/commands.h"
#include "base/cmdout.h"
#include "config/config.h"
#include "plugin/wiring.h"
#include "run/preempt.h"
#include "run/preflight.h"
#include "run/session.h"
#include "run/watchdog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_validate(int argc, char **argv) {
    ct_error err = cli_new_err();
    host_config *cfg;
    host_registry *reg;
    host_wiring w;
    int n_rest;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return ct_error_set(&err, CT_ERR_NOMEM, "out of memory"), cli_fail(&err);
    /* a stop signal ends validate at once, naming the call it is in (a plugin's create that
     * hangs: watchdog.h, with no grace) */
    if (preempt_install() != 0 || watchdog_start(0) != 0) {
        free(rest);
        return ct_error_set(&err, CT_ERR_IO, "cannot install the stop-signal handlers: %s",
                            strerror(errno)), cli_fail(&err);
    }
    int32_t rc = session_configure(argc, argv, &n_rest, rest, &cfg, &reg, &w, &err);
    if (rc != CT_OK) {
        free(rest);
        return cli_fail(&err);
    }
    int status = 0;
    if (n_rest > 0) {
        fprintf(stderr, "ctrain validate: unexpected argument '%s' ---> usage: ctrain validate "
                        "CONFIG.ini [--set section.key=value ...] [--unset section.key ...]\n",
                rest[0]);
        status = 2;
        goto out_close;
    }
    fprintf(cmdout(), "; %s resolved: every key with its value and origin\n", config_path(cfg));
    config_show(cfg, cmdout());
    fprintf(cmdout(), "\n; plugins\n");
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (mem) {
        wiring_print(&w, mem);
        ct_error gerr = {.struct_size = sizeof gerr};
        if (preflight_print_groups(cfg, &w, mem, &gerr) != CT_OK)
            fprintf(mem, "groups: not shown: %s\n", gerr.message);
        fclose(mem);
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
            fprintf(cmdout(), ";   %s\n", line);
        free(buf);
    }
    if (w.n_inert > 0) {
        fprintf(cmdout(), "\n; inert: sections of plugins that are not selected, or of datasets "
                          "[data] train does not list (read by nobody; they take effect when "
                          "their plugin is chosen or their dataset listed)\n");
        for (int32_t i = 0; i < w.n_inert; i++) {
            char name[2 * CONFIG_NAME_MAX];
            snprintf(name, sizeof name, "[%s]", w.inert[i]);
            fprintf(cmdout(), ";   %-24s inert: %s (%s)\n", name, w.inert_why[i],
                    config_section_origin(cfg, w.inert[i]));
        }
    }
    fprintf(stderr, "ctrain: %s is valid\n", config_path(cfg));
out_close:
    registry_close(reg);
    config_free(cfg);
    free(rest);
    return status;
}
