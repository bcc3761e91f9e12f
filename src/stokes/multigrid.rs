//! Monolithic multigrid V(1,1) for the whole Stokes system (SPEC §4.2): FE interpolation
//! for Q2 and Q1, restriction = transpose, coarse operators rediscretised (equal to the
//! Galerkin products for nested spaces), an exact solve on the coarsest mesh, and one of
//! three relaxations: additive Vanka, inexact Braess-Sarazin, Schur-Uzawa.
//!
//! Everything inside runs in the compute precision of S (f64, or f32 with S = f32/f16
//! storage); the caller converts at the boundary (the f64 FGMRES).

use faer::linalg::solvers::DenseSolveCore;
use num_traits::Zero;
use rayon::prelude::*;

use super::assembly::assemble;
use super::lattice::{
    gradient_slot, pressure_window, split, split_mut, PressureRows, StokesOperator,
};
use super::transfer::{prolong_flow, restrict_flow};
use super::vanka::{Vanka, VankaForm};
use crate::backend::cpu::{filled, from_f64_into, to_f64_into};
use crate::error::{Error, Result};
use crate::precision::{Real, Stored};

/// Largest coarsest mesh (cells per direction) whose dense solve we accept.
pub const MAX_COARSEST: usize = 8;

/// The meshes of a hierarchy for n cells per direction, finest first: halve while n is
/// even and the half still has at least 4 cells.
pub fn mesh_hierarchy(n: usize) -> Result<Vec<usize>> {
    if n < 2 {
        return Err(Error::InvalidInput(format!(
            "n = {n}: the Stokes mesh needs at least 2 cells per direction"
        )));
    }
    let mut sizes = vec![n];
    while sizes[sizes.len() - 1] % 2 == 0 && sizes[sizes.len() - 1] / 2 >= 4 {
        let next = sizes[sizes.len() - 1] / 2;
        sizes.push(next);
    }
    let coarsest = sizes[sizes.len() - 1];
    if coarsest > MAX_COARSEST {
        return Err(Error::InvalidInput(format!(
            "n = {n} coarsens to a {coarsest}×{coarsest} mesh, too large for the direct coarse solve; use n = n0·2^j with n0 ≤ {MAX_COARSEST} (e.g. {})",
            n.next_power_of_two()
        )));
    }
    Ok(sizes)
}

/// Parameters of the Braess-Sarazin and Schur-Uzawa relaxations: L ≈ t·D, the outer
/// damping ω, and weighted Jacobi on the Schur complement S = −(1/t) B D⁻¹ Bᵀ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchurParams {
    pub t: f64,
    pub omega: f64,
    pub jacobi_steps: usize,
    pub jacobi_weight: f64,
}

/// The relaxation of a monolithic multigrid.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Relaxation {
    /// Additive Vanka with damping ω.
    Vanka {
        form: VankaForm,
        omega: f64,
    },
    BraessSarazin(SchurParams),
    SchurUzawa(SchurParams),
}

/// An exact solve of a small system by its dense inverse: the unknowns sit at `positions`
/// of a flat vector. With `pressure_start`, positions from there on are pressure and the
/// system is bordered by the constant-pressure vector (a Lagrange multiplier), which fixes
/// the pressure's sum to zero and solves consistently for any right-hand side.
pub struct DenseSolve {
    positions: Vec<usize>,
    inverse: Vec<f64>,
    size: usize,
}

impl DenseSolve {
    /// `apply(x, y)`: y = A x on flat vectors of length `len`.
    pub fn new(
        len: usize,
        positions: Vec<usize>,
        pressure_start: Option<usize>,
        mut apply: impl FnMut(&[f64], &mut [f64]),
    ) -> Self {
        let k = positions.len();
        let size = k + usize::from(pressure_start.is_some());
        let mut dense = faer::Mat::<f64>::zeros(size, size);
        let (mut unit, mut column) = (vec![0.0; len], vec![0.0; len]);
        for (c, &pc) in positions.iter().enumerate() {
            unit[pc] = 1.0;
            apply(&unit, &mut column);
            unit[pc] = 0.0;
            for (r, &pr) in positions.iter().enumerate() {
                dense[(r, c)] = column[pr];
            }
        }
        if let Some(start) = pressure_start {
            for (r, &p) in positions.iter().enumerate() {
                if p >= start {
                    dense[(r, k)] = 1.0;
                    dense[(k, r)] = 1.0;
                }
            }
        }
        let inv = dense.partial_piv_lu().inverse();
        let inverse = (0..size * size)
            .map(|i| inv[(i % size, i / size)])
            .collect();
        DenseSolve {
            positions,
            inverse,
            size,
        }
    }

    /// x = A⁻¹ b at the unknowns, 0 elsewhere.
    pub fn solve<T: Real>(&self, b: &[T], x: &mut [T]) {
        x.iter_mut().for_each(|v| *v = T::zero());
        let rhs: Vec<f64> = self
            .positions
            .iter()
            .map(|&p| b[p].to_f64())
            .chain(std::iter::repeat_n(0.0, self.size - self.positions.len()))
            .collect();
        for (r, &p) in self.positions.iter().enumerate() {
            let v: f64 = (0..self.size)
                .map(|c| self.inverse[c * self.size + r] * rhs[c])
                .sum();
            x[p] = T::from_f64(v);
        }
    }
}

/// The coarsest Stokes solve: interior velocity and all pressure unknowns, bordered.
fn coarse_stokes_solve(op: &StokesOperator<f64>) -> DenseSolve {
    let g = op.grid;
    let (m, len) = (g.m(), g.lattice_len());
    let mut positions = Vec::new();
    for c in 0..2 {
        for j in 0..m {
            for i in 0..m {
                if g.is_interior(i, j) {
                    positions.push(c * len + j * m + i);
                }
            }
        }
    }
    positions.extend(2 * len..g.flow_len());
    DenseSolve::new(g.flow_len(), positions, Some(2 * len), |x, y| {
        op.apply(x, y)
    })
}

/// D⁻¹ = 1/diag(L) on interior lattice nodes, 0 on the boundary.
pub fn laplacian_diagonal_inverse<T: Real>(op: &StokesOperator<f64>) -> Vec<T> {
    let g = op.grid;
    let m = g.m();
    (0..g.lattice_len())
        .map(|k| {
            let (i, j) = (k % m, k / m);
            if g.is_interior(i, j) {
                // The centre of a row's window is its diagonal.
                let row = op.laplacian.row(i, j);
                T::from_f64(1.0 / row[row.len() / 2])
            } else {
                T::zero()
            }
        })
        .collect()
}

/// Ŝ = (1/t) B D⁻¹ Bᵀ as a pressure stencil (5×5 window: B reaches the lattice nodes
/// 2i−2..2i+2, whose Bᵀ rows reach pressure i−2..i+2), stored in units of h². One Jacobi
/// step of the relaxations is then one pressure-sized pass instead of a gradient, two
/// lattice scalings and a divergence.
fn schur_stencil(op: &StokesOperator<f64>, d_inv: &[f64], t: f64) -> PressureRows<f64> {
    let g = op.grid;
    let (m, np) = (g.m(), g.np());
    let mut schur = PressureRows::zeros(g, 25);
    schur
        .coefficients
        .par_chunks_mut(25)
        .enumerate()
        .for_each(|(k, row)| {
            let (pi, pj) = (k % np, k / np);
            for c in 0..2 {
                for slot in 0..25 {
                    let i = 2 * pi as isize - 2 + (slot % 5) as isize;
                    let j = 2 * pj as isize - 2 + (slot / 5) as isize;
                    if i <= 0 || j <= 0 || i >= m as isize - 1 || j >= m as isize - 1 {
                        continue;
                    }
                    let (i, j) = (i as usize, j as usize);
                    let b = op.divergence[c].entry(pi, pj, slot);
                    let bd = b * d_inv[j * m + i] / t;
                    let ((qi0, w), (qj0, h)) = (pressure_window(i), pressure_window(j));
                    for dq in 0..h {
                        for di in 0..w {
                            let (qi, qj) =
                                ((qi0 + di as isize) as usize, (qj0 + dq as isize) as usize);
                            let gslot = gradient_slot(i, j, qi, qj).expect("in the window");
                            let target = (qj + 2 - pj) * 5 + (qi + 2 - pi);
                            row[target] += bd * op.gradient[c].entry(i, j, gslot);
                        }
                    }
                }
            }
        });
    let n = g.n as f64;
    schur.rescale(n * n);
    schur
}

enum Smoother<S: Stored> {
    Vanka(Vanka<S>, S::Compute),
    Schur {
        params: SchurParams,
        /// D⁻¹ (lattice).
        d_inv: Vec<S::Compute>,
        /// Ŝ = (1/t) B D⁻¹ Bᵀ, the (positive) Schur complement.
        schur: PressureRows<S>,
        /// 1/diag(Ŝ).
        s_diag_inv: Vec<S::Compute>,
        uzawa: bool,
    },
}

struct Level<S: Stored> {
    op: StokesOperator<S>,
    smoother: Option<Smoother<S>>,
    x: Vec<S::Compute>,
    b: Vec<S::Compute>,
    r: Vec<S::Compute>,
    /// Work: a flow vector and three pressure vectors (Schur relaxations).
    work: Vec<S::Compute>,
    p1: Vec<S::Compute>,
    p2: Vec<S::Compute>,
    p3: Vec<S::Compute>,
}

/// Monolithic multigrid, one V(1,1) cycle per application.
pub struct MonolithicMg<S: Stored> {
    levels: Vec<Level<S>>,
    coarse: DenseSolve,
}

impl<S: Stored> MonolithicMg<S> {
    pub fn new(n: usize, relaxation: Relaxation) -> Result<Self> {
        let sizes = mesh_hierarchy(n)?;
        let mut levels = Vec::with_capacity(sizes.len());
        let mut coarse = None;
        for (l, &nl) in sizes.iter().enumerate() {
            let op64 = assemble(nl);
            let g = op64.grid;
            let smoother = if l + 1 == sizes.len() {
                coarse = Some(coarse_stokes_solve(&op64));
                None
            } else {
                Some(match relaxation {
                    Relaxation::Vanka { form, omega } => {
                        Smoother::Vanka(Vanka::new(&op64, form), S::Compute::from_f64(omega))
                    }
                    Relaxation::BraessSarazin(params) | Relaxation::SchurUzawa(params) => {
                        let d64: Vec<f64> = laplacian_diagonal_inverse(&op64);
                        let schur = schur_stencil(&op64, &d64, params.t);
                        let s_diag_inv = schur
                            .coefficients
                            .chunks(25)
                            .map(|row| S::Compute::from_f64(1.0 / (row[12] * schur.scale)))
                            .collect();
                        Smoother::Schur {
                            params,
                            d_inv: d64.iter().map(|&d| S::Compute::from_f64(d)).collect(),
                            schur: schur.convert(),
                            s_diag_inv,
                            uzawa: matches!(relaxation, Relaxation::SchurUzawa(_)),
                        }
                    }
                })
            };
            let zero = S::Compute::zero();
            let (flow, pressure) = (g.flow_len(), g.pressure_len());
            levels.push(Level {
                op: op64.convert(),
                smoother,
                x: filled(flow, zero),
                b: filled(flow, zero),
                r: filled(flow, zero),
                work: filled(flow, zero),
                p1: filled(pressure, zero),
                p2: filled(pressure, zero),
                p3: filled(pressure, zero),
            });
        }
        Ok(MonolithicMg {
            levels,
            coarse: coarse.expect("the hierarchy has a coarsest level"),
        })
    }

    /// Mesh sizes, finest first.
    pub fn sizes(&self) -> Vec<usize> {
        self.levels.iter().map(|l| l.op.grid.n).collect()
    }

    pub fn bytes(&self) -> usize {
        self.levels
            .iter()
            .map(|l| {
                let vanka = match &l.smoother {
                    Some(Smoother::Vanka(v, _)) => v.bytes(),
                    _ => 0,
                };
                l.op.bytes() + vanka + 4 * l.x.len() * std::mem::size_of::<S::Compute>()
            })
            .sum()
    }

    /// z ≈ A⁻¹ r by one V(1,1) cycle from a zero guess.
    pub fn apply(&mut self, r: &[f64], z: &mut [f64]) {
        from_f64_into(r, &mut self.levels[0].b);
        cycle(&mut self.levels, &self.coarse);
        to_f64_into(&self.levels[0].x, z);
    }
}

/// One V(1,1) cycle on levels[0] (x from zero), recursing to the coarsest.
fn cycle<S: Stored>(levels: &mut [Level<S>], coarse: &DenseSolve) {
    let (level, rest) = levels.split_first_mut().expect("at least one level");
    if rest.is_empty() {
        coarse.solve(&level.b, &mut level.x);
        return;
    }
    level.x.iter_mut().for_each(|v| *v = S::Compute::zero());
    relax(level, true);
    level.op.residual(&level.b, &level.x, &mut level.r);
    restrict_flow(&level.r, &mut rest[0].b, rest[0].op.grid);
    cycle(rest, coarse);
    prolong_flow(&rest[0].x, &mut level.x, rest[0].op.grid);
    relax(level, false);
}

/// x += S(b − A x) for the level's relaxation; from a zero x the residual is b itself.
fn relax<S: Stored>(level: &mut Level<S>, zero_guess: bool) {
    let Level {
        op,
        smoother,
        x,
        b,
        r,
        work,
        p1,
        p2,
        p3,
    } = level;
    let r: &[S::Compute] = if zero_guess {
        b
    } else {
        op.residual(b, x, r);
        r
    };
    match smoother
        .as_mut()
        .expect("relaxation on a non-coarsest level")
    {
        Smoother::Vanka(vanka, omega) => vanka.relax(r, x, *omega),
        Smoother::Schur {
            params,
            d_inv,
            schur,
            s_diag_inv,
            uzawa,
        } => schur_relax(
            op,
            params,
            d_inv,
            schur,
            s_diag_inv,
            *uzawa,
            r,
            x,
            work,
            [p1, p2, p3],
        ),
    }
}

/// Braess-Sarazin (inexact, Zulehner) or Schur-Uzawa relaxation (SPEC §4.2), written with
/// the positive Ŝ = (1/t) B D⁻¹ Bᵀ = −S:
/// - Braess-Sarazin: Ŝ δp = (1/t) B D⁻¹ r_u − r_p (Jacobi), δu = (1/t) D⁻¹ (r_u − Bᵀ δp),
///   x += ω (δu, δp);
/// - Schur-Uzawa: δu = (1/t) D⁻¹ r_u, Ŝ δp = B δu − r_p (Jacobi), x += (δu, δp).
#[allow(clippy::too_many_arguments)]
fn schur_relax<S: Stored>(
    op: &StokesOperator<S>,
    params: &SchurParams,
    d_inv: &[S::Compute],
    schur: &PressureRows<S>,
    s_diag_inv: &[S::Compute],
    uzawa: bool,
    r: &[S::Compute],
    x: &mut [S::Compute],
    work: &mut [S::Compute],
    [rhs, dp, sp]: [&mut Vec<S::Compute>; 3],
) {
    let g = op.grid;
    let c = |v: f64| S::Compute::from_f64(v);
    let inv_t = c(1.0 / params.t);
    let (rx, ry, rp) = split(r, g);
    // work_u = (1/t) D⁻¹ r_u; rhs = B work_u − r_p.
    {
        let (wx, wy, _) = split_mut(work, g);
        scale_into(wx, rx, d_inv, inv_t);
        scale_into(wy, ry, d_inv, inv_t);
    }
    {
        let (wx, wy, _) = split(work, g);
        op.apply_divergence(wx, wy, rhs);
    }
    rhs.iter_mut().zip(rp).for_each(|(v, &r)| *v = *v - r);
    // Weighted Jacobi on Ŝ δp = rhs from δp = 0.
    let weight = c(params.jacobi_weight);
    for step in 0..params.jacobi_steps {
        if step == 0 {
            dp.iter_mut()
                .zip(rhs.iter().zip(s_diag_inv))
                .for_each(|(d, (&b, &s))| *d = weight * s * b);
            continue;
        }
        schur.apply(dp, sp);
        dp.iter_mut()
            .zip(rhs.iter().zip(sp.iter().zip(s_diag_inv)))
            .for_each(|(d, (&b, (&a, &s)))| *d = *d + weight * s * (b - a));
    }
    if params.jacobi_steps == 0 {
        dp.iter_mut().for_each(|d| *d = S::Compute::zero());
    }
    let (xx, xy, xp) = split_mut(x, g);
    if uzawa {
        // δu = (1/t) D⁻¹ r_u, still in `work`.
        let (wx, wy, _) = split(work, g);
        for (xc, wc) in [(xx, wx), (xy, wy)] {
            xc.par_iter_mut()
                .zip(wc.par_iter())
                .for_each(|(xv, &w)| *xv = *xv + w);
        }
        xp.iter_mut().zip(dp.iter()).for_each(|(p, &d)| *p = *p + d);
    } else {
        let omega = c(params.omega);
        let (wx, wy, _) = split_mut(work, g);
        op.apply_gradient(dp, wx, wy);
        let scale = omega * inv_t;
        for (xc, (gc, rc)) in [(xx, (&*wx, rx)), (xy, (&*wy, ry))] {
            xc.par_iter_mut()
                .zip(gc.par_iter().zip(rc.par_iter().zip(d_inv.par_iter())))
                .for_each(|(xv, (&gv, (&rv, &d)))| *xv = *xv + scale * d * (rv - gv));
        }
        xp.iter_mut()
            .zip(dp.iter())
            .for_each(|(p, &d)| *p = *p + omega * d);
    }
}

/// out = scale · d ∘ r.
fn scale_into<T: Real>(out: &mut [T], r: &[T], d: &[T], scale: T) {
    out.par_iter_mut()
        .zip(r.par_iter().zip(d.par_iter()))
        .for_each(|(o, (&rv, &dv))| *o = scale * dv * rv);
}
