//! One interface for every operator: matrices, preconditioners, multigrid cycles, direct
//! solves. Set-up (construction and [`LinOp::prepare`]) allocates; [`LinOp::apply`]
//! allocates nothing, so any operator can precondition FGMRES or sit inside iterative
//! refinement and be applied millions of times.

use crate::device::{Block, Device, Layout};
use crate::error::Result;
use crate::precision::Precision;

/// What one apply costs, for performance reports (GFLOP/s, GB/s).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// Floating-point operations (a multiply-add counts two).
    pub flops: f64,
    /// Bytes read and written by the kernels (each operand once per kernel).
    pub bytes: f64,
}

impl std::ops::Add for Cost {
    type Output = Cost;
    fn add(self, other: Cost) -> Cost {
        Cost {
            flops: self.flops + other.flops,
            bytes: self.bytes + other.bytes,
        }
    }
}

impl std::ops::Mul<f64> for Cost {
    type Output = Cost;
    fn mul(self, k: f64) -> Cost {
        Cost {
            flops: self.flops * k,
            bytes: self.bytes * k,
        }
    }
}

/// The precision and layout of the blocks an operator takes or returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockKind {
    pub precision: Precision,
    pub layout: Layout,
}

/// A linear operator on blocks of columns: y = A x, or y ≈ A⁻¹ x for a preconditioner or
/// an inner solve.
pub trait LinOp<D: Device> {
    /// Rows (and columns) of the operator.
    fn size(&self) -> usize;

    /// The blocks `apply` takes and returns.
    fn input(&self) -> BlockKind;
    fn output(&self) -> BlockKind;

    /// Allocates what `apply` needs for blocks of `nrhs` columns (set-up; repeated calls
    /// with the same width do nothing).
    fn prepare(&mut self, nrhs: usize) -> Result<()>;

    /// Also allocates what `apply` needs for blocks of `width` columns, narrower than the
    /// prepared width, kept beside it: true where the operator keeps such a second
    /// workspace (a refinement then applies it to its unconverged columns alone), false
    /// where it does not.
    fn prepare_narrow(&mut self, width: usize) -> Result<bool> {
        let _ = width;
        Ok(false)
    }

    /// y = A x (or y ≈ A⁻¹ x); allocates nothing after [`LinOp::prepare`].
    fn apply(&mut self, x: &Block<D>, y: &mut Block<D>) -> Result<()>;

    /// The cost of the last apply to `nrhs` columns (an estimate before the first one).
    fn cost(&self, nrhs: usize) -> Cost;
}

/// A block of the kind `kind` with `rows` × `cols` entries.
pub fn block_of<D: Device>(dev: &D, kind: BlockKind, rows: usize, cols: usize) -> Result<Block<D>> {
    Block::zeros(dev, rows, cols, kind.precision, kind.layout)
}

/// An operator whose applies are timed as stage `stage` of a device clock shared with other
/// operators: each apply first ends the stage `between` (the caller's own work since the
/// last mark), then ends `stage` after the inner apply. The marks sit in the device's queue
/// (CUDA events on a GPU), so timing never waits for the device.
pub struct Staged<'a, D: Device> {
    pub inner: &'a mut dyn LinOp<D>,
    pub dev: &'a D,
    pub marks: &'a std::cell::RefCell<crate::device::clock::StageMarks<D>>,
    pub stage: &'static str,
    pub between: &'static str,
}

impl<D: Device> LinOp<D> for Staged<'_, D> {
    fn size(&self) -> usize {
        self.inner.size()
    }

    fn input(&self) -> BlockKind {
        self.inner.input()
    }

    fn output(&self) -> BlockKind {
        self.inner.output()
    }

    fn prepare(&mut self, nrhs: usize) -> Result<()> {
        self.inner.prepare(nrhs)
    }

    fn prepare_narrow(&mut self, width: usize) -> Result<bool> {
        self.inner.prepare_narrow(width)
    }

    fn apply(&mut self, x: &Block<D>, y: &mut Block<D>) -> Result<()> {
        self.marks.borrow_mut().end(self.dev, self.between)?;
        self.inner.apply(x, y)?;
        self.marks.borrow_mut().end(self.dev, self.stage)
    }

    fn cost(&self, nrhs: usize) -> Cost {
        self.inner.cost(nrhs)
    }
}
