//! Poisson stiffness and load assembly, Dirichlet rows and columns removed.
//!
//! Element matrices are computed cell-parallel; then every row gathers the contributions
//! of the cells around its node, in cell order. Rows are independent (no atomics, no
//! colouring) and the summation order is fixed, so the matrix is bitwise reproducible.

use rayon::prelude::*;

use super::element::{by_nodes, corners, det_jacobian, gradients, point, Tables};
use super::QuadratureRule;
use crate::error::{Error, Result};
use crate::mesh::Mesh;
use crate::sparse::Csr;

/// Gauss points per direction for the stiffness and load integrals: exact for the Q1
/// stiffness, and the load quadrature error is O(h^6)-small, well below the O(h²) error.
const GAUSS_POINTS: usize = 3;

/// The numbering of unknowns: interior nodes in node order.
#[derive(Clone, Debug, PartialEq)]
pub struct Dofs {
    /// Unknown index of each node, [`Dofs::NONE`] for Dirichlet nodes.
    pub dof_of_node: Vec<u32>,
    pub node_of_dof: Vec<u32>,
}

impl Dofs {
    pub const NONE: u32 = u32::MAX;

    pub fn from_boundary(on_boundary: &[bool]) -> Self {
        let mut dof_of_node = vec![Self::NONE; on_boundary.len()];
        let mut node_of_dof = Vec::new();
        for (node, &boundary) in on_boundary.iter().enumerate() {
            if !boundary {
                dof_of_node[node] = node_of_dof.len() as u32;
                node_of_dof.push(node as u32);
            }
        }
        Dofs {
            dof_of_node,
            node_of_dof,
        }
    }

    pub fn len(&self) -> usize {
        self.node_of_dof.len()
    }

    pub fn is_empty(&self) -> bool {
        self.node_of_dof.is_empty()
    }

    /// Nodal block (nodes × columns, column-major) from a block of unknowns, Dirichlet
    /// values (zero) filled in.
    pub fn to_nodal_block(&self, u: &[f64]) -> Vec<f64> {
        u.chunks(self.len().max(1))
            .flat_map(|column| self.to_nodal(column))
            .collect()
    }

    /// Nodal vector from unknowns, with the (homogeneous) Dirichlet values filled in.
    pub fn to_nodal(&self, u: &[f64]) -> Vec<f64> {
        assert_eq!(
            u.len(),
            self.len(),
            "to_nodal: vector length is not the number of unknowns"
        );
        self.dof_of_node
            .iter()
            .map(|&d| if d == Self::NONE { 0.0 } else { u[d as usize] })
            .collect()
    }
}

/// A discrete Poisson problem: stiffness matrix and load vector on the unknowns.
#[derive(Clone, Debug)]
pub struct PoissonSystem {
    pub matrix: Csr<f64>,
    pub rhs: Vec<f64>,
    pub dofs: Dofs,
}

/// The bilinear form of an element matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// ∫ ∇φ_a · ∇φ_b
    Stiffness,
    /// ∫ φ_a φ_b
    Mass,
}

/// Element load vectors (k per cell) and, when `form` is given, element matrices of that
/// form (row-major, k×k per cell; empty otherwise).
pub(super) fn element_systems<const D: usize>(
    mesh: &Mesh<D>,
    f: &(impl Fn(&[f64]) -> f64 + Sync),
    form: Option<Form>,
) -> (Vec<f64>, Vec<f64>) {
    assert_eq!(
        mesh.element.dim(),
        D,
        "mesh dimension and element dimension differ"
    );
    by_nodes!(mesh.element, K => element_systems_of::<D, K>(mesh, f, form))
}

fn element_systems_of<const D: usize, const K: usize>(
    mesh: &Mesh<D>,
    f: &(impl Fn(&[f64]) -> f64 + Sync),
    form: Option<Form>,
) -> (Vec<f64>, Vec<f64>) {
    let tables = Tables::<D, K>::new(
        mesh.element,
        &QuadratureRule::gauss(mesh.element, GAUSS_POINTS),
    );
    // Integrates one cell: its load vector, and its element matrix when asked for. Summed
    // here and stored once: adding into fresh zeroed memory would read each page before
    // writing it (a zero-page mapping, then a copy-on-write fault with a TLB shootdown to
    // every core of the process: the larger part of this loop's time on a VM).
    let cell_system = |c: usize, fe: &mut [f64], ke: &mut [f64]| {
        let x = corners::<D, K>(mesh, c);
        let (mut load, mut matrix) = ([0.0; K], [[0.0; K]; K]);
        for q in 0..tables.len() {
            let n = &tables.shapes[q];
            let dn = &tables.ref_grads[q];
            // Gradients for the stiffness only; the mass and loads need |det J| alone.
            let (det, grad) = match form {
                Some(Form::Stiffness) => gradients(&x, dn),
                _ => (det_jacobian(&x, dn), [[0.0; D]; K]),
            };
            let w = tables.weights[q] * det;
            let fq = f(&point(&x, n));
            for a in 0..K {
                load[a] += w * fq * n[a];
            }
            match form {
                Some(Form::Mass) => {
                    for a in 0..K {
                        for b in 0..K {
                            matrix[a][b] += w * n[a] * n[b];
                        }
                    }
                }
                Some(Form::Stiffness) => {
                    for a in 0..K {
                        for b in 0..K {
                            let g: f64 = (0..D).map(|d| grad[a][d] * grad[b][d]).sum();
                            matrix[a][b] += w * g;
                        }
                    }
                }
                None => {}
            }
        }
        fe.copy_from_slice(&load);
        for (row, values) in ke.chunks_exact_mut(K).zip(&matrix) {
            row.copy_from_slice(values);
        }
    };
    let ncells = mesh.num_cells();
    let mut load = vec![0.0; ncells * K];
    let mut matrices = Vec::new();
    if form.is_some() {
        matrices = vec![0.0; ncells * K * K];
        matrices
            .par_chunks_mut(K * K)
            .zip(load.par_chunks_mut(K))
            .enumerate()
            .for_each(|(c, (ke, fe))| cell_system(c, fe, ke));
    } else {
        load.par_chunks_mut(K)
            .enumerate()
            .for_each(|(c, fe)| cell_system(c, fe, &mut []));
    }
    (matrices, load)
}

/// For every node, the (cell, local index) pairs it appears in, in cell order.
fn node_incidence<const D: usize>(mesh: &Mesh<D>) -> (Vec<usize>, Vec<u32>) {
    let k = mesh.element.nodes_per_cell();
    let mut start = vec![0usize; mesh.num_nodes() + 1];
    for &node in &mesh.cells {
        start[node as usize + 1] += 1;
    }
    for i in 0..mesh.num_nodes() {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut slots = vec![0u32; mesh.cells.len()];
    for (slot, &node) in mesh.cells.iter().enumerate() {
        // slot = cell * k + local index
        slots[fill[node as usize]] = slot as u32;
        fill[node as usize] += 1;
    }
    debug_assert!(slots.iter().all(|&s| (s as usize) < mesh.num_cells() * k));
    (start, slots)
}

/// Assembles -Δu = f with u = 0 on the boundary: stiffness matrix and load vector over the
/// interior nodes.
pub fn assemble_poisson<const D: usize>(
    mesh: &Mesh<D>,
    f: impl Fn(&[f64]) -> f64 + Sync,
) -> Result<PoissonSystem> {
    check_dimension(mesh)?;
    let dofs = Dofs::from_boundary(&mesh.on_boundary);
    let (stiffness, load) = element_systems(mesh, &f, Some(Form::Stiffness));
    let (matrix, rhs) = gather_system(mesh, &dofs, &stiffness, &load)?;
    Ok(PoissonSystem { matrix, rhs, dofs })
}

/// The mass matrix ∫ φ_i φ_j over the unknowns of `dofs` (the L2 inner product of
/// finite-element functions that vanish on the boundary).
pub fn assemble_mass<const D: usize>(mesh: &Mesh<D>, dofs: &Dofs) -> Result<Csr<f64>> {
    check_dimension(mesh)?;
    let (mass, load) = element_systems(mesh, &|_: &[f64]| 0.0, Some(Form::Mass));
    Ok(gather_system(mesh, dofs, &mass, &load)?.0)
}

fn check_dimension<const D: usize>(mesh: &Mesh<D>) -> Result<()> {
    if mesh.element.dim() != D {
        return Err(Error::InvalidInput(format!(
            "{} elements on a {D}-dimensional mesh",
            mesh.element.name()
        )));
    }
    Ok(())
}

/// The global load on the unknowns of `dofs` from per-cell loads (k per cell): each row
/// sums its node's entries in cell order.
pub(super) fn gather_load<const D: usize>(mesh: &Mesh<D>, dofs: &Dofs, load: &[f64]) -> Vec<f64> {
    let (start, slots) = node_incidence(mesh);
    dofs.node_of_dof
        .par_iter()
        .map(|&node| {
            slots[start[node as usize]..start[node as usize + 1]]
                .iter()
                .map(|&slot| load[slot as usize])
                .sum()
        })
        .collect()
}

/// Rows per task of [`gather_system`].
const ROWS_PER_TASK: usize = 1024;

/// A task's rows of the global system: one set of arrays per task, not per row.
struct RowBlock {
    cols: Vec<u32>,
    vals: Vec<f64>,
    /// Entries of each row.
    lens: Vec<usize>,
    loads: Vec<f64>,
}

/// The global matrix and load vector on the unknowns from element matrices and loads.
fn gather_system<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    matrices: &[f64],
    load: &[f64],
) -> Result<(Csr<f64>, Vec<f64>)> {
    let k = mesh.element.nodes_per_cell();
    let (start, slots) = node_incidence(mesh);
    let blocks: Vec<RowBlock> = dofs
        .node_of_dof
        .par_chunks(ROWS_PER_TASK)
        .map(|nodes| {
            let (mut cols, mut vals) = (Vec::new(), Vec::new());
            let (mut lens, mut rhs) = (Vec::with_capacity(nodes.len()), Vec::new());
            let mut entries: Vec<(u32, f64)> = Vec::new();
            for &node in nodes {
                entries.clear();
                let mut b = 0.0;
                for &slot in &slots[start[node as usize]..start[node as usize + 1]] {
                    let (cell, a) = (slot as usize / k, slot as usize % k);
                    b += load[cell * k + a];
                    for (j, &other) in mesh.cell(cell).iter().enumerate() {
                        let col = dofs.dof_of_node[other as usize];
                        if col != Dofs::NONE {
                            entries.push((col, matrices[(cell * k + a) * k + j]));
                        }
                    }
                }
                entries.sort_by_key(|e| e.0); // stable: equal columns keep cell order
                let first = cols.len();
                for &(col, val) in &entries {
                    if cols.len() > first && cols.last() == Some(&col) {
                        *vals.last_mut().expect("a value per column") += val;
                    } else {
                        cols.push(col);
                        vals.push(val);
                    }
                }
                lens.push(cols.len() - first);
                rhs.push(b);
            }
            RowBlock {
                cols,
                vals,
                lens,
                loads: rhs,
            }
        })
        .collect();

    let nnz: usize = blocks.iter().map(|b| b.cols.len()).sum();
    let mut row_ptr = Vec::with_capacity(dofs.len() + 1);
    row_ptr.push(0);
    let (mut col_idx, mut values, mut rhs) = (
        Vec::with_capacity(nnz),
        Vec::with_capacity(nnz),
        Vec::with_capacity(dofs.len()),
    );
    for block in blocks {
        col_idx.extend_from_slice(&block.cols);
        values.extend_from_slice(&block.vals);
        rhs.extend_from_slice(&block.loads);
        for len in block.lens {
            row_ptr.push(row_ptr.last().expect("starts with 0") + len);
        }
    }
    let n = dofs.len();
    Ok((Csr::new(n, n, row_ptr, col_idx, values)?, rhs))
}

/// Load vectors of several right-hand sides on the unknowns of `dofs`, as a column-major
/// block (one column per function), identical to the loads [`assemble_poisson`] gives.
pub fn assemble_loads<const D: usize, F: Fn(&[f64]) -> f64 + Sync>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    fs: &[F],
) -> Vec<f64> {
    let mut block = vec![0.0; dofs.len() * fs.len()];
    for (f, column) in fs.iter().zip(block.chunks_mut(dofs.len().max(1))) {
        let (_, load) = element_systems(mesh, f, None);
        gather_cell_vector(mesh, dofs, &load, column);
    }
    block
}

/// Sums per-cell vectors (k entries per cell, in local node order) into a vector on the
/// unknowns: every unknown adds the entries of its node in cell order (reproducible).
pub(super) fn gather_cell_vector<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    per_cell: &[f64],
    out: &mut [f64],
) {
    let (start, slots) = node_incidence(mesh);
    out.par_iter_mut()
        .zip(&dofs.node_of_dof)
        .for_each(|(b, &node)| {
            *b = slots[start[node as usize]..start[node as usize + 1]]
                .iter()
                .fold(0.0, |sum, &slot| sum + per_cell[slot as usize]);
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{unit_cube, unit_square, Element};

    /// SPEC §1: the Q1 stencil is 8/3 on the diagonal and -1/3 for all 8 neighbours,
    /// independent of h; P1 on right triangles gives the 5-point stencil 4, -1 (and exact
    /// zeros for the diagonal couplings).
    #[test]
    fn stiffness_equals_the_stencils() {
        for n in [4, 16] {
            let mesh = unit_square(n, Element::Q1).unwrap();
            let sys = assemble_poisson(&mesh, |_| 0.0).unwrap();
            let m = n - 1;
            let a = &sys.matrix;
            assert!(a.is_symmetric());
            let centre = (m / 2) + (m / 2) * m;
            let (cols, vals) = a.row(centre);
            assert_eq!(cols.len(), 9);
            for (&c, &v) in cols.iter().zip(vals) {
                let expected = if c as usize == centre {
                    8.0 / 3.0
                } else {
                    -1.0 / 3.0
                };
                assert!((v - expected).abs() < 1e-14, "Q1 n={n}: {v} vs {expected}");
            }
            // A corner unknown keeps only its 3 interior neighbours.
            assert_eq!(a.row(0).0.len(), 4);
            assert_eq!(a.nnz(), 9 * m * m - 12 * m + 4);

            let mesh = unit_square(n, Element::P1).unwrap();
            let p = assemble_poisson(&mesh, |_| 0.0).unwrap().matrix;
            assert!(p.is_symmetric());
            let (cols, vals) = p.row(centre);
            for (&c, &v) in cols.iter().zip(vals) {
                let (dx, dy) = (
                    (c as i64 % m as i64) - (centre % m) as i64,
                    (c as i64 / m as i64) - (centre / m) as i64,
                );
                let expected = match (dx, dy) {
                    (0, 0) => 4.0,
                    (0, _) | (_, 0) => -1.0,
                    _ => 0.0,
                };
                assert!((v - expected).abs() < 1e-14, "P1 ({dx},{dy}): {v}");
            }
            assert_eq!(p.numerical_nnz(), 5 * m * m - 4 * m);
        }
    }

    /// 3D Q1 stencil (times h = 1/n): 8/3 on the diagonal, 0 for the 6 face neighbours,
    /// -1/6 for the 12 edge neighbours, -1/12 for the 8 corner neighbours (rows sum to 0).
    #[test]
    fn hex_stencil() {
        let n = 4;
        let sys = assemble_poisson(&unit_cube(n).unwrap(), |_| 0.0).unwrap();
        let m = n - 1;
        let centre = 1 + m * (1 + m);
        let h = 1.0 / n as f64;
        let (cols, vals) = sys.matrix.row(centre);
        assert_eq!(cols.len(), 27);
        for (&c, &v) in cols.iter().zip(vals) {
            let d = [c as usize % m, (c as usize / m) % m, c as usize / (m * m)];
            let off = d.iter().filter(|&&x| x != 1).count();
            let expected = match off {
                0 => 8.0 / 3.0,
                1 => 0.0,
                2 => -1.0 / 6.0,
                _ => -1.0 / 12.0,
            } * h;
            assert!(
                (v - expected).abs() < 1e-15,
                "offsets {off}: {v} vs {expected}"
            );
        }
    }

    #[test]
    fn loads_match_the_full_assembly() {
        let mesh = unit_square(12, Element::P1).unwrap();
        let f1 = |x: &[f64]| x[0] * x[1].sin();
        let f2 = |x: &[f64]| 1.0 + x[1];
        let block = assemble_loads(
            &mesh,
            &Dofs::from_boundary(&mesh.on_boundary),
            &[&f1 as &(dyn Fn(&[f64]) -> f64 + Sync), &f2],
        );
        let n = (12 - 1) * (12 - 1);
        assert_eq!(block[..n], assemble_poisson(&mesh, f1).unwrap().rhs[..]);
        assert_eq!(block[n..], assemble_poisson(&mesh, f2).unwrap().rhs[..]);
    }

    /// The load of f = 1 sums to the area of the interior nodes' supports.
    #[test]
    fn load_of_a_constant() {
        let n = 8;
        for element in [Element::Q1, Element::P1] {
            let sys = assemble_poisson(&unit_square(n, element).unwrap(), |_| 1.0).unwrap();
            let h2 = 1.0 / (n * n) as f64;
            for &b in &sys.rhs {
                assert!((b - h2).abs() < 1e-15);
            }
        }
    }
}
