#!/usr/bin/env python3
"""Test of postprocess/build_rhs.py (make test): right-hand sides built from nodal data of
the manufactured solution u = (1 + t) sin(x) cos(y) on the flow around a square, solved by
tensorfem campaigns with mixed conditions (Dirichlet values per node from the file) and
pure Neumann conditions; the nodal solutions must converge to u at second order (to u less
its mean for pure Neumann), and multigrid campaigns on the same files must give the same
errors. Also the helper's refusals.

    python3 postprocess/test_build_rhs.py target/release/tensorfem
"""

import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
HELPER = os.path.join(HERE, "build_rhs.py")
U = "(1+t)*sin(x)*cos(y)"
F = "2*(1+t)*sin(x)*cos(y)"  # −Δu
FLUX = "(1+t)*(nx*cos(x)*cos(y)-ny*sin(x)*sin(y))"  # ∇u·n
STEPS = 2


def config(levels, outflow, method):
    # PSC's macro elements: the coarse triangles refined once (multigrid coarsens down to
    # the coarse mesh itself and takes no coarse_levels).
    macros = "" if method == "mg" else "coarse_levels = 1"
    return f"""backend = "cpu"
[mesh]
kind = "flow-around-square"
levels = {levels}
{macros}
[boundary]
inflow = "neumann"
outflow = {outflow}
walls = "neumann"
obstacle = "neumann"
[solver]
method = "{method}"
[campaign]
rhs = "hdf5"
batch_size = 2
directory = "run"
[campaign.input]
path = "rhs.h5"
"""


def solve(binary, folder, levels, outflow, method, helper_args):
    """Writes the config, the mesh and the right-hand sides; runs the campaign; returns
    the largest nodal error of every column against u (less its mean when `shift`)."""
    case = os.path.join(folder, f"{method}-{levels}" + ("-pure" if "neumann" in outflow else ""))
    os.makedirs(case)
    path = os.path.join(case, "campaign.toml")
    with open(path, "w") as f:
        f.write(config(levels, outflow, method))
    env = dict(os.environ, RUST_LOG="warn")
    mesh = os.path.join(case, "mesh.h5")
    subprocess.run([binary, "mesh", "--config", path, "--output", mesh], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, HELPER, "--mesh", mesh, "--output",
                    os.path.join(case, "rhs.h5"), "--f", F, "--steps", str(STEPS), "--t-end",
                    str(STEPS)] + helper_args, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([binary, "run", path], check=True, env=env, stdout=subprocess.DEVNULL)
    with h5py.File(os.path.join(case, "run", "campaign.h5"), "r") as f:
        g = f["operators/0"]
        xy = g["mesh/coordinates"][:]
        assert g.attrs["mesh_kind"] in (b"flow-around-square", "flow-around-square")
        errors = []
        for j in range(STEPS):
            t = j + 1.0
            exact = (1 + t) * np.sin(xy[:, 0]) * np.cos(xy[:, 1])
            d = g["u"][j] - exact
            errors.append(np.abs(d - d.mean()).max() if "neumann" in outflow else np.abs(d).max())
    return max(errors)


def refused(args, words):
    r = subprocess.run([sys.executable, HELPER] + args, capture_output=True, text=True)
    assert r.returncode != 0 and all(w in r.stderr for w in words), (args, r.stderr)


def main(binary):
    folder = tempfile.mkdtemp(prefix="tensorfem-build-rhs-")
    try:
        neumann = [a for part in ("inflow", "walls", "obstacle")
                   for a in ("--neumann", f"{part}={FLUX}")]
        mixed = [solve(binary, folder, levels, '{ condition = "dirichlet", value = "hdf5" }',
                       "psc-m1", neumann + ["--dirichlet", f"outflow={U}"])
                 for levels in (3, 4)]
        assert mixed[0] < 0.03 and mixed[0] / mixed[1] > 3.0, f"mixed: {mixed}"
        pure = [solve(binary, folder, levels, '"neumann"', "cholesky",
                      neumann + ["--neumann", f"outflow={FLUX}"])
                for levels in (3, 4)]
        assert pure[0] < 0.03 and pure[0] / pure[1] > 3.0, f"pure Neumann: {pure}"
        # Multigrid campaigns on the same meshes and data: the same discrete solutions.
        mixed_mg = [solve(binary, folder, levels, '{ condition = "dirichlet", value = "hdf5" }',
                          "mg", neumann + ["--dirichlet", f"outflow={U}"])
                    for levels in (3, 4)]
        pure_mg = [solve(binary, folder, levels, '"neumann"', "mg",
                         neumann + ["--neumann", f"outflow={FLUX}"])
                   for levels in (3, 4)]
        for name, mg, reference in (("mixed", mixed_mg, mixed), ("pure Neumann", pure_mg, pure)):
            for a, b in zip(mg, reference):
                assert abs(a - b) <= 1e-4 * b, f"mg {name}: {mg} vs {reference}"
        # A file built for another mesh (levels 3 for a campaign on levels 4) is refused.
        shutil.copy(os.path.join(folder, "psc-m1-3", "rhs.h5"),
                    os.path.join(folder, "psc-m1-4", "rhs.h5"))
        with h5py.File(os.path.join(folder, "psc-m1-4", "rhs.h5"), "a") as f:
            del f["rhs"]
            f["rhs"] = np.zeros((STEPS, len(h5py.File(os.path.join(
                folder, "psc-m1-4", "mesh.h5"), "r")["mesh/load_nodes"])))
            del f["dirichlet"]
            f["dirichlet"] = np.zeros((STEPS, 17))
        r = subprocess.run([binary, "run", "--fresh", os.path.join(folder, "psc-m1-4", "campaign.toml")],
                           capture_output=True, text=True, env=dict(os.environ, RUST_LOG="warn"))
        assert r.returncode == 2 and "built for another mesh" in r.stderr, r.stderr
        mesh = os.path.join(folder, "psc-m1-3", "mesh.h5")
        out = os.path.join(folder, "x.h5")
        refused(["--mesh", mesh, "--output", out, "--neumann", "outflow=1"],
                ["outflow is a Dirichlet part"])
        refused(["--mesh", mesh, "--output", out, "--neumann", "inflw=1"],
                ["no boundary part 'inflw'", "inflow"])
        refused(["--mesh", mesh, "--output", out, "--dirichlet", "walls=0"],
                ["part walls is not a Dirichlet part"])
        print(f"build_rhs test: passed (max nodal errors, levels 3 → 4: mixed {mixed[0]:.2e} → "
              f"{mixed[1]:.2e}, pure Neumann {pure[0]:.2e} → {pure[1]:.2e}; multigrid the same)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "target/release/tensorfem")
