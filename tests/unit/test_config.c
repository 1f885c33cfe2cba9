/* test_config.c — claims about host/config/config.c: INI parsing with line numbers and origins,
 * the 199-character line limit, duplicates, --set overrides, schema validation messages,
 * defaults, typed getters, the edit distance behind "did you mean", and lookups that stay O(1)
 * per key however many keys there are.
 * Not for: plugin loading (test_registry.c).
 */
#include "ct_test.h"
#include "config/config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ct_error new_err(void) {
    ct_error e = {.struct_size = sizeof(ct_error)};
    return e;
}

CT_TEST(config_parses_values_trimmed_with_file_line_origins) {
    host_config *cfg = config_new();
    ct_error err = new_err();
    int32_t rc = config_load_string(cfg, "ini/t.ini",
                                    "; comment\n"
                                    "[run]\n"
                                    "  name =  hello world   ; inline comment\n"
                                    "# another comment\n"
                                    "steps=12\n"
                                    "\n"
                                    "[loss.zloss]\r\n"
                                    "coef = 1e-4\r\n",
                                    &err);
    CT_CHECK_MSG(rc == CT_OK, "load failed: %s", err.message);
    CT_CHECK_STR_CONTAINS(config_get(cfg, "run", "name"), "hello world");
    CT_CHECK(!strcmp(config_get(cfg, "run", "name"), "hello world"));
    CT_CHECK(!strcmp(config_get(cfg, "run", "steps"), "12"));
    CT_CHECK(!strcmp(config_get(cfg, "loss.zloss", "coef"), "1e-4"));
    CT_CHECK(!strcmp(config_origin(cfg, "run", "name"), "ini/t.ini:3"));
    CT_CHECK(!strcmp(config_origin(cfg, "run", "steps"), "ini/t.ini:5"));
    CT_CHECK(!strcmp(config_origin(cfg, "loss.zloss", "coef"), "ini/t.ini:8"));
    CT_CHECK(!strcmp(config_origin(cfg, "run", "absent"), "ini/t.ini"));
    CT_CHECK(config_get(cfg, "run", "absent") == NULL);
    CT_CHECK_INT(config_section_count(cfg), 2);
    CT_CHECK(!strcmp(config_section_name(cfg, 1), "loss.zloss"));
    CT_CHECK_INT(config_key_count(cfg, "run"), 2);
    CT_CHECK(!strcmp(config_key_name(cfg, "run", 1), "steps"));
    CT_CHECK(!strcmp(config_path(cfg), "ini/t.ini"));
    config_free(cfg);
}

CT_TEST(config_records_empty_sections_and_indented_keys_are_keys) {
    host_config *cfg = config_new();
    ct_error err = new_err();
    int32_t rc = config_load_string(cfg, "t.ini", "[empty]\n[a]\nx = 1\n    y = 2\n", &err);
    CT_CHECK_MSG(rc == CT_OK, "load failed: %s", err.message);
    CT_CHECK(config_has_section(cfg, "empty"));
    CT_CHECK(!strcmp(config_section_origin(cfg, "empty"), "t.ini:1"));
    CT_CHECK(!strcmp(config_get(cfg, "a", "x"), "1")); /* not "1\ny = 2" (multi-line off) */
    CT_CHECK(config_get(cfg, "a", "y") && !strcmp(config_get(cfg, "a", "y"), "2"));
    config_free(cfg);
}

/* A line of exactly 199 characters is kept whole; one of 200 is an error naming its line. */
CT_TEST(config_line_limit_is_199_characters) {
    char text[600];
    char val[300];
    /* "k = " is 4 characters: 195 more make 199 */
    memset(val, 'v', 195);
    val[195] = '\0';
    snprintf(text, sizeof text, "[s]\nk = %s\n", val);
    host_config *cfg = config_new();
    ct_error err = new_err();
    CT_CHECK_MSG(config_load_string(cfg, "t.ini", text, &err) == CT_OK, "%s", err.message);
    CT_CHECK_INT(strlen(config_get(cfg, "s", "k")), 195);
    config_free(cfg);

    val[195] = 'v';
    val[196] = '\0';
    snprintf(text, sizeof text, "[s]\na = 1\nk = %s\n", val);
    cfg = config_new();
    err = new_err();
    CT_CHECK_INT(config_load_string(cfg, "t.ini", text, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "t.ini:3: line is 200 characters");
    CT_CHECK_STR_CONTAINS(err.message, "keeps at most 199");
    CT_CHECK_STR_CONTAINS(err.message, "--->");
    config_free(cfg);
}

CT_TEST(config_duplicate_key_names_both_lines) {
    host_config *cfg = config_new();
    ct_error err = new_err();
    int32_t rc = config_load_string(cfg, "d.ini", "[optim]\nlr = 1\nbeta1 = 0.9\n\nlr = 2\n", &err);
    CT_CHECK_INT(rc, CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "d.ini:5: [optim] duplicate key 'lr' (also set on line 2)");
    config_free(cfg);
    /* the same key in a repeated section header is also a duplicate */
    cfg = config_new();
    err = new_err();
    rc = config_load_string(cfg, "d.ini", "[a]\nx = 1\n[b]\ny = 1\n[a]\nx = 3\n", &err);
    CT_CHECK_INT(rc, CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "d.ini:6: [a] duplicate key 'x' (also set on line 2)");
    config_free(cfg);
}

CT_TEST(config_syntax_error_names_file_and_line) {
    host_config *cfg = config_new();
    ct_error err = new_err();
    int32_t rc = config_load_string(cfg, "s.ini", "[run]\nsteps = 3\nthis line has no equals\n"
                                    "x = 1\n", &err);
    CT_CHECK_INT(rc, CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "s.ini:3: cannot parse 'this line has no equals'");
    config_free(cfg);

    cfg = config_new();
    err = new_err();
    rc = config_load_string(cfg, "s.ini", "[run\nsteps = 3\n", &err);
    CT_CHECK_INT(rc, CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "s.ini:1:");
    config_free(cfg);

    cfg = config_new();
    err = new_err();
    rc = config_load_string(cfg, "s.ini", "steps = 3\n", &err);
    CT_CHECK_INT(rc, CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "s.ini:1: key 'steps' is outside any section");
    config_free(cfg);
}

CT_TEST(config_missing_or_unreadable_file_is_a_clear_error) {
    host_config *cfg = config_new();
    ct_error err = new_err();
    CT_CHECK_INT(config_load_file(cfg, "/nonexistent/x.ini", &err), CT_ERR_IO);
    CT_CHECK_STR_CONTAINS(err.message, "cannot read configuration /nonexistent/x.ini");
    CT_CHECK_STR_CONTAINS(err.message, "No such file");
    /* a directory is refused by type, before any read */
    err = new_err();
    const char *dir = ct_test_tmpdir();
    CT_CHECK_INT(config_load_file(cfg, dir, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, dir);
    CT_CHECK_STR_CONTAINS(err.message, "is a directory, not a regular file");
    config_free(cfg);

    char path[512];
    snprintf(path, sizeof path, "%s/ok.ini", dir);
    FILE *f = fopen(path, "w");
    CT_CHECK(f != NULL);
    if (!f) return;
    fputs("[data]\ntrain = x.bin\n", f);
    fclose(f);
    cfg = config_new();
    err = new_err();
    CT_CHECK_MSG(config_load_file(cfg, path, &err) == CT_OK, "%s", err.message);
    char want[600];
    snprintf(want, sizeof want, "%s:2", path);
    CT_CHECK(!strcmp(config_origin(cfg, "data", "train"), want));
    config_free(cfg);
}

CT_TEST(config_override_splits_at_last_dot_and_replaces) {
    host_config *cfg = config_new();
    ct_error err = new_err();
    CT_CHECK(config_load_string(cfg, "o.ini", "[optim]\nlr = 1\n", &err) == CT_OK);
    CT_CHECK(config_apply_override(cfg, "optim.lr=3e-4", &err) == CT_OK);
    CT_CHECK(!strcmp(config_get(cfg, "optim", "lr"), "3e-4"));
    CT_CHECK(!strcmp(config_origin(cfg, "optim", "lr"), "--set"));
    CT_CHECK(config_apply_override(cfg, " loss.zloss.coef = 1e-3 ", &err) == CT_OK);
    CT_CHECK(!strcmp(config_get(cfg, "loss.zloss", "coef"), "1e-3"));
    CT_CHECK(config_apply_override(cfg, "data.train=a=b", &err) == CT_OK);
    CT_CHECK(!strcmp(config_get(cfg, "data", "train"), "a=b"));
    static const char *const bad[] = {"optim.lr", "optimlr=1", ".lr=1", "optim.=1", "=1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err = new_err();
        CT_CHECK_INT(config_apply_override(cfg, bad[i], &err), CT_ERR_INVALID);
        CT_CHECK_STR_CONTAINS(err.message, "--set section.key=value");
    }
    config_free(cfg);
}

/* --unset and a kind section's alias (issue 33): an unset key is gone from lookups, the key
 * list and printing, and may be set again; an alias reads through to the plugin's section and
 * config_set writes a key it lacks there. */
CT_TEST(config_unset_and_alias_read_through) {
    host_config *cfg = config_new();
    ct_error err = new_err();
    CT_CHECK(config_load_string(cfg, "u.ini", "[comm]\nplugin = threads\nworld_size = 2\n"
                                "[comm.threads]\nalgo = tree\n", &err) == CT_OK);
    int32_t found = 0;
    CT_CHECK(config_apply_unset(cfg, "comm.threads.algo", &found, &err) == CT_OK);
    CT_CHECK_INT(found, 1);
    CT_CHECK(!config_get(cfg, "comm.threads", "algo"));
    CT_CHECK_INT(config_key_count(cfg, "comm.threads"), 0);
    CT_CHECK(config_apply_unset(cfg, "comm.threads.algo", &found, &err) == CT_OK);
    CT_CHECK_INT(found, 0);
    CT_CHECK_INT(config_apply_unset(cfg, "comm", &found, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "expected the form --unset section.key");
    CT_CHECK(config_apply_override(cfg, "comm.threads.algo=ring", &err) == CT_OK);
    CT_CHECK(!strcmp(config_get(cfg, "comm.threads", "algo"), "ring"));
    CT_CHECK(config_alias(cfg, "comm", "comm.threads") == CT_OK);
    CT_CHECK(!strcmp(config_alias_target(cfg, "comm"), "comm.threads"));
    CT_CHECK(!strcmp(config_get(cfg, "comm", "algo"), "ring"));
    CT_CHECK(!strcmp(config_origin(cfg, "comm", "algo"), "--set"));
    CT_CHECK(!strcmp(config_get(cfg, "comm", "world_size"), "2")); /* its own first */
    CT_CHECK(config_set(cfg, "comm", "channels", "4", "t", &err) == CT_OK);
    CT_CHECK(!strcmp(config_get(cfg, "comm.threads", "channels"), "4"));
    CT_CHECK(config_set(cfg, "comm", "world_size", "3", "t", &err) == CT_OK);
    CT_CHECK(!config_get(cfg, "comm.threads", "world_size"));
    int64_t v = 0;
    CT_CHECK(config_get_int(cfg, "comm", "channels", &v, &err) == CT_OK && v == 4);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    CT_CHECK(m != NULL);
    if (m) {
        config_print(cfg, m);
        fclose(m);
        CT_CHECK(!strstr(text, "tree"));
        CT_CHECK_STR_CONTAINS(text, "[comm.threads]\nalgo = ring");
        free(text);
    }
    CT_CHECK(config_alias(cfg, "comm", NULL) == CT_OK);
    CT_CHECK(!config_get(cfg, "comm", "algo"));
    config_free(cfg);
}

static const char *const sched_choices[] = {"cosine", "linear", "constant", NULL};
static const ct_param_spec test_specs[] = {
    CT_PARAM_BOOL("limit_all_gathers", "true", "cap gathers in flight"),
    CT_PARAM_INT("steps", "100", 1, 1e9, "optimizer steps"),
    CT_PARAM_FLOAT("lr", "6e-4", 0, 1, "learning rate"),
    CT_PARAM_STRING("train", NULL, "training shards"),
    CT_PARAM_ENUM("schedule", "cosine", sched_choices, "lr schedule"),
    CT_PARAM_INT("anything", "-5", 1, 0, "no range"),
    CT_PARAM_END,
};

static int32_t validate_text(const char *text, ct_error *err, host_config **out) {
    host_config *cfg = config_new();
    *err = new_err();
    int32_t rc = config_load_string(cfg, "ini/run.ini", text, err);
    if (rc == CT_OK) {
        static const char *const skip[] = {"plugin", NULL};
        rc = config_validate_section(cfg, "strategy", test_specs, sizeof(ct_param_spec),
                                     "plugin test", skip, err);
    }
    if (out) *out = cfg;
    else config_free(cfg);
    return rc;
}

CT_TEST(config_validate_fills_defaults_and_accepts_good_values) {
    host_config *cfg;
    ct_error err;
    int32_t rc = validate_text("[strategy]\nplugin = x\ntrain = a.bin\nsteps = 1e6\n"
                               "limit_all_gathers = off\nschedule = linear\nlr = 1e-3\n",
                               &err, &cfg);
    CT_CHECK_MSG(rc == CT_OK, "%s", err.message);
    CT_CHECK(!strcmp(config_get(cfg, "strategy", "anything"), "-5"));
    CT_CHECK(!strcmp(config_origin(cfg, "strategy", "anything"), "default"));
    int64_t steps = 0;
    CT_CHECK(config_get_int(cfg, "strategy", "steps", &steps, &err) == CT_OK);
    CT_CHECK_INT(steps, 1000000);
    int32_t b = 1;
    CT_CHECK(config_get_bool(cfg, "strategy", "limit_all_gathers", &b, &err) == CT_OK);
    CT_CHECK_INT(b, 0);
    double lr = 0;
    CT_CHECK(config_get_float(cfg, "strategy", "lr", &lr, &err) == CT_OK);
    CT_CHECK_CLOSE(lr, 1e-3, 0, 0);
    const char *s = NULL;
    CT_CHECK(config_get_string(cfg, "strategy", "schedule", &s, &err) == CT_OK);
    CT_CHECK(s && !strcmp(s, "linear"));
    err = new_err();
    CT_CHECK_INT(config_get_int(cfg, "strategy", "nope", &steps, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "'nope'");
    CT_CHECK_INT(config_get_int(cfg, "strategy", "schedule", &steps, &err), CT_ERR_INVALID);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print(cfg, f);
    fclose(f);
    CT_CHECK_STR_CONTAINS(buf, "[strategy]\n");
    CT_CHECK_STR_CONTAINS(buf, "plugin = x");
    CT_CHECK_STR_CONTAINS(buf, "; ini/run.ini:2\n");
    CT_CHECK_STR_CONTAINS(buf, "anything = -5");
    CT_CHECK_STR_CONTAINS(buf, "; default\n");
    /* printed text parses back to the same values */
    host_config *again = config_new();
    CT_CHECK_MSG(config_load_string(again, "p.ini", buf, &err) == CT_OK, "%s", err.message);
    CT_CHECK(!strcmp(config_get(again, "strategy", "lr"), "1e-3"));
    CT_CHECK_INT(config_key_count(again, "strategy"), config_key_count(cfg, "strategy"));
    config_free(again);
    free(buf);
    config_free(cfg);
}

CT_TEST(config_validate_errors_name_line_key_and_fix) {
    ct_error err;
    CT_CHECK_INT(validate_text("[strategy]\ntrain = a\n\nlimit_allgathers = true\n", &err, NULL),
                 CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "ini/run.ini:4: [strategy] unknown key 'limit_allgathers' "
                                       "(did you mean 'limit_all_gathers'?)");
    CT_CHECK_INT(validate_text("[strategy]\ntrain = a\nzzzzzz = 1\n", &err, NULL),
                 CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "valid keys: limit_all_gathers, steps");
    CT_CHECK_INT(validate_text("[strategy]\ntrain = a\nsteps = ten\n", &err, NULL),
                 CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "ini/run.ini:3: [strategy] steps = 'ten' is not an integer");
    CT_CHECK_INT(validate_text("[strategy]\ntrain = a\nsteps = 2.5\n", &err, NULL),
                 CT_ERR_INVALID);
    CT_CHECK_INT(validate_text("[strategy]\ntrain = a\nsteps = 0\n", &err, NULL), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "ini/run.ini:3: [strategy] steps = 0 is out of range "
                                       "1..1000000000");
    CT_CHECK_INT(validate_text("[strategy]\ntrain = a\nlr = nan\n", &err, NULL), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "not a finite number");
    CT_CHECK_INT(validate_text("[strategy]\ntrain = a\nlr = 1.5\n", &err, NULL), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "out of range 0..1");
    CT_CHECK_INT(validate_text("[strategy]\ntrain = a\nlimit_all_gathers = maybe\n", &err, NULL),
                 CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "is not a bool");
    CT_CHECK_INT(validate_text("[strategy]\ntrain = a\nschedule = cosin\n", &err, NULL),
                 CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "schedule = 'cosin' is not one of: cosine, linear, "
                                       "constant (did you mean 'cosine'?)");
    CT_CHECK_INT(validate_text("[strategy]\nsteps = 3\n", &err, NULL), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "ini/run.ini: [strategy] missing required key 'train'");
    /* a --set value is named by its origin */
    host_config *cfg = config_new();
    err = new_err();
    CT_CHECK(config_load_string(cfg, "r.ini", "[strategy]\ntrain = a\n", &err) == CT_OK);
    CT_CHECK(config_apply_override(cfg, "strategy.steps=-1", &err) == CT_OK);
    CT_CHECK_INT(config_validate_section(cfg, "strategy", test_specs, sizeof(ct_param_spec),
                                         "plugin test", NULL, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "--set: [strategy] steps = -1 is out of range");
    config_free(cfg);
}

/* A plugin built against a later minor version has a larger ct_param_spec: the stride walks it. */
CT_TEST(config_validate_walks_specs_with_a_larger_stride) {
    typedef struct { ct_param_spec s; double extra[3]; } wide_spec;
    wide_spec specs[3];
    memset(specs, 0xAB, sizeof specs);
    specs[0].s = (ct_param_spec)CT_PARAM_INT("a", "1", 0, 10, "a");
    specs[1].s = (ct_param_spec)CT_PARAM_FLOAT("b", "2.5", 0, 10, "b");
    specs[2].s = (ct_param_spec)CT_PARAM_END;
    host_config *cfg = config_new();
    ct_error err = new_err();
    CT_CHECK(config_load_string(cfg, "w.ini", "[x]\na = 7\n", &err) == CT_OK);
    CT_CHECK_MSG(config_validate_section(cfg, "x", &specs[0].s, sizeof(wide_spec), "plugin w",
                                         NULL, &err) == CT_OK, "%s", err.message);
    CT_CHECK(!strcmp(config_get(cfg, "x", "b"), "2.5"));
    config_free(cfg);
}

CT_TEST(config_edit_distance_matches_levenshtein) {
    CT_CHECK_INT(config_edit_distance("kitten", "sitting"), 3);
    CT_CHECK_INT(config_edit_distance("flaw", "lawn"), 2);
    CT_CHECK_INT(config_edit_distance("", "abc"), 3);
    CT_CHECK_INT(config_edit_distance("abc", ""), 3);
    CT_CHECK_INT(config_edit_distance("same", "same"), 0);
    CT_CHECK_INT(config_edit_distance("limit_allgathers", "limit_all_gathers"), 1);
    static const char *const cands[] = {"lr", "min_lr", "warmup", "weight_decay", NULL};
    CT_CHECK(!strcmp(config_nearest("weight_decy", cands, 4), "weight_decay"));
    CT_CHECK(config_nearest("qqqqqqqq", cands, 4) == NULL);
}

/* The work of one configuration of n keys: load (n keys: half in one section, half in sections
 * of 8), n/4 overrides of present keys, n/4 of new ones, and a read of every key. Returns the
 * lookup probes it took. */
static uint64_t probes_for_keys(int32_t n) {
    size_t cap = (size_t)n * 48 + 64;
    char *text = malloc(cap);
    size_t used = 0;
    used += (size_t)snprintf(text + used, cap - used, "[big]\n");
    for (int32_t i = 0; i < n / 2; i++)
        used += (size_t)snprintf(text + used, cap - used, "key_%d = %d\n", i, i);
    for (int32_t i = 0; i < n - n / 2; i++) {
        if (i % 8 == 0) used += (size_t)snprintf(text + used, cap - used, "[s%d]\n", i / 8);
        used += (size_t)snprintf(text + used, cap - used, "k%d = %d\n", i % 8, i);
    }
    host_config *cfg = config_new();
    ct_error err = new_err();
    int32_t rc = config_load_string(cfg, "n.ini", text, &err);
    free(text);
    char set[96], key[32];
    for (int32_t i = 0; rc == CT_OK && i < n / 4; i++) {
        snprintf(set, sizeof set, "big.key_%d=%d", i, -i); /* replaces */
        rc = config_apply_override(cfg, set, &err);
        snprintf(set, sizeof set, "new.key_%d=%d", i, i); /* adds */
        if (rc == CT_OK) rc = config_apply_override(cfg, set, &err);
    }
    int32_t found = 0;
    for (int32_t i = 0; rc == CT_OK && i < n / 2; i++) {
        snprintf(key, sizeof key, "key_%d", i);
        found += config_get(cfg, "big", key) != NULL;
    }
    for (int32_t s = 0; rc == CT_OK && s < config_section_count(cfg); s++) {
        const char *sec = config_section_name(cfg, s);
        for (int32_t i = 0; i < config_key_count(cfg, sec); i++)
            found += config_get(cfg, sec, config_key_name(cfg, sec, i)) != NULL;
    }
    uint64_t probes = config_lookup_probes(cfg);
    config_free(cfg);
    if (rc != CT_OK) {
        fprintf(stderr, "    load of %d keys failed: %s\n", (int)n, err.message);
        return UINT64_MAX;
    }
    /* every key read: n/2 by name, n + n/4 through the section lists */
    if (found != n / 2 + n + n / 4) return UINT64_MAX;
    return probes;
}

/* Issue 9: 50,000 keys took over 20 s (a linear search per key). Four times the keys must take
 * about four times the lookups (< 8x; quadratic work is 16x), counted, not timed. */
CT_TEST(config_lookups_grow_linearly_with_keys) {
    uint64_t small = probes_for_keys(20000), large = probes_for_keys(80000);
    CT_CHECK_MSG(small != UINT64_MAX && large != UINT64_MAX, "a load failed (see above)");
    double ratio = (double)large / (double)small;
    fprintf(stderr, "    lookup probes: %llu for 20000 keys, %llu for 80000 (ratio %.2f)\n",
            (unsigned long long)small, (unsigned long long)large, ratio);
    CT_CHECK_MSG(ratio < 8.0, "probes grew %.2fx for 4x the keys; expected < 8x (linear ~4x)",
                 ratio);
    /* and per key it stays a handful: a hash index at most half full */
    CT_CHECK_MSG((double)large / 80000.0 < 16.0, "%.1f probes per key; expected < 16",
                 (double)large / 80000.0);
}

CT_TEST(exclusive_range_ends_refuse_the_end_itself_and_say_so) {
    static const ct_param_spec specs[] = {
        CT_PARAM_FLOAT_X("beta", "0.5", 0, 1, CT_PARAM_MAX_EXCLUSIVE, "[0, 1)"),
        CT_PARAM_FLOAT_X("eps", "1e-8", 0, 1, CT_PARAM_MIN_EXCLUSIVE, "(0, 1]"),
        CT_PARAM_FLOAT("plain", "1", 0, 1, "[0, 1]"),
        CT_PARAM_END,
    };
    static const struct {
        const char *text, *want; /* want NULL: accepted */
    } cases[] = {
        {"beta = 0\n", NULL},
        {"beta = 0.999999\n", NULL},
        {"beta = 1\n", "x.ini:2: [s] beta = 1 is out of range [0, 1)"},
        {"eps = 1\n", NULL},
        {"eps = 0\n", "x.ini:2: [s] eps = 0 is out of range (0, 1]"},
        {"plain = 1\n", NULL},
        {"plain = 0\n", NULL},
        {"plain = 1.5\n", "x.ini:2: [s] plain = 1.5 is out of range 0..1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[128];
        snprintf(text, sizeof text, "[s]\n%s", cases[i].text);
        host_config *cfg = config_new();
        ct_error err = {.struct_size = sizeof err};
        CT_CHECK(config_load_string(cfg, "x.ini", text, &err) == CT_OK);
        int32_t rc = config_validate_section(cfg, "s", specs, sizeof(ct_param_spec), "test",
                                             NULL, &err);
        if (!cases[i].want) CT_CHECK_MSG(rc == CT_OK, "%s: %s", cases[i].text, err.message);
        else CT_CHECK_STR_CONTAINS(err.message, cases[i].want);
        config_free(cfg);
    }
}
