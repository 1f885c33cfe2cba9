# model gpt: every matrix product through OpenBLAS; element-wise loops on OpenMP threads.
# With nvcc (CUDA=1) gpt_cuda.cu (cuBLAS + kernels) becomes the companion
# plugins/cuda/model_gpt_cuda.so (with flash_attention.cu and mlp_lt.cu), linked with cuBLAS and
# cuBLASLt here and the CUDA runtime by the Makefile;
# model_gpt.so itself links no CUDA library and opens the companion (dlopen) only when the
# model is created on a CUDA device. --fmad=false: numerics.h gives the CPU's steps.
# oneDNN (Debian's libdnnl-dev) when a test program compiles and links against it (ONEDNN=0
# builds without): bf16 products through its matmul primitive (onednn.c, [model] bf16_matmul);
# without it onednn.c builds empty and every product runs through OpenBLAS.
ONEDNN ?= 1
GPT_ONEDNN := $(if $(filter 1,$(ONEDNN)),$(shell echo 'int main(void) { return dnnl_version() == 0; }' | \
    $(CC) -x c -include oneapi/dnnl/dnnl.h - -o /dev/null -ldnnl >/dev/null 2>&1 && echo 1),)
model_gpt_CFLAGS    := $(BLAS_CFLAGS) -fopenmp $(if $(GPT_ONEDNN),-DGPT_HAVE_ONEDNN,)
model_gpt_LIBS      := $(BLAS_LIBS) -fopenmp $(if $(GPT_ONEDNN),-ldnnl,)
model_gpt_CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcublas -lcublasLt
model_gpt_NVCCFLAGS := --fmad=false
# Installing or removing oneDNN (or ONEDNN=0/1) changes the flags above: a stamp per mode
# rebuilds the plugin's objects when it changes.
GPT_ONEDNN_STAMP := $(BUILD)/.onednn-$(if $(GPT_ONEDNN),on,off)
$(GPT_ONEDNN_STAMP):
	@mkdir -p $(@D)
	@rm -f $(BUILD)/.onednn-on $(BUILD)/.onednn-off
	@touch $@
$(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard plugins/model/gpt/*.c)): $(GPT_ONEDNN_STAMP)
