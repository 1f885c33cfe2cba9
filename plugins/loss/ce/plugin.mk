# loss ce: per-row loops on OpenMP threads. With nvcc (CUDA=1) ce_cuda.cu becomes the companion
# plugins/cuda/loss_ce_cuda.so (the Makefile links it with the CUDA runtime and gives the .c
# side -DCT_HAVE_CUDA and -ldl); loss_ce.so itself links no CUDA library. --fmad=false:
# numerics.h gives the CPU's steps.
loss_ce_CFLAGS    := -fopenmp
loss_ce_NVCCFLAGS := --fmad=false
loss_ce_LIBS      := -fopenmp
