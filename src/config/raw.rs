//! The config as written: one raw struct per TOML section (serde, unknown keys denied), read
//! so that every unknown key and every mistyped value is reported at once, each named.

use serde::Deserialize;
use serde_aux::serde_introspection::serde_introspect;

use super::campaign::RawCampaign;
use super::problem;
use crate::error::ConfigProblem;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMesh {
    pub kind: Option<String>,
    pub element: Option<String>,
    pub n: Option<i64>,
    pub h: Option<f64>,
    pub h0: Option<f64>,
    pub file: Option<String>,
    pub levels: Option<i64>,
    pub coarse_levels: Option<i64>,
}

/// One wave number or a list of them.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum RawWaveNumbers {
    One(i64),
    Many(Vec<i64>),
}

/// A count or a word (`solver.cycle_columns = 16` or `"auto"`).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum RawColumns {
    Count(i64),
    Word(String),
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProblem {
    pub k: Option<RawWaveNumbers>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSolver {
    pub method: Option<String>,
    pub precision: Option<String>,
    pub variant: Option<String>,
    pub schedule: Option<Vec<String>>,
    pub smoother: Option<String>,
    pub pre_smoothing: Option<i64>,
    pub post_smoothing: Option<i64>,
    pub levels: Option<i64>,
    pub residual_scaling: Option<bool>,
    pub storage: Option<String>,
    pub seed: Option<i64>,
    pub krylov: Option<String>,
    pub cycle_columns: Option<RawColumns>,
    pub cg_rtol: Option<f64>,
    pub coupling: Option<String>,
    pub refine: Option<bool>,
    pub nrhs: Option<i64>,
    pub rtol: Option<f64>,
    pub atol: Option<f64>,
    pub max_iterations: Option<i64>,
    pub cache: Option<bool>,
    pub cache_dir: Option<String>,
    pub preconditioner: Option<String>,
    pub relaxation: Option<String>,
    pub restart: Option<i64>,
    pub omega: Option<f64>,
    pub t: Option<f64>,
    pub jacobi_steps: Option<i64>,
    pub jacobi_weight: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    pub path: Option<String>,
}

/// The config as written, before validation.
#[derive(Clone, Debug, Default)]
pub struct RawConfig {
    pub backend: Option<String>,
    pub mesh: RawMesh,
    pub problem: RawProblem,
    pub solver: RawSolver,
    pub output: RawOutput,
    pub campaign: Option<RawCampaign>,
    /// `[boundary]`: boundary part name → its condition (a name or a table), checked
    /// against the mesh's parts in validation.
    pub boundary: Option<toml::Table>,
    /// Set by the campaign validator, not read from the file: the right-hand sides come
    /// from an HDF5 file (so boundary values may be given; manufactured ones bring their own).
    pub rhs_from_input: bool,
    /// Set by [`super::parse_embedded`], not read from the file: a program embedding
    /// tensorfem passes the loads and takes the solutions, so there is no `[output]`.
    pub embedded: bool,
    /// The folder of the config file (set by `config::load`): mesh.file is relative to it.
    pub folder: Option<std::path::PathBuf>,
}

const SECTIONS: [&str; 6] = [
    "mesh", "problem", "solver", "output", "campaign", "boundary",
];

/// Reads the TOML into raw sections. Unknown keys and type errors are collected (every
/// section is read even when another has a problem); a TOML syntax error ends parsing.
pub(super) fn parse_raw(text: &str) -> Result<(RawConfig, Vec<ConfigProblem>), ConfigProblem> {
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        problem(
            "(syntax)",
            e.message().to_string() + &location(text, e.span()),
        )
    })?;
    let mut problems = Vec::new();
    let mut raw = RawConfig::default();

    let top_keys: Vec<String> = table.keys().cloned().collect();
    for key in top_keys {
        if key == "backend" || SECTIONS.contains(&key.as_str()) {
            continue;
        }
        problems.push(problem(
            &key,
            format!(
                "unknown key{} (allowed at the top level: backend, [{}])",
                super::did_you_mean(&key, SECTIONS.iter().copied().chain(["backend"])),
                SECTIONS.join("], [")
            ),
        ));
        table.remove(&key);
    }
    if let Some(value) = table.remove("backend") {
        match value {
            toml::Value::String(s) => raw.backend = Some(s),
            other => problems.push(problem(
                "backend",
                format!("expected a string, found {}", other.type_str()),
            )),
        }
    }

    fn section<T: for<'de> Deserialize<'de> + Default>(
        table: &mut toml::Table,
        name: &str,
        problems: &mut Vec<ConfigProblem>,
    ) -> T {
        let Some(value) = table.remove(name) else {
            return T::default();
        };
        let toml::Value::Table(mut fields) = value else {
            problems.push(problem(name, "expected a table [".to_string() + name + "]"));
            return T::default();
        };
        let allowed = serde_introspect::<T>();
        let unknown: Vec<String> = fields
            .keys()
            .filter(|k| !allowed.contains(&k.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            let message = match (name, key.as_str()) {
                ("solver", "tolerance") => format!(
                    "was replaced by solver.rtol and solver.atol, the same for every method: a column stops at ‖b − Ax‖₂ ≤ max(rtol·‖b‖₂, atol). tolerance was relative for psc-m1 and stokes (write rtol = {v}) and absolute for mg (write atol = {v})",
                    v = fields[&key]
                        .as_float()
                        .map_or(fields[&key].to_string(), |v| format!("{v:e}"))
                ),
                _ => format!(
                    "unknown key{} (allowed in [{name}]: {})",
                    super::did_you_mean(&key, allowed.iter().copied()),
                    allowed.join(", ")
                ),
            };
            problems.push(problem(&format!("{name}.{key}"), message));
            fields.remove(&key);
        }
        // Find the keys whose values have the wrong type, one key at a time (inside a
        // sub-table, one of its keys at a time), so each is named and the rest of the
        // section is still read and validated.
        let fails = |key: &str, value: &toml::Value| {
            let single = toml::Table::from_iter([(key.to_string(), value.clone())]);
            T::deserialize(toml::Value::Table(single)).err()
        };
        let mut mistyped = Vec::new();
        let mut mistyped_inner = Vec::new();
        for (key, value) in &fields {
            let Some(e) = fails(key, value) else {
                continue;
            };
            let inner: Vec<(String, toml::de::Error)> = match value {
                toml::Value::Table(sub) => sub
                    .iter()
                    .filter_map(|(k, v)| {
                        let one =
                            toml::Value::Table(toml::Table::from_iter([(k.clone(), v.clone())]));
                        fails(key, &one).map(|e| (k.clone(), e))
                    })
                    .collect(),
                _ => Vec::new(),
            };
            if inner.is_empty() {
                problems.push(problem(&format!("{name}.{key}"), type_problem(e.message())));
                mistyped.push(key.clone());
            }
            for (k, e) in inner {
                problems.push(problem(
                    &format!("{name}.{key}.{k}"),
                    type_problem(e.message()),
                ));
                mistyped_inner.push((key.clone(), k));
            }
        }
        for key in mistyped {
            fields.remove(&key);
        }
        for (key, k) in mistyped_inner {
            if let Some(toml::Value::Table(sub)) = fields.get_mut(&key) {
                sub.remove(&k);
            }
        }
        T::deserialize(toml::Value::Table(fields)).unwrap_or_else(|e| {
            problems.push(problem(name, e.message().to_string()));
            T::default()
        })
    }
    raw.mesh = section(&mut table, "mesh", &mut problems);
    raw.problem = section(&mut table, "problem", &mut problems);
    raw.solver = section(&mut table, "solver", &mut problems);
    raw.output = section(&mut table, "output", &mut problems);
    if table.contains_key("campaign") {
        raw.campaign = Some(section(&mut table, "campaign", &mut problems));
    }
    match table.remove("boundary") {
        None => {}
        Some(toml::Value::Table(parts)) => raw.boundary = Some(parts),
        Some(other) => problems.push(problem(
            "boundary",
            format!("expected a table [boundary], found {}", other.type_str()),
        )),
    }
    Ok((raw, problems))
}

/// serde's "invalid type: floating point `2.5`, expected i64" as a user reads it: "must be
/// an integer (found floating point `2.5`)"; other messages as they are.
fn type_problem(message: &str) -> String {
    let Some((found, expected)) = message
        .strip_prefix("invalid type: ")
        .and_then(|rest| rest.split_once(", expected "))
    else {
        return message.to_string();
    };
    let wanted = match expected {
        "i64" | "u64" | "i32" | "u32" | "usize" => "an integer",
        "f64" | "f32" => "a number",
        "a boolean" => "true or false",
        "a sequence" => "a list",
        other => other,
    };
    format!("must be {wanted} (found {found})")
}

/// " (line L, column C)" for a byte span, when toml gives one.
fn location(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    span.map(|s| {
        let before = &text[..s.start.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |p| p + 1) + 1;
        format!(" (line {line}, column {column})")
    })
    .unwrap_or_default()
}

/// 1/w as an integer, when w is the reciprocal of one (to 1e-9 relative).
pub(super) fn reciprocal_integer(w: f64) -> Option<usize> {
    if !(w.is_finite() && w > 0.0) {
        return None;
    }
    let r = (1.0 / w).round();
    ((r * w - 1.0).abs() < 1e-9 && (1.0..1e9).contains(&r)).then_some(r as usize)
}
