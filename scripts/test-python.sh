#!/usr/bin/env bash
# The Python package's tests (make test): builds the wheel of python/ with maturin, installs
# it into target/python (not into the user's environment) and runs python/tests with pytest
# against it and the release binary (the command line's solutions are the reference).
#
#   scripts/test-python.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf target/wheels target/python
python3 -m maturin build --quiet --release -m python/Cargo.toml -o target/wheels
# A wheel is a zip of the package: unpacked, it is installed for PYTHONPATH (no pip, so
# an externally managed system Python serves as well).
python3 -m zipfile -e target/wheels/tensorfem-*.whl target/python
# The release binary is what the solutions are compared with.
cargo build --quiet --release --bin tensorfem
cd target  # not the repository root: `import tensorfem` must find the installed package
PYTHONPATH="$PWD/python" RUST_LOG="${RUST_LOG:-warn}" \
  python3 -m pytest -q -p no:cacheprovider ../python/tests "$@"
