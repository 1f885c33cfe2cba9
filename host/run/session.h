/* session.h — what `ctrain validate`, `ctrain train` and the other commands that take a
 * configuration share: CONFIG.ini and --set read, the launcher's world read, the plugins resolved
 * (plugin/wiring.h) and the preflight checks run (preflight.h), so `validate` and `train` agree.
 * Not for: resolving plugins (wiring.h) or the checks themselves (preflight.h).
 */
#ifndef CTRAIN_HOST_SESSION_H
#define CTRAIN_HOST_SESSION_H

#include "config/config.h"
#include "plugin/registry.h"
#include "plugin/wiring.h"

#include <ctrain/ctrain.h>

/* What `ctrain validate` and `ctrain train` share. argc/argv are the subcommand's, as its
 * cmd_<name> received them (argv[0] is the subcommand's name and is skipped):
 *     CONFIG.ini [--set section.key=value | --set=section.key=value |
 *                 --unset section.key | --unset=section.key]... [other arguments]
 * --set and --unset apply in their order, after the file (--unset of a key the configuration
 * lacks is a note on stderr, not an error: the key may be a default already). The
 * configuration is the first argument that does not start with '-' (and is not the value of
 * --set or --unset). Every other argument is copied, in order, into rest (the caller provides room for
 * argc entries) and counted in *n_rest, for the subcommand's own flags.
 * The launcher's variables are read first (launcher_read, then launcher_set): a contradiction
 * fails here. Then preflight_check (preflight.h): what the ranks of `train` would refuse is refused here,
 * with train's message, so `validate` and `train` agree.
 * On success *cfg and *reg are the caller's (config_free, registry_close) and *w is filled.
 * The registry's warnings (world-writable plugin folders or files, shadowing) are printed to
 * stderr as "warning: ..." lines, on success and on failure.
 * On failure both are NULL and err says why (usage errors included). */
int32_t session_configure(int argc, char **argv, int *n_rest, char **rest, host_config **cfg,
                          host_registry **reg, host_wiring *w, ct_error *err);

#endif /* CTRAIN_HOST_SESSION_H */
