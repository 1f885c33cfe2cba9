# model gpt: every matrix product through OpenBLAS; element-wise loops on OpenMP threads.
# With nvcc (HAVE_NVCC, CUDA=1) the plugin also carries gpt_cuda.cu (cuBLAS + kernels) and runs
# on device cuda; libcudart and libcublas are linked as shared libraries through an rpath to
# the toolkit and are touched only when the model is created on a CUDA device. Recursive (=):
# HAVE_NVCC is set after this file is read. --fmad=false: numerics.h gives the CPU's steps.
model_gpt_CFLAGS    = $(BLAS_CFLAGS) -fopenmp $(if $(HAVE_NVCC),-DCT_HAVE_CUDA,)
model_gpt_LIBS      = $(BLAS_LIBS) -fopenmp $(if $(HAVE_NVCC),-L$(CUDA_HOME)/lib64 -Xlinker -rpath -Xlinker $(CUDA_HOME)/lib64 -lcublas -lcudart,)
model_gpt_NVCCFLAGS = --fmad=false
