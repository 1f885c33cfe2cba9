/* host_schema.h — the host's own INI sections and keys ([run] [data] [optim], and the host keys
 * of the plugin sections: [model] plugin, [loss] plugins, [comm] plugin/world_size, ...), as
 * ct_param_spec tables with help text, so they are validated and printed like a plugin's.
 * Not for: the plugins' own keys (each plugin's schema) or resolving plugins (wiring.h).
 */
#ifndef CTRAIN_HOST_HOST_SCHEMA_H
#define CTRAIN_HOST_HOST_SCHEMA_H

#include <ctrain/ctrain.h>

typedef struct host_section {
    const char          *name;       /* "run", "model", ... */
    const ct_param_spec *specs;      /* host keys of the section, ended by CT_PARAM_END */
    int32_t              kind;       /* ct_kind of the plugin that owns the rest; 0: none */
    const char          *plugin_key; /* key naming the plugin ("plugin", "plugins", "type") */
    const char          *help;       /* one line */
    int32_t              flat;       /* 1: the plugin's own keys live in this section ([model]:
                                      * the architecture, read by export and resume checks);
                                      * 0: in [NAME.PLUGIN] ([precision.amp]), so a swap of
                                      * the plugin leaves them inert */
} host_section;

/* All host sections, in the order `ctrain validate` prints them. */
const host_section *host_schema_sections(int32_t *n);

/* The host section called `name`, or NULL ("loss.zloss" is not one: it belongs to a plugin). */
const host_section *host_schema_find(const char *name);

#endif /* CTRAIN_HOST_HOST_SCHEMA_H */
