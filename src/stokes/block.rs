//! Block-triangular preconditioner (SPEC §4.2): δp from −M δp = r_p, then δu from
//! L δu = r_u − Bᵀ δp, each block solved inexactly by three V(3,3) multigrid cycles with
//! weighted Jacobi (weight 0.6 on the pressure mass matrix M, 1.0 on the Laplacian L) and
//! an exact coarsest solve. M stands in for the Schur complement −B L⁻¹ Bᵀ (ν = 1).

use rayon::prelude::*;

use super::assembly::assemble;
use super::lattice::{split, split_mut, Grid, StokesOperator};
use super::multigrid::{laplacian_diagonal_inverse, mesh_hierarchy, DenseSolve};
use super::transfer::{prolong_lattice, prolong_q1, restrict_lattice, restrict_q1};
use crate::backend::cpu::{filled, from_f64_into, to_f64_into};
use crate::error::Result;
use crate::precision::{Real, Stored};
use num_traits::Zero;

/// Cycles and smoothing steps of each block solve.
const CYCLES: usize = 3;
const SWEEPS: usize = 3;
/// Jacobi weights: Laplacian, mass matrix.
pub const LAPLACIAN_WEIGHT: f64 = 1.0;
pub const MASS_WEIGHT: f64 = 0.6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// One velocity component, on the Q2 lattice.
    Velocity,
    /// Pressure, on the Q1 nodes.
    Pressure,
}

impl Block {
    fn len(self, g: Grid) -> usize {
        match self {
            Block::Velocity => g.lattice_len(),
            Block::Pressure => g.pressure_len(),
        }
    }

    fn apply<S: Stored>(self, op: &StokesOperator<S>, x: &[S::Compute], y: &mut [S::Compute]) {
        match self {
            Block::Velocity => op.apply_laplacian(x, y),
            Block::Pressure => op.apply_mass(x, y),
        }
    }
}

struct ScalarLevel<T> {
    d_inv: Vec<T>,
    x: Vec<T>,
    b: Vec<T>,
    r: Vec<T>,
}

/// Multigrid for one block: V(3,3) with weighted Jacobi.
struct ScalarMg<T> {
    block: Block,
    weight: T,
    levels: Vec<ScalarLevel<T>>,
    coarse: DenseSolve,
    /// The finest block's residual and A x between cycles (allocated once).
    residual: Vec<T>,
    product: Vec<T>,
}

impl<T: Real> ScalarMg<T> {
    fn new(block: Block, ops: &[StokesOperator<f64>], weight: f64) -> Self {
        let mut levels = Vec::new();
        for op in &ops[..ops.len() - 1] {
            let d_inv = match block {
                Block::Velocity => laplacian_diagonal_inverse(op),
                Block::Pressure => op
                    .mass
                    .coefficients
                    .chunks(9)
                    .map(|row| T::from_f64(1.0 / (row[4] * op.mass.scale)))
                    .collect(),
            };
            let len = block.len(op.grid);
            levels.push(ScalarLevel {
                d_inv,
                x: filled(len, T::zero()),
                b: filled(len, T::zero()),
                r: filled(len, T::zero()),
            });
        }
        let coarsest = &ops[ops.len() - 1];
        let g = coarsest.grid;
        let positions: Vec<usize> = match block {
            Block::Velocity => (0..g.lattice_len())
                .filter(|&k| g.is_interior(k % g.m(), k / g.m()))
                .collect(),
            Block::Pressure => (0..g.pressure_len()).collect(),
        };
        let coarse = DenseSolve::new(block.len(g), positions, None, |x, y| {
            block.apply(coarsest, x, y)
        });
        let finest = block.len(ops[0].grid);
        ScalarMg {
            block,
            weight: T::from_f64(weight),
            levels,
            coarse,
            residual: filled(finest, T::zero()),
            product: filled(finest, T::zero()),
        }
    }

    /// x ≈ A⁻¹ b by CYCLES V-cycles from x = 0.
    fn solve<S: Stored<Compute = T>>(&mut self, ops: &[StokesOperator<S>], b: &[T], x: &mut [T]) {
        x.par_iter_mut().for_each(|v| *v = T::zero());
        self.residual.copy_from_slice(b);
        for cycle in 0..CYCLES {
            if cycle > 0 {
                self.block.apply(&ops[0], x, &mut self.product);
                self.residual
                    .par_iter_mut()
                    .zip(b.par_iter().zip(self.product.par_iter()))
                    .for_each(|(r, (&b, &a))| *r = b - a);
            }
            let correction = if self.levels.is_empty() {
                self.coarse.solve(&self.residual, &mut self.product);
                &self.product
            } else {
                self.levels[0].b.copy_from_slice(&self.residual);
                self.v_cycle(0, ops);
                &self.levels[0].x
            };
            x.par_iter_mut()
                .zip(correction.par_iter())
                .for_each(|(x, &c)| *x = *x + c);
        }
    }

    /// One V(3,3) cycle on level l from x = 0.
    fn v_cycle<S: Stored<Compute = T>>(&mut self, l: usize, ops: &[StokesOperator<S>]) {
        let (block, weight) = (self.block, self.weight);
        let op = &ops[l];
        let nc = ops[l + 1].grid.n;
        {
            let level = &mut self.levels[l];
            level.x.iter_mut().for_each(|v| *v = T::zero());
            jacobi(block, op, level, weight);
            block.apply(op, &level.x, &mut level.r);
            let ScalarLevel { b, r, .. } = level;
            r.iter_mut().zip(b.iter()).for_each(|(r, &b)| *r = b - *r);
        }
        let (fine, coarse_levels) = self.levels.split_at_mut(l + 1);
        let fine = &mut fine[l];
        if l + 1 == ops.len() - 1 {
            let mut b = vec![T::zero(); block.len(ops[l + 1].grid)];
            let mut x = b.clone();
            restrict(block, &fine.r, &mut b, nc);
            self.coarse.solve(&b, &mut x);
            prolong(block, &x, &mut fine.x, nc);
        } else {
            restrict(block, &fine.r, &mut coarse_levels[0].b, nc);
            self.v_cycle(l + 1, ops);
            let (fine, coarse_levels) = self.levels.split_at_mut(l + 1);
            prolong(block, &coarse_levels[0].x, &mut fine[l].x, nc);
        }
        jacobi(block, op, &mut self.levels[l], weight);
    }
}

/// SWEEPS steps of x += ω D⁻¹ (b − A x).
fn jacobi<S: Stored>(
    block: Block,
    op: &StokesOperator<S>,
    level: &mut ScalarLevel<S::Compute>,
    weight: S::Compute,
) {
    for _ in 0..SWEEPS {
        block.apply(op, &level.x, &mut level.r);
        level
            .x
            .iter_mut()
            .zip(level.r.iter().zip(level.b.iter().zip(&level.d_inv)))
            .for_each(|(x, (&ax, (&b, &d)))| *x = *x + weight * d * (b - ax));
    }
}

fn restrict<T: Real>(block: Block, fine: &[T], coarse: &mut [T], nc: usize) {
    match block {
        Block::Velocity => restrict_lattice(fine, coarse, nc),
        Block::Pressure => restrict_q1(fine, coarse, nc),
    }
}

fn prolong<T: Real>(block: Block, coarse: &[T], fine: &mut [T], nc: usize) {
    match block {
        Block::Velocity => prolong_lattice(coarse, fine, nc),
        Block::Pressure => prolong_q1(coarse, fine, nc),
    }
}

/// The block-triangular preconditioner in the compute precision of S.
pub struct BlockTriangular<S: Stored> {
    ops: Vec<StokesOperator<S>>,
    laplacian: ScalarMg<S::Compute>,
    mass: ScalarMg<S::Compute>,
    r: Vec<S::Compute>,
    z: Vec<S::Compute>,
    rhs: Vec<S::Compute>,
}

impl<S: Stored> BlockTriangular<S> {
    pub fn new(n: usize) -> Result<Self> {
        let ops64: Vec<StokesOperator<f64>> =
            mesh_hierarchy(n)?.into_iter().map(assemble).collect();
        let g = ops64[0].grid;
        let zero = S::Compute::zero();
        Ok(BlockTriangular {
            laplacian: ScalarMg::new(Block::Velocity, &ops64, LAPLACIAN_WEIGHT),
            mass: ScalarMg::new(Block::Pressure, &ops64, MASS_WEIGHT),
            ops: ops64.iter().map(|op| op.convert()).collect(),
            r: filled(g.flow_len(), zero),
            z: filled(g.flow_len(), zero),
            rhs: filled(g.lattice_len(), zero),
        })
    }

    pub fn bytes(&self) -> usize {
        self.ops.iter().map(|o| o.bytes()).sum::<usize>()
            + 4 * self.r.len() * std::mem::size_of::<S::Compute>()
    }

    /// z ≈ P⁻¹ r.
    pub fn apply(&mut self, r: &[f64], z: &mut [f64]) {
        let g = self.ops[0].grid;
        from_f64_into(r, &mut self.r);
        let (rx, ry, rp) = split(&self.r, g);
        let (zx, zy, zp) = split_mut(&mut self.z, g);
        // −M δp = r_p.
        self.mass.solve(&self.ops, rp, zp);
        zp.iter_mut().for_each(|v| *v = -*v);
        // L δu = r_u − Bᵀ δp, per component (zx, zy hold Bᵀ δp first).
        self.ops[0].apply_gradient(zp, zx, zy);
        for (rc, zc) in [(rx, zx), (ry, zy)] {
            self.rhs
                .par_iter_mut()
                .zip(rc.par_iter().zip(zc.par_iter()))
                .for_each(|(b, (&r, &gp))| *b = r - gp);
            self.laplacian.solve(&self.ops, &self.rhs, zc);
        }
        to_f64_into(&self.z, z);
    }
}
