//! Where a rank's solves run: the backend a user asks for (`backend` in the config,
//! `--backend` on the command line) resolved against this machine's devices and the
//! methods' implementations, with the rank's GPU binding (`local_rank % device_count`).

use std::fmt;
use std::str::FromStr;

use super::cuda::{CudaDeviceInfo, CudaProbe};
use crate::error::{Error, Result};

/// The backend a rank runs its kernels on.
#[derive(Clone, Debug, PartialEq)]
pub enum Backend {
    /// Rayon over this many threads.
    Cpu { threads: usize },
    /// The CUDA device this rank is bound to.
    Cuda(CudaDeviceInfo),
}

impl Backend {
    /// Resolves the user's choice against what this machine has and what the method can
    /// run on. `method` names the method in the error when it has no CUDA implementation.
    pub fn select(
        choice: BackendChoice,
        probe: &CudaProbe,
        method: &str,
        method_has_cuda: bool,
        local_rank: usize,
    ) -> Result<Backend> {
        let cpu = Backend::Cpu {
            threads: rayon::current_num_threads(),
        };
        match choice {
            BackendChoice::Cpu => Ok(cpu),
            BackendChoice::Auto => match probe.devices() {
                [] => Ok(cpu),
                _ if !method_has_cuda => {
                    log::info!("method {method} runs on the CPU (it has no CUDA implementation)");
                    Ok(cpu)
                }
                devices => Ok(Backend::Cuda(devices[local_rank % devices.len()].clone())),
            },
            BackendChoice::Cuda => {
                let devices = probe.devices();
                if devices.is_empty() {
                    return Err(Error::Backend(format!(
                        "backend = \"cuda\" was asked for, but {probe}; use backend = \"cpu\" or \"auto\""
                    )));
                }
                if !method_has_cuda {
                    return Err(Error::Backend(format!(
                        "method {method} has no CUDA implementation; use backend = \"cpu\" or \"auto\""
                    )));
                }
                Ok(Backend::Cuda(devices[local_rank % devices.len()].clone()))
            }
        }
    }
}

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    Auto,
    Cpu,
    Cuda,
}

impl BackendChoice {
    pub const NAMES: &'static str = "auto, cpu, cuda";

    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Cpu => "cpu",
            BackendChoice::Cuda => "cuda",
        }
    }
}

impl FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "cuda" => Ok(BackendChoice::Cuda),
            _ => Err(format!("unknown backend '{s}' (allowed: {})", Self::NAMES)),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Cpu { threads } => write!(f, "cpu ({threads} threads)"),
            Backend::Cuda(d) => write!(f, "cuda device {} ({})", d.ordinal, d.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(ordinal: usize) -> CudaDeviceInfo {
        CudaDeviceInfo {
            ordinal,
            name: format!("test device {ordinal}"),
            total_memory_bytes: 1 << 30,
            compute_capability: (9, 0),
        }
    }

    #[test]
    fn selection() {
        let none = CudaProbe::NoDriver;
        let two = CudaProbe::Available {
            driver_version: 13000,
            devices: vec![device(0), device(1)],
        };
        let cpu = |b: &Backend| matches!(b, Backend::Cpu { .. });
        assert!(cpu(&Backend::select(
            BackendChoice::Auto,
            &none,
            "m",
            true,
            0
        )
        .unwrap()));
        assert!(cpu(&Backend::select(
            BackendChoice::Auto,
            &two,
            "m",
            false,
            0
        )
        .unwrap()));
        assert_eq!(
            Backend::select(BackendChoice::Auto, &two, "m", true, 3).unwrap(),
            Backend::Cuda(device(1))
        );
        let err = Backend::select(BackendChoice::Cuda, &none, "m", true, 0).unwrap_err();
        assert!(err.to_string().contains("no CUDA driver"), "{err}");
        let err = Backend::select(BackendChoice::Cuda, &two, "cholesky", false, 0).unwrap_err();
        assert!(err.to_string().contains("cholesky has no CUDA"), "{err}");
        assert!(cpu(&Backend::select(
            BackendChoice::Cpu,
            &two,
            "m",
            true,
            0
        )
        .unwrap()));
        assert!("gpu".parse::<BackendChoice>().is_err());
    }
}
