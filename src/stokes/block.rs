//! Block-triangular preconditioner (docs/mathematics.md §7): δp from −M δp = r_p, then δu from
//! L δu = r_u − Bᵀ δp, each block solved inexactly by three V(3,3) multigrid cycles with
//! weighted Jacobi (weight 0.6 on the pressure mass matrix M, 1.0 on the Laplacian L) and
//! an exact coarsest solve. M stands in for the Schur complement −B L⁻¹ Bᵀ (ν = 1).

use super::assembly::assemble;
use super::cost;
use super::lattice::{StokesHostMatrices, Unknown};
use super::multigrid::{coarse_solve, laplacian_diagonal_inverse, mesh_hierarchy};
use crate::device::stokes::{CoarseSolve, Grid, StokesMatrices, Transfer};
use crate::device::{Block, Data, Layout, StokesDevice, View, ViewMut};
use crate::error::{Error, Result};
use crate::linalg::{v_cycle, BlockKind, Cost, CycleLevels, LinOp};
use crate::precision::Precision;

/// Cycles and smoothing steps of each block solve.
const CYCLES: usize = 3;
const SWEEPS: usize = 3;
/// Jacobi weights: Laplacian, mass matrix.
pub const LAPLACIAN_WEIGHT: f64 = 1.0;
pub const MASS_WEIGHT: f64 = 0.6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Component {
    /// One velocity component, on the Q2 lattice.
    Velocity,
    /// Pressure, on the Q1 nodes.
    Pressure,
}

impl Component {
    fn len(self, g: Grid) -> usize {
        match self {
            Component::Velocity => g.lattice_len(),
            Component::Pressure => g.pressure_len(),
        }
    }

    fn apply<D: StokesDevice>(
        self,
        dev: &D,
        op: &StokesMatrices<D>,
        x: View<'_, D>,
        y: ViewMut<'_, D>,
    ) -> Result<()> {
        match self {
            Component::Velocity => dev.stokes_laplacian(op, x, y),
            Component::Pressure => dev.pressure_stencil(&op.mass, x, y),
        }
    }

    fn apply_cost<D: StokesDevice>(self, op: &StokesMatrices<D>, compute: Precision) -> Cost {
        match self {
            Component::Velocity => cost::laplacian(op, compute),
            Component::Pressure => cost::pressure_stencil(&op.mass, compute),
        }
    }

    /// coarse = Pᵀ fine, or fine += P coarse with `prolong`.
    fn transfer<D: StokesDevice>(
        self,
        dev: &D,
        prolong: bool,
        coarse_n: usize,
        input: View<'_, D>,
        output: ViewMut<'_, D>,
    ) -> Result<()> {
        let kind = match (self, prolong) {
            (Component::Velocity, true) => Transfer::Q2Prolong,
            (Component::Velocity, false) => Transfer::Q2Restrict,
            (Component::Pressure, true) => Transfer::Q1Prolong,
            (Component::Pressure, false) => Transfer::Q1Restrict,
        };
        dev.stokes_transfer(kind, coarse_n, input, output)
    }
}

struct ScalarLevel<D: StokesDevice> {
    d_inv: Data<D>,
    x: Data<D>,
    b: Data<D>,
    r: Data<D>,
}

/// Multigrid for one block: V(3,3) with weighted Jacobi.
struct ScalarMg<D: StokesDevice> {
    component: Component,
    weight: f64,
    /// Every level but the coarsest, finest first; then the coarsest's vectors.
    levels: Vec<ScalarLevel<D>>,
    coarse: CoarseSolve<D>,
    coarse_b: Data<D>,
    coarse_x: Data<D>,
    /// The finest block's residual and A x between cycles.
    residual: Data<D>,
    product: Data<D>,
}

impl<D: StokesDevice> ScalarMg<D> {
    fn new(
        dev: &D,
        component: Component,
        ops: &[StokesHostMatrices],
        weight: f64,
        compute: Precision,
    ) -> Result<Self> {
        let mut levels = Vec::new();
        for op in &ops[..ops.len() - 1] {
            let d_inv = match component {
                Component::Velocity => laplacian_diagonal_inverse(op),
                Component::Pressure => op
                    .mass
                    .coefficients
                    .chunks(9)
                    .map(|row| 1.0 / (row[4] * op.mass.scale))
                    .collect(),
            };
            let len = component.len(op.grid);
            levels.push(ScalarLevel {
                d_inv: Data::from_f64(dev, &d_inv, compute)?,
                x: Data::zeros(dev, len, compute)?,
                b: Data::zeros(dev, len, compute)?,
                r: Data::zeros(dev, len, compute)?,
            });
        }
        let coarsest = &ops[ops.len() - 1];
        let g = coarsest.grid;
        let coarse = match component {
            Component::Velocity => {
                let unknowns: Vec<usize> = (0..g.lattice_len())
                    .filter(|&k| g.is_interior(k % g.m(), k / g.m()))
                    .collect();
                coarse_solve(dev, g.lattice_len(), &unknowns, None, |k, f| {
                    let u = Unknown {
                        part: 0,
                        i: k % g.m(),
                        j: k / g.m(),
                    };
                    coarsest.for_each_in_row(u, |c, v| {
                        if c.part == 0 {
                            f(c.j * g.m() + c.i, v)
                        }
                    })
                })?
            }
            Component::Pressure => {
                let unknowns: Vec<usize> = (0..g.pressure_len()).collect();
                let mass = &coarsest.mass;
                coarse_solve(dev, g.pressure_len(), &unknowns, None, |k, f| {
                    let (i, j) = (k % g.np(), k / g.np());
                    for slot in 0..9 {
                        if let Some((ci, cj)) = mass.column(i, j, slot) {
                            f(cj * g.np() + ci, mass.entry(i, j, slot));
                        }
                    }
                })?
            }
        };
        let (finest, coarsest_len) = (component.len(ops[0].grid), component.len(g));
        Ok(ScalarMg {
            component,
            weight,
            levels,
            coarse,
            coarse_b: Data::zeros(dev, coarsest_len, compute)?,
            coarse_x: Data::zeros(dev, coarsest_len, compute)?,
            residual: Data::zeros(dev, finest, compute)?,
            product: Data::zeros(dev, finest, compute)?,
        })
    }

    /// x ≈ A⁻¹ b by CYCLES V-cycles from x = 0.
    fn solve(
        &mut self,
        dev: &D,
        ops: &[StokesMatrices<D>],
        b: View<'_, D>,
        mut x: ViewMut<'_, D>,
    ) -> Result<()> {
        dev.fill(x.reborrow(), 0.0)?;
        dev.copy(b, self.residual.view_mut())?;
        for cycle in 0..CYCLES {
            if cycle > 0 {
                self.component
                    .apply(dev, &ops[0], x.as_view(), self.product.view_mut())?;
                dev.copy(b, self.residual.view_mut())?;
                dev.axpby(-1.0, self.product.view(), 1.0, self.residual.view_mut())?;
            }
            let correction = if self.levels.is_empty() {
                dev.coarse_solve(&self.coarse, self.residual.view(), self.product.view_mut())?;
                &self.product
            } else {
                dev.copy(self.residual.view(), self.levels[0].b.view_mut())?;
                let mut levels = ScalarCycle { dev, mg: self, ops };
                v_cycle(&mut levels, 0, true)?;
                &self.levels[0].x
            };
            dev.axpby(1.0, correction.view(), 1.0, x.reborrow())?;
        }
        Ok(())
    }

    /// What `solve` costs: CYCLES V(3,3) cycles with the residuals between them.
    fn solve_cost(&self, ops: &[StokesMatrices<D>], compute: Precision) -> Cost {
        let len = self.component.len(ops[0].grid);
        let cycle = if self.levels.is_empty() {
            cost::coarse_solve(&self.coarse, compute)
        } else {
            cost::vectors(2 * len, compute) + self.v_cycle_cost(0, ops, compute)
        };
        let between = self.component.apply_cost(&ops[0], compute)
            + cost::vectors(2 * len, compute)
            + cost::pointwise(len, 3, compute);
        cost::vectors(3 * len, compute)
            + (cycle + cost::pointwise(len, 3, compute)) * CYCLES as f64
            + between * (CYCLES - 1) as f64
    }

    /// What one V(3,3) cycle from level l down costs.
    fn v_cycle_cost(&self, l: usize, ops: &[StokesMatrices<D>], compute: Precision) -> Cost {
        let (component, op) = (self.component, &ops[l]);
        let len = component.len(op.grid);
        let sweep = component.apply_cost(op, compute) + cost::pointwise(len, 4, compute);
        let q2 = component == Component::Velocity;
        let coarser = if l + 1 == ops.len() - 1 {
            cost::coarse_solve(&self.coarse, compute)
        } else {
            self.v_cycle_cost(l + 1, ops, compute)
        };
        cost::vectors(len, compute)
            + sweep * (2 * SWEEPS) as f64
            + component.apply_cost(op, compute)
            + cost::pointwise(len, 3, compute)
            + cost::transfer(op.grid, q2, compute) * 2.0
            + coarser
    }
}

/// A scalar multigrid's levels in one V(3,3) cycle ([`v_cycle`]): levels 0 to
/// `ops.len() - 2` are `mg.levels`, the coarsest is `mg.coarse` with its own blocks.
struct ScalarCycle<'a, D: StokesDevice> {
    dev: &'a D,
    mg: &'a mut ScalarMg<D>,
    ops: &'a [StokesMatrices<D>],
}

impl<D: StokesDevice> ScalarCycle<'_, D> {
    /// Level `l + 1`'s right-hand side and iterate, and level `l`'s residual and iterate.
    fn coarser(&mut self, l: usize) -> (&mut Data<D>, &mut Data<D>, &mut ScalarLevel<D>) {
        let mg = &mut *self.mg;
        if l + 2 == self.ops.len() {
            (&mut mg.coarse_b, &mut mg.coarse_x, &mut mg.levels[l])
        } else {
            let (fine, coarse) = mg.levels.split_at_mut(l + 1);
            let ScalarLevel { b, x, .. } = &mut coarse[0];
            (b, x, &mut fine[l])
        }
    }
}

impl<D: StokesDevice> CycleLevels for ScalarCycle<'_, D> {
    type Error = Error;

    fn depth(&self) -> usize {
        self.ops.len()
    }

    fn pre_smooth(&mut self, l: usize, zero_initial: bool) -> Result<()> {
        let (component, weight) = (self.mg.component, self.mg.weight);
        let level = &mut self.mg.levels[l];
        if zero_initial {
            self.dev.fill(level.x.view_mut(), 0.0)?;
        }
        jacobi(self.dev, component, &self.ops[l], level, weight)
    }

    fn restrict_residual(&mut self, l: usize) -> Result<()> {
        let (dev, component, op) = (self.dev, self.mg.component, &self.ops[l]);
        let nc = self.ops[l + 1].grid.n;
        let (coarse_b, _, level) = self.coarser(l);
        component.apply(dev, op, level.x.view(), level.r.view_mut())?;
        dev.axpby(1.0, level.b.view(), -1.0, level.r.view_mut())?;
        component.transfer(dev, false, nc, level.r.view(), coarse_b.view_mut())
    }

    fn coarse_solve(&mut self) -> Result<()> {
        let mg = &mut *self.mg;
        self.dev
            .coarse_solve(&mg.coarse, mg.coarse_b.view(), mg.coarse_x.view_mut())
    }

    fn prolongate_correction(&mut self, l: usize) -> Result<()> {
        let (dev, component) = (self.dev, self.mg.component);
        let nc = self.ops[l + 1].grid.n;
        let (_, coarse_x, level) = self.coarser(l);
        component.transfer(dev, true, nc, coarse_x.view(), level.x.view_mut())
    }

    fn post_smooth(&mut self, l: usize) -> Result<()> {
        let (component, weight) = (self.mg.component, self.mg.weight);
        jacobi(
            self.dev,
            component,
            &self.ops[l],
            &mut self.mg.levels[l],
            weight,
        )
    }
}

/// SWEEPS steps of x += ω D⁻¹ (b − A x).
fn jacobi<D: StokesDevice>(
    dev: &D,
    component: Component,
    op: &StokesMatrices<D>,
    level: &mut ScalarLevel<D>,
    weight: f64,
) -> Result<()> {
    for _ in 0..SWEEPS {
        component.apply(dev, op, level.x.view(), level.r.view_mut())?;
        dev.scaled_product_add(
            weight,
            level.d_inv.view(),
            level.b.view(),
            level.r.view(),
            level.x.view_mut(),
        )?;
    }
    Ok(())
}

/// The block-triangular preconditioner in a storage precision (f16: f32 arithmetic),
/// between f64 vectors (FGMRES).
pub struct BlockTriangular<D: StokesDevice> {
    dev: D,
    ops: Vec<StokesMatrices<D>>,
    laplacian: ScalarMg<D>,
    mass: ScalarMg<D>,
    r: Block<D>,
    z: Block<D>,
    rhs: Data<D>,
    dp: Data<D>,
    /// What one apply costs.
    apply_cost: Cost,
}

impl<D: StokesDevice> BlockTriangular<D> {
    pub fn new(dev: &D, n: usize, precision: Precision) -> Result<Self> {
        let ops64: Vec<StokesHostMatrices> = mesh_hierarchy(n)?.into_iter().map(assemble).collect();
        let g = ops64[0].grid;
        let compute = precision.compute();
        let laplacian = ScalarMg::new(dev, Component::Velocity, &ops64, LAPLACIAN_WEIGHT, compute)?;
        let mass = ScalarMg::new(dev, Component::Pressure, &ops64, MASS_WEIGHT, compute)?;
        let ops: Vec<StokesMatrices<D>> = ops64
            .iter()
            .map(|op| op.upload(dev, precision))
            .collect::<Result<_>>()?;
        // As `apply` runs: the copies in and out (f64 ↔ compute), the pressure solve and its
        // sign, Bᵀ δp, then per velocity component a copy, an axpby and the solve.
        let (lattice, pressure, flow) = (g.lattice_len(), g.pressure_len(), g.flow_len());
        let apply_cost = Cost {
            flops: 0.0,
            bytes: (2 * flow * (8 + compute.bytes())) as f64,
        } + mass.solve_cost(&ops, compute)
            + cost::pointwise(pressure, 2, compute)
            + cost::vectors(2 * pressure, compute)
            + cost::gradient(&ops[0], compute)
            + (cost::vectors(2 * lattice, compute)
                + cost::pointwise(lattice, 3, compute)
                + laplacian.solve_cost(&ops, compute))
                * 2.0;
        Ok(BlockTriangular {
            laplacian,
            mass,
            ops,
            apply_cost,
            r: Block::vector(dev, g.flow_len(), compute)?,
            z: Block::vector(dev, g.flow_len(), compute)?,
            rhs: Data::zeros(dev, g.lattice_len(), compute)?,
            dp: Data::zeros(dev, g.pressure_len(), compute)?,
            dev: dev.clone(),
        })
    }

    pub fn bytes(&self) -> usize {
        self.ops.iter().map(|o| o.bytes()).sum::<usize>() + 4 * self.r.data.bytes()
    }
}

impl<D: StokesDevice> LinOp<D> for BlockTriangular<D> {
    fn size(&self) -> usize {
        self.ops[0].grid.flow_len()
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

    /// z ≈ P⁻¹ r (f64 vectors).
    fn apply(&mut self, r: &Block<D>, z: &mut Block<D>) -> Result<()> {
        let dev = self.dev.clone();
        let [ux, uy, pp] = self.ops[0].grid.parts();
        dev.copy(r.view(), self.r.view_mut())?;
        // −M δp = r_p.
        self.mass.solve(
            &dev,
            &self.ops,
            self.r.data.slice(pp.clone()),
            self.dp.view_mut(),
        )?;
        dev.scale(-1.0, self.dp.view_mut())?;
        dev.copy(self.dp.view(), self.z.data.slice_mut(pp))?;
        // L δu = r_u − Bᵀ δp, per component (z's velocity parts hold Bᵀ δp first).
        dev.stokes_gradient(&self.ops[0], self.dp.view(), &mut self.z)?;
        for part in [ux, uy] {
            dev.copy(self.r.data.slice(part.clone()), self.rhs.view_mut())?;
            dev.axpby(
                -1.0,
                self.z.data.slice(part.clone()),
                1.0,
                self.rhs.view_mut(),
            )?;
            self.laplacian.solve(
                &dev,
                &self.ops,
                self.rhs.view(),
                self.z.data.slice_mut(part),
            )?;
        }
        dev.copy(self.z.view(), z.view_mut())
    }

    fn cost(&self, _nrhs: usize) -> Cost {
        self.apply_cost
    }
}
