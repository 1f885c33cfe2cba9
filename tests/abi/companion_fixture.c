/* companion_fixture.c — the two halves of a plugin/companion pair for the companion-version
 * tests (tests/unit/test_companion.c compiles them with cc into a temporary folder; the Makefile
 * never builds them). Compiled with -DFX_PLUGIN it is the plugin side: fx_try_load() opens
 * cuda/fx_cuda.so beside itself as a CUDA plugin would, expecting interface FX_WANT_VERSION
 * and a shared structure of FX_WANT_SIZE bytes. Without it, it is the companion: fx_cuda_run
 * returns 42, and it reports FX_HAVE_VERSION / FX_HAVE_SIZE unless FX_NO_INFO (a build from
 * before companions were versioned). Not for: anything but those tests.
 */
#include <ctrain/companion.h>

#ifdef FX_PLUGIN
/* CT_OK and *value = the companion's fx_cuda_run(), or the loader's error in err. */
CT_EXPORT int32_t fx_try_load(int32_t *value, ct_error *err) {
    static const char *const names[] = {"fx_cuda_run"};
    static const ct_companion_info want = {sizeof(ct_companion_info), FX_WANT_VERSION,
                                           FX_WANT_SIZE};
    void *fn[1];
    int32_t rc = ct_companion_load("loss fx", "fx_cuda.so", &want, names, fn, 1, err);
    if (rc == CT_OK) *value = ((int32_t (*)(void))fn[0])();
    return rc;
}
#else
CT_EXPORT int32_t fx_cuda_run(void) { return 42; }
#ifndef FX_NO_INFO
CT_COMPANION_INFO(FX_HAVE_VERSION, FX_HAVE_SIZE)
#endif
#endif
