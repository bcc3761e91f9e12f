//! The CPU device: buffers are [`HostArray`]s (owned, or a mapped file's read-only view),
//! kernels run on rayon's thread pool.
//! It is the reference every other backend's kernels are tested against.
//!
//! Each kernel family's run-time-typed entry point matches the precisions it is given and
//! calls a typed kernel named like its CUDA counterpart (`axpby::<f32>` ↔ `axpby_f32`).
//! Reductions split their input into chunks fixed by its size alone and add the partial
//! results in order: bitwise the same whatever the number of threads.

mod arena;
mod dense;
mod multigrid;
mod psc;
pub mod simd;
mod sparse;
mod stokes;
mod vector;

use super::{host, DType, Data, Device, HostArray, Storage, View, ViewMut};
use crate::error::{Error, Result};
use crate::precision::Precision;

/// Entries per rayon task in element-wise kernels.
const CHUNK: usize = 1 << 14;

/// The CPU backend: rayon's global thread pool.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu;

impl Cpu {
    pub fn new() -> Self {
        Cpu
    }

    /// Threads the kernels run on.
    pub fn threads(&self) -> usize {
        rayon::current_num_threads()
    }
}

impl Device for Cpu {
    type Buffer<T: DType> = HostArray<T>;

    fn name(&self) -> String {
        format!("cpu ({} threads)", self.threads())
    }

    fn zeros<T: DType>(&self, len: usize) -> Result<HostArray<T>> {
        Ok(host::zeroed_vec(len).into())
    }

    fn upload<T: DType>(&self, host: &[T]) -> Result<HostArray<T>> {
        let mut v = host::vec_for_huge_pages(host.len());
        v.extend_from_slice(host);
        Ok(v.into())
    }

    fn upload_owned<T: DType>(&self, host: HostArray<T>) -> Result<HostArray<T>> {
        Ok(host)
    }

    fn cache_bytes(&self) -> Option<usize> {
        static CACHE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        CACHE
            .get_or_init(crate::sys::last_level_cache)
            .map(|b| b as usize)
    }

    fn write_unchecked<T: DType>(&self, host: &[T], dst: &mut HostArray<T>) -> Result<()> {
        dst.copy_from_slice(host);
        Ok(())
    }

    /// Kernels return when their work is done: the host clock marks the queue.
    type Mark = std::time::Instant;

    fn mark(&self) -> Result<std::time::Instant> {
        Ok(std::time::Instant::now())
    }

    fn seconds_between(&self, start: &Self::Mark, end: &Self::Mark) -> Result<f64> {
        Ok(end.duration_since(*start).as_secs_f64())
    }

    fn read_unchecked<T: DType>(
        &self,
        src: &HostArray<T>,
        offset: usize,
        host: &mut [T],
    ) -> Result<()> {
        let end = offset + host.len();
        host.copy_from_slice(&src[offset..end]);
        Ok(())
    }

    fn buffer_len<T: DType>(buffer: &HostArray<T>) -> usize {
        buffer.len()
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        if rayon::current_thread_index().is_some() {
            f()
        } else {
            rayon::scope(|_| f())
        }
    }
}

/// The typed vector inside `data`, or an error naming the kernel and what it got.
fn buffer<'a, T: Storage>(data: &'a Data<Cpu>, kernel: &str) -> Result<&'a HostArray<T>> {
    T::buffer::<Cpu>(data).ok_or_else(|| mismatch::<T>(kernel, data.precision()))
}

fn buffer_mut<'a, T: Storage>(
    data: &'a mut Data<Cpu>,
    kernel: &str,
) -> Result<&'a mut HostArray<T>> {
    let precision = data.precision();
    T::buffer_mut::<Cpu>(data).ok_or_else(|| mismatch::<T>(kernel, precision))
}

fn mismatch<T: Storage>(kernel: &str, got: Precision) -> Error {
    Error::Backend(format!(
        "kernel {kernel}_{}: given {got} data",
        <T as DType>::NAME
    ))
}

/// The entries of a view as a typed slice.
fn slice<'a, T: Storage>(v: &View<'a, Cpu>, kernel: &str) -> Result<&'a [T]> {
    Ok(&buffer::<T>(v.data, kernel)?[v.offset..v.offset + v.len])
}

fn slice_mut<'a, T: Storage>(v: ViewMut<'a, Cpu>, kernel: &str) -> Result<&'a mut [T]> {
    let (offset, len) = (v.offset, v.len);
    Ok(&mut buffer_mut::<T>(v.data, kernel)?[offset..offset + len])
}

/// Runs `$body` with `$t` the element type of precision `$p`.
macro_rules! by_precision {
    ($p:expr, $t:ident => $body:expr) => {
        match $p {
            $crate::precision::Precision::F16 => {
                type $t = half::f16;
                $body
            }
            // TF32 is stored in f32.
            $crate::precision::Precision::F32 | $crate::precision::Precision::Tf32 => {
                type $t = f32;
                $body
            }
            $crate::precision::Precision::F64 => {
                type $t = f64;
                $body
            }
        }
    };
}
use by_precision;

/// The compute type of an f16, f32 or f64 element.
type Compute<T> = <T as crate::precision::Stored>::Compute;
