//! Device memory whose element precision is a run-time value: [`Data`] (a buffer in f16,
//! f32 or f64), [`Block`] (a block of columns: rows × cols in column-major or node-major
//! order), and the views kernels take ([`View`], [`ViewMut`], [`MatRef`], [`MatMut`]).

use std::ops::Range;

use half::f16;
use rayon::prelude::*;

use super::{Device, HostArray, Storage};
use crate::error::{Error, Result};
use crate::precision::{Precision, Stored};

/// A device buffer in one of the three precisions.
pub enum Data<D: Device> {
    F16(D::Buffer<f16>),
    F32(D::Buffer<f32>),
    F64(D::Buffer<f64>),
}

impl<D: Device> Data<D> {
    /// `len` zeros in `precision`.
    pub fn zeros(dev: &D, len: usize, precision: Precision) -> Result<Self> {
        Ok(match precision {
            Precision::F16 => Data::F16(dev.zeros(len)?),
            Precision::F32 | Precision::Tf32 => Data::F32(dev.zeros(len)?),
            Precision::F64 => Data::F64(dev.zeros(len)?),
        })
    }

    /// The values of `host` rounded to `precision` (to nearest; no range check: callers
    /// that need one check with `precision::convert_checked` first).
    pub fn from_f64(dev: &D, host: &[f64], precision: Precision) -> Result<Self> {
        fn rounded<S: Stored>(host: &[f64]) -> Vec<S> {
            host.iter().map(|&v| S::from_f64(v)).collect()
        }
        Ok(match precision {
            Precision::F16 => Data::F16(dev.upload(&rounded::<f16>(host))?),
            Precision::F32 | Precision::Tf32 => Data::F32(dev.upload(&rounded::<f32>(host))?),
            Precision::F64 => Data::F64(dev.upload(host)?),
        })
    }

    /// Values already in a storage type.
    pub fn from_stored<S: Storage>(dev: &D, host: &[S]) -> Result<Self> {
        Ok(S::data(dev.upload(host)?))
    }

    /// Values already in a storage type, given up by the caller (not held twice).
    pub fn from_owned<S: Storage>(dev: &D, host: impl Into<HostArray<S>>) -> Result<Self> {
        Ok(S::data(dev.upload_owned(host.into())?))
    }

    /// The values widened to f64 on the host (allocates: for results and tests). The
    /// widening runs on every core, and f64 is read straight into the result: one thread
    /// converting a 1024-column block took most of a second on a GPU node.
    pub fn to_f64(&self, dev: &D) -> Result<Vec<f64>> {
        fn widened<D: Device, S: Storage>(dev: &D, b: &D::Buffer<S>) -> Result<Vec<f64>> {
            let mut host = vec![S::default(); D::buffer_len(b)];
            dev.download(b, &mut host)?;
            Ok(host.par_iter().map(|v| v.to_f64()).collect())
        }
        match self {
            Data::F16(b) => widened::<D, f16>(dev, b),
            Data::F32(b) => widened::<D, f32>(dev, b),
            Data::F64(b) => {
                let mut host = vec![0.0; D::buffer_len(b)];
                dev.download(b, &mut host)?;
                Ok(host)
            }
        }
    }

    /// The values written from f64 host values (rounded on every core), lengths equal.
    pub fn write_f64(&mut self, dev: &D, host: &[f64]) -> Result<()> {
        fn write<D: Device, S: Storage>(dev: &D, b: &mut D::Buffer<S>, host: &[f64]) -> Result<()> {
            let rounded: Vec<S> = host.par_iter().map(|&v| S::from_f64(v)).collect();
            dev.write(&rounded, b)
        }
        match self {
            Data::F16(b) => write::<D, f16>(dev, b, host),
            Data::F32(b) => write::<D, f32>(dev, b, host),
            Data::F64(b) => dev.write(host, b),
        }
    }

    pub fn precision(&self) -> Precision {
        match self {
            Data::F16(_) => Precision::F16,
            Data::F32(_) => Precision::F32,
            Data::F64(_) => Precision::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Data::F16(b) => D::buffer_len(b),
            Data::F32(b) => D::buffer_len(b),
            Data::F64(b) => D::buffer_len(b),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the buffer occupies.
    pub fn bytes(&self) -> usize {
        self.len() * self.precision().bytes()
    }

    pub fn view(&self) -> View<'_, D> {
        View {
            data: self,
            offset: 0,
            len: self.len(),
        }
    }

    pub fn view_mut(&mut self) -> ViewMut<'_, D> {
        let len = self.len();
        ViewMut {
            data: self,
            offset: 0,
            len,
        }
    }

    /// The entries `range`.
    pub fn slice(&self, range: Range<usize>) -> View<'_, D> {
        assert!(
            range.start <= range.end && range.end <= self.len(),
            "slice {range:?} of a buffer of {}",
            self.len()
        );
        View {
            data: self,
            offset: range.start,
            len: range.len(),
        }
    }

    pub fn slice_mut(&mut self, range: Range<usize>) -> ViewMut<'_, D> {
        assert!(
            range.start <= range.end && range.end <= self.len(),
            "slice {range:?} of a buffer of {}",
            self.len()
        );
        ViewMut {
            data: self,
            offset: range.start,
            len: range.len(),
        }
    }
}

/// Consecutive entries of a [`Data`].
pub struct View<'a, D: Device> {
    pub data: &'a Data<D>,
    pub offset: usize,
    pub len: usize,
}

impl<D: Device> Clone for View<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D: Device> Copy for View<'_, D> {}

impl<D: Device> View<'_, D> {
    pub fn precision(&self) -> Precision {
        self.data.precision()
    }
}

/// Consecutive entries of a [`Data`], to write.
pub struct ViewMut<'a, D: Device> {
    pub data: &'a mut Data<D>,
    pub offset: usize,
    pub len: usize,
}

impl<D: Device> ViewMut<'_, D> {
    pub fn precision(&self) -> Precision {
        self.data.precision()
    }

    /// The same entries, to read.
    pub fn as_view(&self) -> View<'_, D> {
        View {
            data: &*self.data,
            offset: self.offset,
            len: self.len,
        }
    }

    /// A shorter-lived view of the same entries.
    pub fn reborrow(&mut self) -> ViewMut<'_, D> {
        ViewMut {
            data: &mut *self.data,
            offset: self.offset,
            len: self.len,
        }
    }
}

/// A dense matrix inside a [`Data`]: entry (i, j) at `offset + i·row_stride + j·col_stride`.
pub struct MatRef<'a, D: Device> {
    pub data: &'a Data<D>,
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<D: Device> Clone for MatRef<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D: Device> Copy for MatRef<'_, D> {}

impl<'a, D: Device> MatRef<'a, D> {
    /// The column-major `rows × cols` matrix with leading dimension `ld` at `offset`.
    pub fn col_major(
        data: &'a Data<D>,
        offset: usize,
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Self {
        MatRef {
            data,
            offset,
            rows,
            cols,
            row_stride: 1,
            col_stride: ld,
        }
    }

    /// The transpose of a column-major matrix stored `cols × rows` with leading dimension
    /// `ld` at `offset`.
    pub fn transposed(
        data: &'a Data<D>,
        offset: usize,
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Self {
        MatRef {
            data,
            offset,
            rows,
            cols,
            row_stride: ld,
            col_stride: 1,
        }
    }

    pub fn precision(&self) -> Precision {
        self.data.precision()
    }

    /// Index one past the last entry the matrix touches (0 when it is empty).
    pub fn end(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            return self.offset;
        }
        self.offset + (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride + 1
    }
}

/// A column-major dense matrix inside a [`Data`], to write.
pub struct MatMut<'a, D: Device> {
    pub data: &'a mut Data<D>,
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

impl<'a, D: Device> MatMut<'a, D> {
    pub fn col_major(
        data: &'a mut Data<D>,
        offset: usize,
        rows: usize,
        cols: usize,
        ld: usize,
    ) -> Self {
        MatMut {
            data,
            offset,
            rows,
            cols,
            ld,
        }
    }

    pub fn precision(&self) -> Precision {
        self.data.precision()
    }
}

/// How the entries of a block of right-hand sides are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Entry (i, c) at i + c·rows: each column contiguous (PSC, Krylov vectors).
    ColMajor,
    /// Entry (i, c) at i·cols + c: one row's columns together, so one read of a matrix row
    /// serves every column (multigrid).
    NodeMajor,
}

/// A block of `cols` right-hand sides (or solutions) of `rows` unknowns.
pub struct Block<D: Device> {
    pub data: Data<D>,
    rows: usize,
    cols: usize,
    layout: Layout,
}

impl<D: Device> Block<D> {
    pub fn zeros(
        dev: &D,
        rows: usize,
        cols: usize,
        precision: Precision,
        layout: Layout,
    ) -> Result<Self> {
        Ok(Block {
            data: Data::zeros(dev, rows * cols, precision)?,
            rows,
            cols,
            layout,
        })
    }

    /// A block from host values in its layout, rounded to `precision`.
    pub fn from_f64(
        dev: &D,
        host: &[f64],
        rows: usize,
        cols: usize,
        precision: Precision,
        layout: Layout,
    ) -> Result<Self> {
        if host.len() != rows * cols {
            return Err(Error::InvalidInput(format!(
                "a block of {rows} × {cols} values was given {}",
                host.len()
            )));
        }
        Ok(Block {
            data: Data::from_f64(dev, host, precision)?,
            rows,
            cols,
            layout,
        })
    }

    /// A vector: one column.
    pub fn vector(dev: &D, len: usize, precision: Precision) -> Result<Self> {
        Self::zeros(dev, len, 1, precision, Layout::ColMajor)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn precision(&self) -> Precision {
        self.data.precision()
    }

    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn view(&self) -> View<'_, D> {
        self.data.view()
    }

    pub fn view_mut(&mut self) -> ViewMut<'_, D> {
        self.data.view_mut()
    }

    /// Column j of a column-major block.
    pub fn col(&self, j: usize) -> View<'_, D> {
        debug_assert_eq!(self.layout, Layout::ColMajor);
        self.data.slice(j * self.rows..(j + 1) * self.rows)
    }

    pub fn col_mut(&mut self, j: usize) -> ViewMut<'_, D> {
        debug_assert_eq!(self.layout, Layout::ColMajor);
        let rows = self.rows;
        self.data.slice_mut(j * rows..(j + 1) * rows)
    }

    /// The values on the host, widened to f64, in the block's layout (allocates).
    pub fn to_f64(&self, dev: &D) -> Result<Vec<f64>> {
        self.data.to_f64(dev)
    }

    /// Fails unless `other` has this block's shape, layout and precision.
    pub fn check_like(&self, other: &Block<D>, what: &str) -> Result<()> {
        if (self.rows, self.cols, self.layout, self.precision())
            == (other.rows, other.cols, other.layout, other.precision())
        {
            Ok(())
        } else {
            Err(Error::InvalidInput(format!(
                "{what}: a {}×{} {:?} {} block where a {}×{} {:?} {} block belongs",
                other.rows,
                other.cols,
                other.layout,
                other.precision(),
                self.rows,
                self.cols,
                self.layout,
                self.precision()
            )))
        }
    }
}
