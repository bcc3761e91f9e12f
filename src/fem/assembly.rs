//! Poisson stiffness and load assembly, Dirichlet rows and columns removed.
//!
//! Element matrices are computed cell-parallel; then every row gathers the contributions
//! of the cells around its node, in cell order. Rows are independent (no atomics, no
//! colouring) and the summation order is fixed, so the matrix is bitwise reproducible.

use rayon::prelude::*;

use super::element::{
    by_nodes, corners, det_jacobian, gradients, point, relative_corners, ShapeMemory, Tables,
};
use super::QuadratureRule;
use crate::error::{Error, Result};
use crate::mesh::{Element, Mesh, TensorGrid};
use crate::numeric::sum_partials;
use crate::sparse::Csr;

/// Gauss points per direction for the stiffness and load integrals: exact for the Q1
/// stiffness, and the load quadrature error is O(h^6)-small, well below the O(h²) error.
pub(super) const GAUSS_POINTS: usize = 3;

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
    /// values (zero) filled in; a column per task.
    pub fn to_nodal_block(&self, u: &[f64]) -> Vec<f64> {
        let nodes = self.dof_of_node.len();
        let columns = u.len() / self.len().max(1);
        assert_eq!(
            u.len(),
            columns * self.len(),
            "to_nodal_block: the block is not unknowns × columns"
        );
        let mut nodal = vec![0.0; nodes * columns];
        nodal
            .par_chunks_mut(nodes.max(1))
            .zip(u.par_chunks(self.len().max(1)))
            .for_each(|(out, column)| {
                for (v, &d) in out.iter_mut().zip(&self.dof_of_node) {
                    if d != Self::NONE {
                        *v = column[d as usize];
                    }
                }
            });
        nodal
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

/// Element load vectors (k per cell) and, when `stiffness`, element stiffness matrices
/// ∫ ∇φ_a · ∇φ_b (row-major, k×k per cell; empty otherwise).
pub(super) fn element_systems<const D: usize>(
    mesh: &Mesh<D>,
    f: &(impl Fn(&[f64]) -> f64 + Sync),
    stiffness: bool,
) -> (Vec<f64>, Vec<f64>) {
    assert_eq!(
        mesh.element.dim(),
        D,
        "mesh dimension and element dimension differ"
    );
    by_nodes!(mesh.element, K => element_systems_of::<D, K>(mesh, f, stiffness))
}

fn element_systems_of<const D: usize, const K: usize>(
    mesh: &Mesh<D>,
    f: &(impl Fn(&[f64]) -> f64 + Sync),
    stiffness: bool,
) -> (Vec<f64>, Vec<f64>) {
    let tables = Tables::<D, K>::new(
        mesh.element,
        &QuadratureRule::gauss(mesh.element, GAUSS_POINTS),
    );
    let nq = tables.len();
    assert!(nq <= MAX_POINTS, "{nq} quadrature points per cell");
    // Integrates one cell: its load vector, and its element matrix when asked for; the
    // matrix and the weights ω_q |det J(x_q)| come from the cell's shape (remembered by
    // it), the loads from f at the cell's own points. Summed here and stored once: adding
    // into fresh zeroed memory would read each page before writing it (a zero-page
    // mapping, then a copy-on-write fault with a TLB shootdown to every core of the
    // process: the larger part of this loop's time on a VM).
    let cell_system =
        |memory: &mut ShapeMemory<D, K, CellShape<K>>, c: usize, fe: &mut [f64], ke: &mut [f64]| {
            let x = corners::<D, K>(mesh, c);
            let shape = memory.get(&relative_corners(&x), |relative| {
                let mut shape = CellShape {
                    matrix: [[0.0; K]; K],
                    weights: [0.0; MAX_POINTS],
                };
                for (q, dn) in tables.ref_grads.iter().enumerate() {
                    // Gradients for the stiffness only; the loads need |det J| alone.
                    let (det, grad) = if stiffness {
                        gradients(relative, dn)
                    } else {
                        (det_jacobian(relative, dn), [[0.0; D]; K])
                    };
                    let w = tables.weights[q] * det;
                    shape.weights[q] = w;
                    if stiffness {
                        for a in 0..K {
                            for b in 0..K {
                                let g: f64 = (0..D).map(|d| grad[a][d] * grad[b][d]).sum();
                                shape.matrix[a][b] += w * g;
                            }
                        }
                    }
                }
                shape
            });
            let mut load = [0.0; K];
            for (n, w) in tables.shapes.iter().zip(&shape.weights) {
                let fq = f(&point(&x, n));
                for a in 0..K {
                    load[a] += w * fq * n[a];
                }
            }
            fe.copy_from_slice(&load);
            for (row, values) in ke.chunks_exact_mut(K).zip(&shape.matrix) {
                row.copy_from_slice(values);
            }
        };
    let ncells = mesh.num_cells();
    let mut load = vec![0.0; ncells * K];
    let mut matrices = Vec::new();
    if stiffness {
        matrices = vec![0.0; ncells * K * K];
        matrices
            .par_chunks_mut(K * K)
            .zip(load.par_chunks_mut(K))
            .enumerate()
            .for_each_init(ShapeMemory::new, |memory, (c, (ke, fe))| {
                cell_system(memory, c, fe, ke)
            });
    } else {
        load.par_chunks_mut(K)
            .enumerate()
            .for_each_init(ShapeMemory::new, |memory, (c, fe)| {
                cell_system(memory, c, fe, &mut [])
            });
    }
    (matrices, load)
}

/// Most quadrature points of a cell's rule in [`element_systems`] (3 per direction on
/// hexahedra).
const MAX_POINTS: usize = 27;

/// What a cell's shape gives [`element_systems`]: its element stiffness matrix (zero when
/// not asked for) and the weights ω_q |det J(x_q)| of its rule.
struct CellShape<const K: usize> {
    matrix: [[f64; K]; K],
    weights: [f64; MAX_POINTS],
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

/// The stiffness matrix of -Δ with u = 0 on the boundary, over the interior nodes, and
/// their numbering: on a tensor-product grid ([`Mesh::tensor_grid`]) from the lines' 1D
/// matrices, else assembled cell by cell. Bitwise reproducible either way.
pub fn assemble_stiffness<const D: usize>(mesh: &Mesh<D>) -> Result<(Csr<f64>, Dofs)> {
    check_dimension(mesh)?;
    let dofs = Dofs::from_boundary(&mesh.on_boundary);
    if let Some(grid) = mesh.tensor_grid() {
        if super::separable::unknowns_are_interior(&grid, &dofs) {
            return Ok((super::separable::stiffness(&grid)?, dofs));
        }
    }
    let (stiffness, load) = element_systems(mesh, &|_| 0.0, true);
    let (matrix, _) = gather_system(mesh, &dofs, &stiffness, &load)?;
    Ok((matrix, dofs))
}

/// Assembles -Δu = f with u = 0 on the boundary: stiffness matrix and load vector over the
/// interior nodes.
pub fn assemble_poisson<const D: usize>(
    mesh: &Mesh<D>,
    f: impl Fn(&[f64]) -> f64 + Sync,
) -> Result<PoissonSystem> {
    check_dimension(mesh)?;
    let dofs = Dofs::from_boundary(&mesh.on_boundary);
    let (stiffness, load) = element_systems(mesh, &f, true);
    let (matrix, rhs) = gather_system(mesh, &dofs, &stiffness, &load)?;
    Ok(PoissonSystem { matrix, rhs, dofs })
}

/// Columns per group of [`l2_norms_squared`]: one AVX-512 register of f64.
pub const NORM_COLUMNS: usize = 8;
/// Cells per partial sum of [`l2_norms_squared`] (fixed, so sums do not depend on the
/// thread count).
const NORM_CELLS_PER_TASK: usize = 4096;

/// ‖w_h‖²_{L2(Ω)} of every column of a block of finite-element functions given by their
/// node values, node-major (`stride` values per node, a multiple of [`NORM_COLUMNS`], the
/// first `columns` of them used, the rest finite): wᵀ M w with the mass matrix of the rule
/// that integrates φ_a φ_b |det J| exactly, never assembled. On `grid` (the mesh as a
/// tensor-product grid, [`Mesh::tensor_grid`]) M is a product of 1D mass matrices, applied
/// along the grid's lines; otherwise the sum is Σ_cells w_eᵀ M_e w_e with the element
/// matrices M_e remembered per cell shape. Nodes or cells are summed in tasks of a fixed
/// size and the tasks in order: the sums do not depend on the thread count.
pub fn l2_norms_squared<const D: usize>(
    mesh: &Mesh<D>,
    grid: Option<&TensorGrid<D>>,
    nodal: &[f64],
    columns: usize,
    stride: usize,
) -> Vec<f64> {
    assert!(
        stride.is_multiple_of(NORM_COLUMNS) && columns <= stride,
        "l2_norms_squared: {columns} columns in rows of {stride}"
    );
    assert_eq!(
        nodal.len(),
        mesh.num_nodes() * stride,
        "l2_norms_squared: the block is not nodes × stride"
    );
    assert_eq!(mesh.element.dim(), D, "mesh and element dimensions differ");
    let mut sums = match grid {
        Some(grid) => super::separable::l2_norms_squared(grid, nodal, stride),
        None => {
            by_nodes!(mesh.element, K => l2_norms_squared_of::<D, K>(mesh, nodal, columns, stride))
        }
    };
    sums.truncate(columns);
    sums
}

fn l2_norms_squared_of<const D: usize, const K: usize>(
    mesh: &Mesh<D>,
    nodal: &[f64],
    columns: usize,
    stride: usize,
) -> Vec<f64> {
    let rule = QuadratureRule::gauss(mesh.element, mass_gauss_points(mesh.element));
    let tables = Tables::<D, K>::new(mesh.element, &rule);
    let ncells = mesh.num_cells();
    let groups = columns.div_ceil(NORM_COLUMNS);
    let partials: Vec<Vec<f64>> = (0..ncells.div_ceil(NORM_CELLS_PER_TASK))
        .into_par_iter()
        .map(|task| {
            let mut sums = vec![0.0; groups * NORM_COLUMNS];
            let mut masses = ShapeMemory::<D, K, [[f64; K]; K]>::new();
            let cells = task * NORM_CELLS_PER_TASK..((task + 1) * NORM_CELLS_PER_TASK).min(ncells);
            for c in cells {
                let (x, nodes) = (corners::<D, K>(mesh, c), mesh.cell(c));
                let mass = masses.get(&relative_corners(&x), |relative| {
                    element_mass(&tables, relative)
                });
                for (group, sum) in sums.chunks_exact_mut(NORM_COLUMNS).enumerate() {
                    let at: [[f64; NORM_COLUMNS]; K] = std::array::from_fn(|a| {
                        let first = nodes[a] as usize * stride + group * NORM_COLUMNS;
                        nodal[first..first + NORM_COLUMNS]
                            .try_into()
                            .expect("a group of columns")
                    });
                    for (row, wa) in mass.iter().zip(&at) {
                        let mut mw = [0.0; NORM_COLUMNS];
                        for (m, wb) in row.iter().zip(&at) {
                            for (v, wj) in mw.iter_mut().zip(wb) {
                                *v += m * wj;
                            }
                        }
                        for ((s, v), wi) in sum.iter_mut().zip(&mw).zip(wa) {
                            *s += wi * v;
                        }
                    }
                }
            }
            sums
        })
        .collect();
    sum_partials(&partials, groups * NORM_COLUMNS)
}

/// M_ab = Σ_q ω_q det J(x_q) N_a(x_q) N_b(x_q) of the cell with corners `relative` (to its
/// first), by the rule of `tables` ([`mass_gauss_points`]).
fn element_mass<const D: usize, const K: usize>(
    tables: &Tables<D, K>,
    relative: &[[f64; D]; K],
) -> [[f64; K]; K] {
    let mut mass = [[0.0; K]; K];
    for (q, n) in tables.shapes.iter().enumerate() {
        let w = tables.weights[q] * det_jacobian(relative, &tables.ref_grads[q]);
        for (row, na) in mass.iter_mut().zip(n) {
            for (m, nb) in row.iter_mut().zip(n) {
                *m += w * na * nb;
            }
        }
    }
    mass
}

/// Gauss points per direction that integrate φ_a φ_b |det J| exactly (the mass matrix): on
/// quadrilaterals the shapes and det J are of degree 1 per direction (degree 3 in all), on
/// triangles the integrand is of total degree 2 (the collapsed rule of 2 points is exact to
/// 2), on hexahedra det J is of degree 2 per direction (degree 4).
fn mass_gauss_points(element: Element) -> usize {
    match element {
        Element::Q1 | Element::P1 => 2,
        Element::Q1Hex => 3,
    }
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

/// Sums per-cell vectors into vectors on the unknowns of `dofs`. `per_cell` holds, cell
/// after cell, `count` vectors of k entries each (in local node order); vector v of the
/// result sums entry v of every cell: each unknown adds its node's entries in cell order
/// (reproducible). One pass over the cells' incidence for all of them.
pub(super) fn gather_cell_vectors<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    per_cell: &[f64],
    count: usize,
) -> Vec<Vec<f64>> {
    let k = mesh.element.nodes_per_cell();
    assert_eq!(per_cell.len(), mesh.num_cells() * count * k);
    let (start, slots) = node_incidence(mesh);
    // Unknown-major (count sums per unknown), then split into the vectors.
    let mut sums = vec![0.0; dofs.len() * count];
    sums.par_chunks_mut(count.max(1))
        .zip(&dofs.node_of_dof)
        .for_each(|(sum, &node)| {
            sum.fill(0.0); // written before read: fresh pages fault once (element_systems)
            for &slot in &slots[start[node as usize]..start[node as usize + 1]] {
                let (cell, a) = (slot as usize / k, slot as usize % k);
                let entries = per_cell[cell * count * k + a..].iter().step_by(k);
                for (s, e) in sum.iter_mut().zip(entries) {
                    *s += e;
                }
            }
        });
    if count == 1 {
        return vec![sums];
    }
    (0..count)
        .map(|v| sums.par_chunks(count).map(|s| s[v]).collect())
        .collect()
}

/// [`gather_cell_vectors`] of one vector (k entries per cell).
pub(super) fn gather_cell_vector<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    per_cell: &[f64],
) -> Vec<f64> {
    let mut one = gather_cell_vectors(mesh, dofs, per_cell, 1);
    one.pop().expect("one vector")
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
    let mut block = Vec::with_capacity(dofs.len() * fs.len());
    for f in fs {
        let (_, load) = element_systems(mesh, f, false);
        block.extend(gather_cell_vector(mesh, dofs, &load));
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{unit_cube, unit_square, Element};

    /// The block of nodal values is each column's `to_nodal`, one after the other.
    #[test]
    fn nodal_block_is_the_columns_nodal_vectors() {
        let dofs = Dofs::from_boundary(&[true, false, false, true, false, true]);
        let u: Vec<f64> = (1..=9).map(f64::from).collect();
        let expected: Vec<f64> = u.chunks(3).flat_map(|c| dofs.to_nodal(c)).collect();
        assert_eq!(dofs.to_nodal_block(&u), expected);
        assert_eq!(
            expected[..6],
            [0.0, 1.0, 2.0, 0.0, 3.0, 0.0],
            "Dirichlet nodes take zero"
        );
        assert!(dofs.to_nodal_block(&[]).is_empty());
    }

    /// docs/mathematics.md §1: the Q1 stencil is 8/3 on the diagonal and -1/3 for all 8 neighbours,
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

    /// The cell-wise norms are those of 4-point Gauss (exact for these integrands) on every
    /// column, on meshes with skewed cells (general quadrilaterals and hexahedra, unequal
    /// triangles), for one and two groups of columns, and bitwise the same on 1 and 2
    /// threads.
    #[test]
    fn block_l2_norms_equal_gauss_quadrature() {
        fn check<const D: usize>(mut mesh: Mesh<D>) {
            for (i, x) in mesh.coords.iter_mut().enumerate() {
                if x.iter().all(|&c| c > 0.0 && c < 1.0) {
                    for (d, c) in x.iter_mut().enumerate() {
                        *c += 0.02 * (((i * 7 + d * 3) % 11) as f64 / 5.0 - 1.0) / 8.0;
                    }
                }
            }
            let dofs = Dofs::from_boundary(&mesh.on_boundary);
            for columns in [3usize, 9] {
                let stride = columns.next_multiple_of(NORM_COLUMNS);
                let u: Vec<Vec<f64>> = (0..columns)
                    .map(|j| {
                        (0..dofs.len())
                            .map(|i| (((i + 31 * j) * 7919) % 101) as f64 / 50.0 - 1.0)
                            .collect()
                    })
                    .collect();
                let mut nodal = vec![0.0; mesh.num_nodes() * stride];
                for (node, &dof) in dofs.dof_of_node.iter().enumerate() {
                    if dof != Dofs::NONE {
                        for (j, uj) in u.iter().enumerate() {
                            nodal[node * stride + j] = uj[dof as usize];
                        }
                    }
                }
                let norms = l2_norms_squared(&mesh, None, &nodal, columns, stride);
                assert_eq!(norms.len(), columns);
                for (j, uj) in u.iter().enumerate() {
                    let l2 = crate::fem::l2_error(&mesh, &dofs, uj, |_| 0.0);
                    assert!(
                        (norms[j] - l2 * l2).abs() <= 1e-13 * l2 * l2,
                        "{:?} column {j}: {} against ‖u_h‖² = {}",
                        mesh.element,
                        norms[j],
                        l2 * l2
                    );
                }
                let one = rayon::ThreadPoolBuilder::new()
                    .num_threads(1)
                    .build()
                    .unwrap();
                let two = rayon::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .build()
                    .unwrap();
                assert_eq!(
                    one.install(|| l2_norms_squared(&mesh, None, &nodal, columns, stride)),
                    two.install(|| l2_norms_squared(&mesh, None, &nodal, columns, stride))
                );
            }
        }
        check(unit_square(8, Element::Q1).unwrap());
        check(unit_square(8, Element::P1).unwrap());
        check(unit_cube(5).unwrap());
        // More cells than one task.
        check(unit_square(70, Element::Q1).unwrap());
    }
}
