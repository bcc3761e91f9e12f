//! Loads and L2 errors of manufactured solutions as block operations over columns.
//!
//! Every exact solution a campaign verifies against is a short sum of sine modes,
//! u = Σ_m a_m φ_m ([`Exact::modes`]), so its load vector is b = Σ_m a_m λ_m ℓ_m with
//! ℓ_m,i = (φ_m, φ_i), and its L2 error splits through the interpolant
//! I u = Σ_i u(x_i) φ_i (unknowns only, so I u vanishes on the boundary like u_h):
//!
//!   u − u_h = d + w_h,   d = u − I u = Σ_m a_m d_m,   w_h = Σ_i w_i φ_i,   w_i = u(x_i) − u_i,
//!   ‖u − u_h‖² = Σ_{m,l} a_m a_l (d_m, d_l) + 2 Σ_m a_m Σ_i w_i (d_m, φ_i) + wᵀ M w.
//!
//! ℓ_m, (d_m, φ_i), φ_m(x_i) and the Gram entries (d_m, d_l) are integrated once per mesh
//! and mode (Gauss with 4 points per direction, as `l2_error`) and kept; a block of
//! columns then costs one pass over the nodes (w and its dot products) and one over the
//! cells with the mass matrix's exact rule (wᵀ M w, M never assembled), not a 4×4
//! quadrature per column. Every term is of the error's size (no difference of O(‖u‖²) numbers),
//! so the error keeps its relative accuracy on fine meshes. The nodal error
//! sqrt(h^d Σ w_i²) comes with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rayon::prelude::*;

use super::assembly::{gather_cell_vectors, l2_norms_squared, NORM_COLUMNS};
use super::element::{
    by_nodes, corners, det_jacobian, point, relative_corners, ShapeMemory, Tables,
};
use super::{gauss_legendre_unit, separable, Dofs, Exact, Mode, QuadratureRule};
use crate::mesh::{Element, Mesh, TensorGrid};
use crate::numeric::{dot_sequential, sum_partials};

/// Gauss points per direction: the integrands are smooth times (bi/tri)linear.
pub(super) const GAUSS_POINTS: usize = 4;
/// Cells per partial sum (fixed, so sums do not depend on the thread count).
const CELLS_PER_CHUNK: usize = 4096;
/// Points of the rule on a hexahedron (the most).
const MAX_POINTS: usize = GAUSS_POINTS * GAUSS_POINTS * GAUSS_POINTS;

/// What one mode contributes, on the unknowns.
pub(super) struct ModeVectors {
    /// φ(x_i)
    pub nodal: Vec<f64>,
    /// (φ, φ_i)
    pub load: Vec<f64>,
    /// (φ − I φ, φ_i)
    pub defect: Vec<f64>,
}

/// The L2 errors of one column against its exact solution.
#[derive(Clone, Copy, Debug)]
pub struct ColumnErrors {
    /// ‖u − u_h‖_{L2(Ω)}
    pub l2: f64,
    /// sqrt(h^d Σ_i (u(x_i) − u_i)²)
    pub nodal: f64,
}

/// The per-mesh data of the modes seen so far, computed when first needed.
#[derive(Default)]
pub struct ModeBasis<const D: usize> {
    vectors: Mutex<HashMap<Mode, Arc<ModeVectors>>>,
    /// (d_m, d_l), both orders stored.
    gram: Mutex<HashMap<(Mode, Mode), f64>>,
    /// The mesh as a tensor-product grid whose unknowns are its interior nodes, if it is
    /// one ([`separable`]): found on first use.
    grid: OnceLock<Option<TensorGrid<D>>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Coordinates per axis an [`AxisSines`] remembers (bits of [`slot`]): a structured mesh's
/// row of 256 cells has 1,024 distinct Gauss x-coordinates.
const SLOT_BITS: u32 = 11;

/// Where a coordinate's factor is remembered: Fibonacci hashing of its bits.
fn slot(bits: u64) -> usize {
    (bits.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOT_BITS)) as usize
}

/// Values of one mode at points, each factor sin(κ_d π x_d) remembered by coordinate (a
/// direct-mapped memory per axis: a collision replaces the older coordinate). The points of
/// a tensor-product rule on an axis-parallel cell share their coordinates per axis, and the
/// cells of a structured mesh share them along rows and columns, so the sines are computed
/// about once per distinct coordinate instead of once per point and axis; on other meshes
/// every coordinate is new. Equal to [`Mode::value`] bit for bit.
struct AxisSines {
    mode: Mode,
    /// (coordinate bits, factor) per axis and slot; the initial all-ones bits are a NaN,
    /// whose factor NaN is right.
    memory: Vec<(u64, f64)>,
}

impl AxisSines {
    fn new(mode: Mode) -> Self {
        AxisSines {
            mode,
            memory: vec![(u64::MAX, f64::NAN); 3 << SLOT_BITS],
        }
    }

    fn values<const D: usize>(&mut self, points: &[[f64; D]], out: &mut [f64]) {
        out.fill(1.0);
        for axis in 0..self.mode.dim().min(D) {
            for (p, v) in points.iter().zip(out.iter_mut()) {
                *v *= self.factor(axis, p[axis]);
            }
        }
    }

    /// The factor sin(κ_axis π x) of the mode (1 on axes beyond its dimension).
    fn factor(&mut self, axis: usize, x: f64) -> f64 {
        let bits = x.to_bits();
        let entry = &mut self.memory[(axis << SLOT_BITS) + slot(bits)];
        if entry.0 != bits {
            *entry = (bits, self.mode.axis_factor(axis, x));
        }
        entry.1
    }
}

/// Where the corners of a K-node cell sit on the reference box: per corner, whether it is
/// at the upper end of each axis ([`Element::box_corner`]), and the corner at the upper
/// end of all. Found once per element.
struct BoxCorners<const D: usize, const K: usize> {
    upper: [[bool; D]; K],
    opposite: usize,
}

impl<const D: usize, const K: usize> BoxCorners<D, K> {
    /// None for triangles, which are no boxes.
    fn of(element: Element) -> Option<Self> {
        let corners: Vec<[usize; 3]> = (0..K)
            .map(|a| element.box_corner(a))
            .collect::<Option<_>>()?;
        let upper: [[bool; D]; K] =
            std::array::from_fn(|a| std::array::from_fn(|d| corners[a][d] == 1));
        let opposite = upper.iter().position(|u| u.iter().all(|&up| up))?;
        Some(BoxCorners { upper, opposite })
    }

    /// The cell's lower and upper corners when it is an axis-parallel box (every corner is
    /// one of the box's, exactly): its quadrature points are then a tensor grid in physical
    /// space, x_d = lo_d + (hi_d − lo_d) ξ_d, and a mode's values their products of factors.
    fn bounds(&self, x: &[[f64; D]; K]) -> Option<([f64; D], [f64; D])> {
        let (lo, hi) = (x[0], x[self.opposite]);
        x.iter()
            .zip(&self.upper)
            .all(|(corner, upper)| {
                (0..D).all(|d| corner[d] == if upper[d] { hi[d] } else { lo[d] })
            })
            .then_some((lo, hi))
    }
}

/// The vectors of every mode in `modes` and their Gram matrix (d_m, d_l) (row-major
/// m × m): by 1D integrals on `grid`, the mesh as a tensor-product grid whose unknowns
/// are its interior nodes ([`separable`]), else by quadrature.
fn integrate_modes<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    grid: Option<&TensorGrid<D>>,
    modes: &[Mode],
) -> (Vec<ModeVectors>, Vec<f64>) {
    match grid {
        Some(grid) => separable::integrate_modes(grid, modes),
        None => integrate_modes_by_quadrature(mesh, dofs, modes),
    }
}

/// [`integrate_modes`] on any mesh, in one pass over the cells: each point evaluates each
/// mode once.
pub(super) fn integrate_modes_by_quadrature<const D: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    modes: &[Mode],
) -> (Vec<ModeVectors>, Vec<f64>) {
    by_nodes!(mesh.element, K => integrate_modes_of::<D, K>(mesh, dofs, modes))
}

fn integrate_modes_of<const D: usize, const K: usize>(
    mesh: &Mesh<D>,
    dofs: &Dofs,
    modes: &[Mode],
) -> (Vec<ModeVectors>, Vec<f64>) {
    let m = modes.len();
    let tables = Tables::<D, K>::new(
        mesh.element,
        &QuadratureRule::gauss(mesh.element, GAUSS_POINTS),
    );
    assert!(
        tables.len() <= MAX_POINTS,
        "{} points per cell",
        tables.len()
    );
    // The rule's points on the reference box, axis 0 fastest: point q's index per axis.
    let (gauss_1d, _) = gauss_legendre_unit(GAUSS_POINTS);
    let tensor_index: Vec<[usize; D]> = (0..tables.len())
        .map(|q| std::array::from_fn(|d| (q / GAUSS_POINTS.pow(d as u32)) % GAUSS_POINTS))
        .collect();
    let box_corners = BoxCorners::<D, K>::of(mesh.element);
    let ncells = mesh.num_cells();
    // φ at every node, zero at Dirichlet nodes (the interpolant on the unknowns): once per
    // node, not once per cell around it (nodes in chunks of the cells' size).
    let node_values: Vec<Vec<f64>> = modes
        .iter()
        .map(|&mode| {
            let mut values = vec![0.0; mesh.num_nodes()];
            values
                .par_chunks_mut(CELLS_PER_CHUNK)
                .zip(mesh.coords.par_chunks(CELLS_PER_CHUNK))
                .zip(dofs.dof_of_node.par_chunks(CELLS_PER_CHUNK))
                .for_each(|((out, points), dofs)| {
                    AxisSines::new(mode).values(points, out);
                    for (v, &dof) in out.iter_mut().zip(dofs) {
                        if dof == Dofs::NONE {
                            *v = 0.0;
                        }
                    }
                });
            values
        })
        .collect();
    // Per cell and mode: K load entries, then K defect entries.
    let per_cell = 2 * m * K;
    let mut cell_vectors = vec![0.0; ncells * per_cell];
    let partials: Vec<Vec<f64>> = cell_vectors
        .par_chunks_mut(CELLS_PER_CHUNK * per_cell)
        .enumerate()
        .map(|(chunk, out)| {
            let mut gram = vec![0.0; m * m];
            let nq = tables.len();
            let (mut phi, mut d) = (vec![0.0; m * nq], vec![0.0; m]);
            let mut points = vec![[0.0; D]; nq];
            let mut sines: Vec<AxisSines> =
                modes.iter().map(|&mode| AxisSines::new(mode)).collect();
            let mut at_nodes = vec![[0.0; K]; m];
            // ω_q |det J(x_q)| per cell shape (a structured mesh has one or a few).
            let mut shapes = ShapeMemory::<D, K, [f64; MAX_POINTS]>::new();
            // Summed here and stored once per cell (see `assembly::element_systems`: no
            // read of fresh zeroed pages before they are written).
            let mut sums = vec![0.0; per_cell];
            for (offset, cell_out) in out.chunks_mut(per_cell).enumerate() {
                sums.fill(0.0);
                let c = chunk * CELLS_PER_CHUNK + offset;
                let (x, nodes) = (corners::<D, K>(mesh, c), mesh.cell(c));
                for (values, node_values) in at_nodes.iter_mut().zip(&node_values) {
                    *values = std::array::from_fn(|a| node_values[nodes[a] as usize]);
                }
                match box_corners.as_ref().and_then(|b| b.bounds(&x)) {
                    // D factors per point from G coordinates per axis, not D per point.
                    Some((lo, hi)) => {
                        for (sines, values) in sines.iter_mut().zip(phi.chunks_exact_mut(nq)) {
                            let mut factors = [[1.0; GAUSS_POINTS]; D];
                            for (d, axis) in factors.iter_mut().enumerate() {
                                for (f, xi) in axis.iter_mut().zip(&gauss_1d) {
                                    *f = sines.factor(d, lo[d] + (hi[d] - lo[d]) * xi);
                                }
                            }
                            for (v, index) in values.iter_mut().zip(&tensor_index) {
                                *v = (0..D).map(|d| factors[d][index[d]]).product();
                            }
                        }
                    }
                    None => {
                        for (p, n) in points.iter_mut().zip(&tables.shapes) {
                            *p = point(&x, n);
                        }
                        for (sines, values) in sines.iter_mut().zip(phi.chunks_exact_mut(nq)) {
                            sines.values(&points, values);
                        }
                    }
                }
                let weights = shapes.get(&relative_corners(&x), |relative| {
                    std::array::from_fn(|q| {
                        tables
                            .ref_grads
                            .get(q)
                            .map_or(0.0, |dn| tables.weights[q] * det_jacobian(relative, dn))
                    })
                });
                for q in 0..nq {
                    let n = &tables.shapes[q];
                    let w = weights[q];
                    for j in 0..m {
                        let phi = phi[j * nq + q];
                        let interpolant: f64 = (0..K).map(|a| n[a] * at_nodes[j][a]).sum();
                        d[j] = phi - interpolant;
                        let (load, defect) = sums[2 * j * K..2 * (j + 1) * K].split_at_mut(K);
                        for a in 0..K {
                            load[a] += w * phi * n[a];
                            defect[a] += w * d[j] * n[a];
                        }
                    }
                    for i in 0..m {
                        for j in 0..m {
                            gram[i * m + j] += w * d[i] * d[j];
                        }
                    }
                }
                cell_out.copy_from_slice(&sums);
            }
            gram
        })
        .collect();
    let gram = sum_partials(&partials, m * m);
    // Vector 2j is mode j's load, 2j + 1 its defect.
    let mut gathered = gather_cell_vectors(mesh, dofs, &cell_vectors, 2 * m).into_iter();
    let vectors = node_values
        .iter()
        .map(|node_values| ModeVectors {
            nodal: dofs
                .node_of_dof
                .par_iter()
                .map(|&node| node_values[node as usize])
                .collect(),
            load: gathered.next().expect("a load per mode"),
            defect: gathered.next().expect("a defect per mode"),
        })
        .collect();
    (vectors, gram)
}

impl<const D: usize> ModeBasis<D> {
    pub fn new() -> Self {
        Self::default()
    }

    fn grid(&self, mesh: &Mesh<D>, dofs: &Dofs) -> Option<&TensorGrid<D>> {
        self.grid
            .get_or_init(|| {
                mesh.tensor_grid()
                    .filter(|grid| separable::unknowns_are_interior(grid, dofs))
            })
            .as_ref()
    }

    /// The vectors of `modes` and their Gram matrix (row-major), integrated in one pass
    /// when any of them is new.
    fn prepare(
        &self,
        mesh: &Mesh<D>,
        dofs: &Dofs,
        modes: &[Mode],
    ) -> (Vec<Arc<ModeVectors>>, Vec<f64>) {
        let m = modes.len();
        let cached = || -> Option<(Vec<Arc<ModeVectors>>, Vec<f64>)> {
            let vectors = locked(&self.vectors);
            let gram = locked(&self.gram);
            Some((
                modes
                    .iter()
                    .map(|mode| vectors.get(mode).cloned())
                    .collect::<Option<_>>()?,
                (0..m * m)
                    .map(|ij| gram.get(&(modes[ij / m], modes[ij % m])).copied())
                    .collect::<Option<_>>()?,
            ))
        };
        if let Some(found) = cached() {
            return found;
        }
        let (vectors, gram) = integrate_modes(mesh, dofs, self.grid(mesh, dofs), modes);
        let vectors: Vec<_> = vectors.into_iter().map(Arc::new).collect();
        let mut cache = locked(&self.vectors);
        for (mode, v) in modes.iter().zip(&vectors) {
            cache.insert(*mode, Arc::clone(v));
        }
        let mut cache = locked(&self.gram);
        for i in 0..m {
            for j in 0..m {
                cache.insert((modes[i], modes[j]), gram[i * m + j]);
            }
        }
        (vectors, gram)
    }

    /// The load vectors of the exact solutions' f = −Δu, column-major (unknowns × columns):
    /// b = Σ_m a_m λ_m ℓ_m.
    pub fn loads(&self, mesh: &Mesh<D>, dofs: &Dofs, exact: &[Exact]) -> Vec<f64> {
        let n = dofs.len();
        let mut block = vec![0.0; n * exact.len()];
        for (e, column) in exact.iter().zip(block.chunks_mut(n.max(1))) {
            let terms = e.modes();
            let modes: Vec<Mode> = terms.iter().map(|(_, m)| *m).collect();
            let (vectors, _) = self.prepare(mesh, dofs, &modes);
            for (t, ((a, mode), v)) in terms.iter().zip(&vectors).enumerate() {
                let scale = a * mode.eigenvalue();
                // The first term is stored, not added: fresh zeroed pages are written
                // before they are read (see `assembly::element_systems`).
                column.par_iter_mut().zip(&v.load).for_each(|(b, l)| {
                    *b = if t == 0 { scale * l } else { *b + scale * l };
                });
            }
        }
        block
    }

    /// The L2 errors of every column of `u` (unknowns × columns, column-major) against
    /// its exact solution.
    pub fn errors(
        &self,
        mesh: &Mesh<D>,
        dofs: &Dofs,
        u: &[f64],
        exact: &[Exact],
    ) -> Vec<ColumnErrors> {
        let n = dofs.len();
        let columns = exact.len();
        assert_eq!(u.len(), n * columns, "errors: u is not unknowns × columns");
        if columns == 0 {
            return Vec::new();
        }
        let prepared: Vec<_> = exact
            .iter()
            .map(|e| {
                let terms = e.modes();
                let modes: Vec<Mode> = terms.iter().map(|(_, m)| *m).collect();
                let (vectors, gram) = self.prepare(mesh, dofs, &modes);
                (terms, vectors, gram)
            })
            .collect();
        // Column c's sums in a task's partial, from offset[c]: Σ_i w_i², then
        // Σ_i w_i (d_m, φ_i) for each of its terms.
        let offset: Vec<usize> = prepared
            .iter()
            .scan(0, |next, (terms, _, _)| {
                let at = *next;
                *next += 1 + terms.len();
                Some(at)
            })
            .collect();
        let width = prepared.iter().map(|(terms, _, _)| 1 + terms.len()).sum();
        // w = I u − u_h node-major, its dot products summed on the way, in tasks of a fixed
        // number of nodes; rows of Dirichlet nodes and the padding keep their zeros. The
        // unknowns of a task's nodes are consecutive (numbered in node order), so each
        // column of a task is a few contiguous, vectorisable passes.
        let stride = columns.next_multiple_of(NORM_COLUMNS);
        let mut nodal = vec![0.0; mesh.num_nodes() * stride];
        let partials: Vec<Vec<f64>> = nodal
            .par_chunks_mut(stride * CELLS_PER_CHUNK)
            .zip(dofs.dof_of_node.par_chunks(CELLS_PER_CHUNK))
            .map(|(out, dof_of_node)| {
                let rows: Vec<usize> = (0..dof_of_node.len())
                    .filter(|&row| dof_of_node[row] != Dofs::NONE)
                    .map(|row| row * stride)
                    .collect();
                let mut sums = vec![0.0; width];
                let Some(&first) = dof_of_node.iter().find(|&&dof| dof != Dofs::NONE) else {
                    return sums;
                };
                let unknowns = first as usize..first as usize + rows.len();
                let mut w = vec![0.0; rows.len()];
                for (c, (terms, vectors, _)) in prepared.iter().enumerate() {
                    for (wi, ui) in w.iter_mut().zip(&u[c * n..][unknowns.clone()]) {
                        *wi = -ui;
                    }
                    for ((a, _), v) in terms.iter().zip(vectors) {
                        for (wi, phi) in w.iter_mut().zip(&v.nodal[unknowns.clone()]) {
                            *wi += a * phi;
                        }
                    }
                    let at = &mut sums[offset[c]..offset[c] + 1 + terms.len()];
                    at[0] = dot_sequential(&w, &w);
                    for (s, v) in at[1..].iter_mut().zip(vectors) {
                        *s = dot_sequential(&w, &v.defect[unknowns.clone()]);
                    }
                    for (&row, &wi) in rows.iter().zip(&w) {
                        out[row + c] = wi;
                    }
                }
                sums
            })
            .collect();
        let sums = sum_partials(&partials, width);
        // wᵀ M w per column.
        let quadratic = l2_norms_squared(mesh, self.grid(mesh, dofs), &nodal, columns, stride);
        let h_d = mesh.h().powi(D as i32);
        prepared
            .iter()
            .enumerate()
            .map(|(c, (terms, _, gram))| {
                let at = &sums[offset[c]..];
                let m = terms.len();
                let mut squared = quadratic[c];
                for (i, (a, _)) in terms.iter().enumerate() {
                    squared += 2.0 * a * at[1 + i];
                    for (j, (b, _)) in terms.iter().enumerate() {
                        squared += a * b * gram[i * m + j];
                    }
                }
                ColumnErrors {
                    l2: squared.max(0.0).sqrt(),
                    nodal: (at[0] * h_d).sqrt(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fem::{assemble_loads, l2_error, nodal_l2_error, Manufactured, PressureSeries};
    use crate::mesh::{unit_cube, unit_square, Element};

    /// The remembered sines give every point's mode value bit for bit, on an axis-parallel
    /// cell (coordinates repeat), its neighbour (coordinates remembered from the cell
    /// before), a skewed one (no repeats), many points (collisions), in 2D and 3D.
    #[test]
    fn axis_sines_equal_mode_values() {
        let rule = QuadratureRule::gauss(Element::Q1, GAUSS_POINTS);
        let tables = Tables::<2, 4>::new(Element::Q1, &rule);
        let mode = Mode::new([2, 3, 0], 2);
        let mut sines = AxisSines::new(mode);
        let right = [
            [0.3125, 0.5],
            [0.375, 0.5],
            [0.375, 0.5625],
            [0.3125, 0.5625],
        ];
        for cell in [
            [[0.25, 0.5], [0.3125, 0.5], [0.3125, 0.5625], [0.25, 0.5625]],
            right, // its y remembered from the cell before
            [[0.1, 0.2], [0.4, 0.25], [0.45, 0.6], [0.05, 0.5]],
            right,
        ] {
            let points: Vec<[f64; 2]> = tables.shapes.iter().map(|n| point(&cell, n)).collect();
            let mut values = vec![0.0; points.len()];
            sines.values(&points, &mut values);
            for (p, v) in points.iter().zip(&values) {
                assert_eq!(v.to_bits(), mode.value(p).to_bits(), "at {p:?}");
            }
        }
        // More coordinates than slots: collisions replace remembered ones.
        let points: Vec<[f64; 2]> = (0..20_000)
            .map(|i| [(i % 3001) as f64 / 3001.0, ((i * 7) % 4999) as f64 / 4999.0])
            .collect();
        let mut values = vec![0.0; points.len()];
        sines.values(&points, &mut values);
        for (p, v) in points.iter().zip(&values) {
            assert_eq!(v.to_bits(), mode.value(p).to_bits(), "at {p:?}");
        }
        let mode = Mode::new([1, 2, 3], 3);
        let points = [[0.1, 0.2, 0.3], [0.1, 0.2, 0.7], [0.6, 0.2, 0.3]];
        let mut values = [0.0; 3];
        let mut sines = AxisSines::new(mode);
        sines.values(&points, &mut values);
        for (p, v) in points.iter().zip(&values) {
            assert_eq!(v.to_bits(), mode.value(p).to_bits());
        }
    }

    /// Loads and errors through the modes equal the direct per-column quadrature
    /// (`assemble_loads`, `l2_error`, `nodal_l2_error`) on Q1 and P1 squares and a Q1 cube,
    /// for the interpolant perturbed (errors of the discretisation's size), zero (error =
    /// ‖u‖), and a perturbation much smaller than the interpolation error.
    fn check<const D: usize>(mesh: &Mesh<D>) {
        // u(x_i) is O(1): evaluating it two ways differs by a few ulps, which is what an
        // error of 1e-9 is compared with.
        const ROUNDING: f64 = 1e-14;
        let dofs = Dofs::from_boundary(&mesh.on_boundary);
        let n = dofs.len();
        let exact = [
            Exact::Wave(Manufactured::new(1, D)),
            Exact::Wave(Manufactured::new(3, D)),
            Exact::Pressure(PressureSeries::new(0.3, D)),
            Exact::Pressure(PressureSeries::new(0.0, D)),
        ];
        let basis = ModeBasis::new();
        let loads = basis.loads(mesh, &dofs, &exact);
        let fs: Vec<_> = exact.iter().map(|e| move |x: &[f64]| e.f(x)).collect();
        let direct = assemble_loads(mesh, &dofs, &fs);
        let scale = direct.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let worst = loads
            .iter()
            .zip(&direct)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        // 4- vs 3-point Gauss: both O(h^6)-accurate.
        assert!(
            worst <= 1e-5 * scale,
            "loads differ by {worst:e} (scale {scale:e})"
        );

        for amplitude in [1e-2, 0.0, 1e-9] {
            let mut u = Vec::with_capacity(n * exact.len());
            for e in &exact {
                for (i, &node) in dofs.node_of_dof.iter().enumerate() {
                    let wiggle = amplitude * ((i * 7919 % 101) as f64 / 50.0 - 1.0);
                    let value = if amplitude == 0.0 {
                        0.0
                    } else {
                        e.u(&mesh.coords[node as usize])
                    };
                    u.push(value + wiggle);
                }
            }
            let errors = basis.errors(mesh, &dofs, &u, &exact);
            for (c, e) in exact.iter().enumerate() {
                let uc = &u[c * n..(c + 1) * n];
                let l2 = l2_error(mesh, &dofs, uc, |x| e.u(x));
                let nodal = nodal_l2_error(mesh, &dofs, uc, |x| e.u(x));
                let got = errors[c];
                assert!(
                    (got.l2 - l2).abs() <= 1e-9 * l2 + ROUNDING,
                    "{:?} column {c}, amplitude {amplitude}: L2 {} vs {l2}",
                    mesh.element,
                    got.l2
                );
                assert!(
                    (got.nodal - nodal).abs() <= 1e-12 * nodal + ROUNDING,
                    "column {c}, amplitude {amplitude}: nodal {} vs {nodal}",
                    got.nodal
                );
            }
        }
    }

    /// Boxes are recognised by their corners, exactly: the cells of the unit square and
    /// cube, not a moved or a triangular one.
    #[test]
    fn axis_parallel_boxes() {
        let square = unit_square(4, Element::Q1).unwrap();
        let x = corners::<2, 4>(&square, 5);
        let squares = BoxCorners::<2, 4>::of(Element::Q1).expect("quadrilaterals");
        let (lo, hi) = squares.bounds(&x).expect("a square cell");
        assert_eq!((lo, hi), ([0.25, 0.25], [0.5, 0.5]));
        let mut moved = x;
        moved[2][0] += 1e-12;
        assert!(squares.bounds(&moved).is_none());
        let cube = unit_cube(2).unwrap();
        let x = corners::<3, 8>(&cube, 7);
        let cubes = BoxCorners::<3, 8>::of(Element::Q1Hex).expect("hexahedra");
        assert_eq!(cubes.bounds(&x), Some(([0.5; 3], [1.0; 3])));
        assert!(BoxCorners::<2, 3>::of(Element::P1).is_none());
    }

    #[test]
    fn mode_loads_and_errors_equal_direct_quadrature() {
        check(&unit_square(32, Element::Q1).unwrap());
        // Some cells moved off the axis-parallel boxes: both ways of evaluating the modes.
        let mut skewed = unit_square(32, Element::Q1).unwrap();
        for (i, x) in skewed.coords.iter_mut().enumerate() {
            if i % 7 == 0 && x.iter().all(|&c| c > 0.0 && c < 1.0) {
                x[0] += 0.2 / 32.0;
                x[1] -= 0.1 / 32.0;
            }
        }
        check(&skewed);
        check(&unit_square(32, Element::P1).unwrap());
        check(&unit_cube(12).unwrap());
    }
}
