//! Boundary conditions per boundary part: manufactured solutions whose Neumann data are
//! their normal derivatives converge at O(h²) in L2 (mixed and pure Neumann, the flow
//! around a square, the Gmsh channel and the unit square), pure Neumann solutions do not
//! depend on the pinned node, incompatible pure Neumann data are refused, and PSC and
//! multigrid solve the same systems as the sparse Cholesky reference.

mod common;

use common::channel;
use tensorfem::device::{Block, Cpu, Layout};
use tensorfem::fem::{
    assemble_poisson, boundary_load, l2_error, nodal_solution, BoundaryData, Condition, Conditions,
    Dofs,
};
use tensorfem::linalg::LinOp;
use tensorfem::mesh::{refine, unit_square_refined, CoarseMesh, Mesh2d};
use tensorfem::mg::{random_initial_guess, MgParams, Multigrid, Smoother, StopParams, Variant};
use tensorfem::precision::Precision;
use tensorfem::psc::{Coupling, PscMethod, PscOperator, PscSetup};
use tensorfem::reference::CholeskySolver;

/// u = sin(πx/4 + 0.3) cosh(y): −Δu = ((π/4)² − 1) u.
fn u(x: [f64; 2]) -> f64 {
    (std::f64::consts::FRAC_PI_4 * x[0] + 0.3).sin() * x[1].cosh()
}

fn f(x: &[f64]) -> f64 {
    let k = std::f64::consts::FRAC_PI_4;
    (k * k - 1.0) * u([x[0], x[1]])
}

fn grad_u(x: [f64; 2]) -> [f64; 2] {
    let k = std::f64::consts::FRAC_PI_4;
    let a = k * x[0] + 0.3;
    [k * a.cos() * x[1].cosh(), a.sin() * x[1].sinh()]
}

fn exact_data() -> BoundaryData<'static> {
    BoundaryData {
        dirichlet: &|_, x| u(x),
        neumann: &|_, x, n| {
            let g = grad_u(x);
            g[0] * n[0] + g[1] * n[1]
        },
    }
}

/// Solves with the conditions applied (sparse Cholesky) and returns the nodal solution and
/// the unknowns' system.
fn solve(mesh: &mut Mesh2d, conditions: &Conditions) -> (Vec<f64>, Dofs) {
    conditions.apply(mesh).unwrap();
    let system = assemble_poisson(mesh, |_| 0.0).unwrap();
    let data = exact_data();
    let b = boundary_load(mesh, &system.dofs, conditions, f, &data).unwrap();
    let x = CholeskySolver::factor(&system.matrix).unwrap().solve(&b);
    let nodal = nodal_solution(mesh, &system.dofs, conditions, &data, &x);
    (nodal, system.dofs)
}

fn all_nodes(mesh: &Mesh2d) -> Dofs {
    Dofs::from_boundary(&vec![false; mesh.num_nodes()])
}

/// L2 errors on `levels` and their rates, with u shifted to mean zero for pure Neumann
/// problems.
fn rates(
    coarse: &CoarseMesh,
    levels: std::ops::RangeInclusive<usize>,
    conditions: &dyn Fn(&Mesh2d) -> Conditions,
) -> Vec<f64> {
    let errors: Vec<f64> = levels
        .map(|levels| {
            let mut mesh = refine(coarse, levels).unwrap();
            let conditions = conditions(&mesh);
            let (nodal, _) = solve(&mut mesh, &conditions);
            let all = all_nodes(&mesh);
            // A pure Neumann solution has mean zero: compare with u minus its mean.
            let shift = if conditions.is_pure_neumann() {
                let area = l2_error(&mesh, &all, &vec![0.0; mesh.num_nodes()], |_| 1.0).powi(2);
                integral_of_u(&mesh) / area
            } else {
                0.0
            };
            l2_error(&mesh, &all, &nodal, |x| u([x[0], x[1]]) - shift)
        })
        .collect();
    errors.windows(2).map(|e| (e[0] / e[1]).log2()).collect()
}

/// ∫ u over the mesh's domain by the error's quadrature: ‖u + 1‖² − ‖u‖² − ‖1‖² = 2∫u.
fn integral_of_u(mesh: &Mesh2d) -> f64 {
    let all = all_nodes(mesh);
    let zero = vec![0.0; mesh.num_nodes()];
    let plus = l2_error(mesh, &all, &zero, |x| u([x[0], x[1]]) + 1.0).powi(2);
    let uu = l2_error(mesh, &all, &zero, |x| u([x[0], x[1]])).powi(2);
    let one = l2_error(mesh, &all, &zero, |_| 1.0).powi(2);
    (plus - uu - one) / 2.0
}

fn conditions_by_name(mesh: &Mesh2d, neumann: &[&str]) -> Conditions {
    Conditions(
        mesh.boundary
            .names
            .iter()
            .map(|name| {
                if neumann.contains(&name.as_str()) {
                    Condition::Neumann
                } else {
                    Condition::Dirichlet
                }
            })
            .collect(),
    )
}

#[test]
fn mixed_and_pure_neumann_converge_at_second_order() {
    let flow = CoarseMesh::flow_around_square();
    let square = CoarseMesh::unit_square(2, tensorfem::mesh::Element::Q1).unwrap();
    let channel = channel();
    for (name, coarse, levels, neumann) in [
        (
            "flow around a square, Dirichlet outflow",
            &flow,
            3..=5,
            &["inflow", "walls", "obstacle"][..],
        ),
        (
            "flow around a square, pure Neumann",
            &flow,
            3..=5,
            &["inflow", "outflow", "walls", "obstacle"],
        ),
        (
            "unit square q1, Neumann left and top",
            &square,
            3..=5,
            &["left", "top"],
        ),
        (
            "unit square q1, pure Neumann",
            &square,
            3..=5,
            &["left", "right", "bottom", "top"],
        ),
        // The Gmsh channel (318 triangles, h ≈ 0.03 … 0.05) from level 1.
        (
            "Gmsh channel, Dirichlet outflow",
            &channel,
            1..=3,
            &["inflow", "walls", "obstacle"],
        ),
        (
            "Gmsh channel, pure Neumann",
            &channel,
            1..=3,
            &["inflow", "outflow", "walls", "obstacle"],
        ),
    ] {
        let rates = rates(coarse, levels, &|mesh| conditions_by_name(mesh, neumann));
        println!("{name}: L2 rates {rates:?}");
        for r in rates {
            assert!((1.85..2.2).contains(&r), "{name}: rate {r}");
        }
    }
}

/// Pinning another node changes the unknowns but not the mean-zero solution.
#[test]
fn the_pure_neumann_solution_does_not_depend_on_the_pinned_node() {
    let coarse = CoarseMesh::flow_around_square();
    let mut mesh = refine(&coarse, 3).unwrap();
    let conditions = conditions_by_name(&mesh, &["inflow", "outflow", "walls", "obstacle"]);
    let (pinned_at_0, _) = solve(&mut mesh, &conditions);
    // The same problem with node 5 pinned instead, solved by hand.
    let mut other = mesh.clone();
    other.on_boundary.iter_mut().for_each(|b| *b = false);
    other.on_boundary[5] = true;
    let system = assemble_poisson(&other, |_| 0.0).unwrap();
    let data = exact_data();
    // The load on node 0's system, moved to node 5's unknowns.
    let full = boundary_load(&mesh, &all_nodes(&mesh), &conditions, f, &data);
    assert!(full.is_ok());
    let b_all = full.unwrap();
    let b: Vec<f64> = system
        .dofs
        .node_of_dof
        .iter()
        .map(|&n| b_all[n as usize])
        .collect();
    let x = CholeskySolver::factor(&system.matrix).unwrap().solve(&b);
    let shifted = nodal_solution(&mesh, &system.dofs, &conditions, &data, &x);
    let diff = pinned_at_0
        .iter()
        .zip(&shifted)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff < 1e-10, "{diff:e}");
}

#[test]
fn incompatible_pure_neumann_data_are_refused() {
    let mut mesh = refine(&CoarseMesh::flow_around_square(), 2).unwrap();
    let conditions = conditions_by_name(&mesh, &["inflow", "outflow", "walls", "obstacle"]);
    conditions.apply(&mut mesh).unwrap();
    let system = assemble_poisson(&mesh, |_| 0.0).unwrap();
    let data = BoundaryData {
        dirichlet: &|_, _| 0.0,
        neumann: &|_, _, _| 1.0, // outflow everywhere, no source: no solution
    };
    let err = boundary_load(&mesh, &system.dofs, &conditions, |_| 0.0, &data)
        .unwrap_err()
        .to_string();
    assert!(err.contains("incompatible"), "{err}");
    let wrong = Conditions(vec![Condition::Neumann; 2]).apply(&mut mesh);
    assert!(wrong.unwrap_err().to_string().contains("4 boundary parts"));
}

/// Meshes and their Neumann parts for the solver comparisons: the flow around a square
/// (mixed on macro elements refined once, pure Neumann, Dirichlet), the unit square (where
/// PSC's grid transform gives way to the level rows) and the Gmsh channel (mixed, pure
/// Neumann, Dirichlet).
fn solver_cases() -> Vec<(Mesh2d, &'static [&'static str])> {
    vec![
        (
            refine(&CoarseMesh::flow_around_square().refined(1).unwrap(), 2).unwrap(),
            &["inflow", "walls", "obstacle"][..],
        ),
        (
            refine(&CoarseMesh::flow_around_square(), 3).unwrap(),
            &["inflow", "outflow", "walls", "obstacle"],
        ),
        (
            unit_square_refined(4, 3, tensorfem::mesh::Element::Q1).unwrap(),
            &["left", "top"],
        ),
        (
            unit_square_refined(4, 3, tensorfem::mesh::Element::P1).unwrap(),
            &["left", "right", "bottom", "top"],
        ),
        (
            refine(&channel(), 2).unwrap(),
            &["inflow", "walls", "obstacle"],
        ),
        (
            refine(&channel(), 2).unwrap(),
            &["inflow", "outflow", "walls", "obstacle"],
        ),
        (refine(&CoarseMesh::flow_around_square(), 3).unwrap(), &[]),
        (refine(&channel(), 2).unwrap(), &[]),
    ]
}

/// ‖x − r‖₂ / ‖r‖₂.
fn relative_difference(x: &[f64], reference: &[f64]) -> f64 {
    let diff: f64 = x.iter().zip(reference).map(|(a, r)| (a - r).powi(2)).sum();
    (diff / reference.iter().map(|r| r * r).sum::<f64>()).sqrt()
}

/// PSC (M1, M2 and M3 in f64, both couplings) on Dirichlet, mixed and pure Neumann
/// conditions solves what the sparse Cholesky solves.
#[test]
fn psc_matches_cholesky_with_every_kind_of_condition() {
    let dev = Cpu::new();
    for (mut mesh, neumann) in solver_cases() {
        let conditions = conditions_by_name(&mesh, neumann);
        conditions.apply(&mut mesh).unwrap();
        let system = assemble_poisson(&mesh, |_| 0.0).unwrap();
        let b = boundary_load(&mesh, &system.dofs, &conditions, f, &exact_data()).unwrap();
        let reference = CholeskySolver::factor(&system.matrix).unwrap().solve(&b);
        for method in PscMethod::ALL {
            let setup = PscSetup::on_mesh(mesh.clone(), method).unwrap();
            for coupling in Coupling::ALL {
                let mut op = PscOperator::new(&dev, &setup, Precision::F64, coupling).unwrap();
                let n = reference.len();
                let bb = Block::from_f64(&dev, &b, n, 1, Precision::F64, Layout::ColMajor).unwrap();
                let mut x = Block::zeros(&dev, n, 1, Precision::F64, Layout::ColMajor).unwrap();
                op.apply(&bb, &mut x).unwrap();
                let err = relative_difference(&x.to_f64(&dev).unwrap(), &reference);
                println!(
                    "{neumann:?}: {method} ({coupling}) f64 vs Cholesky {err:.2e} ({} CG iterations)",
                    op.last_iterations()
                );
                assert!(err < 1e-10, "{neumann:?}: {method} {coupling} {err:e}");
            }
        }
    }
}

/// Multigrid along the meshes' hierarchies (Galerkin coarse levels down to the coarse
/// mesh; pure Neumann on the singular system of every node) solves what the sparse
/// Cholesky solves, in f64 and with f16 coarse levels (DSH_MG), plain and accelerated by
/// flexible CG, in a bounded number of steps.
#[test]
fn multigrid_matches_cholesky_with_every_kind_of_condition() {
    let dev = Cpu::new();
    let stop = StopParams {
        rtol: 1e-12,
        atol: 0.0,
        max_iterations: 200,
    };
    // The flow around a square's ring of obtuse (143°) triangles slows the point smoother
    // down; the other meshes converge like the unit square.
    // Flexible CG around the cycle cuts the steps to a third to a half.
    let bounds = [
        (60, 25),
        (90, 30),
        (25, 12),
        (25, 15),
        (25, 12),
        (25, 12),
        (60, 20),
        (25, 12),
    ];
    for ((mut mesh, neumann), (bound, krylov_bound)) in solver_cases().into_iter().zip(bounds) {
        let conditions = conditions_by_name(&mesh, neumann);
        conditions.apply(&mut mesh).unwrap();
        let system = assemble_poisson(&mesh, |_| 0.0).unwrap();
        let b = boundary_load(&mesh, &system.dofs, &conditions, f, &exact_data()).unwrap();
        let reference = CholeskySolver::factor(&system.matrix).unwrap().solve(&b);
        let levels = mesh.hierarchy.as_ref().unwrap().levels + 1;
        let runs = [Variant::DMg, Variant::DshMg].map(|v| [(v, false), (v, true)]);
        for (variant, krylov) in runs.into_iter().flatten() {
            let params = MgParams {
                schedule: variant.schedule(levels),
                smoother: Smoother::JACOBI,
                base_tolerance: 1e-4,
                residual_scaling: true,
                storage: tensorfem::device::MatrixStorage::default(),
            };
            let (mut mg, embedding) = Multigrid::on_mesh(
                &dev,
                &mesh,
                &system.matrix,
                params,
                conditions.is_pure_neumann(),
            )
            .unwrap();
            assert_eq!(embedding.is_some(), conditions.is_pure_neumann());
            mg.set_krylov(krylov);
            let (rhs, n) = match &embedding {
                Some(e) => (e.embed(&b, 1), mesh.num_nodes()),
                None => (b.clone(), b.len()),
            };
            let mut u = random_initial_guess(n, 3);
            let info = mg.solve_refined(&rhs, &mut u, 1, stop).unwrap();
            if let Some(e) = &embedding {
                u = e.extract(&u);
            }
            let err = relative_difference(&u, &reference);
            let steps = info.iterations[0];
            println!(
                "{neumann:?} {variant:?} krylov {krylov}: {levels} levels, {steps} steps, vs Cholesky {err:.2e}"
            );
            assert!(err < 1e-9, "{neumann:?} {variant:?}: {err:e}");
            let bound = if krylov { krylov_bound } else { bound };
            assert!(
                steps <= bound,
                "{neumann:?} {variant:?} krylov {krylov}: {steps} steps"
            );
        }
    }
}
