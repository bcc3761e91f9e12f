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

/// Coarse lattice nodes and weights that fine lattice index `f` interpolates from.
fn q2_weights(f: usize) -> ([(usize, f64); 3], usize) {
    let e = f / 4;
    match f % 4 {
        0 => ([(2 * e, 1.0), (0, 0.0), (0, 0.0)], 1),
        2 => ([(2 * e + 1, 1.0), (0, 0.0), (0, 0.0)], 1),
        1 => ([(2 * e, 0.375), (2 * e + 1, 0.75), (2 * e + 2, -0.125)], 3),
        _ => ([(2 * e, -0.125), (2 * e + 1, 0.75), (2 * e + 2, 0.375)], 3),
    }
}

/// Fine lattice nodes and weights that coarse lattice index `c` restricts from (the
/// transpose of [`q2_weights`]), clipped to the fine lattice 0..mf.
fn q2_transpose_weights(c: usize, mf: usize) -> impl Iterator<Item = (usize, f64)> {
    let centre = 2 * c as isize;
    let taps: &[(isize, f64)] = if c % 2 == 0 {
        &[(-3, -0.125), (-1, 0.375), (0, 1.0), (1, 0.375), (3, -0.125)]
    } else {
        &[(-1, 0.75), (0, 1.0), (1, 0.75)]
    };
    taps.iter().filter_map(move |&(d, w)| {
        let f = centre + d;
        (f >= 0 && f < mf as isize).then_some((f as usize, w))
    })
}

/// fine += P coarse for one lattice component (coarse boundary entries are zero).
fn prolong_q2<T: Real>(coarse: &[T], fine: &mut [T], nc: usize) {
    let (mc, mf) = (2 * nc + 1, 4 * nc + 1);
    fine.par_chunks_mut(mf).enumerate().for_each(|(jf, row)| {
        let (wy, ny) = q2_weights(jf);
        for (i_f, out) in row.iter_mut().enumerate() {
            let (wx, nx) = q2_weights(i_f);
            let mut v = T::zero();
            for &(cj, by) in &wy[..ny] {
                for &(ci, bx) in &wx[..nx] {
                    v = v + T::from_f64(bx * by) * coarse[cj * mc + ci];
                }
            }
            *out = *out + v;
        }
    });
}

/// coarse = Pᵀ fine for one lattice component; coarse boundary entries set to zero.
fn restrict_q2<T: Real>(fine: &[T], coarse: &mut [T], nc: usize) {
    let (mc, mf) = (2 * nc + 1, 4 * nc + 1);
    coarse.par_chunks_mut(mc).enumerate().for_each(|(jc, row)| {
        for (ic, out) in row.iter_mut().enumerate() {
            if ic == 0 || jc == 0 || ic + 1 == mc || jc + 1 == mc {
                *out = T::zero();
                continue;
            }
            let mut v = T::zero();
            for (jf, by) in q2_transpose_weights(jc, mf) {
                for (i_f, bx) in q2_transpose_weights(ic, mf) {
                    v = v + T::from_f64(bx * by) * fine[jf * mf + i_f];
                }
            }
            *out = v;
        }
    });
}

/// fine += P coarse for Q1 pressure.
pub fn prolong_q1<T: Real>(coarse: &[T], fine: &mut [T], nc: usize) {
    let (pc, pf) = (nc + 1, 2 * nc + 1);
    let taps = |f: usize| -> ([(usize, f64); 2], usize) {
        if f % 2 == 0 {
            ([(f / 2, 1.0), (0, 0.0)], 1)
        } else {
            ([(f / 2, 0.5), (f / 2 + 1, 0.5)], 2)
        }
    };
    fine.par_chunks_mut(pf).enumerate().for_each(|(jf, row)| {
        let (wy, ny) = taps(jf);
        for (i_f, out) in row.iter_mut().enumerate() {
            let (wx, nx) = taps(i_f);
            let mut v = T::zero();
            for &(cj, by) in &wy[..ny] {
                for &(ci, bx) in &wx[..nx] {
                    v = v + T::from_f64(bx * by) * coarse[cj * pc + ci];
                }
            }
            *out = *out + v;
        }
    });
}

/// coarse = Pᵀ fine for Q1 pressure.
pub fn restrict_q1<T: Real>(fine: &[T], coarse: &mut [T], nc: usize) {
    let (pc, pf) = (nc + 1, 2 * nc + 1);
    let taps = |c: usize| {
        [(-1isize, 0.5), (0, 1.0), (1, 0.5)]
            .into_iter()
            .filter_map(move |(d, w)| {
                let f = 2 * c as isize + d;
                (f >= 0 && f < pf as isize).then_some((f as usize, w))
            })
    };
    coarse.par_chunks_mut(pc).enumerate().for_each(|(jc, row)| {
        for (ic, out) in row.iter_mut().enumerate() {
            let mut v = T::zero();
            for (jf, by) in taps(jc) {
                for (i_f, bx) in taps(ic) {
                    v = v + T::from_f64(bx * by) * fine[jf * pf + i_f];
                }
            }
            *out = v;
        }
    });
}

/// fine += P coarse for a flat [ux | uy | p] vector of the coarse grid `coarse_grid`.
pub fn prolong_flow<T: Real>(coarse: &[T], fine: &mut [T], coarse_grid: Grid) {
    let nc = coarse_grid.n;
    let fine_grid = Grid { n: 2 * nc };
    let (cx, cy, cp) = split(coarse, coarse_grid);
    let (fx, fy, fp) = split_mut(fine, fine_grid);
    prolong_q2(cx, fx, nc);
    prolong_q2(cy, fy, nc);
    prolong_q1(cp, fp, nc);
}

/// coarse = Pᵀ fine for flat [ux | uy | p] vectors.
pub fn restrict_flow<T: Real>(fine: &[T], coarse: &mut [T], coarse_grid: Grid) {
    let nc = coarse_grid.n;
    let fine_grid = Grid { n: 2 * nc };
    let (fx, fy, fp) = split(fine, fine_grid);
    let (cx, cy, cp) = split_mut(coarse, coarse_grid);
    restrict_q2(fx, cx, nc);
    restrict_q2(fy, cy, nc);
    restrict_q1(fp, cp, nc);
}

/// Scalar Q2 transfer of one velocity component (block-triangular preconditioner).
pub fn prolong_lattice<T: Real>(coarse: &[T], fine: &mut [T], nc: usize) {
    prolong_q2(coarse, fine, nc)
}

/// Scalar Q2 restriction of one velocity component.
pub fn restrict_lattice<T: Real>(fine: &[T], coarse: &mut [T], nc: usize) {
    restrict_q2(fine, coarse, nc)
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
        prolong_q2(&coarse, &mut fine, nc);
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
