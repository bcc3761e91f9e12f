//! PSC (docs/mathematics.md §3): the published figures of Table 1 (§8.1), the structure of
//! the prehandled matrix, and M1, M2, M3 and PSC-IR around each against the independent
//! sparse Cholesky reference and against each other.

mod common;

use tensorfem::device::{Block, Cpu, Layout, PscDevice};
use tensorfem::device_tests;
use tensorfem::fem::{assemble_poisson, Manufactured};
use tensorfem::linalg::LinOp;
use tensorfem::mesh::{read_gmsh, refine, unit_square_refined, CoarseMesh, Element, Mesh2d};
use tensorfem::precision::Precision;
use tensorfem::psc::{
    Coupling, InnerCg, PscInfo, PscIr, PscIrParams, PscMethod, PscOperator, PscSetup, Schur,
};
use tensorfem::reference::CholeskySolver;
use tensorfem::sparse::SparseRows;

/// Rounds to the digits the PSC paper prints (docs/mathematics.md §8.1).
fn round(v: f64, digits: i32) -> f64 {
    let s = 10f64.powi(digits);
    (v * s).round() / s
}

/// The PSC paper's Table 1 (docs/mathematics.md §8.1), h = 1/256: counts exact, κ and NNZ
/// ratios to the printed digits.
#[test]
fn table_one_rows_h0_quarter_and_sixteenth() {
    let setup = PscSetup::new(Element::Q1, 4, 6, PscMethod::M1).unwrap();
    let info = PscInfo::compute(&setup, false).unwrap();
    assert_eq!((info.c, info.e, info.i), (9, 1_512, 63_504));
    assert_eq!(
        info.groups.len(),
        1,
        "the unit square has one group of macro elements"
    );
    assert_eq!(round(info.kappa_ci, 1), 23.9);
    assert_eq!(round(info.kappa_pi, 1), 24.1);
    assert_eq!(round(info.nnz_ci_inv_over_fem, 2), 27.06);
    assert_eq!(round(info.nnz_pi_inv_over_fem, 2), 3.93);
    assert!(
        setup.a_ci_relative < 1e-12,
        "A_CI vanishes: {}",
        setup.a_ci_relative
    );

    let setup = PscSetup::new(Element::Q1, 16, 4, PscMethod::M1).unwrap();
    let info = PscInfo::compute(&setup, true).unwrap();
    assert_eq!((info.c, info.e, info.i), (225, 7_200, 57_600));
    assert_eq!(info.groups.len(), 1);
    assert_eq!(round(info.kappa_ci, 1), 11.1);
    assert_eq!(round(info.kappa_pi, 1), 14.5);
    assert_eq!(round(info.nnz_ci_inv_over_fem, 2), 0.09);
    assert_eq!(round(info.nnz_pi_inv_over_fem, 2), 89.05);
    // Below Table 1: about 13,280, 100 and 22.
    let whole = info.whole.unwrap();
    assert_eq!(whole.kappa_a.round(), 13_280.0);
    assert!(
        (whole.kappa_hb - 100.0).abs() < 1.0,
        "κ(SᵀAS) = {}",
        whole.kappa_hb
    );
    assert!(
        (whole.kappa_prehandled - 22.0).abs() < 0.5,
        "κ(prehandled) = {}",
        whole.kappa_prehandled
    );
}

/// Table 1's other two rows: counts (their κ and NNZ follow from the same code).
#[test]
fn table_one_counts_h0_eighth_and_thirty_second() {
    for (n0, levels, counts) in [(8, 5, (49, 3_472, 61_504)), (32, 3, (961, 13_888, 50_176))] {
        let mesh = unit_square_refined(n0, levels, Element::Q1).unwrap();
        let h = mesh.hierarchy.as_ref().unwrap();
        let count = |kind: u8| {
            h.location
                .iter()
                .zip(&mesh.on_boundary)
                .filter(|(l, b)| {
                    !**b && matches!(
                        (kind, l),
                        (0, tensorfem::mesh::MacroLocation::Vertex(_))
                            | (1, tensorfem::mesh::MacroLocation::Edge(_))
                            | (2, tensorfem::mesh::MacroLocation::Interior(_))
                    )
                })
                .count()
        };
        assert_eq!((count(0), count(1), count(2)), counts);
    }
}

struct Problem {
    mesh: Mesh2d,
    stiffness: tensorfem::sparse::Csr<f64>,
    rhs: Vec<f64>,
    reference: Vec<f64>,
    nrhs: usize,
}

impl Problem {
    fn setup(&self, method: PscMethod) -> PscSetup {
        PscSetup::on_mesh(self.mesh.clone(), method).unwrap()
    }
}

/// `nrhs` manufactured right-hand sides (k = 1, 2, …) on a refined mesh and their
/// sparse-Cholesky solutions.
fn problem_on(mesh: Mesh2d, nrhs: usize) -> Problem {
    let stiffness = assemble_poisson(&mesh, |_| 0.0).unwrap().matrix;
    let cholesky = CholeskySolver::factor(&stiffness).unwrap();
    let (mut rhs, mut reference) = (Vec::new(), Vec::new());
    for c in 0..nrhs {
        let m = Manufactured::new(1 + c as u32, 2);
        let sys = assemble_poisson(&mesh, |x| m.f(x)).unwrap();
        reference.extend(cholesky.solve(&sys.rhs));
        rhs.extend(sys.rhs);
    }
    Problem {
        mesh,
        stiffness,
        rhs,
        reference,
        nrhs,
    }
}

fn problem(element: Element, n0: usize, levels: usize, nrhs: usize) -> Problem {
    problem_on(unit_square_refined(n0, levels, element).unwrap(), nrhs)
}

/// The 3×3 quadrilateral mesh of the unit square with its vertices moved by `place`.
fn moved_quads(place: impl Fn([f64; 2]) -> [f64; 2]) -> CoarseMesh {
    let mesh = CoarseMesh::unit_square(3, Element::Q1).unwrap();
    let coords = mesh.coords.iter().map(|&x| place(x)).collect();
    CoarseMesh::new(mesh.element, coords, mesh.cells, mesh.parts, mesh.boundary).unwrap()
}

/// Rectangles of widths 1/4, 1/2, 1/4 and heights 1/2, 1/4, 1/4: squares, and 1:2
/// rectangles standing and lying (one group under a quarter turn).
fn tensor_rectangles() -> CoarseMesh {
    let (xs, ys) = ([0.0, 0.25, 0.75, 1.0], [0.0, 0.5, 0.75, 1.0]);
    moved_quads(|[x, y]| {
        [
            xs[(x * 3.0).round() as usize],
            ys[(y * 3.0).round() as usize],
        ]
    })
}

/// Q1 PSC needs rectangular macro elements: on other quadrilaterals a coarse function is
/// not a-orthogonal to the functions inside a macro element, and the set-up says so.
#[test]
fn q1_on_general_quadrilaterals_is_refused() {
    let skewed = moved_quads(|[x, y]| [x + 0.3 * y * (1.0 - y) * (x - 0.5), y]);
    let err = PscSetup::on_mesh(refine(&skewed, 2).unwrap(), PscMethod::M3)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("A_CI") && err.contains("rectangles"), "{err}");
    let setup = PscSetup::on_mesh(refine(&tensor_rectangles(), 2).unwrap(), PscMethod::M3).unwrap();
    let sizes: Vec<usize> = setup.groups.iter().map(|g| g.macros.len()).collect();
    assert_eq!(
        sizes,
        [4, 5],
        "1:2 rectangles standing and lying, and squares"
    );
}

/// Largest relative 2-norm difference over the columns.
fn max_relative_difference(x: &[f64], reference: &[f64], n: usize) -> f64 {
    x.chunks(n)
        .zip(reference.chunks(n))
        .map(|(x, r)| {
            let err: f64 = x.iter().zip(r).map(|(a, b)| (a - b).powi(2)).sum();
            let norm: f64 = r.iter().map(|v| v * v).sum();
            (err / norm).sqrt()
        })
        .fold(0.0, f64::max)
}

/// One apply of the method in `precision` and `coupling` (M3 alone: CG to `cg_rtol`) on
/// the problem's block: the solutions and M3's CG iterations.
fn solve_alone<D: PscDevice>(
    dev: &D,
    setup: &PscSetup,
    (precision, coupling): (Precision, Coupling),
    p: &Problem,
    cg_rtol: f64,
) -> (Vec<f64>, usize) {
    let mut op = PscOperator::new(dev, setup, precision, coupling).unwrap();
    op.set_inner_cg(InnerCg::alone(cg_rtol, 500));
    let n = setup.num_unknowns();
    let kind = op.input().precision;
    let b = Block::from_f64(dev, &p.rhs, n, p.nrhs, kind, Layout::ColMajor).unwrap();
    let mut x = Block::zeros(dev, n, p.nrhs, kind, Layout::ColMajor).unwrap();
    dev.run(|| op.apply(&b, &mut x)).unwrap();
    (x.to_f64(dev).unwrap(), op.last_iterations())
}

/// PSC-IR to 1e-10 around the method in `precision`: refinement steps and the worst
/// relative residual.
fn refined<D: PscDevice>(
    dev: &D,
    setup: &PscSetup,
    (precision, coupling): (Precision, Coupling),
    p: &Problem,
) -> (usize, f64) {
    let mut op = PscOperator::new(dev, setup, precision, coupling).unwrap();
    op.set_inner_cg(InnerCg::inner(precision, None));
    let mut x = vec![0.0; p.rhs.len()];
    let params = PscIrParams {
        rtol: 1e-10,
        atol: 0.0,
        max_iterations: 20,
    };
    let mut ir = PscIr::new(dev, op, &p.stiffness, p.nrhs, params.max_iterations).unwrap();
    let info = dev.run(|| ir.solve(&p.rhs, &mut x, params)).unwrap();
    (
        info.steps(),
        (0..p.nrhs)
            .map(|c| info.relative_residual(c))
            .fold(0.0, |a: f64, b| a.max(b)),
    )
}

/// Every method in f64 agrees with the sparse Cholesky solve to 1e-10 and M2, M3 with M1 to
/// 1e-10, for Q1 and P1, several h/h0, one and several right-hand sides, macro elements
/// with and without padded I slots, on the unit square and on refined coarse meshes (the
/// flow around a square, a Gmsh mesh, general rectangles); f32/tf32/f16 errors are bounded;
/// PSC-IR around each reaches 1e-10. All of it with the default coupling; the csr coupling
/// gives the f64 solutions to 1e-12, and its f16 solutions and PSC-IR meet the same bounds.
fn methods_match_the_reference_in_every_precision<D: PscDevice>(dev: &D) {
    let mut cases: Vec<(String, Box<dyn Fn() -> Problem>)> = Vec::new();
    for (element, n0, levels, nrhs) in [
        (Element::Q1, 4, 3, 1),
        (Element::Q1, 4, 3, 5),
        (Element::Q1, 8, 3, 3),
        (Element::Q1, 2, 5, 2),
        (Element::P1, 4, 3, 1),
        (Element::P1, 4, 3, 4),
        (Element::P1, 8, 2, 3),
        (Element::Q1, 16, 3, 9),
        // 16 × 16 cells per macro element: 225 interior unknowns in 232 padded I slots.
        (Element::P1, 2, 4, 3),
    ] {
        cases.push((
            format!("unit square {element:?} n0={n0} levels={levels} nrhs={nrhs}"),
            Box::new(move || problem(element, n0, levels, nrhs)),
        ));
    }
    // Five columns: a group of four and one in the CPU's fused transform passes.
    for (l0, levels, nrhs) in [(0, 3, 3), (1, 2, 5)] {
        cases.push((
            format!("flow around a square L0={l0} levels={levels} nrhs={nrhs}"),
            Box::new(move || {
                let macros = CoarseMesh::flow_around_square().refined(l0).unwrap();
                problem_on(refine(&macros, levels).unwrap(), nrhs)
            }),
        ));
    }
    cases.push((
        "Gmsh channel with a cylinder levels=2 nrhs=2".into(),
        Box::new(|| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("inputs/meshes/channel-cylinder.msh");
            problem_on(refine(&read_gmsh(&path).unwrap(), 2).unwrap(), 2)
        }),
    ));
    // Two groups; at levels 4 each block's 225 unknowns sit in 232 padded I slots.
    for levels in [3, 4] {
        cases.push((
            format!("rectangles of two shapes levels={levels} nrhs=2"),
            Box::new(move || problem_on(refine(&tensor_rectangles(), levels).unwrap(), 2)),
        ));
    }
    for (case, make) in cases {
        let p = make();
        let n = p.stiffness.nrows();
        let mut m1_solution = Vec::new();
        for method in PscMethod::ALL {
            let setup = p.setup(method);
            // M3 alone: CG to 1e-12 in f64, to what f32 arithmetic resolves otherwise.
            let error = |(precision, coupling): (Precision, Coupling)| {
                let cg_rtol = if precision == Precision::F64 {
                    1e-12
                } else {
                    1e-6
                };
                let (x, _) = solve_alone(dev, &setup, (precision, coupling), &p, cg_rtol);
                let bound = match precision {
                    Precision::F64 => 1e-10,
                    Precision::F32 => 1e-5,
                    Precision::Tf32 | Precision::F16 => 1e-2,
                };
                let what = format!("{case}: {method} solution ({coupling} coupling)");
                common::outputs::record(&what, precision, bound, &x);
                (max_relative_difference(&x, &p.reference, n), x)
            };
            let element = Coupling::default();
            let (e64, x64) = error((Precision::F64, element));
            let (e32, _) = error((Precision::F32, element));
            let (e16, _) = error((Precision::F16, element));
            let (etf, _) = error((Precision::Tf32, element));
            let (csr64, x_csr) = error((Precision::F64, Coupling::Csr));
            let (csr16, _) = error((Precision::F16, Coupling::Csr));
            let couplings = max_relative_difference(&x_csr, &x64, n);
            println!(
                "{case}: {method} errors f64 {e64:.2e}, f32 {e32:.2e}, tf32 {etf:.2e}, f16 {e16:.2e}; csr coupling f64 {csr64:.2e} (differs by {couplings:.2e}), f16 {csr16:.2e}"
            );
            assert!(
                couplings < 1e-12,
                "{case}: {method} couplings differ by {couplings:e}"
            );
            assert!(csr64 < 1e-10, "{case}: {method} csr f64 {csr64:e}");
            assert!(csr16 < 1e-2, "{case}: {method} csr f16 {csr16:e}");
            assert!(e64 < 1e-10, "{case}: {method} f64 {e64:e}");
            assert!(e32 < 1e-5, "{case}: {method} f32 {e32:e}");
            assert!(
                e16 < 1e-2,
                "{case}: {method} f16 {e16:e} (the source accepts about 1%)"
            );
            // TF32's products round to f16's 11 bits; the operators keep f32's range.
            assert!(etf < 1e-2, "{case}: {method} tf32 {etf:e}");
            if method == PscMethod::M1 {
                m1_solution = x64;
            } else {
                let d = max_relative_difference(&x64, &m1_solution, n);
                assert!(d < 1e-10, "{case}: {method} differs from M1 by {d:e}");
            }
            let runs = [Precision::F32, Precision::Tf32, Precision::F16]
                .map(|p| (p, element))
                .into_iter()
                .chain([(Precision::F16, Coupling::Csr)]);
            for (precision, coupling) in runs {
                let (iterations, residual) = refined(dev, &setup, (precision, coupling), &p);
                println!(
                    "{case}: PSC-IR around {method} in {precision} ({coupling}): {iterations} iterations, residual {residual:.2e}"
                );
                assert!(
                    residual <= 1e-10,
                    "{case}: PSC-IR {method} {precision} residual {residual:e}"
                );
                assert!(
                    iterations <= 8,
                    "{case}: PSC-IR {method} {precision} needed {iterations} iterations"
                );
            }
        }
    }
}

/// M3's CG converges as its condition number says: at h = 1/256, h0 = 1/16 (κ(Π) = 14.5,
/// Table 1) CG reaches 1e-10 in at most ½√κ·ln(2/1e-10) ≈ 45 iterations, on a block of
/// columns, and the solutions match the sparse Cholesky reference.
fn m3_iterations_follow_the_condition_number<D: PscDevice>(dev: &D) {
    let p = problem(Element::Q1, 16, 4, 4);
    let setup = p.setup(PscMethod::M3);
    let (x, iterations) = solve_alone(
        dev,
        &setup,
        (Precision::F64, Coupling::default()),
        &p,
        1e-10,
    );
    let bound = (0.5 * 14.5f64.sqrt() * (2.0 / 1e-10f64).ln()).ceil() as usize;
    let error = max_relative_difference(&x, &p.reference, p.stiffness.nrows());
    println!(
        "M3 h = 1/256, h0 = 1/16: {iterations} CG iterations (bound {bound}), error {error:.2e}"
    );
    assert!(iterations <= bound, "{iterations} > {bound}");
    assert!(error < 1e-9, "{error:e}");
}

/// An f16 operator that overflows f16 is refused with the operator named; an M3 alone whose
/// CG cannot reach its tolerance fails with the tolerance named.
fn unrepresentable_operators_and_unconverged_cg_are_refused<D: PscDevice>(dev: &D) {
    let mut setup = PscSetup::new(Element::Q1, 4, 2, PscMethod::M1).unwrap();
    let Schur::M1 { pi_inv } = &mut setup.schur else {
        unreachable!("an M1 set-up")
    };
    // Two overflows: the first in column-major order is named (columns convert in
    // parallel, the report does not depend on which finishes first).
    let e = pi_inv.nrows();
    pi_inv[(3, 5)] = 1.0e6;
    pi_inv[(1, e - 1)] = -2.0e6;
    let err = PscOperator::new(dev, &setup, Precision::F16, Coupling::default())
        .err()
        .expect("overflow is refused")
        .to_string();
    assert!(
        err.contains("Π⁻¹") && err.contains("f16") && err.contains("overflow"),
        "{err}"
    );
    assert!(err.contains(&format!("entry {} ", 5 * e + 3)), "{err}");

    let p = problem(Element::Q1, 4, 3, 2);
    let mut op = PscOperator::new(
        dev,
        &p.setup(PscMethod::M3),
        Precision::F64,
        Coupling::default(),
    )
    .unwrap();
    op.set_inner_cg(InnerCg::alone(1e-12, 2));
    let n = p.stiffness.nrows();
    let b = Block::from_f64(dev, &p.rhs, n, 2, Precision::F64, Layout::ColMajor).unwrap();
    let mut x = Block::zeros(dev, n, 2, Precision::F64, Layout::ColMajor).unwrap();
    let err = dev.run(|| op.apply(&b, &mut x)).unwrap_err().to_string();
    assert!(
        err.contains("PSC-M3") && err.contains("CG") && err.contains("2 iterations"),
        "{err}"
    );
}

/// PSC-IR on a block whose columns converge at different steps: 13 of 16 right-hand sides
/// scaled by 10⁻³ meet the absolute tolerance after one step, and the later steps solve
/// the other 3 (loads of no symmetry, to 10⁻¹²) alone, in blocks 4 wide (the operator's counted flops say so). Every column
/// meets its tolerance by an f64 residual of its own, and the 3 agree with the Cholesky
/// reference and with PSC-IR on those 3 columns as a block of their own.
fn refinement_solves_few_unconverged_columns_alone<D: PscDevice>(dev: &D) {
    let p = problem(Element::P1, 4, 3, 16);
    let n = p.stiffness.nrows();
    let hard = [2, 9, 13];
    let mut rhs = p.rhs.clone();
    let cholesky = CholeskySolver::factor(&p.stiffness).unwrap();
    let mut reference = Vec::new();
    for (c, column) in rhs.chunks_mut(n).enumerate() {
        if hard.contains(&c) {
            // Loads without the manufactured modes' symmetries.
            for (i, v) in column.iter_mut().enumerate() {
                *v = ((i * (c + 3)) as f64 * 0.7311).sin();
            }
        } else {
            column.iter_mut().for_each(|v| *v *= 1e-3);
        }
        reference.extend(cholesky.solve(column));
    }
    let norms: Vec<f64> = rhs.chunks(n).map(tensorfem::numeric::nrm2).collect();
    let params = PscIrParams {
        rtol: 1e-12,
        atol: 1e-7 * norms.iter().cloned().fold(0.0, f64::max),
        max_iterations: 20,
    };
    let setup = p.setup(PscMethod::M1);
    let solve = |rhs: &[f64], nrhs: usize| {
        let mut op = PscOperator::new(dev, &setup, Precision::F32, Coupling::default()).unwrap();
        let per_column = op.flops_per_rhs();
        op.set_inner_cg(InnerCg::inner(Precision::F32, None));
        let mut ir = PscIr::new(dev, op, &p.stiffness, nrhs, params.max_iterations).unwrap();
        let (info, x) = dev.run(|| ir.solve_from_zero(rhs, params)).unwrap();
        let counts = ir.operator_mut().take_counts();
        (info, x, counts.flops / per_column)
    };
    let (info, x, columns_applied) = solve(&rhs, 16);
    let steps = &info.iterations;
    for c in 0..16 {
        let expected = if hard.contains(&c) { 2..100 } else { 1..2 };
        assert!(expected.contains(&steps[c]), "column {c}: steps {steps:?}");
    }
    // Step 1 on all 16 columns, each later one on its active columns in a block 4 wide.
    let hard_steps = info.steps();
    assert_eq!(
        columns_applied,
        (16 + 4 * (hard_steps - 1)) as f64,
        "the first step applies to 16 columns, the later ones to 4: steps {steps:?}"
    );
    let mut ax = vec![0.0; n];
    for (c, (xc, bc)) in x.chunks(n).zip(rhs.chunks(n)).enumerate() {
        tensorfem::sparse::spmv(&p.stiffness, xc, &mut ax);
        let r = ax
            .iter()
            .zip(bc)
            .map(|(a, b)| (b - a).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!(
            r <= params.rtol * norms[c] || r <= params.atol,
            "column {c}: ‖b − A x‖₂ = {r:.3e}, ‖b‖₂ = {:.3e}",
            norms[c]
        );
    }
    let pick = |block: &[f64]| -> Vec<f64> {
        hard.iter()
            .flat_map(|&c| block[c * n..(c + 1) * n].iter().copied())
            .collect()
    };
    let (hard_x, hard_reference) = (pick(&x), pick(&reference));
    let reference_error = max_relative_difference(&hard_x, &hard_reference, n);
    assert!(
        reference_error < 1e-8,
        "against Cholesky: {reference_error:.3e}"
    );
    let (alone_info, alone_x, alone_applied) = solve(&pick(&rhs), 3);
    assert_eq!(alone_info.steps(), hard_steps);
    let alone_columns: usize = alone_info.iterations.iter().sum();
    assert!(
        alone_applied >= alone_columns as f64,
        "3 columns: never narrowed ({alone_applied} columns applied)"
    );
    let difference = max_relative_difference(&hard_x, &alone_x, n);
    assert!(difference < 1e-9, "narrow against whole: {difference:.3e}");
}

device_tests!(
    cuda: methods_match_the_reference_in_every_precision,
    refinement_solves_few_unconverged_columns_alone,
    m3_iterations_follow_the_condition_number,
    unrepresentable_operators_and_unconverged_cg_are_refused,
);

/// A device that inverts on the host the way a GPU hands its result back: only the lower
/// triangle of (A − GᵀG)⁻¹ (the strict upper one garbage), or a refused pivot. It counts
/// the calls and the Gram factors it was given.
struct LowerOnly {
    calls: std::cell::Cell<(usize, usize)>,
    refuse: bool,
}

impl tensorfem::device::DenseInverse for LowerOnly {
    fn spd_inverse(
        &self,
        a: &mut faer::Mat<f64>,
        gram: Option<&faer::Mat<f64>>,
    ) -> tensorfem::error::Result<tensorfem::device::Inverted> {
        let (calls, grams) = self.calls.get();
        self.calls
            .set((calls + 1, grams + usize::from(gram.is_some())));
        if self.refuse {
            return Ok(tensorfem::device::Inverted::NotPositiveDefinite { index: 7 });
        }
        let mut inverse = match gram {
            Some(g) => &*a - g.transpose() * g,
            None => a.clone(),
        };
        tensorfem::linalg::spd_inverse_in_place(&mut inverse).unwrap();
        let n = a.nrows();
        for j in 0..n {
            for i in 0..n {
                a[(i, j)] = if i >= j { inverse[(i, j)] } else { f64::NAN };
            }
        }
        Ok(tensorfem::device::Inverted::Done)
    }
}

/// The set-up hands Π = Λ − BᵀB (M1: Λ with B as the Gram factor) and Λ (M2) to the
/// device's inversion and mirrors the lower triangle it gets back: the operators equal
/// the host's; a refused pivot is an error naming the matrix.
#[test]
fn setup_inverts_on_the_device_it_is_given() {
    for (method, grams) in [(PscMethod::M1, 1), (PscMethod::M2, 0)] {
        let device = LowerOnly {
            calls: std::cell::Cell::new((0, 0)),
            refuse: false,
        };
        let on_device = PscSetup::new_inverting_on(Element::Q1, 4, 3, method, &device).unwrap();
        assert_eq!(device.calls.get(), (1, grams), "{method}");
        let on_host = PscSetup::new(Element::Q1, 4, 3, method).unwrap();
        let p = problem(Element::Q1, 4, 3, 3);
        let n = p.stiffness.nrows();
        let (x_device, _) = solve_alone(
            &Cpu::new(),
            &on_device,
            (Precision::F64, Coupling::default()),
            &p,
            1e-12,
        );
        let (x_host, _) = solve_alone(
            &Cpu::new(),
            &on_host,
            (Precision::F64, Coupling::default()),
            &p,
            1e-12,
        );
        let d = max_relative_difference(&x_device, &x_host, n);
        assert!(
            d < 1e-13,
            "{method}: set-ups inverted apart differ by {d:e}"
        );
        if method == PscMethod::M1 {
            let (a, b) = (on_device.pi_inv().unwrap(), on_host.pi_inv().unwrap());
            assert!((a - b).norm_max() <= 1e-13 * b.norm_max(), "Π⁻¹ mirrored");
        }
    }
    let refusing = LowerOnly {
        calls: std::cell::Cell::new((0, 0)),
        refuse: true,
    };
    let message = PscSetup::new_inverting_on(Element::Q1, 4, 3, PscMethod::M1, &refusing)
        .err()
        .expect("a refused pivot")
        .to_string();
    assert!(
        message.contains("Cholesky of Π") && message.contains("pivot 7"),
        "{message}"
    );
}
