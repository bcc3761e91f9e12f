#!/usr/bin/env bash
# The Python package's tests (make test): builds the wheel of python/ with maturin, installs
# it into target/python (not into the user's environment) and runs python/tests with pytest
# against it and the release binary (the command line's solutions are the reference).
#
#   scripts/test-python.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf target/wheels target/python
maturin build --quiet --release -m python/Cargo.toml -o target/wheels
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
  --no-deps --no-compile \
  --target target/python target/wheels/tensorfem-*.whl
# The release binary is what the solutions are compared with.
cargo build --quiet --release --bin tensorfem
cd target  # not the repository root: `import tensorfem` must find the installed package
PYTHONPATH="$PWD/python" RUST_LOG="${RUST_LOG:-warn}" \
  python3 -m pytest -q -p no:cacheprovider ../python/tests "$@"
