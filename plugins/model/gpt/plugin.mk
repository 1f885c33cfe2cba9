# model gpt: every matrix product through OpenBLAS; element-wise loops on OpenMP threads.
# With nvcc (HAVE_NVCC, CUDA=1) gpt_cuda.cu (cuBLAS + kernels) becomes the companion
# plugins/cuda/model_gpt_cuda.so, linked with libcudart and libcublas through an rpath to the
# toolkit; model_gpt.so itself links no CUDA library and opens the companion (dlopen) only when
# the model is created on a CUDA device. Recursive (=): HAVE_NVCC is set after this file is
# read. --fmad=false: numerics.h gives the CPU's steps.
model_gpt_CFLAGS    = $(BLAS_CFLAGS) -fopenmp $(if $(HAVE_NVCC),-DCT_HAVE_CUDA,)
model_gpt_LIBS      = $(BLAS_LIBS) -fopenmp $(if $(HAVE_NVCC),-ldl,)
model_gpt_CUDA_LIBS = -L$(CUDA_HOME)/lib64 -Xlinker -rpath -Xlinker $(CUDA_HOME)/lib64 -lcublas -lcudart
model_gpt_NVCCFLAGS = --fmad=false
