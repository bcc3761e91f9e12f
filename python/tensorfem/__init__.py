"""tensorfem from Python: finite-element Poisson problems set up once and solved for
blocks of right-hand sides, on the CPU or a GPU.

    import numpy as np
    import tensorfem

    mesh = tensorfem.Mesh.unit_square(128)                  # Q1, u = 0 on the boundary
    solver = tensorfem.Solver(mesh, method="psc-m1", precision="f32")
    x, y = mesh.nodes[mesh.unknowns].T
    B = mesh.load_vector(lambda x, y: np.sin(np.pi * x) * np.sin(np.pi * y))
    X = solver.solve(np.column_stack([B, 2 * B]))         # one column per load
    solver.info["relative_residual"]                        # verified in f64

Conventions (docs/python.md):
- Rows of B and X are the mesh's unknowns, `mesh.unknowns`: the nodes off the Dirichlet
  parts, in node order (for pure Neumann: every node).
- B holds assembled loads b_i = ∫ f φ_i (+ ∫ g_N φ_i on Neumann parts), not nodal values
  of f: `mesh.load_vector(f)`. X solves A x = b with A_ij = ∫ ∇φ_i · ∇φ_j.
- Constant boundary values (`("dirichlet", 1.0)`, `("neumann", -0.5)`) are added by the
  solver: the lifting of g_D, the flux ∫ g_N φ_i.
- Pure Neumann: a load is made compatible (Σ_i b_i = 0) by subtracting (Σ_i b_i/|Ω|) ∫ φ_i;
  more than 10 % of Σ_i |b_i| is refused (InputError). X has mean zero (∫ u_h = 0).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np

from . import _tensorfem
from .errors import ConfigError, DeviceError, Error, InputError, VerificationError

__all__ = [
    "Mesh",
    "Solver",
    "Error",
    "ConfigError",
    "InputError",
    "DeviceError",
    "VerificationError",
]
__version__ = _tensorfem.__version__

#: A boundary condition of one part: "dirichlet" or "neumann" (zero data, or data carried
#: by the loads), (condition, constant value), or ("dirichlet", "given"): values per node
#: passed to `Solver.solve(B, dirichlet=G)`.
Condition = Union[str, "tuple[str, float]", Mapping[str, Any]]


def _conditions(boundary: Optional[Mapping[str, Condition]]) -> Optional[dict]:
    """The `[boundary]` section of a config file from the Python form."""
    if boundary is None:
        return None
    section = {}
    for part, condition in boundary.items():
        if isinstance(condition, tuple):
            if len(condition) != 2:
                raise InputError(
                    f"boundary {part!r}: {condition!r} is not (condition, value), e.g. ('dirichlet', 0.0)"
                )
            condition = {"condition": condition[0], "value": condition[1]}
        if isinstance(condition, Mapping) and condition.get("value") == "given":
            # per node, passed to solve(): the config's value from a file
            condition = {**condition, "value": "hdf5"}
        section[part] = dict(condition) if isinstance(condition, Mapping) else condition
    return section


def _finite(name: str, array: np.ndarray) -> None:
    bad = ~np.isfinite(array)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        index = ", ".join(map(str, where))
        raise InputError(f"{name}[{index}] = {array[where]}: the values must be finite")


def _columns(name: str, values: Any, rows: int, what: str) -> tuple[np.ndarray, bool]:
    """`values` as a float64 block of `rows` rows, and whether it was one vector."""
    array = np.asarray(values)
    if array.dtype not in (np.float64, np.float32):
        raise InputError(f"{name} has dtype {array.dtype}; expected float64 or float32")
    if array.ndim not in (1, 2) or array.shape[0] != rows:
        raise InputError(
            f"{name} has shape {array.shape}; expected ({rows},) or ({rows}, k): one row per {what}"
        )
    if array.ndim == 2 and array.shape[1] == 0:
        raise InputError(f"{name} has shape {array.shape}: no columns")
    _finite(name, array)
    vector = array.ndim == 1
    return np.asarray(array.reshape(rows, -1), dtype=np.float64), vector


class Mesh:
    """A 2D mesh with the condition on each boundary part.

    Build one with `Mesh.unit_square`, `Mesh.flow_around_square` or `Mesh.gmsh`. Without
    `boundary`, u = 0 on the whole boundary; otherwise every part needs a condition
    (parts: `left`, `right`, `bottom`, `top` on the unit square; `inflow`, `outflow`,
    `walls`, `obstacle` on the flow around a square; a Gmsh file's physical curves):

        {"outflow": ("dirichlet", 0.0), "inflow": "neumann", "walls": "neumann",
         "obstacle": "neumann"}
    """

    def __init__(self, kind: str, boundary: Optional[Mapping[str, Condition]] = None, **mesh: Any):
        self._mesh_settings = {"kind": kind, **mesh}
        sections = {"mesh": self._mesh_settings}
        conditions = _conditions(boundary)
        if conditions is not None:
            sections["boundary"] = conditions
        self._native = _tensorfem.Mesh(sections)
        self._unknowns = self._native.unknowns
        self._unknowns.flags.writeable = False

    @classmethod
    def unit_square(
        cls, n: int, element: str = "q1", boundary: Optional[Mapping[str, Condition]] = None
    ) -> "Mesh":
        """The unit square with n × n cells (h = 1/n): "q1" quadrilaterals or "p1"
        triangles (each cell split by its lower-left to upper-right diagonal). Node (i, j)
        is i + j (n + 1), at (i h, j h)."""
        return cls("unit-square", boundary, n=n, element=element)

    @classmethod
    def flow_around_square(
        cls, levels: int, boundary: Optional[Mapping[str, Condition]] = None
    ) -> "Mesh":
        """The channel [0, 4] × [0, 1] around the square obstacle [5/4, 7/4] × [1/4, 3/4]
        (P1, 28 coarse triangles) refined uniformly `levels` times."""
        return cls("flow-around-square", boundary, levels=levels)

    @classmethod
    def gmsh(
        cls,
        file: Union[str, os.PathLike],
        levels: int,
        boundary: Optional[Mapping[str, Condition]] = None,
    ) -> "Mesh":
        """The coarse triangle or quadrilateral mesh of a Gmsh MSH 4.1 file refined
        uniformly `levels` times; its physical curves name the boundary parts."""
        return cls("gmsh", boundary, file=os.fspath(file), levels=levels)

    @property
    def nodes(self) -> np.ndarray:
        """The coordinates of every node, (nodes, 2)."""
        return self._native.nodes

    @property
    def cells(self) -> np.ndarray:
        """The nodes of every cell, counterclockwise, (cells, 4) or (cells, 3)."""
        return self._native.cells

    @property
    def unknowns(self) -> np.ndarray:
        """The nodes that are unknowns, in the order of the rows of B and X: those off the
        Dirichlet parts, in node order (every node for pure Neumann)."""
        return self._unknowns

    @property
    def dirichlet_nodes(self) -> np.ndarray:
        """The nodes on Dirichlet parts, in node order."""
        return self._native.dirichlet_nodes

    @property
    def parts(self) -> list:
        """The names of the boundary parts."""
        return self._native.parts

    @property
    def pure_neumann(self) -> bool:
        """Whether every part has a Neumann condition (the solution is fixed up to a
        constant: tensorfem returns the one of mean zero)."""
        return self._native.pure_neumann

    @property
    def element(self) -> str:
        return self._native.element

    def part_nodes(self, name: str) -> np.ndarray:
        """The nodes on the boundary part `name`, in node order."""
        return self._native.part_nodes(name)

    def load_vector(self, f: Union[Callable[..., Any], float, np.ndarray]) -> np.ndarray:
        """The assembled loads b_i = ∫ f φ_i on the unknowns.

        `f` is a function f(x, y) of numpy arrays (called once, with every quadrature
        point) returning an array (points,) or (points, k); or nodal values (nodes,) or
        (nodes, k), whose interpolant f_h = Σ_j f_j φ_j is integrated exactly (b = M f on
        the unknowns, M the consistent mass matrix); or a number. Returns (len(unknowns),),
        or (len(unknowns), k)."""
        if callable(f):
            points = self._native.load_points()
            values = np.asarray(f(points[:, 0], points[:, 1]), dtype=np.float64)
            if values.ndim == 0:
                values = np.full(len(points), float(values))
            block, vector = _columns("f(x, y)", values, len(points), "quadrature point")
            loads = self._native.loads_at_points(block)
        elif np.ndim(f) == 0:
            return self.load_vector(lambda x, y: np.full_like(x, float(f)))
        else:
            block, vector = _columns("f", np.asarray(f, dtype=np.float64), len(self.nodes), "node")
            loads = self._native.loads_of_nodal(block)
        return loads[:, 0] if vector else loads

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self._mesh_settings.items())
        return f"tensorfem.Mesh({settings}, unknowns={len(self.unknowns)})"


def _coarse_width(n: int) -> Optional[float]:
    """PSC's macro elements on the unit square: h0 = 1/n0 with n = n0 · 2^j (j ≥ 1,
    n0 ≥ 2) closest to √h (the flop-optimal choice), the coarser on a tie."""
    candidates = []
    n0, j = n, 0
    while n0 % 2 == 0 and n0 // 2 >= 2:
        n0, j = n0 // 2, j + 1
        candidates.append(n0)
    if not candidates:
        return None
    best = min(candidates, key=lambda c: (abs(np.log(c) - 0.5 * np.log(n)), c))
    return 1.0 / best


class Solver:
    """A Poisson solver set up once on `mesh` and applied to blocks of right-hand sides.

    method: "psc-m1" | "psc-m2" | "psc-m3" (the Prehandling-Schur-Complement direct
        methods on GEMMs), "mg" (geometric multigrid), "cholesky" (the f64 sparse
        Cholesky: precision, refine and rtol do not apply to it).
    precision: "f16", "tf32", "f32" or "f64": the precision of PSC's dense products.
        Multigrid takes a precision per level instead (`variant="H_MG"`, or
        `schedule=["f32", "f16", ...]`; without them all f64).
    device: "cpu", "cuda" (the first GPU; an error where there is none) or "auto".
    refine: f64 iterative refinement around the solve (PSC-IR).
    rtol, atol: every column stops at ‖b − A x‖₂ ≤ max(rtol ‖b‖₂, atol); each solved
        column's residual is checked in f64 afterwards (VerificationError if it misses).
    h0 (unit square), coarse_levels (refined meshes): PSC's macro elements; by default
        h0 ≈ √h, and coarse_levels = levels // 2 (at most levels − 2).
    cache_dir: where PSC keeps its set-up (loaded by a later solver of the same mesh
        instead of recomputed); without it nothing is written.
    options: any further `[solver]` key of docs/configuration.md (max_iterations,
        variant, schedule, smoother, krylov, cg_rtol, ...).
    """

    def __init__(
        self,
        mesh: Mesh,
        method: str = "psc-m1",
        precision: str = "f32",
        device: str = "cpu",
        refine: bool = True,
        rtol: float = 1e-10,
        *,
        atol: Optional[float] = None,
        h0: Optional[float] = None,
        coarse_levels: Optional[int] = None,
        cache_dir: Union[str, os.PathLike, None] = None,
        **options: Any,
    ):
        solver: dict = {"method": method, **options}
        defaults = {"precision": "f32", "refine": True, "rtol": 1e-10}
        # The sparse Cholesky takes none of these and multigrid a precision per level (variant,
        # schedule): left at their defaults there, they are not given.
        not_taken = {"cholesky": ("precision", "refine", "rtol"), "mg": ("precision",)}
        for key, value in {"precision": precision, "refine": refine, "rtol": rtol}.items():
            if key not in not_taken.get(method, ()) or value != defaults[key]:
                solver[key] = value
        if atol is not None:
            solver["atol"] = atol
        # Given macro elements go to the config as given (it refuses them where they do not
        # apply); PSC gets its defaults where they are missing.
        mesh_extra: dict = {"h0": h0, "coarse_levels": coarse_levels}
        if method.startswith("psc-"):
            settings = mesh._mesh_settings
            if settings["kind"] == "unit-square" and h0 is None:
                mesh_extra["h0"] = _coarse_width(int(settings["n"]))
            elif settings["kind"] != "unit-square" and coarse_levels is None:
                levels = int(settings["levels"])
                mesh_extra["coarse_levels"] = max(0, min(levels // 2, levels - 2))
            if cache_dir is not None:
                solver["cache_dir"] = os.fspath(cache_dir)
            else:
                solver["cache"] = False
        else:
            if cache_dir is not None:
                solver["cache_dir"] = os.fspath(cache_dir)
        settings = {"backend": device, "solver": solver, "mesh": mesh_extra}
        self.mesh = mesh
        self._native = _tensorfem.Solver(mesh._native, settings)

    def solve(self, B: Any, dirichlet: Any = None) -> np.ndarray:
        """Solves A X = B for every column of B (len(mesh.unknowns), k), or one vector
        (len(mesh.unknowns),); float64 or float32, any memory order.

        `dirichlet`: where Dirichlet parts are ("dirichlet", "given"), the values g_D at
        `mesh.dirichlet_nodes`, (len(dirichlet_nodes),) for every column or
        (len(dirichlet_nodes), k) one per column.

        Returns X of B's shape, dtype and order (Fortran-ordered for a Fortran-ordered B).
        The GIL is released while solving. Raises InputError (shape, dtype, NaN or Inf,
        an incompatible pure Neumann load) or VerificationError (a column whose verified
        f64 residual missed its tolerance)."""
        array = np.asarray(B)
        block, vector = _columns("B", array, len(self.mesh.unknowns), "unknown (mesh.unknowns)")
        if dirichlet is not None:
            dirichlet, _ = _columns("dirichlet", dirichlet, len(self.mesh.dirichlet_nodes), "Dirichlet node")
        X = self._native.solve(block, dirichlet)
        if vector:
            return X[:, 0].astype(array.dtype, copy=False)
        fortran = array.flags.f_contiguous and not array.flags.c_contiguous
        return np.asarray(X, dtype=array.dtype, order="F" if fortran else "C")

    @property
    def info(self) -> dict:
        """The set-up and the last solve: method, precision, device, setup_note,
        unknowns, nonzeros, columns, iterations (refinement steps or V-cycles of the
        slowest column), inner_iterations (PSC-M3's CG), relative_residual and tolerance
        per column (verified in f64), seconds per stage (assembly, setup; loads, solve,
        verify of the last solve)."""
        return self._native.info

    def __repr__(self) -> str:
        info = self.info
        return (
            f"tensorfem.Solver({info['method']}, {info['precision']}, {info['device']}, "
            f"unknowns={info['unknowns']})"
        )
