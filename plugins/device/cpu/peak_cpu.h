/* peak_cpu.h — the cpu device's measured matrix-product peak (peak_cpu.c), for device_cpu.c's
 * peak_flops member. Not for: anything outside this plugin (hidden visibility). */
#ifndef CTRAIN_DEVICE_CPU_PEAK_H
#define CTRAIN_DEVICE_CPU_PEAK_H

#include <ctrain/ctrain.h>

/* Fill p (a zeroed ct_peak of this header's size) with the best rate of `threads` concurrent
 * single-threaded cblas_sgemm products (FLOP/s, all threads together), how it was measured,
 * which BLAS that is and a warning when that BLAS cannot use the CPU's vector width. Takes
 * about 0.05 s (0.15 s with a reference BLAS). Sets OpenBLAS to one thread of its own, as the
 * gpt model does. CT_ERR_NOMEM when the buffers (threads x 768 KiB) cannot be allocated. */
int32_t cpu_peak_measure(int threads, ct_peak *p, ct_error *err);

#endif /* CTRAIN_DEVICE_CPU_PEAK_H */
