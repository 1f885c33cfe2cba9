# device cuda: built only when nvcc is found (CUDA=1). The CUDA runtime is linked as a shared
# library found through an rpath to the toolkit ($(CUDA_HOME)/lib64), or LD_LIBRARY_PATH.
# --fmad=false: no fused multiply-adds, so the per-element math of numerics.h (casts, axpy,
# AdamW) gives the cpu device's bits exactly.
device_cuda_CUDA_ONLY := 1
device_cuda_NVCCFLAGS := --fmad=false
device_cuda_LIBS      := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart
