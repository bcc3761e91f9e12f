//! What every backend checks of a kernel's arguments, and the names of the kernels it
//! reports.

use super::{Block, Device, Layout};
use crate::error::{Error, Result};
use crate::precision::{GemmMath, Precision};

/// A kernel's name, `<op>_<dtype>`, or `<op>_<storage>_<compute>` where the precisions of
/// its operands differ (repeats collapsed: `csr_spmm` on f64 × f32 × f32 is
/// `csr_spmm_f64_f32`). Each backend's entry points follow it (the CPU's generic kernels are
/// instantiated per storage/compute pair under the same `<op>`).
pub fn kernel_name(op: &str, precisions: &[Precision]) -> String {
    let mut name = op.to_string();
    let mut last = None;
    for &p in precisions {
        if last != Some(p) {
            name.push('_');
            name.push_str(p.name());
            last = Some(p);
        }
    }
    name
}

/// 1/s per column; a zero scale (an inactive column) gives zero.
pub(crate) fn inverse_scale(s: f64) -> f64 {
    if s > 0.0 {
        1.0 / s
    } else {
        0.0
    }
}

/// Fails unless two lengths a kernel pairs up agree (every backend's argument check).
pub(crate) fn check_len(what: &str, a: usize, b: usize) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "{what}: lengths {a} and {b} differ"
        )))
    }
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

/// The error of a kernel given data of a precision (or combination) it does not take.
/// TF32 math rounds f32 operands: any other storage is refused.
pub fn check_gemm_math(math: GemmMath, operands: Precision) -> Result<()> {
    if math == GemmMath::Tf32 && operands != Precision::F32 {
        return Err(Error::Backend(format!(
            "a GEMM in TF32 takes f32 operands, not {operands}"
        )));
    }
    Ok(())
}

pub fn unsupported(op: &str, precisions: &[Precision]) -> Error {
    Error::Backend(format!(
        "no kernel {}: {op} has no variant for these precisions",
        kernel_name(op, precisions)
    ))
}
