//! The set-up's dense inversions on the GPU (docs/mathematics.md §3: Π⁻¹ = (Λ − BᵀB)⁻¹,
//! M2's Λ⁻¹), in f64 with cuSOLVER's and cuBLAS's 64-bit interfaces (|E|² = 3.8·10⁹ entries
//! at h = 1/1024 is past 32-bit indexing):
//!
//!   A ← A − GᵀG (SYRK, lower), A = LLᵀ (potrf), L ← L⁻¹ (by blocks), A⁻¹ = L⁻ᵀL⁻¹,
//!
//! the last product in place by blocks of rows: with M = L⁻¹ lower triangular (its strict
//! upper triangle zeroed), rows i..i+b of MᵀM, columns 0..i+b, are M(i.., i..i+b)ᵀ ·
//! M(i.., 0..i+b): one GEMM into a b-row scratch, copied back. Later blocks read only rows
//! below, which are still M. The work is n³ in all (about a minute of the GPU's f64 at
//! h = 1/1024, where the host's takes hours on a few cores); the matrix crosses PCIe once
//! each way, and the caller mirrors the lower triangle.

use std::ffi::c_void;

use cudarc::cublas::sys as blas;
use cudarc::cusolver::sys as solver;
use cudarc::driver::{result, CudaSlice, DevicePtr, DevicePtrMut};
use faer::Mat;

use super::device::{driver, Cuda};
use crate::device::{DenseInverse, Device, Inverted};
use crate::error::{Error, Result};

/// Rows of MᵀM one GEMM forms: the scratch holds ROW_BLOCK × n values.
const ROW_BLOCK: usize = 512;

/// One block of rows of the in-place product MᵀM of a lower-triangular M (n × n, leading
/// dimension `ld`): the GEMM W = M(start.., start..start+rows)ᵀ · M(start.., 0..start+rows)
/// (rows × (start+rows), depth n − start), then rows start.. of the result ← W. Offsets in
/// entries of the column-major matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GramRows {
    pub rows: usize,
    pub cols: usize,
    pub depth: usize,
    /// M(start, start): the transposed left operand.
    pub left: usize,
    /// M(start, 0): the right operand, and where W goes back.
    pub right: usize,
}

/// The row blocks of MᵀM in the order that keeps every operand unwritten until read.
pub fn gram_rows(n: usize, ld: usize, block: usize) -> Vec<GramRows> {
    (0..n)
        .step_by(block.max(1))
        .map(|start| {
            let rows = block.min(n - start);
            GramRows {
                rows,
                cols: start + rows,
                depth: n - start,
                left: start + start * ld,
                right: start,
            }
        })
        .collect()
}

/// Columns of L⁻¹ one step of the blocked in-place inversion forms (LAPACK's dtrtri order).
const INVERSE_BLOCK: usize = 512;

/// One step of the in-place inversion of a lower-triangular L (n × n, leading dimension
/// `ld`), the steps taken from the last block of columns to the first. With the trailing
/// block T = L(j+b.., j+b..) already inverted, the panel P = L(j+b.., j..j+b) becomes
/// −T·P·L_jj⁻¹ (a TRMM, then a TRSM against the still uninverted diagonal block), then
/// L_jj ← L_jj⁻¹. Offsets in entries of the column-major matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LowerInverseStep {
    /// b: the block's columns.
    pub size: usize,
    /// Rows below the diagonal block (the panel's rows; 0 for the last block).
    pub below: usize,
    /// L(j, j).
    pub diagonal: usize,
    /// L(j+b, j+b): the inverted trailing block.
    pub trailing: usize,
    /// L(j+b, j): the panel.
    pub panel: usize,
}

/// The steps of the blocked inversion, last block of columns first.
pub fn lower_inverse_steps(n: usize, ld: usize, block: usize) -> Vec<LowerInverseStep> {
    let mut steps: Vec<_> = (0..n)
        .step_by(block.max(1))
        .map(|j| {
            let size = block.min(n - j);
            let next = j + size;
            LowerInverseStep {
                size,
                below: n - next,
                diagonal: j + j * ld,
                trailing: next + next * ld,
                panel: next + j * ld,
            }
        })
        .collect();
    steps.reverse();
    steps
}

fn blas_status(what: &str, status: blas::cublasStatus_t) -> Result<()> {
    if status == blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::Backend(format!("cuBLAS {what}: {status:?}")))
    }
}

fn solver_status(what: &str, status: solver::cusolverStatus_t) -> Result<()> {
    if status == solver::cusolverStatus_t::CUSOLVER_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::Backend(format!("cuSOLVER {what}: {status:?}")))
    }
}

/// A cuSOLVER handle on the rank's stream, and its parameters object.
struct Solver {
    handle: solver::cusolverDnHandle_t,
    params: solver::cusolverDnParams_t,
}

impl Solver {
    fn new(dev: &Cuda) -> Result<Self> {
        let mut handle = std::ptr::null_mut();
        // SAFETY: an out-pointer to a local.
        solver_status("create", unsafe { solver::cusolverDnCreate(&mut handle) })?;
        // From here on the handle (and the parameters, once created) are freed on drop.
        let mut solver = Solver {
            handle,
            params: std::ptr::null_mut(),
        };
        // SAFETY: a live handle; the stream outlives it (the device holds both); an
        // out-pointer into the solver.
        unsafe {
            solver_status(
                "set stream",
                solver::cusolverDnSetStream(handle, dev.stream().cu_stream() as _),
            )?;
            solver_status(
                "parameters",
                solver::cusolverDnCreateParams(&mut solver.params),
            )?;
        }
        Ok(solver)
    }
}

impl Drop for Solver {
    fn drop(&mut self) {
        // SAFETY: created in `new`; nothing uses them after the solver is dropped.
        unsafe {
            if !self.params.is_null() {
                solver::cusolverDnDestroyParams(self.params);
            }
            solver::cusolverDnDestroy(self.handle);
        }
    }
}

impl Cuda {
    /// Bytes the GPU inversion of an n × n matrix with a k × n Gram factor holds.
    fn inverse_bytes(n: usize, k: usize) -> usize {
        8 * (n * n + ROW_BLOCK * n + k * n) + (256 << 20)
    }

    /// cuSOLVER's `info` (a failed pivot, 1-based; 0 on success), read back.
    fn solver_info(&self, info: &CudaSlice<i32>) -> Result<i32> {
        let mut host = [0i32];
        self.stream()
            .memcpy_dtoh(info, &mut host)
            .and_then(|()| self.stream().synchronize())
            .map_err(|e| driver("cuSOLVER info", e))?;
        Ok(host[0])
    }

    fn device_zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>> {
        self.stream()
            .alloc_zeros(len)
            .map_err(|e| driver(&format!("allocating {len} values"), e))
    }

    /// L ← L⁻¹ in place for a lower-triangular, non-singular L on the device (n × n,
    /// leading dimension `ld`), by [`lower_inverse_steps`]: TRMM and TRSM on the panels,
    /// cuSOLVER's Xtrtri on each diagonal block in a contiguous scratch.
    fn invert_lower_in_place(
        &self,
        handle: blas::cublasHandle_t,
        solver: &Solver,
        pa: *mut f64,
        n: usize,
        ld: usize,
    ) -> Result<()> {
        use blas::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT;
        use blas::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER;
        use blas::cublasOperation_t::CUBLAS_OP_N;
        use blas::cublasSideMode_t::{CUBLAS_SIDE_LEFT, CUBLAS_SIDE_RIGHT};
        let stream = self.stream();
        let (one, minus_one, zero) = (1.0f64, -1.0f64, 0.0f64);
        let b = INVERSE_BLOCK.min(n) as i64;
        let mut block: CudaSlice<f64> = self.zeros((b * b).max(1) as usize)?;
        let (pb, _b) = block.device_ptr_mut(stream);
        let pb = pb as *mut f64;
        let info: CudaSlice<i32> = self.device_zeros(1)?;
        let (p_info, _info_record) = info.device_ptr(stream);
        let (lower, non_unit) = (
            solver::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
            solver::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT,
        );
        let r64 = solver::cudaDataType::CUDA_R_64F;
        let (mut device_bytes, mut host_bytes) = (0usize, 0usize);
        // SAFETY: the scratch is b × b (ld b) on the device; out-pointers to locals.
        solver_status("trtri workspace", unsafe {
            solver::cusolverDnXtrtri_bufferSize(
                solver.handle,
                lower,
                non_unit,
                b,
                r64,
                pb as *mut c_void,
                b,
                &mut device_bytes,
                &mut host_bytes,
            )
        })?;
        let mut work: CudaSlice<u8> = self.device_zeros(device_bytes.max(1))?;
        let (pw, _w) = work.device_ptr_mut(stream);
        let mut host_work = vec![0u8; host_bytes.max(1)];
        for step in lower_inverse_steps(n, ld, INVERSE_BLOCK) {
            let (size, below) = (step.size as i64, step.below as i64);
            // SAFETY: every operand lies inside A (n × n, ld `ld`) at the offsets of
            // `lower_inverse_steps`, or inside the b × b scratch (size ≤ b); the TRMM
            // writes its right operand in place (cuBLAS's documented in-place form:
            // C = B); the scalars are host values living through the calls.
            unsafe {
                if below > 0 {
                    blas_status(
                        "TRMM (inverse panel)",
                        blas::cublasDtrmm_v2_64(
                            handle,
                            CUBLAS_SIDE_LEFT,
                            CUBLAS_FILL_MODE_LOWER,
                            CUBLAS_OP_N,
                            CUBLAS_DIAG_NON_UNIT,
                            below,
                            size,
                            &one,
                            pa.add(step.trailing),
                            ld as i64,
                            pa.add(step.panel),
                            ld as i64,
                            pa.add(step.panel),
                            ld as i64,
                        ),
                    )?;
                    blas_status(
                        "TRSM (inverse panel)",
                        blas::cublasDtrsm_v2_64(
                            handle,
                            CUBLAS_SIDE_RIGHT,
                            CUBLAS_FILL_MODE_LOWER,
                            CUBLAS_OP_N,
                            CUBLAS_DIAG_NON_UNIT,
                            below,
                            size,
                            &minus_one,
                            pa.add(step.diagonal),
                            ld as i64,
                            pa.add(step.panel),
                            ld as i64,
                        ),
                    )?;
                }
                // The diagonal block out to the scratch, inverted there, and back.
                blas_status(
                    "GEAM (diagonal block out)",
                    blas::cublasDgeam_64(
                        handle,
                        CUBLAS_OP_N,
                        CUBLAS_OP_N,
                        size,
                        size,
                        &one,
                        pa.add(step.diagonal),
                        ld as i64,
                        &zero,
                        pb,
                        size,
                        pb,
                        size,
                    ),
                )?;
                solver_status(
                    "trtri",
                    solver::cusolverDnXtrtri(
                        solver.handle,
                        lower,
                        non_unit,
                        size,
                        r64,
                        pb as *mut c_void,
                        size,
                        pw as *mut c_void,
                        device_bytes,
                        host_work.as_mut_ptr() as *mut c_void,
                        host_bytes,
                        p_info as *mut i32,
                    ),
                )?;
                blas_status(
                    "GEAM (diagonal block back)",
                    blas::cublasDgeam_64(
                        handle,
                        CUBLAS_OP_N,
                        CUBLAS_OP_N,
                        size,
                        size,
                        &one,
                        pb,
                        size,
                        &zero,
                        pa.add(step.diagonal),
                        ld as i64,
                        pa.add(step.diagonal),
                        ld as i64,
                    ),
                )?;
            }
            if self.solver_info(&info)? != 0 {
                return Err(Error::Backend(
                    "cuSOLVER trtri: a zero diagonal entry after a successful Cholesky".into(),
                ));
            }
        }
        Ok(())
    }

    fn gpu_spd_inverse(&self, a: &mut Mat<f64>, gram: Option<&Mat<f64>>) -> Result<Inverted> {
        let n = a.nrows();
        let ld = n;
        let stream = self.stream();
        self.bind()?;
        // A, column by column into one contiguous device matrix (faer pads its columns).
        let mut dev_a: CudaSlice<f64> = self.zeros(n * n)?;
        for j in 0..n {
            let column = a
                .col(j)
                .try_as_col_major()
                .expect("faer columns are contiguous");
            let mut view = dev_a.slice_mut(j * ld..j * ld + n);
            stream
                .memcpy_htod(column.as_slice(), &mut view)
                .map_err(|e| driver("uploading the set-up's matrix", e))?;
        }
        let handle = *self.blas()?.handle();
        let (one, minus_one, zero) = (1.0f64, -1.0f64, 0.0f64);
        let (pa, _record) = dev_a.device_ptr_mut(stream);
        let pa = pa as *mut f64;
        if let Some(g) = gram {
            let k = g.nrows();
            let packed: Vec<f64> = (0..n)
                .flat_map(|j| g.col(j).iter().copied().collect::<Vec<_>>())
                .collect();
            let dev_g = self.upload(&packed)?;
            let (pg, _read) = dev_g.device_ptr(stream);
            // SAFETY: G is k × n (ld k) and A n × n (ld n) on the device, both live; the
            // scalars are host values living through the call (host pointer mode).
            blas_status("SYRK (A − GᵀG)", unsafe {
                blas::cublasDsyrk_v2_64(
                    handle,
                    blas::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
                    blas::cublasOperation_t::CUBLAS_OP_T,
                    n as i64,
                    k as i64,
                    &minus_one,
                    pg as *const f64,
                    k.max(1) as i64,
                    &one,
                    pa,
                    ld as i64,
                )
            })?;
        }
        let solver = Solver::new(self)?;
        let lower = solver::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER;
        let r64 = solver::cudaDataType::CUDA_R_64F;
        let info: CudaSlice<i32> = self.device_zeros(1)?;
        let (p_info, _info_record) = info.device_ptr(stream);
        // Cholesky, lower.
        let (mut device_bytes, mut host_bytes) = (0usize, 0usize);
        // SAFETY: A is n × n (ld n) on the device; the sizes are out-pointers to locals.
        solver_status("potrf workspace", unsafe {
            solver::cusolverDnXpotrf_bufferSize(
                solver.handle,
                solver.params,
                lower,
                n as i64,
                r64,
                pa as *const c_void,
                ld as i64,
                r64,
                &mut device_bytes,
                &mut host_bytes,
            )
        })?;
        let mut work: CudaSlice<u8> = self.device_zeros(device_bytes.max(1))?;
        let mut host_work = vec![0u8; host_bytes.max(1)];
        {
            let (pw, _w) = work.device_ptr_mut(stream);
            // SAFETY: A as above, the workspaces of the sizes cuSOLVER asked for, `info`
            // one device i32.
            solver_status("potrf", unsafe {
                solver::cusolverDnXpotrf(
                    solver.handle,
                    solver.params,
                    lower,
                    n as i64,
                    r64,
                    pa as *mut c_void,
                    ld as i64,
                    r64,
                    pw as *mut c_void,
                    device_bytes,
                    host_work.as_mut_ptr() as *mut c_void,
                    host_bytes,
                    p_info as *mut i32,
                )
            })?;
        }
        let failed = self.solver_info(&info)?;
        if failed > 0 {
            return Ok(Inverted::NotPositiveDefinite {
                index: failed as usize - 1,
            });
        }
        drop(work);
        // L ← L⁻¹ (lower, non-unit) by blocks of columns: cuSOLVER's Xtrtri on the whole
        // matrix refused n = 61,504 (CUSOLVER_STATUS_INVALID_VALUE on an H200, 2026-11-27),
        // so it only inverts the diagonal blocks, copied out to a small scratch.
        self.invert_lower_in_place(handle, &solver, pa, n, ld)?;
        // M's strict upper triangle ← 0 (potrf and trtri leave A's there), so the row
        // blocks' GEMMs read M itself.
        for j in 1..n {
            // SAFETY: column j's first j entries lie inside A.
            unsafe {
                result::memset_d8_async(
                    pa as u64 + (8 * j * ld) as u64,
                    0,
                    8 * j,
                    stream.cu_stream(),
                )
            }
            .map_err(|e| driver("zeroing the upper triangle", e))?;
        }
        // A ← MᵀM by blocks of rows.
        let mut scratch: CudaSlice<f64> = self.zeros(ROW_BLOCK * n)?;
        let (pw, _w) = scratch.device_ptr_mut(stream);
        let pw = pw as *mut f64;
        for b in gram_rows(n, ld, ROW_BLOCK) {
            let (m, cols, depth) = (b.rows as i64, b.cols as i64, b.depth as i64);
            // SAFETY: every operand lies inside A (n × n, ld n) or the scratch
            // (ROW_BLOCK × n, ld ROW_BLOCK): rows ≤ ROW_BLOCK, cols ≤ n, offsets from
            // `gram_rows`; the scratch does not overlap A.
            unsafe {
                blas_status(
                    "GEMM (L⁻ᵀL⁻¹ rows)",
                    blas::cublasDgemm_v2_64(
                        handle,
                        blas::cublasOperation_t::CUBLAS_OP_T,
                        blas::cublasOperation_t::CUBLAS_OP_N,
                        m,
                        cols,
                        depth,
                        &one,
                        pa.add(b.left),
                        ld as i64,
                        pa.add(b.right),
                        ld as i64,
                        &zero,
                        pw,
                        ROW_BLOCK as i64,
                    ),
                )?;
                blas_status(
                    "GEAM (copy back)",
                    blas::cublasDgeam_64(
                        handle,
                        blas::cublasOperation_t::CUBLAS_OP_N,
                        blas::cublasOperation_t::CUBLAS_OP_N,
                        m,
                        cols,
                        &one,
                        pw,
                        ROW_BLOCK as i64,
                        &zero,
                        pw,
                        ROW_BLOCK as i64,
                        pa.add(b.right),
                        ld as i64,
                    ),
                )?;
            }
        }
        drop(_w);
        drop(_record);
        // Back to the host (the caller mirrors the lower triangle).
        for j in 0..n {
            let column = a
                .col_mut(j)
                .try_as_col_major_mut()
                .expect("faer columns are contiguous");
            self.read(&dev_a, j * ld, column.as_slice_mut())?;
        }
        Ok(Inverted::Done)
    }
}

impl DenseInverse for Cuda {
    /// On the GPU when cuSOLVER is there and the matrix fits the free memory; else left
    /// to the host, with the reason in the log.
    fn spd_inverse(&self, a: &mut Mat<f64>, gram: Option<&Mat<f64>>) -> Result<Inverted> {
        let n = a.nrows();
        // SAFETY: only probes whether the library can be loaded.
        if !unsafe { solver::is_culib_present() } {
            log::warn!("cuSOLVER not found: the {n}×{n} set-up inversion runs on the host");
            return Ok(Inverted::LeftToHost);
        }
        let need = Self::inverse_bytes(n, gram.map_or(0, |g| g.nrows()));
        let free = self.free_memory()?.unwrap_or(0);
        if need > free {
            log::warn!(
                "the {n}×{n} set-up inversion needs {:.1} GB of GPU memory, {:.1} GB free: it runs on the host",
                need as f64 / 1e9,
                free as f64 / 1e9
            );
            return Ok(Inverted::LeftToHost);
        }
        let start = std::time::Instant::now();
        let inverted = self.gpu_spd_inverse(a, gram)?;
        log::info!(
            "{n}×{n} set-up inversion on the GPU (cuSOLVER): {:.1} s",
            start.elapsed().as_secs_f64()
        );
        Ok(inverted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inversion's steps, carried out on the host in the same order and in place (the
    /// TRMM, the TRSM and the diagonal block's inverse by plain loops), give L⁻¹.
    #[test]
    fn lower_inverse_steps_invert_in_place() {
        for (n, block) in [(1, 4), (7, 3), (12, 4), (13, 5), (20, 512)] {
            let ld = n + 3;
            let l = |i: usize, j: usize| match i.cmp(&j) {
                std::cmp::Ordering::Less => 0.0,
                std::cmp::Ordering::Equal => 2.0 + (i % 3) as f64,
                std::cmp::Ordering::Greater => ((i * 5 + j * 11) % 7) as f64 / 8.0 - 0.4,
            };
            let mut a = vec![f64::NAN; ld * n];
            for j in 0..n {
                for i in j..n {
                    a[i + j * ld] = l(i, j);
                }
            }
            let at = |offset: usize, i: usize, j: usize| offset + i + j * ld;
            for s in lower_inverse_steps(n, ld, block) {
                // P ← T P (T lower triangular, below × below), rows from the bottom up so
                // that each row reads rows of P not yet overwritten.
                for c in 0..s.size {
                    for r in (0..s.below).rev() {
                        a[at(s.panel, r, c)] = (0..=r)
                            .map(|k| a[at(s.trailing, r, k)] * a[at(s.panel, k, c)])
                            .sum();
                    }
                }
                // P ← −P L_jj⁻¹: solve X L_jj = −P column by column from the last.
                for c in (0..s.size).rev() {
                    for r in 0..s.below {
                        let known: f64 = (c + 1..s.size)
                            .map(|k| a[at(s.panel, r, k)] * a[at(s.diagonal, k, c)])
                            .sum();
                        a[at(s.panel, r, c)] =
                            (-a[at(s.panel, r, c)] - known) / a[at(s.diagonal, c, c)];
                    }
                }
                // L_jj ← L_jj⁻¹ by forward substitution into a copy.
                let mut inverse = vec![0.0; s.size * s.size];
                for c in 0..s.size {
                    for r in c..s.size {
                        let e = if r == c { 1.0 } else { 0.0 };
                        let known: f64 = (c..r)
                            .map(|k| a[at(s.diagonal, r, k)] * inverse[k + c * s.size])
                            .sum();
                        inverse[r + c * s.size] = (e - known) / a[at(s.diagonal, r, r)];
                    }
                }
                for c in 0..s.size {
                    for r in c..s.size {
                        a[at(s.diagonal, r, c)] = inverse[r + c * s.size];
                    }
                }
            }
            for j in 0..n {
                for i in j..n {
                    let product: f64 = (j..=i).map(|k| l(i, k) * a[k + j * ld]).sum();
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!(
                        (product - want).abs() <= 1e-12,
                        "n = {n}, block {block}: (L·X)({i}, {j}) = {product}"
                    );
                }
            }
        }
    }

    /// The row blocks, carried out on the host in the same order and in place, give MᵀM
    /// of a lower-triangular M (for sizes that do and do not divide into blocks).
    #[test]
    fn gram_row_blocks_form_the_product_in_place() {
        for (n, block) in [(1, 4), (7, 3), (12, 4), (13, 5), (20, 512)] {
            let ld = n + 2; // a leading dimension past the rows, as a check of offsets
            let m = |i: usize, j: usize| {
                if i >= j {
                    1.0 + ((i * 7 + j * 3) % 5) as f64 / 4.0
                } else {
                    0.0
                }
            };
            let mut a = vec![f64::NAN; ld * n];
            for j in 0..n {
                for i in 0..n {
                    a[i + j * ld] = m(i, j);
                }
            }
            for b in gram_rows(n, ld, block) {
                let mut w = vec![0.0; b.rows * b.cols];
                for c in 0..b.cols {
                    for r in 0..b.rows {
                        w[r + c * b.rows] = (0..b.depth)
                            .map(|k| a[b.left + k + r * ld] * a[b.right + k + c * ld])
                            .sum();
                    }
                }
                for c in 0..b.cols {
                    for r in 0..b.rows {
                        a[b.right + r + c * ld] = w[r + c * b.rows];
                    }
                }
            }
            for j in 0..n {
                for i in j..n {
                    let want: f64 = (0..n).map(|k| m(k, i) * m(k, j)).sum();
                    assert!(
                        (a[i + j * ld] - want).abs() <= 1e-12 * want.abs(),
                        "n = {n}, block {block}: ({i}, {j}) {} vs {want}",
                        a[i + j * ld]
                    );
                }
            }
        }
    }
}
