//! Iterative refinement in f64 around a low-precision inner solve, with residual scaling
//! (docs/mathematics.md §4; PSC-IR of §3 and MP-MG of §4 are this one loop with different inner
//! operators):
//!
//! ```text
//!   r = b − A x                                   (f64)
//!   while some column has ‖r_c‖₂ > max(atol, rtol·‖b_c‖₂):
//!       r_low,c = r_c / α_c   (α_c = ‖r_c‖₂, or 1 unscaled; 0 for converged columns)
//!       c ≈ M⁻¹ r_low         (the inner operator, in its precision)
//!       x_c += α_c c_c,  r_c −= α_c (A c)_c     (f64, fused)
//! ```
//!
//! With Krylov acceleration ([`Refinement::with_krylov`]) the corrections become the
//! search directions of flexible CG (FCG(1), Notay 2000): z = α M⁻¹(r/α) in f64,
//! p = z − γ p_prev with γ = (A z)·p_prev / p_prev·A p_prev, then x += β p, r −= β A p with
//! β = p·r / p·A p, per column. It takes one product with A per step like the plain loop and
//! pays off where the inner solve alone contracts slowly (multigrid on meshes with poorly
//! shaped elements).
//!
//! Once few columns are left above their threshold (their count rounded up to a multiple of
//! 4 at most 1/[`NARROW_SHARE`] of the block: the columns of a block converge within a step
//! of each other, and the last step often has a handful left), the inner solve runs on
//! those columns alone, gathered into narrow blocks, where the inner operator keeps a
//! workspace for them ([`LinOp::prepare_narrow`]); the others' corrections are zero, as
//! before. Narrow blocks once allocated serve every narrower step after.
//!
//! Every buffer is allocated when the refinement is built, the narrow blocks when first
//! needed; the history is preallocated to its longest length. A failure returns what was
//! done so far with the error.

use std::fmt;
use std::time::Instant;

use super::linop::{block_of, Cost, LinOp};
use super::TimedStage;
use crate::device::{
    Block, CsrMatrix, Device, EllMatrix, Layout, MultigridKernels, SparseKernels, StageMarks,
    Stats, VectorKernels,
};
use crate::error::{Error, Result};
use crate::precision::Precision;

/// When refinement stops and how it scales.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RefineParams {
    /// Stop a column when ‖b − A x‖₂ ≤ max(atol, rtol·‖b‖₂).
    pub rtol: f64,
    pub atol: f64,
    /// Most refinement steps (inner solves).
    pub max_iterations: usize,
    /// Scale each column's residual by its norm before the cast to the inner precision
    /// (f16 would otherwise overflow or flush to zero).
    pub residual_scaling: bool,
}

/// What a refinement did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RefineInfo {
    /// Steps (inner solves) each column took part in.
    pub iterations: Vec<usize>,
    /// ‖b_c‖₂.
    pub b_norms: Vec<f64>,
    /// ‖r_c‖₂ at the start and after every step: entry (s, c) at s·nrhs + c.
    pub history: Vec<f64>,
    /// Seconds since the solve began when each entry of `history` was recorded (the
    /// residual norms are read back from the device, so the work before is done).
    pub elapsed: Vec<f64>,
    /// Flops and bytes of everything the refinement ran.
    pub cost: Cost,
    /// Columns the f64 updates ran on, summed over the steps (the whole block, or the
    /// narrow block of the few columns left).
    pub update_columns: usize,
}

impl RefineInfo {
    fn with_capacity(nrhs: usize, max_iterations: usize) -> Self {
        RefineInfo {
            iterations: Vec::with_capacity(nrhs),
            b_norms: Vec::with_capacity(nrhs),
            history: Vec::with_capacity((max_iterations + 1) * nrhs),
            elapsed: Vec::with_capacity(max_iterations + 1),
            cost: Cost::default(),
            update_columns: 0,
        }
    }

    pub fn nrhs(&self) -> usize {
        self.iterations.len()
    }

    /// Steps of the slowest column.
    pub fn steps(&self) -> usize {
        self.iterations.iter().copied().max().unwrap_or(0)
    }

    /// ‖r_c‖₂ after the last step.
    pub fn residuals(&self) -> &[f64] {
        let n = self.nrhs();
        &self.history[self.history.len() - n..]
    }

    /// ‖r_c‖₂ / ‖b_c‖₂ after the last step (‖r_c‖₂ when b_c = 0).
    pub fn relative_residual(&self, c: usize) -> f64 {
        let (r, b) = (self.residuals()[c], self.b_norms[c]);
        if b > 0.0 {
            r / b
        } else {
            r
        }
    }

    /// The residual norms after step s (0: the start).
    pub fn step(&self, s: usize) -> &[f64] {
        let n = self.nrhs();
        &self.history[s * n..(s + 1) * n]
    }

    /// Steps recorded (the start included).
    pub fn recorded(&self) -> usize {
        self.history.len() / self.nrhs().max(1)
    }

    /// The first recorded step at which every column's relative residual was at most
    /// `rtol`, and the seconds it took to get there; None if none was.
    pub fn time_to(&self, rtol: f64) -> Option<(usize, f64)> {
        (0..self.recorded()).find_map(|s| {
            let done = self
                .step(s)
                .iter()
                .zip(&self.b_norms)
                .all(|(&r, &b)| r <= rtol * b);
            done.then(|| (s, self.elapsed[s]))
        })
    }
}

/// How a refinement failed.
#[derive(Debug)]
pub enum RefineFailure {
    /// A column of the residual cast to the inner solve's precision left its range
    /// (overflow or not finite), or flushed to zero (`column`, with its largest magnitude).
    Input {
        flushed: Option<(usize, f64)>,
        precision: Precision,
    },
    /// The inner solve returned an all-zero correction for a column that needed one.
    CorrectionFlushed { column: usize, precision: Precision },
    /// The inner solve failed.
    Inner(Box<Error>),
    /// The f64 residual is not finite.
    NotFinite,
    /// Not every column converged in `max_iterations` steps.
    NotConverged { column: usize, params: RefineParams },
}

/// A failed refinement: why, and what it did.
#[derive(Debug)]
pub struct RefineError {
    pub failure: RefineFailure,
    /// Boxed: the record is large and errors travel by value.
    pub info: Box<RefineInfo>,
}

impl fmt::Display for RefineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            RefineFailure::Input {
                flushed: Some((column, largest)),
                precision,
            } => write!(
                f,
                "the residual of right-hand side {column} is flushed to zero in {precision} (largest magnitude {largest:e})"
            ),
            RefineFailure::Input { precision, .. } => write!(
                f,
                "the residual cast to {precision} is not finite or exceeds the largest {precision} value"
            ),
            RefineFailure::CorrectionFlushed { column, precision } => write!(
                f,
                "the correction of right-hand side {column} is flushed to zero in {precision}"
            ),
            RefineFailure::Inner(e) => write!(f, "{e}"),
            RefineFailure::NotFinite => write!(
                f,
                "the f64 residual is not finite after {} step(s)",
                self.info.steps()
            ),
            RefineFailure::NotConverged { column, params } => write!(
                f,
                "right-hand side {column} did not reach ‖r‖₂ ≤ max({:e}, {:e}·‖b‖₂) in {} steps (‖r‖₂ = {:e}, ‖b‖₂ = {:e})",
                params.atol,
                params.rtol,
                params.max_iterations,
                self.info.residuals()[*column],
                self.info.b_norms[*column]
            ),
        }
    }
}

/// The f64 operator A of a refinement: residuals and the fused update.
pub trait Residual<D: SparseKernels + VectorKernels> {
    /// The layout of the blocks it works on.
    fn layout(&self) -> Layout;
    /// r = b − A x, with the statistics of r.
    fn residual(
        &self,
        dev: &D,
        b: &Block<D>,
        x: &Block<D>,
        r: &mut Block<D>,
        stats: &mut Stats<D>,
    ) -> Result<()>;
    /// y = A x (f64 blocks; `stats` may be overwritten).
    fn apply(&self, dev: &D, x: &Block<D>, y: &mut Block<D>, stats: &mut Stats<D>) -> Result<()>;
    /// x_c += α_c c_c, r_c −= α_c (A c)_c; statistics: Σ r² and max |c|.
    fn update(
        &self,
        dev: &D,
        c: &Block<D>,
        alpha: &[f64],
        x: &mut Block<D>,
        r: &mut Block<D>,
        stats: &mut Stats<D>,
    ) -> Result<()>;
    /// The cost of one update on `nrhs` columns.
    fn update_cost(&self, nrhs: usize, correction: Precision) -> Cost;
    /// A X on `nrhs` columns, compulsory: the matrix read once, 2 flops per entry and
    /// column (the blocks' bytes are the caller's).
    fn product_cost(&self, nrhs: usize) -> Cost;
}

impl<D: SparseKernels + VectorKernels> Residual<D> for CsrMatrix<D> {
    fn layout(&self) -> Layout {
        Layout::ColMajor
    }

    fn residual(
        &self,
        dev: &D,
        b: &Block<D>,
        x: &Block<D>,
        r: &mut Block<D>,
        stats: &mut Stats<D>,
    ) -> Result<()> {
        dev.csr_residual(self, b, x, r, stats)
    }

    fn apply(&self, dev: &D, x: &Block<D>, y: &mut Block<D>, _: &mut Stats<D>) -> Result<()> {
        dev.csr_spmm(self, x, y)
    }

    fn update(
        &self,
        dev: &D,
        c: &Block<D>,
        alpha: &[f64],
        x: &mut Block<D>,
        r: &mut Block<D>,
        stats: &mut Stats<D>,
    ) -> Result<()> {
        dev.csr_refine_update(self, c, alpha, x, r, stats)
    }

    fn update_cost(&self, nrhs: usize, correction: Precision) -> Cost {
        let n = self.nrows as f64;
        let k = nrhs as f64;
        Cost {
            flops: k * (2.0 * self.nnz() as f64 + 4.0 * n),
            bytes: k * (self.bytes() as f64 + n * (correction.bytes() as f64 + 32.0)),
        }
    }

    fn product_cost(&self, nrhs: usize) -> Cost {
        Cost {
            flops: 2.0 * self.nnz() as f64 * nrhs as f64,
            bytes: self.bytes() as f64,
        }
    }
}

impl<D: SparseKernels + MultigridKernels + VectorKernels> Residual<D> for EllMatrix<D> {
    fn layout(&self) -> Layout {
        Layout::NodeMajor
    }

    fn residual(
        &self,
        dev: &D,
        b: &Block<D>,
        x: &Block<D>,
        r: &mut Block<D>,
        stats: &mut Stats<D>,
    ) -> Result<()> {
        dev.ell_sweep(self, crate::device::RowOp::Residual, x, Some(b), r, stats)
    }

    fn apply(&self, dev: &D, x: &Block<D>, y: &mut Block<D>, stats: &mut Stats<D>) -> Result<()> {
        dev.ell_sweep(self, crate::device::RowOp::Apply, x, None, y, stats)
    }

    fn update(
        &self,
        dev: &D,
        c: &Block<D>,
        alpha: &[f64],
        x: &mut Block<D>,
        r: &mut Block<D>,
        stats: &mut Stats<D>,
    ) -> Result<()> {
        dev.ell_refine_update(self, c, alpha, x, r, stats)
    }

    fn update_cost(&self, nrhs: usize, correction: Precision) -> Cost {
        let n = self.nrows as f64;
        let k = nrhs as f64;
        Cost {
            flops: k * (2.0 * self.values.len() as f64 + 4.0 * n),
            bytes: self.bytes() + k * n * (correction.bytes() as f64 + 32.0),
        }
    }

    fn product_cost(&self, nrhs: usize) -> Cost {
        Cost {
            flops: 2.0 * self.values.len() as f64 * nrhs as f64,
            bytes: self.bytes(),
        }
    }
}

/// The modelled bytes and flops of the refinement's own stages on a block: each block
/// read or written once per pass at its stored precision (b twice in the first residual:
/// its norm, then r), the matrix once per product.
#[derive(Clone, Copy)]
struct StageCosts {
    /// ‖b‖ and r = b − A x.
    residual: Cost,
    /// ‖b‖, x = 0 and r = b.
    from_zero: Cost,
    /// r / α cast to the inner precision, with its statistics.
    cast: Cost,
    /// x += α c, r −= α A c, with Σ r².
    update: Cost,
    /// z = α c, A z, the new direction p and A p, x and r along it, the dots and Σ r².
    krylov_step: Cost,
}

impl StageCosts {
    fn new<D: SparseKernels + VectorKernels>(
        a: &impl Residual<D>,
        nrhs: usize,
        rows: usize,
        low: &Block<D>,
        correction: &Block<D>,
    ) -> Self {
        let entries = (rows * nrhs) as f64;
        let product = a.product_cost(nrhs);
        let vectors = |bytes: f64, flops: f64| Cost {
            flops: flops * entries,
            bytes: bytes * entries,
        };
        let corr = correction.precision().bytes() as f64;
        StageCosts {
            residual: product + vectors(32.0, 3.0),
            from_zero: vectors(32.0, 2.0),
            cast: vectors(8.0 + low.precision().bytes() as f64, 3.0),
            update: product + vectors(corr + 32.0, 4.0),
            krylov_step: product + vectors(corr + 80.0, 16.0),
        }
    }
}

/// Where a refinement starts.
#[derive(Clone, Copy)]
enum Start {
    /// From the x given.
    Given,
    /// From x = 0.
    Zero,
}

/// Iterative refinement around the inner operator `M`, with every buffer for blocks of
/// `nrhs` columns.
pub struct Refinement<D: SparseKernels + VectorKernels, M: LinOp<D>> {
    dev: D,
    inner: M,
    nrhs: usize,
    max_iterations: usize,
    r: Block<D>,
    r_low: Block<D>,
    c: Block<D>,
    stats: Stats<D>,
    scale: Vec<f64>,
    active: Vec<bool>,
    info: RefineInfo,
    /// Flexible CG's directions, when the refinement is accelerated.
    krylov: Option<Krylov<D>>,
    /// When the current solve began (`RefineInfo::elapsed`).
    start: Instant,
    /// Marks around the refinement's own stages, when timed ([`Refinement::time_stages`]).
    clock: Option<StageMarks<D>>,
    /// The modelled cost of each timed stage, summed since the clock was last taken.
    stage_costs: Vec<(&'static str, Cost)>,
    /// Σ r² per column as last recorded.
    sumsq: Vec<f64>,
    /// The active columns of the current step, in order, when solved alone.
    columns: Vec<usize>,
    /// The blocks of the active columns alone, when few (`narrow_width`).
    narrow: Option<Narrow<D>>,
}

/// A refinement's stage marks and their models, between two refinements of one solver.
pub struct RefinementClock<D: Device> {
    marks: Option<StageMarks<D>>,
    costs: Vec<(&'static str, Cost)>,
}

/// The inner solve's input and output for the active columns alone, and for the update
/// their x, r, α (zero in the spare columns) and statistics.
struct Narrow<D: Device> {
    r_low: Block<D>,
    c: Block<D>,
    x: Block<D>,
    r: Block<D>,
    scale: Vec<f64>,
    stats: Stats<D>,
}

/// The inner solve runs on the active columns alone once they are at most 1/`NARROW_SHARE`
/// of the block (the inner operator's second workspace is then at most that share of its
/// first).
pub const NARROW_SHARE: usize = 4;

/// Narrow blocks are a multiple of this many columns wide, so that their width, and the
/// inner operator's workspace for it, stays from step to step and solve to solve.
const NARROW_ALIGN: usize = 4;

/// The width of the narrow blocks for `active` of `nrhs` columns, when they are few enough.
fn narrow_width(active: usize, nrhs: usize) -> Option<usize> {
    let width = active.next_multiple_of(NARROW_ALIGN);
    (active > 0 && width <= nrhs / NARROW_SHARE).then_some(width)
}

/// The f64 blocks and per-column scalars of flexible CG around the inner solve.
struct Krylov<D: VectorKernels> {
    /// The scaled correction z and A z.
    z: Block<D>,
    az: Block<D>,
    /// The search direction p and A p.
    p: Block<D>,
    ap: Block<D>,
    scratch: crate::device::Scratch<D>,
    /// p·A p of the current direction.
    pap: Vec<f64>,
    dots: Vec<f64>,
    coefficient: Vec<f64>,
    ones: Vec<f64>,
    z_max: Vec<f64>,
}

impl<D: SparseKernels + VectorKernels, M: LinOp<D>> Refinement<D, M> {
    /// Allocates everything for blocks of `nrhs` columns and at most `max_iterations` steps.
    pub fn new(dev: &D, mut inner: M, nrhs: usize, max_iterations: usize) -> Result<Self> {
        inner.prepare(nrhs)?;
        let n = inner.size();
        let layout = inner.input().layout;
        Ok(Refinement {
            r: Block::zeros(dev, n, nrhs, Precision::F64, layout)?,
            r_low: block_of(dev, inner.input(), n, nrhs)?,
            c: block_of(dev, inner.output(), n, nrhs)?,
            stats: Stats::new(dev, nrhs)?,
            scale: vec![0.0; nrhs],
            active: vec![false; nrhs],
            info: RefineInfo::with_capacity(nrhs, max_iterations),
            dev: dev.clone(),
            inner,
            nrhs,
            max_iterations,
            krylov: None,
            start: Instant::now(),
            clock: None,
            stage_costs: Vec::new(),
            sumsq: vec![0.0; nrhs],
            columns: Vec::with_capacity(nrhs),
            narrow: None,
        })
    }

    /// The same refinement accelerated by flexible CG (module docs): four more f64 blocks.
    /// For a symmetric positive (semi)definite A and an inner solve that approximates its
    /// inverse (a V-cycle with as many smoothing steps after as before).
    pub fn with_krylov(mut self) -> Result<Self> {
        let (n, nrhs, layout) = (self.r.rows(), self.nrhs, self.r.layout());
        let block = || Block::zeros(&self.dev, n, nrhs, Precision::F64, layout);
        self.krylov = Some(Krylov {
            z: block()?,
            az: block()?,
            p: block()?,
            ap: block()?,
            scratch: crate::device::Scratch::new(&self.dev)?,
            pap: vec![0.0; nrhs],
            dots: vec![0.0; nrhs],
            coefficient: vec![0.0; nrhs],
            ones: vec![1.0; nrhs],
            z_max: vec![0.0; nrhs],
        });
        Ok(self)
    }

    /// Whether the refinement is accelerated by flexible CG.
    pub fn is_krylov(&self) -> bool {
        self.krylov.is_some()
    }

    /// The inner operator, given back.
    pub fn into_inner(self) -> M {
        self.inner
    }

    /// Steps this refinement was set up for.
    pub fn max_iterations(&self) -> usize {
        self.max_iterations
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut M {
        &mut self.inner
    }

    pub fn nrhs(&self) -> usize {
        self.nrhs
    }

    /// The last solve's record.
    pub fn info(&self) -> &RefineInfo {
        &self.info
    }

    /// Times the refinement's own stages in every later solve (its first residual, the
    /// scaled casts, the updates or flexible CG steps; the inner solves are the inner
    /// operator's to time) by marks in the device's queue, or stops timing.
    pub fn time_stages(&mut self, on: bool) {
        self.clock = on.then(StageMarks::default);
        self.stage_costs.clear();
    }

    /// The stage clock with the marks and models not yet taken, handed over to a
    /// refinement rebuilt for another width ([`Refinement::resume_clock`]), so that every
    /// chunk of a solve in chunks is reported; this one stops timing.
    pub fn take_clock(&mut self) -> RefinementClock<D> {
        RefinementClock {
            marks: self.clock.take(),
            costs: std::mem::take(&mut self.stage_costs),
        }
    }

    /// Times on with a clock another refinement handed over ([`Refinement::take_clock`]).
    pub fn resume_clock(&mut self, clock: RefinementClock<D>) {
        self.clock = clock.marks;
        self.stage_costs = clock.costs;
    }

    /// The refinement's stages since the last call, with their modelled bytes and flops
    /// (`StageCosts`): empty when not timing.
    pub fn take_stages(&mut self) -> Result<Vec<TimedStage>> {
        let Some(marks) = self.clock.as_mut() else {
            return Ok(Vec::new());
        };
        let costs = std::mem::take(&mut self.stage_costs);
        Ok(marks
            .take(&self.dev)?
            .into_iter()
            .map(|t| TimedStage {
                stage: t.stage,
                seconds: t.seconds,
                cost: costs.iter().find(|(s, _)| *s == t.stage).map(|&(_, c)| c),
            })
            .collect())
    }

    /// Starts a span of the refinement's own work when timing.
    fn begin_stage(&mut self) -> Result<()> {
        match self.clock.as_mut() {
            Some(marks) => marks.begin(&self.dev),
            None => Ok(()),
        }
    }

    /// Ends `stage` here when timing, adding `cost` to its model.
    fn end_stage(&mut self, stage: &'static str, cost: Cost) -> Result<()> {
        let Some(marks) = self.clock.as_mut() else {
            return Ok(());
        };
        marks.end(&self.dev, stage)?;
        match self.stage_costs.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, sum)) => *sum = *sum + cost,
            None => self.stage_costs.push((stage, cost)),
        }
        Ok(())
    }

    /// Where few columns are active and the inner operator can take them alone
    /// (`narrow_width`), copies them from r_low into the narrow r_low (its spare columns
    /// zero) and lists them in `columns`; else leaves `columns` empty. Returns the cost
    /// of the copies.
    fn gather_active(&mut self) -> Result<Cost> {
        self.columns.clear();
        let active = self.active.iter().filter(|&&a| a).count();
        let Some(needed) = narrow_width(active, self.nrhs) else {
            return Ok(Cost::default());
        };
        // The narrow blocks already held serve any width up to theirs.
        let width = self
            .narrow
            .as_ref()
            .map_or(needed, |n| n.c.cols().max(needed));
        let col_major =
            self.r_low.layout() == Layout::ColMajor && self.c.layout() == Layout::ColMajor;
        if !col_major || !self.inner.prepare_narrow(width)? {
            return Ok(Cost::default());
        }
        let rows = self.r.rows();
        if self.narrow.as_ref().is_none_or(|n| n.c.cols() != width) {
            let f64_block =
                || Block::zeros(&self.dev, rows, width, Precision::F64, Layout::ColMajor);
            self.narrow = Some(Narrow {
                r_low: block_of(&self.dev, self.inner.input(), rows, width)?,
                c: block_of(&self.dev, self.inner.output(), rows, width)?,
                x: f64_block()?,
                r: f64_block()?,
                scale: vec![0.0; width],
                stats: Stats::new(&self.dev, width)?,
            });
        }
        let r_low = &mut self.narrow.as_mut().expect("just set").r_low;
        self.columns
            .extend((0..self.nrhs).filter(|&c| self.active[c]));
        for (slot, &c) in self.columns.iter().enumerate() {
            self.dev.copy(self.r_low.col(c), r_low.col_mut(slot))?;
        }
        self.dev
            .fill(r_low.data.slice_mut(active * rows..width * rows), 0.0)?;
        let bytes = r_low.precision().bytes() as f64;
        Ok(Cost {
            flops: 0.0,
            bytes: rows as f64 * (2.0 * active as f64 + (width - active) as f64) * bytes,
        })
    }

    /// After an inner solve on the narrow blocks: the active columns' corrections copied
    /// into c, the others zero (they are multiplied by a zero scale, and 0·NaN is not 0).
    /// Returns the cost of the copies.
    fn scatter_active(&mut self) -> Result<Cost> {
        let Some(narrow_c) = self
            .narrow
            .as_ref()
            .filter(|_| !self.columns.is_empty())
            .map(|n| &n.c)
        else {
            return Ok(Cost::default());
        };
        let rows = self.r.rows();
        let mut next = 0;
        for (slot, &column) in self.columns.iter().enumerate() {
            if next < column {
                self.dev
                    .fill(self.c.data.slice_mut(next * rows..column * rows), 0.0)?;
            }
            self.dev.copy(narrow_c.col(slot), self.c.col_mut(column))?;
            next = column + 1;
        }
        if next < self.nrhs {
            self.dev
                .fill(self.c.data.slice_mut(next * rows..self.nrhs * rows), 0.0)?;
        }
        let bytes = self.c.precision().bytes() as f64;
        Ok(Cost {
            flops: 0.0,
            bytes: rows as f64 * (self.nrhs + self.columns.len()) as f64 * bytes,
        })
    }

    /// x_c += α_c c_c, r_c −= α_c (A c)_c on the active columns alone, after an inner
    /// solve on the narrow blocks: their x and r copied there, updated beside their
    /// corrections, and copied back. The statistics of the whole block are then set on the
    /// host: the active columns' from the update, the others' Σ r² as last recorded and
    /// no correction. Returns the stage's cost.
    fn update_active(&mut self, a: &impl Residual<D>, x: &mut Block<D>) -> Result<Cost> {
        let (dev, nrhs, rows) = (&self.dev, self.nrhs, self.r.rows());
        let narrow = self
            .narrow
            .as_mut()
            .expect("the active columns were gathered");
        let width = narrow.c.cols();
        narrow.scale.fill(0.0);
        let active = self.columns.len();
        for (slot, &c) in self.columns.iter().enumerate() {
            dev.copy(x.col(c), narrow.x.col_mut(slot))?;
            dev.copy(self.r.col(c), narrow.r.col_mut(slot))?;
            narrow.scale[slot] = self.scale[c];
        }
        // The spare columns zero, so that their statistics are those of nothing.
        for block in [&mut narrow.x, &mut narrow.r] {
            dev.fill(block.data.slice_mut(active * rows..width * rows), 0.0)?;
        }
        a.update(
            dev,
            &narrow.c,
            &narrow.scale,
            &mut narrow.x,
            &mut narrow.r,
            &mut narrow.stats,
        )?;
        for (slot, &c) in self.columns.iter().enumerate() {
            dev.copy(narrow.x.col(slot), x.col_mut(c))?;
            dev.copy(narrow.r.col(slot), self.r.col_mut(c))?;
        }
        narrow.stats.read(dev)?;
        let updated = &narrow.stats.host;
        let host = &mut self.stats.host;
        host[..nrhs].copy_from_slice(&self.sumsq);
        host[nrhs..2 * nrhs].fill(0.0);
        for (slot, &c) in self.columns.iter().enumerate() {
            host[c] = updated[slot];
            host[nrhs + c] = updated[width + slot];
        }
        host[2 * nrhs] = updated[2 * width];
        self.stats.on_device = false;
        let update = StageCosts::new(a, width, rows, &narrow.r_low, &narrow.c).update;
        // x and r of each active column read and written twice, the spare ones zeroed, in
        // f64.
        let moved = Cost {
            flops: 0.0,
            bytes: (64 * active + 16 * (width - active)) as f64 * rows as f64,
        };
        Ok(update + moved)
    }

    fn fail(&mut self, failure: RefineFailure) -> RefineError {
        RefineError {
            failure,
            info: Box::new(self.info.clone()),
        }
    }

    /// Solves A x = b (f64 blocks in the inner operator's layout); x holds the initial
    /// guess on entry and the solution on return.
    pub fn solve(
        &mut self,
        a: &impl Residual<D>,
        b: &Block<D>,
        x: &mut Block<D>,
        params: RefineParams,
    ) -> std::result::Result<&RefineInfo, RefineError> {
        self.run(a, b, x, params, Start::Given)
    }

    /// [`Refinement::solve`] from x = 0, whatever x holds on entry: the first residual is
    /// b itself, copied instead of computed (a product with A fewer, the same values).
    pub fn solve_from_zero(
        &mut self,
        a: &impl Residual<D>,
        b: &Block<D>,
        x: &mut Block<D>,
        params: RefineParams,
    ) -> std::result::Result<&RefineInfo, RefineError> {
        self.run(a, b, x, params, Start::Zero)
    }

    fn run(
        &mut self,
        a: &impl Residual<D>,
        b: &Block<D>,
        x: &mut Block<D>,
        params: RefineParams,
        start: Start,
    ) -> std::result::Result<&RefineInfo, RefineError> {
        let wrap = |e: Error| RefineFailure::Inner(Box::new(e));
        if let Err(e) = self.check(a, b, x, params) {
            return Err(self.fail(wrap(e)));
        }
        let nrhs = self.nrhs;
        self.start = Instant::now();
        self.info.iterations.clear();
        self.info.iterations.resize(nrhs, 0);
        self.info.history.clear();
        self.info.elapsed.clear();
        self.info.cost = Cost::default();
        self.info.update_columns = 0;
        let dev = self.dev.clone();
        let costs = StageCosts::new(a, nrhs, self.r.rows(), &self.r_low, &self.c);
        if let Err(e) = self
            .begin_stage()
            .and_then(|()| dev.column_stats(b, &mut self.stats))
        {
            return Err(self.fail(wrap(e)));
        }
        self.info.b_norms.clear();
        match self.stats.read(&dev) {
            Ok(s) => self.info.b_norms.extend((0..nrhs).map(|c| s.norm(c))),
            Err(e) => return Err(self.fail(wrap(e))),
        }
        // The statistics hold b's: from zero they are the first residual's too.
        let first_residual = match start {
            Start::Given => a.residual(&dev, b, x, &mut self.r, &mut self.stats),
            Start::Zero => dev
                .fill(x.data.view_mut(), 0.0)
                .and_then(|()| dev.copy(b.data.view(), self.r.data.view_mut())),
        };
        let first_cost = match start {
            Start::Given => costs.residual,
            Start::Zero => costs.from_zero,
        };
        if let Err(e) = first_residual.and_then(|()| self.end_stage("first residual", first_cost)) {
            return Err(self.fail(wrap(e)));
        }
        if let Err(e) = self.record() {
            return Err(self.fail(wrap(e)));
        }
        for step in 0..params.max_iterations {
            if self.info.residuals().iter().any(|r| !r.is_finite()) {
                return Err(self.fail(RefineFailure::NotFinite));
            }
            let mut any = false;
            for c in 0..nrhs {
                let (r, b) = (self.info.residuals()[c], self.info.b_norms[c]);
                self.active[c] = r > super::stopping_threshold(params.rtol, params.atol, b);
                any |= self.active[c];
                self.scale[c] = match (self.active[c], params.residual_scaling) {
                    (false, _) => 0.0,
                    (true, true) => r,
                    (true, false) => 1.0,
                };
            }
            if !any {
                return Ok(&self.info);
            }
            log::debug!(
                "refinement step {}: {} of {nrhs} column(s) above their threshold",
                step + 1,
                self.active.iter().filter(|&&a| a).count()
            );
            // r_low = r / α in the inner precision, checked (and the active columns
            // gathered into the narrow blocks, when few).
            let low = self.r_low.precision();
            let cast = self
                .begin_stage()
                .and_then(|()| {
                    dev.scale_columns(&self.r, &self.scale, &mut self.r_low, &mut self.stats)
                })
                .and_then(|()| self.gather_active());
            if let Err(e) =
                cast.and_then(|moved| self.end_stage("scaled cast r/α", costs.cast + moved))
            {
                return Err(self.fail(wrap(e)));
            }
            let stats = match self.stats.read(&dev) {
                Ok(s) => s,
                Err(e) => return Err(self.fail(wrap(e))),
            };
            if !stats.in_range {
                return Err(self.fail(RefineFailure::Input {
                    flushed: None,
                    precision: low,
                }));
            }
            if let Some(column) =
                (0..nrhs).find(|&c| self.active[c] && stats.max_abs[c] < low.tiny() / 2.0)
            {
                let largest = stats.max_abs[column];
                return Err(self.fail(RefineFailure::Input {
                    flushed: Some((column, largest)),
                    precision: low,
                }));
            }
            let applied = match self.narrow.as_mut().filter(|_| !self.columns.is_empty()) {
                Some(n) => self.inner.apply(&n.r_low, &mut n.c).map(|()| n.c.cols()),
                None => self.inner.apply(&self.r_low, &mut self.c).map(|()| nrhs),
            };
            let applied = match applied {
                Ok(width) => width,
                Err(e) => return Err(self.fail(wrap(e))),
            };
            let first = step == 0;
            // The update on the narrow blocks where the inner solve ran there (flexible
            // CG's directions span the whole block: its corrections are copied back).
            let narrow_update = self.krylov.is_none() && !self.columns.is_empty();
            let update_width = if narrow_update { applied } else { nrhs };
            let updated = self.begin_stage().and_then(|()| {
                if narrow_update {
                    return self.update_active(a, x);
                }
                let moved = self.scatter_active()?;
                match self.krylov.as_mut() {
                    Some(k) => k
                        .step(
                            &dev,
                            a,
                            (&self.c, &self.scale, &self.active),
                            first,
                            (x, &mut self.r),
                            &mut self.stats,
                        )
                        .map(|()| costs.krylov_step + moved),
                    None => a
                        .update(&dev, &self.c, &self.scale, x, &mut self.r, &mut self.stats)
                        .map(|()| costs.update + moved),
                }
            });
            let stage = match self.krylov {
                Some(_) => "FCG step",
                None => "update x, r",
            };
            if let Err(e) = updated.and_then(|cost| self.end_stage(stage, cost)) {
                return Err(self.fail(wrap(e)));
            }
            let flushed = match self.stats.read(&dev) {
                Ok(s) => (0..nrhs).find(|&c| self.active[c] && s.max_abs[c] == 0.0),
                Err(e) => return Err(self.fail(wrap(e))),
            };
            if let Some(column) = flushed {
                let precision = self.c.precision();
                return Err(self.fail(RefineFailure::CorrectionFlushed { column, precision }));
            }
            for (it, &a) in self.info.iterations.iter_mut().zip(&self.active) {
                *it += usize::from(a);
            }
            let krylov_cost = match &self.krylov {
                // Scaling z, two block updates each of p, A p, x and r, three dots, the
                // statistics of r: about 11 f64 passes over the block.
                Some(k) => Cost {
                    flops: 16.0 * k.z.len() as f64,
                    bytes: 11.0 * 8.0 * k.z.len() as f64,
                },
                None => Cost::default(),
            };
            let update_cost = a.update_cost(update_width, self.c.precision());
            self.info.cost = self.info.cost + self.inner.cost(applied) + update_cost + krylov_cost;
            self.info.update_columns += update_width;
            if let Err(e) = self.record() {
                return Err(self.fail(wrap(e)));
            }
        }
        let column = (0..nrhs).find(|&c| {
            let r = self.info.residuals()[c];
            let converged =
                r <= super::stopping_threshold(params.rtol, params.atol, self.info.b_norms[c]);
            !converged
        });
        match column {
            None => Ok(&self.info),
            Some(_) if self.info.residuals().iter().any(|r| !r.is_finite()) => {
                Err(self.fail(RefineFailure::NotFinite))
            }
            Some(column) => Err(self.fail(RefineFailure::NotConverged { column, params })),
        }
    }

    /// Appends the current residual norms to the history.
    fn record(&mut self) -> Result<()> {
        let stats = self.stats.read(&self.dev)?;
        self.info
            .history
            .extend((0..self.nrhs).map(|c| stats.norm(c)));
        self.sumsq
            .copy_from_slice(stats.sumsq.expect("refinement statistics have norms"));
        self.info.elapsed.push(self.start.elapsed().as_secs_f64());
        Ok(())
    }

    fn check(
        &self,
        a: &impl Residual<D>,
        b: &Block<D>,
        x: &Block<D>,
        params: RefineParams,
    ) -> Result<()> {
        self.r.check_like(b, "refinement right-hand side")?;
        self.r.check_like(x, "refinement solution")?;
        if a.layout() != self.r.layout() {
            return Err(Error::InvalidInput(
                "refinement: the operator and the inner solve take different layouts".into(),
            ));
        }
        if params.max_iterations > self.max_iterations {
            return Err(Error::InvalidInput(format!(
                "refinement set up for {} steps was asked for {}",
                self.max_iterations, params.max_iterations
            )));
        }
        Ok(())
    }
}

impl<D: SparseKernels + VectorKernels> Krylov<D> {
    /// One flexible CG step from the inner solve's correction `c` (scaled by `scale`, only
    /// the `active` columns): x and r updated along the new direction; `stats` gets Σ r²
    /// of the new residual and max |z| of the correction, like the plain update.
    fn step(
        &mut self,
        dev: &D,
        a: &impl Residual<D>,
        (c, scale, active): (&Block<D>, &[f64], &[bool]),
        first: bool,
        (x, r): (&mut Block<D>, &mut Block<D>),
        stats: &mut Stats<D>,
    ) -> Result<()> {
        let nrhs = scale.len();
        // z = scale ∘ c in f64 in one pass (scale_columns divides; a zero scale gives a
        // zero column) with max |z| for the refinement's check, then A z.
        for (inverse, &s) in self.coefficient.iter_mut().zip(scale) {
            *inverse = if s > 0.0 { 1.0 / s } else { 0.0 };
        }
        dev.scale_columns(c, &self.coefficient, &mut self.z, stats)?;
        self.z_max.copy_from_slice(stats.read(dev)?.max_abs);
        a.apply(dev, &self.z, &mut self.az, stats)?;
        if first {
            dev.copy(self.z.view(), self.p.view_mut())?;
            dev.copy(self.az.view(), self.ap.view_mut())?;
        } else {
            // γ = (A z)·p / p·A p: p = z − γ p, A p = A z − γ A p.
            dev.column_dots(&self.az, &self.p, &mut self.dots, &mut self.scratch)?;
            ratios(&mut self.coefficient, -1.0, &self.dots, &self.pap, active);
            dev.column_axpby(&self.ones, &self.z, &self.coefficient, &mut self.p)?;
            dev.column_axpby(&self.ones, &self.az, &self.coefficient, &mut self.ap)?;
        }
        // β = p·r / p·A p.
        dev.column_dots(&self.p, &self.ap, &mut self.pap, &mut self.scratch)?;
        dev.column_dots(&self.p, r, &mut self.dots, &mut self.scratch)?;
        ratios(&mut self.coefficient, 1.0, &self.dots, &self.pap, active);
        dev.column_axpby(&self.coefficient, &self.p, &self.ones, x)?;
        self.coefficient.iter_mut().for_each(|v| *v = -*v);
        dev.column_axpby(&self.coefficient, &self.ap, &self.ones, r)?;
        // The statistics the refinement reads: Σ r² per column and max |z|.
        dev.column_stats(r, stats)?;
        stats.read(dev)?;
        stats.host[nrhs..2 * nrhs].copy_from_slice(&self.z_max);
        Ok(())
    }
}

/// out_c = sign · num_c / den_c for the active columns with den_c > 0 (finite), else 0.
fn ratios(out: &mut [f64], sign: f64, num: &[f64], den: &[f64], active: &[bool]) {
    for (((o, &n), &d), &a) in out.iter_mut().zip(num).zip(den).zip(active) {
        *o = if a && d > 0.0 && d.is_finite() {
            sign * n / d
        } else {
            0.0
        };
    }
}
