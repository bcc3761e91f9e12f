//! The device layer: where solver data lives and the kernels that work on it.
//!
//! A [`Device`] allocates typed buffers, moves them to and from the host, and synchronizes.
//! Solvers hold [`Data`] and [`Block`]s, whose element precision (f16, f32, f64) is a
//! run-time value, and call kernels through the kernel-family traits below; a family's
//! methods take run-time-typed data and each backend dispatches to its typed kernels,
//! named `<op>_<dtype>` (or `<op>_<storage>_<compute>` where the two differ) in the CPU
//! backend ([`cpu`]) and in `kernels/*.cu` for CUDA. Solvers are generic over the device
//! bound they need (`PscDevice`, `MultigridDevice`, `StokesDevice`) and never name a
//! backend: a new backend implements these traits and touches no solver file.
//!
//! Arithmetic on f16 data runs in f32 (its compute precision, `Stored::Compute`); f32 and
//! f64 compute in themselves. Every reduction is bitwise reproducible whatever the number
//! of threads.

mod backend;
pub mod block;
pub mod cg;
mod checks;
pub mod clock;
pub mod cpu;
pub mod cuda;
mod dense;
mod device_tests;
pub mod host;
pub mod multigrid;
pub mod psc;
pub mod sparse;
pub mod stats;
pub mod stokes;
mod variants;
mod vector;

use std::fmt;

use half::f16;

pub use backend::{Backend, BackendChoice};
pub use block::{Block, Data, Layout, MatMut, MatRef, View, ViewMut};
pub use clock::{StageMarks, StageTime};
pub use cpu::Cpu;
pub use dense::{needs_second_step, DenseInverse, DenseKernels, GemmBatch, Inverted, OnHost};
pub use host::HostArray;
pub use multigrid::{EllMatrix, GridShape, LevelTransfer, MatrixStorage, MultigridKernels, RowOp};
pub use psc::PscKernels;
pub use sparse::{CsrMatrix, SparseKernels};
pub use stats::{ColumnStats, FlagLog, Stats};
pub use stokes::StokesKernels;
pub use variants::{kernel_name, unsupported};
pub(crate) use vector::inverse_scale;
pub use vector::{Scratch, VectorKernels};

use crate::error::Result;
use crate::precision::Stored;

/// An element type device buffers hold.
pub trait DType:
    Copy
    + Default
    + Send
    + Sync
    + fmt::Debug
    + PartialEq
    + bytemuck::Pod
    + cudarc::driver::DeviceRepr
    + cudarc::driver::ValidAsZeroBits
    + 'static
{
    /// The suffix of kernel names: `axpby_f32`.
    const NAME: &'static str;
}

impl DType for f16 {
    const NAME: &'static str = "f16";
}
impl DType for f32 {
    const NAME: &'static str = "f32";
}
impl DType for f64 {
    const NAME: &'static str = "f64";
}
impl DType for u32 {
    const NAME: &'static str = "u32";
}
impl DType for u64 {
    const NAME: &'static str = "u64";
}

/// A floating-point storage type (f16, f32, f64): a [`Stored`] type a [`Data`] can hold.
pub trait Storage: Stored + DType {
    fn data<D: Device>(buffer: D::Buffer<Self>) -> Data<D>;
    fn buffer<D: Device>(data: &Data<D>) -> Option<&D::Buffer<Self>>;
    fn buffer_mut<D: Device>(data: &mut Data<D>) -> Option<&mut D::Buffer<Self>>;
}

macro_rules! element {
    ($t:ty, $variant:ident) => {
        impl Storage for $t {
            fn data<D: Device>(buffer: D::Buffer<Self>) -> Data<D> {
                Data::$variant(buffer)
            }
            fn buffer<D: Device>(data: &Data<D>) -> Option<&D::Buffer<Self>> {
                match data {
                    Data::$variant(b) => Some(b),
                    _ => None,
                }
            }
            fn buffer_mut<D: Device>(data: &mut Data<D>) -> Option<&mut D::Buffer<Self>> {
                match data {
                    Data::$variant(b) => Some(b),
                    _ => None,
                }
            }
        }
    };
}
element!(f16, F16);
element!(f32, F32);
element!(f64, F64);

/// A place solver data lives and kernels run: allocation, host transfers, synchronization.
/// The transfers a solver calls check their arguments (device/checks.rs) and hand them to the
/// backend's `*_unchecked` copy.
pub trait Device: Clone + Send + Sync + fmt::Debug + 'static {
    /// A buffer of `T` in this device's memory.
    type Buffer<T: DType>: Send + Sync;

    /// What the logs and the performance records call this device.
    fn name(&self) -> String;

    /// `len` zeros (pages touched now, in set-up, not in the first timed apply).
    fn zeros<T: DType>(&self, len: usize) -> Result<Self::Buffer<T>>;

    /// A buffer holding `host`.
    fn upload<T: DType>(&self, host: &[T]) -> Result<Self::Buffer<T>>;

    /// A buffer holding `host`, which the caller gives up (the CPU keeps the allocation or
    /// the mapping; a GPU copies and frees it): large operators built on the host are not
    /// held twice.
    fn upload_owned<T: DType>(&self, host: HostArray<T>) -> Result<Self::Buffer<T>> {
        self.upload(&host)
    }

    /// Overwrites the whole buffer `dst` with `host` (equal lengths).
    fn write<T: DType>(&self, host: &[T], dst: &mut Self::Buffer<T>) -> Result<()> {
        checks::check_len("write", host.len(), Self::buffer_len(dst))?;
        self.write_unchecked(host, dst)
    }

    /// Copies `host.len()` values from `src`, starting at `offset`, to the host.
    fn read<T: DType>(&self, src: &Self::Buffer<T>, offset: usize, host: &mut [T]) -> Result<()> {
        checks::check_room("read", Self::buffer_len(src), offset + host.len())?;
        self.read_unchecked(src, offset, host)
    }

    /// [`Device::write`] on checked arguments.
    fn write_unchecked<T: DType>(&self, host: &[T], dst: &mut Self::Buffer<T>) -> Result<()>;

    /// [`Device::read`] on checked arguments.
    fn read_unchecked<T: DType>(
        &self,
        src: &Self::Buffer<T>,
        offset: usize,
        host: &mut [T],
    ) -> Result<()>;

    /// Copies the whole buffer to the host (equal lengths).
    fn download<T: DType>(&self, src: &Self::Buffer<T>, host: &mut [T]) -> Result<()> {
        self.read(src, 0, host)
    }

    fn buffer_len<T: DType>(buffer: &Self::Buffer<T>) -> usize;

    /// Waits until every kernel issued so far has finished (timings, host reads).
    fn synchronize(&self) -> Result<()>;

    /// Bytes of this device's own memory still free, where it has a fixed amount apart
    /// from the host's (a GPU); None for the host itself, whose limit the run checks up
    /// front (`run::check_memory`).
    fn free_memory(&self) -> Result<Option<usize>> {
        Ok(None)
    }

    /// Bytes of the last-level cache this device's kernels share, where a block of columns
    /// whose vectors outgrow it runs slower per column (the host's L3); None where wider
    /// blocks keep paying (a GPU streams them from its own memory).
    fn cache_bytes(&self) -> Option<usize> {
        None
    }

    /// A point in this device's queue of work, for stage times that do not wait for it.
    type Mark: Send + Sync;

    /// Marks the queue here: a CUDA event recorded on the stream; the host clock where
    /// kernels run synchronously.
    fn mark(&self) -> Result<Self::Mark>;

    /// Seconds of the device's work between two marks (waits for the later one).
    fn seconds_between(&self, start: &Self::Mark, end: &Self::Mark) -> Result<f64>;

    /// Whether a host read waits for every kernel issued so far (a GPU's stream): callers
    /// then collect checks on the device ([`FlagLog`]) and read them together.
    fn reads_synchronize(&self) -> bool {
        false
    }

    /// Runs `f`, a solve's host-side driver that issues kernels, where this device runs them
    /// best (CPU: on a worker of the thread pool, so every kernel's parallel loop is a
    /// nested task rather than a job injected from outside; CUDA: on the calling thread).
    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R;
}

/// The kernel families PSC (M1, PSC-IR) needs: what a device must offer to run it.
pub trait PscDevice:
    Device + VectorKernels + DenseKernels + SparseKernels + PscKernels + DenseInverse
{
}

impl<D> PscDevice for D where
    D: Device + VectorKernels + DenseKernels + SparseKernels + PscKernels + DenseInverse
{
}

/// The kernel families multigrid needs (PSC's and the ELLPACK sweeps and grid transfers):
/// what a device must offer to run it.
pub trait MultigridDevice: PscDevice + MultigridKernels {}

impl<D> MultigridDevice for D where D: PscDevice + MultigridKernels {}

/// Every kernel family: what Stokes requires of a device.
pub trait StokesDevice: MultigridDevice + stokes::StokesKernels {}

impl<D> StokesDevice for D where D: MultigridDevice + stokes::StokesKernels {}
