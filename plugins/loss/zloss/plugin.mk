# loss zloss: with nvcc (HAVE_NVCC, CUDA=1) zloss_cuda.cu becomes the companion
# plugins/cuda/loss_zloss_cuda.so, linked with libcudart through an rpath to the toolkit;
# loss_zloss.so itself links no CUDA library and opens the companion (dlopen) on the first batch
# that lives on a CUDA device. Recursive (=) assignments: HAVE_NVCC is set after this file is
# read. --fmad=false: numerics.h gives the CPU's steps.
loss_zloss_CFLAGS    = -fopenmp $(if $(HAVE_NVCC),-DCT_HAVE_CUDA,)
loss_zloss_NVCCFLAGS = --fmad=false
loss_zloss_LIBS      = -fopenmp $(if $(HAVE_NVCC),-ldl,)
loss_zloss_CUDA_LIBS = -L$(CUDA_HOME)/lib64 -Xlinker -rpath -Xlinker $(CUDA_HOME)/lib64 -lcudart
