/* test_companion.c — the CUDA companions (plugins/cuda/<id>_cuda.so): model_gpt.so and the
 * loss plugins link no CUDA library (so they load on a machine without one), and a plugin whose
 * companion is missing still runs on the cpu but fails on a CUDA device with one sentence naming
 * the companion and the fix. Not for: CUDA numerics (tests/gpu/, on a GPU machine).
 */
#include "ct_test.h"
#include "harness.h"

#include <dlfcn.h>
#include <elf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The DT_NEEDED entries of an ELF64 shared object, space-separated into out ("" on error). */
static void needed_libs(const char *path, char *out, size_t size) {
    out[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) goto out_free;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)buf;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64) goto out_free;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(buf + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNAMIC) continue;
        const char *strtab = (const char *)buf + sh[sh[i].sh_link].sh_offset;
        const Elf64_Dyn *d = (const Elf64_Dyn *)(buf + sh[i].sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof *d && d[k].d_tag != DT_NULL; k++)
            if (d[k].d_tag == DT_NEEDED) {
                size_t used = strlen(out);
                snprintf(out + used, size - used, "%s ", strtab + d[k].d_un.d_val);
            }
    }
out_free:
    free(buf);
    fclose(f);
}

/* Copy build/plugins/<so> alone into a fresh folder (no cuda/ beside it); its new path. */
static const char *copy_alone(const char *so, char *path, size_t size) {
    snprintf(path, size, "%s/%s", ct_test_tmpdir(), so);
    char cmd[2 * 1100];
    snprintf(cmd, sizeof cmd, "cp '%s/%s' '%s'", ct_test_plugin_dir(), so, path);
    if (system(cmd) != 0) {
        ct_test_fail(__FILE__, __LINE__, "cannot copy %s", so);
        return NULL;
    }
    return path;
}

static const ct_plugin_desc *load_copy(const char *path) {
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* never closed, as the host does */
    if (!dl) {
        ct_test_fail(__FILE__, __LINE__, "cannot load %s: %s", path, dlerror());
        return NULL;
    }
    ct_plugin_entry_fn entry = (ct_plugin_entry_fn)dlsym(dl, CT_ENTRY_SYMBOL);
    return entry ? entry() : NULL;
}

CT_TEST(model_gpt_and_the_losses_link_no_cuda_library) {
    static const char *const so[] = {"model_gpt.so", "loss_ce.so", "loss_zloss.so",
                                     "loss_logitreg.so"};
    for (int i = 0; i < 4; i++) {
        char path[1100], needed[2048];
        snprintf(path, sizeof path, "%s/%s", ct_test_plugin_dir(), so[i]);
        needed_libs(path, needed, sizeof needed);
        CT_CHECK_MSG(strstr(needed, "libc.so") != NULL, "%s: no DT_NEEDED read (%s)", so[i],
                     needed);
        CT_CHECK_MSG(!strstr(needed, "cuda") && !strstr(needed, "cublas"),
                     "%s needs a CUDA library: %s", so[i], needed);
        /* the reader sees CUDA where it is: in the companion, when nvcc built one */
        snprintf(path, sizeof path, "%s/cuda/%.*s_cuda.so", ct_test_plugin_dir(),
                 (int)(strlen(so[i]) - 3), so[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fclose(f);
        needed_libs(path, needed, sizeof needed);
        CT_CHECK_MSG(strstr(needed, "libcudart") != NULL, "%s: %s", path, needed);
    }
}

CT_TEST(gpt_on_cuda_without_its_companion_fails_with_one_sentence_naming_it) {
    ct_harness *h = harness_new("[model]\nn_layer = 1\nn_head = 2\nd_model = 8\n"
                                "vocab_size = 16\nseq_len = 4\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    /* the installed plugin on the cpu: validates [model] (defaults) for the copy below */
    if (harness_create(h, "model_gpt.so", "model", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create on cpu: %s", err.message);
        goto out;
    }
    char path[1100];
    const ct_plugin_desc *d = copy_alone("model_gpt.so", path, sizeof path) ? load_copy(path)
                                                                            : NULL;
    if (!d) goto out;
    const ct_model_vtable *vt = d->vtable;
    ct_create_args a = harness_args(h, "model");
    void *m = vt->create(&a, &err); /* cpu: the companion is never needed */
    CT_CHECK_MSG(m != NULL, "create on cpu without the companion: %s", err.message);
    if (m) vt->destroy(m);
    a.device.type = CT_DEVICE_CUDA;
    err = (ct_error){.struct_size = sizeof err};
    m = vt->create(&a, &err);
    CT_CHECK(m == NULL);
    if (m) vt->destroy(m);
    CT_CHECK_INT(err.code, CT_ERR_UNSUPPORTED);
    if (d->devices & CT_DEVICE_CUDA) { /* built with nvcc: it looked for the companion */
        CT_CHECK_STR_CONTAINS(err.message, "model gpt: cannot load its CUDA companion ");
        CT_CHECK_STR_CONTAINS(err.message, "/cuda/model_gpt_cuda.so: ");
        CT_CHECK_STR_CONTAINS(err.message, "---> this build's CUDA support is missing or the "
                              "CUDA libraries are not installed; use [device] type = cpu");
    } else {
        CT_CHECK_STR_CONTAINS(err.message, "has no CUDA code ---> rebuild with nvcc");
    }
    CT_CHECK(strchr(err.message, '\n') == NULL);
out:
    harness_free(h);
}

CT_TEST(gpt_on_cuda_opens_its_companion_when_built) {
    char comp[1100];
    snprintf(comp, sizeof comp, "%s/cuda/model_gpt_cuda.so", ct_test_plugin_dir());
    FILE *f = fopen(comp, "rb");
    if (!f) {
        printf("note: no %s (no nvcc): nothing to check\n", comp);
        return;
    }
    fclose(f);
    ct_harness *h = harness_new("[model]\nn_layer = 1\nn_head = 2\nd_model = 8\n"
                                "vocab_size = 16\nseq_len = 4\n");
    if (!h) return;
    ct_harness_plugin p;
    ct_error err = {.struct_size = sizeof err};
    if (harness_create(h, "model_gpt.so", "model", &p, &err) != CT_OK) {
        CT_CHECK_MSG(0, "create on cpu: %s", err.message);
        goto out;
    }
    const ct_model_vtable *vt = p.desc->vtable;
    ct_create_args a = harness_args(h, "model");
    a.device.type = CT_DEVICE_CUDA; /* no GPU needed: create only resolves the entry points */
    void *m = vt->create(&a, &err);
    CT_CHECK_MSG(m != NULL, "create on cuda with the companion present: %s", err.message);
    if (m) vt->destroy(m); /* nothing was allocated on a device: free is a no-op */
out:
    harness_free(h);
}

CT_TEST(loss_without_its_companion_runs_on_cpu_and_names_it_on_cuda) {
    static const char *const so[] = {"loss_ce.so", "loss_zloss.so", "loss_logitreg.so"};
    static const char *const sec[] = {"loss.ce", "loss.zloss", "loss.logitreg"};
    static const char *const who[] = {"loss ce: ", "loss zloss: ", "loss logitreg: "};
    /* one row, V = 2, target 0: ce = lse - z0; zloss = coef lse^2; logitreg = coef mean z^2 */
    const float z[2] = {1.0f, -0.5f};
    const double lse = log(exp(1.0) + exp(-0.5));
    const double want[3] = {lse - 1.0, 1e-4 * lse * lse, 1e-4 * (1.0 + 0.25) / 2.0};
    const float row_max = 1.0f, row_lse = (float)lse;
    const int32_t target = 0;
    ct_harness *h = harness_new("[loss.zloss]\ncoef = 1e-4\n[loss.logitreg]\ncoef = 1e-4\n");
    if (!h) return;
    for (int t = 0; t < 3; t++) {
        ct_harness_plugin p;
        ct_error err = {.struct_size = sizeof err};
        if (harness_create(h, so[t], sec[t], &p, &err) != CT_OK) { /* validates [sec] */
            CT_CHECK_MSG(0, "%s: %s", so[t], err.message);
            continue;
        }
        char path[1100];
        const ct_plugin_desc *d = copy_alone(so[t], path, sizeof path) ? load_copy(path) : NULL;
        if (!d) continue;
        const ct_loss_vtable *vt = d->vtable;
        ct_create_args a = harness_args(h, sec[t]);
        void *self = vt->create(&a, &err);
        if (!self) {
            CT_CHECK_MSG(0, "%s create: %s", so[t], err.message);
            continue;
        }
        ct_loss_batch b = {.struct_size = sizeof b, .logits = z, .targets = &target,
                           .row_max = &row_max, .row_lse = &row_lse, .n_rows = 1, .vocab = 2,
                           .n_counted = 1, .grad_scale = 1.0, .device = a.device};
        ct_loss_result r = {.struct_size = sizeof r};
        CT_CHECK_INT(vt->forward_backward(self, &b, &r, &err), CT_OK);
        CT_CHECK_CLOSE(r.value, want[t], 1e-5, 0.0);
        b.device.type = CT_DEVICE_CUDA;
        err = (ct_error){.struct_size = sizeof err};
        CT_CHECK_INT(vt->forward_backward(self, &b, &r, &err), CT_ERR_UNSUPPORTED);
        CT_CHECK_STR_CONTAINS(err.message, who[t]);
        if (d->devices & CT_DEVICE_CUDA) {
            char want_file[64];
            snprintf(want_file, sizeof want_file, "/cuda/%.*s_cuda.so: ",
                     (int)(strlen(so[t]) - 3), so[t]);
            CT_CHECK_STR_CONTAINS(err.message, want_file);
            CT_CHECK_STR_CONTAINS(err.message, "---> this build's CUDA support is missing");
        } else {
            CT_CHECK_STR_CONTAINS(err.message, "runs on cpu only ---> rebuild with nvcc");
        }
        CT_CHECK(strchr(err.message, '\n') == NULL);
        vt->destroy(self);
    }
    harness_free(h);
}

/* Build the fixture pair in a fresh folder: the plugin side expecting interface 3 and a 96-byte
 * shared structure, the companion side built with `companion_flags`; the plugin's fx_try_load. */
typedef int32_t (*fx_try_load_fn)(int32_t *value, ct_error *err);
static fx_try_load_fn build_pair(const char *tag, const char *companion_flags) {
    char dir[1100], cmd[4096];
    snprintf(dir, sizeof dir, "%s/%s", ct_test_tmpdir(), tag);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/cuda' && "
             "cc -std=c11 -D_GNU_SOURCE -shared -fPIC -fvisibility=hidden -Isdk/include "
             "-DFX_PLUGIN -DFX_WANT_VERSION=3 -DFX_WANT_SIZE=96 tests/abi/companion_fixture.c "
             "-o '%s/fx.so' -ldl && "
             "cc -std=c11 -D_GNU_SOURCE -shared -fPIC -fvisibility=hidden -Isdk/include %s "
             "tests/abi/companion_fixture.c -o '%s/cuda/fx_cuda.so'",
             dir, dir, companion_flags, dir);
    if (system(cmd) != 0) {
        ct_test_fail(__FILE__, __LINE__, "could not build the fixture pair: %s", cmd);
        return NULL;
    }
    char so[1200];
    snprintf(so, sizeof so, "%s/fx.so", dir);
    void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        ct_test_fail(__FILE__, __LINE__, "cannot load %s: %s", so, dlerror());
        return NULL;
    }
    return (fx_try_load_fn)dlsym(dl, "fx_try_load");
}

CT_TEST(companion_with_the_expected_version_and_size_is_used) {
    fx_try_load_fn try_load = build_pair("match", "-DFX_HAVE_VERSION=3 -DFX_HAVE_SIZE=96");
    if (!try_load) return;
    ct_error err = {.struct_size = sizeof err};
    int32_t value = 0;
    CT_CHECK_INT(try_load(&value, &err), CT_OK);
    CT_CHECK_INT(value, 42);
}

CT_TEST(stale_companion_is_refused_naming_both_versions_and_sizes) {
    static const char *const flags[] = {"-DFX_HAVE_VERSION=2 -DFX_HAVE_SIZE=96",
                                        "-DFX_HAVE_VERSION=3 -DFX_HAVE_SIZE=88"};
    static const char *const want[] = {"implements interface 2 with a 96-byte",
                                       "implements interface 3 with a 88-byte"};
    for (int i = 0; i < 2; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "stale%d", i);
        fx_try_load_fn try_load = build_pair(tag, flags[i]);
        if (!try_load) continue;
        ct_error err = {.struct_size = sizeof err};
        int32_t value = 0;
        CT_CHECK_INT(try_load(&value, &err), CT_ERR_UNSUPPORTED);
        CT_CHECK_INT(value, 0); /* never called */
        CT_CHECK_STR_CONTAINS(err.message, "loss fx: its CUDA companion ");
        CT_CHECK_STR_CONTAINS(err.message, "/cuda/fx_cuda.so");
        CT_CHECK_STR_CONTAINS(err.message, want[i]);
        CT_CHECK_STR_CONTAINS(err.message, "needs interface 3 with 96 bytes");
        CT_CHECK_STR_CONTAINS(err.message, "---> rebuild both");
    }
}

CT_TEST(companion_that_reports_no_version_is_refused) {
    fx_try_load_fn try_load = build_pair("noinfo", "-DFX_NO_INFO");
    if (!try_load) return;
    ct_error err = {.struct_size = sizeof err};
    int32_t value = 0;
    CT_CHECK_INT(try_load(&value, &err), CT_ERR_UNSUPPORTED);
    CT_CHECK_INT(value, 0);
    CT_CHECK_STR_CONTAINS(err.message, "does not report its interface version");
}
