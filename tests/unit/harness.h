/* harness.h — a rank-0, world-1 host for unit tests: configuration from INI text, parsed and
 * validated by the real host code (config.c, hostapi.c), and real plugin .so files of the build's
 * plugin folder loaded by the host's own registry (registry.c, with its load-time checks). Not for: multi-rank tests (they build their own
 * ct_create_args per rank with harness_args_rank). */
#ifndef CT_TEST_HARNESS_H
#define CT_TEST_HARNESS_H

#include <ctrain/ctrain.h>

typedef struct ct_harness ct_harness;

typedef struct ct_harness_plugin {
    const ct_plugin_desc *desc;
    const void           *vt;   /* the kind's vtable: cast to ct_loss_vtable etc. */
    void                 *self; /* the instance; destroyed by harness_free */
} ct_harness_plugin;

/* Configuration from INI text. Fails the current test and returns NULL on a parse error. */
ct_harness *harness_new(const char *ini_text);
/* Destroys every instance created through the harness (in reverse order), then the harness. */
void harness_free(ct_harness *h);

/* build/plugins/<so_file> (named <kind>_<name>.so) loaded through the host's registry, so
 * the load-time checks apply; NULL (and a test failure) when it is missing or refused. */
const ct_plugin_desc *harness_load(const char *so_file);

/* Load so_file, validate [section] against its schema (filling defaults) and create an instance.
 * A device_cpu.so instance is created first on demand and passed as args.device, and a
 * comm_local.so instance as args.comm (for kinds other than device and comm).
 * Returns CT_OK or the error of validation/create (err filled). */
int32_t harness_create(ct_harness *h, const char *so_file, const char *section,
                       ct_harness_plugin *out, ct_error *err);

/* Validate [section] against so_file's schema (defaults filled), creating nothing: for tests
 * that create one instance per rank themselves. CT_OK or the validation's error. */
int32_t harness_validate(ct_harness *h, const char *so_file, const char *section,
                         ct_error *err);

/* The harness's cpu device (created on first use; .vt NULL when device_cpu.so is missing). */
ct_device_ref harness_device(ct_harness *h);

/* Arguments as harness_create passes them, for calling create() yourself. */
ct_create_args harness_args(ct_harness *h, const char *section);

/* The same for rank `rank` of `world` (comm left unset: the test provides its own). */
ct_create_args harness_args_rank(ct_harness *h, const char *section, int32_t rank,
                                 int32_t world);

/* The metric `name` as the plugins created through the harness reported it (the first host
 * that has it): its folded value (MEAN: divided by the count) and in *count the reports folded
 * in; NAN and 0 when none reported it. */
double harness_metric(ct_harness *h, const char *name, int64_t *count);

#endif /* CT_TEST_HARNESS_H */
