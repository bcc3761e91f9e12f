//! What a multigrid solve is configured with: the precision of every level (a list, with
//! the variants of docs/mathematics.md §4 as presets), the smoother, the number of levels.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::precision::Precision;

/// The named precision schedules of docs/mathematics.md §4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Every level and the base solve in f64.
    DMg,
    /// Every level and the base solve in f16.
    HMg,
    /// Base solve and level 1 in f16, level 2 in f32, the finer levels in f64.
    DshMg,
    /// Base solve and level 1 in f64, level 2 in f32, the finer levels in f16.
    HsdMg,
}

impl Variant {
    pub const ALL: [Variant; 4] = [Variant::DMg, Variant::HMg, Variant::DshMg, Variant::HsdMg];
    pub const NAMES: &'static str = "D_MG, H_MG, DSH_MG, HSD_MG";

    pub fn name(self) -> &'static str {
        match self {
            Variant::DMg => "D_MG",
            Variant::HMg => "H_MG",
            Variant::DshMg => "DSH_MG",
            Variant::HsdMg => "HSD_MG",
        }
    }

    /// The precision of each of `levels` levels, finest first (the last is the base solve's).
    pub fn schedule(self, levels: usize) -> Vec<Precision> {
        use Precision::*;
        let of_level = |l: usize| match (self, l) {
            (Variant::DMg, _) => F64,
            (Variant::HMg, _) => F16,
            (Variant::DshMg, 0 | 1) => F16,
            (Variant::HsdMg, 0 | 1) => F64,
            (_, 2) => F32,
            (Variant::DshMg, _) => F64,
            (Variant::HsdMg, _) => F16,
        };
        (0..levels).rev().map(of_level).collect()
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Variant {
    type Err = String;
    /// Case-insensitive: "h_mg" and "H_MG" are the same variant.
    fn from_str(s: &str) -> Result<Self, String> {
        Variant::ALL
            .into_iter()
            .find(|v| v.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown variant '{s}' (allowed: {})", Variant::NAMES))
    }
}

/// A schedule written finest → coarsest, e.g. "f16 f16 f32 f64".
pub fn schedule_name(schedule: &[Precision]) -> String {
    schedule
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(" → ")
}

/// How a smoothing step relaxes (docs/mathematics.md §4).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SmootherKind {
    /// Damped Jacobi x += ω D⁻¹ (b − A x).
    Jacobi { omega: f64 },
    /// The Chebyshev semi-iteration on D⁻¹A: the steps on each side of the coarse-grid
    /// correction make one polynomial in D⁻¹A, smallest on [λ̂/[`CHEBYSHEV_RATIO`], λ̂], λ̂
    /// an upper estimate of each level's largest eigenvalue of D⁻¹A (set-up: a few Lanczos
    /// steps). It damps the modes Jacobi leaves where a mesh's flat triangles make the
    /// level anisotropic.
    Chebyshev,
    /// The Chebyshev semi-iteration on B⁻¹A, B the block diagonal of A on aggregates of
    /// strongly coupled unknowns (mg/blocks.rs): each step a residual pass, then one pass
    /// over B⁻¹. Where flat triangles couple nodes strongly along one direction it relaxes
    /// them together; a level without strong couplings (B = D) smooths as
    /// [`SmootherKind::Chebyshev`].
    BlockChebyshev,
}

/// λ̂ / (the lower end of the interval a Chebyshev smoother damps): the modes of D⁻¹A above
/// λ̂/15 are the ones the coarser level cannot represent on the meshes tensorfem refines.
pub const CHEBYSHEV_RATIO: f64 = 15.0;

/// The smoother: its kind, `pre` steps before the coarse-grid correction and `post` after.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Smoother {
    pub kind: SmootherKind,
    pub pre: usize,
    pub post: usize,
}

impl Smoother {
    /// The MP-MG smoother (docs/mathematics.md §4): ω = 2/3, 3 + 3 steps.
    pub const JACOBI: Smoother = Smoother {
        kind: SmootherKind::Jacobi { omega: 2.0 / 3.0 },
        pre: 3,
        post: 3,
    };
    /// The PSC paper's comparison multigrid (docs/mathematics.md §8.1): "Richardson" x +=
    /// 0.3 D⁻¹(b − Ax), 4 + 4 steps.
    pub const RICHARDSON: Smoother = Smoother {
        kind: SmootherKind::Jacobi { omega: 0.3 },
        pre: 4,
        post: 4,
    };
    /// Chebyshev smoothing of degree 3 on each side: the cost of `JACOBI`'s matrix passes.
    pub const CHEBYSHEV: Smoother = Smoother {
        kind: SmootherKind::Chebyshev,
        pre: 3,
        post: 3,
    };
    /// Block Chebyshev smoothing of degree 3 on each side.
    pub const BLOCK_CHEBYSHEV: Smoother = Smoother {
        kind: SmootherKind::BlockChebyshev,
        pre: 3,
        post: 3,
    };
    pub const NAMES: &'static str = "jacobi, richardson, chebyshev, block-chebyshev";

    /// Most smoothing steps before or after the coarse-grid correction.
    pub const MAX_STEPS: usize = 50;

    /// The Jacobi damping ω (none for Chebyshev smoothing).
    pub fn omega(&self) -> Option<f64> {
        match self.kind {
            SmootherKind::Jacobi { omega } => Some(omega),
            SmootherKind::Chebyshev | SmootherKind::BlockChebyshev => None,
        }
    }

    /// This smoother (named `name`) with its damping and step counts replaced where given,
    /// and how to call the result: the name alone when nothing changed, else the name with
    /// its ω and steps. Fails naming the value out of range: 0 < ω < 2 (damped Jacobi
    /// diverges on the highest frequencies beyond), ω given to Chebyshev smoothing (which
    /// takes its interval from each level's matrix), 0 … [`Smoother::MAX_STEPS`] steps on
    /// each side, at least one in all.
    pub fn adjusted(
        self,
        name: &str,
        omega: Option<f64>,
        pre: Option<usize>,
        post: Option<usize>,
    ) -> Result<(Smoother, String), String> {
        let kind = match (self.kind, omega) {
            (SmootherKind::Chebyshev | SmootherKind::BlockChebyshev, Some(_)) => {
                return Err(format!(
                    "ω applies to the jacobi and richardson smoothers only ({name} takes its interval from each level's matrix)"
                ))
            }
            (_, Some(w)) if !(w.is_finite() && w > 0.0 && w < 2.0) => {
                return Err(format!("ω = {w} (allowed: 0 < ω < 2)"))
            }
            (SmootherKind::Jacobi { .. }, Some(omega)) => SmootherKind::Jacobi { omega },
            (kind, None) => kind,
        };
        let adjusted = Smoother {
            kind,
            pre: pre.unwrap_or(self.pre),
            post: post.unwrap_or(self.post),
        };
        if adjusted.pre.max(adjusted.post) > Self::MAX_STEPS || adjusted.pre + adjusted.post == 0 {
            return Err(format!(
                "{} + {} smoothing steps (allowed: 0 … {} on each side, at least one in all)",
                adjusted.pre,
                adjusted.post,
                Self::MAX_STEPS
            ));
        }
        let steps = format!("{} + {} steps", adjusted.pre, adjusted.post);
        let described = match adjusted.kind {
            _ if adjusted == self => name.to_string(),
            // ω to 4 decimals: 2/3 reads 0.6667.
            SmootherKind::Jacobi { omega } => {
                format!("{name} (ω = {}, {steps})", (omega * 1e4).round() / 1e4)
            }
            SmootherKind::Chebyshev | SmootherKind::BlockChebyshev => {
                format!("{name} ({steps})")
            }
        };
        Ok((adjusted, described))
    }

    pub fn by_name(name: &str) -> Result<Smoother, String> {
        match name {
            "jacobi" => Ok(Smoother::JACOBI),
            "richardson" => Ok(Smoother::RICHARDSON),
            "chebyshev" => Ok(Smoother::CHEBYSHEV),
            "block-chebyshev" => Ok(Smoother::BLOCK_CHEBYSHEV),
            other => Err(format!(
                "unknown smoother '{other}' (allowed: {})",
                Smoother::NAMES
            )),
        }
    }
}

/// Coarsest cells per direction the default hierarchy stops at (docs/mathematics.md §8.2:
/// 4096² cells over 10 levels leaves 8² coarse cells).
pub const DEFAULT_COARSEST_CELLS: usize = 8;

/// Levels of the default hierarchy on n cells per direction: halve while n stays even and
/// the coarser mesh keeps at least [`DEFAULT_COARSEST_CELLS`] cells per direction.
pub fn default_levels(n: usize) -> usize {
    let (mut levels, mut m) = (1, n);
    while m % 2 == 0 && m / 2 >= DEFAULT_COARSEST_CELLS {
        m /= 2;
        levels += 1;
    }
    levels
}

/// Checks that n cells per direction can be coarsened `levels − 1` times, leaving at least
/// 2 cells (one interior unknown per direction) on the coarsest level.
pub fn check_levels(n: usize, levels: usize) -> Result<()> {
    let factor = 1usize.checked_shl(levels.saturating_sub(1) as u32);
    match factor {
        Some(f) if levels >= 1 && n.is_multiple_of(f) && n / f >= 2 => Ok(()),
        _ => Err(Error::InvalidInput(format!(
            "{levels} multigrid levels need n = {n} cells per direction divisible by 2^{} with at least 2 cells left on the coarsest level",
            levels.saturating_sub(1)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Precision::*;

    #[test]
    fn presets_follow_spec() {
        assert_eq!(Variant::DMg.schedule(4), vec![F64; 4]);
        assert_eq!(Variant::HMg.schedule(3), vec![F16; 3]);
        assert_eq!(Variant::DshMg.schedule(5), vec![F64, F64, F32, F16, F16]);
        assert_eq!(Variant::HsdMg.schedule(5), vec![F16, F16, F32, F64, F64]);
        assert_eq!(Variant::HsdMg.schedule(2), vec![F64, F64]);
        assert_eq!("dsh_mg".parse::<Variant>().unwrap(), Variant::DshMg);
        assert!("X_MG".parse::<Variant>().is_err());
        assert_eq!(schedule_name(&[F64, F16]), "f64 → f16");
    }

    #[test]
    fn adjusted_smoothers() {
        let (s, name) = Smoother::JACOBI
            .adjusted("jacobi", Some(0.9), Some(2), Some(2))
            .unwrap();
        assert_eq!((s.omega(), s.pre, s.post), (Some(0.9), 2, 2));
        assert_eq!(name, "jacobi (ω = 0.9, 2 + 2 steps)");
        let (s, name) = Smoother::JACOBI
            .adjusted("jacobi", None, None, None)
            .unwrap();
        assert_eq!((s, name.as_str()), (Smoother::JACOBI, "jacobi"));
        let (s, _) = Smoother::RICHARDSON
            .adjusted("richardson", None, Some(0), None)
            .unwrap();
        assert_eq!((s.omega(), s.pre, s.post), (Some(0.3), 0, 4));
        let (s, name) = Smoother::CHEBYSHEV
            .adjusted("chebyshev", None, Some(4), Some(4))
            .unwrap();
        assert_eq!((s.kind, s.pre, s.post), (SmootherKind::Chebyshev, 4, 4));
        assert_eq!(name, "chebyshev (4 + 4 steps)");
        assert!(Smoother::CHEBYSHEV
            .adjusted("chebyshev", Some(0.9), None, None)
            .unwrap_err()
            .starts_with('ω'));
        for (omega, pre, post) in [
            (Some(2.0), None, None),
            (Some(0.0), None, None),
            (Some(f64::NAN), None, None),
            (None, Some(0), Some(0)),
            (None, Some(51), None),
        ] {
            assert!(Smoother::JACOBI
                .adjusted("jacobi", omega, pre, post)
                .is_err());
        }
    }

    #[test]
    fn level_counts() {
        assert_eq!(default_levels(4096), 10);
        assert_eq!(default_levels(1024), 8);
        assert_eq!(default_levels(128), 5);
        assert_eq!(default_levels(6), 1);
        assert!(check_levels(4096, 10).is_ok());
        assert!(check_levels(12, 2).is_ok());
        assert!(check_levels(12, 3).is_ok());
        assert!(check_levels(12, 4).is_err());
        assert!(check_levels(10, 3).is_err());
        assert!(check_levels(8, 0).is_err());
    }
}
