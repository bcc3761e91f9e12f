#!/usr/bin/env bash
# Installs CHOLMOD for Python (scikit-sparse, with numpy, scipy and h5py) into the virtual
# environment .deps/cholmod-venv, for the side-by-side benchmark against tensorfem
# (scripts/bench/vs-cholmod.sh, scripts/bench/cholmod_reference.py). Idempotent: a no-op
# when the environment already holds the pinned versions.
#
#   scripts/install-cholmod.sh
#
# Needs: python3 with venv, a C compiler, and either SuiteSparse's development files
# (/usr/include/suitesparse/cholmod.h) and an optimised libblas.so.3, or apt-get as root to
# install libsuitesparse-dev (Debian bookworm: SuiteSparse 5.12) and libopenblas0-pthread.
# pip reaches the package index (scikit-sparse is built from source against the system's
# CHOLMOD; the others are wheels).
# Runtime: measured here (Debian bookworm, 2 cores): 25 s from nothing (apt-get ≈ 12 s,
# then the venv, the wheels and the scikit-sparse build); OpenBLAS adds ≈ 3 s; without pip's
# cache the Python part alone took 23 s. Under half a second when already installed.
# Output: .deps/cholmod-venv; prints the versions it checked.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.deps/cholmod-venv
py="$venv/bin/python"

# Pins that build and run together on Python 3.11 against SuiteSparse 5.12. scikit-sparse
# 0.4.15 is compiled without build isolation, so the Cython, setuptools and numpy it builds
# with are these pinned ones and not whatever is newest on the index.
build_pins=(setuptools==80.9.0 wheel==0.45.1 Cython==3.0.12)
runtime_pins=(numpy==2.2.6 scipy==1.15.3 h5py==3.14.0)
sksparse_pin=scikit-sparse==0.4.15

fail() { echo "install-cholmod: $*" >&2; exit 1; }

# Prints the versions, and fails unless every pin is what is installed and CHOLMOD loads.
check() {
  "$py" - "${runtime_pins[@]}" "$sksparse_pin" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError

wrong = []
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        have = None
    if have != want:
        wrong.append(f"{name} {have or 'missing'} (want {want})")
if wrong:
    sys.exit("not the pinned versions: " + ", ".join(wrong))
import numpy, scipy, h5py
import sksparse.cholmod  # links libcholmod: fails here if the system library is missing
print(f"install-cholmod: scikit-sparse {version('scikit-sparse')}, numpy {numpy.__version__}, "
      f"scipy {scipy.__version__}, h5py {h5py.__version__}, Python {sys.version.split()[0]}")
PY
}

# CHOLMOD's supernodal factorisation and block solves run in the BLAS that libblas.so.3
# resolves to; Debian's default is the unoptimised reference BLAS, which would slow CHOLMOD
# several-fold and flatter tensorfem, so OpenBLAS is installed where that default is in use.
# Prints what the loader's libblas.so.3 resolves to (Debian's multiarch layout).
system_blas() { compgen -G "/usr/lib/*/libblas.so.3" | head -n 1 | xargs -r readlink -f; }
reference_blas() { [[ "$(system_blas)" == */blas/libblas.so.* ]]; }
warn_blas() {
  if reference_blas; then
    echo "install-cholmod: warning: libblas.so.3 resolves to the reference BLAS ($(system_blas)): CHOLMOD's times will be several times too slow; install OpenBLAS (libopenblas0-pthread) or select it (update-alternatives --config libblas.so.3-$(uname -m)-linux-gnu)" >&2
  fi
}
can_apt=0
command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]] && can_apt=1
apt_packages=()
[[ -e /usr/include/suitesparse/cholmod.h ]] || apt_packages+=(libsuitesparse-dev)
if ((can_apt)) && reference_blas; then apt_packages+=(libopenblas0-pthread); fi

if ((${#apt_packages[@]} == 0)) && [[ -x "$py" ]] && check 2>/dev/null; then
  warn_blas
  exit 0
fi
if ((${#apt_packages[@]})); then
  ((can_apt)) || fail "CHOLMOD's headers (/usr/include/suitesparse/cholmod.h) are missing and there is no apt-get as root to install libsuitesparse-dev; install SuiteSparse and rerun"
  echo "install-cholmod: installing ${apt_packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null; } \
    || fail "apt-get could not install ${apt_packages[*]}"
  [[ -e /usr/include/suitesparse/cholmod.h ]] \
    || fail "libsuitesparse-dev is installed but /usr/include/suitesparse/cholmod.h is still missing"
fi
warn_blas
command -v cc >/dev/null || fail "no C compiler (cc) to build scikit-sparse: install gcc"

if [[ ! -x "$py" ]]; then
  echo "install-cholmod: creating $venv with $(command -v python3)"
  mkdir -p .deps
  python3 -m venv "$venv" || fail "python3 -m venv failed (on Debian's own python3: apt-get install python3-venv)"
fi
pip=("$py" -m pip --disable-pip-version-check --quiet)
echo "install-cholmod: installing ${build_pins[*]} ${runtime_pins[*]}"
"${pip[@]}" install "${build_pins[@]}" "${runtime_pins[@]}" \
  || fail "pip could not install ${build_pins[*]} ${runtime_pins[*]}"
echo "install-cholmod: building $sksparse_pin against the system's CHOLMOD"
"${pip[@]}" install --no-build-isolation --no-binary scikit-sparse "$sksparse_pin" \
  || fail "pip could not build $sksparse_pin (see the compiler output above)"
check || fail "the environment $venv does not work after installing (see above)"
