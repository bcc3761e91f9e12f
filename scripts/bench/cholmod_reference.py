#!/usr/bin/env python3
"""CHOLMOD (scikit-sparse, f64) on a problem exported by `tensorfem bench solve --export`:
times the analysis and numeric factorisation of A and the solve of the first K right-hand
sides as one n×K block, and checks every column's relative residual against the file's rtol.

    .deps/cholmod-venv/bin/python scripts/bench/cholmod_reference.py PROBLEM.h5 --nrhs K \
        [--runs R] [--json]

PROBLEM.h5: root attributes unknowns (n), nrhs, rtol, description; /matrix/indptr (u64,
[n+1]), /matrix/indices (u32, [nnz]), /matrix/data (f64, [nnz]): A in CSR with both
triangles; /rhs (f64, [nrhs, n]), row j the right-hand side j.

Each of the R runs analyses and factorises afresh (CHOLMOD's default ordering) and solves the
block twice, timing the second (the first touches the workspace); best and median are
reported. Exit status: 0 on success, 1 if a column's relative
residual ‖b − A x‖₂/‖b‖₂ exceeds rtol, 2 on bad input or a missing CHOLMOD
(scripts/install-cholmod.sh installs it).
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time


def fail(message, status=2):
    print(f"cholmod_reference: {message}", file=sys.stderr)
    sys.exit(status)


try:
    import h5py
    import numpy as np
    import scipy
    import scipy.sparse as sp
    from importlib.metadata import version
    from sksparse import cholmod
except ImportError as e:
    fail(f"{e}: run with .deps/cholmod-venv/bin/python (scripts/install-cholmod.sh installs it)")


def attribute(f, name, kind):
    if name not in f.attrs:
        fail(f"{f.filename}: the root attribute '{name}' is missing")
    value = f.attrs[name]
    value = value.decode() if isinstance(value, bytes) else value
    try:
        return kind(value)
    except (TypeError, ValueError):
        fail(f"{f.filename}: the root attribute '{name}' = {value!r} is not of type {kind.__name__}")


def dataset(f, path, ndim):
    if path not in f or not isinstance(f[path], h5py.Dataset):
        fail(f"{f.filename}: the dataset {path} is missing")
    d = f[path]
    if d.ndim != ndim:
        fail(f"{f.filename}: {path} has shape {d.shape}, expected {ndim} dimension(s)")
    return d


def load(path, k):
    """Reads and checks A (as CSC: A is symmetric, so its CSR arrays are its CSC arrays)
    and the first k right-hand sides as an n×k Fortran-ordered block."""
    if not os.path.isfile(path):
        fail(f"{path}: no such file (tensorfem bench solve --export writes it)")
    try:
        f = h5py.File(path, "r")
    except (OSError, ValueError) as e:
        fail(f"cannot open {path}: {e}")
    with f:
        n = attribute(f, "unknowns", int)
        nrhs = attribute(f, "nrhs", int)
        rtol = attribute(f, "rtol", float)
        description = attribute(f, "description", str)
        indptr = dataset(f, "/matrix/indptr", 1)[()]
        indices = dataset(f, "/matrix/indices", 1)[()]
        data = dataset(f, "/matrix/data", 1)[()]
        rhs = dataset(f, "/rhs", 2)
        if not 1 <= k <= nrhs:
            fail(f"{path} holds {nrhs} right-hand side(s); --nrhs {k} asks for 1 to {nrhs}")
        if rhs.shape != (nrhs, n):
            fail(f"{path}: /rhs has shape {rhs.shape}, expected ({nrhs}, {n}) from the attributes")
        b = rhs[:k]
    if not (np.isfinite(rtol) and rtol > 0):
        fail(f"{path}: rtol = {rtol} is not a positive number")
    if indptr.shape != (n + 1,):
        fail(f"{path}: /matrix/indptr has {indptr.size} entries, expected unknowns + 1 = {n + 1}")
    nnz = int(indptr[-1])
    if indptr[0] != 0 or np.any(np.diff(indptr.astype(np.int64)) < 0):
        fail(f"{path}: /matrix/indptr must start at 0 and never decrease")
    if indices.shape != (nnz,) or data.shape != (nnz,):
        fail(f"{path}: /matrix/indices and /matrix/data have {indices.size} and {data.size} "
             f"entries, expected indptr[n] = {nnz}")
    if nnz and not 0 <= int(indices.min()) <= int(indices.max()) < n:
        fail(f"{path}: /matrix/indices holds columns outside 0..{n - 1} "
             f"({int(indices.min())} to {int(indices.max())})")
    for name, values in (("/matrix/data", data), ("/rhs", b)):
        bad = ~np.isfinite(values)
        if bad.any():
            at = np.unravel_index(int(np.argmax(bad)), values.shape)
            fail(f"{path}: {name} holds a non-finite entry ({values[at]} at {tuple(map(int, at))})")
    # CHOLMOD's index type follows the arrays': 32-bit where it fits, as CHOLMOD itself prefers.
    itype = np.int32 if max(n, nnz) <= np.iinfo(np.int32).max else np.int64
    a = sp.csc_matrix((data.astype(np.float64), indices.astype(itype), indptr.astype(itype)), shape=(n, n))
    # scikit-sparse hands CHOLMOD the arrays as sorted without duplicates: make them so.
    a.sum_duplicates()
    # CHOLMOD reads one triangle only: an unsymmetric A would be solved as another matrix.
    scale = abs(a).max() if nnz else 0.0
    asymmetry = abs(a - a.T).max() if nnz else 0.0
    if asymmetry > 1e-12 * scale:
        fail(f"{path}: the matrix is not symmetric (max |A − Aᵀ| = {asymmetry:.3e}, max |A| = {scale:.3e})")
    # Column-major n×k, as CHOLMOD takes it: no copy inside the timed solve.
    return a, np.asfortranarray(b.T, dtype=np.float64), rtol, description


def library_versions():
    """SuiteSparse's and CHOLMOD's versions from the libraries scikit-sparse is linked to, and
    the BLAS they loaded (CHOLMOD's supernodal factorisation and block solve run in it)."""
    out = {}
    try:
        lib = ctypes.CDLL(cholmod.__file__)
        v = (ctypes.c_int * 3)()
        for key, symbol in (("suitesparse", "SuiteSparse_version"), ("cholmod", "cholmod_version")):
            try:
                getattr(lib, symbol)(v)
                out[key] = ".".join(map(str, v))
            except AttributeError:
                pass
    except OSError:
        pass
    try:
        with open("/proc/self/maps") as maps:
            libs = {line.split()[-1] for line in maps if "/" in line}
        blas = sorted(p for p in libs if "/libblas" in p or "openblas" in p.lower() or "mkl_rt" in p)
        if blas:
            out["blas"] = blas[0]
    except OSError:
        pass
    return out


def main():
    parser = argparse.ArgumentParser(
        description="CHOLMOD's factorisation and block solve of a problem written by "
        "`tensorfem bench solve --export`.")
    parser.add_argument("problem", help="PROBLEM.h5")
    parser.add_argument("--nrhs", type=int, required=True, help="right-hand sides to solve (the first K of /rhs)")
    parser.add_argument("--runs", type=int, default=3, help="timed factorisations and solves (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a line of text")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    a, b, rtol, description = load(args.problem, args.nrhs)
    n, k = a.shape[0], b.shape[1]

    analyse, numeric, factor_total, solve = [], [], [], []
    for _ in range(args.runs):
        factor = None  # frees the previous run's factor before the next is made
        try:
            t0 = time.perf_counter()
            factor = cholmod.analyze(a)
            t1 = time.perf_counter()
            factor.cholesky_inplace(a)
            t2 = time.perf_counter()
            # Two untimed solves first, as tensorfem's bench solve does: the timed solve runs
            # with the factor's workspace in place, not the first touch of it.
            factor(b)
            factor(b)
            t3 = time.perf_counter()
            x = factor(b)
            t4 = time.perf_counter()
        except cholmod.CholmodNotPositiveDefiniteError as e:
            fail(f"{args.problem}: the matrix is not positive definite (CHOLMOD's factorisation broke "
                 f"down at pivot {e.column} of the reordered matrix)")
        except cholmod.CholmodError as e:
            fail(f"{args.problem}: CHOLMOD failed: {e}")
        analyse.append(t1 - t0)
        numeric.append(t2 - t1)
        factor_total.append(t2 - t0)
        solve.append(t4 - t3)

    # The residual in f64 of every column of the last solve (all runs solve identically).
    r = np.linalg.norm(b - a @ x, axis=0)
    bn = np.linalg.norm(b, axis=0)
    rel = np.divide(r, bn, out=r.copy(), where=bn > 0)
    worst = int(np.argmax(rel)) if k else 0
    nnz_factor = int(factor.L().nnz)  # after the timing: L() converts the factor in place

    result = {
        "solver": "cholmod",
        "unknowns": n,
        "nonzeros": int(a.nnz),
        "nrhs": k,
        "runs": args.runs,
        "factor_seconds": min(factor_total),
        "factor_seconds_median": statistics.median(factor_total),
        "analyse_seconds": min(analyse),
        "numeric_factor_seconds": min(numeric),
        "solve_seconds": min(solve),
        "solve_seconds_median": statistics.median(solve),
        "max_relative_residual": float(rel[worst]),
        "nnz_factor": nnz_factor,
        "description": description,
        "versions": {"scikit-sparse": version("scikit-sparse"), **library_versions(),
                     "scipy": scipy.__version__, "numpy": np.__version__},
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"cholmod: {n:,} unknowns, {a.nnz:,} nonzeros, {k} right-hand side(s): "
              f"factor {result['factor_seconds']:.4f} s best, {result['factor_seconds_median']:.4f} s median "
              f"(analyse {result['analyse_seconds']:.4f} s, numeric {result['numeric_factor_seconds']:.4f} s); "
              f"solve {result['solve_seconds']:.4f} s best, {result['solve_seconds_median']:.4f} s median; "
              f"nnz(L) {nnz_factor:,}; max relative residual {result['max_relative_residual']:.2e} "
              f"(rtol {rtol:.0e}); {args.runs} run(s)")
    if not rel[worst] <= rtol:
        fail(f"right-hand side {worst} (row {worst} of /rhs): relative residual {rel[worst]:.3e} "
             f"exceeds rtol {rtol:.3e}", status=1)


if __name__ == "__main__":
    main()
