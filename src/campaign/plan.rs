//! A campaign cut into batches: every rank derives the same plan from the config, so a
//! batch is named by its index alone and its result does not depend on which rank solves
//! it.
//!
//! The plan also names every setting the results depend on ([`Plan::settings`]: config key →
//! value, the content of the right-hand-side file included); its fingerprint is a hash of
//! them. A journal or batch file of another fingerprint is refused, and the journal keeps the
//! settings so the refusal can say which one changed. Settings that cannot change a finished
//! batch's result are left out, so changing them resumes: `solver.max_iterations` (a
//! journaled batch converged within the old limit, and the iteration is deterministic),
//! `solver.cache_dir` (a cached set-up is the computed one), the backend, the threads,
//! `campaign.checkpoint` and where the input file lies.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use crate::config::{CampaignSpec, OperatorSpec, RhsSource};
use crate::fem::{Exact, Manufactured, PressureSeries};
use crate::mesh::BoundaryValue;
use crate::stokes::{Preconditioner, Relaxation, StokesSpec};

/// What one column (right-hand side) of the campaign is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ColumnSource {
    /// The manufactured solution sin(kπx)… (study).
    Wave { k: u32 },
    /// Time step `step` (1-based) of the pressure series, at time t.
    TimeStep { step: usize, t: f64 },
    /// Column `index` of the user's HDF5 dataset.
    Input { index: usize },
    /// The manufactured Stokes problem (a Stokes study's one column per operator).
    Stokes,
}

impl ColumnSource {
    pub fn exact(&self, dim: usize) -> Option<Exact> {
        match *self {
            ColumnSource::Wave { k } => Some(Exact::Wave(Manufactured::new(k, dim))),
            ColumnSource::TimeStep { t, .. } => Some(Exact::Pressure(PressureSeries::new(t, dim))),
            ColumnSource::Input { .. } | ColumnSource::Stokes => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub index: usize,
    pub operator: usize,
    /// Its columns: indices into [`Plan::columns`] (consecutive, within one operator).
    pub columns: Range<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub operator: usize,
    /// Position among the columns of its operator.
    pub index_in_operator: usize,
    pub source: ColumnSource,
}

/// What rank 0 learned reading the user's right-hand-side dataset (source hdf5): its
/// columns and a hash of its values (xxh3-64 of the f64 values in file order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InputDigest {
    pub columns: usize,
    pub content: u64,
}

/// Config key → value of every setting the results depend on.
pub type Settings = BTreeMap<String, String>;

#[derive(Clone, Debug)]
pub struct Plan {
    pub columns: Vec<Column>,
    pub batches: Vec<Batch>,
    /// Columns per operator.
    pub operator_columns: Vec<usize>,
    pub settings: Settings,
    /// A hash of `settings`: a journal or batch file written for another plan is refused.
    pub fingerprint: u64,
    /// Fingerprints of earlier plans of this campaign whose batches it keeps (the solver
    /// settings changed by `--retry-failed`).
    pub earlier: BTreeSet<u64>,
}

/// The settings of one operator that its results depend on, under `prefix`.
fn operator_settings(settings: &mut Settings, prefix: &str, op: &OperatorSpec) {
    let mut set = |key: &str, value: String| {
        settings.insert(format!("{prefix}{key}"), value);
    };
    let (mesh, solver) = (&op.mesh, &op.solver);
    set("mesh.kind", mesh.kind.name().into());
    let element = match op.stokes {
        Some(_) => "q2-q1",
        None => mesh.element.name(),
    };
    set("mesh.element", element.into());
    set("mesh.n", mesh.n.to_string());
    if let Some((n0, _)) = mesh.coarse {
        set("mesh.h0", format!("1/{n0}"));
    }
    if let Some(d) = &mesh.domain {
        set("mesh.levels", d.levels.to_string());
        set("mesh.coarse_levels", d.coarse_levels.to_string());
        // The coarse mesh itself, so a rewritten Gmsh file is another campaign.
        set("mesh.coarse_mesh", format!("{:016x}", d.content()));
    }
    for part in mesh.boundary.iter().flat_map(|b| &b.parts) {
        let value = match part.value {
            BoundaryValue::Constant(v) => format!("{v:e}"),
            BoundaryValue::Input => "hdf5".into(),
        };
        set(
            &format!("boundary.{}", part.name),
            format!("{} {value}", part.condition.name()),
        );
    }
    set("solver.method", solver.method.name().into());
    set("solver.precision", solver.precision.name().into());
    set("solver.refine", solver.refine.to_string());
    set("solver.rtol", format!("{:e}", solver.rtol));
    set("solver.atol", format!("{:e}", solver.atol));
    if let Some(stokes) = &op.stokes {
        stokes_settings(&mut set, stokes);
        return;
    }
    // M3's CG tolerance changes its solutions (only when given: its default follows from
    // the settings above, and plans of the other methods stay as they were).
    if let Some(cg_rtol) = solver.cg_rtol {
        set("solver.cg_rtol", format!("{cg_rtol:e}"));
    }
    // The coupling changes solutions in their last bits; only when not the default, so
    // plans written before the setting existed stay valid.
    if solver.method.is_psc() && solver.coupling != crate::config::Coupling::default() {
        set("solver.coupling", solver.coupling.name().into());
    }
    if let Some(mg) = &solver.mg {
        set("solver.schedule", crate::mg::schedule_name(&mg.schedule));
        set("solver.smoother", mg.smoother_name.clone());
        set("solver.residual_scaling", mg.residual_scaling.to_string());
        set("solver.seed", mg.seed.to_string());
        // Only when on: plans written before the setting existed stay valid.
        if mg.krylov {
            set("solver.krylov", "cg".into());
        }
    }
}

/// The settings of a Stokes solver: the preconditioner, the parameters its relaxation
/// uses, and FGMRES's restart and stopping rule (max_iterations is left out, as above).
fn stokes_settings(set: &mut impl FnMut(&str, String), spec: &StokesSpec) {
    set("solver.preconditioner", spec.preconditioner.name().into());
    match spec.preconditioner {
        Preconditioner::Multigrid(Relaxation::Vanka { omega, .. }) => {
            set("solver.omega", format!("{omega:e}"));
        }
        Preconditioner::Multigrid(Relaxation::BraessSarazin(p) | Relaxation::SchurUzawa(p)) => {
            set("solver.omega", format!("{:e}", p.omega));
            set("solver.t", format!("{:e}", p.t));
            set("solver.jacobi_steps", p.jacobi_steps.to_string());
            set("solver.jacobi_weight", format!("{:e}", p.jacobi_weight));
        }
        Preconditioner::BlockTriangular => {}
    }
    set("solver.restart", spec.fgmres.restart.to_string());
}

/// Every setting of `spec` the results depend on (see the module comment).
fn settings(spec: &CampaignSpec, input: InputDigest) -> Settings {
    let mut settings = Settings::new();
    settings.insert("tensorfem".into(), env!("CARGO_PKG_VERSION").into());
    settings.insert("campaign.rhs".into(), spec.rhs.name().into());
    settings.insert("campaign.batch_size".into(), spec.batch_size.to_string());
    // The stored precision changes the results read back; compression does not.
    settings.insert("campaign.store".into(), spec.store.name().into());
    match &spec.rhs {
        RhsSource::TimeSeries { steps, t_end } => {
            settings.insert("campaign.time_series.steps".into(), steps.to_string());
            settings.insert("campaign.time_series.t_end".into(), format!("{t_end:e}"));
        }
        RhsSource::Study { ks } => {
            settings.insert("campaign.study.k".into(), format!("{ks:?}"));
        }
        RhsSource::StokesStudy => {}
        RhsSource::Hdf5 { dataset, .. } => {
            settings.insert("campaign.input.dataset".into(), dataset.clone());
            settings.insert("campaign.input columns".into(), input.columns.to_string());
            settings.insert(
                "campaign.input content".into(),
                format!("xxh3 {:016x}", input.content),
            );
        }
    }
    if let [op] = &spec.operators[..] {
        operator_settings(&mut settings, "", op);
    } else {
        settings.insert("operators".into(), spec.operators.len().to_string());
        for (i, op) in spec.operators.iter().enumerate() {
            operator_settings(&mut settings, &format!("operator {i}: "), op);
        }
    }
    settings
}

impl Plan {
    /// `input`: the user's dataset as rank 0 read it (source hdf5; checked before).
    pub fn new(spec: &CampaignSpec, input: InputDigest) -> Plan {
        let input_columns = input.columns;
        let per_operator: Vec<ColumnSource> = match &spec.rhs {
            RhsSource::TimeSeries { steps, t_end } => (1..=*steps)
                .map(|step| ColumnSource::TimeStep {
                    step,
                    t: t_end * step as f64 / *steps as f64,
                })
                .collect(),
            RhsSource::Study { ks } => ks.iter().map(|&k| ColumnSource::Wave { k }).collect(),
            RhsSource::Hdf5 { .. } => (0..input_columns)
                .map(|index| ColumnSource::Input { index })
                .collect(),
            RhsSource::StokesStudy => vec![ColumnSource::Stokes],
        };
        let mut columns = Vec::new();
        let mut batches = Vec::new();
        for operator in 0..spec.operators.len() {
            let first = columns.len();
            columns.extend(per_operator.iter().enumerate().map(|(i, &source)| Column {
                operator,
                index_in_operator: i,
                source,
            }));
            let mut start = first;
            while start < columns.len() {
                let end = (start + spec.batch_size).min(columns.len());
                batches.push(Batch {
                    index: batches.len(),
                    operator,
                    columns: start..end,
                });
                start = end;
            }
        }
        let settings = settings(spec, input);
        let fingerprint = xxhash_rust::xxh3::xxh3_64(
            serde_json::to_string(&settings)
                .expect("strings serialise")
                .as_bytes(),
        );
        Plan {
            operator_columns: vec![per_operator.len(); spec.operators.len()],
            columns,
            batches,
            settings,
            fingerprint,
            earlier: BTreeSet::new(),
        }
    }

    /// Whether a batch file written under the plan `fingerprint` belongs to this campaign.
    pub fn accepts(&self, fingerprint: u64) -> bool {
        fingerprint == self.fingerprint || self.earlier.contains(&fingerprint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A psc campaign's plan names the coupling of D only when it is not the default, so
    /// plans written before the setting existed stay valid; other methods never name it.
    #[test]
    fn the_coupling_is_a_setting_when_not_the_default() {
        let plan_of = |coupling: &str| {
            let text = format!(
                "[mesh]\nn = 64\nh0 = 0.125\n[solver]\nmethod = \"psc-m1\"\n{coupling}\
                 [campaign]\nrhs = \"study\"\ndirectory = \"d\"\n\
                 [campaign.study]\nk = [1]\nmethod = [\"psc-m1\", \"mg\"]\n"
            );
            let config = crate::config::parse(&text, "t").unwrap();
            settings(&config.campaign.unwrap(), InputDigest::default())
        };
        let default = plan_of("");
        assert!(
            default.keys().all(|k| !k.contains("coupling")),
            "{default:?}"
        );
        let csr = plan_of("coupling = \"csr\"\n");
        let named: Vec<_> = csr.iter().filter(|(k, _)| k.contains("coupling")).collect();
        assert_eq!(
            named,
            [(
                &"operator 0: solver.coupling".to_string(),
                &"csr".to_string()
            )]
        );
    }
}
