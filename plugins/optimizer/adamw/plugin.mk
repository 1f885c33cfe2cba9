# optimizer adamw: its loop runs on OpenMP threads ([device] threads), vectorized
# (-fno-math-errno: sqrtf becomes one instruction; the bits are the same as the cpu device's).
optimizer_adamw_CFLAGS := -fopenmp -fno-math-errno
optimizer_adamw_LIBS   := -fopenmp
