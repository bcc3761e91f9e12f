//! The PSC passes on the CPU: the hierarchical-basis transforms (column by column, level by
//! level on the structured grid) and the C/E/I gather and scatter with the partial-Cholesky
//! scaling (one task per column).

use rayon::prelude::*;

use super::{buffer, buffer_mut, Cpu};
use crate::device::psc::{
    check_blocks, check_transform, CellParents, Classes, GridTransform, HierarchicalTransform,
    PscKernels, RowUpdate, PADDING_SLOT,
};
use crate::device::{unsupported, Block, Data};
use crate::error::Result;
use crate::precision::{Precision, Real};

/// Weight of an edge-midpoint parent and of a Q1 cell-midpoint parent.
const EDGE_WEIGHT: f64 = 0.5;
const CELL_WEIGHT: f64 = 0.25;

/// Nodes one pass must update before its rows are split among threads.
const PARALLEL_NODES: usize = 1 << 13;

/// The rows of one column of a grid transform, shared by the tasks of one pass: interior
/// row j (1 ≤ j < n) holds the unknowns of nodes (1..n, j) at `(j − 1)·(n − 1)`.
struct GridRows<T> {
    ptr: *mut T,
    n: usize,
}

// SAFETY: the tasks of a pass write disjoint rows and read only rows that no task of the
// pass writes ([`GridRows::row`], [`GridRows::row_mut`]).
unsafe impl<T: Send> Send for GridRows<T> {}
unsafe impl<T: Send> Sync for GridRows<T> {}

impl<T: Real> GridRows<T> {
    fn new(column: &mut [T], n: usize) -> Self {
        assert_eq!(column.len(), (n - 1) * (n - 1));
        GridRows {
            ptr: column.as_mut_ptr(),
            n,
        }
    }

    /// Grid row j, None on the boundary (j = 0 or n).
    ///
    /// # Safety
    /// No task of the pass writes row j.
    unsafe fn row(&self, j: usize) -> Option<&[T]> {
        let width = self.n - 1;
        // SAFETY: row j − 1 < n − 1 lies in the column; nobody writes it (the caller).
        (j > 0 && j < self.n)
            .then(|| unsafe { std::slice::from_raw_parts(self.ptr.add((j - 1) * width), width) })
    }

    /// Interior grid row j for writing.
    ///
    /// # Safety
    /// Only this task touches row j during the pass.
    #[allow(clippy::mut_from_ref)]
    unsafe fn row_mut(&self, j: usize) -> &mut [T] {
        assert!(j > 0 && j < self.n);
        let width = self.n - 1;
        // SAFETY: as in `row`; this task owns row j (the caller).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add((j - 1) * width), width) }
    }
}

/// Value at node i of a grid row (zero on the boundary: i = 0 or n, or no row).
#[inline]
fn at<T: Real>(row: Option<&[T]>, i: usize) -> T {
    match row {
        Some(r) if i > 0 && i <= r.len() => r[i - 1],
        _ => T::zero(),
    }
}

/// Runs `task(j)` for the rows j = first, first + step, … < n, in parallel when the pass
/// updates enough nodes (`nodes_per_row` each) and `split` allows it.
fn for_rows(
    (first, step, n): (usize, usize, usize),
    nodes_per_row: usize,
    split: bool,
    task: impl Fn(usize) + Sync + Send,
) {
    let count = n.saturating_sub(first).div_ceil(step);
    if split && count * nodes_per_row >= PARALLEL_NODES {
        (0..count)
            .into_par_iter()
            .for_each(|r| task(first + r * step));
    } else {
        (0..count).for_each(|r| task(first + r * step));
    }
}

/// The grid transforms of one column, row by row. Level by level (spacing s), each new node
/// is a child of nodes at spacing 2s: the horizontal edge midpoints (i odd multiple of s,
/// j a multiple of 2s), the vertical ones (i a multiple of 2s, j odd) and the cell
/// midpoints (both odd). Within a pass a task owns a row: S writes children and reads the
/// parents in its row or in rows j ± s; Sᵀ writes parents (rows that are multiples of 2s)
/// and reads children in its row and in rows j ± s. Each node's additions run in one order
/// (that of the children's loops in lexicographic order) whether the rows run in parallel
/// or not.
struct Grid<'a>(&'a GridTransform);

impl Grid<'_> {
    fn weights<T: Real>(&self) -> (T, T) {
        (T::from_f64(EDGE_WEIGHT), T::from_f64(CELL_WEIGHT))
    }

    /// x ← S x for one column; rows split among threads when `split`.
    fn apply<T: Real>(&self, x: &mut [T], split: bool) {
        let t = self.0;
        let (n, (half, quarter)) = (t.n, self.weights::<T>());
        let rows = GridRows::new(x, n);
        for k in 1..=t.levels {
            let s = 1 << (t.levels - k);
            let s2 = 2 * s;
            // Horizontal edge midpoints: parents in the same row.
            for_rows((s2, s2, n), n / s2, split, |j| {
                // SAFETY: this pass writes and reads row j only in this task.
                let row = unsafe { rows.row_mut(j) };
                for i in (s..n).step_by(s2) {
                    let v = half * (at(Some(row), i - s) + at(Some(row), i + s));
                    row[i - 1] = row[i - 1] + v;
                }
            });
            // Vertical edge and cell midpoints: parents in rows j ± s (multiples of 2s,
            // which this pass does not write).
            for_rows((s, s2, n), n / s, split, |j| {
                // SAFETY: rows j ± s are multiples of 2s; this pass writes odd rows only.
                let (below, above) = unsafe { (rows.row(j - s), rows.row(j + s)) };
                // SAFETY: row j is this task's.
                let row = unsafe { rows.row_mut(j) };
                for i in (s2..n).step_by(s2) {
                    let v = half * (at(below, i) + at(above, i));
                    row[i - 1] = row[i - 1] + v;
                }
                for i in (s..n).step_by(s2) {
                    let v = match t.cell_parents {
                        CellParents::Diagonal => half * (at(below, i - s) + at(above, i + s)),
                        CellParents::Corners => {
                            quarter
                                * (at(below, i - s)
                                    + at(below, i + s)
                                    + at(above, i - s)
                                    + at(above, i + s))
                        }
                    };
                    row[i - 1] = row[i - 1] + v;
                }
            });
        }
    }

    /// y ← Sᵀ y for one column: levels in reverse, each interior parent adds its children's
    /// weighted values, in the order the children's loops would scatter them (horizontal
    /// children in its row, then row j − s's vertical child and cells, then row j + s's).
    fn apply_transpose<T: Real>(&self, y: &mut [T], split: bool) {
        let t = self.0;
        let (n, (half, quarter)) = (t.n, self.weights::<T>());
        let rows = GridRows::new(y, n);
        for k in (1..=t.levels).rev() {
            let s = 1 << (t.levels - k);
            let s2 = 2 * s;
            for_rows((s2, s2, n), n / s2, split, |j| {
                // SAFETY: rows j ± s are odd multiples of s, which this pass reads only; row
                // j is this task's.
                let (below, above) = unsafe { (rows.row(j - s), rows.row(j + s)) };
                let row = unsafe { rows.row_mut(j) };
                for i in (s2..n).step_by(s2) {
                    let mut v = row[i - 1];
                    v = v + half * at(Some(row), i - s);
                    v = v + half * at(Some(row), i + s);
                    v = v + half * at(below, i);
                    match t.cell_parents {
                        CellParents::Diagonal => v = v + half * at(below, i - s),
                        CellParents::Corners => {
                            v = v + quarter * at(below, i - s);
                            v = v + quarter * at(below, i + s);
                        }
                    }
                    v = v + half * at(above, i);
                    match t.cell_parents {
                        CellParents::Diagonal => v = v + half * at(above, i + s),
                        CellParents::Corners => {
                            v = v + quarter * at(above, i - s);
                            v = v + quarter * at(above, i + s);
                        }
                    }
                    row[i - 1] = v;
                }
            });
        }
    }
}

/// One level's sparse rows: rows, row pointers, columns, weights.
type Rows<'a, T> = (&'a [u32], &'a [u32], &'a [u32], &'a [T]);

/// x ← S x (or Sᵀ x) for every column of a block.
fn transform<T: Real + crate::device::Storage>(
    t: &HierarchicalTransform<Cpu>,
    x: &mut [T],
    transpose: bool,
) -> Result<()> {
    let len = t.len().max(1);
    match t {
        HierarchicalTransform::Grid(g) => {
            let grid = Grid(g);
            let columns = x.len() / len;
            // Few columns: each column's rows in parallel; many: a column per task.
            let split = columns < rayon::current_num_threads();
            x.par_chunks_mut(len).for_each(|column| {
                if transpose {
                    grid.apply_transpose(column, split)
                } else {
                    grid.apply(column, split)
                }
            });
        }
        HierarchicalTransform::Levels(l) => {
            fn typed<T: crate::device::Storage>(u: &RowUpdate<Cpu>) -> Result<Rows<'_, T>> {
                Ok((
                    &u.rows,
                    &u.row_ptr,
                    &u.cols,
                    buffer::<T>(&u.weights, "hierarchical_transform")?,
                ))
            }
            let updates: Vec<Rows<'_, T>> = if transpose {
                l.transpose.iter().rev().map(typed).collect::<Result<_>>()?
            } else {
                l.forward.iter().map(typed).collect::<Result<_>>()?
            };
            x.par_chunks_mut(len).for_each(|column| {
                for &(rows, row_ptr, cols, weights) in &updates {
                    for (r, &row) in rows.iter().enumerate() {
                        let (start, end) = (row_ptr[r] as usize, row_ptr[r + 1] as usize);
                        let mut v = T::zero();
                        for p in start..end {
                            v = v + weights[p] * column[cols[p] as usize];
                        }
                        column[row as usize] = column[row as usize] + v;
                    }
                }
            });
        }
    }
    Ok(())
}

/// The typed slices of a class description.
struct Typed<'a, T> {
    c: &'a [u32],
    e: &'a [u32],
    i: &'a [u32],
    l_c_inv: &'a [T],
    scale_e: &'a [T],
    scale_i: &'a [T],
}

fn typed<'a, T: Real + crate::device::Storage>(k: &'a Classes<Cpu>) -> Result<Typed<'a, T>> {
    Ok(Typed {
        c: &k.c_dofs,
        e: &k.e_dofs,
        i: &k.i_dofs,
        l_c_inv: buffer::<T>(&k.l_c_inv, "psc")?,
        scale_e: buffer::<T>(&k.scale_e, "psc")?,
        scale_i: buffer::<T>(&k.scale_i, "psc")?,
    })
}

/// Entries per task when one column's gather or scatter is split among threads.
const CLASS_CHUNK: usize = 1 << 13;

/// `f(start, chunk)` over `out` in chunks of [`CLASS_CHUNK`] (`start`: the chunk's first
/// index), in parallel when `split`. Each entry is computed alone: the same values either way.
fn for_chunks<T: Send>(split: bool, out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if split {
        out.par_chunks_mut(CLASS_CHUNK)
            .enumerate()
            .for_each(|(c, chunk)| f(c * CLASS_CHUNK, chunk));
    } else {
        f(0, out);
    }
}

/// max |v| (exact in any order, so the same split or not).
fn max_abs<T: Real>(split: bool, v: &[T]) -> T {
    let chunk_max = |c: &[T]| c.iter().fold(T::zero(), |m, x| m.max(x.abs()));
    if split {
        v.par_chunks(CLASS_CHUNK)
            .map(chunk_max)
            .reduce(T::zero, |a, b| a.max(b))
    } else {
        chunk_max(v)
    }
}

/// Few columns: each column's entries are split among threads too; many: a column per task.
fn split_columns(columns: usize) -> bool {
    columns < rayon::current_num_threads()
}

/// One column into the C/E/I numbering: L_C⁻¹ on C, the scalings on E and I, then scaled
/// to max-norm 1 (so f16 operands stay in range); returns the scale.
fn gather_column<T: Real + crate::device::Storage>(
    k: &Typed<'_, T>,
    col: &[T],
    (bc, be, bi): (&mut [T], &mut [T], &mut [T]),
    split: bool,
) -> T {
    let nc = k.c.len();
    let zero = T::zero();
    for (kk, out) in bc.iter_mut().enumerate().take(nc) {
        let mut s = zero;
        for (l, &d) in k.c.iter().enumerate().take(kk + 1) {
            s = s + k.l_c_inv[kk + l * nc] * col[d as usize];
        }
        *out = s;
    }
    for (out, dofs, scales) in [(&mut *be, k.e, k.scale_e), (&mut *bi, k.i, k.scale_i)] {
        for_chunks(split, out, |start, chunk| {
            let (dofs, scales) = (&dofs[start..], &scales[start..]);
            for ((o, &d), &scale) in chunk.iter_mut().zip(dofs).zip(scales) {
                *o = if d == PADDING_SLOT {
                    T::zero()
                } else {
                    col[d as usize] * scale
                };
            }
        });
    }
    let max = [
        max_abs(false, &bc[..nc]),
        max_abs(split, be),
        max_abs(split, bi),
    ]
    .into_iter()
    .fold(zero, |m, v| m.max(v));
    let scale = if max > zero { max } else { T::one() };
    let inv = T::one() / scale;
    for part in [&mut bc[..nc], be, bi] {
        for_chunks(split, part, |_, chunk| {
            chunk.iter_mut().for_each(|v| *v = *v * inv)
        });
    }
    scale
}

#[allow(clippy::too_many_arguments)]
fn gather<T: Real + crate::device::Storage>(
    k: &Typed<'_, T>,
    n: usize,
    nodal: &[T],
    bc: &mut [T],
    be: &mut [T],
    bi: &mut [T],
    column_scale: &mut [T],
) {
    let (nc, ne, ni) = (k.c.len(), k.e.len(), k.i.len());
    let split = split_columns(column_scale.len());
    // A task per column; with few columns each also splits its entries (nested tasks).
    nodal
        .par_chunks(n)
        .zip(bc.par_chunks_mut(nc.max(1)))
        .zip(be.par_chunks_mut(ne.max(1)))
        .zip(bi.par_chunks_mut(ni.max(1)))
        .zip(column_scale.par_iter_mut())
        .for_each(|((((col, bc), be), bi), column_scale)| {
            *column_scale = gather_column(k, col, (bc, be, bi), split);
        });
}

/// A column's nodal values written at the class indices by the tasks of one scatter: C,
/// E and I partition the unknowns (checked by [`Classes::upload`]), so every index is
/// written by exactly one task.
struct SharedColumn<T>(*mut T, usize);

// SAFETY: see the type's comment: the tasks write disjoint entries.
unsafe impl<T: Send> Send for SharedColumn<T> {}
unsafe impl<T: Send> Sync for SharedColumn<T> {}

impl<T> SharedColumn<T> {
    /// # Safety
    /// No other task writes or reads entry `d` during the scatter.
    unsafe fn write(&self, d: usize, v: T) {
        assert!(d < self.1);
        // SAFETY: d is inside the column; this task alone touches it (the caller).
        unsafe { *self.0.add(d) = v };
    }
}

/// One column back from the C/E/I numbering: L_C⁻ᵀ on C, the scalings on E and I, times
/// the column's scale.
fn scatter_column<T: Real + crate::device::Storage>(
    k: &Typed<'_, T>,
    (xc, xe, xi): (&[T], &[T], &[T]),
    scale: T,
    col: &mut [T],
    split: bool,
) {
    let nc = k.c.len();
    let shared = SharedColumn(col.as_mut_ptr(), col.len());
    for (l, &d) in k.c.iter().enumerate() {
        let mut s = T::zero();
        for (kk, &v) in xc.iter().enumerate().take(nc).skip(l) {
            s = s + k.l_c_inv[kk + l * nc] * v;
        }
        // SAFETY: C, E and I partition the column's indices; each is written once.
        unsafe { shared.write(d as usize, s * scale) };
    }
    for (x, dofs, scales) in [(xe, k.e, k.scale_e), (xi, k.i, k.scale_i)] {
        let task = |start: usize, x: &[T]| {
            let (dofs, scales) = (&dofs[start..], &scales[start..]);
            for ((&v, &d), &s) in x.iter().zip(dofs).zip(scales) {
                if d != PADDING_SLOT {
                    // SAFETY: as above.
                    unsafe { shared.write(d as usize, v * s * scale) };
                }
            }
        };
        if split {
            x.par_chunks(CLASS_CHUNK)
                .enumerate()
                .for_each(|(c, chunk)| task(c * CLASS_CHUNK, chunk));
        } else {
            task(0, x);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn scatter<T: Real + crate::device::Storage>(
    k: &Typed<'_, T>,
    n: usize,
    xc: &[T],
    xe: &[T],
    xi: &[T],
    column_scale: &[T],
    nodal: &mut [T],
) {
    let (nc, ne, ni) = (k.c.len(), k.e.len(), k.i.len());
    let split = split_columns(column_scale.len());
    nodal
        .par_chunks_mut(n)
        .zip(xc.par_chunks(nc.max(1)))
        .zip(xe.par_chunks(ne.max(1)))
        .zip(xi.par_chunks(ni.max(1)))
        .zip(column_scale.par_iter())
        .for_each(|((((col, xc), xe), xi), &scale)| {
            scatter_column(k, (xc, xe, xi), scale, col, split)
        });
}

impl PscKernels for Cpu {
    fn hierarchical_transform(
        &self,
        t: &HierarchicalTransform<Self>,
        x: &mut Block<Self>,
        transpose: bool,
    ) -> Result<()> {
        check_transform(t, x)?;
        match x.precision() {
            Precision::F64 => transform(
                t,
                buffer_mut::<f64>(&mut x.data, "hierarchical_transform")?,
                transpose,
            ),
            Precision::F32 => transform(
                t,
                buffer_mut::<f32>(&mut x.data, "hierarchical_transform")?,
                transpose,
            ),
            p => Err(unsupported("hierarchical_transform", &[p])),
        }
    }

    fn psc_gather(
        &self,
        classes: &Classes<Self>,
        nodal: &Block<Self>,
        bc: &mut Block<Self>,
        be: &mut Block<Self>,
        bi: &mut Block<Self>,
        column_scale: &mut Data<Self>,
    ) -> Result<()> {
        let p = check_blocks("psc_gather", classes, nodal, [bc, be, bi], column_scale)?;
        let n = nodal.rows();
        macro_rules! run {
            ($t:ty) => {
                gather::<$t>(
                    &typed::<$t>(classes)?,
                    n,
                    buffer::<$t>(&nodal.data, "psc_gather")?,
                    buffer_mut::<$t>(&mut bc.data, "psc_gather")?,
                    buffer_mut::<$t>(&mut be.data, "psc_gather")?,
                    buffer_mut::<$t>(&mut bi.data, "psc_gather")?,
                    buffer_mut::<$t>(column_scale, "psc_gather")?,
                )
            };
        }
        match p {
            Precision::F64 => run!(f64),
            Precision::F32 => run!(f32),
            p => return Err(unsupported("psc_gather", &[p])),
        }
        Ok(())
    }

    fn psc_scatter(
        &self,
        classes: &Classes<Self>,
        xc: &Block<Self>,
        xe: &Block<Self>,
        xi: &Block<Self>,
        column_scale: &Data<Self>,
        nodal: &mut Block<Self>,
    ) -> Result<()> {
        let p = check_blocks("psc_scatter", classes, nodal, [xc, xe, xi], column_scale)?;
        let n = nodal.rows();
        macro_rules! run {
            ($t:ty) => {
                scatter::<$t>(
                    &typed::<$t>(classes)?,
                    n,
                    buffer::<$t>(&xc.data, "psc_scatter")?,
                    buffer::<$t>(&xe.data, "psc_scatter")?,
                    buffer::<$t>(&xi.data, "psc_scatter")?,
                    buffer::<$t>(column_scale, "psc_scatter")?,
                    buffer_mut::<$t>(&mut nodal.data, "psc_scatter")?,
                )
            };
        }
        match p {
            Precision::F64 => run!(f64),
            Precision::F32 => run!(f32),
            p => return Err(unsupported("psc_scatter", &[p])),
        }
        Ok(())
    }
}
