//! The CUDA kernels (kernels/*.cu, embedded in the binary) and their compilation with
//! NVRTC, once per process for the device's architecture, or ahead of time to PTX files
//! (`tensorfem kernels --ptx-dir`, `make ptx`) for nodes without NVRTC.
//!
//! Each file is compiled with kernels/prelude.cuh in front of it. With `checks` on, ptxas
//! reports every kernel's registers, spills and shared memory, and a spill is a compile
//! error (what `make test` requires for sm_90).

use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::{result, sys};

use crate::error::{Error, Result};

/// Definitions every kernel file starts with.
pub const PRELUDE: &str = include_str!("../../../kernels/prelude.cuh");

/// One kernel family's CUDA source.
#[derive(Clone, Copy, Debug)]
pub struct KernelFile {
    /// The file name under kernels/ without `.cu`: also the module's name.
    pub name: &'static str,
    pub source: &'static str,
}

/// Every kernel file, in the order they are compiled.
pub const FILES: [KernelFile; 6] = [
    KernelFile {
        name: "vector",
        source: include_str!("../../../kernels/vector.cu"),
    },
    KernelFile {
        name: "dense",
        source: include_str!("../../../kernels/dense.cu"),
    },
    KernelFile {
        name: "sparse",
        source: include_str!("../../../kernels/sparse.cu"),
    },
    KernelFile {
        name: "psc",
        source: include_str!("../../../kernels/psc.cu"),
    },
    KernelFile {
        name: "multigrid",
        source: include_str!("../../../kernels/multigrid.cu"),
    },
    KernelFile {
        name: "stokes",
        source: include_str!("../../../kernels/stokes.cu"),
    },
];

/// The architecture `make test` checks every kernel for (the H100/H200 machines).
pub const CHECK_ARCH: &str = "sm_90";

/// What a compile produced: the PTX and the compiler's log (with `checks`: ptxas's report).
#[derive(Clone, Debug)]
pub struct Compiled {
    pub file: &'static str,
    pub ptx: String,
    pub log: String,
}

/// One kernel's resources as ptxas reports them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resources {
    pub entry: String,
    pub registers: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    pub shared_bytes: u32,
}

/// Whether libnvrtc can be loaded (it must be on the loader's path when the process starts).
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library; no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// The folder holding cuda_fp16.h the kernels include: TENSORFEM_CUDA_INCLUDE, else
/// $CUDA_HOME/include or $CUDA_PATH/include, else /usr/local/cuda/include.
pub fn cuda_include_dir() -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = match std::env::var_os("TENSORFEM_CUDA_INCLUDE") {
        Some(dir) => vec![PathBuf::from(dir)],
        None => ["CUDA_HOME", "CUDA_PATH"]
            .iter()
            .filter_map(|v| std::env::var_os(v).map(|d| PathBuf::from(d).join("include")))
            .chain([PathBuf::from("/usr/local/cuda/include")])
            .collect(),
    };
    candidates
        .iter()
        .find(|d| d.join("cuda_fp16.h").is_file())
        .cloned()
        .ok_or_else(|| {
            Error::Backend(format!(
                "the CUDA headers the kernels include (cuda_fp16.h) are not in {}; set TENSORFEM_CUDA_INCLUDE to the toolkit's include folder, or load precompiled kernels with TENSORFEM_PTX_DIR (make ptx)",
                candidates
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// NVRTC's options for `arch` (e.g. "sm_90"): C++17, the include folder, no contraction of
/// a·b + c into one FMA (Rust never contracts, so the element-wise kernels give the CPU
/// backend's results bit for bit; measured on an H200, `y + a·d·(x − z)` differed in the
/// last bit with contraction), and with `checks` ptxas's resource report with spills as
/// errors.
pub fn options(arch: &str, include: &Path, checks: bool) -> Vec<String> {
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "--fmad=false".to_string(),
        format!("--include-path={}", include.display()),
    ];
    if checks {
        for flag in ["-v", "--warn-on-spills", "--warning-as-error"] {
            options.push("-Xptxas".to_string());
            options.push(flag.to_string());
        }
    }
    options
}

/// Compiles one kernel file for `arch`.
pub fn compile(file: &KernelFile, arch: &str, include: &Path, checks: bool) -> Result<Compiled> {
    if !nvrtc_available() {
        return Err(Error::Backend(
            "NVRTC (libnvrtc.so.13) is not on the library path: put the CUDA toolkit's lib64 (or the nvidia-cuda-nvrtc wheel's lib folder) in LD_LIBRARY_PATH before starting, or load precompiled kernels with TENSORFEM_PTX_DIR".into(),
        ));
    }
    let source = CString::new(format!(
        "{PRELUDE}\n#line 1 \"{0}.cu\"\n{1}",
        file.name, file.source
    ))
    .map_err(|_| Error::Backend(format!("kernels/{}.cu holds a NUL byte", file.name)))?;
    let name = CString::new(format!("{}.cu", file.name)).expect("no NUL in a file name");
    let nvrtc =
        |e: result::NvrtcError| Error::Backend(format!("NVRTC on kernels/{}.cu: {e:?}", file.name));
    let program = result::create_program(&source, Some(&name)).map_err(nvrtc)?;
    let options = options(arch, include, checks);
    // SAFETY: `program` was created above, `source` and `name` outlive it, and it is
    // destroyed once below whatever happens.
    let outcome = unsafe {
        let compiled = result::compile_program(program, &options);
        let log = result::get_program_log(program).map(|l| text(&l));
        let ptx = compiled.and_then(|()| result::get_ptx(program).map(|p| text(&p)));
        let _ = result::destroy_program(program);
        (ptx, log)
    };
    match outcome {
        (Ok(ptx), Ok(log)) => Ok(Compiled {
            file: file.name,
            ptx,
            log,
        }),
        (Err(e), log) => Err(Error::Backend(format!(
            "kernels/{}.cu does not compile for {arch} ({e:?}):\n{}",
            file.name,
            log.unwrap_or_default().trim()
        ))),
        (Ok(_), Err(e)) => Err(nvrtc(e)),
    }
}

/// Compiles every kernel file for `arch` with the checks on, prints each kernel's
/// resources and a passed/failed line, and writes the PTX into `ptx_dir` when given.
pub fn report(arch: &str, ptx_dir: Option<&Path>) -> Result<()> {
    let include = cuda_include_dir()?;
    if let Some(dir) = ptx_dir {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::InvalidInput(format!(
                "--ptx-dir {}: cannot be created ({e})",
                dir.display()
            ))
        })?;
    }
    println!(
        "{:<34} {:>9} {:>12} {:>12}",
        "kernel", "registers", "spill bytes", "shared bytes"
    );
    let mut failed = Vec::new();
    for file in &FILES {
        match compile(file, arch, &include, true) {
            Ok(c) => {
                for r in resources(&c.log) {
                    println!(
                        "{:<34} {:>9} {:>12} {:>12}",
                        r.entry,
                        r.registers,
                        r.spill_store_bytes + r.spill_load_bytes,
                        r.shared_bytes
                    );
                }
                if let Some(dir) = ptx_dir {
                    let path = dir.join(format!("{}.ptx", file.name));
                    std::fs::write(&path, &c.ptx).map_err(|e| {
                        Error::InvalidInput(format!("{}: cannot be written ({e})", path.display()))
                    })?;
                }
            }
            Err(e) => {
                eprintln!("{e}");
                failed.push(file.name);
            }
        }
    }
    println!(
        "kernels for {arch}: {} passed, {} failed{}",
        FILES.len() - failed.len(),
        failed.len(),
        ptx_dir.map_or(String::new(), |d| format!("; PTX in {}", d.display()))
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "kernels/{{{}}}.cu failed to compile",
            failed.join(",")
        )))
    }
}

/// A C string from NVRTC (NUL-terminated) as text.
fn text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The kernels a PTX module defines (its `.entry` names), in order.
pub fn entry_points(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix(".visible .entry ")?;
            Some(rest.split('(').next()?.trim().to_string())
        })
        .collect()
}

/// Every kernel's parameter types (`.u64`, `.u32`, `.f64`, …) as the PTX declares them.
pub fn entry_params(ptx: &str) -> Vec<(String, Vec<String>)> {
    let mut all: Vec<(String, Vec<String>)> = Vec::new();
    let mut open = false;
    for line in ptx.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix(".visible .entry ") {
            let name = rest
                .split('(')
                .next()
                .unwrap_or_default()
                .trim()
                .to_string();
            all.push((name, Vec::new()));
            open = !rest.contains(')');
        } else if open {
            if let (Some(param), Some((_, params))) = (line.strip_prefix(".param "), all.last_mut())
            {
                // `.param .u64 .ptr .align 2 name_param_0,` has its type first.
                params.push(
                    param
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                );
            }
            if line.starts_with(')') {
                open = false;
            }
        }
    }
    all
}

/// Every kernel's resources from ptxas's `-v` report.
pub fn resources(log: &str) -> Vec<Resources> {
    let mut all: Vec<Resources> = Vec::new();
    let number_before = |line: &str, word: &str| -> Option<u32> {
        let at = line.find(word)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            all.push(Resources {
                entry: rest.split('\'').next().unwrap_or_default().to_string(),
                ..Resources::default()
            });
            continue;
        }
        let Some(current) = all.last_mut() else {
            continue;
        };
        if let Some(v) = number_before(line, "bytes spill stores") {
            current.spill_store_bytes = v;
        }
        if let Some(v) = number_before(line, "bytes spill loads") {
            current.spill_load_bytes = v;
        }
        if let Some(v) = number_before(line, "registers") {
            current.registers = v;
        }
        if let Some(v) = number_before(line, "bytes smem") {
            current.shared_bytes = v;
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_points_and_resources_are_read_from_ptx_and_the_ptxas_report() {
        let ptx =
            ".version 9.0\n.target sm_90\n.visible .entry axpby_f32(\n\t.param .u64 a\n)\n{\n}\n\
                   .visible .entry psc_gather_f64(\n)\n.func helper(\n";
        assert_eq!(entry_points(ptx), ["axpby_f32", "psc_gather_f64"]);
        let params = entry_params(ptx);
        assert_eq!(
            params[0],
            ("axpby_f32".to_string(), vec![".u64".to_string()])
        );
        assert!(params[1].1.is_empty());
        let log = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'axpby_f32' for 'sm_90'\n\
            ptxas info    : Function properties for axpby_f32\n\
            \x20   0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
            ptxas info    : Used 18 registers, used 0 barriers, 2048 bytes smem, 400 bytes cmem[0]\n\
            ptxas info    : Compiling entry function 'fill_f16' for 'sm_90'\n\
            ptxas info    : Used 8 registers, used 0 barriers, 380 bytes cmem[0]\n";
        let r = resources(log);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            Resources {
                entry: "axpby_f32".into(),
                registers: 18,
                spill_store_bytes: 8,
                spill_load_bytes: 4,
                shared_bytes: 2048,
            }
        );
        assert_eq!((r[1].entry.as_str(), r[1].registers), ("fill_f16", 8));
    }

    #[test]
    fn options_put_each_ptxas_flag_behind_its_own_xptxas() {
        let o = options("sm_90", Path::new("/inc"), true);
        assert_eq!(o[0], "--gpu-architecture=sm_90");
        assert!(o.contains(&"--include-path=/inc".to_string()));
        assert!(o.contains(&"--fmad=false".to_string()));
        let xptxas = o.iter().filter(|s| *s == "-Xptxas").count();
        assert_eq!(xptxas, 3);
        assert!(!options("sm_90", Path::new("/inc"), false).contains(&"-Xptxas".to_string()));
    }
}
