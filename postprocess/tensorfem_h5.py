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

    python3 postprocess/tensorfem_h5.py FILE    # prints what FILE holds

A file with a schema version this reader does not know is refused (SchemaError), rather
than read wrongly.
"""

import sys
from dataclasses import dataclass, field

import h5py
import numpy as np

SUPPORTED_SCHEMA_VERSIONS = (2,)


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
        lines.append(f"  operator {o}: {op.u.shape[0]} column(s) of {op.u.shape[1]} nodes, "
                     f"{len(op.cells)} cells, method {op.attrs.get('method', '?')}")
    if "relative_residual" in result.columns:
        r = result.columns["relative_residual"]
        lines.append(f"  max relative residual {np.max(r):.3e}")
    if "relative_l2_error" in result.columns:
        e = result.columns["relative_l2_error"]
        if np.isfinite(e).any():
            lines.append(f"  max relative L2 error {np.nanmax(e):.3e}")
    for name, value in result.fields.items():
        shape = value.shape if hasattr(value, "shape") else f"{len(value)} datasets"
        lines.append(f"  {name}: {shape}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tensorfem_h5.py FILE")
    try:
        print(describe(read(sys.argv[1])))
    except (SchemaError, OSError) as e:
        sys.exit(f"error: {e}")
