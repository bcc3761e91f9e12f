"""Tests of the tensorfem Python package (make test, scripts/test-python.sh).

The solutions are checked against the command line's campaign on the same loads (written
to an HDF5 right-hand-side file, solved by `tensorfem run`, read back from campaign.h5) to
1e-12, for every method; against manufactured solutions' convergence rates; and the load
vectors against postprocess/build_rhs.py's consistent mass matrix, an independent
implementation.
"""

import os
import json
import subprocess
import sys
import threading
import time

import h5py
import numpy as np
import pytest

import tensorfem

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "postprocess"))
import build_rhs  # noqa: E402  (the right-hand-side helper: an independent mass matrix)

BINARY = os.environ.get("TENSORFEM_BIN", os.path.join(ROOT, "target", "release", "tensorfem"))
DEVICE = os.environ.get("TENSORFEM_PYTHON_DEVICE", "cpu")
PURE_NEUMANN = {"inflow": "neumann", "outflow": "neumann", "walls": "neumann", "obstacle": "neumann"}
MIXED = {"inflow": ("neumann", 0.5), "outflow": ("dirichlet", 1.0), "walls": "neumann", "obstacle": "neumann"}


def toml_condition(condition):
    if condition == ("dirichlet", "given"):
        return '{ condition = "dirichlet", value = "hdf5" }'
    if isinstance(condition, tuple):
        return f'{{ condition = "{condition[0]}", value = {condition[1]} }}'
    return f'"{condition}"'


def cli_solution(tmp_path, device, mesh_lines, boundary, solver_lines, B):
    """The nodal solutions of `tensorfem run` on a campaign of the columns of B (rows in
    the CLI mesh's load-node order), with that mesh's coordinates."""
    assert os.path.exists(BINARY), f"{BINARY}: build it first (cargo build --release)"
    boundary_lines = (["[boundary]"] + [f"{p} = {toml_condition(c)}" for p, c in boundary.items()]
                      if boundary else [])
    config = "\n".join(
        [f'backend = "{device}"', "[mesh]"] + mesh_lines + boundary_lines + ["[solver]"] + solver_lines
        + ["[campaign]", 'rhs = "hdf5"', f"batch_size = {B.shape[1]}", 'directory = "run"',
           "[campaign.input]", 'path = "rhs.h5"']) + "\n"
    path = tmp_path / "campaign.toml"
    path.write_text(config)
    env = dict(os.environ, RUST_LOG="warn")
    subprocess.run([BINARY, "mesh", "--config", str(path), "--output", str(tmp_path / "mesh.h5")],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    mesh = build_rhs.read_mesh(str(tmp_path / "mesh.h5"))
    return mesh, lambda rows, dirichlet=None: _run(tmp_path, path, env, mesh, rows, dirichlet)


def _run(tmp_path, path, env, mesh, rows, dirichlet=None):
    build_rhs.write_input(str(tmp_path / "rhs.h5"), rows.T, mesh=mesh,
                          dirichlet=None if dirichlet is None else dirichlet.T)
    subprocess.run([BINARY, "run", str(path)], check=True, env=env, stdout=subprocess.DEVNULL)
    with h5py.File(tmp_path / "run" / "campaign.h5", "r") as f:
        return f["operators/0/u"][:].T  # nodes × columns


def node_map(ours, theirs):
    """For every node of `theirs`, the node of `ours` at the same point."""
    scale = np.abs(ours).max()

    def order(xy):
        key = np.round(xy / scale * 2.0**40).astype(np.int64)
        return np.lexsort((key[:, 1], key[:, 0]))

    a, b = order(ours), order(theirs)
    assert np.abs(ours[a] - theirs[b]).max() <= 1e-12 * scale, "not the same node set"
    m = np.empty(len(theirs), dtype=np.int64)
    m[b] = a
    return m


# Tests marked `device` run on TENSORFEM_PYTHON_DEVICE: the CPU here, the CUDA stand-in in
# cuda-standin/run-tests.sh (the command line then runs on it too), a GPU where there is one.
device = pytest.mark.device
CASES = [
    # (mesh, method, keywords: the solver's, and the same keys in the CLI's config)
    pytest.param("square", "psc-m1", {"h0": 0.125}, marks=device, id="square-psc-m1"),
    pytest.param("square", "psc-m2", {"h0": 0.125}, marks=device, id="square-psc-m2"),
    pytest.param("square", "psc-m3", {"h0": 0.125}, marks=device, id="square-psc-m3"),
    pytest.param("square", "mg", {"variant": "H_MG"}, marks=device, id="square-mg"),
    pytest.param("square", "cholesky", {}, id="square-cholesky"),
    pytest.param("flow-pure", "psc-m1", {"coarse_levels": 1}, marks=device, id="flow-pure-psc-m1"),
    pytest.param("flow-mixed", "psc-m1", {"coarse_levels": 1}, marks=device, id="flow-mixed-psc-m1"),
    pytest.param("flow-mixed", "mg", {}, marks=device, id="flow-mixed-mg"),
]


def case_mesh(name):
    if name == "square":
        return tensorfem.Mesh.unit_square(32), ['kind = "unit-square"', "n = 32"], None
    boundary = PURE_NEUMANN if name == "flow-pure" else MIXED
    return (tensorfem.Mesh.flow_around_square(3, boundary=boundary),
            ['kind = "flow-around-square"', "levels = 3"], boundary)


@pytest.mark.parametrize("name,method,keywords", CASES)
def test_solutions_equal_the_command_lines(tmp_path, name, method, keywords):
    mesh, mesh_lines, boundary = case_mesh(name)
    device = "cpu" if method == "cholesky" else DEVICE
    rng = np.random.default_rng(7)
    B = rng.standard_normal((len(mesh.unknowns), 3))
    if mesh.pure_neumann:
        B -= B.mean(axis=0)  # compatible up to the weights ∫φ_i: the solver projects the rest
    solver = tensorfem.Solver(mesh, method=method, device=device, **keywords)
    X = solver.solve(B)
    assert X.shape == B.shape
    info = solver.info
    assert info["method"] == method and info["columns"] == 3
    assert all(r <= t for r, t in zip(info["relative_residual"], info["tolerance"]))

    lines = [f'method = "{method}"']
    if method != "cholesky":
        lines += ['rtol = 1e-10'] + ([] if method == "mg" else ['precision = "f32"', "refine = true"])
    lines += [f'{k} = "{v}"' for k, v in keywords.items() if isinstance(v, str)]
    extra = [f"{k} = {v}" for k, v in keywords.items() if not isinstance(v, str)]
    cli_mesh, run = cli_solution(tmp_path, device, mesh_lines + extra, boundary, lines, B)
    to_ours = node_map(mesh.nodes, cli_mesh.coords)
    row_of_node = np.full(len(mesh.nodes), -1)
    row_of_node[mesh.unknowns] = np.arange(len(mesh.unknowns))
    rows = B[row_of_node[to_ours[cli_mesh.load_nodes]]]
    nodal = run(rows)
    theirs = np.empty_like(nodal)
    theirs[to_ours] = nodal
    reference = theirs[mesh.unknowns]
    difference = np.abs(X - reference).max() / np.abs(reference).max()
    assert difference <= 1e-12, f"{name} {method}: {difference:.2e}"
    if mesh.pure_neumann:
        weights = mesh.load_vector(1.0)
        assert np.abs(weights @ X).max() <= 1e-12 * np.abs(X).max() * weights.sum()


def manufactured_error(n, element, method, **keywords):
    mesh = tensorfem.Mesh.unit_square(n, element=element)
    solver = tensorfem.Solver(mesh, method=method, device=DEVICE, **keywords)
    f = lambda x, y: 2 * np.pi**2 * np.sin(np.pi * x) * np.sin(np.pi * y)  # noqa: E731
    X = solver.solve(mesh.load_vector(f))
    x, y = mesh.nodes[mesh.unknowns].T
    return np.abs(X - np.sin(np.pi * x) * np.sin(np.pi * y)).max()


@device
@pytest.mark.parametrize("element,method", [("q1", "psc-m1"), ("p1", "psc-m1"), ("q1", "mg")])
def test_manufactured_solutions_converge_at_second_order(element, method):
    errors = [manufactured_error(n, element, method) for n in (16, 32, 64)]
    rates = [np.log2(a / b) for a, b in zip(errors, errors[1:])]
    assert errors[-1] < 1e-3 and all(r > 1.9 for r in rates), (errors, rates)


def test_the_default_coarse_width_is_the_root_of_h():
    mesh = tensorfem.Mesh.unit_square(256)
    assert "|C| = 225" in tensorfem.Solver(mesh).info["setup_note"]  # h0 = 1/16: 15² coarse nodes
    assert tensorfem._coarse_width(96) == 1 / 12 and tensorfem._coarse_width(3) is None


def test_layouts_and_dtypes_give_the_callers_own():
    mesh = tensorfem.Mesh.unit_square(16)
    solver = tensorfem.Solver(mesh, method="cholesky")
    B = np.random.default_rng(1).standard_normal((len(mesh.unknowns), 4))
    X = solver.solve(B)
    assert X.flags.c_contiguous and X.dtype == np.float64
    XF = solver.solve(np.asfortranarray(B))
    assert XF.flags.f_contiguous and not XF.flags.c_contiguous
    np.testing.assert_array_equal(X, XF)
    X32 = solver.solve(B.astype(np.float32))
    assert X32.dtype == np.float32
    assert np.abs(X32 - X).max() <= 1e-6 * np.abs(X).max()
    strided = solver.solve(np.repeat(B, 2, axis=1)[:, ::2])  # neither C nor Fortran order
    np.testing.assert_array_equal(strided, X)
    # One column as a vector gives the same as that column as a one-column block (a
    # column's last bits may depend on how many columns are solved together).
    x = solver.solve(B[:, 2])
    assert x.shape == (len(mesh.unknowns),)
    np.testing.assert_array_equal(x, solver.solve(B[:, 2:3])[:, 0])


def test_bad_input_is_named():
    mesh = tensorfem.Mesh.unit_square(16)
    solver = tensorfem.Solver(mesh, method="cholesky")
    n = len(mesh.unknowns)
    cases = [
        (np.zeros((n + 1, 2)), "shape (226, 2); expected (225,) or (225, k)"),
        (np.zeros((n, 2, 2)), "shape (225, 2, 2)"),
        (np.zeros((n, 0)), "no columns"),
        (np.zeros((n, 2), dtype=np.int64), "dtype int64; expected float64 or float32"),
        (np.zeros((n, 2), dtype=np.complex128), "dtype complex128"),
    ]
    B = np.ones((n, 3))
    B[17, 2] = np.nan
    cases.append((B, "B[17, 2] = nan: the values must be finite"))
    C = np.ones(n, dtype=np.float32)
    C[4] = np.inf
    cases.append((C, "B[4] = inf"))
    for bad, words in cases:
        with pytest.raises(tensorfem.InputError) as raised:
            solver.solve(bad)
        assert words in str(raised.value), (words, str(raised.value))
        assert isinstance(raised.value, ValueError)

    with pytest.raises(tensorfem.ConfigError) as raised:
        tensorfem.Solver(mesh, method="psc-m7")
    assert "unknown method 'psc-m7' (did you mean 'psc-m1'?)" in str(raised.value)
    with pytest.raises(tensorfem.ConfigError) as raised:
        tensorfem.Solver(mesh, method="psc-m1", h0=0.3)
    assert "mesh.h0" in str(raised.value)
    with pytest.raises(tensorfem.ConfigError) as raised:
        tensorfem.Solver(mesh, method="mg", smoother="gauss")
    assert "solver.smoother" in str(raised.value)
    with pytest.raises(tensorfem.ConfigError) as raised:
        tensorfem.Mesh.unit_square(16, boundary={"left": "dirichlet"})
    assert "right" in str(raised.value)
    with pytest.raises(tensorfem.ConfigError) as raised:
        tensorfem.Mesh.unit_square(0)
    assert "mesh.n" in str(raised.value)
    with pytest.raises(tensorfem.InputError) as raised:
        mesh.part_nodes("inlet")
    assert "no boundary part 'inlet' (this mesh's parts: left, right, bottom, top)" in str(raised.value)
    with pytest.raises(TypeError):
        tensorfem.Solver(mesh, method="mg", variant=object())
    with pytest.raises(tensorfem.ConfigError) as raised:
        tensorfem.Solver(mesh, method="psc-m1", coarse_levels=1)
    assert "mesh.coarse_levels" in str(raised.value)
    # numpy's numbers are numbers
    assert len(tensorfem.Mesh.unit_square(np.int64(8)).unknowns) == 49


@pytest.mark.skipif(DEVICE != "cpu", reason="a machine without a GPU names the missing device")
def test_a_missing_gpu_is_named():
    info = subprocess.run([BINARY, "info"], capture_output=True, text=True).stdout
    if "device 0:" in info:
        pytest.skip("this machine has a GPU")
    with pytest.raises(tensorfem.DeviceError) as raised:
        tensorfem.Solver(tensorfem.Mesh.unit_square(16), device="cuda")
    assert "cuda" in str(raised.value)


@device
def test_pure_neumann_loads_are_made_compatible_or_refused():
    boundary = {p: "neumann" for p in ("left", "right", "bottom", "top")}
    mesh = tensorfem.Mesh.unit_square(32, boundary=boundary)
    assert mesh.pure_neumann and len(mesh.unknowns) == len(mesh.nodes)
    solver = tensorfem.Solver(mesh, method="psc-m1", device=DEVICE)
    reference = tensorfem.Solver(mesh, method="cholesky")
    f = lambda x, y: np.cos(np.pi * x) * np.cos(2 * np.pi * y)  # noqa: E731  ∫f = 0
    b = mesh.load_vector(f)
    weights = mesh.load_vector(1.0)
    x = solver.solve(b + 1e-3 * weights)  # slightly incompatible: projected
    np.testing.assert_allclose(x, reference.solve(b), atol=1e-10 * np.abs(x).max())
    assert abs(weights @ x) <= 1e-12 * np.abs(x).max()
    exact = f(*mesh.nodes.T) / (5 * np.pi**2)
    assert np.abs(x - exact).max() < 2e-3
    with pytest.raises(tensorfem.InputError) as raised:
        solver.solve(b + weights)
    assert "pure Neumann data are incompatible" in str(raised.value)


def test_load_vectors_equal_the_consistent_mass_matrix(tmp_path):
    mesh = tensorfem.Mesh.flow_around_square(2, boundary=MIXED)
    x, y = mesh.nodes.T
    values = np.column_stack([np.sin(x) * np.cos(y), 2 * x - 3 * y + 1])
    loads = mesh.load_vector(values)
    # build_rhs.py's mass matrix on the CLI's mesh file of the same mesh (no macro elements).
    config = tmp_path / "mesh.toml"
    config.write_text('[mesh]\nkind = "flow-around-square"\nlevels = 2\n[boundary]\n'
                      + "\n".join(f"{p} = {toml_condition(c)}" for p, c in MIXED.items())
                      + '\n[solver]\nmethod = "cholesky"\n[campaign]\nrhs = "hdf5"\n'
                      'directory = "run"\n[campaign.input]\npath = "rhs.h5"\n')
    subprocess.run([BINARY, "mesh", "--config", str(config), "--output", str(tmp_path / "m.h5")],
                   check=True, stdout=subprocess.DEVNULL)
    cli = build_rhs.read_mesh(str(tmp_path / "m.h5"))
    np.testing.assert_array_equal(cli.coords, mesh.nodes)
    np.testing.assert_array_equal(cli.load_nodes, mesh.unknowns)
    for j in range(2):
        expected = build_rhs.mass_times(cli, values[:, j])[cli.load_nodes]
        np.testing.assert_allclose(loads[:, j], expected, rtol=0, atol=1e-15 * np.abs(expected).max())
    # A linear function as a callable and as nodal values: the same loads (f_h = f on P1).
    linear = mesh.load_vector(lambda x, y: 2 * x - 3 * y + 1)
    np.testing.assert_allclose(linear, loads[:, 1], rtol=0, atol=1e-14 * np.abs(linear).max())
    assert mesh.load_vector(2.0).shape == (len(mesh.unknowns),)
    outflow = mesh.part_nodes("outflow")
    assert np.all(mesh.nodes[outflow, 0] == 4.0)
    np.testing.assert_array_equal(mesh.dirichlet_nodes, outflow)


def test_the_gil_is_released_while_solving():
    """The main thread runs Python while another thread is inside the native solve (and
    inside `info`, which waits for that solve)."""
    mesh = tensorfem.Mesh.unit_square(256)
    solver = tensorfem.Solver(mesh, method="cholesky")
    B = np.asfortranarray(np.random.default_rng(3).standard_normal((len(mesh.unknowns), 64)))
    inside = []

    def solve():
        inside.append(time.perf_counter())
        solver._native.solve(B)  # the native call alone: no numpy work around it
        inside.append(time.perf_counter())

    thread = threading.Thread(target=solve)
    ticks = []
    thread.start()
    while thread.is_alive():
        ticks.append(time.perf_counter())
    thread.join()
    start, end = inside
    assert end - start > 0.05, f"the solve took {end - start:.3f} s: too short to tell"
    during = [t for t in ticks if start + 0.01 < t < end - 0.01]
    assert len(during) > 100, f"{len(during)} main-thread iterations during a {end - start:.3f} s solve"
    assert solver.info["columns"] == 64


@device
def test_one_set_up_serves_many_blocks():
    mesh = tensorfem.Mesh.unit_square(64)
    solver = tensorfem.Solver(mesh, method="psc-m1", device=DEVICE)
    assert solver.info["device"].startswith(DEVICE), solver.info["device"]
    setup = solver.info["seconds"]["setup"]
    rng = np.random.default_rng(5)
    for k in (1, 8, 3):
        B = rng.standard_normal((len(mesh.unknowns), k))
        X = solver.solve(B)
        assert solver.info["columns"] == k and X.shape == (len(mesh.unknowns), k)
        assert solver.info["seconds"]["setup"] == setup
    assert solver.info["iterations"] >= 1


def test_the_operator_cache_is_written_and_loaded(tmp_path):
    mesh = tensorfem.Mesh.unit_square(64)
    first = tensorfem.Solver(mesh, cache_dir=tmp_path / "cache")
    second = tensorfem.Solver(mesh, cache_dir=tmp_path / "cache")
    assert "computed" in first.info["setup_note"] and "loaded" in second.info["setup_note"]
    B = np.random.default_rng(2).standard_normal((len(mesh.unknowns), 2))
    np.testing.assert_array_equal(first.solve(B), second.solve(B))
    assert not any(p.suffix == ".h5" for p in tmp_path.iterdir())


def test_the_cavity_example_converges_to_ghia_et_al(tmp_path):
    """examples/cavity_ensemble.py on coarse meshes: Re = 100 steady, nearer to Ghia et
    al.'s table at n = 32 than at n = 16; its files as documented."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import cavity_ensemble

    deviations = []
    for n in (16, 32):
        out = tmp_path / f"n{n}"
        assert cavity_ensemble.main(["--re", "100", "--n", str(n), "--out", str(out), "--repeats", "2"]) == 0
        with open(out / "centreline-re100.json") as f:
            result = json.load(f)
        assert len(result["y"]) == len(result["u"]) == n + 1 and result["u"][-1] == 1.0
        assert len(result["x"]) == len(result["v"]) == n + 1 and result["steady"]
        deviations.append(max(result["ghia_max_deviation_u"], result["ghia_max_deviation_v"]))
        with open(out / "summary.json") as f:
            summary = json.load(f)
        assert 0 < summary["pressure_fraction"] < 1 and summary["block_speedup"] > 0
        assert (out / "centreline.png").stat().st_size > 0
    assert deviations[1] < 0.03 and deviations[1] < deviations[0], deviations


def test_a_gmsh_mesh_solves_like_the_reference():
    boundary = {"inflow": "neumann", "outflow": ("dirichlet", 0.0), "walls": "neumann", "obstacle": "neumann"}
    mesh = tensorfem.Mesh.gmsh(os.path.join(ROOT, "inputs", "meshes", "channel-cylinder.msh"), 3,
                               boundary=boundary)
    assert set(mesh.parts) == {"inflow", "outflow", "walls", "obstacle"}
    B = mesh.load_vector(lambda x, y: np.exp(-((x - 1.0) ** 2 + (y - 0.2) ** 2) / 0.01))
    reference = tensorfem.Solver(mesh, method="cholesky").solve(B)
    for method, keywords in (("mg", {}), ("psc-m1", {"coarse_levels": 1})):
        X = tensorfem.Solver(mesh, method=method, **keywords).solve(B)
        assert np.abs(X - reference).max() <= 1e-8 * np.abs(reference).max(), method


@device
def test_dirichlet_values_per_node_equal_the_command_lines(tmp_path):
    boundary = {"inflow": "neumann", "outflow": ("dirichlet", "given"), "walls": "neumann",
                "obstacle": "neumann"}
    mesh = tensorfem.Mesh.flow_around_square(3, boundary=boundary)
    rng = np.random.default_rng(11)
    B = rng.standard_normal((len(mesh.unknowns), 2))
    y = mesh.nodes[mesh.dirichlet_nodes, 1]
    G = np.column_stack([np.sin(np.pi * y), 1 + y])
    solver = tensorfem.Solver(mesh, method="psc-m1", device=DEVICE, coarse_levels=1)
    X = solver.solve(B, dirichlet=G)
    shared = solver.solve(B, dirichlet=G[:, 1])
    np.testing.assert_array_equal(shared[:, 1], X[:, 1])
    cli_mesh, run = cli_solution(tmp_path, DEVICE, ['kind = "flow-around-square"', "levels = 3",
                                                    "coarse_levels = 1"], boundary,
                                 ['method = "psc-m1"', 'precision = "f32"', "rtol = 1e-10"], B)
    to_ours = node_map(mesh.nodes, cli_mesh.coords)
    row_of_node = np.full(len(mesh.nodes), -1)
    row_of_node[mesh.unknowns] = np.arange(len(mesh.unknowns))
    row_of_node[mesh.dirichlet_nodes] = np.arange(len(mesh.dirichlet_nodes))
    nodal = run(B[row_of_node[to_ours[cli_mesh.load_nodes]]],
                G[row_of_node[to_ours[cli_mesh.dirichlet_nodes]]])
    theirs = np.empty_like(nodal)
    theirs[to_ours] = nodal
    np.testing.assert_allclose(theirs[mesh.dirichlet_nodes], G, rtol=0, atol=0)
    reference = theirs[mesh.unknowns]
    assert np.abs(X - reference).max() <= 1e-12 * np.abs(reference).max()
    for bad, words in ((None, "a Dirichlet part takes values per node"),
                       (G[:-1], "dirichlet has shape")):
        with pytest.raises(tensorfem.InputError) as raised:
            solver.solve(B, dirichlet=bad)
        assert words in str(raised.value), str(raised.value)
    plain = tensorfem.Solver(tensorfem.Mesh.unit_square(8), method="cholesky")
    with pytest.raises(tensorfem.InputError) as raised:
        plain.solve(np.ones(49), dirichlet=np.ones(32))
    assert "no Dirichlet part takes values per node" in str(raised.value)
