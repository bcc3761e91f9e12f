//! Which vector instructions the CPU kernels use, chosen at run time: the binary is built
//! for baseline x86-64 (SSE2), and the hot loops are compiled again inside functions with
//! `#[target_feature]` (AVX2, AVX-512F) that are called only where the CPU has them. The
//! loops are written so that each vector lane is one right-hand side's (or, with one
//! right-hand side, one matrix row's) own arithmetic in its own order (no reassociation, no
//! fused multiply-add: Rust never contracts `a + b·c`), so every level gives bitwise the
//! same results and may be switched at any time.
//!
//! std::arch's detection and `#[target_feature]` rather than the `pulp` crate: the kernels
//! stay plain Rust loops over fixed-size tiles that the compiler vectorises, with no SIMD
//! types in their code and no new dependency; the one place that names instructions is
//! [`TileIo`]: the f16 tile conversions and the gathers of x at a slice's column indices,
//! which the compiler does not vectorise on its own. Closures inside a kernel are compiled
//! without its target features, so the kernels' helpers are `#[inline(always)]` functions.
//!
//! `TENSORFEM_SIMD=scalar|avx2|avx512` forces a level (a level the CPU lacks falls back to
//! the best it has, with a warning); tests switch levels with [`set_level`].

use std::sync::atomic::{AtomicU8, Ordering};

use half::f16;

use crate::precision::Stored;

/// A set of vector instructions (both wider levels with F16C, which every CPU with AVX2
/// has, for the f16 conversions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// The baseline the binary is built for (SSE2 on x86-64).
    Scalar = 1,
    Avx2 = 2,
    Avx512 = 3,
}

impl SimdLevel {
    pub const ALL: [SimdLevel; 3] = [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512];

    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    /// Whether this CPU has the level's instructions.
    pub fn is_supported(self) -> bool {
        match self {
            SimdLevel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx2 => {
                std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512 => {
                std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("f16c")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            3 => SimdLevel::Avx512,
            2 => SimdLevel::Avx2,
            _ => SimdLevel::Scalar,
        }
    }
}

/// 0: not chosen yet.
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// The widest level this CPU has.
pub fn best() -> SimdLevel {
    SimdLevel::ALL
        .into_iter()
        .rev()
        .find(|l| l.is_supported())
        .unwrap_or(SimdLevel::Scalar)
}

/// The level the kernels use: TENSORFEM_SIMD when set (and supported), else the best.
pub fn level() -> SimdLevel {
    match LEVEL.load(Ordering::Relaxed) {
        0 => {
            let chosen = chosen_from_env();
            LEVEL.store(chosen as u8, Ordering::Relaxed);
            chosen
        }
        v => SimdLevel::from_u8(v),
    }
}

fn chosen_from_env() -> SimdLevel {
    let Ok(wanted) = std::env::var("TENSORFEM_SIMD") else {
        return best();
    };
    match SimdLevel::ALL.into_iter().find(|l| l.name() == wanted) {
        Some(l) if l.is_supported() => l,
        Some(l) => {
            log::warn!(
                "TENSORFEM_SIMD={wanted}: this CPU lacks {}; using {}",
                l.name(),
                best().name()
            );
            best()
        }
        None => {
            log::warn!(
                "TENSORFEM_SIMD={wanted} is not a level (scalar, avx2, avx512); using {}",
                best().name()
            );
            best()
        }
    }
}

/// Makes the kernels use `level` from now on (a level this CPU lacks is refused: false).
/// Results do not depend on the level, so other threads' kernels are not disturbed.
pub fn set_level(level: SimdLevel) -> bool {
    if !level.is_supported() {
        return false;
    }
    LEVEL.store(level as u8, Ordering::Relaxed);
    true
}

/// Defines `$name::<T>(args)` (or `$name(args)`, `$name::<A, B>`, or `$name::<T: Bound>` for
/// types other than the storage types): `$portable::<T, LEVEL>(args)` compiled for the SIMD level
/// `simd::level` names (AVX-512F or AVX2, both with F16C, or the scalar baseline) and called
/// in that copy. The portable body is `#[inline(always)]`, so each copy is its own code.
macro_rules! per_simd_level {
    ($(#[$doc:meta])* fn $name:ident($args:ty) => $portable:ident) => {
        $(#[$doc])*
        fn $name(args: $args) {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,f16c")]
            unsafe fn avx2(args: $args) {
                $portable::<{ $crate::device::cpu::simd::SimdLevel::Avx2 as u8 }>(args)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,f16c")]
            unsafe fn avx512(args: $args) {
                $portable::<{ $crate::device::cpu::simd::SimdLevel::Avx512 as u8 }>(args)
            }
            match $crate::device::cpu::simd::level() {
                // SAFETY: `simd::level` names only levels this CPU has (F16C included).
                #[cfg(target_arch = "x86_64")]
                $crate::device::cpu::simd::SimdLevel::Avx512 => unsafe { avx512(args) },
                #[cfg(target_arch = "x86_64")]
                $crate::device::cpu::simd::SimdLevel::Avx2 => unsafe { avx2(args) },
                _ => $portable::<{ $crate::device::cpu::simd::SimdLevel::Scalar as u8 }>(args),
            }
        }
    };
    ($(#[$doc:meta])* fn $name:ident<$t:ident>($args:ty) => $portable:ident) => {
        $crate::device::cpu::simd::per_simd_level! {
            $(#[$doc])*
            fn $name<$t: $crate::device::cpu::simd::KernelStorage>($args) => $portable
        }
    };
    ($(#[$doc:meta])* fn $name:ident<$a:ident, $b:ident>($args:ty) => $portable:ident) => {
        $(#[$doc])*
        fn $name<
            $a: $crate::device::Storage + $crate::device::cpu::simd::TileIo,
            $b: $crate::device::Storage + $crate::device::cpu::simd::TileIo,
        >(args: $args) {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,f16c")]
            unsafe fn avx2<
                $a: $crate::device::Storage + $crate::device::cpu::simd::TileIo,
                $b: $crate::device::Storage + $crate::device::cpu::simd::TileIo,
            >(args: $args) {
                $portable::<$a, $b, { $crate::device::cpu::simd::SimdLevel::Avx2 as u8 }>(args)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,f16c")]
            unsafe fn avx512<
                $a: $crate::device::Storage + $crate::device::cpu::simd::TileIo,
                $b: $crate::device::Storage + $crate::device::cpu::simd::TileIo,
            >(args: $args) {
                $portable::<$a, $b, { $crate::device::cpu::simd::SimdLevel::Avx512 as u8 }>(args)
            }
            match $crate::device::cpu::simd::level() {
                // SAFETY: `simd::level` names only levels this CPU has (F16C included).
                #[cfg(target_arch = "x86_64")]
                $crate::device::cpu::simd::SimdLevel::Avx512 => unsafe { avx512::<$a, $b>(args) },
                #[cfg(target_arch = "x86_64")]
                $crate::device::cpu::simd::SimdLevel::Avx2 => unsafe { avx2::<$a, $b>(args) },
                _ => $portable::<$a, $b, { $crate::device::cpu::simd::SimdLevel::Scalar as u8 }>(args),
            }
        }
    };
    ($(#[$doc:meta])* fn $name:ident<$t:ident: $bound:path>($args:ty) => $portable:ident) => {
        $(#[$doc])*
        fn $name<$t: $bound>(args: $args) {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,f16c")]
            unsafe fn avx2<$t: $bound>(args: $args) {
                $portable::<$t, { $crate::device::cpu::simd::SimdLevel::Avx2 as u8 }>(args)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,f16c")]
            unsafe fn avx512<$t: $bound>(args: $args) {
                $portable::<$t, { $crate::device::cpu::simd::SimdLevel::Avx512 as u8 }>(args)
            }
            match $crate::device::cpu::simd::level() {
                // SAFETY: `simd::level` names only levels this CPU has (F16C included).
                #[cfg(target_arch = "x86_64")]
                $crate::device::cpu::simd::SimdLevel::Avx512 => unsafe { avx512::<$t>(args) },
                #[cfg(target_arch = "x86_64")]
                $crate::device::cpu::simd::SimdLevel::Avx2 => unsafe { avx2::<$t>(args) },
                _ => $portable::<$t, { $crate::device::cpu::simd::SimdLevel::Scalar as u8 }>(args),
            }
        }
    };
}

pub(super) use per_simd_level;

/// Runs `$body` for each tile of [`TILE`] columns of a row of `$nrhs` columns (row `$i` of a
/// chunk), with `$c0` the tile's first column, `$t` its width, and `$lane` and `$top` its
/// Σ v² lane (one of four, by row) in `$sumsq` and its max |v| in `$largest`. The width is
/// a constant everywhere: TILE for the whole tiles, and the partial last tile compiled for
/// each width 1–15, so loads, stores and lane loops compile to vector code for that width
/// (with a run-time width each value went through a padded copy, and 2 to 15 columns took
/// 15–30× the time per column of a whole tile).
macro_rules! row_tiles {
    (
        $nrhs:expr, $i:expr, $sumsq:ident, $largest:ident,
        |$c0:ident, $t:ident, $lane:ident, $top:ident| $body:expr
    ) => {{
        let (nrhs, i) = ($nrhs, $i);
        let tile_width = $crate::device::cpu::simd::TILE;
        let full = nrhs / tile_width;
        for tile in 0..full {
            let ($c0, $t) = (tile * tile_width, $crate::device::cpu::simd::TILE);
            let ($lane, $top) = (&mut $sumsq[4 * tile + i % 4], &mut $largest[tile]);
            $body;
        }
        if !nrhs.is_multiple_of(tile_width) {
            let $c0 = full * tile_width;
            let ($lane, $top) = (&mut $sumsq[4 * full + i % 4], &mut $largest[full]);
            match nrhs % tile_width {
                1 => {
                    let $t = 1;
                    $body;
                }
                2 => {
                    let $t = 2;
                    $body;
                }
                3 => {
                    let $t = 3;
                    $body;
                }
                4 => {
                    let $t = 4;
                    $body;
                }
                5 => {
                    let $t = 5;
                    $body;
                }
                6 => {
                    let $t = 6;
                    $body;
                }
                7 => {
                    let $t = 7;
                    $body;
                }
                8 => {
                    let $t = 8;
                    $body;
                }
                9 => {
                    let $t = 9;
                    $body;
                }
                10 => {
                    let $t = 10;
                    $body;
                }
                11 => {
                    let $t = 11;
                    $body;
                }
                12 => {
                    let $t = 12;
                    $body;
                }
                13 => {
                    let $t = 13;
                    $body;
                }
                14 => {
                    let $t = 14;
                    $body;
                }
                15 => {
                    let $t = 15;
                    $body;
                }
                rem => unreachable!("a partial tile of {rem} columns"),
            }
        }
    }};
}

pub(super) use row_tiles;

/// Columns of a node-major block one pass over a matrix row computes at once: one AVX-512
/// register of f32, two of f64. A tile's sums and statistics stay in registers.
pub const TILE: usize = 16;

/// The storage types kernels compiled per SIMD level take (the bound of
/// `per_simd_level!`'s one-type form).
pub trait KernelStorage: crate::device::Storage + TileIo {}

impl<T: crate::device::Storage + TileIo> KernelStorage for T {}

/// Loads and stores of up to [`TILE`] consecutive stored values in their compute precision,
/// converted inside the kernel that reads or writes them. `LEVEL` is the [`SimdLevel`] (as
/// u8) the calling kernel's copy is compiled for: f16 converts 16 values per instruction at
/// AVX-512, 8 at AVX2 (both with F16C), one at a time in the scalar copy. All round to
/// nearest even (overflow to ±Inf): the same values at every level.
pub trait TileIo: Stored {
    /// `src` (at most TILE values) widened; the lanes past its end are zero.
    fn load<const LEVEL: u8>(src: &[Self]) -> [Self::Compute; TILE];
    /// The first `dst.len()` (at most TILE) lanes of `values`, rounded into `dst`.
    fn store<const LEVEL: u8>(values: &[Self::Compute; TILE], dst: &mut [Self]);
    /// `src[idx[j] − lo]` widened, for every lane j: x at the columns of one matrix slot for
    /// the 16 rows of a slice ([`crate::sparse::EllLayout::Sliced`]) that are not one run
    /// (runs are one [`TileIo::load`]). One AVX-512 gather per register (f32: one, f64:
    /// two), AVX2 per 8 f32 or 4 f64, one load per value in the scalar copy and for f16
    /// (then widened as a tile). Only loads and exact widenings: the same values at every
    /// level. An index outside `src` reads its last value instead (the kernels' indices are
    /// in range by construction, checked when a matrix is uploaded; this keeps a bad one
    /// from reading out of bounds, alike at every level). `src` must not be empty.
    fn gather<const LEVEL: u8>(src: &[Self], idx: &[u32; TILE], lo: u32) -> [Self::Compute; TILE];
    /// `top[j] = max(top[j], |values[j]|)` for every lane, keeping a NaN (`top` starts at
    /// zero): the maxima of statistics without Σ v², which otherwise shows a NaN.
    fn fold_magnitudes(top: &mut [Self::Compute; TILE], values: &[Self::Compute; TILE]);
    /// `top[j] = |values[j]|` where that is greater, for every lane (a NaN value leaves
    /// `top` as it is: statistics with Σ v², which shows the NaN).
    #[inline(always)]
    fn fold_largest<const LEVEL: u8>(
        top: &mut [Self::Compute; TILE],
        values: &[Self::Compute; TILE],
    ) {
        fold_largest_lanes(top, values)
    }
    /// A tile in the compute precision widened to f64 (exactly).
    fn widen<const LEVEL: u8>(values: &[Self::Compute; TILE]) -> [f64; TILE];
    /// `src` (at most TILE values) loaded and widened to f64; the lanes past its end are zero.
    #[inline(always)]
    fn load_f64<const LEVEL: u8>(src: &[Self]) -> [f64; TILE] {
        Self::widen::<LEVEL>(&Self::load::<LEVEL>(src))
    }
    /// A tile of f64 values rounded to nearest in the compute precision.
    fn narrow<const LEVEL: u8>(values: &[f64; TILE]) -> [Self::Compute; TILE];
}

/// 16 f64 values rounded to nearest f32: two AVX-512 or four AVX conversions (written out
/// for the reason of [`widen_f32`]).
#[inline(always)]
pub fn narrow_f64<const LEVEL: u8>(values: &[f64; TILE]) -> [f32; TILE] {
    #[cfg(target_arch = "x86_64")]
    if LEVEL >= SimdLevel::Avx2 as u8 {
        // SAFETY: callers at these levels are compiled for, and only run on, CPUs with the
        // level's instructions.
        return unsafe {
            if LEVEL == SimdLevel::Avx512 as u8 {
                x86::narrow_avx512(values)
            } else {
                x86::narrow_avx(values)
            }
        };
    }
    let mut narrow = [0.0; TILE];
    for (n, &v) in narrow.iter_mut().zip(values) {
        *n = v as f32;
    }
    narrow
}

/// 16 f32 values widened to f64 (exactly): two AVX-512 or four AVX conversions, written out
/// because LLVM split blocks of `as f64` into 2-, 4- and 8-lane pieces (3 to 5 conversions,
/// multiplies and adds per tile where 2 do).
#[inline(always)]
pub fn widen_f32<const LEVEL: u8>(values: &[f32; TILE]) -> [f64; TILE] {
    #[cfg(target_arch = "x86_64")]
    if LEVEL >= SimdLevel::Avx2 as u8 {
        // SAFETY: callers at these levels are compiled for, and only run on, CPUs with the
        // level's instructions.
        return unsafe {
            if LEVEL == SimdLevel::Avx512 as u8 {
                x86::widen_avx512(values)
            } else {
                x86::widen_avx(values)
            }
        };
    }
    let mut wide = [0.0; TILE];
    for (w, &v) in wide.iter_mut().zip(values) {
        *w = f64::from(v);
    }
    wide
}

/// `lanes[l] += w[l]² + …` for the values l, l + 4, l + 8, l + 12 of a tile in that order
/// (value r of a record to lane r mod 4, the order of the statistics): the squares as two
/// AVX-512 or four AVX products, the four 4-lane adds in turn. Written out because, left to
/// LLVM, these 4-lane groups made it split the kernels' whole tiles into 1-, 2-, 4- and
/// 8-lane pieces, with spills.
#[inline(always)]
pub fn add_squares_by_four<const LEVEL: u8>(w: &[f64; TILE], lanes: &mut [f64; 4]) {
    #[cfg(target_arch = "x86_64")]
    if LEVEL >= SimdLevel::Avx2 as u8 {
        // SAFETY: callers at these levels are compiled for, and only run on, CPUs with the
        // level's instructions.
        return unsafe {
            if LEVEL == SimdLevel::Avx512 as u8 {
                x86::add_squares_avx512(w, lanes)
            } else {
                x86::add_squares_avx(w, lanes)
            }
        };
    }
    for group in w.chunks_exact(4) {
        for l in 0..4 {
            lanes[l] += group[l] * group[l];
        }
    }
}

/// [`TileIo::fold_largest`] lane by lane: `top` takes |v| only where |v| > top, so a NaN
/// value leaves it as it is.
#[inline(always)]
fn fold_largest_lanes<T: num_traits::Float>(top: &mut [T; TILE], values: &[T; TILE]) {
    for (top, v) in top.iter_mut().zip(values) {
        let a = v.abs();
        *top = if a > *top { a } else { *top };
    }
}

/// [`TileIo::fold_largest`] for f16 storage: one AVX-512 or two AVX maxima, written out
/// because LLVM split [`fold_largest_lanes`]'s f32 lanes, and with them the whole
/// one-column f16 sweep's, into 4-lane pieces (f32 and f64 storage compile to whole
/// registers). `max(a, top)` returns `top` unless a > top, as the loop does (NaN a
/// included).
#[inline(always)]
fn fold_largest_f32<const LEVEL: u8>(top: &mut [f32; TILE], values: &[f32; TILE]) {
    #[cfg(target_arch = "x86_64")]
    if LEVEL >= SimdLevel::Avx2 as u8 {
        // SAFETY: callers at these levels are compiled for, and only run on, CPUs with the
        // level's instructions.
        return unsafe {
            if LEVEL == SimdLevel::Avx512 as u8 {
                x86::largest_avx512(top, values)
            } else {
                x86::largest_avx(top, values)
            }
        };
    }
    fold_largest_lanes(top, values)
}

/// [`TileIo::fold_magnitudes`] on the bits: with the sign cleared, non-negative floats read
/// as (signed, non-negative) integers order like their values, with NaN above +∞; the
/// integer maximum is one instruction and, unlike a float maximum, never drops a NaN.
#[inline(always)]
fn fold_magnitudes_f32(top: &mut [f32; TILE], values: &[f32; TILE]) {
    for (t, v) in top.iter_mut().zip(values) {
        let magnitude = (v.to_bits() & 0x7fff_ffff) as i32;
        *t = f32::from_bits((t.to_bits() as i32).max(magnitude) as u32);
    }
}

/// [`fold_magnitudes_f32`] for f64.
#[inline(always)]
fn fold_magnitudes_f64(top: &mut [f64; TILE], values: &[f64; TILE]) {
    for (t, v) in top.iter_mut().zip(values) {
        let magnitude = (v.to_bits() & 0x7fff_ffff_ffff_ffff) as i64;
        *t = f64::from_bits((t.to_bits() as i64).max(magnitude) as u64);
    }
}

macro_rules! same_type_tiles {
    (
        $t:ty, $avx512:ident, $avx2:ident, $fold:ident, |$tile:ident| $wide:expr,
        |$w:ident| $narrow:expr
    ) => {
        impl TileIo for $t {
            #[inline(always)]
            fn narrow<const LEVEL: u8>($w: &[f64; TILE]) -> [$t; TILE] {
                $narrow
            }
            #[inline(always)]
            fn widen<const LEVEL: u8>($tile: &[$t; TILE]) -> [f64; TILE] {
                $wide
            }
            #[inline(always)]
            fn fold_magnitudes(top: &mut [$t; TILE], values: &[$t; TILE]) {
                $fold(top, values)
            }
            #[inline(always)]
            fn gather<const LEVEL: u8>(src: &[$t], idx: &[u32; TILE], lo: u32) -> [$t; TILE] {
                #[cfg(target_arch = "x86_64")]
                if LEVEL >= SimdLevel::Avx2 as u8 {
                    if let Some(last) = vector_gather_limit(src) {
                        // SAFETY: callers at these levels are compiled for, and only run on,
                        // CPUs with the level's instructions; every offset is clamped to
                        // `last`, an index of `src`.
                        return unsafe {
                            if LEVEL == SimdLevel::Avx512 as u8 {
                                x86::$avx512(src, idx, lo, last)
                            } else {
                                x86::$avx2(src, idx, lo, last)
                            }
                        };
                    }
                }
                scalar_gather(src, idx, lo)
            }
            #[inline(always)]
            fn load<const LEVEL: u8>(src: &[$t]) -> [$t; TILE] {
                if let Ok(full) = <&[$t; TILE]>::try_from(src) {
                    return *full;
                }
                let mut tile = [0.0; TILE];
                for (t, &s) in tile.iter_mut().zip(src) {
                    *t = s;
                }
                tile
            }
            #[inline(always)]
            fn store<const LEVEL: u8>(values: &[$t; TILE], dst: &mut [$t]) {
                if let Ok(full) = <&mut [$t; TILE]>::try_from(&mut *dst) {
                    *full = *values;
                    return;
                }
                for (d, &v) in dst.iter_mut().zip(values) {
                    *d = v;
                }
            }
        }
    };
}
same_type_tiles!(
    f32,
    gather_f32_avx512,
    gather_f32_avx2,
    fold_magnitudes_f32,
    |t| widen_f32::<LEVEL>(t),
    |w| narrow_f64::<LEVEL>(w)
);
same_type_tiles!(
    f64,
    gather_f64_avx512,
    gather_f64_avx2,
    fold_magnitudes_f64,
    |t| *t,
    |w| *w
);

impl TileIo for f16 {
    #[inline(always)]
    fn narrow<const LEVEL: u8>(values: &[f64; TILE]) -> [f32; TILE] {
        narrow_f64::<LEVEL>(values)
    }
    #[inline(always)]
    fn widen<const LEVEL: u8>(values: &[f32; TILE]) -> [f64; TILE] {
        widen_f32::<LEVEL>(values)
    }
    #[inline(always)]
    fn fold_magnitudes(top: &mut [f32; TILE], values: &[f32; TILE]) {
        fold_magnitudes_f32(top, values)
    }
    #[inline(always)]
    fn fold_largest<const LEVEL: u8>(top: &mut [f32; TILE], values: &[f32; TILE]) {
        fold_largest_f32::<LEVEL>(top, values)
    }
    #[inline(always)]
    fn gather<const LEVEL: u8>(src: &[f16], idx: &[u32; TILE], lo: u32) -> [f32; TILE] {
        Self::load::<LEVEL>(&scalar_gather(src, idx, lo))
    }
    #[inline(always)]
    fn load<const LEVEL: u8>(src: &[f16]) -> [f32; TILE] {
        #[cfg(target_arch = "x86_64")]
        if LEVEL >= SimdLevel::Avx2 as u8 {
            let mut padded = [f16::ZERO; TILE];
            let full: &[f16] = if src.len() == TILE {
                src
            } else {
                for (p, &s) in padded.iter_mut().zip(src) {
                    *p = s;
                }
                &padded
            };
            // SAFETY: callers at these levels are compiled for, and only run on, CPUs with
            // the level's instructions and F16C (`SimdLevel::is_supported`); `full` holds
            // TILE = 16 values.
            return unsafe {
                if LEVEL == SimdLevel::Avx512 as u8 {
                    x86::load_avx512(full)
                } else {
                    x86::load_f16c(full)
                }
            };
        }
        let mut tile = [0.0; TILE];
        for (t, s) in tile.iter_mut().zip(src) {
            *t = s.to_f32();
        }
        tile
    }
    #[inline(always)]
    fn store<const LEVEL: u8>(values: &[f32; TILE], dst: &mut [f16]) {
        #[cfg(target_arch = "x86_64")]
        if LEVEL >= SimdLevel::Avx2 as u8 {
            let mut narrowed = [f16::ZERO; TILE];
            let full = dst.len() == TILE;
            let target: &mut [f16] = if full { &mut *dst } else { &mut narrowed };
            // SAFETY: as in `load`; `target` holds TILE values.
            unsafe {
                if LEVEL == SimdLevel::Avx512 as u8 {
                    x86::store_avx512(values, target)
                } else {
                    x86::store_f16c(values, target)
                }
            }
            if !full {
                let len = dst.len();
                dst.copy_from_slice(&narrowed[..len]);
            }
            return;
        }
        for (d, &v) in dst.iter_mut().zip(values) {
            *d = f16::from_f32(v);
        }
    }
}

/// The last index of `src`, when the vector gathers' signed 32-bit offsets reach it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn vector_gather_limit<T>(src: &[T]) -> Option<u32> {
    let last = src
        .len()
        .checked_sub(1)
        .expect("gather from an empty slice");
    u32::try_from(last).ok().filter(|&l| l <= i32::MAX as u32)
}

/// One load per lane, each offset clamped to `src`'s last index.
#[inline(always)]
fn scalar_gather<T: Copy>(src: &[T], idx: &[u32; TILE], lo: u32) -> [T; TILE] {
    let last = src
        .len()
        .checked_sub(1)
        .expect("gather from an empty slice");
    std::array::from_fn(|j| src[(idx[j].wrapping_sub(lo) as usize).min(last)])
}

/// The f16 tile conversions and the gathers. Results go straight to registers or to their destination:
/// through a stack copy, two 16-byte halves would be read back as one wider value, which
/// the CPU cannot forward from the stores (a stall per tile).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::TILE;
    use half::f16;
    use std::arch::x86_64::*;

    /// 16 f16 values widened with two F16C conversions.
    #[inline(always)]
    pub unsafe fn load_f16c(src: &[f16]) -> [f32; TILE] {
        assert_eq!(src.len(), TILE);
        // SAFETY: 16 f16 values = two unaligned 128-bit loads; F16C per the caller.
        unsafe {
            let p = src.as_ptr() as *const __m128i;
            let halves = [
                _mm256_cvtph_ps(_mm_loadu_si128(p)),
                _mm256_cvtph_ps(_mm_loadu_si128(p.add(1))),
            ];
            std::mem::transmute::<[__m256; 2], [f32; TILE]>(halves)
        }
    }

    /// 16 f16 values widened with one AVX-512 conversion (one 512-bit register).
    #[inline(always)]
    pub unsafe fn load_avx512(src: &[f16]) -> [f32; TILE] {
        assert_eq!(src.len(), TILE);
        // SAFETY: 16 f16 values = one unaligned 256-bit load; AVX-512F per the caller.
        unsafe {
            let h = _mm256_loadu_si256(src.as_ptr() as *const __m256i);
            std::mem::transmute::<__m512, [f32; TILE]>(_mm512_cvtph_ps(h))
        }
    }

    /// 16 f32 values rounded to nearest f16 with two F16C conversions, into `dst`.
    #[inline(always)]
    pub unsafe fn store_f16c(values: &[f32; TILE], dst: &mut [f16]) {
        assert_eq!(dst.len(), TILE);
        // SAFETY: two unaligned 256-bit loads of the 16 values and two unaligned 128-bit
        // stores into the 16 of `dst`; F16C per the caller.
        unsafe {
            let (p, q) = (values.as_ptr(), dst.as_mut_ptr() as *mut __m128i);
            _mm_storeu_si128(
                q,
                _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(p)),
            );
            _mm_storeu_si128(
                q.add(1),
                _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(p.add(8))),
            );
        }
    }

    /// The 16 offsets `idx − lo` (wrapping), each at most `last`, in one 512-bit register.
    #[inline(always)]
    unsafe fn offsets_avx512(idx: &[u32; TILE], lo: u32, last: u32) -> __m512i {
        // SAFETY: one unaligned 512-bit load of the 16 indices; AVX-512F per the caller.
        unsafe {
            let v = _mm512_loadu_si512(idx.as_ptr() as *const _);
            let v = _mm512_sub_epi32(v, _mm512_set1_epi32(lo as i32));
            _mm512_min_epu32(v, _mm512_set1_epi32(last as i32))
        }
    }

    /// [`offsets_avx512`] in two 256-bit registers.
    #[inline(always)]
    unsafe fn offsets_avx2(idx: &[u32; TILE], lo: u32, last: u32) -> [__m256i; 2] {
        // SAFETY: two unaligned 256-bit loads of the 16 indices; AVX2 per the caller.
        unsafe {
            let (lo, last) = (_mm256_set1_epi32(lo as i32), _mm256_set1_epi32(last as i32));
            let p = idx.as_ptr() as *const __m256i;
            let clamp = |v: __m256i| _mm256_min_epu32(_mm256_sub_epi32(v, lo), last);
            [
                clamp(_mm256_loadu_si256(p)),
                clamp(_mm256_loadu_si256(p.add(1))),
            ]
        }
    }

    /// 16 f32 values at clamped offsets (≤ `last` < 2³¹, an index of `src`): one gather.
    #[inline(always)]
    pub unsafe fn gather_f32_avx512(
        src: &[f32],
        idx: &[u32; TILE],
        lo: u32,
        last: u32,
    ) -> [f32; TILE] {
        // SAFETY: every offset is at most `last`, inside `src`; AVX-512F per the caller.
        unsafe {
            let v = _mm512_i32gather_ps::<4>(offsets_avx512(idx, lo, last), src.as_ptr());
            std::mem::transmute::<__m512, [f32; TILE]>(v)
        }
    }

    /// 16 f64 values at clamped offsets: two gathers of 8.
    #[inline(always)]
    pub unsafe fn gather_f64_avx512(
        src: &[f64],
        idx: &[u32; TILE],
        lo: u32,
        last: u32,
    ) -> [f64; TILE] {
        // SAFETY: as in `gather_f32_avx512`.
        unsafe {
            let o = offsets_avx512(idx, lo, last);
            let (low, high) = (_mm512_castsi512_si256(o), _mm512_extracti64x4_epi64::<1>(o));
            let p = src.as_ptr();
            let halves = [
                _mm512_i32gather_pd::<8>(low, p),
                _mm512_i32gather_pd::<8>(high, p),
            ];
            std::mem::transmute::<[__m512d; 2], [f64; TILE]>(halves)
        }
    }

    /// 16 f32 values at clamped offsets: two AVX2 gathers of 8.
    #[inline(always)]
    pub unsafe fn gather_f32_avx2(
        src: &[f32],
        idx: &[u32; TILE],
        lo: u32,
        last: u32,
    ) -> [f32; TILE] {
        // SAFETY: as in `gather_f32_avx512`; AVX2 per the caller.
        unsafe {
            let [a, b] = offsets_avx2(idx, lo, last);
            let p = src.as_ptr();
            let halves = [
                _mm256_i32gather_ps::<4>(p, a),
                _mm256_i32gather_ps::<4>(p, b),
            ];
            std::mem::transmute::<[__m256; 2], [f32; TILE]>(halves)
        }
    }

    /// 16 f64 values at clamped offsets: four AVX2 gathers of 4.
    #[inline(always)]
    pub unsafe fn gather_f64_avx2(
        src: &[f64],
        idx: &[u32; TILE],
        lo: u32,
        last: u32,
    ) -> [f64; TILE] {
        // SAFETY: as in `gather_f32_avx512`; AVX2 per the caller.
        unsafe {
            let [a, b] = offsets_avx2(idx, lo, last);
            let p = src.as_ptr();
            let quarters = [
                _mm256_i32gather_pd::<8>(p, _mm256_castsi256_si128(a)),
                _mm256_i32gather_pd::<8>(p, _mm256_extracti128_si256::<1>(a)),
                _mm256_i32gather_pd::<8>(p, _mm256_castsi256_si128(b)),
                _mm256_i32gather_pd::<8>(p, _mm256_extracti128_si256::<1>(b)),
            ];
            std::mem::transmute::<[__m256d; 4], [f64; TILE]>(quarters)
        }
    }

    /// 16 f32 values widened to f64 with two AVX-512 conversions.
    #[inline(always)]
    pub unsafe fn widen_avx512(values: &[f32; TILE]) -> [f64; TILE] {
        // SAFETY: two unaligned 256-bit loads of the 16 values; AVX-512F per the caller.
        unsafe {
            let p = values.as_ptr();
            let halves = [
                _mm512_cvtps_pd(_mm256_loadu_ps(p)),
                _mm512_cvtps_pd(_mm256_loadu_ps(p.add(8))),
            ];
            std::mem::transmute::<[__m512d; 2], [f64; TILE]>(halves)
        }
    }

    /// [`super::fold_largest_f32`] with one 512-bit maximum.
    #[inline(always)]
    pub unsafe fn largest_avx512(top: &mut [f32; TILE], values: &[f32; TILE]) {
        // SAFETY: one unaligned 512-bit load of each tile and a store of `top`; AVX-512F
        // per the caller.
        unsafe {
            let a = _mm512_abs_ps(_mm512_loadu_ps(values.as_ptr()));
            let t = _mm512_loadu_ps(top.as_ptr());
            _mm512_storeu_ps(top.as_mut_ptr(), _mm512_max_ps(a, t));
        }
    }

    /// [`super::fold_largest_f32`] with two 256-bit maxima.
    #[inline(always)]
    pub unsafe fn largest_avx(top: &mut [f32; TILE], values: &[f32; TILE]) {
        // SAFETY: two unaligned 256-bit loads of each tile and stores of `top`; AVX per the
        // caller.
        unsafe {
            let sign = _mm256_set1_ps(-0.0);
            for half in 0..2 {
                let (v, t) = (
                    values.as_ptr().add(8 * half),
                    top.as_mut_ptr().add(8 * half),
                );
                let a = _mm256_andnot_ps(sign, _mm256_loadu_ps(v));
                _mm256_storeu_ps(t, _mm256_max_ps(a, _mm256_loadu_ps(t)));
            }
        }
    }

    /// [`super::add_squares_by_four`] with two 512-bit products.
    #[inline(always)]
    pub unsafe fn add_squares_avx512(w: &[f64; TILE], lanes: &mut [f64; 4]) {
        // SAFETY: two unaligned 512-bit loads of the 16 values, one 256-bit load and store
        // of the 4 lanes; AVX-512F per the caller.
        unsafe {
            let p = w.as_ptr();
            let (lo, hi) = (_mm512_loadu_pd(p), _mm512_loadu_pd(p.add(8)));
            let (lo, hi) = (_mm512_mul_pd(lo, lo), _mm512_mul_pd(hi, hi));
            let mut sum = _mm256_loadu_pd(lanes.as_ptr());
            sum = _mm256_add_pd(sum, _mm512_castpd512_pd256(lo));
            sum = _mm256_add_pd(sum, _mm512_extractf64x4_pd::<1>(lo));
            sum = _mm256_add_pd(sum, _mm512_castpd512_pd256(hi));
            sum = _mm256_add_pd(sum, _mm512_extractf64x4_pd::<1>(hi));
            _mm256_storeu_pd(lanes.as_mut_ptr(), sum);
        }
    }

    /// [`super::add_squares_by_four`] with four 256-bit products.
    #[inline(always)]
    pub unsafe fn add_squares_avx(w: &[f64; TILE], lanes: &mut [f64; 4]) {
        // SAFETY: four unaligned 256-bit loads of the 16 values, one load and store of the
        // 4 lanes; AVX per the caller.
        unsafe {
            let p = w.as_ptr();
            let mut sum = _mm256_loadu_pd(lanes.as_ptr());
            for g in 0..4 {
                let v = _mm256_loadu_pd(p.add(4 * g));
                sum = _mm256_add_pd(sum, _mm256_mul_pd(v, v));
            }
            _mm256_storeu_pd(lanes.as_mut_ptr(), sum);
        }
    }

    /// 16 f32 values widened to f64 with four AVX conversions.
    #[inline(always)]
    pub unsafe fn widen_avx(values: &[f32; TILE]) -> [f64; TILE] {
        // SAFETY: four unaligned 128-bit loads of the 16 values; AVX per the caller.
        unsafe {
            let p = values.as_ptr();
            let quarters = [
                _mm256_cvtps_pd(_mm_loadu_ps(p)),
                _mm256_cvtps_pd(_mm_loadu_ps(p.add(4))),
                _mm256_cvtps_pd(_mm_loadu_ps(p.add(8))),
                _mm256_cvtps_pd(_mm_loadu_ps(p.add(12))),
            ];
            std::mem::transmute::<[__m256d; 4], [f64; TILE]>(quarters)
        }
    }

    /// 16 f64 values rounded to nearest f32 with two AVX-512 conversions.
    #[inline(always)]
    pub unsafe fn narrow_avx512(values: &[f64; TILE]) -> [f32; TILE] {
        // SAFETY: two unaligned 512-bit loads of the 16 values; AVX-512F per the caller.
        unsafe {
            let p = values.as_ptr();
            let halves = [
                _mm512_cvtpd_ps(_mm512_loadu_pd(p)),
                _mm512_cvtpd_ps(_mm512_loadu_pd(p.add(8))),
            ];
            std::mem::transmute::<[__m256; 2], [f32; TILE]>(halves)
        }
    }

    /// 16 f64 values rounded to nearest f32 with four AVX conversions.
    #[inline(always)]
    pub unsafe fn narrow_avx(values: &[f64; TILE]) -> [f32; TILE] {
        // SAFETY: four unaligned 256-bit loads of the 16 values; AVX per the caller.
        unsafe {
            let p = values.as_ptr();
            let quarters = [
                _mm256_cvtpd_ps(_mm256_loadu_pd(p)),
                _mm256_cvtpd_ps(_mm256_loadu_pd(p.add(4))),
                _mm256_cvtpd_ps(_mm256_loadu_pd(p.add(8))),
                _mm256_cvtpd_ps(_mm256_loadu_pd(p.add(12))),
            ];
            std::mem::transmute::<[__m128; 4], [f32; TILE]>(quarters)
        }
    }

    /// 16 f32 values rounded to nearest f16 with one AVX-512 conversion, into `dst`.
    #[inline(always)]
    pub unsafe fn store_avx512(values: &[f32; TILE], dst: &mut [f16]) {
        assert_eq!(dst.len(), TILE);
        // SAFETY: one unaligned 512-bit load of the 16 values and one unaligned 256-bit
        // store into the 16 of `dst`; AVX-512F per the caller.
        unsafe {
            let v = _mm512_loadu_ps(values.as_ptr());
            let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The written-out conversions give the bits of `as` at every level this CPU has:
    /// ties, overflow to ±∞, values below f32's range, subnormals, signed zeros, NaN.
    #[test]
    fn widening_and_narrowing_round_as_scalar_conversions_at_every_level() {
        let narrow_inputs: [f64; TILE] = [
            1.0 + 2f64.powi(-24),
            1.0 + 3.0 * 2f64.powi(-24),
            -(1.0 + 2f64.powi(-24)),
            1e300,
            -1e300,
            f64::from(f32::MAX) * (1.0 + 2f64.powi(-25)),
            1e-50,
            -1e-50,
            f64::from(f32::from_bits(1)) * 1.5,
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            std::f64::consts::PI,
            -1.0 / 3.0,
        ];
        let widen_inputs: [f32; TILE] = std::array::from_fn(|i| narrow_inputs[i] as f32);
        let run = |level: SimdLevel| match level {
            SimdLevel::Scalar => (
                widen_f32::<{ SimdLevel::Scalar as u8 }>(&widen_inputs),
                narrow_f64::<{ SimdLevel::Scalar as u8 }>(&narrow_inputs),
            ),
            SimdLevel::Avx2 => (
                widen_f32::<{ SimdLevel::Avx2 as u8 }>(&widen_inputs),
                narrow_f64::<{ SimdLevel::Avx2 as u8 }>(&narrow_inputs),
            ),
            SimdLevel::Avx512 => (
                widen_f32::<{ SimdLevel::Avx512 as u8 }>(&widen_inputs),
                narrow_f64::<{ SimdLevel::Avx512 as u8 }>(&narrow_inputs),
            ),
        };
        for level in SimdLevel::ALL.into_iter().filter(|l| l.is_supported()) {
            let (wide, narrow) = run(level);
            for j in 0..TILE {
                let (want_wide, want_narrow) =
                    (f64::from(widen_inputs[j]), narrow_inputs[j] as f32);
                if want_narrow.is_nan() {
                    assert!(wide[j].is_nan() && narrow[j].is_nan(), "{level:?} lane {j}");
                } else {
                    assert_eq!(wide[j].to_bits(), want_wide.to_bits(), "{level:?} lane {j}");
                    assert_eq!(
                        narrow[j].to_bits(),
                        want_narrow.to_bits(),
                        "{level:?} lane {j}"
                    );
                }
            }
        }
    }

    /// The written-out sums of squares add in the order of the scalar loop at every level
    /// (values whose sums round differently in another order).
    #[test]
    fn squares_add_by_four_in_record_order_at_every_level() {
        let w: [f64; TILE] = std::array::from_fn(|j| match j % 3 {
            0 => 1e8 * (j as f64 + 1.0),
            1 => 1.0 + j as f64 * 2f64.powi(-20),
            _ => -3.0e-5 * j as f64,
        });
        let start = [1e17, 3.0, -0.0, 2f64.powi(-30)];
        let mut want = start;
        for g in 0..4 {
            for l in 0..4 {
                want[l] += w[4 * g + l] * w[4 * g + l];
            }
        }
        for level in SimdLevel::ALL.into_iter().filter(|l| l.is_supported()) {
            let mut lanes = start;
            match level {
                SimdLevel::Scalar => {
                    add_squares_by_four::<{ SimdLevel::Scalar as u8 }>(&w, &mut lanes)
                }
                SimdLevel::Avx2 => add_squares_by_four::<{ SimdLevel::Avx2 as u8 }>(&w, &mut lanes),
                SimdLevel::Avx512 => {
                    add_squares_by_four::<{ SimdLevel::Avx512 as u8 }>(&w, &mut lanes)
                }
            }
            assert_eq!(lanes.map(f64::to_bits), want.map(f64::to_bits), "{level:?}");
        }
    }

    /// The written-out f32 maxima keep the loop's bits at every level: NaN values leave
    /// the maximum, a NaN maximum stays, equal magnitudes keep the old sign of zero.
    #[test]
    fn largest_magnitudes_fold_as_the_loop_at_every_level() {
        let values: [f32; TILE] = [
            -3.0,
            f32::NAN,
            -0.0,
            0.0,
            f32::NEG_INFINITY,
            1e-40,
            -2.5,
            7.0,
            f32::MAX,
            -1.0,
            0.5,
            f32::NAN,
            -0.0,
            4.0,
            -4.0,
            1.0,
        ];
        let top: [f32; TILE] = std::array::from_fn(|j| match j {
            3 => -0.0,
            11 => f32::NAN,
            12 => 0.0,
            _ => j as f32 * 0.75,
        });
        let mut want = top;
        for (t, v) in want.iter_mut().zip(&values) {
            let a = v.abs();
            *t = if a > *t { a } else { *t };
        }
        for level in SimdLevel::ALL.into_iter().filter(|l| l.is_supported()) {
            let mut got = top;
            match level {
                SimdLevel::Scalar => {
                    fold_largest_f32::<{ SimdLevel::Scalar as u8 }>(&mut got, &values)
                }
                SimdLevel::Avx2 => fold_largest_f32::<{ SimdLevel::Avx2 as u8 }>(&mut got, &values),
                SimdLevel::Avx512 => {
                    fold_largest_f32::<{ SimdLevel::Avx512 as u8 }>(&mut got, &values)
                }
            }
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "{level:?}");
        }
    }
}
