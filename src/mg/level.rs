//! One level of the hierarchy, stored in its own precision: its matrix in ELLPACK
//! (diagonal first), the transfer to the next coarser level, the level's work block, and
//! the kernels the cycle runs on it, each checked against the precision's range.

use std::sync::Arc;

use super::blocks::{block_inverse, block_spectrum_bound};
use super::error::{MgFailure, Remedy};
use super::multigrid::MgParams;
use super::schedule::{Smoother, SmootherKind, CHEBYSHEV_RATIO};
use crate::device::{
    Block, EllMatrix, FlagLog, Layout, LevelTransfer, MultigridDevice, RowOp, Scratch, Stats,
};
use crate::error::Error;
use crate::linalg::{extreme_eigenvalues, BlockCg, CgParams, Cost, LanczosParams};
use crate::precision::Precision;
use crate::sparse::{Csr, Ell, SparseRows};

/// A device or shape failure inside a cycle.
pub(super) fn other(e: Error) -> MgFailure {
    MgFailure::Other(e.to_string())
}

pub(super) struct Level<D: MultigridDevice> {
    /// 0 = coarsest.
    pub index: usize,
    pub count: usize,
    pub unknowns: usize,
    pub matrix: Arc<EllMatrix<D>>,
    /// λ̂ ≥ the largest eigenvalue of D⁻¹A (B⁻¹A with `blocks`), the top of the interval
    /// Chebyshev smoothing damps ([`spectrum_bound`], [`block_spectrum_bound`]); 0 for
    /// the other smoothers.
    pub spectrum_bound: f64,
    /// B⁻¹ of block Chebyshev smoothing in the level's precision (diagonal first), where
    /// the level has strongly coupled unknowns.
    pub blocks: Option<EllMatrix<D>>,
    /// The residual a block smoothing step multiplies by B⁻¹ (levels with `blocks`).
    pub residual: Block<D>,
    /// To the next coarser level (none on the coarsest).
    pub transfer: Option<LevelTransfer<D>>,
    pub nrhs: usize,
    /// The residual, or the next Jacobi iterate (node-major N × nrhs).
    pub tmp: Block<D>,
    /// Statistics of the last kernel that wrote into this level: max |v| and the range
    /// flag, all the cycle reads (no Σ v², which the CPU kernels then skip).
    pub stats: Stats<D>,
    /// Statistics with Σ v²: the residual norms of the plain cycles' stopping test.
    pub norm_stats: Stats<D>,
    /// Per column: the scale of this level's residual where it enters a coarser f16 level.
    pub scale: Vec<f64>,
    /// The base solve (coarsest level only).
    pub cg: Option<BlockCg<D>>,
    /// Whether the constants are the matrix's null space (a pure Neumann problem); the
    /// base solve then projects them out.
    pub singular: bool,
    /// The projection's work (coarsest level of a singular hierarchy only).
    pub constants: Option<Constants<D>>,
}

/// The constant vector of a level and the work of removing each column's mean (the
/// component along the null space of a singular level's matrix).
pub(super) struct Constants<D: MultigridDevice> {
    ones: Block<D>,
    scratch: Scratch<D>,
    sums: Vec<f64>,
    minus_means: Vec<f64>,
    keep: Vec<f64>,
}

impl<D: MultigridDevice> Constants<D> {
    fn new(dev: &D, n: usize, nrhs: usize, precision: Precision) -> Result<Self, Error> {
        Ok(Constants {
            ones: Block::from_f64(
                dev,
                &vec![1.0; n * nrhs],
                n,
                nrhs,
                precision,
                Layout::NodeMajor,
            )?,
            scratch: Scratch::new(dev)?,
            sums: vec![0.0; nrhs],
            minus_means: vec![0.0; nrhs],
            keep: vec![1.0; nrhs],
        })
    }

    /// x_c −= mean(x_c) for every column.
    fn project(&mut self, dev: &D, x: &mut Block<D>) -> Result<(), Error> {
        dev.column_dots(&self.ones, x, &mut self.sums, &mut self.scratch)?;
        let n = x.rows().max(1) as f64;
        for (m, &s) in self.minus_means.iter_mut().zip(&self.sums) {
            *m = -s / n;
        }
        dev.column_axpby(&self.minus_means, &self.ones, &self.keep, x)
    }
}

/// A range check of one level: what its failure names (all `Copy`, so collecting a check
/// allocates nothing).
#[derive(Clone, Copy, Debug)]
struct CheckSite {
    level: usize,
    levels: usize,
    precision: Precision,
    unknowns: usize,
    what: &'static str,
}

impl CheckSite {
    fn failure(self, what: String) -> MgFailure {
        MgFailure::Range {
            level: self.level,
            levels: self.levels,
            precision: self.precision,
            unknowns: self.unknowns,
            what,
            remedy: Remedy::Scaling { scaling_on: None },
        }
    }

    /// Column c of `what` rounded to zero in the level's precision (its largest magnitude).
    fn flushed(self, c: usize, largest: f64) -> MgFailure {
        let precision = self.precision;
        self.failure(format!(
            "{} of right-hand side {c} is flushed to zero (largest magnitude {largest:e}, below half the smallest {precision} value)",
            self.what
        ))
    }

    /// `what` held a value that is not finite or beyond the level precision's range.
    fn out_of_range(self) -> MgFailure {
        let precision = self.precision;
        self.failure(format!(
            "{} is not finite or exceeds the largest {precision} value ({:e})",
            self.what,
            precision.max(),
        ))
    }
}

/// The range checks of a cycle. Those whose values the host does not otherwise read (each
/// smoothing step and coarse-grid correction; the residual and its restriction where no
/// scale into f16 is taken from them) are, where a host read waits for the device (a GPU:
/// [`Device::reads_synchronize`](crate::device::Device::reads_synchronize)), collected on
/// it and read together at the end of the cycle, or as soon as a check read at once fails
/// (the earliest failure is the one reported); elsewhere each is read at once.
pub(super) struct RangeChecks<D: MultigridDevice> {
    pub deferred: bool,
    log: FlagLog<D>,
    /// The collected checks in order: what each logged and where.
    sites: Vec<(Collected, CheckSite)>,
}

/// What a collected check logged.
#[derive(Clone, Copy, Debug)]
enum Collected {
    /// A kernel's range flag (one value).
    Range,
    /// A restriction's flushed column and its largest magnitude (two values,
    /// [`MultigridKernels::log_flushed_column`](crate::device::MultigridKernels::log_flushed_column)).
    Flushed,
}

impl<D: MultigridDevice> RangeChecks<D> {
    pub fn new(dev: &D) -> Result<Self, Error> {
        Ok(RangeChecks {
            deferred: dev.reads_synchronize(),
            log: FlagLog::new(dev)?,
            sites: Vec::new(),
        })
    }

    /// Room for `count` collected checks (set-up: a cycle then allocates nothing).
    pub fn reserve(&mut self, dev: &D, count: usize) -> Result<(), Error> {
        self.log.reserve(dev, count)?;
        self.sites.reserve(count.saturating_sub(self.sites.len()));
        Ok(())
    }

    /// The range check of `level`'s last kernel, collected where checks are deferred.
    pub fn check(
        &mut self,
        dev: &D,
        level: &mut Level<D>,
        what: &'static str,
    ) -> Result<(), MgFailure> {
        if !self.deferred {
            return level.check(dev, what);
        }
        self.log.make_room(dev, 1).map_err(other)?;
        dev.log_range_flag(&level.stats, &mut self.log)
            .map_err(other)?;
        self.sites.push((Collected::Range, level.site(what)));
        Ok(())
    }

    /// Collects the check that no active column of `fine`'s last kernel (a residual) was
    /// flushed to zero in `coarse`'s last one (its restriction): checks must be deferred.
    pub fn check_restricted(
        &mut self,
        dev: &D,
        fine: &Level<D>,
        coarse: &Level<D>,
        what: &'static str,
    ) -> Result<(), MgFailure> {
        debug_assert!(self.deferred, "collected checks only");
        self.log.make_room(dev, 2).map_err(other)?;
        let half_tiny = coarse.precision().tiny() / 2.0;
        dev.log_flushed_column(&fine.stats, &coarse.stats, half_tiny, &mut self.log)
            .map_err(other)?;
        self.sites.push((Collected::Flushed, coarse.site(what)));
        Ok(())
    }

    /// The range check of `level`'s last kernel, read now (the host needs its values).
    pub fn now(
        &mut self,
        dev: &D,
        level: &mut Level<D>,
        what: &'static str,
    ) -> Result<(), MgFailure> {
        let result = level.check(dev, what);
        self.earliest(dev, result)
    }

    /// `result` of a check read now, unless a collected one failed before it.
    pub fn earliest(&mut self, dev: &D, result: Result<(), MgFailure>) -> Result<(), MgFailure> {
        if result.is_err() {
            self.settle(dev)?;
        }
        result
    }

    /// Fails with the earliest collected check that found a value out of range (one host
    /// read), and empties the log.
    pub fn settle(&mut self, dev: &D) -> Result<(), MgFailure> {
        let values = self.log.read(dev).map_err(other)?;
        let mut next = 0;
        let mut failure = None;
        for &(kind, site) in &self.sites {
            let found = match kind {
                Collected::Range => (values[next] != 0.0).then(|| site.out_of_range()),
                Collected::Flushed => (values[next] != 0.0)
                    .then(|| site.flushed(values[next] as usize - 1, values[next + 1])),
            };
            next += match kind {
                Collected::Range => 1,
                Collected::Flushed => 2,
            };
            if found.is_some() {
                failure = found;
                break;
            }
        }
        self.sites.clear();
        failure.map_or(Ok(()), Err)
    }

    /// Forgets collected checks (a cycle that ended by another error).
    pub fn clear(&mut self) {
        self.log.clear();
        self.sites.clear();
    }
}

/// Entries below max(64·ε, u)·|a_ii| (u the level precision's unit roundoff) are set to
/// zero: exact zeros of the stencil (the 3D Q1 stencil has some) that assembly or the
/// Galerkin products leave at rounding level (~1e-18), and entries of unstructured meshes
/// below what the precision resolves beside their row's diagonal (nearly right angles),
/// which f16 would otherwise refuse as underflows. Dropping them changes the row by less
/// than rounding its diagonal does.
pub fn without_roundoff(mut matrix: Ell<f64>, precision: Precision) -> Ell<f64> {
    let width = matrix.width();
    let relative = (64.0 * f64::EPSILON).max(precision.unit_roundoff());
    for r in 0..matrix.nrows() {
        let threshold = relative * matrix.values()[matrix.index(0, r)].abs();
        for s in 1..width {
            let k = matrix.index(s, r);
            let v = &mut matrix.values_mut()[k];
            if v.abs() <= threshold {
                *v = 0.0;
            }
        }
    }
    matrix
}

/// λ̂ ≥ λ_max(D⁻¹A) of a level's matrix (diagonal first): 1.1 × the largest Ritz value of
/// 12 Lanczos steps on D^{-1/2} A D^{-1/2} (which has D⁻¹A's eigenvalues; the Ritz value
/// lies within a few per cent below λ_max), capped by Gershgorin's bound max_i Σ_j |a_ij| /
/// a_ii, which is exact for P1 stiffness matrices but a third too high for Q1's, where
/// Chebyshev smoothing on it would damp the top of the spectrum too little. Computed on
/// the f64 matrix; rounding it to the level's precision moves λ_max far less than the
/// interval's margin.
fn spectrum_bound(matrix: &Ell<f64>) -> f64 {
    let (n, width, values, columns) = (
        matrix.nrows(),
        matrix.width(),
        matrix.values(),
        matrix.col_idx(),
    );
    let scale: Vec<f64> = (0..n)
        .map(|r| 1.0 / values[matrix.index(0, r)].sqrt())
        .collect();
    let gershgorin = (0..n)
        .map(|r| {
            let sum: f64 = (0..width).map(|s| values[matrix.index(s, r)].abs()).sum();
            sum * scale[r] * scale[r]
        })
        .fold(0.0, f64::max);
    let params = LanczosParams {
        max_iterations: 12,
        tolerance: 1e-3,
        full_reorthogonalization: false,
        ..LanczosParams::default()
    };
    let ritz = extreme_eigenvalues(n, params, |x, y| {
        for (r, y) in y.iter_mut().enumerate() {
            let sum: f64 = (0..width)
                .map(|s| {
                    let k = matrix.index(s, r);
                    let c = columns[k] as usize;
                    values[k] * scale[c] * x[c]
                })
                .sum();
            *y = scale[r] * sum;
        }
    });
    match ritz {
        Ok(info) if info.largest.is_finite() => (1.1 * info.largest).min(gershgorin),
        _ => gershgorin,
    }
}

/// The steps of a Chebyshev smoothing on [λ̂/[`CHEBYSHEV_RATIO`], λ̂] (Saad, Iterative
/// Methods, Alg. 12.1, with θ, δ the interval's centre and half-width): x₁ = x₀ + (1/θ)
/// D⁻¹r₀, then x_{k+1} = x_k + ρ_k ρ_{k−1} (x_k − x_{k−1}) + (2ρ_k/δ) D⁻¹r_k with ρ₀ = δ/θ,
/// ρ_k = 1/(2θ/δ − ρ_{k−1}). Block smoothing takes the same steps with B⁻¹ for D⁻¹.
struct ChebyshevSteps {
    theta: f64,
    delta: f64,
    rho: f64,
}

impl ChebyshevSteps {
    fn new(bound: f64) -> Self {
        let lower = bound / CHEBYSHEV_RATIO;
        let (theta, delta) = ((bound + lower) / 2.0, (bound - lower) / 2.0);
        ChebyshevSteps {
            theta,
            delta,
            rho: delta / theta,
        }
    }

    /// The first step's damping 1/θ.
    fn first(&self) -> f64 {
        1.0 / self.theta
    }

    /// The next step's (ω, μ): the coefficients of D⁻¹r_k and of x_k − x_{k−1}.
    fn next(&mut self) -> (f64, f64) {
        let rho = 1.0 / (2.0 * self.theta / self.delta - self.rho);
        let step = (2.0 * rho / self.delta, rho * self.rho);
        self.rho = rho;
        step
    }
}

impl<D: MultigridDevice> Level<D> {
    /// Level `index` (0 the coarsest) of the hierarchy `params` describe: its matrix in the
    /// level's precision and storage (without indices where the level is a uniform grid,
    /// [`MgParams::storage`]), its transfer to the next coarser level.
    pub fn new(
        dev: &D,
        index: usize,
        matrix: &Csr<f64>,
        transfer: Option<LevelTransfer<D>>,
        params: &MgParams,
        singular: bool,
    ) -> Result<Self, MgFailure> {
        let count = params.schedule.len();
        let precision = params.schedule[count - 1 - index];
        let unknowns = matrix.nrows();
        let ell = Ell::from_csr_diagonal_first(matrix, dev.ell_layout()).map_err(other)?;
        let grid = match &transfer {
            Some(LevelTransfer::Grid { fine, .. }) => Some(*fine),
            _ => None,
        };
        let stored = without_roundoff(ell, precision);
        let blocks = match params.smoother.kind {
            SmootherKind::BlockChebyshev => block_inverse(matrix).map_err(other)?,
            _ => None,
        };
        let spectrum_bound = match (params.smoother.kind, &blocks) {
            (_, Some(blocks)) => block_spectrum_bound(matrix, blocks),
            (SmootherKind::Chebyshev | SmootherKind::BlockChebyshev, None) => {
                spectrum_bound(&stored)
            }
            (SmootherKind::Jacobi { .. }, None) => 0.0,
        };
        let range_failure = |e, what: &str| match e {
            Error::PrecisionRange {
                precision,
                index: entry,
                problem,
                ..
            } => MgFailure::Range {
                level: index,
                levels: count,
                precision,
                unknowns,
                what: format!("{what} entry {entry}: {problem}"),
                remedy: Remedy::None,
            },
            other => MgFailure::Other(other.to_string()),
        };
        let matrix = EllMatrix::upload_stored(dev, &stored, precision, params.storage, grid)
            .map_err(|e| range_failure(e, "matrix"))?;
        let blocks = match blocks {
            Some(b) => {
                log::debug!(
                    "multigrid level {index}: {} blocks of {} of {unknowns} unknowns",
                    b.blocks,
                    b.grouped
                );
                let ell =
                    Ell::from_csr_diagonal_first(&b.inverse, dev.ell_layout()).map_err(other)?;
                let upload = EllMatrix::upload(dev, &without_roundoff(ell, precision), precision);
                Some(upload.map_err(|e| range_failure(e, "block smoother's B⁻¹"))?)
            }
            None => None,
        };
        Ok(Level {
            index,
            count,
            unknowns,
            matrix: Arc::new(matrix),
            spectrum_bound,
            blocks,
            residual: Block::zeros(dev, 0, 0, precision, Layout::NodeMajor).map_err(other)?,
            transfer,
            nrhs: 0,
            tmp: Block::zeros(dev, 0, 0, precision, Layout::NodeMajor).map_err(other)?,
            stats: Stats::without_norms(dev, 0).map_err(other)?,
            norm_stats: Stats::new(dev, 0).map_err(other)?,
            scale: Vec::new(),
            cg: None,
            singular,
            constants: None,
        })
    }

    pub fn precision(&self) -> Precision {
        self.matrix.precision()
    }

    /// A block of this level's shape and precision.
    pub fn block(&self, dev: &D, nrhs: usize) -> Result<Block<D>, Error> {
        Block::zeros(
            dev,
            self.unknowns,
            nrhs,
            self.precision(),
            Layout::NodeMajor,
        )
    }

    /// Allocates the work block, statistics and base solver for blocks of `nrhs` columns.
    pub fn resize(&mut self, dev: &D, nrhs: usize) -> Result<(), Error> {
        if self.nrhs == nrhs {
            return Ok(());
        }
        self.tmp = self.block(dev, nrhs)?;
        if self.blocks.is_some() {
            self.residual = self.block(dev, nrhs)?;
        }
        self.stats = Stats::without_norms(dev, nrhs)?;
        self.norm_stats = Stats::new(dev, nrhs)?;
        self.scale = vec![1.0; nrhs];
        if self.index == 0 {
            self.cg = Some(BlockCg::new(
                dev,
                self.unknowns,
                nrhs,
                self.precision(),
                Layout::NodeMajor,
            )?);
            if self.singular {
                self.constants = Some(Constants::new(dev, self.unknowns, nrhs, self.precision())?);
            }
        }
        self.nrhs = nrhs;
        Ok(())
    }

    /// This level's check of `what`.
    fn site(&self, what: &'static str) -> CheckSite {
        CheckSite {
            level: self.index,
            levels: self.count,
            precision: self.precision(),
            unknowns: self.unknowns,
            what,
        }
    }

    /// Fails unless every value the last kernel stored was finite and in range.
    pub fn check(&mut self, dev: &D, what: &'static str) -> Result<(), MgFailure> {
        let in_range = self.stats.read(dev).map_err(other)?.in_range;
        self.fail_unless(in_range, what)
    }

    fn fail_unless(&self, in_range: bool, what: &'static str) -> Result<(), MgFailure> {
        match in_range {
            true => Ok(()),
            false => Err(self.site(what).out_of_range()),
        }
    }

    /// Fails when an active column's values all rounded to zero in the level's precision.
    pub fn check_not_flushed(
        &mut self,
        dev: &D,
        active: &[bool],
        what: &'static str,
    ) -> Result<(), MgFailure> {
        let half_tiny = self.precision().tiny() / 2.0;
        let site = self.site(what);
        let stats = self.stats.read(dev).map_err(other)?;
        match (0..active.len()).find(|&c| active[c] && stats.max_abs[c] < half_tiny) {
            None => Ok(()),
            Some(c) => Err(site.flushed(c, stats.max_abs[c])),
        }
    }

    /// Bytes of one pass over the matrix.
    fn matrix_bytes(&self) -> f64 {
        self.matrix.bytes()
    }

    /// Bytes of one block vector.
    pub fn vector_bytes(&self) -> f64 {
        (self.unknowns * self.nrhs * self.precision().bytes()) as f64
    }

    /// Flops of one pass over the matrix with the block.
    fn matrix_flops(&self) -> f64 {
        2.0 * (self.matrix.values.len() * self.nrhs) as f64
    }

    /// `steps` smoothing steps on x (from x = 0 when `zero_initial`): damped Jacobi, or
    /// the Chebyshev polynomial of degree `steps`.
    #[allow(clippy::too_many_arguments)]
    pub fn smooth(
        &mut self,
        dev: &D,
        smoother: &Smoother,
        steps: usize,
        zero_initial: bool,
        b: &Block<D>,
        x: &mut Block<D>,
        checks: &mut RangeChecks<D>,
    ) -> Result<Cost, MgFailure> {
        let mut chebyshev = ChebyshevSteps::new(self.spectrum_bound);
        let mut cost = Cost::default();
        for step in 0..steps {
            if smoother.kind == SmootherKind::BlockChebyshev && self.blocks.is_some() {
                let (omega, momentum) = match step {
                    0 => (chebyshev.first(), 0.0),
                    _ => chebyshev.next(),
                };
                let step_cost = self.block_smoothing_step(
                    dev,
                    omega,
                    momentum,
                    (
                        zero_initial && step == 0,
                        step == 0 || (zero_initial && step == 1),
                    ),
                    b,
                    x,
                    checks,
                )?;
                cost = cost + step_cost;
                checks.check(dev, self, "the smoothed iterate")?;
                continue;
            }
            let op = match smoother.kind {
                SmootherKind::Jacobi { omega } => RowOp::Jacobi { omega },
                SmootherKind::Chebyshev | SmootherKind::BlockChebyshev if step == 0 => {
                    RowOp::Jacobi {
                        omega: chebyshev.first(),
                    }
                }
                SmootherKind::Chebyshev | SmootherKind::BlockChebyshev => {
                    let (omega, momentum) = chebyshev.next();
                    RowOp::Chebyshev {
                        omega,
                        momentum,
                        previous_zero: zero_initial && step == 1,
                    }
                }
            };
            cost = cost + self.smoothing_step(dev, op, zero_initial && step == 0, b, x)?;
            checks.check(dev, self, "the smoothed iterate")?;
        }
        Ok(cost)
    }

    /// One smoothing step `op` on x (from x = 0 when `from_zero`), the iterate before it
    /// left in `tmp` (the previous iterate a Chebyshev step reads there).
    fn smoothing_step(
        &mut self,
        dev: &D,
        op: RowOp,
        from_zero: bool,
        b: &Block<D>,
        x: &mut Block<D>,
    ) -> Result<Cost, MgFailure> {
        let points = (self.unknowns * self.nrhs) as f64;
        if let (true, RowOp::Jacobi { omega }) = (from_zero, op) {
            dev.ell_jacobi_from_zero(&self.matrix, omega, b, x, &mut self.stats)
                .map_err(other)?;
            return Ok(Cost {
                flops: 2.0 * points,
                bytes: self.matrix.diagonal_bytes() + 2.0 * self.vector_bytes(),
            });
        }
        dev.ell_sweep(&self.matrix, op, x, Some(b), &mut self.tmp, &mut self.stats)
            .map_err(other)?;
        std::mem::swap(x, &mut self.tmp);
        // A Chebyshev step also reads the previous iterate where it writes.
        let (extra_flops, extra_vectors) = match op {
            RowOp::Chebyshev {
                previous_zero: false,
                ..
            } => (3.0, 1.0),
            RowOp::Chebyshev { .. } => (2.0, 0.0),
            _ => (0.0, 0.0),
        };
        Ok(Cost {
            flops: self.matrix_flops() + (4.0 + extra_flops) * points,
            bytes: self.matrix_bytes() + (3.0 + extra_vectors) * self.vector_bytes(),
        })
    }

    /// One step of block Chebyshev smoothing: x ← x + μ (x − x_prev) + ω B⁻¹ (b − A x)
    /// (x_prev in `tmp`, or zero when `previous_zero`); from x = 0 (`from_zero`) only
    /// x ← ω B⁻¹ b. The residual goes through `residual`, the new iterate through `tmp`.
    #[allow(clippy::too_many_arguments)]
    fn block_smoothing_step(
        &mut self,
        dev: &D,
        omega: f64,
        momentum: f64,
        (from_zero, previous_zero): (bool, bool),
        b: &Block<D>,
        x: &mut Block<D>,
        checks: &mut RangeChecks<D>,
    ) -> Result<Cost, MgFailure> {
        let points = (self.unknowns * self.nrhs) as f64;
        let (vector_bytes, matrix_flops) = (self.vector_bytes(), self.matrix_flops());
        let inverse = self.blocks.as_ref().expect("a level with blocks");
        let inverse_flops = 2.0 * (inverse.values.len() * self.nrhs) as f64;
        let inverse_bytes = inverse.bytes();
        if from_zero {
            let op = RowOp::Scaled { omega };
            dev.ell_sweep(inverse, op, b, None, x, &mut self.stats)
                .map_err(other)?;
            return Ok(Cost {
                flops: inverse_flops + points,
                bytes: inverse_bytes + 2.0 * vector_bytes,
            });
        }
        dev.ell_sweep(
            &self.matrix,
            RowOp::Residual,
            x,
            Some(b),
            &mut self.residual,
            &mut self.stats,
        )
        .map_err(other)?;
        checks.check(dev, self, "the smoother's residual")?;
        let op = RowOp::Correction {
            omega,
            momentum,
            previous_zero,
        };
        let inverse = self.blocks.as_ref().expect("a level with blocks");
        dev.ell_sweep(
            inverse,
            op,
            &self.residual,
            Some(x),
            &mut self.tmp,
            &mut self.stats,
        )
        .map_err(other)?;
        std::mem::swap(x, &mut self.tmp);
        let previous = if previous_zero { 0.0 } else { 1.0 };
        Ok(Cost {
            flops: matrix_flops + inverse_flops + (5.0 + previous) * points,
            bytes: self.matrix_bytes() + inverse_bytes + (3.0 + 3.0 + previous) * vector_bytes,
        })
    }

    /// tmp = b − A x, with its statistics in `stats`, read now when `read` (the cycle
    /// scales by them) or else collected.
    pub fn residual(
        &mut self,
        dev: &D,
        b: &Block<D>,
        x: &Block<D>,
        checks: &mut RangeChecks<D>,
        read: bool,
    ) -> Result<Cost, MgFailure> {
        dev.ell_sweep(
            &self.matrix,
            RowOp::Residual,
            x,
            Some(b),
            &mut self.tmp,
            &mut self.stats,
        )
        .map_err(other)?;
        match read {
            true => checks.now(dev, self, "the residual")?,
            false => checks.check(dev, self, "the residual")?,
        }
        Ok(self.residual_cost())
    }

    /// tmp = b − A x and each column's ‖b − A x‖₂ (from `norm_stats`).
    pub fn residual_norms(
        &mut self,
        dev: &D,
        b: &Block<D>,
        x: &Block<D>,
    ) -> Result<(Cost, Vec<f64>), MgFailure> {
        dev.ell_sweep(
            &self.matrix,
            RowOp::Residual,
            x,
            Some(b),
            &mut self.tmp,
            &mut self.norm_stats,
        )
        .map_err(other)?;
        let stats = self.norm_stats.read(dev).map_err(other)?;
        let (in_range, norms) = (
            stats.in_range,
            (0..self.nrhs).map(|c| stats.norm(c)).collect(),
        );
        self.fail_unless(in_range, "the residual")?;
        Ok((self.residual_cost(), norms))
    }

    fn residual_cost(&self) -> Cost {
        Cost {
            flops: self.matrix_flops() + (self.unknowns * self.nrhs) as f64,
            bytes: self.matrix_bytes() + 3.0 * self.vector_bytes(),
        }
    }

    /// The base solve: CG on every column in this level's precision, from x = 0, until
    /// ‖r‖₂ ≤ max(`tolerance`, 10·u·‖b‖₂) (`tolerance` relative to ‖b‖₂ when `relative`),
    /// breakdown, or 2N + 100 iterations. On a singular level the right-hand side's and
    /// the solution's means are removed: rounding leaves the restricted residual slightly
    /// off the matrix's range, and CG would otherwise grow a constant without bound.
    #[allow(clippy::too_many_arguments)]
    pub fn base_solve(
        &mut self,
        dev: &D,
        tolerance: f64,
        relative: bool,
        b: &Block<D>,
        x: &mut Block<D>,
        checks: &mut RangeChecks<D>,
    ) -> Result<Cost, MgFailure> {
        let n = self.unknowns;
        let (matrix_bytes, vector_bytes, matrix_flops) = (
            self.matrix_bytes(),
            self.vector_bytes(),
            self.matrix_flops(),
        );
        let Level {
            matrix,
            stats,
            cg,
            tmp,
            constants,
            ..
        } = self;
        let b = match constants.as_mut() {
            Some(constants) => {
                dev.copy(b.view(), tmp.view_mut()).map_err(other)?;
                constants.project(dev, tmp).map_err(other)?;
                &*tmp
            }
            None => b,
        };
        let cg = cg.as_mut().expect("the coarsest level has a base solver");
        let info = cg
            .solve(
                dev,
                |p, q| dev.ell_sweep(matrix, RowOp::Apply, p, None, q, stats),
                b,
                x,
                CgParams {
                    tolerance,
                    relative,
                    max_iterations: 2 * n + 100,
                },
            )
            .map_err(other)?;
        if let Some(constants) = constants.as_mut() {
            constants.project(dev, x).map_err(other)?;
        }
        dev.column_stats(x, &mut self.stats).map_err(other)?;
        checks.now(dev, self, "the base solver's solution")?;
        let iterations = info.iterations as f64;
        let projections = if self.singular { 4.0 } else { 0.0 };
        Ok(Cost {
            flops: iterations * (matrix_flops + 10.0 * (n * self.nrhs) as f64),
            bytes: (2.0 + projections) * vector_bytes
                + iterations * (matrix_bytes + 10.0 * vector_bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::EllLayout;

    /// λ̂ of the Q1 unit square's level lies just above λ_max(D⁻¹A) → 3/2 (the stencil's
    /// symbol at (π, 0)), well below Gershgorin's 2; of the P1 unit square's, at Gershgorin's
    /// 2, which its top eigenvalue approaches.
    #[test]
    fn spectrum_bounds_sit_just_above_the_top_eigenvalue() {
        let q1 = super::super::assemble_level(2, 32).unwrap();
        let ell = Ell::from_csr_diagonal_first(&q1, EllLayout::Sliced).unwrap();
        let bound = spectrum_bound(&ell);
        assert!(bound > 1.49 && bound < 1.66, "Q1: {bound}");

        let mesh = crate::mesh::unit_square(32, crate::mesh::Element::P1).unwrap();
        let (p1, _) = crate::fem::assemble_stiffness(&mesh).unwrap();
        let ell = Ell::from_csr_diagonal_first(&p1, EllLayout::SlotMajor).unwrap();
        let bound = spectrum_bound(&ell);
        assert!(bound > 1.95 && bound <= 2.0 + 1e-12, "P1: {bound}");
    }
}
