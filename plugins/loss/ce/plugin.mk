# loss ce: with nvcc (HAVE_NVCC, CUDA=1) ce_cuda.cu becomes the companion
# plugins/cuda/loss_ce_cuda.so, linked with libcudart through an rpath to the toolkit;
# loss_ce.so itself links no CUDA library and opens the companion (dlopen) on the first batch
# that lives on a CUDA device. Recursive (=) assignments: HAVE_NVCC is set after this file is
# read. --fmad=false: numerics.h gives the CPU's steps.
loss_ce_CFLAGS    = -fopenmp $(if $(HAVE_NVCC),-DCT_HAVE_CUDA,)
loss_ce_NVCCFLAGS = --fmad=false
loss_ce_LIBS      = -fopenmp $(if $(HAVE_NVCC),-ldl,)
loss_ce_CUDA_LIBS = -L$(CUDA_HOME)/lib64 -Xlinker -rpath -Xlinker $(CUDA_HOME)/lib64 -lcudart
