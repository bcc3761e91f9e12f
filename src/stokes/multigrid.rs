//! Monolithic multigrid V(1,1) for the whole Stokes system (docs/mathematics.md §7): FE
//! interpolation for Q2 and Q1, restriction = transpose, coarse operators rediscretised
//! (equal to the Galerkin products for nested spaces), an exact solve on the coarsest mesh,
//! and one of three relaxations: additive Vanka, inexact Braess-Sarazin, Schur-Uzawa.
//!
//! Everything inside runs in the compute precision of S (f64, or f32 with S = f32/f16
//! storage); the caller converts at the boundary (the f64 FGMRES).

use faer::linalg::solvers::DenseSolveCore;
use rayon::prelude::*;

use super::assembly::assemble;
use super::cost;
use super::lattice::{
    gradient_slot, pressure_window, HostPressureRows, StokesHostMatrices, Unknown,
};
use super::transfer::{prolong_flow, restrict_flow};
use super::vanka::{Vanka, VankaForm};
use crate::device::stokes::{CoarseSolve, StokesMatrices};
use crate::device::Layout;
use crate::device::{Block, Data, Device, StokesDevice};
use crate::error::{Error, Result};
use crate::linalg::{v_cycle, BlockKind, Cost, CycleLevels, LinOp};
use crate::precision::Precision;

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

/// The dense inverse of the rows `unknowns` of a system whose entries `row(u, f)` lists
/// (f(column, value) for each stored entry), restricted to those unknowns; bordered by the
/// constant vector on the unknowns from `border_from` on when given (a Lagrange multiplier
/// that fixes the pressure's sum, so any right-hand side is solved consistently).
pub fn coarse_solve<D: Device>(
    dev: &D,
    grid_len: usize,
    unknowns: &[usize],
    border_from: Option<usize>,
    mut row: impl FnMut(usize, &mut dyn FnMut(usize, f64)),
) -> Result<CoarseSolve<D>> {
    let k = unknowns.len();
    let size = k + usize::from(border_from.is_some());
    let mut index = vec![usize::MAX; grid_len];
    for (r, &u) in unknowns.iter().enumerate() {
        index[u] = r;
    }
    let mut dense = faer::Mat::<f64>::zeros(size, size);
    for (r, &u) in unknowns.iter().enumerate() {
        row(u, &mut |column, value| {
            if index[column] != usize::MAX {
                dense[(r, index[column])] += value;
            }
        });
        if border_from.is_some_and(|start| u >= start) {
            dense[(r, k)] = 1.0;
            dense[(k, r)] = 1.0;
        }
    }
    let inv = dense.partial_piv_lu().inverse();
    let inverse: Vec<f64> = (0..size * size)
        .map(|i| inv[(i % size, i / size)])
        .collect();
    let positions: Vec<u32> = unknowns.iter().map(|&u| u as u32).collect();
    Ok(CoarseSolve {
        positions: dev.upload(&positions)?,
        unknowns: k,
        size,
        inverse: Data::from_f64(dev, &inverse, Precision::F64)?,
    })
}

/// The coarsest Stokes solve: interior velocity and all pressure unknowns, bordered.
fn coarse_stokes_solve<D: Device>(dev: &D, op: &StokesHostMatrices) -> Result<CoarseSolve<D>> {
    let g = op.grid;
    let m = g.m();
    let mut unknowns = Vec::new();
    let mut of_index = Vec::new();
    for part in 0..2 {
        for j in 0..m {
            for i in 0..m {
                if g.is_interior(i, j) {
                    let u = Unknown { part, i, j };
                    unknowns.push(u.index(g));
                    of_index.push(u);
                }
            }
        }
    }
    for j in 0..g.np() {
        for i in 0..g.np() {
            let u = Unknown { part: 2, i, j };
            unknowns.push(u.index(g));
            of_index.push(u);
        }
    }
    let lookup: std::collections::HashMap<usize, Unknown> = unknowns
        .iter()
        .copied()
        .zip(of_index.iter().copied())
        .collect();
    coarse_solve(
        dev,
        g.flow_len(),
        &unknowns,
        Some(2 * g.lattice_len()),
        |u, f| op.for_each_in_row(lookup[&u], |column, value| f(column.index(g), value)),
    )
}

/// D⁻¹ = 1/diag(L) on interior lattice nodes, 0 on the boundary.
pub fn laplacian_diagonal_inverse(op: &StokesHostMatrices) -> Vec<f64> {
    let g = op.grid;
    let m = g.m();
    (0..g.lattice_len())
        .map(|k| {
            let (i, j) = (k % m, k / m);
            if g.is_interior(i, j) {
                // The centre of a row's window is its diagonal.
                let row = op.laplacian.row(i, j);
                1.0 / row[row.len() / 2]
            } else {
                0.0
            }
        })
        .collect()
}

/// Ŝ = (1/t) B D⁻¹ Bᵀ as a pressure stencil (5×5 window: B reaches the lattice nodes
/// 2i−2..2i+2, whose Bᵀ rows reach pressure i−2..i+2), stored in units of h². One Jacobi
/// step of the relaxations is then one pressure-sized pass instead of a gradient, two
/// lattice scalings and a divergence.
fn schur_stencil(op: &StokesHostMatrices, d_inv: &[f64], t: f64) -> HostPressureRows {
    let g = op.grid;
    let (m, np) = (g.m(), g.np());
    let mut schur = HostPressureRows::zeros(g, 25);
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

/// A level's relaxation as set up: additive Vanka with its weight, or a Schur-complement
/// relaxation (Braess-Sarazin, or Schur-Uzawa when `uzawa`).
enum LevelRelaxation<D: StokesDevice> {
    Vanka(Vanka<D>, f64),
    Schur {
        params: SchurParams,
        /// D⁻¹ (lattice), in the compute precision.
        d_inv: Data<D>,
        /// Ŝ = (1/t) B D⁻¹ Bᵀ, the (positive) Schur complement, in storage precision.
        schur: crate::device::stokes::PressureRows<D>,
        /// 1/diag(Ŝ), in the compute precision.
        s_diag_inv: Data<D>,
        uzawa: bool,
    },
}

/// One level of the monolithic hierarchy: its matrices, relaxation and block vectors.
struct StokesLevel<D: StokesDevice> {
    op: StokesMatrices<D>,
    smoother: Option<LevelRelaxation<D>>,
    x: Block<D>,
    b: Block<D>,
    r: Block<D>,
    /// Work: a flow vector and three pressure vectors (Schur relaxations).
    work: Block<D>,
    pressure: [Data<D>; 3],
}

/// Monolithic multigrid, one V(1,1) cycle per application, in a storage precision (f16:
/// f32 arithmetic) between f64 vectors (FGMRES).
pub struct MonolithicMg<D: StokesDevice> {
    dev: D,
    precision: Precision,
    levels: Vec<StokesLevel<D>>,
    coarse: CoarseSolve<D>,
    /// Bytes the host set-up operators occupy in the storage precision.
    bytes: usize,
    /// What one V(1,1) cycle costs.
    cycle_cost: Cost,
}

impl<D: StokesDevice> MonolithicMg<D> {
    pub fn new(dev: &D, n: usize, relaxation: Relaxation, precision: Precision) -> Result<Self> {
        let sizes = mesh_hierarchy(n)?;
        let compute = precision.compute();
        let mut levels = Vec::with_capacity(sizes.len());
        let mut coarse = None;
        for (l, &nl) in sizes.iter().enumerate() {
            let op64 = assemble(nl);
            let g = op64.grid;
            let smoother = if l + 1 == sizes.len() {
                coarse = Some(coarse_stokes_solve(dev, &op64)?);
                None
            } else {
                Some(match relaxation {
                    Relaxation::Vanka { form, omega } => {
                        LevelRelaxation::Vanka(Vanka::new(dev, &op64, form, precision)?, omega)
                    }
                    Relaxation::BraessSarazin(params) | Relaxation::SchurUzawa(params) => {
                        let d64 = laplacian_diagonal_inverse(&op64);
                        let schur = schur_stencil(&op64, &d64, params.t);
                        let s_diag_inv: Vec<f64> = schur
                            .coefficients
                            .chunks(25)
                            .map(|row| 1.0 / (row[12] * schur.scale))
                            .collect();
                        LevelRelaxation::Schur {
                            params,
                            d_inv: Data::from_f64(dev, &d64, compute)?,
                            schur: schur.upload(dev, precision)?,
                            s_diag_inv: Data::from_f64(dev, &s_diag_inv, compute)?,
                            uzawa: matches!(relaxation, Relaxation::SchurUzawa(_)),
                        }
                    }
                })
            };
            let flow = || Block::vector(dev, g.flow_len(), compute);
            let pressure = || Data::zeros(dev, g.pressure_len(), compute);
            levels.push(StokesLevel {
                op: op64.upload(dev, precision)?,
                smoother,
                x: flow()?,
                b: flow()?,
                r: flow()?,
                work: flow()?,
                pressure: [pressure()?, pressure()?, pressure()?],
            });
        }
        let bytes = levels
            .iter()
            .map(|l| {
                let vanka = match &l.smoother {
                    Some(LevelRelaxation::Vanka(v, _)) => v.bytes(),
                    _ => 0,
                };
                l.op.bytes() + vanka + 4 * l.x.data.bytes()
            })
            .sum();
        let coarse = coarse.expect("the hierarchy has a coarsest level");
        let cycle_cost = cycle_cost(&levels, &coarse, compute);
        Ok(MonolithicMg {
            dev: dev.clone(),
            precision,
            levels,
            coarse,
            bytes,
            cycle_cost,
        })
    }

    /// Mesh sizes, finest first.
    pub fn sizes(&self) -> Vec<usize> {
        self.levels.iter().map(|l| l.op.grid.n).collect()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The Vanka form of the relaxation, if Vanka.
    pub fn vanka_form(&self) -> Option<VankaForm> {
        match self.levels.first().and_then(|l| l.smoother.as_ref()) {
            Some(LevelRelaxation::Vanka(v, _)) => Some(v.form()),
            _ => None,
        }
    }
}

/// One V(1,1) cycle as `apply` runs it, with the f64 copies in and out.
fn cycle_cost<D: StokesDevice>(
    levels: &[StokesLevel<D>],
    coarse: &CoarseSolve<D>,
    compute: Precision,
) -> Cost {
    let mut total = cost::coarse_solve(coarse, compute);
    for level in &levels[..levels.len() - 1] {
        let g = level.op.grid;
        total = total
            + cost::vectors(g.flow_len(), compute)
            + relax_cost(level, compute) * 2.0
            + cost::stokes_apply(&level.op, true, compute) * 2.0
            + cost::flow_transfer(g, compute) * 2.0;
    }
    let flow = levels[0].op.grid.flow_len() as f64;
    total
        + Cost {
            flops: 0.0,
            bytes: 2.0 * flow * (8 + compute.bytes()) as f64,
        }
}

/// One relaxation as `relax` runs it after its residual.
fn relax_cost<D: StokesDevice>(level: &StokesLevel<D>, compute: Precision) -> Cost {
    let g = level.op.grid;
    let (lattice, pressure) = (g.lattice_len(), g.pressure_len());
    match level.smoother.as_ref().expect("not the coarsest") {
        LevelRelaxation::Vanka(vanka, _) => vanka.relax_cost(),
        LevelRelaxation::Schur {
            params,
            schur,
            uzawa,
            ..
        } => {
            let jacobi = if params.jacobi_steps == 0 {
                cost::vectors(pressure, compute)
            } else {
                cost::pointwise(pressure, 3, compute)
                    + (cost::pressure_stencil(schur, compute)
                        + cost::pointwise(pressure, 4, compute))
                        * (params.jacobi_steps - 1) as f64
            };
            let update = if *uzawa {
                cost::pointwise(lattice, 2, compute) * 2.0 + cost::pointwise(pressure, 2, compute)
            } else {
                cost::gradient(&level.op, compute)
                    + cost::pointwise(lattice, 4, compute) * 2.0
                    + cost::pointwise(pressure, 2, compute)
            };
            cost::pointwise(lattice, 3, compute) * 2.0
                + cost::divergence(&level.op, compute)
                + cost::pointwise(pressure, 2, compute)
                + jacobi
                + update
        }
    }
}

/// The monolithic multigrid's levels in one V(1,1) cycle ([`v_cycle`]), the coarsest
/// solved by `coarse`.
struct MonolithicCycle<'a, D: StokesDevice> {
    dev: &'a D,
    levels: &'a mut [StokesLevel<D>],
    coarse: &'a CoarseSolve<D>,
}

impl<D: StokesDevice> CycleLevels for MonolithicCycle<'_, D> {
    type Error = Error;

    fn depth(&self) -> usize {
        self.levels.len()
    }

    fn pre_smooth(&mut self, l: usize, zero_initial: bool) -> Result<()> {
        let level = &mut self.levels[l];
        if zero_initial {
            self.dev.fill(level.x.view_mut(), 0.0)?;
        }
        relax(self.dev, level, zero_initial)
    }

    fn restrict_residual(&mut self, l: usize) -> Result<()> {
        let (fine, coarse) = self.levels.split_at_mut(l + 1);
        let (level, coarse) = (&mut fine[l], &mut coarse[0]);
        self.dev
            .stokes_apply(&level.op, &level.x, Some(&level.b), &mut level.r)?;
        restrict_flow(self.dev, &level.r, &mut coarse.b, coarse.op.grid)
    }

    fn coarse_solve(&mut self) -> Result<()> {
        let level = self.levels.last_mut().expect("at least one level");
        self.dev
            .coarse_solve(self.coarse, level.b.view(), level.x.view_mut())
    }

    fn prolongate_correction(&mut self, l: usize) -> Result<()> {
        let (fine, coarse) = self.levels.split_at_mut(l + 1);
        let coarse = &coarse[0];
        prolong_flow(self.dev, &coarse.x, &mut fine[l].x, coarse.op.grid)
    }

    fn post_smooth(&mut self, l: usize) -> Result<()> {
        relax(self.dev, &mut self.levels[l], false)
    }
}

/// x += S(b − A x) for the level's relaxation; from a zero x the residual is b itself.
fn relax<D: StokesDevice>(dev: &D, level: &mut StokesLevel<D>, zero_guess: bool) -> Result<()> {
    let StokesLevel {
        op,
        smoother,
        x,
        b,
        r,
        work,
        pressure,
    } = level;
    let r: &Block<D> = if zero_guess {
        b
    } else {
        dev.stokes_apply(op, x, Some(b), r)?;
        r
    };
    match smoother
        .as_mut()
        .expect("relaxation on a non-coarsest level")
    {
        LevelRelaxation::Vanka(vanka, omega) => vanka.relax(dev, r, x, *omega),
        LevelRelaxation::Schur {
            params,
            d_inv,
            schur,
            s_diag_inv,
            uzawa,
        } => schur_relax(
            dev, op, params, d_inv, schur, s_diag_inv, *uzawa, r, x, work, pressure,
        ),
    }
}

/// Braess-Sarazin (inexact, Zulehner) or Schur-Uzawa relaxation (docs/mathematics.md §7),
/// written with the positive Ŝ = (1/t) B D⁻¹ Bᵀ = −S:
/// - Braess-Sarazin: Ŝ δp = (1/t) B D⁻¹ r_u − r_p (Jacobi), δu = (1/t) D⁻¹ (r_u − Bᵀ δp),
///   x += ω (δu, δp);
/// - Schur-Uzawa: δu = (1/t) D⁻¹ r_u, Ŝ δp = B δu − r_p (Jacobi), x += (δu, δp).
#[allow(clippy::too_many_arguments)]
fn schur_relax<D: StokesDevice>(
    dev: &D,
    op: &StokesMatrices<D>,
    params: &SchurParams,
    d_inv: &Data<D>,
    schur: &crate::device::stokes::PressureRows<D>,
    s_diag_inv: &Data<D>,
    uzawa: bool,
    r: &Block<D>,
    x: &mut Block<D>,
    work: &mut Block<D>,
    [rhs, dp, sp]: &mut [Data<D>; 3],
) -> Result<()> {
    let [ux, uy, pp] = op.grid.parts();
    let inv_t = 1.0 / params.t;
    // work_u = (1/t) D⁻¹ r_u; rhs = B work_u − r_p.
    for part in [ux.clone(), uy.clone()] {
        dev.scaled_product(
            inv_t,
            d_inv.view(),
            r.data.slice(part.clone()),
            work.data.slice_mut(part),
        )?;
    }
    dev.stokes_divergence(op, work, rhs.view_mut())?;
    dev.axpby(-1.0, r.data.slice(pp.clone()), 1.0, rhs.view_mut())?;
    // Weighted Jacobi on Ŝ δp = rhs from δp = 0.
    let weight = params.jacobi_weight;
    for step in 0..params.jacobi_steps {
        if step == 0 {
            dev.scaled_product(weight, s_diag_inv.view(), rhs.view(), dp.view_mut())?;
            continue;
        }
        dev.pressure_stencil(schur, dp.view(), sp.view_mut())?;
        dev.scaled_product_add(
            weight,
            s_diag_inv.view(),
            rhs.view(),
            sp.view(),
            dp.view_mut(),
        )?;
    }
    if params.jacobi_steps == 0 {
        dev.fill(dp.view_mut(), 0.0)?;
    }
    if uzawa {
        // δu = (1/t) D⁻¹ r_u, still in `work`.
        for part in [ux, uy] {
            dev.axpby(
                1.0,
                work.data.slice(part.clone()),
                1.0,
                x.data.slice_mut(part),
            )?;
        }
        dev.axpby(1.0, dp.view(), 1.0, x.data.slice_mut(pp))?;
    } else {
        dev.stokes_gradient(op, dp.view(), work)?;
        let scale = params.omega * inv_t;
        for part in [ux, uy] {
            dev.scaled_product_add(
                scale,
                d_inv.view(),
                r.data.slice(part.clone()),
                work.data.slice(part.clone()),
                x.data.slice_mut(part),
            )?;
        }
        dev.axpby(params.omega, dp.view(), 1.0, x.data.slice_mut(pp))?;
    }
    Ok(())
}

impl<D: StokesDevice> LinOp<D> for MonolithicMg<D> {
    fn size(&self) -> usize {
        self.levels[0].op.grid.flow_len()
    }

    fn input(&self) -> BlockKind {
        BlockKind {
            precision: Precision::F64,
            layout: Layout::ColMajor,
        }
    }

    fn output(&self) -> BlockKind {
        self.input()
    }

    fn prepare(&mut self, nrhs: usize) -> Result<()> {
        super::one_vector(nrhs)
    }

    /// z ≈ A⁻¹ r by one V(1,1) cycle from a zero guess (r, z f64).
    fn apply(&mut self, r: &Block<D>, z: &mut Block<D>) -> Result<()> {
        let dev = self.dev.clone();
        dev.copy(r.view(), self.levels[0].b.view_mut())?;
        let mut levels = MonolithicCycle {
            dev: &dev,
            levels: &mut self.levels,
            coarse: &self.coarse,
        };
        v_cycle(&mut levels, 0, true)?;
        dev.copy(self.levels[0].x.view(), z.view_mut())
    }

    fn cost(&self, _nrhs: usize) -> Cost {
        self.cycle_cost
    }
}

/// The precision of the preconditioner's storage.
impl<D: StokesDevice> MonolithicMg<D> {
    pub fn precision(&self) -> Precision {
        self.precision
    }
}
