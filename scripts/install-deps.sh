#!/usr/bin/env bash
# Installs what tensorfem needs to build, test and post-process, where it is missing.
#
# Debian/Ubuntu with root (or passwordless sudo): apt-get installs the missing packages.
# Elsewhere (a cluster with `module load hdf5 openmpi`): nothing is installed; the script
# checks what the environment provides and says exactly what is missing, then fails.
# --test adds what only the tests need (g++ and libffi for the CUDA stand-in; SLURM and
# munge, as root on Debian/Ubuntu).
set -euo pipefail

debian_packages=(libhdf5-dev libopenmpi-dev openmpi-bin libclang-dev pkg-config hdf5-tools)
python_modules=(h5py numpy matplotlib)
# With --test: maturin builds the Python package's wheel, pytest runs its tests.
if [[ "${1:-}" == --test ]]; then
  python_modules+=(maturin pytest)
fi

have() { command -v "$1" >/dev/null 2>&1; }

if ! have cargo; then
  echo "install-deps: cargo is missing: install the Rust toolchain (rustup, stable >= 1.85) first" >&2
  exit 1
fi

missing_system=()
# HDF5: either HDF5_DIR from a module, or pkg-config / Debian's serial layout.
if [[ -z "${HDF5_DIR:-}" ]] && ! pkg-config --exists hdf5 2>/dev/null \
    && [[ ! -e /usr/include/hdf5/serial/hdf5.h ]]; then
  missing_system+=("HDF5 development files (libhdf5-dev, or set HDF5_DIR / module load hdf5)")
fi
if ! have mpicc || ! have mpirun; then
  missing_system+=("MPI compiler wrapper and launcher: mpicc and mpirun (libopenmpi-dev openmpi-bin, or module load openmpi)")
fi
# libclang itself (libclang.so / libclang-14.so.1), not libclang-cpp, which is a different library.
if [[ -z "${LIBCLANG_PATH:-}" ]] && ! compgen -G "/usr/lib/llvm-*/lib/libclang.so*" >/dev/null \
    && ! compgen -G "/usr/lib/*/libclang-[0-9]*.so*" >/dev/null; then
  missing_system+=("libclang for bindgen (libclang-dev, or set LIBCLANG_PATH)")
fi
if ! have pkg-config; then
  missing_system+=("pkg-config")
fi
if ! have h5dump; then
  missing_system+=("h5dump (hdf5-tools), used by the tests to check files independently")
fi

if ((${#missing_system[@]})); then
  if have apt-get && { [[ $(id -u) -eq 0 ]] || sudo -n true 2>/dev/null; }; then
    sudo_cmd=""; [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo -n"
    echo "install-deps: installing Debian packages: ${debian_packages[*]}"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
      "${debian_packages[@]}" >/dev/null
  else
    echo "install-deps: missing, and no apt-get with root to install it:" >&2
    printf '  - %s\n' "${missing_system[@]}" >&2
    exit 1
  fi
fi

missing_python=()
for m in "${python_modules[@]}"; do
  python3 -c "import $m" 2>/dev/null || missing_python+=("$m")
done
if ((${#missing_python[@]})); then
  echo "install-deps: installing Python modules: ${missing_python[*]}"
  if ! python3 -m pip install --quiet "${missing_python[@]}" 2>/dev/null \
      && ! python3 -m pip install --quiet --user "${missing_python[@]}" 2>/dev/null; then
    # Debian's own python3 is "externally managed": use its packages instead.
    if have apt-get && [[ $(id -u) -eq 0 ]] && [[ $(command -v python3) == /usr/bin/python3 ]]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3-h5py python3-numpy python3-matplotlib python3-pytest python3-pip >/dev/null
      # Debian packages no maturin: pip installs it beside them.
      if [[ " ${missing_python[*]} " == *" maturin "* ]]; then
        python3 -m pip install --quiet --break-system-packages maturin >/dev/null
      fi
    else
      echo "install-deps: could not install ${missing_python[*]} for $(command -v python3); install them in your Python environment" >&2
      exit 1
    fi
  fi
fi
for m in "${missing_python[@]}"; do
  if ! python3 -c "import $m" 2>/dev/null; then
    echo "install-deps: the Python module $m is still missing for $(command -v python3); install it in your Python environment" >&2
    exit 1
  fi
done
# NVRTC and the CUDA headers, pinned to CUDA 13.0.x (13.5's PTX is too new for the GPU
# machines' 13.0 driver), from NVIDIA's wheels into .deps/cuda: `make test` compiles every
# kernel with them on machines without a GPU or toolkit. Skipped with TENSORFEM_NO_NVRTC=1.
cuda_dir="$(cd "$(dirname "$0")/.." && pwd)/.deps/cuda"
cuda_wheels=(nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88)
if [[ "${TENSORFEM_NO_NVRTC:-0}" != 1 && ! -e "$cuda_dir/nvidia/cu13/lib/libnvrtc.so.13" ]]; then
  echo "install-deps: installing NVRTC 13.0 and the CUDA headers into .deps/cuda (about 92 MB)"
  rm -rf "$cuda_dir"
  if ! python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$cuda_dir" \
      "${cuda_wheels[@]}" 2>/dev/null; then
    echo "install-deps: could not install ${cuda_wheels[*]} with pip; make test needs them to compile the CUDA kernels (or set TENSORFEM_NO_NVRTC=1 to skip that check)" >&2
    exit 1
  fi
fi
# With --test (make test): a C++ compiler and libffi for the CUDA stand-in (cuda-standin/),
# which runs the CUDA backend's tests on the CPU.
if [[ "${1:-}" == --test ]] && { ! have g++ || ! { [[ -e /usr/include/ffi.h ]] || compgen -G "/usr/include/*/ffi.h" >/dev/null; }; }; then
  if have apt-get && [[ $(id -u) -eq 0 ]]; then
    echo "install-deps: installing g++ and libffi-dev for the CUDA stand-in"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ libffi-dev >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ libffi-dev >/dev/null; }
  else
    echo "install-deps: the CUDA stand-in needs g++ and libffi (ffi.h); install them (g++ libffi-dev)" >&2
    exit 1
  fi
fi
# With --test (make test): SLURM and munge for the real-SLURM test of jobs/ (tests/slurm/run.sh),
# on Debian/Ubuntu as root only; elsewhere that test says it is skipped.
if [[ "${1:-}" == --test ]] && ! have slurmctld; then
  if have apt-get && [[ $(id -u) -eq 0 ]]; then
    echo "install-deps: installing slurm-wlm and munge for the SLURM test"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null; }
  else
    echo "install-deps: slurm-wlm is not installed and cannot be here (no root apt-get): the SLURM test will be skipped"
  fi
fi
echo "install-deps: all present"
