#!/usr/bin/env python3
"""Read tensorfem's HDF5 files into NumPy arrays (layout: docs/hdf5.md).

    import sys; sys.path.insert(0, "postprocess")
    import tensorfem_h5
    c = tensorfem_h5.read("out/quickstart/campaign.h5")    # a campaign, a single run or Stokes run
    op = c.operators[0]
    op.u[5]                  # column 5 of operator 0: values at every node, boundary included
    op.coordinates[:, 0]     # x of every node (nodes lexicographic, x fastest)
    op.cells                 # cell -> nodes
    c.columns["relative_residual"], c.columns["t"]
    c.column(7)              # the solution of campaign column 7, whatever its operator

    s = tensorfem_h5.read("out/stokes-study/campaign.h5")  # a Stokes study (schema 3)
    op = s.operators[0]      # a StokesOperator
    op.velocity[0]           # [lattice nodes, 2]: (u_x, u_y) at op.velocity_coordinates
    op.pressure[0]           # pressure at op.pressure_coordinates (Q1 nodes)

    grids = tensorfem_h5.read_xdmf("out/stokes-study/campaign.xdmf")   # what ParaView sees
    grids["operator_0_velocity"].attributes["velocity_0"]               # [nodes, 2]

    python3 postprocess/tensorfem_h5.py FILE    # prints what FILE holds (.h5 or .xdmf)

A file with a schema version this reader does not know is refused (SchemaError), rather
than read wrongly.
"""

import os
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field

import h5py
import numpy as np

# 2: campaigns of Poisson operators, single and Stokes runs; 3: also Stokes studies in
# campaigns (operators with velocity and pressure, root attribute problem).
SUPPORTED_SCHEMA_VERSIONS = (2, 3)


class SchemaError(ValueError):
    """The file is not one this reader understands."""


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _attrs(obj):
    return {k: (_text(v) if isinstance(v, (bytes, str)) else v) for k, v in obj.attrs.items()}


@dataclass
class Operator:
    """One mesh with its solutions: `u[c]` is column c at every node."""

    coordinates: np.ndarray
    cells: np.ndarray
    on_boundary: np.ndarray
    u: np.ndarray
    exact: np.ndarray | None
    attrs: dict


@dataclass
class StokesOperator:
    """One Stokes solver of a study: `velocity[c]` is column c's (u_x, u_y) at every node
    of the Q2 lattice, `pressure[c]` its pressure at every Q1 node (integral mean zero)."""

    velocity_coordinates: np.ndarray
    velocity_cells: np.ndarray
    pressure_coordinates: np.ndarray
    pressure_cells: np.ndarray
    velocity: np.ndarray
    pressure: np.ndarray
    exact_velocity: np.ndarray | None
    exact_pressure: np.ndarray | None
    attrs: dict


@dataclass
class Result:
    """What a file holds: `kind` is "campaign", "single" or "stokes"."""

    kind: str
    path: str
    attrs: dict
    operators: list = field(default_factory=list)
    columns: dict = field(default_factory=dict)
    perf: dict = field(default_factory=dict)
    fields: dict = field(default_factory=dict)

    def column(self, j):
        """The nodal solution of campaign column j (or of column j of a single run)."""
        if self.kind == "single":
            return self.operators[0].u[j]
        o, i = int(self.columns["operator"][j]), int(self.columns["index"][j])
        return self.operators[o].u[i]


def _mesh(group):
    return (group["coordinates"][...], group["cells"][...], group["on_boundary"][...].astype(bool))


def _operator(mesh_group, solution_group):
    coordinates, cells, on_boundary = _mesh(mesh_group)
    exact = solution_group["exact"][...] if "exact" in solution_group else None
    return Operator(coordinates, cells, on_boundary, solution_group["u"][...], exact,
                    _attrs(solution_group))


def _stokes_operator(g):
    return StokesOperator(
        g["velocity_mesh/coordinates"][...], g["velocity_mesh/cells"][...],
        g["pressure_mesh/coordinates"][...], g["pressure_mesh/cells"][...],
        g["velocity"][...], g["pressure"][...],
        g["exact_velocity"][...] if "exact_velocity" in g else None,
        g["exact_pressure"][...] if "exact_pressure" in g else None, _attrs(g))


def _table(group):
    out = {}
    for name, item in group.items():
        if isinstance(item, h5py.Dataset):
            values = item[...]
            if values.dtype.kind in "OS":
                values = np.array([_text(v) for v in values])
            out[name] = values
    return out


def read(path):
    """Reads a campaign.h5, a single run's file or a Stokes run's file."""
    with h5py.File(path, "r") as f:
        attrs = _attrs(f)
        version = attrs.get("schema_version")
        if version is None:
            raise SchemaError(f"{path}: no schema_version attribute: not a file tensorfem wrote")
        if int(version) not in SUPPORTED_SCHEMA_VERSIONS:
            raise SchemaError(
                f"{path}: schema version {int(version)}, this reader knows "
                f"{', '.join(map(str, SUPPORTED_SCHEMA_VERSIONS))}: use the postprocess/ of the "
                f"tensorfem that wrote it (tensorfem {attrs.get('tensorfem_version', '?')}, "
                f"git {attrs.get('git_revision', '?')})")
        if "operators" in f:
            result = Result("campaign", path, attrs)
            for o in sorted(f["operators"], key=int):
                g = f[f"operators/{o}"]
                if "velocity" in g:
                    result.operators.append(_stokes_operator(g))
                else:
                    result.operators.append(_operator(g["mesh"], g))
            result.columns = _table(f["columns"])
            result.perf = _table(f["perf"])
            result.perf["ranks"] = _table(f["perf/ranks"])
            return result
        if attrs.get("problem") == "stokes-q2q1":
            result = Result("stokes", path, attrs)
            for name, item in f.items():
                if isinstance(item, h5py.Dataset):
                    result.fields[name] = item[...]
                elif isinstance(item, h5py.Group):
                    result.fields[name] = _table(item)
            return result
        if "solution" in f and "mesh" in f:
            result = Result("single", path, attrs)
            result.operators.append(_operator(f["mesh"], f["solution"]))
            result.columns = {k: v for k, v in _table(f["solution"]).items() if k not in ("u", "exact")}
            return result
        raise SchemaError(f"{path}: neither a campaign (/operators), a single run (/solution) "
                          f"nor a Stokes run (problem = stokes-q2q1)")


def describe(result):
    lines = [f"{result.path}: {result.kind} (schema {result.attrs['schema_version']}, "
             f"tensorfem {result.attrs.get('tensorfem_version', '?')})"]
    for o, op in enumerate(result.operators):
        if isinstance(op, StokesOperator):
            lines.append(f"  operator {o}: stokes n = {op.attrs['n']}, "
                         f"{op.attrs['preconditioner']} ({op.attrs['precision']}): "
                         f"{op.velocity.shape[0]} column(s), velocity at {op.velocity.shape[1]} "
                         f"lattice nodes, pressure at {op.pressure.shape[1]} nodes")
            continue
        lines.append(f"  operator {o}: {op.u.shape[0]} column(s) of {op.u.shape[1]} nodes, "
                     f"{len(op.cells)} cells, method {op.attrs.get('method', '?')}")
    if "relative_residual" in result.columns:
        r = result.columns["relative_residual"]
        lines.append(f"  max relative residual {np.max(r):.3e}")
    for name in ("relative_l2_error", "velocity_l2_error", "pressure_l2_error"):
        e = result.columns.get(name)
        if e is not None and np.isfinite(e).any():
            lines.append(f"  max {name.replace('_', ' ').replace('l2', 'L2')} {np.nanmax(e):.3e}")
    for name, value in result.fields.items():
        shape = value.shape if hasattr(value, "shape") else f"{len(value)} datasets"
        lines.append(f"  {name}: {shape}")
    return "\n".join(lines)


@dataclass
class XdmfGrid:
    """One grid of an XDMF file as a reader sees it: its topology type, the cells (node
    indices), the node coordinates and every nodal attribute (name -> [nodes] or
    [nodes, components])."""

    name: str
    topology: str
    cells: np.ndarray
    points: np.ndarray
    attributes: dict


def _xdmf_data(item, folder, files):
    """The array a DataItem stands for: an HDF5 dataset (Format="HDF"), inline XML
    numbers, or a HyperSlab of another item (start, stride and count per axis)."""
    dims = tuple(int(d) for d in item.get("Dimensions").split())
    if item.get("ItemType") == "HyperSlab":
        selection, source = list(item)
        start, stride, count = _xdmf_data(selection, folder, files).astype(int)
        data = _xdmf_data(source, folder, files)
        index = tuple(slice(b, b + s * c, s) for b, s, c in zip(start, stride, count))
        return data[index].reshape(dims)
    if item.get("Format") == "HDF":
        name, dataset = item.text.strip().split(":", 1)
        if name not in files:
            files[name] = h5py.File(os.path.join(folder, name), "r")
        data = files[name][dataset][...]
        if data.shape != dims:
            raise SchemaError(f"{dataset}: shape {data.shape}, the XDMF says {dims}")
        return data
    return np.array(item.text.split(), dtype=float).reshape(dims)


def read_xdmf(path):
    """Reads an XDMF sidecar and the HDF5 data it points to: {grid name: XdmfGrid}."""
    folder, files = os.path.dirname(os.path.abspath(path)), {}
    try:
        grids = {}
        for grid in ElementTree.parse(path).getroot().iter("Grid"):
            if grid.get("GridType") != "Uniform":
                continue
            topology, geometry = grid.find("Topology"), grid.find("Geometry")
            attributes = {}
            for a in grid.findall("Attribute"):
                values = _xdmf_data(a.find("DataItem"), folder, files)
                values = values.reshape(values.shape[1:]) if values.shape[0] == 1 else values
                attributes[a.get("Name")] = values
            grids[grid.get("Name")] = XdmfGrid(
                grid.get("Name"), topology.get("TopologyType"),
                _xdmf_data(topology.find("DataItem"), folder, files),
                _xdmf_data(geometry.find("DataItem"), folder, files), attributes)
        return grids
    finally:
        for f in files.values():
            f.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tensorfem_h5.py FILE")
    try:
        if sys.argv[1].endswith(".xdmf"):
            for g in read_xdmf(sys.argv[1]).values():
                print(f"{g.name}: {g.topology}, {len(g.cells)} cells, {len(g.points)} nodes, "
                      f"fields {', '.join(g.attributes)}")
        else:
            print(describe(read(sys.argv[1])))
    except (SchemaError, OSError, ElementTree.ParseError) as e:
        sys.exit(f"error: {e}")
