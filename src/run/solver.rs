//! The operator/solver dispatch: a mesh's assembled system with the configured solver, set
//! up once on this rank's device and applied to blocks of right-hand sides; memory
//! estimates; and the campaign's operators built from it. Every solver here is generic
//! over the device; [`super::backend`] decides which one a run gets.

use std::path::PathBuf;
use std::time::Instant;

use half::f16;

use super::backend::Backend;
use super::conditions::BoundaryProblem;
use crate::campaign::{
    BatchOperator, BatchRhs, BlockOutcome, Checks, ColumnSource, InputColumns, Operators,
};
use crate::config::{Method, OperatorSpec, SolverSpec};
use crate::device::cuda::Cuda;
use crate::device::{Block, Cpu, Device, Layout, MultigridDevice, PscDevice, Storage};
use crate::error::{Error, Result};
use crate::fem::{
    assemble_stiffness, relative_residuals, verify, ColumnReport, Dofs, Exact, ModeBasis,
};
use crate::linalg::{magnitude, LinOp, Tolerance};
use crate::mesh::{self, unit_square_refined, Element, Mesh, Mesh2d, MeshSpec};
use crate::mg::{random_initial_guess, MgParams, Multigrid, PinnedEmbedding, StopParams};
use crate::precision::Precision;
use crate::psc::{
    CacheOutcome, InnerCg, InverseCheck, OperatorCache, PscIr, PscMethod, PscOperator, PscSetup,
    RefineParams, SetupKey, UncheckedInverses,
};
use crate::reference::CholeskySolver;
use crate::sparse::Csr;

/// A generous estimate of the bytes a run needs: assembly, the block of right-hand sides
/// and solutions, and the solver (sparse Cholesky factor with nested-dissection fill of
/// about 10 N log2 N entries in 2D and 10 N^{4/3} in 3D; PSC: `psc::estimated_bytes`, on
/// other meshes with the unit square's class counts for the same n and n0).
fn estimated_bytes(m: &MeshSpec, solver: &SolverSpec, nrhs: usize, backend: &Backend) -> f64 {
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
        method @ (Method::PscM1 | Method::PscM2 | Method::PscM3) => {
            let (n0, levels) = m.coarse.unwrap_or((1, 1));
            // On a GPU the solve's workspace is the device's; the host holds the block.
            let host_vectors = match backend {
                Backend::Cuda(_) => 0.0,
                Backend::Cpu { .. } => crate::psc::HOST_SOLVE_VECTORS,
            };
            crate::psc::estimated_bytes(
                psc_method(method),
                m.unknowns(),
                crate::psc::class_counts(m.element, m.n, n0),
                levels,
                nrhs as usize,
                host_vectors,
            )
        }
    };
    assembly + block + solver
}

/// Refuses a problem this machine's memory cannot hold, naming what to change.
pub fn check_memory(
    mesh: &MeshSpec,
    solver: &SolverSpec,
    nrhs: usize,
    backend: &Backend,
) -> Result<()> {
    let Some(available) = crate::sys::available_memory() else {
        return Ok(());
    };
    let needed = estimated_bytes(mesh, solver, nrhs, backend);
    if needed > available as f64 {
        let classes = match (solver.method.is_psc(), mesh.coarse) {
            (true, Some((n0, _))) => {
                let (c, e) = crate::psc::class_counts(mesh.element, mesh.n, n0);
                format!(", |C| = {c}, |E| = {e}")
            }
            _ => String::new(),
        };
        return Err(Error::InvalidInput(format!(
            "this problem ({} unknowns × {nrhs} right-hand sides, method {}{classes}) needs about {:.1} GiB of memory, but only {:.1} GiB are available; use a smaller mesh.n or fewer right-hand sides at once{}",
            mesh.unknowns(),
            solver.method.name(),
            needed / 2f64.powi(30),
            available as f64 / 2f64.powi(30),
            match solver.method {
                Method::PscM3 => " or a larger mesh.h0",
                Method::PscM1 | Method::PscM2 => " or a larger mesh.h0, or method psc-m3 (no dense |E|×|E| operator)",
                _ => "",
            }
        )));
    }
    Ok(())
}

/// What a solver keeps on its device: for the memory plan and its messages.
#[derive(Clone, Copy)]
struct Footprint<'a> {
    /// The method, as the log names it.
    what: &'a str,
    /// Bytes of its resident operators.
    operators: f64,
    /// Bytes one right-hand side occupies during a solve.
    per_column: usize,
    /// What to change where not even one right-hand side fits.
    advice: &'a str,
}

/// The widest block one solve holds on the device, planned once from its free memory after
/// the set-up (80 % of it); no limit on the host, whose memory the run checks up front.
#[derive(Default)]
struct ColumnPlan {
    /// Most columns per solve (None: no limit, or not yet planned).
    max_columns: Option<usize>,
    planned: bool,
}

impl ColumnPlan {
    /// The width to solve a block of `nrhs` columns in (planned and logged on first use):
    /// an error naming the sizes where not even one column fits.
    fn width<D: Device>(&mut self, dev: &D, plan: Footprint, nrhs: usize) -> Result<usize> {
        if !self.planned {
            self.planned = true;
            self.max_columns = Self::fits(dev, plan, nrhs)?;
        }
        Ok(self.max_columns.unwrap_or(nrhs).clamp(1, nrhs.max(1)))
    }

    fn fits<D: Device>(dev: &D, plan: Footprint, nrhs: usize) -> Result<Option<usize>> {
        let Some(free) = dev.free_memory()? else {
            return Ok(None);
        };
        let gib = |bytes: f64| bytes / 2f64.powi(30);
        let fits = (free as f64 * 0.8 / plan.per_column as f64) as usize;
        let what = plan.what;
        if fits == 0 {
            return Err(Error::InvalidInput(format!(
                "{}: {:.1} GiB free after the {what} set-up (operators {:.2} GiB), but one right-hand side needs {:.1} MiB; {}",
                dev.name(),
                gib(free as f64),
                gib(plan.operators),
                plan.per_column as f64 / 2f64.powi(20),
                plan.advice
            )));
        }
        log::info!(
            "memory plan on {}: {what} operators {:.2} GiB resident, {:.1} GiB free, {:.2} MiB per right-hand side → up to {fits} columns per solve ({})",
            dev.name(),
            gib(plan.operators),
            gib(free as f64),
            plan.per_column as f64 / 2f64.powi(20),
            if nrhs > fits {
                format!("blocks of {nrhs} are solved in {} chunks", nrhs.div_ceil(fits))
            } else {
                format!("a block of {nrhs} fits")
            }
        );
        Ok(Some(fits))
    }
}

/// Solves the column-major block `b` (n × nrhs) in chunks of at most `width` columns,
/// `solve(chunk, its columns of the scope)`, and merges the outcomes in order.
fn solve_in_chunks(
    b: &[f64],
    n: usize,
    scope: &Scope,
    width: usize,
    mut solve: impl FnMut(&[f64], &Scope) -> Result<BlockOutcome>,
) -> Result<BlockOutcome> {
    let nrhs = scope.columns.len();
    if width >= nrhs {
        return solve(b, scope);
    }
    let mut all = BlockOutcome::empty(b.len());
    for first in (0..nrhs).step_by(width) {
        let cols = width.min(nrhs - first);
        let part = Scope {
            columns: &scope.columns[first..first + cols],
            factor: scope.factor,
        };
        all.merge(solve(&b[first * n..(first + cols) * n], &part)?);
    }
    Ok(all)
}

/// Which columns of the caller's block a solve works on, and by how much they were scaled.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// The index of each column in the caller's block (multigrid seeds its initial guess
    /// with it, so a column gets the same guess however the block is cut).
    pub columns: &'a [usize],
    /// The factor (a power of two) the right-hand sides were multiplied by: absolute
    /// tolerances are multiplied by it too (`linalg::magnitude`).
    pub factor: f64,
}

/// A PSC method and, with refinement, PSC-IR around it (built for the block width it is
/// given).
struct Psc<D: PscDevice> {
    dev: D,
    /// The method alone, when no PSC-IR holds it.
    alone: Option<PscOperator<D>>,
    ir: Option<PscIr<D>>,
    refine: Option<RefineParams>,
    columns: ColumnPlan,
    /// The operator cache's inverses this solver was loaded from, not yet checked against
    /// their checksum (with refinement: see [`InverseCheck::OnFailure`]).
    unchecked: Option<UncheckedInverses>,
}

impl<D: PscDevice> Psc<D> {
    fn operator(&self) -> &PscOperator<D> {
        match (&self.alone, &self.ir) {
            (Some(m), _) => m,
            (None, Some(ir)) => ir.operator(),
            (None, None) => unreachable!("the operator is held by one of the two"),
        }
    }

    fn operator_mut(&mut self) -> &mut PscOperator<D> {
        match (&mut self.alone, &mut self.ir) {
            (Some(m), _) => m,
            (None, Some(ir)) => ir.operator_mut(),
            (None, None) => unreachable!("the operator is held by one of the two"),
        }
    }

    /// Bytes of device memory one right-hand side occupies during a solve: the method's
    /// workspace (about seven vectors in the compute precision, one in the storage
    /// precision; M3 one more I vector and its CG's E vectors), its input and output, and
    /// PSC-IR's f64 b, x and r.
    fn bytes_per_column(&self) -> usize {
        let op = self.operator();
        let (storage, compute) = (op.precision().bytes(), op.precision().compute().bytes());
        let vectors = match op.method() {
            PscMethod::M1 | PscMethod::M2 => 9,
            PscMethod::M3 => 11,
        };
        op.num_unknowns()
            * (vectors * compute + storage + if self.refine.is_some() { 24 } else { 0 })
    }

    /// Solves the column-major block `b` (N × the scope's columns), in chunks of columns
    /// where the device cannot hold it whole.
    fn solve(&mut self, a: &Csr<f64>, b: &[f64], scope: &Scope) -> Result<BlockOutcome> {
        let nrhs = scope.columns.len();
        let what = self.operator().method().to_string();
        let (operators, per_column) = (self.operator().operator_bytes(), self.bytes_per_column());
        let advice = "use a larger mesh.h0 or a smaller mesh.n";
        let plan = Footprint {
            what: &what,
            operators: operators as f64,
            per_column,
            advice,
        };
        let width = self.columns.width(&self.dev, plan, nrhs)?;
        let n = self.operator().num_unknowns();
        solve_in_chunks(b, n, scope, width, |part, chunk| {
            self.solve_block(a, part, chunk.columns.len(), chunk.factor)
        })
    }

    /// Solves one block with the method alone or inside PSC-IR (`factor`: what the
    /// right-hand sides were multiplied by, and with them the absolute tolerance).
    fn solve_block(
        &mut self,
        a: &Csr<f64>,
        b: &[f64],
        nrhs: usize,
        factor: f64,
    ) -> Result<BlockOutcome> {
        let n = self.operator().num_unknowns();
        self.operator_mut().take_counts();
        let (u, iterations, residual_flops) = match self.refine {
            Some(mut params) => {
                params.atol *= factor;
                if self.ir.as_ref().is_none_or(|ir| ir.nrhs() != nrhs) {
                    let op = match (self.alone.take(), self.ir.take()) {
                        (Some(m), _) => m,
                        (None, Some(ir)) => ir.into_operator(),
                        (None, None) => unreachable!("the operator is held by one of the two"),
                    };
                    self.ir = Some(PscIr::new(&self.dev, op, a, nrhs, params.max_iterations)?);
                }
                let ir = self.ir.as_mut().expect("just set");
                let (info, x) = match self.dev.run(|| ir.solve_from_zero(b, params)) {
                    Ok(solved) => solved,
                    Err(e) => return Err(self.failure_with_cache_checked(e.into())),
                };
                // Each step's f64 residual: 2 nnz per column.
                let residuals = 2.0 * a.nnz() as f64 * nrhs as f64 * (info.steps() + 1) as f64;
                (x, Some(info.steps()), residuals)
            }
            None => {
                let op = self.alone.as_mut().expect("the method alone");
                let kind = op.input();
                let input =
                    Block::from_f64(&self.dev, b, n, nrhs, kind.precision, Layout::ColMajor)?;
                let mut x = Block::zeros(&self.dev, n, nrhs, kind.precision, Layout::ColMajor)?;
                self.dev.run(|| op.apply(&input, &mut x))?;
                (x.to_f64(&self.dev)?, None, 0.0)
            }
        };
        let counts = self.operator_mut().take_counts();
        Ok(BlockOutcome {
            u,
            iterations,
            inner_iterations: (self.operator().method() == PscMethod::M3)
                .then_some(counts.cg_iterations),
            flops: Some(counts.flops + residual_flops),
        })
    }

    /// A failed refinement on inverses loaded from the operator cache without their
    /// checksum: when the file's inverses no longer match it, the file is removed (the
    /// next run rebuilds it) and the error says so; else the refinement's own error.
    fn failure_with_cache_checked(&mut self, failure: Error) -> Error {
        let Some(inverses) = self.unchecked.take() else {
            return failure;
        };
        let path = inverses.path().to_path_buf();
        match inverses.intact() {
            Ok(true) => failure,
            Ok(false) => {
                let removed = match std::fs::remove_file(&path) {
                    Ok(()) => "it was removed, and the next run rebuilds it".to_string(),
                    Err(e) => format!("removing it failed ({e}): delete it by hand"),
                };
                Error::Hdf5 {
                    path,
                    message: format!(
                        "the operator cache's inverses do not match their checksum: the file is corrupted; {removed} (the refinement failed: {failure})"
                    ),
                }
            }
            Err(e) => {
                log::warn!(
                    "could not check the operator cache {} after the failure: {e}",
                    path.display()
                );
                failure
            }
        }
    }
}

/// A set-up solver of a run, on the device it was built for: it solves column-major
/// blocks of right-hand sides of the f64 system `a`.
trait BlockSolve: Send {
    fn solve(&mut self, a: &Csr<f64>, b: &[f64], scope: &Scope) -> Result<BlockOutcome>;
}

impl BlockSolve for CholeskySolver {
    fn solve(&mut self, _a: &Csr<f64>, b: &[f64], scope: &Scope) -> Result<BlockOutcome> {
        let (n, nrhs) = (self.dim(), scope.columns.len());
        let mut x = faer::Mat::from_fn(n, nrhs, |i, j| b[i + j * n]);
        self.solve_in_place(x.as_mut());
        Ok(BlockOutcome {
            u: (0..nrhs)
                .flat_map(|j| x.col(j).iter().copied().collect::<Vec<_>>())
                .collect(),
            iterations: None,
            inner_iterations: None,
            flops: None,
        })
    }
}

/// Multigrid, refined or stand-alone, from a seeded random initial guess per column.
struct MultigridSolver<D: MultigridDevice> {
    dev: D,
    mg: Box<Multigrid<D>>,
    refine: bool,
    stop: StopParams,
    seed: u64,
    /// A pure Neumann problem: multigrid solves the singular system of every node.
    singular: Option<PinnedEmbedding>,
    columns: ColumnPlan,
}

impl<D: MultigridDevice> BlockSolve for MultigridSolver<D> {
    /// Solves the column-major block `b`, in chunks of columns where the device cannot
    /// hold it whole (each column from its own seeded initial guess: the same answers).
    fn solve(&mut self, _a: &Csr<f64>, b: &[f64], scope: &Scope) -> Result<BlockOutcome> {
        let nrhs = scope.columns.len();
        let plan = Footprint {
            what: "mg",
            operators: self.mg.operator_bytes(),
            per_column: self.mg.bytes_per_column(),
            advice: "use a smaller mesh.n or fewer levels in f64",
        };
        let width = self.columns.width(&self.dev, plan, nrhs)?;
        let n = b.len() / nrhs.max(1);
        solve_in_chunks(b, n, scope, width, |part, chunk| {
            self.solve_block(part, chunk)
        })
    }
}

impl<D: MultigridDevice> MultigridSolver<D> {
    /// Solves one block of the scope's columns (each from its own seeded initial guess).
    fn solve_block(&mut self, b: &[f64], scope: &Scope) -> Result<BlockOutcome> {
        let nrhs = scope.columns.len();
        let embedded;
        let b = match &self.singular {
            Some(embedding) => {
                embedded = embedding.embed(b, nrhs);
                &embedded
            }
            None => b,
        };
        let n = self.mg.unknowns();
        let mut u: Vec<f64> = scope
            .columns
            .iter()
            .flat_map(|&c| random_initial_guess(n, self.seed + c as u64))
            .collect();
        let mut stop = self.stop;
        stop.atol *= scope.factor;
        let mg = &mut self.mg;
        let info = self.dev.run(|| {
            if self.refine {
                mg.solve_refined(b, &mut u, nrhs, stop)
            } else {
                mg.solve_plain(b, &mut u, nrhs, stop)
            }
        })?;
        if let Some(embedding) = &self.singular {
            u = embedding.extract(&u);
        }
        Ok(BlockOutcome {
            u,
            iterations: Some(info.max_iterations()),
            inner_iterations: None,
            flops: None,
        })
    }
}

impl<D: PscDevice> BlockSolve for Psc<D> {
    fn solve(&mut self, a: &Csr<f64>, b: &[f64], scope: &Scope) -> Result<BlockOutcome> {
        Psc::solve(self, a, b, scope)
    }
}

/// The mesh whose hierarchy multigrid coarsens along: `general` (a refined domain, or the
/// unit square with boundary conditions) or the unit square of P1 elements, with the
/// unit square's hierarchy added for `count` levels; None for the structured Q1 unit
/// square and cube (uniform grid transfers, rediscretised levels).
fn multigrid_mesh(
    general: Option<&Mesh2d>,
    mesh_spec: &MeshSpec,
    count: usize,
) -> Result<Option<Mesh2d>> {
    let square = |on_boundary: Option<&[bool]>| -> Result<Mesh2d> {
        let levels = count - 1;
        let mut mesh = unit_square_refined(mesh_spec.n >> levels, levels, mesh_spec.element)?;
        if let Some(on_boundary) = on_boundary {
            mesh.on_boundary = on_boundary.to_vec();
        }
        Ok(mesh)
    };
    Ok(match general {
        Some(m) if m.hierarchy.is_some() => Some(m.clone()),
        Some(m) => Some(square(Some(&m.on_boundary))?),
        None if mesh_spec.dim() == 2 && mesh_spec.element == Element::P1 => Some(square(None)?),
        None => None,
    })
}

/// Multigrid on this rank's device.
fn multigrid_setup<const DIM: usize, D: MultigridDevice>(
    dev: &D,
    matrix: &Csr<f64>,
    mesh_spec: &MeshSpec,
    solver_spec: &SolverSpec,
    general: Option<&Mesh2d>,
) -> Result<(Box<dyn BlockSolve>, Option<String>)> {
    let spec = solver_spec
        .mg
        .as_ref()
        .expect("validated: mg has its settings");
    let params = MgParams {
        schedule: spec.schedule.clone(),
        smoother: spec.smoother,
        base_tolerance: 1e-4,
        residual_scaling: spec.residual_scaling,
        storage: spec.storage,
    };
    let count = spec.schedule.len();
    let pure_neumann = mesh_spec
        .boundary
        .as_ref()
        .is_some_and(|b| b.conditions().is_pure_neumann());
    let (mut mg, singular) = match multigrid_mesh(general, mesh_spec, count)? {
        Some(mesh) => Multigrid::on_mesh(dev, &mesh, matrix, params, pure_neumann)?,
        None => (Multigrid::new(dev, DIM, mesh_spec.n, matrix, params)?, None),
    };
    mg.set_krylov(spec.krylov);
    let note = format!(
        "{} levels, matrices {:.1} MiB (ELLPACK, each level in its precision)",
        spec.schedule.len(),
        mg.operator_bytes() / 1048576.0
    );
    let solver = MultigridSolver {
        dev: dev.clone(),
        mg: Box::new(mg),
        refine: solver_spec.refine,
        stop: StopParams {
            rtol: solver_spec.rtol,
            atol: solver_spec.atol,
            max_iterations: solver_spec.max_iterations,
        },
        seed: spec.seed,
        singular,
        columns: ColumnPlan::default(),
    };
    Ok((Box::new(solver), Some(note)))
}

/// The one place a method meets a device: the configured solver set up on this rank's
/// backend (Backend::select has already refused a method without a CUDA implementation),
/// for `mesh` (`conditioned`: a refined domain or boundary conditions).
fn set_up_solver<const DIM: usize>(
    backend: &Backend,
    matrix: &Csr<f64>,
    mesh: &Mesh<DIM>,
    conditioned: bool,
    mesh_spec: &MeshSpec,
    solver_spec: &SolverSpec,
) -> Result<(Box<dyn BlockSolve>, Option<String>)> {
    match (solver_spec.method, backend) {
        (Method::Cholesky, _) => Ok((Box::new(CholeskySolver::factor(matrix)?), None)),
        (Method::Mg, _) => {
            let general = mesh.planar().filter(|_| conditioned);
            match backend {
                Backend::Cpu { .. } => {
                    multigrid_setup::<DIM, _>(&Cpu::new(), matrix, mesh_spec, solver_spec, general)
                }
                Backend::Cuda(info) => multigrid_setup::<DIM, _>(
                    &Cuda::shared(info)?,
                    matrix,
                    mesh_spec,
                    solver_spec,
                    general,
                ),
            }
        }
        (Method::PscM1 | Method::PscM2 | Method::PscM3, _) => {
            set_up_psc(backend, mesh_spec, solver_spec, mesh, conditioned)
        }
        (Method::Stokes, _) => Err(Error::InvalidInput(
            "method stokes solves the Stokes system (stokes::solve), not a Poisson operator".into(),
        )),
    }
}

/// The configured PSC method on this rank's backend: its set-up comes from the mesh (and
/// the operator cache), not from the assembled matrix.
fn set_up_psc<const DIM: usize>(
    backend: &Backend,
    mesh_spec: &MeshSpec,
    solver_spec: &SolverSpec,
    mesh: &Mesh<DIM>,
    conditioned: bool,
) -> Result<(Box<dyn BlockSolve>, Option<String>)> {
    fn boxed<D: PscDevice>((psc, note): (Psc<D>, String)) -> (Box<dyn BlockSolve>, Option<String>) {
        (Box::new(psc), Some(note))
    }
    let method = psc_method(solver_spec.method);
    let mesh = PscMesh {
        mesh: mesh
            .planar()
            .expect("validated: the psc methods solve 2D problems"),
        conditioned,
    };
    match backend {
        Backend::Cpu { .. } => {
            psc_setup(&Cpu::new(), method, mesh_spec, solver_spec, mesh).map(boxed)
        }
        Backend::Cuda(info) => {
            psc_setup(&Cuda::shared(info)?, method, mesh_spec, solver_spec, mesh).map(boxed)
        }
    }
}

/// The mesh a PSC method is set up on, and whether it is a refined domain or has boundary
/// conditions (else it is the unit square with u = 0, set up and cached by its sizes).
#[derive(Clone, Copy)]
struct PscMesh<'a> {
    mesh: &'a Mesh2d,
    conditioned: bool,
}

/// A PSC method in precision S through the operator cache when enabled, with a note on
/// where its set-up came from and the cache's inverses it did not check yet.
fn psc_operator<D: PscDevice, S: Storage + hdf5::H5Type>(
    dev: &D,
    method: PscMethod,
    mesh: &MeshSpec,
    solver: &SolverSpec,
    on: PscMesh,
) -> Result<(PscOperator<D>, String, Option<UncheckedInverses>)> {
    let (n0, levels) = mesh
        .coarse
        .expect("validated: psc methods have macro elements");
    let element = mesh.element;
    let (op, note, unchecked) = match &solver.cache_dir {
        Some(dir) => {
            let check = if solver.refine {
                InverseCheck::OnFailure
            } else {
                InverseCheck::OnLoad
            };
            let cache = OperatorCache::new(dir).inverting_on(dev.clone());
            let (host, outcome, unchecked) =
                cache.load_or_build_host::<S>(&setup_key(mesh, method), on.mesh, method, check)?;
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
            (PscOperator::upload(dev, host)?, note, unchecked)
        }
        None => {
            let setup = if on.conditioned {
                PscSetup::on_mesh_inverting_on(on.mesh.clone(), method, dev)?
            } else {
                PscSetup::new_inverting_on(element, n0, levels, method, dev)?
            };
            (
                PscOperator::new(dev, &setup, S::PRECISION)?,
                "computed (operator cache disabled)".to_string(),
                None,
            )
        }
    };
    let (c, e, i, groups) = op.class_sizes();
    let note = format!(
        "{method} {note}; |C| = {c}, |E| = {e}, |I| = {i}, {groups} group(s), operators {:.1} MiB",
        op.operator_bytes() as f64 / 1048576.0
    );
    Ok((op, note, unchecked))
}

/// The PSC method a configured method names (config names methods, psc implements them).
fn psc_method(method: Method) -> PscMethod {
    match method {
        Method::PscM1 => PscMethod::M1,
        Method::PscM2 => PscMethod::M2,
        Method::PscM3 => PscMethod::M3,
        other => unreachable!("{} is not a PSC method", other.name()),
    }
}

/// Sets up a PSC method in the configured precision, M3's CG stopping rule with it.
fn psc_setup<D: PscDevice>(
    dev: &D,
    method: PscMethod,
    mesh: &MeshSpec,
    solver: &SolverSpec,
    on: PscMesh,
) -> Result<(Psc<D>, String)> {
    let (mut op, note, unchecked) = match solver.precision {
        Precision::F64 => psc_operator::<D, f64>(dev, method, mesh, solver, on)?,
        Precision::F32 | Precision::Tf32 => psc_operator::<D, f32>(dev, method, mesh, solver, on)?,
        Precision::F16 => psc_operator::<D, f16>(dev, method, mesh, solver, on)?,
    };
    op.multiply_in(solver.precision.gemm_math())?;
    op.set_inner_cg(InnerCg::configured(
        solver.refine,
        solver.precision,
        solver.cg_rtol,
        solver.rtol,
    ));
    let refine = solver.refine.then_some(RefineParams {
        rtol: solver.rtol,
        atol: solver.atol,
        max_iterations: solver.max_iterations,
    });
    Ok((
        Psc {
            dev: dev.clone(),
            alone: Some(op),
            ir: None,
            refine,
            columns: ColumnPlan::default(),
            unchecked,
        },
        note,
    ))
}

/// The key of a PSC set-up of this mesh and its conditions in the operator cache: the
/// unit square with u = 0 by its element, h and h0; any other mesh by its coarse mesh's
/// content, levels and the condition of every boundary part (the values do not change the
/// operator).
fn setup_key(mesh: &MeshSpec, method: PscMethod) -> SetupKey {
    let (n0, levels) = mesh
        .coarse
        .expect("validated: psc methods have macro elements");
    let conditions = match &mesh.boundary {
        None => "dirichlet everywhere".to_string(),
        Some(b) => b.describe("=", ","),
    };
    match (&mesh.domain, &mesh.boundary) {
        (None, None) => SetupKey::unit_square(mesh.element, n0, levels, method),
        (None, Some(_)) => SetupKey::described(
            mesh.element,
            method,
            &format!("mesh unit-square; n0 {n0}; levels {levels}; conditions {conditions}"),
            &format!("unit-square-n{}-n0-{n0}-{:08x}", mesh.n, fnv32(&conditions)),
        ),
        (Some(d), _) => SetupKey::described(
            mesh.element,
            method,
            &format!(
                "mesh {} {:016x}; levels {}; coarse_levels {}; conditions {conditions}",
                mesh.kind.name(),
                d.content(),
                d.levels,
                d.coarse_levels
            ),
            &format!(
                "{}-L{}-L0-{}-{:08x}",
                mesh.kind.name(),
                d.levels,
                d.coarse_levels,
                fnv32(&conditions)
            ),
        ),
    }
}

/// A short hash of the conditions for a readable file name (the key holds them whole).
fn fnv32(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

/// What `f` returns, with the seconds it took.
fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let t = Instant::now();
    let value = f()?;
    Ok((value, t.elapsed().as_secs_f64()))
}

/// The cache file a PSC set-up of this mesh is read from and written to, if any: ranks that
/// need the same file take turns (no two write it).
pub fn operator_cache_file(mesh: &MeshSpec, solver: &SolverSpec) -> Option<PathBuf> {
    match (solver.method, &solver.cache_dir) {
        (method, Some(dir)) if method.is_psc() => {
            Some(OperatorCache::new(dir).path_for(&setup_key(mesh, psc_method(method))))
        }
        _ => None,
    }
}

/// A mesh with its assembled stiffness matrix and the configured solver on the device `D`,
/// set up once and applied to any number of blocks of right-hand sides.
pub struct Operator<const DIM: usize> {
    pub mesh: Mesh<DIM>,
    pub matrix: Csr<f64>,
    pub dofs: Dofs,
    /// The manufactured solutions' modes met so far, for block loads and L2 errors.
    modes: ModeBasis<DIM>,
    solver: Box<dyn BlockSolve>,
    /// What every column's verified residual must meet.
    pub tolerance: Tolerance,
    /// The method iterates to its tolerance (its columns get correction steps).
    iterative: bool,
    /// The verification's residuals of the last solve.
    checked: Option<Checked>,
    /// How the set-up was obtained (cache loaded/built), when there is one worth saying.
    pub setup_note: Option<String>,
    pub assembly_seconds: f64,
    pub setup_seconds: f64,
}

impl<const DIM: usize> Operator<DIM> {
    /// Assembles the stiffness matrix of `mesh` and sets up the solver on `backend`
    /// (`conditioned`: the mesh is a refined domain or has boundary conditions).
    pub fn new(
        backend: &Backend,
        mesh: Mesh<DIM>,
        mesh_spec: &MeshSpec,
        solver_spec: &SolverSpec,
        conditioned: bool,
    ) -> Result<Self> {
        let assemble = || timed(|| assemble_stiffness(&mesh));
        let (((matrix, dofs), assembly_seconds), ((solver, setup_note), setup_seconds)) =
            if solver_spec.method.is_psc() && matches!(backend, Backend::Cpu { .. }) {
                // The PSC set-up (mostly reading the operator cache) does not need the
                // matrix: on the CPU the two run side by side. (A CUDA set-up stays on
                // this thread, which holds the device's context.)
                let set_up =
                    || timed(|| set_up_psc(backend, mesh_spec, solver_spec, &mesh, conditioned));
                let (solver, sys) = rayon::join(set_up, assemble);
                (sys?, solver?)
            } else {
                let ((matrix, dofs), seconds) = assemble()?;
                let set_up = timed(|| {
                    set_up_solver(backend, &matrix, &mesh, conditioned, mesh_spec, solver_spec)
                })?;
                (((matrix, dofs), seconds), set_up)
            };
        log::info!(
            "assembled {} unknowns, {} nonzeros in {assembly_seconds:.3} s",
            dofs.len(),
            matrix.nnz(),
        );
        Ok(Operator {
            mesh,
            matrix,
            dofs,
            modes: ModeBasis::new(),
            solver,
            tolerance: solver_spec.tolerance,
            iterative: solver_spec.method == Method::Mg
                || (solver_spec.method.is_psc() && solver_spec.refine),
            checked: None,
            setup_note,
            assembly_seconds,
            setup_seconds,
        })
    }

    pub fn unknowns(&self) -> usize {
        self.dofs.len()
    }

    /// Load vectors of the exact solutions' f, column-major (unknowns × len): a sum of the
    /// modes' load vectors, each integrated once per operator.
    pub fn loads(&self, exact: &[Exact]) -> Vec<f64> {
        self.modes.loads(&self.mesh, &self.dofs, exact)
    }

    /// Solves the column-major block `rhs` (unknowns × nrhs) and makes every column of an
    /// iterative method meet its tolerance by the verification's own residual
    /// ([`relative_residuals`]): the solver stops on a residual it updates step by step or
    /// computes in another order, which near the tolerance can differ from the check's; a
    /// column the check puts above it gets up to [`CORRECTIONS`] steps x += A⁻¹(b − A x)
    /// with the check's residual. What the check found is kept for [`Operator::verify`].
    pub fn solve(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        let mut outcome = self.solve_by_magnitude(rhs, nrhs)?;
        let n = self.dofs.len();
        let tolerances: Vec<f64> = rhs
            .chunks(n.max(1))
            .map(|b| self.tolerance.relative(crate::numeric::nrm2(b)))
            .collect();
        for step in 0..=CORRECTIONS {
            let residuals = relative_residuals(&self.matrix, rhs, &outcome.u, nrhs);
            let failing: Vec<usize> = (0..nrhs)
                .filter(|&c| residuals[c].is_finite() && residuals[c] > tolerances[c])
                .collect();
            if failing.is_empty() || !self.iterative || step == CORRECTIONS {
                self.checked = Some(Checked::of(rhs, &outcome.u, residuals));
                break;
            }
            log::info!(
                "{} column(s) above their tolerance by the verification's residual (worst {:.3e}, tolerance {:.1e}): correction step {}",
                failing.len(),
                failing.iter().map(|&c| residuals[c]).fold(0.0, f64::max),
                tolerances[failing[0]],
                step + 1
            );
            let mut r = Vec::with_capacity(failing.len() * n);
            let mut au = vec![0.0; n];
            for &c in &failing {
                crate::sparse::spmv(&self.matrix, &outcome.u[c * n..(c + 1) * n], &mut au);
                r.extend(rhs[c * n..(c + 1) * n].iter().zip(&au).map(|(b, a)| b - a));
            }
            let correction = self.solve_by_magnitude(&r, failing.len())?;
            for (k, &c) in failing.iter().enumerate() {
                let d = &correction.u[k * n..(k + 1) * n];
                outcome.u[c * n..(c + 1) * n]
                    .iter_mut()
                    .zip(d)
                    .for_each(|(x, d)| *x += d);
            }
            outcome.add_correction(&correction);
        }
        Ok(outcome)
    }

    /// [`Operator::solve`]'s solve: as given where every column has an ordinary magnitude,
    /// else in groups scaled by powers of two (`linalg::magnitude`); a column that cannot be
    /// solved in f64 is refused by name.
    fn solve_by_magnitude(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        let n = self.dofs.len();
        let groups = magnitude::groups(rhs, n, nrhs)?;
        if magnitude::as_given(&groups, nrhs) {
            let columns: Vec<usize> = (0..nrhs).collect();
            let scope = Scope {
                columns: &columns,
                factor: 1.0,
            };
            return self.solver.solve(&self.matrix, rhs, &scope);
        }
        let mut all = BlockOutcome::empty(0);
        all.u = vec![0.0; rhs.len()];
        for group in &groups {
            if group.exponent != 0 {
                log::info!(
                    "right-hand side(s) {:?} solved multiplied by 2^{} (their magnitudes lie outside [2^-{w}, 2^{w}]; exact in binary arithmetic)",
                    group.columns,
                    group.exponent,
                    w = magnitude::WINDOW
                );
            }
            let b = magnitude::gather(group, rhs, n);
            let scope = Scope {
                columns: &group.columns,
                factor: group.factor(),
            };
            let mut outcome = self.solver.solve(&self.matrix, &b, &scope)?;
            magnitude::scatter(group, &outcome.u, &mut all.u, n)?;
            outcome.u = Vec::new();
            all.merge(outcome);
        }
        Ok(all)
    }

    /// The f64 residual of every column and, where its exact solution is known, the L2
    /// errors; a column that is not finite is an error.
    pub fn verify(
        &self,
        rhs: &[f64],
        u: &[f64],
        exact: &[Option<Exact>],
    ) -> Result<Vec<ColumnReport>> {
        let residuals = self.residuals(rhs, u, exact.len());
        verify(&self.mesh, &self.dofs, &self.modes, u, exact, &residuals)
    }

    /// The verified residual of every column of the blocks `rhs` and `u`
    /// ([`relative_residuals`]): what the last solve's check computed when these are its
    /// blocks, else computed now.
    pub fn residuals(&self, rhs: &[f64], u: &[f64], nrhs: usize) -> Vec<f64> {
        match self.checked.as_ref().filter(|c| c.is_of(rhs, u)) {
            Some(checked) => checked.residuals.clone(),
            None => relative_residuals(&self.matrix, rhs, u, nrhs),
        }
    }
}

/// Correction steps a solve takes at most where the verification puts a column above its
/// tolerance (each one solve of the columns' residuals).
const CORRECTIONS: usize = 2;

/// The verification's residuals of a solve, with hashes of the blocks they belong to.
struct Checked {
    rhs: u64,
    u: u64,
    residuals: Vec<f64>,
}

impl Checked {
    fn hash(v: &[f64]) -> u64 {
        xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(v))
    }

    fn of(rhs: &[f64], u: &[f64], residuals: Vec<f64>) -> Self {
        Checked {
            rhs: Self::hash(rhs),
            u: Self::hash(u),
            residuals,
        }
    }

    fn is_of(&self, rhs: &[f64], u: &[f64]) -> bool {
        self.rhs == Self::hash(rhs) && self.u == Self::hash(u)
    }
}

/// An [`Operator`] on the unit square or cube with u = 0 on the boundary, or on a 2D mesh
/// with boundary data (refined domains, `[boundary]`).
pub enum AnyOperator {
    Square(Operator<2>),
    Cube(Operator<3>),
    Conditioned(Operator<2>, Box<BoundaryProblem>),
}

impl AnyOperator {
    pub fn new(backend: &Backend, mesh: &MeshSpec, solver: &SolverSpec) -> Result<Self> {
        let conditioned = mesh.domain.is_some() || mesh.boundary.is_some();
        Ok(match mesh::build(mesh)? {
            mesh::AnyMesh::Square(m) if conditioned => {
                let boundary = BoundaryProblem::new(&m, mesh.boundary.as_ref())?;
                let op = Operator::new(backend, m, mesh, solver, true)?;
                AnyOperator::Conditioned(op, Box::new(boundary))
            }
            mesh::AnyMesh::Square(m) => {
                AnyOperator::Square(Operator::new(backend, m, mesh, solver, false)?)
            }
            mesh::AnyMesh::Cube(m) => {
                AnyOperator::Cube(Operator::new(backend, m, mesh, solver, false)?)
            }
        })
    }

    fn dim(&self) -> usize {
        match self {
            AnyOperator::Square(_) | AnyOperator::Conditioned(..) => 2,
            AnyOperator::Cube(_) => 3,
        }
    }

    pub fn assembly_seconds(&self) -> f64 {
        with_operator!(self, op => op.assembly_seconds)
    }

    pub fn setup_seconds(&self) -> f64 {
        with_operator!(self, op => op.setup_seconds)
    }

    pub fn setup_note(&self) -> Option<String> {
        with_operator!(self, op => op.setup_note.clone())
    }

    pub fn nonzeros(&self) -> usize {
        with_operator!(self, op => op.matrix.nnz())
    }

    /// The exact solutions of manufactured columns at every node, nodes × columns (shifted
    /// to mean zero as the solutions are, for a pure Neumann problem).
    pub fn exact_nodal(&self, columns: &[ColumnSource]) -> Vec<f64> {
        let dim = self.dim();
        let exact = columns
            .iter()
            .map(|c| c.exact(dim).expect("manufactured columns"));
        match self {
            AnyOperator::Conditioned(op, boundary) => exact
                .flat_map(|e| boundary.exact_nodal(&op.mesh, &e))
                .collect(),
            _ => with_operator!(self, op => exact
                .flat_map(|e| op.mesh.coords.iter().map(move |x| e.u(x)).collect::<Vec<_>>())
                .collect()),
        }
    }

    /// The relative residual each column of the block `b` must reach (docs/mathematics.md
    /// §6); where the absolute part decides, says so once.
    pub fn tolerances(&self, b: &[f64]) -> Vec<f64> {
        let tolerance = with_operator!(self, op => op.tolerance);
        let n = self.unknowns();
        let norms: Vec<f64> = b.chunks(n.max(1)).map(crate::numeric::nrm2).collect();
        if let Some(c) = norms.iter().position(|&b| tolerance.absolute_decides(b)) {
            log::info!(
                "atol = {:e} decides for right-hand side {c} and {} other(s): it is above rtol·‖b‖₂ = {:e} (the column must reach a relative residual of {:e}, not rtol = {:e})",
                tolerance.atol,
                norms.iter().filter(|&&b| tolerance.absolute_decides(b)).count() - 1,
                tolerance.rtol * norms[c],
                tolerance.relative(norms[c]),
                tolerance.rtol
            );
        }
        norms.iter().map(|&b| tolerance.relative(b)).collect()
    }

    /// The checks of every column (see [`BatchOperator::verify`]), one report each.
    pub fn reports(
        &self,
        rhs: &BatchRhs,
        u: &[f64],
        nodal: &[f64],
        columns: &[ColumnSource],
    ) -> Result<Vec<ColumnReport>> {
        let dim = self.dim();
        let exact: Vec<Option<Exact>> = columns.iter().map(|c| c.exact(dim)).collect();
        match self {
            AnyOperator::Conditioned(op, boundary) => {
                let residuals = op.residuals(&rhs.b, u, exact.len());
                boundary.verify(&op.mesh, nodal, &exact, &residuals)
            }
            _ => with_operator!(self, op => op.verify(&rhs.b, u, &exact)),
        }
    }
}

/// Runs `$body` with `$op` bound to the [`Operator`] inside an [`AnyOperator`].
macro_rules! with_operator_impl {
    ($any:expr, $op:ident => $body:expr) => {
        match $any {
            AnyOperator::Square($op) | AnyOperator::Conditioned($op, _) => $body,
            AnyOperator::Cube($op) => $body,
        }
    };
}
pub(super) use with_operator_impl as with_operator;

impl BatchOperator for AnyOperator {
    fn unknowns(&self) -> usize {
        with_operator!(self, op => op.unknowns())
    }

    fn rhs(&self, columns: &[ColumnSource], input: Option<&InputColumns>) -> Result<BatchRhs> {
        let dim = self.dim();
        let nrhs = columns.len();
        let read = |input: &InputColumns| match columns[0] {
            ColumnSource::Input { index } => Ok((
                input.read(index..index + nrhs)?,
                input.read_dirichlet(index..index + nrhs)?,
            )),
            other => Err(Error::Campaign(format!(
                "column {other:?} is not a column of the right-hand-side file"
            ))),
        };
        let exact = || -> Vec<Exact> {
            columns
                .iter()
                .map(|c| c.exact(dim).expect("manufactured columns"))
                .collect()
        };
        match (self, input) {
            (AnyOperator::Conditioned(op, boundary), Some(input)) => {
                let (rows, dirichlet) = read(input)?;
                let (b, g) =
                    boundary.file_loads(&op.mesh, &op.dofs, &rows, nrhs, dirichlet.as_deref())?;
                Ok(BatchRhs {
                    b,
                    dirichlet: Some(g),
                })
            }
            (AnyOperator::Conditioned(op, boundary), None) => {
                let (b, g) = boundary.manufactured(&op.mesh, &op.dofs, &exact())?;
                Ok(BatchRhs {
                    b,
                    dirichlet: Some(g),
                })
            }
            (_, Some(input)) => Ok(BatchRhs {
                b: read(input)?.0,
                dirichlet: None,
            }),
            (_, None) => Ok(BatchRhs {
                b: with_operator!(self, op => op.loads(&exact())),
                dirichlet: None,
            }),
        }
    }

    fn solve(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        with_operator!(self, op => op.solve(rhs, nrhs))
    }

    fn to_nodal(&self, u: &[f64], rhs: &BatchRhs) -> Vec<f64> {
        match (self, &rhs.dirichlet) {
            (AnyOperator::Conditioned(op, boundary), Some(g)) => boundary.nodal(&op.dofs, u, g),
            _ => with_operator!(self, op => op.dofs.to_nodal_block(u)),
        }
    }

    fn verify(
        &mut self,
        rhs: &BatchRhs,
        u: &[f64],
        nodal: &[f64],
        columns: &[ColumnSource],
    ) -> Result<Checks> {
        let reports = self.reports(rhs, u, nodal, columns)?;
        Ok(Checks::poisson(&reports, self.tolerances(&rhs.b)))
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
        match &op.stokes {
            Some(spec) => crate::stokes::check_memory(spec),
            None => check_memory(&op.mesh, &op.solver, nrhs, &self.backend),
        }
    }

    fn cache_file(&self, op: &OperatorSpec) -> Option<PathBuf> {
        operator_cache_file(&op.mesh, &op.solver)
    }

    fn set_up_wide(&self, op: &OperatorSpec, threads: usize) -> Result<Box<dyn BatchOperator>> {
        // CPU only: a CUDA set-up keeps the thread it was made on.
        if op.stokes.is_some() || !matches!(self.backend, Backend::Cpu { .. }) {
            return self.set_up(op);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| {
                Error::Backend(format!("a pool of {threads} threads for the set-up: {e}"))
            })?;
        let operator = pool.install(|| AnyOperator::new(&self.backend, &op.mesh, &op.solver))?;
        Ok(Box::new(operator))
    }

    fn set_up(&self, op: &OperatorSpec) -> Result<Box<dyn BatchOperator>> {
        if let Some(spec) = &op.stokes {
            return super::stokes::operator(&self.backend, spec);
        }
        Ok(Box::new(AnyOperator::new(
            &self.backend,
            &op.mesh,
            &op.solver,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::Element;
    use crate::psc::PscHost;

    /// The several-groups path of M1 and M3 (one batched product per group over the
    /// right-hand sides) gives what the one-group path gives: the unit square's single
    /// group split in two groups holding the same inverse.
    #[test]
    fn several_groups_solve_like_one() {
        for method in [PscMethod::M1, PscMethod::M3] {
            several_groups_solve_like_one_with(method);
        }
    }

    fn several_groups_solve_like_one_with(method: PscMethod) {
        let dev = Cpu::new();
        let setup = PscSetup::new(Element::Q1, 4, 2, method).unwrap();
        let (n, nrhs) = (setup.num_unknowns(), 3);
        let b: Vec<f64> = (0..n * nrhs)
            .map(|i| ((i * 31) % 17) as f64 / 8.0 - 1.0)
            .collect();
        let solve = |host: PscHost<f64>| {
            let mut op = PscOperator::upload(&dev, host).unwrap();
            op.set_inner_cg(InnerCg::alone(1e-14, 100));
            let input =
                Block::from_f64(&dev, &b, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
            let mut x = Block::zeros(&dev, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
            op.apply(&input, &mut x).unwrap();
            x.to_f64(&dev).unwrap()
        };
        let one = PscHost::<f64>::new(&setup).unwrap();
        let two = PscHost::<f64>::new(&setup)
            .unwrap()
            .with_first_group_split();
        assert_eq!((one.groups(), two.groups()), (1, 2));
        let (x1, x2) = (solve(one), solve(two));
        let scale = x1.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (p, q) in x1.iter().zip(&x2) {
            assert!((p - q).abs() <= 1e-13 * scale, "{p} vs {q}");
        }
    }

    /// A block solved in chunks (what a device too small for it does) equals the block
    /// solved whole, with M1 and M3 alone and inside PSC-IR (rebuilt for the narrower last
    /// chunk); M3's CG iterations add up over the chunks.
    #[test]
    fn chunked_blocks_equal_whole_blocks() {
        for method in [PscMethod::M1, PscMethod::M3] {
            chunked_blocks_equal_whole_blocks_with(method);
        }
    }

    /// Multigrid in chunks of two columns gives bit for bit the solutions and the step
    /// count of the whole block: each column from its own seeded initial guess.
    #[test]
    fn chunked_multigrid_equals_the_whole_block() {
        let mesh = crate::mesh::unit_square(32, Element::Q1).unwrap();
        let (matrix, dofs) = crate::fem::assemble_stiffness(&mesh).unwrap();
        let (n, nrhs) = (dofs.len(), 5);
        let b: Vec<f64> = (0..n * nrhs)
            .map(|i| ((i * 7919) % 101) as f64 / 50.0 - 1.0)
            .collect();
        let solver = |max_columns| {
            let params = MgParams {
                schedule: crate::mg::Variant::HMg.schedule(4),
                smoother: crate::mg::Smoother::JACOBI,
                base_tolerance: 1e-4,
                residual_scaling: true,
                storage: crate::device::MatrixStorage::default(),
            };
            let mg = Multigrid::new(&Cpu::new(), 2, 32, &matrix, params).unwrap();
            MultigridSolver {
                dev: Cpu::new(),
                mg: Box::new(mg),
                refine: true,
                stop: StopParams {
                    rtol: 1e-10,
                    atol: 0.0,
                    max_iterations: 40,
                },
                seed: 7,
                singular: None,
                columns: ColumnPlan {
                    max_columns,
                    planned: true,
                },
            }
        };
        let columns: Vec<usize> = (0..nrhs).collect();
        let scope = Scope {
            columns: &columns,
            factor: 1.0,
        };
        let whole = solver(None).solve(&matrix, &b, &scope).unwrap();
        let chunked = solver(Some(2)).solve(&matrix, &b, &scope).unwrap();
        assert!(whole.u == chunked.u, "chunked solutions differ");
        assert_eq!(whole.iterations, chunked.iterations);
        assert!(whole.iterations.is_some_and(|i| i > 0));
    }

    fn chunked_blocks_equal_whole_blocks_with(method: PscMethod) {
        let setup = PscSetup::new(Element::Q1, 4, 2, method).unwrap();
        let n = crate::sparse::SparseRows::nrows(&setup.stiffness);
        let nrhs = 5;
        let b: Vec<f64> = (0..n * nrhs)
            .map(|i| ((i * 7919) % 101) as f64 / 50.0 - 1.0)
            .collect();
        for refine in [
            None,
            Some(RefineParams {
                rtol: 1e-12,
                atol: 0.0,
                max_iterations: 10,
            }),
        ] {
            let psc = |max_columns| {
                let mut op = PscOperator::new(&Cpu::new(), &setup, Precision::F32).unwrap();
                op.set_inner_cg(match refine {
                    Some(_) => InnerCg::inner(Precision::F32, None),
                    None => InnerCg::alone(1e-6, 100),
                });
                Psc {
                    dev: Cpu::new(),
                    alone: Some(op),
                    ir: None,
                    refine,
                    columns: ColumnPlan {
                        max_columns,
                        planned: true,
                    },
                    unchecked: None,
                }
            };
            let columns: Vec<usize> = (0..nrhs).collect();
            let scope = Scope {
                columns: &columns,
                factor: 1.0,
            };
            let whole = psc(None).solve(&setup.stiffness, &b, &scope).unwrap();
            let chunked = psc(Some(2)).solve(&setup.stiffness, &b, &scope).unwrap();
            assert_eq!(whole.u.len(), chunked.u.len());
            let scale = whole.u.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (x, y) in whole.u.iter().zip(&chunked.u) {
                assert!(
                    (x - y).abs() <= 1e-6 * scale,
                    "{x} vs {y} (refine {refine:?})"
                );
            }
            assert_eq!(whole.iterations.is_some(), chunked.iterations.is_some());
            assert_eq!(
                whole.inner_iterations.is_some(),
                method == PscMethod::M3,
                "CG iterations are reported for M3 only"
            );
            if method == PscMethod::M3 {
                assert!(
                    chunked.inner_iterations > whole.inner_iterations,
                    "three chunks iterate more than one block: {:?} vs {:?}",
                    chunked.inner_iterations,
                    whole.inner_iterations
                );
            }
        }
    }
}
