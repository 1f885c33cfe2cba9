# loss zloss: per-row loops on OpenMP threads. With nvcc (CUDA=1) zloss_cuda.cu becomes the companion
# plugins/cuda/loss_zloss_cuda.so (the Makefile links it with the CUDA runtime and gives the .c
# side -DCT_HAVE_CUDA and -ldl); loss_zloss.so itself links no CUDA library. --fmad=false:
# numerics.h gives the CPU's steps.
loss_zloss_CFLAGS    := -fopenmp
loss_zloss_NVCCFLAGS := --fmad=false
loss_zloss_LIBS      := -fopenmp
