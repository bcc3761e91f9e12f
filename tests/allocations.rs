//! Apply paths allocate nothing: a counting global allocator (every thread, rayon's workers
//! included) shows zero allocations in PSC applies (M1, M2, M3), PSC-IR solves, V-cycles, MG IR solves
//! and FGMRES solves after set-up and one warm-up, for several widths and precisions; and a
//! multigrid solve after `Multigrid::prepare_solve` allocates no block even the first time.
//!
//! Its own harness (`harness = false` in Cargo.toml): libtest's threads would allocate
//! beside the measurement (output, timers), so this binary runs one scenario after another
//! on a quiet process.

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use tensorfem::device::{Block, Cpu, Device, Layout, VectorKernels};
use tensorfem::linalg::{fgmres, FgmresParams, FgmresWorkspace, LinOp};
use tensorfem::mesh::Element;
use tensorfem::mg::{
    assemble_level, default_levels, MgParams, MgSolve, Multigrid, Smoother, StopParams, Variant,
};
use tensorfem::precision::Precision;
use tensorfem::psc::{Coupling, InnerCg, PscIr, PscIrParams, PscMethod, PscOperator, PscSetup};
use tensorfem::sparse::SparseRows;
use tensorfem::stokes::{
    preconditioner, remove_pressure_mean, Preconditioner, StokesProblem, StokesSpec, StokesSystem,
};

/// Counts every allocation and reallocation of the process.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// Bytes asked for by every allocation and reallocation.
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: AllocLayout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Applies measured after the warm-up: enough for any growth to show.
const MEASURED: usize = 5;

/// Windows of `MEASURED` applies tried before an allocation counts as the apply path's.
const WINDOWS: usize = 3;

/// Runs `apply` once to warm up, then `MEASURED` times counting allocations, all inside
/// `dev.run` (where solves run); returns (warm-up allocations, measured allocations).
///
/// The measured count is the least of up to [`WINDOWS`] windows: an allocation of the
/// apply path happens in every window, while the thread pool's own (a work-stealing deque
/// resized when other processes load the machine and tasks are stolen differently) comes
/// and goes, and once made it failed this test on a busy machine.
fn count(dev: &Cpu, mut apply: impl FnMut() + Send) -> (usize, usize) {
    dev.run(|| {
        let start = ALLOCATIONS.load(Ordering::SeqCst);
        apply();
        let warm = ALLOCATIONS.load(Ordering::SeqCst) - start;
        let mut least = usize::MAX;
        for _ in 0..WINDOWS {
            let before = ALLOCATIONS.load(Ordering::SeqCst);
            for _ in 0..MEASURED {
                apply();
            }
            least = least.min(ALLOCATIONS.load(Ordering::SeqCst) - before);
            if least == 0 {
                break;
            }
        }
        (warm, least)
    })
}

struct Report {
    failures: Vec<String>,
}

impl Report {
    fn check(&mut self, what: &str, (warm, measured): (usize, usize)) {
        println!("{what:<52} warm-up {warm:>6}   next {MEASURED} applies {measured:>3}");
        if measured != 0 {
            self.failures.push(format!(
                "{what}: {measured} allocations in {MEASURED} applies after the warm-up"
            ));
        }
    }
}

fn block(dev: &Cpu, rows: usize, cols: usize, precision: Precision, layout: Layout) -> Block<Cpu> {
    let values: Vec<f64> = (0..rows * cols)
        .map(|k| ((k * 7919) % 1013) as f64 / 1013.0 - 0.5)
        .collect();
    Block::from_f64(dev, &values, rows, cols, precision, layout).unwrap()
}

/// PSC applies (M1, M2, M3 with its CG) and PSC-IR solves (h = 1/64, n0 = 4),
/// f64/f32/f16, 1 and 16 columns, both couplings.
fn psc(dev: &Cpu, report: &mut Report) {
    for method in PscMethod::ALL {
        let setup = PscSetup::new(Element::Q1, 4, 4, method).unwrap();
        psc_method(dev, &setup, report);
    }
}

fn psc_method(dev: &Cpu, setup: &PscSetup, report: &mut Report) {
    let n = setup.stiffness.nrows();
    let method = setup.method();
    for (precision, coupling) in [Precision::F64, Precision::F32, Precision::F16]
        .into_iter()
        .flat_map(|p| Coupling::ALL.map(|c| (p, c)))
    {
        for nrhs in [1, 16] {
            let mut op = PscOperator::new(dev, setup, precision, coupling).unwrap();
            op.set_inner_cg(InnerCg::alone(1e-6, 500));
            op.prepare(nrhs).unwrap();
            let x = block(dev, n, nrhs, op.input().precision, Layout::ColMajor);
            let mut y =
                Block::zeros(dev, n, nrhs, op.output().precision, Layout::ColMajor).unwrap();
            report.check(
                &format!("{method} apply, {precision}, {coupling} coupling, {nrhs} column(s)"),
                count(dev, || op.apply(&x, &mut y).unwrap()),
            );
            op.set_inner_cg(InnerCg::inner(precision, None));

            let params = PscIrParams {
                rtol: 1e-10,
                atol: 0.0,
                max_iterations: 30,
            };
            let mut ir =
                PscIr::new(dev, op, &setup.stiffness, nrhs, params.max_iterations).unwrap();
            let b = block(dev, n, nrhs, Precision::F64, Layout::ColMajor);
            let mut x = Block::zeros(dev, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
            report.check(
                &format!("PSC-IR solve around {method}, {precision}, {coupling} coupling, {nrhs} column(s)"),
                count(dev, || {
                    dev.fill(x.data.view_mut(), 0.0).unwrap();
                    ir.solve_blocks(&b, &mut x, params).unwrap();
                }),
            );
        }
    }
}

/// V-cycles and MG IR solves (plain and accelerated by flexible CG), 2D n = 64 and 3D
/// n = 16, D_MG and H_MG, 1 and 8 columns.
fn multigrid(dev: &Cpu, report: &mut Report) {
    for (dim, n) in [(2, 64), (3, 16)] {
        let matrix = assemble_level(dim, n).unwrap();
        let rows = matrix.nrows();
        for variant in [Variant::DMg, Variant::HMg] {
            for nrhs in [1, 8] {
                let mut mg = Multigrid::new(dev, dim, n, &matrix, jacobi(variant, n)).unwrap();
                let cycle = mg.cycle_mut();
                cycle.prepare(nrhs).unwrap();
                let kind = cycle.input();
                let r = block(dev, rows, nrhs, kind.precision, Layout::NodeMajor);
                let mut c =
                    Block::zeros(dev, rows, nrhs, kind.precision, Layout::NodeMajor).unwrap();
                report.check(
                    &format!("V-cycle, {dim}D {}, {nrhs} column(s)", variant.name()),
                    count(dev, || cycle.apply(&r, &mut c).unwrap()),
                );

                let stop = StopParams {
                    rtol: 0.0,
                    atol: 1e-9,
                    max_iterations: 60,
                };
                mg.prepare(nrhs, stop.max_iterations).unwrap();
                let b = block(dev, rows, nrhs, Precision::F64, Layout::NodeMajor);
                let mut u =
                    Block::zeros(dev, rows, nrhs, Precision::F64, Layout::NodeMajor).unwrap();
                report.check(
                    &format!("MG IR solve, {dim}D {}, {nrhs} column(s)", variant.name()),
                    count(dev, || {
                        dev.fill(u.data.view_mut(), 0.0).unwrap();
                        mg.solve_blocks(&b, &mut u, stop).unwrap();
                    }),
                );
                mg.set_krylov(true);
                mg.prepare(nrhs, stop.max_iterations).unwrap();
                report.check(
                    &format!("MG FCG solve, {dim}D {}, {nrhs} column(s)", variant.name()),
                    count(dev, || {
                        dev.fill(u.data.view_mut(), 0.0).unwrap();
                        mg.solve_blocks(&b, &mut u, stop).unwrap();
                    }),
                );
            }
        }
    }
}

/// `variant`'s schedule on the unit square or cube with n cells per direction, damped
/// Jacobi, the default storage.
fn jacobi(variant: Variant, n: usize) -> MgParams {
    MgParams {
        schedule: variant.schedule(default_levels(n)),
        smoother: Smoother::JACOBI,
        base_tolerance: 1e-4,
        residual_scaling: true,
        storage: tensorfem::device::MatrixStorage::default(),
    }
}

/// The first multigrid solve after `Multigrid::prepare_solve` (and `load`) allocates less
/// than one block of its shape: the levels' and the refinement's blocks are set-up, which
/// a benchmark does not time. (Without `prepare_solve` that solve allocated them all.)
fn multigrid_first_solve(dev: &Cpu, report: &mut Report) {
    let (n, nrhs) = (64, 8);
    let matrix = assemble_level(2, n).unwrap();
    let rows = matrix.nrows();
    let block_bytes = rows * nrhs * 8;
    let stop = StopParams {
        rtol: 1e-8,
        atol: 0.0,
        max_iterations: 60,
    };
    for (variant, solve) in [
        (Variant::HMg, MgSolve::Refined),
        (Variant::DMg, MgSolve::Plain),
    ] {
        let mut mg = Multigrid::new(dev, 2, n, &matrix, jacobi(variant, n)).unwrap();
        mg.prepare_solve(solve, nrhs, stop.max_iterations).unwrap();
        let b: Vec<f64> = (0..rows * nrhs).map(|i| (i % 7) as f64 - 3.0).collect();
        mg.load(&b, &vec![0.0; rows * nrhs], nrhs).unwrap();
        let bytes = dev.run(|| {
            let before = BYTES.load(Ordering::SeqCst);
            mg.solve_loaded(solve, stop).unwrap();
            BYTES.load(Ordering::SeqCst) - before
        });
        let what = format!("first MG solve after prepare_solve, {}", variant.name());
        println!("{what:<52} {bytes} bytes (one block: {block_bytes})");
        if bytes >= block_bytes {
            report.failures.push(format!(
                "{what}: {bytes} bytes allocated, one f64 block is {block_bytes}"
            ));
        }
    }
}

/// MG IR and FCG solves along a refined mesh's hierarchy (Galerkin levels, matrix
/// transfers): the flow around a square refined 3 times, mixed conditions, DSH_MG.
fn multigrid_on_a_mesh(dev: &Cpu, report: &mut Report) {
    use tensorfem::mesh::{refine, CoarseMesh, Condition::*, Conditions};
    let mut mesh = refine(&CoarseMesh::flow_around_square(), 3).unwrap();
    Conditions(vec![Neumann, Dirichlet, Neumann, Neumann])
        .apply(&mut mesh)
        .unwrap();
    let matrix = tensorfem::fem::assemble_poisson(&mesh, |_| 0.0)
        .unwrap()
        .matrix;
    let rows = matrix.nrows();
    let params = MgParams {
        schedule: Variant::DshMg.schedule(4),
        smoother: Smoother::JACOBI,
        base_tolerance: 1e-4,
        residual_scaling: true,
        storage: tensorfem::device::MatrixStorage::default(),
    };
    let (mut mg, _) = Multigrid::on_mesh(dev, &mesh, &matrix, params, false).unwrap();
    let stop = StopParams {
        rtol: 0.0,
        atol: 1e-9,
        max_iterations: 100,
    };
    for krylov in [false, true] {
        mg.set_krylov(krylov);
        mg.prepare(4, stop.max_iterations).unwrap();
        let b = block(dev, rows, 4, Precision::F64, Layout::NodeMajor);
        let mut u = Block::zeros(dev, rows, 4, Precision::F64, Layout::NodeMajor).unwrap();
        report.check(
            &format!("MG on the flow mesh, krylov {krylov}, 4 columns"),
            count(dev, || {
                dev.fill(u.data.view_mut(), 0.0).unwrap();
                mg.solve_blocks(&b, &mut u, stop).unwrap();
            }),
        );
    }
}

/// FGMRES solves of the Stokes problem (n = 16) under each kind of preconditioner.
fn stokes(dev: &Cpu, report: &mut Report) {
    let n = 16;
    let problem = StokesProblem::manufactured(n);
    let grid = problem.operator.grid;
    let len = grid.flow_len();
    for (name, precision) in [
        ("braess-sarazin", Precision::F64),
        ("vanka-tuned", Precision::F32),
        ("schur-uzawa", Precision::F16),
        ("block-triangular", Precision::F32),
    ] {
        let spec = StokesSpec {
            n,
            preconditioner: Preconditioner::by_name(name).unwrap(),
            precision,
            fgmres: FgmresParams {
                restart: 30,
                rtol: 1e-10,
                atol: 0.0,
                max_iterations: 200,
            },
        };
        let (mut precond, _) = preconditioner(dev, &spec).unwrap();
        let mut system = StokesSystem::new(dev, &problem.operator).unwrap();
        let mut work =
            FgmresWorkspace::new(dev, len, spec.fgmres.restart, spec.fgmres.max_iterations)
                .unwrap();
        let b =
            Block::from_f64(dev, &problem.rhs, len, 1, Precision::F64, Layout::ColMajor).unwrap();
        let mut x = Block::vector(dev, len, Precision::F64).unwrap();
        let mut iterations = 0;
        let allocations = count(dev, || {
            dev.fill(x.data.view_mut(), 0.0).unwrap();
            let info = fgmres(
                spec.fgmres,
                &b,
                &mut x,
                &mut work,
                &mut system,
                &mut *precond,
                |v| remove_pressure_mean(dev, grid, v),
            )
            .unwrap();
            iterations = info.iterations;
        });
        report.check(
            &format!("FGMRES solve ({iterations} iterations), {name}, {precision}"),
            allocations,
        );
    }
}

fn main() {
    // Several workers even on a small machine, so work is stolen and split as on a node.
    rayon::ThreadPoolBuilder::new()
        .num_threads(std::thread::available_parallelism().map_or(4, |n| n.get().max(4)))
        .build_global()
        .unwrap();
    let dev = Cpu::new();
    let mut report = Report { failures: vec![] };
    psc(&dev, &mut report);
    multigrid(&dev, &mut report);
    multigrid_first_solve(&dev, &mut report);
    multigrid_on_a_mesh(&dev, &mut report);
    stokes(&dev, &mut report);
    if !report.failures.is_empty() {
        for f in &report.failures {
            eprintln!("FAILED: {f}");
        }
        std::process::exit(1);
    }
    println!("no allocation after the warm-up in any apply path");
}
