# device cpu: element-wise loops run on OpenMP threads ([device] threads).
device_cpu_CFLAGS := -fopenmp
device_cpu_LIBS   := -fopenmp
