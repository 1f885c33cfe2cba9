/* blas_core.h — choosing OpenBLAS's kernel before any plugin loads it. A DYNAMIC_ARCH OpenBLAS
 * picks its kernel from cpuid once, when the library loads, and falls back to a generic one
 * (Debian 12's 0.3.21 picks "Prescott", SSE3) on CPUs it does not know, such as current Xeons
 * with AVX-512: matrix products then run several times slower. Not for: measuring the BLAS
 * (plugins/device/cpu/peak_cpu.c) or reporting it (mfu.c's first log line).
 */
#ifndef CTRAIN_HOST_BLAS_CORE_H
#define CTRAIN_HOST_BLAS_CORE_H

/* For the commands that run matrix products: when the CPU has AVX-512 (the Skylake-X set) or
 * AVX2 + FMA, OPENBLAS_CORETYPE is not set by the user, and OpenBLAS, loaded here to ask it,
 * chose a kernel below what the CPU can run, set OPENBLAS_CORETYPE (SkylakeX or Haswell) and
 * re-execute this program once (CTRAIN_BLAS_REEXEC, holding OpenBLAS's own choice, marks the
 * second start and is reported in training's first log line) so OpenBLAS loads anew with it. Returns only when nothing is to be done or the
 * re-execution failed (a warning then). A user's OPENBLAS_CORETYPE is always respected. */
void blas_core_choose(char **argv);

#endif /* CTRAIN_HOST_BLAS_CORE_H */
