//! A kernel's name by the precisions of its operands, and the error of a precision
//! combination a backend has no kernel for.

use crate::error::Error;
use crate::precision::Precision;

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

/// The error of a kernel given data of a precision (or combination) it has no variant for.
pub fn unsupported(op: &str, precisions: &[Precision]) -> Error {
    Error::Backend(format!(
        "no kernel {}: {op} has no variant for these precisions",
        kernel_name(op, precisions)
    ))
}
