/* test_mixture.c — claims about host/data/mixture.c's reading of [data] train: which values are a
 * mixture and which stay paths (a path may hold ':' and ','), weights normalised by their sum,
 * and the errors that name the key. The draw, resume and metrics are claimed through the binary
 * (tests/cli/test_mixture.sh).
 * Not for: the single-dataset loader (test_data.c).
 */
#include "ct_test.h"
#include "data/mixture.h"

#include <string.h>

static ct_error new_err(void) {
    ct_error e = {.struct_size = sizeof(ct_error)};
    return e;
}

CT_TEST(mixture_spec_shape_is_names_and_weights_anything_else_a_path) {
    CT_CHECK(mixture_is_spec("web:0.7, books:0.3"));
    CT_CHECK(mixture_is_spec("web:1"));
    CT_CHECK(mixture_is_spec(" web : 7 ,books_2:3,code-x:1e-3 "));
    CT_CHECK(mixture_is_spec("web:0")); /* a spec with a bad weight: an error, not a path */
    CT_CHECK(!mixture_is_spec("data/web"));
    CT_CHECK(!mixture_is_spec("data/x:1.bin"));   /* '/' is never in a name */
    CT_CHECK(!mixture_is_spec("./web:0.7"));
    CT_CHECK(!mixture_is_spec("web.bin:1"));      /* '.' is never in a name */
    CT_CHECK(!mixture_is_spec("web:1,"));
    CT_CHECK(!mixture_is_spec("web:1:2"));
    CT_CHECK(!mixture_is_spec("web:"));
    CT_CHECK(!mixture_is_spec(":1"));
    CT_CHECK(!mixture_is_spec("shards_[ab]:1"));
    CT_CHECK(!mixture_is_spec(""));
    CT_CHECK(!mixture_is_spec(NULL));
}

CT_TEST(mixture_weights_are_normalised_and_paths_come_from_sections) {
    host_config *cfg = config_new();
    ct_error err = new_err();
    CT_CHECK(config_load_string(cfg, "m.ini",
                                "[data]\ntrain = web:7, books:2, code:1\n"
                                "[data.web]\npath = a,b:c/x\n[data.books]\npath = b\n"
                                "[data.code]\npath = c\n", &err) == CT_OK);
    mix_spec s;
    CT_CHECK_MSG(mixture_parse(cfg, &s, &err) == CT_OK, "%s", err.message);
    CT_CHECK_INT(s.n, 3);
    CT_CHECK(!strcmp(s.c[0].name, "web") && !strcmp(s.c[0].path, "a,b:c/x"));
    CT_CHECK_CLOSE(s.c[0].share, 0.7, 1e-15, 0);
    CT_CHECK_CLOSE(s.c[1].share, 0.2, 1e-15, 0);
    CT_CHECK_CLOSE(s.c[2].share, 0.1, 1e-15, 0);
    CT_CHECK(!strcmp(mixture_train_path(cfg), "a,b:c/x"));
    CT_CHECK_INT(mixture_section_listed(cfg, "data.books"), 1);
    CT_CHECK_INT(mixture_section_listed(cfg, "data.news"), 0);
    CT_CHECK_INT(mixture_section_listed(cfg, "loss.zloss"), -1);
    config_free(cfg);
}

CT_TEST(mixture_errors_name_the_key_and_the_value) {
    static const struct { const char *ini, *needle; } bad[] = {
        {"[data]\ntrain = web:0\n[data.web]\npath = a\n", "m.ini:2: [data] train: the weight of web is 0"},
        {"[data]\ntrain = web:-2\n[data.web]\npath = a\n", "the weight of web is -2"},
        {"[data]\ntrain = web:nan\n[data.web]\npath = a\n", "the weight of web is nan"},
        {"[data]\ntrain = web:1e400\n[data.web]\npath = a\n", "the weight of web is 1e400"},
        {"[data]\ntrain = web:x\n[data.web]\npath = a\n", "the weight of web is x"},
        {"[data]\ntrain = web:1, news:1\n[data.web]\npath = a\n", "no [data.news] section"},
        {"[data]\ntrain = web:1, web:1\n[data.web]\npath = a\n", "[data] train names web twice"},
        {"[data]\ntrain = web:1\n[data.web]\nother = a\n", "[data.web] has no path"},
        {"[data]\ntrain = web:1e308, b:1e308\n[data.web]\npath = a\n[data.b]\npath = b\n",
         "the weights' sum is not finite"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        host_config *cfg = config_new();
        ct_error err = new_err();
        CT_CHECK(config_load_string(cfg, "m.ini", bad[i].ini, &err) == CT_OK);
        mix_spec s;
        CT_CHECK_MSG(mixture_parse(cfg, &s, &err) == CT_ERR_INVALID, "case %zu parsed", i);
        CT_CHECK_STR_CONTAINS(err.message, bad[i].needle);
        config_free(cfg);
    }
    host_config *cfg = config_new();
    ct_error err = new_err();
    CT_CHECK(config_load_string(cfg, "m.ini", "[data]\ntrain = d\nval = web:1\n", &err) == CT_OK);
    CT_CHECK(mixture_validate(cfg, &err) == CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "[data] val = web:1 reads as a mixture");
    config_free(cfg);
}
