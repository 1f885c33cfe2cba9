# loss logitreg: per-row loops on OpenMP threads. With nvcc (CUDA=1) logitreg_cuda.cu becomes the companion
# plugins/cuda/loss_logitreg_cuda.so (the Makefile links it with the CUDA runtime and gives the .c
# side -DCT_HAVE_CUDA and -ldl); loss_logitreg.so itself links no CUDA library. --fmad=false:
# numerics.h gives the CPU's steps.
loss_logitreg_CFLAGS    := -fopenmp
loss_logitreg_NVCCFLAGS := --fmad=false
loss_logitreg_LIBS      := -fopenmp
