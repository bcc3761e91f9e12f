//! Poisson operators on 2D meshes with boundary data (docs/mathematics.md §1): the refined
//! domains (flow around a square, Gmsh meshes) and any mesh with `[boundary]`. Loads carry
//! the Neumann term and the Dirichlet lifting, nodal solutions the Dirichlet values, a pure
//! Neumann problem's solution is shifted to mean zero, and errors are computed by
//! quadrature on the domain. (The unit square and cube with u = 0 keep the block-of-modes
//! path of [`crate::fem::ModeBasis`].)

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::fem::{
    assemble_stiffness, boundary_load, dirichlet_values, integral, l2_error, neumann_loads,
    node_weights, BoundaryData, ColumnReport, Conditions, Dofs, Exact, PINNED_NODE,
};
use crate::mesh::{BoundarySpec, BoundaryValue, Mesh2d};
use crate::sparse::Csr;

/// The load beyond which a pure Neumann right-hand side from a file counts as
/// incompatible: Σ_i b_i relative to Σ_i |b_i|. Interpolated data (f_h, g_h) are
/// compatible only up to the discretisation error, so less is projected away (and logged);
/// this much means data that cannot balance (a flux left out, a sign wrong).
const INCOMPATIBLE: f64 = 0.1;

/// The boundary conditions of one operator and what applying them needs.
pub struct BoundaryProblem {
    conditions: Conditions,
    /// The value of every part (Dirichlet values from the file: [`BoundaryValue::Input`]).
    values: Vec<BoundaryValue>,
    /// w_i = ∫ φ_i at every node, and |Ω| = Σ w_i.
    weights: Vec<f64>,
    area: f64,
    /// The stiffness matrix over all nodes: lifts given Dirichlet values.
    full: Csr<f64>,
    /// The nodes on Dirichlet parts in node order: the entries of the dataset `dirichlet`.
    pub dirichlet_nodes: Vec<u32>,
    /// The nodes a right-hand-side file's row holds, in node order: the nodes off the
    /// Dirichlet parts (every node of a pure Neumann problem).
    pub load_nodes: Vec<u32>,
    /// ∫_{Γ_N} g_N φ_i at every node for the parts' constant fluxes: added to file rows.
    constant_fluxes: Vec<f64>,
}

/// The data of a column: from its exact solution, or the parts' values (and the file's
/// Dirichlet values, one vector per Dirichlet node).
enum Data<'a> {
    Exact(&'a Exact),
    Given(Option<&'a [f64]>),
}

impl BoundaryProblem {
    /// The conditions of `spec` on `mesh` (whose Dirichlet nodes they already marked);
    /// without a spec, u = 0 on every part.
    pub fn new(mesh: &Mesh2d, spec: Option<&BoundarySpec>) -> Result<Self> {
        let parts = mesh.boundary.names.len();
        let (conditions, values) = match spec {
            Some(s) => (s.conditions(), s.parts.iter().map(|p| p.value).collect()),
            None => (
                Conditions::dirichlet(mesh),
                vec![BoundaryValue::Constant(0.0); parts],
            ),
        };
        let weights = node_weights(mesh);
        let area = weights.iter().sum();
        let mut all = mesh.clone();
        all.on_boundary.iter_mut().for_each(|b| *b = false);
        let (full, _) = assemble_stiffness(&all)?;
        let on_dirichlet = conditions.on_dirichlet_parts(mesh);
        let dirichlet_nodes = (0..mesh.num_nodes() as u32)
            .filter(|&v| on_dirichlet[v as usize])
            .collect();
        let load_nodes = (0..mesh.num_nodes() as u32)
            .filter(|&v| !on_dirichlet[v as usize])
            .collect();
        let flux = |part: u16, _: [f64; 2], _: [f64; 2]| match values[part as usize] {
            BoundaryValue::Constant(v) => v,
            BoundaryValue::Input => 0.0,
        };
        let none = |_: u16, _: [f64; 2]| 0.0;
        let constant_fluxes = neumann_loads(
            mesh,
            &conditions,
            &BoundaryData {
                dirichlet: &none,
                neumann: &flux,
            },
        );
        Ok(BoundaryProblem {
            conditions,
            values,
            weights,
            area,
            full,
            dirichlet_nodes,
            load_nodes,
            constant_fluxes,
        })
    }

    fn pure_neumann(&self) -> bool {
        self.conditions.is_pure_neumann()
    }

    /// g_D at every node for one column.
    fn dirichlet(&self, mesh: &Mesh2d, data: &Data<'_>) -> Vec<f64> {
        match data {
            Data::Exact(exact) => {
                let d = |_: u16, x: [f64; 2]| exact.u(&x);
                let n = |_: u16, _: [f64; 2], _: [f64; 2]| 0.0;
                let data = BoundaryData {
                    dirichlet: &d,
                    neumann: &n,
                };
                dirichlet_values(mesh, &self.conditions, &data)
            }
            Data::Given(Some(file)) => {
                let mut g = vec![0.0; mesh.num_nodes()];
                for (&v, &value) in self.dirichlet_nodes.iter().zip(file.iter()) {
                    g[v as usize] = value;
                }
                g
            }
            Data::Given(None) => {
                let d = |part: u16, _: [f64; 2]| self.constant(part);
                let n = |_: u16, _: [f64; 2], _: [f64; 2]| 0.0;
                let data = BoundaryData {
                    dirichlet: &d,
                    neumann: &n,
                };
                dirichlet_values(mesh, &self.conditions, &data)
            }
        }
    }

    fn constant(&self, part: u16) -> f64 {
        match self.values[part as usize] {
            BoundaryValue::Constant(v) => v,
            BoundaryValue::Input => 0.0,
        }
    }

    /// The loads of manufactured columns (f, g_D = u and g_N = ∇u·n from the exact
    /// solution), unknowns × columns, and g_D at every node per column.
    pub fn manufactured(
        &self,
        mesh: &Mesh2d,
        dofs: &Dofs,
        exact: &[Exact],
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let mut b = Vec::with_capacity(dofs.len() * exact.len());
        let mut g = Vec::with_capacity(mesh.num_nodes() * exact.len());
        for e in exact {
            let d = |_: u16, x: [f64; 2]| e.u(&x);
            let n = |_: u16, x: [f64; 2], normal: [f64; 2]| {
                let grad = e.gradient(&x);
                grad[0] * normal[0] + grad[1] * normal[1]
            };
            let data = BoundaryData {
                dirichlet: &d,
                neumann: &n,
            };
            b.extend(boundary_load(
                mesh,
                dofs,
                &self.conditions,
                |x| e.f(x),
                &data,
            )?);
            g.extend(self.dirichlet(mesh, &Data::Exact(e)));
        }
        Ok((b, g))
    }

    /// The loads of columns read from a file (`rows`: load-node values, columns one after
    /// another) with the parts' constant Dirichlet values or the file's (`dirichlet`: one
    /// vector for every column, or one per column): b = row + ∫ g_N φ_i (the parts' constant
    /// fluxes) − A_{·,D} g_D on the unknowns;
    /// a pure Neumann row is checked for compatibility and projected. Also g_D at every
    /// node per column.
    pub fn file_loads(
        &self,
        mesh: &Mesh2d,
        dofs: &Dofs,
        rows: &[f64],
        nrhs: usize,
        dirichlet: Option<&[f64]>,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let (loads, d) = (self.load_nodes.len(), self.dirichlet_nodes.len());
        assert_eq!(
            rows.len(),
            loads * nrhs,
            "rows are not load nodes × columns"
        );
        // g_D and its lifting A g_D at every node, for column c.
        let lifted = |c: usize| {
            let file = dirichlet.map(|v| {
                if v.len() == d {
                    v
                } else {
                    &v[c * d..(c + 1) * d]
                }
            });
            let g = self.dirichlet(mesh, &Data::Given(file));
            let lift = g.iter().any(|&v| v != 0.0).then(|| {
                let mut lift = vec![0.0; mesh.num_nodes()];
                crate::sparse::spmv(&self.full, &g, &mut lift);
                lift
            });
            (g, lift)
        };
        // Values shared by every column are lifted once.
        let per_column = dirichlet.is_some_and(|v| v.len() != d);
        let shared = (!per_column).then(|| lifted(0));
        let mut b = Vec::with_capacity(dofs.len() * nrhs);
        let mut g_all = Vec::with_capacity(mesh.num_nodes() * nrhs);
        for c in 0..nrhs {
            let own;
            let (g, lift) = match &shared {
                Some(both) => both,
                None => {
                    own = lifted(c);
                    &own
                }
            };
            let mut full = self.constant_fluxes.clone();
            for (&v, &value) in self
                .load_nodes
                .iter()
                .zip(&rows[c * loads..(c + 1) * loads])
            {
                full[v as usize] += value;
            }
            if let Some(lift) = lift {
                full.iter_mut().zip(lift).for_each(|(b, l)| *b -= l);
            }
            if self.pure_neumann() {
                let removed = self.project(&mut full, c)?;
                if removed > 1e-6 {
                    log::info!("right-hand side {c}: the pure Neumann projection removed {removed:.2e} of Σ_i |b_i| (data compatible up to their interpolation)");
                }
            }
            b.extend(dofs.node_of_dof.iter().map(|&v| full[v as usize]));
            g_all.extend_from_slice(g);
        }
        Ok((b, g_all))
    }

    /// Projects a pure Neumann load onto the compatible ones: b − (Σ b_i / Σ w_i) w, an
    /// error when the part removed exceeds [`INCOMPATIBLE`] of Σ|b_i|; returns that part.
    fn project(&self, full: &mut [f64], column: usize) -> Result<f64> {
        let sum: f64 = full.iter().sum();
        let size: f64 = full.iter().map(|b| b.abs()).sum();
        if sum.abs() > INCOMPATIBLE * size {
            return Err(Error::InvalidInput(format!(
                "right-hand side {column}: pure Neumann data are incompatible: Σ_i b_i = {sum:.3e} against Σ_i |b_i| = {size:.3e} (∫f + ∫g_N must vanish; the problem has no solution)"
            )));
        }
        full.iter_mut()
            .zip(&self.weights)
            .for_each(|(b, w)| *b -= sum / self.area * w);
        Ok(if size > 0.0 { sum.abs() / size } else { 0.0 })
    }

    /// Nodal solutions (nodes × columns): the unknowns, g_D on the Dirichlet nodes, and for
    /// a pure Neumann problem shifted to ∫ u_h = 0 (the pinned node's value set first).
    pub fn nodal(&self, dofs: &Dofs, u: &[f64], g: &[f64]) -> Vec<f64> {
        let (n, nodes) = (dofs.len(), self.weights.len());
        let mut nodal = g.to_vec();
        nodal
            .par_chunks_mut(nodes)
            .zip(u.par_chunks(n.max(1)))
            .for_each(|(column, u)| {
                for (&node, &value) in dofs.node_of_dof.iter().zip(u) {
                    column[node as usize] = value;
                }
                if self.pure_neumann() {
                    column[PINNED_NODE as usize] = 0.0;
                    let mean = column
                        .iter()
                        .zip(&self.weights)
                        .map(|(u, w)| u * w)
                        .sum::<f64>()
                        / self.area;
                    column.iter_mut().for_each(|u| *u -= mean);
                }
            });
        nodal
    }

    /// The exact solution the nodal solution approximates: u, less its mean (1/|Ω|)∫u for
    /// a pure Neumann problem.
    fn shifted<'a>(&self, mesh: &Mesh2d, exact: &'a Exact) -> impl Fn(&[f64]) -> f64 + Sync + 'a {
        let mean = if self.pure_neumann() {
            integral(mesh, |x| exact.u(x)) / self.area
        } else {
            0.0
        };
        move |x: &[f64]| exact.u(x) - mean
    }

    /// The exact solution at every node (shifted as the solution is).
    pub fn exact_nodal(&self, mesh: &Mesh2d, exact: &Exact) -> Vec<f64> {
        let u = self.shifted(mesh, exact);
        mesh.coords.iter().map(|x| u(x)).collect()
    }

    /// The L2 errors of one nodal solution: ‖u − u_h‖ by quadrature, relative to ‖u‖ on
    /// the domain, and the nodal error sqrt(Σ_i w_i (u_i − u(x_i))²).
    pub fn errors(&self, mesh: &Mesh2d, nodal: &[f64], exact: &Exact) -> (f64, f64, f64) {
        let all = Dofs::from_boundary(&vec![false; mesh.num_nodes()]);
        let u = self.shifted(mesh, exact);
        let l2 = l2_error(mesh, &all, nodal, &u);
        let norm = l2_error(mesh, &all, &vec![0.0; nodal.len()], &u);
        let nodal_l2 = mesh
            .coords
            .iter()
            .zip(nodal)
            .zip(&self.weights)
            .map(|((x, v), w)| w * (v - u(x)).powi(2))
            .sum::<f64>()
            .sqrt();
        (l2, l2 / norm, nodal_l2)
    }

    /// The checks of every column: its verified f64 residual (`residuals`, from
    /// `fem::relative_residuals` of the solved system) and, where the exact solution is
    /// known, the errors of its nodal solution.
    pub fn verify(
        &self,
        mesh: &Mesh2d,
        nodal: &[f64],
        exact: &[Option<Exact>],
        residuals: &[f64],
    ) -> Result<Vec<ColumnReport>> {
        let nodes = mesh.num_nodes();
        let mut reports = Vec::with_capacity(exact.len());
        for (c, e) in exact.iter().enumerate() {
            let relative_residual = residuals[c];
            let (l2, relative, nodal_l2) = match e {
                Some(e) => self.errors(mesh, &nodal[c * nodes..(c + 1) * nodes], e),
                None => (f64::NAN, f64::NAN, f64::NAN),
            };
            if !relative_residual.is_finite() || (e.is_some() && !l2.is_finite()) {
                return Err(Error::Solver(format!(
                    "the solution of right-hand side {c} is not finite (relative residual {relative_residual}, L2 error {l2})"
                )));
            }
            reports.push(ColumnReport {
                l2_error: l2,
                relative_l2_error: relative,
                nodal_l2_error: nodal_l2,
                relative_residual,
            });
        }
        Ok(reports)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fem::assemble_loads;
    use crate::mesh::{refine, CoarseMesh, Condition, PartCondition};

    /// A right-hand-side file's rows (∫ f φ_i on the load nodes) with the parts' constant
    /// fluxes and the Dirichlet values (constants, or per node from the file) give the load
    /// the finite-element side builds from the same data, lifting included; a pure Neumann
    /// row is projected as it projects built-in data.
    #[test]
    fn file_loads_equal_the_built_loads() {
        use Condition::{Dirichlet as D, Neumann as N};
        let f = |x: &[f64]| 1.0 + x[0] * x[1];
        let g_d = |x: [f64; 2]| 0.5 + x[1] * x[1];
        for (conditions, from_file) in [
            ([N, D, N, N], false),
            ([N, D, N, N], true),
            ([D, D, N, D], false),
            ([N, N, N, N], false),
        ] {
            let mut mesh = refine(&CoarseMesh::flow_around_square(), 2).unwrap();
            let names = mesh.boundary.names.clone();
            // Constant fluxes: 0.3 on the inflow; pure Neumann balances ∫f with it.
            let integral_f = integral(&mesh, f);
            let inflow_flux = if conditions == [N, N, N, N] {
                -integral_f
            } else {
                0.3
            };
            let spec = BoundarySpec {
                parts: names
                    .iter()
                    .zip(conditions)
                    .map(|(name, condition)| PartCondition {
                        name: name.clone(),
                        condition,
                        value: match (condition, name.as_str(), from_file) {
                            (D, _, true) => BoundaryValue::Input,
                            (D, _, false) => BoundaryValue::Constant(0.7),
                            (N, "inflow", _) => BoundaryValue::Constant(inflow_flux),
                            (N, _, _) => BoundaryValue::Constant(0.0),
                        },
                    })
                    .collect(),
            };
            spec.conditions().apply(&mut mesh).unwrap();
            let dofs = Dofs::from_boundary(&mesh.on_boundary);
            let problem = BoundaryProblem::new(&mesh, Some(&spec)).unwrap();
            let loads = Dofs::from_boundary(&spec.conditions().on_dirichlet_parts(&mesh));
            assert_eq!(loads.node_of_dof, problem.load_nodes);
            let row = assemble_loads(&mesh, &loads, &[f]);
            let file_values: Vec<f64> = problem
                .dirichlet_nodes
                .iter()
                .map(|&v| g_d(mesh.coords[v as usize]))
                .collect();
            let (b, g) = problem
                .file_loads(&mesh, &dofs, &row, 1, from_file.then_some(&file_values[..]))
                .unwrap();
            let dirichlet = |_: u16, x: [f64; 2]| if from_file { g_d(x) } else { 0.7 };
            let inflow = names.iter().position(|n| n == "inflow").unwrap() as u16;
            let neumann = |part: u16, _: [f64; 2], _: [f64; 2]| {
                if part == inflow {
                    inflow_flux
                } else {
                    0.0
                }
            };
            let data = BoundaryData {
                dirichlet: &dirichlet,
                neumann: &neumann,
            };
            let reference = boundary_load(&mesh, &dofs, &spec.conditions(), f, &data).unwrap();
            let scale = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (i, (x, y)) in b.iter().zip(&reference).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-12 * scale,
                    "{conditions:?} (file values {from_file}) unknown {i}: {x} vs {y}"
                );
            }
            assert_eq!(g, dirichlet_values(&mesh, &spec.conditions(), &data));
        }
    }

    /// An incompatible pure Neumann row (a flux left out) is refused, naming the sums.
    #[test]
    fn incompatible_pure_neumann_rows_are_refused() {
        let mut mesh = refine(&CoarseMesh::flow_around_square(), 2).unwrap();
        let spec = BoundarySpec {
            parts: mesh
                .boundary
                .names
                .iter()
                .map(|name| PartCondition {
                    name: name.clone(),
                    condition: Condition::Neumann,
                    value: BoundaryValue::Constant(0.0),
                })
                .collect(),
        };
        spec.conditions().apply(&mut mesh).unwrap();
        let dofs = Dofs::from_boundary(&mesh.on_boundary);
        let problem = BoundaryProblem::new(&mesh, Some(&spec)).unwrap();
        let row = vec![1.0; problem.load_nodes.len()];
        let err = problem
            .file_loads(&mesh, &dofs, &row, 1, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("incompatible") && err.contains("Σ_i b_i"),
            "{err}"
        );
    }
}
