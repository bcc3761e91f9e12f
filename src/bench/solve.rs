//! `tensorfem bench solve`: the Poisson methods side by side on any mesh a config can
//! describe (the unit square, the flow around a square, a Gmsh mesh), each set up once
//! through [`AnyPoissonSolver`] as a run or the Python package sets it up, then timed on
//! the same block of random right-hand sides in alternating rounds; `--reference` adds the
//! sparse Cholesky, `--export` writes the matrix and the block for a solver outside
//! tensorfem (scripts/bench/vs-cholmod.sh).

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use super::machine::{gemm_ceiling_size, GemmSite};
use crate::cli::{BcArg, InfoMeshArg, SolveBenchArgs};
use crate::config::parse_embedded;
use crate::device::{cuda, Backend};
use crate::error::{Error, Result};
use crate::io::h5;
use crate::linalg::TimedStage;
use crate::poisson::{check_memory, AnyPoissonSolver};
use crate::precision::Precision;

/// One method of the comparison and what it was timed at.
#[derive(Clone, Debug, Serialize)]
pub struct SolveBenchResult {
    pub method: String,
    /// The precision (PSC), the precision schedule and Krylov choice (multigrid), or f64.
    pub setting: String,
    pub mesh: String,
    pub unknowns: usize,
    pub nonzeros: usize,
    pub nrhs: usize,
    pub assembly_seconds: f64,
    pub setup_seconds: f64,
    pub setup_note: Option<String>,
    /// Fastest and median solve of the rounds, the verification of every column included.
    pub solve_seconds: f64,
    pub solve_seconds_median: f64,
    /// The first untimed solve (its workspace allocated and touched).
    pub first_solve_seconds: f64,
    pub rounds: usize,
    /// unknowns × right-hand sides / fastest solve seconds, in millions.
    pub mdofs: f64,
    /// Steps of the slowest column and largest verified residual over every round.
    pub iterations: Option<usize>,
    pub max_relative_residual: f64,
    pub rtol: f64,
    /// The reference's fastest solve over this method's (≥ 1: this method is faster).
    pub speedup_over_reference: Option<f64>,
    /// --stages: the stages of the fastest round's solve, in the order they run (empty
    /// for a method without stage marks).
    pub stages: Option<Vec<SolveStage>>,
    /// --stages: the GEMM peak of the PSC precision and the memory bandwidth (triad on the
    /// CPU, device copy on a GPU) measured in the same run, which `model_seconds` uses.
    pub gemm_peak_gflops: Option<f64>,
    pub bandwidth_gbs: Option<f64>,
}

/// A stage of a solve: its measured seconds and, where the method models it, its
/// compulsory bytes and counted flops and the time they take at the measured ceilings,
/// max(bytes / bandwidth, flops / GEMM peak).
#[derive(Clone, Debug, Serialize)]
pub struct SolveStage {
    pub stage: &'static str,
    pub seconds: f64,
    pub bytes: Option<f64>,
    pub flops: Option<f64>,
    pub model_seconds: Option<f64>,
}

/// The GEMM peak (GFLOP/s) and memory bandwidth (GB/s) a stage's model is timed at.
#[derive(Clone, Copy)]
struct Ceilings {
    gemm_gflops: f64,
    bandwidth_gbs: f64,
}

impl Ceilings {
    /// Measured on the device the solves ran on, the GEMM in the PSC precision `name`.
    fn measure(backend: crate::device::BackendChoice, name: &str) -> Result<Self> {
        let p: Precision = name
            .parse()
            .map_err(|e| Error::InvalidInput(format!("--precision {name}: {e}")))?;
        Ok(match super::cuda_device(backend)? {
            None => Ceilings {
                gemm_gflops: super::gemm_gflops(p, None),
                bandwidth_gbs: super::triad_gbs(),
            },
            Some(dev) => Ceilings {
                gemm_gflops: super::device_gemm_gflops(
                    &dev,
                    p,
                    gemm_ceiling_size(GemmSite::Gpu, p, None),
                ),
                bandwidth_gbs: super::device_copy_gbs(&dev, 1 << 28),
            },
        })
    }

    fn stages(self, timed: Vec<TimedStage>) -> Vec<SolveStage> {
        timed
            .into_iter()
            .map(|t| SolveStage {
                stage: t.stage,
                seconds: t.seconds,
                bytes: t.cost.map(|c| c.bytes),
                flops: t.cost.map(|c| c.flops),
                model_seconds: t
                    .cost
                    .map(|c| super::model_seconds(c, self.gemm_gflops, self.bandwidth_gbs)),
            })
            .collect()
    }
}

/// Untimed solves of each method (in turn) before the timed rounds. Two, not one: the first
/// solve allocates and touches the workspace, and the allocator, whose arenas the other
/// methods' first solves share, hands a method's second solve pages it has not touched yet
/// (measured: PSC-M1 in f64 at L = 7 with 64 columns beside PSC-IR and multigrid, 1.8,
/// 1.2, then 0.53 s for every later solve).
const WARM_UP_SOLVES: usize = 2;

/// Right-hand sides reproducible across methods: each column's normal values are drawn
/// per node (seed + column), then gathered in each solver's order of unknowns.
const SEED: u64 = 68;

/// Runs the command: set-ups, alternating timed rounds, the table or JSON lines.
pub fn report(a: &SolveBenchArgs) -> Result<()> {
    check_args(a)?;
    let methods = methods(a)?;
    let mut a = a.clone();
    if a.mesh != InfoMeshArg::UnitSquare
        && a.coarse_levels.is_none()
        && methods.iter().any(|m| m.precision.is_some())
    {
        let l0 = chosen_coarse_levels(&a)?;
        log::info!(
            "bench solve: PSC's macro elements after L0 = {l0} refinements (psc-info's model)"
        );
        a.coarse_levels = Some(l0);
    }
    let a = &a;
    let boundary = boundary_section(a)?;
    let largest = a.nrhs.iter().copied().max().unwrap_or(1);
    let mut solvers = Vec::new();
    for method in &methods {
        let config = parse_embedded(&config_text(a, method, &boundary), "bench solve")?;
        let mut method = method.clone();
        if let (None, Some(mg)) = (&method.smoother, &config.solver.mg) {
            method.smoother = Some(mg.smoother_name.clone());
        }
        let backend = Backend::select(
            config.backend,
            &cuda::probe(),
            config.solver.method.name(),
            config.solver.method.has_cuda(),
            0,
        )?;
        check_memory(&config.mesh, &config.solver, largest, &backend)?;
        let solver = AnyPoissonSolver::new(&backend, &config.mesh, &config.solver)?;
        log::info!(
            "{}: set up in {:.3} s (+ assembly {:.3} s){}",
            method.label(),
            solver.setup_seconds(),
            solver.assembly_seconds(),
            solver
                .setup_note()
                .map(|n| format!(", {n}"))
                .unwrap_or_default()
        );
        if a.export.is_some() && solvers.is_empty() {
            export(a, &solver, largest)?;
            if a.export_only {
                return Ok(());
            }
        }
        solvers.push((method, solver));
    }
    let mesh = mesh_name(a, methods.iter().any(|m| m.precision.is_some()));
    let mut results = Vec::new();
    for &nrhs in &a.nrhs {
        let blocks: Vec<Vec<f64>> = solvers.iter().map(|(_, s)| random_block(s, nrhs)).collect();
        // Untimed solves first, each method in turn: the rounds then time solves with the
        // workspace of this block size allocated and its pages in place, as in a time loop's
        // every later step.
        let mut first = vec![0.0; solvers.len()];
        for warm_up in 0..WARM_UP_SOLVES {
            for (i, ((method, solver), b)) in solvers.iter_mut().zip(&blocks).enumerate() {
                let start = Instant::now();
                solver.solve(b, nrhs)?;
                let seconds = start.elapsed().as_secs_f64();
                log::debug!(
                    "bench solve: {} on {nrhs} column(s), untimed solve {}: {seconds:.4} s",
                    method.label(),
                    warm_up + 1
                );
                if warm_up == 0 {
                    first[i] = seconds;
                }
                solver.time_stages(a.stages);
            }
        }
        let mut times = vec![Vec::new(); solvers.len()];
        let mut last = vec![None; solvers.len()];
        // The stages of each method's fastest round so far.
        let mut fastest_stages = vec![Vec::new(); solvers.len()];
        for _ in 0..a.runs {
            for (i, (method, solver)) in solvers.iter_mut().enumerate() {
                let b = &blocks[i];
                solver.take_stages()?;
                let start = Instant::now();
                let outcome = solver.solve(b, nrhs)?;
                let seconds = start.elapsed().as_secs_f64();
                log::debug!(
                    "bench solve: {} on {nrhs} column(s): {seconds:.4} s",
                    method.label()
                );
                let stages = solver.take_stages()?;
                if seconds < best(&times[i]) {
                    fastest_stages[i] = stages;
                }
                times[i].push(seconds);
                let residuals = column_residuals(solver, b, &outcome.u, nrhs);
                // A NaN fails the check too (f64::max would pass over it).
                if let Some(c) = residuals
                    .iter()
                    .position(|r| !(r.is_finite() && *r <= a.rtol))
                {
                    return Err(Error::Verification(format!(
                        "bench solve: {} left right-hand side {c} of {nrhs} at a relative residual of {:e} (rtol {:e})",
                        method.label(),
                        residuals[c],
                        a.rtol
                    )));
                }
                let residual = residuals.into_iter().fold(0.0, f64::max);
                let (steps, worst) = last[i].unwrap_or((None, 0.0));
                last[i] = Some((outcome.iterations.max(steps), residual.max(worst)));
            }
        }
        let reference = solvers
            .iter()
            .position(|(m, _)| m.method == "cholesky")
            .map(|i| best(&times[i]));
        // Measured after the rounds, once per block size and PSC precision (the machine's
        // state drifts); a method without one is modelled at the first.
        let mut measured: Vec<(&str, Ceilings)> = Vec::new();
        for (i, (method, solver)) in solvers.iter().enumerate() {
            let ceilings = match a.stages {
                false => None,
                true => {
                    let name = method.precision.as_deref().unwrap_or(&a.precision[0]);
                    match measured.iter().find(|(p, _)| *p == name) {
                        Some(&(_, c)) => Some(c),
                        None => {
                            let c = Ceilings::measure(a.backend, name)?;
                            measured.push((name, c));
                            Some(c)
                        }
                    }
                }
            };
            let (iterations, residual) = last[i].expect("every method ran");
            let solve = best(&times[i]);
            results.push(SolveBenchResult {
                method: method.method.clone(),
                setting: method.setting(),
                mesh: mesh.clone(),
                unknowns: solver.unknowns(),
                nonzeros: solver.nonzeros(),
                nrhs,
                assembly_seconds: solver.assembly_seconds(),
                setup_seconds: solver.setup_seconds(),
                setup_note: solver.setup_note(),
                solve_seconds: solve,
                solve_seconds_median: median(&times[i]),
                first_solve_seconds: first[i],
                rounds: a.runs,
                mdofs: (solver.unknowns() * nrhs) as f64 / solve / 1e6,
                iterations,
                max_relative_residual: residual,
                rtol: a.rtol,
                speedup_over_reference: reference.map(|r| r / solve),
                stages: ceilings.map(|c| c.stages(std::mem::take(&mut fastest_stages[i]))),
                gemm_peak_gflops: ceilings.map(|c| c.gemm_gflops),
                bandwidth_gbs: ceilings.map(|c| c.bandwidth_gbs),
            });
        }
    }
    print(&results, a.json);
    Ok(())
}

/// A method and its setting as listed on the command line.
#[derive(Clone, Debug)]
struct MethodChoice {
    method: String,
    precision: Option<String>,
    variant: Option<String>,
    smoother: Option<String>,
    cycle_columns: Option<String>,
    krylov: Option<String>,
}

impl MethodChoice {
    fn setting(&self) -> String {
        match (&self.precision, &self.variant, &self.smoother, &self.krylov) {
            (Some(p), ..) if p == "f64" => "f64 (alone)".into(),
            (Some(p), ..) => format!("{p} (PSC-IR below f64)"),
            (_, Some(v), Some(s), Some(k)) => match self.cycle_columns.as_deref() {
                Some("auto") | None => format!("{v}, {s}, krylov {k}"),
                Some(c) => format!("{v}, {s}, krylov {k}, cycle_columns {c}"),
            },
            _ => "f64".into(),
        }
    }

    fn label(&self) -> String {
        format!("{} {}", self.method, self.setting())
    }
}

/// The methods to time: `--method`, then the sparse Cholesky with `--reference` (once).
fn methods(a: &SolveBenchArgs) -> Result<Vec<MethodChoice>> {
    let mut names: Vec<String> = a.method.iter().map(|m| m.trim().to_lowercase()).collect();
    if a.reference && !names.iter().any(|m| m == "cholesky") {
        names.push("cholesky".into());
    }
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for name in names {
        if seen.contains(&name) {
            return Err(Error::InvalidInput(format!("--method lists {name} twice")));
        }
        seen.push(name.clone());
        let plain = MethodChoice {
            method: name.clone(),
            precision: None,
            variant: None,
            smoother: None,
            cycle_columns: None,
            krylov: None,
        };
        let choice = match name.as_str() {
            // One PSC method per precision, side by side.
            "psc-m1" | "psc-m2" | "psc-m3" => {
                for precision in &a.precision {
                    out.push(MethodChoice {
                        precision: Some(precision.clone()),
                        ..plain.clone()
                    });
                }
                continue;
            }
            // One multigrid per smoother and cycle width, side by side.
            "mg" => {
                // None: the config's default, named once the config is read.
                let smoothers: Vec<Option<String>> = match a.smoother.is_empty() {
                    true => vec![None],
                    false => a
                        .smoother
                        .iter()
                        .map(|s| Some(s.trim().to_lowercase()))
                        .collect(),
                };
                for smoother in &smoothers {
                    for columns in &a.cycle_columns {
                        out.push(MethodChoice {
                            variant: Some(a.variant.clone()),
                            smoother: smoother.clone(),
                            cycle_columns: Some(columns.trim().to_lowercase()),
                            krylov: Some(a.krylov.clone()),
                            ..plain.clone()
                        });
                    }
                }
                continue;
            }
            "cholesky" => plain,
            other => {
                return Err(Error::InvalidInput(format!(
                    "--method {other} (allowed: psc-m1, psc-m2, psc-m3, mg, cholesky)"
                )))
            }
        };
        out.push(choice);
    }
    Ok(out)
}

fn check_args(a: &SolveBenchArgs) -> Result<()> {
    let bad = |m: String| Err(Error::InvalidInput(m));
    if a.runs == 0 {
        return bad("--runs 0: time at least one round".into());
    }
    for (i, p) in a.precision.iter().enumerate() {
        p.parse::<Precision>()
            .map_err(|e| Error::InvalidInput(format!("--precision {p}: {e}")))?;
        if a.precision[..i].contains(p) {
            return bad(format!("--precision lists {p} twice"));
        }
    }
    if let Some(&k) = a.nrhs.iter().find(|&&k| k == 0 || k > 100_000) {
        return bad(format!("--nrhs {k} (allowed: 1 ..= 100000)"));
    }
    if !(a.rtol > 0.0 && a.rtol < 1.0) {
        return bad(format!(
            "--rtol {}: a relative tolerance is in (0, 1)",
            a.rtol
        ));
    }
    if a.export_only && a.export.is_none() {
        return bad("--export-only needs --export FILE".into());
    }
    if let Some(path) = &a.export {
        h5::H5Writer::check_destination(path)?;
    }
    if let Some(l) = a.levels.filter(|l| !(1..=12).contains(l)) {
        return bad(format!("--levels {l} (allowed: 1 ..= 12)"));
    }
    let refined = a.mesh != InfoMeshArg::UnitSquare;
    match (refined, a.n, a.levels) {
        (false, None, _) => return bad("--mesh unit-square needs --n".into()),
        (false, _, Some(_)) | (false, _, None) if a.coarse_levels.is_some() => {
            return bad("--coarse-levels applies to refined meshes (flow-around-square, gmsh); the unit square's PSC coarse mesh is --n0".into())
        }
        (false, _, Some(_)) => return bad("--levels applies to refined meshes; the unit square takes --n".into()),
        (true, Some(_), _) => return bad("--n applies to the unit square; refined meshes take --levels".into()),
        (true, _, None) => return bad("--levels is required for a refined mesh".into()),
        _ => {}
    }
    if (a.mesh == InfoMeshArg::Gmsh) != a.file.is_some() {
        return bad("--file F.msh goes with --mesh gmsh (and only with it)".into());
    }
    if a.mesh == InfoMeshArg::UnitSquare && a.bc == BcArg::Pressure {
        return bad("--bc pressure needs a part named outflow; the unit square takes --bc dirichlet (u = 0 on the boundary)".into());
    }
    if a.n0.is_some() && a.mesh != InfoMeshArg::UnitSquare {
        return bad("--n0 applies to the unit square".into());
    }
    Ok(())
}

fn mesh_name(a: &SolveBenchArgs, psc: bool) -> String {
    let macros = if psc {
        format!(", L0 = {}", coarse_levels(a))
    } else {
        String::new()
    };
    match a.mesh {
        InfoMeshArg::UnitSquare => format!("unit-square n = {}", a.n.unwrap_or(0)),
        InfoMeshArg::FlowAroundSquare => {
            format!("flow-around-square L = {}{macros}", a.levels.unwrap_or(0))
        }
        InfoMeshArg::Gmsh => format!(
            "gmsh {} L = {}{macros}",
            a.file.as_deref().unwrap_or(Path::new("")).display(),
            a.levels.unwrap_or(0),
        ),
    }
}

/// PSC's macro elements on a refined mesh (`--coarse-levels`, or [`chosen_coarse_levels`]).
fn coarse_levels(a: &SolveBenchArgs) -> usize {
    a.coarse_levels.unwrap_or(0)
}

/// The L0 whose modelled PSC-M1 set-up plus applies cost least for every right-hand side
/// this bench solves with one set-up at the first `--precision` listed (`psc-info` without
/// `--coarse-levels` prints the model), among those that fit in the available memory.
fn chosen_coarse_levels(a: &SolveBenchArgs) -> Result<usize> {
    let coarse = coarse_mesh(a)?;
    let dirichlet: Vec<bool> = coarse
        .parts
        .iter()
        .map(|p| a.bc == BcArg::Dirichlet || p == "outflow")
        .collect();
    let costs = crate::psc::coarse_level_costs(
        &coarse,
        a.levels.unwrap_or(0),
        &dirichlet,
        crate::psc::Coupling::default(),
    )?;
    // Applies per right-hand side of the first precision listed: PSC-IR's steps (f16 about
    // 5, f32 and tf32 about 3), one for f64 M1 alone.
    let steps = match a.precision[0].as_str() {
        "f16" => 5,
        "f64" => 1,
        _ => 3,
    };
    let columns = a.runs * a.nrhs.iter().sum::<usize>();
    Ok(
        crate::psc::cheapest(&costs, columns, steps, crate::sys::available_memory())
            .map_or(0, |c| c.coarse_levels),
    )
}

/// PSC's coarse cells per direction on the unit square without `--n0`: n0 with n = n0·2^j
/// (j ≥ 1, n0 ≥ 2) closest to √n (the flop-optimal h0 ≈ √h), the coarser on a tie; none
/// where n has no such divisor (the config then names the problem).
fn coarse_cells(n: usize) -> Option<usize> {
    let target = 0.5 * (n as f64).ln();
    std::iter::successors(Some(n), |&m| (m % 2 == 0).then_some(m / 2))
        .skip(1)
        .take_while(|&m| m >= 2)
        .min_by(|&x, &y| {
            let distance = |m: usize| ((m as f64).ln() - target).abs();
            distance(x).total_cmp(&distance(y)).then(x.cmp(&y))
        })
}

/// The `[mesh]` section of a method's config (`psc`: with its macro elements).
fn mesh_section(a: &SolveBenchArgs, psc: bool) -> String {
    let kind = match a.mesh {
        InfoMeshArg::UnitSquare => "unit-square",
        InfoMeshArg::FlowAroundSquare => "flow-around-square",
        InfoMeshArg::Gmsh => "gmsh",
    };
    let mut s = format!("[mesh]\nkind = \"{kind}\"\n");
    if let Some(e) = a.element {
        s += &format!("element = \"{}\"\n", e.element().name());
    }
    match a.mesh {
        InfoMeshArg::UnitSquare => {
            s += &format!("n = {}\n", a.n.unwrap_or(0));
            if let Some(n0) =
                a.n0.or_else(|| coarse_cells(a.n.unwrap_or(0)))
                    .filter(|_| psc)
            {
                s += &format!("h0 = {}\n", 1.0 / n0 as f64);
            }
        }
        _ => {
            if let Some(file) = &a.file {
                s += &format!("file = {}\n", toml_string(&file.to_string_lossy()));
            }
            s += &format!("levels = {}\n", a.levels.unwrap_or(0));
            if psc {
                s += &format!("coarse_levels = {}\n", coarse_levels(a));
            }
        }
    }
    s
}

/// The coarse mesh of a refined domain: the Gmsh file's, or the flow around a square's.
fn coarse_mesh(a: &SolveBenchArgs) -> Result<crate::mesh::CoarseMesh> {
    match &a.file {
        Some(file) => crate::mesh::read_gmsh(file),
        None => Ok(crate::mesh::CoarseMesh::flow_around_square()),
    }
}

/// `[boundary]` for `--bc pressure` (Dirichlet at `outflow`, Neumann on every other part,
/// read off the coarse mesh); nothing for `--bc dirichlet` (u = 0 on the whole boundary).
fn boundary_section(a: &SolveBenchArgs) -> Result<String> {
    if a.bc == BcArg::Dirichlet {
        return Ok(String::new());
    }
    // The unit square takes --bc dirichlet only (check_args): this is a refined domain.
    let names = coarse_mesh(a)?.parts;
    if !names.iter().any(|n| n == "outflow") {
        return Err(Error::InvalidInput(format!(
            "--bc pressure needs a boundary part named outflow (this mesh has {})",
            names.join(", ")
        )));
    }
    let mut s = String::from("[boundary]\n");
    for name in names {
        let condition = if name == "outflow" {
            "dirichlet"
        } else {
            "neumann"
        };
        s += &format!("{} = \"{condition}\"\n", toml_string(&name));
    }
    Ok(s)
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A whole config for one method.
fn config_text(a: &SolveBenchArgs, m: &MethodChoice, boundary: &str) -> String {
    let backend = match a.backend {
        crate::device::BackendChoice::Cpu => "cpu",
        crate::device::BackendChoice::Cuda => "cuda",
        crate::device::BackendChoice::Auto => "auto",
    };
    let mut s = format!(
        "backend = \"{backend}\"\n{}{boundary}",
        mesh_section(a, m.precision.is_some())
    );
    s += &format!("[solver]\nmethod = \"{}\"\n", m.method);
    if m.method != "cholesky" {
        s += &format!("rtol = {:e}\n", a.rtol);
    }
    if let Some(p) = &m.precision {
        s += &format!("precision = \"{p}\"\n");
        match &a.cache_dir {
            Some(dir) => s += &format!("cache_dir = {}\n", toml_string(&dir.to_string_lossy())),
            None => s += "cache = false\n",
        }
    }
    if let (Some(v), Some(k)) = (&m.variant, &m.krylov) {
        s += &format!("variant = \"{v}\"\nkrylov = \"{k}\"\n");
    }
    if let Some(smoother) = &m.smoother {
        s += &format!("smoother = {}\n", toml_string(smoother));
    }
    match m.cycle_columns.as_deref() {
        Some(count) if count.parse::<u64>().is_ok() => s += &format!("cycle_columns = {count}\n"),
        Some(word) => s += &format!("cycle_columns = {}\n", toml_string(word)),
        None => {}
    }
    s
}

/// `nrhs` columns of standard normal loads in the solver's order of unknowns: column c's
/// stream (seed + c) is dealt to the nodes in order of position, so meshes that number the
/// same nodes differently (PSC's macro elements on a refined domain) get the same load at
/// the same point.
fn random_block(solver: &AnyPoissonSolver, nrhs: usize) -> Vec<f64> {
    let rank = crate::poisson::with_solver!(solver, s => position_ranks(&s.mesh.coords));
    let node_of_dof = crate::poisson::with_solver!(solver, s => &s.dofs.node_of_dof);
    (0..nrhs)
        .flat_map(|c| {
            let values = super::mg::normal_loads(rank.len(), SEED + c as u64);
            node_of_dof
                .iter()
                .map(|&v| values[rank[v as usize]])
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Each node's place among the nodes sorted by position (the last coordinate first, to
/// 1e-9: the same order however a mesh numbers them).
fn position_ranks<const D: usize>(coords: &[[f64; D]]) -> Vec<usize> {
    let mut by_position: Vec<usize> = (0..coords.len()).collect();
    by_position.sort_by_cached_key(|&v| {
        coords[v]
            .iter()
            .rev()
            .map(|x| (x * 1e9).round() as i64)
            .collect::<Vec<_>>()
    });
    let mut rank = vec![0; coords.len()];
    for (r, &v) in by_position.iter().enumerate() {
        rank[v] = r;
    }
    rank
}

/// ‖b − A u‖₂ / ‖b‖₂ of every column in f64.
fn column_residuals(solver: &AnyPoissonSolver, b: &[f64], u: &[f64], nrhs: usize) -> Vec<f64> {
    crate::poisson::with_solver!(solver, s => s.residuals(b, u, nrhs))
}

/// Writes the first solver's matrix (its order of unknowns, both triangles, CSR) and the
/// block of the largest `--nrhs` for a solver outside tensorfem.
fn export(a: &SolveBenchArgs, solver: &AnyPoissonSolver, nrhs: usize) -> Result<()> {
    let path: &PathBuf = a.export.as_ref().expect("export was asked for");
    h5::H5Writer::check_destination(path)?;
    let writer = h5::H5Writer::create(path)?;
    let root = writer.root();
    let (matrix, n) = crate::poisson::with_solver!(solver, s => (&s.matrix, s.dofs.len()));
    let group = root
        .create_group("matrix")
        .map_err(h5::error_in(path, "creating group matrix"))?;
    let indptr: Vec<u64> = matrix.row_ptr().iter().map(|&p| p as u64).collect();
    h5::write_vector(&group, "indptr", &indptr)?;
    h5::write_vector(&group, "indices", matrix.col_idx())?;
    h5::write_vector(&group, "data", matrix.values())?;
    h5::write_dense(root, "rhs", n, nrhs, &random_block(solver, nrhs))?;
    h5::write_scalar_attr(root, "unknowns", n as u64)?;
    h5::write_scalar_attr(root, "nrhs", nrhs as u64)?;
    h5::write_scalar_attr(root, "rtol", a.rtol)?;
    h5::write_str_attr(
        root,
        "description",
        &format!(
            "{}, {} conditions, standard normal loads per node (seed {SEED} + column)",
            mesh_name(a, false),
            match a.bc {
                BcArg::Dirichlet => "Dirichlet",
                BcArg::Pressure => "pressure (Dirichlet outflow, Neumann elsewhere)",
            }
        ),
    )?;
    let written = writer.commit()?;
    eprintln!(
        "bench solve: wrote {} ({n} unknowns, {} nonzeros, {nrhs} right-hand sides)",
        written.display(),
        matrix.nnz()
    );
    Ok(())
}

fn best(t: &[f64]) -> f64 {
    t.iter().copied().fold(f64::INFINITY, f64::min)
}

fn median(t: &[f64]) -> f64 {
    let mut s = t.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn print(results: &[SolveBenchResult], json: bool) {
    if json {
        for r in results {
            println!(
                "{}",
                serde_json::to_string(r).expect("plain data serialises")
            );
        }
        return;
    }
    if let Some(r) = results.first() {
        println!(
            "bench solve on {}: {} unknowns, {} nonzeros; random loads, every column to ‖b − A u‖₂ ≤ {:e}·‖b‖₂ (checked in f64); {} alternating round(s), fastest (median)",
            r.mesh, r.unknowns, r.nonzeros, r.rtol, r.rounds
        );
    }
    println!(
        "{:<9} {:<28} {:>5} {:>10} {:>18} {:>8} {:>6} {:>10} {:>9}",
        "method",
        "setting",
        "nrhs",
        "set-up [s]",
        "solve [s]",
        "MDof/s",
        "steps",
        "residual",
        "vs chol."
    );
    for r in results {
        println!(
            "{:<9} {:<28} {:>5} {:>10.3} {:>18} {:>8.2} {:>6} {:>10.2e} {:>9}",
            r.method,
            r.setting,
            r.nrhs,
            r.setup_seconds,
            format!("{:.4} ({:.4})", r.solve_seconds, r.solve_seconds_median),
            r.mdofs,
            r.iterations.map_or("-".into(), |i| i.to_string()),
            r.max_relative_residual,
            r.speedup_over_reference
                .map_or("-".into(), |s| format!("{s:.2}×"))
        );
    }
    for r in results {
        print_stages(r);
    }
    let first_block = results.first().map_or(0, |r| r.nrhs);
    for r in results
        .iter()
        .filter(|r| r.setup_note.is_some() && r.nrhs == first_block)
    {
        println!(
            "  {} set-up: {}",
            r.method,
            r.setup_note.as_deref().unwrap_or_default()
        );
    }
}

/// The stages of a method's fastest round beside their model, and what no stage covers.
fn print_stages(r: &SolveBenchResult) {
    let (Some(stages), Some(gemm), Some(bandwidth)) =
        (&r.stages, r.gemm_peak_gflops, r.bandwidth_gbs)
    else {
        return;
    };
    if stages.is_empty() {
        return;
    }
    println!(
        "{} {}, {} columns: stages of the fastest round ({:.4} s); model at the GEMM peak {gemm:.0} GFLOP/s and {bandwidth:.1} GB/s measured in this run",
        r.method, r.setting, r.nrhs, r.solve_seconds
    );
    println!(
        "  {:<24} {:>9} {:>7} {:>9} {:>8} {:>10} {:>7}",
        "stage", "seconds", "share", "MB", "GFLOP", "model [s]", "model/t"
    );
    let or_dash = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".into(), f);
    for s in stages {
        println!(
            "  {:<24} {:>9.4} {:>6.1}% {:>9} {:>8} {:>10} {:>7}",
            s.stage,
            s.seconds,
            100.0 * s.seconds / r.solve_seconds,
            or_dash(s.bytes, &|b| format!("{:.1}", b / 1e6)),
            or_dash(s.flops, &|f| format!("{:.2}", f / 1e9)),
            or_dash(s.model_seconds, &|m| format!("{m:.4}")),
            or_dash(s.model_seconds, &|m| format!(
                "{:.0}%",
                100.0 * m / s.seconds
            )),
        );
    }
    let outside = r.solve_seconds - stages.iter().map(|s| s.seconds).sum::<f64>();
    println!(
        "  {:<24} {:>9.4} {:>6.1}%  (the verification of every column, magnitude checks, transfers)",
        "outside the stages",
        outside,
        100.0 * outside / r.solve_seconds
    );
}
