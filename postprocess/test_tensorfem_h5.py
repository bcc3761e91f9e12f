#!/usr/bin/env python3
"""Test of postprocess/tensorfem_h5.py (make test): tensorfem writes a single run, a
campaign, a Stokes run and a Stokes study into a temporary folder; the reader must give what h5py reads
directly, solutions in the node order of the coordinates (compared with the exact solution
evaluated at those coordinates), and refuse an unknown schema version.

    python3 postprocess/test_tensorfem_h5.py target/release/tensorfem
"""

import math
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorfem_h5  # noqa: E402


def run(binary, folder, name, body):
    path = os.path.join(folder, f"{name}.toml")
    with open(path, "w") as f:
        f.write(body)
    env = dict(os.environ, RUST_LOG="warn")
    subprocess.run([binary, "run", path], check=True, env=env, stdout=subprocess.DEVNULL)


def main(binary):
    folder = tempfile.mkdtemp(prefix="tensorfem-reader-")
    try:
        run(binary, folder, "single",
            '[mesh]\nn = 16\n[problem]\nk = [1, 2]\n[solver]\nmethod = "cholesky"\n'
            '[output]\npath = "single.h5"\n')
        single = tensorfem_h5.read(os.path.join(folder, "single.h5"))
        assert single.kind == "single" and len(single.operators) == 1
        op = single.operators[0]
        assert op.u.shape == (2, 17 * 17) and op.coordinates.shape == (17 * 17, 2)
        x, y = op.coordinates[:, 0], op.coordinates[:, 1]
        for c, k in enumerate([1, 2]):
            exact = np.sin(k * math.pi * x) * np.sin(k * math.pi * y)
            assert np.allclose(op.exact[c], exact, atol=1e-14), "exact solution in node order"
            assert np.max(np.abs(op.u[c] - exact)) < 0.05 * k * k, "solution in node order"
        assert np.all(op.u[:, op.on_boundary] == 0.0)
        with h5py.File(os.path.join(folder, "single.h5")) as f:
            assert np.array_equal(single.column(1), f["solution/u"][1])

        run(binary, folder, "campaign",
            '[mesh]\nn = 16\n[solver]\nmethod = "cholesky"\n[campaign]\nrhs = "study"\n'
            'batch_size = 2\ndirectory = "study"\n[campaign.study]\nk = [1, 2, 3]\n'
            'h0 = [0.25]\nmethod = ["cholesky", "psc-m1"]\n')
        path = os.path.join(folder, "study", "campaign.h5")
        campaign = tensorfem_h5.read(path)
        assert campaign.kind == "campaign" and len(campaign.operators) == 2
        with h5py.File(path) as f:
            for j in range(len(campaign.columns["operator"])):
                o, i = f["columns/operator"][j], f["columns/index"][j]
                assert np.array_equal(campaign.column(j), f[f"operators/{o}/u"][i])
            assert np.array_equal(campaign.columns["relative_residual"], f["columns/relative_residual"][...])
        assert np.max(campaign.columns["relative_residual"]) < 1e-10
        assert len(campaign.perf["ranks"]["wall_seconds"]) == 1
        grids = tensorfem_h5.read_xdmf(os.path.join(folder, "study", "campaign.xdmf"))
        assert grids["operator_1"].topology == "Quadrilateral"
        assert np.array_equal(grids["operator_1"].attributes["u_2"], campaign.operators[1].u[2])
        assert np.array_equal(grids["operator_0"].points, campaign.operators[0].coordinates)

        run(binary, folder, "stokes-study",
            '[mesh]\nelement = "q2-q1"\n[solver]\nmethod = "stokes"\n[campaign]\n'
            'rhs = "study"\ndirectory = "stokes-study"\nstore_exact = true\n[campaign.study]\nn = [8, 16]\n')
        study = tensorfem_h5.read(os.path.join(folder, "stokes-study", "campaign.h5"))
        assert study.kind == "campaign" and len(study.operators) == 2
        op = study.operators[1]
        assert isinstance(op, tensorfem_h5.StokesOperator)
        assert op.velocity.shape == (1, 33 * 33, 2) and op.pressure.shape == (1, 17 * 17)
        x, y = op.velocity_coordinates[:, 0], op.velocity_coordinates[:, 1]
        a = x * (1 - x) * (2 * x - 1) * (6 * y * y - 6 * y + 1)
        assert np.allclose(op.exact_velocity[0, :, 0], a, atol=1e-14), "velocity (x, y) in node order"
        assert np.abs(op.velocity[0] - op.exact_velocity[0]).max() < 1e-5
        assert np.max(study.columns["velocity_l2_error"]) < 1e-3

        run(binary, folder, "stokes",
            '[mesh]\nelement = "q2-q1"\nn = 8\n[solver]\nmethod = "stokes"\n'
            '[output]\npath = "stokes.h5"\n')
        stokes = tensorfem_h5.read(os.path.join(folder, "stokes.h5"))
        assert stokes.kind == "stokes", stokes.kind
        assert stokes.fields["pressure"].shape == (9, 9) and "velocity" in stokes.fields, stokes.fields

        future = os.path.join(folder, "future.h5")
        shutil.copy(os.path.join(folder, "single.h5"), future)
        with h5py.File(future, "r+") as f:
            f.attrs["schema_version"] = np.uint32(99)
        try:
            tensorfem_h5.read(future)
            raise AssertionError("schema version 99 was read")
        except tensorfem_h5.SchemaError as e:
            assert "schema version 99" in str(e), e
        print("postprocess/tensorfem_h5.py: single run, campaign (2 operators) and its XDMF, "
              "Stokes run, Stokes study and an unknown schema version read as expected")
    finally:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/release/tensorfem")
