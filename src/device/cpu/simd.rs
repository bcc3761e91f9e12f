//! Which vector instructions the CPU kernels use, chosen at run time: the binary is built
//! for baseline x86-64 (SSE2), and the hot loops are compiled again inside functions with
//! `#[target_feature]` (AVX2, AVX-512F) that are called only where the CPU has them. The
//! loops are written so that each vector lane is one right-hand side's own arithmetic in
//! its own order (no reassociation, no fused multiply-add: Rust never contracts `a + b·c`),
//! so every level gives bitwise the same results and may be switched at any time.
//!
//! std::arch's detection and `#[target_feature]` rather than the `pulp` crate: the kernels
//! stay plain Rust loops over fixed-size tiles that the compiler vectorises, with no SIMD
//! types in their code and no new dependency; the one place that names instructions is the
//! f16 tile conversion ([`TileIo`]), which the compiler does not vectorise on its own.
//! pulp's portable SIMD types would pay off for loops it does not vectorise at all (gathers
//! across rows), which this dispatch does not cover.
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

/// Columns of a node-major block one pass over a matrix row computes at once: one AVX-512
/// register of f32, two of f64. A tile's sums and statistics stay in registers.
pub const TILE: usize = 16;

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
}

macro_rules! same_type_tiles {
    ($t:ty) => {
        impl TileIo for $t {
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
same_type_tiles!(f32);
same_type_tiles!(f64);

impl TileIo for f16 {
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

/// The f16 tile conversions. Results go straight to registers or to their destination:
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
