//! The command line (clap): `run`, `info`, `psc-info` and the benchmarks. Each command's
//! arguments are a struct the module that carries it out takes.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::device::BackendChoice;
use crate::mesh::Element;
use crate::precision::Precision;

/// The `tensorfem` command.
#[derive(Parser)]
#[command(
    name = "tensorfem",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("TENSORFEM_GIT_REVISION"), ")"),
    about = "Finite-element Poisson solvers for many right-hand sides (PSC on Tensor Cores, mixed-precision multigrid)",
    long_about = "Finite-element Poisson solvers for many right-hand sides at once.\n\n\
        Launch alone or under mpirun/srun (one rank per GPU). Logging: RUST_LOG=info|debug; \
        threads per rank: RAYON_NUM_THREADS (default: the host's cores divided by the ranks on it).\n\
        Documentation: docs/configuration.md, docs/hdf5.md, docs/cuda.md."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the job a config describes (the embedded quickstart when no CONFIG is given). A
    /// config with [campaign] resumes from its journal unless --fresh.
    Run {
        /// TOML config (see docs/configuration.md and inputs/).
        config: Option<PathBuf>,
        /// Campaigns: discard the journal, batch files and campaign.h5 of an earlier run in
        /// campaign.directory and start over (the operator cache stays).
        #[arg(long)]
        fresh: bool,
        /// Campaigns: solve again the batches whose columns missed their tolerance (recorded
        /// in the journal and failures/), then merge.
        #[arg(long, conflicts_with = "fresh")]
        retry_failed: bool,
    },
    /// Print the version and the backends found: CPU cores, CUDA driver and devices, MPI.
    Info,
    /// PSC figures (the PSC paper's Table 1, docs/mathematics.md §3) for the unit square, the
    /// flow around a square or a Gmsh mesh: |C|, |E|, |I|, the groups, κ(C_i), κ(Π), storage
    /// of C_i⁻¹ and Π⁻¹ relative to the FEM matrix (and whole-matrix κ with --whole).
    PscInfo(PscInfoArgs),
    /// Write a refined mesh (the flow around a square or a Gmsh file's) to HDF5 with an XDMF
    /// sidecar: nodes, cells, hierarchy, boundary parts (docs/hdf5.md).
    Mesh(MeshArgs),
    /// Benchmarks: measure, print a table (or JSON with --json).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Compile the CUDA kernels with NVRTC (no GPU needed): ptxas's registers, spills and
    /// shared memory per kernel, spills as errors; --ptx-dir writes the PTX for nodes
    /// without NVRTC (load it with TENSORFEM_PTX_DIR).
    Kernels(KernelsArgs),
}

#[derive(clap::Args)]
pub struct KernelsArgs {
    /// Target architecture (sm_90: H100/H200; sm_80: A100).
    #[arg(long, default_value = "sm_90")]
    pub arch: String,
    /// Write <file>.ptx for every kernel file into this folder.
    #[arg(long)]
    pub ptx_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// This machine's ceilings: triad bandwidth and GEMM peak in f64, f32 and f16.
    Machine(MachineArgs),
    /// A PSC method (M1, M2, M3) on a block of right-hand sides: set-up and solve time,
    /// peak memory, MDof/s, GFLOP/s and fractions of the machine's ceilings measured in
    /// the same run, M3's CG iterations, accuracy.
    Psc(PscBenchArgs),
    /// Mixed-precision multigrid (docs/mathematics.md §4) side by side in one process: IR
    /// iterations, time to solution, time per iteration, MDof/s, GB/s moved (fraction of
    /// the triad measured in the same run), speedup over D_MG, f64 residual and L2 error.
    Mg(MgBenchArgs),
    /// Q2-Q1 Stokes (docs/mathematics.md §1): FGMRES with each preconditioner side by side
    /// in one process: iterations, time to solution, ms per element and per iteration,
    /// velocity and pressure L2 errors.
    Stokes(StokesArgs),
    /// The Poisson methods side by side on any mesh (the unit square, the flow around a
    /// square, a Gmsh mesh), each set up once as a run sets it up, then timed on the same
    /// random right-hand sides in alternating rounds: set-up, solve, MDof/s, steps, the
    /// f64 residual; `--reference` adds the sparse Cholesky and each method's speed-up over
    /// it.
    Solve(Box<SolveBenchArgs>),
}

#[derive(clap::Args, Clone)]
pub struct SolveBenchArgs {
    /// unit-square (--n), flow-around-square or gmsh (--file), the last two refined
    /// --levels times.
    #[arg(long, value_enum, default_value_t = InfoMeshArg::FlowAroundSquare)]
    pub mesh: InfoMeshArg,
    /// Cells per direction (unit square).
    #[arg(long)]
    pub n: Option<usize>,
    /// PSC's coarse cells per direction (unit square; default: n = n0·2^j with n0 closest
    /// to √n).
    #[arg(long)]
    pub n0: Option<usize>,
    /// The elements (unit square: q1 or p1; refined meshes take their coarse mesh's).
    #[arg(long, value_enum)]
    pub element: Option<ElementArg>,
    /// Uniform refinements of the coarse mesh (flow-around-square, gmsh).
    #[arg(long)]
    pub levels: Option<usize>,
    /// Refinements that make PSC's macro elements (default: the L0 of least modelled
    /// set-up plus applies for the right-hand sides of all rounds, as `psc-info` prints).
    #[arg(long)]
    pub coarse_levels: Option<usize>,
    /// The Gmsh MSH 4.1 file of --mesh gmsh.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// dirichlet: u = 0 on the whole boundary; pressure: a projection method's pressure,
    /// Dirichlet at the part named outflow and Neumann on the others.
    #[arg(long, value_enum, default_value_t = BcArg::Pressure)]
    pub bc: BcArg,
    /// The methods, comma-separated: psc-m1, psc-m2, psc-m3, mg, cholesky.
    #[arg(long, value_delimiter = ',', default_value = "psc-m1,mg")]
    pub method: Vec<String>,
    /// Working precisions of the PSC methods, comma-separated (f16, tf32, f32: inside f64
    /// refinement; f64: alone): one PSC method timed per precision.
    #[arg(long, value_delimiter = ',', default_value = "f32")]
    pub precision: Vec<String>,
    /// The multigrid's precision schedule (D_MG, H_MG, DSH_MG, HSD_MG).
    #[arg(long, default_value = "DSH_MG")]
    pub variant: String,
    /// The multigrid's smoothers, comma-separated (jacobi, richardson, chebyshev,
    /// block-chebyshev): one
    /// multigrid timed per smoother [default: a run's, chebyshev on triangles, jacobi on
    /// Q1].
    #[arg(long, value_delimiter = ',')]
    pub smoother: Vec<String>,
    /// How many of a block's columns one multigrid solve carries, comma-separated (auto:
    /// as the last-level cache holds, all, or a count): one multigrid timed per value and
    /// smoother.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub cycle_columns: Vec<String>,
    /// The multigrid's Krylov method around the cycle: cg (flexible CG) or none.
    #[arg(long, default_value = "cg")]
    pub krylov: String,
    /// Also time the sparse Cholesky (`cholesky`, f64) and give every method's speed-up over
    /// it.
    #[arg(long)]
    pub reference: bool,
    /// Right-hand sides per block, comma-separated (each block size timed in turn).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    pub nrhs: Vec<usize>,
    /// Every column to ‖b − A u‖₂ ≤ rtol·‖b‖₂, checked in f64.
    #[arg(long, default_value_t = 1e-10)]
    pub rtol: f64,
    /// Alternating rounds (every method once per round); the fastest and the median count.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Where PSC keeps its set-ups (default: none kept; every run sets up afresh).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Where the solves run: cpu, cuda, or auto.
    #[arg(long, default_value = "cpu", value_parser = parse_backend)]
    pub backend: BackendChoice,
    /// Write the first method's matrix (CSR, both triangles, its order of unknowns) and the
    /// largest block of right-hand sides to this HDF5 file, for a solver outside tensorfem.
    #[arg(long)]
    pub export: Option<PathBuf>,
    /// With --export: write the file after the first set-up and stop.
    #[arg(long)]
    pub export_only: bool,
    /// Also time the stages of each method's solve by marks in the device's queue (PSC:
    /// the apply's stages beside their compulsory bytes and flops and the time those take
    /// at the GEMM peak and memory bandwidth measured in the same run; multigrid: the
    /// cycle's stages), for the fastest round; what no stage covers (refinement,
    /// verification) printed apart.
    #[arg(long)]
    pub stages: bool,
    /// One JSON object per method and block size (keys method, setting, unknowns, nrhs,
    /// setup_seconds, solve_seconds, solve_seconds_median, mdofs, iterations,
    /// max_relative_residual, speedup_over_reference, and more).
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct StokesArgs {
    /// Cells per direction (n = n0·2^j, n0 ≤ 8).
    #[arg(long)]
    pub n: usize,
    /// vanka, vanka-tuned, braess-sarazin, schur-uzawa, block-triangular; a
    /// comma-separated list, or all.
    #[arg(long, default_value = "vanka-tuned,braess-sarazin")]
    pub precond: String,
    /// Precision of the preconditioner (f16: stored in f16, computed in f32); FGMRES is f64.
    #[arg(long, value_enum, default_value_t = PrecisionArg::F64)]
    pub precision: PrecisionArg,
    /// FGMRES restart length.
    #[arg(long, default_value_t = 30)]
    pub restart: usize,
    /// FGMRES stops at ‖b − Ax‖₂ ≤ rtol·‖b‖₂ (the config's solver.rtol).
    #[arg(long, default_value_t = 1e-8)]
    pub rtol: f64,
    /// Vanka or Braess-Sarazin damping ω (default: the tuned value).
    #[arg(long)]
    pub omega: Option<f64>,
    /// Braess-Sarazin / Schur-Uzawa: L ≈ t·D.
    #[arg(long)]
    pub t: Option<f64>,
    /// Braess-Sarazin / Schur-Uzawa: Jacobi steps on the Schur complement.
    #[arg(long)]
    pub jacobi_steps: Option<usize>,
    /// Braess-Sarazin / Schur-Uzawa: Jacobi weight on the Schur complement.
    #[arg(long)]
    pub jacobi_weight: Option<f64>,
    /// Timed solves per preconditioner; the fastest counts.
    #[arg(long, default_value_t = 1)]
    pub repeats: usize,
    /// Where the solves run: cpu, cuda (the first GPU), or auto (the GPU where there is
    /// one).
    #[arg(long, default_value = "cpu", value_parser = parse_backend)]
    pub backend: BackendChoice,
    /// One JSON object per preconditioner, one per line (keys iterations, seconds,
    /// ms_per_element, stage_seconds, velocity_l2_error, pressure_l2_error,
    /// relative_residual, precond, n, device, and more).
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ElementArg {
    Q1,
    P1,
}

impl ElementArg {
    pub fn element(self) -> Element {
        match self {
            ElementArg::Q1 => Element::Q1,
            ElementArg::P1 => Element::P1,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PrecisionArg {
    F16,
    /// f32 operators, GEMMs on Tensor Cores in TF32 (PSC only).
    Tf32,
    F32,
    F64,
}

impl PrecisionArg {
    pub fn precision(self) -> Precision {
        match self {
            PrecisionArg::F16 => Precision::F16,
            PrecisionArg::Tf32 => Precision::Tf32,
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F64 => Precision::F64,
        }
    }
}

#[derive(clap::Args)]
pub struct PscInfoArgs {
    /// The domain: the unit square refined from h0 = 1/n0 to h = 1/n (--n, --n0), the flow
    /// around a square's coarse mesh refined L0 times into the macro elements and L times in
    /// all (--coarse-levels, --levels), or a Gmsh MSH 4.1 file's mesh, its cells the macro
    /// elements, refined L times (--file, --levels).
    #[arg(long, value_enum, default_value_t = InfoMeshArg::UnitSquare)]
    pub mesh: InfoMeshArg,
    /// Cells per direction of the fine mesh (h = 1/n; unit square).
    #[arg(long)]
    pub n: Option<usize>,
    /// Cells per direction of the coarse mesh (h0 = 1/n0; unit square); n = n0·2^j.
    #[arg(long)]
    pub n0: Option<usize>,
    /// Refinements of the coarse mesh in all (flow around a square).
    #[arg(long)]
    pub levels: Option<usize>,
    /// Refinements of the coarse mesh that make the macro elements (flow around a square);
    /// without it, the class sizes and modelled costs of every L0 and the cheapest for
    /// --nrhs right-hand sides at --steps applies each.
    #[arg(long)]
    pub coarse_levels: Option<usize>,
    /// The Gmsh mesh file (--mesh gmsh).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// q1 or p1 (default q1 on the unit square; the flow around a square is p1).
    #[arg(long, value_enum)]
    pub element: Option<ElementArg>,
    /// dirichlet: Dirichlet on the whole boundary (the published counts); pressure: the
    /// pressure of a projection method, Dirichlet on the part named outflow and Neumann on
    /// the others (the flow around a square, or a Gmsh mesh with an outflow part).
    #[arg(long, value_enum, default_value_t = BcArg::Dirichlet)]
    pub bc: BcArg,
    /// Also the spectral condition numbers of A, SᵀAS and the prehandled matrix (Lanczos).
    #[arg(long)]
    pub whole: bool,
    /// Without --coarse-levels (flow around a square): the right-hand sides one set-up
    /// serves, over all its solves, for the choice of L0.
    #[arg(long, default_value_t = 64)]
    pub nrhs: usize,
    /// Without --coarse-levels: applies per right-hand side (PSC-IR in f32 takes about 3,
    /// in f16 about 5; f64 M1 alone 1).
    #[arg(long, default_value_t = 3)]
    pub steps: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct MeshArgs {
    /// The mesh of a config (a run's, or a campaign's first operator's), with the nodes its
    /// boundary conditions leave as loads: what a right-hand-side file is built on.
    #[arg(long, conflicts_with_all = ["mesh", "file", "levels", "coarse_levels"])]
    pub config: Option<PathBuf>,
    /// The coarse mesh: the flow around a square's (p1) or a Gmsh MSH 4.1 file's (--file).
    #[arg(long, value_enum, required_unless_present = "config")]
    pub mesh: Option<ExportMeshArg>,
    /// The Gmsh mesh file (--mesh gmsh).
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Uniform refinements of the coarse mesh.
    #[arg(long, required_unless_present = "config")]
    pub levels: Option<usize>,
    /// Refinements that make PSC's macro elements (mesh.coarse_levels; the node order
    /// depends on it).
    #[arg(long, default_value_t = 0)]
    pub coarse_levels: usize,
    /// The HDF5 file to write (the XDMF sidecar goes beside it).
    #[arg(long)]
    pub output: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportMeshArg {
    FlowAroundSquare,
    Gmsh,
}

impl MeshArgs {
    /// The mesh asked for: the config's, or the coarse mesh read or built and refined
    /// (Dirichlet conditions on the whole boundary).
    pub fn spec(&self) -> crate::error::Result<crate::mesh::MeshSpec> {
        use crate::error::Error;
        use crate::mesh::{CoarseMesh, MeshKind, MeshSpec, RefinedDomain};
        if let Some(path) = &self.config {
            let config = crate::config::load(path)?;
            let spec = match &config.campaign {
                Some(c) if c.is_stokes() => None,
                Some(c) => Some(c.operators[0].mesh.clone()),
                None if config.stokes.is_some() => None,
                None => Some(config.mesh),
            };
            return match spec {
                Some(s) if s.dim() == 2 => Ok(s),
                _ => Err(Error::InvalidInput(format!(
                    "{}: tensorfem mesh writes 2D Poisson meshes (not the unit cube or a Stokes run's)",
                    path.display()
                ))),
            };
        }
        let (kind, coarse) = match (self.mesh, &self.file) {
            (Some(ExportMeshArg::FlowAroundSquare), None) => {
                (MeshKind::FlowAroundSquare, CoarseMesh::flow_around_square())
            }
            (Some(ExportMeshArg::Gmsh), Some(file)) => {
                (MeshKind::Gmsh, crate::mesh::read_gmsh(file)?)
            }
            (Some(ExportMeshArg::FlowAroundSquare), Some(_)) => {
                return Err(Error::InvalidInput(
                    "--file is the mesh of --mesh gmsh".into(),
                ))
            }
            (_, None) => return Err(Error::InvalidInput("--mesh gmsh needs --file".into())),
            (None, Some(_)) => return Err(Error::InvalidInput("--file needs --mesh gmsh".into())),
        };
        let levels = self.levels.unwrap_or(0);
        if self.coarse_levels >= levels.max(1) && self.coarse_levels > 0 {
            return Err(Error::InvalidInput(format!(
                "--coarse-levels {} must be below --levels {levels}",
                self.coarse_levels
            )));
        }
        let element = coarse.element;
        let domain = RefinedDomain {
            file: self.file.clone(),
            coarse_edges: coarse.edges()?.len(),
            coarse,
            levels,
            coarse_levels: self.coarse_levels,
        };
        Ok(MeshSpec {
            kind,
            element,
            n: 1 << levels,
            coarse: None,
            domain: Some(domain),
            boundary: None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BcArg {
    Dirichlet,
    Pressure,
}

impl BcArg {
    pub fn conditions(self) -> crate::psc::InfoConditions {
        match self {
            BcArg::Dirichlet => crate::psc::InfoConditions::Dirichlet,
            BcArg::Pressure => crate::psc::InfoConditions::Pressure,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InfoMeshArg {
    UnitSquare,
    FlowAroundSquare,
    Gmsh,
}

impl PscInfoArgs {
    /// The flow around a square without --coarse-levels: the table of every L0.
    pub fn choosing_coarse_levels(&self) -> bool {
        self.mesh == InfoMeshArg::FlowAroundSquare
            && self.levels.is_some()
            && self.coarse_levels.is_none()
            && self.n.is_none()
            && self.n0.is_none()
            && !self.whole
            && self.element.is_none_or(|e| matches!(e, ElementArg::P1))
            && self.file.is_none()
    }

    /// The mesh asked for, its options checked together.
    pub fn mesh(&self) -> crate::error::Result<crate::psc::InfoMesh> {
        use crate::error::Error;
        use crate::psc::InfoMesh;
        let element = self.element.map(ElementArg::element);
        if self.file.is_some() && self.mesh != InfoMeshArg::Gmsh {
            return Err(Error::InvalidInput(
                "--file is the mesh of --mesh gmsh".into(),
            ));
        }
        match self.mesh {
            InfoMeshArg::UnitSquare => {
                if self.levels.is_some() || self.coarse_levels.is_some() {
                    return Err(Error::InvalidInput(
                        "psc-info --mesh unit-square takes --n and --n0, not --levels or --coarse-levels".into(),
                    ));
                }
                match (self.n, self.n0) {
                    (Some(n), Some(n0)) => Ok(InfoMesh::UnitSquare {
                        n,
                        n0,
                        element: element.unwrap_or(Element::Q1),
                    }),
                    _ => Err(Error::InvalidInput(
                        "psc-info on the unit square needs --n and --n0".into(),
                    )),
                }
            }
            InfoMeshArg::FlowAroundSquare => {
                if self.n.is_some() || self.n0.is_some() {
                    return Err(Error::InvalidInput(
                        "psc-info --mesh flow-around-square takes --levels and --coarse-levels, not --n or --n0".into(),
                    ));
                }
                if element == Some(Element::Q1) {
                    return Err(Error::InvalidInput(
                        "the flow around a square is a triangle mesh: --element p1".into(),
                    ));
                }
                match (self.levels, self.coarse_levels) {
                    (Some(levels), Some(coarse_levels)) if coarse_levels < levels => {
                        Ok(InfoMesh::FlowAroundSquare {
                            levels,
                            coarse_levels,
                        })
                    }
                    (Some(levels), Some(coarse_levels)) => Err(Error::InvalidInput(format!(
                        "--coarse-levels {coarse_levels} must be below --levels {levels} (PSC refines the macro elements at least once)"
                    ))),
                    (Some(_), None) => Err(Error::InvalidInput(
                        "psc-info --mesh flow-around-square --whole needs one L0 (--coarse-levels); without it psc-info compares every L0".into(),
                    )),
                    (None, _) => Err(Error::InvalidInput(
                        "psc-info --mesh flow-around-square needs --levels".into(),
                    )),
                }
            }
            InfoMeshArg::Gmsh => match (&self.file, self.levels) {
                _ if self.n.is_some() || self.n0.is_some() || self.coarse_levels.is_some() => {
                    Err(Error::InvalidInput(
                        "psc-info --mesh gmsh takes --file and --levels (the file's cells are the macro elements)".into(),
                    ))
                }
                (Some(file), Some(levels)) if levels >= 1 => Ok(InfoMesh::Gmsh {
                    file: file.clone(),
                    levels,
                    element,
                }),
                _ => Err(Error::InvalidInput(
                    "psc-info --mesh gmsh needs --file and --levels ≥ 1".into(),
                )),
            },
        }
    }
}

#[derive(clap::Args)]
pub struct MachineArgs {
    /// Print one JSON object (keys triad_gbs, gemm_gflops_f64, gemm_gflops_f32,
    /// gemm_gflops_tf32, gemm_gflops_f16; on CUDA copy_gbs instead of triad_gbs).
    #[arg(long)]
    pub json: bool,
    /// cpu: triad and GEMM on the host; cuda: device copy and cuBLAS GEMM of the first GPU;
    /// auto: the GPU where there is one.
    #[arg(long, default_value = "cpu", value_parser = parse_backend)]
    pub backend: BackendChoice,
    /// m = n = k of the GEMM ceilings in every precision, 1 to 16384 (default: 2048 on the
    /// CPU, 1536 in f64; 8192 on a GPU, 4096 in f64: each large enough for the peak).
    /// Smaller sizes give quick checks that fall short of the peak.
    #[arg(long, value_parser = parse_gemm_size)]
    pub gemm_size: Option<usize>,
}

/// `--gemm-size`: the operands (size² values each) are filled on the host first, so the
/// bound keeps them at 2 GiB.
fn parse_gemm_size(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(size @ 1..=16384) => Ok(size),
        _ => Err(format!("{s:?} is not a GEMM size from 1 to 16384")),
    }
}

fn parse_backend(s: &str) -> Result<BackendChoice, String> {
    s.parse()
}

fn parse_psc_method(s: &str) -> Result<crate::psc::PscMethod, String> {
    s.parse()
}

fn parse_coupling(s: &str) -> Result<crate::psc::Coupling, String> {
    s.parse()
}

#[derive(clap::Args)]
pub struct PscBenchArgs {
    /// Cells per direction of the fine mesh (h = 1/n).
    #[arg(long)]
    pub n: usize,
    /// Cells per direction of the coarse mesh (h0 = 1/n0); n = n0·2^j. Flop-optimal: h0 ≈ √h.
    #[arg(long)]
    pub n0: usize,
    /// Right-hand sides solved together (manufactured, k = 1…8 cycled); a list such as
    /// 1,64,1024 gives one row each, after one set-up.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub nrhs: Vec<usize>,
    /// Working precision of the stored operators (tf32: stored in f32, GEMMs on Tensor
    /// Cores in TF32); a list such as f16,tf32,f32,f64 gives one row (per --nrhs) each,
    /// after one set-up.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "f32")]
    pub precision: Vec<PrecisionArg>,
    #[arg(long, value_enum, default_value_t = ElementArg::Q1)]
    pub element: ElementArg,
    /// Load (or fill) the operator cache here instead of timing a fresh set-up.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// The PSC method: m1 (stores Π⁻¹), m2 (Λ⁻¹ and Θ⁻¹), m3 (CG on the C/E system,
    /// nothing of size |E|²).
    #[arg(long, default_value = "m1", value_parser = parse_psc_method)]
    pub method: crate::psc::PscMethod,
    /// How the apply multiplies by D: element (per macro element, folded into the C_g⁻¹
    /// products) or csr (sparse D and Dᵀ); a list such as csr,element gives one row (per
    /// --precision and --nrhs) each, after one set-up.
    #[arg(long, value_delimiter = ',', default_value = "element", value_parser = parse_coupling)]
    pub coupling: Vec<crate::psc::Coupling>,
    /// M3: its CG stops at ‖r‖₂ ≤ cg_rtol·‖r₀‖₂ on the prehandled C/E system (default:
    /// --rtol/10 alone, 1e-4 (f16: 1e-3) inside --refine).
    #[arg(long)]
    pub cg_rtol: Option<f64>,
    /// Where the method runs: cpu, cuda (the first GPU), or auto (the GPU where there is
    /// one).
    #[arg(long, default_value = "cpu", value_parser = parse_backend)]
    pub backend: BackendChoice,
    /// Time PSC-IR: the method inside f64 iterative refinement to ‖b − Ax‖₂ ≤ rtol·‖b‖₂
    /// (what a campaign with refine = true solves), instead of one apply.
    #[arg(long)]
    pub refine: bool,
    /// The refinement's relative tolerance (with --refine; M3 alone: what its CG aims at).
    #[arg(long, default_value_t = 1e-12)]
    pub rtol: f64,
    /// Timed solves after one untimed warm-up (at least this many, and at least 2 s).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// m = n = k of the GEMM peak the rows are measured against, as for `bench machine`.
    #[arg(long, value_parser = parse_gemm_size)]
    pub gemm_size: Option<usize>,
    /// Also factor the matrix with the sparse Cholesky (`cholesky`, f64) and time its solve
    /// of the same block side by side (the factorisation reported apart, excluded).
    #[arg(long)]
    pub reference: bool,
    /// Also time each stage of the apply (transforms, gather, C⁻¹, D, the C/E system, …)
    /// by marks in the device's queue (CUDA events on a GPU; no stage waits): the seconds
    /// of the last timed apply (with --refine: summed over its solve's applies) in
    /// `stage_seconds`.
    #[arg(long)]
    pub stages: bool,
    /// Print one JSON object per row (keys n, n0, nrhs, precision, setup_seconds,
    /// solve_seconds, mdofs, gflops, gemm_peak_fraction, relative_residual, l2_error, and
    /// more).
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct MgBenchArgs {
    /// 2 (unit square) or 3 (unit cube).
    #[arg(long, default_value_t = 2)]
    pub dim: usize,
    /// Cells per direction of the finest mesh (4096 → 4097² nodes).
    #[arg(long)]
    pub n: usize,
    /// D_MG, H_MG, DSH_MG, HSD_MG, F64_MG (stand-alone f64 multigrid, no refinement), a
    /// comma-separated list of them (D_MG runs first when listed), or all.
    #[arg(long, default_value = "all")]
    pub variant: String,
    /// Wave number of the manufactured solution.
    #[arg(long, default_value_t = 1)]
    pub k: u32,
    /// Right-hand sides solved together.
    #[arg(long, default_value_t = 1)]
    pub nrhs: usize,
    /// jacobi (ω = 2/3, 3+3 steps), richardson (ω = 0.3, 4+4 steps), chebyshev (degree
    /// 3+3 on each level's D⁻¹A spectrum) or block-chebyshev (the same on B⁻¹A, B the
    /// block diagonal on strongly coupled unknowns).
    #[arg(long, default_value = "jacobi")]
    pub smoother: String,
    /// The smoother's damping ω instead of its own (0 < ω < 2).
    #[arg(long)]
    pub omega: Option<f64>,
    /// Smoothing steps before the coarse-grid correction instead of the smoother's own.
    #[arg(long)]
    pub pre_smoothing: Option<usize>,
    /// Smoothing steps after it.
    #[arg(long)]
    pub post_smoothing: Option<usize>,
    /// Levels (default: coarsen to 8 cells per direction).
    #[arg(long)]
    pub levels: Option<usize>,
    /// Cast residuals into low precision without scaling them (to see them fail).
    #[arg(long)]
    pub no_residual_scaling: bool,
    /// Level matrices: grid (no column indices on the uniform-grid levels where the device
    /// reads them: CUDA) or indexed (ELLPACK with 32-bit indices everywhere).
    #[arg(long, default_value = "grid")]
    pub storage: crate::device::MatrixStorage,
    /// Flexible CG around the V-cycle instead of plain refinement (not for F64_MG).
    #[arg(long)]
    pub krylov: bool,
    /// Timed solves per variant; the fastest counts.
    #[arg(long, default_value_t = 1)]
    pub repeats: usize,
    /// Stop each column at ‖b − A u‖₂ ≤ rtol·‖b‖₂ instead of the source's absolute 1e-9
    /// (docs/mathematics.md §4).
    #[arg(long)]
    pub rtol: Option<f64>,
    /// manufactured (the loads of sin(kπx)…, from a random initial guess, with the L2
    /// error) or random (standard normal loads, one seed per column, from zero: the problem
    /// of the C multigrid in ../shared/peers/).
    #[arg(long, default_value = "manufactured")]
    pub rhs: String,
    /// Instead of solving: time each kernel alone (sweeps, residual, transfers, refinement
    /// update) on the finest two levels (n and n/2) in f64, f32 and f16, with GB/s against
    /// the triad of the same run.
    #[arg(long)]
    pub kernels: bool,
    /// The time of every stage of the cycles (smoothing, residual, restriction, base
    /// solve, prolongation; then what lies between the cycles: the refinement's f64
    /// residual and update) from marks in the device's queue: CUDA events on a GPU, which
    /// no stage waits for.
    #[arg(long)]
    pub stages: bool,
    /// Where the solves run: cpu, cuda (the first GPU), or auto (the GPU where there is
    /// one). Times are device-resident: right-hand sides and solutions cross to and from
    /// the host outside the clock.
    #[arg(long, default_value = "cpu", value_parser = parse_backend)]
    pub backend: BackendChoice,
    /// One JSON object per variant, one per line (keys iterations, seconds,
    /// seconds_per_iteration, mdofs, gbs, residual, relative_residual, l2_error, variant, n,
    /// dim, and more).
    #[arg(long)]
    pub json: bool,
}
