//! ELLPACK storage: every row padded to the same width, stored slot-major (what GPUs
//! coalesce) or row-major (one stream per matrix for CPU kernels).

use super::{Csr, SparseRows};
use crate::error::{Error, Result};
use crate::precision::{convert_checked, Stored};

/// Where entry `s` of row `r` lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EllLayout {
    /// At `s * nrows + r`: consecutive rows' entries are consecutive (GPU coalescing).
    SlotMajor,
    /// At `r * width + s`: a row's entries are consecutive (CPU streaming).
    RowMajor,
}

/// An ELLPACK matrix. Padding entries have value zero and repeat the row's last column,
/// so they read memory already in cache.
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
        let mut ell = Ell {
            nrows,
            ncols: a.ncols(),
            width,
            layout,
            col_idx: vec![0u32; width * nrows],
            values: vec![S::default(); width * nrows],
        };
        for r in 0..nrows {
            let entries = row(r);
            let pad_col = entries.last().map_or(0, |e| e.0);
            for s in 0..width {
                let (c, v) = entries.get(s).copied().unwrap_or((pad_col, S::default()));
                let k = ell.index(s, r);
                ell.col_idx[k] = c;
                ell.values[k] = v;
            }
        }
        ell
    }

    /// Position of entry `s` of row `r` in `values` and `col_idx`.
    #[inline]
    pub fn index(&self, s: usize, r: usize) -> usize {
        match self.layout {
            EllLayout::SlotMajor => s * self.nrows + r,
            EllLayout::RowMajor => r * self.width + s,
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

        assert!(Ell::from_csr_diagonal_first(&a, EllLayout::RowMajor).is_err()); // row 1: no diagonal
        let b = Csr::new(
            2,
            2,
            vec![0, 2, 4],
            vec![0, 1, 0, 1],
            vec![1.0, 2.0, 3.0, 4.0],
        )
        .unwrap();
        for layout in [EllLayout::SlotMajor, EllLayout::RowMajor] {
            let d = Ell::from_csr_diagonal_first(&b, layout).unwrap();
            let mut row1 = vec![];
            d.for_each_in_row(1, |c, v| row1.push((c, v)));
            assert_eq!(row1, vec![(1, 4.0), (0, 3.0)]);
        }
        let row_major = Ell::from_csr_diagonal_first(&b, EllLayout::RowMajor).unwrap();
        assert_eq!(row_major.values(), &[1.0, 2.0, 4.0, 3.0]);
        let no_diagonal = Csr::new(2, 2, vec![0, 1, 2], vec![1, 0], vec![1.0, 1.0]).unwrap();
        assert!(Ell::from_csr_diagonal_first(&no_diagonal, EllLayout::SlotMajor).is_err());
    }
}
