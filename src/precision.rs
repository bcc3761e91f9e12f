//! Floating-point precisions: what a value is *stored* in and what it is *computed* in.
//!
//! f16 is a storage format only on the CPU: values are stored in IEEE binary16 (via `half`)
//! and every arithmetic operation on them runs in f32. f32 and f64 are computed in themselves.
//! TF32 is f32 storage whose dense products (GEMMs) multiply operands rounded to TF32
//! (f32's 8-bit exponent, a 10-bit mantissa: f16's unit roundoff without its range) and
//! accumulate in f32: NVIDIA Tensor Cores' mode for f32 data, rounded alike on the CPU.

use std::fmt;
use std::iter::Sum;
use std::str::FromStr;

use half::f16;
use num_traits::Float;

/// A precision as named in configs, HDF5 attributes and performance logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Precision {
    F16,
    /// f32 storage, GEMM operands rounded to TF32 (see the module's doc).
    Tf32,
    F32,
    F64,
}

impl Precision {
    /// The storage formats: what a buffer holds.
    pub const STORED: [Precision; 3] = [Precision::F16, Precision::F32, Precision::F64];
    /// Every precision a config, a log or an HDF5 attribute may name.
    pub const NAMED: [Precision; 4] = [
        Precision::F16,
        Precision::Tf32,
        Precision::F32,
        Precision::F64,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Precision::F16 => "f16",
            Precision::Tf32 => "tf32",
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }

    /// The format values are stored in (TF32: f32).
    pub fn storage(self) -> Precision {
        match self {
            Precision::Tf32 => Precision::F32,
            other => other,
        }
    }

    /// How the GEMMs of operators in this precision multiply.
    pub fn gemm_math(self) -> GemmMath {
        match self {
            Precision::Tf32 => GemmMath::Tf32,
            _ => GemmMath::Full,
        }
    }

    /// Bytes one stored value takes.
    pub fn bytes(self) -> usize {
        match self.storage() {
            Precision::F16 => 2,
            Precision::F64 => 8,
            _ => 4,
        }
    }

    /// The precision arithmetic on values stored in this one runs in (f16, TF32: f32).
    pub fn compute(self) -> Precision {
        match self {
            Precision::F16 | Precision::Tf32 => Precision::F32,
            other => other,
        }
    }

    /// Largest finite value.
    pub fn max(self) -> f64 {
        match self.storage() {
            Precision::F16 => <f16 as Stored>::MAX,
            Precision::F64 => <f64 as Stored>::MAX,
            _ => <f32 as Stored>::MAX,
        }
    }

    /// Smallest positive value (subnormal): anything below half of it rounds to zero.
    pub fn tiny(self) -> f64 {
        match self.storage() {
            Precision::F16 => <f16 as Stored>::TINY,
            Precision::F64 => <f64 as Stored>::TINY,
            _ => <f32 as Stored>::TINY,
        }
    }

    /// Unit roundoff u = 2^-p (half the machine epsilon) of the format the products see
    /// (TF32: 2^-11, its 10-bit mantissa).
    pub fn unit_roundoff(self) -> f64 {
        match self {
            Precision::F16 => f16::EPSILON.to_f64() / 2.0,
            Precision::Tf32 => 2f64.powi(-11),
            Precision::F32 => f32::EPSILON as f64 / 2.0,
            Precision::F64 => f64::EPSILON / 2.0,
        }
    }
}

/// How a GEMM multiplies: in its operands' compute precision, or (f32 operands only) on
/// Tensor Cores with the operands rounded to TF32 and the sums in f32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GemmMath {
    #[default]
    Full,
    Tf32,
}

/// `v` rounded to TF32 (to nearest, ties away from zero: PTX's `cvt.rna.tf32.f32`, what
/// cuBLAS applies to f32 operands in TF32 mode): the lowest 13 mantissa bits cleared. NaN
/// and infinities stay; values within half a TF32 step of f32::MAX round to infinity.
pub fn round_to_tf32(v: f32) -> f32 {
    if !v.is_finite() {
        return v;
    }
    f32::from_bits((v.to_bits() + 0x1000) & !0x1FFF)
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Precision::NAMED
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown precision '{s}' (allowed: f16, tf32, f32, f64)"))
    }
}

/// A type arithmetic is done in: f32 or f64.
pub trait Real:
    Float + Sum + Send + Sync + fmt::Debug + fmt::Display + Default + bytemuck::Pod + 'static
{
    const PRECISION: Precision;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl Real for f32 {
    const PRECISION: Precision = Precision::F32;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Real for f64 {
    const PRECISION: Precision = Precision::F64;
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
}

/// A type values are stored in: f16, f32 or f64, with the type its arithmetic runs in.
pub trait Stored: Copy + Send + Sync + PartialEq + fmt::Debug + Default + 'static {
    const PRECISION: Precision;
    type Compute: Real;
    fn to_compute(self) -> Self::Compute;
    fn from_compute(v: Self::Compute) -> Self;
    /// Round to nearest from f64.
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    /// dst[i] = src[i] widened to the compute precision (f16: vectorised where the CPU can).
    fn widen_slice(src: &[Self], dst: &mut [Self::Compute]) {
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, s)| *d = s.to_compute());
    }
    /// The slice itself when storage and compute precision are the same type.
    fn as_compute(src: &[Self]) -> Option<&[Self::Compute]>;
    /// dst[i] = src[i] rounded to the storage precision (f16: vectorised where the CPU can).
    fn narrow_slice(src: &[Self::Compute], dst: &mut [Self]) {
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, &s)| *d = Self::from_compute(s));
    }
    /// Largest finite stored value.
    const MAX: f64;
    /// Smallest positive stored value (subnormal): anything below half of it rounds to zero.
    const TINY: f64;
}

/// f64 → f16 rounded once to nearest, as the CUDA kernels round. `half`'s `f16::from_f64`
/// goes through f32 on x86 CPUs with F16C and rounds twice (0.0973205595670894 → 0.09729
/// instead of 0.09735); here the f32 step rounds to odd (toward zero, the lowest bit set when
/// inexact), which leaves the one rounding to f16 exact: f32 carries 13 more bits.
pub fn f16_from_f64(v: f64) -> f16 {
    let mut f = v as f32;
    if (f as f64) != v && !v.is_nan() {
        if (f as f64).abs() > v.abs() {
            // Rounded away from zero: one step back toward it (f32::MAX from infinity).
            f = f32::from_bits(f.to_bits() - 1);
        }
        f = f32::from_bits(f.to_bits() | 1);
    }
    f16::from_f32(f)
}

impl Stored for f16 {
    const PRECISION: Precision = Precision::F16;
    type Compute = f32;
    fn to_compute(self) -> f32 {
        self.to_f32()
    }
    fn from_compute(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn from_f64(v: f64) -> Self {
        f16_from_f64(v)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn widen_slice(src: &[f16], dst: &mut [f32]) {
        assert_eq!(src.len(), dst.len(), "widen_slice: lengths differ");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU has F16C (checked above); lengths are equal.
            return unsafe { f16c::widen(src, dst) };
        }
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst);
    }
    fn as_compute(_: &[f16]) -> Option<&[f32]> {
        None
    }
    fn narrow_slice(src: &[f32], dst: &mut [f16]) {
        assert_eq!(src.len(), dst.len(), "narrow_slice: lengths differ");
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("f16c") {
            // SAFETY: the CPU has F16C (checked above); lengths are equal.
            return unsafe { f16c::narrow(src, dst) };
        }
        use half::slice::HalfFloatSliceExt;
        dst.convert_from_f32_slice(src);
    }
    const MAX: f64 = 65504.0;
    const TINY: f64 = 5.960_464_477_539_063e-8;
}

impl Stored for f32 {
    const PRECISION: Precision = Precision::F32;
    type Compute = f32;
    fn to_compute(self) -> f32 {
        self
    }
    fn from_compute(v: f32) -> Self {
        v
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn as_compute(src: &[f32]) -> Option<&[f32]> {
        Some(src)
    }
    const MAX: f64 = f32::MAX as f64;
    const TINY: f64 = 1.401_298_464_324_817e-45;
}

impl Stored for f64 {
    const PRECISION: Precision = Precision::F64;
    type Compute = f64;
    fn to_compute(self) -> f64 {
        self
    }
    fn from_compute(v: f64) -> Self {
        v
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn as_compute(src: &[f64]) -> Option<&[f64]> {
        Some(src)
    }
    const MAX: f64 = f64::MAX;
    const TINY: f64 = 5e-324;
}

/// Slice conversions with the F16C instructions, 8 values per instruction, compiled for
/// CPUs that have them (checked at run time by the callers); `half`'s own slice conversions
/// call a function per 8 values, which costs more than the memory traffic saved.
#[cfg(target_arch = "x86_64")]
mod f16c {
    use half::f16;
    use std::arch::x86_64::*;

    /// dst[i] = src[i] as f32.
    #[target_feature(enable = "avx,f16c")]
    pub unsafe fn widen(src: &[f16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 ≤ n, within both slices; unaligned loads and stores.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
            i += 8;
        }
        for k in i..n {
            dst[k] = src[k].to_f32();
        }
    }

    /// dst[i] = src[i] rounded to nearest f16 (overflow gives ±Inf, as `half` does).
    #[target_feature(enable = "avx,f16c")]
    pub unsafe fn narrow(src: &[f32], dst: &mut [f16]) {
        let n = src.len().min(dst.len());
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 ≤ n, within both slices; unaligned loads and stores.
            unsafe {
                let v = _mm256_loadu_ps(src.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
            }
            i += 8;
        }
        for k in i..n {
            dst[k] = f16::from_f32(src[k]);
        }
    }
}

/// Why a value cannot be represented in a lower storage precision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RangeProblem {
    /// A finite value rounds to ±Inf.
    Overflow { value: f64 },
    /// A nonzero value rounds to zero.
    Underflow { value: f64 },
    /// The source value already is NaN or ±Inf.
    NotFinite { value: f64 },
}

impl fmt::Display for RangeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RangeProblem::Overflow { value } => write!(f, "{value:e} overflows to infinity"),
            RangeProblem::Underflow { value } => write!(f, "{value:e} underflows to zero"),
            RangeProblem::NotFinite { value } => write!(f, "value is {value}"),
        }
    }
}

/// Converts one value to storage precision `T`, refusing overflow, flush-to-zero and NaN/Inf.
pub fn convert_checked<T: Stored>(v: f64) -> Result<T, RangeProblem> {
    if !v.is_finite() {
        return Err(RangeProblem::NotFinite { value: v });
    }
    let out = T::from_f64(v);
    let back = out.to_f64();
    if back.is_infinite() {
        Err(RangeProblem::Overflow { value: v })
    } else if back == 0.0 && v != 0.0 {
        Err(RangeProblem::Underflow { value: v })
    } else {
        Ok(out)
    }
}

/// Converts a slice to storage precision `T`; on failure returns the first bad index and why.
pub fn convert_slice_checked<T: Stored>(src: &[f64]) -> Result<Vec<T>, (usize, RangeProblem)> {
    src.iter()
        .enumerate()
        .map(|(i, &v)| convert_checked::<T>(v).map_err(|p| (i, p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Precision::NAMED {
            assert_eq!(p.name().parse::<Precision>().unwrap(), p);
        }
        assert!("f8".parse::<Precision>().is_err());
    }

    #[test]
    fn unit_roundoffs() {
        assert_eq!(Precision::F16.unit_roundoff(), 2f64.powi(-11));
        assert_eq!(Precision::F32.unit_roundoff(), 2f64.powi(-24));
        assert_eq!(Precision::F64.unit_roundoff(), 2f64.powi(-53));
        assert_eq!(Precision::Tf32.unit_roundoff(), 2f64.powi(-11));
        assert_eq!(Precision::Tf32.storage(), Precision::F32);
        assert_eq!(Precision::Tf32.bytes(), 4);
        assert_eq!(Precision::Tf32.max(), f32::MAX as f64);
    }

    #[test]
    fn tf32_rounds_to_nearest_ties_away() {
        let ulp = 2f32.powi(-10); // TF32's step at 1
        assert_eq!(round_to_tf32(1.0 + ulp / 4.0), 1.0);
        assert_eq!(
            round_to_tf32(1.0 + ulp / 2.0),
            1.0 + ulp,
            "a tie goes away from zero"
        );
        assert_eq!(round_to_tf32(-(1.0 + ulp / 2.0)), -(1.0 + ulp));
        assert_eq!(round_to_tf32(1.0 + 0.75 * ulp), 1.0 + ulp);
        assert_eq!(
            round_to_tf32(2.0 - ulp / 4.0),
            2.0,
            "the carry reaches the exponent"
        );
        assert_eq!(round_to_tf32(f32::MAX), f32::INFINITY);
        assert!(round_to_tf32(f32::NAN).is_nan());
        assert_eq!(round_to_tf32(f32::NEG_INFINITY), f32::NEG_INFINITY);
        // Every value within u = 2^-11 relative, its low 13 bits clear.
        let mut x = 0.123_456_79f32;
        for _ in 0..1000 {
            x = (x * 3.7 + 0.31).fract() * 1e3 - 500.0;
            let r = round_to_tf32(x);
            assert_eq!(r.to_bits() & 0x1FFF, 0);
            assert!(
                ((r - x) / x).abs() as f64 <= Precision::Tf32.unit_roundoff(),
                "{x} → {r}"
            );
        }
    }

    #[test]
    fn checked_conversion_refuses_overflow_underflow_and_nan() {
        assert_eq!(convert_checked::<f16>(1.5).unwrap(), f16::from_f32(1.5));
        assert!(matches!(
            convert_checked::<f16>(7.0e4),
            Err(RangeProblem::Overflow { .. })
        ));
        assert!(matches!(
            convert_checked::<f16>(1.0e-9),
            Err(RangeProblem::Underflow { .. })
        ));
        assert!(matches!(
            convert_checked::<f32>(f64::NAN),
            Err(RangeProblem::NotFinite { .. })
        ));
        assert!(matches!(
            convert_checked::<f32>(1.0e300),
            Err(RangeProblem::Overflow { .. })
        ));
        let bad = convert_slice_checked::<f16>(&[1.0, 2.0, 1.0e6]).unwrap_err();
        assert_eq!(bad.0, 2);
    }

    /// f64 → f16 rounds once: against the nearest of the three f16 values around each
    /// input (ties to even), on seeded values over the normal range, midpoints between f16
    /// neighbours nudged either way, and the value `half` rounds twice.
    #[test]
    fn f16_from_f64_rounds_once_to_nearest() {
        use rand::{Rng, SeedableRng};
        let nearest = |v: f64| {
            let guess = f16::from_f32(v as f32).to_bits();
            (guess - 1..=guess + 1)
                .map(f16::from_bits)
                .min_by(|a, b| {
                    let (da, db) = ((v - a.to_f64()).abs(), (v - b.to_f64()).abs());
                    da.total_cmp(&db)
                        .then((a.to_bits() & 1).cmp(&(b.to_bits() & 1)))
                })
                .unwrap()
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut values: Vec<f64> = (0..100_000)
            .map(|_| 10f64.powf(rng.random_range(-4.0..4.8)))
            .collect();
        for bits in (0x0400u16..0x7bff).step_by(97) {
            let mid = (f16::from_bits(bits).to_f64() + f16::from_bits(bits + 1).to_f64()) / 2.0;
            values.extend([mid, mid * (1.0 + 1e-12), mid * (1.0 - 1e-12)]);
        }
        values.push(0.0973205595670894);
        for v in values {
            assert_eq!(f16_from_f64(v).to_bits(), nearest(v).to_bits(), "{v:e}");
            assert_eq!(
                f16_from_f64(-v).to_bits(),
                (-nearest(v)).to_bits(),
                "{:e}",
                -v
            );
        }
        assert_eq!(f16_from_f64(0.0973205595670894).to_f64(), 0.09735107421875);
        assert!(f16_from_f64(1e6).is_infinite() && f16_from_f64(f64::NAN).is_nan());
        assert_eq!(f16_from_f64(1e-300).to_bits(), 0);
    }

    /// Every f16 value converts to f32/f64 and back exactly; f32 to f64 and back exactly.
    #[test]
    fn widening_round_trips_are_exact() {
        for bits in 0..=u16::MAX {
            let h = f16::from_bits(bits);
            if h.is_nan() {
                continue;
            }
            assert_eq!(f16::from_f64(h.to_f64()).to_bits(), bits);
            assert_eq!(
                <f16 as Stored>::from_compute(h.to_compute()).to_bits(),
                bits
            );
        }
        assert_eq!(<f16 as Stored>::MAX, f16::MAX.to_f64());
        assert_eq!(<f16 as Stored>::TINY, f16::from_bits(1).to_f64());
        assert_eq!(<f32 as Stored>::TINY, f32::from_bits(1) as f64);
        assert_eq!(<f64 as Stored>::TINY, f64::from_bits(1));
        for v in [0.1f32, -3.25e-30, 1.0e30, f32::MIN_POSITIVE, f32::MAX] {
            assert_eq!(<f32 as Stored>::from_f64(v as f64).to_bits(), v.to_bits());
        }
    }

    /// The F16C slice conversions agree bit for bit with `half`'s scalar ones, on every f16
    /// and on f32 values around every rounding boundary, overflow and subnormals.
    #[test]
    fn slice_conversions_match_scalar_ones() {
        let all: Vec<f16> = (0..=u16::MAX)
            .map(f16::from_bits)
            .filter(|h| !h.is_nan())
            .collect();
        let mut wide = vec![0.0f32; all.len()];
        <f16 as Stored>::widen_slice(&all, &mut wide);
        for (h, w) in all.iter().zip(&wide) {
            assert_eq!(h.to_f32().to_bits(), w.to_bits());
        }
        let samples: Vec<f32> = wide
            .windows(2)
            .flat_map(|w| {
                [
                    w[0],
                    0.5 * (w[0] + w[1]),
                    f32::from_bits(w[0].to_bits() + 1),
                ]
            })
            .chain([7.0e4, -1.0e6, 1.0e-9, f32::INFINITY])
            .collect();
        let mut narrow = vec![f16::ZERO; samples.len()];
        <f16 as Stored>::narrow_slice(&samples, &mut narrow);
        for (v, h) in samples.iter().zip(&narrow) {
            assert_eq!(f16::from_f32(*v).to_bits(), h.to_bits(), "{v:e}");
        }
    }

    /// Narrowing rounds to nearest: the error is at most the unit roundoff (relative).
    #[test]
    fn narrowing_error_is_bounded_by_unit_roundoff() {
        let mut x = 0.123_456_789_f64;
        for _ in 0..1000 {
            x = (x * 3.7 + 0.1).fract() * 100.0 + 1.0e-3;
            let h = <f16 as Stored>::from_f64(x).to_f64();
            assert!(((h - x) / x).abs() <= Precision::F16.unit_roundoff());
            let s = Stored::to_f64(<f32 as Stored>::from_f64(x));
            assert!(((s - x) / x).abs() <= Precision::F32.unit_roundoff());
        }
    }
}
