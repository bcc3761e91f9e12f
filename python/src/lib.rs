//! The native module of the tensorfem Python package (`tensorfem._tensorfem`): a 2D mesh
//! with its boundary conditions, and a Poisson solver on it, set up once and applied to
//! blocks of columns. The Python side (python/tensorfem/) checks and converts arrays and
//! keywords; here the settings are validated exactly as a config file's (the same
//! messages), the solver is set up and the columns are solved with the GIL released.
//!
//! Rows are in the order of the mesh the caller sees ([`Mesh`], built without PSC's
//! macro elements); a PSC solver numbers its own mesh from its macro elements, and
//! [`Solver`] maps rows between the two by the nodes' coordinates.

use std::sync::Mutex;
use std::time::Instant;

use numpy::ndarray::{Array2, ShapeBuilder};
use numpy::{PyArray1, PyArray2, PyReadonlyArray2};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

use tensorfem::campaign::Checks;
use tensorfem::config::{parse_embedded, RunConfig};
use tensorfem::device::{cuda, Backend};
use tensorfem::error::Error;
use tensorfem::fem::{interpolate_at_load_points, load_points, loads_at_points, Dofs};
use tensorfem::mesh::{build, AnyMesh, Mesh2d};
use tensorfem::poisson::{check_memory, AnyPoissonSolver};

/// tensorfem's error as the Python exception of its kind (tensorfem/errors.py), with
/// the same message.
fn raise(py: Python<'_>, error: Error) -> PyErr {
    let name = match &error {
        Error::Config { .. } => "ConfigError",
        Error::InvalidInput(_) | Error::PrecisionRange { .. } => "InputError",
        Error::Verification(_) => "VerificationError",
        Error::Backend(_) => "DeviceError",
        _ => "Error",
    };
    let class = py
        .import("tensorfem.errors")
        .and_then(|m| m.getattr(name))
        .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
    match class {
        Ok(class) => PyErr::from_type(class, error.to_string()),
        Err(e) => e,
    }
}

/// A Python value of a settings dict as a TOML value (what a config file would hold).
fn toml_value(value: &Bound<'_, PyAny>, key: &str) -> PyResult<toml::Value> {
    Ok(if value.is_instance_of::<PyBool>() {
        toml::Value::Boolean(value.extract()?)
    } else if value.is_instance_of::<PyInt>() {
        toml::Value::Integer(value.extract()?)
    } else if value.is_instance_of::<PyFloat>() {
        toml::Value::Float(value.extract()?)
    } else if value.is_instance_of::<PyString>() {
        toml::Value::String(value.extract()?)
    } else if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        toml::Value::Array(
            value
                .try_iter()?
                .map(|item| toml_value(&item?, key))
                .collect::<PyResult<_>>()?,
        )
    } else if let Ok(dict) = value.cast::<PyDict>() {
        toml::Value::Table(toml_table(dict, key)?)
    } else if value.hasattr("__index__")? {
        // numpy's integers
        toml::Value::Integer(value.call_method0("__index__")?.extract()?)
    } else if value.hasattr("__float__")? {
        // numpy's floats
        toml::Value::Float(value.call_method0("__float__")?.extract()?)
    } else {
        return Err(PyTypeError::new_err(format!(
            "{key}: a {} is not a setting (allowed: bool, int, float, str, list, dict)",
            value.get_type().name()?
        )));
    })
}

/// A settings dict as a TOML table; `at` names it in errors.
fn toml_table(dict: &Bound<'_, PyDict>, at: &str) -> PyResult<toml::Table> {
    let mut table = toml::Table::new();
    for (key, value) in dict.iter() {
        let key: String = key.extract()?;
        let path = if at.is_empty() {
            key.clone()
        } else {
            format!("{at}.{key}")
        };
        if !value.is_none() {
            table.insert(key, toml_value(&value, &path)?);
        }
    }
    Ok(table)
}

/// Validates `table` as a config file's sections; `origin` names it in errors.
fn validate(py: Python<'_>, table: &toml::Table, origin: &str) -> PyResult<RunConfig> {
    let text = toml::to_string(table)
        .map_err(|e| raise(py, Error::InvalidInput(format!("{origin}: {e}"))))?;
    parse_embedded(&text, origin).map_err(|e| raise(py, e))
}

fn index_array<'py>(py: Python<'py>, nodes: &[u32]) -> Bound<'py, PyArray1<i64>> {
    PyArray1::from_iter(py, nodes.iter().map(|&v| i64::from(v)))
}

/// A column-major block (rows × columns) as a Fortran-ordered array.
fn block_array(
    py: Python<'_>,
    rows: usize,
    values: Vec<f64>,
) -> PyResult<Bound<'_, PyArray2<f64>>> {
    let columns = values.len() / rows.max(1);
    let array = Array2::from_shape_vec((rows, columns).f(), values).map_err(|e| {
        raise(
            py,
            Error::InvalidInput(format!("a block of {rows} rows: {e}")),
        )
    })?;
    Ok(PyArray2::from_owned_array(py, array))
}

/// Points as a (points, 2) array.
fn points_array<'py>(py: Python<'py>, points: &[[f64; 2]]) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let flat: Vec<f64> = points.iter().flatten().copied().collect();
    let array = Array2::from_shape_vec((points.len(), 2), flat)
        .map_err(|e| raise(py, Error::InvalidInput(e.to_string())))?;
    Ok(PyArray2::from_owned_array(py, array))
}

/// The columns of a 2D array, one after the other (column-major), whatever its layout.
fn column_major(array: &PyReadonlyArray2<'_, f64>) -> (usize, usize, Vec<f64>) {
    let view = array.as_array();
    let (rows, columns) = view.dim();
    (rows, columns, view.t().iter().copied().collect())
}

/// A 2D mesh with the condition on each boundary part: its nodes, the nodes that are
/// unknowns (the load nodes: off the Dirichlet parts, in node order) and load vectors.
#[pyclass(frozen, module = "tensorfem._tensorfem")]
struct Mesh {
    /// The `[mesh]` and `[boundary]` sections it was built from.
    sections: toml::Table,
    mesh: Mesh2d,
    /// The load nodes as unknowns (Dirichlet nodes left out).
    loads: Dofs,
    dirichlet_nodes: Vec<u32>,
    pure_neumann: bool,
}

#[pymethods]
impl Mesh {
    /// Builds the mesh the sections describe (`{"mesh": {...}, "boundary": {...}}`, as in a
    /// config file).
    #[new]
    fn new(py: Python<'_>, sections: &Bound<'_, PyDict>) -> PyResult<Self> {
        let sections = toml_table(sections, "")?;
        let config = validate(py, &sections, "tensorfem.Mesh")?;
        let mesh = match build(&config.mesh).map_err(|e| raise(py, e))? {
            AnyMesh::Square(mesh) => mesh,
            AnyMesh::Cube(_) => {
                return Err(raise(
                    py,
                    Error::InvalidInput(
                        "the Python package solves on 2D meshes (unit-square, flow-around-square, gmsh)".into(),
                    ),
                ))
            }
        };
        let (on_dirichlet, pure_neumann) = match &config.mesh.boundary {
            Some(b) => {
                let conditions = b.conditions();
                (
                    conditions.on_dirichlet_parts(&mesh),
                    conditions.is_pure_neumann(),
                )
            }
            None => (mesh.on_boundary.clone(), false),
        };
        let dirichlet_nodes = (0..mesh.num_nodes() as u32)
            .filter(|&v| on_dirichlet[v as usize])
            .collect();
        Ok(Mesh {
            sections,
            loads: Dofs::from_boundary(&on_dirichlet),
            mesh,
            dirichlet_nodes,
            pure_neumann,
        })
    }

    /// The coordinates of every node, (nodes, 2).
    #[getter]
    fn nodes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        points_array(py, &self.mesh.coords)
    }

    /// The nodes of every cell, (cells, 3 or 4), counterclockwise.
    #[getter]
    fn cells<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<i64>>> {
        let k = self.mesh.element.nodes_per_cell();
        let cells: Vec<i64> = self.mesh.cells.iter().map(|&v| i64::from(v)).collect();
        let array = Array2::from_shape_vec((self.mesh.num_cells(), k), cells)
            .map_err(|e| raise(py, Error::InvalidInput(e.to_string())))?;
        Ok(PyArray2::from_owned_array(py, array))
    }

    /// The load nodes: the rows of a right-hand side and of a solution.
    #[getter]
    fn unknowns<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        index_array(py, &self.loads.node_of_dof)
    }

    /// The nodes on Dirichlet parts, in node order.
    #[getter]
    fn dirichlet_nodes<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        index_array(py, &self.dirichlet_nodes)
    }

    /// The names of the boundary parts, in the mesh's order.
    #[getter]
    fn parts(&self) -> Vec<String> {
        self.mesh.boundary.names.clone()
    }

    #[getter]
    fn pure_neumann(&self) -> bool {
        self.pure_neumann
    }

    #[getter]
    fn element(&self) -> &'static str {
        self.mesh.element.name()
    }

    /// The nodes on the boundary part `name`, in node order.
    fn part_nodes<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let names = &self.mesh.boundary.names;
        let Some(part) = names.iter().position(|n| n == name) else {
            return Err(raise(
                py,
                Error::InvalidInput(format!(
                    "no boundary part '{name}' (this mesh's parts: {})",
                    names.join(", ")
                )),
            ));
        };
        let mut on = vec![false; self.mesh.num_nodes()];
        for edge in self
            .mesh
            .boundary
            .edges
            .iter()
            .filter(|e| e.part as usize == part)
        {
            for v in edge.nodes {
                on[v as usize] = true;
            }
        }
        let nodes: Vec<u32> = (0..on.len() as u32).filter(|&v| on[v as usize]).collect();
        Ok(index_array(py, &nodes))
    }

    /// The points of the load quadrature, (points, 2): where `loads_at_points` takes f.
    fn load_points<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        points_array(py, &load_points(&self.mesh))
    }

    /// ∫ f φ_i on the load nodes from the values of f at `load_points`, one column per
    /// column of `values` (points, k).
    fn loads_at_points<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray2<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let (points, _, values) = column_major(&values);
        let loads = py
            .detach(|| {
                values
                    .chunks(points.max(1))
                    .map(|f| loads_at_points(&self.mesh, &self.loads, f))
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(|e| raise(py, e))?;
        block_array(py, self.loads.len(), loads.concat())
    }

    /// ∫ f_h φ_i on the load nodes for the interpolant f_h of nodal values (nodes, k).
    fn loads_of_nodal<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray2<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let (nodes, _, values) = column_major(&values);
        if nodes != self.mesh.num_nodes() {
            return Err(raise(
                py,
                Error::InvalidInput(format!(
                    "nodal values have {nodes} rows; this mesh has {} nodes",
                    self.mesh.num_nodes()
                )),
            ));
        }
        let loads = py
            .detach(|| {
                values
                    .chunks(nodes.max(1))
                    .map(|f| {
                        let at = interpolate_at_load_points(&self.mesh, f);
                        loads_at_points(&self.mesh, &self.loads, &at)
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(|e| raise(py, e))?;
        block_array(py, self.loads.len(), loads.concat())
    }
}

/// For every node of `other`, the node of `mesh` at the same point: the two numberings of
/// one node set (the mesh refined with and without PSC's macro elements).
fn node_map(mesh: &[[f64; 2]], other: &[[f64; 2]]) -> Result<Vec<u32>, Error> {
    let mismatch = |why: String| {
        Error::InvalidInput(format!(
            "the solver's mesh is not this mesh's node set ({why})"
        ))
    };
    if mesh.len() != other.len() {
        return Err(mismatch(format!(
            "{} against {} nodes",
            other.len(),
            mesh.len()
        )));
    }
    let extent = mesh
        .iter()
        .flatten()
        .fold(0.0f64, |m, x| m.max(x.abs()))
        .max(f64::MIN_POSITIVE);
    // Keys on a lattice far finer than any mesh width: the two refinements' coordinates,
    // equal up to rounding, get the same key unless one lies within rounding of a lattice
    // half-step; then the check below refuses the mesh rather than map it wrongly.
    let key = |x: &[f64; 2]| x.map(|c| (c / extent * 2f64.powi(40)).round() as i64);
    let sorted = |points: &[[f64; 2]]| {
        let mut order: Vec<u32> = (0..points.len() as u32).collect();
        order.sort_by_key(|&v| key(&points[v as usize]));
        order
    };
    let (ours, theirs) = (sorted(mesh), sorted(other));
    let mut map = vec![0u32; other.len()];
    for (&a, &b) in ours.iter().zip(&theirs) {
        let (p, q) = (mesh[a as usize], other[b as usize]);
        if (p[0] - q[0]).abs().max((p[1] - q[1]).abs()) > 1e-12 * extent {
            return Err(mismatch(format!("no node at {q:?}")));
        }
        map[b as usize] = a;
    }
    Ok(map)
}

/// What the last solve did, for `Solver.info`.
#[derive(Clone, Default)]
struct SolveInfo {
    columns: usize,
    iterations: Option<usize>,
    inner_iterations: Option<usize>,
    relative_residual: Vec<f64>,
    tolerance: Vec<f64>,
    /// (stage, seconds): loads, solve, verify.
    seconds: Vec<(&'static str, f64)>,
}

/// The set-up solver and what maps the caller's rows to it.
struct State {
    config: RunConfig,
    backend: Backend,
    solver: AnyPoissonSolver,
    /// For each of the solver's load rows, the caller's row.
    rows: Vec<u32>,
    /// The solver's load nodes (its node numbering), row by row.
    load_nodes: Vec<u32>,
    /// For each of the solver's Dirichlet nodes, the caller's row of Dirichlet values.
    dirichlet_rows: Vec<u32>,
    /// Some Dirichlet part takes the caller's values per node.
    given_dirichlet: bool,
    last: SolveInfo,
}

impl State {
    /// Solves the caller's column-major block `b` (rows × columns), with the Dirichlet
    /// values `dirichlet` (the caller's Dirichlet nodes × 1 or columns) where parts take
    /// them, and returns the solutions on the caller's rows, column-major; every column
    /// is verified.
    fn solve(
        &mut self,
        b: &[f64],
        columns: usize,
        dirichlet: Option<&[f64]>,
    ) -> Result<Vec<f64>, Error> {
        let rows = self.rows.len();
        let d = self.dirichlet_rows.len();
        let dirichlet = match (dirichlet, self.given_dirichlet) {
            (None, true) => {
                return Err(Error::InvalidInput(
                    "a Dirichlet part takes values per node (\"given\"): pass them, solve(B, dirichlet=G) with G of shape (len(mesh.dirichlet_nodes),) or (len(mesh.dirichlet_nodes), k)".into(),
                ))
            }
            (Some(_), false) => {
                return Err(Error::InvalidInput(
                    "Dirichlet values were passed, but no Dirichlet part takes values per node: give those parts (\"dirichlet\", \"given\")".into(),
                ))
            }
            (Some(g), true) if g.len() != d && g.len() != d * columns => {
                return Err(Error::InvalidInput(format!(
                    "{} Dirichlet values for {d} Dirichlet nodes and {columns} column(s): give {d} or {d} × {columns}",
                    g.len()
                )))
            }
            (Some(g), true) => Some(
                g.chunks(d.max(1))
                    .flat_map(|theirs| self.dirichlet_rows.iter().map(|&r| theirs[r as usize]))
                    .collect::<Vec<f64>>(),
            ),
            (None, false) => None,
        };
        check_memory(
            &self.config.mesh,
            &self.config.solver,
            columns,
            &self.backend,
        )?;
        let t = Instant::now();
        let mut ours = vec![0.0; b.len()];
        for (mine, theirs) in ours.chunks_mut(rows.max(1)).zip(b.chunks(rows.max(1))) {
            for (value, &row) in mine.iter_mut().zip(&self.rows) {
                *value = theirs[row as usize];
            }
        }
        let (loads, dirichlet) = self
            .solver
            .file_loads(ours, columns, dirichlet.as_deref())?;
        let loads_seconds = t.elapsed().as_secs_f64();

        let t = Instant::now();
        let outcome = self.solver.solve(&loads, columns)?;
        let solve_seconds = t.elapsed().as_secs_f64();

        let t = Instant::now();
        let nodal = self.solver.to_nodal(&outcome.u, dirichlet.as_deref());
        let reports = self
            .solver
            .reports(&loads, &outcome.u, &nodal, &vec![None; columns])?;
        let checks = Checks::poisson(&reports, self.solver.tolerances(&loads));
        let nodes = nodal.len() / columns.max(1);
        let mut x = vec![0.0; b.len()];
        for (theirs, column) in x.chunks_mut(rows.max(1)).zip(nodal.chunks(nodes.max(1))) {
            for (&row, &node) in self.rows.iter().zip(&self.load_nodes) {
                theirs[row as usize] = column[node as usize];
            }
        }
        self.last = SolveInfo {
            columns,
            iterations: outcome.iterations,
            inner_iterations: outcome.inner_iterations,
            relative_residual: checks.relative_residual.clone(),
            tolerance: checks.tolerance.clone(),
            seconds: vec![
                ("loads", loads_seconds),
                ("solve", solve_seconds),
                ("verify", t.elapsed().as_secs_f64()),
            ],
        };
        let failed = checks.failed();
        if !failed.is_empty() {
            return Err(Error::Verification(format!(
                "{} of {columns} column(s) missed their tolerance ({})",
                failed.len(),
                checks.describe_failures(&failed, 0, 8)
            )));
        }
        Ok(x)
    }
}

/// A Poisson solver set up once on a mesh and applied to blocks of columns.
#[pyclass(frozen, module = "tensorfem._tensorfem")]
struct Solver {
    state: Mutex<State>,
    /// What the set-up did, for `Solver.info`.
    setup: Vec<(&'static str, String)>,
    setup_seconds: Vec<(&'static str, f64)>,
}

impl Solver {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, Error> {
        self.state
            .lock()
            .map_err(|_| Error::Solver("an earlier solve panicked".into()))
    }
}

#[pymethods]
impl Solver {
    /// Sets up the method of `settings` (`{"backend": …, "solver": {...}, "mesh": {...}}`:
    /// the solver's keys, and h0 or coarse_levels added to the mesh's) on `mesh`.
    #[new]
    fn new(py: Python<'_>, mesh: PyRef<'_, Mesh>, settings: &Bound<'_, PyDict>) -> PyResult<Self> {
        let settings = toml_table(settings, "")?;
        let mut table = mesh.sections.clone();
        for (key, value) in settings {
            match (table.get_mut(&key), value) {
                (Some(toml::Value::Table(ours)), toml::Value::Table(more)) => ours.extend(more),
                (_, value) => {
                    table.insert(key, value);
                }
            }
        }
        let config = validate(py, &table, "tensorfem.Solver")?;
        let method = config.solver.method;
        let backend = Backend::select(
            config.backend,
            &cuda::probe(),
            method.name(),
            method.has_cuda(),
            0,
        )
        .map_err(|e| raise(py, e))?;
        check_memory(&config.mesh, &config.solver, 1, &backend).map_err(|e| raise(py, e))?;
        let (solver, config, backend) = py
            .detach(|| {
                AnyPoissonSolver::new(&backend, &config.mesh, &config.solver)
                    .map(|solver| (solver, config, backend))
            })
            .map_err(|e| raise(py, e))?;
        let (coords, load_nodes, dirichlet_nodes) = match &solver {
            AnyPoissonSolver::Square(s) => (&s.mesh.coords, s.dofs.node_of_dof.clone(), vec![]),
            AnyPoissonSolver::Conditioned(s, boundary) => (
                &s.mesh.coords,
                boundary.load_nodes.clone(),
                boundary.dirichlet_nodes.clone(),
            ),
            AnyPoissonSolver::Cube(_) => unreachable!("a Mesh is 2D"),
        };
        let same = *coords == mesh.mesh.coords;
        let map = if same {
            (0..coords.len() as u32).collect()
        } else {
            node_map(&mesh.mesh.coords, coords).map_err(|e| raise(py, e))?
        };
        let rows: Vec<u32> = load_nodes
            .iter()
            .map(|&v| mesh.loads.dof_of_node[map[v as usize] as usize])
            .collect();
        let given_dirichlet = config
            .mesh
            .boundary
            .as_ref()
            .is_some_and(|b| b.dirichlet_from_input());
        let dirichlet_rows: Vec<u32> = dirichlet_nodes
            .iter()
            .map(|&v| {
                let node = map[v as usize];
                mesh.dirichlet_nodes
                    .binary_search(&node)
                    .map_or(Dofs::NONE, |r| r as u32)
            })
            .collect();
        if rows.len() != mesh.loads.len()
            || rows.contains(&Dofs::NONE)
            || (given_dirichlet && dirichlet_rows.len() != mesh.dirichlet_nodes.len())
            || dirichlet_rows.contains(&Dofs::NONE)
        {
            return Err(raise(
                py,
                Error::InvalidInput(format!(
                    "the solver's load nodes ({}) are not this mesh's ({})",
                    rows.len(),
                    mesh.loads.len()
                )),
            ));
        }
        // Multigrid has a precision per level, finest first.
        let precision = match &config.solver.mg {
            Some(mg) => mg
                .schedule
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", "),
            None => config.solver.precision.to_string(),
        };
        let setup = vec![
            ("method", method.name().to_string()),
            ("precision", precision),
            ("device", backend.to_string()),
            ("setup_note", solver.setup_note().unwrap_or_default()),
        ];
        let setup_seconds = vec![
            ("assembly", solver.assembly_seconds()),
            ("setup", solver.setup_seconds()),
        ];
        Ok(Solver {
            state: Mutex::new(State {
                config,
                backend,
                solver,
                rows,
                load_nodes,
                dirichlet_rows,
                given_dirichlet,
                last: SolveInfo::default(),
            }),
            setup,
            setup_seconds,
        })
    }

    /// Solves the block `b` (rows × columns, any layout), with the Dirichlet values
    /// `dirichlet` (Dirichlet nodes × 1 or columns) where parts take them, and returns the
    /// solutions as a Fortran-ordered array of b's shape; the GIL is released meanwhile.
    #[pyo3(signature = (b, dirichlet=None))]
    fn solve<'py>(
        &self,
        py: Python<'py>,
        b: PyReadonlyArray2<'py, f64>,
        dirichlet: Option<PyReadonlyArray2<'py, f64>>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let (rows, columns, b) = column_major(&b);
        let dirichlet = dirichlet.as_ref().map(|g| column_major(g).2);
        let x = py
            .detach(|| {
                let mut state = self.lock()?;
                if rows != state.rows.len() {
                    return Err(Error::InvalidInput(format!(
                        "B has {rows} rows; this problem has {} unknowns (len(mesh.unknowns))",
                        state.rows.len()
                    )));
                }
                state.solve(&b, columns, dirichlet.as_deref())
            })
            .map_err(|e| raise(py, e))?;
        block_array(py, rows, x)
    }

    /// The set-up and the last solve: method, device, seconds per stage, iterations, the
    /// verified relative residual and the tolerance of every column.
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let info = PyDict::new(py);
        for (key, value) in &self.setup {
            info.set_item(key, value)?;
        }
        // A solve on another thread holds the lock: wait for it without the GIL.
        let (unknowns, nonzeros, last) = py
            .detach(|| {
                self.lock()
                    .map(|s| (s.rows.len(), s.solver.nonzeros(), s.last.clone()))
            })
            .map_err(|e| raise(py, e))?;
        info.set_item("unknowns", unknowns)?;
        info.set_item("nonzeros", nonzeros)?;
        let seconds = PyDict::new(py);
        for (stage, s) in self.setup_seconds.iter().chain(&last.seconds) {
            seconds.set_item(stage, s)?;
        }
        info.set_item("seconds", seconds)?;
        info.set_item("columns", last.columns)?;
        info.set_item("iterations", last.iterations)?;
        info.set_item("inner_iterations", last.inner_iterations)?;
        info.set_item("relative_residual", last.relative_residual.clone())?;
        info.set_item("tolerance", last.tolerance.clone())?;
        Ok(info)
    }
}

#[pymodule]
fn _tensorfem(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Mesh>()?;
    module.add_class::<Solver>()?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
