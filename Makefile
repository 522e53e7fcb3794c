# zipccl: the two commands. Each installs what is missing, configures and builds
# (incrementally), then runs the default test suites or the demo.
BUILD ?= build
MESON_SETUP_ARGS ?=

.PHONY: all deps build install test test-slow demo bench docs clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_SETUP_ARGS)

build: deps $(BUILD)/build.ninja
	meson compile -C $(BUILD)

# Installs the libraries, tools, headers and the Python package zipccl (meson install: prefix
# /usr/local unless MESON_SETUP_ARGS=--prefix=...; DESTDIR is honoured). From the source tree
# no install is needed: PYTHONPATH=python finds build/libzipccl.so.0 (docs/python.md).
install: build
	meson install -C $(BUILD) --no-rebuild

# Default suites (unit, integration, plugin); ends with "N passed, N failed".
test: build
	@./scripts/run-tests.sh $(BUILD)

# The long benchmarks and emulated-cluster runs.
test-slow: build
	@./scripts/run-tests.sh $(BUILD) --suite slow

# 4 local ranks train an MLP on Fashion-MNIST with each codec: a table and $(BUILD)/demo/accuracy.png.
demo: build
	./scripts/demo.sh --build $(BUILD)

bench: build
	./$(BUILD)/bench/codec_bench

# 4 emulated hosts (network namespaces, tc) at 100mbit/1gbit/5gbit: zipccl against Open MPI on the
# same links; root. CLUSTER_ARGS="--full --plots docs" for the whole sweep (cluster.sh --help).
.PHONY: cluster
cluster: build
	./bench/cluster/cluster.sh --build $(BUILD) $(CLUSTER_ARGS)

# Regenerates docs/env-vars.md and the README table from common/params.def.
docs: build
	./scripts/update-docs.sh $(BUILD)/tools/zipccl-info

clean:
	rm -rf $(BUILD)
