//! Dense kernels: GEMM, GEMV and the fused Gram-Schmidt step of FGMRES.
//!
//! GEMM splits C into blocks of rows (or of columns, when C is wide) and multiplies each
//! block with faer's sequential product (AVX2/AVX-512 micro-kernels chosen at run time,
//! packing buffers kept per thread: no allocation once warm). f16 operands are widened to
//! f32 tile by tile in per-thread scratch and multiplied in f32; in TF32 math, f32 operands
//! are rounded to TF32 the same way (what Tensor Cores multiply), the sums in f32.

mod gemv;

use faer::{Accum, Par};
use half::f16;
use rayon::prelude::*;

use super::simd::per_simd_level;
use super::{arena, buffer, buffer_mut, by_precision, slice, slice_mut, Compute, Cpu};
use crate::device::dense::products_in_turn;
use crate::device::{
    needs_second_step, Block, DenseInverse, DenseKernels, GemmBatch, MatMut, MatRef, Scratch,
    Storage, View, ViewMut,
};
use crate::error::Result;
use crate::precision::{round_to_tf32, GemmMath, Precision, Stored};

/// Products smaller than this (m·n·k) run as one task.
const SMALL_GEMM: usize = 1 << 18;
/// Fewest rows (or columns) of C one task computes.
const MIN_BLOCK: usize = 64;
/// Tiles of operands converted to f32 (f16, or f32 in TF32 math): A tiles TILE_ROWS ×
/// TILE_DEPTH, B tiles TILE_DEPTH × TILE_COLS (128 KiB each: both stay in a 512 KiB L2
/// beside faer's packing).
const TILE_DEPTH: usize = 128;
const TILE_ROWS: usize = 256;
const TILE_COLS: usize = 256;

/// A typed operand: entry (i, j) at `offset + i·rs + j·cs` of `data`.
#[derive(Clone, Copy)]
struct Operand<'a, T> {
    data: &'a [T],
    offset: usize,
    rs: usize,
    cs: usize,
}

impl<'a, T> Operand<'a, T> {
    #[inline]
    fn at(&self, i: usize, j: usize) -> usize {
        self.offset + i * self.rs + j * self.cs
    }

    /// The same operand with its element type named `U`.
    ///
    /// # Safety
    /// T and U must be the same type.
    unsafe fn cast<U>(self) -> Operand<'a, U> {
        Operand {
            // SAFETY: T and U are the same type (the caller's guarantee).
            data: unsafe {
                std::slice::from_raw_parts(self.data.as_ptr() as *const U, self.data.len())
            },
            offset: self.offset,
            rs: self.rs,
            cs: self.cs,
        }
    }
}

/// A raw pointer rayon tasks may share when each writes its own disjoint entries.
#[derive(Clone, Copy)]
struct SharedMut<T>(*mut T);

impl<T> SharedMut<T> {
    /// Through a method, so closures capture the wrapper (Sync), not the bare pointer.
    fn get(self) -> *mut T {
        self.0
    }
}
// SAFETY: only used where tasks write disjoint blocks of C (see `gemm`).
unsafe impl<T: Send> Send for SharedMut<T> {}
unsafe impl<T: Send> Sync for SharedMut<T> {}

/// faer's sequential C = A·B (or C += A·B) on raw strided views.
///
/// # Safety
/// The views must lie inside their buffers and C must not overlap A or B.
#[allow(clippy::too_many_arguments)]
unsafe fn faer_product<T: faer::traits::ComplexField + Copy>(
    m: usize,
    n: usize,
    k: usize,
    c: *mut T,
    ldc: usize,
    a: *const T,
    (a_rs, a_cs): (usize, usize),
    b: *const T,
    (b_rs, b_cs): (usize, usize),
    accumulate: bool,
    one: T,
) {
    // SAFETY: the caller guarantees the extents and that C does not alias A or B.
    unsafe {
        let c = faer::MatMut::from_raw_parts_mut(c, m, n, 1, ldc as isize);
        let a = faer::MatRef::from_raw_parts(a, m, k, a_rs as isize, a_cs as isize);
        let b = faer::MatRef::from_raw_parts(b, k, n, b_rs as isize, b_cs as isize);
        let accum = if accumulate {
            Accum::Add
        } else {
            Accum::Replace
        };
        faer::linalg::matmul::matmul(c, accum, a, b, one, Par::Seq);
    }
}

/// The blocks of C the tasks compute: (rows, cols) ranges.
fn task_blocks(m: usize, n: usize, k: usize) -> (bool, usize, usize) {
    let tasks = 4 * rayon::current_num_threads();
    let by_rows = m >= n;
    let extent = if by_rows { m } else { n };
    let block = if m.saturating_mul(n).saturating_mul(k) < SMALL_GEMM {
        extent
    } else {
        MIN_BLOCK.max(extent.div_ceil(tasks).next_multiple_of(16))
    };
    (by_rows, block.max(1), extent.div_ceil(block.max(1)))
}

/// C_i = A_i·B_i (i < `batch.count`, the operands `batch`'s strides apart) for operands in
/// S and C in `C` (S itself or S's compute precision). The tasks are blocks of rows (or of
/// columns, when C is wide) of one product, each computing its block of every product in
/// turn: the tasks meet once per batch, and a shared A's block stays in cache from one
/// product to the next (PSC's group products, one per right-hand side: 15–20 % faster than
/// one product after the other in f64). Every block is the product one GEMM of the batch
/// alone computes, bit for bit.
#[allow(clippy::too_many_arguments)]
fn gemm<S: Storage, C: Storage>(
    m: usize,
    n: usize,
    k: usize,
    a: Operand<'_, S>,
    b: Operand<'_, S>,
    c: &mut [C],
    c_offset: usize,
    ldc: usize,
    math: GemmMath,
    batch: GemmBatch,
) {
    if m == 0 || n == 0 {
        return;
    }
    let (by_rows, block, tasks) = task_blocks(m, n, k);
    let c_ptr = SharedMut(c.as_mut_ptr());
    (0..tasks).into_par_iter().for_each(|t| {
        let (r0, rows, c0, cols) = if by_rows {
            let r0 = t * block;
            (r0, block.min(m - r0), 0, n)
        } else {
            let c0 = t * block;
            (0, m, c0, block.min(n - c0))
        };
        for i in 0..batch.count {
            // SAFETY: task t writes only rows r0.. or columns c0.. of each C_i (disjoint
            // blocks; the C_i do not overlap, checked by the caller); the extents were
            // checked by the caller.
            let c_block = unsafe {
                c_ptr
                    .get()
                    .add(c_offset + i * batch.stride_c + r0 + c0 * ldc)
            };
            let a = Operand {
                offset: a.offset + i * batch.stride_a,
                ..a
            };
            let b = Operand {
                offset: b.offset + i * batch.stride_b,
                ..b
            };
            block_product::<S, C>(r0, rows, c0, cols, k, a, b, c_block, ldc, math);
        }
    });
    arena::sync();
}

/// C = A·B by faer's sequential product, for kernels that multiply inside their own rayon
/// tasks: f32 or f64 operands given as (values, row stride, column stride), C column-major
/// with leading dimension `ldc`.
pub(super) fn product_in_task<T: Storage>(
    (m, n, k): (usize, usize, usize),
    (a, a_rs, a_cs): (&[T], usize, usize),
    (b, b_rs, b_cs): (&[T], usize, usize),
    c: &mut [T],
    ldc: usize,
) {
    let end = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        k == 0 || (a.len() > end(m, k, a_rs, a_cs) && b.len() > end(k, n, b_rs, b_cs)),
        "product_in_task: operands of ({m}×{k})·({k}×{n}) exceed their slices"
    );
    assert!(
        c.len() > end(m, n, 1, ldc),
        "product_in_task: C exceeds its slice"
    );
    assert!(
        T::PRECISION != Precision::F16,
        "product_in_task: f32 or f64 operands (f16 tiles would need the arena)"
    );
    let operand = |data, rs, cs| Operand {
        data,
        offset: 0,
        rs,
        cs,
    };
    block_product::<T, T>(
        0,
        m,
        0,
        n,
        k,
        operand(a, a_rs, a_cs),
        operand(b, b_rs, b_cs),
        c.as_mut_ptr(),
        ldc,
        GemmMath::Full,
    );
}

/// Columns of C from which [`symmetric_product`] beats the GEMM (with fewer, both are bound
/// by reading A and the transposes cost more than they save), and up to which it is used
/// (measured faster up to 256; its scratch holds Bᵀ and two tasks' blocks of Cᵀ).
const SYMM_MIN_COLS: usize = 16;
const SYMM_MAX_COLS: usize = 256;

/// Whether C = A·B (A symmetric, m × m; C m × n; f32 or f64) is computed faster as
/// Cᵀ = Bᵀ·A.
fn transposed_product_pays(m: usize, n: usize) -> bool {
    (SYMM_MIN_COLS..=SYMM_MAX_COLS).contains(&n)
        && n < m
        && m.saturating_mul(m).saturating_mul(n) >= SMALL_GEMM
}

/// C = A·B for a symmetric A (m × m) and a tall, narrow B (m × n, n ≪ m) in f32 or f64,
/// computed as Cᵀ = Bᵀ·A: faer multiplies a narrow C = A·B at about two thirds of its
/// square-matrix rate (every entry of A is packed for only n columns), and Bᵀ·A, whose
/// large operand is the right-hand one, at close to all of it (measured on M1's Π⁻¹
/// products, 7,200² and 14,880² times 64 columns). Bᵀ is written into shared scratch
/// first; each task computes the columns of Cᵀ for a block of C's rows in its thread's
/// arena and transposes them into C. A's columns stand for its rows (Aᵀ = A).
#[allow(clippy::too_many_arguments)]
fn symmetric_product<S: Storage, C: Storage>(
    m: usize,
    n: usize,
    a: Operand<'_, S>,
    b: Operand<'_, S>,
    c: &mut [C],
    c_offset: usize,
    ldc: usize,
    math: GemmMath,
) {
    let (_, block, tasks) = task_blocks(m, n, m);
    let c_ptr = SharedMut(c.as_mut_ptr());
    arena::with_shared::<S, _>(n * m, |bt| {
        // Bᵀ (n × m, column-major): column i is row i of B.
        bt.par_chunks_mut(TRANSPOSE_ROWS * n)
            .enumerate()
            .for_each(|(chunk, out)| {
                let i0 = chunk * TRANSPOSE_ROWS;
                for (i, column) in out.chunks_exact_mut(n).enumerate() {
                    for (j, v) in column.iter_mut().enumerate() {
                        *v = b.data[b.at(i0 + i, j)];
                    }
                }
            });
        let bt = Operand {
            data: &*bt,
            offset: 0,
            rs: 1,
            cs: n,
        };
        (0..tasks).into_par_iter().for_each(|task| {
            let (r0, rows) = (task * block, block.min(m - task * block));
            arena::with(|arena| {
                let ct = arena.one::<C>(0, n * rows);
                // Cᵀ[:, r0..r0 + rows] = Bᵀ · A[:, r0..r0 + rows] (the native product:
                // no arena of its own).
                block_product::<S, C>(0, n, r0, rows, m, bt, a, ct.as_mut_ptr(), n, math);
                // SAFETY: the task writes rows r0..r0 + rows of C only (disjoint blocks);
                // the caller checked C's extent.
                let c = unsafe { c_ptr.get().add(c_offset + r0) };
                for i0 in (0..rows).step_by(TRANSPOSE_TILE) {
                    for j0 in (0..n).step_by(TRANSPOSE_TILE) {
                        for i in i0..(i0 + TRANSPOSE_TILE).min(rows) {
                            for j in j0..(j0 + TRANSPOSE_TILE).min(n) {
                                // SAFETY: (r0 + i, j) lies in this task's rows of C.
                                unsafe { *c.add(i + j * ldc) = ct[j + i * n] };
                            }
                        }
                    }
                }
            });
        });
    });
    arena::sync();
}

/// Rows of B one task of [`symmetric_product`]'s transpose takes, and the side of the tiles
/// its tasks transpose Cᵀ back in (both halves of a tile stay in L1).
const TRANSPOSE_ROWS: usize = 256;
const TRANSPOSE_TILE: usize = 16;

/// One task's block C[r0.., c0..] = A[r0.., :] · B[:, c0..].
#[allow(clippy::too_many_arguments)]
fn block_product<S: Storage, C: Storage>(
    r0: usize,
    rows: usize,
    c0: usize,
    cols: usize,
    k: usize,
    a: Operand<'_, S>,
    b: Operand<'_, S>,
    c: *mut C,
    ldc: usize,
    math: GemmMath,
) {
    use std::any::TypeId;
    let same = |x: TypeId| x == TypeId::of::<S>() && TypeId::of::<C>() == TypeId::of::<S>();
    let f32_tf32 = TypeId::of::<S>() == TypeId::of::<f32>() && math == GemmMath::Tf32;
    if !f32_tf32 && (same(TypeId::of::<f64>()) || same(TypeId::of::<f32>())) {
        // SAFETY: S and C are one native type (f32 or f64), checked by TypeId; the views lie
        // inside the operands (checked by the caller) and C does not alias them.
        unsafe {
            macro_rules! native {
                ($t:ty) => {
                    faer_product::<$t>(
                        rows,
                        cols,
                        k,
                        c as *mut $t,
                        ldc,
                        a.data.as_ptr().add(a.at(r0, 0)) as *const $t,
                        (a.rs, a.cs),
                        b.data.as_ptr().add(b.at(0, c0)) as *const $t,
                        (b.rs, b.cs),
                        false,
                        1.0,
                    )
                };
            }
            if TypeId::of::<S>() == TypeId::of::<f64>() {
                native!(f64);
            } else {
                native!(f32);
            }
        }
        return;
    }
    let block = (r0, rows, c0, cols, k);
    if f32_tf32 {
        // SAFETY: S is f32 (checked above).
        let (a, b) = unsafe { (a.cast::<f32>(), b.cast::<f32>()) };
        tiled_product(block, a, b, c, ldc, round_slice_to_tf32);
    } else {
        assert_eq!(TypeId::of::<S>(), TypeId::of::<f16>(), "GEMM storage");
        // SAFETY: S is f16 (asserted above).
        let (a, b) = unsafe { (a.cast::<f16>(), b.cast::<f16>()) };
        tiled_product(block, a, b, c, ldc, <f16 as Stored>::widen_slice);
    }
}

/// dst[i] = src[i] rounded to TF32.
fn round_slice_to_tf32(src: &[f32], dst: &mut [f32]) {
    dst.iter_mut()
        .zip(src)
        .for_each(|(d, &s)| *d = round_to_tf32(s));
}

/// A task's block C[r0.., c0..] = A[r0.., :] · B[:, c0..] (the block: r0, rows, c0, cols,
/// k) with the operands converted to f32 tile by tile (f16 widened, f32 rounded to TF32)
/// and multiplied in f32, into C when it is f32, else into an f32 accumulator rounded at
/// the end. Tiles of TILE_ROWS × TILE_DEPTH and TILE_DEPTH × TILE_COLS stay in L2 while faer
/// multiplies them; each B tile serves every row tile of its columns.
fn tiled_product<T: Copy, C: Storage>(
    (r0, rows, c0, cols, k): (usize, usize, usize, usize, usize),
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    c: *mut C,
    ldc: usize,
    convert: fn(&[T], &mut [f32]),
) {
    let c_is_f32 = std::any::TypeId::of::<C>() == std::any::TypeId::of::<f32>();
    arena::with(|arena| {
        let depth = TILE_DEPTH.min(k.max(1));
        let (row_tile, col_tile) = (TILE_ROWS.min(rows), TILE_COLS.min(cols));
        let acc_len = if c_is_f32 { 0 } else { rows * cols };
        let (a_tile, b_tile, acc, _) =
            arena.four::<f32, f32, f32, f32>(row_tile * depth, depth * col_tile, acc_len, 0);
        let (dst, ld) = if c_is_f32 {
            (c as *mut f32, ldc)
        } else {
            (acc.as_mut_ptr(), rows)
        };
        for j0 in (0..cols).step_by(col_tile) {
            let nj = col_tile.min(cols - j0);
            for k0 in (0..k).step_by(depth) {
                let kd = depth.min(k - k0);
                let b_strides = convert_tile(b, k0, kd, c0 + j0, nj, b_tile, convert);
                for i0 in (0..rows).step_by(row_tile) {
                    let ni = row_tile.min(rows - i0);
                    let a_strides = convert_tile(a, r0 + i0, ni, k0, kd, a_tile, convert);
                    // SAFETY: the tiles hold ni × kd and kd × nj values; dst + (i0, j0) is
                    // this task's block of C (f32) or of the rows × cols accumulator.
                    unsafe {
                        faer_product::<f32>(
                            ni,
                            nj,
                            kd,
                            dst.add(i0 + j0 * ld),
                            ld,
                            a_tile.as_ptr(),
                            a_strides,
                            b_tile.as_ptr(),
                            b_strides,
                            k0 > 0,
                            1.0,
                        );
                    }
                }
            }
        }
        if c_is_f32 && k > 0 {
            return; // the products wrote C itself
        }
        for j in 0..cols {
            for i in 0..rows {
                // SAFETY: (i, j) lies in this task's block of C and of dst.
                unsafe {
                    let v = if k == 0 { 0.0 } else { *dst.add(i + j * ld) };
                    *c.add(i + j * ldc) = C::from_f64(v as f64);
                }
            }
        }
    });
}

/// tile = op[i0.., j0..] (ni × nj) converted to f32, contiguous runs converted together:
/// column-major when the operand's columns are contiguous, else row-major; returns the
/// tile's (row, column) strides.
fn convert_tile<T: Copy>(
    op: Operand<'_, T>,
    i0: usize,
    ni: usize,
    j0: usize,
    nj: usize,
    tile: &mut [f32],
    convert: fn(&[T], &mut [f32]),
) -> (usize, usize) {
    if op.rs == 1 {
        for (j, column) in tile[..ni * nj].chunks_exact_mut(ni).enumerate() {
            let start = op.at(i0, j0 + j);
            convert(&op.data[start..start + ni], column);
        }
        (1, ni)
    } else if op.cs == 1 {
        for (i, row) in tile[..ni * nj].chunks_exact_mut(nj).enumerate() {
            let start = op.at(i0 + i, j0);
            convert(&op.data[start..start + nj], row);
        }
        (nj, 1)
    } else {
        for (j, column) in tile[..ni * nj].chunks_exact_mut(ni).enumerate() {
            for (i, t) in column.iter_mut().enumerate() {
                convert(
                    std::slice::from_ref(&op.data[op.at(i0 + i, j0 + j)]),
                    std::slice::from_mut(t),
                );
            }
        }
        (1, ni)
    }
}

/// Bytes of the basis one task of a Gram-Schmidt pass reads: a chunk of every basis vector
/// stays in L2 between a pass's update and its products.
const GS_CHUNK_BYTES: usize = 1 << 18;

/// Which Gram-Schmidt step's coefficients.
#[derive(Clone, Copy)]
enum Step {
    First,
    Second,
}
use Step::{First, Second};

/// Classical Gram-Schmidt of w against f64 basis vectors, in passes over chunks of rows
/// whose size depends only on the basis size (results do not depend on the thread count).
/// A pass subtracts V c of an earlier step's coefficients c from each chunk of w, then
/// computes the chunk's products Vᵀw (the next step's coefficients) and ‖w‖², and the
/// chunks' sums are added in chunk order.
struct GramSchmidt<'a> {
    basis: &'a [Block<Cpu>],
    w: &'a mut [f64],
    rows: usize,
    /// Per chunk k + 1 partial sums; then the coefficients of the first and second step.
    scratch: &'a mut Vec<f64>,
}

impl<'a> GramSchmidt<'a> {
    fn new(
        basis: &'a [Block<Cpu>],
        w: &'a mut Block<Cpu>,
        scratch: &'a mut Scratch<Cpu>,
    ) -> Result<Self> {
        let len = w.len();
        let w = buffer_mut::<f64>(&mut w.data, "orthogonalize")?;
        let k = basis.len();
        let rows = (GS_CHUNK_BYTES / (8 * (k + 1))).clamp(1 << 10, 1 << 14);
        let scratch = scratch.0.vec_mut();
        scratch.clear();
        scratch.resize(len.div_ceil(rows) * (k + 1) + 2 * k, 0.0);
        Ok(GramSchmidt {
            basis,
            w,
            rows,
            scratch,
        })
    }

    /// One pass: w −= V c with the coefficients of `subtract`, then (when `products`) the
    /// next step's coefficients Vᵀw; returns ‖w‖² after the update.
    fn pass(&mut self, subtract: Option<Step>, products: bool) -> f64 {
        let k = self.basis.len();
        let chunks = self.w.len().div_ceil(self.rows);
        let (partials, coefficients) = self.scratch.split_at_mut(chunks * (k + 1));
        let (first, second) = coefficients.split_at_mut(k);
        let (subtract, next): (Option<&[f64]>, &mut [f64]) = match subtract {
            None => (None, first),
            Some(First) => (Some(first), second),
            Some(Second) => (Some(second), first),
        };
        let (rows, basis) = (self.rows, self.basis);
        let width = if products { k + 1 } else { 1 };
        partials[..chunks * width]
            .par_chunks_mut(width)
            .zip(self.w.par_chunks_mut(rows))
            .enumerate()
            .for_each(|(c, (out, wc))| gram_schmidt_chunk((basis, c * rows, wc, subtract, out)));
        let mut norm = 0.0;
        if products {
            next.fill(0.0);
        }
        for part in partials[..chunks * width].chunks_exact(width) {
            if products {
                for (s, p) in next.iter_mut().zip(part) {
                    *s += p;
                }
            }
            norm += part[width - 1];
        }
        norm
    }

    /// h += the coefficients of `step`.
    fn add_coefficients(&self, step: Step, h: &mut [f64]) {
        let k = self.basis.len();
        let chunks = self.w.len().div_ceil(self.rows);
        let coefficients = &self.scratch[chunks * (k + 1)..];
        let c = match step {
            First => &coefficients[..k],
            Second => &coefficients[k..2 * k],
        };
        h[..k].iter_mut().zip(c).for_each(|(h, c)| *h += c);
    }
}

/// The arguments of [`gram_schmidt_chunk`]: the basis, the chunk's first row, the chunk of
/// w, the coefficients to subtract, and the chunk's sums (k products and ‖w‖², or ‖w‖²).
type GramSchmidtChunkArgs<'a> = (
    &'a [Block<Cpu>],
    usize,
    &'a mut [f64],
    Option<&'a [f64]>,
    &'a mut [f64],
);

per_simd_level! {
    /// One chunk of a [`GramSchmidt`] pass.
    fn gram_schmidt_chunk(GramSchmidtChunkArgs<'_>) => gram_schmidt_chunk_portable
}

#[inline(always)]
fn gram_schmidt_chunk_portable<const LEVEL: u8>(
    (basis, start, wc, subtract, out): GramSchmidtChunkArgs<'_>,
) {
    let rows = wc.len();
    if let Some(c) = subtract {
        for (v, &hc) in basis.iter().zip(c) {
            for (a, b) in wc.iter_mut().zip(basis_chunk(v, start..start + rows)) {
                *a -= hc * b;
            }
        }
    }
    let (last, products) = out.split_last_mut().expect("at least ‖w‖²");
    for (o, v) in products.iter_mut().zip(basis) {
        *o = dot_lanes(basis_chunk(v, start..start + rows), wc);
    }
    *last = dot_lanes(wc, wc);
}

/// Rows `rows` of basis vector `v` (checked to be f64 in [`GramSchmidt::new`]).
#[inline(always)]
fn basis_chunk(v: &Block<Cpu>, rows: std::ops::Range<usize>) -> &[f64] {
    &f64s(v).expect("f64, checked by DenseKernels::orthogonalize")[rows]
}

/// x · y in 16 interleaved partial sums, added pairwise at the end: a fixed order at every
/// SIMD level, with enough independent additions in flight to read at memory speed.
#[inline(always)]
fn dot_lanes(x: &[f64], y: &[f64]) -> f64 {
    const LANES: usize = 16;
    let (xs, ys) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let tail = xs
        .remainder()
        .iter()
        .zip(ys.remainder())
        .fold(0.0, |s, (a, b)| s + a * b);
    let mut lanes = [0.0; LANES];
    for (a, b) in xs.zip(ys) {
        for k in 0..LANES {
            lanes[k] += a[k] * b[k];
        }
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for k in 0..width {
            lanes[k] += lanes[k + width];
        }
    }
    lanes[0] + tail
}

fn f64s(b: &Block<Cpu>) -> Result<&[f64]> {
    Ok(buffer::<f64>(&b.data, "orthogonalize")?)
}

fn operand<'a, S: Storage>(m: &MatRef<'a, Cpu>) -> Result<Operand<'a, S>> {
    Ok(Operand {
        data: buffer::<S>(m.data, "gemm")?,
        offset: m.offset,
        rs: m.row_stride,
        cs: m.col_stride,
    })
}

/// One product of a batch: C = A·B.
const SINGLE: GemmBatch = GemmBatch {
    count: 1,
    stride_a: 0,
    stride_b: 0,
    stride_c: 0,
};

/// C_i = A_i·B_i on checked operands, for `gemm`, `gemm_batched` and `symm` (`symmetric`:
/// A is square and Aᵀ = A; one product).
fn product(
    a: MatRef<'_, Cpu>,
    b: MatRef<'_, Cpu>,
    c: MatMut<'_, Cpu>,
    math: GemmMath,
    symmetric: bool,
    batch: GemmBatch,
) -> Result<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let (sp, cp) = (a.precision(), c.precision());
    // Not for operands converted tile by tile (f16, TF32 math): the tiles of a narrow Bᵀ
    // make faer's calls too small, and those products ran 5–13 % slower transposed.
    let native = matches!(sp, Precision::F64 | Precision::F32) && math == GemmMath::Full;
    let transposed = symmetric && native && transposed_product_pays(m, n);
    let (c_offset, ldc) = (c.offset, c.ld);
    by_precision!(sp, S => {
        let (a, b) = (operand::<S>(&a)?, operand::<S>(&b)?);
        macro_rules! run {
            ($c:ty) => {{
                let c = buffer_mut::<$c>(c.data, "gemm")?;
                if transposed {
                    symmetric_product::<S, $c>(m, n, a, b, c, c_offset, ldc, math);
                } else {
                    gemm::<S, $c>(m, n, k, a, b, c, c_offset, ldc, math, batch);
                }
            }};
        }
        if cp == sp {
            run!(S);
        } else {
            run!(Compute<S>);
        }
    });
    Ok(())
}

/// The set-up's inversions stay with the host's blocked inversion.
impl DenseInverse for Cpu {}

impl DenseKernels for Cpu {
    fn gemm_unchecked(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        math: GemmMath,
    ) -> Result<()> {
        product(a, b, c, math, false, SINGLE)
    }

    /// One set of tasks for the whole batch (see [`gemm`]) where the products' C blocks do
    /// not overlap, else one product after the other.
    fn gemm_batched_unchecked(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        batch: GemmBatch,
        math: GemmMath,
    ) -> Result<()> {
        let extent = (c.cols.max(1) - 1) * c.ld + c.rows;
        if batch.count > 1 && batch.stride_c < extent {
            return products_in_turn(self, a, b, c, batch, math);
        }
        product(a, b, c, math, false, batch)
    }

    /// Cᵀ = Bᵀ·A when C is tall and narrow (see [`symmetric_product`]), else the GEMM.
    fn symm_unchecked(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        math: GemmMath,
    ) -> Result<()> {
        product(a, b, c, math, true, SINGLE)
    }

    fn gemv_unchecked(
        &self,
        a: MatRef<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (m, n, sp) = (a.rows, a.cols, a.precision());
        by_precision!(sp, S => gemv::gemv::<S>(
            (m, n),
            buffer::<S>(a.data, "gemv")?,
            a.offset,
            a.col_stride,
            slice::<Compute<S>>(&x, "gemv")?,
            slice_mut::<Compute<S>>(y, "gemv")?,
        ));
        Ok(())
    }

    fn symv_unchecked(
        &self,
        a: MatRef<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()> {
        let (n, sp) = (a.rows, a.precision());
        by_precision!(sp, S => gemv::symv::<S>(
            n,
            buffer::<S>(a.data, "symv")?,
            a.offset,
            a.col_stride,
            slice::<Compute<S>>(&x, "symv")?,
            slice_mut::<Compute<S>>(y, "symv")?,
        ));
        Ok(())
    }

    fn symv_reads_lower_triangle(&self) -> bool {
        true
    }

    fn orthogonalize_unchecked(
        &self,
        basis: &[Block<Self>],
        w: &mut Block<Self>,
        h: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<(f64, f64)> {
        let mut gs = GramSchmidt::new(basis, w, scratch)?;
        let before = gs.pass(None, true);
        let after = gs.pass(Some(First), false);
        gs.add_coefficients(First, h);
        Ok((before.sqrt(), after.sqrt()))
    }

    fn orthogonalize_twice_if_needed_unchecked(
        &self,
        basis: &[Block<Self>],
        w: &mut Block<Self>,
        h: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<f64> {
        let mut gs = GramSchmidt::new(basis, w, scratch)?;
        let before = gs.pass(None, true);
        // The first step's update and the second step's products in one pass.
        let after = gs.pass(Some(First), true);
        gs.add_coefficients(First, h);
        if !needs_second_step(before.sqrt(), after.sqrt()) {
            return Ok(after.sqrt());
        }
        let again = gs.pass(Some(Second), false);
        gs.add_coefficients(Second, h);
        Ok(again.sqrt())
    }
}
