//! The validated config: plain types, no behaviour beyond naming themselves. Every module
//! that needs a setting reads it from here; validation (the sibling modules) fills them.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::device::BackendChoice;
use crate::mesh::MeshSpec;
use crate::mg::{Smoother, Variant};
use crate::precision::Precision;
use crate::stokes::StokesSpec;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The sparse Cholesky in f64 (`linalg::SparseCholesky`).
    Cholesky,
    /// The PSC methods of docs/mathematics.md §3 (M1 and M2 direct, M3 CG on the C/E system; `psc`
    /// names them), optionally inside f64 refinement (PSC-IR).
    PscM1,
    PscM2,
    PscM3,
    /// Geometric multigrid with a precision per level inside f64 refinement
    /// (docs/mathematics.md §4).
    Mg,
    /// Q2-Q1 Stokes with preconditioned FGMRES (docs/mathematics.md §7); configured by
    /// `RunConfig::stokes`.
    Stokes,
}

impl Method {
    pub const NAMES: &'static str = "cholesky, psc-m1, psc-m2, psc-m3, mg, stokes";

    pub fn name(self) -> &'static str {
        match self {
            Method::Cholesky => "cholesky",
            Method::PscM1 => "psc-m1",
            Method::PscM2 => "psc-m2",
            Method::PscM3 => "psc-m3",
            Method::Mg => "mg",
            Method::Stokes => STOKES,
        }
    }

    /// Whether the method runs on the CUDA backend (all but the sparse Cholesky, which
    /// runs on the host).
    pub fn has_cuda(self) -> bool {
        match self {
            Method::PscM1 | Method::PscM2 | Method::PscM3 | Method::Mg | Method::Stokes => true,
            Method::Cholesky => false,
        }
    }

    /// Whether this is one of the PSC methods.
    pub fn is_psc(self) -> bool {
        matches!(self, Method::PscM1 | Method::PscM2 | Method::PscM3)
    }
}

/// Settings of the solver section that apply to multigrid.
#[derive(Clone, Debug, PartialEq)]
pub struct MgSpec {
    /// Precision per level, finest first (its length is the number of levels).
    pub schedule: Vec<Precision>,
    /// The preset the schedule came from, if any.
    pub variant: Option<Variant>,
    pub smoother: Smoother,
    pub smoother_name: String,
    pub residual_scaling: bool,
    /// How the levels store their matrices (`solver.storage`).
    pub storage: crate::device::MatrixStorage,
    /// Seed of the random initial guess (docs/mathematics.md §4).
    pub seed: u64,
    /// Flexible CG around the V-cycle instead of plain refinement (`solver.krylov = "cg"`).
    pub krylov: bool,
    /// How many of a block's columns one solve carries (`solver.cycle_columns`).
    pub cycle_columns: crate::mg::CycleColumns,
}

/// The settings of the solver section.
#[derive(Clone, Debug, PartialEq)]
pub struct SolverSpec {
    pub method: Method,
    pub precision: Precision,
    /// f64 iterative refinement around the PSC solve (PSC-IR) or the V-cycle.
    pub refine: bool,
    /// psc-m3: CG stops a column at ‖r‖₂ ≤ cg_rtol·‖r₀‖₂ on the prehandled C/E system
    /// (None: rtol/10 alone, the default of `psc::InnerCg::inner` inside PSC-IR).
    pub cg_rtol: Option<f64>,
    /// psc-m*: how the apply multiplies by D (docs/mathematics.md §3).
    pub coupling: Coupling,
    /// An iterative method stops a column when ‖b − Ax‖₂ ≤ max(rtol·‖b‖₂, atol), or after
    /// `max_iterations`.
    pub rtol: f64,
    pub atol: f64,
    /// What every column's verified f64 residual must meet: (rtol, atol) of an iterative
    /// method; a direct solve's accuracy check (psc without refinement: the precision's
    /// unless rtol is given; cholesky: 1e-8).
    pub tolerance: crate::linalg::Tolerance,
    pub max_iterations: usize,
    /// Where PSC set-ups are cached (None: no cache).
    pub cache_dir: Option<PathBuf>,
    /// Multigrid settings (method mg only).
    pub mg: Option<MgSpec>,
}

/// A validated config.
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    pub backend: BackendChoice,
    pub mesh: MeshSpec,
    /// Wave number of the manufactured solution of each right-hand side (the block's
    /// columns, Nrhs of them).
    pub ks: Vec<u32>,
    pub solver: SolverSpec,
    pub output: PathBuf,
    /// The config text as given, echoed into output files.
    pub source: String,
    /// A campaign (`[campaign]`): the right-hand sides, batches and operators; `ks` and
    /// `output` are then unused.
    pub campaign: Option<CampaignSpec>,
    /// A Stokes run (`method = "stokes"`): the solver it describes; `mesh` is then its Q1
    /// pressure mesh (velocity is Q2 on the same cells), `solver` its precision and
    /// stopping rule, `ks` empty.
    pub stokes: Option<StokesSpec>,
}

/// The method name of the Stokes solver (docs/mathematics.md §7).
pub const STOKES: &str = "stokes";

/// Largest supported wave number: beyond it no affordable mesh resolves the solution.
pub(crate) const MAX_K: i64 = 100_000;
/// Largest block of right-hand sides one run solves.
pub(crate) const MAX_NRHS: i64 = 1_000_000;

/// Where the right-hand sides come from.
#[derive(Clone, Debug, PartialEq)]
pub enum RhsSource {
    /// `steps` time steps of the manufactured pressure field (fem::PressureSeries) at
    /// t_j = t_end·j/steps, j = 1..=steps: a projection method's pressure-Poisson equations.
    TimeSeries { steps: usize, t_end: f64 },
    /// The manufactured solutions sin(kπx)… for every k, on every operator of the study.
    Study { ks: Vec<u32> },
    /// Columns of a dataset of shape [columns, unknowns] in a user's HDF5 file: assembled
    /// load vectors b on the interior nodes (lexicographic order, x fastest).
    Hdf5 { path: PathBuf, dataset: String },
    /// The manufactured Stokes problem, once on every operator of a Stokes study.
    StokesStudy,
}

impl RhsSource {
    pub fn name(&self) -> &'static str {
        match self {
            RhsSource::TimeSeries { .. } => "time-series",
            RhsSource::Study { .. } | RhsSource::StokesStudy => "study",
            RhsSource::Hdf5 { .. } => "hdf5",
        }
    }
}

/// One operator of a campaign: a mesh and a solver, set up once per rank that needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorSpec {
    /// For Stokes, the Q1 pressure mesh (velocity is Q2 on the same cells).
    pub mesh: MeshSpec,
    pub solver: SolverSpec,
    /// The Stokes solver (method stokes), as `RunConfig::stokes`.
    pub stokes: Option<StokesSpec>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CampaignSpec {
    pub rhs: RhsSource,
    /// Columns per batch (the last batch of an operator may be smaller).
    pub batch_size: usize,
    pub directory: PathBuf,
    /// Journal every batch and resume from the journal (false: a stopped campaign starts
    /// over).
    pub checkpoint: bool,
    /// Precision the solutions are stored in (batch files and campaign.h5): f64 or f32.
    pub store: Precision,
    /// gzip level of the stored solutions (0: uncompressed).
    pub compression: u8,
    /// Store the exact solution of manufactured columns beside the computed ones in
    /// campaign.h5 (doubles its size; the errors are stored either way).
    pub store_exact: bool,
    /// Keep `batches/` after a merge whose every column passed (the merge copies them).
    pub keep_batches: bool,
    /// The operators, in campaign order (one unless a study varies mesh or solver).
    pub operators: Vec<OperatorSpec>,
}

impl CampaignSpec {
    pub fn output_file(&self) -> PathBuf {
        self.directory.join("campaign.h5")
    }

    /// Whether the campaign is a Stokes study (a study never mixes Stokes and Poisson).
    pub fn is_stokes(&self) -> bool {
        self.operators.iter().any(|o| o.stokes.is_some())
    }
}

/// How a psc method's apply multiplies by D = A_EI (docs/mathematics.md §3, "Applying D";
/// psc/coupling.rs); both give the same solution to rounding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Coupling {
    /// Sparse D and Dᵀ, C⁻¹ applied twice.
    Csr,
    /// Per macro element, folded into its group's C_g⁻¹ products: no sparse passes, and
    /// fewer flops where |∂| < |I|/2 (2|I|(|I| + 2|∂|) against 4|I|² per macro element:
    /// from 16 × 16 cells per macro element on).
    #[default]
    Element,
}

impl Coupling {
    pub const ALL: [Coupling; 2] = [Coupling::Csr, Coupling::Element];

    pub fn name(self) -> &'static str {
        match self {
            Coupling::Csr => "csr",
            Coupling::Element => "element",
        }
    }
}

impl fmt::Display for Coupling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Coupling {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Coupling::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown PSC coupling {s:?} (allowed: csr, element)"))
    }
}
