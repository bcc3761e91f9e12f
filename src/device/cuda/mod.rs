//! The CUDA backend over cudarc with dynamic loading: the binary builds, runs and tests
//! without CUDA, and finding no driver (or no NVRTC) is a normal outcome reported as such,
//! never a panic. [`probe`] lists the devices; [`compile`] builds the kernels.

pub mod compile;
mod dense;
mod device;
mod inverse;
pub mod launch;
mod multigrid;
mod psc;
mod sparse;
pub mod staging;
mod stokes;
mod vector;

pub use device::Cuda;

use std::fmt;

use cudarc::driver::{result, sys};

/// One CUDA device as the driver reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaDeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub total_memory_bytes: usize,
    pub compute_capability: (i32, i32),
}

/// What probing the CUDA driver found.
#[derive(Clone, Debug, PartialEq)]
pub enum CudaProbe {
    /// libcuda could not be loaded: no NVIDIA driver on this machine.
    NoDriver,
    /// The driver loaded but could not be used (the message says why).
    Unusable(String),
    Available {
        /// As the driver reports it, e.g. 13000 for CUDA 13.0.
        driver_version: i32,
        devices: Vec<CudaDeviceInfo>,
    },
}

impl CudaProbe {
    pub fn devices(&self) -> &[CudaDeviceInfo] {
        match self {
            CudaProbe::Available { devices, .. } => devices,
            _ => &[],
        }
    }
}

impl fmt::Display for CudaProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaProbe::NoDriver => f.write_str("no CUDA driver (libcuda could not be loaded)"),
            CudaProbe::Unusable(why) => write!(f, "CUDA driver present but unusable: {why}"),
            CudaProbe::Available {
                driver_version,
                devices,
            } => write!(
                f,
                "CUDA driver {}.{} with {} device(s)",
                driver_version / 1000,
                (driver_version % 1000) / 10,
                devices.len()
            ),
        }
    }
}

/// Looks for the CUDA driver and lists its devices.
pub fn probe() -> CudaProbe {
    // SAFETY: only tries to dlopen the driver library; no symbol is called.
    if !unsafe { sys::is_culib_present() } {
        return CudaProbe::NoDriver;
    }
    // A driver whose library loads but lacks symbols makes cudarc panic: keep it contained.
    match std::panic::catch_unwind(probe_devices) {
        Ok(Ok(probe)) => probe,
        Ok(Err(e)) => CudaProbe::Unusable(e),
        Err(_) => CudaProbe::Unusable("the driver library is missing required functions".into()),
    }
}

fn probe_devices() -> Result<CudaProbe, String> {
    let describe = |e: result::DriverError| format!("{e:?}");
    result::init().map_err(describe)?;
    let mut driver_version = 0;
    // SAFETY: the driver is initialised; the pointer is to a live i32.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) }
        .result()
        .map_err(describe)?;
    let count = result::device::get_count().map_err(describe)?;
    let mut devices = Vec::new();
    for ordinal in 0..count {
        let dev = result::device::get(ordinal).map_err(describe)?;
        let name = result::device::get_name(dev).map_err(describe)?;
        // SAFETY: `dev` is a valid device handle from the driver.
        let (total_memory_bytes, major, minor) = unsafe {
            (
                result::device::total_mem(dev).map_err(describe)?,
                result::device::get_attribute(
                    dev,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                )
                .map_err(describe)?,
                result::device::get_attribute(
                    dev,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                )
                .map_err(describe)?,
            )
        };
        devices.push(CudaDeviceInfo {
            ordinal: ordinal as usize,
            name,
            total_memory_bytes,
            compute_capability: (major, minor),
        });
    }
    Ok(CudaProbe::Available {
        driver_version,
        devices,
    })
}

/// The CUDA device tests run on: the first device, or None (said on stderr) where this
/// machine has none, unless TENSORFEM_REQUIRE_CUDA=1 (`make test-gpu` on a GPU machine),
/// where finding none is a failure.
pub fn test_device() -> Option<Cuda> {
    let required = std::env::var("TENSORFEM_REQUIRE_CUDA").is_ok_and(|v| v == "1");
    let probe = probe();
    match probe.devices().first() {
        Some(info) => {
            Some(Cuda::shared(info).unwrap_or_else(|e| panic!("CUDA device {}: {e}", info.ordinal)))
        }
        None if required => panic!("TENSORFEM_REQUIRE_CUDA=1 but {probe}"),
        None => {
            eprintln!("skipped on CUDA: {probe}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs on every machine: without a driver the answer is NoDriver, with one it lists
    /// devices; it never panics.
    #[test]
    fn probe_never_panics() {
        let p = probe();
        let text = p.to_string();
        match p {
            CudaProbe::NoDriver => assert!(text.contains("no CUDA driver")),
            CudaProbe::Unusable(_) => assert!(text.contains("unusable")),
            CudaProbe::Available { .. } => assert!(text.contains("device(s)")),
        }
    }
}
