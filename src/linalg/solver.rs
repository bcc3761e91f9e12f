//! What every Poisson solver offers the driver: set up once (each solver's own `set_up`:
//! `psc::PscSolver`, `mg::MultigridSolver`, [`super::SparseCholesky`]), then solve
//! blocks of right-hand sides any number of times ([`BlockSolver`]), in chunks of columns
//! where the device cannot hold a block whole ([`ColumnPlan`]).

use super::Cost;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::sparse::Csr;

/// A set-up solver on the device it was built for: it solves column-major blocks of
/// right-hand sides of the f64 system `a` (the matrix it was set up for).
pub trait BlockSolver: Send {
    fn solve(&mut self, a: &Csr<f64>, b: &[f64], scope: &Scope) -> Result<BlockOutcome>;

    /// Times the stages of every later solve (`true`) by marks in the device's queue, or
    /// stops timing. A method without stage marks (the sparse Cholesky) has nothing to
    /// time.
    fn time_stages(&mut self, on: bool) {
        let _ = on;
    }

    /// The stages of the solves since the last call, in the order they run, their seconds
    /// summed over the solves, and zeroed: empty when not timing or without stage marks.
    fn take_stages(&mut self) -> Result<Vec<TimedStage>> {
        Ok(Vec::new())
    }
}

/// A stage of a method's solves: the seconds its marks measured and, where the method
/// models it, what it must move and compute (the compulsory bytes and counted flops).
#[derive(Clone, Debug)]
pub struct TimedStage {
    pub stage: &'static str,
    pub seconds: f64,
    pub cost: Option<Cost>,
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

impl<'a> Scope<'a> {
    /// The columns `columns` of the caller's block, as given (not scaled).
    pub fn unscaled(columns: &'a [usize]) -> Self {
        Scope {
            columns,
            factor: 1.0,
        }
    }
}

/// The solve of one block of right-hand sides.
pub struct BlockOutcome {
    /// The solutions, column-major (unknowns × nrhs).
    pub u: Vec<f64>,
    /// Refinement steps (PSC-IR) or V-cycles (multigrid) of the slowest column, when the
    /// method iterates.
    pub iterations: Option<usize>,
    /// Inner Krylov iterations of the whole solve (PSC-M3's block CG, summed over the
    /// refinement steps), when the method has them.
    pub inner_iterations: Option<usize>,
    /// Floating-point operations counted (PSC only: GEMMs 2mnk, sparse products 2 nnz).
    pub flops: Option<f64>,
}

impl BlockOutcome {
    /// The outcome of no solve yet, with room for `len` solution values: what
    /// [`BlockOutcome::merge`] starts from.
    pub fn empty(len: usize) -> Self {
        BlockOutcome {
            u: Vec::with_capacity(len),
            iterations: None,
            inner_iterations: None,
            flops: Some(0.0),
        }
    }

    /// Adds the outcome of a solve of further columns: its solutions after these, the most
    /// outer iterations, the inner iterations and flops added up.
    pub fn merge(&mut self, part: BlockOutcome) {
        self.u.extend(part.u);
        self.iterations = match (self.iterations, part.iterations) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
        self.inner_iterations = match (self.inner_iterations, part.inner_iterations) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
        self.flops = self.flops.zip(part.flops).map(|(x, y)| x + y);
    }

    /// Adds the counts of a correction step of some of these columns: its iterations after
    /// theirs, its inner iterations and flops added up.
    pub fn add_correction(&mut self, part: &BlockOutcome) {
        self.iterations = match (self.iterations, part.iterations) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
        self.inner_iterations = match (self.inner_iterations, part.inner_iterations) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
        self.flops = self.flops.zip(part.flops).map(|(x, y)| x + y);
    }
}

/// What a set-up solver occupies on its device, for [`ColumnPlan`].
pub struct Footprint<'a> {
    /// The method, as the log names it.
    pub what: &'a str,
    /// Bytes of its resident operators.
    pub operators: f64,
    /// Bytes one right-hand side occupies during a solve.
    pub per_column: usize,
    /// What to change where not even one right-hand side fits.
    pub advice: &'a str,
}

/// The widest block one solve holds on the device, planned once from its free memory after
/// the set-up (80 % of it); no limit on the host, whose memory the run checks up front.
#[derive(Default)]
pub struct ColumnPlan {
    /// Most columns per solve (None: no limit, or not yet planned).
    max_columns: Option<usize>,
    planned: bool,
}

impl ColumnPlan {
    /// A plan fixed at `max_columns` per solve (None: no limit), whatever the device holds.
    pub fn at_most(max_columns: Option<usize>) -> Self {
        ColumnPlan {
            max_columns,
            planned: true,
        }
    }

    /// The width to solve a block of `nrhs` columns in (planned and logged on first use):
    /// an error naming the sizes where not even one column fits.
    pub fn width<D: Device>(&mut self, dev: &D, plan: Footprint, nrhs: usize) -> Result<usize> {
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
pub fn solve_in_chunks(
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
