//! The device layer: where solver data lives and the kernels that work on it.
//!
//! A [`Device`] allocates typed buffers, moves them to and from the host, and synchronizes.
//! Solvers hold [`Data`] and [`Block`]s, whose element precision (f16, f32, f64) is a
//! run-time value, and call kernels through the kernel-family traits below; a family's
//! methods take run-time-typed data and each backend dispatches to its typed kernels,
//! named `<op>_<dtype>` (or `<op>_<storage>_<compute>` where the two differ) in the CPU
//! backend ([`cpu`]) and in `kernels/*.cu` for CUDA. Solvers are generic over `D:
//! Kernels` and never name a backend: a new backend implements these traits and touches
//! no solver file.
//!
//! Arithmetic on f16 data runs in f32 (its compute precision, `Stored::Compute`); f32 and
//! f64 compute in themselves. Every reduction is bitwise reproducible whatever the number
//! of threads.

pub mod block;
pub mod cg;
pub mod clock;
pub mod cpu;
pub mod cuda;
pub mod host;
pub mod psc;
pub mod sparse;
pub mod stats;
pub mod stencil;

use std::fmt;
use std::str::FromStr;

use half::f16;

pub use block::{Block, Data, Layout, MatMut, MatRef, View, ViewMut};
pub use clock::{StageMarks, StageTime};
pub use cpu::Cpu;
pub use host::HostArray;
pub use psc::PscKernels;
pub use sparse::{
    CsrMatrix, EllMatrix, GridShape, LevelTransfer, MatrixStorage, MultigridKernels, RowOp,
    SparseKernels,
};
pub use stats::{ColumnStats, FlagLog, Stats};
pub use stencil::StokesKernels;

use crate::error::{Error, Result};
use crate::precision::{GemmMath, Precision, Stored};

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
    fn write<T: DType>(&self, host: &[T], dst: &mut Self::Buffer<T>) -> Result<()>;

    /// Copies `host.len()` values from `src`, starting at `offset`, to the host.
    fn read<T: DType>(&self, src: &Self::Buffer<T>, offset: usize, host: &mut [T]) -> Result<()>;

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

/// Scratch of a kernel that reduces (partial sums), owned by its caller and grown by the
/// backend on first use, so the apply that follows allocates nothing.
pub struct Scratch<D: Device>(pub D::Buffer<f64>);

impl<D: Device> Scratch<D> {
    pub fn new(dev: &D) -> Result<Self> {
        Ok(Scratch(dev.zeros(0)?))
    }
}

/// Level-1 operations on vectors and blocks.
pub trait VectorKernels: Device {
    /// x = value.
    fn fill(&self, x: ViewMut<'_, Self>, value: f64) -> Result<()>;
    /// dst = src; the precisions may differ (rounded to nearest).
    fn copy(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()>;
    /// y = α x + β y (one precision; arithmetic in its compute precision).
    fn axpby(&self, alpha: f64, x: View<'_, Self>, beta: f64, y: ViewMut<'_, Self>) -> Result<()>;
    /// x = α x.
    fn scale(&self, alpha: f64, x: ViewMut<'_, Self>) -> Result<()>;
    /// y = α d ∘ x (one precision; y is only written).
    fn scaled_product(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// y += α d ∘ (x − z) (one precision): a damped Jacobi update with diagonal inverse d.
    fn scaled_product_add(
        &self,
        alpha: f64,
        d: View<'_, Self>,
        x: View<'_, Self>,
        z: View<'_, Self>,
        y: ViewMut<'_, Self>,
    ) -> Result<()>;
    /// x · y in f64 (one precision).
    fn dot(&self, x: View<'_, Self>, y: View<'_, Self>) -> Result<f64>;
    /// ‖x‖₂ in f64, NaN when x holds a NaN.
    fn nrm2(&self, x: View<'_, Self>) -> Result<f64>;
    /// Σ x in f64.
    fn sum(&self, x: View<'_, Self>) -> Result<f64>;
    /// x += value.
    fn shift(&self, x: ViewMut<'_, Self>, value: f64) -> Result<()>;
    /// dst = src in dst's layout and precision (column-major ↔ node-major, rounded).
    fn relayout(&self, src: &Block<Self>, dst: &mut Block<Self>) -> Result<()>;
    /// The per-column statistics of `x`.
    fn column_stats(&self, x: &Block<Self>, stats: &mut Stats<Self>) -> Result<()>;
    /// Appends the range flag of the kernel that last recorded into `stats` to `log`
    /// (without a host read where the statistics are still on the device); the log must
    /// have room ([`FlagLog::reserve`]).
    fn log_range_flag(&self, stats: &Stats<Self>, log: &mut FlagLog<Self>) -> Result<()>;
    /// out_c = x_c · y_c in f64 for every column (x and y in one precision).
    fn column_dots(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<()>;
    /// y_c = α_c x_c + β_c y_c for every column (one precision; arithmetic in its compute
    /// precision).
    fn column_axpby(
        &self,
        alpha: &[f64],
        x: &Block<Self>,
        beta: &[f64],
        y: &mut Block<Self>,
    ) -> Result<()>;
    /// [`VectorKernels::column_dots`] into `out[at..at + cols]`, left on the device.
    fn column_dots_to(
        &self,
        x: &Block<Self>,
        y: &Block<Self>,
        out: &mut Self::Buffer<f64>,
        at: usize,
        scratch: &mut Scratch<Self>,
    ) -> Result<()>;
    /// [`VectorKernels::column_axpby`] with α and β read on the device from
    /// `coefficients[alpha..alpha + cols]` and `coefficients[beta..beta + cols]`.
    fn column_axpby_from(
        &self,
        coefficients: &Self::Buffer<f64>,
        alpha: usize,
        x: &Block<Self>,
        beta: usize,
        y: &mut Block<Self>,
    ) -> Result<()>;
    /// One step of block CG's scalar logic on the device buffer `scalars` of `cols`
    /// columns (layout and logic: [`cg`]).
    fn cg_scalars(
        &self,
        step: cg::CgStep,
        scalars: &mut Self::Buffer<f64>,
        cols: usize,
    ) -> Result<()>;
    /// dst_c = src_c / s_c (s_c = `scale[c]`; zero gives a zero column), rounded to dst's
    /// precision, with the statistics of what was stored (before rounding).
    fn scale_columns(
        &self,
        src: &Block<Self>,
        scale: &[f64],
        dst: &mut Block<Self>,
        stats: &mut Stats<Self>,
    ) -> Result<()>;
}

/// Dense products.
pub trait DenseKernels: Device {
    /// C = A·B with A and B in one storage precision S and C in S or in S's compute
    /// precision; products and sums in the compute precision (f16: f32), with f32
    /// operands rounded to TF32 first when `math` is [`GemmMath::Tf32`] (f32 only).
    fn gemm(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        math: GemmMath,
    ) -> Result<()>;
    /// C = A·B for a symmetric A (square; both triangles stored, Aᵀ = A): what
    /// [`DenseKernels::gemm`] computes, in whichever layout of the product the device
    /// multiplies fastest (the CPU: Cᵀ = Bᵀ·A for a narrow B). PSC's dense inverses Π⁻¹,
    /// Λ⁻¹ and Θ⁻¹ on blocks of right-hand sides.
    fn symm(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        math: GemmMath,
    ) -> Result<()> {
        self.gemm(a, b, c, math)
    }
    /// C_i = A_i·B_i for i < `batch.count`, the i-th operands at their offsets plus i times
    /// the batch's strides (a stride of 0 shares an operand): the group-wise C⁻¹ products
    /// of PSC for every right-hand side in one call. Precisions as in [`DenseKernels::gemm`].
    fn gemm_batched(
        &self,
        a: MatRef<'_, Self>,
        b: MatRef<'_, Self>,
        c: MatMut<'_, Self>,
        batch: Batch,
        math: GemmMath,
    ) -> Result<()> {
        for i in 0..batch.count {
            self.gemm(
                MatRef {
                    offset: a.offset + i * batch.stride_a,
                    ..a
                },
                MatRef {
                    offset: b.offset + i * batch.stride_b,
                    ..b
                },
                MatMut {
                    data: &mut *c.data,
                    offset: c.offset + i * batch.stride_c,
                    rows: c.rows,
                    cols: c.cols,
                    ld: c.ld,
                },
                math,
            )?;
        }
        Ok(())
    }
    /// y = A x for a column-major A in storage S, x and y in S's compute precision: one
    /// pass over A (the product of a single right-hand side).
    fn gemv(&self, a: MatRef<'_, Self>, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()>;
    /// y = A x for a symmetric A (square, column-major, both triangles stored) in storage S:
    /// what [`DenseKernels::gemv`] computes, reading only the lower triangle where
    /// [`DenseKernels::symv_reads_lower_triangle`] says so (half the bytes).
    fn symv(&self, a: MatRef<'_, Self>, x: View<'_, Self>, y: ViewMut<'_, Self>) -> Result<()> {
        self.gemv(a, x, y)
    }
    /// Whether [`DenseKernels::symv`] reads only the lower triangle (else all of A).
    fn symv_reads_lower_triangle(&self) -> bool {
        false
    }
    /// One classical Gram-Schmidt step against the f64 vectors `basis`, fused: c = Vᵀw,
    /// w −= V c and h += c (a second step re-orthogonalises into the same h), with ‖w‖²
    /// alongside; returns ‖w‖ before and after.
    fn orthogonalize(
        &self,
        basis: &[Block<Self>],
        w: &mut Block<Self>,
        h: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<(f64, f64)>;
    /// Gram-Schmidt as FGMRES needs it: one [`DenseKernels::orthogonalize`] step, and a
    /// second when the first cancelled most of w (the DGKS criterion ‖w'‖ < ‖w‖/√2; "twice
    /// is enough"), both adding into h; returns ‖w‖ at the end. With a good preconditioner
    /// w = A M⁻¹ v_j is close to v_j and the second step always runs, so a device may fuse
    /// the first step's update with the second step's products (one pass over the basis
    /// less); the results are those of the two steps.
    fn orthogonalize_twice_if_needed(
        &self,
        basis: &[Block<Self>],
        w: &mut Block<Self>,
        h: &mut [f64],
        scratch: &mut Scratch<Self>,
    ) -> Result<f64> {
        let (before, after) = self.orthogonalize(basis, w, h, scratch)?;
        if needs_second_step(before, after) {
            return Ok(self.orthogonalize(basis, w, h, scratch)?.1);
        }
        Ok(after)
    }
}

/// The DGKS criterion of [`DenseKernels::orthogonalize_twice_if_needed`]: a Gram-Schmidt
/// step that left ‖w‖ below ‖w‖/√2 of before cancelled enough that a second is needed.
pub fn needs_second_step(before: f64, after: f64) -> bool {
    after < before * std::f64::consts::FRAC_1_SQRT_2
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

/// What a device did with a set-up's dense inversion ([`DenseInverse::spd_inverse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inverted {
    Done,
    /// The Cholesky pivot at `index` was not positive (the matrix is left undefined).
    NotPositiveDefinite {
        index: usize,
    },
    /// The device leaves it to the host (the matrix is untouched): no such device code,
    /// its library is missing, or the matrix does not fit its memory.
    LeftToHost,
}

/// The dense f64 inversions of a set-up (PSC's Π⁻¹ and Λ⁻¹: |E|² values, |E|³ work,
/// 30 GB and minutes on a host at h = 1/1024): a GPU does them with cuSOLVER; the host's
/// blocked inversion (`linalg::spd_inverse_in_place`) is the default and the fallback.
pub trait DenseInverse {
    /// A ← (A − GᵀG)⁻¹ (`gram` G: k × n, when given) for a symmetric A (its lower triangle
    /// read) whose result is positive definite; after `Done` A's lower triangle holds the
    /// inverse (the caller mirrors it).
    fn spd_inverse(
        &self,
        a: &mut faer::Mat<f64>,
        gram: Option<&faer::Mat<f64>>,
    ) -> Result<Inverted> {
        let _ = (a, gram);
        Ok(Inverted::LeftToHost)
    }
}

/// The host: [`DenseInverse`]'s default.
pub struct OnHost;

impl DenseInverse for OnHost {}

/// How many products a batched GEMM computes and how far apart their operands lie (in
/// elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    pub count: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
}

/// The kernel families multigrid needs (PSC's and the ELLPACK sweeps and grid transfers):
/// what a device must offer to run it.
pub trait MultigridDevice: PscDevice + MultigridKernels {}

impl<D> MultigridDevice for D where D: PscDevice + MultigridKernels {}

/// Every kernel family: what Stokes requires of a device.
pub trait Kernels: MultigridDevice + stencil::StokesKernels {}

impl<D> Kernels for D where D: MultigridDevice + stencil::StokesKernels {}

/// Stamps out one `#[test]` per backend for each generic test function `fn name<D:
/// Kernels>(dev: &D)`: `name::cpu` runs it on the CPU device. A new backend adds its arm
/// here, so that every kernel and solver test runs on it too.
///
/// `device_tests!(cuda: …)` stamps out `name::cuda` as well (the CUDA device implements every
/// kernel family): it runs on the first GPU, and where there is none it says it is skipped
/// (and fails when TENSORFEM_REQUIRE_CUDA=1).
#[macro_export]
macro_rules! device_tests {
    (cuda: $($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn cpu() {
                    super::$name(&$crate::device::Cpu::new());
                }
                #[test]
                fn cuda() {
                    if let Some(dev) = $crate::device::cuda::test_device() {
                        super::$name(&dev);
                    }
                }
            }
        )*
    };
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn cpu() {
                    super::$name(&$crate::device::Cpu::new());
                }
            }
        )*
    };
}

/// A kernel's name, `<op>_<dtype>`, or `<op>_<storage>_<compute>` where the precisions of
/// its operands differ (repeats collapsed: `csr_spmm` on f64 × f32 × f32 is
/// `csr_spmm_f64_f32`). Each backend's entry points follow it (the CPU's generic kernels are
/// instantiated per storage/compute pair under the same `<op>`).
pub fn kernel_name(op: &str, precisions: &[Precision]) -> String {
    let mut name = op.to_string();
    let mut last = None;
    for &p in precisions {
        if last != Some(p) {
            name.push('_');
            name.push_str(p.name());
            last = Some(p);
        }
    }
    name
}

/// 1/s per column; a zero scale (an inactive column) gives zero.
pub(crate) fn inverse_scale(s: f64) -> f64 {
    if s > 0.0 {
        1.0 / s
    } else {
        0.0
    }
}

/// Fails unless two lengths a kernel pairs up agree (every backend's argument check).
pub(crate) fn check_len(what: &str, a: usize, b: usize) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "{what}: lengths {a} and {b} differ"
        )))
    }
}

/// Fails unless `b` is a column-major `rows × cols` block (the CSR and PSC kernels' blocks).
pub(crate) fn check_col_major<D: Device>(
    what: &str,
    b: &Block<D>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    if b.layout() == Layout::ColMajor && b.rows() == rows && b.cols() == cols {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "{what}: a {}×{} {:?} block where a {rows}×{cols} column-major one belongs",
            b.rows(),
            b.cols(),
            b.layout()
        )))
    }
}

/// The error of a kernel given data of a precision (or combination) it does not take.
/// TF32 math rounds f32 operands: any other storage is refused.
pub fn check_gemm_math(math: GemmMath, operands: Precision) -> Result<()> {
    if math == GemmMath::Tf32 && operands != Precision::F32 {
        return Err(Error::Backend(format!(
            "a GEMM in TF32 takes f32 operands, not {operands}"
        )));
    }
    Ok(())
}

pub fn unsupported(op: &str, precisions: &[Precision]) -> Error {
    Error::Backend(format!(
        "no kernel {}: {op} has no variant for these precisions",
        kernel_name(op, precisions)
    ))
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
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "cuda" => Ok(BackendChoice::Cuda),
            _ => Err(format!("unknown backend '{s}' (allowed: {})", Self::NAMES)),
        }
    }
}
