//! The multigrid solver: set-up of the level hierarchy, the V-cycle across precisions (a
//! [`LinOp`]: one cycle from zero), and the two ways of using it — inside f64 iterative
//! refinement with residual scaling (docs/mathematics.md §4, any precision schedule; the
//! refinement of `linalg`) and stand-alone on the f64 system (the baseline).

use std::sync::Arc;

use super::error::{MgError, MgFailure, MgInfo, Remedy};
use super::level::{other, Level, RangeChecks};
use super::schedule::{check_levels, schedule_name, Smoother, SmootherKind};
use crate::device::{
    Block, EllMatrix, GridShape, Layout, LevelTransfer, MatrixStorage, MultigridDevice, StageMarks,
    StageTime,
};
use crate::error::{Error, Result};
use crate::fem::assemble_stiffness;
use crate::linalg::{
    v_cycle, BlockKind, Cost, CycleLevels, LinOp, RefineFailure, RefineInfo, RefineParams,
    Refinement, TimedStage,
};
use crate::mesh::{unit_cube, unit_square, Element};
use crate::precision::Precision;
use crate::sparse::{ordering, spgemm, Csr, Ell, Ordering, SparseRows};

/// How the hierarchy is built and cycled.
#[derive(Clone, Debug, PartialEq)]
pub struct MgParams {
    /// Precision of each level, finest first; the last entry is the base solve's level.
    /// Its length is the number of levels.
    pub schedule: Vec<Precision>,
    pub smoother: Smoother,
    /// Residual the coarsest-level CG stops at: absolute inside refinement
    /// (docs/mathematics.md §4: 1e-4, on the scaled residual), relative to the coarse
    /// right-hand side in the stand-alone cycle (whose residuals shrink towards zero).
    pub base_tolerance: f64,
    /// Scale residuals into range where they enter a lower precision: by α = ‖r‖₂ at the
    /// refinement level, by the largest magnitude where the cycle enters an f16 level.
    pub residual_scaling: bool,
    /// How the levels store their matrices (indices or none on uniform-grid levels).
    pub storage: MatrixStorage,
}

/// The null space of the matrix multigrid solves with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NullSpace {
    /// Nonsingular (some Dirichlet condition, or a pinned node).
    None,
    /// The constants (every node an unknown of a pure Neumann problem): right-hand sides
    /// must sum to zero, and solutions are determined up to a constant.
    Constants,
}

/// When iterative refinement (or the stand-alone cycle) stops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StopParams {
    /// Stop a column when ‖b − A u‖₂ ≤ max(rtol·‖b‖₂, atol) (the source's rule,
    /// docs/mathematics.md §4: atol = 1e-9, rtol = 0).
    pub rtol: f64,
    pub atol: f64,
    pub max_iterations: usize,
}

impl StopParams {
    /// The residual norm column `b_norm`'s iteration stops at.
    pub fn target(&self, b_norm: f64) -> f64 {
        crate::linalg::stopping_threshold(self.rtol, self.atol, b_norm)
    }
}

/// The Q1 stiffness matrix of the uniform mesh with n cells per direction (rediscretised
/// on every level).
pub fn assemble_level(dim: usize, n: usize) -> Result<Csr<f64>> {
    Ok(match dim {
        2 => assemble_stiffness(&unit_square(n, Element::Q1)?)?.0,
        3 => assemble_stiffness(&unit_cube(n)?)?.0,
        _ => {
            return Err(Error::InvalidInput(format!(
                "multigrid solves in 2 or 3 dimensions, not {dim}"
            )))
        }
    })
}

/// The Galerkin coarse matrix Pᵀ A P, symmetrised ((M + Mᵀ)/2 removes the rounding-level
/// asymmetry of the two products, so the coarse CG sees a symmetric matrix) and without
/// entries below 64·ε of their row's diagonal (exact zeros of the coarse stencil that the
/// products leave at rounding level).
pub fn galerkin_product(p: &Csr<f64>, a: &Csr<f64>) -> Result<Csr<f64>> {
    let m = spgemm(&p.transpose(), &spgemm(a, p)?)?;
    let mt = m.transpose();
    let diagonal = m.diagonal();
    let (mut row_ptr, mut col_idx, mut values) = (vec![0], Vec::new(), Vec::new());
    for r in 0..m.nrows() {
        let ((cols, vals), (cols_t, vals_t)) = (m.row(r), mt.row(r));
        if cols != cols_t {
            return Err(Error::InvalidInput(format!(
                "Galerkin product: row {r} of PᵀAP is not structurally symmetric (A's pattern must be)"
            )));
        }
        for ((&c, &v), &vt) in cols.iter().zip(vals).zip(vals_t) {
            let v = 0.5 * (v + vt);
            let threshold = 64.0 * f64::EPSILON * diagonal[r].abs().max(diagonal[c as usize].abs());
            if c as usize == r || v.abs() > threshold {
                col_idx.push(c);
                values.push(v);
            }
        }
        row_ptr.push(col_idx.len());
    }
    Csr::new(m.nrows(), m.ncols(), row_ptr, col_idx, values)
}

/// The initial guess of docs/mathematics.md §4: uniform random in [0, 1), reproducible from `seed`
/// (ChaCha8, the same stream on every machine).
pub fn random_initial_guess(len: usize, seed: u64) -> Vec<f64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.random::<f64>()).collect()
}

/// One V-cycle of the hierarchy from a zero initial guess: the inner solve of the
/// refinement, in the finest level's precision on node-major blocks.
pub struct VCycle<D: MultigridDevice> {
    dev: D,
    smoother: Smoother,
    base_tolerance: f64,
    residual_scaling: bool,
    /// Base-solve tolerance relative (stand-alone cycle) or absolute (refinement).
    relative_base: bool,
    /// Levels, coarsest first.
    levels: Vec<Level<D>>,
    /// Right-hand sides and iterates of the levels below the finest (index = level).
    bs: Vec<Block<D>>,
    xs: Vec<Block<D>>,
    /// Per column: whether the residual entering a coarser level is nonzero.
    active: Vec<bool>,
    /// The cycle's range checks (read once per cycle on a GPU).
    checks: RangeChecks<D>,
    /// Marks ending each stage of the cycles, when timing them.
    stages: Option<StageMarks<D>>,
    nrhs: usize,
    /// What the last cycle cost on each level, the coarser levels included (the finest's:
    /// the whole cycle).
    costs: Vec<Cost>,
}

/// The settings a cycle passes down the levels.
#[derive(Clone, Copy)]
struct CycleSettings {
    smoother: Smoother,
    base_tolerance: f64,
    relative_base: bool,
    residual_scaling: bool,
}

/// Ends stage `name` of the cycle when its stages are timed.
fn end_stage<D: MultigridDevice>(
    dev: &D,
    stages: &mut Option<StageMarks<D>>,
    name: &'static str,
) -> Result<(), MgFailure> {
    match stages.as_mut() {
        Some(marks) => marks.end(dev, name).map_err(other),
        None => Ok(()),
    }
}

/// The hierarchy in one V-cycle ([`v_cycle`]). The cycle numbers levels from the finest;
/// `levels` is stored coarsest first, so cycle level l is `levels[depth - 1 - l]`. The
/// finest level's b and x are the cycle's, the coarser ones' are `bs`, `xs` (index =
/// storage index). `costs` holds each level's subtotal, the coarser levels' included.
struct PoissonCycle<'a, D: MultigridDevice> {
    dev: &'a D,
    settings: CycleSettings,
    levels: &'a mut [Level<D>],
    bs: &'a mut [Block<D>],
    xs: &'a mut [Block<D>],
    b: &'a Block<D>,
    x: &'a mut Block<D>,
    active: &'a mut [bool],
    checks: &'a mut RangeChecks<D>,
    stages: &'a mut Option<StageMarks<D>>,
    costs: &'a mut [Cost],
}

/// Level `i`'s right-hand side and iterate (storage index: the finest's are the cycle's
/// `b`, `x`), and the coarser levels' blocks.
#[allow(clippy::type_complexity)]
fn split_blocks<'b, D: MultigridDevice>(
    i: usize,
    b: &'b Block<D>,
    x: &'b mut Block<D>,
    bs: &'b mut [Block<D>],
    xs: &'b mut [Block<D>],
) -> (
    &'b Block<D>,
    &'b mut Block<D>,
    &'b mut [Block<D>],
    &'b mut [Block<D>],
) {
    let (b_lower, b_rest) = bs.split_at_mut(i.min(bs.len()));
    let (x_lower, x_rest) = xs.split_at_mut(i.min(xs.len()));
    let b_rest: &'b [Block<D>] = b_rest;
    match (b_rest.first(), x_rest.first_mut()) {
        (Some(b), Some(x)) => (b, x, b_lower, x_lower),
        _ => (b, x, b_lower, x_lower),
    }
}

/// What moving a block between `level` and the next coarser one costs.
fn transfer_cost<D: MultigridDevice>(level: &Level<D>, coarse: &Level<D>) -> Cost {
    let transfer = level
        .transfer
        .as_ref()
        .expect("every level above the coarsest has a transfer");
    Cost {
        flops: transfer.flops_per_column() * level.nrhs as f64,
        bytes: transfer.bytes() + level.vector_bytes() + coarse.vector_bytes(),
    }
}

impl<D: MultigridDevice> PoissonCycle<'_, D> {
    /// The storage index of cycle level `l`.
    fn index(&self, l: usize) -> usize {
        self.levels.len() - 1 - l
    }

    /// `step` on level `i` (storage index) with its right-hand side and iterate.
    fn on_level<T>(
        &mut self,
        i: usize,
        step: impl FnOnce(&mut Level<D>, &Block<D>, &mut Block<D>, &mut RangeChecks<D>) -> T,
    ) -> T {
        let (b, x, _, _) = split_blocks(i, self.b, self.x, self.bs, self.xs);
        step(&mut self.levels[i], b, x, self.checks)
    }
}

impl<D: MultigridDevice> CycleLevels for PoissonCycle<'_, D> {
    type Error = MgFailure;

    fn depth(&self) -> usize {
        self.levels.len()
    }

    fn pre_smooth(&mut self, l: usize, zero_initial: bool) -> Result<(), MgFailure> {
        let (dev, smoother, i) = (self.dev, self.settings.smoother, self.index(l));
        self.costs[i] = self.on_level(i, |level, b, x, checks| {
            level.smooth(dev, &smoother, smoother.pre, zero_initial, b, x, checks)
        })?;
        end_stage(dev, self.stages, "smoothing")
    }

    fn restrict_residual(&mut self, l: usize) -> Result<(), MgFailure> {
        let (dev, settings, i) = (self.dev, self.settings, self.index(l));
        let (b, x, b_lower, _) = split_blocks(i, self.b, self.x, self.bs, self.xs);
        let (lower, this) = self.levels.split_at_mut(i);
        let (level, coarse, coarse_b) = (&mut this[0], &mut lower[i - 1], &mut b_lower[i - 1]);
        let (checks, costs) = (&mut *self.checks, &mut *self.costs);
        // Entering f16 from a wider precision: scale each column's residual to magnitude ≤ 1.
        let enters_f16 =
            coarse.precision() == Precision::F16 && level.precision() != Precision::F16;
        // The residual's statistics go to the host where it scales by them, or where checks
        // are read at once; otherwise its checks and the restriction's are collected.
        let read = (settings.residual_scaling && enters_f16) || !checks.deferred;
        costs[i] = costs[i] + level.residual(dev, b, x, checks, read)?;
        end_stage(dev, self.stages, "residual")?;
        if !read {
            level.scale.fill(1.0);
        } else {
            let residual = level.stats.read(dev).map_err(other)?;
            for ((active, scale), &max_abs) in self
                .active
                .iter_mut()
                .zip(&mut level.scale)
                .zip(residual.max_abs)
            {
                *active = max_abs > 0.0;
                *scale = if settings.residual_scaling && enters_f16 {
                    max_abs
                } else {
                    1.0
                };
            }
        }
        let transfer = level
            .transfer
            .as_ref()
            .expect("every level above the coarsest has a transfer");
        dev.restrict(
            transfer,
            &level.tmp,
            coarse_b,
            &level.scale,
            &mut coarse.stats,
        )
        .map_err(other)?;
        if read {
            checks.now(dev, coarse, "the restricted residual")?;
            let flushed = coarse.check_not_flushed(dev, self.active, "the restricted residual");
            checks.earliest(dev, flushed)?;
        } else {
            checks.check(dev, coarse, "the restricted residual")?;
            checks.check_restricted(dev, level, coarse, "the restricted residual")?;
        }
        end_stage(dev, self.stages, "restriction")?;
        costs[i] = costs[i] + transfer_cost(level, coarse);
        Ok(())
    }

    fn coarse_solve(&mut self) -> Result<(), MgFailure> {
        let (dev, settings) = (self.dev, self.settings);
        let (tolerance, relative) = (settings.base_tolerance, settings.relative_base);
        self.costs[0] = self.on_level(0, |level, b, x, checks| {
            level.base_solve(dev, tolerance, relative, b, x, checks)
        })?;
        end_stage(dev, self.stages, "base solve")
    }

    fn prolongate_correction(&mut self, l: usize) -> Result<(), MgFailure> {
        let (dev, i) = (self.dev, self.index(l));
        let (_, x, _, x_lower) = split_blocks(i, self.b, self.x, self.bs, self.xs);
        let (lower, this) = self.levels.split_at_mut(i);
        let (level, coarse) = (&mut this[0], &lower[i - 1]);
        let transfer = level
            .transfer
            .as_ref()
            .expect("every level above the coarsest has a transfer");
        dev.prolongate_add(transfer, &x_lower[i - 1], x, &level.scale, &mut level.stats)
            .map_err(other)?;
        self.checks
            .check(dev, level, "the coarse-grid corrected iterate")?;
        end_stage(dev, self.stages, "prolongation")?;
        let costs = &mut *self.costs;
        costs[i] = costs[i] + costs[i - 1];
        costs[i] = costs[i]
            + transfer_cost(level, coarse)
            + Cost {
                flops: 0.0,
                bytes: level.vector_bytes(),
            };
        Ok(())
    }

    fn post_smooth(&mut self, l: usize) -> Result<(), MgFailure> {
        let (dev, smoother, i) = (self.dev, self.settings.smoother, self.index(l));
        let cost = self.on_level(i, |level, b, x, checks| {
            level.smooth(dev, &smoother, smoother.post, false, b, x, checks)
        })?;
        self.costs[i] = self.costs[i] + cost;
        end_stage(dev, self.stages, "smoothing")
    }
}

impl<D: MultigridDevice> VCycle<D> {
    fn settings(&self) -> CycleSettings {
        CycleSettings {
            smoother: self.smoother,
            base_tolerance: self.base_tolerance,
            relative_base: self.relative_base,
            residual_scaling: self.residual_scaling,
        }
    }

    fn finest(&self) -> &Level<D> {
        self.levels.last().expect("at least one level")
    }

    /// Allocates every level's blocks for `nrhs` columns.
    fn resize(&mut self, nrhs: usize) -> Result<()> {
        if self.nrhs == nrhs {
            return Ok(());
        }
        let dev = self.dev.clone();
        for level in &mut self.levels {
            level.resize(&dev, nrhs)?;
        }
        let coarse = &self.levels[..self.levels.len() - 1];
        self.bs = coarse
            .iter()
            .map(|l| l.block(&dev, nrhs))
            .collect::<Result<_>>()?;
        self.xs = coarse
            .iter()
            .map(|l| l.block(&dev, nrhs))
            .collect::<Result<_>>()?;
        self.active = vec![false; nrhs];
        // Values collected per cycle and level above the coarsest: each smoothing step (and
        // a block step's residual), the residual, the restricted residual (its range, and its
        // flushed column with its magnitude), the coarse-grid correction.
        let checks_per_step = match self.smoother.kind {
            SmootherKind::BlockChebyshev => 2,
            _ => 1,
        };
        let per_level = checks_per_step * (self.smoother.pre + self.smoother.post) + 5;
        self.checks
            .reserve(&dev, per_level * (self.levels.len() - 1))?;
        self.nrhs = nrhs;
        Ok(())
    }

    /// One V-cycle for the right-hand side `b`, improving `x` (from x = 0 when
    /// `zero_initial`).
    fn cycle(
        &mut self,
        b: &Block<D>,
        x: &mut Block<D>,
        zero_initial: bool,
    ) -> Result<(), MgFailure> {
        let settings = self.settings();
        let VCycle {
            dev,
            levels,
            bs,
            xs,
            active,
            checks,
            stages,
            costs,
            ..
        } = self;
        checks.clear();
        if let Some(marks) = stages.as_mut() {
            marks.begin(dev).map_err(other)?;
        }
        let mut cycle = PoissonCycle {
            dev,
            settings,
            levels,
            bs,
            xs,
            b,
            x,
            active,
            checks,
            stages,
            costs,
        };
        v_cycle(&mut cycle, 0, zero_initial)?;
        checks.settle(dev)
    }
}

impl<D: MultigridDevice> LinOp<D> for VCycle<D> {
    fn size(&self) -> usize {
        self.finest().unknowns
    }

    fn input(&self) -> BlockKind {
        BlockKind {
            precision: self.finest().precision(),
            layout: Layout::NodeMajor,
        }
    }

    fn output(&self) -> BlockKind {
        self.input()
    }

    fn prepare(&mut self, nrhs: usize) -> Result<()> {
        self.resize(nrhs)
    }

    fn apply(&mut self, x: &Block<D>, y: &mut Block<D>) -> Result<()> {
        self.cycle(x, y, true)
            .map_err(|failure| Error::from(MgError::new(failure)))
    }

    fn cost(&self, _nrhs: usize) -> Cost {
        self.costs.last().copied().unwrap_or_default()
    }
}

/// How [`Multigrid::solve_loaded`] solves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MgSolve {
    /// f64 iterative refinement around one V-cycle per step in the schedule's precisions.
    Refined,
    /// V-cycles on the f64 system itself (every level f64).
    Plain,
}

/// Host blocks of the slice-based API: column-major f64 as given, node-major f64 for the
/// solve.
struct HostBlocks<D: MultigridDevice> {
    nrhs: usize,
    col_major: Block<D>,
    b: Block<D>,
    u: Block<D>,
    /// A host block in the hierarchy's order (when it has its own).
    ordered: Vec<f64>,
}

/// A multigrid hierarchy, set up once, solving blocks of right-hand sides.
pub struct Multigrid<D: MultigridDevice> {
    dev: D,
    params: MgParams,
    /// The cycle, when no refinement holds it.
    cycle: Option<VCycle<D>>,
    refinement: Option<Refinement<D, VCycle<D>>>,
    /// The f64 fine-grid operator of the refinement (the finest level's own when f64).
    outer: Arc<EllMatrix<D>>,
    host: Option<HostBlocks<D>>,
    /// ‖b‖₂ per column of the loaded right-hand sides (the stopping tests' scale).
    b_norms: Vec<f64>,
    /// The hierarchy's own order of the caller's unknowns (Galerkin hierarchies: reverse
    /// Cuthill–McKee of the finest matrix), applied on the way in and out of the host API;
    /// device blocks ([`Multigrid::solve_blocks`]) are in this order.
    order: Option<Ordering>,
    /// Flexible CG around the cycle instead of plain refinement.
    krylov: bool,
}

impl<D: MultigridDevice> Multigrid<D> {
    /// Sets up `params.schedule.len()` levels under the finest mesh of n cells per direction
    /// of the unit square or cube (`dim` = 2 or 3), whose Q1 stiffness matrix `finest` the
    /// caller assembled: coarser levels are rediscretised, transfers bilinear (trilinear).
    pub fn new(dev: &D, dim: usize, n: usize, finest: &Csr<f64>, params: MgParams) -> Result<Self> {
        let count = params.schedule.len();
        check_levels(n, count)?;
        let grid = |level: usize| GridShape {
            dim,
            m: (n >> (count - 1 - level)) - 1,
        };
        if finest.nrows() != grid(count - 1).points() {
            return Err(Error::InvalidInput(format!(
                "multigrid: the finest matrix has {} rows, the {dim}D mesh with n = {n} has {} unknowns",
                finest.nrows(),
                grid(count - 1).points()
            )));
        }
        let mut matrices = Vec::with_capacity(count);
        for index in 0..count - 1 {
            let transfer = (index > 0).then(|| LevelTransfer::Grid {
                fine: grid(index),
                coarse: grid(index - 1),
            });
            matrices.push((assemble_level(dim, n >> (count - 1 - index))?, transfer));
        }
        let finest_transfer = (count > 1).then(|| LevelTransfer::Grid {
            fine: grid(count - 1),
            coarse: grid(count - 2),
        });
        let description = format!("{dim}D unit domain, finest n = {n}");
        Self::with_levels(
            dev,
            matrices,
            (finest, finest_transfer),
            params,
            NullSpace::None,
            &description,
        )
    }

    /// Sets up multigrid on a refinement hierarchy: `prolongations[k]` interpolates from
    /// the level k + 1 below the finest to the one above it (finest first, at least one
    /// per level below the finest), and the coarse matrices are Galerkin products
    /// A_{ℓ−1} = Pᵀ A_ℓ P of the finest matrix `finest`, whose null space is `null_space`
    /// (the prolongations map constants to constants, so every level shares it).
    ///
    /// Every level is renumbered for a narrow band (refined meshes number nodes by coarse
    /// entity, which puts neighbours far apart): the finest by reverse Cuthill–McKee, each
    /// coarser one following it through P. The host API takes and returns the caller's
    /// order.
    pub fn galerkin(
        dev: &D,
        finest: &Csr<f64>,
        prolongations: &[Csr<f64>],
        params: MgParams,
        null_space: NullSpace,
    ) -> Result<Self> {
        let count = params.schedule.len();
        if count == 0 || prolongations.len() < count - 1 {
            return Err(Error::InvalidInput(format!(
                "{count} multigrid levels on a hierarchy of {} levels",
                prolongations.len() + 1
            )));
        }
        let order = Ordering::reverse_cuthill_mckee(finest);
        let finest = &ordering::permute(finest, &order, &order)?;
        // C_k = the level k + 1 below the finest, T_k = the transfer P_k on the device, both
        // in the levels' orders.
        let mut coarse_matrices: Vec<Csr<f64>> = Vec::with_capacity(count - 1);
        let mut transfers = Vec::with_capacity(count - 1);
        let mut fine_order = order.clone();
        for p in &prolongations[..count - 1] {
            let finer = coarse_matrices.last().unwrap_or(finest);
            if p.nrows() != finer.nrows() {
                return Err(Error::InvalidInput(format!(
                    "multigrid: a prolongation with {} rows under a level of {} unknowns",
                    p.nrows(),
                    finer.nrows()
                )));
            }
            let coarse_order = Ordering::following(p, &fine_order)?;
            let p = ordering::permute(p, &fine_order, &coarse_order)?;
            coarse_matrices.push(galerkin_product(&p, finer)?);
            transfers.push(LevelTransfer::matrix(dev, &p)?);
            fine_order = coarse_order;
        }
        // Level C_k passes down through T_{k+1}; the finest through T_0.
        let mut transfers = transfers.into_iter();
        let finest_transfer = transfers.next();
        let mut matrices: Vec<_> = coarse_matrices
            .into_iter()
            .zip(transfers.map(Some).chain(std::iter::once(None)))
            .collect();
        matrices.reverse();
        let description = match null_space {
            NullSpace::None => "refined mesh, Galerkin coarse levels",
            NullSpace::Constants => "refined mesh, Galerkin coarse levels, constants projected out",
        };
        let mut mg = Self::with_levels(
            dev,
            matrices,
            (finest, finest_transfer),
            params,
            null_space,
            description,
        )?;
        mg.order = Some(order);
        Ok(mg)
    }

    /// The hierarchy from the matrices of the levels below the finest (coarsest first,
    /// each with its transfer to the next coarser), the finest matrix and its transfer.
    fn with_levels(
        dev: &D,
        matrices: Vec<(Csr<f64>, Option<LevelTransfer<D>>)>,
        (finest, finest_transfer): (&Csr<f64>, Option<LevelTransfer<D>>),
        params: MgParams,
        null_space: NullSpace,
        description: &str,
    ) -> Result<Self> {
        let singular = null_space == NullSpace::Constants;
        let count = params.schedule.len();
        let mut levels = Vec::with_capacity(count);
        let mg_error = |failure| Error::from(MgError::new(failure));
        for (index, (matrix, transfer)) in matrices.into_iter().enumerate() {
            levels.push(
                Level::new(dev, index, &matrix, transfer, &params, singular).map_err(mg_error)?,
            );
        }
        let finest_grid = match &finest_transfer {
            Some(LevelTransfer::Grid { fine, .. }) => Some(*fine),
            _ => None,
        };
        levels.push(
            Level::new(dev, count - 1, finest, finest_transfer, &params, singular)
                .map_err(mg_error)?,
        );
        let outer = match levels.last() {
            Some(l) if l.precision() == Precision::F64 => Arc::clone(&l.matrix),
            _ => {
                let ell = Ell::from_csr_diagonal_first(finest, dev.ell_layout())?;
                Arc::new(EllMatrix::upload_stored(
                    dev,
                    &ell,
                    Precision::F64,
                    params.storage,
                    finest_grid,
                )?)
            }
        };
        log::info!(
            "multigrid: {count} levels, {description} ({} unknowns), precisions {}",
            finest.nrows(),
            schedule_name(&params.schedule)
        );
        Ok(Multigrid {
            cycle: Some(VCycle {
                dev: dev.clone(),
                smoother: params.smoother,
                base_tolerance: params.base_tolerance,
                residual_scaling: params.residual_scaling,
                relative_base: false,
                levels,
                bs: Vec::new(),
                xs: Vec::new(),
                active: Vec::new(),
                checks: RangeChecks::new(dev)?,
                stages: None,
                nrhs: 0,
                costs: vec![Cost::default(); count],
            }),
            refinement: None,
            outer,
            host: None,
            b_norms: Vec::new(),
            order: None,
            krylov: false,
            dev: dev.clone(),
            params,
        })
    }

    pub fn params(&self) -> &MgParams {
        &self.params
    }

    fn vcycle(&self) -> &VCycle<D> {
        match (&self.cycle, &self.refinement) {
            (Some(c), _) => c,
            (None, Some(r)) => r.inner(),
            (None, None) => unreachable!("the cycle is held by one of the two"),
        }
    }

    /// The V-cycle as an operator (y ≈ A⁻¹ x from y = 0 on node-major blocks in the finest
    /// level's precision), to precondition a Krylov method or to apply on its own.
    pub fn cycle_mut(&mut self) -> &mut VCycle<D> {
        match (&mut self.cycle, &mut self.refinement) {
            (Some(c), _) => c,
            (None, Some(r)) => r.inner_mut(),
            (None, None) => unreachable!("the cycle is held by one of the two"),
        }
    }

    /// The cycle, taken back from the refinement if it holds it.
    fn take_cycle(&mut self) -> VCycle<D> {
        match (self.cycle.take(), self.refinement.take()) {
            (Some(c), _) => c,
            (None, Some(r)) => r.into_inner(),
            (None, None) => unreachable!("the cycle is held by one of the two"),
        }
    }

    /// Unknowns of the finest level.
    pub fn unknowns(&self) -> usize {
        self.vcycle().size()
    }

    /// Bytes the stored matrices of all levels occupy (with block smoothing's B⁻¹; plus the
    /// f64 refinement operator).
    pub fn operator_bytes(&self) -> f64 {
        let levels = &self.vcycle().levels;
        let shared = levels
            .last()
            .is_some_and(|l| Arc::ptr_eq(&l.matrix, &self.outer));
        let outer = if shared { 0.0 } else { self.outer.bytes() };
        let stored = |l: &Level<D>| l.matrix.bytes() + l.blocks.as_ref().map_or(0.0, |b| b.bytes());
        levels.iter().map(stored).sum::<f64>() + outer
    }

    /// Bytes of device memory one right-hand side occupies during a solve: per level its
    /// work block and (below the finest) its right-hand side and iterate, block smoothing's
    /// residual, the base solve's CG vectors and, on a singular hierarchy, the constants; at the finest the refinement's
    /// residual and correction in the finest precision and its f64 blocks (right-hand side,
    /// solution, residual, the host layout's; flexible CG's four more).
    pub fn bytes_per_column(&self) -> usize {
        let levels = &self.vcycle().levels;
        let finest = levels.len() - 1;
        let in_levels: usize = levels
            .iter()
            .map(|l| {
                // The finest: its work block, the refinement's residual and correction.
                let base = if l.index == 0 {
                    4 + usize::from(l.singular)
                } else {
                    0
                };
                // Block smoothing's residual.
                let smoothing = usize::from(l.blocks.is_some());
                let blocks = 3 + base + smoothing;
                blocks * l.unknowns * l.precision().bytes()
            })
            .sum();
        let f64_blocks = 4 + if self.krylov { 4 } else { 0 };
        in_levels + f64_blocks * 8 * levels[finest].unknowns
    }

    /// Sets up the refinement for blocks of `nrhs` columns and `max_iterations` steps (set-up:
    /// allocates when the shape changes).
    pub fn prepare(&mut self, nrhs: usize, max_iterations: usize) -> Result<()> {
        let fits = self.refinement.as_ref().is_some_and(|r| {
            r.nrhs() == nrhs && r.max_iterations() >= max_iterations && r.is_krylov() == self.krylov
        });
        if !fits {
            // The last width's stage clock carries on (a solve in chunks).
            let clock = self.refinement.as_mut().map(Refinement::take_clock);
            let cycle = self.take_cycle();
            let timed = cycle.stages.is_some();
            let mut refinement = Refinement::new(&self.dev, cycle, nrhs, max_iterations)?;
            match clock {
                Some(clock) => refinement.resume_clock(clock),
                None => refinement.time_stages(timed),
            }
            self.refinement = Some(match self.krylov {
                true => refinement.with_krylov()?,
                false => refinement,
            });
        }
        Ok(())
    }

    /// Allocates what a `solve` of `nrhs` columns needs: every level's blocks, and for
    /// [`MgSolve::Refined`] the refinement's for `max_iterations` steps. Set-up: without it
    /// the first solve of a shape allocates them, inside whatever times that solve.
    pub fn prepare_solve(
        &mut self,
        solve: MgSolve,
        nrhs: usize,
        max_iterations: usize,
    ) -> Result<()> {
        match solve {
            MgSolve::Refined => self.prepare(nrhs, max_iterations),
            MgSolve::Plain => self.cycle_mut().resize(nrhs),
        }
    }

    /// Collects the cycle's range checks on the device and reads them once per cycle (the
    /// default where a host read waits for the device, a GPU), or reads each at once (the
    /// default elsewhere): both give the same answers and the same failures.
    pub fn defer_range_checks(&mut self, on: bool) {
        self.cycle_mut().checks.deferred = on;
    }

    /// Times the stages of every cycle from now on (smoothing, residual, restriction, base
    /// solve, prolongation) by marks in the device's queue, which no stage waits for, or
    /// stops timing.
    /// The refinement's own stages between the cycles are timed with them
    /// ([`Refinement::time_stages`]).
    pub fn time_stages(&mut self, on: bool) {
        self.cycle_mut().stages = on.then(StageMarks::default);
        if let Some(refinement) = self.refinement.as_mut() {
            refinement.time_stages(on);
        }
    }

    /// Seconds per stage of the cycles since the last call (empty when not timing): the
    /// refinement's own work between cycles is in [`Multigrid::take_refinement_stages`].
    pub fn take_stage_seconds(&mut self) -> Result<Vec<StageTime>> {
        let dev = self.dev.clone();
        match self.cycle_mut().stages.as_mut() {
            Some(marks) => marks.take(&dev),
            None => Ok(Vec::new()),
        }
    }

    /// The refinement's stages since the last call, with their compulsory bytes and flops
    /// ([`Refinement::take_stages`]): empty when not timing or before the first solve.
    pub fn take_refinement_stages(&mut self) -> Result<Vec<TimedStage>> {
        match self.refinement.as_mut() {
            Some(refinement) => refinement.take_stages(),
            None => Ok(Vec::new()),
        }
    }

    /// Accelerates the refinement by flexible CG, the V-cycle as its preconditioner
    /// ([`Refinement::with_krylov`]), or goes back to plain refinement. For symmetric
    /// cycles (as many smoothing steps after the coarse correction as before).
    pub fn set_krylov(&mut self, on: bool) {
        self.krylov = on;
    }

    /// The order of the unknowns inside the hierarchy, when it differs from the caller's.
    pub fn order(&self) -> Option<&Ordering> {
        self.order.as_ref()
    }

    /// Solves A u = b for node-major f64 blocks on the device by f64 iterative refinement
    /// around one V-cycle per step (docs/mathematics.md §4); `u` holds the initial guess on
    /// entry and the solution on return, both in the hierarchy's order
    /// ([`Multigrid::order`]). Allocates nothing after [`Multigrid::prepare`].
    pub fn solve_blocks(
        &mut self,
        b: &Block<D>,
        u: &mut Block<D>,
        stop: StopParams,
    ) -> std::result::Result<&RefineInfo, MgError> {
        self.prepare(b.cols(), stop.max_iterations)?;
        let params = RefineParams {
            rtol: stop.rtol,
            atol: stop.atol,
            max_iterations: stop.max_iterations,
            residual_scaling: self.params.residual_scaling,
        };
        let scaling = self.params.residual_scaling;
        let refinement = self.refinement.as_mut().expect("prepared");
        refinement.inner_mut().relative_base = false;
        let finest = refinement.inner().finest();
        let finest_level = (finest.index, finest.count, finest.unknowns);
        match refinement.solve(&*self.outer, b, u, params) {
            Ok(info) => Ok(info),
            Err(e) => Err(refine_error(e, finest_level, stop).with_scaling(scaling)),
        }
    }

    /// Host blocks for `nrhs` columns (allocated when the width changes).
    fn host_blocks(&mut self, nrhs: usize) -> Result<&mut HostBlocks<D>> {
        if self.host.as_ref().is_none_or(|h| h.nrhs != nrhs) {
            let n = self.unknowns();
            let block = |layout| Block::zeros(&self.dev, n, nrhs, Precision::F64, layout);
            self.host = Some(HostBlocks {
                nrhs,
                col_major: block(Layout::ColMajor)?,
                b: block(Layout::NodeMajor)?,
                u: block(Layout::NodeMajor)?,
                ordered: match self.order {
                    Some(_) => vec![0.0; n * nrhs],
                    None => Vec::new(),
                },
            });
        }
        Ok(self.host.as_mut().expect("just set"))
    }

    /// Copies the column-major host blocks b and u to the device (node-major, in the
    /// hierarchy's order).
    fn upload(&mut self, b: &[f64], u: &[f64], nrhs: usize) -> Result<()> {
        let dev = self.dev.clone();
        self.host_blocks(nrhs)?;
        let (h, order) = (self.host.as_mut().expect("just set"), &self.order);
        for (given, device) in [(b, &mut h.b), (u, &mut h.u)] {
            match order {
                Some(order) => {
                    let n = order.len();
                    for (ordered, given) in h.ordered.chunks_mut(n).zip(given.chunks(n)) {
                        for (o, &old) in ordered.iter_mut().zip(&order.old_of_new) {
                            *o = given[old as usize];
                        }
                    }
                    h.col_major.data.write_f64(&dev, &h.ordered)?;
                }
                None => h.col_major.data.write_f64(&dev, given)?,
            }
            dev.relayout(&h.col_major, device)?;
        }
        Ok(())
    }

    /// Copies the device solution back to the column-major host block u.
    fn download(&mut self, u: &mut [f64]) -> Result<()> {
        let dev = self.dev.clone();
        let h = self.host.as_mut().expect("uploaded");
        dev.relayout(&h.u, &mut h.col_major)?;
        let crate::device::Data::F64(buffer) = &h.col_major.data else {
            unreachable!("host blocks are f64")
        };
        match &self.order {
            Some(order) => {
                dev.download(buffer, &mut h.ordered)?;
                let n = order.len();
                for (u, ordered) in u.chunks_mut(n).zip(h.ordered.chunks(n)) {
                    for (u, &new) in u.iter_mut().zip(&order.new_of_old) {
                        *u = ordered[new as usize];
                    }
                }
                Ok(())
            }
            None => dev.download(buffer, u),
        }
    }

    /// Solves A u = b for the column-major N × nrhs host block `b` by f64 iterative
    /// refinement around one V-cycle per step (docs/mathematics.md §4); `u` holds the
    /// initial guess on entry and the solution on return.
    pub fn solve_refined(
        &mut self,
        b: &[f64],
        u: &mut [f64],
        nrhs: usize,
        stop: StopParams,
    ) -> std::result::Result<MgInfo, MgError> {
        self.load(b, u, nrhs)?;
        let info = self.solve_loaded(MgSolve::Refined, stop)?;
        self.unload(u)?;
        Ok(info)
    }

    /// Solves A u = b by V-cycles on the f64 system itself (no refinement): the baseline
    /// multigrid. Every level must be f64.
    pub fn solve_plain(
        &mut self,
        b: &[f64],
        u: &mut [f64],
        nrhs: usize,
        stop: StopParams,
    ) -> std::result::Result<MgInfo, MgError> {
        self.load(b, u, nrhs)?;
        let info = self.solve_loaded(MgSolve::Plain, stop)?;
        self.unload(u)?;
        Ok(info)
    }

    /// Copies the column-major N × nrhs host blocks b (right-hand sides) and u (initial
    /// guesses) to the device for [`Multigrid::solve_loaded`].
    pub fn load(&mut self, b: &[f64], u: &[f64], nrhs: usize) -> Result<()> {
        check_block(b, u, self.unknowns(), nrhs)?;
        self.b_norms = b
            .chunks(self.unknowns())
            .map(crate::numeric::nrm2)
            .collect();
        self.upload(b, u, nrhs)
    }

    /// Solves the system loaded by [`Multigrid::load`] on the device, leaving the solution
    /// there for [`Multigrid::unload`]: what a benchmark times.
    pub fn solve_loaded(
        &mut self,
        solve: MgSolve,
        stop: StopParams,
    ) -> std::result::Result<MgInfo, MgError> {
        let mut host = self.host.take().ok_or_else(|| {
            MgError::new(MgFailure::InvalidInput(
                "multigrid: no right-hand sides loaded".into(),
            ))
        })?;
        let result = match solve {
            MgSolve::Refined => self
                .solve_blocks(&host.b, &mut host.u, stop)
                .map(|info| info_of(info, 0.0)),
            MgSolve::Plain => self.solve_plain_blocks(&mut host, stop),
        };
        self.host = Some(host);
        result
    }

    /// Copies the solution of the last [`Multigrid::solve_loaded`] to the column-major host
    /// block u.
    pub fn unload(&mut self, u: &mut [f64]) -> Result<()> {
        self.download(u)
    }

    /// V-cycles on the f64 system of the loaded blocks until each column's stopping test.
    fn solve_plain_blocks(
        &mut self,
        host: &mut HostBlocks<D>,
        stop: StopParams,
    ) -> std::result::Result<MgInfo, MgError> {
        if let Some(p) = self.params.schedule.iter().find(|&&p| p != Precision::F64) {
            return Err(MgError::new(MgFailure::InvalidInput(format!(
                "stand-alone multigrid (no refinement) runs in f64 on every level; the schedule has {p}"
            ))));
        }
        let targets: Vec<f64> = self.b_norms.iter().map(|&n| stop.target(n)).collect();
        let mut cycle = self.take_cycle();
        let result = self.plain_cycles(&mut cycle, host, &targets, stop.max_iterations);
        self.cycle = Some(cycle);
        result
    }

    /// V-cycles until column c's ‖r‖₂ ≤ `targets[c]` (or `max_iterations`).
    fn plain_cycles(
        &mut self,
        cycle: &mut VCycle<D>,
        host: &mut HostBlocks<D>,
        targets: &[f64],
        max_iterations: usize,
    ) -> std::result::Result<MgInfo, MgError> {
        let nrhs = targets.len();
        cycle.resize(nrhs)?;
        cycle.relative_base = true;
        let dev = self.dev.clone();
        let mut info = MgInfo {
            iterations: vec![0; nrhs],
            history: Vec::new(),
            bytes: 0.0,
        };
        let fail = |failure, info: &MgInfo| MgError {
            failure,
            info: info.clone(),
        };
        let mut cycles = 0;
        let norms = loop {
            let finest = cycle.levels.last_mut().expect("at least one level");
            let (cost, norms) = finest
                .residual_norms(&dev, &host.b, &host.u)
                .map_err(|f| fail(f, &info))?;
            info.bytes += cost.bytes;
            info.history.push(norms.clone());
            let active: Vec<bool> = norms.iter().zip(targets).map(|(&a, &t)| a > t).collect();
            if !active.iter().any(|&a| a) || cycles == max_iterations {
                break norms;
            }
            cycle
                .cycle(&host.b, &mut host.u, false)
                .map_err(|f| fail(f, &info))?;
            info.bytes += cycle.cost(0).bytes;
            cycles += 1;
            for (it, &a) in info.iterations.iter_mut().zip(&active) {
                *it += a as usize;
            }
        };
        match (0..nrhs).find(|&c| norms[c].is_nan() || norms[c] > targets[c]) {
            None => Ok(info),
            Some(column) => Err(fail(
                MgFailure::NotConverged {
                    column,
                    residual: norms[column],
                    target: targets[column],
                    max_iterations,
                },
                &info,
            )),
        }
    }
}

/// The record of a refinement as a multigrid Info.
fn info_of(info: &RefineInfo, extra_bytes: f64) -> MgInfo {
    MgInfo {
        iterations: info.iterations.clone(),
        history: (0..info.recorded())
            .map(|s| info.step(s).to_vec())
            .collect(),
        bytes: info.cost.bytes + extra_bytes,
    }
}

/// A refinement failure in multigrid's terms: range problems of the cast into the finest
/// level and of its correction name that level.
fn refine_error(
    e: crate::linalg::RefineError,
    (level, levels, unknowns): (usize, usize, usize),
    stop: StopParams,
) -> MgError {
    let info = info_of(&e.info, 0.0);
    let range = |precision, what: String| MgFailure::Range {
        remedy: Remedy::Scaling { scaling_on: None },
        level,
        levels,
        precision,
        unknowns,
        what,
    };
    let failure = match e.failure {
        RefineFailure::Input {
            flushed: None,
            precision,
        } => range(
            precision,
            format!(
                "the refinement residual cast to this level is not finite or exceeds the largest {precision} value ({:e})",
                precision.max(),
            ),
        ),
        RefineFailure::Input {
            flushed: Some((c, largest)),
            precision,
        } => range(
            precision,
            format!("the refinement residual of right-hand side {c} is flushed to zero (largest magnitude {largest:e}, below half the smallest {precision} value)"),
        ),
        RefineFailure::CorrectionFlushed { column, precision } => range(
            precision,
            format!("the correction of right-hand side {column} is flushed to zero (below half the smallest {precision} value)"),
        ),
        RefineFailure::Inner(e) => MgError::from(*e).failure,
        RefineFailure::NotFinite => MgFailure::NotFinite,
        RefineFailure::NotConverged { column, .. } => MgFailure::NotConverged {
            column,
            residual: e.info.residuals()[column],
            target: stop.target(e.info.b_norms[column]),
            max_iterations: stop.max_iterations,
        },
    };
    MgError { failure, info }
}

fn check_block(b: &[f64], u: &[f64], n: usize, nrhs: usize) -> Result<()> {
    if nrhs == 0 || b.len() != n * nrhs || u.len() != n * nrhs {
        return Err(Error::InvalidInput(format!(
            "multigrid: blocks of {} and {} values for {n} unknowns × {nrhs} right-hand sides",
            b.len(),
            u.len()
        )));
    }
    if let Some(i) = b.iter().position(|v| !v.is_finite()) {
        return Err(Error::InvalidInput(format!(
            "multigrid: right-hand side entry {} of column {} is {}",
            i % n,
            i / n,
            b[i]
        )));
    }
    Ok(())
}
