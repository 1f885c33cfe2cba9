# loss logitreg: with nvcc (HAVE_NVCC, CUDA=1) the plugin also carries logitreg_cuda.cu and runs batches
# on device cuda; the CUDA runtime is linked as a shared library through an rpath to the
# toolkit and is touched only when a batch lives on a CUDA device. Recursive (=) assignments:
# HAVE_NVCC is set after this file is read. --fmad=false: numerics.h gives the CPU's steps.
loss_logitreg_CFLAGS    = $(if $(HAVE_NVCC),-DCT_HAVE_CUDA,)
loss_logitreg_NVCCFLAGS = --fmad=false
loss_logitreg_LIBS      = $(if $(HAVE_NVCC),-L$(CUDA_HOME)/lib64 -Xlinker -rpath -Xlinker $(CUDA_HOME)/lib64 -lcudart,)
