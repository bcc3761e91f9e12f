//! This machine's ceilings: a STREAM-like triad (memory bandwidth) and GEMM peak per
//! precision (the `gemm` crate, the engine behind faer and the PSC products).

use half::f16;
use rayon::prelude::*;
use serde::Serialize;

use super::time_runs;
use crate::backend::cpu::{self, Operand};
use crate::precision::{Precision, Stored};

#[derive(Clone, Copy, Debug, Serialize)]
pub struct MachineCeilings {
    pub threads: usize,
    /// a = b + s·c over three 2^25-entry f64 arrays, counting 24 bytes per entry.
    pub triad_gbs: f64,
    pub gemm_gflops_f64: f64,
    pub gemm_gflops_f32: f64,
    /// f16 operands, f32 arithmetic (no f16 arithmetic units on this CPU).
    pub gemm_gflops_f16: f64,
}

impl MachineCeilings {
    pub fn gemm_gflops(&self, p: Precision) -> f64 {
        match p {
            Precision::F64 => self.gemm_gflops_f64,
            Precision::F32 => self.gemm_gflops_f32,
            Precision::F16 => self.gemm_gflops_f16,
        }
    }
}

/// Triad bandwidth in GB/s.
pub fn triad_gbs() -> f64 {
    let n = 1 << 25;
    let b = vec![1.0f64; n];
    let c = vec![2.0f64; n];
    let mut a = vec![0.0f64; n];
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

fn gemm_of<S: Stored>(size: usize) -> f64 {
    let a: Vec<S> = (0..size * size)
        .map(|i| S::from_f64(((i % 17) as f64 - 8.0) / 16.0))
        .collect();
    let b = a.clone();
    let mut d = vec![S::default(); size * size];
    let (best, _) = time_runs(3, 1.0, || {
        cpu::gemm(
            size,
            size,
            size,
            &mut d,
            size,
            Operand::col_major(&a, size),
            Operand::col_major(&b, size),
        )
    });
    2.0 * (size as f64).powi(3) / best / 1e9
}

/// GEMM GFLOP/s for square products large enough to run at peak.
pub fn gemm_gflops(p: Precision) -> f64 {
    match p {
        Precision::F64 => gemm_of::<f64>(1536),
        Precision::F32 => gemm_of::<f32>(2048),
        Precision::F16 => gemm_of::<f16>(2048),
    }
}

pub fn measure_machine() -> MachineCeilings {
    MachineCeilings {
        threads: rayon::current_num_threads(),
        triad_gbs: triad_gbs(),
        gemm_gflops_f64: gemm_gflops(Precision::F64),
        gemm_gflops_f32: gemm_gflops(Precision::F32),
        gemm_gflops_f16: gemm_gflops(Precision::F16),
    }
}

/// `tensorfem bench machine`: the ceilings as a table or one JSON object.
pub fn report(json: bool) {
    let m = measure_machine();
    if json {
        println!(
            "{}",
            serde_json::to_string(&m).expect("plain numbers serialise")
        );
    } else {
        println!("machine ceilings ({} threads)", m.threads);
        println!("  triad bandwidth       {:8.1} GB/s", m.triad_gbs);
        println!("  GEMM f64              {:8.1} GFLOP/s", m.gemm_gflops_f64);
        println!("  GEMM f32              {:8.1} GFLOP/s", m.gemm_gflops_f32);
        println!(
            "  GEMM f16 operands     {:8.1} GFLOP/s (f32 arithmetic)",
            m.gemm_gflops_f16
        );
    }
}
