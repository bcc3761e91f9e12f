//! ELLPACK storage: every row padded to the same width, stored slot-major.

use super::{Csr, SparseRows};
use crate::error::{Error, Result};
use crate::precision::{convert_checked, Stored};

/// An ELLPACK matrix: entry `s` of row `r` is at `s * nrows + r`. Padding entries have
/// value zero and repeat the row's last column, so they read memory already in cache.
#[derive(Clone, Debug, PartialEq)]
pub struct Ell<S> {
    nrows: usize,
    ncols: usize,
    width: usize,
    col_idx: Vec<u32>,
    values: Vec<S>,
}

impl<S: Stored> Ell<S> {
    pub fn from_csr(a: &Csr<S>) -> Self {
        let nrows = a.nrows();
        let width = (0..nrows).map(|r| a.row(r).0.len()).max().unwrap_or(0);
        let mut col_idx = vec![0u32; width * nrows];
        let mut values = vec![S::default(); width * nrows];
        for r in 0..nrows {
            let (cols, vals) = a.row(r);
            let pad_col = cols.last().copied().unwrap_or(0);
            for s in 0..width {
                col_idx[s * nrows + r] = cols.get(s).copied().unwrap_or(pad_col);
                values[s * nrows + r] = vals.get(s).copied().unwrap_or_default();
            }
        }
        Ell {
            nrows,
            ncols: a.ncols(),
            width,
            col_idx,
            values,
        }
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
            let k = s * self.nrows + r;
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
    }
}
