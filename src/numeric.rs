//! Host-side reductions every layer shares (the CPU device's kernels, set-up code,
//! verification): dot products and norms that are bitwise reproducible whatever the number
//! of threads, and allocate nothing.
//!
//! A slice is cut into at most [`MAX_PARTS`] chunks whose size depends only on its length;
//! each chunk's partial sum is computed by one task and the partials are added in order.

use rayon::prelude::*;

use crate::precision::Real;

/// Fewest entries per chunk of a reduction.
const MIN_CHUNK: usize = 8192;
/// Most chunks of a reduction: the partial sums live on the stack.
const MAX_PARTS: usize = 256;

/// The chunk size of a reduction over `len` entries (a function of `len` alone).
pub fn reduction_chunk(len: usize) -> usize {
    MIN_CHUNK.max(len.div_ceil(MAX_PARTS))
}

/// Σ f(chunk) over the chunks of `len` entries, added in chunk order.
fn chunked_sum<T: Real>(len: usize, f: impl Fn(std::ops::Range<usize>) -> T + Sync) -> T {
    let chunk = reduction_chunk(len);
    let parts = len.div_ceil(chunk);
    let mut partials = [T::zero(); MAX_PARTS];
    partials[..parts]
        .par_iter_mut()
        .enumerate()
        .for_each(|(k, p)| *p = f(k * chunk..((k + 1) * chunk).min(len)));
    partials[..parts].iter().fold(T::zero(), |s, &p| s + p)
}

/// x · y.
pub fn dot<T: Real>(x: &[T], y: &[T]) -> T {
    assert_eq!(x.len(), y.len(), "dot: lengths differ");
    chunked_sum(x.len(), |r| {
        x[r.clone()]
            .iter()
            .zip(&y[r])
            .fold(T::zero(), |s, (&u, &v)| s + u * v)
    })
}

/// x · y on one thread, in four interleaved partial sums (a fixed order, and four
/// independent additions in flight): for short vectors inside a task that is already one
/// of many.
pub fn dot_sequential(x: &[f64], y: &[f64]) -> f64 {
    assert_eq!(x.len(), y.len(), "dot_sequential: lengths differ");
    let (xs, ys) = (x.chunks_exact(4), y.chunks_exact(4));
    let tail: f64 = xs
        .remainder()
        .iter()
        .zip(ys.remainder())
        .map(|(a, b)| a * b)
        .sum();
    let mut lanes = [0.0; 4];
    for (a, b) in xs.zip(ys) {
        for k in 0..4 {
            lanes[k] += a[k] * b[k];
        }
    }
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + tail
}

/// The element-wise sum of per-task partial sums (each `width` long), added in task order:
/// with tasks of a fixed size, the result does not depend on the thread count.
pub fn sum_partials(partials: &[Vec<f64>], width: usize) -> Vec<f64> {
    let mut sums = vec![0.0; width];
    for partial in partials {
        for (s, p) in sums.iter_mut().zip(partial) {
            *s += p;
        }
    }
    sums
}

/// Σ x.
pub fn sum<T: Real>(x: &[T]) -> T {
    chunked_sum(x.len(), |r| x[r].iter().fold(T::zero(), |s, &v| s + v))
}

/// max |x|, NaN when x holds a NaN (`max` alone would skip it). Each chunk in four lanes
/// with its NaNs noted apart, so that it vectorises.
pub fn max_abs<T: Real>(x: &[T]) -> T {
    let larger = |a: T, b: T| if b > a { b } else { a };
    x.par_chunks(reduction_chunk(x.len()))
        .map(|part| {
            let (mut lanes, mut nan) = ([T::zero(); 4], false);
            let mut groups = part.chunks_exact(4);
            for group in &mut groups {
                for (lane, &v) in lanes.iter_mut().zip(group) {
                    nan |= v.is_nan();
                    *lane = larger(*lane, v.abs());
                }
            }
            for &v in groups.remainder() {
                nan |= v.is_nan();
                lanes[0] = larger(lanes[0], v.abs());
            }
            if nan {
                T::nan()
            } else {
                lanes.into_iter().fold(T::zero(), larger)
            }
        })
        .reduce(T::zero, |a, b| {
            if a.is_nan() {
                a
            } else if b.is_nan() {
                b
            } else {
                larger(a, b)
            }
        })
}

/// ‖x‖₂, scaled so it neither overflows nor underflows for any finite x; NaN when x holds
/// a NaN.
pub fn nrm2<T: Real>(x: &[T]) -> T {
    let scale = max_abs(x);
    if scale == T::zero() || !scale.is_finite() {
        return scale;
    }
    // A subnormal largest entry has no finite inverse: the entries are first lifted by 1/ε,
    // a power of two (exact).
    let lift = if (T::one() / scale).is_finite() {
        T::one()
    } else {
        T::one() / T::epsilon()
    };
    let inverse = T::one() / (scale * lift);
    scale
        * chunked_sum(x.len(), |r| {
            x[r].iter().fold(T::zero(), |s, &v| {
                let w = v * lift * inverse;
                s + w * w
            })
        })
        .sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nrm2_propagates_nan() {
        let mut x = vec![1.0f64; 10_000];
        x[1234] = f64::NAN;
        assert!(nrm2(&x).is_nan());
        x[1234] = f64::INFINITY;
        assert_eq!(nrm2(&x), f64::INFINITY);
    }

    /// The largest magnitude wherever it lies (a lane, the tail after the groups of four,
    /// another chunk), a NaN anywhere, ±Inf, and nothing.
    #[test]
    fn max_abs_finds_the_largest_and_any_nan() {
        let x: Vec<f64> = (0..50_003)
            .map(|i| ((i * 37) % 101) as f64 - 50.0)
            .collect();
        assert_eq!(max_abs(&x), 50.0);
        for at in [0, 1, 2, 3, 20_000, 50_002] {
            let mut y = x.clone();
            y[at] = -77.0;
            assert_eq!(max_abs(&y), 77.0, "largest at {at}");
            y[at] = f64::NEG_INFINITY;
            assert_eq!(max_abs(&y), f64::INFINITY, "-Inf at {at}");
            y[at] = f64::NAN;
            assert!(max_abs(&y).is_nan(), "NaN at {at}");
            assert!(max_abs(&y[..at + 1]).is_nan(), "NaN last of {}", at + 1);
        }
        let head = x[..3].iter().fold(0.0, |m: f64, v| m.max(v.abs()));
        assert_eq!(max_abs(&x[..3]), head);
        assert_eq!(max_abs::<f32>(&[]), 0.0);
    }

    #[test]
    fn reductions() {
        let x: Vec<f64> = (0..100_000).map(|i| (i % 7) as f64 - 3.0).collect();
        let expected: f64 = x.iter().map(|v| v * v).sum();
        assert_eq!(dot(&x, &x), expected);
        assert!((nrm2(&x) - expected.sqrt()).abs() < 1e-9);
        assert_eq!(nrm2(&[1e300, 1e300]), 1e300 * 2f64.sqrt());
        assert!((nrm2(&[3e-300f64, 4e-300]) / 5e-300 - 1.0).abs() < 1e-15);
        // Subnormal entries (an inverse of the largest would overflow).
        let (a, b) = (3.0 * f64::from_bits(1 << 40), 4.0 * f64::from_bits(1 << 40));
        assert!(b < f64::MIN_POSITIVE);
        assert!((nrm2(&[a, b]) / (5.0 * f64::from_bits(1 << 40)) - 1.0).abs() < 1e-15);
        assert_eq!(sum(&x), x.iter().sum::<f64>());
        assert_eq!(dot_sequential(&x, &x), expected);
        let short = &x[..99_999]; // a tail after the groups of four
        assert_eq!(
            dot_sequential(short, short),
            expected - x[99_999] * x[99_999]
        );
        assert_eq!(dot_sequential(&[], &[]), 0.0);
    }

    /// The chunking depends on the length alone: the same sums on 1 and 2 threads.
    #[test]
    fn reductions_do_not_depend_on_threads() {
        let x: Vec<f64> = (0..3_000_000)
            .map(|i| ((i * 7919) % 1013) as f64 / 1e3)
            .collect();
        let run = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| (dot(&x, &x), nrm2(&x), sum(&x)))
        };
        let (a, b) = (run(1), run(2));
        assert_eq!(a.0.to_bits(), b.0.to_bits());
        assert_eq!(a.1.to_bits(), b.1.to_bits());
        assert_eq!(a.2.to_bits(), b.2.to_bits());
    }
}
