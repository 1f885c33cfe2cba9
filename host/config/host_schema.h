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
} host_section;

/* All host sections, in the order `ctrain validate` prints them. */
const host_section *host_schema_sections(int32_t *n);

/* The host section called `name`, or NULL ("loss.zloss" is not one: it belongs to a plugin). */
const host_section *host_schema_find(const char *name);

/* Where the keys of the plugin of section hs live: 1 in hs itself ([model]: the architecture,
 * which the host reads too: exports, from_config, the resume check), 0 in a section of the
 * plugin's own, [KIND.NAME] ([precision.amp], [loss.zloss], and any kind added later), so a
 * swap of the plugin leaves them inert. 0 for a section without a plugin. */
int32_t host_schema_flat(const host_section *hs);

#endif /* CTRAIN_HOST_HOST_SCHEMA_H */
