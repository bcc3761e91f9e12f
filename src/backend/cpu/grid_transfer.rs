//! Grid transfers of Q1 multigrid on uniform meshes of the unit square and cube: bilinear
//! (trilinear) prolongation P and restriction Pᵀ, on node-major blocks of interior
//! unknowns (lexicographic, x fastest; m points per direction, m_fine = 2·m_coarse + 1).
//!
//! Both are gathers over planes of the slowest direction (lines in 2D), one rayon task per
//! output plane, and change precision on the way: values are read in the source level's
//! storage precision, combined in f64, scaled per column, and rounded once to the target
//! level's storage precision. Statistics of the stored values come back as in
//! [`super::block_ell`], one partial per output plane.

use num_traits::Zero;
use rayon::prelude::*;

use super::block_ell::{
    inverse_scales, record_stats, reduce_stats, stats_len, widened, BlockStats,
};
use crate::precision::{Real, Stored};

/// A uniform grid of interior points: `m` per direction in `dim` directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridShape {
    pub dim: usize,
    pub m: usize,
}

impl GridShape {
    pub fn points(&self) -> usize {
        self.m.pow(self.dim as u32)
    }

    /// Points in one plane of the slowest direction (a line in 2D).
    pub fn plane(&self) -> usize {
        self.m.pow(self.dim as u32 - 1)
    }

    /// The grid one uniform coarsening down (m = 2·m_c + 1).
    pub fn coarse(&self) -> GridShape {
        GridShape {
            dim: self.dim,
            m: (self.m - 1) / 2,
        }
    }

    /// f64 slots the statistics of a transfer onto this grid need.
    pub fn partials_len(&self, nrhs: usize) -> usize {
        self.m * stats_len(nrhs)
    }
}

/// Coarse points (index, weight) the 1D interpolation of fine interior point `i` reads:
/// fine node i+1 sits on coarse node (i+1)/2 when i is odd, else between two coarse nodes,
/// either of which may be a (zero) boundary node.
fn interpolation_1d(i: usize, m_coarse: usize) -> ([(usize, f64); 2], usize) {
    if i % 2 == 1 {
        return ([((i - 1) / 2, 1.0), (0, 0.0)], 1);
    }
    let right = i / 2;
    match (right >= 1, right < m_coarse) {
        (true, true) => ([(right - 1, 0.5), (right, 0.5)], 2),
        (true, false) => ([(right - 1, 0.5), (0, 0.0)], 1),
        (false, true) => ([(right, 0.5), (0, 0.0)], 1),
        (false, false) => ([(0, 0.0), (0, 0.0)], 0),
    }
}

/// Fine points (index, weight) coarse point `a` gathers in the 1D restriction.
fn restriction_1d(a: usize) -> [(usize, f64); 3] {
    [(2 * a, 0.5), (2 * a + 1, 1.0), (2 * a + 2, 0.5)]
}

fn check_shapes(
    fine: GridShape,
    coarse: GridShape,
    fine_len: usize,
    coarse_len: usize,
    nrhs: usize,
) {
    assert!(fine.dim == coarse.dim && (fine.dim == 2 || fine.dim == 3));
    assert_eq!(
        fine.m,
        2 * coarse.m + 1,
        "grid transfer: m_fine ≠ 2·m_coarse + 1"
    );
    assert_eq!(
        fine_len,
        fine.points() * nrhs,
        "grid transfer: fine block size"
    );
    assert_eq!(
        coarse_len,
        coarse.points() * nrhs,
        "grid transfer: coarse block size"
    );
}

/// dst (a fine line, m_f points × nrhs) += w · interpolation of src (a coarse line,
/// m_c points): coarse point a feeds fine points 2a (½), 2a+1 (1) and 2a+2 (½).
fn interpolate_line_add<T: Real>(dst: &mut [f64], src: &[T], w: f64, nrhs: usize) {
    let half = 0.5 * w;
    for (a, src_row) in src.chunks_exact(nrhs).enumerate() {
        let dst = &mut dst[2 * a * nrhs..(2 * a + 3) * nrhs];
        for (c, &v) in src_row.iter().enumerate() {
            let v = Real::to_f64(v);
            dst[c] += half * v;
            dst[nrhs + c] += w * v;
            dst[2 * nrhs + c] += half * v;
        }
    }
}

/// dst (a coarse line) += w · restriction of src (a fine line): coarse point a gathers
/// fine points 2a (½), 2a+1 (1) and 2a+2 (½).
fn restrict_line_add<T: Real>(dst: &mut [f64], src: &[T], w: f64, nrhs: usize) {
    let half = 0.5 * w;
    for (a, dst_row) in dst.chunks_exact_mut(nrhs).enumerate() {
        let src = &src[2 * a * nrhs..(2 * a + 3) * nrhs];
        for (c, d) in dst_row.iter_mut().enumerate() {
            *d += half * (Real::to_f64(src[c]) + Real::to_f64(src[2 * nrhs + c]))
                + w * Real::to_f64(src[nrhs + c]);
        }
    }
}

/// The 1D interpolation weights between lines (or planes): fine p gets coarse q.
fn interpolation_pairs(m_coarse: usize) -> impl Iterator<Item = (usize, usize, f64)> {
    (0..m_coarse).flat_map(|q| [(2 * q, q, 0.5), (2 * q + 1, q, 1.0), (2 * q + 2, q, 0.5)])
}

/// fine += s_c · P coarse, column by column (s_c = `scale[c]`).
#[allow(clippy::too_many_arguments)]
pub fn prolongate_add<C: Stored, F: Stored>(
    coarse: &[C],
    coarse_grid: GridShape,
    fine: &mut [F],
    fine_grid: GridShape,
    nrhs: usize,
    scale: &[f64],
    partials: &mut [f64],
) -> BlockStats {
    check_shapes(fine_grid, coarse_grid, fine.len(), coarse.len(), nrhs);
    assert_eq!(scale.len(), nrhs);
    let (mf, mc) = (fine_grid.m, coarse_grid.m);
    let (plane_f, plane_c) = (fine_grid.plane() * nrhs, coarse_grid.plane() * nrhs);
    partials.fill(0.0);
    fine.par_chunks_mut(plane_f)
        .zip(partials.par_chunks_mut(stats_len(nrhs)))
        .enumerate()
        .for_each_init(
            || {
                (
                    Vec::<C::Compute>::new(),
                    Vec::<F::Compute>::new(),
                    Vec::<f64>::new(),
                    Vec::<F::Compute>::new(),
                )
            },
            |(coarse_scratch, fine_scratch, acc, outs), (p, (fine_plane, part))| {
                acc.clear();
                acc.resize(plane_f, 0.0);
                let (planes, count) = interpolation_1d(p, mc);
                for &(q, wq) in &planes[..count] {
                    let cw = widened(&coarse[q * plane_c..(q + 1) * plane_c], coarse_scratch);
                    if fine_grid.dim == 2 {
                        interpolate_line_add(acc, cw, wq, nrhs);
                    } else {
                        let (line_f, line_c) = (mf * nrhs, mc * nrhs);
                        for (j, b, wb) in interpolation_pairs(mc) {
                            interpolate_line_add(
                                &mut acc[j * line_f..(j + 1) * line_f],
                                &cw[b * line_c..(b + 1) * line_c],
                                wq * wb,
                                nrhs,
                            );
                        }
                    }
                }
                let fw = widened(fine_plane, fine_scratch);
                outs.resize(plane_f, F::Compute::zero());
                for ((o_row, f_row), a_row) in outs
                    .chunks_exact_mut(nrhs)
                    .zip(fw.chunks_exact(nrhs))
                    .zip(acc.chunks_exact(nrhs))
                {
                    for (((o, &f), &a), &s) in o_row.iter_mut().zip(f_row).zip(a_row).zip(scale) {
                        *o = F::Compute::from_f64(Real::to_f64(f) + s * a);
                    }
                }
                record_stats(part, outs, nrhs, F::MAX);
                F::narrow_slice(outs, fine_plane);
            },
        );
    reduce_stats(partials, nrhs)
}

/// coarse = Pᵀ fine / s_c, column by column (s_c = `scale[c]`; a zero scale gives zero).
#[allow(clippy::too_many_arguments)]
pub fn restrict<F: Stored, C: Stored>(
    fine: &[F],
    fine_grid: GridShape,
    coarse: &mut [C],
    coarse_grid: GridShape,
    nrhs: usize,
    scale: &[f64],
    partials: &mut [f64],
) -> BlockStats {
    check_shapes(fine_grid, coarse_grid, fine.len(), coarse.len(), nrhs);
    assert_eq!(scale.len(), nrhs);
    let (mf, mc) = (fine_grid.m, coarse_grid.m);
    let (plane_f, plane_c) = (fine_grid.plane() * nrhs, coarse_grid.plane() * nrhs);
    let inverse = inverse_scales(scale);
    partials.fill(0.0);
    coarse
        .par_chunks_mut(plane_c)
        .zip(partials.par_chunks_mut(stats_len(nrhs)))
        .enumerate()
        .for_each_init(
            || {
                (
                    Vec::<F::Compute>::new(),
                    Vec::<f64>::new(),
                    Vec::<C::Compute>::new(),
                )
            },
            |(fine_scratch, acc, outs), (q, (coarse_plane, part))| {
                acc.clear();
                acc.resize(plane_c, 0.0);
                for (p, wp) in restriction_1d(q) {
                    let fw = widened(&fine[p * plane_f..(p + 1) * plane_f], fine_scratch);
                    if fine_grid.dim == 2 {
                        restrict_line_add(acc, fw, wp, nrhs);
                    } else {
                        let (line_f, line_c) = (mf * nrhs, mc * nrhs);
                        for (j, b, wb) in interpolation_pairs(mc) {
                            restrict_line_add(
                                &mut acc[b * line_c..(b + 1) * line_c],
                                &fw[j * line_f..(j + 1) * line_f],
                                wp * wb,
                                nrhs,
                            );
                        }
                    }
                }
                outs.resize(plane_c, C::Compute::zero());
                for (o_row, a_row) in outs.chunks_exact_mut(nrhs).zip(acc.chunks_exact(nrhs)) {
                    for ((o, &a), &s) in o_row.iter_mut().zip(a_row).zip(&inverse) {
                        *o = C::Compute::from_f64(a * s);
                    }
                }
                record_stats(part, outs, nrhs, C::MAX);
                C::narrow_slice(outs, coarse_plane);
            },
        );
    reduce_stats(partials, nrhs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// P maps a coarse Q1 function's nodal values to the same function's fine nodal values
    /// (nested spaces): checked on a coarse hat function.
    #[test]
    fn prolongation_interpolates_coarse_q1_functions() {
        for dim in [2, 3] {
            let coarse = GridShape { dim, m: 3 };
            let fine = GridShape { dim, m: 7 };
            // A coarse Q1 function: a hat at coarse node (2, 2[, 2]) (interior index 1).
            let mut c = vec![0.0f64; coarse.points()];
            let centre = (0..dim).map(|d| coarse.m.pow(d as u32)).sum::<usize>();
            c[centre] = 1.0;
            let mut f = vec![0.0f64; fine.points()];
            let mut partials = vec![0.0; fine.partials_len(1)];
            prolongate_add(&c, coarse, &mut f, fine, 1, &[1.0], &mut partials);
            // The hat at x = 1/2 has value Π (1 - |2x_d - 1|·2) on the fine nodes x = i/8.
            for (k, &v) in f.iter().enumerate() {
                let expected: f64 = (0..dim)
                    .map(|d| {
                        let i = (k / fine.m.pow(d as u32)) % fine.m;
                        let x = (i + 1) as f64 / 8.0;
                        (1.0 - (4.0 * (x - 0.5)).abs()).max(0.0)
                    })
                    .product();
                assert_eq!(v, expected, "dim {dim}, fine point {k}");
            }
        }
    }

    /// ⟨P c, f⟩ = ⟨c, Pᵀ f⟩ for random vectors, with several columns and scales, and the
    /// precision changes rounding once.
    #[test]
    fn restriction_is_the_transpose_of_prolongation() {
        for dim in [2, 3] {
            let (coarse, fine, nrhs) = (GridShape { dim, m: 3 }, GridShape { dim, m: 7 }, 2);
            let value = |k: usize| ((k * 7919) % 113) as f64 / 17.0 - 3.0;
            let c: Vec<f64> = (0..coarse.points() * nrhs).map(value).collect();
            let f: Vec<f64> = (0..fine.points() * nrhs).map(|k| value(k + 5)).collect();
            let mut pc = vec![0.0; f.len()];
            let mut rf = vec![0.0; c.len()];
            let mut partials = vec![0.0; fine.partials_len(nrhs)];
            prolongate_add(&c, coarse, &mut pc, fine, nrhs, &[1.0, 2.0], &mut partials);
            let mut partials = vec![0.0; coarse.partials_len(nrhs)];
            let stats = restrict(&f, fine, &mut rf, coarse, nrhs, &[1.0, 0.5], &mut partials);
            for col in 0..nrhs {
                let lhs: f64 = (0..fine.points())
                    .map(|i| pc[i * nrhs + col] * f[i * nrhs + col])
                    .sum();
                let rhs: f64 = (0..coarse.points())
                    .map(|i| c[i * nrhs + col] * rf[i * nrhs + col])
                    .sum();
                assert!(
                    (lhs - rhs).abs() < 1e-12 * lhs.abs().max(1.0),
                    "dim {dim} col {col}"
                );
            }
            assert!(stats.in_range);
            // Into f16: rounded once, in range; a huge scale overflows and is reported.
            let mut low = vec![f16::ZERO; c.len()];
            let stats = restrict(&f, fine, &mut low, coarse, nrhs, &[1.0, 0.5], &mut partials);
            assert!(stats.in_range);
            for (l, &r) in low.iter().zip(&rf) {
                assert_eq!(*l, f16::from_f64(r));
            }
            let stats = restrict(
                &f,
                fine,
                &mut low,
                coarse,
                nrhs,
                &[1e-6, 1.0],
                &mut partials,
            );
            assert!(!stats.in_range);
        }
    }
}
