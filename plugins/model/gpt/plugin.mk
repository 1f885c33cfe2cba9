# model gpt: every matrix product through OpenBLAS; element-wise loops on OpenMP threads.
# With nvcc (CUDA=1) gpt_cuda.cu (cuBLAS + kernels) becomes the companion
# plugins/cuda/model_gpt_cuda.so (with flash_attention.cu and mlp_lt.cu), linked with cuBLAS and
# cuBLASLt here and the CUDA runtime by the Makefile;
# model_gpt.so itself links no CUDA library and opens the companion (dlopen) only when the
# model is created on a CUDA device. --fmad=false: numerics.h gives the CPU's steps.
model_gpt_CFLAGS    := $(BLAS_CFLAGS) -fopenmp
model_gpt_LIBS      := $(BLAS_LIBS) -fopenmp
model_gpt_CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcublas -lcublasLt
model_gpt_NVCCFLAGS := --fmad=false
