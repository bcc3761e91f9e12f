//! Which vector instructions the CPU kernels use, chosen at run time: the binary is built
//! for baseline x86-64 (SSE2), and the hot loops are compiled again inside functions with
//! `#[target_feature]` (AVX2, AVX-512F) that are called only where the CPU has them. The
//! loops are written so that each vector lane is one right-hand side's own arithmetic in
//! its own order (no reassociation, no fused multiply-add: Rust never contracts `a + b·c`),
//! so every level gives bitwise the same results and may be switched at any time.
//!
//! std::arch's detection and `#[target_feature]` rather than the `pulp` crate: the kernels
//! stay plain Rust loops that the compiler vectorises, with no SIMD types in their code and
//! no new dependency; pulp's portable SIMD types would pay off for loops the compiler does
//! not vectorise on its own (gathers across rows), which this dispatch does not cover.
//!
//! `TENSORFEM_SIMD=scalar|avx2|avx512` forces a level (a level the CPU lacks falls back to
//! the best it has, with a warning); tests switch levels with [`set_level`].

use std::sync::atomic::{AtomicU8, Ordering};

/// A set of vector instructions.
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
            SimdLevel::Avx2 => std::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512 => std::is_x86_feature_detected!("avx512f"),
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
