//! Flexible GMRES (Saad 1993) with right preconditioning and restarts, in f64.
//!
//! The preconditioner may change between iterations (a multigrid cycle in lower
//! precision, inexact inner solves), so the preconditioned vectors z_j are kept and the
//! update is x += Z y. Convergence is measured on the relative residual ‖b − A x‖₂/‖b‖₂,
//! recomputed from scratch at every restart and at the end. The Krylov vectors live on the
//! device; the Hessenberg system (restart × restart) is solved on the host. Everything is
//! allocated by [`FgmresWorkspace::new`].

use std::fmt;

use super::linop::LinOp;
use crate::device::{Block, DenseKernels, Scratch, VectorKernels};
use crate::error::{Error, Result};
use crate::precision::Precision;

/// Stopping and restart settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FgmresParams {
    /// Krylov vectors per cycle.
    pub restart: usize,
    /// Stop when ‖b − A x‖₂ ≤ max(rtol·‖b‖₂, atol).
    pub rtol: f64,
    pub atol: f64,
    pub max_iterations: usize,
}

/// What a solve did.
#[derive(Clone, Debug, PartialEq)]
pub struct FgmresInfo {
    pub iterations: usize,
    /// The true relative residual ‖b − A x‖₂/‖b‖₂ of the returned x.
    pub relative_residual: f64,
    /// The relative residual estimate after each iteration (from the Hessenberg system).
    pub history: Vec<f64>,
    pub converged: bool,
}

/// How FGMRES failed.
#[derive(Debug)]
pub enum FgmresFailure {
    /// The residual became NaN or infinite (an overflow in a low-precision preconditioner).
    NotFinite,
    /// `max_iterations` reached before the tolerance.
    NotConverged,
    /// The operator, the preconditioner or the projection failed.
    Operator(Box<Error>),
}

/// A failed solve: why, and what it did.
#[derive(Debug)]
pub struct FgmresError {
    pub failure: FgmresFailure,
    pub info: FgmresInfo,
}

impl fmt::Display for FgmresError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            FgmresFailure::NotFinite => write!(
                f,
                "FGMRES produced non-finite values after {} iterations",
                self.info.iterations
            ),
            FgmresFailure::NotConverged => write!(
                f,
                "FGMRES stopped after {} iterations at the relative residual {:.3e}",
                self.info.iterations, self.info.relative_residual
            ),
            FgmresFailure::Operator(e) => write!(f, "{e}"),
        }
    }
}

/// The Krylov vectors of FGMRES(restart) and the small dense work, allocated once.
pub struct FgmresWorkspace<D: VectorKernels + DenseKernels> {
    dev: D,
    /// Basis V (restart + 1 vectors) and preconditioned vectors Z (restart).
    v: Vec<Block<D>>,
    z: Vec<Block<D>>,
    w: Block<D>,
    scratch: Scratch<D>,
    /// Hessenberg columns (restart × (restart + 1)), Givens rotations, rotated right-hand
    /// side, the solution of the triangular system.
    hessenberg: Vec<f64>,
    rotations: Vec<(f64, f64)>,
    g: Vec<f64>,
    y: Vec<f64>,
    restart: usize,
    info: FgmresInfo,
}

impl<D: VectorKernels + DenseKernels> FgmresWorkspace<D> {
    /// Vectors of `len` entries for FGMRES(`restart`), history for `max_iterations`.
    pub fn new(dev: &D, len: usize, restart: usize, max_iterations: usize) -> Result<Self> {
        let restart = restart.max(1);
        let vector = || Block::vector(dev, len, Precision::F64);
        Ok(FgmresWorkspace {
            dev: dev.clone(),
            v: (0..=restart).map(|_| vector()).collect::<Result<_>>()?,
            z: (0..restart).map(|_| vector()).collect::<Result<_>>()?,
            w: vector()?,
            scratch: Scratch::new(dev)?,
            hessenberg: vec![0.0; restart * (restart + 1)],
            rotations: vec![(1.0, 0.0); restart],
            g: vec![0.0; restart + 1],
            y: vec![0.0; restart],
            restart,
            info: FgmresInfo {
                iterations: 0,
                relative_residual: 0.0,
                history: Vec::with_capacity(max_iterations),
                converged: false,
            },
        })
    }

    pub fn bytes(&self) -> usize {
        (self.v.len() + self.z.len() + 1) * self.w.len() * 8
    }
}

/// Solves A x = b from the initial guess in x. `precondition` applies z ≈ A⁻¹ r;
/// `project` maps a vector into the space the solution lives in (for Stokes: pressure
/// mean zero) and is applied to every z and to x.
pub fn fgmres<'w, D: VectorKernels + DenseKernels>(
    params: FgmresParams,
    b: &Block<D>,
    x: &mut Block<D>,
    work: &'w mut FgmresWorkspace<D>,
    a: &mut dyn LinOp<D>,
    precondition: &mut dyn LinOp<D>,
    mut project: impl FnMut(&mut Block<D>) -> Result<()>,
) -> std::result::Result<&'w FgmresInfo, FgmresError> {
    let fail = |work: &FgmresWorkspace<D>, failure| FgmresError {
        failure,
        info: work.info.clone(),
    };
    let dev = &work.dev.clone();
    work.info.iterations = 0;
    work.info.relative_residual = 0.0;
    work.info.history.clear();
    work.info.converged = false;
    match run(dev, params, b, x, work, a, precondition, &mut project) {
        Ok(()) if work.info.converged => Ok(&work.info),
        Ok(()) if !work.info.relative_residual.is_finite() => {
            Err(fail(work, FgmresFailure::NotFinite))
        }
        Ok(()) => Err(fail(work, FgmresFailure::NotConverged)),
        Err(e) => Err(fail(work, FgmresFailure::Operator(Box::new(e)))),
    }
}

#[allow(clippy::too_many_arguments)]
fn run<D: VectorKernels + DenseKernels>(
    dev: &D,
    params: FgmresParams,
    b: &Block<D>,
    x: &mut Block<D>,
    work: &mut FgmresWorkspace<D>,
    a: &mut dyn LinOp<D>,
    precondition: &mut dyn LinOp<D>,
    project: &mut impl FnMut(&mut Block<D>) -> Result<()>,
) -> Result<()> {
    let restart = params.restart.clamp(1, work.restart);
    let b_norm = dev.nrm2(b.view())?;
    let info = &mut work.info;
    if b_norm == 0.0 {
        dev.fill(x.view_mut(), 0.0)?;
        info.converged = true;
        return Ok(());
    }
    let FgmresWorkspace {
        v,
        z,
        w,
        scratch,
        hessenberg,
        rotations,
        g,
        y,
        ..
    } = work;
    let rows = restart + 1;
    // The stopping rule as a relative residual.
    let target = super::stopping_threshold(params.rtol, params.atol, b_norm) / b_norm;
    loop {
        // r = b − A x, the first basis vector.
        a.apply(x, w)?;
        dev.copy(b.view(), v[0].view_mut())?;
        dev.axpby(-1.0, w.view(), 1.0, v[0].view_mut())?;
        let beta = dev.nrm2(v[0].view())?;
        info.relative_residual = beta / b_norm;
        if info.relative_residual <= target
            || info.iterations >= params.max_iterations
            || !beta.is_finite()
        {
            info.converged = info.relative_residual <= target;
            return Ok(());
        }
        dev.scale(1.0 / beta, v[0].view_mut())?;
        g.fill(0.0);
        g[0] = beta;
        let mut k = 0;
        for j in 0..restart {
            precondition.apply(&v[j], &mut z[j])?;
            project(&mut z[j])?;
            a.apply(&z[j], w)?;
            // Classical Gram-Schmidt, repeated when the first pass cancelled most of w.
            let h = &mut hessenberg[j * rows..(j + 1) * rows];
            h.fill(0.0);
            let norm = dev.orthogonalize_twice_if_needed(&v[..=j], w, &mut h[..=j], scratch)?;
            h[j + 1] = norm;
            for (i, &(c, s)) in rotations.iter().enumerate().take(j) {
                let (a, b) = (h[i], h[i + 1]);
                h[i] = c * a + s * b;
                h[i + 1] = -s * a + c * b;
            }
            let (a, b) = (h[j], h[j + 1]);
            let radius = a.hypot(b);
            let (c, s) = if radius == 0.0 {
                (1.0, 0.0)
            } else {
                (a / radius, b / radius)
            };
            h[j] = radius;
            h[j + 1] = 0.0;
            rotations[j] = (c, s);
            g[j + 1] = -s * g[j];
            g[j] *= c;
            let breakdown = norm == 0.0;
            if !breakdown {
                dev.copy(w.view(), v[j + 1].view_mut())?;
                dev.scale(1.0 / norm, v[j + 1].view_mut())?;
            }
            k = j + 1;
            info.iterations += 1;
            let estimate = g[j + 1].abs() / b_norm;
            info.history.push(estimate);
            // A non-finite estimate (overflow in the preconditioner) ends the cycle; the
            // true residual computed next reports it.
            if estimate <= target
                || info.iterations >= params.max_iterations
                || breakdown
                || !estimate.is_finite()
            {
                break;
            }
        }
        // Back substitution R y = g, then x += Z y.
        for i in (0..k).rev() {
            let s: f64 = (i + 1..k).map(|l| hessenberg[l * rows + i] * y[l]).sum();
            y[i] = (g[i] - s) / hessenberg[i * rows + i];
        }
        for (zi, &yi) in z.iter().zip(y.iter()).take(k) {
            dev.axpby(yi, zi.view(), 1.0, x.view_mut())?;
        }
        project(x)?;
    }
}
