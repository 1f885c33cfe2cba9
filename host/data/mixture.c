/* mixture.c — [data] train = NAME:WEIGHT, ... (see mixture.h): the spec read and checked, and
 * the loader of a mixture, window by window over one single-dataset loader per component. */
#include "data/mixture.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIX_MAGIC "CTMIX001"

/* ---- the spec ------------------------------------------------------------------------------ */

static int name_char(int c) { return isalnum(c) || c == '_' || c == '-'; }

/* One "NAME:WEIGHT" item of s at *p (up to ',' or the end): the name's and the weight's
 * extents (the weight trimmed); 0 when the item does not have that shape. */
static int item_at(const char *s, size_t *p, size_t *n0, size_t *n1, size_t *w0, size_t *w1) {
    size_t i = *p;
    while (s[i] == ' ' || s[i] == '\t') i++;
    *n0 = i;
    while (name_char((unsigned char)s[i])) i++;
    *n1 = i;
    while (s[i] == ' ' || s[i] == '\t') i++;
    if (*n1 == *n0 || s[i] != ':') return 0;
    i++;
    while (s[i] == ' ' || s[i] == '\t') i++;
    *w0 = i;
    while (s[i] && s[i] != ',' && s[i] != ':' && s[i] != '/') i++;
    if (s[i] == ':' || s[i] == '/') return 0;
    *w1 = i;
    while (*w1 > *w0 && (s[*w1 - 1] == ' ' || s[*w1 - 1] == '\t')) (*w1)--;
    if (*w1 == *w0) return 0;
    *p = s[i] == ',' ? i + 1 : i;
    return 1;
}

int mixture_is_spec(const char *value) {
    if (!value || !*value) return 0;
    size_t p = 0, n0, n1, w0, w1;
    while (value[p])
        if (!item_at(value, &p, &n0, &n1, &w0, &w1)) return 0;
    return value[strlen(value) - 1] != ','; /* "web:1," is not a list */
}

static const ct_param_spec section_specs[] = {
    CT_PARAM_STRING("path", NULL, "this dataset's token shards: a file, a folder (its train_*.bin) "
                    "or a glob, as [data] train takes"),
    CT_PARAM_END,
};

const ct_param_spec *mixture_section_specs(void) { return section_specs; }

int32_t mixture_parse(const host_config *cfg, mix_spec *out, ct_error *err) {
    memset(out, 0, sizeof *out);
    const char *v = config_get(cfg, "data", "train");
    if (!mixture_is_spec(v)) return CT_OK;
    const char *origin = config_origin(cfg, "data", "train");
    const char *hint = "weights are positive finite numbers, normalised by their sum, e.g. "
                       "train = web:0.7, books:0.3 with [data.web] path = ... and [data.books] "
                       "path = ...";
    size_t p = 0, n0, n1, w0, w1;
    double sum = 0;
    while (v[p]) {
        item_at(v, &p, &n0, &n1, &w0, &w1);
        mix_component *c = &out->c[out->n];
        char wtext[64];
        snprintf(wtext, sizeof wtext, "%.*s", (int)(w1 - w0), v + w0);
        if (out->n == MIX_MAX)
            return ct_error_set(err, CT_ERR_INVALID, "%s: [data] train names more than %d "
                                "datasets ---> merge some into one dataset's shards", origin,
                                MIX_MAX);
        if (n1 - n0 >= MIX_NAME_MAX)
            return ct_error_set(err, CT_ERR_INVALID, "%s: [data] train: the dataset name %.*s is "
                                "longer than %d bytes ---> use a shorter name", origin,
                                (int)(n1 - n0), v + n0, MIX_NAME_MAX - 1);
        snprintf(c->name, sizeof c->name, "%.*s", (int)(n1 - n0), v + n0);
        char *end;
        c->weight = strtod(wtext, &end);
        if (end == wtext || *end || !isfinite(c->weight) || c->weight <= 0)
            return ct_error_set(err, CT_ERR_INVALID, "%s: [data] train: the weight of %s is %s, "
                                "not a positive finite number ---> %s", origin, c->name, wtext,
                                hint);
        for (int32_t k = 0; k < out->n; k++)
            if (!strcmp(out->c[k].name, c->name))
                return ct_error_set(err, CT_ERR_INVALID, "%s: [data] train names %s twice ---> "
                                    "give each dataset once, with its whole weight", origin,
                                    c->name);
        char section[MIX_NAME_MAX + 8];
        snprintf(section, sizeof section, "data.%s", c->name);
        if (!config_has_section(cfg, section))
            return ct_error_set(err, CT_ERR_INVALID, "%s: [data] train names the dataset %s, "
                                "but there is no [data.%s] section ---> add [data.%s] with path "
                                "= its shards (a file, folder or glob); a file path that reads "
                                "like NAME:WEIGHT is written ./%s", origin, c->name, c->name,
                                c->name, v);
        c->path = config_get(cfg, section, "path");
        if (!c->path || !*c->path)
            return ct_error_set(err, CT_ERR_INVALID, "%s: [data.%s] has no path (the dataset %s "
                                "of [data] train = %s) ---> set path = its shards (a file, "
                                "folder or glob)", config_section_origin(cfg, section) ?
                                config_section_origin(cfg, section) : origin, c->name, c->name,
                                v);
        sum += c->weight;
        out->n++;
    }
    if (!isfinite(sum))
        return ct_error_set(err, CT_ERR_INVALID, "%s: [data] train: the weights' sum is not "
                            "finite ---> %s", origin, hint);
    for (int32_t i = 0; i < out->n; i++) out->c[i].share = out->c[i].weight / sum;
    return CT_OK;
}

int32_t mixture_validate(host_config *cfg, ct_error *err) {
    const char *val = config_get(cfg, "data", "val");
    if (mixture_is_spec(val))
        return ct_error_set(err, CT_ERR_INVALID, "%s: [data] val = %s reads as a mixture; "
                            "validation takes one dataset's shards ---> set val = a file, folder "
                            "or glob (a file path that reads like NAME:WEIGHT is written ./%s)",
                            config_origin(cfg, "data", "val"), val, val);
    mix_spec spec;
    int32_t rc = mixture_parse(cfg, &spec, err);
    for (int32_t i = 0; rc == CT_OK && i < spec.n; i++) {
        char section[MIX_NAME_MAX + 8];
        snprintf(section, sizeof section, "data.%s", spec.c[i].name);
        rc = config_validate_section(cfg, section, section_specs, sizeof(ct_param_spec),
                                     "ctrain", NULL, err);
    }
    return rc;
}

int mixture_section_listed(const host_config *cfg, const char *name) {
    if (strncmp(name, "data.", 5) != 0 || !name[5]) return -1;
    const char *v = config_get(cfg, "data", "train");
    if (!mixture_is_spec(v)) return 0;
    size_t p = 0, n0, n1, w0, w1, k = strlen(name + 5);
    while (v[p]) {
        item_at(v, &p, &n0, &n1, &w0, &w1);
        if (n1 - n0 == k && !strncmp(v + n0, name + 5, k)) return 1;
    }
    return 0;
}

const char *mixture_train_path(const host_config *cfg) {
    const char *v = config_get(cfg, "data", "train");
    if (!mixture_is_spec(v)) return v;
    size_t p = 0, n0, n1, w0, w1;
    item_at(v, &p, &n0, &n1, &w0, &w1);
    char section[MIX_NAME_MAX + 8];
    if (n1 - n0 >= MIX_NAME_MAX) return NULL;
    snprintf(section, sizeof section, "data.%.*s", (int)(n1 - n0), v + n0);
    return config_get(cfg, section, "path");
}

/* ---- the loader ---------------------------------------------------------------------------- */

struct host_mixture {
    int32_t      n;
    mix_component c[MIX_MAX];
    double       cum[MIX_MAX];    /* cumulative shares; cum[n-1] = 1 */
    host_loader *comp[MIX_MAX];   /* each component's loader: batch 1, rank 0 of 1 */
    uint64_t     taken[MIX_MAX];  /* windows each component has dealt since step 0 */
    uint64_t     drawn;           /* global windows drawn since step 0 */
    int64_t      B, T;
    int32_t      rank, world;
    uint64_t     seed;
};

static uint64_t fnv64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The component of global window j: u_j = splitmix64 of (seed, j), uniform in [0, 1). */
static int32_t pick(const host_mixture *m, uint64_t j) {
    uint64_t z = (m->seed ^ 0x6d69787475726521ull) + (j + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = (double)(z >> 11) * 0x1.0p-53;
    for (int32_t i = 0; i < m->n - 1; i++)
        if (u < m->cum[i]) return i;
    return m->n - 1;
}

/* Pass over component l's next window without reading it (loader_next's step, batch 1). */
static int32_t skip_window(host_loader *l, ct_error *err) {
    host_loader_state st = loader_get_state(l);
    if (st.position + 1 > (uint64_t)loader_windows(l)) {
        st.epoch++;
        st.position = 0;
    }
    st.position++;
    return loader_set_state(l, st, err);
}

host_mixture *mixture_open(const host_config *cfg, const mix_spec *spec, int64_t vocab_size_limit,
                           int64_t B, int64_t T, int32_t rank, int32_t world, uint64_t seed,
                           ct_error *err) {
    host_mixture *m = calloc(1, sizeof *m);
    if (!m) {
        ct_error_set(err, CT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->n = spec->n;
    m->B = B, m->T = T, m->rank = rank, m->world = world, m->seed = seed;
    double acc = 0;
    host_data_meta first = {.max_token = -1};
    int32_t rc = CT_OK;
    for (int32_t i = 0; i < m->n && rc == CT_OK; i++) {
        const mix_component *c = &spec->c[i];
        m->c[i] = *c;
        acc += c->share;
        m->cum[i] = i == m->n - 1 ? 1.0 : acc;
        char section[MIX_NAME_MAX + 8];
        snprintf(section, sizeof section, "data.%s", c->name);
        const char *origin = config_origin(cfg, section, "path");
        /* the component's vocabulary (meta.ini) fits the model; one tokenizer for all */
        host_data_meta meta = {.max_token = -1};
        if ((rc = data_meta_for(c->path, &meta, err)) != CT_OK) break;
        if (meta.found && meta.vocab_size > vocab_size_limit && vocab_size_limit > 0)
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: [data.%s] path = %s: its vocabulary is "
                              "%d (%s), more than the model's vocab_size %lld ---> tokenize every "
                              "dataset of the mixture with the model's tokenizer", origin,
                              c->name, c->path, meta.vocab_size, meta.path,
                              (long long)vocab_size_limit);
        if (rc == CT_OK && i > 0 && data_meta_tokenizers_differ(&first, &meta)) {
            char a[400], b[400];
            rc = ct_error_set(err, CT_ERR_INVALID, "%s: [data.%s] holds tokens of %s (%s), but "
                              "[data.%s] of %s (%s): a model cannot train on two tokenizers' "
                              "ids ---> prepare every dataset of the mixture with one "
                              "tokenizer", origin, c->name, data_meta_tokenizer_text(&meta, a, sizeof a),
                              meta.path, spec->c[0].name,
                              data_meta_tokenizer_text(&first, b, sizeof b), first.path);
        }
        if (i == 0) first = meta;
        else data_meta_free(&meta);
        if (rc != CT_OK) break;
        m->comp[i] = loader_open(c->path, "train", vocab_size_limit, 1, T, 0, 1,
                                 seed ^ fnv64(c->name), err);
        if (!m->comp[i]) {
            char why[sizeof err->message];
            snprintf(why, sizeof why, "%s", err->message);
            rc = ct_error_set(err, err->code, "[data.%s] path = %s: %s", c->name, c->path, why);
        }
    }
    data_meta_free(&first);
    if (rc != CT_OK) {
        mixture_close(m);
        return NULL;
    }
    return m;
}

void mixture_close(host_mixture *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n; i++) loader_close(m->comp[i]);
    free(m);
}

int32_t mixture_next(host_mixture *m, int32_t *inputs, int32_t *targets, ct_error *err) {
    int64_t global = (int64_t)m->world * m->B, mine = (int64_t)m->rank * m->B;
    for (int64_t j = 0; j < global; j++) {
        int32_t c = pick(m, m->drawn + (uint64_t)j);
        int32_t rc;
        if (j >= mine && j < mine + m->B) {
            int64_t b = j - mine;
            rc = loader_next(m->comp[c], inputs + b * m->T, targets + b * m->T, err);
            if (rc != CT_OK) {
                char why[sizeof err->message];
                snprintf(why, sizeof why, "%s", err->message);
                return ct_error_set(err, rc, "[data.%s]: %s", m->c[c].name, why);
            }
        } else if ((rc = skip_window(m->comp[c], err)) != CT_OK) {
            return rc;
        }
        m->taken[c]++;
    }
    m->drawn += (uint64_t)global;
    return CT_OK;
}

const host_loader *mixture_component(const host_mixture *m, int32_t i) { return m->comp[i]; }

uint64_t mixture_drawn(const host_mixture *m) { return m->drawn; }

void mixture_add_metrics(const host_mixture *m, host_metric_table *out) {
    for (int32_t i = 0; i < m->n; i++) {
        char name[HOST_METRIC_NAME_MAX];
        snprintf(name, sizeof name, "mix/%s/tokens", m->c[i].name);
        metrics_add(out, name, (double)m->taken[i] * (double)m->T, CT_METRIC_MEAN);
        snprintf(name, sizeof name, "mix/%s/fraction", m->c[i].name);
        metrics_add(out, name, m->drawn ? (double)m->taken[i] / (double)m->drawn : 0,
                    CT_METRIC_MEAN);
    }
}

/* ---- the state ----------------------------------------------------------------------------- *
 * little-endian: char magic[8] "CTMIX001"; uint32 n; uint32 0; uint64 drawn; per component:
 * char name[MIX_NAME_MAX] (NUL-padded); double weight; uint64 windows; uint64 epoch;
 * uint64 position; uint64 taken. */

#define PUT(p, v) (memcpy((p), &(v), sizeof(v)), (p) += sizeof(v))
#define GET(p, v) (memcpy(&(v), (p), sizeof(v)), (p) += sizeof(v))

int32_t mixture_save(const host_mixture *m, void *buf, size_t cap, size_t *n, ct_error *err) {
    size_t need = 24 + (size_t)m->n * (MIX_NAME_MAX + 40);
    if (need > cap)
        return ct_error_set(err, CT_ERR_INVALID, "the data mixture's state needs %zu bytes, "
                            "more than %zu", need, cap);
    unsigned char *p = buf;
    uint32_t count = (uint32_t)m->n, zero = 0;
    memcpy(p, MIX_MAGIC, 8), p += 8;
    PUT(p, count);
    PUT(p, zero);
    PUT(p, m->drawn);
    for (int32_t i = 0; i < m->n; i++) {
        char name[MIX_NAME_MAX] = {0};
        memcpy(name, m->c[i].name, strlen(m->c[i].name));
        memcpy(p, name, sizeof name), p += sizeof name;
        host_loader_state st = loader_get_state(m->comp[i]);
        uint64_t windows = (uint64_t)loader_windows(m->comp[i]);
        PUT(p, m->c[i].weight);
        PUT(p, windows);
        PUT(p, st.epoch);
        PUT(p, st.position);
        PUT(p, m->taken[i]);
    }
    *n = (size_t)(p - (unsigned char *)buf);
    return CT_OK;
}

/* "web:0.7, books:0.3" of the saved state s (n components) into text. */
static void saved_list(const unsigned char *s, uint32_t n, char *text, size_t cap) {
    size_t at = 0;
    text[0] = '\0';
    for (uint32_t i = 0; i < n && at < cap; i++) {
        const unsigned char *e = s + 24 + (size_t)i * (MIX_NAME_MAX + 40);
        double w;
        memcpy(&w, e + MIX_NAME_MAX, sizeof w);
        at += (size_t)snprintf(text + at, cap - at, "%s%.*s:%g", i ? ", " : "", MIX_NAME_MAX,
                               (const char *)e, w);
    }
}

int32_t mixture_load(host_mixture *m, const void *buf, size_t n, const char *what, ct_error *err) {
    const unsigned char *p = buf;
    uint32_t count = 0, zero = 0;
    if (n < 24 || memcmp(p, MIX_MAGIC, 8) != 0)
        return ct_error_set(err, CT_ERR_INVALID, "%s is not a data mixture's state ---> resume "
                            "from another checkpoint with --resume-from", what);
    p += 8;
    GET(p, count);
    GET(p, zero);
    (void)zero;
    if (count > MIX_MAX || n != 24 + (size_t)count * (MIX_NAME_MAX + 40))
        return ct_error_set(err, CT_ERR_INVALID, "%s is damaged (%u components in %zu bytes) "
                            "---> resume from another checkpoint with --resume-from", what,
                            count, n);
    char saved[2048], now[2048];
    saved_list(buf, count, saved, sizeof saved);
    size_t at = 0;
    now[0] = '\0';
    for (int32_t i = 0; i < m->n && at < sizeof now; i++)
        at += (size_t)snprintf(now + at, sizeof now - at, "%s%s:%g", i ? ", " : "", m->c[i].name,
                               m->c[i].weight);
    uint64_t drawn;
    GET(p, drawn);
    int same = count == (uint32_t)m->n, reweighted = 0;
    host_loader_state st[MIX_MAX];
    uint64_t taken[MIX_MAX];
    for (int32_t i = 0; same && i < m->n; i++) {
        char name[MIX_NAME_MAX + 1] = {0};
        memcpy(name, p, MIX_NAME_MAX), p += MIX_NAME_MAX;
        double w;
        uint64_t windows;
        GET(p, w);
        GET(p, windows);
        GET(p, st[i].epoch);
        GET(p, st[i].position);
        GET(p, taken[i]);
        same = !strcmp(name, m->c[i].name) && windows == (uint64_t)loader_windows(m->comp[i]);
        reweighted |= w != m->c[i].weight;
    }
    if (!same)
        return ct_error_set(err, CT_ERR_INVALID, "%s: the checkpoint's data mixture is %s; this "
                            "run's [data] train is %s (the datasets, their order or their "
                            "sequences differ) ---> resume with the checkpoint's [data] train and "
                            "its datasets' shards", what, saved, now);
    for (int32_t i = 0; i < m->n; i++) {
        int32_t rc = loader_set_state(m->comp[i], st[i], err);
        if (rc != CT_OK) return rc;
        m->taken[i] = taken[i];
    }
    m->drawn = drawn;
    if (reweighted && m->rank == 0)
        fprintf(stderr, "ctrain: warning: the data mixture's weights changed since the "
                "checkpoint (%s, now %s): the windows drawn from here on differ from the ones "
                "that run would have drawn\n", saved, now);
    return CT_OK;
}
