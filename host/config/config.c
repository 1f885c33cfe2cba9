/* config.c — the run's configuration (see config.h): INI text parsed with Debian's libinih,
 * --set overrides, schema validation with "did you mean" suggestions, typed getters.
 * Every value remembers its origin ("FILE:LINE", "--set", "default") for messages and printing.
 * Sections and keys are hash-indexed, so every operation is linear in the size of the input.
 * Not for: finding plugins (registry.c) or deciding which plugin owns a section (wiring.c).
 */
#include "config/config.h"

#include "io/files.h"
#include "base/printable.h"

#include <ini.h>

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* inih silently truncates section and key names longer than this (its MAX_SECTION/MAX_NAME). */
#define INI_NAME_MAX 49

typedef struct config_entry {
    char    *section;
    char    *key;
    char    *value;
    char    *origin; /* "FILE:LINE", "--set", "default", ... */
    int32_t  line;   /* line in the loaded file; 0 when not from the file */
    int32_t  removed; /* config_unset: kept in the index, never found */
    uint64_t hash;   /* of (section, key): see entry_hash */
} config_entry;

typedef struct config_section {
    char    *name;
    char    *origin; /* "FILE:LINE" of its first header, or where its first key came from */
    uint64_t hash;   /* of name */
    int32_t *keys;   /* indices into entries of this section's keys, in order of appearance */
    int32_t  n_keys, cap_keys;
} config_section;

/* An open-addressing hash index (linear probing) of item indices: slot = index + 1, 0 empty.
 * Kept at most half full, so a lookup probes O(1) slots on average and parsing, overrides,
 * duplicate detection and validation stay linear in the number of keys. */
typedef struct config_index {
    int32_t *slots;
    uint32_t cap; /* a power of two, or 0 before the first insert */
    int32_t  used;
} config_index;

struct host_config {
    char       *path;     /* the loaded file ("<none>" before a load) */
    config_entry   *entries;  /* in order of appearance */
    int32_t     n_entries, cap_entries;
    config_section *sections; /* in order of first appearance */
    int32_t     n_sections, cap_sections;
    config_index    entry_index, section_index;
    uint64_t    probes;   /* items compared by lookups so far (config_lookup_probes) */
    /* config_alias: a key absent from section alias[i][0] is looked up in alias[i][1] */
    char        alias[CONFIG_MAX_ALIASES][2][CONFIG_NAME_MAX];
    int32_t     n_alias;
};

/* ---- small helpers ------------------------------------------------------------------- */

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static char *dup_s(const char *s) { return dup_n(s, strlen(s)); }

/* [begin, end) without leading and trailing white space. */
static void trim_span(const char **begin, const char **end) {
    while (*begin < *end && isspace((unsigned char)**begin)) (*begin)++;
    while (*end > *begin && isspace((unsigned char)(*end)[-1])) (*end)--;
}

/* FNV-1a, 64 bits, of a name; of a section and a key joined by a NUL. Fixed (not seeded), so
 * probe counts are reproducible; configuration files are the user's own input. */
static uint64_t fnv1a(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}
static uint64_t name_hash(const char *name) { return fnv1a(0xcbf29ce484222325ULL, name); }
static uint64_t entry_hash(const char *section, const char *key) {
    return fnv1a(fnv1a(0xcbf29ce484222325ULL, section) * 0x100000001b3ULL, key);
}

/* Make room for one more item (rehashing every item's stored hash); 0 when out of memory. */
static int index_reserve(config_index *ix, const host_config *cfg, int is_entries) {
    if (ix->cap && (uint32_t)(ix->used + 1) * 2 <= ix->cap) return 1;
    uint32_t cap = ix->cap ? 2 * ix->cap : 64;
    int32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return 0;
    for (int32_t i = 0; i < ix->used; i++) {
        uint64_t h = is_entries ? cfg->entries[i].hash : cfg->sections[i].hash;
        uint32_t at = (uint32_t)h & (cap - 1);
        while (slots[at]) at = (at + 1) & (cap - 1);
        slots[at] = i + 1;
    }
    free(ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    return 1;
}

/* Record item `i` (== ix->used, already stored with its hash) in the index. */
static void index_add(config_index *ix, uint64_t h, int32_t i) {
    assert(i == ix->used && (uint32_t)(ix->used + 1) * 2 <= ix->cap);
    uint32_t at = (uint32_t)h & (ix->cap - 1);
    while (ix->slots[at]) at = (at + 1) & (ix->cap - 1);
    ix->slots[at] = i + 1;
    ix->used++;
}

static config_entry *find_entry(const host_config *cfg, const char *section, const char *key) {
    const config_index *ix = &cfg->entry_index;
    if (!ix->cap) return NULL;
    uint64_t h = entry_hash(section, key);
    uint64_t *probes = (uint64_t *)&cfg->probes; /* a statistic, not the configuration */
    for (uint32_t at = (uint32_t)h & (ix->cap - 1); ix->slots[at]; at = (at + 1) & (ix->cap - 1)) {
        config_entry *e = &cfg->entries[ix->slots[at] - 1];
        (*probes)++;
        if (e->hash == h && !e->removed && !strcmp(e->section, section) && !strcmp(e->key, key))
            return e;
    }
    return NULL;
}

/* The section a key absent from `section` is looked up in (config_alias), or NULL. */
static const char *alias_of(const host_config *cfg, const char *section) {
    for (int32_t i = 0; i < cfg->n_alias; i++)
        if (!strcmp(cfg->alias[i][0], section)) return cfg->alias[i][1];
    return NULL;
}

/* find_entry, then the section's alias when the key is not in the section itself. */
static config_entry *find_aliased(const host_config *cfg, const char *section, const char *key) {
    config_entry *e = find_entry(cfg, section, key);
    const char *to = e ? NULL : alias_of(cfg, section);
    return to ? find_entry(cfg, to, key) : e;
}

static config_section *find_section(const host_config *cfg, const char *name) {
    const config_index *ix = &cfg->section_index;
    if (!ix->cap) return NULL;
    uint64_t h = name_hash(name);
    uint64_t *probes = (uint64_t *)&cfg->probes;
    for (uint32_t at = (uint32_t)h & (ix->cap - 1); ix->slots[at]; at = (at + 1) & (ix->cap - 1)) {
        config_section *s = &cfg->sections[ix->slots[at] - 1];
        (*probes)++;
        if (s->hash == h && !strcmp(s->name, name)) return s;
    }
    return NULL;
}

/* The section named `name`, added (with `origin`) when new; NULL when out of memory. */
static config_section *add_section(host_config *cfg, const char *name, const char *origin,
                               ct_error *err) {
    config_section *s = find_section(cfg, name);
    if (s) return s;
    if (cfg->n_sections == cfg->cap_sections) {
        int32_t cap = cfg->cap_sections ? 2 * cfg->cap_sections : 16;
        s = cap > 0 ? realloc(cfg->sections, (size_t)cap * sizeof *s) : NULL;
        if (!s) return ct_error_set(err, CT_ERR_NOMEM, "config: out of memory"), NULL;
        cfg->sections = s;
        cfg->cap_sections = cap;
    }
    if (!index_reserve(&cfg->section_index, cfg, 0))
        return ct_error_set(err, CT_ERR_NOMEM, "config: out of memory"), NULL;
    s = &cfg->sections[cfg->n_sections];
    memset(s, 0, sizeof *s);
    s->name = dup_s(name);
    s->origin = dup_s(origin);
    s->hash = name_hash(name);
    if (!s->name || !s->origin) {
        free(s->name);
        free(s->origin);
        return ct_error_set(err, CT_ERR_NOMEM, "config: out of memory"), NULL;
    }
    index_add(&cfg->section_index, s->hash, cfg->n_sections);
    cfg->n_sections++;
    return s;
}

/* Insert or replace section.key. */
static int32_t put(host_config *cfg, const char *section, const char *key, const char *value,
                   const char *origin, int32_t line, ct_error *err) {
    if (strlen(value) >= CT_VALUE_MAX)
        return ct_error_set(err, CT_ERR_INVALID,
                            "%s: [%s] value of '%s' is %zu bytes; the most is %d ---> shorten it",
                            origin, section, key, strlen(value), CT_VALUE_MAX - 1);
    config_section *sec = add_section(cfg, section, origin, err);
    if (!sec) return err ? err->code : CT_ERR_NOMEM;
    config_entry *e = find_entry(cfg, section, key);
    if (e) {
        char *v = dup_s(value), *o = dup_s(origin);
        if (!v || !o) {
            free(v);
            free(o);
            return ct_error_set(err, CT_ERR_NOMEM, "config: out of memory");
        }
        free(e->value);
        free(e->origin);
        e->value = v;
        e->origin = o;
        e->line = line;
        return CT_OK;
    }
    if (cfg->n_entries == cfg->cap_entries) {
        int32_t cap = cfg->cap_entries ? 2 * cfg->cap_entries : 64;
        config_entry *n = cap > 0 ? realloc(cfg->entries, (size_t)cap * sizeof *n) : NULL;
        if (!n) return ct_error_set(err, CT_ERR_NOMEM, "config: out of memory");
        cfg->entries = n;
        cfg->cap_entries = cap;
    }
    if (sec->n_keys == sec->cap_keys) {
        int32_t cap = sec->cap_keys ? 2 * sec->cap_keys : 8;
        int32_t *k = cap > 0 ? realloc(sec->keys, (size_t)cap * sizeof *k) : NULL;
        if (!k) return ct_error_set(err, CT_ERR_NOMEM, "config: out of memory");
        sec->keys = k;
        sec->cap_keys = cap;
    }
    if (!index_reserve(&cfg->entry_index, cfg, 1))
        return ct_error_set(err, CT_ERR_NOMEM, "config: out of memory");
    e = &cfg->entries[cfg->n_entries];
    e->section = dup_s(section);
    e->key = dup_s(key);
    e->value = dup_s(value);
    e->origin = dup_s(origin);
    e->line = line;
    e->removed = 0;
    e->hash = entry_hash(section, key);
    if (!e->section || !e->key || !e->value || !e->origin) {
        free(e->section);
        free(e->key);
        free(e->value);
        free(e->origin);
        return ct_error_set(err, CT_ERR_NOMEM, "config: out of memory");
    }
    index_add(&cfg->entry_index, e->hash, cfg->n_entries);
    sec->keys[sec->n_keys++] = cfg->n_entries;
    cfg->n_entries++;
    return CT_OK;
}

/* ---- lifetime ------------------------------------------------------------------------ */

host_config *config_new(void) {
    host_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return NULL;
    cfg->path = dup_s("<none>");
    if (!cfg->path) {
        free(cfg);
        return NULL;
    }
    return cfg;
}

void config_free(host_config *cfg) {
    if (!cfg) return;
    for (int32_t i = 0; i < cfg->n_entries; i++) {
        free(cfg->entries[i].section);
        free(cfg->entries[i].key);
        free(cfg->entries[i].value);
        free(cfg->entries[i].origin);
    }
    for (int32_t i = 0; i < cfg->n_sections; i++) {
        free(cfg->sections[i].name);
        free(cfg->sections[i].origin);
        free(cfg->sections[i].keys);
    }
    free(cfg->entry_index.slots);
    free(cfg->section_index.slots);
    free(cfg->entries);
    free(cfg->sections);
    free(cfg->path);
    free(cfg);
}

/* ---- parsing ------------------------------------------------------------------------- */

/* State shared by the line reader and the key handler of one parse. inih's handler gets no
 * line number, so the reader counts lines and the handler reads `line`. */
typedef struct parse_state {
    host_config  *cfg;
    const char *name; /* file name for messages */
    const char *text; /* whole INI text, NUL-terminated */
    size_t      pos;  /* next unread byte of text */
    int32_t     line; /* 1-based number of the line last handed to inih */
    ct_error   *err;
    int32_t     failed; /* err holds the first error */
} parse_state;

static int fail_at(parse_state *st, int32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_at(parse_state *st, int32_t code, const char *fmt, ...) {
    if (st->failed) return 0;
    st->failed = 1;
    if (st->err) {
        char msg[sizeof st->err->message];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        ct_error_set(st->err, code, "%s:%d: %s", st->name, (int)st->line, msg);
    }
    return 0;
}

/* Look at one raw line before inih does: record section headers (inih reports none), refuse
 * names inih would truncate. Returns 0 after recording an error. */
static int inspect_line(parse_state *st, const char *b, const char *e) {
    trim_span(&b, &e);
    if (b == e || *b == ';' || *b == '#') return 1;
    char where[64];
    snprintf(where, sizeof where, "%s:%d", st->name, (int)st->line);
    if (*b == '[') {
        const char *close = memchr(b, ']', (size_t)(e - b));
        if (!close) return 1; /* inih reports the syntax error */
        const char *nb = b + 1, *ne = close;
        trim_span(&nb, &ne);
        if (nb == ne)
            return fail_at(st, CT_ERR_INVALID, "empty section name '[]' ---> name the section");
        if (ne - nb > INI_NAME_MAX)
            return fail_at(st, CT_ERR_INVALID,
                           "section name is %d characters; the INI parser keeps at most %d "
                           "---> shorten it", (int)(ne - nb), INI_NAME_MAX);
        char name[INI_NAME_MAX + 1];
        memcpy(name, nb, (size_t)(ne - nb));
        name[ne - nb] = '\0';
        if (!add_section(st->cfg, name, where, st->err)) {
            st->failed = 1;
            return 0;
        }
        return 1;
    }
    size_t n = strcspn(b, "=:");
    const char *ke = b + (n < (size_t)(e - b) ? n : (size_t)(e - b));
    const char *kb = b;
    trim_span(&kb, &ke);
    if (ke - kb > INI_NAME_MAX)
        return fail_at(st, CT_ERR_INVALID,
                       "key is %d characters; the INI parser keeps at most %d ---> shorten it",
                       (int)(ke - kb), INI_NAME_MAX);
    return 1;
}

/* inih's fgets-like reader: hands over one line of st->text per call. A line longer than
 * inih's buffer would be silently cut, so it is an error here instead. */
static char *read_line(char *buf, int num, void *stream) {
    parse_state *st = stream;
    if (st->failed || st->text[st->pos] == '\0') return NULL;
    const char *b = st->text + st->pos;
    const char *nl = strchr(b, '\n');
    size_t len = nl ? (size_t)(nl - b) : strlen(b);
    size_t shown = len;
    if (shown > 0 && b[shown - 1] == '\r') shown--;
    st->line++;
    st->pos += len + (nl ? 1 : 0);
    int keep = num - 1; /* characters inih keeps, '\n' included */
    if (shown > (size_t)keep) {
        fail_at(st, CT_ERR_INVALID,
                "line is %zu characters; the INI parser keeps at most %d ---> shorten it "
                "(e.g. a shorter path, or set the value with --set)", shown, keep);
        return NULL;
    }
    if (!inspect_line(st, b, b + shown)) return NULL;
    memcpy(buf, b, shown);
    size_t n = shown;
    if (nl && n + 1 <= (size_t)keep) buf[n++] = '\n';
    buf[n] = '\0';
    return buf;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
    parse_state *st = user;
    if (st->failed) return 0;
    const char *sb = section, *se = section + strlen(section);
    trim_span(&sb, &se);
    char sec[INI_NAME_MAX + 2];
    size_t sn = (size_t)(se - sb) < sizeof sec - 1 ? (size_t)(se - sb) : sizeof sec - 1;
    memcpy(sec, sb, sn);
    sec[sn] = '\0';
    if (!sec[0])
        return fail_at(st, CT_ERR_INVALID,
                       "key '%s' is outside any section ---> put it under a [section] header",
                       name);
    if (!name[0])
        return fail_at(st, CT_ERR_INVALID, "[%s] a value without a key ---> write 'key = value'",
                       sec);
    const config_entry *prev = find_entry(st->cfg, sec, name);
    if (prev && prev->line > 0)
        return fail_at(st, CT_ERR_INVALID,
                       "[%s] duplicate key '%s' (also set on line %d) ---> keep one of them",
                       sec, name, (int)prev->line);
    char origin[300];
    snprintf(origin, sizeof origin, "%s:%d", st->name, (int)st->line);
    if (put(st->cfg, sec, name, value, origin, st->line, st->err) != CT_OK) {
        st->failed = 1;
        return 0;
    }
    return 1;
}

/* The text of line `line` (1-based) of text, up to `cap-1` bytes, into out. */
static void line_text(const char *text, int32_t line, char *out, size_t cap) {
    const char *p = text;
    for (int32_t i = 1; i < line && p; i++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    out[0] = '\0';
    if (!p) return;
    size_t n = strcspn(p, "\r\n");
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

int32_t config_load_string(host_config *cfg, const char *name, const char *text, ct_error *err) {
    char *path = dup_s(name);
    if (!path) return ct_error_set(err, CT_ERR_NOMEM, "config: out of memory");
    free(cfg->path);
    cfg->path = path;

    /* Parser settings (Debian's inih exposes them as globals): an indented line is a key of
     * its own, not a continuation; the first error stops the parse. Set on every load, from
     * the one thread that reads configuration. */
    ini_allow_multiline = false;
    ini_stop_on_first_error = true;

    parse_state st = {.cfg = cfg, .name = name, .text = text, .err = err};
    int rc = ini_parse_stream(read_line, &st, on_key, &st);
    if (st.failed) return err ? err->code : CT_ERR_INVALID;
    if (rc > 0) {
        char shown[120];
        line_text(text, rc, shown, sizeof shown);
        return ct_error_set(err, CT_ERR_INVALID,
                            "%s:%d: cannot parse '%s' ---> write '[section]' or 'key = value' "
                            "(';' or '#' starts a comment)", name, rc, shown);
    }
    if (rc < 0)
        return ct_error_set(err, CT_ERR_NOMEM, "%s: the INI parser ran out of memory", name);
    return CT_OK;
}

int32_t config_load_file(host_config *cfg, const char *path, ct_error *err) {
    char *text = NULL;
    size_t len = 0;
    int32_t rc = read_bounded(path, "configuration", "give an INI text file (relative paths "
                              "start at the current directory)", CONFIG_MAX_BYTES, &text, &len,
                              err);
    if (rc != CT_OK) return rc;
    if (memchr(text, '\0', len))
        rc = ct_error_set(err, CT_ERR_INVALID, "%s: contains a NUL byte: not an INI text file",
                          path);
    else
        rc = config_load_string(cfg, path, text, err);
    free(text);
    return rc;
}

/* ---- overrides and direct sets --------------------------------------------------------- */

int32_t config_apply_override(host_config *cfg, const char *assignment, ct_error *err) {
    const char *eq = strchr(assignment, '=');
    const char *hint = "expected the form --set section.key=value (e.g. --set optim.lr=1e-3)";
    if (!eq)
        return ct_error_set(err, CT_ERR_INVALID, "--set '%s': no '=' ---> %s", assignment, hint);
    const char *lb = assignment, *le = eq;
    trim_span(&lb, &le);
    const char *dot = NULL;
    for (const char *p = lb; p < le; p++)
        if (*p == '.') dot = p;
    if (!dot)
        return ct_error_set(err, CT_ERR_INVALID, "--set '%s': no '.' between section and key "
                            "---> %s", assignment, hint);
    const char *sb = lb, *se = dot, *kb = dot + 1, *ke = le;
    trim_span(&sb, &se);
    trim_span(&kb, &ke);
    if (sb == se || kb == ke)
        return ct_error_set(err, CT_ERR_INVALID, "--set '%s': empty %s ---> %s", assignment,
                            sb == se ? "section" : "key", hint);
    const char *vb = eq + 1, *ve = eq + strlen(eq);
    trim_span(&vb, &ve);
    char *section = dup_n(sb, (size_t)(se - sb));
    char *key = dup_n(kb, (size_t)(ke - kb));
    char *value = dup_n(vb, (size_t)(ve - vb));
    int32_t rc = CT_OK;
    if (!section || !key || !value) {
        rc = ct_error_set(err, CT_ERR_NOMEM, "config: out of memory");
        goto out_free;
    }
    rc = put(cfg, section, key, value, "--set", 0, err);
out_free:
    free(section);
    free(key);
    free(value);
    return rc;
}

int32_t config_set(host_config *cfg, const char *section, const char *key, const char *value,
                   const char *origin, ct_error *err) {
    if (!section || !*section || !key || !*key || !value)
        return ct_error_set(err, CT_ERR_INVALID, "config_set: empty section or key");
    const char *to = alias_of(cfg, section);
    if (to && !find_entry(cfg, section, key)) section = to; /* the selected plugin's section */
    return put(cfg, section, key, value, origin ? origin : "set", 0, err);
}

int32_t config_unset(host_config *cfg, const char *section, const char *key) {
    config_entry *e = find_entry(cfg, section, key);
    if (!e) return 0;
    config_section *sec = find_section(cfg, section);
    int32_t at = (int32_t)(e - cfg->entries);
    assert(sec);
    for (int32_t i = 0; i < sec->n_keys; i++)
        if (sec->keys[i] == at) {
            memmove(&sec->keys[i], &sec->keys[i + 1],
                    (size_t)(sec->n_keys - i - 1) * sizeof *sec->keys);
            sec->n_keys--;
            break;
        }
    e->removed = 1;
    return 1;
}

int32_t config_apply_unset(host_config *cfg, const char *name, int32_t *found, ct_error *err) {
    const char *hint = "expected the form --unset section.key (e.g. --unset comm.threads.algo)";
    const char *b = name, *e = name + strlen(name);
    trim_span(&b, &e);
    const char *dot = NULL;
    for (const char *p = b; p < e; p++)
        if (*p == '.') dot = p;
    if (!dot || dot == b || dot + 1 == e || memchr(b, '=', (size_t)(e - b)))
        return ct_error_set(err, CT_ERR_INVALID, "--unset '%s': not section.key ---> %s", name,
                            hint);
    char section[CT_VALUE_MAX], key[CT_VALUE_MAX];
    snprintf(section, sizeof section, "%.*s", (int)(dot - b), b);
    snprintf(key, sizeof key, "%.*s", (int)(e - dot - 1), dot + 1);
    *found = config_unset(cfg, section, key);
    return CT_OK;
}

int32_t config_alias(host_config *cfg, const char *section, const char *target) {
    int32_t i = 0;
    while (i < cfg->n_alias && strcmp(cfg->alias[i][0], section)) i++;
    if (!target) { /* drop it */
        if (i < cfg->n_alias) {
            memmove(cfg->alias[i], cfg->alias[i + 1],
                    (size_t)(cfg->n_alias - i - 1) * sizeof cfg->alias[0]);
            cfg->n_alias--;
        }
        return CT_OK;
    }
    if (i == CONFIG_MAX_ALIASES || strlen(section) >= CONFIG_NAME_MAX ||
        strlen(target) >= CONFIG_NAME_MAX)
        return CT_ERR_INVALID;
    snprintf(cfg->alias[i][0], CONFIG_NAME_MAX, "%s", section);
    snprintf(cfg->alias[i][1], CONFIG_NAME_MAX, "%s", target);
    if (i == cfg->n_alias) cfg->n_alias++;
    return CT_OK;
}

const char *config_alias_target(const host_config *cfg, const char *section) {
    return alias_of(cfg, section);
}

/* ---- queries ------------------------------------------------------------------------- */

const char *config_get(const host_config *cfg, const char *section, const char *key) {
    const config_entry *e = find_aliased(cfg, section, key);
    return e ? e->value : NULL;
}

const char *config_origin(const host_config *cfg, const char *section, const char *key) {
    const config_entry *e = find_aliased(cfg, section, key);
    return e ? e->origin : cfg->path;
}

const char *config_path(const host_config *cfg) { return cfg->path; }

const char *config_abs_path(const char *path, char *buf, size_t cap) {
    char cwd[4096];
    if (!path || !*path || path[0] == '/' || !getcwd(cwd, sizeof cwd)) return path;
    while (path[0] == '.' && path[1] == '/') path += 2;
    size_t k = strlen(cwd);
    int n = snprintf(buf, cap, "%s%s%s", cwd, k && cwd[k - 1] == '/' ? "" : "/",
                     *path ? path : ".");
    return n > 0 && (size_t)n < cap ? buf : path;
}

int32_t config_section_count(const host_config *cfg) { return cfg->n_sections; }

const char *config_section_name(const host_config *cfg, int32_t i) {
    return i >= 0 && i < cfg->n_sections ? cfg->sections[i].name : NULL;
}

int32_t config_has_section(const host_config *cfg, const char *section) {
    return find_section(cfg, section) != NULL;
}

/* "FILE:LINE" of a section's header (or of its first value); the file name when absent. */
const char *config_section_origin(const host_config *cfg, const char *section) {
    const config_section *s = find_section(cfg, section);
    return s ? s->origin : cfg->path;
}

int32_t config_key_count(const host_config *cfg, const char *section) {
    const config_section *s = find_section(cfg, section);
    return s ? s->n_keys : 0;
}

const char *config_key_name(const host_config *cfg, const char *section, int32_t i) {
    const config_section *s = find_section(cfg, section);
    return s && i >= 0 && i < s->n_keys ? cfg->entries[s->keys[i]].key : NULL;
}

uint64_t config_lookup_probes(const host_config *cfg) { return cfg->probes; }

/* ---- value parsing (shared by validation and the getters) ---------------------------- */

static int parse_bool(const char *s, int32_t *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return *out = 1, 1;
        if (!strcasecmp(s, no[i])) return *out = 0, 1;
    }
    return 0;
}

/* Decimal integer; also an exact integer written as a float ("1e6"). */
static int parse_int(const char *s, int64_t *out) {
    if (!*s) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end == '\0' && errno == 0) return *out = v, 1;
    errno = 0;
    double d = strtod(s, &end);
    if (*end != '\0' || errno != 0 || !isfinite(d) || d != floor(d) || fabs(d) > 9.0e15)
        return 0;
    *out = (int64_t)d;
    return 1;
}

static int parse_float(const char *s, double *out) {
    if (!*s) return 0;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (*end != '\0' || errno == ERANGE || !isfinite(d)) return 0;
    *out = d;
    return 1;
}

static const char *type_name(int32_t type) {
    switch (type) {
    case CT_PARAM_TYPE_BOOL: return "bool";
    case CT_PARAM_TYPE_INT: return "int";
    case CT_PARAM_TYPE_FLOAT: return "float";
    case CT_PARAM_TYPE_STRING: return "string";
    case CT_PARAM_TYPE_ENUM: return "enum";
    default: return "?";
    }
}

/* ---- suggestions --------------------------------------------------------------------- */

int32_t config_edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    int32_t small[64];
    int32_t *row = nb + 1 <= 64 ? small : malloc((nb + 1) * sizeof *row);
    if (!row) return INT32_MAX;
    for (size_t j = 0; j <= nb; j++) row[j] = (int32_t)j;
    for (size_t i = 1; i <= na; i++) {
        int32_t diag = row[0]; /* d[i-1][j-1] */
        row[0] = (int32_t)i;
        for (size_t j = 1; j <= nb; j++) {
            int32_t up = row[j]; /* d[i-1][j] */
            int32_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    int32_t d = row[nb];
    if (row != small) free(row);
    return d;
}

/* Is `cand` close enough to `word` to suggest? At most a third of the longer word differs
 * (at least 2 edits allowed), or one is a prefix of the other. */
static int close_enough(const char *word, const char *cand, int32_t d) {
    size_t lw = strlen(word), lc = strlen(cand);
    size_t longer = lw > lc ? lw : lc;
    int32_t limit = (int32_t)(longer / 3);
    if (limit < 2) limit = 2;
    if (d <= limit) return 1;
    size_t shorter = lw < lc ? lw : lc;
    return shorter >= 3 && !strncmp(word, cand, shorter);
}

const char *config_nearest(const char *word, const char *const *cands, int32_t n) {
    const char *best = NULL;
    int32_t best_d = INT32_MAX;
    for (int32_t i = 0; i < n; i++) {
        if (!cands[i]) continue;
        int32_t d = config_edit_distance(word, cands[i]);
        if (d < best_d) best_d = d, best = cands[i];
    }
    return best && close_enough(word, best, best_d) ? best : NULL;
}

/* ---- validation ---------------------------------------------------------------------- */

static const ct_param_spec *spec_at(const ct_param_spec *specs, uint32_t stride, size_t i) {
    return (const ct_param_spec *)((const char *)specs + i * stride);
}

static int in_list(const char *key, const char *const *list) {
    for (; list && *list; list++)
        if (!strcmp(*list, key)) return 1;
    return 0;
}

const char *config_range_text(const ct_param_spec *s, int digits, char *buf, size_t cap) {
    buf[0] = '\0';
    if (s->min > s->max) return buf;
    int lo_open = (s->flags & CT_PARAM_MIN_EXCLUSIVE) != 0;
    int hi_open = (s->flags & CT_PARAM_MAX_EXCLUSIVE) != 0;
    char lo[40], hi[40];
    if (s->type == CT_PARAM_TYPE_INT && fabs(s->min) < 9.2e18 && fabs(s->max) < 9.2e18) {
        snprintf(lo, sizeof lo, "%lld", (long long)s->min); /* an integer key's ends, exactly */
        snprintf(hi, sizeof hi, "%lld", (long long)s->max);
    } else {
        snprintf(lo, sizeof lo, "%.*g", digits, s->min);
        snprintf(hi, sizeof hi, "%.*g", digits, s->max);
    }
    if (!lo_open && !hi_open) snprintf(buf, cap, "%s..%s", lo, hi);
    else snprintf(buf, cap, "%c%s, %s%c", lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
    return buf;
}

/* num inside the spec's range, each end included unless its flag excludes it. */
static int in_range(const ct_param_spec *s, double num) {
    if (s->min > s->max) return 1;
    int low_ok = (s->flags & CT_PARAM_MIN_EXCLUSIVE) ? num > s->min : num >= s->min;
    int high_ok = (s->flags & CT_PARAM_MAX_EXCLUSIVE) ? num < s->max : num <= s->max;
    return low_ok && high_ok;
}

/* Check one present value against its spec. */
static int32_t check_value(const host_config *cfg, const char *section, const config_entry *e,
                           const ct_param_spec *s, const char *owner, ct_error *err) {
    const char *v = e->value;
    char range[96];
    double num = 0;
    switch (s->type) {
    case CT_PARAM_TYPE_BOOL: {
        int32_t b;
        if (!parse_bool(v, &b))
            return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] %s = '%s' is not a bool ---> "
                                "write true or false (yes/no, on/off, 1/0)", e->origin, section,
                                e->key, v);
        return CT_OK;
    }
    case CT_PARAM_TYPE_INT: {
        int64_t i;
        if (!parse_int(v, &i))
            return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] %s = '%s' is not an integer "
                                "---> write a whole number, e.g. %s", e->origin, section, e->key,
                                v, s->default_value ? s->default_value : "8");
        num = (double)i;
        break;
    }
    case CT_PARAM_TYPE_FLOAT:
        if (!parse_float(v, &num))
            return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] %s = '%s' is not a finite number "
                                "---> write e.g. %s", e->origin, section, e->key, v,
                                s->default_value ? s->default_value : "1e-3");
        break;
    case CT_PARAM_TYPE_STRING:
        return CT_OK;
    case CT_PARAM_TYPE_ENUM: {
        int32_t n = 0;
        for (const char *const *c = s->choices; c && *c; c++, n++)
            if (!strcmp(*c, v)) return CT_OK;
        char list[256] = "";
        size_t used = 0;
        for (const char *const *c = s->choices; c && *c; c++) {
            int w = snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", *c);
            if (w < 0 || (size_t)w >= sizeof list - used) break;
            used += (size_t)w;
        }
        const char *near = s->choices ? config_nearest(v, s->choices, n) : NULL;
        char dym[128] = "";
        if (near) snprintf(dym, sizeof dym, " (did you mean '%s'?)", near);
        return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] %s = '%s' is not one of: %s%s",
                            e->origin, section, e->key, v, list, dym);
    }
    default:
        return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] key '%s' of %s has unknown type %d "
                            "---> the plugin's schema is broken", e->origin, section, e->key,
                            owner, (int)s->type);
    }
    if (!in_range(s, num))
        return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] %s = %s is out of range %s ---> "
                            "pick a value in that range", e->origin, section, e->key, v,
                            config_range_text(s, 17, range, sizeof range));
    /* "-0" of a key that takes no negative values: a sign that means nothing is a typo for a
     * value the writer meant (0 often switches a feature off) */
    if (num == 0 && v[strspn(v, " \t")] == '-' && s->min <= s->max && s->min >= 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] %s = %s is a negative zero, and the "
                            "key takes no negative values (range %s) ---> write 0 if you mean "
                            "zero", e->origin, section, e->key, v,
                            config_range_text(s, 17, range, sizeof range));
    (void)cfg;
    return CT_OK;
}

int32_t config_validate_section(host_config *cfg, const char *section, const ct_param_spec *specs,
                                uint32_t stride, const char *owner, const char *const *skip,
                                ct_error *err) {
    if (stride == 0) stride = sizeof(ct_param_spec);
    size_t n_specs = 0;
    while (specs && spec_at(specs, stride, n_specs)->key) n_specs++;

    /* unknown keys, then each present value (filling defaults below may move entries and the
     * section's key list: nothing of them is held across that) */
    const config_section *sec = find_section(cfg, section);
    for (int32_t i = 0; sec && i < sec->n_keys; i++) {
        const config_entry *e = &cfg->entries[sec->keys[i]];
        if (in_list(e->key, skip)) continue;
        const ct_param_spec *s = NULL;
        for (size_t j = 0; j < n_specs && !s; j++)
            if (!strcmp(spec_at(specs, stride, j)->key, e->key)) s = spec_at(specs, stride, j);
        if (s) {
            int32_t rc = check_value(cfg, section, e, s, owner, err);
            if (rc != CT_OK) return rc;
            continue;
        }
        /* Suggest the nearest valid key: the schema's and the skipped (host) keys. */
        size_t n_skip = 0;
        while (skip && skip[n_skip]) n_skip++;
        const char **cands = malloc((n_specs + n_skip + 1) * sizeof *cands);
        if (!cands) return ct_error_set(err, CT_ERR_NOMEM, "config: out of memory");
        for (size_t j = 0; j < n_specs; j++) cands[j] = spec_at(specs, stride, j)->key;
        for (size_t j = 0; j < n_skip; j++) cands[n_specs + j] = skip[j];
        const char *near = config_nearest(e->key, cands, (int32_t)(n_specs + n_skip));
        char hint[CT_VALUE_MAX / 2];
        if (near) {
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
        } else if (n_specs + n_skip == 0) {
            snprintf(hint, sizeof hint, "; %s takes no keys here", owner);
        } else {
            size_t used = (size_t)snprintf(hint, sizeof hint, "; valid keys: ");
            for (size_t j = 0; j < n_specs + n_skip && used < sizeof hint; j++) {
                int w = snprintf(hint + used, sizeof hint - used, "%s%s", j ? ", " : "",
                                 cands[j]);
                if (w < 0) break;
                used += (size_t)w;
            }
        }
        free(cands);
        const char *who = strrchr(owner, ' ') ? strrchr(owner, ' ') + 1 : owner;
        return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] unknown key '%s'%s ---> `ctrain "
                            "inspect %s` lists the keys of %s", e->origin, section, e->key, hint,
                            who, owner);
    }

    /* required keys, then defaults */
    for (size_t j = 0; j < n_specs; j++) {
        const ct_param_spec *s = spec_at(specs, stride, j);
        if (find_entry(cfg, section, s->key) || in_list(s->key, skip)) continue;
        if (!s->default_value)
            return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] missing required key '%s' (%s: "
                                "%s) ---> add '%s = ...' under [%s]", cfg->path, section, s->key,
                                type_name(s->type), s->help ? s->help : "", s->key, section);
        int32_t rc = put(cfg, section, s->key, s->default_value, "default", 0, err);
        if (rc != CT_OK) return rc;
    }
    return CT_OK;
}

/* ---- typed getters ------------------------------------------------------------------- */

static const config_entry *need(const host_config *cfg, const char *section, const char *key,
                            ct_error *err) {
    const config_entry *e = find_aliased(cfg, section, key);
    if (!e)
        ct_error_set(err, CT_ERR_INVALID, "[%s] key '%s' is not set ---> the section's schema "
                     "should declare it (with a default)", section, key);
    return e;
}

int32_t config_get_bool(const host_config *cfg, const char *section, const char *key,
                        int32_t *out, ct_error *err) {
    const config_entry *e = need(cfg, section, key, err);
    if (!e) return CT_ERR_INVALID;
    if (!parse_bool(e->value, out))
        return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] %s = '%s' is not a bool", e->origin,
                            section, key, e->value);
    return CT_OK;
}

int32_t config_get_int(const host_config *cfg, const char *section, const char *key,
                       int64_t *out, ct_error *err) {
    const config_entry *e = need(cfg, section, key, err);
    if (!e) return CT_ERR_INVALID;
    if (!parse_int(e->value, out))
        return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] %s = '%s' is not an integer",
                            e->origin, section, key, e->value);
    return CT_OK;
}

int32_t config_get_float(const host_config *cfg, const char *section, const char *key,
                         double *out, ct_error *err) {
    const config_entry *e = need(cfg, section, key, err);
    if (!e) return CT_ERR_INVALID;
    if (!parse_float(e->value, out))
        return ct_error_set(err, CT_ERR_INVALID, "%s: [%s] %s = '%s' is not a number",
                            e->origin, section, key, e->value);
    return CT_OK;
}

int32_t config_get_string(const host_config *cfg, const char *section, const char *key,
                          const char **out, ct_error *err) {
    const config_entry *e = need(cfg, section, key, err);
    if (!e) return CT_ERR_INVALID;
    *out = e->value;
    return CT_OK;
}

/* ---- printing ------------------------------------------------------------------------ */

/* One section as INI text; `first`: no blank line before it. */
static void print_section(const host_config *cfg, const config_section *sec, FILE *out,
                          int shown, int first) {
    fprintf(out, "%s[%s]\n", first ? "" : "\n", sec->name);
    int width = 0;
    for (int32_t i = 0; i < sec->n_keys; i++) {
        const config_entry *e = &cfg->entries[sec->keys[i]];
        int w = (int)(strlen(e->key) + 3 + strlen(e->value));
        if (w > width) width = w;
    }
    for (int32_t i = 0; i < sec->n_keys; i++) {
        const config_entry *e = &cfg->entries[sec->keys[i]];
        int w;
        if (shown) {
            char v[512];
            w = fprintf(out, "%s = %s", e->key, printable(e->value, v, sizeof v));
        } else {
            w = fprintf(out, "%s = %s", e->key, e->value);
        }
        fprintf(out, "%*s ; %s\n", width - w > 0 ? width - w : 0, "", e->origin);
    }
}

/* The section [A] that [A.B] belongs to, when cfg has it; else NULL. */
static const config_section *parent_of(const host_config *cfg, const char *name) {
    const char *dot = strchr(name, '.');
    if (!dot || dot == name || (size_t)(dot - name) >= CONFIG_NAME_MAX) return NULL;
    char parent[CONFIG_NAME_MAX];
    snprintf(parent, sizeof parent, "%.*s", (int)(dot - name), name);
    return find_section(cfg, parent);
}

/* config_print, or config_show with `shown` (control characters escaped; printable.h). A
 * section [A.B] is printed right after [A] (a plugin's own keys after its kind's section). */
static void print_config(const host_config *cfg, FILE *out, int shown) {
    int first = 1;
    for (int32_t s = 0; s < cfg->n_sections; s++) {
        const config_section *sec = &cfg->sections[s];
        if (parent_of(cfg, sec->name)) continue;
        print_section(cfg, sec, out, shown, first);
        first = 0;
        for (int32_t c = 0; c < cfg->n_sections; c++)
            if (parent_of(cfg, cfg->sections[c].name) == sec)
                print_section(cfg, &cfg->sections[c], out, shown, 0);
    }
}

void config_print(const host_config *cfg, FILE *out) { print_config(cfg, out, 0); }
void config_show(const host_config *cfg, FILE *out) { print_config(cfg, out, 1); }

/* See config.h. */
int32_t config_load_world1(const char *path, host_config **out, ct_error *err) {
    *out = NULL;
    host_config *src = config_new(), *cfg = NULL;
    char *text = NULL;
    size_t len = 0;
    if (!src) return ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    int32_t rc = config_load_file(src, path, err);
    FILE *m = rc == CT_OK ? open_memstream(&text, &len) : NULL;
    if (rc == CT_OK && !m) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    if (rc == CT_OK) {
        for (int32_t s = 0; s < config_section_count(src); s++) {
            const char *sec = config_section_name(src, s);
            if (!strcmp(sec, "comm")) continue;
            fprintf(m, "[%s]\n", sec);
            for (int32_t k = 0; k < config_key_count(src, sec); k++) {
                const char *key = config_key_name(src, sec, k);
                fprintf(m, "%s = %s\n", key, config_get(src, sec, key));
            }
        }
        fprintf(m, "[comm]\nplugin = local\nworld_size = 1\n");
        if (fclose(m) != 0) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    }
    if (rc == CT_OK && !(cfg = config_new())) rc = ct_error_set(err, CT_ERR_NOMEM, "out of memory");
    if (rc == CT_OK) rc = config_load_string(cfg, path, text, err);
    free(text);
    config_free(src);
    if (rc != CT_OK) {
        config_free(cfg);
        return rc;
    }
    *out = cfg;
    return CT_OK;
}
