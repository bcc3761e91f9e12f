//! This machine's ceilings: a STREAM-like triad (memory bandwidth) and GEMM peak per
//! precision (the CPU device's GEMM, the engine of the PSC products).

use rayon::prelude::*;
use serde::Serialize;

use super::time_runs;
use crate::device::{host, Cpu, Data, DenseKernels, Device, MatMut, MatRef, VectorKernels};
use crate::precision::Precision;

#[derive(Clone, Copy, Debug, Serialize)]
pub struct MachineCeilings {
    pub threads: usize,
    /// The SIMD level the CPU kernels run at (`scalar`, `avx2`, `avx512`): figures taken on
    /// machines of different levels compare only through their ratios.
    pub simd: &'static str,
    /// a = b + s·c over three 2^25-entry f64 arrays, counting 24 bytes per entry.
    pub triad_gbs: f64,
    /// Σ a over one 2^25-entry f64 array: the ceiling of kernels that only read (the SYMV
    /// of PSC with one right-hand side), which no write traffic slows.
    pub read_gbs: f64,
    /// m = n = k of the GEMMs below (f64's at [`gemm_ceiling_size`]).
    pub gemm_size: usize,
    pub gemm_gflops_f64: f64,
    pub gemm_gflops_f32: f64,
    /// f32 operands rounded to TF32 tile by tile, f32 arithmetic (the CPU's emulation of
    /// Tensor Cores' TF32 mode).
    pub gemm_gflops_tf32: f64,
    /// f16 operands, f32 arithmetic and result (no f16 arithmetic units on this CPU).
    pub gemm_gflops_f16: f64,
}

impl MachineCeilings {
    pub fn gemm_gflops(&self, p: Precision) -> f64 {
        match p {
            Precision::F64 => self.gemm_gflops_f64,
            Precision::F32 => self.gemm_gflops_f32,
            Precision::Tf32 => self.gemm_gflops_tf32,
            Precision::F16 => self.gemm_gflops_f16,
        }
    }
}

/// Triad bandwidth in GB/s, in memory allocated as the CPU device allocates its buffers
/// (in 2 MiB pages where the kernel grants them, [`host::zeroed_vec`]).
pub fn triad_gbs() -> f64 {
    let n = 1 << 25;
    let filled = |value: f64| {
        let mut v = host::zeroed_vec::<f64>(n);
        v.par_iter_mut().for_each(|x| *x = value);
        v
    };
    let (b, c, mut a) = (filled(1.0), filled(2.0), filled(0.0));
    let s = 3.0;
    let (best, _) = time_runs(5, 1.0, || {
        a.par_chunks_mut(1 << 16)
            .zip(b.par_chunks(1 << 16))
            .zip(c.par_chunks(1 << 16))
            .for_each(|((a, b), c)| {
                a.iter_mut()
                    .zip(b)
                    .zip(c)
                    .for_each(|((a, b), c)| *a = b + s * c)
            });
    });
    assert_eq!(a[n - 1], 7.0);
    24.0 * n as f64 / best / 1e9
}

/// Read bandwidth in GB/s: Σ a over a 2^25-entry f64 array in memory allocated as the
/// triad's, eight independent sums per task.
pub fn read_gbs() -> f64 {
    let n = 1 << 25;
    let mut a = host::zeroed_vec::<f64>(n);
    a.par_iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = (i % 7) as f64);
    let mut total = 0.0;
    let (best, _) = time_runs(5, 1.0, || {
        total = a
            .par_chunks(1 << 16)
            .map(|chunk| {
                let mut lanes = [0.0f64; 8];
                for piece in chunk.chunks_exact(8) {
                    for (l, &v) in lanes.iter_mut().zip(piece) {
                        *l += v;
                    }
                }
                lanes.iter().sum::<f64>()
            })
            .sum::<f64>();
    });
    // 0 + 1 + … + 6 for every whole run of seven entries, then the rest.
    let expected = (n / 7 * 21 + (0..n % 7).sum::<usize>()) as f64;
    assert_eq!(total, expected);
    8.0 * n as f64 / best / 1e9
}

/// GFLOP/s of a square product of `size` in `p` on `dev` (f16 operands multiplied in f32
/// into an f32 result, as M1 does), on non-trivial values; NaN when the device cannot hold it.
pub fn device_gemm_gflops<D: DenseKernels>(dev: &D, p: Precision, size: usize) -> f64 {
    let values: Vec<f64> = (0..size * size)
        .map(|i| ((i % 17) as f64 - 8.0) / 16.0)
        .collect();
    let (a, b, mut d) = match (
        Data::from_f64(dev, &values, p),
        Data::from_f64(dev, &values, p),
        Data::zeros(dev, size * size, p.compute()),
    ) {
        (Ok(a), Ok(b), Ok(d)) => (a, b, d),
        _ => return f64::NAN,
    };
    let (best, _) = time_runs(3, 1.0, || {
        let product = dev.run(|| {
            dev.gemm(
                MatRef::col_major(&a, 0, size, size, size),
                MatRef::col_major(&b, 0, size, size, size),
                MatMut::col_major(&mut d, 0, size, size, size),
                p.gemm_math(),
            )
            .and_then(|()| dev.synchronize())
        });
        assert!(product.is_ok(), "square GEMM shapes are valid");
    });
    2.0 * (size as f64).powi(3) / best / 1e9
}

/// Device copy bandwidth in GB/s (bytes read plus bytes written) of `len` f32 values.
pub fn device_copy_gbs<D: VectorKernels>(dev: &D, len: usize) -> f64 {
    let (src, mut dst) = match (
        Data::from_f64(dev, &vec![1.5; len], Precision::F32),
        Data::zeros(dev, len, Precision::F32),
    ) {
        (Ok(s), Ok(d)) => (s, d),
        _ => return f64::NAN,
    };
    let (best, _) = time_runs(5, 1.0, || {
        let copied = dev
            .copy(src.view(), dst.view_mut())
            .and_then(|()| dev.synchronize());
        assert!(copied.is_ok(), "equal lengths");
    });
    8.0 * len as f64 / best / 1e9
}

/// Host → device and device → host GB/s of a block of `len` f64 values through the device's
/// `write` and `read` (the path of right-hand sides and solutions; staged through pinned
/// memory on a GPU); NaN when the device cannot hold it.
pub fn device_transfer_gbs<D: Device>(dev: &D, len: usize) -> (f64, f64) {
    let host: Vec<f64> = (0..len).map(|i| i as f64).collect();
    let Ok(mut buffer) = dev.zeros::<f64>(len) else {
        return (f64::NAN, f64::NAN);
    };
    let mut back = vec![0.0; len];
    let bytes = (8 * len) as f64;
    let (up, _) = time_runs(3, 1.0, || {
        assert!(dev
            .write(&host, &mut buffer)
            .and_then(|()| dev.synchronize())
            .is_ok());
    });
    let (down, _) = time_runs(3, 1.0, || {
        assert!(dev.download(&buffer, &mut back).is_ok());
    });
    assert!(back == host, "the block came back unchanged");
    (bytes / up / 1e9, bytes / down / 1e9)
}

/// Where the GEMM ceilings are measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmSite {
    Host,
    Gpu,
}

/// The m = n = k of the GEMM ceiling in `p`: `given` (`--gemm-size`) where set, else a
/// size large enough to run at the peak — 2048 on the host, 8192 on a GPU, f64 at 3/4
/// and 1/2 of them (its products are slower, and a GPU's f64 peak comes sooner).
pub fn gemm_ceiling_size(site: GemmSite, p: Precision, given: Option<usize>) -> usize {
    match (given, site, p) {
        (Some(size), _, _) => size,
        (None, GemmSite::Host, Precision::F64) => 1536,
        (None, GemmSite::Host, _) => 2048,
        (None, GemmSite::Gpu, Precision::F64) => 4096,
        (None, GemmSite::Gpu, _) => 8192,
    }
}

/// The host's GEMM GFLOP/s in `p` (the CPU device's), at [`gemm_ceiling_size`].
pub fn gemm_gflops(p: Precision, given: Option<usize>) -> f64 {
    device_gemm_gflops(&Cpu::new(), p, gemm_ceiling_size(GemmSite::Host, p, given))
}

pub fn measure_machine(gemm_size: Option<usize>) -> MachineCeilings {
    MachineCeilings {
        threads: rayon::current_num_threads(),
        simd: crate::device::cpu::simd::level().name(),
        // The read first: its array is then fresh memory (after the triad, the allocator
        // hands back the triad's pages, split into 4 KiB ones).
        read_gbs: read_gbs(),
        triad_gbs: triad_gbs(),
        gemm_size: gemm_ceiling_size(GemmSite::Host, Precision::F32, gemm_size),
        gemm_gflops_f64: gemm_gflops(Precision::F64, gemm_size),
        gemm_gflops_f32: gemm_gflops(Precision::F32, gemm_size),
        gemm_gflops_tf32: gemm_gflops(Precision::Tf32, gemm_size),
        gemm_gflops_f16: gemm_gflops(Precision::F16, gemm_size),
    }
}

/// A GPU's ceilings: device copy bandwidth and cuBLAS GEMM rates (at 8192³, f64 at 4096³,
/// unless `--gemm-size` says otherwise).
#[derive(Clone, Debug, Serialize)]
pub struct DeviceCeilings {
    pub device: String,
    /// Bytes read plus bytes written per second, 2^28 f32 values.
    pub copy_gbs: f64,
    /// m = n = k of the GEMMs below (f64's at [`gemm_ceiling_size`]).
    pub gemm_size: usize,
    pub gemm_gflops_f64: f64,
    pub gemm_gflops_f32: f64,
    /// f32 operands on Tensor Cores in TF32, f32 accumulation and result.
    pub gemm_gflops_tf32: f64,
    /// f16 operands on Tensor Cores, f32 accumulation and result.
    pub gemm_gflops_f16: f64,
    /// A 1 GiB f64 block written to the device and read back (the path of right-hand sides
    /// and solutions: staged through pinned memory).
    pub host_to_device_gbs: f64,
    pub device_to_host_gbs: f64,
}

pub fn measure_device<D: DenseKernels + VectorKernels>(
    dev: &D,
    gemm_size: Option<usize>,
) -> DeviceCeilings {
    let (host_to_device_gbs, device_to_host_gbs) = device_transfer_gbs(dev, 1 << 27);
    let gemm = |p| device_gemm_gflops(dev, p, gemm_ceiling_size(GemmSite::Gpu, p, gemm_size));
    DeviceCeilings {
        device: dev.name(),
        copy_gbs: device_copy_gbs(dev, 1 << 28),
        gemm_size: gemm_ceiling_size(GemmSite::Gpu, Precision::F32, gemm_size),
        gemm_gflops_f64: gemm(Precision::F64),
        gemm_gflops_f32: gemm(Precision::F32),
        gemm_gflops_tf32: gemm(Precision::Tf32),
        gemm_gflops_f16: gemm(Precision::F16),
        host_to_device_gbs,
        device_to_host_gbs,
    }
}

/// `tensorfem bench machine --backend cuda`: the GPU's ceilings.
pub fn report_device<D: DenseKernels + VectorKernels>(
    dev: &D,
    gemm_size: Option<usize>,
    json: bool,
) {
    let m = measure_device(dev, gemm_size);
    if json {
        println!(
            "{}",
            serde_json::to_string(&m).expect("plain numbers serialise")
        );
    } else {
        println!("device ceilings: {}", m.device);
        println!(
            "  device copy           {:8.1} GB/s (read + write)",
            m.copy_gbs
        );
        println!(
            "  GEMM m = n = k        {:8} (f64: {})",
            m.gemm_size,
            gemm_ceiling_size(GemmSite::Gpu, Precision::F64, gemm_size)
        );
        println!("  GEMM f64              {:8.1} GFLOP/s", m.gemm_gflops_f64);
        println!("  GEMM f32              {:8.1} GFLOP/s", m.gemm_gflops_f32);
        println!(
            "  GEMM TF32             {:8.1} GFLOP/s (Tensor Cores, f32 accumulation)",
            m.gemm_gflops_tf32
        );
        println!(
            "  GEMM f16 operands     {:8.1} GFLOP/s (Tensor Cores, f32 accumulation)",
            m.gemm_gflops_f16
        );
        println!(
            "  host → device         {:8.1} GB/s (1 GiB block, staged through pinned memory)",
            m.host_to_device_gbs
        );
        println!("  device → host         {:8.1} GB/s", m.device_to_host_gbs);
    }
}

/// `tensorfem bench machine`: the ceilings as a table or one JSON object.
pub fn report(gemm_size: Option<usize>, json: bool) {
    let m = measure_machine(gemm_size);
    if json {
        println!(
            "{}",
            serde_json::to_string(&m).expect("plain numbers serialise")
        );
    } else {
        println!("machine ceilings ({} threads, SIMD {})", m.threads, m.simd);
        println!("  triad bandwidth       {:8.1} GB/s", m.triad_gbs);
        println!("  read bandwidth        {:8.1} GB/s", m.read_gbs);
        println!(
            "  GEMM m = n = k        {:8} (f64: {})",
            m.gemm_size,
            gemm_ceiling_size(GemmSite::Host, Precision::F64, gemm_size)
        );
        println!("  GEMM f64              {:8.1} GFLOP/s", m.gemm_gflops_f64);
        println!("  GEMM f32              {:8.1} GFLOP/s", m.gemm_gflops_f32);
        println!(
            "  GEMM TF32 operands    {:8.1} GFLOP/s (rounded to TF32, f32 arithmetic)",
            m.gemm_gflops_tf32
        );
        println!(
            "  GEMM f16 operands     {:8.1} GFLOP/s (f32 arithmetic)",
            m.gemm_gflops_f16
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_are_timed_on_any_device() {
        let (up, down) = device_transfer_gbs(&Cpu::new(), 1 << 16);
        assert!(up.is_finite() && up > 0.0 && down.is_finite() && down > 0.0);
    }
}
