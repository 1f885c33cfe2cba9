# comm nccl: built only when nvcc is found (CUDA=1). NCCL comes from the CUDA toolkit by
# default; point NCCL_INC / NCCL_LIB elsewhere (e.g. the pip package nvidia-nccl-cu13) when it
# lives apart. OpenMPI (pkg-config ompi-c) carries the ncclUniqueId under mpirun.
comm_nccl_CUDA_ONLY := 1
NCCL_INC ?= $(CUDA_HOME)/include
NCCL_LIB ?= $(CUDA_HOME)/lib64
comm_nccl_CFLAGS := -I$(NCCL_INC) -I$(CUDA_HOME)/include $(shell pkg-config --cflags ompi-c 2>/dev/null)
comm_nccl_LIBS   := -L$(NCCL_LIB) -Wl,-rpath,$(NCCL_LIB) -l:libnccl.so.2 \
                    -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart \
                    $(shell pkg-config --libs ompi-c 2>/dev/null)
