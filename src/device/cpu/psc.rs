//! The PSC passes on the CPU: the hierarchical-basis transforms (column by column, level by
//! level on the structured grid) and the C/E/I gather and scatter with the partial-Cholesky
//! scaling (one task per column).

use rayon::prelude::*;

use super::{buffer, buffer_mut, Cpu};
use crate::device::psc::{
    check_blocks, check_transform, CellParents, Classes, GridTransform, HierarchicalTransform,
    PscKernels, RowUpdate,
};
use crate::device::{unsupported, Block, Data};
use crate::error::Result;
use crate::precision::{Precision, Real};

/// Weight of an edge-midpoint parent and of a Q1 cell-midpoint parent.
const EDGE_WEIGHT: f64 = 0.5;
const CELL_WEIGHT: f64 = 0.25;

/// Index helpers of the structured grid of a transform.
struct Grid<'a>(&'a GridTransform);

impl Grid<'_> {
    /// Unknown index of interior node (i, j); None on the boundary.
    #[inline]
    fn dof(&self, i: usize, j: usize) -> Option<usize> {
        let n = self.0.n;
        (i > 0 && j > 0 && i < n && j < n).then(|| (i - 1) + (j - 1) * (n - 1))
    }

    /// Value of the unknown at grid point (i, j), zero on the boundary.
    #[inline]
    fn at<T: Real>(&self, x: &[T], i: usize, j: usize) -> T {
        match self.dof(i, j) {
            Some(d) => x[d],
            None => T::zero(),
        }
    }

    /// Adds `v` to the unknown at (i, j) unless it is a Dirichlet node.
    #[inline]
    fn add<T: Real>(&self, x: &mut [T], i: usize, j: usize, v: T) {
        if let Some(d) = self.dof(i, j) {
            x[d] = x[d] + v;
        }
    }

    /// x ← S x, one column: level by level, each new node adds the weighted values of its
    /// parents. New nodes of level k (spacing s) are the horizontal edge midpoints (i odd,
    /// j even multiples of s), the vertical ones (i even, j odd) and the cell midpoints
    /// (both odd).
    fn apply<T: Real>(&self, x: &mut [T]) {
        let t = self.0;
        let (n, half, quarter) = (t.n, T::from_f64(EDGE_WEIGHT), T::from_f64(CELL_WEIGHT));
        for k in 1..=t.levels {
            let s = 1 << (t.levels - k);
            let s2 = 2 * s;
            for j in (s2..n).step_by(s2) {
                for i in (s..n).step_by(s2) {
                    let v = half * (self.at(x, i - s, j) + self.at(x, i + s, j));
                    self.add(x, i, j, v);
                }
            }
            for j in (s..n).step_by(s2) {
                for i in (s2..n).step_by(s2) {
                    let v = half * (self.at(x, i, j - s) + self.at(x, i, j + s));
                    self.add(x, i, j, v);
                }
                for i in (s..n).step_by(s2) {
                    let v = match t.cell_parents {
                        CellParents::Diagonal => {
                            half * (self.at(x, i - s, j - s) + self.at(x, i + s, j + s))
                        }
                        CellParents::Corners => {
                            quarter
                                * (self.at(x, i - s, j - s)
                                    + self.at(x, i + s, j - s)
                                    + self.at(x, i - s, j + s)
                                    + self.at(x, i + s, j + s))
                        }
                    };
                    self.add(x, i, j, v);
                }
            }
        }
    }

    /// y ← Sᵀ y, one column: levels in reverse, each new node adds its weighted value to
    /// its parents.
    fn apply_transpose<T: Real>(&self, y: &mut [T]) {
        let t = self.0;
        let (n, half, quarter) = (t.n, T::from_f64(EDGE_WEIGHT), T::from_f64(CELL_WEIGHT));
        for k in (1..=t.levels).rev() {
            let s = 1 << (t.levels - k);
            let s2 = 2 * s;
            for j in (s2..n).step_by(s2) {
                for i in (s..n).step_by(s2) {
                    let v = half * self.at(y, i, j);
                    self.add(y, i - s, j, v);
                    self.add(y, i + s, j, v);
                }
            }
            for j in (s..n).step_by(s2) {
                for i in (s2..n).step_by(s2) {
                    let v = half * self.at(y, i, j);
                    self.add(y, i, j - s, v);
                    self.add(y, i, j + s, v);
                }
                for i in (s..n).step_by(s2) {
                    match t.cell_parents {
                        CellParents::Diagonal => {
                            let v = half * self.at(y, i, j);
                            self.add(y, i - s, j - s, v);
                            self.add(y, i + s, j + s, v);
                        }
                        CellParents::Corners => {
                            let v = quarter * self.at(y, i, j);
                            self.add(y, i - s, j - s, v);
                            self.add(y, i + s, j - s, v);
                            self.add(y, i - s, j + s, v);
                            self.add(y, i + s, j + s, v);
                        }
                    }
                }
            }
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
            x.par_chunks_mut(len).for_each(|column| {
                if transpose {
                    grid.apply_transpose(column)
                } else {
                    grid.apply(column)
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
    let zero = T::zero();
    nodal
        .par_chunks(n)
        .zip(bc.par_chunks_mut(nc.max(1)))
        .zip(be.par_chunks_mut(ne.max(1)))
        .zip(bi.par_chunks_mut(ni.max(1)))
        .zip(column_scale.par_iter_mut())
        .for_each(|((((col, bc), be), bi), column_scale)| {
            for (kk, out) in bc.iter_mut().enumerate().take(nc) {
                let mut s = zero;
                for (l, &d) in k.c.iter().enumerate().take(kk + 1) {
                    s = s + k.l_c_inv[kk + l * nc] * col[d as usize];
                }
                *out = s;
            }
            for ((out, &d), &scale) in be.iter_mut().zip(k.e).zip(k.scale_e) {
                *out = col[d as usize] * scale;
            }
            for ((out, &d), &scale) in bi.iter_mut().zip(k.i).zip(k.scale_i) {
                *out = col[d as usize] * scale;
            }
            // Scale each column to max-norm 1, so f16 operands stay in range.
            let max = bc
                .iter()
                .take(nc)
                .chain(be.iter())
                .chain(bi.iter())
                .fold(zero, |m, v| m.max(v.abs()));
            let scale = if max > zero { max } else { T::one() };
            *column_scale = scale;
            let inv = T::one() / scale;
            for v in bc
                .iter_mut()
                .take(nc)
                .chain(be.iter_mut())
                .chain(bi.iter_mut())
            {
                *v = *v * inv;
            }
        });
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
    nodal
        .par_chunks_mut(n)
        .zip(xc.par_chunks(nc.max(1)))
        .zip(xe.par_chunks(ne.max(1)))
        .zip(xi.par_chunks(ni.max(1)))
        .zip(column_scale.par_iter())
        .for_each(|((((col, xc), xe), xi), &scale)| {
            for (l, &d) in k.c.iter().enumerate() {
                let mut s = T::zero();
                for (kk, &v) in xc.iter().enumerate().take(nc).skip(l) {
                    s = s + k.l_c_inv[kk + l * nc] * v;
                }
                col[d as usize] = s * scale;
            }
            for ((&d, &x), &s) in k.e.iter().zip(xe).zip(k.scale_e) {
                col[d as usize] = x * s * scale;
            }
            for ((&d, &x), &s) in k.i.iter().zip(xi).zip(k.scale_i) {
                col[d as usize] = x * s * scale;
            }
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
