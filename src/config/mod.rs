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
//! h0 = 0.125                  # coarse mesh width: n = (1/h0)·2^j (the psc methods need it)
//! [problem]
//! k = [1, 2, 4]               # manufactured solutions sin(kπx)sin(kπy)(sin(kπz)), one per column
//! [solver]
//! method = "psc-m1"           # cholesky (f64 sparse Cholesky) | psc-m1 | psc-m2 | psc-m3 | mg
//! precision = "f32"           # f16 | tf32 (psc methods) | f32 | f64
//! refine = true               # psc-m*: f64 iterative refinement (PSC-IR)
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

use std::path::{Component, Path, PathBuf};

pub use raw::RawConfig;
pub use spec::{
    CampaignSpec, Coupling, Method, MgSpec, OperatorSpec, RhsSource, RunConfig, SolverSpec, STOKES,
};

use crate::error::{ConfigProblem, Error, Result};

/// The quickstart config, embedded so `tensorfem run` works without any file.
pub const QUICKSTART: &str = include_str!("../../inputs/quickstart.toml");

/// Every problem found in a config.
type Problems = Vec<ConfigProblem>;

/// Why tf32 is refused outside PSC: it is a mode of dense products, and only PSC's
/// operators are dense GEMM operands.
pub(crate) const TF32_IS_PSC: &str = "tf32 multiplies dense GEMMs on Tensor Cores: the precision of the psc methods (psc-m1, psc-m2, psc-m3) only (allowed here: f16, f32, f64)";

pub(crate) fn problem(key: &str, message: impl Into<String>) -> ConfigProblem {
    ConfigProblem {
        key: key.to_string(),
        message: message.into(),
    }
}

/// solver.rtol and solver.atol, the same for every method: a column stops when
/// ‖b − Ax‖₂ ≤ max(rtol·‖b‖₂, atol). `defaults` are the method's (rtol, atol).
pub(crate) fn stopping_rule(
    raw: &RawConfig,
    defaults: (f64, f64),
    problems: &mut Problems,
) -> (f64, f64) {
    let rtol = raw.solver.rtol.unwrap_or(defaults.0);
    let atol = raw.solver.atol.unwrap_or(defaults.1);
    if !(0.0..1.0).contains(&rtol) {
        problems.push(problem(
            "solver.rtol",
            format!("{rtol} (allowed: 0 ≤ rtol < 1; a column stops at ‖b − Ax‖₂ ≤ max(rtol·‖b‖₂, atol))"),
        ));
    }
    if !(atol.is_finite() && atol >= 0.0) {
        problems.push(problem(
            "solver.atol",
            format!("{atol} (allowed: a finite atol ≥ 0; a column stops at ‖b − Ax‖₂ ≤ max(rtol·‖b‖₂, atol))"),
        ));
    }
    if rtol == 0.0 && atol == 0.0 {
        problems.push(problem(
            "solver.rtol",
            "rtol and atol are both 0: no column could stop (set rtol > 0 for a relative stop, or atol > 0 for an absolute one)",
        ));
    }
    (rtol, atol)
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

/// Reads and validates a config file. Its relative paths (output.path, solver.cache_dir,
/// campaign.directory, campaign.input.path, and the defaults derived from them) are
/// resolved against the file's folder, so a config means the same from any working
/// directory.
pub fn load(path: &Path) -> Result<RunConfig> {
    // Bad input (exit 2): the path the user typed does not lead to a config.
    let read_error = |source: std::io::Error| {
        let why = if path.is_dir() {
            "it is a directory; name the TOML file".to_string()
        } else if source.kind() == std::io::ErrorKind::NotFound {
            "no such file".to_string()
        } else {
            source.to_string()
        };
        Error::InvalidInput(format!("cannot read the config {}: {why}", path.display()))
    };
    let text = std::fs::read_to_string(path).map_err(read_error)?;
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .canonicalize()
        .map_err(read_error)?;
    let mut config = parse_in(&text, &path.display().to_string(), Some(&folder))?;
    resolve_paths(&mut config, &folder);
    Ok(config)
}

/// The embedded quickstart, its paths resolved as if it lay in ./inputs/ (where the
/// repository keeps it): its campaign goes to ./out/quickstart.
pub fn quickstart() -> Result<RunConfig> {
    let cwd = std::env::current_dir().map_err(|source| Error::Read {
        path: PathBuf::from("."),
        source,
    })?;
    let mut config = parse(QUICKSTART, "embedded quickstart (inputs/quickstart.toml)")?;
    resolve_paths(&mut config, &cwd.join("inputs"));
    Ok(config)
}

/// `path` relative to `folder` (a canonical path); the `..` it starts with climb `folder`.
pub(crate) fn resolve(folder: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    let mut resolved = folder.to_path_buf();
    let mut climbing = true;
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir if climbing && resolved.parent().is_some() => {
                resolved.pop();
            }
            other => {
                climbing = false;
                resolved.push(other);
            }
        }
    }
    resolved
}

/// Resolves every path of `config` against `folder`.
fn resolve_paths(config: &mut RunConfig, folder: &Path) {
    let at = |p: &mut PathBuf| *p = resolve(folder, p);
    at(&mut config.output);
    if let Some(dir) = &mut config.solver.cache_dir {
        at(dir);
    }
    if let Some(campaign) = &mut config.campaign {
        at(&mut campaign.directory);
        if let RhsSource::Hdf5 { path, .. } = &mut campaign.rhs {
            at(path);
        }
        for op in &mut campaign.operators {
            if let Some(dir) = &mut op.solver.cache_dir {
                at(dir);
            }
        }
    }
}

/// Parses and validates config text; `origin` names it in errors. Files it reads while
/// validating (mesh.file) are taken relative to the working directory.
pub fn parse(text: &str, origin: &str) -> Result<RunConfig> {
    parse_in(text, origin, None)
}

/// Parses and validates the config of a Poisson problem that a program embedding tensorfem
/// solves with loads of its own (the Python package): `[mesh]`, `[boundary]` and
/// `[solver]` as in a file, boundary values allowed as with `campaign.rhs = "hdf5"`, no
/// `[problem]` or `[output]` (the solutions go back to the caller). Paths are relative to
/// the working directory.
pub fn parse_embedded(text: &str, origin: &str) -> Result<RunConfig> {
    let fail = |problems: Vec<ConfigProblem>| Error::Config {
        path: origin.to_string(),
        problems,
    };
    let (mut raw, mut problems) = raw::parse_raw(text).map_err(|p| fail(vec![p]))?;
    for (section, given) in [
        ("[problem]", raw.problem.k.is_some()),
        ("[output]", raw.output.path.is_some()),
        ("[campaign]", raw.campaign.is_some()),
    ] {
        if given {
            problems.push(problem(
                section,
                "the caller passes the right-hand sides and takes the solutions: no manufactured problem, output file or campaign",
            ));
        }
    }
    if raw.solver.method.as_deref() == Some(STOKES) {
        problems.push(problem(
            "solver.method",
            "stokes is not a Poisson method (allowed: cholesky, psc-m1, psc-m2, psc-m3, mg)",
        ));
    }
    raw.rhs_from_input = true;
    raw.embedded = true;
    match poisson::validate(&raw, text) {
        Ok(config) if problems.is_empty() => Ok(config),
        Ok(_) => Err(fail(problems)),
        Err(more) => {
            problems.extend(more);
            Err(fail(problems))
        }
    }
}

/// [`parse`] for a config lying in `folder`: the files it names are relative to it.
fn parse_in(text: &str, origin: &str, folder: Option<&Path>) -> Result<RunConfig> {
    let fail = |problems: Vec<ConfigProblem>| Error::Config {
        path: origin.to_string(),
        problems,
    };
    let (mut raw, mut problems) = raw::parse_raw(text).map_err(|p| fail(vec![p]))?;
    raw.folder = folder.map(Path::to_path_buf);
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
