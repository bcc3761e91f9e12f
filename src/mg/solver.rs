//! The multigrid solver: set-up of the level hierarchy, the V-cycle across precisions, and
//! the two ways of using it — inside f64 iterative refinement with residual scaling (SPEC
//! §3.2, any precision schedule) and stand-alone on the f64 system (the baseline).

use crate::backend::cpu::block_ell::{self, BlockStats, ChunkedEll, RowOp};
use crate::backend::cpu::grid_transfer::{self, GridShape};
use crate::error::{Error, Result};
use crate::fem::assemble_poisson;
use crate::mesh::{unit_cube, unit_square, Element};
use crate::precision::{Precision, Stored};
use crate::sparse::{Csr, Ell, EllLayout, SparseRows};

use super::level::{with_level, AnyLevel, Level};
use super::schedule::{check_levels, schedule_name, Smoother};

/// How the hierarchy is built and cycled.
#[derive(Clone, Debug, PartialEq)]
pub struct MgParams {
    /// Precision of each level, finest first; the last entry is the base solve's level.
    /// Its length is the number of levels.
    pub schedule: Vec<Precision>,
    pub smoother: Smoother,
    /// Residual the coarsest-level CG stops at: absolute inside refinement (SPEC §3.1: 1e-4,
    /// on the scaled residual), relative to the coarse right-hand side in the stand-alone
    /// cycle (whose residuals shrink towards zero).
    pub base_tolerance: f64,
    /// Scale residuals into range where they enter a lower precision: by α = ‖r‖₂ at the
    /// refinement level, by the largest magnitude where the cycle enters an f16 level.
    pub residual_scaling: bool,
}

/// When iterative refinement (or the stand-alone cycle) stops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StopParams {
    /// Absolute ‖b − A u‖₂ (SPEC §3.2: 1e-9).
    pub tolerance: f64,
    pub max_iterations: usize,
}

/// What a solve did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MgInfo {
    /// Refinement steps (V-cycles) each column needed.
    pub iterations: Vec<usize>,
    /// ‖r‖₂ of every column before each step and at the end (the refinement's recursively
    /// updated residual; the stand-alone cycle's true residual).
    pub history: Vec<Vec<f64>>,
    /// Bytes the kernels moved (stored matrices and vectors, each read or written once per
    /// kernel).
    pub bytes: f64,
}

impl MgInfo {
    pub fn max_iterations(&self) -> usize {
        self.iterations.iter().copied().max().unwrap_or(0)
    }
}

/// The Q1 stiffness matrix of the uniform mesh with n cells per direction (rediscretised
/// on every level).
pub fn assemble_level(dim: usize, n: usize) -> Result<Csr<f64>> {
    Ok(match dim {
        2 => assemble_poisson(&unit_square(n, Element::Q1)?, |_| 0.0)?.matrix,
        3 => assemble_poisson(&unit_cube(n)?, |_| 0.0)?.matrix,
        _ => {
            return Err(Error::InvalidInput(format!(
                "multigrid solves in 2 or 3 dimensions, not {dim}"
            )))
        }
    })
}

/// The initial guess of SPEC §3.2: uniform random in [0, 1), reproducible from `seed`
/// (ChaCha8, the same stream on every machine).
pub fn random_initial_guess(len: usize, seed: u64) -> Vec<f64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.random::<f64>()).collect()
}

/// Node-major (i·nrhs + c) from column-major (i + c·N) and back.
fn to_node_major(col_major: &[f64], n: usize, nrhs: usize, out: &mut [f64]) {
    for c in 0..nrhs {
        for i in 0..n {
            out[i * nrhs + c] = col_major[c * n + i];
        }
    }
}

fn to_column_major(node_major: &[f64], n: usize, nrhs: usize, out: &mut [f64]) {
    for c in 0..nrhs {
        for i in 0..n {
            out[c * n + i] = node_major[i * nrhs + c];
        }
    }
}

/// A multigrid hierarchy, set up once, solving blocks of right-hand sides.
pub struct Multigrid {
    params: MgParams,
    /// Levels, coarsest first.
    levels: Vec<AnyLevel>,
    /// The f64 fine-grid operator of the refinement, when the finest level is not f64.
    outer: Option<ChunkedEll<f64>>,
    nrhs: usize,
    /// Base-solve tolerance relative (stand-alone cycle) or absolute (refinement).
    relative_base_tolerance: bool,
    /// Refinement state, f64, node-major.
    u: Vec<f64>,
    r: Vec<f64>,
    b: Vec<f64>,
    partials: Vec<f64>,
}

impl Multigrid {
    /// Sets up `params.schedule.len()` levels under the finest mesh of n cells per direction
    /// in `dim` dimensions, whose stiffness matrix `finest` the caller assembled (coarser
    /// levels are rediscretised here).
    pub fn new(dim: usize, n: usize, finest: &Csr<f64>, params: MgParams) -> Result<Self> {
        let count = params.schedule.len();
        check_levels(n, count)?;
        let fine_grid = GridShape { dim, m: n - 1 };
        if finest.nrows() != fine_grid.points() {
            return Err(Error::InvalidInput(format!(
                "multigrid: the finest matrix has {} rows, the {dim}D mesh with n = {n} has {} unknowns",
                finest.nrows(),
                fine_grid.points()
            )));
        }
        let mut levels = Vec::with_capacity(count);
        for index in 0..count {
            let cells = n >> (count - 1 - index);
            let grid = GridShape { dim, m: cells - 1 };
            let precision = params.schedule[count - 1 - index];
            let level = if index == count - 1 {
                AnyLevel::new(precision, index, count, grid, finest)?
            } else {
                AnyLevel::new(precision, index, count, grid, &assemble_level(dim, cells)?)?
            };
            levels.push(level);
        }
        let outer = if params.schedule[0] == Precision::F64 {
            None
        } else {
            Some(ChunkedEll::new(Ell::from_csr_diagonal_first(
                finest,
                EllLayout::RowMajor,
            )?)?)
        };
        log::info!(
            "multigrid: {count} levels, {dim}D, finest n = {n} ({} unknowns), precisions {}",
            fine_grid.points(),
            schedule_name(&params.schedule)
        );
        Ok(Multigrid {
            params,
            levels,
            outer,
            nrhs: 0,
            relative_base_tolerance: false,
            u: Vec::new(),
            r: Vec::new(),
            b: Vec::new(),
            partials: Vec::new(),
        })
    }

    pub fn params(&self) -> &MgParams {
        &self.params
    }

    /// Unknowns of the finest level.
    pub fn unknowns(&self) -> usize {
        self.levels.last().map_or(0, |l| l.grid().points())
    }

    /// Bytes the stored matrices of all levels occupy (plus the f64 refinement operator).
    pub fn operator_bytes(&self) -> f64 {
        let outer = self.outer.as_ref().map_or(0.0, |e| e.bytes());
        self.levels.iter().map(|l| l.matrix_bytes()).sum::<f64>() + outer
    }

    fn resize(&mut self, nrhs: usize) {
        for level in &mut self.levels {
            with_level!(level, l => l.resize(nrhs));
        }
        if self.nrhs != nrhs {
            let len = self.unknowns() * nrhs;
            self.u = vec![0.0; len];
            self.r = vec![0.0; len];
            self.b = vec![0.0; len];
            let chunks = refinement_operator(&self.outer, &self.levels).partials_len(nrhs);
            self.partials = vec![0.0; chunks];
            self.nrhs = nrhs;
        }
    }

    /// r = b − A u in f64 (node-major state); returns the column norms and the bytes moved.
    fn refinement_residual(&mut self) -> (Vec<f64>, f64) {
        let a = refinement_operator(&self.outer, &self.levels);
        let stats = block_ell::sweep(
            a,
            RowOp::Residual,
            &self.u,
            &self.b,
            self.nrhs,
            &mut self.r,
            &mut self.partials,
        );
        let bytes = a.bytes() + (3 * self.u.len() * 8) as f64;
        (stats.norms(), bytes)
    }

    /// Solves A u = b for the column-major N × nrhs block `b` by f64 iterative refinement
    /// around one V-cycle per step (SPEC §3.2); `u` holds the initial guess on entry and the
    /// solution on return.
    pub fn solve_refined(
        &mut self,
        b: &[f64],
        u: &mut [f64],
        nrhs: usize,
        stop: StopParams,
    ) -> Result<MgInfo> {
        let n = self.unknowns();
        check_block(b, u, n, nrhs)?;
        self.resize(nrhs);
        self.relative_base_tolerance = false;
        to_node_major(b, n, nrhs, &mut self.b);
        to_node_major(u, n, nrhs, &mut self.u);
        let (mut alpha, mut bytes) = self.refinement_residual();
        let mut info = MgInfo {
            iterations: vec![0; nrhs],
            history: vec![alpha.clone()],
            bytes: 0.0,
        };
        let finest = self.levels.len() - 1;
        let chunk_rows = refinement_operator(&self.outer, &self.levels).chunk_rows();
        for _ in 0..stop.max_iterations {
            let active: Vec<bool> = alpha.iter().map(|&a| a > stop.tolerance).collect();
            if !active.iter().any(|&a| a) {
                break;
            }
            // r_low = r / α in the finest level's precision (inactive columns: zero), one
            // V-cycle from zero, then u += α c and r −= α A c in f64, fused.
            let scale: Vec<f64> = (0..nrhs)
                .map(|c| match (active[c], self.params.residual_scaling) {
                    (false, _) => 0.0,
                    (true, true) => alpha[c],
                    (true, false) => 1.0,
                })
                .collect();
            bytes += with_level!(&mut self.levels[finest], l => {
                let stats = block_ell::scale_into(chunk_rows, &self.r, &scale, nrhs, &mut l.b, &mut self.partials);
                l.check(&stats, "the refinement residual cast to this level")?;
                check_not_flushed(l, &stats, &active, "the refinement residual")?;
                (self.r.len() * 8) as f64 + l.vector_bytes()
            });
            bytes += self.vcycle(finest, true)?;
            let a = refinement_operator(&self.outer, &self.levels);
            let stats = with_level!(&self.levels[finest], l => {
                check_not_flushed(l, &l.x_stats, &active, "the correction")?;
                bytes += l.vector_bytes();
                block_ell::refinement_update(
                    a, &l.x, &scale, nrhs, &mut self.u, &mut self.r, &mut self.partials,
                )
            });
            bytes += a.bytes() + (self.u.len() * 32) as f64;
            for (it, &a) in info.iterations.iter_mut().zip(&active) {
                *it += a as usize;
            }
            alpha = stats.norms();
            info.history.push(alpha.clone());
            if alpha.iter().any(|a| !a.is_finite()) {
                return Err(Error::Solver(
                    "multigrid refinement: the f64 residual is not finite".into(),
                ));
            }
        }
        info.bytes = bytes;
        to_column_major(&self.u, n, nrhs, u);
        check_converged(&alpha, stop)?;
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
    ) -> Result<MgInfo> {
        if let Some(p) = self.params.schedule.iter().find(|&&p| p != Precision::F64) {
            return Err(Error::InvalidInput(format!(
                "stand-alone multigrid (no refinement) runs in f64 on every level; the schedule has {p}"
            )));
        }
        let n = self.unknowns();
        check_block(b, u, n, nrhs)?;
        self.resize(nrhs);
        self.relative_base_tolerance = true;
        let finest = self.levels.len() - 1;
        let AnyLevel::F64(level) = &mut self.levels[finest] else {
            unreachable!("checked: every level is f64")
        };
        to_node_major(b, n, nrhs, &mut level.b);
        to_node_major(u, n, nrhs, &mut level.x);
        let mut info = MgInfo {
            iterations: vec![0; nrhs],
            history: Vec::new(),
            bytes: 0.0,
        };
        let mut bytes = 0.0;
        let mut cycles = 0;
        let norms = loop {
            let AnyLevel::F64(level) = &mut self.levels[finest] else {
                unreachable!()
            };
            let (stats, b) = level.residual()?;
            bytes += b;
            let norms = stats.norms();
            info.history.push(norms.clone());
            let active: Vec<bool> = norms.iter().map(|&a| a > stop.tolerance).collect();
            if !active.iter().any(|&a| a) || cycles == stop.max_iterations {
                break norms;
            }
            bytes += self.vcycle(finest, false)?;
            cycles += 1;
            for (it, &a) in info.iterations.iter_mut().zip(&active) {
                *it += a as usize;
            }
        };
        let AnyLevel::F64(level) = &self.levels[finest] else {
            unreachable!()
        };
        to_column_major(&level.x, n, nrhs, u);
        info.bytes = bytes;
        check_converged(&norms, stop)?;
        Ok(info)
    }

    /// One V-cycle on level `l` for the right-hand side in its `b`, improving its `x` (from
    /// x = 0 when `zero_initial`); returns the bytes moved.
    fn vcycle(&mut self, l: usize, zero_initial: bool) -> Result<f64> {
        let smoother = self.params.smoother;
        if l == 0 {
            let (tolerance, relative) = (self.params.base_tolerance, self.relative_base_tolerance);
            return with_level!(&mut self.levels[0], level => level.base_solve(tolerance, relative));
        }
        let mut bytes = with_level!(&mut self.levels[l], level => level.smooth(&smoother, smoother.pre, zero_initial))?;
        let (residual, b) = with_level!(&mut self.levels[l], level => level.residual())?;
        bytes += b;
        // Entering f16 from a wider precision: scale each column's residual to magnitude ≤ 1.
        let enters_f16 = self.levels[l - 1].precision() == Precision::F16
            && self.levels[l].precision() != Precision::F16;
        let scale: Vec<f64> = if self.params.residual_scaling && enters_f16 {
            residual.max_abs.clone()
        } else {
            vec![1.0; self.nrhs]
        };
        let (coarser, finer) = self.levels.split_at_mut(l);
        let (coarse, fine) = (&mut coarser[l - 1], &mut finer[0]);
        bytes += transfer_down(fine, coarse, &residual, &scale)?;
        bytes += self.vcycle(l - 1, true)?;
        let (coarser, finer) = self.levels.split_at_mut(l);
        bytes += transfer_up(&coarser[l - 1], &mut finer[0], &scale)?;
        bytes += with_level!(&mut self.levels[l], level => level.smooth(&smoother, smoother.post, false))?;
        Ok(bytes)
    }
}

/// The f64 operator of the refinement and its plan: the finest level's when that is f64.
fn refinement_operator<'a>(
    outer: &'a Option<ChunkedEll<f64>>,
    levels: &'a [AnyLevel],
) -> &'a ChunkedEll<f64> {
    match (outer, levels.last()) {
        (Some(ell), _) => ell,
        (None, Some(AnyLevel::F64(finest))) => &finest.matrix,
        _ => unreachable!("set-up keeps an f64 operator unless the finest level is f64"),
    }
}

/// coarse.b = Pᵀ fine.tmp / scale, checked; returns the bytes moved.
fn transfer_down(
    fine: &AnyLevel,
    coarse: &mut AnyLevel,
    fine_residual: &BlockStats,
    scale: &[f64],
) -> Result<f64> {
    let active: Vec<bool> = fine_residual.max_abs.iter().map(|&m| m > 0.0).collect();
    with_level!(fine, f => with_level!(coarse, c => {
        let stats = grid_transfer::restrict(&f.tmp, f.grid, &mut c.b, c.grid, f.nrhs, scale, &mut c.partials);
        c.check(&stats, "the restricted residual")?;
        check_not_flushed(c, &stats, &active, "the restricted residual")?;
        Ok(f.vector_bytes() + c.vector_bytes())
    }))
}

/// fine.x += scale · P coarse.x, checked; returns the bytes moved.
fn transfer_up(coarse: &AnyLevel, fine: &mut AnyLevel, scale: &[f64]) -> Result<f64> {
    with_level!(coarse, c => with_level!(fine, f => {
        let stats = grid_transfer::prolongate_add(&c.x, c.grid, &mut f.x, f.grid, f.nrhs, scale, &mut f.partials);
        f.check(&stats, "the coarse-grid corrected iterate")?;
        f.x_stats = stats;
        Ok(c.vector_bytes() + 2.0 * f.vector_bytes())
    }))
}

/// Fails when an active column's values all rounded to zero in the level's precision.
fn check_not_flushed<S: Stored>(
    level: &Level<S>,
    stats: &BlockStats,
    active: &[bool],
    what: &str,
) -> Result<()> {
    match (0..active.len()).find(|&c| active[c] && stats.max_abs[c] < S::TINY / 2.0) {
        None => Ok(()),
        Some(c) => Err(level.error(format!(
            "{what} of right-hand side {c} is flushed to zero (largest magnitude {:e}, below half the smallest {} value); keep solver.residual_scaling = true",
            stats.max_abs[c],
            S::PRECISION
        ))),
    }
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

fn check_converged(norms: &[f64], stop: StopParams) -> Result<()> {
    match norms.iter().position(|&a| a.is_nan() || a > stop.tolerance) {
        None => Ok(()),
        Some(c) => Err(Error::Solver(format!(
            "multigrid did not reach ‖r‖₂ ≤ {:e} in {} iterations (right-hand side {c}: ‖r‖₂ = {:e})",
            stop.tolerance, stop.max_iterations, norms[c]
        ))),
    }
}
