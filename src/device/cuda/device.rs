//! The CUDA device: one context and stream per rank, a cuBLAS handle on that stream, and
//! the kernels of kernels/*.cu loaded once (compiled by NVRTC for the device's
//! architecture, or read from precompiled PTX in TENSORFEM_PTX_DIR).
//!
//! Every kernel of a rank runs on its one stream, in issue order, so buffers need no
//! events (cudarc's event tracking is off) and a buffer freed on the host is freed on the
//! stream after the kernels that read it. Host reads synchronize the stream.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DriverError,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use super::compile::{self, FILES};
use super::launch::{check_args, Arg};
use super::staging::{Staging, STAGED_BYTES};
use super::CudaDeviceInfo;
use crate::device::{DType, Data, Device};
use crate::error::{Error, Result};

/// A rank's CUDA device (cheap to clone: the state is shared).
#[derive(Clone)]
pub struct Cuda {
    inner: Arc<Inner>,
}

struct Inner {
    info: CudaDeviceInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    functions: HashMap<String, CudaFunction>,
    /// Small per-call arrays (per-column α, β, scales) uploaded before a kernel reads them.
    params: Mutex<CudaSlice<f64>>,
    /// Partial sums of the reductions that return to the host (dot, sum, norms).
    reduce: Mutex<CudaSlice<f64>>,
    /// Pinned memory for large host ↔ device copies, allocated on the first one.
    staging: Mutex<Option<Staging>>,
}

impl std::fmt::Debug for Cuda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cuda({})", self.name())
    }
}

/// A driver error as the crate's error, naming what was being done.
pub(super) fn driver(what: &str, e: DriverError) -> Error {
    let text = format!("{e:?}");
    if text.contains("OUT_OF_MEMORY") {
        Error::Backend(format!(
            "CUDA {what}: the device is out of memory; use fewer right-hand sides per batch (campaign.batch_size) or a smaller mesh"
        ))
    } else {
        Error::Backend(format!("CUDA {what}: {text}"))
    }
}

/// The PTX of every kernel file, by file name.
type Modules = Vec<(&'static str, String)>;

/// PTX per architecture, compiled once per process.
fn ptx_for(arch: &str) -> Result<Modules> {
    static CACHE: OnceLock<Mutex<HashMap<String, Modules>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(found) = cache.lock().expect("not poisoned").get(arch) {
        return Ok(found.clone());
    }
    let ptx = match std::env::var_os("TENSORFEM_PTX_DIR") {
        Some(dir) => FILES
            .iter()
            .map(|f| {
                let path = PathBuf::from(&dir).join(format!("{}.ptx", f.name));
                std::fs::read_to_string(&path)
                    .map(|text| (f.name, text))
                    .map_err(|e| {
                        Error::Backend(format!(
                            "TENSORFEM_PTX_DIR: {} cannot be read ({e}); write it with `make ptx` (tensorfem kernels --ptx-dir)",
                            path.display()
                        ))
                    })
            })
            .collect::<Result<Vec<_>>>()?,
        None => {
            let include = compile::cuda_include_dir()?;
            FILES
                .iter()
                .map(|f| compile::compile(f, arch, &include, false).map(|c| (f.name, c.ptx)))
                .collect::<Result<Vec<_>>>()?
        }
    };
    cache
        .lock()
        .expect("not poisoned")
        .insert(arch.to_string(), ptx.clone());
    Ok(ptx)
}

impl Cuda {
    /// The device `info` names (found by [`super::probe`]), with its kernels loaded.
    pub fn new(info: &CudaDeviceInfo) -> Result<Self> {
        let ctx = CudaContext::new(info.ordinal).map_err(|e| driver("context", e))?;
        // One stream per rank, kernels in issue order: no events needed.
        // SAFETY: no buffer exists yet, and every later operation uses `stream` alone.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| driver("stream", e))?;
        let blas = CudaBlas::new(stream.clone())
            .map_err(|e| Error::Backend(format!("cuBLAS could not be started: {e:?}")))?;
        let (major, minor) = info.compute_capability;
        let arch = format!("sm_{major}{minor}");
        let mut functions = HashMap::new();
        for (file, ptx) in ptx_for(&arch)? {
            let entries = compile::entry_points(&ptx);
            let module = ctx
                .load_module(Ptx::from_src(ptx))
                .map_err(|e| driver(&format!("loading kernels/{file}.cu for {arch}"), e))?;
            for entry in entries {
                let f = module
                    .load_function(&entry)
                    .map_err(|e| driver(&format!("kernel {entry}"), e))?;
                functions.insert(entry, f);
            }
        }
        let params = stream.alloc_zeros(1024).map_err(|e| driver("alloc", e))?;
        let reduce = stream.alloc_zeros(1024).map_err(|e| driver("alloc", e))?;
        Ok(Cuda {
            inner: Arc::new(Inner {
                info: info.clone(),
                ctx,
                stream,
                blas,
                functions,
                params: Mutex::new(params),
                reduce: Mutex::new(reduce),
                staging: Mutex::new(None),
            }),
        })
    }

    /// The process's device for `info`'s ordinal, set up on first use: the operators of a
    /// rank share one context, stream and set of kernels.
    pub fn shared(info: &CudaDeviceInfo) -> Result<Self> {
        static DEVICES: OnceLock<Mutex<HashMap<usize, Cuda>>> = OnceLock::new();
        let mut devices = DEVICES
            .get_or_init(Default::default)
            .lock()
            .expect("not poisoned");
        if let Some(dev) = devices.get(&info.ordinal) {
            return Ok(dev.clone());
        }
        let dev = Cuda::new(info)?;
        devices.insert(info.ordinal, dev.clone());
        Ok(dev)
    }

    pub fn info(&self) -> &CudaDeviceInfo {
        &self.inner.info
    }

    pub(super) fn stream(&self) -> &Arc<CudaStream> {
        &self.inner.stream
    }

    /// The cuBLAS handle, with the context made current on the calling thread (raw cuBLAS
    /// and driver calls, unlike cudarc's own, do not do that themselves).
    pub(super) fn blas(&self) -> Result<&CudaBlas> {
        self.bind()?;
        Ok(&self.inner.blas)
    }

    /// Makes the context current on the calling thread.
    pub(super) fn bind(&self) -> Result<()> {
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(|e| driver("context", e))
    }

    /// Free and total device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize)> {
        self.inner
            .ctx
            .mem_get_info()
            .map_err(|e| driver("memory query", e))
    }

    /// Launches kernel `name` with `args` (checked against the kernel's signature).
    pub(super) fn launch(&self, name: &str, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
        let f = self.inner.functions.get(name).ok_or_else(|| {
            Error::Backend(format!("no CUDA kernel {name} (kernels/*.cu define it?)"))
        })?;
        check_args(name, args)?;
        let mut builder = self.inner.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::Ptr(v) | Arg::U64(v) => builder.arg(v),
                Arg::U32(v) => builder.arg(v),
                Arg::F64(v) => builder.arg(v),
            };
        }
        // SAFETY: the arguments match the kernel's parameters (checked above against the
        // signature table, which a test checks against the PTX), and the pointers are to
        // live buffers of the lengths the kernel is told.
        unsafe { builder.launch(cfg) }
            .map(|_| ())
            .map_err(|e| driver(&format!("kernel {name}"), e))
    }

    /// The device address of a buffer (plus `offset` elements).
    pub(super) fn ptr<T: DType>(&self, buffer: &CudaSlice<T>, offset: usize) -> Arg {
        let (p, _sync) = buffer.device_ptr(&self.inner.stream);
        Arg::Ptr(p + (offset * std::mem::size_of::<T>()) as u64)
    }

    /// The device address of entry `offset` of run-time-typed data.
    pub(super) fn data_ptr(&self, data: &Data<Cuda>, offset: usize) -> Arg {
        match data {
            Data::F16(b) => self.ptr(b, offset),
            Data::F32(b) => self.ptr(b, offset),
            Data::F64(b) => self.ptr(b, offset),
        }
    }

    /// Uploads `values` to the parameter buffer and runs `f` with its address.
    pub(super) fn with_params<R>(
        &self,
        values: &[f64],
        f: impl FnOnce(Arg) -> Result<R>,
    ) -> Result<R> {
        let mut params = self.inner.params.lock().expect("not poisoned");
        grow(self, &mut params, values.len())?;
        self.inner
            .stream
            .memcpy_htod(values, &mut *params)
            .map_err(|e| driver("parameter upload", e))?;
        let p = self.ptr(&params, 0);
        f(p)
    }

    /// Runs `f` with the pinned staging memory (allocated on first use).
    fn staging<R>(&self, f: impl FnOnce(&mut Staging) -> Result<R>) -> Result<R> {
        // The staged copies call the driver directly: the context must be this thread's.
        self.bind()?;
        let mut staging = self.inner.staging.lock().expect("not poisoned");
        if staging.is_none() {
            *staging = Some(Staging::new(&self.inner.ctx)?);
        }
        f(staging.as_mut().expect("just set"))
    }

    /// Runs `f` with the device's scratch for reductions that return to the host.
    pub(super) fn with_reduce<R>(
        &self,
        f: impl FnOnce(&mut CudaSlice<f64>) -> Result<R>,
    ) -> Result<R> {
        let mut reduce = self.inner.reduce.lock().expect("not poisoned");
        f(&mut reduce)
    }
}

/// Replaces `buffer` by a larger one when it holds fewer than `len` values (first use).
pub(super) fn grow(dev: &Cuda, buffer: &mut CudaSlice<f64>, len: usize) -> Result<()> {
    if buffer.len() < len {
        *buffer = dev
            .inner
            .stream
            .alloc_zeros(len.max(1))
            .map_err(|e| driver("alloc", e))?;
    }
    Ok(())
}

impl Device for Cuda {
    type Buffer<T: DType> = CudaSlice<T>;

    fn name(&self) -> String {
        format!(
            "cuda device {} ({})",
            self.inner.info.ordinal, self.inner.info.name
        )
    }

    fn zeros<T: DType>(&self, len: usize) -> Result<CudaSlice<T>> {
        let stream = &self.inner.stream;
        if len == 0 {
            return stream.null().map_err(|e| driver("allocation", e));
        }
        stream
            .alloc_zeros(len)
            .map_err(|e| driver(&format!("allocating {len} values"), e))
    }

    fn upload<T: DType>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        if host.is_empty() {
            return self.zeros(0);
        }
        if std::mem::size_of_val(host) >= STAGED_BYTES {
            let mut buffer = self.zeros(host.len())?;
            self.write(host, &mut buffer)?;
            return Ok(buffer);
        }
        self.inner
            .stream
            .clone_htod(host)
            .map_err(|e| driver(&format!("upload of {} values", host.len()), e))
    }

    fn write_unchecked<T: DType>(&self, host: &[T], dst: &mut CudaSlice<T>) -> Result<()> {
        if host.is_empty() {
            return Ok(());
        }
        let bytes: &[u8] = bytemuck::cast_slice(host);
        if bytes.len() >= STAGED_BYTES {
            let stream = &self.inner.stream;
            let (ptr, _record) = dst.device_ptr_mut(stream);
            return self.staging(|s| s.upload(stream, bytes, ptr));
        }
        self.inner
            .stream
            .memcpy_htod(host, dst)
            .map_err(|e| driver("upload", e))
    }

    fn read_unchecked<T: DType>(
        &self,
        src: &CudaSlice<T>,
        offset: usize,
        host: &mut [T],
    ) -> Result<()> {
        let end = offset + host.len();
        if host.is_empty() {
            return Ok(());
        }
        if std::mem::size_of_val(host) >= STAGED_BYTES {
            let stream = &self.inner.stream;
            let (ptr, _record) = src.device_ptr(stream);
            let start = ptr + (offset * std::mem::size_of::<T>()) as u64;
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(host);
            return self.staging(|s| s.download(stream, start, bytes));
        }
        self.inner
            .stream
            .memcpy_dtoh(&src.slice(offset..end), host)
            .and_then(|()| self.inner.stream.synchronize())
            .map_err(|e| driver("download", e))
    }

    fn buffer_len<T: DType>(buffer: &CudaSlice<T>) -> usize {
        buffer.len()
    }

    fn synchronize(&self) -> Result<()> {
        self.inner
            .stream
            .synchronize()
            .map_err(|e| driver("synchronize", e))
    }

    fn free_memory(&self) -> Result<Option<usize>> {
        Ok(Some(self.memory()?.0))
    }

    /// Host reads are stream-ordered copies: each waits for every kernel issued before it.
    fn reads_synchronize(&self) -> bool {
        true
    }

    /// A timing event recorded on the rank's stream.
    type Mark = cudarc::driver::CudaEvent;

    fn mark(&self) -> Result<cudarc::driver::CudaEvent> {
        self.inner
            .stream
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| driver("event", e))
    }

    fn seconds_between(&self, start: &Self::Mark, end: &Self::Mark) -> Result<f64> {
        start
            .elapsed_ms(end)
            .map(|ms| f64::from(ms) / 1e3)
            .map_err(|e| driver("event time", e))
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        // Kernels are issued from the calling thread, which needs the context current.
        let _ = self.inner.ctx.bind_to_thread();
        f()
    }
}
