//! Discretisation checks against the manufactured solution (docs/mathematics.md §1, §8.4):
//! the L2 error of the reference solve decreases as O(h²) for Q1 and P1 in 2D and Q1 in 3D.

use tensorfem::fem::{assemble_poisson, l2_error, nodal_l2_error, Manufactured};
use tensorfem::mesh::{unit_cube, unit_square, Element, Mesh};
use tensorfem::numeric::nrm2;
use tensorfem::reference::CholeskySolver;
use tensorfem::sparse;

struct Errors {
    l2: f64,
    nodal: f64,
    relative_residual: f64,
}

fn solve<const D: usize>(mesh: &Mesh<D>, k: u32) -> Errors {
    let m = Manufactured::new(k, D);
    let sys = assemble_poisson(mesh, |x| m.f(x)).unwrap();
    let u = CholeskySolver::factor(&sys.matrix).unwrap().solve(&sys.rhs);
    let mut r = vec![0.0; u.len()];
    sparse::residual(&sys.matrix, &sys.rhs, &u, &mut r);
    Errors {
        l2: l2_error(mesh, &sys.dofs, &u, |x| m.u(x)),
        nodal: nodal_l2_error(mesh, &sys.dofs, &u, |x| m.u(x)),
        relative_residual: nrm2(&r) / nrm2(&sys.rhs),
    }
}

/// Observed rates log2(e_h / e_{h/2}) over successive refinements.
fn rates(errors: &[f64]) -> Vec<f64> {
    errors.windows(2).map(|w| (w[0] / w[1]).log2()).collect()
}

fn assert_second_order(what: &str, errors: &[f64]) {
    let r = rates(errors);
    println!("{what}: errors {errors:.3?}, rates {r:.3?}");
    assert!(r.len() >= 3, "need at least three refinements");
    for rate in r {
        assert!(
            (1.9..=2.1).contains(&rate),
            "{what}: rate {rate:.3} outside [1.9, 2.1] (errors {errors:?})"
        );
    }
}

#[test]
fn q1_and_p1_converge_at_second_order() {
    for element in [Element::Q1, Element::P1] {
        for k in [1, 3] {
            let runs: Vec<Errors> = [16, 32, 64, 128, 256]
                .iter()
                .map(|&n| solve(&unit_square(n, element).unwrap(), k))
                .collect();
            for e in &runs {
                assert!(
                    e.relative_residual < 1e-11,
                    "residual {}",
                    e.relative_residual
                );
            }
            let l2: Vec<f64> = runs.iter().map(|e| e.l2).collect();
            let nodal: Vec<f64> = runs.iter().map(|e| e.nodal).collect();
            assert_second_order(&format!("{element:?} k={k} L2"), &l2);
            assert_second_order(&format!("{element:?} k={k} nodal L2"), &nodal);
        }
    }
}

#[test]
fn q1_hex_converges_at_second_order() {
    let runs: Vec<Errors> = [4, 8, 16, 32]
        .iter()
        .map(|&n| solve(&unit_cube(n).unwrap(), 1))
        .collect();
    let l2: Vec<f64> = runs.iter().map(|e| e.l2).collect();
    let nodal: Vec<f64> = runs.iter().map(|e| e.nodal).collect();
    assert_second_order("Q1 hex L2", &l2);
    assert_second_order("Q1 hex nodal L2", &nodal);
}

/// The L2 error is measured independently of the solver: the nodal interpolant of u has
/// an O(h²) error of its own, and the FE solution's error is comparable to it.
#[test]
fn solution_error_is_comparable_to_interpolation_error() {
    let n = 64;
    let mesh = unit_square(n, Element::Q1).unwrap();
    let m = Manufactured::new(1, 2);
    let sys = assemble_poisson(&mesh, |x| m.f(x)).unwrap();
    let interpolant: Vec<f64> = sys
        .dofs
        .node_of_dof
        .iter()
        .map(|&v| m.u(&mesh.coords[v as usize]))
        .collect();
    let interpolation_error = l2_error(&mesh, &sys.dofs, &interpolant, |x| m.u(x));
    let e = solve(&mesh, 1);
    assert!(interpolation_error > 0.0);
    let ratio = e.l2 / interpolation_error;
    assert!(
        (0.5..3.0).contains(&ratio),
        "solution / interpolation error = {ratio}"
    );
    // The interpolant is exact at the nodes: its nodal error is zero.
    assert!(nodal_l2_error(&mesh, &sys.dofs, &interpolant, |x| m.u(x)) == 0.0);
}
