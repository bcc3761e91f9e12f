//! The PSC passes on the CPU: the hierarchical-basis transforms (column by column, level by
//! level on the structured grid) and the C/E/I gather and scatter with the partial-Cholesky
//! scaling (one task per column).

use rayon::prelude::*;

use super::simd::per_simd_level;
use super::{buffer, buffer_mut, Cpu};
use crate::device::psc::{
    CellParents, Classes, GridTransform, HierarchicalTransform, PscKernels, RowUpdate, PADDING_SLOT,
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
#[inline(always)]
fn at<T: Real>(row: Option<&[T]>, i: usize) -> T {
    match row {
        Some(r) if i > 0 && i <= r.len() => r[i - 1],
        _ => T::zero(),
    }
}

/// Runs `task(j)` for the rows j = first, first + step, … < n, in parallel when the pass
/// updates enough nodes (`nodes_per_row` each). The passes call it only when they split
/// their rows; else they loop themselves, so that no closure is left to call and a caller
/// compiled for a SIMD level compiles the rows for it too.
fn for_rows_split(
    (first, step, n): (usize, usize, usize),
    nodes_per_row: usize,
    task: impl Fn(usize) + Sync + Send,
) {
    let count = n.saturating_sub(first).div_ceil(step);
    if count * nodes_per_row >= PARALLEL_NODES {
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

/// The weights of an edge-midpoint and of a cell-midpoint parent in the solve's precision.
#[derive(Clone, Copy)]
struct Weights<T> {
    half: T,
    quarter: T,
}

impl Grid<'_> {
    fn weights<T: Real>(&self) -> Weights<T> {
        Weights {
            half: T::from_f64(EDGE_WEIGHT),
            quarter: T::from_f64(CELL_WEIGHT),
        }
    }

    /// x ← S x for one column; rows split among threads when `split`.
    #[inline(always)]
    fn apply<T: Real>(&self, x: &mut [T], split: bool) {
        let t = self.0;
        let (n, w) = (t.n, self.weights::<T>());
        let rows = GridRows::new(x, n);
        for k in 1..=t.levels {
            let s = 1 << (t.levels - k);
            let s2 = 2 * s;
            // Horizontal edge midpoints: parents in the same row.
            // SAFETY: this pass writes and reads row j only in this task.
            let edges = |j| Self::edge_children(unsafe { rows.row_mut(j) }, s, w);
            // Vertical edge and cell midpoints: parents in rows j ± s (multiples of 2s,
            // which this pass does not write).
            let odd = |j| {
                // SAFETY: rows j ± s are multiples of 2s; this pass writes odd rows only; row
                // j is this task's.
                let (below, above) = unsafe { (rows.row(j - s), rows.row(j + s)) };
                let row = unsafe { rows.row_mut(j) };
                self.vertical_and_cell_children(row, below, above, s, w)
            };
            if split {
                for_rows_split((s2, s2, n), n / s2, edges);
                for_rows_split((s, s2, n), n / s, odd);
            } else {
                for j in (s2..n).step_by(s2) {
                    // SAFETY: as above.
                    Self::edge_children(unsafe { rows.row_mut(j) }, s, w);
                }
                for j in (s..n).step_by(s2) {
                    // SAFETY: as above.
                    let (below, above) = unsafe { (rows.row(j - s), rows.row(j + s)) };
                    let row = unsafe { rows.row_mut(j) };
                    self.vertical_and_cell_children(row, below, above, s, w);
                }
            }
        }
    }

    /// Row j (a multiple of 2s) of S's level s: x_i += ½ (x_{i−s} + x_{i+s}) at the odd
    /// multiples i of s (the ends' outer parents are boundary zeros).
    #[inline(always)]
    fn edge_children<T: Real>(row: &mut [T], s: usize, w: Weights<T>) {
        let n = row.len() + 1;
        let s2 = 2 * s;
        // The row holds nodes 1 … n − 1 at 0 … n − 2: node i at i − 1.
        for i in (s..n).step_by(s2) {
            let left = if i > s { row[i - s - 1] } else { T::zero() };
            let right = if i + s < n { row[i + s - 1] } else { T::zero() };
            row[i - 1] = row[i - 1] + w.half * (left + right);
        }
    }

    /// Row j (an odd multiple of s) of S's level s: vertical edge midpoints (i a multiple of
    /// 2s) from rows j ± s, then cell midpoints (i odd) from the corners or the diagonal.
    /// `below`/`above`: rows j ∓ s, None on the boundary.
    #[inline(always)]
    fn vertical_and_cell_children<T: Real>(
        &self,
        row: &mut [T],
        below: Option<&[T]>,
        above: Option<&[T]>,
        s: usize,
        w: Weights<T>,
    ) {
        let (n, s2) = (row.len() + 1, 2 * s);
        if let (Some(b), Some(a)) = (below, above) {
            // Interior rows (all but two per level): direct indexing, node i at i − 1.
            for i in (s2..n).step_by(s2) {
                row[i - 1] = row[i - 1] + w.half * (b[i - 1] + a[i - 1]);
            }
            let (first, last) = (s, n - s);
            for i in (s..n).step_by(s2) {
                let v = if i > first && i < last {
                    self.cell([b[i - s - 1], b[i + s - 1], a[i - s - 1], a[i + s - 1]], w)
                } else {
                    let get = |r: &[T], i: usize| at(Some(r), i);
                    self.cell(
                        [get(b, i - s), get(b, i + s), get(a, i - s), get(a, i + s)],
                        w,
                    )
                };
                row[i - 1] = row[i - 1] + v;
            }
            return;
        }
        for i in (s2..n).step_by(s2) {
            let v = w.half * (at(below, i) + at(above, i));
            row[i - 1] = row[i - 1] + v;
        }
        for i in (s..n).step_by(s2) {
            let v = self.cell(
                [
                    at(below, i - s),
                    at(below, i + s),
                    at(above, i - s),
                    at(above, i + s),
                ],
                w,
            );
            row[i - 1] = row[i - 1] + v;
        }
    }

    /// A cell midpoint's value from its parents' [below left, below right, above left,
    /// above right]: the four corners (Q1) or the "/" diagonal (P1).
    #[inline(always)]
    fn cell<T: Real>(&self, [bl, br, al, ar]: [T; 4], w: Weights<T>) -> T {
        match self.0.cell_parents {
            CellParents::Diagonal => w.half * (bl + ar),
            CellParents::Corners => w.quarter * (bl + br + al + ar),
        }
    }

    /// y ← Sᵀ y for one column: levels in reverse, each interior parent adds its children's
    /// weighted values, in the order the children's loops would scatter them (horizontal
    /// children in its row, then row j − s's vertical child and cells, then row j + s's).
    #[inline(always)]
    fn apply_transpose<T: Real>(&self, y: &mut [T], split: bool) {
        let t = self.0;
        let (n, w) = (t.n, self.weights::<T>());
        let rows = GridRows::new(y, n);
        for k in (1..=t.levels).rev() {
            let s = 1 << (t.levels - k);
            let s2 = 2 * s;
            // SAFETY: rows j ± s are odd multiples of s, which this pass reads only; row j
            // is this task's. Both lie inside (s ≤ j − s, j + s ≤ n − s).
            let parents = |j: usize| unsafe {
                let (below, above) = (rows.row(j - s), rows.row(j + s));
                let (below, above) = (below.expect("inner row"), above.expect("inner row"));
                self.parents(rows.row_mut(j), below, above, s, w)
            };
            if split {
                for_rows_split((s2, s2, n), n / s2, parents);
            } else {
                for j in (s2..n).step_by(s2) {
                    // SAFETY: as above.
                    unsafe {
                        let (below, above) = (rows.row(j - s), rows.row(j + s));
                        let (below, above) = (below.expect("inner row"), above.expect("inner row"));
                        self.parents(rows.row_mut(j), below, above, s, w)
                    }
                }
            }
        }
    }

    /// Row j (a multiple of 2s) of Sᵀ's level s: each parent i (a multiple of 2s) adds its
    /// children i ± s in its row, then those in row j − s, then in row j + s. Every child
    /// is an interior node (s ≤ i − s, i + s ≤ n − s): indexed directly, node i at i − 1.
    #[inline(always)]
    fn parents<T: Real>(&self, row: &mut [T], below: &[T], above: &[T], s: usize, w: Weights<T>) {
        let (n, s2) = (row.len() + 1, 2 * s);
        let Weights { half, quarter } = w;
        for i in (s2..n).step_by(s2) {
            let (l, c, r) = (i - s - 1, i - 1, i + s - 1);
            let mut v = row[c];
            v = v + half * row[l];
            v = v + half * row[r];
            v = v + half * below[c];
            match self.0.cell_parents {
                CellParents::Diagonal => v = v + half * below[l],
                CellParents::Corners => {
                    v = v + quarter * below[l];
                    v = v + quarter * below[r];
                }
            }
            v = v + half * above[c];
            match self.0.cell_parents {
                CellParents::Diagonal => v = v + half * above[r],
                CellParents::Corners => {
                    v = v + quarter * above[l];
                    v = v + quarter * above[r];
                }
            }
            row[c] = v;
        }
    }
}

/// One level's sparse rows: rows, row pointers, columns, weights.
type Rows<'a, T> = (&'a [u32], &'a [u32], &'a [u32], &'a [T]);

/// S or Sᵀ ready to run on single columns, its stored weights typed.
enum ColumnTransform<'a, T> {
    Grid(Grid<'a>),
    /// The level updates in the order they run.
    Levels(Vec<Rows<'a, T>>),
}

impl<'a, T: Real + crate::device::Storage> ColumnTransform<'a, T> {
    fn new(t: &'a HierarchicalTransform<Cpu>, transpose: bool) -> Result<Self> {
        Ok(match t {
            HierarchicalTransform::Grid(g) => Self::Grid(Grid(g)),
            HierarchicalTransform::Levels(l) => {
                fn typed<T: crate::device::Storage>(u: &RowUpdate<Cpu>) -> Result<Rows<'_, T>> {
                    Ok((
                        &u.rows,
                        &u.row_ptr,
                        &u.cols,
                        buffer::<T>(&u.weights, "hierarchical_transform")?,
                    ))
                }
                Self::Levels(if transpose {
                    l.transpose.iter().rev().map(typed).collect::<Result<_>>()?
                } else {
                    l.forward.iter().map(typed).collect::<Result<_>>()?
                })
            }
        })
    }

    /// column ← S column (or Sᵀ column); a grid's rows split among threads when `split`.
    #[inline(always)]
    fn run(&self, column: &mut [T], transpose: bool, split: bool) {
        match self {
            Self::Grid(grid) if transpose => grid.apply_transpose(column, split),
            Self::Grid(grid) => grid.apply(column, split),
            Self::Levels(updates) => {
                for &(rows, row_ptr, cols, weights) in updates {
                    for (r, &row) in rows.iter().enumerate() {
                        let (start, end) = (row_ptr[r] as usize, row_ptr[r + 1] as usize);
                        let mut v = T::zero();
                        for p in start..end {
                            v = v + weights[p] * column[cols[p] as usize];
                        }
                        column[row as usize] = column[row as usize] + v;
                    }
                }
            }
        }
    }

    /// Every column of `block` (columns of `n` values), one task's: a grid's column by
    /// column; the levels' for up to [`GROUP_COLUMNS`] columns at once, each row's indices
    /// and weights read once for all of them (each column sums in the order it does alone).
    #[inline(always)]
    fn run_group(&self, block: &mut [T], n: usize, transpose: bool) {
        match self {
            Self::Grid(_) => block
                .chunks_mut(n)
                .for_each(|column| self.run(column, transpose, false)),
            Self::Levels(updates) => match block.len() / n {
                4 => levels_group::<T, 4>(updates, block, n),
                3 => levels_group::<T, 3>(updates, block, n),
                2 => levels_group::<T, 2>(updates, block, n),
                _ => block
                    .chunks_mut(n)
                    .for_each(|column| self.run(column, transpose, false)),
            },
        }
    }

    /// Columns one task of the fused passes carries: the levels' [`GROUP_COLUMNS`], a
    /// grid's one (its passes are computed, not read, and a column stays in L2).
    fn group_columns(&self) -> usize {
        match self {
            Self::Grid(_) => 1,
            Self::Levels(_) => GROUP_COLUMNS,
        }
    }

    /// Columns split their rows among threads (a grid's passes) when there are fewer
    /// columns than threads; else a column per task.
    fn split(&self, columns: usize) -> bool {
        matches!(self, Self::Grid(_)) && columns < rayon::current_num_threads()
    }
}

/// Columns one task of the fused transform and gather (or scatter and transform) carries:
/// four f32 columns of the flow around a square at L = 6 (0.9 MB) stay in a core's L2.
const GROUP_COLUMNS: usize = 4;

/// The level updates on the G columns of `block` (each `n` long) side by side.
#[inline(always)]
fn levels_group<T: Real, const G: usize>(updates: &[Rows<'_, T>], block: &mut [T], n: usize) {
    for &(rows, row_ptr, cols, weights) in updates {
        for (r, &row) in rows.iter().enumerate() {
            let (start, end) = (row_ptr[r] as usize, row_ptr[r + 1] as usize);
            let mut v = [T::zero(); G];
            for p in start..end {
                let (w, c) = (weights[p], cols[p] as usize);
                for (g, vg) in v.iter_mut().enumerate() {
                    *vg = *vg + w * block[g * n + c];
                }
            }
            for (g, vg) in v.into_iter().enumerate() {
                let i = g * n + row as usize;
                block[i] = block[i] + vg;
            }
        }
    }
}

/// x ← S x (or Sᵀ x) for every column of a block.
fn transform<T: Real + crate::device::Storage>(
    t: &HierarchicalTransform<Cpu>,
    x: &mut [T],
    transpose: bool,
) -> Result<()> {
    let run = ColumnTransform::new(t, transpose)?;
    transform_columns(&run, t.len().max(1), x, transpose);
    Ok(())
}

/// Every column (of `len` unknowns) of `x` through a prepared transform.
fn transform_columns<T: Real + crate::device::Storage>(
    run: &ColumnTransform<'_, T>,
    len: usize,
    x: &mut [T],
    transpose: bool,
) {
    let split = run.split(x.len() / len);
    x.par_chunks_mut(len)
        .for_each(|column| run.run(column, transpose, split));
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
#[inline(always)]
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
#[inline(always)]
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

/// b_C = L_C⁻¹ b[C] (L_C⁻¹ lower triangular, column-major): a vectorised AXPY per column l
/// of L_C⁻¹, so each entry k sums l = 0, 1, …, k in the order a dot product with row k would.
#[inline(always)]
fn lower_c<T: Real>(l_c_inv: &[T], c: &[u32], col: &[T], bc: &mut [T]) {
    let nc = c.len();
    bc.fill(T::zero());
    for (l, &d) in c.iter().enumerate() {
        let v = col[d as usize];
        for (o, &a) in bc[l..].iter_mut().zip(&l_c_inv[l * nc + l..(l + 1) * nc]) {
            *o = *o + a * v;
        }
    }
}

/// Sums of L_C⁻ᵀ x_C at a time: eight independent dot products hide the latency of the adds.
const UPPER_CHAINS: usize = 8;

/// (L_C⁻ᵀ x_C)_l = Σ_{k ≥ l} L_C⁻¹[k, l] x_C[k] into `out(l, ·)`: eight columns l of L_C⁻¹ at
/// a time, each sum in the order k = l, l + 1, ….
#[inline(always)]
fn upper_c<T: Real>(l_c_inv: &[T], xc: &[T], mut out: impl FnMut(usize, T)) {
    let nc = xc.len();
    let mut first = 0;
    while first + UPPER_CHAINS <= nc {
        let columns: [&[T]; UPPER_CHAINS] =
            std::array::from_fn(|q| &l_c_inv[(first + q) * nc..(first + q + 1) * nc]);
        let mut sums = [T::zero(); UPPER_CHAINS];
        // The triangle: sum q starts at k = first + q.
        for k in first..first + UPPER_CHAINS {
            for q in 0..=k - first {
                sums[q] = sums[q] + columns[q][k] * xc[k];
            }
        }
        for (k, &v) in xc.iter().enumerate().skip(first + UPPER_CHAINS) {
            for q in 0..UPPER_CHAINS {
                sums[q] = sums[q] + columns[q][k] * v;
            }
        }
        for (q, &s) in sums.iter().enumerate() {
            out(first + q, s);
        }
        first += UPPER_CHAINS;
    }
    for l in first..nc {
        let mut s = T::zero();
        for (k, &v) in xc.iter().enumerate().skip(l) {
            s = s + l_c_inv[k + l * nc] * v;
        }
        out(l, s);
    }
}

/// One column into the C/E/I numbering: L_C⁻¹ on C, the scalings on E and I, then scaled
/// to max-norm 1 (so f16 operands stay in range); returns the scale.
#[inline(always)]
fn gather_column<T: Real + crate::device::Storage>(
    k: &Typed<'_, T>,
    col: &[T],
    (bc, be, bi): (&mut [T], &mut [T], &mut [T]),
    split: bool,
) -> T {
    let nc = k.c.len();
    let zero = T::zero();
    lower_c(k.l_c_inv, k.c, col, &mut bc[..nc]);
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
#[inline(always)]
fn scatter_column<T: Real + crate::device::Storage>(
    k: &Typed<'_, T>,
    (xc, xe, xi): (&[T], &[T], &[T]),
    scale: T,
    col: &mut [T],
    split: bool,
) {
    let nc = k.c.len();
    let shared = SharedColumn(col.as_mut_ptr(), col.len());
    upper_c(k.l_c_inv, &xc[..nc], |l, s| {
        // SAFETY: C, E and I partition the column's indices; each is written once.
        unsafe { shared.write(k.c[l] as usize, s * scale) }
    });
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

/// The compute precisions of the PSC passes (f32 and f64).
trait PscValue: Real + crate::device::Storage {}
impl<T: Real + crate::device::Storage> PscValue for T {}

/// A group of columns' way in: the transform, b, the task's scratch columns, the C/E/I
/// parts and the columns' scales.
type ColumnIn<'a, T> = (
    &'a ColumnTransform<'a, T>,
    &'a Typed<'a, T>,
    &'a [T],
    &'a mut [T],
    (&'a mut [T], &'a mut [T], &'a mut [T]),
    &'a mut [T],
);

per_simd_level! {
    /// b copied into the scratch columns, Sᵀ there, then each gathered (compiled per SIMD
    /// level: the L_C⁻¹ AXPYs and the scaling passes vectorise).
    fn column_in<T: PscValue>(ColumnIn<'_, T>) => column_in_portable
}

#[inline(always)]
fn column_in_portable<T: PscValue, const LEVEL: u8>(
    (run, k, b, block, (bc, be, bi), scales): ColumnIn<'_, T>,
) {
    let n = b.len() / scales.len();
    let (nc, ne, ni) = (k.c.len(), k.e.len(), k.i.len());
    block.copy_from_slice(b);
    run.run_group(block, n, true);
    for (j, scale) in scales.iter_mut().enumerate() {
        let parts = (
            &mut bc[j * nc..(j + 1) * nc],
            &mut be[j * ne..(j + 1) * ne],
            &mut bi[j * ni..(j + 1) * ni],
        );
        *scale = gather_column(k, &block[j * n..(j + 1) * n], parts, false);
    }
}

/// A group of columns' way out: the transform, the C/E/I parts, the columns' scales, the
/// task's scratch columns and the columns of the result.
type ColumnOut<'a, T> = (
    &'a ColumnTransform<'a, T>,
    &'a Typed<'a, T>,
    (&'a [T], &'a [T], &'a [T]),
    &'a [T],
    &'a mut [T],
    &'a mut [T],
);

per_simd_level! {
    /// Scattered into the scratch columns, S there, then copied out (compiled per SIMD level).
    fn column_out<T: PscValue>(ColumnOut<'_, T>) => column_out_portable
}

#[inline(always)]
fn column_out_portable<T: PscValue, const LEVEL: u8>(
    (run, k, (xc, xe, xi), scales, block, out): ColumnOut<'_, T>,
) {
    let n = out.len() / scales.len();
    let (nc, ne, ni) = (k.c.len(), k.e.len(), k.i.len());
    for (j, &scale) in scales.iter().enumerate() {
        let parts = (
            &xc[j * nc..(j + 1) * nc],
            &xe[j * ne..(j + 1) * ne],
            &xi[j * ni..(j + 1) * ni],
        );
        scatter_column(k, parts, scale, &mut block[j * n..(j + 1) * n], false);
    }
    run.run_group(block, n, false);
    out.copy_from_slice(block);
}

/// Sᵀ b, then the gather, a group of columns per task ([`ColumnTransform::group_columns`]):
/// they are copied into the task's arena, transformed there and gathered while they sit in
/// the cache (`nodal` is not written). With fewer columns than threads, the passes one
/// after the other, each split among threads.
#[allow(clippy::too_many_arguments)]
fn transform_gather<T: Real + crate::device::Storage>(
    t: &HierarchicalTransform<Cpu>,
    k: &Typed<'_, T>,
    b: &[T],
    nodal: &mut [T],
    bc: &mut [T],
    be: &mut [T],
    bi: &mut [T],
    column_scale: &mut [T],
) -> Result<()> {
    let n = t.len().max(1);
    let run = ColumnTransform::new(t, true)?;
    if run.split(column_scale.len()) {
        nodal.copy_from_slice(b);
        transform_columns(&run, n, nodal, true);
        gather(k, n, nodal, bc, be, bi, column_scale);
        return Ok(());
    }
    let (nc, ne, ni) = (k.c.len(), k.e.len(), k.i.len());
    let g = run.group_columns();
    b.par_chunks(g * n)
        .zip(bc.par_chunks_mut(g * nc.max(1)))
        .zip(be.par_chunks_mut(g * ne.max(1)))
        .zip(bi.par_chunks_mut(g * ni.max(1)))
        .zip(column_scale.par_chunks_mut(g))
        .for_each(|((((b, bc), be), bi), scales)| {
            super::arena::with(|a| {
                let block = a.one::<T>(0, b.len());
                column_in::<T>((&run, k, b, block, (bc, be, bi), scales));
            })
        });
    super::arena::sync();
    Ok(())
}

/// The scatter, then S, a group of columns per task ([`ColumnTransform::group_columns`]):
/// scattered into the task's arena and transformed there while they sit in the cache, then
/// written to `nodal` in one stream (scattered writes straight into `nodal` each load a
/// line from memory). With fewer columns than threads, one after the other, each split
/// among threads.
#[allow(clippy::too_many_arguments)]
fn scatter_transform<T: Real + crate::device::Storage>(
    t: &HierarchicalTransform<Cpu>,
    k: &Typed<'_, T>,
    xc: &[T],
    xe: &[T],
    xi: &[T],
    column_scale: &[T],
    nodal: &mut [T],
) -> Result<()> {
    let n = t.len().max(1);
    let run = ColumnTransform::new(t, false)?;
    if run.split(column_scale.len()) {
        scatter(k, n, xc, xe, xi, column_scale, nodal);
        transform_columns(&run, n, nodal, false);
        return Ok(());
    }
    let (nc, ne, ni) = (k.c.len(), k.e.len(), k.i.len());
    let g = run.group_columns();
    nodal
        .par_chunks_mut(g * n)
        .zip(xc.par_chunks(g * nc.max(1)))
        .zip(xe.par_chunks(g * ne.max(1)))
        .zip(xi.par_chunks(g * ni.max(1)))
        .zip(column_scale.par_chunks(g))
        .for_each(|((((out, xc), xe), xi), scales)| {
            super::arena::with(|a| {
                let block = a.one::<T>(0, out.len());
                column_out::<T>((&run, k, (xc, xe, xi), scales, block, out));
            })
        });
    super::arena::sync();
    Ok(())
}

/// `$body` with `$t` the element type of a PSC pass's compute precision (f64 or f32); other
/// precisions are refused, naming `$op`.
macro_rules! by_pass_precision {
    ($p:expr, $op:expr, $t:ident => $body:expr) => {
        match $p {
            Precision::F64 => {
                type $t = f64;
                $body
            }
            Precision::F32 => {
                type $t = f32;
                $body
            }
            p => Err(unsupported($op, &[p])),
        }
    };
}

impl PscKernels for Cpu {
    fn hierarchical_transform_unchecked(
        &self,
        t: &HierarchicalTransform<Self>,
        x: &mut Block<Self>,
        transpose: bool,
    ) -> Result<()> {
        let op = "hierarchical_transform";
        by_pass_precision!(x.precision(), op, T => {
            transform(t, buffer_mut::<T>(&mut x.data, op)?, transpose)
        })
    }

    fn psc_gather_unchecked(
        &self,
        classes: &Classes<Self>,
        nodal: &Block<Self>,
        bc: &mut Block<Self>,
        be: &mut Block<Self>,
        bi: &mut Block<Self>,
        column_scale: &mut Data<Self>,
    ) -> Result<()> {
        let op = "psc_gather";
        let p = nodal.precision();
        by_pass_precision!(p, op, T => {
            gather::<T>(
                &typed::<T>(classes)?,
                nodal.rows(),
                buffer::<T>(&nodal.data, op)?,
                buffer_mut::<T>(&mut bc.data, op)?,
                buffer_mut::<T>(&mut be.data, op)?,
                buffer_mut::<T>(&mut bi.data, op)?,
                buffer_mut::<T>(column_scale, op)?,
            );
            Ok(())
        })
    }

    fn psc_scatter_unchecked(
        &self,
        classes: &Classes<Self>,
        xc: &Block<Self>,
        xe: &Block<Self>,
        xi: &Block<Self>,
        column_scale: &Data<Self>,
        nodal: &mut Block<Self>,
    ) -> Result<()> {
        let op = "psc_scatter";
        let p = nodal.precision();
        by_pass_precision!(p, op, T => {
            scatter::<T>(
                &typed::<T>(classes)?,
                nodal.rows(),
                buffer::<T>(&xc.data, op)?,
                buffer::<T>(&xe.data, op)?,
                buffer::<T>(&xi.data, op)?,
                buffer::<T>(column_scale, op)?,
                buffer_mut::<T>(&mut nodal.data, op)?,
            );
            Ok(())
        })
    }

    fn psc_transform_gather_unchecked(
        &self,
        t: &HierarchicalTransform<Self>,
        classes: &Classes<Self>,
        b: &Block<Self>,
        work: &mut Block<Self>,
        bc: &mut Block<Self>,
        be: &mut Block<Self>,
        bi: &mut Block<Self>,
        column_scale: &mut Data<Self>,
    ) -> Result<()> {
        let op = "psc_transform_gather";
        let p = work.precision();
        by_pass_precision!(p, op, T => {
            transform_gather::<T>(
                t,
                &typed::<T>(classes)?,
                buffer::<T>(&b.data, op)?,
                buffer_mut::<T>(&mut work.data, op)?,
                buffer_mut::<T>(&mut bc.data, op)?,
                buffer_mut::<T>(&mut be.data, op)?,
                buffer_mut::<T>(&mut bi.data, op)?,
                buffer_mut::<T>(column_scale, op)?,
            )
        })
    }

    fn psc_scatter_transform_unchecked(
        &self,
        classes: &Classes<Self>,
        t: &HierarchicalTransform<Self>,
        xc: &Block<Self>,
        xe: &Block<Self>,
        xi: &Block<Self>,
        column_scale: &Data<Self>,
        nodal: &mut Block<Self>,
    ) -> Result<()> {
        let op = "psc_scatter_transform";
        let p = nodal.precision();
        by_pass_precision!(p, op, T => {
            scatter_transform::<T>(
                t,
                &typed::<T>(classes)?,
                buffer::<T>(&xc.data, op)?,
                buffer::<T>(&xe.data, op)?,
                buffer::<T>(&xi.data, op)?,
                buffer::<T>(column_scale, op)?,
                buffer_mut::<T>(&mut nodal.data, op)?,
            )
        })
    }
}
