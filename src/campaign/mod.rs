//! The main job: a campaign of right-hand-side batches over MPI ranks
//! (docs/architecture.md, "The main job: a campaign"). Every rank validates the config and
//! derives the same [`plan::Plan`]; rank 0 checks the input and the output directory, reads
//! the journal and hands out batches ([`queue`]); each rank sets up the operators it is
//! given (reusing the one it holds), solves, verifies and writes each batch to its own
//! file; rank 0 journals it. At the end rank 0 merges everything into `campaign.h5` and
//! prints a -log_view-style summary.

mod input;
mod journal;
mod lock;
mod operator;
mod output;
mod perf;
mod plan;
mod queue;
pub mod signals;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crate::comm::Comm;
use crate::config::{CampaignSpec, RhsSource, RunConfig, SolverSpec};
use crate::error::{Error, Result};
use crate::sys::hostname;
pub use input::InputColumns;
use journal::Journal;
pub use operator::{BatchOperator, BatchRhs, Checks, Operators, POISSON_ERRORS, STOKES_ERRORS};
use perf::{now, BatchRecord, FailureRecord, StageTotals};
pub use plan::ColumnSource;
use plan::{InputDigest, Plan};
use queue::{Dispatch, LocalDispatch, Order, Queue, RemoteDispatch};

/// Files a campaign owns in its directory (removed by --fresh; the operator cache stays).
fn owned_paths(directory: &Path) -> [std::path::PathBuf; 4] {
    [
        Journal::path_in(directory),
        output::batches_dir(directory),
        directory.join("campaign.h5"),
        directory.join("campaign.xdmf"),
    ]
}

/// The user's right-hand-side dataset (rhs = "hdf5"), checked (and with `scan`, every
/// entry checked finite).
fn open_input(spec: &CampaignSpec, scan: bool) -> Result<Option<InputColumns>> {
    match &spec.rhs {
        RhsSource::Hdf5 { path, dataset } => {
            let mesh = &spec.operators[0].mesh;
            let from_file = mesh
                .boundary
                .as_ref()
                .is_some_and(|b| b.dirichlet_from_input());
            let input = InputColumns::open(
                path,
                dataset,
                mesh.load_nodes(),
                from_file.then(|| mesh.dirichlet_nodes()),
                scan,
            )?;
            if let (true, Some(stated)) = (scan, &input.mesh_fingerprint) {
                check_input_mesh(path, stated, mesh)?;
            }
            Ok(Some(input))
        }
        _ => Ok(None),
    }
}

/// Refuses a right-hand-side file built for another mesh than the campaign's: its rows
/// follow a node order (which levels, coarse levels and conditions fix), so a file of the
/// right shape could still mean another problem.
fn check_input_mesh(path: &Path, stated: &str, spec: &crate::mesh::MeshSpec) -> Result<()> {
    let crate::mesh::AnyMesh::Square(mesh) = crate::mesh::build(spec)? else {
        return Ok(());
    };
    let conditions = match &spec.boundary {
        Some(b) => b.conditions(),
        None => crate::mesh::Conditions::dirichlet(&mesh),
    };
    let actual = mesh.fingerprint(&conditions.on_dirichlet_parts(&mesh));
    if actual != stated {
        return Err(Error::InvalidInput(format!(
            "{}: built for another mesh (its mesh_fingerprint {stated}, this campaign's mesh {actual}): rebuild it on `tensorfem mesh --config` of this config",
            path.display()
        )));
    }
    Ok(())
}

/// A folder the run writes (created if missing): it must be creatable and writable. `key`
/// names the setting it comes from.
fn check_writable_folder(path: &Path, key: &str) -> Result<()> {
    let refuse = |what: String| {
        Err(Error::InvalidInput(format!(
            "{key} {}: {what}; choose a folder this run can write",
            path.display()
        )))
    };
    if path.exists() && !path.is_dir() {
        return refuse("exists and is not a directory".into());
    }
    if let Err(e) = std::fs::create_dir_all(path) {
        return refuse(format!("cannot be created ({e})"));
    }
    if let Err(e) = crate::sys::probe_writable(path, "tensorfem-write-test") {
        return refuse(format!("is not writable ({e})"));
    }
    Ok(())
}

/// The paths of a previous run in `directory` must be what this run would have made
/// (files, and the batches folder), and the input must not be among them (`--fresh` would
/// remove it).
fn check_owned_paths(directory: &Path, input: Option<&Path>) -> Result<()> {
    for path in owned_paths(directory) {
        let expect_dir = path == output::batches_dir(directory);
        let wrong = if expect_dir {
            path.exists() && !path.is_dir()
        } else {
            path.is_dir() || (path.exists() && !path.is_file())
        };
        if wrong {
            return Err(Error::InvalidInput(format!(
                "{} is in the way: this run writes a {} there; move it away or choose another campaign.directory",
                path.display(),
                if expect_dir { "folder" } else { "file" }
            )));
        }
        // Canonical where the paths exist; as given (absolute) where they do not yet.
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let holds_input = input.is_some_and(|input| canonical(input).starts_with(canonical(&path)));
        if holds_input {
            return Err(Error::InvalidInput(format!(
                "campaign.input.path {} lies among the files the campaign in {} writes (and --fresh removes): move the input elsewhere",
                input.expect("checked").display(),
                directory.display()
            )));
        }
    }
    Ok(())
}

/// What rank 0's checks found.
struct Preflight {
    input: Option<InputColumns>,
    state: Option<journal::JournalState>,
    digest: InputDigest,
    /// Held until the run ends.
    lock: Option<lock::DirectoryLock>,
}

/// Rank 0's checks before any work: the input dataset (read whole and hashed), the memory,
/// every folder the run writes, the directory's lock, and what a previous run left in it.
/// Nothing is removed or written (beyond creating missing folders) until every check has
/// passed.
fn preflight(spec: &CampaignSpec, operators: &dyn Operators, start: Start) -> Result<Preflight> {
    let fresh = start == Start::Fresh;
    let dir = &spec.directory;
    let input_path = match &spec.rhs {
        RhsSource::Hdf5 { path, .. } => Some(path.as_path()),
        _ => None,
    };
    check_owned_paths(dir, input_path)?;
    let input = open_input(spec, true)?;
    for op in &spec.operators {
        operators.check_memory(op, spec.batch_size)?;
    }
    check_writable_folder(dir, "campaign.directory")?;
    if spec.compression > 0 && !hdf5::filters::deflate_available() {
        return Err(Error::InvalidInput(format!(
            "campaign.compression = {}: the HDF5 library this tensorfem uses has no gzip (deflate) filter; set campaign.compression = 0 or use an HDF5 built with zlib",
            spec.compression
        )));
    }
    for op in &spec.operators {
        if let Some(cache) = &op.solver.cache_dir {
            check_writable_folder(cache, "solver.cache_dir")?;
        }
    }
    let lock = lock::acquire(dir)?;

    let digest = input
        .as_ref()
        .map_or(InputDigest::default(), |i| InputDigest {
            columns: i.columns,
            content: i.content.expect("rank 0 scans the input"),
        });
    let plan = Plan::new(spec, digest);
    let state = if fresh || !spec.checkpoint {
        if !fresh && (Journal::path_in(dir).exists() || spec.output_file().exists()) {
            return Err(Error::InvalidInput(format!(
                "{} already holds a campaign and campaign.checkpoint = \"none\" cannot resume it: run with --fresh to overwrite it, or choose another campaign.directory",
                dir.display()
            )));
        }
        None
    } else {
        let replan = match start {
            Start::RetryFailed => journal::Replan::SolverSettings,
            _ => journal::Replan::Refuse,
        };
        let state = Journal::read(dir, &plan, replan)?;
        if state.is_none() && spec.output_file().exists() {
            return Err(Error::InvalidInput(format!(
                "{} holds a campaign.h5 but no journal ({}) to resume from: run with --fresh to overwrite it, or choose another campaign.directory",
                dir.display(),
                Journal::path_in(dir).display()
            )));
        }
        state
    };
    if fresh {
        for path in owned_paths(dir) {
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if let Err(e) = removed {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(Error::Write { path, source: e });
                }
            }
        }
    }
    std::fs::create_dir_all(output::batches_dir(dir)).map_err(|source| Error::Write {
        path: output::batches_dir(dir),
        source,
    })?;
    Ok(Preflight {
        input,
        state,
        digest,
        lock,
    })
}

/// Everything a worker needs, the same on every rank.
struct WorkContext<'a> {
    spec: &'a CampaignSpec,
    operators: &'a dyn Operators,
    plan: &'a Plan,
    input: Option<&'a InputColumns>,
    rank: usize,
    host: String,
    device: String,
    /// Threads for a set-up the other ranks wait for ([`shared_setup_threads`]).
    setup_threads: usize,
}

/// Threads for building a set-up every other rank waits for. In a campaign of one operator
/// whose set-up goes to a cache file, the ranks that did not get the file's lock have no
/// other work until it is written, so the rank building it borrows the cores of its host's
/// ranks, as far as its CPU affinity allows (a rank bound to its own cores keeps them; a
/// RAYON_NUM_THREADS the user set is kept too).
fn shared_setup_threads(spec: &CampaignSpec, comm: &dyn Comm) -> usize {
    let own = rayon::current_num_threads();
    if spec.operators.len() != 1 || std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return own;
    }
    (own * comm.local_size()).min(crate::sys::cores()).max(own)
}

/// A batch file being written on its own thread while the worker solves the next batch.
struct Writing {
    batch: usize,
    handle: std::thread::JoinHandle<Result<BatchRecord>>,
}

/// Solves batches until told to stop or signalled; returns where the time went. Each
/// batch's file is written on a thread of its own while the next batch is solved; the
/// batch is reported done (and journaled) once its file is durable.
fn work(ctx: &WorkContext<'_>, dispatch: &mut dyn Dispatch) -> Result<StageTotals> {
    let start = Instant::now();
    let mut totals = StageTotals::default();
    let mut held: Option<(usize, Box<dyn BatchOperator>)> = None;
    let mut writing: Option<Writing> = None;
    let result = (|| {
        while !signals::stop_requested() {
            let t = Instant::now();
            let order = dispatch.next(held.as_ref().map(|h| h.0))?;
            totals.idle += t.elapsed().as_secs_f64();
            let Order::Solve { batch, lock } = order else {
                break;
            };
            if signals::stop_requested() {
                dispatch.abandon(batch);
                break;
            }
            match solve_batch(ctx, batch, lock, &mut held, &mut totals, dispatch) {
                Ok(solved) => {
                    finish_write(ctx, &mut writing, &mut totals, dispatch)?;
                    writing = Some(solved.write(ctx));
                }
                Err(e) => {
                    let place = record_failure(ctx, batch, &e);
                    dispatch.failed(format!("batch {batch}: {e}{place}"));
                    return Err(e);
                }
            }
        }
        Ok(())
    })();
    // The last file is finished whatever stopped the loop: its batch was solved.
    let finished = finish_write(ctx, &mut writing, &mut totals, dispatch);
    result?;
    finished?;
    totals.wall = start.elapsed().as_secs_f64();
    Ok(totals)
}

/// Waits for the file being written, then reports its batch done. The wait is what the
/// I/O stage counts (the part of the write the next solve did not hide).
fn finish_write(
    ctx: &WorkContext<'_>,
    writing: &mut Option<Writing>,
    totals: &mut StageTotals,
    dispatch: &mut dyn Dispatch,
) -> Result<()> {
    let Some(Writing { batch, handle }) = writing.take() else {
        return Ok(());
    };
    let t = Instant::now();
    let written = handle.join().unwrap_or_else(|_| {
        Err(Error::Campaign(format!(
            "the thread writing batch {batch} panicked"
        )))
    });
    totals.io += t.elapsed().as_secs_f64();
    match written {
        Ok(record) => dispatch.done(record),
        Err(e) => {
            let place = record_failure(ctx, batch, &e);
            dispatch.failed(format!("batch {batch}: {e}{place}"));
            Err(e)
        }
    }
}

/// Logs a failed batch with its solver's record and writes it to `failures/`; returns
/// where it went, for the message that stops the campaign.
fn record_failure(ctx: &WorkContext<'_>, index: usize, e: &Error) -> String {
    let batch = &ctx.plan.batches[index];
    let spec = &ctx.spec.operators[batch.operator];
    let record = FailureRecord {
        batch: index,
        operator: batch.operator,
        rank: ctx.rank,
        host: ctx.host.clone(),
        device: ctx.device.clone(),
        method: spec.solver.method.name().into(),
        precision: precision_name(&spec.solver),
        nrhs: batch.columns.len(),
        error: e.to_string(),
        exit_code: e.exit_code(),
        solver: e.record(),
        time: now(),
    };
    let solver = record
        .solver
        .as_ref()
        .map_or(String::new(), |r| format!(" ({r})"));
    match output::write_failure(&ctx.spec.directory, &record) {
        Ok(path) => {
            let place = format!("failure record: {}", path.display());
            log::error!("batch {index} failed{solver}; {place}");
            format!(" ({place})")
        }
        Err(write) => {
            log::error!("batch {index} failed{solver}; could not record the failure: {write}");
            String::new()
        }
    }
}

/// The precision a record names: the level schedule for multigrid.
fn precision_name(solver: &SolverSpec) -> String {
    match &solver.mg {
        Some(mg) => crate::mg::schedule_name(&mg.schedule),
        None => solver.precision.name().into(),
    }
}

fn solve_batch(
    ctx: &WorkContext<'_>,
    index: usize,
    lock: bool,
    held: &mut Option<(usize, Box<dyn BatchOperator>)>,
    totals: &mut StageTotals,
    dispatch: &mut dyn Dispatch,
) -> Result<Solved> {
    let start = now();
    let batch = &ctx.plan.batches[index];
    let spec = &ctx.spec.operators[batch.operator];
    let mut setup_seconds = 0.0;
    if held.as_ref().map(|h| h.0) != Some(batch.operator) {
        *held = None; // free the old operator first
        let t = Instant::now();
        let wide = lock && ctx.setup_threads > rayon::current_num_threads();
        let op = if wide {
            ctx.operators.set_up_wide(spec, ctx.setup_threads)?
        } else {
            ctx.operators.set_up(spec)?
        };
        setup_seconds = t.elapsed().as_secs_f64();
        log::info!(
            "operator {} set up in {setup_seconds:.3} s{}",
            batch.operator,
            if wide {
                format!(
                    " (on {} threads: the other ranks wait for it)",
                    ctx.setup_threads
                )
            } else {
                String::new()
            }
        );
        *held = Some((batch.operator, op));
    }
    if lock {
        dispatch.cache_ready(batch.operator)?;
    }
    let op = &mut held.as_mut().expect("set up above").1;
    let nrhs = batch.columns.len();
    let sources: Vec<ColumnSource> = ctx.plan.columns[batch.columns.clone()]
        .iter()
        .map(|c| c.source)
        .collect();

    let t = Instant::now();
    let rhs = op.rhs(&sources, ctx.input)?;
    let rhs_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let outcome = op.solve(&rhs.b, nrhs)?;
    let solve_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let nodal = op.to_nodal(&outcome.u, &rhs);
    let checks = op.verify(&rhs, &outcome.u, &nodal, &sources)?;
    let verify_seconds = t.elapsed().as_secs_f64();
    let unknowns = op.unknowns();
    let nodes = nodal.len() / nrhs;
    let mut record = BatchRecord {
        batch: index,
        operator: batch.operator,
        rank: ctx.rank,
        host: ctx.host.clone(),
        device: ctx.device.clone(),
        method: spec.solver.method.name().into(),
        precision: precision_name(&spec.solver),
        nrhs,
        unknowns,
        setup_seconds,
        rhs_seconds,
        solve_seconds,
        verify_seconds,
        write_seconds: 0.0,
        mdofs: (unknowns * nrhs) as f64 / solve_seconds.max(1e-12) / 1e6,
        gflops: outcome.flops.map(|f| f / solve_seconds.max(1e-12) / 1e9),
        iterations: outcome.iterations,
        cg_iterations: outcome.inner_iterations,
        max_relative_residual: checks.max_residual(),
        max_relative_l2_error: checks.max_error(POISSON_ERRORS[0]),
        failed_columns: checks.failed(),
        start,
        end: 0.0,
    };
    record.end = now();
    totals.setup += setup_seconds;
    totals.rhs += rhs_seconds;
    totals.solve += solve_seconds;
    totals.verify += verify_seconds;
    totals.batches += 1;
    totals.columns += nrhs;
    log::info!(
        "batch {index} ({nrhs} columns, operator {}) solved in {solve_seconds:.3} s, max relative residual {:.2e}",
        batch.operator,
        record.max_relative_residual
    );
    if record.failed_columns.is_empty() {
        output::clear_failures(&ctx.spec.directory, index);
    } else {
        let first = batch.columns.start;
        let e = Error::Verification(format!(
            "{} of {nrhs} column(s) missed their tolerance: {}",
            record.failed_columns.len(),
            checks.describe_failures(&record.failed_columns, first, 8)
        ));
        let place = record_failure(ctx, index, &e);
        log::warn!("batch {index}: {e}{place}; the campaign goes on and ends failed (--retry-failed solves the batch again)");
    }
    Ok(Solved {
        record,
        nodes,
        nodal,
        checks,
    })
}

/// A solved and verified batch, its file not yet written.
struct Solved {
    record: BatchRecord,
    nodes: usize,
    nodal: Vec<f64>,
    checks: Checks,
}

impl Solved {
    /// Writes the batch file on a thread of its own; the thread returns the record with
    /// its write time.
    fn write(self, ctx: &WorkContext<'_>) -> Writing {
        let path = output::batch_path(&ctx.spec.directory, self.record.batch);
        let fingerprint = ctx.plan.fingerprint;
        let storage = output::SolutionStorage::of(ctx.spec);
        let batch = self.record.batch;
        let handle = std::thread::spawn(move || {
            let Solved {
                mut record,
                nodes,
                nodal,
                checks,
            } = self;
            let t = Instant::now();
            output::write_batch(&path, fingerprint, storage, &record, nodes, &nodal, &checks)?;
            record.write_seconds = t.elapsed().as_secs_f64();
            Ok(record)
        });
        Writing { batch, handle }
    }
}

/// What a campaign run printed (rank 0) and whether it finished every batch.
pub struct Outcome {
    /// The summary rank 0 prints; None on the other ranks.
    pub summary: Option<String>,
    /// False when a signal stopped it with batches left (exit [`signals::EXIT_STOPPED`]).
    pub complete: bool,
    /// When columns missed their tolerance: which, and what to do (the run fails).
    pub failed: Option<String>,
}

/// How a run treats what an earlier run of the campaign left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Resume from the journal (a finished campaign only reports).
    Resume,
    /// Remove the journal, the batch files and campaign.h5 and start over.
    Fresh,
    /// Resume, solving again the batches whose columns missed their tolerance.
    RetryFailed,
}

/// Runs the campaign of `config` (which has a `[campaign]`) with the operators `operators`
/// sets up on this rank's device. `tensorfem run` installs the signal handlers at start-up
/// ([`signals::install`]); this installs them where nobody did.
pub fn run(
    config: &RunConfig,
    operators: &dyn Operators,
    comm: &dyn Comm,
    start: Start,
) -> Result<Outcome> {
    let spec = config.campaign.as_ref().expect("a campaign config");
    signals::install().map_err(|e| Error::Campaign(format!("installing signal handlers: {e}")))?;
    log::info!(
        "rank {} (local rank {} of {} on {}) bound to {}",
        comm.rank(),
        comm.local_rank(),
        comm.local_size(),
        hostname(),
        operators.device()
    );

    // Rank 0 checks; everyone learns the outcome (and the input's column count).
    let checked = if comm.is_root() {
        Some(preflight(spec, operators, start))
    } else {
        None
    };
    let verdict = match &checked {
        Some(Ok(p)) => format!("ok {} {}", p.digest.columns, p.digest.content),
        Some(Err(e)) => format!("error {} {e}", e.exit_code()),
        None => String::new(),
    };
    let verdict = comm.broadcast_string(&verdict);
    let (input, state, digest, _lock) = match checked {
        Some(result) => {
            let p = result?;
            (p.input, p.state, p.digest, p.lock)
        }
        None => {
            if let Some(rest) = verdict.strip_prefix("error ") {
                let (code, message) = rest.split_once(' ').unwrap_or(("1", rest));
                return Err(Error::Elsewhere {
                    message: message.to_string(),
                    exit_code: code.parse().unwrap_or(1),
                });
            }
            let digest = verdict
                .strip_prefix("ok ")
                .and_then(|rest| rest.split_once(' '))
                .and_then(|(columns, content)| {
                    Some(InputDigest {
                        columns: columns.parse().ok()?,
                        content: content.parse().ok()?,
                    })
                })
                .ok_or_else(|| Error::Mpi(format!("unexpected word from rank 0: {verdict}")))?;
            (open_input(spec, false)?, None, digest, None)
        }
    };
    let mut plan = Plan::new(spec, digest);
    if let Some(state) = &state {
        plan.earlier = state.fingerprints.clone();
    }
    let ctx = WorkContext {
        spec,
        operators,
        plan: &plan,
        input: input.as_ref(),
        rank: comm.rank(),
        host: hostname(),
        device: operators.device(),
        setup_threads: shared_setup_threads(spec, comm),
    };

    if !comm.is_root() {
        let mut dispatch = RemoteDispatch(comm.messenger().expect("MPI with several ranks"));
        let totals = work(&ctx, &mut dispatch);
        dispatch.leave(
            ctx.host.clone(),
            totals.as_ref().copied().unwrap_or_default(),
        );
        totals?;
        return Ok(Outcome {
            summary: None,
            // Only rank 0 knows; the launcher's exit status is the largest of the ranks'.
            complete: true,
            failed: None,
        });
    }

    // Rank 0: the queue, the dispatcher thread, its own worker.
    let mut done: BTreeSet<usize> = state.as_ref().map(|s| s.done.clone()).unwrap_or_default();
    let failed_before = state.as_ref().map(|s| s.failed.clone()).unwrap_or_default();
    // A campaign merged before (its batch files may be gone) is only reported again, unless
    // its failed batches are to be solved again.
    let merged_before = done.len() == plan.batches.len()
        && output::merged_plan(&spec.output_file()) == Some(plan.fingerprint);
    let retry = start == Start::RetryFailed && !failed_before.is_empty();
    if start == Start::RetryFailed {
        log::info!(
            "--retry-failed: {} batch(es) with columns that missed their tolerance are solved again",
            failed_before.len()
        );
        done.retain(|b| !failed_before.contains_key(b));
    }
    if !merged_before || retry {
        done.retain(|&b| {
            let path = output::batch_path(&spec.directory, b);
            if !path.exists() {
                log::warn!("batch {b} is journaled but its file is missing: solving it again");
                return false;
            }
            match output::check_batch_file(&path, &plan) {
                Ok(()) => true,
                Err(why) => {
                    log::warn!(
                        "batch {b} is journaled but its file {} is damaged ({why}): solving it again from its inputs",
                        path.display()
                    );
                    if let Err(e) = std::fs::remove_file(&path) {
                        log::warn!("could not remove the damaged {}: {e}", path.display());
                    }
                    false
                }
            }
        });
    }
    let resumed = done.len();
    let journal = if spec.checkpoint {
        Some(Journal::open(&spec.directory, &plan, state.as_ref())?)
    } else {
        None
    };
    if resumed > 0 && resumed < plan.batches.len() {
        log::info!(
            "resuming: {resumed} of {} batches are done (journal {})",
            plan.batches.len(),
            Journal::path_in(&spec.directory).display()
        );
    }
    let queue: queue::Shared = Arc::new((
        Mutex::new(Queue::new(
            plan.batches.iter().map(|b| b.operator).collect(),
            spec.operators
                .iter()
                .map(|o| operators.cache_file(o))
                .collect(),
            spec.operators.iter().map(|o| o.mesh.unknowns()).collect(),
            &done,
            journal,
        )),
        Condvar::new(),
    ));
    let remote = comm.size() - 1;
    let wall = Instant::now();
    let progress = (resumed < plan.batches.len()).then(|| {
        crate::progress::Progress::lines("campaign", (plan.batches.len() - resumed) as f64)
    });
    let local_result = std::thread::scope(|scope| {
        let server = comm.messenger().filter(|_| remote > 0).map(|messenger| {
            let queue = Arc::clone(&queue);
            scope.spawn(move || queue::serve(queue, messenger, remote))
        });
        let watcher = progress.as_ref().map(|progress| {
            let queue = Arc::clone(&queue);
            scope.spawn(move || queue::report_progress(&queue, progress))
        });
        let mut local = LocalDispatch(Arc::clone(&queue));
        let result = if comm.threads_may_communicate() || remote == 0 {
            work(&ctx, &mut local)
        } else {
            log::warn!("MPI gives no thread support: rank 0 hands out work and solves nothing");
            Ok(StageTotals::default())
        };
        local.leave(
            ctx.host.clone(),
            result.as_ref().copied().unwrap_or_default(),
        );
        if let Err(e) = &result {
            local.failed(e.to_string());
        }
        if let Some(server) = server {
            server.join().expect("the dispatcher thread does not panic");
        }
        queue::stop_progress(&queue);
        if let Some(watcher) = watcher {
            watcher.join().expect("the progress thread does not panic");
        }
        result
    });
    drop(progress);
    let wall = wall.elapsed().as_secs_f64();
    local_result?;
    let (lock, _) = &*queue;
    let mut queue = lock.lock().expect("queue lock");
    if let Some(failure) = queue.failure() {
        return Err(Error::Campaign(failure.to_string()));
    }
    let mut ranks = std::mem::take(&mut queue.left);
    ranks.sort_by_key(|r| r.0);
    let done_now = std::mem::take(&mut queue.done_now);
    drop(queue);
    let complete = done.len() + done_now.len() == plan.batches.len();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "tensorfem campaign ({}): {} columns in {} batches of ≤ {} over {} operator(s), {} rank(s)",
        spec.rhs.name(),
        plan.columns.len(),
        plan.batches.len(),
        spec.batch_size,
        spec.operators.len(),
        comm.size()
    );
    if complete && done_now.is_empty() && merged_before {
        // Nothing was solved: campaign.h5 (with the timings of the runs that did the work)
        // stays as it is.
        let checks = output::read_merged_checks(&spec.output_file(), output::error_names(spec))?;
        let _ = writeln!(
            out,
            "  already done        every batch was solved and merged before (journal {}); nothing to do",
            Journal::path_in(&spec.directory).display()
        );
        let failed = finish_summary(&mut out, spec, &plan, &checks);
        let _ = write!(
            out,
            "  output              {}",
            spec.output_file().display()
        );
        return Ok(Outcome {
            summary: Some(out),
            complete: true,
            failed,
        });
    }
    if resumed > 0 {
        let _ = writeln!(
            out,
            "  resumed             {resumed} batch(es) were done before (journal)"
        );
    }
    let _ = writeln!(
        out,
        "  this run            {} batch(es) in {wall:.3} s on {}",
        done_now.len(),
        ctx.device
    );
    out.push_str(&perf::summary_table(&ranks));
    if !complete {
        let _ =
            write!(
            out,
            "  stopped             {} of {} batches done; run the same command again to resume{}",
            done.len() + done_now.len(),
            plan.batches.len(),
            if signals::stop_requested() { " (stop requested by a signal)" } else { "" }
        );
        return Ok(Outcome {
            summary: Some(out),
            complete: false,
            failed: None,
        });
    }
    let t = Instant::now();
    let merged = output::write_campaign(config, spec, &plan, comm.size(), &ranks)?;
    let merge_seconds = t.elapsed().as_secs_f64();
    let dofs: f64 = done_now.iter().map(|r| (r.unknowns * r.nrhs) as f64).sum();
    let solve: f64 = done_now.iter().map(|r| r.solve_seconds).sum();
    if solve > 0.0 {
        let _ = writeln!(
            out,
            "  throughput          {:.2} MDof/s per rank while solving, {:.2} MDof/s over the run's wall time",
            dofs / solve / 1e6,
            dofs / wall.max(1e-12) / 1e6
        );
    }
    if spec.is_stokes() {
        out.push_str(&perf::stokes_study_table(
            spec,
            &merged.records,
            &merged.checks,
        ));
    }
    let failed = finish_summary(&mut out, spec, &plan, &merged.checks);
    if failed.is_none() && !spec.keep_batches {
        let batches = output::batches_dir(&spec.directory);
        match std::fs::remove_dir_all(&batches) {
            Ok(()) => log::info!(
                "every column passed: the batch files, merged into {}, were removed ({} keeps them)",
                spec.output_file().display(),
                "campaign.keep_batches = true"
            ),
            Err(e) => log::warn!("could not remove {}: {e}", batches.display()),
        }
    }
    let _ = write!(
        out,
        "  output              {} (merged in {merge_seconds:.3} s; ParaView: {})",
        spec.output_file().display(),
        merged.xdmf.display()
    );
    Ok(Outcome {
        summary: Some(out),
        complete: true,
        failed,
    })
}

/// The accuracy and verification lines of a finished campaign's summary; the failures'
/// message when columns missed their tolerance.
fn finish_summary(
    out: &mut String,
    spec: &CampaignSpec,
    plan: &Plan,
    checks: &Checks,
) -> Option<String> {
    let errors: String = checks
        .errors
        .iter()
        .filter_map(|(name, _)| {
            let label = match *name {
                "relative_l2_error" => "relative L2 error",
                "velocity_l2_error" => "velocity L2 error",
                "pressure_l2_error" => "pressure L2 error",
                _ => return None,
            };
            let worst = checks.max_error(name)?;
            Some(format!(", max {label} {worst:.3e}"))
        })
        .collect();
    let _ = writeln!(
        out,
        "  accuracy            max relative residual (f64) {:.3e}{errors}",
        checks.max_residual()
    );
    let failed = checks.failed();
    if failed.is_empty() {
        let _ = writeln!(
            out,
            "  verification        all {} columns met their tolerance",
            checks.columns()
        );
        return None;
    }
    let mut batches: Vec<usize> = failed
        .iter()
        .map(|&c| {
            plan.batches
                .iter()
                .position(|b| b.columns.contains(&c))
                .expect("every column is in a batch")
        })
        .collect();
    batches.dedup();
    let _ = writeln!(
        out,
        "  verification        FAILED: {} of {} columns missed their tolerance (batches {batches:?}; records in {})",
        failed.len(),
        checks.columns(),
        output::failures_dir(&spec.directory).display()
    );
    Some(format!(
        "{} of {} columns of the campaign missed their tolerance ({}); they are stored in {} with /columns/passed = 0, and the batch files are kept. Change what made them fail (see the records in {}), then `tensorfem run --retry-failed CONFIG` solves those batches again and merges",
        failed.len(),
        checks.columns(),
        checks.describe_failures(&failed, 0, 5),
        spec.output_file().display(),
        output::failures_dir(&spec.directory).display()
    ))
}
