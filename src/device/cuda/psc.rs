//! PscKernels on CUDA (kernels/psc.cu): the hierarchical-basis transform one level per
//! launch, and the C/E/I gather (two launches: values with each block's maximum, then the
//! scaling by each column's) and scatter over blocks of entries and columns.

use super::device::{grow, Cuda};
use super::launch::{self, Arg};
use crate::device::psc::{CellParents, Classes, GridTransform, HierarchicalTransform, PscKernels};
use crate::device::{kernel_name, unsupported, Block, Data};
use crate::error::Result;
use crate::precision::Precision;

/// The precision of a pass's checked blocks, refused unless f32 or f64 (the compute
/// precisions the kernels take).
fn pass_precision(op: &str, nodal: &Block<Cuda>) -> Result<Precision> {
    match nodal.precision() {
        Precision::F16 => Err(unsupported(op, &[Precision::F16])),
        p => Ok(p),
    }
}

impl Cuda {
    /// The class arrays as kernel arguments: C, |C|, E, |E|, I, |I|, L_C⁻¹, scale_E, scale_I.
    fn class_args(&self, k: &Classes<Cuda>) -> [Arg; 9] {
        let (nc, ne, ni) = k.sizes;
        [
            self.ptr(&k.c_dofs, 0),
            Arg::U32(nc as u32),
            self.ptr(&k.e_dofs, 0),
            Arg::U32(ne as u32),
            self.ptr(&k.i_dofs, 0),
            Arg::U32(ni as u32),
            self.data_ptr(&k.l_c_inv, 0),
            self.data_ptr(&k.scale_e, 0),
            self.data_ptr(&k.scale_i, 0),
        ]
    }
}

impl Cuda {
    /// S or Sᵀ on the unit square's grid, one level per launch.
    fn grid_transform(
        &self,
        t: &GridTransform,
        x: &mut Block<Cuda>,
        transpose: bool,
    ) -> Result<()> {
        let (p, cols) = (x.precision(), x.cols());
        if t.len() > u32::MAX as usize {
            return Err(crate::error::Error::Backend(format!(
                "hierarchical_transform: {} unknowns per column exceed the kernel's 32-bit indices",
                t.len()
            )));
        }
        let levels: Vec<usize> = if transpose {
            (1..=t.levels).rev().collect()
        } else {
            (1..=t.levels).collect()
        };
        let (op, corners) = (
            if transpose {
                "hierarchical_transpose"
            } else {
                "hierarchical_forward"
            },
            u32::from(t.cell_parents == CellParents::Corners),
        );
        for k in levels {
            let s = 1usize << (t.levels - k);
            // A thread per coarse cell (S) or per interior old node (Sᵀ).
            let cells = t.n / (2 * s);
            let threads = if transpose {
                (cells - 1) * (cells - 1)
            } else {
                cells * cells
            };
            if threads == 0 {
                continue;
            }
            self.launch(
                &kernel_name(op, &[p]),
                launch::per_item_and_column(threads as u64, cols as u32),
                &[
                    self.data_ptr(&x.data, 0),
                    Arg::U32(t.n as u32),
                    Arg::U32(s as u32),
                    Arg::U64(t.len() as u64),
                    Arg::U32(cols as u32),
                    Arg::U32(corners),
                ],
            )?;
        }
        Ok(())
    }
}

impl PscKernels for Cuda {
    fn hierarchical_transform_unchecked(
        &self,
        t: &HierarchicalTransform<Self>,
        x: &mut Block<Self>,
        transpose: bool,
    ) -> Result<()> {
        let p = x.precision();
        if p == Precision::F16 {
            return Err(unsupported("hierarchical_transform", &[p]));
        }
        let cols = x.cols();
        if cols == 0 || t.is_empty() {
            return Ok(());
        }
        match t {
            HierarchicalTransform::Grid(g) => self.grid_transform(g, x, transpose),
            HierarchicalTransform::Levels(l) => {
                let updates: Vec<_> = if transpose {
                    l.transpose.iter().rev().collect()
                } else {
                    l.forward.iter().collect()
                };
                for u in updates.into_iter().filter(|u| u.nrows > 0) {
                    self.launch(
                        &kernel_name("row_update", &[p]),
                        launch::elementwise((u.nrows * cols) as u64),
                        &[
                            self.data_ptr(&x.data, 0),
                            Arg::U64(t.len() as u64),
                            Arg::U32(cols as u32),
                            self.ptr(&u.rows, 0),
                            self.ptr(&u.row_ptr, 0),
                            self.ptr(&u.cols, 0),
                            self.data_ptr(&u.weights, 0),
                            Arg::U32(u.nrows as u32),
                        ],
                    )?;
                }
                Ok(())
            }
        }
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
        let p = pass_precision("psc_gather", nodal)?;
        let cols = nodal.cols();
        if cols == 0 {
            return Ok(());
        }
        let (nc, ne, ni) = classes.sizes;
        let config = launch::per_item_and_column((nc + ne + ni) as u64, cols as u32);
        let parts = config.grid_dim.0;
        let (bc, be, bi) = (
            self.data_ptr(&bc.data, 0),
            self.data_ptr(&be.data, 0),
            self.data_ptr(&bi.data, 0),
        );
        // Each block's largest magnitude in the reduction scratch, then per column the
        // maximum of its blocks'.
        self.with_reduce(|partial| {
            grow(self, partial, parts as usize * cols)?;
            let mut args = vec![self.data_ptr(&nodal.data, 0), Arg::U64(nodal.rows() as u64)];
            args.extend(self.class_args(classes));
            args.extend([bc, be, bi, self.ptr(partial, 0), Arg::U32(cols as u32)]);
            self.launch(&kernel_name("psc_gather", &[p]), config, &args)?;
            self.launch(
                &kernel_name("psc_gather_scale", &[p]),
                config,
                &[
                    bc,
                    be,
                    bi,
                    Arg::U32(nc as u32),
                    Arg::U32(ne as u32),
                    Arg::U32(ni as u32),
                    self.ptr(partial, 0),
                    Arg::U32(parts),
                    self.data_ptr(column_scale, 0),
                    Arg::U32(cols as u32),
                ],
            )
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
        let p = pass_precision("psc_scatter", nodal)?;
        let cols = nodal.cols();
        if cols == 0 {
            return Ok(());
        }
        let mut args = vec![
            self.data_ptr(&xc.data, 0),
            self.data_ptr(&xe.data, 0),
            self.data_ptr(&xi.data, 0),
            self.data_ptr(column_scale, 0),
        ];
        args.extend(self.class_args(classes));
        args.extend([
            self.data_ptr(&nodal.data, 0),
            Arg::U64(nodal.rows() as u64),
            Arg::U32(cols as u32),
        ]);
        let (nc, ne, ni) = classes.sizes;
        self.launch(
            &kernel_name("psc_scatter", &[p]),
            launch::per_item_and_column((nc + ne + ni) as u64, cols as u32),
            &args,
        )
    }
}
