//! One configured run, start to finish: mesh, assembly of the stiffness matrix and of a
//! block of manufactured right-hand sides, set-up, block solve, verification of every
//! column (f64 residual of the nodal system, L2 error against the exact solution), HDF5
//! output with an XDMF sidecar.

use std::fmt;
use std::path::PathBuf;
use std::time::Instant;

use half::f16;

use crate::backend::{cpu, cuda, Backend};
use crate::comm::Comm;
use crate::config::{MeshKind, MeshSpec, Method, RunConfig, SolverSpec};
use crate::error::{Error, Result};
use crate::fem::{
    assemble_loads, assemble_poisson, l2_error, nodal_l2_error, Dofs, Exact, Manufactured,
};
use crate::io::{h5, xdmf};
use crate::mesh::{unit_cube, unit_square, unit_square_refined, Element, Mesh};
use crate::mg::{random_initial_guess, MgParams, Multigrid, StopParams};
use crate::precision::{Precision, Real, Stored};
use crate::psc::{CacheOutcome, OperatorCache, PscSetup, RefineParams, M1};
use crate::reference::CholeskySolver;
use crate::sparse::Csr;

/// The verification of one right-hand side.
#[derive(Clone, Copy, Debug)]
pub struct ColumnReport {
    pub l2_error: f64,
    pub relative_l2_error: f64,
    pub nodal_l2_error: f64,
    pub relative_residual: f64,
}

/// What a run produced, for the printed summary.
#[derive(Clone, Debug)]
pub struct JobSummary {
    pub description: String,
    pub backend: String,
    pub unknowns: usize,
    pub nonzeros: usize,
    /// Wave number of each column.
    pub ks: Vec<u32>,
    pub columns: Vec<ColumnReport>,
    /// How the set-up was obtained (cache loaded/built), if there was one to cache.
    pub setup_note: Option<String>,
    /// Refinement steps (PSC-IR) or V-cycles (multigrid) of the slowest column, when the
    /// method iterates.
    pub refine_iterations: Option<usize>,
    pub seconds: StageSeconds,
    pub output: PathBuf,
    pub xdmf: PathBuf,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct StageSeconds {
    pub mesh: f64,
    pub assembly: f64,
    pub setup: f64,
    pub solve: f64,
    pub verify: f64,
    pub write: f64,
}

impl StageSeconds {
    pub fn total(&self) -> f64 {
        self.mesh + self.assembly + self.setup + self.solve + self.verify + self.write
    }
}

/// Columns listed in the printed summary; the HDF5 file has all of them.
const PRINTED_COLUMNS: usize = 12;

impl fmt::Display for JobSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.seconds;
        let nrhs = self.columns.len();
        writeln!(f, "tensorfem run: {}", self.description)?;
        writeln!(f, "  backend             {}", self.backend)?;
        writeln!(
            f,
            "  unknowns            {} × {nrhs} right-hand side(s)",
            self.unknowns
        )?;
        writeln!(f, "  nonzeros            {}", self.nonzeros)?;
        if let Some(note) = &self.setup_note {
            writeln!(f, "  set-up              {note}")?;
        }
        if let Some(it) = self.refine_iterations {
            writeln!(f, "  iterations          {it} (slowest column)")?;
        }
        writeln!(
            f,
            "  column      k     L2 error    rel. L2 error  nodal L2 error  rel. residual (f64)"
        )?;
        for (c, (r, k)) in self
            .columns
            .iter()
            .zip(&self.ks)
            .enumerate()
            .take(PRINTED_COLUMNS)
        {
            writeln!(
                f,
                "  {c:>6} {k:>6}  {:>11.4e}  {:>13.4e}  {:>14.4e}  {:>13.3e}",
                r.l2_error, r.relative_l2_error, r.nodal_l2_error, r.relative_residual
            )?;
        }
        if nrhs > PRINTED_COLUMNS {
            writeln!(
                f,
                "  … {} more column(s) in the output file",
                nrhs - PRINTED_COLUMNS
            )?;
        }
        writeln!(
            f,
            "  time [s]            total {:.3}: mesh {:.3}, assembly {:.3}, set-up {:.3}, solve {:.3}, verify {:.3}, write {:.3}",
            s.total(),
            s.mesh,
            s.assembly,
            s.setup,
            s.solve,
            s.verify,
            s.write
        )?;
        writeln!(
            f,
            "  throughput          {:.2} MDof/s (unknowns × right-hand sides / solve seconds)",
            (self.unknowns * nrhs) as f64 / s.solve.max(1e-12) / 1e6
        )?;
        write!(
            f,
            "  output              {} (ParaView: {})",
            self.output.display(),
            self.xdmf.display()
        )
    }
}

/// Bytes of memory this machine can still give (Linux MemAvailable), if known.
pub(crate) fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A generous estimate of the bytes a run needs: assembly, the block of right-hand sides
/// and solutions, and the solver (sparse Cholesky factor with nested-dissection fill of
/// about 10 N log2 N entries in 2D and 10 N^{4/3} in 3D; PSC: Λ, Π, Π⁻¹ and the
/// factorisation workspace, about four dense |E|×|E| f64 matrices, plus SᵀAS).
fn estimated_bytes(m: &MeshSpec, solver: &SolverSpec, nrhs: usize) -> f64 {
    let unknowns = m.unknowns() as f64;
    let k = m.element.nodes_per_cell() as f64;
    let nrhs = nrhs as f64;
    let assembly =
        m.cells() as f64 * (k * k + k) * 8.0 + unknowns * 27.0 * 40.0 + m.nodes() as f64 * 80.0;
    let block = nrhs * (unknowns * 8.0 * 6.0 + m.nodes() as f64 * 8.0 * 2.0);
    let solver = match solver.method {
        // A Stokes run sizes itself (stokes::check_memory); it has no Poisson operator.
        Method::Stokes => 0.0,
        Method::Cholesky => {
            let entries = if m.dim() == 2 {
                10.0 * unknowns * unknowns.log2().max(1.0)
            } else {
                10.0 * unknowns.powf(4.0 / 3.0)
            };
            entries * 16.0
        }
        Method::Mg => {
            // Levels: 4/3 (2D) or 8/7 (3D) of the finest; ELLPACK with 12 bytes per entry
            // in f64, three block vectors per level, the f64 refinement state.
            let width = if m.dim() == 2 { 9.0 } else { 27.0 };
            unknowns * 1.5 * (width * 12.0 * 2.0 + nrhs * 8.0 * 6.0)
        }
        Method::PscM1 => {
            let (n, n0) = (m.n as f64, m.coarse.map_or(1, |c| c.0) as f64);
            let e = match m.element {
                Element::P1 => (3.0 * n0 - 2.0) * (n - n0),
                _ => 2.0 * (n0 - 1.0) * (n - n0),
            };
            let levels = m.coarse.map_or(1, |c| c.1) as f64;
            4.0 * 8.0 * e * e
                + unknowns * (40.0 * levels + 40.0) * 12.0
                + nrhs * unknowns * 8.0 * 10.0
        }
    };
    assembly + block + solver
}

/// Refuses a problem this machine's memory cannot hold, naming what to change.
pub fn check_memory(mesh: &MeshSpec, solver: &SolverSpec, nrhs: usize) -> Result<()> {
    let Some(available) = available_memory() else {
        return Ok(());
    };
    let needed = estimated_bytes(mesh, solver, nrhs);
    if needed > available as f64 {
        return Err(Error::InvalidInput(format!(
            "this problem ({} unknowns × {nrhs} right-hand sides, method {}) needs about {:.1} GiB of memory, but only {:.1} GiB are available; use a smaller mesh.n or fewer right-hand sides at once{}",
            mesh.unknowns(),
            solver.method.name(),
            needed / 2f64.powi(30),
            available as f64 / 2f64.powi(30),
            if solver.method == Method::PscM1 { " or a larger mesh.h0" } else { "" }
        )));
    }
    Ok(())
}

fn describe(config: &RunConfig) -> String {
    let m = &config.mesh;
    let coarse = m
        .coarse
        .map(|(n0, levels)| format!(", refined {levels}× from h0 = 1/{n0}"))
        .unwrap_or_default();
    let s = &config.solver;
    let precision = match (&s.mg, s.method == Method::PscM1 && s.refine) {
        (Some(mg), _) => format!(
            "{} levels {} ({}), smoother {}{}",
            mg.schedule.len(),
            mg.variant.map_or("custom schedule", |v| v.name()),
            crate::mg::schedule_name(&mg.schedule),
            mg.smoother_name,
            if s.refine {
                ", inside f64 refinement"
            } else {
                ", stand-alone in f64"
            }
        ),
        (None, true) => format!("{} inside f64 refinement (PSC-IR)", s.precision),
        (None, false) => s.precision.to_string(),
    };
    format!(
        "{} {} mesh, h = 1/{}{coarse}; u = sin(kπx)·… for {} right-hand side(s); method {} in {precision}",
        m.element.name(),
        m.kind.name(),
        m.n,
        config.ks.len(),
        s.method.name(),
    )
}

/// Runs the configured job. The block runs on rank 0; other ranks have no work and return
/// `None` (campaigns spread work over ranks).
pub fn run(config: &RunConfig, comm: &dyn Comm) -> Result<Option<JobSummary>> {
    let method = config.solver.method;
    let backend = Backend::select(
        config.backend,
        &cuda::probe(),
        method.name(),
        method.has_cuda(),
        comm.local_rank(),
    )?;
    if !comm.is_root() {
        log::info!("a single run executes on rank 0; this rank has no work");
        return Ok(None);
    }
    log::info!("backend: {backend}");
    check_memory(&config.mesh, &config.solver, config.ks.len())?;

    let t = Instant::now();
    match build_mesh(&config.mesh)? {
        AnyMesh::Square(mesh) => {
            solve_and_write(config, mesh, t.elapsed().as_secs_f64(), &backend).map(Some)
        }
        AnyMesh::Cube(mesh) => {
            solve_and_write(config, mesh, t.elapsed().as_secs_f64(), &backend).map(Some)
        }
    }
}

/// A mesh of the unit square (2D) or cube (3D).
pub enum AnyMesh {
    Square(Mesh<2>),
    Cube(Mesh<3>),
}

/// The mesh a spec describes (refined from its coarse mesh when it has h0).
pub fn build_mesh(spec: &MeshSpec) -> Result<AnyMesh> {
    Ok(match spec.kind {
        MeshKind::UnitSquare => AnyMesh::Square(match spec.coarse {
            Some((n0, levels)) => unit_square_refined(n0, levels, spec.element)?,
            None => unit_square(spec.n, spec.element)?,
        }),
        MeshKind::UnitCube => AnyMesh::Cube(unit_cube(spec.n)?),
    })
}

/// An [`Operator`] in 2D or 3D.
pub enum AnyOperator {
    Square(Operator<2>),
    Cube(Operator<3>),
}

impl AnyOperator {
    pub fn new(mesh: &MeshSpec, solver: &SolverSpec) -> Result<Self> {
        Ok(match build_mesh(mesh)? {
            AnyMesh::Square(m) => AnyOperator::Square(Operator::new(m, mesh, solver)?),
            AnyMesh::Cube(m) => AnyOperator::Cube(Operator::new(m, mesh, solver)?),
        })
    }
}

/// Runs `$body` with `$op` bound to the [`Operator`] inside an [`AnyOperator`].
#[macro_export]
macro_rules! with_operator {
    ($any:expr, $op:ident => $body:expr) => {
        match $any {
            $crate::job::AnyOperator::Square($op) => $body,
            $crate::job::AnyOperator::Cube($op) => $body,
        }
    };
}

/// The solver of a run, set up.
enum BlockSolver {
    Cholesky(CholeskySolver),
    Multigrid {
        mg: Box<Multigrid>,
        refine: bool,
        stop: StopParams,
        seed: u64,
    },
    Psc64(M1<f64>),
    Psc32(M1<f32>),
    Psc16(M1<f16>),
}

/// What one block solve gave.
pub struct BlockOutcome {
    /// The solutions, column-major (unknowns × nrhs).
    pub u: Vec<f64>,
    /// Refinement steps (PSC-IR) or V-cycles (multigrid) of the slowest column, when the
    /// method iterates.
    pub iterations: Option<usize>,
    /// Floating-point operations counted (PSC only: GEMMs 2mnk, sparse products 2 nnz).
    pub flops: Option<f64>,
}

/// Solves the column-major block `b` (N × nrhs) with M1 alone or inside PSC-IR.
fn psc_solve<S: Stored>(
    m1: &M1<S>,
    a: &Csr<f64>,
    b: &[f64],
    nrhs: usize,
    refine: Option<RefineParams>,
) -> Result<BlockOutcome> {
    let per_apply = m1.flops_per_rhs() * nrhs as f64;
    match refine {
        Some(params) => {
            let mut x = vec![0.0; b.len()];
            let info = m1.solve_refined(a, b, &mut x, &mut m1.refine_workspace(nrhs), params)?;
            // Each step: one M1 apply and one f64 residual (2 nnz per column).
            let per_step = per_apply + 2.0 * a.nnz() as f64 * nrhs as f64;
            Ok(BlockOutcome {
                u: x,
                iterations: Some(info.iterations),
                flops: Some(per_step * (info.iterations + 1) as f64),
            })
        }
        None => {
            let low: Vec<S::Compute> = b.iter().map(|&v| S::Compute::from_f64(v)).collect();
            let mut x = low.clone();
            m1.solve(&low, &mut x, &mut m1.workspace(nrhs))?;
            Ok(BlockOutcome {
                u: x.iter().map(|v| v.to_f64()).collect(),
                iterations: None,
                flops: Some(per_apply),
            })
        }
    }
}

impl BlockSolver {
    fn solve(
        &mut self,
        a: &Csr<f64>,
        b: &[f64],
        nrhs: usize,
        refine: Option<RefineParams>,
    ) -> Result<BlockOutcome> {
        match self {
            BlockSolver::Cholesky(c) => {
                let n = c.dim();
                let mut x = faer::Mat::from_fn(n, nrhs, |i, j| b[i + j * n]);
                c.solve_in_place(x.as_mut());
                Ok(BlockOutcome {
                    u: (0..nrhs)
                        .flat_map(|j| x.col(j).iter().copied().collect::<Vec<_>>())
                        .collect(),
                    iterations: None,
                    flops: None,
                })
            }
            BlockSolver::Multigrid {
                mg,
                refine,
                stop,
                seed,
            } => {
                let n = mg.unknowns();
                let mut u: Vec<f64> = (0..nrhs)
                    .flat_map(|c| random_initial_guess(n, *seed + c as u64))
                    .collect();
                let info = if *refine {
                    mg.solve_refined(b, &mut u, nrhs, *stop)?
                } else {
                    mg.solve_plain(b, &mut u, nrhs, *stop)?
                };
                Ok(BlockOutcome {
                    u,
                    iterations: Some(info.max_iterations()),
                    flops: None,
                })
            }
            BlockSolver::Psc64(m) => psc_solve(m, a, b, nrhs, refine),
            BlockSolver::Psc32(m) => psc_solve(m, a, b, nrhs, refine),
            BlockSolver::Psc16(m) => psc_solve(m, a, b, nrhs, refine),
        }
    }
}

/// M1 in precision S through the operator cache when enabled, with a note on where its
/// set-up came from.
fn psc_m1<S: Stored + hdf5::H5Type>(
    mesh: &MeshSpec,
    solver: &SolverSpec,
) -> Result<(M1<S>, String)> {
    let (n0, levels) = mesh.coarse.expect("validated: psc-m1 has h0");
    let element = mesh.element;
    let (m1, note) = match &solver.cache_dir {
        Some(dir) => {
            let (m1, outcome) =
                OperatorCache::new(dir).load_or_build_m1::<S>(element, n0, levels)?;
            let note = match outcome {
                CacheOutcome::Loaded(p) => {
                    format!("loaded from the operator cache {}", p.display())
                }
                CacheOutcome::Built(p) => {
                    format!("computed and saved to the operator cache {}", p.display())
                }
                CacheOutcome::Rebuilt { path, reason } => {
                    format!("recomputed ({reason}) and saved to {}", path.display())
                }
            };
            (m1, note)
        }
        None => (
            M1::new(&PscSetup::new(element, n0, levels)?)?,
            "computed (operator cache disabled)".to_string(),
        ),
    };
    let (c, e, i, groups) = m1.class_sizes();
    Ok((
        m1,
        format!("{note}; |C| = {c}, |E| = {e}, |I| = {i}, {groups} group(s)"),
    ))
}

/// Sets up PSC in the configured precision.
fn psc_setup(mesh: &MeshSpec, solver: &SolverSpec) -> Result<(BlockSolver, String)> {
    Ok(match solver.precision {
        Precision::F64 => {
            let (m1, note) = psc_m1::<f64>(mesh, solver)?;
            (BlockSolver::Psc64(m1), note)
        }
        Precision::F32 => {
            let (m1, note) = psc_m1::<f32>(mesh, solver)?;
            (BlockSolver::Psc32(m1), note)
        }
        Precision::F16 => {
            let (m1, note) = psc_m1::<f16>(mesh, solver)?;
            (BlockSolver::Psc16(m1), note)
        }
    })
}

/// The cache file a PSC set-up of this mesh is read from and written to, if any: ranks that
/// need the same file take turns (no two write it).
pub fn operator_cache_file(mesh: &MeshSpec, solver: &SolverSpec) -> Option<PathBuf> {
    match (solver.method, &solver.cache_dir, mesh.coarse) {
        (Method::PscM1, Some(dir), Some((n0, levels))) => {
            Some(OperatorCache::new(dir).path_for(mesh.element, n0, levels))
        }
        _ => None,
    }
}

/// A mesh with its assembled stiffness matrix and the configured solver, set up once and
/// applied to any number of blocks of right-hand sides.
pub struct Operator<const D: usize> {
    pub mesh: Mesh<D>,
    pub matrix: Csr<f64>,
    pub dofs: Dofs,
    solver: BlockSolver,
    refine: Option<RefineParams>,
    /// How the set-up was obtained (cache loaded/built), when there is one worth saying.
    pub setup_note: Option<String>,
    pub assembly_seconds: f64,
    pub setup_seconds: f64,
}

impl<const D: usize> Operator<D> {
    /// Assembles the stiffness matrix of `mesh` and sets up the solver.
    pub fn new(mesh: Mesh<D>, mesh_spec: &MeshSpec, solver_spec: &SolverSpec) -> Result<Self> {
        let t = Instant::now();
        let sys = assemble_poisson(&mesh, |_| 0.0)?;
        let (matrix, dofs) = (sys.matrix, sys.dofs);
        let assembly_seconds = t.elapsed().as_secs_f64();
        log::info!(
            "assembled {} unknowns, {} nonzeros in {assembly_seconds:.3} s",
            dofs.len(),
            matrix.nnz(),
        );

        let t = Instant::now();
        let (solver, setup_note) = match solver_spec.method {
            Method::Mg => {
                let spec = solver_spec
                    .mg
                    .as_ref()
                    .expect("validated: mg has its settings");
                let mg = Multigrid::new(
                    D,
                    mesh_spec.n,
                    &matrix,
                    MgParams {
                        schedule: spec.schedule.clone(),
                        smoother: spec.smoother,
                        base_tolerance: 1e-4,
                        residual_scaling: spec.residual_scaling,
                    },
                )?;
                let note = format!(
                    "{} levels, matrices {:.1} MiB (ELLPACK, each level in its precision)",
                    spec.schedule.len(),
                    mg.operator_bytes() / 1048576.0
                );
                (
                    BlockSolver::Multigrid {
                        mg: Box::new(mg),
                        refine: solver_spec.refine,
                        stop: StopParams {
                            tolerance: solver_spec.tolerance,
                            max_iterations: solver_spec.max_iterations,
                        },
                        seed: spec.seed,
                    },
                    Some(note),
                )
            }
            Method::Cholesky => (
                BlockSolver::Cholesky(CholeskySolver::factor(&matrix)?),
                None,
            ),
            Method::PscM1 => {
                let (solver, note) = psc_setup(mesh_spec, solver_spec)?;
                (solver, Some(note))
            }
            Method::Stokes => return Err(Error::InvalidInput(
                "method stokes solves the Stokes system (stokes::solve), not a Poisson operator"
                    .into(),
            )),
        };
        let setup_seconds = t.elapsed().as_secs_f64();
        let refine =
            (solver_spec.refine && solver_spec.method == Method::PscM1).then_some(RefineParams {
                relative_tolerance: solver_spec.tolerance,
                max_iterations: solver_spec.max_iterations,
            });
        Ok(Operator {
            mesh,
            matrix,
            dofs,
            solver,
            refine,
            setup_note,
            assembly_seconds,
            setup_seconds,
        })
    }

    pub fn unknowns(&self) -> usize {
        self.dofs.len()
    }

    /// Load vectors of the exact solutions' f, column-major (unknowns × len).
    pub fn loads(&self, exact: &[Exact]) -> Vec<f64> {
        let loads: Vec<_> = exact.iter().map(|m| move |x: &[f64]| m.f(x)).collect();
        assemble_loads(&self.mesh, &self.dofs, &loads)
    }

    /// Solves the column-major block `rhs` (unknowns × nrhs).
    pub fn solve(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        self.solver.solve(&self.matrix, rhs, nrhs, self.refine)
    }

    /// The f64 residual of every column and, where its exact solution is known, the L2
    /// errors; a column that is not finite is an error.
    pub fn verify(
        &self,
        rhs: &[f64],
        u: &[f64],
        exact: &[Option<Exact>],
    ) -> Result<Vec<ColumnReport>> {
        let n = self.unknowns();
        let mut residual = vec![0.0; n];
        let columns: Vec<ColumnReport> = exact
            .iter()
            .enumerate()
            .map(|(c, exact)| {
                let (b, x) = (&rhs[c * n..(c + 1) * n], &u[c * n..(c + 1) * n]);
                cpu::residual(&self.matrix, b, x, &mut residual);
                let b_norm = cpu::nrm2(b);
                let relative_residual = if b_norm > 0.0 {
                    cpu::nrm2(&residual) / b_norm
                } else {
                    cpu::nrm2(&residual)
                };
                match exact {
                    Some(m) => {
                        let l2 = l2_error(&self.mesh, &self.dofs, x, |p| m.u(p));
                        ColumnReport {
                            l2_error: l2,
                            relative_l2_error: l2 / m.l2_norm(),
                            nodal_l2_error: nodal_l2_error(&self.mesh, &self.dofs, x, |p| m.u(p)),
                            relative_residual,
                        }
                    }
                    None => ColumnReport {
                        l2_error: f64::NAN,
                        relative_l2_error: f64::NAN,
                        nodal_l2_error: f64::NAN,
                        relative_residual,
                    },
                }
            })
            .collect();
        if let Some((c, r)) = columns.iter().enumerate().find(|(c, r)| {
            !(r.relative_residual.is_finite() && (exact[*c].is_none() || r.l2_error.is_finite()))
        }) {
            return Err(Error::Solver(format!(
                "the solution of right-hand side {c} is not finite (relative residual {}, L2 error {})",
                r.relative_residual, r.l2_error
            )));
        }
        Ok(columns)
    }
}

fn solve_and_write<const D: usize>(
    config: &RunConfig,
    mesh: Mesh<D>,
    mesh_seconds: f64,
    backend: &Backend,
) -> Result<JobSummary> {
    let nrhs = config.ks.len();
    let exact: Vec<Exact> = config
        .ks
        .iter()
        .map(|&k| Exact::Wave(Manufactured::new(k, D)))
        .collect();
    let mut op = Operator::new(mesh, &config.mesh, &config.solver)?;
    let t = Instant::now();
    let rhs = op.loads(&exact);
    let mut seconds = StageSeconds {
        mesh: mesh_seconds,
        assembly: op.assembly_seconds + t.elapsed().as_secs_f64(),
        setup: op.setup_seconds,
        ..Default::default()
    };

    let t = Instant::now();
    let outcome = op.solve(&rhs, nrhs)?;
    seconds.solve = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let known: Vec<Option<Exact>> = exact.iter().copied().map(Some).collect();
    let columns = op.verify(&rhs, &outcome.u, &known)?;
    seconds.verify = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let (output, xdmf) = write_output(
        config,
        &op.mesh,
        &op.dofs.to_nodal_block(&outcome.u),
        &exact,
        &columns,
        &seconds,
        backend,
        op.matrix.nnz(),
        outcome.iterations,
    )?;
    seconds.write = t.elapsed().as_secs_f64();

    Ok(JobSummary {
        description: describe(config),
        backend: backend.to_string(),
        unknowns: op.unknowns(),
        nonzeros: op.matrix.nnz(),
        ks: config.ks.clone(),
        columns,
        setup_note: op.setup_note.clone(),
        refine_iterations: outcome.iterations,
        seconds,
        output,
        xdmf,
    })
}

#[allow(clippy::too_many_arguments)]
fn write_output<const D: usize>(
    config: &RunConfig,
    mesh: &Mesh<D>,
    nodal: &[f64],
    exact: &[Exact],
    columns: &[ColumnReport],
    seconds: &StageSeconds,
    backend: &Backend,
    nonzeros: usize,
    refine_iterations: Option<usize>,
) -> Result<(PathBuf, PathBuf)> {
    let nodes = mesh.num_nodes();
    let nrhs = columns.len();
    let hdf5_error = |what: &str| {
        let what = what.to_string();
        move |e: hdf5::Error| Error::Hdf5 {
            path: config.output.clone(),
            message: format!("{what}: {e}"),
        }
    };
    let writer = h5::H5Writer::create(&config.output)?;
    let root = writer.root();
    h5::write_provenance(root, Some(&config.source))?;
    {
        let mesh_group = root
            .create_group("mesh")
            .map_err(hdf5_error("creating group mesh"))?;
        h5::write_mesh(&mesh_group, mesh)?;
        let solution = root
            .create_group("solution")
            .map_err(hdf5_error("creating group solution"))?;
        h5::write_dense(&solution, "u", nodes, nrhs, nodal)?;
        let exact_nodal: Vec<f64> = exact
            .iter()
            .flat_map(|m| mesh.coords.iter().map(move |x| m.u(x)))
            .collect();
        h5::write_dense(&solution, "exact", nodes, nrhs, &exact_nodal)?;
        h5::write_vector(&solution, "k", &config.ks)?;
        h5::write_vector(
            &solution,
            "l2_error",
            &columns.iter().map(|c| c.l2_error).collect::<Vec<_>>(),
        )?;
        h5::write_vector(
            &solution,
            "relative_l2_error",
            &columns
                .iter()
                .map(|c| c.relative_l2_error)
                .collect::<Vec<_>>(),
        )?;
        h5::write_vector(
            &solution,
            "nodal_l2_error",
            &columns.iter().map(|c| c.nodal_l2_error).collect::<Vec<_>>(),
        )?;
        h5::write_vector(
            &solution,
            "relative_residual",
            &columns
                .iter()
                .map(|c| c.relative_residual)
                .collect::<Vec<_>>(),
        )?;
        h5::write_str_attr(&solution, "method", config.solver.method.name())?;
        match &config.solver.mg {
            // Multigrid: the precision of every level, finest first.
            Some(mg) => {
                let names: Vec<&str> = mg.schedule.iter().map(|p| p.name()).collect();
                h5::write_str_attr(&solution, "precision", &names.join(","))?;
            }
            None => h5::write_str_attr(&solution, "precision", config.solver.precision.name())?,
        }
        h5::write_str_attr(&solution, "backend", &backend.to_string())?;
        h5::write_scalar_attr(
            &solution,
            "refine_iterations",
            refine_iterations.map_or(-1, |i| i as i64),
        )?;
        h5::write_scalar_attr(&solution, "unknowns", mesh.num_interior() as u64)?;
        h5::write_scalar_attr(&solution, "nonzeros", nonzeros as u64)?;
        for (name, value) in [
            ("mesh_seconds", seconds.mesh),
            ("assembly_seconds", seconds.assembly),
            ("setup_seconds", seconds.setup),
            ("solve_seconds", seconds.solve),
            ("verify_seconds", seconds.verify),
        ] {
            h5::write_scalar_attr(&solution, name, value)?;
        }
    }
    let output = writer.commit()?;
    let names: Vec<(String, usize)> = (0..nrhs)
        .flat_map(|c| [(format!("u_{c}"), c), (format!("exact_{c}"), c)])
        .collect();
    let fields: Vec<xdmf::NodalField<'_>> = names
        .iter()
        .map(|(name, c)| xdmf::NodalField {
            name,
            dataset: if name.starts_with('u') {
                "/solution/u"
            } else {
                "/solution/exact"
            },
            column: *c,
            columns: nrhs,
        })
        .collect();
    let xdmf = xdmf::write_sidecar(&output, mesh.element, nodes, mesh.num_cells(), &fields)?;
    Ok((output, xdmf))
}
