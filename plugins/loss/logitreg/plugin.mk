# loss logitreg: with nvcc (HAVE_NVCC, CUDA=1) logitreg_cuda.cu becomes the companion
# plugins/cuda/loss_logitreg_cuda.so, linked with libcudart through an rpath to the toolkit;
# loss_logitreg.so itself links no CUDA library and opens the companion (dlopen) on the first batch
# that lives on a CUDA device. Recursive (=) assignments: HAVE_NVCC is set after this file is
# read. --fmad=false: numerics.h gives the CPU's steps.
loss_logitreg_CFLAGS    = -fopenmp $(if $(HAVE_NVCC),-DCT_HAVE_CUDA,)
loss_logitreg_NVCCFLAGS = --fmad=false
loss_logitreg_LIBS      = -fopenmp $(if $(HAVE_NVCC),-ldl,)
loss_logitreg_CUDA_LIBS = -L$(CUDA_HOME)/lib64 -Xlinker -rpath -Xlinker $(CUDA_HOME)/lib64 -lcudart
