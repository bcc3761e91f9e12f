//! Every CUDA kernel compiles for sm_90 through NVRTC with ptxas's spill check as an
//! error, on any machine with NVRTC (no GPU needed); `make test` provides NVRTC (the
//! pinned wheels of scripts/install-deps.sh) and sets TENSORFEM_REQUIRE_NVRTC=1, so there a
//! missing NVRTC fails instead of skipping. Every entry point must have its launch
//! signature (src/device/cuda/launch.rs) match its PTX parameters, and a CPU-reference
//! comparison in tests/gpu.rs.

use tensorfem::device::cuda::compile::{self, CHECK_ARCH, FILES};
use tensorfem::device::cuda::launch;

/// NVRTC and the CUDA headers, or None (with the reason printed) where this machine has
/// neither and the run does not require them.
fn include_dir() -> Option<std::path::PathBuf> {
    let required = std::env::var("TENSORFEM_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    let found = if compile::nvrtc_available() {
        compile::cuda_include_dir().map_err(|e| e.to_string())
    } else {
        Err("libnvrtc is not on the library path".to_string())
    };
    match found {
        Ok(dir) => Some(dir),
        Err(why) if required => panic!("TENSORFEM_REQUIRE_NVRTC=1 but {why}"),
        Err(why) => {
            eprintln!("skipped: {why} (make test provides it)");
            None
        }
    }
}

#[test]
fn every_kernel_compiles_for_sm_90_without_spills() {
    let Some(include) = include_dir() else { return };
    let mut failed = Vec::new();
    let mut entries = 0;
    for file in &FILES {
        match compile::compile(file, CHECK_ARCH, &include, true) {
            Ok(c) => {
                let points = compile::entry_points(&c.ptx);
                let resources = compile::resources(&c.log);
                assert!(
                    !points.is_empty(),
                    "kernels/{}.cu defines no kernel",
                    file.name
                );
                for r in &resources {
                    assert_eq!(
                        (r.spill_store_bytes, r.spill_load_bytes),
                        (0, 0),
                        "{} spills",
                        r.entry
                    );
                }
                let gpu_tests = include_str!("gpu.rs");
                for entry in &points {
                    // The host asks for `kernel_name(op, precisions)`, which says a repeated
                    // precision once: `relayout_f16`, never `relayout_f16_f16`.
                    let parts: Vec<&str> = entry.split('_').collect();
                    let mut named = parts.clone();
                    named.dedup();
                    assert!(
                        !parts
                            .windows(2)
                            .any(|w| w[0] == w[1] && w[0].starts_with('f')),
                        "kernel {entry} repeats a precision: the host names it {}",
                        named.join("_")
                    );
                    assert!(
                        gpu_tests.contains(&format!("\"{entry}\"")),
                        "kernel {entry} has no CPU-reference comparison in tests/gpu.rs (name it in a covers(&[…]) of the test that exercises it)"
                    );
                }
                for (entry, params) in compile::entry_params(&c.ptx) {
                    let expected = launch::signature(launch::op_of(&entry))
                        .unwrap_or_else(|| panic!("{entry} has no signature in launch.rs"));
                    assert_eq!(params, expected, "parameters of {entry}");
                }
                let most = resources.iter().map(|r| r.registers).max().unwrap_or(0);
                println!(
                    "kernels/{}.cu: {} kernels for {CHECK_ARCH}, no spills, at most {most} registers",
                    file.name,
                    points.len()
                );
                entries += points.len();
            }
            Err(e) => failed.push(e.to_string()),
        }
    }
    println!(
        "CUDA kernels: {} passed, {} failed ({entries} entry points)",
        FILES.len() - failed.len(),
        failed.len()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// The check has teeth: a kernel that needs more registers than its launch bounds allow
/// fails the compile (ptxas's spill warning as an error), and a syntax error names the file.
#[test]
fn spills_and_syntax_errors_fail_the_compile() {
    let Some(include) = include_dir() else { return };
    let spilling = compile::KernelFile {
        name: "spilling",
        source: r#"
extern "C" __global__ void __launch_bounds__(1024, 2) spill_f64(double *x, int n) {
  double v[64];
  #pragma unroll
  for (int k = 0; k < 64; k++) v[k] = x[threadIdx.x + k * n];
  #pragma unroll
  for (int r = 0; r < 8; r++)
    #pragma unroll
    for (int k = 0; k < 64; k++) v[k] = v[k] * v[(k + r + 1) % 64] + v[(k + 7) % 64];
  #pragma unroll
  for (int k = 0; k < 64; k++) x[threadIdx.x + k * n] = v[k];
}
"#,
    };
    let err = compile::compile(&spilling, CHECK_ARCH, &include, true).unwrap_err();
    assert!(err.to_string().contains("spilling.cu"), "{err}");
    assert!(err.to_string().contains("spill"), "{err}");
    assert!(
        compile::compile(&spilling, CHECK_ARCH, &include, false).is_ok(),
        "without the checks it compiles"
    );
    let broken = compile::KernelFile {
        name: "broken",
        source: "extern \"C\" __global__ void f(float *x) { x[0] = undefined_name; }",
    };
    let err = compile::compile(&broken, CHECK_ARCH, &include, false).unwrap_err();
    assert!(err.to_string().contains("broken.cu"), "{err}");
    assert!(err.to_string().contains("undefined_name"), "{err}");
}
