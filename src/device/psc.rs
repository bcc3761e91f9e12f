//! The passes of the PSC solve between its dense products (docs/mathematics.md §3): the
//! hierarchical-basis transform S and Sᵀ, and the gather into / scatter out of the C/E/I
//! numbering with the partial-Cholesky scaling.

use super::checks::{check_psc_blocks, check_same_block, check_transform};
use super::{Block, Data, Device, VectorKernels};
use crate::error::{Error, Result};
use crate::precision::Precision;

/// Parents of a cell midpoint new on a level (docs/mathematics.md §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellParents {
    /// Q1: the four cell corners, weight 1/4.
    Corners,
    /// P1: the two ends of the cell's "/" diagonal, weight 1/2.
    Diagonal,
}

/// The hierarchical-basis transform S = (I + N_j) ··· (I + N_1) on the unknowns of a mesh
/// refined `levels` times: N_k gives every unknown new on level k the mean of its parents
/// (Dirichlet parents contribute nothing). Applied level by level, Sᵀ in reverse.
pub enum HierarchicalTransform<D: Device> {
    /// The unit square's structured mesh: parents found on the grid.
    Grid(GridTransform),
    /// Any refined mesh: the rows of N_k and of N_kᵀ, level by level.
    Levels(LevelTransform<D>),
}

impl<D: Device> HierarchicalTransform<D> {
    /// Unknowns transformed.
    pub fn len(&self) -> usize {
        match self {
            HierarchicalTransform::Grid(g) => g.len(),
            HierarchicalTransform::Levels(l) => l.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes one pass of S (or of Sᵀ with `transpose`) reads besides the block: the grid's
    /// parents are computed, the levels' rows are stored.
    pub fn bytes(&self, transpose: bool) -> usize {
        match self {
            HierarchicalTransform::Grid(_) => 0,
            HierarchicalTransform::Levels(l) => {
                let updates = if transpose { &l.transpose } else { &l.forward };
                updates.iter().map(RowUpdate::bytes).sum()
            }
        }
    }
}

/// S on the (n−1)² interior unknowns of the unit square's n×n mesh, lexicographic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridTransform {
    pub n: usize,
    pub levels: usize,
    pub cell_parents: CellParents,
}

impl GridTransform {
    /// Unknowns: (n − 1)².
    pub fn len(&self) -> usize {
        (self.n - 1) * (self.n - 1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// S as sparse updates, for meshes without a grid.
pub struct LevelTransform<D: Device> {
    pub len: usize,
    /// N_1 … N_j: unknowns new on level k ← their weighted parents.
    pub forward: Vec<RowUpdate<D>>,
    /// N_1ᵀ … N_jᵀ: parents ← their weighted children on level k.
    pub transpose: Vec<RowUpdate<D>>,
}

/// x[rows[r]] += Σ weights[p] x[cols[p]], p in row_ptr[r]..row_ptr[r+1], in every column
/// of a block. No row reads a row that is written, so rows update in any order.
pub struct RowUpdate<D: Device> {
    pub rows: D::Buffer<u32>,
    pub row_ptr: D::Buffer<u32>,
    pub cols: D::Buffer<u32>,
    /// In the compute precision of the solve (1/2 and 1/4: exact in every precision).
    pub weights: Data<D>,
    pub nrows: usize,
}

impl<D: Device> RowUpdate<D> {
    pub fn upload(
        dev: &D,
        rows: &[u32],
        row_ptr: &[u32],
        cols: &[u32],
        weights: &[f64],
        precision: Precision,
    ) -> Result<Self> {
        Ok(RowUpdate {
            rows: dev.upload(rows)?,
            row_ptr: dev.upload(row_ptr)?,
            cols: dev.upload(cols)?,
            weights: Data::from_f64(dev, weights, precision)?,
            nrows: rows.len(),
        })
    }

    /// Bytes of the rows, their pointers, columns and weights.
    pub fn bytes(&self) -> usize {
        let indices = D::buffer_len(&self.rows) + D::buffer_len(&self.row_ptr);
        4 * (indices + D::buffer_len(&self.cols)) + self.weights.bytes()
    }
}

/// An I slot that holds no unknown: padding that keeps each macro element's block a
/// multiple of [`I_SLOT_ALIGN`] long. The gather writes 0 there, the scatter skips it.
pub const PADDING_SLOT: u32 = u32::MAX;

/// The I blocks of large macro elements are padded to a multiple of this many slots, so
/// that the C_g⁻¹ GEMM's leading dimensions are 16-byte multiples in f16 (cuBLAS's Tensor
/// Core kernels need that; with 961 rows it falls back to a kernel 6× slower).
pub const I_SLOT_ALIGN: usize = 8;

/// Slots for a macro element of `size` interior unknowns: padded to [`I_SLOT_ALIGN`] where
/// the padding (at most 7 slots) costs at most 1/16 more, so from 112 unknowns on; else
/// exactly `size`.
pub fn i_slots(size: usize) -> usize {
    if size >= 16 * (I_SLOT_ALIGN - 1) {
        size.next_multiple_of(I_SLOT_ALIGN)
    } else {
        size
    }
}

/// Where the classes C, E, I sit among the unknowns, and the scaling of the partial
/// Cholesky factor L = blockdiag(L_C, diag(Ã)^{1/2}) (docs/mathematics.md §3), in the compute
/// precision of the solve.
pub struct Classes<D: Device> {
    /// Unknown (lexicographic) of each C, E, I entry (I grouped by macro element, with
    /// [`PADDING_SLOT`]s).
    pub c_dofs: D::Buffer<u32>,
    pub e_dofs: D::Buffer<u32>,
    pub i_dofs: D::Buffer<u32>,
    /// L_C⁻¹, |C| × |C| column-major (lower triangular).
    pub l_c_inv: Data<D>,
    /// diag(Ã)^{-1/2} on E and on I.
    pub scale_e: Data<D>,
    pub scale_i: Data<D>,
    /// |C|, |E| and the I slots (padding included).
    pub sizes: (usize, usize, usize),
    /// The unknowns the classes partition: |C| + |E| + |I|.
    pub unknowns: usize,
}

impl<D: Device> Classes<D> {
    /// The classes from the host set-up, their scalings in `precision` (the compute
    /// precision of the solve). `i_dofs` may hold [`PADDING_SLOT`]s (scale 0).
    #[allow(clippy::too_many_arguments)]
    pub fn upload(
        dev: &D,
        c_dofs: &[u32],
        e_dofs: &[u32],
        i_dofs: &[u32],
        l_c_inv: &[f64],
        scale_e: &[f64],
        scale_i: &[f64],
        precision: Precision,
    ) -> Result<Self> {
        // The scatter writes each unknown once: C, E and I must partition 0..n.
        let padding = i_dofs.iter().filter(|&&d| d == PADDING_SLOT).count();
        let n = c_dofs.len() + e_dofs.len() + i_dofs.len() - padding;
        let mut seen = vec![false; n];
        let slots = i_dofs.iter().filter(|&&d| d != PADDING_SLOT);
        for &d in c_dofs.iter().chain(e_dofs).chain(slots) {
            match seen.get_mut(d as usize) {
                Some(s) if !*s => *s = true,
                _ => {
                    return Err(Error::Backend(format!(
                        "PSC classes: unknown {d} is out of range or in two classes (n = {n})"
                    )))
                }
            }
        }
        if scale_e.len() != e_dofs.len()
            || scale_i.len() != i_dofs.len()
            || l_c_inv.len() != c_dofs.len().pow(2)
        {
            return Err(Error::Backend(
                "PSC classes: scalings or L_C⁻¹ do not match the classes".into(),
            ));
        }
        Ok(Classes {
            c_dofs: dev.upload(c_dofs)?,
            e_dofs: dev.upload(e_dofs)?,
            i_dofs: dev.upload(i_dofs)?,
            l_c_inv: Data::from_f64(dev, l_c_inv, precision)?,
            scale_e: Data::from_f64(dev, scale_e, precision)?,
            scale_i: Data::from_f64(dev, scale_i, precision)?,
            sizes: (c_dofs.len(), e_dofs.len(), i_dofs.len()),
            unknowns: n,
        })
    }

    /// Bytes the gather or the scatter reads besides the blocks: the three index lists,
    /// L_C⁻¹ and the scalings.
    pub fn bytes(&self) -> usize {
        let (c, e, i) = self.sizes;
        4 * (c + e + i) + self.l_c_inv.bytes() + self.scale_e.bytes() + self.scale_i.bytes()
    }
}

/// The PSC passes. Blocks are column-major, in the compute precision of the solve. The
/// methods a solver calls check their arguments (device/checks.rs) and hand them to the
/// backend's `*_unchecked` kernel.
pub trait PscKernels: Device + VectorKernels {
    /// x ← S x, or x ← Sᵀ x with `transpose`, for every column.
    fn hierarchical_transform(
        &self,
        t: &HierarchicalTransform<Self>,
        x: &mut Block<Self>,
        transpose: bool,
    ) -> Result<()> {
        check_transform(t, x)?;
        self.hierarchical_transform_unchecked(t, x, transpose)
    }

    /// From `nodal` (Sᵀ b): b_C = L_C⁻¹ b[C], b_E = b[E] ∘ scale_E, b_I = b[I] ∘ scale_I (0
    /// in padding slots), each column then divided by its largest magnitude (kept in
    /// `column_scale`; 1 for a zero column) so low-precision operands stay in range.
    fn psc_gather(
        &self,
        classes: &Classes<Self>,
        nodal: &Block<Self>,
        bc: &mut Block<Self>,
        be: &mut Block<Self>,
        bi: &mut Block<Self>,
        column_scale: &mut Data<Self>,
    ) -> Result<()> {
        check_psc_blocks("psc_gather", classes, nodal, [bc, be, bi], column_scale)?;
        self.psc_gather_unchecked(classes, nodal, bc, be, bi, column_scale)
    }

    /// The way back: nodal[C] = L_C⁻ᵀ x_C, nodal[E] = x_E ∘ scale_E, nodal[I] = x_I ∘
    /// scale_I (padding slots skipped), each column times its scale.
    fn psc_scatter(
        &self,
        classes: &Classes<Self>,
        xc: &Block<Self>,
        xe: &Block<Self>,
        xi: &Block<Self>,
        column_scale: &Data<Self>,
        nodal: &mut Block<Self>,
    ) -> Result<()> {
        check_psc_blocks("psc_scatter", classes, nodal, [xc, xe, xi], column_scale)?;
        self.psc_scatter_unchecked(classes, xc, xe, xi, column_scale, nodal)
    }

    /// The way in of an apply: Sᵀ b, then [`PscKernels::psc_gather`] of it. `work` is a
    /// nodal workspace (its contents afterwards: unspecified). A device may fuse the passes
    /// (the CPU takes a column through both while it sits in its cache); the values are
    /// those of the passes one after the other.
    #[allow(clippy::too_many_arguments)]
    fn psc_transform_gather(
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
        check_transform(t, work)?;
        check_psc_blocks(op, classes, work, [bc, be, bi], column_scale)?;
        check_same_block(op, b, work)?;
        self.psc_transform_gather_unchecked(t, classes, b, work, bc, be, bi, column_scale)
    }

    /// The way out: [`PscKernels::psc_scatter`] into `nodal`, then S on it (fused where
    /// the device can, with the same values).
    #[allow(clippy::too_many_arguments)]
    fn psc_scatter_transform(
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
        check_transform(t, nodal)?;
        check_psc_blocks(op, classes, nodal, [xc, xe, xi], column_scale)?;
        self.psc_scatter_transform_unchecked(classes, t, xc, xe, xi, column_scale, nodal)
    }

    // The backend's kernels behind the checked methods above, given checked arguments.

    /// [`PscKernels::hierarchical_transform`] on checked arguments.
    fn hierarchical_transform_unchecked(
        &self,
        t: &HierarchicalTransform<Self>,
        x: &mut Block<Self>,
        transpose: bool,
    ) -> Result<()>;

    /// [`PscKernels::psc_gather`] on checked arguments.
    fn psc_gather_unchecked(
        &self,
        classes: &Classes<Self>,
        nodal: &Block<Self>,
        bc: &mut Block<Self>,
        be: &mut Block<Self>,
        bi: &mut Block<Self>,
        column_scale: &mut Data<Self>,
    ) -> Result<()>;

    /// [`PscKernels::psc_scatter`] on checked arguments.
    fn psc_scatter_unchecked(
        &self,
        classes: &Classes<Self>,
        xc: &Block<Self>,
        xe: &Block<Self>,
        xi: &Block<Self>,
        column_scale: &Data<Self>,
        nodal: &mut Block<Self>,
    ) -> Result<()>;

    /// [`PscKernels::psc_transform_gather`] on checked arguments (by default the passes
    /// one after the other).
    #[allow(clippy::too_many_arguments)]
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
        self.copy(b.view(), work.view_mut())?;
        self.hierarchical_transform_unchecked(t, work, true)?;
        self.psc_gather_unchecked(classes, work, bc, be, bi, column_scale)
    }

    /// [`PscKernels::psc_scatter_transform`] on checked arguments (by default the passes
    /// one after the other).
    #[allow(clippy::too_many_arguments)]
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
        self.psc_scatter_unchecked(classes, xc, xe, xi, column_scale, nodal)?;
        self.hierarchical_transform_unchecked(t, nodal, false)
    }
}
