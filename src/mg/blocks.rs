//! The block-diagonal preconditioner of block Chebyshev smoothing (docs/mathematics.md §4):
//! a level's unknowns grouped into small aggregates along its strong couplings, and B, A's
//! block diagonal on them, inverted block by block. Where a mesh's flat triangles couple
//! a node far more strongly to some neighbours than to the others, point smoothers leave
//! error that is smooth across the strong couplings and oscillates along the weak ones;
//! relaxing the strongly coupled nodes together removes it.

use crate::error::{Error, Result};
use crate::linalg::{extreme_eigenvalues, LanczosParams};
use crate::sparse::{spmv, Csr, SparseRows};

/// The strength |a_ij| / √(a_ii a_jj) a negative coupling needs to join two nodes in an
/// aggregate. Isotropic meshes stay below it (the P1 unit square's couplings are 1/4, Q1's
/// 1/8, equilateral triangles' 1/6), so their levels keep point smoothing.
pub const STRONG_COUPLING: f64 = 0.3;

/// Most nodes in an aggregate: a row of B⁻¹ then has at most this many entries.
pub const MAX_BLOCK: usize = 8;

/// B⁻¹ of a level, with what the smoother needs to know about it.
pub struct BlockInverse {
    /// B⁻¹: symmetric, block diagonal on the aggregates, the diagonal in each row.
    pub inverse: Csr<f64>,
    /// R = L⁻¹ for B = L Lᵀ block by block (lower triangular in each block's order), so
    /// B⁻¹ = Rᵀ R and R A Rᵀ, symmetric, has B⁻¹A's eigenvalues.
    pub factor: Csr<f64>,
    /// Aggregates of two or more nodes.
    pub blocks: usize,
    /// Unknowns in them.
    pub grouped: usize,
}

/// B⁻¹ of the symmetric positive (semi-)definite `a`, or none when no node has a strong
/// coupling (every aggregate one node: B = D, point smoothing). Aggregates grow breadth
/// first from the lowest unassigned node over its strong couplings
/// ([`STRONG_COUPLING`]), up to [`MAX_BLOCK`] nodes; an aggregate whose block is not
/// positive definite (all of a singular level's nodes) falls back to single nodes.
pub fn block_inverse(a: &Csr<f64>) -> Result<Option<BlockInverse>> {
    let n = a.nrows();
    let diagonal = a.diagonal();
    if let Some(r) = (0..n).find(|&r| !(diagonal[r] > 0.0 && diagonal[r].is_finite())) {
        return Err(Error::InvalidInput(format!(
            "block smoothing: row {r} has the diagonal {} (needs > 0)",
            diagonal[r]
        )));
    }
    let strong = |i: usize, j: usize, v: f64| {
        i != j && v < 0.0 && -v >= STRONG_COUPLING * (diagonal[i] * diagonal[j]).sqrt()
    };
    let mut assigned = vec![false; n];
    let mut aggregates: Vec<Vec<usize>> = Vec::new();
    for seed in 0..n {
        if assigned[seed] {
            continue;
        }
        assigned[seed] = true;
        let mut group = vec![seed];
        let mut next = 0;
        while next < group.len() && group.len() < MAX_BLOCK {
            let i = group[next];
            next += 1;
            let (columns, values) = a.row(i);
            for (&j, &v) in columns.iter().zip(values) {
                let j = j as usize;
                if !assigned[j] && strong(i, j, v) && group.len() < MAX_BLOCK {
                    assigned[j] = true;
                    group.push(j);
                }
            }
        }
        aggregates.push(group);
    }
    let mut inverse_rows: Vec<Vec<(u32, f64)>> = vec![Vec::new(); n];
    let mut factor_rows: Vec<Vec<(u32, f64)>> = vec![Vec::new(); n];
    let (mut blocks, mut grouped) = (0, 0);
    let mut place = vec![usize::MAX; n];
    for group in &aggregates {
        let k = group.len();
        let factor = match k {
            1 => None,
            _ => inverse_cholesky(&dense_block(a, group, &mut place), k),
        };
        match factor {
            Some(r) => {
                (blocks, grouped) = (blocks + 1, grouped + k);
                for (l, &i) in group.iter().enumerate() {
                    // (B⁻¹)_lm = Σ_p R_pl R_pm over p ≥ max(l, m).
                    inverse_rows[i] = group
                        .iter()
                        .enumerate()
                        .map(|(m, &j)| {
                            let v = (l.max(m)..k).map(|p| r[p * k + l] * r[p * k + m]).sum();
                            (j as u32, v)
                        })
                        .collect();
                    factor_rows[i] = (0..=l).map(|m| (group[m] as u32, r[l * k + m])).collect();
                }
            }
            None => group.iter().for_each(|&i| {
                inverse_rows[i] = vec![(i as u32, 1.0 / diagonal[i])];
                factor_rows[i] = vec![(i as u32, 1.0 / diagonal[i].sqrt())];
            }),
        }
    }
    if blocks == 0 {
        return Ok(None);
    }
    Ok(Some(BlockInverse {
        inverse: from_rows(n, inverse_rows)?,
        factor: from_rows(n, factor_rows)?,
        blocks,
        grouped,
    }))
}

/// A CSR matrix from each row's (column, value) pairs in any order.
fn from_rows(n: usize, rows: Vec<Vec<(u32, f64)>>) -> Result<Csr<f64>> {
    let (mut row_ptr, mut col_idx, mut values) = (vec![0], Vec::new(), Vec::new());
    for mut row in rows {
        row.sort_unstable_by_key(|&(j, _)| j);
        col_idx.extend(row.iter().map(|&(j, _)| j));
        values.extend(row.iter().map(|&(_, v)| v));
        row_ptr.push(col_idx.len());
    }
    Csr::new(n, n, row_ptr, col_idx, values)
}

/// A's block on the aggregate `group` (row-major, k × k); `place` is scratch of n entries
/// left as it came (all `usize::MAX`).
fn dense_block(a: &Csr<f64>, group: &[usize], place: &mut [usize]) -> Vec<f64> {
    let k = group.len();
    for (l, &i) in group.iter().enumerate() {
        place[i] = l;
    }
    let mut block = vec![0.0; k * k];
    for (l, &i) in group.iter().enumerate() {
        let (columns, values) = a.row(i);
        for (&j, &v) in columns.iter().zip(values) {
            if place[j as usize] != usize::MAX {
                block[l * k + place[j as usize]] = v;
            }
        }
    }
    group.iter().for_each(|&i| place[i] = usize::MAX);
    block
}

/// R = L⁻¹ (lower triangular, row-major k × k) for the Cholesky factor L of the symmetric
/// `block`; none unless every pivot is above 1e-8 of its diagonal entry (clearly positive
/// definite).
fn inverse_cholesky(block: &[f64], k: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; k * k];
    for i in 0..k {
        for j in 0..=i {
            let s: f64 = (0..j).map(|m| l[i * k + m] * l[j * k + m]).sum();
            if i == j {
                let pivot = block[i * k + i] - s;
                // NaN pivots fail too.
                if pivot.partial_cmp(&(1e-8 * block[i * k + i]))
                    != Some(std::cmp::Ordering::Greater)
                {
                    return None;
                }
                l[i * k + i] = pivot.sqrt();
            } else {
                l[i * k + j] = (block[i * k + j] - s) / l[j * k + j];
            }
        }
    }
    // Column m of R: L r = e_m, by forward substitution.
    let mut r = vec![0.0; k * k];
    for m in 0..k {
        for i in m..k {
            let s: f64 = (m..i).map(|j| l[i * k + j] * r[j * k + m]).sum();
            let e = if i == m { 1.0 } else { 0.0 };
            r[i * k + m] = (e - s) / l[i * k + i];
        }
    }
    Some(r)
}

/// λ̂ ≥ λ_max(B⁻¹A): 1.1 × the largest Ritz value of 12 Lanczos steps on R A Rᵀ (which
/// has B⁻¹A's eigenvalues; the Ritz value lies within a few per cent below λ_max), capped
/// by ‖B⁻¹A‖_∞, which bounds every eigenvalue. The block counterpart of the point
/// smoothers' bound (level.rs).
pub fn block_spectrum_bound(a: &Csr<f64>, blocks: &BlockInverse) -> f64 {
    let n = a.nrows();
    let cap = infinity_norm_of_product(&blocks.inverse, a);
    let (factor, transposed) = (&blocks.factor, blocks.factor.transpose());
    let params = LanczosParams {
        max_iterations: 12,
        tolerance: 1e-3,
        full_reorthogonalization: false,
        ..LanczosParams::default()
    };
    let (mut t, mut u) = (vec![0.0; n], vec![0.0; n]);
    let ritz = extreme_eigenvalues(n, params, |x, y| {
        spmv(&transposed, x, &mut t);
        spmv(a, &t, &mut u);
        spmv(factor, &u, y);
    });
    match ritz {
        Ok(info) if info.largest.is_finite() => (1.1 * info.largest).min(cap),
        _ => cap,
    }
}

/// max_i Σ_j |(M A)_ij| for the sparse M and A.
fn infinity_norm_of_product(m: &Csr<f64>, a: &Csr<f64>) -> f64 {
    let n = m.nrows();
    let mut row = vec![0.0; a.ncols()];
    let mut seen = vec![false; a.ncols()];
    let mut touched: Vec<usize> = Vec::new();
    let mut largest: f64 = 0.0;
    for i in 0..n {
        let (m_columns, m_values) = m.row(i);
        for (&k, &w) in m_columns.iter().zip(m_values) {
            let (columns, values) = a.row(k as usize);
            for (&j, &v) in columns.iter().zip(values) {
                let j = j as usize;
                if !seen[j] {
                    seen[j] = true;
                    touched.push(j);
                }
                row[j] += w * v;
            }
        }
        let sum: f64 = touched.iter().map(|&j| row[j].abs()).sum();
        largest = largest.max(sum);
        touched
            .drain(..)
            .for_each(|j| (row[j], seen[j]) = (0.0, false));
    }
    largest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fem::assemble_stiffness;
    use crate::mesh::{refine, unit_square, CoarseMesh, Element};

    /// Dense f64 reference: B⁻¹ times B's block is the identity on every aggregate, R A Rᵀ
    /// is symmetric with B⁻¹A's spectrum bound respected, and the flow around a square's
    /// flat triangles do group nodes while the P1 unit square's do not.
    #[test]
    fn blocks_invert_the_strongly_coupled_groups() {
        let mut mesh = refine(&CoarseMesh::flow_around_square(), 2).unwrap();
        for (i, c) in mesh.coords.iter().enumerate() {
            mesh.on_boundary[i] = c[0] > 4.0 - 1e-9;
        }
        let (a, _) = assemble_stiffness(&mesh).unwrap();
        let blocks = block_inverse(&a)
            .unwrap()
            .expect("flat triangles group nodes");
        assert!(blocks.blocks > 0 && blocks.grouped > blocks.blocks);
        let n = a.nrows();
        let dense = |m: &Csr<f64>| {
            let mut d = vec![0.0; n * n];
            for r in 0..n {
                let (c, v) = m.row(r);
                c.iter()
                    .zip(v)
                    .for_each(|(&c, &v)| d[r * n + c as usize] = v);
            }
            d
        };
        let (ad, inv, r) = (dense(&a), dense(&blocks.inverse), dense(&blocks.factor));
        // B: A's entries within the blocks (where B⁻¹ has entries); B⁻¹ B = I.
        let b: Vec<f64> = (0..n * n)
            .map(|k| if inv[k] != 0.0 { ad[k] } else { 0.0 })
            .collect();
        for i in 0..n {
            for j in 0..n {
                let s: f64 = (0..n).map(|k| inv[i * n + k] * b[k * n + j]).sum();
                let expected = if i == j { 1.0 } else { 0.0 };
                assert!((s - expected).abs() < 1e-12, "(B⁻¹B)[{i}][{j}] = {s}");
            }
        }
        // Rᵀ R = B⁻¹.
        for i in 0..n {
            for j in 0..n {
                let s: f64 = (0..n).map(|k| r[k * n + i] * r[k * n + j]).sum();
                assert!((s - inv[i * n + j]).abs() < 1e-12);
            }
        }
        // λ_max(B⁻¹A) by the power method on R A Rᵀ, dense: the bound lies above it, within
        // the Lanczos margin.
        let mut x = vec![1.0; n];
        let mut lambda = 0.0;
        for _ in 0..2000 {
            let t: Vec<f64> = (0..n)
                .map(|i| (0..n).map(|k| r[k * n + i] * x[k]).sum())
                .collect();
            let u: Vec<f64> = (0..n)
                .map(|i| (0..n).map(|k| ad[i * n + k] * t[k]).sum())
                .collect();
            let y: Vec<f64> = (0..n)
                .map(|i| (0..n).map(|k| r[i * n + k] * u[k]).sum())
                .collect();
            let norm = y.iter().map(|v| v * v).sum::<f64>().sqrt();
            lambda = norm / x.iter().map(|v| v * v).sum::<f64>().sqrt();
            x = y.iter().map(|v| v / norm).collect();
        }
        let bound = block_spectrum_bound(&a, &blocks);
        assert!(
            bound >= lambda && bound <= 1.15 * lambda,
            "{bound} for λ_max {lambda}"
        );

        let square = unit_square(16, Element::P1).unwrap();
        let (a, _) = assemble_stiffness(&square).unwrap();
        assert!(block_inverse(&a).unwrap().is_none());
    }
}
