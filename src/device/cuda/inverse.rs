//! The set-up's dense inversions on the GPU (SPEC §2.4: Π⁻¹ = (Λ − BᵀB)⁻¹, M2's Λ⁻¹), in
//! f64 with cuSOLVER's and cuBLAS's 64-bit interfaces (|E|² = 3.8·10⁹ entries at
//! h = 1/1024 is past 32-bit indexing):
//!
//!   A ← A − GᵀG (SYRK, lower), A = LLᵀ (potrf), L ← L⁻¹ (trtri), A⁻¹ = L⁻ᵀL⁻¹,
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
        // L ← L⁻¹ (lower, non-unit).
        let non_unit = solver::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT;
        // SAFETY: as for potrf.
        solver_status("trtri workspace", unsafe {
            solver::cusolverDnXtrtri_bufferSize(
                solver.handle,
                lower,
                non_unit,
                n as i64,
                r64,
                pa as *mut c_void,
                ld as i64,
                &mut device_bytes,
                &mut host_bytes,
            )
        })?;
        if work.len() < device_bytes {
            work = self.device_zeros(device_bytes)?;
        }
        host_work.resize(host_bytes.max(1), 0);
        {
            let (pw, _w) = work.device_ptr_mut(stream);
            // SAFETY: as for potrf.
            solver_status("trtri", unsafe {
                solver::cusolverDnXtrtri(
                    solver.handle,
                    lower,
                    non_unit,
                    n as i64,
                    r64,
                    pa as *mut c_void,
                    ld as i64,
                    pw as *mut c_void,
                    device_bytes,
                    host_work.as_mut_ptr() as *mut c_void,
                    host_bytes,
                    p_info as *mut i32,
                )
            })?;
        }
        if self.solver_info(&info)? != 0 {
            return Err(Error::Backend(
                "cuSOLVER trtri: a zero diagonal entry after a successful Cholesky".into(),
            ));
        }
        drop(work);
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
