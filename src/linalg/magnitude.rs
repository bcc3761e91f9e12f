//! Right-hand sides of any finite magnitude (docs/mathematics.md §6, "Magnitudes"). A
//! solver's norms, its low-precision copies and its absolute thresholds are sized for loads
//! of ordinary magnitude; a load of 1e-300 squares to zero and one of 1e300 to infinity. So
//! a block is solved as given when every column's largest magnitude lies within
//! [2^−[`WINDOW`], 2^[`WINDOW`]], and otherwise in groups of columns multiplied by a power
//! of two that brings them into it: A(x/s) = b/s, and a product with a power of two is
//! exact in binary floating point, so the solution is the scaled problem's, scaled back,
//! to the last bit the scaled solve gives.
//!
//! A column whose largest magnitude is subnormal (below f64's smallest normal number) is
//! refused: it carries fewer than 53 significant bits, and neither it nor its solution can
//! be checked to a relative tolerance. A solution that leaves f64's range when scaled back
//! is an error naming its column.

use crate::error::{Error, Result};

/// Columns whose largest magnitude lies in [2^−WINDOW, 2^WINDOW] are solved as given (their
/// squares and their residuals' squares are normal f64 numbers, and they fit f32).
pub const WINDOW: i32 = 40;

/// Columns outside the window are grouped by their binary exponent in bands this wide; a
/// band is scaled as one block.
const BAND: i32 = 32;

/// Columns of a block solved together, with the power of two they are multiplied by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MagnitudeGroup {
    /// Indices into the block's columns, increasing.
    pub columns: Vec<usize>,
    /// The columns are multiplied by 2^exponent before the solve (and their solutions by
    /// 2^−exponent after it); 0 for columns solved as given.
    pub exponent: i32,
}

impl MagnitudeGroup {
    /// The factor the right-hand sides were multiplied by (absolute tolerances scale with it).
    pub fn factor(&self) -> f64 {
        power_of_two(self.exponent)
    }
}

/// The binary exponent of a positive finite normal x: x ∈ [2^e, 2^(e+1)).
fn exponent_of(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// 2^k as an f64 for |k| ≤ 1023.
fn power_of_two(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k), "2^{k} is not a normal f64");
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// v · 2^k, exact unless the result is subnormal or overflows (then rounded as one product).
pub fn times_power_of_two(v: f64, k: i32) -> f64 {
    if (-1022..=1023).contains(&k) {
        v * power_of_two(k)
    } else {
        // Two factors that are normal numbers: exact while the intermediate is normal.
        let half = k / 2;
        v * power_of_two(half) * power_of_two(k - half)
    }
}

/// The groups a column-major block `b` (n × nrhs) is solved in: one group of every column
/// as given when all lie in the window (the usual case), else the columns in the window and
/// one group per band of exponents outside it. Zero columns are solved as given. A column
/// with an entry that is not finite, or whose largest magnitude is subnormal, is refused,
/// naming it and its magnitude.
pub fn groups(b: &[f64], n: usize, nrhs: usize) -> Result<Vec<MagnitudeGroup>> {
    assert_eq!(b.len(), n * nrhs, "groups: the block is not n × nrhs");
    let mut as_given = Vec::new();
    let mut bands: Vec<(i32, Vec<usize>)> = Vec::new();
    for c in 0..nrhs {
        let largest = crate::numeric::max_abs(&b[c * n..(c + 1) * n]);
        if !largest.is_finite() {
            return Err(Error::InvalidInput(format!(
                "right-hand side {c} holds a value that is not finite ({largest}): every load must be a finite number"
            )));
        }
        if largest == 0.0 {
            as_given.push(c);
            continue;
        }
        if largest < f64::MIN_POSITIVE {
            return Err(Error::InvalidInput(format!(
                "right-hand side {c}: its largest magnitude {largest:.3e} is subnormal (below f64's smallest normal number {:.3e}), so it holds fewer than 53 significant bits and no solution can be checked to a relative tolerance; multiply the loads by a power of ten (the solution scales with them)",
                f64::MIN_POSITIVE
            )));
        }
        let e = exponent_of(largest);
        if (-WINDOW..WINDOW).contains(&e) {
            as_given.push(c);
            continue;
        }
        let band = e.div_euclid(BAND);
        match bands.iter_mut().find(|(b, _)| *b == band) {
            Some((_, columns)) => columns.push(c),
            None => bands.push((band, vec![c])),
        }
    }
    let mut groups = Vec::new();
    if !as_given.is_empty() {
        groups.push(MagnitudeGroup {
            columns: as_given,
            exponent: 0,
        });
    }
    bands.sort_by_key(|(band, _)| *band);
    groups.extend(bands.into_iter().map(|(band, columns)| MagnitudeGroup {
        columns,
        // The band's smallest exponent to 0: its columns' maxima in [1, 2^BAND).
        exponent: -band * BAND,
    }));
    Ok(groups)
}

/// Whether `groups` is the whole block solved as given.
pub fn as_given(groups: &[MagnitudeGroup], nrhs: usize) -> bool {
    groups.len() == 1 && groups[0].exponent == 0 && groups[0].columns.len() == nrhs
}

/// The group's right-hand sides gathered from the block `b` (columns of length n) and
/// multiplied by its power of two.
pub fn gather(group: &MagnitudeGroup, b: &[f64], n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(group.columns.len() * n);
    for &c in &group.columns {
        out.extend(
            b[c * n..(c + 1) * n]
                .iter()
                .map(|&v| times_power_of_two(v, group.exponent)),
        );
    }
    out
}

/// Writes the group's solutions `x` (its columns, length n each) into the block `u`,
/// multiplied back; a solution that overflows f64 when scaled back is an error naming its
/// column.
pub fn scatter(group: &MagnitudeGroup, x: &[f64], u: &mut [f64], n: usize) -> Result<()> {
    for (k, &c) in group.columns.iter().enumerate() {
        let column = &mut u[c * n..(c + 1) * n];
        for (dst, &v) in column.iter_mut().zip(&x[k * n..(k + 1) * n]) {
            *dst = times_power_of_two(v, -group.exponent);
        }
        if column.iter().any(|v| !v.is_finite())
            && x[k * n..(k + 1) * n].iter().all(|v| v.is_finite())
        {
            return Err(Error::InvalidInput(format!(
                "the solution of right-hand side {c} exceeds f64's range (its loads are about 2^{} in magnitude, its solution larger): divide the loads by a power of ten (the solution scales with them)",
                -group.exponent
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two_are_exact_across_the_range() {
        assert_eq!(power_of_two(0), 1.0);
        assert_eq!(power_of_two(-1022), f64::MIN_POSITIVE);
        assert_eq!(power_of_two(1023), 2f64.powi(1023));
        assert_eq!(exponent_of(1.5), 0);
        assert_eq!(exponent_of(1e-300), -997);
        assert_eq!(exponent_of(1e300), 996);
        // Beyond the normal exponents the product is taken in two exact steps.
        let tiny = 3.0 * 2f64.powi(-1040); // subnormal
        assert_eq!(times_power_of_two(tiny, 1060), 3.0 * 2f64.powi(20));
        assert_eq!(times_power_of_two(1.0, -1074), f64::from_bits(1));
    }

    /// Ordinary loads are one group solved as given; extreme ones are grouped by band and
    /// scaled into the window; subnormal and non-finite columns are refused by name.
    #[test]
    fn columns_are_grouped_by_magnitude() {
        let n = 3;
        let block = |scales: &[f64]| -> Vec<f64> {
            scales
                .iter()
                .flat_map(|&s| [0.5 * s, -s, 0.25 * s])
                .collect()
        };
        let g = groups(&block(&[1e-5, 3.0, 1e6]), n, 3).unwrap();
        assert!(as_given(&g, 3), "{g:?}");
        let g = groups(&block(&[1e-300, 1.0, 2e-300, 1e300, 0.0]), n, 5).unwrap();
        assert_eq!(g.len(), 3, "{g:?}");
        assert_eq!((g[0].columns.clone(), g[0].exponent), (vec![1, 4], 0));
        assert_eq!(g[1].columns, vec![0, 2]);
        assert_eq!(g[2].columns, vec![3]);
        for group in &g[1..] {
            let scaled = gather(group, &block(&[1e-300, 1.0, 2e-300, 1e300, 0.0]), n);
            let largest = scaled.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            assert!((1.0..2f64.powi(BAND)).contains(&largest), "{largest:e}");
        }
        // Scaling there and back is exact.
        let b = block(&[1e-300, 1.0, 2e-300, 1e300, 0.0]);
        let mut back = vec![f64::NAN; b.len()];
        for group in &g {
            scatter(group, &gather(group, &b, n), &mut back, n).unwrap();
        }
        assert_eq!(back, b);

        let e = groups(&block(&[1.0, 4e-310]), n, 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("right-hand side 1") && e.contains("4.000e-310") && e.contains("subnormal"),
            "{e}"
        );
        let mut bad = block(&[1.0, 1.0]);
        bad[4] = f64::NAN;
        let e = groups(&bad, n, 2).unwrap_err().to_string();
        assert!(
            e.contains("right-hand side 1") && e.contains("not finite"),
            "{e}"
        );
    }

    #[test]
    fn overflowing_solutions_are_named() {
        let group = MagnitudeGroup {
            columns: vec![0],
            exponent: -1000,
        };
        let e = scatter(&group, &[1e10], &mut [0.0], 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("right-hand side 0") && e.contains("exceeds f64's range"),
            "{e}"
        );
    }
}
