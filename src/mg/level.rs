//! One level of the hierarchy, stored in its own precision: the rediscretised Q1 matrix in
//! ELLPACK (diagonal first), the block vectors of the cycle, and the kernels the cycle
//! runs on it, each checked against the precision's range.

use half::f16;

use crate::backend::cpu::block_ell::{self, BlockStats, ChunkedEll, RowOp};
use crate::backend::cpu::grid_transfer::GridShape;
use crate::error::{Error, Result};
use crate::precision::{Precision, Real, Stored};
use crate::sparse::{Csr, Ell, EllLayout};

use super::schedule::Smoother;

pub(super) struct Level<S: Stored> {
    /// 0 = coarsest.
    pub index: usize,
    pub count: usize,
    pub grid: GridShape,
    pub matrix: ChunkedEll<S>,
    pub nrhs: usize,
    /// Right-hand side, iterate (the correction) and a second buffer (the next Jacobi
    /// iterate, or the residual), node-major N × nrhs.
    pub b: Vec<S>,
    pub x: Vec<S>,
    pub tmp: Vec<S>,
    /// CG vectors of the base solve (coarsest level only).
    pub cg: Vec<Vec<S>>,
    pub partials: Vec<f64>,
    /// Statistics of the iterate after the level's last kernel that wrote it.
    pub x_stats: BlockStats,
}

impl<S: Stored> Level<S> {
    pub fn new(index: usize, count: usize, grid: GridShape, matrix: &Csr<f64>) -> Result<Self> {
        let matrix = without_roundoff(Ell::from_csr_diagonal_first(matrix, EllLayout::RowMajor)?)
            .convert::<S>()
            .map_err(|e| match e {
                Error::PrecisionRange {
                    precision,
                    index: entry,
                    problem,
                    ..
                } => Error::MultigridRange {
                    level: index,
                    levels: count,
                    precision,
                    unknowns: grid.points(),
                    what: format!("matrix entry {entry}: {problem}"),
                },
                other => other,
            })?;
        Ok(Level {
            index,
            count,
            grid,
            matrix: ChunkedEll::new(matrix)?,
            nrhs: 0,
            b: Vec::new(),
            x: Vec::new(),
            tmp: Vec::new(),
            cg: Vec::new(),
            partials: Vec::new(),
            x_stats: BlockStats {
                sumsq: Vec::new(),
                max_abs: Vec::new(),
                in_range: true,
            },
        })
    }

    /// Allocates the vectors for blocks of `nrhs` columns (once per block width).
    pub fn resize(&mut self, nrhs: usize) {
        if self.nrhs == nrhs {
            return;
        }
        let len = self.grid.points() * nrhs;
        self.nrhs = nrhs;
        self.b = vec![S::default(); len];
        self.x = vec![S::default(); len];
        self.tmp = vec![S::default(); len];
        if self.index == 0 {
            self.cg = vec![vec![S::default(); len]; 3];
        }
        let partials = self
            .matrix
            .partials_len(nrhs)
            .max(self.grid.partials_len(nrhs));
        self.partials = vec![0.0; partials];
    }

    pub fn error(&self, what: String) -> Error {
        Error::MultigridRange {
            level: self.index,
            levels: self.count,
            precision: S::PRECISION,
            unknowns: self.grid.points(),
            what,
        }
    }

    /// Fails unless every value the last kernel stored was finite and in range.
    pub fn check(&self, stats: &BlockStats, what: &str) -> Result<()> {
        if stats.in_range {
            Ok(())
        } else {
            Err(self.error(format!(
                "{what} is not finite or exceeds the largest {} value ({:e}){}",
                S::PRECISION,
                S::MAX,
                if S::PRECISION == Precision::F64 {
                    String::new()
                } else {
                    "; keep solver.residual_scaling = true, or use a wider precision on this level"
                        .to_string()
                }
            )))
        }
    }

    /// Bytes of one pass over the matrix.
    fn matrix_bytes(&self) -> f64 {
        self.matrix.bytes()
    }

    /// Bytes of one block vector.
    pub fn vector_bytes(&self) -> f64 {
        (self.grid.points() * self.nrhs * S::PRECISION.bytes()) as f64
    }

    /// `steps` damped Jacobi steps on x (from x = 0 when `zero_initial`); returns bytes moved.
    pub fn smooth(&mut self, smoother: &Smoother, steps: usize, zero_initial: bool) -> Result<f64> {
        let mut bytes = 0.0;
        for step in 0..steps {
            let stats = if step == 0 && zero_initial {
                bytes += self.matrix.diagonal_bytes() + 2.0 * self.vector_bytes();
                block_ell::jacobi_from_zero(
                    &self.matrix,
                    smoother.omega,
                    &self.b,
                    self.nrhs,
                    &mut self.x,
                    &mut self.partials,
                )
            } else {
                bytes += self.matrix_bytes() + 3.0 * self.vector_bytes();
                let stats = block_ell::sweep(
                    &self.matrix,
                    RowOp::Jacobi {
                        omega: smoother.omega,
                    },
                    &self.x,
                    &self.b,
                    self.nrhs,
                    &mut self.tmp,
                    &mut self.partials,
                );
                std::mem::swap(&mut self.x, &mut self.tmp);
                stats
            };
            self.check(&stats, "the smoothed iterate")?;
            self.x_stats = stats;
        }
        Ok(bytes)
    }

    /// tmp = b − A x; returns its statistics and the bytes moved.
    pub fn residual(&mut self) -> Result<(BlockStats, f64)> {
        let stats = block_ell::sweep(
            &self.matrix,
            RowOp::Residual,
            &self.x,
            &self.b,
            self.nrhs,
            &mut self.tmp,
            &mut self.partials,
        );
        self.check(&stats, "the residual")?;
        Ok((stats, self.matrix_bytes() + 3.0 * self.vector_bytes()))
    }

    /// The base solve: CG on every column, in this level's precision (vectors stored in it,
    /// arithmetic in its compute precision, dot products in f64), from x = 0, until
    /// ‖r‖₂ ≤ max(`tolerance`, 10·u·‖b‖₂) (u the unit roundoff: what the precision can
    /// attain; `tolerance` is relative to ‖b‖₂ when `relative`), breakdown, or 2N + 100
    /// iterations. Returns the bytes moved.
    pub fn base_solve(&mut self, tolerance: f64, relative: bool) -> Result<f64> {
        let (n, nrhs) = (self.grid.points(), self.nrhs);
        let column_dots = |u: &[S], v: &[S]| -> Vec<f64> {
            let mut dots = vec![0.0; nrhs];
            for (ur, vr) in u.chunks_exact(nrhs).zip(v.chunks_exact(nrhs)) {
                for ((d, a), b) in dots.iter_mut().zip(ur).zip(vr) {
                    *d += a.to_f64() * b.to_f64();
                }
            }
            dots
        };
        let (matrix_bytes, vector_bytes) = (self.matrix_bytes(), self.vector_bytes());
        let [r, p, q] = &mut self.cg[..] else {
            unreachable!("the coarsest level has three CG vectors")
        };
        self.x.fill(S::default());
        r.copy_from_slice(&self.b);
        p.copy_from_slice(&self.b);
        let b_norms: Vec<f64> = column_dots(&self.b, &self.b)
            .iter()
            .map(|s| s.sqrt())
            .collect();
        let targets: Vec<f64> = b_norms
            .iter()
            .map(|&nb| {
                let wanted = if relative { tolerance * nb } else { tolerance };
                wanted.max(10.0 * S::PRECISION.unit_roundoff() * nb)
            })
            .collect();
        let mut rr = column_dots(r, r);
        let mut active: Vec<bool> = rr
            .iter()
            .zip(&targets)
            .map(|(s, t)| s.sqrt() > *t)
            .collect();
        let mut bytes = 2.0 * vector_bytes;
        for _ in 0..2 * n + 100 {
            if !active.iter().any(|&a| a) {
                break;
            }
            block_ell::sweep(
                &self.matrix,
                RowOp::Apply,
                p,
                &[],
                nrhs,
                q,
                &mut self.partials,
            );
            let pq = column_dots(p, q);
            let alpha: Vec<S::Compute> = (0..nrhs)
                .map(|c| {
                    active[c] &= pq[c] > 0.0 && pq[c].is_finite();
                    S::Compute::from_f64(if active[c] { rr[c] / pq[c] } else { 0.0 })
                })
                .collect();
            let rows = self.x.chunks_exact_mut(nrhs).zip(r.chunks_exact_mut(nrhs));
            for ((x_row, r_row), (p_row, q_row)) in
                rows.zip(p.chunks_exact(nrhs).zip(q.chunks_exact(nrhs)))
            {
                for c in 0..nrhs {
                    let (pk, qk) = (p_row[c].to_compute(), q_row[c].to_compute());
                    x_row[c] = S::from_compute(x_row[c].to_compute() + alpha[c] * pk);
                    r_row[c] = S::from_compute(r_row[c].to_compute() - alpha[c] * qk);
                }
            }
            let rr_new = column_dots(r, r);
            let beta: Vec<S::Compute> = (0..nrhs)
                .map(|c| S::Compute::from_f64(if active[c] { rr_new[c] / rr[c] } else { 0.0 }))
                .collect();
            for (p_row, r_row) in p.chunks_exact_mut(nrhs).zip(r.chunks_exact(nrhs)) {
                for ((p, r), &beta) in p_row.iter_mut().zip(r_row).zip(&beta) {
                    *p = S::from_compute(r.to_compute() + beta * p.to_compute());
                }
            }
            for c in 0..nrhs {
                active[c] &= rr_new[c].sqrt() > targets[c];
            }
            rr = rr_new;
            bytes += matrix_bytes + 10.0 * vector_bytes;
        }
        let wide: Vec<f64> = self.x.iter().map(|v| v.to_f64()).collect();
        let mut part = vec![0.0; block_ell::stats_len(nrhs)];
        block_ell::record_stats(&mut part, &wide, nrhs, S::MAX);
        let stats = block_ell::reduce_stats(&part, nrhs);
        self.check(&stats, "the base solver's solution")?;
        self.x_stats = stats;
        Ok(bytes)
    }
}

/// Entries below 64·ε·|a_ii| are set to zero: they are exact zeros of the stencil (the 3D
/// Q1 stencil has some) that assembly leaves at rounding level (~1e-18), which f16 would
/// otherwise refuse as an underflow.
fn without_roundoff(mut matrix: Ell<f64>) -> Ell<f64> {
    let width = matrix.width();
    for row in matrix.values_mut().chunks_exact_mut(width.max(1)) {
        let threshold = 64.0 * f64::EPSILON * row[0].abs();
        for v in &mut row[1..] {
            if v.abs() <= threshold {
                *v = 0.0;
            }
        }
    }
    matrix
}

/// A level in whichever precision its schedule entry names.
pub(super) enum AnyLevel {
    F64(Level<f64>),
    F32(Level<f32>),
    F16(Level<f16>),
}

/// Runs `$body` with `$l` bound to the typed level inside `$level`.
macro_rules! with_level {
    ($level:expr, $l:ident => $body:expr) => {
        match $level {
            AnyLevel::F64($l) => $body,
            AnyLevel::F32($l) => $body,
            AnyLevel::F16($l) => $body,
        }
    };
}
pub(super) use with_level;

impl AnyLevel {
    pub fn new(
        precision: Precision,
        index: usize,
        count: usize,
        grid: GridShape,
        matrix: &Csr<f64>,
    ) -> Result<Self> {
        Ok(match precision {
            Precision::F64 => AnyLevel::F64(Level::new(index, count, grid, matrix)?),
            Precision::F32 => AnyLevel::F32(Level::new(index, count, grid, matrix)?),
            Precision::F16 => AnyLevel::F16(Level::new(index, count, grid, matrix)?),
        })
    }

    pub fn precision(&self) -> Precision {
        match self {
            AnyLevel::F64(_) => Precision::F64,
            AnyLevel::F32(_) => Precision::F32,
            AnyLevel::F16(_) => Precision::F16,
        }
    }

    pub fn grid(&self) -> GridShape {
        with_level!(self, l => l.grid)
    }

    /// Bytes the level's matrix occupies (values and column indices).
    pub fn matrix_bytes(&self) -> f64 {
        with_level!(self, l => l.matrix_bytes())
    }
}
