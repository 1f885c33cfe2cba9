# ctrain — build everything this machine can build, out of tree into build/.
#   make            host, plugins (CUDA ones and CUDA companions when nvcc is found), test runner
#   make test       install missing Debian packages, build, run every test
#   make test-interop  the transformers round trips (tests/cli/test_interop.sh), the checkpoint
#                   families (tests/cli/test_families.sh), the
#                   optimizers against PyTorch's (tests/cli/test_optimizers.sh), the loss
#                   scale against torch.amp.GradScaler (tests/cli/test_loss_scale.sh) and the
#                   tokenizer families against the tokenizers library
#                   (tests/cli/test_tokenizer_families.sh) in a
#                   project-local venv (.venv-interop: torch, transformers, ... from PyPI)
#   make run        train the tiny default model on real text (CPU); builds only what it runs
#                   (the host and the CPU plugins) on every core first. RUN_ARGS= go to `ctrain train`
#   make bench      throughput benchmarks (report, never gate)
#   make install PREFIX=/usr/local [DESTDIR=]
#   make asan | ubsan   the same tests under a sanitizer (build-asan/, build-ubsan/)
#   make fuzz       5000 seeded INI mutations through validate/train (FUZZ_N=, FUZZ_SEED=)
#   make check-abi  every plugin .so exports exactly one dynamic symbol: ctrain_plugin_v1
# Knobs: CUDA=0 (skip CUDA plugins), SANITIZER=address|undefined, BUILD=dir, V=1.

.DEFAULT_GOAL := all
PREFIX    ?= /usr/local
DESTDIR   ?=
SANITIZER ?=
BUILD     ?= build
CUDA      ?= 1
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= /usr/local/cuda

CC      ?= cc
CXX     ?= c++
# -O2 plus GCC's loop vectorizer ("cheap": no alias-versioning checks): the element-wise
# loops outside the hand-vectorized kernels (bf16 casts, the threads engine's reductions, the
# model's weight conversions) run on SSE2 vectors. The same bits as -O2 (ISO C: no FMA
# contraction, no reassociation); 16% less CPU time in a 256-rank run (docs/benchmarks.md).
OPT     ?= -O2 -ftree-vectorize -fvect-cost-model=cheap
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter
CSTD    := -std=c11 -D_GNU_SOURCE
SANFLAGS := $(if $(SANITIZER),-fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=all,)
CFLAGS_COMMON := $(OPT) -g -fPIC $(WARN) $(SANFLAGS) -Isdk/include -MMD -MP
CFLAGS_HOST   := $(CSTD) $(CFLAGS_COMMON) -Ihost $(shell pkg-config --cflags inih 2>/dev/null)
CXXFLAGS_HOST := -std=c++17 $(OPT) -g -fPIC $(WARN) $(SANFLAGS) -Isdk/include -Ihost -MMD -MP
# Plugins: hidden visibility, no undefined symbols (they may not call into the host).
CFLAGS_PLUGIN := $(CSTD) $(CFLAGS_COMMON) -fvisibility=hidden
LDFLAGS_PLUGIN := -shared -Wl,-z,defs -Wl,--no-undefined $(SANFLAGS)
HOST_LIBS := $(shell pkg-config --libs inih zlib libpcre2-8 icu-uc 2>/dev/null) -lsentencepiece -lsentencepiece_train \
             -lstdc++ -ldl -lm -lpthread
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null)

ifneq ($(V),1)
Q := @
endif

# ---- host --------------------------------------------------------------------------------
HOST_C   := $(wildcard host/*/*.c)
HOST_CXX := $(wildcard host/*/*.cc)
# The threads engine's pure order programs, tuner model and rounding loops, also built into the
# host for `ctrain what-if` (host/whatif/whatif_replay.c) and `ctrain reduce` (host/cli/reduce.c),
# which run its reductions.
HOST_SHARED_OBJ := $(BUILD)/obj/plugins/comm/threads/orders.o $(BUILD)/obj/plugins/comm/threads/reduce.o \
                   $(BUILD)/obj/plugins/comm/threads/tuner.o
HOST_OBJ := $(HOST_C:%.c=$(BUILD)/obj/%.o) $(HOST_CXX:%.cc=$(BUILD)/obj/%.o) $(HOST_SHARED_OBJ)
HOST_LIB_OBJ := $(filter-out $(BUILD)/obj/host/cli/main.o,$(HOST_OBJ))

# ---- plugins: every folder plugins/<kind>/<name>/ becomes build/plugins/<kind>_<name>.so ----
# A folder may hold plugin.mk setting <kind>_<name>_LIBS / _CFLAGS / _NVCCFLAGS / _CUDA_ONLY /
# _CUDA_LIBS (the companion's own libraries beyond the CUDA runtime, below). HAVE_NVCC is set
# before they are read, so a plugin.mk may use it with := assignments.
HAVE_NVCC := $(if $(filter 1,$(CUDA)),$(NVCC),)
PLUGIN_DIRS := $(patsubst %/,%,$(sort $(dir $(wildcard plugins/*/*/*.c plugins/*/*/*.cu))))
plugin_id    = $(word 2,$(subst /, ,$(1)))_$(word 3,$(subst /, ,$(1)))
-include $(wildcard plugins/*/*/plugin.mk)

NVCCFLAGS ?= -O2 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden -Isdk/include \
             -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
             -Werror all-warnings

# A folder with both .c and .cu files that is not CUDA_ONLY is split (with nvcc): the .cu code
# becomes the companion $(BUILD)/plugins/cuda/<id>_cuda.so, linked with <id>_CUDA_LIBS and the
# CUDA runtime, and opened by the plugin (sdk/include/ctrain/companion.h) only when a CUDA
# device is used; the plugin's .c code is compiled with -DCT_HAVE_CUDA and linked with -ldl, and
# links no CUDA library, so it loads on any machine.
CUDA_RT_LIBS := -L$(CUDA_HOME)/lib64 -Xlinker -rpath -Xlinker $(CUDA_HOME)/lib64 -lcudart
# Switching CUDA=0/1 on one build folder changes those flags: a stamp per mode makes the .c
# objects of plugins with .cu files rebuild when the mode changes.
CUDA_STAMP := $(BUILD)/.cuda-$(if $(HAVE_NVCC),on,off)
$(CUDA_STAMP):
	@mkdir -p $(@D)
	@rm -f $(BUILD)/.cuda-on $(BUILD)/.cuda-off
	@touch $@
define PLUGIN_template
$(1)_ID   := $(call plugin_id,$(1))
$(1)_C    := $(wildcard $(1)/*.c)
$(1)_CU   := $(if $(HAVE_NVCC),$(wildcard $(1)/*.cu),)
$(1)_COBJ := $$($(1)_C:%.c=$(BUILD)/obj/%.o)
$(1)_CUOBJ := $$($(1)_CU:%.cu=$(BUILD)/obj/%.cu.o)
$(1)_OBJ  := $$($(1)_COBJ) $$($(1)_CUOBJ)
$(1)_SKIP := $$(if $$(and $$($$($(1)_ID)_CUDA_ONLY),$$(if $(HAVE_NVCC),,1)),1,)
$(1)_SPLIT := $$(if $$(and $$($(1)_C),$$($(1)_CU),$$(if $$($$($(1)_ID)_CUDA_ONLY),,1)),1,)
$(1)_SPLIT_CFLAGS := $$(if $$($(1)_SPLIT),-DCT_HAVE_CUDA,)
$(1)_SPLIT_LIBS   := $$(if $$($(1)_SPLIT),-ldl,)
ifeq ($$($(1)_SKIP),)
PLUGINS += $(BUILD)/plugins/$$($(1)_ID).so
ifeq ($$($(1)_SPLIT),)
$(BUILD)/plugins/$$($(1)_ID).so: $$($(1)_OBJ)
else
$(BUILD)/plugins/$$($(1)_ID).so: $$($(1)_COBJ)
COMPANIONS += $(BUILD)/plugins/cuda/$$($(1)_ID)_cuda.so
$(BUILD)/plugins/cuda/$$($(1)_ID)_cuda.so: $$($(1)_CUOBJ)
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$(Q)$(CXX) $(LDFLAGS_PLUGIN) -o $$@ $$^ $$($$($(1)_ID)_CUDA_LIBS) $(CUDA_RT_LIBS) -lm
endif
$(BUILD)/plugins/$$($(1)_ID).so:
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$(Q)$(CXX) $(LDFLAGS_PLUGIN) -o $$@ $$^ $$($$($(1)_ID)_LIBS) $$($(1)_SPLIT_LIBS) -lm
$$($(1)_OBJ): CFLAGS_EXTRA := $$($$($(1)_ID)_CFLAGS) $$($(1)_SPLIT_CFLAGS)
$$($(1)_OBJ): NVCCFLAGS_EXTRA := $$($$($(1)_ID)_NVCCFLAGS)
$$($(1)_OBJ): $(wildcard $(1)/plugin.mk)
$(if $(wildcard $(1)/*.cu),$$($(1)_COBJ): $(CUDA_STAMP))
else
SKIPPED_CUDA += $$($(1)_ID)
endif
endef
$(foreach d,$(PLUGIN_DIRS),$(eval $(call PLUGIN_template,$(d))))

# ---- tests -------------------------------------------------------------------------------
TEST_C   := $(wildcard tests/unit/*.c)
TEST_OBJ := $(TEST_C:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(BUILD)/tests/unit_tests

# ---- test-only plugins: tests/plugins/<id>/*.c becomes build/tests/plugins/<id>.so --------
# Built like in-tree plugins but outside build/plugins, so no user ever finds them (and
# check-abi, which checks what is installed, leaves them out). tests/plugins/README.md.
TEST_PLUGIN_DIRS := $(patsubst %/,%,$(sort $(dir $(wildcard tests/plugins/*/*.c))))
TEST_PLUGINS := $(foreach d,$(TEST_PLUGIN_DIRS),$(BUILD)/tests/plugins/$(notdir $(d)).so)
define TEST_PLUGIN_template
$(BUILD)/tests/plugins/$(notdir $(1)).so: $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard $(1)/*.c))
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$(Q)$(CC) $(LDFLAGS_PLUGIN) -o $$@ $$^ -lm
endef
$(foreach d,$(TEST_PLUGIN_DIRS),$(eval $(call TEST_PLUGIN_template,$(d))))

# ---- top-level targets -------------------------------------------------------------------
.PHONY: all test test-interop run run-build bench install asan ubsan check-abi deps deps-run clean \
        examples fuzz
all: $(BUILD)/ctrain $(PLUGINS) $(COMPANIONS) $(TEST_BIN) $(TEST_PLUGINS)
	@$(if $(SKIPPED_CUDA),echo "note: nvcc not found: skipped CUDA plugins: $(SKIPPED_CUDA)",true)

$(BUILD)/ctrain: $(HOST_OBJ)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CXX) $(SANFLAGS) -rdynamic -o $@ $^ $(HOST_LIBS)

$(TEST_BIN): $(TEST_OBJ) $(HOST_LIB_OBJ)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CXX) $(SANFLAGS) -o $@ $^ $(HOST_LIBS) $(BLAS_LIBS)

# Objects depend on the flags they were built with: a change of OPT, SANITIZER, CC or the
# warnings rebuilds them (the stamp is rewritten only when the flags differ).
FLAGS_STAMP := $(BUILD)/.cflags
FLAGS_NOW   := $(CC) $(CXX) $(CFLAGS_HOST) $(CXXFLAGS_HOST) $(CFLAGS_PLUGIN)
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(FLAGS_STAMP) 2>/dev/null)" = "$(FLAGS_NOW)" ] || \
    echo "$(FLAGS_NOW)" > $(FLAGS_STAMP); })

$(BUILD)/obj/host/%.o: host/%.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_HOST) -c $< -o $@

$(BUILD)/obj/host/%.o: host/%.cc $(FLAGS_STAMP)
	@mkdir -p $(@D)
	@echo "  CXX     $<"
	$(Q)$(CXX) $(CXXFLAGS_HOST) -c $< -o $@

$(BUILD)/obj/tests/plugins/%.o: tests/plugins/%.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_PLUGIN) -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_HOST) -Itests $(BLAS_CFLAGS) -c $< -o $@

$(BUILD)/obj/plugins/%.o: plugins/%.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS_PLUGIN) $(CFLAGS_EXTRA) -c $< -o $@

$(BUILD)/obj/plugins/%.cu.o: plugins/%.cu
	@mkdir -p $(@D)
	@echo "  NVCC    $<"
	$(Q)$(HAVE_NVCC) $(NVCCFLAGS) $(NVCCFLAGS_EXTRA) -MMD -MP -c $< -o $@

deps:
	$(Q)scripts/install-deps.sh

deps-run:
	$(Q)scripts/install-deps.sh --run

test: deps
	$(Q)$(MAKE) --no-print-directory -j$(NPROC) all
	$(Q)$(MAKE) --no-print-directory check-abi
	$(Q)BUILD=$(BUILD) tests/run.sh

# The transformers/torch round trips need torch (large): installed into a project-local venv,
# never the system's Python; `make test` runs the same suite when that venv (or python3) has them.
INTEROP_VENV ?= .venv-interop
test-interop: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/interop-venv.sh $(INTEROP_VENV)
	$(Q)CTRAIN_INTEROP_PYTHON=$(abspath $(INTEROP_VENV))/bin/python BUILD=$(BUILD) bash tests/cli/test_interop.sh
	$(Q)CTRAIN_INTEROP_PYTHON=$(abspath $(INTEROP_VENV))/bin/python BUILD=$(BUILD) bash tests/cli/test_families.sh
	$(Q)CTRAIN_INTEROP_PYTHON=$(abspath $(INTEROP_VENV))/bin/python BUILD=$(BUILD) bash tests/cli/test_optimizers.sh
	$(Q)CTRAIN_INTEROP_PYTHON=$(abspath $(INTEROP_VENV))/bin/python BUILD=$(BUILD) bash tests/cli/test_loss_scale.sh
	$(Q)CTRAIN_INTEROP_PYTHON=$(abspath $(INTEROP_VENV))/bin/python BUILD=$(BUILD) bash tests/cli/test_tokenizer_families.sh

# The INI fuzzer of tests/cli/test_fuzz_ini.sh at length (make test runs 300 of them).
FUZZ_N ?= 5000
fuzz: all
	$(Q)FUZZ_N=$(FUZZ_N) BUILD=$(BUILD) python3 tests/cli/fuzz_ini.py

check-abi: $(PLUGINS)
	$(Q)scripts/check-abi.sh $(PLUGINS)

# `make run` builds what it runs and nothing else, on every core: the host and the plugins that
# need no GPU (not the CUDA-only plugins, the CUDA companions, the unit tests or the test
# plugins; `make` and `make test` build those). RUN_ARGS: extra arguments for `ctrain train`
# (make run RUN_ARGS="--set run.steps=50").
NPROC       ?= $(shell nproc 2>/dev/null || echo 2)
RUN_PLUGINS := $(foreach p,$(PLUGINS),$(if $($(basename $(notdir $(p)))_CUDA_ONLY),,$(p)))
run-build: $(BUILD)/ctrain $(RUN_PLUGINS)
	@true

run: deps-run
	$(Q)$(MAKE) --no-print-directory -j$(NPROC) run-build
	$(Q)BUILD=$(BUILD) scripts/run-default.sh $(RUN_ARGS)

bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)BUILD=$(BUILD) bench/run.sh

# Open MPI keeps allocations until exit in components it unloads (no symbols to suppress by):
# processes started by mpirun run without the leak check; every other test keeps it.
asan:
	$(Q)SANITIZER=address OMPI_MCA_mca_base_env_list="ASAN_OPTIONS=detect_leaks=0" \
	    $(MAKE) --no-print-directory test BUILD=build-asan SANITIZER=address CUDA=0 OPT=-O1

ubsan:
	$(Q)SANITIZER=undefined $(MAKE) --no-print-directory test BUILD=build-ubsan \
	    SANITIZER=undefined CUDA=0 OPT=-O1

# What a plugin author needs: the binary (check-plugin included), plugins, headers and the
# frozen headers of every older ABI minor (include/ctrain/abi/v1.N/), the .pc file (Version =
# the plugin ABI), the example project (the header's example with a minimal INI), the wrong
# plugins check-plugin is tested with, check-abi.sh, the plugin and user guides and the
# architecture notes. Copies the build folder as it is; never rebuilds (the prefix is not
# compiled in).
ABI_FROZEN := $(notdir $(patsubst %/ctrain/ctrain.h,%,$(sort $(wildcard tests/abi/v*/ctrain/ctrain.h))))
ABI_VERSION = $(shell sed -n 's/^\#define CT_ABI_MAJOR \([0-9]*\)$$/\1/p' sdk/include/ctrain/ctrain.h).$(shell \
              sed -n 's/^\#define CT_ABI_MINOR \([0-9]*\)$$/\1/p' sdk/include/ctrain/ctrain.h)
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/ctrain/plugins \
	    $(DESTDIR)$(PREFIX)/include/ctrain $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	    $(DESTDIR)$(PREFIX)/share/doc/ctrain $(DESTDIR)$(PREFIX)/share/ctrain/examples/loss_mse_logit \
	    $(DESTDIR)$(PREFIX)/share/ctrain/examples/optimizer_signum \
	    $(DESTDIR)$(PREFIX)/share/ctrain/examples/precision_gather_sum
	install -m 755 $(BUILD)/ctrain $(DESTDIR)$(PREFIX)/bin/ctrain
	install -m 755 $(PLUGINS) $(DESTDIR)$(PREFIX)/lib/ctrain/plugins/
	$(if $(COMPANIONS),install -d $(DESTDIR)$(PREFIX)/lib/ctrain/plugins/cuda)
	$(if $(COMPANIONS),install -m 755 $(COMPANIONS) $(DESTDIR)$(PREFIX)/lib/ctrain/plugins/cuda/)
	install -m 644 sdk/include/ctrain/*.h sdk/include/ctrain/*.cuh $(DESTDIR)$(PREFIX)/include/ctrain/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@ABI_VERSION@|$(ABI_VERSION)|g' sdk/ctrain-sdk.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/ctrain-sdk.pc
	$(foreach v,$(ABI_FROZEN),install -d $(DESTDIR)$(PREFIX)/include/ctrain/abi/$(v)/ctrain && \
	    install -m 644 tests/abi/$(v)/ctrain/ctrain.h $(DESTDIR)$(PREFIX)/include/ctrain/abi/$(v)/ctrain/ &&) true
	install -m 644 examples/loss_mse_logit/Makefile examples/loss_mse_logit/mse_logit.c \
	    examples/loss_mse_logit/run.ini $(DESTDIR)$(PREFIX)/share/ctrain/examples/loss_mse_logit/
	install -m 644 examples/optimizer_signum/Makefile examples/optimizer_signum/signum.c \
	    examples/optimizer_signum/run.ini $(DESTDIR)$(PREFIX)/share/ctrain/examples/optimizer_signum/
	install -m 644 examples/precision_gather_sum/Makefile examples/precision_gather_sum/gather_sum.c \
	    examples/precision_gather_sum/run.ini $(DESTDIR)$(PREFIX)/share/ctrain/examples/precision_gather_sum/
	install -d $(DESTDIR)$(PREFIX)/share/ctrain/examples/check-plugin
	install -m 644 tests/check-plugin/*.c $(DESTDIR)$(PREFIX)/share/ctrain/examples/check-plugin/
	install -m 755 scripts/check-abi.sh $(DESTDIR)$(PREFIX)/share/ctrain/check-abi.sh
	install -m 644 docs/plugin-guide.md docs/user-guide.md docs/architecture.md \
	    $(DESTDIR)$(PREFIX)/share/doc/ctrain/

clean:
	rm -rf build build-asan build-ubsan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
