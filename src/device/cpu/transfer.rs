//! Grid transfers of multigrid on node-major blocks: on uniform meshes of the unit square
//! and cube, bilinear (trilinear) prolongation P and restriction Pᵀ of interior unknowns
//! (lexicographic, x fastest; m points per direction, m_fine = 2·m_coarse + 1); on a
//! refined mesh's hierarchy, products with the stored P and R = Pᵀ.
//!
//! Grid transfers are gathers over planes of the slowest direction (lines in 2D), one rayon
//! task per output plane; matrix transfers one task per chunk of output rows. Both change
//! precision on the way: values are read in the source level's storage precision,
//! combined in f64, scaled per column, and rounded once to the target level's storage
//! precision.

use rayon::prelude::*;

use super::arena;
use super::simd::{self, SimdLevel};
use super::vector::{partials, record_stats, reduce};
use super::{buffer, buffer_mut, by_precision, Compute, Cpu};
use crate::device::inverse_scale;
use crate::device::sparse::check_grids;
use crate::device::sparse::Direction;
use crate::device::{Block, CsrMatrix, GridShape, LevelTransfer, Stats, Storage};
use crate::error::{Error, Result};
use crate::precision::{Real, Stored};

/// `src` in its compute precision: borrowed when it already is, else widened into `scratch`.
fn widened<'a, S: Stored>(src: &'a [S], scratch: &'a mut [S::Compute]) -> &'a [S::Compute] {
    match S::as_compute(src) {
        Some(same) => same,
        None => {
            let scratch = &mut scratch[..src.len()];
            S::widen_slice(src, scratch);
            scratch
        }
    }
}

/// Scratch length for widening `len` values of S (zero when S is its own compute type).
fn widen_len<S: Stored>(len: usize) -> usize {
    if S::as_compute(&[]).is_none() {
        len
    } else {
        0
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

/// dst (a fine line, m_f points × nrhs) += w · interpolation of src (a coarse line,
/// m_c points): coarse point a feeds fine points 2a (½), 2a+1 (1) and 2a+2 (½).
#[inline(always)]
fn interpolate_line_add<T: Real>(dst: &mut [f64], src: &[T], w: f64, nrhs: usize) {
    if nrhs == 1 {
        return interpolate_point_line_add(dst, src, w);
    }
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

/// [`interpolate_line_add`] with one column, written per fine point pair (2a, 2a+1) so the
/// loop vectorises: each fine value gets the same additions in the same order.
#[inline(always)]
fn interpolate_point_line_add<T: Real>(dst: &mut [f64], src: &[T], w: f64) {
    let (half, mc) = (0.5 * w, src.len());
    if mc == 0 {
        return;
    }
    let c = |a: usize| Real::to_f64(src[a]);
    dst[0] += half * c(0);
    dst[1] += w * c(0);
    for (a, pair) in dst[2..2 * mc].chunks_exact_mut(2).enumerate() {
        let a = a + 1;
        pair[0] = (pair[0] + half * c(a - 1)) + half * c(a);
        pair[1] += w * c(a);
    }
    dst[2 * mc] += half * c(mc - 1);
}

/// dst (a coarse line) += w · restriction of src (a fine line): coarse point a gathers
/// fine points 2a (½), 2a+1 (1) and 2a+2 (½).
#[inline(always)]
fn restrict_line_add<T: Real>(dst: &mut [f64], src: &[T], w: f64, nrhs: usize) {
    let half = 0.5 * w;
    if nrhs == 1 {
        for (a, d) in dst.iter_mut().enumerate() {
            *d += half * (Real::to_f64(src[2 * a]) + Real::to_f64(src[2 * a + 2]))
                + w * Real::to_f64(src[2 * a + 1]);
        }
        return;
    }
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
fn prolongate_add<C: Storage, F: Storage>(
    coarse: &[C],
    coarse_grid: GridShape,
    fine: &mut [F],
    fine_grid: GridShape,
    nrhs: usize,
    scale: &[f64],
    stats: &mut Stats<Cpu>,
) {
    let (plane_f, plane_c) = (fine_grid.plane() * nrhs, coarse_grid.plane() * nrhs);
    let part = partials(stats, fine_grid.m);
    fine.par_chunks_mut(plane_f)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(p, (fine_plane, part))| {
            arena::with(|arena| {
                let (coarse_scratch, fine_scratch, acc, outs) = arena
                    .four::<Compute<C>, Compute<F>, f64, Compute<F>>(
                        widen_len::<C>(plane_c),
                        widen_len::<F>(plane_f),
                        plane_f,
                        plane_f,
                    );
                let args = PlaneArgs {
                    plane: p,
                    fine_grid,
                    coarse_grid,
                    nrhs,
                    scale,
                    part,
                    acc,
                };
                match simd::level() {
                    // SAFETY: `simd::level` names only levels this CPU has.
                    #[cfg(target_arch = "x86_64")]
                    SimdLevel::Avx512 => unsafe {
                        interpolate_plane_avx512(
                            args,
                            coarse,
                            coarse_scratch,
                            fine_plane,
                            fine_scratch,
                            outs,
                        )
                    },
                    #[cfg(target_arch = "x86_64")]
                    SimdLevel::Avx2 => unsafe {
                        interpolate_plane_avx2(
                            args,
                            coarse,
                            coarse_scratch,
                            fine_plane,
                            fine_scratch,
                            outs,
                        )
                    },
                    _ => interpolate_plane(
                        args,
                        coarse,
                        coarse_scratch,
                        fine_plane,
                        fine_scratch,
                        outs,
                    ),
                }
            })
        });
    arena::sync();
    reduce(stats);
}

/// What the per-plane work of a grid transfer needs besides its data: the output plane's
/// index, the grids, the column count and scales, the plane's statistics partials and an
/// f64 accumulator of the plane.
struct PlaneArgs<'a> {
    plane: usize,
    fine_grid: GridShape,
    coarse_grid: GridShape,
    nrhs: usize,
    scale: &'a [f64],
    part: &'a mut [f64],
    acc: &'a mut [f64],
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn interpolate_plane_avx2<C: Storage, F: Storage>(
    args: PlaneArgs<'_>,
    coarse: &[C],
    coarse_scratch: &mut [Compute<C>],
    fine_plane: &mut [F],
    fine_scratch: &mut [Compute<F>],
    outs: &mut [Compute<F>],
) {
    interpolate_plane(args, coarse, coarse_scratch, fine_plane, fine_scratch, outs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn interpolate_plane_avx512<C: Storage, F: Storage>(
    args: PlaneArgs<'_>,
    coarse: &[C],
    coarse_scratch: &mut [Compute<C>],
    fine_plane: &mut [F],
    fine_scratch: &mut [Compute<F>],
    outs: &mut [Compute<F>],
) {
    interpolate_plane(args, coarse, coarse_scratch, fine_plane, fine_scratch, outs)
}

/// One fine plane of [`prolongate_add`]: the interpolation of its coarse planes summed in
/// f64, added to the plane scaled per column, rounded into storage; compiled per SIMD level
/// (the same results at every level: no reassociation, no fused multiply-add).
#[inline(always)]
fn interpolate_plane<C: Storage, F: Storage>(
    PlaneArgs {
        plane: p,
        fine_grid,
        coarse_grid,
        nrhs,
        scale,
        part,
        acc,
    }: PlaneArgs<'_>,
    coarse: &[C],
    coarse_scratch: &mut [Compute<C>],
    fine_plane: &mut [F],
    fine_scratch: &mut [Compute<F>],
    outs: &mut [Compute<F>],
) {
    let (mf, mc) = (fine_grid.m, coarse_grid.m);
    let plane_c = coarse_grid.plane() * nrhs;
    acc.fill(0.0);
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
    if nrhs == 1 {
        // One column: one loop over the plane (it vectorises).
        for ((o, &f), &a) in outs.iter_mut().zip(fw).zip(acc.iter()) {
            *o = Compute::<F>::from_f64(Real::to_f64(f) + scale[0] * a);
        }
    } else {
        for ((o_row, f_row), a_row) in outs
            .chunks_exact_mut(nrhs)
            .zip(fw.chunks_exact(nrhs))
            .zip(acc.chunks_exact(nrhs))
        {
            for (((o, &f), &a), &s) in o_row.iter_mut().zip(f_row).zip(a_row).zip(scale) {
                *o = Compute::<F>::from_f64(Real::to_f64(f) + s * a);
            }
        }
    }
    record_stats(part, outs, nrhs, F::MAX);
    F::narrow_slice(outs, fine_plane);
}

/// coarse = Pᵀ fine / s_c, column by column (s_c = `scale[c]`; a zero scale gives zero).
fn restrict<F: Storage, C: Storage>(
    fine: &[F],
    fine_grid: GridShape,
    coarse: &mut [C],
    coarse_grid: GridShape,
    nrhs: usize,
    scale: &[f64],
    stats: &mut Stats<Cpu>,
) {
    let (plane_f, plane_c) = (fine_grid.plane() * nrhs, coarse_grid.plane() * nrhs);
    let part = partials(stats, coarse_grid.m);
    coarse
        .par_chunks_mut(plane_c)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(q, (coarse_plane, part))| {
            arena::with(|arena| {
                let (fine_scratch, acc, outs, _) = arena.four::<Compute<F>, f64, Compute<C>, f64>(
                    widen_len::<F>(plane_f),
                    plane_c,
                    plane_c,
                    0,
                );
                let args = PlaneArgs {
                    plane: q,
                    fine_grid,
                    coarse_grid,
                    nrhs,
                    scale,
                    part,
                    acc,
                };
                match simd::level() {
                    // SAFETY: `simd::level` names only levels this CPU has.
                    #[cfg(target_arch = "x86_64")]
                    SimdLevel::Avx512 => unsafe {
                        restrict_plane_avx512(args, fine, fine_scratch, coarse_plane, outs)
                    },
                    #[cfg(target_arch = "x86_64")]
                    SimdLevel::Avx2 => unsafe {
                        restrict_plane_avx2(args, fine, fine_scratch, coarse_plane, outs)
                    },
                    _ => restrict_plane(args, fine, fine_scratch, coarse_plane, outs),
                }
            })
        });
    arena::sync();
    reduce(stats);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn restrict_plane_avx2<F: Storage, C: Storage>(
    args: PlaneArgs<'_>,
    fine: &[F],
    fine_scratch: &mut [Compute<F>],
    coarse_plane: &mut [C],
    outs: &mut [Compute<C>],
) {
    restrict_plane(args, fine, fine_scratch, coarse_plane, outs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn restrict_plane_avx512<F: Storage, C: Storage>(
    args: PlaneArgs<'_>,
    fine: &[F],
    fine_scratch: &mut [Compute<F>],
    coarse_plane: &mut [C],
    outs: &mut [Compute<C>],
) {
    restrict_plane(args, fine, fine_scratch, coarse_plane, outs)
}

/// One coarse plane of [`restrict`]: the restriction of its fine planes summed in f64,
/// divided by the column's scale, rounded into storage; compiled per SIMD level.
#[inline(always)]
fn restrict_plane<F: Storage, C: Storage>(
    PlaneArgs {
        plane: q,
        fine_grid,
        coarse_grid,
        nrhs,
        scale,
        part,
        acc,
    }: PlaneArgs<'_>,
    fine: &[F],
    fine_scratch: &mut [Compute<F>],
    coarse_plane: &mut [C],
    outs: &mut [Compute<C>],
) {
    let (mf, mc) = (fine_grid.m, coarse_grid.m);
    let plane_f = fine_grid.plane() * nrhs;
    acc.fill(0.0);
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
    if nrhs == 1 {
        let factor = inverse_scale(scale[0]);
        for (o, &a) in outs.iter_mut().zip(acc.iter()) {
            *o = Compute::<C>::from_f64(a * factor);
        }
    } else {
        for (o_row, a_row) in outs.chunks_exact_mut(nrhs).zip(acc.chunks_exact(nrhs)) {
            for ((o, &a), &s) in o_row.iter_mut().zip(a_row).zip(scale) {
                *o = Compute::<C>::from_f64(a * inverse_scale(s));
            }
        }
    }
    record_stats(part, outs, nrhs, C::MAX);
    C::narrow_slice(outs, coarse_plane);
}

/// Output rows of a matrix transfer per rayon task.
const MATRIX_CHUNK_ROWS: usize = 1024;

/// dst = M src / s_c (restriction, M = R) or dst += s_c · M src (prolongation, M = P) per
/// column, M a CSR matrix with f64 weights (out rows × in rows); the statistics are those
/// of the stored dst.
fn matrix_transfer<S: Storage, T: Storage>(
    m: &CsrMatrix<Cpu>,
    direction: Direction,
    src: &[S],
    dst: &mut [T],
    nrhs: usize,
    scale: &[f64],
    stats: &mut Stats<Cpu>,
) -> Result<()> {
    let weights = buffer::<f64>(&m.values, direction.name())?;
    let (row_ptr, col_idx) = (&m.row_ptr, &m.col_idx);
    let keep = direction == Direction::ProlongateAdd;
    let part = partials(stats, m.nrows.div_ceil(MATRIX_CHUNK_ROWS).max(1));
    dst.par_chunks_mut(MATRIX_CHUNK_ROWS * nrhs)
        .zip(part.par_chunks_mut(Stats::<Cpu>::len_for(nrhs)))
        .enumerate()
        .for_each(|(k, (dst_rows, part))| {
            arena::with(|arena| {
                let (acc, outs, _, _) =
                    arena.four::<f64, Compute<T>, f64, f64>(dst_rows.len(), dst_rows.len(), 0, 0);
                acc.fill(0.0);
                let first = k * MATRIX_CHUNK_ROWS;
                for (i, acc_row) in acc.chunks_exact_mut(nrhs).enumerate() {
                    let row = first + i;
                    for e in row_ptr[row] as usize..row_ptr[row + 1] as usize {
                        let (j, w) = (col_idx[e] as usize, weights[e]);
                        for (a, v) in acc_row.iter_mut().zip(&src[j * nrhs..(j + 1) * nrhs]) {
                            *a += w * v.to_f64();
                        }
                    }
                }
                for ((o_row, a_row), d_row) in outs
                    .chunks_exact_mut(nrhs)
                    .zip(acc.chunks_exact(nrhs))
                    .zip(dst_rows.chunks_exact(nrhs))
                {
                    for (((o, &a), d), &s) in o_row.iter_mut().zip(a_row).zip(d_row).zip(scale) {
                        let kept = if keep { d.to_f64() } else { 0.0 };
                        *o = Compute::<T>::from_f64(kept + direction.factor(s) * a);
                    }
                }
                record_stats(part, outs, nrhs, T::MAX);
                T::narrow_slice(outs, dst_rows);
            })
        });
    arena::sync();
    reduce(stats);
    Ok(())
}

/// A transfer in `direction` from `src` to `dst` (fine → coarse or coarse → fine), node-
/// major blocks in any precisions.
pub(super) fn transfer_block(
    direction: Direction,
    transfer: &LevelTransfer<Cpu>,
    src: &Block<Cpu>,
    dst: &mut Block<Cpu>,
    scale: &[f64],
    stats: &mut Stats<Cpu>,
) -> Result<()> {
    let (fine, coarse) = match direction {
        Direction::Restrict => (src, &*dst),
        Direction::ProlongateAdd => (&*dst, src),
    };
    let (nrhs, (fine_rows, coarse_rows)) = (fine.cols(), transfer.sizes());
    if coarse.cols() != nrhs
        || scale.len() != nrhs
        || fine.rows() != fine_rows
        || coarse.rows() != coarse_rows
    {
        return Err(Error::Backend(format!(
            "grid transfer: blocks {}×{} and {}×{} for levels of {fine_rows} and {coarse_rows} unknowns, {} scales",
            fine.rows(),
            fine.cols(),
            coarse.rows(),
            coarse.cols(),
            scale.len()
        )));
    }
    if let LevelTransfer::Grid { fine, coarse } = transfer {
        check_grids(*fine, *coarse)?;
    }
    let kernel = direction.name();
    by_precision!(src.precision(), S => by_precision!(dst.precision(), T => {
        let (src, dst) = (buffer::<S>(&src.data, kernel)?, buffer_mut::<T>(&mut dst.data, kernel)?);
        match (transfer, direction) {
            (LevelTransfer::Grid { fine, coarse }, Direction::Restrict) => {
                restrict::<S, T>(src, *fine, dst, *coarse, nrhs, scale, stats)
            }
            (LevelTransfer::Grid { fine, coarse }, Direction::ProlongateAdd) => {
                prolongate_add::<S, T>(src, *coarse, dst, *fine, nrhs, scale, stats)
            }
            (LevelTransfer::Matrix { restriction, .. }, Direction::Restrict) => {
                matrix_transfer::<S, T>(restriction, direction, src, dst, nrhs, scale, stats)?
            }
            (LevelTransfer::Matrix { prolongation, .. }, Direction::ProlongateAdd) => {
                matrix_transfer::<S, T>(prolongation, direction, src, dst, nrhs, scale, stats)?
            }
        }
    }));
    Ok(())
}
