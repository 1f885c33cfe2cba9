# model gpt: every matrix product through OpenBLAS; element-wise loops on OpenMP threads.
model_gpt_CFLAGS := $(BLAS_CFLAGS) -fopenmp
model_gpt_LIBS   := $(BLAS_LIBS) -fopenmp
