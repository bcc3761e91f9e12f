//! A PSC method as the driver uses it: set up once for a mesh and its conditions (through
//! the operator cache when one is configured), then blocks of right-hand sides solved by
//! the method alone or inside PSC-IR, in chunks where the device cannot hold a block whole.

use std::path::PathBuf;

use half::f16;

use super::{
    CacheOutcome, Coupling, InnerCg, InverseCheck, OperatorCache, PscIr, PscIrParams, PscMethod,
    PscOperator, PscSetup, SetupKey, UncheckedInverses,
};
use crate::config::{Method, SolverSpec};
use crate::device::{Block, Layout, PscDevice, Storage};
use crate::error::{Error, Result};
use crate::linalg::{
    solve_in_chunks, BlockOutcome, BlockSolver, ColumnPlan, Cost, Footprint, LinOp, Scope,
    TimedStage, NARROW_SHARE,
};
use crate::mesh::{Mesh2d, MeshSpec};
use crate::precision::Precision;
use crate::sparse::Csr;

/// A PSC method and, with refinement, PSC-IR around it (built for the block width it is
/// given).
pub struct PscSolver<D: PscDevice> {
    dev: D,
    /// The method alone, when no PSC-IR holds it.
    alone: Option<PscOperator<D>>,
    ir: Option<PscIr<D>>,
    refine: Option<PscIrParams>,
    columns: ColumnPlan,
    /// The operator cache's inverses this solver was loaded from, not yet checked against
    /// their checksum (with refinement: see [`InverseCheck::OnFailure`]).
    unchecked: Option<UncheckedInverses>,
    /// While timing stages: what each stage of the applies since the last
    /// [`BlockSolver::take_stages`] had to move and compute, summed.
    stage_costs: Option<Vec<(&'static str, Cost)>>,
}

impl<D: PscDevice> PscSolver<D> {
    /// Sets up the configured PSC method (`solver`) in its precision on `dev` for `mesh`
    /// (`conditioned`: a refined domain or boundary conditions; else the unit square with
    /// u = 0, set up and cached by its sizes), with M3's CG stopping rule; returns it with a
    /// note on where its set-up came from.
    pub fn set_up(
        dev: &D,
        mesh_spec: &MeshSpec,
        solver: &SolverSpec,
        mesh: &Mesh2d,
        conditioned: bool,
    ) -> Result<(Self, String)> {
        let method = configured_method(solver.method);
        let on = (mesh, conditioned);
        let (mut op, note, unchecked) = match solver.precision {
            Precision::F64 => operator::<D, f64>(dev, method, mesh_spec, solver, on)?,
            Precision::F32 | Precision::Tf32 => {
                operator::<D, f32>(dev, method, mesh_spec, solver, on)?
            }
            Precision::F16 => operator::<D, f16>(dev, method, mesh_spec, solver, on)?,
        };
        op.multiply_in(solver.precision.gemm_math())?;
        op.set_inner_cg(InnerCg::configured(
            solver.refine,
            solver.precision,
            solver.cg_rtol,
            solver.rtol,
        ));
        let refine = solver.refine.then_some(PscIrParams {
            rtol: solver.rtol,
            atol: solver.atol,
            max_iterations: solver.max_iterations,
        });
        Ok((
            Self::new(dev, op, refine, ColumnPlan::default(), unchecked),
            note,
        ))
    }

    /// The solver of an operator already set up: the method alone, or inside PSC-IR with
    /// `refine`; blocks solved in chunks as `columns` plans.
    pub fn new(
        dev: &D,
        op: PscOperator<D>,
        refine: Option<PscIrParams>,
        columns: ColumnPlan,
        unchecked: Option<UncheckedInverses>,
    ) -> Self {
        PscSolver {
            dev: dev.clone(),
            alone: Some(op),
            ir: None,
            refine,
            columns,
            unchecked,
            stage_costs: None,
        }
    }

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
    /// PSC-IR's f64 b, x and r with, for its last steps' few columns, a second workspace,
    /// input, output, x and r up to 1/[`NARROW_SHARE`] as wide.
    fn bytes_per_column(&self) -> usize {
        let op = self.operator();
        let (storage, compute) = (op.precision().bytes(), op.precision().compute().bytes());
        let vectors = match op.method() {
            PscMethod::M1 | PscMethod::M2 => 9,
            PscMethod::M3 => 11,
        };
        let method = vectors * compute + storage;
        let refinement = match self.refine {
            Some(_) => 24 + (method + 16).div_ceil(NARROW_SHARE),
            None => 0,
        };
        op.num_unknowns() * (method + refinement)
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
                    // The last width's stage clock carries on (a solve in chunks).
                    let (op, clock) = match (self.alone.take(), self.ir.take()) {
                        (Some(m), _) => (m, None),
                        (None, Some(mut ir)) => {
                            let clock = ir.take_clock();
                            (ir.into_operator(), Some(clock))
                        }
                        (None, None) => unreachable!("the operator is held by one of the two"),
                    };
                    let mut ir = PscIr::new(&self.dev, op, a, nrhs, params.max_iterations)?;
                    match clock {
                        Some(clock) => ir.resume_clock(clock),
                        None => ir.time_stages(self.stage_costs.is_some()),
                    }
                    self.ir = Some(ir);
                }
                let ir = self.ir.as_mut().expect("just set");
                let (info, x) = match self.dev.run(|| ir.solve_from_zero(b, params)) {
                    Ok(solved) => solved,
                    Err(e) => return Err(self.failure_with_cache_checked(e.into())),
                };
                // Each step's f64 residual update: 2 nnz per column it ran on (from zero,
                // the first residual is b).
                let residuals = 2.0 * a.nnz() as f64 * info.update_columns as f64;
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
        if let Some(sums) = self.stage_costs.as_mut() {
            for &(stage, cost) in &counts.stages {
                match sums.iter_mut().find(|(s, _)| *s == stage) {
                    Some((_, sum)) => *sum = *sum + cost,
                    None => sums.push((stage, cost)),
                }
            }
        }
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

impl<D: PscDevice> BlockSolver for PscSolver<D> {
    /// Solves the column-major block `b` (N × the scope's columns), in chunks of columns
    /// where the device cannot hold it whole.
    fn solve(&mut self, a: &Csr<f64>, b: &[f64], scope: &Scope) -> Result<BlockOutcome> {
        let nrhs = scope.columns.len();
        let what = self.operator().method().to_string();
        let plan = Footprint {
            what: &what,
            operators: self.operator().operator_bytes() as f64,
            per_column: self.bytes_per_column(),
            advice: "use a larger mesh.h0 or a smaller mesh.n",
        };
        let width = self.columns.width(&self.dev, plan, nrhs)?;
        let n = self.operator().num_unknowns();
        solve_in_chunks(b, n, scope, width, |part, chunk| {
            self.solve_block(a, part, chunk.columns.len(), chunk.factor)
        })
    }

    /// The apply's stages ([`PscOperator::time_stages`]) and PSC-IR's own between the
    /// applies ([`PscIr::time_stages`]).
    fn time_stages(&mut self, on: bool) {
        self.operator_mut().time_stages(on);
        if let Some(ir) = self.ir.as_mut() {
            ir.time_stages(on);
        }
        self.stage_costs = on.then(Vec::new);
    }

    /// Each stage with its compulsory bytes and counted flops
    /// ([`PscOperator::stage_costs`]) summed over the applies, then PSC-IR's stages.
    fn take_stages(&mut self) -> Result<Vec<TimedStage>> {
        let times = self.operator_mut().take_stage_seconds()?;
        let costs = self.stage_costs.as_mut().map(std::mem::take);
        let mut stages: Vec<TimedStage> = times
            .into_iter()
            .map(|t| TimedStage {
                stage: t.stage,
                seconds: t.seconds,
                cost: costs
                    .iter()
                    .flatten()
                    .find(|(stage, _)| *stage == t.stage)
                    .map(|&(_, cost)| cost),
            })
            .collect();
        if let Some(ir) = self.ir.as_mut() {
            stages.extend(ir.take_stages()?);
        }
        Ok(stages)
    }
}

/// The PSC method a configured method names (config names methods, psc implements them).
fn configured_method(method: Method) -> PscMethod {
    match method {
        Method::PscM1 => PscMethod::M1,
        Method::PscM2 => PscMethod::M2,
        Method::PscM3 => PscMethod::M3,
        other => unreachable!("{} is not a PSC method", other.name()),
    }
}

/// A PSC method in precision S through the operator cache when enabled, with a note on
/// where its set-up came from and the cache's inverses it did not check yet. `on`: the
/// mesh, and whether it is a refined domain or has boundary conditions.
fn operator<D: PscDevice, S: Storage + hdf5::H5Type>(
    dev: &D,
    method: PscMethod,
    mesh: &MeshSpec,
    solver: &SolverSpec,
    on: (&Mesh2d, bool),
) -> Result<(PscOperator<D>, String, Option<UncheckedInverses>)> {
    let (n0, levels) = mesh
        .coarse
        .expect("validated: psc methods have macro elements");
    let (on_mesh, conditioned) = on;
    let (op, note, unchecked) = match &solver.cache_dir {
        Some(dir) => {
            let check = if solver.refine {
                InverseCheck::OnFailure
            } else {
                InverseCheck::OnLoad
            };
            let cache = OperatorCache::new(dir).inverting_on(dev.clone());
            let (host, outcome, unchecked) =
                cache.load_or_build_host::<S>(&cache_key(mesh, method), on_mesh, method, check)?;
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
            (
                PscOperator::upload(dev, host, solver.coupling)?,
                note,
                unchecked,
            )
        }
        None => {
            let setup = if conditioned {
                PscSetup::on_mesh_inverting_on(on_mesh.clone(), method, dev)?
            } else {
                PscSetup::new_inverting_on(mesh.element, n0, levels, method, dev)?
            };
            (
                PscOperator::new(dev, &setup, S::PRECISION, solver.coupling)?,
                "computed (operator cache disabled)".to_string(),
                None,
            )
        }
    };
    let (c, e, i, groups) = op.class_sizes();
    let note = format!(
        "{method} {note}; |C| = {c}, |E| = {e}, |I| = {i}, {groups} group(s), {} coupling, operators {:.1} MiB",
        op.coupling(),
        op.operator_bytes() as f64 / 1048576.0
    );
    Ok((op, note, unchecked))
}

/// The key of a PSC set-up of this mesh and its conditions in the operator cache: the
/// unit square with u = 0 by its element, h and h0; any other mesh by its coarse mesh's
/// content, levels and the condition of every boundary part (the values do not change the
/// operator). The file name carries a CRC-32 of the conditions; the key holds them whole.
fn cache_key(mesh: &MeshSpec, method: PscMethod) -> SetupKey {
    let (n0, levels) = mesh
        .coarse
        .expect("validated: psc methods have macro elements");
    let conditions = match &mesh.boundary {
        None => "dirichlet everywhere".to_string(),
        Some(b) => b.describe("=", ","),
    };
    let short = crc32fast::hash(conditions.as_bytes());
    match (&mesh.domain, &mesh.boundary) {
        (None, None) => SetupKey::unit_square(mesh.element, n0, levels, method),
        (None, Some(_)) => SetupKey::described(
            mesh.element,
            method,
            &format!("mesh unit-square; n0 {n0}; levels {levels}; conditions {conditions}"),
            &format!("unit-square-n{}-n0-{n0}-{short:08x}", mesh.n),
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
                "{}-L{}-L0-{}-{short:08x}",
                mesh.kind.name(),
                d.levels,
                d.coarse_levels,
            ),
        ),
    }
}

/// A generous estimate of the host bytes the configured PSC `method` takes on `mesh` with
/// `nrhs` columns ([`super::estimated_bytes`] with the class sizes of the mesh: counted on
/// the macro mesh of a refined domain, with the blocks `coupling` stores); `solve_on_host`:
/// the solve's workspace is the host's (on a GPU only the block crosses to the host).
pub fn configured_bytes(
    mesh: &MeshSpec,
    (method, coupling): (Method, Coupling),
    nrhs: usize,
    solve_on_host: bool,
) -> f64 {
    let (n0, levels) = mesh.coarse.unwrap_or((1, 1));
    let host_vectors = if solve_on_host {
        super::HOST_SOLVE_VECTORS
    } else {
        0.0
    };
    let (classes, blocks) = match class_sizes(mesh, coupling) {
        Some((c, e, blocks)) => ((c, e), blocks),
        None => (super::class_counts(mesh.element, mesh.n, n0), 0.0),
    };
    super::estimated_bytes(
        configured_method(method),
        mesh.unknowns(),
        classes,
        levels,
        nrhs,
        host_vectors,
    ) + blocks
}

/// |C|, |E| and the bytes of the groups' dense blocks in f64 (C_g, C_g⁻¹ and what
/// `coupling` builds from them) of PSC on a refined domain, its Dirichlet parts left out
/// (None for the unit square, whose formula [`super::class_counts`] gives the classes and
/// whose blocks are small beside |E|²).
pub fn class_sizes(mesh: &MeshSpec, coupling: Coupling) -> Option<(usize, usize, f64)> {
    let domain = mesh.domain.as_ref()?;
    let dirichlet: Vec<bool> = (0..domain.coarse.parts.len())
        .map(|p| {
            mesh.boundary
                .as_ref()
                .is_none_or(|b| b.parts[p].condition == crate::fem::Condition::Dirichlet)
        })
        .collect();
    let cost = super::coarse_level_cost(
        &domain.coarse,
        domain.levels,
        domain.coarse_levels,
        &dirichlet,
        coupling,
    )
    .ok()??;
    Some((cost.c, cost.e, cost.block_bytes))
}

/// The cache file a PSC set-up of this mesh is read from and written to, if any: ranks that
/// need the same file take turns (no two write it).
pub fn operator_cache_file(mesh: &MeshSpec, solver: &SolverSpec) -> Option<PathBuf> {
    match (solver.method, &solver.cache_dir) {
        (method, Some(dir)) if method.is_psc() => {
            Some(OperatorCache::new(dir).path_for(&cache_key(mesh, configured_method(method))))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Cpu;
    use crate::mesh::Element;
    use crate::psc::{Coupling, PscHost};

    /// The several-groups path of M1 and M3 (one batched product per group over the
    /// right-hand sides) gives what the one-group path gives: the unit square's single
    /// group split in two groups holding the same inverse; with either coupling.
    #[test]
    fn several_groups_solve_like_one() {
        for method in [PscMethod::M1, PscMethod::M3] {
            for coupling in Coupling::ALL {
                several_groups_solve_like_one_with(method, coupling);
            }
        }
    }

    fn several_groups_solve_like_one_with(method: PscMethod, coupling: Coupling) {
        let dev = Cpu::new();
        let setup = PscSetup::new(Element::Q1, 4, 2, method).unwrap();
        let (n, nrhs) = (setup.num_unknowns(), 3);
        let b: Vec<f64> = (0..n * nrhs)
            .map(|i| ((i * 31) % 17) as f64 / 8.0 - 1.0)
            .collect();
        let solve = |host: PscHost<f64>| {
            let mut op = PscOperator::upload(&dev, host, coupling).unwrap();
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

    fn chunked_blocks_equal_whole_blocks_with(method: PscMethod) {
        let setup = PscSetup::new(Element::Q1, 4, 2, method).unwrap();
        let n = crate::sparse::SparseRows::nrows(&setup.stiffness);
        let nrhs = 5;
        let b: Vec<f64> = (0..n * nrhs)
            .map(|i| ((i * 7919) % 101) as f64 / 50.0 - 1.0)
            .collect();
        for refine in [
            None,
            Some(PscIrParams {
                rtol: 1e-12,
                atol: 0.0,
                max_iterations: 10,
            }),
        ] {
            let psc = |max_columns| {
                let dev = Cpu::new();
                let mut op =
                    PscOperator::new(&dev, &setup, Precision::F32, Coupling::default()).unwrap();
                op.set_inner_cg(match refine {
                    Some(_) => InnerCg::inner(Precision::F32, None),
                    None => InnerCg::alone(1e-6, 100),
                });
                PscSolver::new(&dev, op, refine, ColumnPlan::at_most(max_columns), None)
            };
            let columns: Vec<usize> = (0..nrhs).collect();
            let scope = Scope::unscaled(&columns);
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
