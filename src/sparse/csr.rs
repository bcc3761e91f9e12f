//! Compressed sparse row storage.

use super::{RowSlices, SparseRows};
use crate::error::{Error, Result};
use crate::precision::{convert_checked, Stored};

/// A CSR matrix with `u32` column indices and values stored as `S`.
#[derive(Clone, Debug, PartialEq)]
pub struct Csr<S> {
    nrows: usize,
    ncols: usize,
    row_ptr: Vec<usize>,
    col_idx: Vec<u32>,
    values: Vec<S>,
}

impl<S: Stored> Csr<S> {
    /// Builds a CSR matrix, checking the structure: `row_ptr` non-decreasing from 0 to
    /// nnz, columns in range and strictly increasing within each row.
    pub fn new(
        nrows: usize,
        ncols: usize,
        row_ptr: Vec<usize>,
        col_idx: Vec<u32>,
        values: Vec<S>,
    ) -> Result<Self> {
        let bad = |msg: String| Err(Error::InvalidInput(format!("CSR matrix: {msg}")));
        if row_ptr.len() != nrows + 1 {
            return bad(format!(
                "row_ptr has {} entries, expected {}",
                row_ptr.len(),
                nrows + 1
            ));
        }
        if row_ptr[0] != 0 || row_ptr[nrows] != col_idx.len() || col_idx.len() != values.len() {
            return bad(format!(
                "row_ptr runs from {} to {}, with {} column indices and {} values",
                row_ptr[0],
                row_ptr[nrows],
                col_idx.len(),
                values.len()
            ));
        }
        if ncols > u32::MAX as usize {
            return bad(format!("{ncols} columns do not fit u32 column indices"));
        }
        for r in 0..nrows {
            if row_ptr[r] > row_ptr[r + 1] {
                return bad(format!("row_ptr decreases at row {r}"));
            }
            let cols = &col_idx[row_ptr[r]..row_ptr[r + 1]];
            if cols.windows(2).any(|w| w[0] >= w[1]) {
                return bad(format!("columns of row {r} are not strictly increasing"));
            }
            if cols.last().is_some_and(|&c| c as usize >= ncols) {
                return bad(format!(
                    "row {r} has a column index out of range (ncols = {ncols})"
                ));
            }
        }
        Ok(Csr {
            nrows,
            ncols,
            row_ptr,
            col_idx,
            values,
        })
    }

    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    pub fn row_ptr(&self) -> &[usize] {
        &self.row_ptr
    }

    pub fn col_idx(&self) -> &[u32] {
        &self.col_idx
    }

    pub fn values(&self) -> &[S] {
        &self.values
    }

    /// Columns and values of row `r`.
    pub fn row(&self, r: usize) -> (&[u32], &[S]) {
        let span = self.row_ptr[r]..self.row_ptr[r + 1];
        (&self.col_idx[span.clone()], &self.values[span])
    }

    /// Entry (r, c), or None where nothing is stored.
    pub fn get(&self, r: usize, c: usize) -> Option<S> {
        let (cols, vals) = self.row(r);
        cols.binary_search(&(c as u32)).ok().map(|k| vals[k])
    }

    /// The diagonal, zero where nothing is stored.
    pub fn diagonal(&self) -> Vec<S> {
        (0..self.nrows.min(self.ncols))
            .map(|r| self.get(r, r).unwrap_or_default())
            .collect()
    }

    /// Stored entries whose value is not exactly zero (the "numerical" nonzeros).
    pub fn numerical_nnz(&self) -> usize {
        self.values.iter().filter(|v| v.to_f64() != 0.0).count()
    }

    /// Whether the matrix equals its transpose exactly.
    pub fn is_symmetric(&self) -> bool {
        self.nrows == self.ncols
            && (0..self.nrows).all(|r| {
                let (cols, vals) = self.row(r);
                cols.iter()
                    .zip(vals)
                    .all(|(&c, &v)| self.get(c as usize, r) == Some(v))
            })
    }

    /// Converts the values to storage precision `T`, refusing values that overflow, flush
    /// to zero or are not finite (the error names the entry).
    pub fn convert<T: Stored>(&self) -> Result<Csr<T>> {
        let values = self
            .values
            .iter()
            .enumerate()
            .map(|(k, v)| {
                convert_checked::<T>(v.to_f64()).map_err(|problem| Error::PrecisionRange {
                    what: format!("CSR matrix {}×{}", self.nrows, self.ncols),
                    precision: T::PRECISION,
                    index: k,
                    problem,
                })
            })
            .collect::<Result<Vec<T>>>()?;
        Ok(Csr {
            nrows: self.nrows,
            ncols: self.ncols,
            row_ptr: self.row_ptr.clone(),
            col_idx: self.col_idx.clone(),
            values,
        })
    }

    /// Widens the values to f64 (exact).
    pub fn to_f64(&self) -> Csr<f64> {
        Csr {
            nrows: self.nrows,
            ncols: self.ncols,
            row_ptr: self.row_ptr.clone(),
            col_idx: self.col_idx.clone(),
            values: self.values.iter().map(|v| v.to_f64()).collect(),
        }
    }

    /// The transpose, in CSR.
    pub fn transpose(&self) -> Csr<S> {
        let mut row_ptr = vec![0usize; self.ncols + 1];
        for &c in &self.col_idx {
            row_ptr[c as usize + 1] += 1;
        }
        for c in 0..self.ncols {
            row_ptr[c + 1] += row_ptr[c];
        }
        let mut fill = row_ptr.clone();
        let mut col_idx = vec![0u32; self.nnz()];
        let mut values = vec![S::default(); self.nnz()];
        for r in 0..self.nrows {
            let (cols, vals) = self.row(r);
            for (&c, &v) in cols.iter().zip(vals) {
                let slot = &mut fill[c as usize];
                col_idx[*slot] = r as u32;
                values[*slot] = v;
                *slot += 1;
            }
        }
        Csr {
            nrows: self.ncols,
            ncols: self.nrows,
            row_ptr,
            col_idx,
            values,
        }
    }

    /// Dense column-major copy, for checks on small matrices.
    pub fn to_dense_f64(&self) -> Vec<f64> {
        let mut dense = vec![0.0; self.nrows * self.ncols];
        for r in 0..self.nrows {
            let (cols, vals) = self.row(r);
            for (&c, v) in cols.iter().zip(vals) {
                dense[r + c as usize * self.nrows] = v.to_f64();
            }
        }
        dense
    }
}

/// The sparse product A·B (f64), row by row in parallel (Gustavson's algorithm with a
/// dense accumulator per task). Exact zeros produced by cancellation are kept.
pub fn spgemm(a: &Csr<f64>, b: &Csr<f64>) -> Result<Csr<f64>> {
    use rayon::prelude::*;
    if a.ncols != b.nrows {
        return Err(Error::InvalidInput(format!(
            "sparse product of {}×{} and {}×{} matrices",
            a.nrows, a.ncols, b.nrows, b.ncols
        )));
    }
    const UNSET: usize = usize::MAX;
    let rows: Vec<(Vec<u32>, Vec<f64>)> = (0..a.nrows)
        .into_par_iter()
        .map_init(
            || (vec![UNSET; b.ncols], Vec::<u32>::new()),
            |(slot_of_col, touched), r| {
                let mut vals: Vec<f64> = Vec::new();
                touched.clear();
                let (acols, avals) = a.row(r);
                for (&k, &av) in acols.iter().zip(avals) {
                    let (bcols, bvals) = b.row(k as usize);
                    for (&c, &bv) in bcols.iter().zip(bvals) {
                        let slot = &mut slot_of_col[c as usize];
                        if *slot == UNSET {
                            *slot = vals.len();
                            touched.push(c);
                            vals.push(av * bv);
                        } else {
                            vals[*slot] += av * bv;
                        }
                    }
                }
                let mut entries: Vec<(u32, f64)> = touched
                    .iter()
                    .map(|&c| (c, vals[slot_of_col[c as usize]]))
                    .collect();
                for &c in touched.iter() {
                    slot_of_col[c as usize] = UNSET;
                }
                entries.sort_unstable_by_key(|e| e.0);
                entries.into_iter().unzip()
            },
        )
        .collect();
    let mut row_ptr = Vec::with_capacity(a.nrows + 1);
    row_ptr.push(0);
    let nnz = rows.iter().map(|r| r.0.len()).sum();
    let (mut col_idx, mut values) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
    for (cols, vals) in rows {
        col_idx.extend_from_slice(&cols);
        values.extend_from_slice(&vals);
        row_ptr.push(col_idx.len());
    }
    Csr::new(a.nrows, b.ncols, row_ptr, col_idx, values)
}

impl<S: Stored> SparseRows<S> for Csr<S> {
    fn nrows(&self) -> usize {
        self.nrows
    }

    fn ncols(&self) -> usize {
        self.ncols
    }

    #[inline]
    fn for_each_in_row(&self, r: usize, mut f: impl FnMut(usize, S)) {
        let (cols, vals) = self.row(r);
        for (&c, &v) in cols.iter().zip(vals) {
            f(c as usize, v);
        }
    }
}

impl<S: Stored> RowSlices<S> for Csr<S> {
    #[inline]
    fn entries(&self) -> (&[u32], &[S]) {
        (&self.col_idx, &self.values)
    }

    #[inline]
    fn row_span(&self, r: usize) -> std::ops::Range<usize> {
        self.row_ptr[r]..self.row_ptr[r + 1]
    }
}

/// CSR rows held elsewhere (a device's buffers on the host), with 64-bit row pointers.
pub struct CsrView<'a, S> {
    pub ncols: usize,
    pub row_ptr: &'a [u64],
    pub col_idx: &'a [u32],
    pub values: &'a [S],
}

impl<S: Stored> SparseRows<S> for CsrView<'_, S> {
    fn nrows(&self) -> usize {
        self.row_ptr.len().saturating_sub(1)
    }

    fn ncols(&self) -> usize {
        self.ncols
    }

    #[inline]
    fn for_each_in_row(&self, r: usize, mut f: impl FnMut(usize, S)) {
        let span = self.row_span(r);
        for (&c, &v) in self.col_idx[span.clone()].iter().zip(&self.values[span]) {
            f(c as usize, v);
        }
    }
}

impl<S: Stored> RowSlices<S> for CsrView<'_, S> {
    #[inline]
    fn entries(&self) -> (&[u32], &[S]) {
        (self.col_idx, self.values)
    }

    #[inline]
    fn row_span(&self, r: usize) -> std::ops::Range<usize> {
        self.row_ptr[r] as usize..self.row_ptr[r + 1] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    fn example() -> Csr<f64> {
        // [ 2 -1  0 ]
        // [-1  2 -1 ]
        // [ 0 -1  2 ]
        Csr::new(
            3,
            3,
            vec![0, 2, 5, 7],
            vec![0, 1, 0, 1, 2, 1, 2],
            vec![2.0, -1.0, -1.0, 2.0, -1.0, -1.0, 2.0],
        )
        .unwrap()
    }

    #[test]
    fn structure_is_checked() {
        assert!(Csr::<f64>::new(2, 2, vec![0, 1], vec![0], vec![1.0]).is_err());
        assert!(Csr::<f64>::new(1, 2, vec![0, 2], vec![1, 0], vec![1.0, 1.0]).is_err());
        assert!(Csr::<f64>::new(1, 2, vec![0, 1], vec![2], vec![1.0]).is_err());
        assert!(Csr::<f64>::new(1, 2, vec![0, 2], vec![0], vec![1.0]).is_err());
    }

    #[test]
    fn access() {
        let a = example();
        assert_eq!(a.get(1, 2), Some(-1.0));
        assert_eq!(a.get(0, 2), None);
        assert_eq!(a.diagonal(), vec![2.0; 3]);
        assert!(a.is_symmetric());
        assert_eq!(a.to_dense_f64()[3], -1.0);
    }

    #[test]
    fn precision_round_trips() {
        let a = example();
        let h: Csr<f16> = a.convert().unwrap();
        assert_eq!(h.to_f64(), a);
        let s: Csr<f32> = a.convert().unwrap();
        assert_eq!(s.convert::<f64>().unwrap(), a);
        assert_eq!(s.convert::<f16>().unwrap(), h);

        let mut big = example();
        big.values[4] = 1.0e5;
        let err = big.convert::<f16>().unwrap_err().to_string();
        assert!(
            err.contains("entry 4") && err.contains("f16") && err.contains("overflow"),
            "{err}"
        );
    }

    #[test]
    fn transpose_and_product_match_dense() {
        let a = Csr::new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0]).unwrap();
        let at = a.transpose();
        assert_eq!(at.to_dense_f64(), vec![1.0, 0.0, 2.0, 0.0, 3.0, 0.0]);
        let p = spgemm(&a, &at).unwrap(); // [[5, 0], [0, 9]]
        assert_eq!(p.to_dense_f64(), vec![5.0, 0.0, 0.0, 9.0]);
        assert!(spgemm(&a, &a).is_err());
    }
}
