//! Integrals on tensor-product grids, one axis at a time: the stiffness matrix
//! ([`stiffness`]: A = Σ_d ⊗_e (K_e if e = d else M_e) from the lines' 1D matrices), wᵀ M w
//! ([`l2_norms_squared`]) and the manufactured modes' integrals ([`integrate_modes`]).
//!
//! On a grid ([`Mesh::tensor_grid`](crate::mesh::Mesh::tensor_grid)) whose boundary is
//! Dirichlet all round, a Q1 basis function is a product of hats, Ψ_i(x) = Π_d ψ_{i_d}(x_d),
//! a mode is a product of sines, φ(x) = Π_d s_d(x_d), and its interpolant on the unknowns
//! is Π_d Î s_d (Î interpolates with zero end values). With the 1D defects
//! δ_d = s_d − Î s_d,
//!
//!   φ − I φ = Π_d s_d − Π_d (s_d − δ_d) = Σ_{S≠∅} (−1)^{|S|+1} Π_{d∈S} δ_d Π_{d∉S} s_d,
//!
//! so the load (φ, Ψ_i) = Π_d (s_d, ψ_{i_d}), the defect's loads (φ − I φ, Ψ_i) and the Gram
//! entries (φ_m − I φ_m, φ_l − I φ_l) are sums of products of 1D integrals. Each is summed
//! with the 4-point Gauss rule per cell of the general path (a tensor Gauss rule applied
//! to a product is the product of the 1D sums), and every term is of the defect's size, as
//! on the general path. The cost is O(n) per axis and mode plus one pass over the
//! unknowns, instead of 4^D points per cell.

use rayon::prelude::*;

use super::modes::{ModeVectors, GAUSS_POINTS};
use super::NORM_COLUMNS;
use super::{gauss_legendre_unit, Dofs, Mode};
use crate::error::Result;
use crate::mesh::{grid_index, step, TensorGrid};
use crate::numeric::sum_partials;
use crate::sparse::Csr;

/// Nodes per task of [`l2_norms_squared`] (whole lines of at least this many), fixed so
/// that the sums do not depend on the thread count.
const NORM_NODES_PER_TASK: usize = 4096;

/// Whether the unknowns are the grid's interior nodes numbered in node order, the
/// boundary nodes Dirichlet: what the products above assume.
pub(super) fn unknowns_are_interior<const D: usize>(grid: &TensorGrid<D>, dofs: &Dofs) -> bool {
    let sizes = grid.points();
    let (mut index, mut next) = ([0; D], 0);
    dofs.dof_of_node.len() == sizes.iter().product::<usize>()
        && dofs.dof_of_node.iter().all(|&dof| {
            let expected = if grid.on_boundary(index) {
                Dofs::NONE
            } else {
                next += 1;
                next - 1
            };
            step(&mut index, sizes);
            dof == expected
        })
}

/// One axis's Gauss points, cell after cell, with their weights ω_q h_e.
struct AxisRule {
    /// Per point, its cell's left node and its hat values (1 − ξ, ξ) there.
    points: Vec<(usize, f64, f64)>,
    x: Vec<f64>,
    weights: Vec<f64>,
}

impl AxisRule {
    fn new(line: &[f64]) -> Self {
        let (xi, omega) = gauss_legendre_unit(GAUSS_POINTS);
        let mut rule = AxisRule {
            points: Vec::new(),
            x: Vec::new(),
            weights: Vec::new(),
        };
        for (e, cell) in line.windows(2).enumerate() {
            let (lo, hi) = (cell[0], cell[1]);
            for (&t, &w) in xi.iter().zip(&omega) {
                rule.points.push((e, 1.0 - t, t));
                // As the general path places its points on an axis-parallel cell.
                rule.x.push(lo + (hi - lo) * t);
                rule.weights.push(w * (hi - lo));
            }
        }
        rule
    }
}

/// A mode's factor s on one axis: its values, 1D loads and 1D defect.
struct AxisFactor {
    /// s(x_i), zero at both ends (the interpolant's values).
    nodal: Vec<f64>,
    /// (s, ψ_i)
    load: Vec<f64>,
    /// (δ, ψ_i), δ = s − Î s
    defect: Vec<f64>,
    /// s and δ at the rule's points.
    at_points: [Vec<f64>; 2],
}

impl AxisFactor {
    fn new(line: &[f64], rule: &AxisRule, factor: impl Fn(f64) -> f64) -> Self {
        let last = line.len() - 1;
        let nodal: Vec<f64> = (0..line.len())
            .map(|i| {
                if i == 0 || i == last {
                    0.0
                } else {
                    factor(line[i])
                }
            })
            .collect();
        let (mut load, mut defect) = (vec![0.0; line.len()], vec![0.0; line.len()]);
        let (mut s_points, mut delta_points) = (Vec::new(), Vec::new());
        for ((&(e, left, right), &x), &w) in rule.points.iter().zip(&rule.x).zip(&rule.weights) {
            let s = factor(x);
            let delta = s - (left * nodal[e] + right * nodal[e + 1]);
            load[e] += w * s * left;
            load[e + 1] += w * s * right;
            defect[e] += w * delta * left;
            defect[e + 1] += w * delta * right;
            s_points.push(s);
            delta_points.push(delta);
        }
        AxisFactor {
            nodal,
            load,
            defect,
            at_points: [s_points, delta_points],
        }
    }
}

/// (−1)^{|S|+1} for the axes of bit set `set`.
fn sign(set: usize) -> f64 {
    if set.count_ones() % 2 == 1 {
        1.0
    } else {
        -1.0
    }
}

/// The vectors of every mode and their Gram matrix (row-major m × m), as
/// `modes::integrate_modes` gives them, on a grid whose unknowns are its interior nodes
/// ([`unknowns_are_interior`]).
pub(super) fn integrate_modes<const D: usize>(
    grid: &TensorGrid<D>,
    modes: &[Mode],
) -> (Vec<ModeVectors>, Vec<f64>) {
    let rules: Vec<AxisRule> = grid.lines.iter().map(|line| AxisRule::new(line)).collect();
    let factors: Vec<[AxisFactor; D]> = modes
        .iter()
        .map(|mode| {
            std::array::from_fn(|d| {
                AxisFactor::new(&grid.lines[d], &rules[d], |x| mode.axis_factor(d, x))
            })
        })
        .collect();
    let interior: [usize; D] = std::array::from_fn(|d| grid.lines[d].len() - 2);
    let unknowns = interior.iter().product::<usize>();
    // A value per unknown from its grid index (interior index + 1 per axis).
    let on_unknowns = |value: &(dyn Fn([usize; D]) -> f64 + Sync)| -> Vec<f64> {
        (0..unknowns)
            .into_par_iter()
            .map(|u| value(grid_index(u, interior).map(|i| i + 1)))
            .collect()
    };
    let sets = 1..1usize << D; // the nonempty sets S of axes
    let vectors = factors
        .iter()
        .map(|f| ModeVectors {
            // In axis order from 1, as `Mode::value` multiplies (the same bits).
            nodal: on_unknowns(&|i| (0..D).fold(1.0, |v, d| v * f[d].nodal[i[d]])),
            load: on_unknowns(&|i| (0..D).map(|d| f[d].load[i[d]]).product()),
            defect: on_unknowns(&|i| {
                sets.clone()
                    .map(|set| {
                        let product: f64 = (0..D)
                            .map(|d| {
                                if set >> d & 1 == 1 {
                                    f[d].defect[i[d]]
                                } else {
                                    f[d].load[i[d]]
                                }
                            })
                            .product();
                        sign(set) * product
                    })
                    .sum()
            }),
        })
        .collect();
    // Per axis, the 1D integrals (f_a, g_b) of two modes' factors, a, b ∈ {s, δ}.
    let integrals = |m: usize, l: usize, d: usize| -> [[f64; 2]; 2] {
        let (f, g) = (&factors[m][d].at_points, &factors[l][d].at_points);
        std::array::from_fn(|a| {
            std::array::from_fn(|b| {
                rules[d]
                    .weights
                    .iter()
                    .zip(&f[a])
                    .zip(&g[b])
                    .map(|((w, x), y)| w * x * y)
                    .sum()
            })
        })
    };
    let m = modes.len();
    let mut gram = vec![0.0; m * m];
    for i in 0..m {
        for j in 0..m {
            let per_axis: Vec<[[f64; 2]; 2]> = (0..D).map(|d| integrals(i, j, d)).collect();
            gram[i * m + j] = sets
                .clone()
                .flat_map(|s| sets.clone().map(move |t| (s, t)))
                .map(|(s, t)| {
                    let product: f64 = (0..D)
                        .map(|d| per_axis[d][s >> d & 1][t >> d & 1])
                        .product();
                    sign(s) * sign(t) * product
                })
                .sum();
        }
    }
    (vectors, gram)
}

/// The 1D mass matrix of the hats on `line` (exact for Q1), per point: its entries with
/// the point to the left, itself and the point to the right (zero past the ends).
fn line_mass(line: &[f64]) -> Vec<[f64; 3]> {
    (0..line.len())
        .map(|i| {
            let left = if i > 0 { line[i] - line[i - 1] } else { 0.0 };
            let right = line.get(i + 1).map_or(0.0, |next| next - line[i]);
            [left / 6.0, (left + right) / 3.0, right / 6.0]
        })
        .collect()
}

/// The 1D stiffness matrix of the hats on `line`, per point as [`line_mass`].
fn line_stiffness(line: &[f64]) -> Vec<[f64; 3]> {
    (0..line.len())
        .map(|i| {
            let left = if i > 0 {
                1.0 / (line[i] - line[i - 1])
            } else {
                0.0
            };
            let right = line.get(i + 1).map_or(0.0, |next| 1.0 / (next - line[i]));
            [-left, left + right, -right]
        })
        .collect()
}

/// The Q1 stiffness matrix on the unknowns of `grid` (its interior nodes, in order):
/// A = Σ_d ⊗_e (K_e if e = d else M_e), with the 1D stiffness and mass matrices of the
/// lines, so entry (p, q) = Σ_d Π_e (e = d ? K_e : M_e)[p_e, q_e] for the 3^D neighbours q
/// of p. The pattern is the assembled one's (every neighbour that is an unknown, columns
/// ascending), and the values equal it to rounding: the Gauss rule of the assembly is
/// exact for both.
pub(super) fn stiffness<const D: usize>(grid: &TensorGrid<D>) -> Result<Csr<f64>> {
    let interior: [usize; D] = std::array::from_fn(|d| grid.lines[d].len() - 2);
    let unknowns = interior.iter().product::<usize>();
    let axes: Vec<[Vec<[f64; 3]>; 2]> = grid
        .lines
        .iter()
        .map(|line| [line_mass(line), line_stiffness(line)])
        .collect();
    // Offset o_d ∈ {0, 1, 2} (left, same, right) per axis, axis 0 fastest: the neighbours'
    // unknowns ascend with t.
    let offsets: Vec<[usize; D]> = (0..3usize.pow(D as u32))
        .map(|t| grid_index(t, [3; D]))
        .collect();
    let strides: [usize; D] = std::array::from_fn(|d| interior[..d].iter().product());
    // Whether offset o_d is within the interior at index i of axis d.
    let inside =
        |d: usize, i: usize, o: usize| !((i == 0 && o == 0) || (i + 1 == interior[d] && o == 2));
    let lines = unknowns / interior[0];
    // Rows per line along axis 0: the entries of a row are the product of its axes' counts.
    let row_length = |at: &[usize; D]| -> usize {
        (0..D)
            .map(|d| (0..3).filter(|&o| inside(d, at[d], o)).count())
            .product()
    };
    let mut row_ptr = Vec::with_capacity(unknowns + 1);
    row_ptr.push(0);
    for line in 0..lines {
        let mut at = grid_index(line * interior[0], interior);
        for i in 0..interior[0] {
            at[0] = i;
            row_ptr.push(row_ptr[row_ptr.len() - 1] + row_length(&at));
        }
    }
    let nnz = row_ptr[unknowns];
    let (mut col_idx, mut values) = (vec![0u32; nnz], vec![0.0; nnz]);
    // Tasks of whole lines, each writing its own part of the arrays.
    let mut parts = Vec::with_capacity(lines);
    let (mut columns_left, mut values_left) = (&mut col_idx[..], &mut values[..]);
    for line in 0..lines {
        let rows = line * interior[0]..(line + 1) * interior[0];
        let len = row_ptr[rows.end] - row_ptr[rows.start];
        let (c, rest_c) = std::mem::take(&mut columns_left).split_at_mut(len);
        let (v, rest_v) = std::mem::take(&mut values_left).split_at_mut(len);
        (columns_left, values_left) = (rest_c, rest_v);
        parts.push((line, c, v));
    }
    parts.into_par_iter().for_each(|(line, c, v)| {
        let first = line * interior[0];
        let mut at = grid_index(first, interior);
        let mut next = 0;
        for i in 0..interior[0] {
            at[0] = i;
            // Per axis, the row's mass and stiffness entries (interior index i is point
            // i + 1 of the line).
            let local: [[[f64; 3]; 2]; D] =
                std::array::from_fn(|d| [axes[d][0][at[d] + 1], axes[d][1][at[d] + 1]]);
            for o in &offsets {
                if !(0..D).all(|d| inside(d, at[d], o[d])) {
                    continue;
                }
                let column = (0..D).fold(first + i, |col, d| col + o[d] * strides[d] - strides[d]);
                let mut value = 0.0;
                for d in 0..D {
                    let mut term = 1.0;
                    for (e, axis) in local.iter().enumerate() {
                        term *= axis[usize::from(e == d)][o[e]];
                    }
                    value += term;
                }
                c[next] = column as u32;
                v[next] = value;
                next += 1;
            }
        }
    });
    Csr::new(unknowns, unknowns, row_ptr, col_idx, values)
}

/// wᵀ M w per column of the node-major block `nodal` (`stride` values per node, a
/// multiple of [`NORM_COLUMNS`]) on `grid`, where M = M_{D−1} ⊗ … ⊗ M_0 is the Q1 mass
/// matrix: per line of nodes along axis 0, the combination u = Σ_{r'} c_{r r'} W_{r'} of
/// the neighbouring lines r' (c: the product of the other axes' 1D mass entries), then
/// Σ_i W_r[i] (M_0 u)[i]. About 3^(D−1) + 4 multiply-adds per node and column.
pub(super) fn l2_norms_squared<const D: usize>(
    grid: &TensorGrid<D>,
    nodal: &[f64],
    stride: usize,
) -> Vec<f64> {
    let sizes = grid.points();
    let n0 = sizes[0];
    let lines = sizes[1..].iter().product::<usize>();
    assert_eq!(
        nodal.len(),
        lines * n0 * stride,
        "nodal is not nodes × stride"
    );
    let masses: Vec<Vec<[f64; 3]>> = grid.lines.iter().map(|line| line_mass(line)).collect();
    let lines_per_task = NORM_NODES_PER_TASK.div_ceil(n0);
    let partials: Vec<Vec<f64>> = (0..lines.div_ceil(lines_per_task))
        .into_par_iter()
        .map(|task| {
            let mut sums = vec![0.0; stride];
            let mut neighbours: Vec<(usize, f64)> = Vec::with_capacity(9);
            for r in task * lines_per_task..((task + 1) * lines_per_task).min(lines) {
                let index = grid_index(r * n0, sizes);
                neighbours.clear();
                // Offsets of 0, 1, 2 (left, same, right) per axis beyond the first.
                'neighbour: for t in 0..3usize.pow(D as u32 - 1) {
                    let (mut line, mut line_stride, mut c) = (r, 1, 1.0);
                    for d in 1..D {
                        let o = t / 3usize.pow(d as u32 - 1) % 3;
                        if (index[d] == 0 && o == 0) || (index[d] + 1 == sizes[d] && o == 2) {
                            continue 'neighbour;
                        }
                        c *= masses[d][index[d]][o];
                        line = line + o * line_stride - line_stride;
                        line_stride *= sizes[d];
                    }
                    neighbours.push((line, c));
                }
                for g in 0..stride / NORM_COLUMNS {
                    let at = |line: usize, i: usize| (line * n0 + i) * stride + g * NORM_COLUMNS;
                    let combined = |i: usize| {
                        let mut u = [0.0; NORM_COLUMNS];
                        for &(line, c) in &neighbours {
                            let w = &nodal[at(line, i)..at(line, i) + NORM_COLUMNS];
                            for (v, wj) in u.iter_mut().zip(w) {
                                *v += c * wj;
                            }
                        }
                        u
                    };
                    let (mut previous, mut current) = ([0.0; NORM_COLUMNS], combined(0));
                    let mut sum = [0.0; NORM_COLUMNS];
                    for (i, &[left, middle, right]) in masses[0].iter().enumerate() {
                        let next = if i + 1 < n0 {
                            combined(i + 1)
                        } else {
                            [0.0; NORM_COLUMNS]
                        };
                        let w = &nodal[at(r, i)..at(r, i) + NORM_COLUMNS];
                        for j in 0..NORM_COLUMNS {
                            sum[j] +=
                                w[j] * (left * previous[j] + middle * current[j] + right * next[j]);
                        }
                        (previous, current) = (current, next);
                    }
                    for (s, v) in sums[g * NORM_COLUMNS..].iter_mut().zip(&sum) {
                        *s += v;
                    }
                }
            }
            sums
        })
        .collect();
    sum_partials(&partials, stride)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fem::modes::integrate_modes_by_quadrature;
    use crate::mesh::{unit_cube, unit_square, Element, Mesh};

    /// The 1D products equal the general path's 4^D-point quadrature per cell: vectors to
    /// rounding of their scale, the nodal values bit for bit, the Gram matrix (entries of
    /// the defect's size, O(h⁴)) to rounding of its own scale.
    fn check<const D: usize>(mesh: &Mesh<D>, modes: &[Mode]) {
        let dofs = Dofs::from_boundary(&mesh.on_boundary);
        let grid = mesh.tensor_grid().expect("a grid");
        assert!(unknowns_are_interior(&grid, &dofs));
        let (vectors, gram) = integrate_modes(&grid, modes);
        let (expected, expected_gram) = integrate_modes_by_quadrature(mesh, &dofs, modes);
        let close = |a: &[f64], b: &[f64], what: &str| {
            let scale = b.iter().fold(0.0f64, |s, v| s.max(v.abs()));
            assert!(scale > 0.0, "{what}: all zero");
            assert_eq!(a.len(), b.len(), "{what}");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-12 * scale,
                    "{what}[{i}]: {x} against {y}"
                );
            }
        };
        for (v, e) in vectors.iter().zip(&expected) {
            assert_eq!(v.nodal, e.nodal, "nodal values");
            close(&v.load, &e.load, "load");
            close(&v.defect, &e.defect, "defect");
        }
        close(&gram, &expected_gram, "gram");
    }

    #[test]
    fn grid_integrals_equal_quadrature() {
        let modes2 = [Mode::new([1, 1, 0], 2), Mode::new([2, 3, 0], 2)];
        check(&unit_square(8, Element::Q1).unwrap(), &modes2);
        check(
            &unit_square(13, Element::Q1).unwrap(),
            &[Mode::new([5, 5, 0], 2)],
        );
        // Lines of unequal spacing, not the same per axis.
        let mut stretched = unit_square(6, Element::Q1).unwrap();
        for x in &mut stretched.coords {
            *x = [x[0] * x[0], 0.5 * (x[1] + x[1] * x[1])];
        }
        check(&stretched, &modes2);
        let modes3 = [Mode::new([1, 1, 1], 3), Mode::new([2, 1, 3], 3)];
        check(&unit_cube(5).unwrap(), &modes3);
    }

    /// wᵀ M w along the lines equals the cell-by-cell sum of the general path, with
    /// values on boundary nodes too, in 2D (uniform and stretched lines) and 3D.
    #[test]
    fn grid_norms_equal_cell_sums() {
        fn check<const D: usize>(mesh: &Mesh<D>) {
            let grid = mesh.tensor_grid().expect("a grid");
            let stride = 2 * NORM_COLUMNS;
            let nodal: Vec<f64> = (0..mesh.num_nodes() * stride)
                .map(|i| ((i * 7919) % 101) as f64 / 50.0 - 1.0)
                .collect();
            let along_lines = l2_norms_squared(&grid, &nodal, stride);
            let by_cells = crate::fem::l2_norms_squared(mesh, None, &nodal, stride, stride);
            for (j, (a, b)) in along_lines.iter().zip(&by_cells).enumerate() {
                assert!((a - b).abs() <= 1e-13 * b, "column {j}: {a} against {b}");
            }
            assert_eq!(
                crate::fem::l2_norms_squared(mesh, Some(&grid), &nodal, 3, stride),
                along_lines[..3]
            );
        }
        check(&unit_square(9, Element::Q1).unwrap());
        let mut stretched = unit_square(7, Element::Q1).unwrap();
        for x in &mut stretched.coords {
            *x = [x[0] * x[0], 0.5 * (x[1] + x[1] * x[1])];
        }
        check(&stretched);
        check(&unit_cube(4).unwrap());
    }

    /// The stiffness from the lines' 1D matrices has the assembled matrix's pattern and its
    /// values to rounding, in 2D (uniform and stretched lines) and 3D; `assemble_stiffness`
    /// takes this path on grids and gives the assembled matrix elsewhere.
    #[test]
    fn grid_stiffness_equals_assembly() {
        fn check<const D: usize>(mesh: &Mesh<D>) {
            let grid = mesh.tensor_grid().expect("a grid");
            let from_lines = stiffness(&grid).unwrap();
            let assembled = crate::fem::assemble_poisson(mesh, |_| 0.0).unwrap().matrix;
            assert_eq!(from_lines.row_ptr(), assembled.row_ptr());
            assert_eq!(from_lines.col_idx(), assembled.col_idx());
            for r in 0..assembled.row_ptr().len() - 1 {
                let span = assembled.row_ptr()[r]..assembled.row_ptr()[r + 1];
                let row = &assembled.values()[span.clone()];
                let scale = row.iter().fold(0.0f64, |s, v| s.max(v.abs()));
                for (a, b) in from_lines.values()[span].iter().zip(row) {
                    assert!((a - b).abs() <= 1e-14 * scale, "row {r}: {a} against {b}");
                }
            }
            let (matrix, dofs) = crate::fem::assemble_stiffness(mesh).unwrap();
            assert_eq!(matrix.values(), from_lines.values());
            assert_eq!(dofs, Dofs::from_boundary(&mesh.on_boundary));
        }
        check(&unit_square(9, Element::Q1).unwrap());
        let mut stretched = unit_square(7, Element::Q1).unwrap();
        for x in &mut stretched.coords {
            *x = [x[0] * x[0], 0.5 * (x[1] + x[1] * x[1])];
        }
        check(&stretched);
        check(&unit_cube(4).unwrap());
        // Not a grid: the assembled matrix itself.
        let triangles = unit_square(5, Element::P1).unwrap();
        let (matrix, _) = crate::fem::assemble_stiffness(&triangles).unwrap();
        let assembled = crate::fem::assemble_poisson(&triangles, |_| 0.0)
            .unwrap()
            .matrix;
        assert_eq!(matrix.values(), assembled.values());
        assert_eq!(matrix.col_idx(), assembled.col_idx());
    }

    #[test]
    fn other_unknowns_take_the_general_path() {
        let mesh = unit_square(4, Element::Q1).unwrap();
        let grid = mesh.tensor_grid().unwrap();
        // A Neumann side: its nodes are unknowns.
        let mut neumann = mesh.on_boundary.clone();
        neumann[2] = false;
        assert!(!unknowns_are_interior(
            &grid,
            &Dofs::from_boundary(&neumann)
        ));
        // Interior nodes in another order.
        let mut dofs = Dofs::from_boundary(&mesh.on_boundary);
        dofs.dof_of_node.swap(6, 7);
        assert!(!unknowns_are_interior(&grid, &dofs));
    }
}
