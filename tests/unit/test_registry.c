/* test_registry.c — claims about host/plugin/registry.c and host/plugin/wiring.c: ABI acceptance rules,
 * zero-extended copies of vtables and schemas, shadowing, problems reported with the reason,
 * name/path/kind resolution, and wiring a configuration onto plugins.
 * Fixture plugins are compiled from tests/abi/fixture_plugin.c with cc into a temporary folder
 * (tests run from the repository root). Not for: INI parsing (test_config.c).
 */
#include "ct_test.h"
#include "config/config.h"
#include "data/data.h"
#include "plugin/registry.h"
#include "plugin/wiring.h"
#include "run/init_ckpt.h"
#include "run/session.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static ct_error new_err(void) {
    ct_error e = {.struct_size = sizeof(ct_error)};
    return e;
}

/* cc the fixture with `flags` into dir/file; 1 on success. */
static int build_fixture(const char *dir, const char *file, const char *flags) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cc -std=c11 -shared -fPIC -fvisibility=hidden -Wl,-z,defs "
             "-Isdk/include %s tests/abi/fixture_plugin.c -o '%s/%s' 2>&1", flags, dir, file);
    int rc = system(cmd);
    if (rc != 0) ct_test_fail(__FILE__, __LINE__, "could not compile fixture: %s", cmd);
    return rc == 0;
}

static int find_problem(const host_registry *reg, const char *path_suffix, const char *needle) {
    for (int32_t i = 0; i < registry_problem_count(reg); i++) {
        const char *p = registry_problem_path(reg, i);
        size_t lp = strlen(p), ls = strlen(path_suffix);
        if (lp >= ls && !strcmp(p + lp - ls, path_suffix) &&
            strstr(registry_problem_message(reg, i), needle))
            return 1;
    }
    return 0;
}

CT_TEST(registry_accepts_same_major_older_minor_and_refuses_newer_or_other_major) {
    const char *a = ct_test_tmpdir();
    char dir[512];
    snprintf(dir, sizeof dir, "%s", a);
    if (!build_fixture(dir, "loss_fx.so", "")) return;
    char flags[128];
    snprintf(flags, sizeof flags, "-DFX_NAME=fx_newer -DFX_MINOR=%d", CT_ABI_MINOR + 1);
    if (!build_fixture(dir, "loss_fx_newer.so", flags)) return;
    if (!build_fixture(dir, "loss_fx_major2.so", "-DFX_NAME=fx_major2 -DFX_MAJOR=2 -DFX_MINOR=0")) return;
    if (!build_fixture(dir, "loss_noentry.so", "-DFX_NO_ENTRY")) return;
    if (CT_ABI_MINOR > 0) {
        snprintf(flags, sizeof flags, "-DFX_NAME=fx_older -DFX_MINOR=%d", CT_ABI_MINOR - 1);
        if (!build_fixture(dir, "loss_fx_older.so", flags)) return;
    }
    const char *dirs[] = {dir, NULL};
    ct_error err = new_err();
    host_registry *reg = registry_open_dirs(dirs, &err);
    CT_CHECK_MSG(reg != NULL, "%s", err.message);
    if (!reg) return;
    CT_CHECK_INT(registry_count(reg), 0); /* nothing loaded before a scan or a lookup */
    CT_CHECK_INT(registry_scan(reg, &err), CT_OK);
    CT_CHECK_INT(registry_count(reg), CT_ABI_MINOR > 0 ? 2 : 1);
    CT_CHECK_INT(registry_problem_count(reg), 3);
    char want[160];
    snprintf(want, sizeof want, "was built for ctrain ABI %d.%d; this ctrain speaks %d.%d",
             CT_ABI_MAJOR, CT_ABI_MINOR + 1, CT_ABI_MAJOR, CT_ABI_MINOR);
    CT_CHECK(find_problem(reg, "/loss_fx_newer.so", want));
    snprintf(want, sizeof want, "was built for ctrain ABI 2.0; this ctrain speaks %d.%d",
             CT_ABI_MAJOR, CT_ABI_MINOR);
    CT_CHECK(find_problem(reg, "/loss_fx_major2.so", want));
    CT_CHECK(find_problem(reg, "/loss_noentry.so", "has no symbol ctrain_plugin_v1"));
    /* asking for a refused file by path repeats its reason */
    char path[600];
    snprintf(path, sizeof path, "%s/loss_fx_newer.so", dir);
    err = new_err();
    CT_CHECK(registry_resolve(reg, CT_KIND_LOSS, path, &err) == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "loss_fx_newer.so was built for ctrain ABI");
    /* and by the name its file would have */
    err = new_err();
    CT_CHECK(registry_resolve(reg, CT_KIND_LOSS, "noentry", &err) == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "has no symbol ctrain_plugin_v1");
    registry_close(reg);
}

CT_TEST(registry_zero_extends_short_vtables_and_walks_wide_param_specs) {
    const char *dir = ct_test_tmpdir();
    if (!build_fixture(dir, "model_short_vt.so",
                       "-DFX_NAME=short_vt -DFX_KIND=CT_KIND_MODEL -DFX_SHORT_VTABLE"))
        return;
    if (!build_fixture(dir, "loss_short_vt.so", "-DFX_NAME=short_vt -DFX_SHORT_VTABLE")) return;
    if (!build_fixture(dir, "wide.so", "-DFX_NAME=wide -DFX_WIDE_PARAMS")) return;
    const char *dirs[] = {dir, NULL};
    ct_error err = new_err();
    host_registry *reg = registry_open_dirs(dirs, &err);
    CT_CHECK_MSG(reg != NULL, "%s", err.message);
    if (!reg) return;
    /* a model vtable that ends before its last member, hidden_rows (OPTIONAL, since 1.4):
     * loads, the member reads NULL */
    const host_plugin *s = registry_resolve(reg, CT_KIND_MODEL, "short_vt", &err);
    CT_CHECK_MSG(s != NULL, "%s", err.message);
    if (s) {
        const ct_model_vtable *vt = s->vtable;
        CT_CHECK(vt->create != NULL);
        CT_CHECK(vt->backward != NULL);
        CT_CHECK(vt->decode != NULL);
        CT_CHECK(vt->hidden_rows == NULL); /* beyond the plugin's struct_size */
        CT_CHECK_INT(vt->struct_size, offsetof(ct_model_vtable, hidden_rows));
    }
    /* a loss vtable that ends before forward_backward (REQUIRED): refused, naming it */
    err = new_err();
    CT_CHECK(registry_resolve(reg, CT_KIND_LOSS, "short_vt", &err) == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "loss short_vt (");
    CT_CHECK_STR_CONTAINS(err.message, "loss_short_vt.so): vtable ends (struct_size");
    CT_CHECK_STR_CONTAINS(err.message, "before forward_backward (required)");
    err = new_err();
    const host_plugin *w = registry_resolve(reg, CT_KIND_LOSS, "wide", &err);
    CT_CHECK_MSG(w != NULL, "%s", err.message);
    if (w) {
        CT_CHECK_INT(w->n_params, 3);
        CT_CHECK(!strcmp(w->params[0].key, "coef"));
        CT_CHECK_CLOSE(w->params[0].max, 2.0, 0, 0);
        CT_CHECK(!strcmp(w->params[1].key, "mode"));
        CT_CHECK(!strcmp(w->params[1].choices[1], "slow"));
        CT_CHECK(!strcmp(w->params[2].key, "count"));
        CT_CHECK_CLOSE(w->params[2].min, 1.0, 0, 0);
        CT_CHECK(w->params[3].key == NULL);
        CT_CHECK_INT(w->desc.param_struct_size, sizeof(ct_param_spec) + 3 * sizeof(double));
        /* the converted schema validates a section */
        host_config *cfg = config_new();
        CT_CHECK(config_load_string(cfg, "w.ini", "[loss.wide]\nmode = slow\n", &err) == CT_OK);
        CT_CHECK_MSG(config_validate_section(cfg, "loss.wide", w->params, sizeof(ct_param_spec),
                                             "loss plugin wide", NULL, &err) == CT_OK,
                     "%s", err.message);
        CT_CHECK(!strcmp(config_get(cfg, "loss.wide", "count"), "3"));
        config_free(cfg);
    }
    registry_close(reg);
}

CT_TEST(registry_first_folder_wins_and_later_same_name_is_shadowed) {
    char d1[512], d2[512];
    snprintf(d1, sizeof d1, "%s", ct_test_tmpdir());
    snprintf(d2, sizeof d2, "%s", ct_test_tmpdir());
    if (!build_fixture(d1, "loss_fx.so", "")) return;
    if (!build_fixture(d2, "other_name.so", "")) return; /* same kind+name: fx */
    if (!build_fixture(d2, "model_fx.so", "-DFX_KIND=CT_KIND_MODEL")) return;
    const char *dirs[] = {d1, d2, "/nonexistent/folder", NULL};
    ct_error err = new_err();
    host_registry *reg = registry_open_dirs(dirs, &err);
    CT_CHECK_MSG(reg != NULL, "%s", err.message);
    if (!reg) return;
    CT_CHECK_INT(registry_scan(reg, &err), CT_OK);
    CT_CHECK_INT(registry_count(reg), 2);
    CT_CHECK_INT(registry_shadowed_count(reg), 1);
    CT_CHECK_INT(registry_dir_count(reg), 3);
    const host_plugin *p = registry_resolve(reg, CT_KIND_LOSS, "fx", &err);
    CT_CHECK(p && strstr(p->path, d1) == p->path);
    CT_CHECK_STR_CONTAINS(registry_shadowed_at(reg, 0)->path, "other_name.so");
    /* kinds are kept apart: the model fx is a different plugin */
    const host_plugin *m = registry_resolve(reg, CT_KIND_MODEL, "fx", &err);
    CT_CHECK(m && m != p && m->desc.kind == CT_KIND_MODEL);
    /* sorted by kind: model before loss */
    CT_CHECK_INT(registry_at(reg, 0)->desc.kind, CT_KIND_MODEL);
    /* asking by path for the shadowed file gives that file */
    char path[600];
    snprintf(path, sizeof path, "%s/other_name.so", d2);
    const host_plugin *q = registry_resolve(reg, CT_KIND_LOSS, path, &err);
    CT_CHECK(q && strstr(q->path, "other_name.so"));
    registry_close(reg);
}

CT_TEST(registry_resolve_errors_list_available_and_name_wrong_kind) {
    const char *dir = ct_test_tmpdir();
    if (!build_fixture(dir, "loss_fx.so", "")) return;
    if (!build_fixture(dir, "loss_fy.so", "-DFX_NAME=fy")) return;
    const char *dirs[] = {dir, NULL};
    ct_error err = new_err();
    host_registry *reg = registry_open_dirs(dirs, &err);
    if (!reg) return;
    err = new_err();
    CT_CHECK(registry_resolve(reg, CT_KIND_LOSS, "fz", &err) == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "unknown loss plugin 'fz' ---> available loss plugins: fx, fy");
    err = new_err();
    CT_CHECK(registry_resolve(reg, CT_KIND_MODEL, "fx", &err) == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "'fx' is a loss plugin; [model] needs a model plugin");
    err = new_err();
    CT_CHECK(registry_resolve(reg, CT_KIND_LOSS, "/nonexistent/loss_q.so", &err) == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "/nonexistent/loss_q.so");
    /* a bare file name is found in the search folders */
    const host_plugin *p = registry_resolve(reg, CT_KIND_LOSS, "loss_fy.so", &err);
    CT_CHECK(p && !strcmp(p->desc.name, "fy"));
    CT_CHECK(!strcmp(kind_name(CT_KIND_PRECISION), "precision"));
    CT_CHECK_INT(kind_from_name("comm"), CT_KIND_COMM);
    CT_CHECK_INT(kind_from_name("nope"), 0);
    registry_close(reg);
}

CT_TEST(registry_reports_dlerror_of_a_plugin_whose_library_is_gone) {
    const char *dir = ct_test_tmpdir();
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && printf 'int fx_dep_value(void){return 41;}\\n' > dep.c && "
             "cc -shared -fPIC dep.c -o libfxdep.so", dir);
    CT_CHECK_INT(system(cmd), 0);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/plugins", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", sub);
    CT_CHECK_INT(system(cmd), 0);
    /* -l must follow the source: build by hand */
    snprintf(cmd, sizeof cmd, "cc -std=c11 -shared -fPIC -fvisibility=hidden -Wl,-z,defs "
             "-Isdk/include -DFX_MISSING_DEP tests/abi/fixture_plugin.c -o '%s/loss_fx.so' "
             "-L'%s' -Wl,-rpath,'%s' -lfxdep", sub, dir, dir);
    CT_CHECK_INT(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/libfxdep.so", dir);
    CT_CHECK_INT(unlink(cmd), 0);
    const char *dirs[] = {sub, NULL};
    ct_error err = new_err();
    host_registry *reg = registry_open_dirs(dirs, &err);
    if (!reg) return;
    CT_CHECK_INT(registry_scan(reg, &err), CT_OK);
    CT_CHECK_INT(registry_count(reg), 0);
    CT_CHECK(find_problem(reg, "/loss_fx.so", "libfxdep.so: cannot open shared object file"));
    err = new_err();
    CT_CHECK(registry_resolve(reg, CT_KIND_LOSS, "fx", &err) == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "libfxdep.so");
    registry_close(reg);
}

static int has_warning(const host_registry *reg, const char *needle) {
    for (int32_t i = 0; i < registry_warning_count(reg); i++)
        if (strstr(registry_warning_at(reg, i), needle)) return 1;
    return 0;
}

/* A plugin whose constructor raises SIGSEGV next to a good one: a lookup by name loads only the
 * conventional file it needs; a scan probes each file in a child and reports the crash with the
 * file and the signal, and this process lives on. */
CT_TEST(registry_loads_only_what_is_asked_and_probes_a_crashing_plugin_in_a_child) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    if (!build_fixture(dir, "loss_fx.so", "")) return;
    if (!build_fixture(dir, "loss_boom.so", "-DFX_NAME=boom -DFX_CRASH_IN_CONSTRUCTOR")) return;
    const char *dirs[] = {dir, NULL};
    ct_error err = new_err();
    host_registry *reg = registry_open_dirs(dirs, &err);
    CT_CHECK_MSG(reg != NULL, "%s", err.message);
    if (!reg) return;
    const host_plugin *p = registry_resolve(reg, CT_KIND_LOSS, "fx", &err);
    CT_CHECK_MSG(p != NULL, "%s", err.message);
    CT_CHECK_INT(registry_count(reg), 1);        /* loss_fx.so only */
    CT_CHECK_INT(registry_problem_count(reg), 0); /* loss_boom.so was never opened */
    CT_CHECK_INT(registry_scan(reg, &err), CT_OK);
    CT_CHECK_INT(registry_count(reg), 1);
    CT_CHECK_INT(registry_problem_count(reg), 1);
    char want[700];
    snprintf(want, sizeof want, "%s/loss_boom.so: crashed while loading (SIGSEGV in its "
             "constructor or descriptor) ---> remove it from the search path", dir);
    CT_CHECK(find_problem(reg, "/loss_boom.so", want));
    /* asked for by name afterwards: the probe's reason, no second load */
    err = new_err();
    CT_CHECK(registry_resolve(reg, CT_KIND_LOSS, "boom", &err) == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "loss plugin 'boom': ");
    CT_CHECK_STR_CONTAINS(err.message, "crashed while loading (SIGSEGV");
    registry_close(reg);
}

/* validate/train see the same warnings as `plugins`: a world-writable folder or file of the
 * search path, and a conventional file hidden by an earlier folder's (or a path's). */
CT_TEST(registry_warns_about_world_writable_folders_and_shadowed_conventional_files) {
    char d1[512], d2[512];
    snprintf(d1, sizeof d1, "%s", ct_test_tmpdir());
    snprintf(d2, sizeof d2, "%s", ct_test_tmpdir());
    if (!build_fixture(d1, "loss_fx.so", "")) return;
    if (!build_fixture(d2, "loss_fx.so", "")) return;
    CT_CHECK_INT(chmod(d2, 0777), 0);
    const char *dirs[] = {d1, d2, NULL};
    ct_error err = new_err();
    host_registry *reg = registry_open_dirs(dirs, &err);
    if (!reg) return;
    char want[1400];
    snprintf(want, sizeof want, "plugin folder %s is world-writable", d2);
    CT_CHECK(has_warning(reg, want));
    CT_CHECK_INT(registry_warning_count(reg), 1);
    const host_plugin *p = registry_resolve(reg, CT_KIND_LOSS, "fx", &err);
    CT_CHECK_MSG(p && strstr(p->path, d1) == p->path, "%s", p ? p->path : err.message);
    snprintf(want, sizeof want, "loss plugin 'fx': %s/loss_fx.so is used; %s/loss_fx.so, later "
             "on the search path, is hidden by it", d1, d2);
    CT_CHECK(has_warning(reg, want));
    CT_CHECK_INT(registry_count(reg), 1); /* the hidden file is not loaded to say so */
    registry_close(reg);
    /* a file named by path with the kind+name of a search-path plugin */
    char other[512], path[600];
    snprintf(other, sizeof other, "%s", ct_test_tmpdir());
    if (!build_fixture(other, "mine.so", "")) return;
    CT_CHECK_INT(chmod(d2, 0755), 0);
    snprintf(path, sizeof path, "%s/mine.so", other);
    CT_CHECK_INT(chmod(path, 0777), 0);
    reg = registry_open_dirs(dirs, &err);
    if (!reg) return;
    CT_CHECK_INT(registry_warning_count(reg), 0);
    p = registry_resolve(reg, CT_KIND_LOSS, path, &err);
    CT_CHECK_MSG(p != NULL, "%s", err.message);
    snprintf(want, sizeof want, "loss plugin 'fx': %s (named by path) takes the place of "
             "%s/loss_fx.so", path, d1);
    CT_CHECK(has_warning(reg, want));
    snprintf(want, sizeof want, "plugin file %s is world-writable", path);
    CT_CHECK(has_warning(reg, want));
    registry_close(reg);
}

/* A bare "x.so" is looked up in the search folders only, never in the current directory. */
CT_TEST(registry_does_not_load_a_bare_file_name_from_the_current_directory) {
    char dir[512], search[512], cwd[1024];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    snprintf(search, sizeof search, "%s", ct_test_tmpdir());
    if (!build_fixture(dir, "loss_here.so", "-DFX_NAME=here")) return;
    if (!getcwd(cwd, sizeof cwd)) return;
    const char *dirs[] = {search, NULL};
    ct_error err = new_err();
    host_registry *reg = registry_open_dirs(dirs, &err);
    if (!reg) return;
    CT_CHECK_INT(chdir(dir), 0);
    const host_plugin *p = registry_resolve(reg, CT_KIND_LOSS, "loss_here.so", &err);
    CT_CHECK_INT(chdir(cwd), 0);
    CT_CHECK_MSG(p == NULL, "loaded %s from the current directory", p ? p->path : "");
    CT_CHECK_STR_CONTAINS(err.message, "plugin file loss_here.so is in none of the 1 search "
                          "folders");
    CT_CHECK_STR_CONTAINS(err.message, "e.g. ./loss_here.so");
    registry_close(reg);
}

/* A folder with a fixture plugin of every kind (loss fx, model m, strategy s, precision p,
 * comm local and threads, device cpu), built once per run; NULL when cc failed. */
static const char *fixture_world(void) {
    static char dir[512];
    static int state; /* 0 not built, 1 built, -1 failed */
    if (state) return state > 0 ? dir : NULL;
    state = -1;
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    if (!build_fixture(dir, "loss_fx.so", "")) return NULL;
    if (!build_fixture(dir, "model_m.so", "-DFX_NAME=m -DFX_KIND=CT_KIND_MODEL")) return NULL;
    if (!build_fixture(dir, "strategy_s.so", "-DFX_NAME=s -DFX_KIND=CT_KIND_STRATEGY"))
        return NULL;
    if (!build_fixture(dir, "precision_p.so", "-DFX_NAME=p -DFX_KIND=CT_KIND_PRECISION"))
        return NULL;
    if (!build_fixture(dir, "comm_local.so", "-DFX_NAME=local -DFX_KIND=CT_KIND_COMM"))
        return NULL;
    if (!build_fixture(dir, "comm_threads.so", "-DFX_NAME=threads -DFX_KIND=CT_KIND_COMM"))
        return NULL;
    if (!build_fixture(dir, "device_cpu.so", "-DFX_NAME=cpu -DFX_KIND=CT_KIND_DEVICE"))
        return NULL;
    if (!build_fixture(dir, "optimizer_adamw.so", "-DFX_NAME=adamw -DFX_KIND=CT_KIND_OPTIMIZER"))
        return NULL;
    state = 1;
    return dir;
}

/* Wiring over the fixtures: every host section gets its defaults, a loss term its section. */
CT_TEST(wiring_resolves_plugins_fills_defaults_and_rejects_stray_sections) {
    const char *dir = fixture_world();
    if (!dir) return;
    const char *dirs[] = {dir, NULL};
    ct_error err = new_err();
    host_registry *reg = registry_open_dirs(dirs, &err);
    if (!reg) return;
    const char *base = "[run]\nname = t\n[data]\ntrain = a.bin\n[model]\nplugin = m\ncount = 4\n"
                       "[loss]\nplugins = fx\n[loss.fx]\nmode = slow\n[strategy]\nplugin = s\n"
                       "[precision]\nplugin = p\n[comm]\nworld_size = 3\n";
    host_config *cfg = config_new();
    CT_CHECK(config_load_string(cfg, "w.ini", base, &err) == CT_OK);
    host_wiring w;
    int32_t rc = wiring_resolve(cfg, reg, &w, &init_ckpt_source, &err);
    CT_CHECK_MSG(rc == CT_OK, "%s", err.message);
    if (rc == CT_OK) {
        CT_CHECK(!strcmp(w.model->desc.name, "m"));
        CT_CHECK(!strcmp(w.comm->desc.name, getenv("OMPI_COMM_WORLD_SIZE") ? "mpi" : "threads"));
        CT_CHECK(!strcmp(w.device->desc.name, "cpu"));
        CT_CHECK_INT(w.n_loss, 1);
        CT_CHECK(!strcmp(w.loss_section[0], "loss.fx"));
        CT_CHECK(!strcmp(config_get(cfg, "run", "out_dir"), "runs/t"));
        CT_CHECK(!strcmp(config_get(cfg, "run", "steps"), "100"));
        CT_CHECK(!strcmp(config_get(cfg, "optim", "schedule"), "cosine"));
        CT_CHECK(!strcmp(config_get(cfg, "model", "coef"), "0.5"));     /* plugin default */
        CT_CHECK(!strcmp(config_get(cfg, "model", "count"), "4"));
        CT_CHECK(!strcmp(config_get(cfg, "loss.fx", "count"), "3"));
        CT_CHECK(!strcmp(config_get(cfg, "device", "type"), "cpu"));
        CT_CHECK(!strcmp(config_origin(cfg, "device", "type"), "default"));
    }
    config_free(cfg);

    struct { const char *extra, *want; } bad[] = {
        {"[optm]\nlr = 1\n", "w.ini:18: unknown section [optm] (did you mean [optim]?)"},
        {"[device]\ntype = gpu\n", "w.ini:19: [device] type = gpu: unknown device plugin 'gpu'"},
        {"[run]\nsteps = 0\n", "[run] steps = 0 is out of range"},
        {"[optim]\nschedule = cos\n", "is not one of: cosine, linear, constant, wsd"},
        {"[comm]\nplugin = fx\n", "'fx' is a loss plugin; [comm] needs a comm plugin"},
        {"[loss.fx]\ncout = 1\n", "[loss.fx] unknown key 'cout' (did you mean 'count'?)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%s%s", base, bad[i].extra);
        /* a repeated section header adds keys to the section (line 18 onwards) */
        cfg = config_new();
        err = new_err();
        rc = config_load_string(cfg, "w.ini", text, &err);
        if (rc == CT_OK) rc = wiring_resolve(cfg, reg, &w, &init_ckpt_source, &err);
        CT_CHECK_MSG(rc != CT_OK, "case %zu passed but should fail", i);
        CT_CHECK_STR_CONTAINS(err.message, bad[i].want);
        config_free(cfg);
    }
    /* issue 33: a plugin's keys in [KIND.NAME]; flat ones moved there; sections of plugins not
     * selected inert; [KIND] reads through to the selected plugin's section */
    cfg = config_new();
    err = new_err();
    char text[2048];
    snprintf(text, sizeof text, "%s[precision]\ncount = 7\n[strategy.s]\nmode = slow\n"
             "[strategy.other]\nanything = 1\n[loss.zz]\ncoef = 1\n", base);
    CT_CHECK(config_load_string(cfg, "w.ini", text, &err) == CT_OK);
    rc = wiring_resolve(cfg, reg, &w, &init_ckpt_source, &err);
    CT_CHECK_MSG(rc == CT_OK, "%s", err.message);
    if (rc == CT_OK) {
        CT_CHECK(!strcmp(w.own_section[CT_KIND_PRECISION], "precision.p"));
        CT_CHECK(!config_get(cfg, "precision", "count") ||
                 !strcmp(config_get(cfg, "precision", "count"), "7")); /* through the alias */
        CT_CHECK(config_get(cfg, "precision.p", "count") &&
                 !strcmp(config_get(cfg, "precision.p", "count"), "7"));
        CT_CHECK(!strcmp(config_origin(cfg, "precision", "count"), "w.ini:19"));
        CT_CHECK_INT(config_key_count(cfg, "precision"), 1); /* plugin only: the host's key */
        CT_CHECK(!strcmp(config_get(cfg, "strategy", "mode"), "slow"));
        CT_CHECK(!strcmp(config_get(cfg, "strategy.s", "coef"), "0.5")); /* default, own section */
        CT_CHECK(!strcmp(config_get(cfg, "model", "coef"), "0.5")); /* the model's in [model] */
        CT_CHECK(!config_has_section(cfg, "model.m"));
        CT_CHECK_INT(w.n_inert, 2);
        if (w.n_inert == 2) {
            CT_CHECK(!strcmp(w.inert[0], "strategy.other"));
            CT_CHECK(!strcmp(w.inert[1], "loss.zz"));
            CT_CHECK_STR_CONTAINS(w.inert_why[0], "the strategy plugin is s");
            CT_CHECK_STR_CONTAINS(w.inert_why[1], "[loss] plugins = fx does not list zz");
        }
    }
    config_free(cfg);
    /* the same key flat and in the plugin's section of one file: which is meant is unclear */
    cfg = config_new();
    err = new_err();
    snprintf(text, sizeof text, "%s[precision]\ncount = 7\n[precision.p]\ncount = 8\n", base);
    CT_CHECK(config_load_string(cfg, "w.ini", text, &err) == CT_OK);
    CT_CHECK(wiring_resolve(cfg, reg, &w, &init_ckpt_source, &err) != CT_OK);
    CT_CHECK_STR_CONTAINS(err.message, "is given twice ---> keep the one in [precision.p]");
    config_free(cfg);
    /* missing [data] train */
    cfg = config_new();
    err = new_err();
    CT_CHECK(config_load_string(cfg, "w.ini", "[model]\nplugin = m\n[loss]\nplugins = fx\n"
                                "[strategy]\nplugin = s\n[precision]\nplugin = p\n", &err) == CT_OK);
    CT_CHECK(wiring_resolve(cfg, reg, &w, &init_ckpt_source, &err) != CT_OK);
    CT_CHECK_STR_CONTAINS(err.message, "[data] missing required key 'train'");
    config_free(cfg);
    registry_close(reg);
}

/* session_configure: the file, then --set in order (both spellings), other arguments
 * handed back in order. It ends with preflight_check (plugins created, data opened), so the
 * configuration names the in-tree plugins and a shard made here. */
CT_TEST(session_configure_reads_file_then_overrides_and_returns_other_flags) {
    const char *dir = ct_test_tmpdir();
    char ini[600], shard[600];
    snprintf(ini, sizeof ini, "%s/s.ini", dir);
    snprintf(shard, sizeof shard, "%s/a.bin", dir);
    uint16_t tokens[256];
    for (int i = 0; i < 256; i++) tokens[i] = (uint16_t)(i % 16);
    ct_error err = new_err();
    if (shard_write(shard, tokens, 256, &err) != CT_OK) {
        ct_test_fail(__FILE__, __LINE__, "cannot write %s: %s", shard, err.message);
        return;
    }
    FILE *f = fopen(ini, "w");
    if (!f) {
        ct_test_fail(__FILE__, __LINE__, "cannot write %s", ini);
        return;
    }
    fprintf(f, "[data]\ntrain = %s\nbatch_size = 2\nseq_len = 8\n[model]\nplugin = gpt\n"
            "n_layer = 1\nn_head = 2\nd_model = 8\nvocab_size = 16\nseq_len = 8\n[loss]\n"
            "plugins = ce\n[strategy]\nplugin = ddp\n[precision]\nplugin = fp32\n[comm]\n"
            "plugin = local\n[optim]\nlr = 1\n", shard);
    fclose(f);
    const char *old = getenv("CTRAIN_PLUGIN_PATH");
    char *saved = old ? strdup(old) : NULL;
    setenv("CTRAIN_PLUGIN_PATH", ct_test_plugin_dir(), 1);
    char *argv[] = {"train", "--set", "optim.lr=2", "--resume", ini, "--set=optim.lr=3",
                    "--set", "model.n_layer=2", "extra", NULL};
    int argc = 9;
    char *rest[10];
    int n_rest = -1;
    host_config *cfg = NULL;
    host_registry *reg = NULL;
    host_wiring w;
    int32_t rc = session_configure(argc, argv, &n_rest, rest, &cfg, &reg, &w, &err);
    CT_CHECK_MSG(rc == CT_OK, "%s", err.message);
    if (rc == CT_OK) {
        CT_CHECK(!strcmp(config_get(cfg, "optim", "lr"), "3")); /* the last --set wins */
        CT_CHECK(!strcmp(config_origin(cfg, "optim", "lr"), "--set"));
        CT_CHECK(!strcmp(config_get(cfg, "model", "n_layer"), "2"));
        CT_CHECK(!strcmp(config_path(cfg), ini));
        CT_CHECK_INT(n_rest, 2);
        CT_CHECK(n_rest == 2 && !strcmp(rest[0], "--resume") && !strcmp(rest[1], "extra"));
        CT_CHECK(!strcmp(w.model->desc.name, "gpt"));
        config_free(cfg);
        registry_close(reg);
    }
    /* a bad override fails the whole set-up and leaves nothing to free */
    char *bad[] = {"validate", ini, "--set", "optim.lr", NULL};
    err = new_err();
    CT_CHECK_INT(session_configure(4, bad, &n_rest, rest, &cfg, &reg, &w, &err), CT_ERR_INVALID);
    CT_CHECK(cfg == NULL && reg == NULL);
    CT_CHECK_STR_CONTAINS(err.message, "--set section.key=value");
    char *none[] = {"validate", "--set", "optim.lr=1", NULL};
    err = new_err();
    CT_CHECK_INT(session_configure(3, none, &n_rest, rest, &cfg, &reg, &w, &err), CT_ERR_INVALID);
    CT_CHECK_STR_CONTAINS(err.message, "no configuration file given");
    if (saved) setenv("CTRAIN_PLUGIN_PATH", saved, 1);
    else unsetenv("CTRAIN_PLUGIN_PATH");
    free(saved);
}
