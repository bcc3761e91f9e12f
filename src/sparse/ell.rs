//! ELLPACK storage: every row padded to the same width, stored slot-major (what GPUs
//! coalesce) or in slices of [`SLICE`] rows, slot-major inside a slice (SELL-16: one stream
//! per matrix for CPU kernels, whose vector lanes are a slice's rows or a row's columns).

use super::{Csr, SparseRows};
use crate::error::{Error, Result};
use crate::precision::{convert_checked, Stored};

/// Where entry `s` of row `r` lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EllLayout {
    /// At `s * nrows + r`: consecutive rows' entries are consecutive (GPU coalescing).
    SlotMajor,
    /// At `(r / SLICE) * SLICE * width + s * SLICE + r % SLICE`: a slice's entries are one
    /// consecutive run, and in it one slot's entries for its [`SLICE`] rows (CPU streaming,
    /// vector loads across rows). The last slice is padded with rows of zeros whose columns
    /// repeat the last row's diagonal.
    Sliced,
}

/// Rows of a slice in [`EllLayout::Sliced`]: one AVX-512 register of f32.
pub const SLICE: usize = 16;

/// An ELLPACK matrix. Padding entries have value zero. Slot-major rows keep their entries
/// in CSR order and repeat the row's last column (memory already in cache); sliced rows
/// keep each entry in the slot of its offset c − r where a slice's offsets fit
/// (`aligned_by_offset`), so padding there reads x at r + offset.
#[derive(Clone, Debug, PartialEq)]
pub struct Ell<S> {
    nrows: usize,
    ncols: usize,
    width: usize,
    layout: EllLayout,
    col_idx: Vec<u32>,
    values: Vec<S>,
}

impl<S: Stored> Ell<S> {
    /// The rows of `a` in their CSR order, slot-major.
    pub fn from_csr(a: &Csr<S>) -> Self {
        Self::from_rows(a, EllLayout::SlotMajor, |r| {
            a.row(r)
                .0
                .iter()
                .copied()
                .zip(a.row(r).1.iter().copied())
                .collect()
        })
    }

    /// Every row's diagonal entry in slot 0 (then the others in CSR order), so smoothers
    /// read D from the matrix stream itself. Fails when a row has no diagonal entry.
    pub fn from_csr_diagonal_first(a: &Csr<S>, layout: EllLayout) -> Result<Self> {
        if let Some(r) = (0..a.nrows()).find(|&r| !a.row(r).0.contains(&(r as u32))) {
            return Err(Error::InvalidInput(format!(
                "ELLPACK with the diagonal first: row {r} has no diagonal entry"
            )));
        }
        Ok(Self::from_rows(a, layout, |r| {
            let (cols, vals) = a.row(r);
            let entries = cols.iter().copied().zip(vals.iter().copied());
            let diagonal = entries.clone().filter(|&(c, _)| c as usize == r);
            diagonal
                .chain(entries.filter(|&(c, _)| c as usize != r))
                .collect()
        }))
    }

    fn from_rows(a: &Csr<S>, layout: EllLayout, row: impl Fn(usize) -> Vec<(u32, S)>) -> Self {
        let nrows = a.nrows();
        let width = (0..nrows).map(|r| a.row(r).0.len()).max().unwrap_or(0);
        let stored_rows = match layout {
            EllLayout::SlotMajor => nrows,
            EllLayout::Sliced => nrows.next_multiple_of(SLICE),
        };
        // Padding rows of a last slice read x at the last row's diagonal column.
        let pad_row_col = nrows.saturating_sub(1) as u32;
        let mut ell = Ell {
            nrows,
            ncols: a.ncols(),
            width,
            layout,
            col_idx: vec![pad_row_col; width * stored_rows],
            values: vec![S::default(); width * stored_rows],
        };
        let mut put = |r: usize, slots: Vec<(u32, S)>| {
            for (s, (c, v)) in slots.into_iter().enumerate() {
                let k = ell.index(s, r);
                ell.col_idx[k] = c;
                ell.values[k] = v;
            }
        };
        match layout {
            EllLayout::SlotMajor => (0..nrows).for_each(|r| put(r, padded(row(r), width))),
            EllLayout::Sliced => {
                for first in (0..nrows).step_by(SLICE) {
                    let rows: Vec<_> = (first..(first + SLICE).min(nrows)).map(&row).collect();
                    match aligned_by_offset(first, &rows, width, a.ncols()) {
                        Some(slots) => slots
                            .into_iter()
                            .enumerate()
                            .for_each(|(i, s)| put(first + i, s)),
                        None => rows
                            .into_iter()
                            .enumerate()
                            .for_each(|(i, e)| put(first + i, padded(e, width))),
                    }
                }
            }
        }
        ell
    }

    /// Position of entry `s` of row `r` in `values` and `col_idx`.
    #[inline]
    pub fn index(&self, s: usize, r: usize) -> usize {
        match self.layout {
            EllLayout::SlotMajor => s * self.nrows + r,
            EllLayout::Sliced => (r / SLICE) * SLICE * self.width + s * SLICE + r % SLICE,
        }
    }

    pub fn layout(&self) -> EllLayout {
        self.layout
    }

    /// Entries per row, padding included.
    pub fn width(&self) -> usize {
        self.width
    }

    pub fn col_idx(&self) -> &[u32] {
        &self.col_idx
    }

    pub fn values(&self) -> &[S] {
        &self.values
    }

    /// The values, to change in place (the structure stays).
    pub fn values_mut(&mut self) -> &mut [S] {
        &mut self.values
    }

    /// Converts the values to storage precision `T`, refusing overflow, flush to zero of a
    /// nonzero, and non-finite values (padding zeros stay zero).
    pub fn convert<T: Stored>(&self) -> Result<Ell<T>> {
        let values = self
            .values
            .iter()
            .enumerate()
            .map(|(k, v)| {
                convert_checked::<T>(v.to_f64()).map_err(|problem| Error::PrecisionRange {
                    what: format!("ELLPACK matrix {}×{}", self.nrows, self.ncols),
                    precision: T::PRECISION,
                    index: k,
                    problem,
                })
            })
            .collect::<Result<Vec<T>>>()?;
        Ok(Ell {
            nrows: self.nrows,
            ncols: self.ncols,
            width: self.width,
            layout: self.layout,
            col_idx: self.col_idx.clone(),
            values,
        })
    }
}

/// A row's entries in their order, padded to `width` with zeros at the last entry's column
/// (memory the row reads anyway).
fn padded<S: Stored>(mut entries: Vec<(u32, S)>, width: usize) -> Vec<(u32, S)> {
    let pad_col = last_column(&entries);
    entries.resize(width, (pad_col, S::default()));
    entries
}

fn last_column<S>(entries: &[(u32, S)]) -> u32 {
    entries.last().map_or(0, |e| e.0)
}

/// The rows `first, first + 1, …` of one slice (entries diagonal first) with each
/// off-diagonal entry in the slot of its offset c − r, the slice's offsets in ascending
/// order after the diagonal: a row without an entry at an offset holds a zero at column
/// r + offset there. On a grid numbered along its lines a row at a line's end then keeps
/// its neighbours' slots, so every slot of the slice is one run of consecutive columns
/// ([`SlicedColumns`]) instead of a list of 16 to gather. A zero slot reads x at a column
/// outside the row: 0 · x is ±0 for finite x, and a non-finite x makes a solve fail
/// whichever row it reaches first. `None` (the rows keep their CSR order) when the
/// slice's offsets do not fit in `width` slots.
fn aligned_by_offset<S: Stored>(
    first: usize,
    rows: &[Vec<(u32, S)>],
    width: usize,
    ncols: usize,
) -> Option<Vec<Vec<(u32, S)>>> {
    let offset = |r: usize, c: u32| c as i64 - r as i64;
    let mut offsets: Vec<i64> = rows
        .iter()
        .enumerate()
        .flat_map(|(i, e)| e[1..].iter().map(move |&(c, _)| offset(first + i, c)))
        .collect();
    offsets.sort_unstable();
    offsets.dedup();
    if offsets.len() + 1 > width {
        return None;
    }
    let mut aligned = Vec::with_capacity(rows.len());
    for (i, entries) in rows.iter().enumerate() {
        let r = first + i;
        // r + offset outside the matrix: the padding of [`padded`] (that slot alone is listed).
        let pad_col = last_column(entries);
        let column = |o: i64| {
            u32::try_from(r as i64 + o)
                .ok()
                .filter(|&c| (c as usize) < ncols)
                .unwrap_or(pad_col)
        };
        let mut slots = vec![entries[0]];
        let mut rest = entries[1..].iter().peekable();
        for &o in &offsets {
            match rest.peek() {
                Some(&&(c, v)) if offset(r, c) == o => {
                    slots.push((c, v));
                    rest.next();
                }
                _ => slots.push((column(o), S::default())),
            }
        }
        // CSR columns ascend, so every entry found its offset's slot.
        debug_assert!(rest.next().is_none(), "row {r}: columns out of order");
        // Slots past the slice's offsets: zeros at the diagonal's column, one run too.
        slots.resize(width, (r as u32, S::default()));
        aligned.push(slots);
    }
    Some(aligned)
}

/// Marks an entry of [`SlicedColumns::runs`] whose slot's columns are listed.
pub const LISTED: u32 = 1 << 31;

/// The column indices of an [`EllLayout::Sliced`] matrix by slot of a slice. On a structured
/// mesh almost every slot's [`SLICE`] columns are consecutive (a stencil's slot along a grid
/// line), so one index stands for them: 4 bytes per slot and slice instead of 64.
#[derive(Clone, Debug, PartialEq)]
pub struct SlicedColumns {
    /// Per slice and slot (`slice · width + s`): the first column c of the run c, c + 1, …,
    /// c + 15, or [`LISTED`] | k when the slot's columns are `listed[16 k..16 k + 16]`.
    pub runs: Vec<u32>,
    /// The columns of the slots that are not one run, [`SLICE`] per slot.
    pub listed: Vec<u32>,
}

impl<S> Ell<S> {
    /// The column indices as [`SlicedColumns`]; fails unless the layout is
    /// [`EllLayout::Sliced`] and every column is below [`LISTED`].
    pub fn sliced_columns(&self) -> Result<SlicedColumns> {
        if self.layout != EllLayout::Sliced || self.ncols > LISTED as usize {
            return Err(Error::InvalidInput(format!(
                "slot runs of an ELLPACK matrix need the sliced layout and at most 2^31 \
                 columns ({:?} layout, {} columns)",
                self.layout, self.ncols
            )));
        }
        let (mut runs, mut listed) = (Vec::new(), Vec::new());
        for slot in self.col_idx.chunks_exact(SLICE) {
            let first = slot[0];
            if slot.iter().zip(first..).all(|(&c, run)| c == run) {
                runs.push(first);
            } else {
                runs.push(LISTED | (listed.len() / SLICE) as u32);
                listed.extend_from_slice(slot);
            }
        }
        Ok(SlicedColumns { runs, listed })
    }
}

impl<S: Stored> SparseRows<S> for Ell<S> {
    fn nrows(&self) -> usize {
        self.nrows
    }

    fn ncols(&self) -> usize {
        self.ncols
    }

    #[inline]
    fn for_each_in_row(&self, r: usize, mut f: impl FnMut(usize, S)) {
        for s in 0..self.width {
            let k = self.index(s, r);
            f(self.col_idx[k] as usize, self.values[k]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn from_csr_pads_rows() {
        let a = Csr::new(
            3,
            3,
            vec![0, 1, 3, 4],
            vec![0, 0, 2, 2],
            vec![1.0, 2.0, 3.0, 4.0],
        )
        .unwrap();
        let e = Ell::from_csr(&a);
        assert_eq!(e.width(), 2);
        let mut row1 = vec![];
        e.for_each_in_row(1, |c, v| row1.push((c, v)));
        assert_eq!(row1, vec![(0, 2.0), (2, 3.0)]);
        let mut row0 = vec![];
        e.for_each_in_row(0, |c, v| row0.push((c, v)));
        assert_eq!(row0, vec![(0, 1.0), (0, 0.0)]);
        let h = e.convert::<f16>().unwrap();
        assert_eq!(h.convert::<f64>().unwrap(), e);

        assert!(Ell::from_csr_diagonal_first(&a, EllLayout::Sliced).is_err()); // row 1: no diagonal
        let b = Csr::new(
            2,
            2,
            vec![0, 2, 4],
            vec![0, 1, 0, 1],
            vec![1.0, 2.0, 3.0, 4.0],
        )
        .unwrap();
        for layout in [EllLayout::SlotMajor, EllLayout::Sliced] {
            let d = Ell::from_csr_diagonal_first(&b, layout).unwrap();
            let mut row1 = vec![];
            d.for_each_in_row(1, |c, v| row1.push((c, v)));
            assert_eq!(row1, vec![(1, 4.0), (0, 3.0)]);
        }
        // Two rows in one slice of 16: slot 0 of rows 0, 1, then 14 padding rows; slot 1.
        let sliced = Ell::from_csr_diagonal_first(&b, EllLayout::Sliced).unwrap();
        assert_eq!(sliced.values().len(), 2 * SLICE);
        assert_eq!(&sliced.values()[..2], &[1.0, 4.0]);
        assert_eq!(&sliced.values()[SLICE..SLICE + 2], &[2.0, 3.0]);
        assert!(sliced.values()[2..SLICE].iter().all(|&v| v == 0.0));
        assert_eq!(&sliced.col_idx()[..3], &[0, 1, 1]);
        let no_diagonal = Csr::new(2, 2, vec![0, 1, 2], vec![1, 0], vec![1.0, 1.0]).unwrap();
        assert!(Ell::from_csr_diagonal_first(&no_diagonal, EllLayout::SlotMajor).is_err());
    }

    /// Rows over several slices, the last one partial: every layout holds the same rows.
    #[test]
    fn layouts_hold_the_same_rows() {
        let n = 2 * SLICE + 5;
        let (mut row_ptr, mut cols, mut vals) = (vec![0], vec![], vec![]);
        for r in 0..n {
            for c in r.saturating_sub(1)..(r + 2).min(n) {
                cols.push(c as u32);
                vals.push((r * n + c) as f64);
            }
            row_ptr.push(cols.len());
        }
        let a = Csr::new(n, n, row_ptr, cols, vals).unwrap();
        let slot_major = Ell::from_csr_diagonal_first(&a, EllLayout::SlotMajor).unwrap();
        let sliced = Ell::from_csr_diagonal_first(&a, EllLayout::Sliced).unwrap();
        assert_eq!(entries(&slot_major), entries(&sliced));
        let rows = all_slots;
        assert_eq!(sliced.values().len(), 3 * SLICE * 3);
        // Entry (r, s) of the sliced layout, and the padding rows of the last slice.
        let (r, s) = (SLICE + 3, 1);
        assert_eq!(
            sliced.values()[SLICE * 3 + s * SLICE + 3],
            rows(&slot_major)[r][s].1
        );
        let last = 2 * SLICE * 3;
        for s in 0..3 {
            let pad = last + s * SLICE + 5..last + (s + 1) * SLICE;
            assert!(sliced.values()[pad.clone()].iter().all(|&v| v == 0.0));
            assert!(sliced.col_idx()[pad].iter().all(|&c| c as usize == n - 1));
        }
        // Slot runs: in slice 0 slot 1 (r − 1; row 0 has none and holds a zero at column
        // 1) is listed, slot 2 (r + 1) a run from 1; every slot of slice 1 is a run; the
        // padded last slice is listed in every slot.
        assert_eq!(all_slots(&sliced)[0], vec![(0, 0.0), (1, 0.0), (1, 1.0)]);
        assert!(slot_major.sliced_columns().is_err());
        let columns = sliced.sliced_columns().unwrap();
        let listed = |k: u32| LISTED | k;
        assert_eq!(
            columns.runs,
            vec![0, listed(0), 1, 16, 15, 17, listed(1), listed(2), listed(3)]
        );
        assert_eq!(columns.listed.len(), 4 * SLICE);
        for (slot, k) in [(1, 0), (6, 1), (7, 2), (8, 3)] {
            assert_eq!(
                &columns.listed[k * SLICE..(k + 1) * SLICE],
                &sliced.col_idx()[slot * SLICE..(slot + 1) * SLICE]
            );
        }
    }

    /// Every row's slots, padding included.
    fn all_slots(e: &Ell<f64>) -> Vec<Vec<(usize, f64)>> {
        (0..e.nrows())
            .map(|r| {
                let mut row = vec![];
                e.for_each_in_row(r, |c, v| row.push((c, v)));
                row
            })
            .collect()
    }

    /// Every row's entries: slot 0 (the diagonal) and the nonzero others, by column.
    fn entries(e: &Ell<f64>) -> Vec<Vec<(usize, f64)>> {
        let mut rows = all_slots(e);
        for row in &mut rows {
            let mut rest: Vec<_> = row.drain(1..).filter(|&(_, v)| v != 0.0).collect();
            rest.sort_by_key(|&(c, _)| c);
            row.extend(rest);
        }
        rows
    }

    /// The 5-point Laplacian of an m × m grid numbered along its lines, entries in
    /// ascending column order.
    fn grid_laplacian(m: usize) -> Csr<f64> {
        let (mut row_ptr, mut cols, mut vals) = (vec![0], vec![], vec![]);
        for r in 0..m * m {
            let (i, j) = (r % m, r / m);
            let neighbours = [
                (j > 0).then(|| r - m),
                (i > 0).then(|| r - 1),
                Some(r),
                (i + 1 < m).then(|| r + 1),
                (j + 1 < m).then(|| r + m),
            ];
            for c in neighbours.into_iter().flatten() {
                cols.push(c as u32);
                vals.push(if c == r {
                    4.0
                } else {
                    -1.0 - (r + c) as f64 / 1e3
                });
            }
            row_ptr.push(cols.len());
        }
        Csr::new(m * m, m * m, row_ptr, cols, vals).unwrap()
    }

    /// In the sliced layout a grid's rows keep each neighbour in the slot of its offset, so
    /// slices that cross the ends of grid lines are runs in every slot too (in CSR order
    /// those rows' entries would shift slots and be gathered); the rows hold the same
    /// entries as in the slot-major layout.
    #[test]
    fn sliced_rows_align_their_offsets() {
        let m = 12;
        let a = grid_laplacian(m);
        let sliced = Ell::from_csr_diagonal_first(&a, EllLayout::Sliced).unwrap();
        let slot_major = Ell::from_csr_diagonal_first(&a, EllLayout::SlotMajor).unwrap();
        assert_eq!(entries(&sliced), entries(&slot_major));
        let width = sliced.width();
        assert_eq!(width, 5);
        let runs = sliced.sliced_columns().unwrap().runs;
        // Rows 16..128: every neighbour r ± 1, r ± 12 lies inside the matrix.
        for slice in 1..8 {
            let first = slice * SLICE;
            let expected: Vec<u32> = [0, -12, -1, 1, 12]
                .iter()
                .map(|o| (first as i64 + o) as u32)
                .collect();
            assert_eq!(
                runs[slice * width..(slice + 1) * width],
                expected,
                "slice {slice}"
            );
        }
        // Row 23 ends a grid line: a zero at column 24 where r + 1 would be.
        let row: Vec<_> = all_slots(&sliced)[23].clone();
        assert_eq!(row[3], (24, 0.0));
        // Slice 0: row r < 12 has no r − 12 (a zero at its last column, the slot listed).
        assert!(runs[1] & LISTED != 0);
        assert_eq!(runs[3], 1);
        // More offsets in a slice than slots: the rows keep their CSR order.
        let b = Csr::new(
            4,
            4,
            vec![0, 2, 4, 5, 6],
            vec![0, 1, 1, 3, 2, 3],
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        )
        .unwrap();
        let mixed = Ell::from_csr_diagonal_first(&b, EllLayout::Sliced).unwrap();
        assert_eq!(mixed.width(), 2);
        assert_eq!(all_slots(&mixed)[1], vec![(1, 3.0), (3, 4.0)]);
    }
}
