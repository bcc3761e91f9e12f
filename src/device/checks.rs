//! The argument checks of every kernel: shapes, lengths, layouts and the precisions that
//! must agree. The kernel-family traits run them once, in their public methods, before
//! they hand the arguments to a backend's `*_unchecked` kernel; no backend repeats them.
//! What stays in a backend is what only it knows: the precision combinations it has a
//! kernel for ([`super::unsupported`]) and its own limits (cuBLAS's 32-bit sizes).

use super::multigrid::Direction;
use super::psc::{Classes, HierarchicalTransform};
use super::stokes::{Grid, VankaRelax, PATCH};
use super::{
    unsupported, Block, Data, Device, GridShape, Layout, LevelTransfer, MatMut, MatRef, Stats,
};
use crate::error::{Error, Result};
use crate::precision::{GemmMath, Precision};

/// Fails unless two lengths a kernel pairs up agree.
pub(crate) fn check_len(what: &str, a: usize, b: usize) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "{what}: lengths {a} and {b} differ"
        )))
    }
}

/// Fails unless a buffer of `len` values reaches `end`.
pub(crate) fn check_room(what: &str, len: usize, end: usize) -> Result<()> {
    if end <= len {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "{what}: values up to {end} in a buffer of {len}"
        )))
    }
}

/// Fails unless every operand of `op` has the first one's precision (the error names the
/// kernel variant that would be needed).
pub(crate) fn check_one_precision(op: &str, precisions: &[Precision]) -> Result<()> {
    match precisions.first() {
        Some(&p) if precisions.iter().any(|&q| q != p) => Err(unsupported(op, precisions)),
        _ => Ok(()),
    }
}

/// Fails unless every operand of `op` is f64 (the error names the first precision).
pub(crate) fn check_f64(op: &str, precisions: &[Precision]) -> Result<()> {
    match precisions.iter().find(|&&p| p != Precision::F64) {
        Some(&p) => Err(unsupported(op, &[p])),
        None => Ok(()),
    }
}

/// Fails unless two blocks a column-wise kernel pairs up agree in length, layout and
/// precision.
pub(crate) fn check_block_pair<D: Device>(op: &str, x: &Block<D>, y: &Block<D>) -> Result<()> {
    check_len(op, x.len(), y.len())?;
    if x.layout() != y.layout() || x.precision() != y.precision() {
        return Err(Error::Backend(format!(
            "{op}: blocks differ in layout or precision"
        )));
    }
    Ok(())
}

/// Fails unless `b` is a column-major `rows × cols` block (the CSR and PSC kernels' blocks).
pub(crate) fn check_col_major<D: Device>(
    what: &str,
    b: &Block<D>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    if b.layout() == Layout::ColMajor && b.rows() == rows && b.cols() == cols {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "{what}: a {}×{} {:?} block where a {rows}×{cols} column-major one belongs",
            b.rows(),
            b.cols(),
            b.layout()
        )))
    }
}

/// Fails unless `b` is node-major (or a single column, the same in both layouts) with `rows`
/// rows and `cols` columns (the multigrid kernels' blocks).
pub(crate) fn check_node_major<D: Device>(
    what: &str,
    b: &Block<D>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let layout_fits = b.layout() == Layout::NodeMajor || b.cols() == 1;
    if layout_fits && b.rows() == rows && b.cols() == cols {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "{what}: a {}×{} {:?} block where a {rows}×{cols} node-major one belongs",
            b.rows(),
            b.cols(),
            b.layout()
        )))
    }
}

/// Fails unless the statistics are for `cols` columns.
pub(crate) fn check_stats<D: Device>(what: &str, stats: &Stats<D>, cols: usize) -> Result<()> {
    if stats.nrhs() == cols {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "{what}: statistics of {} columns for a block of {cols}",
            stats.nrhs()
        )))
    }
}

/// Fails unless `alpha` holds one coefficient per column.
pub(crate) fn check_per_column(what: &str, alpha: &[f64], cols: usize) -> Result<()> {
    if alpha.len() == cols {
        Ok(())
    } else {
        Err(Error::Backend(format!("{what}: one α per column")))
    }
}

/// TF32 math rounds f32 operands: any other storage is refused.
pub(crate) fn check_gemm_math(math: GemmMath, operands: Precision) -> Result<()> {
    if math == GemmMath::Tf32 && operands != Precision::F32 {
        return Err(Error::Backend(format!(
            "a GEMM in TF32 takes f32 operands, not {operands}"
        )));
    }
    Ok(())
}

/// The last element an operand of `rows × cols` at these strides reaches, plus one.
fn extent(rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * row_stride + (cols - 1) * col_stride + 1
    }
}

/// Fails unless C = A·B fits: (m×k)·(k×n) into m×n, every operand inside its buffer, A and
/// B in one storage precision S, C in S or S's compute precision, and TF32 math on f32.
pub(crate) fn check_gemm<D: Device>(
    a: &MatRef<'_, D>,
    b: &MatRef<'_, D>,
    c: &MatMut<'_, D>,
    math: GemmMath,
) -> Result<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if b.rows != k || c.rows != m || c.cols != n {
        return Err(Error::Backend(format!(
            "GEMM: ({m}×{k})·({}×{n}) into {}×{}",
            b.rows, c.rows, c.cols
        )));
    }
    for (operand, what) in [(a, "left operand"), (b, "right operand")] {
        if operand.end() > operand.data.len() {
            return Err(Error::Backend(format!(
                "GEMM: the {what} ({}×{}) exceeds its buffer",
                operand.rows, operand.cols
            )));
        }
    }
    if c.offset + extent(m, n, 1, c.ld) > c.data.len() {
        return Err(Error::Backend(format!(
            "GEMM: the result ({m}×{n}) exceeds its buffer"
        )));
    }
    let (sp, cp) = (a.precision(), c.precision());
    if b.precision() != sp || !(cp == sp || cp == sp.compute()) {
        return Err(unsupported("gemm", &[sp, b.precision(), cp]));
    }
    check_gemm_math(math, sp)
}

/// Fails unless the last product of a batch of `count` at these strides lies inside each
/// buffer (the first is [`check_gemm`]'s).
pub(crate) fn check_gemm_batch<D: Device>(
    a: &MatRef<'_, D>,
    b: &MatRef<'_, D>,
    c: &MatMut<'_, D>,
    count: usize,
    strides: [usize; 3],
) -> Result<()> {
    let last = count.saturating_sub(1);
    let inside = |offset: usize, stride: usize, extent: usize, len: usize| {
        offset + last * stride + extent <= len
    };
    if inside(
        a.offset,
        strides[0],
        extent(a.rows, a.cols, a.row_stride, a.col_stride),
        a.data.len(),
    ) && inside(
        b.offset,
        strides[1],
        extent(b.rows, b.cols, b.row_stride, b.col_stride),
        b.data.len(),
    ) && inside(
        c.offset,
        strides[2],
        extent(c.rows, c.cols, 1, c.ld),
        c.data.len(),
    ) {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "batched GEMM: {count} products at strides ({}, {}, {}) exceed their buffers",
            strides[0], strides[1], strides[2]
        )))
    }
}

/// Fails unless y = A x fits: A column-major inside its buffer (square for `op` = "SYMV"),
/// x and y long enough and in A's compute precision.
pub(crate) fn check_gemv<D: Device>(
    op: &str,
    a: &MatRef<'_, D>,
    x: (usize, Precision),
    y: (usize, Precision),
) -> Result<()> {
    let (m, n) = (a.rows, a.cols);
    if a.end() > a.data.len() {
        return Err(Error::Backend(format!(
            "{op}: the matrix ({m}×{n}) exceeds its buffer"
        )));
    }
    let square = op != "SYMV" || m == n;
    if !square || a.row_stride != 1 || x.0 < n || y.0 < m {
        return Err(Error::Backend(format!(
            "{op}: a {m}×{n} column-major matrix with vectors of {} and {}",
            x.0, y.0
        )));
    }
    let sp = a.precision();
    if x.1 != sp.compute() || y.1 != sp.compute() {
        return Err(unsupported(&op.to_lowercase(), &[sp, x.1, y.1]));
    }
    Ok(())
}

/// Fails unless a Gram-Schmidt step fits: f64 vectors of w's length, a coefficient in h for
/// each.
pub(crate) fn check_gram_schmidt<D: Device>(
    basis: &[Block<D>],
    w: &Block<D>,
    h: &[f64],
) -> Result<()> {
    if w.precision() != Precision::F64 || basis.iter().any(|v| v.precision() != Precision::F64) {
        return Err(unsupported("orthogonalize", &[w.precision()]));
    }
    if basis.iter().any(|v| v.len() != w.len()) || h.len() < basis.len() {
        return Err(Error::Backend(
            "orthogonalize: vectors of different lengths".into(),
        ));
    }
    Ok(())
}

/// Fails unless a grid transfer is between two uniform grids one refinement apart.
pub(crate) fn check_grids(fine: GridShape, coarse: GridShape) -> Result<()> {
    if fine.dim == coarse.dim && (fine.dim == 2 || fine.dim == 3) && fine.m == 2 * coarse.m + 1 {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "grid transfer between {fine:?} and {coarse:?}: not one uniform refinement apart"
        )))
    }
}

/// Fails unless a grid transfer in `direction` fits: `src` and `dst` node-major blocks of
/// the levels' sizes with one scale per column and statistics for them, and grids one
/// refinement apart.
pub(crate) fn check_transfer<D: Device>(
    direction: Direction,
    transfer: &LevelTransfer<D>,
    src: &Block<D>,
    dst: &Block<D>,
    scale: &[f64],
    stats: &Stats<D>,
) -> Result<()> {
    let what = direction.name();
    let nrhs = src.cols();
    let (fine_rows, coarse_rows) = transfer.sizes();
    let (src_rows, dst_rows) = match direction {
        Direction::Restrict => (fine_rows, coarse_rows),
        Direction::ProlongateAdd => (coarse_rows, fine_rows),
    };
    check_node_major(what, src, src_rows, nrhs)?;
    check_node_major(what, dst, dst_rows, nrhs)?;
    check_stats(what, stats, nrhs)?;
    if scale.len() != nrhs {
        return Err(Error::Backend(format!(
            "{what}: {} scales for {nrhs} columns",
            scale.len()
        )));
    }
    if let LevelTransfer::Grid { fine, coarse } = transfer {
        check_grids(*fine, *coarse)?;
    }
    Ok(())
}

/// Fails unless `x` is a column-major block of the transform's unknowns.
pub(crate) fn check_transform<D: Device>(t: &HierarchicalTransform<D>, x: &Block<D>) -> Result<()> {
    if x.rows() != t.len() || x.layout() != Layout::ColMajor {
        return Err(Error::Backend(format!(
            "hierarchical_transform: a {}×{} block for {} unknowns",
            x.rows(),
            x.cols(),
            t.len()
        )));
    }
    Ok(())
}

/// Fails unless the PSC blocks are column-major with the classes' sizes and one precision
/// (the nodal block's, which it returns).
pub(crate) fn check_psc_blocks<D: Device>(
    op: &str,
    classes: &Classes<D>,
    nodal: &Block<D>,
    parts: [&Block<D>; 3],
    column_scale: &Data<D>,
) -> Result<Precision> {
    let (nc, ne, ni) = classes.sizes;
    let k = nodal.cols();
    let p = nodal.precision();
    let shapes_ok = nodal.layout() == Layout::ColMajor
        && nodal.rows() == classes.unknowns
        && parts
            .iter()
            .zip([nc, ne, ni])
            .all(|(b, rows)| b.rows() == rows && b.cols() == k && b.layout() == Layout::ColMajor)
        && column_scale.len() == k;
    if !shapes_ok {
        return Err(Error::Backend(format!(
            "{op}: blocks do not match |C| = {nc}, |E| = {ne}, {ni} I slots, {} unknowns and {k} columns",
            classes.unknowns
        )));
    }
    if parts.iter().any(|b| b.precision() != p)
        || column_scale.precision() != p
        || classes.l_c_inv.precision() != p
    {
        return Err(unsupported(op, &[p]));
    }
    Ok(p)
}

/// Fails unless `b` has the shape, layout and precision of the workspace `work`.
pub(crate) fn check_same_block<D: Device>(op: &str, b: &Block<D>, work: &Block<D>) -> Result<()> {
    if (b.rows(), b.cols(), b.layout(), b.precision())
        != (work.rows(), work.cols(), work.layout(), work.precision())
    {
        return Err(Error::Backend(format!(
            "{op}: b is {}×{} {:?} {}, the workspace {}×{} {:?} {}",
            b.rows(),
            b.cols(),
            b.layout(),
            b.precision(),
            work.rows(),
            work.cols(),
            work.layout(),
            work.precision()
        )));
    }
    Ok(())
}

/// Fails unless `b` is a flat [ux | uy | p] vector of `grid`.
pub(crate) fn check_flow<D: Device>(what: &str, b: &Block<D>, grid: Grid) -> Result<()> {
    if b.len() == grid.flow_len() {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "{what}: a vector of {} entries for a flow of {}",
            b.len(),
            grid.flow_len()
        )))
    }
}

/// Fails unless the vectors in `given` are in the compute precision of storage `p`.
pub(crate) fn check_compute(what: &str, p: Precision, given: &[Precision]) -> Result<()> {
    if given.iter().all(|&g| g == p.compute()) {
        Ok(())
    } else {
        let mut all = vec![p];
        all.extend_from_slice(given);
        Err(unsupported(what, &all))
    }
}

/// Fails unless a Vanka relaxation fits: r and x flows of its grid in the compute precision
/// of the stored inverses, a patch map entry per patch, and (tuned, with interior patches)
/// one 51 × 51 interior inverse in the compute precision.
pub(crate) fn check_vanka_relax<D: Device>(
    v: &VankaRelax<'_, D>,
    r: &Block<D>,
    x: &Block<D>,
) -> Result<()> {
    check_flow("vanka_relax", r, v.grid)?;
    check_flow("vanka_relax", x, v.grid)?;
    let patches = v.grid.pressure_len();
    check_len("vanka_relax", D::buffer_len(&v.maps.column_of), patches)?;
    check_len(
        "vanka_relax",
        D::buffer_len(&v.maps.inverse_of_column),
        patches,
    )?;
    let sp = v.inverses.precision();
    check_compute("vanka_relax", sp, &[r.precision(), x.precision()])?;
    if v.interior_columns > 0 {
        check_len(
            "vanka_relax interior inverse",
            v.interior_inverse.len(),
            PATCH * PATCH,
        )?;
        check_compute("vanka_relax", sp, &[v.interior_inverse.precision()])?;
    }
    Ok(())
}
