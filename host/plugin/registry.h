/* registry.h — finding and loading plugins: the search path, loading only what a command needs
 * (crash-isolated probing for listings), ABI checks, host-owned zero-extended copies of each
 * plugin's descriptor, vtable and parameter schema, and the warnings about the search path.
 * Not for: deciding which plugin a section uses (wiring.h) or creating instances (rank.h).
 */
#ifndef CTRAIN_HOST_REGISTRY_H
#define CTRAIN_HOST_REGISTRY_H

#include "plugin/plugin.h"

#include <ctrain/ctrain.h>

typedef struct host_registry host_registry;

/* The search path, nothing loaded yet: (a) <dir of the ctrain executable>/plugins, (b) <that
 * dir>/../lib/ctrain/plugins, (c) each folder of $CTRAIN_PLUGIN_PATH (colon separated), in that
 * order. A folder of it that any user may write to (S_IWOTH) is recorded as a warning
 * (registry_warning_at). NULL only when out of memory. */
host_registry *registry_open(ct_error *err);

/* The same over an explicit list of folders (NULL-terminated), for tests. */
host_registry *registry_open_dirs(const char *const *dirs, ct_error *err);

/* Load every .so of the search folders, for listings (`ctrain plugins`, `ctrain inspect NAME`).
 * Each file not loaded yet is first loaded in a forked child (it dlopens the file and reads the
 * descriptor; the parent kills it after 10 s, or CTRAIN_PROBE_TIMEOUT_S seconds); only files
 * whose probe succeeded are loaded in this process.
 * A file that fails, crashes (a constructor raising SIGSEGV) or hangs in its child is recorded
 * as a problem naming the file and the signal ("x.so: crashed while loading (SIGSEGV in its
 * constructor or descriptor) ---> remove it from the search path"), never an error. The first
 * file of each kind+name in search order is active, later ones are shadowed. Runs once; CT_OK
 * unless out of memory. Before it, only what registry_resolve loaded is listed. */
int32_t registry_scan(host_registry *reg, ct_error *err);

void registry_close(host_registry *reg);

/* Load `path` in a forked child first, as registry_scan probes a file (the same time limit):
 * CT_OK when it loads and is a plugin this ctrain accepts (or no child could be started), else
 * CT_ERR_INVALID with the reason ("FILE: crashed while loading (SIGSEGV ...)", "did not finish
 * loading within 10 s", the load's own refusal). So a command about to load a file named by the
 * user (check-plugin) survives a constructor that crashes, exits or hangs. */
int32_t registry_probe_file(const char *path, ct_error *err);

/* The plugin of `kind` called `name_or_path`, loaded now when needed (in this process, with a
 * backstop: a crash inside dlopen or the entry function writes "ctrain: FILE: crashed while
 * loading (SIGSEGV ...)" to stderr before the process dies of the same signal).
 *   - A name ("ce") is looked up as the conventional file <kind>_<name>.so ("loss_ce.so") in
 *     the search folders in order, and only the first such file is loaded. When another search
 *     folder has a file of the same name, a warning says which one is used and which is hidden.
 *     Only when no folder has the conventional file (or it declares another plugin) is every
 *     file loaded (registry_scan) and the name looked up among them.
 *   - A value that contains '/' or ends in ".so" names a file: one with '/' is a path as given
 *     (relative to the current directory: the caller resolves INI-relative paths, see
 *     wiring.h); a bare "x.so" is looked up in the search folders only, never in the current
 *     directory. A file named by path is used even when the search path has a plugin of the
 *     same kind and name; a warning says so.
 * Errors (CT_ERR_INVALID, message without a file:line prefix, the caller adds it): an unknown
 * name lists the available plugins of the kind; a plugin of another kind says so ("'ce' is a
 * loss plugin; [model] needs a model plugin"); a file that fails to load or is not a
 * compatible plugin says why ("loss plugin 'fx': cannot load ..."). */
const host_plugin *registry_resolve(host_registry *reg, int32_t kind, const char *name_or_path,
                                  ct_error *err);

/* Loaded plugins, first of each kind+name only; sorted by kind then name after registry_scan
 * (before it: in the order registry_resolve loaded them). */
int32_t registry_count(const host_registry *reg);
const host_plugin *registry_at(const host_registry *reg, int32_t i);

/* Plugins hidden by an earlier one of the same kind and name. */
int32_t registry_shadowed_count(const host_registry *reg);
const host_plugin *registry_shadowed_at(const host_registry *reg, int32_t i);

/* Files that could not be used (in a scan, or asked for): path and a one-line reason. */
int32_t registry_problem_count(const host_registry *reg);
const char *registry_problem_path(const host_registry *reg, int32_t i);
const char *registry_problem_message(const host_registry *reg, int32_t i);

/* Warnings collected so far, one line each without "warning: " (world-writable plugin folders
 * and loaded files, a plugin hiding another of the same kind and name). The commands print
 * them to stderr: `plugins` after its listing, `validate` and `train` after wiring. */
int32_t registry_warning_count(const host_registry *reg);
const char *registry_warning_at(const host_registry *reg, int32_t i);

/* The folders searched, in order (existing or not). */
int32_t registry_dir_count(const host_registry *reg);
const char *registry_dir_at(const host_registry *reg, int32_t i);

#endif /* CTRAIN_HOST_REGISTRY_H */
