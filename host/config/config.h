/* config.h — the run's configuration: INI file + --set overrides, every value remembering
 * where it came from (file:line or "--set"), validated against parameter schemas
 * (the host's own sections and each plugin's), with defaults filled in.
 * Not for: finding plugins (registry.h) or deciding which plugin owns which section (cli).
 */
#ifndef CTRAIN_HOST_CONFIG_H
#define CTRAIN_HOST_CONFIG_H

#include <ctrain/ctrain.h>
#include <stdio.h>

typedef struct host_config host_config;

/* An empty configuration; NULL when out of memory. */
host_config *config_new(void);
void config_free(host_config *cfg);

/* A configuration file larger than this is refused before it is read (real ones are a few
 * kilobytes; files.h: read_bounded). */
#define CONFIG_MAX_BYTES (64ull << 20)

/* Parse an INI file into cfg, read through the one reader (files.h: a regular file of at most
 * CONFIG_MAX_BYTES; a FIFO or a device is refused without blocking). Errors (missing,
 * unreadable or oversized file, syntax error, a line longer than the parser keeps, a duplicate
 * key) return CT_ERR_INVALID or CT_ERR_IO with a one-line message "FILE:LINE: ... ---> what to
 * do". */
int32_t config_load_file(host_config *cfg, const char *path, ct_error *err);

/* The same for INI text held in memory; `name` stands for the file name in messages. */
int32_t config_load_string(host_config *cfg, const char *name, const char *text, ct_error *err);

/* Apply "section.key=value" (section may contain dots: "loss.zloss.coef=1e-3" sets key coef of
 * section loss.zloss: the key is the part after the last dot). Malformed text is an error
 * that shows the expected form. */
int32_t config_apply_override(host_config *cfg, const char *assignment, ct_error *err);

/* Set a value programmatically (origin is shown in messages, e.g. "default"). A key absent from
 * a section with an alias (config_alias) goes to the alias's section: set [model] vocab_size
 * lands in [model.gpt] beside the plugin's other keys. */
int32_t config_set(host_config *cfg, const char *section, const char *key, const char *value,
                   const char *origin, ct_error *err);

/* Remove section.key (the section itself stays, possibly empty). 1 when it was there, else 0. */
int32_t config_unset(host_config *cfg, const char *section, const char *key);

/* Apply "--unset section.key" (section may contain dots, as for --set): *found = whether the
 * key was there (absent is not an error: the caller may say so). Malformed text is an error
 * that shows the expected form. */
int32_t config_apply_unset(host_config *cfg, const char *name, int32_t *found, ct_error *err);

/* Lookups of a key absent from `section` go to `target` (the selected plugin's own section:
 * "precision" -> "precision.amp"), for config_get, config_origin, config_set and the typed
 * getters; config_key_count/key_name and validation see each section as it is. NULL target
 * drops the alias. CT_ERR_INVALID when more than CONFIG_MAX_ALIASES sections or a name of
 * CONFIG_NAME_MAX bytes or more. */
#define CONFIG_MAX_ALIASES 16
#define CONFIG_NAME_MAX    128
int32_t config_alias(host_config *cfg, const char *section, const char *target);
/* The alias of `section`, or NULL. */
const char *config_alias_target(const host_config *cfg, const char *section);

/* Raw text of a value or NULL when absent (looked up in the section's alias too). Owned by
 * cfg. */
const char *config_get(const host_config *cfg, const char *section, const char *key);

/* "FILE:LINE" or "--set" or "default" for a present key, "FILE" for an absent one. */
const char *config_origin(const host_config *cfg, const char *section, const char *key);

/* The file the configuration came from ("<none>" before a load). */
const char *config_path(const host_config *cfg);

/* Paths in a configuration, written in an INI file or given with --set alike ([data] train and
 * val, [model] init_from, [run] out_dir, a plugin file such as mine/loss_x.so), are relative to
 * the current working directory (docs/user-guide.md section 2). `path` as an absolute path for
 * messages and for opening: itself when absolute (or when the working directory is unknown),
 * else the working directory, '/' and path (a leading "./" dropped), into buf. */
const char *config_abs_path(const char *path, char *buf, size_t cap);

/* Sections in order of first appearance. */
int32_t config_section_count(const host_config *cfg);
const char *config_section_name(const host_config *cfg, int32_t i);
int32_t config_has_section(const host_config *cfg, const char *section);

/* Keys of a section in order of appearance. */
int32_t config_key_count(const host_config *cfg, const char *section);
const char *config_key_name(const host_config *cfg, const char *section, int32_t i);

/* Sections and keys are found through hash indexes, so loading, overriding, validating and
 * reading a configuration take time linear in its size. This counts the stored sections and
 * keys compared by lookups since config_new (a deterministic measure for tests: it grows
 * linearly with the number of lookups, not with their product with the number of keys). */
uint64_t config_lookup_probes(const host_config *cfg);

/* Validate section `section` against the schema `specs` (stride = the element size, for
 * plugins built against another minor version; end marked by key == NULL). `owner` names
 * who defines the keys in messages ("plugin zloss", "ctrain"). `skip` lists keys that are
 * consumed by the host and exempt (e.g. "plugin"), NULL-terminated, may be NULL.
 * Checks: unknown keys (with the nearest valid key suggested), type, range, choices, required
 * keys. Then fills in defaults for absent keys (origin "default"). First error wins:
 * CT_ERR_INVALID with "FILE:LINE: [section] ...". */
int32_t config_validate_section(host_config *cfg, const char *section, const ct_param_spec *specs,
                                uint32_t stride, const char *owner, const char *const *skip,
                                ct_error *err);

/* Typed getters of validated values (as the plugin API's getters). CT_ERR_INVALID with a
 * message when absent or not parseable as that type. */
int32_t config_get_bool(const host_config *cfg, const char *section, const char *key,
                        int32_t *out, ct_error *err);
int32_t config_get_int(const host_config *cfg, const char *section, const char *key,
                       int64_t *out, ct_error *err);
int32_t config_get_float(const host_config *cfg, const char *section, const char *key,
                         double *out, ct_error *err);
int32_t config_get_string(const host_config *cfg, const char *section, const char *key,
                          const char **out, ct_error *err);

/* Print every section and key as INI text, with defaults, each value followed by a comment
 * naming its origin ("; ini/tiny.ini:7", "; default", "; --set"); a section [A.B] right after
 * [A]. */
void config_print(const host_config *cfg, FILE *out);
/* config_print for a terminal: control characters in values escaped (printable.h), so a
 * hostile value cannot drive the terminal. */
void config_show(const host_config *cfg, FILE *out);

/* Levenshtein distance, for "did you mean" suggestions. */
int32_t config_edit_distance(const char *a, const char *b);

/* The candidate nearest to `word` by edit distance when it is close enough to suggest (at
 * most max(2, len/3) edits, or one is a prefix of the other), else NULL. NULL entries of
 * cands are skipped. */
const char *config_nearest(const char *word, const char *const *cands, int32_t n);

/* A spec's range into buf with `digits` significant digits: "1..10" when both ends are
 * included, interval notation when one is excluded ("[0, 1)", "(0, 1]", "(0, 1)"), "" when the
 * spec has no range (min > max). Returns buf. */
const char *config_range_text(const ct_param_spec *s, int digits, char *buf, size_t cap);

/* "FILE:LINE" of a section's first header (or of its first value, e.g. "--set"); the file
 * name when the section is absent. */
const char *config_section_origin(const host_config *cfg, const char *section);

/* *out = a new configuration: the INI file at path with [comm] replaced by plugin = local,
 * world_size = 1 (`ctrain sample` and `ctrain what-if` run one rank whatever the run's world
 * was). Keys keep their file's name as origin prefix, so relative plugin paths still resolve
 * against the file's folder. On failure *out is NULL and err says why. */
int32_t config_load_world1(const char *path, host_config **out, ct_error *err);

#endif /* CTRAIN_HOST_CONFIG_H */
