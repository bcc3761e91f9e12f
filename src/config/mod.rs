//! The run config (TOML). Parsing is two-step: the file is read section by section into
//! raw structs (serde, unknown keys denied, [`raw`]), then [`validate`] turns it into a
//! [`RunConfig`] ([`spec`], plain types) or reports *every* problem at once, each naming its
//! key and the allowed values. Nothing is allocated for the solve before the whole config is
//! valid. Each method's `[solver]` keys are checked in its own module ([`psc`], [`mg`],
//! [`stokes`]), the shared sections in [`mesh`], campaigns in [`campaign`].
//!
//! ```toml
//! backend = "auto"            # auto | cpu | cuda
//! [mesh]
//! kind = "unit-square"        # unit-square | unit-cube
//! element = "q1"              # q1 | p1 (unit-square); q1 (unit-cube)
//! n = 64                      # cells per direction, or h = 0.015625 (one of them)
//! h0 = 0.125                  # coarse mesh width: n = (1/h0)·2^j (psc-m1 needs it)
//! [problem]
//! k = [1, 2, 4]               # manufactured solutions sin(kπx)sin(kπy)(sin(kπz)), one per column
//! [solver]
//! method = "psc-m1"           # cholesky (faer, the f64 reference) | psc-m1
//! precision = "f32"           # f16 | f32 | f64
//! refine = true               # psc-m1: f64 iterative refinement (PSC-IR)
//! nrhs = 3                    # columns; column c uses k[c mod len(k)]
//! [output]
//! path = "out/run.h5"
//! ```

mod campaign;
mod mesh;
mod mg;
mod poisson;
mod psc;
pub mod raw;
pub mod spec;
mod stokes;
#[cfg(test)]
mod tests;

use std::path::Path;

pub use raw::RawConfig;
pub use spec::{
    CampaignSpec, Method, MgSpec, OperatorSpec, RhsSource, RunConfig, SolverSpec, STOKES,
};

use crate::error::{ConfigProblem, Error, Result};

/// The quickstart config, embedded so `tensorfem run` works without any file.
pub const QUICKSTART: &str = include_str!("../../inputs/quickstart.toml");

/// Every problem found in a config.
type Problems = Vec<ConfigProblem>;

pub(crate) fn problem(key: &str, message: impl Into<String>) -> ConfigProblem {
    ConfigProblem {
        key: key.to_string(),
        message: message.into(),
    }
}

/// " (did you mean 'x'?)" when `given` is a likely misspelling of one of `names`.
pub(crate) fn did_you_mean<'a>(given: &str, names: impl IntoIterator<Item = &'a str>) -> String {
    names
        .into_iter()
        .map(|name| (strsim::damerau_levenshtein(given, name), name))
        .filter(|&(distance, name)| distance <= (name.len() / 3).max(1))
        .min()
        .map_or(String::new(), |(_, name)| {
            format!(" (did you mean '{name}'?)")
        })
}

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<RunConfig> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, &path.display().to_string())
}

/// Parses and validates config text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<RunConfig> {
    let fail = |problems: Vec<ConfigProblem>| Error::Config {
        path: origin.to_string(),
        problems,
    };
    let (raw, mut problems) = raw::parse_raw(text).map_err(|p| fail(vec![p]))?;
    match validate(&raw, text) {
        Ok(config) if problems.is_empty() => Ok(config),
        Ok(_) => Err(fail(problems)),
        Err(more) => {
            // A key already reported as mistyped was dropped; don't report it missing too.
            let more: Vec<ConfigProblem> = more
                .into_iter()
                .filter(|p| !problems.iter().any(|q| q.key == p.key))
                .collect();
            problems.extend(more);
            Err(fail(problems))
        }
    }
}

/// Checks every value; returns all problems found, or the validated config.
pub fn validate(raw: &RawConfig, source: &str) -> std::result::Result<RunConfig, Problems> {
    if let Some(campaign) = &raw.campaign {
        let mut problems = Vec::new();
        return match campaign::validate(raw, campaign, source, &mut problems) {
            Some((spec, run)) if problems.is_empty() => Ok(RunConfig {
                campaign: Some(spec),
                ..run
            }),
            _ => Err(problems),
        };
    }
    if raw.solver.method.as_deref() == Some(STOKES) {
        return stokes::validate(raw, source);
    }
    poisson::validate(raw, source)
}
