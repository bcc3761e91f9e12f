#!/usr/bin/env python3
"""Builds a right-hand-side file for campaign.rhs = "hdf5" from nodal data (docs/hdf5.md).

The mesh comes from `tensorfem mesh --config CONFIG --output mesh.h5`: the mesh the
campaign solves on, with the nodes its boundary conditions leave as loads. Each column is

    b_i = ∫ f_h φ_i + ∫_{Γ_N} g_h φ_i     for every load node i (node order),

with f_h and g_h the piecewise-linear (bilinear) interpolants of the nodal values of f and
of the Neumann flux g_N = ∂u/∂n; tensorfem itself subtracts the Dirichlet lifting. Dirichlet
values per node go into the dataset `dirichlet` (shape [columns, Dirichlet nodes], for
parts with value = "hdf5").

As a library:
    mesh = read_mesh("mesh.h5")
    b = load_vector(mesh, f_nodal, {"inflow": g_nodal_or_number})
    write_input("rhs.h5", [b, ...], dirichlet=[g_d, ...])

As a command, with numpy expressions in x, y, t (and the outward normal nx, ny for fluxes):
    python3 postprocess/build_rhs.py --mesh mesh.h5 --output rhs.h5 \\
        --f "exp(-((x-1)**2+(y-0.5)**2)/0.05)" --neumann "inflow=-(1+0.5*sin(2*pi*t))" \\
        --dirichlet "outflow=0" --steps 16 --t-end 1
Column j (1-based) is the time t_j = t_end·j/steps, as campaign.rhs = "time-series" numbers
its steps; without --steps there is one column at t = 0.
"""

import argparse
import sys
from dataclasses import dataclass

import h5py
import numpy as np


@dataclass
class Mesh:
    coords: np.ndarray  # [nodes, 2]
    cells: np.ndarray  # [cells, 3 or 4], counterclockwise
    edges: np.ndarray  # boundary edges [edges, 2], the domain on their left
    edge_part: np.ndarray  # part index of each boundary edge
    parts: list  # part names
    load_nodes: np.ndarray  # the nodes a right-hand-side row holds, node order
    dirichlet_nodes: np.ndarray  # the nodes the dataset dirichlet holds, node order
    fingerprint: str = ""  # the mesh's, copied into the file so tensorfem can check it

    def part(self, name):
        if name not in self.parts:
            raise ValueError(f"no boundary part '{name}' (this mesh's parts: {', '.join(self.parts)})")
        return self.parts.index(name)

    def normals(self):
        """Outward unit normal of every boundary edge: (b − a) turned clockwise."""
        d = self.coords[self.edges[:, 1]] - self.coords[self.edges[:, 0]]
        length = np.hypot(d[:, 0], d[:, 1])
        return np.stack([d[:, 1] / length, -d[:, 0] / length], axis=1), length


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def read_mesh(path):
    """The mesh of a `tensorfem mesh` file (or the /mesh group of any tensorfem output)."""
    with h5py.File(path, "r") as f:
        g = f["mesh"]
        if "load_nodes" not in g:
            raise ValueError(f"{path}: no /mesh/load_nodes; write the mesh with `tensorfem mesh --config`")
        names = text(g.attrs["boundary_parts"])
        return Mesh(
            coords=g["coordinates"][:].astype(np.float64),
            cells=g["cells"][:].astype(np.int64),
            edges=g["boundary_edges"][:].astype(np.int64),
            edge_part=g["boundary_edge_part"][:].astype(np.int64),
            parts=names.split("\n") if names else [],
            load_nodes=g["load_nodes"][:].astype(np.int64),
            dirichlet_nodes=g["dirichlet_nodes"][:].astype(np.int64),
            fingerprint=text(g.attrs.get("fingerprint", "")),
        )


def mass_times(mesh, values):
    """∫ v_h φ_i at every node for the interpolant v_h of nodal `values`."""
    xy, cells = mesh.coords, mesh.cells
    out = np.zeros(len(xy))
    if cells.shape[1] == 3:
        a, b, c = (xy[cells[:, k]] for k in range(3))
        area = 0.5 * np.abs((b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1])
                            - (c[:, 0] - a[:, 0]) * (b[:, 1] - a[:, 1]))
        v = values[cells]
        # the P1 element mass matrix area/12 [[2,1,1],[1,2,1],[1,1,2]]
        local = area[:, None] / 12.0 * (v + v.sum(axis=1, keepdims=True))
        np.add.at(out, cells, local)
        return out
    # Q1: 2×2 Gauss points on the bilinear map of the reference square
    g = 0.5 / np.sqrt(3.0)
    for s in (0.5 - g, 0.5 + g):
        for r in (0.5 - g, 0.5 + g):
            n = np.array([(1 - r) * (1 - s), r * (1 - s), r * s, (1 - r) * s])
            dn_dr = np.array([-(1 - s), 1 - s, s, -s])
            dn_ds = np.array([-(1 - r), -r, r, 1 - r])
            x, y = xy[cells, 0], xy[cells, 1]
            det = (x @ dn_dr) * (y @ dn_ds) - (x @ dn_ds) * (y @ dn_dr)
            vq = values[cells] @ n
            np.add.at(out, cells, (0.25 * det * vq)[:, None] * n[None, :])
    return out


def neumann_times(mesh, fluxes):
    """∫_{Γ_N} g_h φ_i at every node: `fluxes` maps a part to a number or to the values at
    both ends of each of its edges ([edges of the part, 2]); g_h is linear along an edge."""
    out = np.zeros(len(mesh.coords))
    _, length = mesh.normals()
    for name, g in fluxes.items():
        sel = mesh.edge_part == mesh.part(name)
        ends = np.broadcast_to(np.asarray(g, dtype=np.float64), (sel.sum(), 2)) \
            if np.ndim(g) == 0 else np.asarray(g, dtype=np.float64)
        if ends.shape != (sel.sum(), 2):
            raise ValueError(f"part {name}: {ends.shape} flux values, expected ({sel.sum()}, 2)")
        lengths, edges = length[sel], mesh.edges[sel]
        np.add.at(out, edges[:, 0], lengths / 6.0 * (2 * ends[:, 0] + ends[:, 1]))
        np.add.at(out, edges[:, 1], lengths / 6.0 * (ends[:, 0] + 2 * ends[:, 1]))
    return out


def load_vector(mesh, f, fluxes=None):
    """b on the load nodes: ∫ f_h φ_i + ∫_{Γ_N} g_h φ_i (f: nodal values or a number)."""
    f = np.broadcast_to(np.asarray(f, dtype=np.float64), (len(mesh.coords),))
    full = mass_times(mesh, f) + neumann_times(mesh, fluxes or {})
    dirichlet = set(mesh.dirichlet_nodes.tolist())
    for name in fluxes or {}:
        ends = mesh.edges[mesh.edge_part == mesh.part(name)]
        if all(v in dirichlet for v in ends.ravel()):
            raise ValueError(f"part {name} is a Dirichlet part of this mesh: its flux would be ignored")
    return full[mesh.load_nodes]


def write_input(path, columns, dirichlet=None, dataset="rhs", mesh=None):
    """Writes the right-hand sides (one row per column) and, when given, the Dirichlet
    values (one row per column, or one vector for all); with the mesh, its fingerprint
    (a campaign on another mesh refuses the file)."""
    with h5py.File(path, "w") as f:
        f[dataset] = np.asarray(columns, dtype=np.float64)
        if mesh is not None and mesh.fingerprint:
            f.attrs["mesh_fingerprint"] = mesh.fingerprint
        if dirichlet is not None:
            f["dirichlet"] = np.asarray(dirichlet, dtype=np.float64)


def evaluate(expression, x, y, t, nx=None, ny=None):
    scope = {name: getattr(np, name) for name in
             ("sin", "cos", "tan", "exp", "log", "sqrt", "sinh", "cosh", "tanh", "pi", "abs",
              "arctan2", "minimum", "maximum", "where", "hypot")}
    scope.update(x=x, y=y, t=t)
    if nx is not None:
        scope.update(nx=nx, ny=ny)
    value = eval(expression, {"__builtins__": {}}, scope)  # noqa: S307 (the user's own formula)
    return np.broadcast_to(np.asarray(value, dtype=np.float64), np.shape(x)).copy()


def part_expressions(items, flag):
    parts = {}
    for item in items or []:
        name, sep, expression = item.partition("=")
        if not sep or not name:
            sys.exit(f"error: {flag} {item!r}: write PART=EXPRESSION")
        parts[name.strip()] = expression
    return parts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh", required=True, help="the file of `tensorfem mesh --config`")
    parser.add_argument("--output", required=True, help="the right-hand-side file to write")
    parser.add_argument("--f", default="0", help="the source f(x, y, t)")
    parser.add_argument("--neumann", action="append", metavar="PART=EXPR",
                        help="flux ∂u/∂n on a Neumann part, in x, y, t, nx, ny (default 0)")
    parser.add_argument("--dirichlet", action="append", metavar="PART=EXPR",
                        help="values on a Dirichlet part read from the file (value = \"hdf5\")")
    parser.add_argument("--steps", type=int, help="columns at t_j = t_end·j/steps")
    parser.add_argument("--t-end", type=float, default=1.0)
    parser.add_argument("--dataset", default="rhs")
    args = parser.parse_args()
    try:
        mesh = read_mesh(args.mesh)
        neumann = part_expressions(args.neumann, "--neumann")
        dirichlet = part_expressions(args.dirichlet, "--dirichlet")
        for name in list(neumann) + list(dirichlet):
            mesh.part(name)
        on_dirichlet = np.zeros(len(mesh.coords), dtype=bool)
        on_dirichlet[mesh.dirichlet_nodes] = True
        for name in dirichlet:
            if not on_dirichlet[mesh.edges[mesh.edge_part == mesh.part(name)]].all():
                raise ValueError(f"part {name} is not a Dirichlet part of this mesh")
        times = [0.0] if not args.steps else \
            [args.t_end * j / args.steps for j in range(1, args.steps + 1)]
        x, y = mesh.coords[:, 0], mesh.coords[:, 1]
        normals, _ = mesh.normals()
        rows, values = [], []
        for t in times:
            fluxes = {}
            for name, expression in neumann.items():
                sel = mesh.edge_part == mesh.part(name)
                ends = mesh.edges[sel]
                n = np.repeat(normals[sel][:, None, :], 2, axis=1)
                fluxes[name] = evaluate(expression, x[ends], y[ends], t, n[..., 0], n[..., 1])
            rows.append(load_vector(mesh, evaluate(args.f, x, y, t), fluxes))
            if dirichlet:
                g = np.full(len(mesh.coords), np.nan)
                for name, expression in dirichlet.items():
                    nodes = np.unique(mesh.edges[mesh.edge_part == mesh.part(name)])
                    g[nodes] = evaluate(expression, x[nodes], y[nodes], t)
                missing = np.isnan(g[mesh.dirichlet_nodes])
                if missing.any():
                    raise ValueError(f"{missing.sum()} Dirichlet nodes have no --dirichlet value "
                                     "(give one for every Dirichlet part)")
                values.append(g[mesh.dirichlet_nodes])
        write_input(args.output, rows, values if dirichlet else None, args.dataset, mesh)
    except (ValueError, KeyError, OSError, SyntaxError, NameError) as e:
        sys.exit(f"error: {e}")
    print(f"{args.output}: {len(rows)} column(s) of {len(mesh.load_nodes)} load nodes"
          + (f", Dirichlet values on {len(mesh.dirichlet_nodes)} nodes" if dirichlet else ""))


if __name__ == "__main__":
    main()
