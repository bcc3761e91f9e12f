#!/usr/bin/env python3
"""Checks a Stokes study's campaign.xdmf as ParaView would read it (tests/campaign.rs):
every operator has a Q2 velocity grid (Quadrilateral_9 in VTK node order) and a Q1
pressure grid, its fields are the datasets of campaign.h5, and they agree with the
manufactured solution, evaluated here from its formula, at the grid's coordinates; the L2
errors converge at the element's rates and FGMRES's iterations do not grow with n.

    python3 tests/python/stokes_study_xdmf.py CAMPAIGN_DIR
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "postprocess"))
import tensorfem_h5  # noqa: E402


def a(s):
    return s * (1 - s) * (2 * s - 1)


def b(s):
    return 6 * s * s - 6 * s + 1


def main(folder):
    grids = tensorfem_h5.read_xdmf(os.path.join(folder, "campaign.xdmf"))
    result = tensorfem_h5.read(os.path.join(folder, "campaign.h5"))
    assert result.attrs["problem"] == "stokes-q2q1", result.attrs
    assert len(grids) == 2 * len(result.operators), sorted(grids)
    nodal = {}
    for o, op in enumerate(result.operators):
        n = int(op.attrs["n"])
        m = 2 * n + 1
        v, p = grids[f"operator_{o}_velocity"], grids[f"operator_{o}_pressure"]
        assert v.topology == "Quadrilateral_9" and v.cells.shape == (n * n, 9), (v.topology, v.cells.shape)
        assert v.points.shape == (m * m, 2)
        assert p.topology == "Quadrilateral" and p.cells.shape == (n * n, 4)
        assert p.points.shape == ((n + 1) ** 2, 2)

        # VTK's biquadratic order: corners counterclockwise, edge midpoints, centre.
        xy = v.points[v.cells]
        c = xy[:, :4]
        area = 0.5 * sum(c[:, i, 0] * c[:, (i + 1) % 4, 1] - c[:, (i + 1) % 4, 0] * c[:, i, 1]
                         for i in range(4))
        assert np.allclose(area, 1.0 / n**2), "corners counterclockwise, cells of area h²"
        for k, (i, j) in enumerate([(0, 1), (1, 2), (2, 3), (3, 0)]):
            assert np.allclose(xy[:, 4 + k], (c[:, i] + c[:, j]) / 2), f"midpoint {k}"
        assert np.allclose(xy[:, 8], c.mean(axis=1)), "centre"

        # What ParaView reads is what campaign.h5 holds.
        u, ph = v.attributes["velocity_0"], p.attributes["pressure_0"]
        assert u.shape == (m * m, 2) and ph.shape == ((n + 1) ** 2,)
        assert np.array_equal(u, op.velocity[0]) and np.array_equal(ph, op.pressure[0])

        x, y = v.points[:, 0], v.points[:, 1]
        exact = np.stack([a(x) * b(y), -a(y) * b(x)], axis=1)
        assert np.allclose(v.attributes["exact_velocity_0"], exact, rtol=0, atol=1e-14)
        px, py = p.points[:, 0], p.points[:, 1]
        exact_p = px**2 - 3 * py**2 + 8 / 3 * px * py
        assert np.allclose(p.attributes["exact_pressure_0"], exact_p, rtol=0, atol=1e-14)
        # The pressure is determined up to a constant: compare without the mean difference.
        diff = ph - exact_p
        key = (op.attrs["preconditioner"], str(op.attrs["precision"]))
        nodal.setdefault(key, {})[n] = (np.abs(u - exact).max(), np.abs(diff - diff.mean()).max())

    cols = result.columns
    assert np.max(cols["relative_residual"]) <= 1e-7, cols["relative_residual"]
    # At the nodes the Q2-Q1 solution of this problem is exact up to the solver's
    # tolerance (nodal superconvergence): what is left is FGMRES's rtol = 1e-8.
    for key, by_n in nodal.items():
        for n, (eu, ep) in by_n.items():
            assert eu < 1e-5 and ep < 1e-3, (key, n, eu, ep)
    # Rates of the L2 errors: velocity O(h³), pressure O(h²); iterations do not grow with n.
    for key in nodal:
        rows = [j for j, o in enumerate(cols["operator"])
                if (result.operators[o].attrs["preconditioner"],
                    str(result.operators[o].attrs["precision"])) == key]
        ns = [int(result.operators[cols["operator"][j]].attrs["n"]) for j in rows]
        first, second = rows[ns.index(16)], rows[ns.index(32)]
        rate_u = cols["velocity_l2_error"][first] / cols["velocity_l2_error"][second]
        rate_p = cols["pressure_l2_error"][first] / cols["pressure_l2_error"][second]
        assert 7 < rate_u < 9 and 3.5 < rate_p < 4.5, (key, rate_u, rate_p)
        assert cols["iterations"][second] <= cols["iterations"][first] + 2, (key, cols["iterations"])
    print(f"stokes study xdmf ok: {len(result.operators)} operators, {len(grids)} grids")


if __name__ == "__main__":
    main(sys.argv[1])
