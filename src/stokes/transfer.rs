//! Grid transfer between an n/2 and an n mesh: FE interpolation of Q2 (velocity lattice)
//! and Q1 (pressure) functions, and restriction as its transpose.
//!
//! 1D Q2 interpolation from a coarse element with lattice nodes 2e, 2e+1, 2e+2 onto the
//! fine lattice: fine 4e+2k copies coarse 2e+k; fine 4e+1 takes (3/8, 3/4, −1/8), fine
//! 4e+3 takes (−1/8, 3/4, 3/8). Q1: fine 2k copies coarse k, fine 2k+1 averages k, k+1.
//! 2D is the tensor product. Boundary lattice entries stay zero (homogeneous corrections).

use rayon::prelude::*;

use super::lattice::{split, split_mut, Grid};
use crate::precision::Real;

/// One output index's 1D taps: up to five (input index, weight) pairs, and how many.
type Taps = ([(usize, f64); 5], usize);

/// No upper clip (interpolation taps never leave the coarse array).
const UNCLIPPED: usize = isize::MAX as usize;

/// Taps at offsets from a centre, clipped to 0..len.
fn clipped(centre: usize, offsets: &[(isize, f64)], len: usize) -> Taps {
    let mut taps = [(0, 0.0); 5];
    let mut count = 0;
    for &(d, w) in offsets {
        let k = centre as isize + d;
        if k >= 0 && k < len as isize {
            taps[count] = (k as usize, w);
            count += 1;
        }
    }
    (taps, count)
}

/// Q2 interpolation: the coarse lattice nodes fine lattice index `f` takes.
fn q2_prolong_taps(f: usize) -> Taps {
    let e = 2 * (f / 4);
    match f % 4 {
        0 => clipped(e, &[(0, 1.0)], UNCLIPPED),
        2 => clipped(e, &[(1, 1.0)], UNCLIPPED),
        1 => clipped(e, &[(0, 0.375), (1, 0.75), (2, -0.125)], UNCLIPPED),
        _ => clipped(e, &[(0, -0.125), (1, 0.75), (2, 0.375)], UNCLIPPED),
    }
}

/// Q2 restriction (the transpose): the fine lattice nodes coarse index `c` takes.
fn q2_restrict_taps(c: usize, mf: usize) -> Taps {
    if c % 2 == 0 {
        let offsets = [(-3, -0.125), (-1, 0.375), (0, 1.0), (1, 0.375), (3, -0.125)];
        clipped(2 * c, &offsets, mf)
    } else {
        clipped(2 * c, &[(-1, 0.75), (0, 1.0), (1, 0.75)], mf)
    }
}

/// Q1 interpolation: the coarse nodes fine index `f` takes.
fn q1_prolong_taps(f: usize) -> Taps {
    if f % 2 == 0 {
        clipped(f / 2, &[(0, 1.0)], UNCLIPPED)
    } else {
        clipped(f / 2, &[(0, 0.5), (1, 0.5)], UNCLIPPED)
    }
}

/// Q1 restriction (the transpose): the fine nodes coarse index `c` takes.
fn q1_restrict_taps(c: usize, pf: usize) -> Taps {
    clipped(2 * c, &[(-1, 0.5), (0, 1.0), (1, 0.5)], pf)
}

/// The tensor product of 1D taps, row by row: out[j][i] (+)= Σ w_y w_x input[y][x] on
/// square arrays of side `m_in` and `m_out`. `accumulate` adds to `out` (prolongation);
/// `zero_boundary` keeps the boundary of `out` at zero (Dirichlet lattice nodes).
fn tensor_transfer<T: Real>(
    input: &[T],
    m_in: usize,
    out: &mut [T],
    m_out: usize,
    taps: impl Fn(usize) -> Taps + Sync,
    accumulate: bool,
    zero_boundary: bool,
) {
    out.par_chunks_mut(m_out).enumerate().for_each(|(j, row)| {
        let (wy, ny) = taps(j);
        for (i, o) in row.iter_mut().enumerate() {
            if zero_boundary && (i == 0 || j == 0 || i + 1 == m_out || j + 1 == m_out) {
                *o = T::zero();
                continue;
            }
            let (wx, nx) = taps(i);
            let mut v = T::zero();
            for &(y, by) in &wy[..ny] {
                for &(x, bx) in &wx[..nx] {
                    v = v + T::from_f64(bx * by) * input[y * m_in + x];
                }
            }
            *o = if accumulate { *o + v } else { v };
        }
    });
}

/// fine += P coarse for one velocity component on the lattice (coarse boundary entries
/// are zero, so the fine boundary stays zero).
pub fn prolong_lattice<T: Real>(coarse: &[T], fine: &mut [T], nc: usize) {
    tensor_transfer(
        coarse,
        2 * nc + 1,
        fine,
        4 * nc + 1,
        q2_prolong_taps,
        true,
        false,
    );
}

/// coarse = Pᵀ fine for one velocity component; coarse boundary entries set to zero.
pub fn restrict_lattice<T: Real>(fine: &[T], coarse: &mut [T], nc: usize) {
    let mf = 4 * nc + 1;
    let taps = |c| q2_restrict_taps(c, mf);
    tensor_transfer(fine, mf, coarse, 2 * nc + 1, taps, false, true);
}

/// fine += P coarse for Q1 pressure.
pub fn prolong_q1<T: Real>(coarse: &[T], fine: &mut [T], nc: usize) {
    tensor_transfer(
        coarse,
        nc + 1,
        fine,
        2 * nc + 1,
        q1_prolong_taps,
        true,
        false,
    );
}

/// coarse = Pᵀ fine for Q1 pressure.
pub fn restrict_q1<T: Real>(fine: &[T], coarse: &mut [T], nc: usize) {
    let pf = 2 * nc + 1;
    let taps = |c| q1_restrict_taps(c, pf);
    tensor_transfer(fine, pf, coarse, nc + 1, taps, false, false);
}

/// fine += P coarse for a flat [ux | uy | p] vector of the coarse grid `coarse_grid`.
pub fn prolong_flow<T: Real>(coarse: &[T], fine: &mut [T], coarse_grid: Grid) {
    let nc = coarse_grid.n;
    let fine_grid = Grid { n: 2 * nc };
    let (cx, cy, cp) = split(coarse, coarse_grid);
    let (fx, fy, fp) = split_mut(fine, fine_grid);
    prolong_lattice(cx, fx, nc);
    prolong_lattice(cy, fy, nc);
    prolong_q1(cp, fp, nc);
}

/// coarse = Pᵀ fine for flat [ux | uy | p] vectors.
pub fn restrict_flow<T: Real>(fine: &[T], coarse: &mut [T], coarse_grid: Grid) {
    let nc = coarse_grid.n;
    let fine_grid = Grid { n: 2 * nc };
    let (fx, fy, fp) = split(fine, fine_grid);
    let (cx, cy, cp) = split_mut(coarse, coarse_grid);
    restrict_lattice(fx, cx, nc);
    restrict_lattice(fy, cy, nc);
    restrict_q1(fp, cp, nc);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Interpolation reproduces quadratics (Q2) and bilinears (Q1) exactly.
    #[test]
    fn interpolation_is_exact_on_the_coarse_space() {
        let nc = 3;
        let (mc, mf) = (2 * nc + 1, 4 * nc + 1);
        let q = |x: f64, y: f64| (0.3 + x - x * x) * (1.0 + 2.0 * y - 3.0 * y * y);
        let coarse: Vec<f64> = (0..mc * mc)
            .map(|k| {
                q(
                    (k % mc) as f64 / (mc - 1) as f64,
                    (k / mc) as f64 / (mc - 1) as f64,
                )
            })
            .collect();
        let mut fine = vec![0.0; mf * mf];
        prolong_lattice(&coarse, &mut fine, nc);
        for (k, &got) in fine.iter().enumerate() {
            let want = q(
                (k % mf) as f64 / (mf - 1) as f64,
                (k / mf) as f64 / (mf - 1) as f64,
            );
            assert!((got - want).abs() < 1e-14, "{k}: {got} vs {want}");
        }
        let (pc, pf) = (nc + 1, 2 * nc + 1);
        let b = |x: f64, y: f64| 1.0 + 2.0 * x - y + 3.0 * x * y;
        let coarse: Vec<f64> = (0..pc * pc)
            .map(|k| b((k % pc) as f64 / nc as f64, (k / pc) as f64 / nc as f64))
            .collect();
        let mut fine = vec![0.0; pf * pf];
        prolong_q1(&coarse, &mut fine, nc);
        for (k, &got) in fine.iter().enumerate() {
            let want = b(
                (k % pf) as f64 / (2 * nc) as f64,
                (k / pf) as f64 / (2 * nc) as f64,
            );
            assert!((got - want).abs() < 1e-14);
        }
    }

    /// ⟨P c, f⟩ = ⟨c, Pᵀ f⟩ for interior coarse vectors.
    #[test]
    fn restriction_is_the_transpose() {
        let nc = 4;
        let coarse_grid = Grid { n: nc };
        let fine_grid = Grid { n: 2 * nc };
        let mut c: Vec<f64> = (0..coarse_grid.flow_len())
            .map(|k| ((k * 7919) % 101) as f64 / 50.0 - 1.0)
            .collect();
        {
            let m = coarse_grid.m();
            let (cx, cy, _) = split_mut(&mut c, coarse_grid);
            for k in 0..m * m {
                if !coarse_grid.is_interior(k % m, k / m) {
                    cx[k] = 0.0;
                    cy[k] = 0.0;
                }
            }
        }
        let f: Vec<f64> = (0..fine_grid.flow_len())
            .map(|k| ((k * 104729) % 97) as f64 / 48.0 - 1.0)
            .collect();
        let mut pc = vec![0.0; fine_grid.flow_len()];
        prolong_flow(&c, &mut pc, coarse_grid);
        let mut rf = vec![0.0; coarse_grid.flow_len()];
        restrict_flow(&f, &mut rf, coarse_grid);
        let lhs: f64 = pc.iter().zip(&f).map(|(a, b)| a * b).sum();
        let rhs: f64 = c.iter().zip(&rf).map(|(a, b)| a * b).sum();
        assert!(
            (lhs - rhs).abs() < 1e-12 * lhs.abs().max(1.0),
            "{lhs} vs {rhs}"
        );
    }
}
