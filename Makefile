# tensorfem: the two commands a user types are `make run` and `make test`.
#
# Both first run scripts/install-deps.sh: on Debian/Ubuntu as root it installs what is
# missing (HDF5, OpenMPI, libclang, pkg-config, hdf5-tools; h5py, numpy, matplotlib); on a
# cluster without root it uses what `module load` provides (HDF5_DIR, mpicc on PATH) and
# names anything missing instead of installing.

SHELL := /bin/bash
CARGO ?= cargo
BIN := target/release/tensorfem
CONFIG ?= inputs/quickstart.toml
RANKS ?= 2

# OpenMPI refuses to run as root without these (containers, CI); harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT ?= 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM ?= 1

# NVRTC and the CUDA headers installed by scripts/install-deps.sh (.deps/cuda): the kernels
# compile on machines without a GPU. libnvrtc must be on the loader path when a process starts.
CUDA_WHEELS := $(CURDIR)/.deps/cuda/nvidia/cu13
export LD_LIBRARY_PATH := $(CUDA_WHEELS)/lib$(if $(LD_LIBRARY_PATH),:$(LD_LIBRARY_PATH))
export TENSORFEM_CUDA_INCLUDE ?= $(CUDA_WHEELS)/include
PTX_DIR ?= target/ptx

.PHONY: all deps deps-test build run test test-gpu test-standin lint fmt clean ptx bundle example-pressure python

all: build

deps:
	@scripts/install-deps.sh

deps-test:
	@scripts/install-deps.sh --test

build: deps
	$(CARGO) build --release

## run: the main job, the quickstart campaign on $(RANKS) MPI ranks (or CONFIG=path/to/config.toml,
## RANKS=n), then the report of its campaign.h5 (summary, plots, report/index.html: postprocess/report.py)
run: build
	jobs/run-local.sh -n $(RANKS) $(CONFIG)

## test: formatting, lints, and the whole test suite in the release profile (unit,
## integration, CLI under mpirun -n 2, HDF5 read back by h5dump and h5py, every CUDA kernel
## compiled for sm_90 by NVRTC with spills as errors, and every kernel executed on the CPU
## by the CUDA stand-in where there is no GPU; then the GPU-machine bundle: under
## 48 MiB, and run in a root holding nothing but glibc; then jobs/*.sbatch under a private
## single-node SLURM: completion, USR1 pre-emption, requeue, bitwise-equal results —
## as root where no SLURM runs, skipped elsewhere, tests/slurm/run.sh)
test: deps-test lint
	TENSORFEM_REQUIRE_NVRTC=$${TENSORFEM_REQUIRE_NVRTC:-$$([[ $${TENSORFEM_NO_NVRTC:-0} == 1 ]] && echo 0 || echo 1)} \
	  $(CARGO) test --release
	python3 postprocess/test_tensorfem_h5.py $(BIN)
	python3 postprocess/test_build_rhs.py $(BIN)
	python3 scripts/test_compare_test_outputs.py
	scripts/test-python.sh
	@set -o pipefail; if [[ $${TENSORFEM_NO_NVRTC:-0} != 1 ]]; then $(BIN) kernels --arch sm_90 | tail -1; fi
	@if [[ $${TENSORFEM_NO_NVRTC:-0} == 1 ]]; then echo "cuda stand-in: skipped (TENSORFEM_NO_NVRTC=1: no PTX to run)"; \
	elif $(BIN) info 2>/dev/null | grep -q "device 0:"; then echo "cuda stand-in: skipped, this machine has a GPU (make test-gpu)"; \
	else cuda-standin/run-tests.sh; fi
	jobs/check-bundle.sh target/bundle
	tests/slurm/run.sh

## python: the Python package (python/: PyO3 + maturin) built and installed into this
## python3's environment: `import tensorfem` (docs/python.md)
python: deps
	python3 -m pip install ./python

## example-pressure: the pressure-Poisson time series around a square obstacle with mixed
## conditions (inputs/pressure-around-square.toml): mesh, right-hand sides from
## postprocess/build_rhs.py, the campaign on $(RANKS) ranks, its report on the real geometry
example-pressure: build
	inputs/pressure-around-square.sh $(RANKS)

## bundle: target/bundle/tensorfem-gpu.tar.gz, the binary, the CUDA test binaries, the PTX
## and every non-glibc library, for a GPU machine without Rust or network (jobs/bundle-gpu.sh)
bundle:
	jobs/bundle-gpu.sh target/bundle

## test-gpu: every CUDA kernel against its CPU reference (tests/gpu.rs) and naive loops
## (tests/kernels.rs, ::cuda variants), and M1/PSC-IR, multigrid and Stokes on the GPU
## against published iteration counts, dense references and the CPU's answers
## (tests/psc.rs, tests/mg.rs, tests/mg_meshes.rs, tests/stokes.rs, the ::cuda variants);
## without a GPU it says so and exits 0, unless TENSORFEM_REQUIRE_CUDA=1
test-gpu: build
	@if $(BIN) info 2>/dev/null | grep -q "device 0:"; then \
	  TENSORFEM_REQUIRE_CUDA=1 $(CARGO) test --release --test gpu --test kernels --test psc --test mg --test mg_meshes --test stokes -- --nocapture; \
	elif [[ "$${TENSORFEM_REQUIRE_CUDA:-0}" == 1 ]]; then \
	  echo "make test-gpu: TENSORFEM_REQUIRE_CUDA=1 but this machine has no CUDA device ($$($(BIN) info | grep CUDA))" >&2; exit 1; \
	else \
	  echo "make test-gpu: skipped, no CUDA device on this machine ($$($(BIN) info | grep CUDA))"; \
	fi

## test-standin: the part of `make test` that executes the CUDA backend on the CPU by the
## CUDA stand-in (cuda-standin/), alone: tests/gpu.rs, every ::cuda variant of the device
## tests, `tensorfem run` with backend = "cuda" (single runs, a campaign on 2 ranks killed
## and resumed), bench smoke runs and the GPU bundle's test runner, about 10 minutes on
## 2 cores; prints "cuda stand-in: N passed, M failed" (docs/cuda.md)
test-standin: deps-test
	cuda-standin/run-tests.sh

## ptx: the kernels compiled to PTX for ARCH (default sm_90) into $(PTX_DIR), for GPU nodes
## without NVRTC (run with TENSORFEM_PTX_DIR pointing there)
ptx: build
	$(BIN) kernels --arch $(or $(ARCH),sm_90) --ptx-dir $(PTX_DIR)

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	rm -rf out
