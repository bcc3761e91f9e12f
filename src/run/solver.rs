//! The operator/solver dispatch: a mesh's assembled system with the configured solver, set
//! up once and applied to blocks of right-hand sides; memory estimates; and the campaign's
//! operators built from it.

use std::path::PathBuf;
use std::time::Instant;

use half::f16;

use super::Backend;
use crate::campaign::{BatchOperator, BlockOutcome, Operators};
use crate::config::{Method, OperatorSpec, SolverSpec};
use crate::error::{Error, Result};
use crate::fem::{assemble_loads, assemble_poisson, verify, ColumnReport, Dofs, Exact};
use crate::mesh::{self, Element, Mesh, MeshSpec};
use crate::mg::{random_initial_guess, MgParams, Multigrid, StopParams};
use crate::precision::{Precision, Real, Stored};
use crate::psc::{CacheOutcome, OperatorCache, PscSetup, RefineParams, M1};
use crate::reference::CholeskySolver;
use crate::sparse::Csr;

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
    let Some(available) = crate::sys::available_memory() else {
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

/// An [`Operator`] in 2D or 3D.
pub enum AnyOperator {
    Square(Operator<2>),
    Cube(Operator<3>),
}

impl AnyOperator {
    pub fn new(mesh: &MeshSpec, solver: &SolverSpec) -> Result<Self> {
        Ok(match mesh::build(mesh)? {
            mesh::AnyMesh::Square(m) => AnyOperator::Square(Operator::new(m, mesh, solver)?),
            mesh::AnyMesh::Cube(m) => AnyOperator::Cube(Operator::new(m, mesh, solver)?),
        })
    }
}

/// Runs `$body` with `$op` bound to the [`Operator`] inside an [`AnyOperator`].
macro_rules! with_operator {
    ($any:expr, $op:ident => $body:expr) => {
        match $any {
            AnyOperator::Square($op) => $body,
            AnyOperator::Cube($op) => $body,
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
        verify(&self.mesh, &self.dofs, &self.matrix, rhs, u, exact)
    }
}

impl BatchOperator for AnyOperator {
    fn unknowns(&self) -> usize {
        with_operator!(self, op => op.unknowns())
    }

    fn loads(&self, exact: &[Exact]) -> Vec<f64> {
        with_operator!(self, op => op.loads(exact))
    }

    fn solve(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        with_operator!(self, op => op.solve(rhs, nrhs))
    }

    fn verify(&self, rhs: &[f64], u: &[f64], exact: &[Option<Exact>]) -> Result<Vec<ColumnReport>> {
        with_operator!(self, op => op.verify(rhs, u, exact))
    }

    fn to_nodal(&self, u: &[f64]) -> Vec<f64> {
        with_operator!(self, op => op.dofs.to_nodal_block(u))
    }
}

/// The operators of a campaign on this rank's backend.
pub struct CampaignOperators {
    pub backend: Backend,
}

impl Operators for CampaignOperators {
    fn device(&self) -> String {
        self.backend.to_string()
    }

    fn check_memory(&self, op: &OperatorSpec, nrhs: usize) -> Result<()> {
        check_memory(&op.mesh, &op.solver, nrhs)
    }

    fn cache_file(&self, op: &OperatorSpec) -> Option<PathBuf> {
        operator_cache_file(&op.mesh, &op.solver)
    }

    fn set_up(&self, op: &OperatorSpec) -> Result<Box<dyn BatchOperator>> {
        Ok(Box::new(AnyOperator::new(&op.mesh, &op.solver)?))
    }
}
