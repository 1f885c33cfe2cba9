# device cpu: element-wise loops run on OpenMP threads ([device] threads), vectorized
# (-fno-math-errno: sqrtf becomes one instruction; the bits are the same); peak_flops measures
# the same OpenBLAS the gpt model links (libopenblas.so.0: one copy per process).
device_cpu_CFLAGS := $(BLAS_CFLAGS) -fopenmp -fno-math-errno
device_cpu_LIBS   := $(BLAS_LIBS) -fopenmp
