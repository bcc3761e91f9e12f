//! Stokes Q2-Q1 (docs/mathematics.md §1, §7, §8.3): discretization rates, every
//! preconditioner in every precision, mesh-independent iteration counts, tuned = simple
//! Vanka, and the CLI.

mod common;

use common::{run, text, write_config};
use faer::linalg::solvers::Solve;
use tensorfem::device::cpu::simd::{self, SimdLevel};
use tensorfem::device::{Block, Layout, StokesDevice};
use tensorfem::device_tests;
use tensorfem::linalg::{FgmresParams, LinOp};
use tensorfem::precision::Precision;
use tensorfem::stokes::assembly::ElementMatrices;
use tensorfem::stokes::{
    solve, Grid, MonolithicMg, Preconditioner, StokesProblem, StokesSpec, StokesSystem,
};

fn spec(n: usize, name: &str, precision: Precision, rtol: f64) -> StokesSpec {
    StokesSpec {
        n,
        preconditioner: Preconditioner::by_name(name).unwrap(),
        precision,
        fgmres: FgmresParams {
            restart: 30,
            rtol,
            atol: 0.0,
            max_iterations: 500,
        },
    }
}

const ALL: [&str; 5] = Preconditioner::NAMES;

/// Velocity L2 O(h³), pressure L2 O(h²) over three refinements, solved to 1e-12 so the
/// algebraic error is far below the discretization error.
fn discretization_errors_converge_at_the_theoretical_rates<D: StokesDevice>(dev: &D) {
    let errors: Vec<(f64, f64)> = [8, 16, 32, 64]
        .iter()
        .map(|&n| {
            let s = dev
                .run(|| solve(dev, &spec(n, "braess-sarazin", Precision::F64, 1e-12)))
                .unwrap();
            (s.velocity_l2_error, s.pressure_l2_error)
        })
        .collect();
    for w in errors.windows(2) {
        let velocity_rate = (w[0].0 / w[1].0).log2();
        let pressure_rate = (w[0].1 / w[1].1).log2();
        assert!(
            (velocity_rate - 3.0).abs() < 0.2,
            "velocity rate {velocity_rate}: {errors:?}"
        );
        assert!(
            (pressure_rate - 2.0).abs() < 0.2,
            "pressure rate {pressure_rate}: {errors:?}"
        );
    }
    // The finest errors themselves (n = 64), as measured: the solution is the FE one.
    assert!(errors[3].0 < 1.7e-7 && errors[3].1 < 5.8e-5, "{errors:?}");
}

/// Every preconditioner reaches the f64 relative residual 1e-8, with its preconditioner in
/// f64, f32 and f16 storage, and the solution's errors are those of the discretization.
/// (At 1e-8 the algebraic error may differ between preconditioners by up to κ·1e-8 with
/// κ ~ h⁻², so solutions are compared through their errors, not entry by entry.)
fn every_preconditioner_converges_in_every_precision<D: StokesDevice>(dev: &D) {
    let n = 32;
    let reference = dev
        .run(|| solve(dev, &spec(n, "braess-sarazin", Precision::F64, 1e-12)))
        .unwrap();
    for name in ALL {
        for precision in [Precision::F64, Precision::F32, Precision::F16] {
            let s = dev
                .run(|| solve(dev, &spec(n, name, precision, 1e-8)))
                .unwrap_or_else(|e| panic!("{name} {precision}: {e}"));
            assert!(
                s.info.converged && s.info.relative_residual <= 1e-8,
                "{name} {precision}: {:?}",
                s.info
            );
            assert!(
                (s.velocity_l2_error / reference.velocity_l2_error - 1.0).abs() < 0.05,
                "{name} {precision}: velocity error {} vs {}",
                s.velocity_l2_error,
                reference.velocity_l2_error
            );
            assert!(
                (s.pressure_l2_error / reference.pressure_l2_error - 1.0).abs() < 0.05,
                "{name} {precision}: pressure error {} vs {}",
                s.pressure_l2_error,
                reference.pressure_l2_error
            );
        }
    }
}

/// FGMRES iterations of Vanka (simple and tuned) and Braess-Sarazin grow by at most 2 from
/// 32² to 256² elements.
fn vanka_and_braess_sarazin_iterations_do_not_grow_with_the_mesh<D: StokesDevice>(dev: &D) {
    for (name, precision) in [
        ("vanka", Precision::F32),
        ("vanka-tuned", Precision::F64),
        ("braess-sarazin", Precision::F64),
    ] {
        let counts: Vec<usize> = [32, 64, 128, 256]
            .iter()
            .map(|&n| {
                dev.run(|| solve(dev, &spec(n, name, precision, 1e-8)))
                    .unwrap()
                    .info
                    .iterations
            })
            .collect();
        assert!(
            counts.iter().all(|&c| c <= counts[0] + 2),
            "{name}: iterations {counts:?}"
        );
        assert!(counts[0] <= 20, "{name}: iterations {counts:?}");
    }
}

/// The tuned Vanka (25 shared inverses) applies the same relaxation as the simple one (one
/// inverse per patch): same cycle outputs and same FGMRES iterates, to rounding.
fn tuned_and_simple_vanka_give_the_same_iterates<D: StokesDevice>(dev: &D) {
    let n = 16;
    let problem = StokesProblem::manufactured(n);
    let simple = Preconditioner::by_name("vanka").unwrap();
    let tuned = Preconditioner::by_name("vanka-tuned").unwrap();
    let relaxation = |p: Preconditioner| match p {
        Preconditioner::Multigrid(r) => r,
        _ => unreachable!("both are multigrid"),
    };
    let mut a = MonolithicMg::new(dev, n, relaxation(simple), Precision::F64).unwrap();
    let mut b = MonolithicMg::new(dev, n, relaxation(tuned), Precision::F64).unwrap();
    let len = problem.rhs.len();
    let rhs = Block::from_f64(dev, &problem.rhs, len, 1, Precision::F64, Layout::ColMajor).unwrap();
    let (mut za, mut zb) = (
        Block::vector(dev, len, Precision::F64).unwrap(),
        Block::vector(dev, len, Precision::F64).unwrap(),
    );
    a.apply(&rhs, &mut za).unwrap();
    b.apply(&rhs, &mut zb).unwrap();
    let (za, zb) = (za.to_f64(dev).unwrap(), zb.to_f64(dev).unwrap());
    let scale = za.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (x, y) in za.iter().zip(&zb) {
        assert!((x - y).abs() <= 1e-12 * scale, "{x} vs {y}");
    }
    let sa = dev
        .run(|| solve(dev, &spec(n, "vanka", Precision::F64, 1e-10)))
        .unwrap();
    let sb = dev
        .run(|| solve(dev, &spec(n, "vanka-tuned", Precision::F64, 1e-10)))
        .unwrap();
    assert_eq!(sa.info.iterations, sb.info.iterations);
    for (x, y) in sa.info.history.iter().zip(&sb.info.history) {
        assert!(
            (x / y - 1.0).abs() < 1e-8,
            "residual histories differ: {x} vs {y}"
        );
    }
    for (x, y) in sa.flow.iter().zip(&sb.flow) {
        assert!((x - y).abs() < 1e-11, "{x} vs {y}");
    }
}

/// One cycle with tuned Vanka (on the CPU a relaxation fused per strip of patch rows, the
/// patches' values slot-major in cache) equals one with simple Vanka (gather, products and
/// scatter in turn) to the rounding of the storage precision's arithmetic, on a mesh whose
/// patch rows split unevenly into the CPU's tasks (n = 40: 41 patch rows), in f32 and f16
/// storage (f64: `tuned_and_simple_vanka_give_the_same_iterates`).
fn tuned_and_simple_vanka_cycles_agree_in_every_storage<D: StokesDevice>(dev: &D) {
    let n = 40;
    let problem = StokesProblem::manufactured(n);
    let relaxation = |name: &str| match Preconditioner::by_name(name).unwrap() {
        Preconditioner::Multigrid(r) => r,
        _ => unreachable!("both are multigrid"),
    };
    let len = problem.rhs.len();
    let rhs = Block::from_f64(dev, &problem.rhs, len, 1, Precision::F64, Layout::ColMajor).unwrap();
    for (precision, tolerance) in [(Precision::F32, 1e-5), (Precision::F16, 1e-5)] {
        let mut outputs = Vec::new();
        for name in ["vanka", "vanka-tuned"] {
            let mut mg = MonolithicMg::new(dev, n, relaxation(name), precision).unwrap();
            let mut z = Block::vector(dev, len, Precision::F64).unwrap();
            mg.apply(&rhs, &mut z).unwrap();
            outputs.push(z.to_f64(dev).unwrap());
        }
        let scale = outputs[0].iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(scale > 0.0);
        for (k, (x, y)) in outputs[0].iter().zip(&outputs[1]).enumerate() {
            assert!(
                (x - y).abs() <= tolerance * scale,
                "{precision} entry {k}: simple {x} vs tuned {y} (scale {scale})"
            );
        }
    }
}

#[test]
fn run_writes_velocity_and_pressure_to_hdf5() {
    let dir = tempfile::tempdir().unwrap();
    let body = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/inputs/stokes.toml"))
        .unwrap()
        .replace("n = 256", "n = 32")
        .replace("\"../out/", "\"out/");
    let cfg = write_config(dir.path(), &body);
    let out = run(&["run", &cfg], dir.path());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for needle in [
        "Stokes Q2-Q1",
        "braess-sarazin in f32",
        "velocity L2",
        "out/stokes.h5",
    ] {
        assert!(stdout.contains(needle), "missing '{needle}' in {stdout}");
    }
    let file = hdf5::File::open(dir.path().join("out/stokes.h5")).unwrap();
    let ux = file.dataset("velocity/x").unwrap();
    assert_eq!(ux.shape(), vec![65, 65]);
    assert_eq!(file.dataset("velocity/y").unwrap().shape(), vec![65, 65]);
    assert_eq!(file.dataset("pressure").unwrap().shape(), vec![33, 33]);
    let u: Vec<f64> = ux.read_raw().unwrap();
    let coords: Vec<f64> = file
        .dataset("mesh/lattice_coordinates")
        .unwrap()
        .read_raw()
        .unwrap();
    // Nodal values match the exact velocity to the discretization error.
    let (i, j) = (20, 37);
    let (x, y) = (coords[i], coords[j]);
    let exact = x * (1.0 - x) * (2.0 * x - 1.0) * (6.0 * y * y - 6.0 * y + 1.0);
    assert!(
        (u[j * 65 + i] - exact).abs() < 1e-5,
        "{} vs {exact}",
        u[j * 65 + i]
    );
    let err: f64 = file
        .attr("velocity_l2_error")
        .unwrap()
        .read_scalar()
        .unwrap();
    assert!(err > 0.0 && err < 2e-6, "{err}");
    let p: Vec<f64> = file.dataset("pressure").unwrap().read_raw().unwrap();
    assert!(p.iter().all(|v| v.is_finite()));
}

#[test]
fn bench_stokes_prints_its_json_keys() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &[
            "bench",
            "stokes",
            "--n",
            "16",
            "--precond",
            "vanka-tuned,block-triangular",
            "--json",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for (line, name) in lines.iter().zip(["vanka-tuned", "block-triangular"]) {
        for key in [
            "iterations",
            "seconds",
            "ms_per_element",
            "velocity_l2_error",
            "pressure_l2_error",
            "relative_residual",
            "precond",
            "n",
        ] {
            assert!(line.get(key).is_some(), "missing {key} in {line}");
        }
        assert_eq!(line["precond"], name);
        assert_eq!(line["n"], 16);
        assert!(line["relative_residual"].as_f64().unwrap() <= 1e-8);
        assert_eq!(line["bandwidth"], "triad");
        assert!(
            line["device"].as_str().unwrap().starts_with("cpu"),
            "{line}"
        );
        // The stages split the timed solve: each ran, and together they fit in it.
        let stages = line["stage_seconds"].as_array().unwrap();
        let names: Vec<&str> = stages
            .iter()
            .map(|s| s["stage"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Krylov", "operator", "preconditioner"], "{line}");
        let total: f64 = stages.iter().map(|s| s["seconds"].as_f64().unwrap()).sum();
        assert!(
            stages.iter().all(|s| s["seconds"].as_f64().unwrap() > 0.0),
            "{line}"
        );
        assert!(total <= line["seconds"].as_f64().unwrap(), "{line}");
    }
}

#[test]
fn bad_stokes_input_is_refused_with_named_problems() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[mesh]\nn = 100\n[solver]\nmethod = \"stokes\"\n[output]\npath = \"o.h5\"\n",
            vec!["mesh.n", "coarsens to a 25×25 mesh"],
        ),
        (
            "[mesh]\nn = 32\nelement = \"q1\"\n[solver]\nmethod = \"stokes\"\nrelaxation = \"gauss-seidel\"\nomega = 3.0\n[output]\npath = \"o.h5\"\n",
            vec!["mesh.element", "q2-q1", "solver.relaxation", "gauss-seidel", "solver.omega"],
        ),
        (
            "[mesh]\nn = 32\n[solver]\nmethod = \"stokes\"\npreconditioner = \"block-triangular\"\nt = 1.5\nnrhs = 4\n[output]\npath = \"o.h5\"\n",
            vec!["solver.t", "solver.nrhs"],
        ),
        (
            "[mesh]\nn = 32\n[solver]\nmethod = \"stokes\"\n[campaign]\nrhs = \"time-series\"\ndirectory = \"c\"\n",
            vec!["campaign.rhs", "campaign.rhs = \"study\""],
        ),
        (
            "[mesh]\nn = 32\n[solver]\nmethod = \"mg\"\nrelaxation = \"vanka\"\n[output]\npath = \"o.h5\"\n",
            vec!["solver.relaxation", "applies to method stokes only"],
        ),
    ];
    for (body, needles) in cases {
        let cfg = write_config(dir.path(), body);
        let out = run(&["run", &cfg], dir.path());
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{body}: {stderr}");
        for needle in needles {
            assert!(stderr.contains(needle), "missing '{needle}' in: {stderr}");
        }
        assert!(!dir.path().join("o.h5").exists());
    }
    // Too large for this machine's memory: refused before allocating, naming the way out.
    let out = run(
        &["bench", "stokes", "--n", "16384", "--precond", "vanka"],
        dir.path(),
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("GiB") && stderr.contains("vanka-tuned"),
        "{stderr}"
    );
    let out = run(
        &["bench", "stokes", "--n", "32", "--precond", "jacobi"],
        dir.path(),
    );
    assert!(text(&out.stderr).contains("unknown preconditioner 'jacobi'"));
}

/// The global matrix assembled densely, element by element, from the element matrices,
/// with Dirichlet rows and columns dropped and the system bordered by the constant
/// pressure (an independent path to the stencil storage and kernels).
fn dense_reference(n: usize) -> (faer::Mat<f64>, Vec<usize>) {
    let g = Grid { n };
    let (m, len) = (g.m(), g.lattice_len());
    let mut index = vec![usize::MAX; g.flow_len()];
    let mut positions = Vec::new();
    for c in 0..2 {
        for j in 1..m - 1 {
            for i in 1..m - 1 {
                index[c * len + j * m + i] = positions.len();
                positions.push(c * len + j * m + i);
            }
        }
    }
    for k in 0..g.pressure_len() {
        index[2 * len + k] = positions.len();
        positions.push(2 * len + k);
    }
    let size = positions.len() + 1;
    let mut a = faer::Mat::<f64>::zeros(size, size);
    let e = ElementMatrices::new(1.0 / n as f64);
    for ey in 0..n {
        for ex in 0..n {
            let v = |c: usize, l: usize| index[c * len + (2 * ey + l / 3) * m + 2 * ex + l % 3];
            let p = |q: usize| index[2 * len + (ey + q / 2) * g.np() + ex + q % 2];
            for c in 0..2 {
                for r in 0..9 {
                    for s in 0..9 {
                        if v(c, r) != usize::MAX && v(c, s) != usize::MAX {
                            a[(v(c, r), v(c, s))] += e.stiffness[r][s];
                        }
                    }
                    for q in 0..4 {
                        if v(c, r) != usize::MAX {
                            a[(v(c, r), p(q))] += e.divergence[c][q][r];
                            a[(p(q), v(c, r))] += e.divergence[c][q][r];
                        }
                    }
                }
            }
        }
    }
    for k in 0..g.pressure_len() {
        let r = index[2 * len + k];
        a[(r, size - 1)] = 1.0;
        a[(size - 1, r)] = 1.0;
    }
    (a, positions)
}

/// The stencil kernels against an element-by-element dense assembly.
fn stencil_operator_equals_the_dense_assembly<D: StokesDevice>(dev: &D) {
    for n in [2, 4, 6] {
        let problem = StokesProblem::manufactured(n);
        let (a, positions) = dense_reference(n);
        let g = problem.operator.grid;
        let x: Vec<f64> = (0..g.flow_len())
            .map(|k| {
                if positions.contains(&k) {
                    ((k * 37) % 23) as f64 - 11.0
                } else {
                    0.0
                }
            })
            .collect();
        let mut system = StokesSystem::new(dev, &problem.operator).unwrap();
        let xb =
            Block::from_f64(dev, &x, g.flow_len(), 1, Precision::F64, Layout::ColMajor).unwrap();
        let mut yb = Block::vector(dev, g.flow_len(), Precision::F64).unwrap();
        system.apply(&xb, &mut yb).unwrap();
        let y = yb.to_f64(dev).unwrap();
        for (r, &pr) in positions.iter().enumerate() {
            let want: f64 = positions
                .iter()
                .enumerate()
                .map(|(c, &pc)| a[(r, c)] * x[pc])
                .sum();
            assert!(
                (y[pr] - want).abs() < 1e-12,
                "n {n} row {r}: {} vs {want}",
                y[pr]
            );
        }
    }
}

/// FGMRES with each preconditioner reproduces the dense LU solution.
fn every_preconditioner_matches_the_dense_solve<D: StokesDevice>(dev: &D) {
    let n = 8;
    let problem = StokesProblem::manufactured(n);
    let (a, positions) = dense_reference(n);
    let size = positions.len() + 1;
    let mut b = faer::Mat::<f64>::zeros(size, 1);
    for (r, &p) in positions.iter().enumerate() {
        b[(r, 0)] = problem.rhs[p];
    }
    let reference = a.partial_piv_lu().solve(&b);
    for name in ALL {
        let spec = StokesSpec {
            n,
            preconditioner: Preconditioner::by_name(name).unwrap(),
            precision: Precision::F64,
            fgmres: FgmresParams {
                restart: 30,
                rtol: 1e-13,
                atol: 0.0,
                max_iterations: 500,
            },
        };
        let s = dev.run(|| solve(dev, &spec)).unwrap();
        common::outputs::record(&format!("{name}: flow"), Precision::F64, 1e-9, &s.flow);
        let g = s.grid;
        // Compare velocity (with boundary values removed) and pressure up to a constant.
        let p0 = s.flow[2 * g.lattice_len()] - reference[(positions.len() - g.pressure_len(), 0)];
        for (r, &p) in positions.iter().enumerate() {
            let got = if p >= 2 * g.lattice_len() {
                s.flow[p] - p0
            } else {
                s.flow[p]
            };
            assert!(
                (got - reference[(r, 0)]).abs() < 1e-9,
                "{name}: unknown {r}: {got} vs {}",
                reference[(r, 0)]
            );
        }
    }
}

device_tests!(
    cuda: discretization_errors_converge_at_the_theoretical_rates,
    every_preconditioner_converges_in_every_precision,
    vanka_and_braess_sarazin_iterations_do_not_grow_with_the_mesh,
    tuned_and_simple_vanka_give_the_same_iterates,
    tuned_and_simple_vanka_cycles_agree_in_every_storage,
    stencil_operator_equals_the_dense_assembly,
    every_preconditioner_matches_the_dense_solve,
);

/// Rows that equal their set's representative (the stencil away from the boundary) are
/// read from it on the CPU, and that changes no bit: A x, b − A x, L, B u and M p with and
/// without the shared rows, in every storage precision, on a 32×32 mesh (where the rows
/// next to the boundary differ from the representative).
/// The CPU Vanka scatter (sums gathered row by row) equals the per-node sum over the
/// patches that hold each node, in (pj, pi) order, bit for bit, on a permutation of the
/// patches' columns, in f32 and f64.
#[test]
fn vanka_scatter_equals_the_per_node_sums() {
    use tensorfem::device::stokes::{Grid, PATCH};
    use tensorfem::device::{Data, StokesKernels};
    let dev = tensorfem::device::Cpu::new();
    let g = Grid { n: 20 };
    let patches = g.pressure_len();
    let (maps, column_of) = common::permuted_vanka_maps(&dev, g, 1);
    let seeded = |seed: usize, len: usize| -> Vec<f64> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f64 - 500.0) / 250.0)
            .collect()
    };
    for p in [Precision::F32, Precision::F64] {
        let round = |v: &[f64]| Data::from_f64(&dev, v, p).unwrap().to_f64(&dev).unwrap();
        let corrections = round(&seeded(1, patches * PATCH));
        let x0 = round(&seeded(2, g.flow_len()));
        let mut x = Block::from_f64(&dev, &x0, g.flow_len(), 1, p, Layout::ColMajor).unwrap();
        let stored = Data::from_f64(&dev, &corrections, p).unwrap();
        dev.vanka_scatter(g, &stored, &maps, 0.7, 8.0, &mut x)
            .unwrap();
        let got = x.to_f64(&dev).unwrap();
        // The sums in the precision's arithmetic, node by node.
        let want = match p {
            Precision::F32 => per_node_scatter::<f32>(g, &column_of, &corrections, &x0),
            _ => per_node_scatter::<f64>(g, &column_of, &corrections, &x0),
        };
        let same = got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{p}: the scatter differs from the per-node sums");
    }
}

/// x + 0.7 Σ_i V_iᵀ c_i (pressure slots times 8) in T, node by node: each interior
/// lattice node adds the slots of every patch that holds it, patches in (pj, pi) order.
fn per_node_scatter<T: tensorfem::precision::Real>(
    g: tensorfem::device::stokes::Grid,
    column_of: &[u32],
    corrections: &[f64],
    x0: &[f64],
) -> Vec<f64> {
    use tensorfem::device::stokes::{patch_node, PATCH};
    let (m, np) = (g.m(), g.np());
    let (omega, pressure_scale) = (T::from_f64(0.7), T::from_f64(8.0));
    let correction = |patch: usize, slot: usize| {
        T::from_f64(corrections[column_of[patch] as usize * PATCH + slot])
    };
    let mut want: Vec<T> = x0.iter().map(|&v| T::from_f64(v)).collect();
    for (c, part) in [0, g.lattice_len()].into_iter().enumerate() {
        for j in 1..m - 1 {
            for i in 1..m - 1 {
                let mut sum = T::zero();
                for patch in 0..np * np {
                    let (pi, pj) = (patch % np, patch / np);
                    for slot in 25 * c..25 * c + 25 {
                        if patch_node(g, pi, pj, slot) == Some((c, i, j)) {
                            sum = sum + correction(patch, slot);
                        }
                    }
                }
                want[part + j * m + i] = want[part + j * m + i] + omega * sum;
            }
        }
    }
    for patch in 0..np * np {
        let k = 2 * g.lattice_len() + patch;
        want[k] = want[k] + omega * pressure_scale * correction(patch, 50);
    }
    want.iter()
        .map(|&v| tensorfem::precision::Real::to_f64(v))
        .collect()
}

#[test]
fn shared_rows_change_no_bit() {
    use tensorfem::device::StokesKernels;
    let dev = tensorfem::device::Cpu::new();
    let op = StokesProblem::manufactured(32).operator;
    let g = op.grid;
    let seeded = |seed: usize, len: usize| -> Vec<f64> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f64 - 500.0) / 250.0)
            .collect()
    };
    for p in Precision::STORED {
        let c = p.compute();
        let shared = op.upload(&dev, p).unwrap();
        assert!(shared.laplacian.shared.iter().all(Option::is_some), "{p}");
        assert!(shared
            .gradient
            .iter()
            .all(|r| r.shared.iter().all(Option::is_some)));
        assert!(
            shared.divergence.iter().all(|r| r.shared.is_some()) && shared.mass.shared.is_some()
        );
        let mut own = op.upload(&dev, p).unwrap();
        own.laplacian.shared = Default::default();
        for r in &mut own.gradient {
            r.shared = Default::default();
        }
        for r in &mut own.divergence {
            r.shared = None;
        }
        own.mass.shared = None;
        let block = |seed| {
            Block::from_f64(
                &dev,
                &seeded(seed, g.flow_len()),
                g.flow_len(),
                1,
                c,
                Layout::ColMajor,
            )
            .unwrap()
        };
        let (x, b) = (block(1), block(2));
        let results = |a: &tensorfem::device::stokes::StokesMatrices<_>| {
            let mut y = block(3);
            dev.stokes_apply(a, &x, None, &mut y).unwrap();
            let ax = y.to_f64(&dev).unwrap();
            dev.stokes_apply(a, &x, Some(&b), &mut y).unwrap();
            let residual = y.to_f64(&dev).unwrap();
            let [ux, _, pressure] = g.parts();
            let mut lattice = Block::zeros(&dev, g.lattice_len(), 1, c, Layout::ColMajor).unwrap();
            dev.stokes_laplacian(a, x.data.slice(ux), lattice.view_mut())
                .unwrap();
            let mut q = Block::zeros(&dev, g.pressure_len(), 1, c, Layout::ColMajor).unwrap();
            dev.stokes_divergence(a, &x, q.view_mut()).unwrap();
            let bu = q.to_f64(&dev).unwrap();
            dev.pressure_stencil(&a.mass, x.data.slice(pressure), q.view_mut())
                .unwrap();
            [
                ax,
                residual,
                lattice.to_f64(&dev).unwrap(),
                bu,
                q.to_f64(&dev).unwrap(),
            ]
        };
        // Shared rows go through vector tiles across nodes: every SIMD level.
        let without = results(&own);
        for level in SimdLevel::ALL.into_iter().filter(|l| l.is_supported()) {
            simd::set_level(level);
            let with = results(&shared);
            for (k, (w, o)) in with.iter().zip(&without).enumerate() {
                let same = w.iter().zip(o).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{p}, {}: result {k} differs with shared rows",
                    level.name()
                );
            }
        }
        simd::set_level(simd::best());
    }
}
