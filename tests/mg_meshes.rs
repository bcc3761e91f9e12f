//! Multigrid on refined meshes' hierarchies (flow around a square, a Gmsh channel, the
//! unit square): the hierarchy's prolongations are the nodal interpolation (exact on
//! linear functions, equal to the unit square's bilinear grid transfer), the Galerkin
//! coarse matrices are the coarse meshes' own stiffness matrices, and pure Neumann
//! problems converge in as few steps on fine meshes as on coarse ones. The solves against
//! the sparse Cholesky reference are in `tests/boundary.rs`.

mod common;

use common::channel;
use tensorfem::device::{Cpu, GridShape, MultigridDevice};
use tensorfem::device_tests;
use tensorfem::fem::assemble_poisson;
use tensorfem::mesh::{
    refine, unit_square_refined, CoarseMesh, Condition, Conditions, Element, Mesh2d,
};
use tensorfem::mg::{
    galerkin_product, hierarchy, random_initial_guess, MgParams, Multigrid, Smoother, StopParams,
    Variant,
};
use tensorfem::precision::Precision;
use tensorfem::sparse::SparseRows;

/// The flow around a square refined `levels` times with `conditions` applied.
fn flow(levels: usize, conditions: &[Condition]) -> Mesh2d {
    let mut mesh = refine(&CoarseMesh::flow_around_square(), levels).unwrap();
    Conditions(conditions.to_vec()).apply(&mut mesh).unwrap();
    mesh
}

/// Unknowns of a mesh with their coordinates, in node order.
fn unknown_coords(mesh: &Mesh2d) -> Vec<[f64; 2]> {
    (0..mesh.num_nodes())
        .filter(|&i| !mesh.on_boundary[i])
        .map(|i| mesh.coords[i])
        .collect()
}

#[test]
fn galerkin_coarse_matrices_are_the_coarse_meshes_stiffness() {
    use Condition::*;
    let mixed = [Neumann, Dirichlet, Neumann, Neumann];
    for conditions in [[Dirichlet; 4], mixed] {
        let fine = flow(3, &conditions);
        let ps = hierarchy::prolongations(&fine, 3).unwrap();
        let mut a = assemble_poisson(&fine, |_| 0.0).unwrap().matrix;
        for (k, p) in ps.iter().enumerate() {
            a = galerkin_product(p, &a).unwrap();
            let coarse = flow(2 - k, &conditions);
            let direct = assemble_poisson(&coarse, |_| 0.0).unwrap().matrix;
            assert_eq!(a.nrows(), direct.nrows());
            // Level unknowns in the fine mesh's node order against the coarse mesh's own.
            let level_coords: Vec<[f64; 2]> = {
                let h = fine.hierarchy.as_ref().unwrap();
                (0..fine.num_nodes())
                    .filter(|&i| !fine.on_boundary[i] && h.level[i] as usize <= 2 - k)
                    .map(|i| fine.coords[i])
                    .collect()
            };
            let own = unknown_coords(&coarse);
            let position = |x: [f64; 2]| {
                own.iter()
                    .position(|y| (x[0] - y[0]).abs() + (x[1] - y[1]).abs() < 1e-12)
                    .expect("a level node is a node of the coarse mesh")
            };
            let map: Vec<usize> = level_coords.iter().map(|&x| position(x)).collect();
            let (ad, dd) = (a.to_dense_f64(), direct.to_dense_f64());
            let n = a.nrows();
            for i in 0..n {
                for j in 0..n {
                    let (g, d) = (ad[i + j * n], dd[map[i] + map[j] * n]);
                    assert!(
                        (g - d).abs() < 1e-12,
                        "{conditions:?} level {}: entry ({i}, {j}) Galerkin {g}, assembled {d}",
                        2 - k
                    );
                }
            }
        }
    }
}

/// Nodal values of a linear function on a level: P of the coarser level's equals the
/// finer level's (every node an unknown, so nothing is dropped).
#[test]
fn prolongations_reproduce_linear_functions() {
    let linear = |x: [f64; 2]| 1.0 + 2.0 * x[0] - 3.0 * x[1];
    for coarse in [CoarseMesh::flow_around_square(), channel()] {
        let mut mesh = refine(&coarse, 3).unwrap();
        mesh.on_boundary = vec![false; mesh.num_nodes()];
        let h = mesh.hierarchy.clone().unwrap();
        let values = |level: usize| -> Vec<f64> {
            (0..mesh.num_nodes())
                .filter(|&i| h.level[i] as usize <= level)
                .map(|i| linear(mesh.coords[i]))
                .collect()
        };
        for (k, p) in hierarchy::prolongations(&mesh, 4)
            .unwrap()
            .iter()
            .enumerate()
        {
            let (fine, coarse) = (values(3 - k), values(2 - k));
            for (r, &expected) in fine.iter().enumerate() {
                let (cols, weights) = p.row(r);
                let v: f64 = cols
                    .iter()
                    .zip(weights)
                    .map(|(&c, w)| w * coarse[c as usize])
                    .sum();
                assert!((v - expected).abs() < 1e-13, "level {}: row {r}", 3 - k);
            }
        }
    }
}

/// On the unit square, the hierarchy's prolongation (Dirichlet nodes dropped) is the
/// bilinear grid transfer the structured multigrid uses, entry by entry.
#[test]
fn the_unit_squares_hierarchy_gives_the_grid_transfer() {
    let dev = Cpu::new();
    let mesh = unit_square_refined(4, 2, Element::Q1).unwrap();
    let ps = hierarchy::prolongations(&mesh, 3).unwrap();
    for (k, p) in ps.iter().enumerate() {
        let fine = GridShape {
            dim: 2,
            m: (16 >> k) - 1,
        };
        let coarse = fine.coarse();
        assert_eq!((p.nrows(), p.ncols()), (fine.points(), coarse.points()));
        let grid = common::grid_prolongation(&dev, fine, coarse);
        for (e, (h, g)) in p.to_dense_f64().iter().zip(&grid).enumerate() {
            let (i, j) = (e % fine.points(), e / fine.points());
            assert_eq!(h, g, "level {k}: entry ({i}, {j})");
        }
    }
}

/// Refinement steps of multigrid (DSH_MG down to the coarse mesh, `smoother`) to a
/// relative residual of 1e-10 of the pinned (or Dirichlet) system, checked independently.
fn multigrid_steps<D: MultigridDevice>(
    dev: &D,
    mesh: &mut Mesh2d,
    conditions: &Conditions,
    smoother: Smoother,
) -> usize {
    conditions.apply(mesh).unwrap();
    let system = assemble_poisson(mesh, |_| 0.0).unwrap();
    let n = system.matrix.nrows();
    // Any right-hand side: the pinned system has a solution for every one.
    let b: Vec<f64> = (0..n)
        .map(|i| ((i * 7919) % 113) as f64 / 113.0 - 0.5)
        .collect();
    let levels = mesh.hierarchy.as_ref().unwrap().levels + 1;
    let params = MgParams {
        schedule: Variant::DshMg.schedule(levels),
        smoother,
        base_tolerance: 1e-4,
        residual_scaling: true,
        storage: tensorfem::device::MatrixStorage::default(),
    };
    let pure_neumann = conditions.is_pure_neumann();
    let (mut mg, embedding) =
        Multigrid::on_mesh(dev, mesh, &system.matrix, params, pure_neumann).unwrap();
    let (rhs, unknowns) = match &embedding {
        Some(e) => (e.embed(&b, 1), mesh.num_nodes()),
        None => (b.clone(), n),
    };
    let mut u = random_initial_guess(unknowns, 1);
    let stop = StopParams {
        rtol: 1e-10,
        atol: 0.0,
        max_iterations: 100,
    };
    let info = dev.run(|| mg.solve_refined(&rhs, &mut u, 1, stop)).unwrap();
    if let Some(e) = &embedding {
        u = e.extract(&u);
    }
    let mut au = vec![0.0; n];
    tensorfem::sparse::spmv::<f64>(&system.matrix, &u, &mut au);
    let r: f64 = au
        .iter()
        .zip(&b)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        .sqrt();
    let b_norm = b.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!(r <= 1e-9 * b_norm, "residual {r:e}");
    info.iterations[0]
}

/// Pure Neumann on the Gmsh channel: multigrid on the singular system of every node (f16
/// coarse levels included) needs about as many refinement steps as the same mesh with a
/// Dirichlet outflow, level after level, with point Jacobi and with block Chebyshev
/// smoothing (whose blocks on singular levels must stay invertible).
fn pure_neumann_multigrid_converges_like_a_mixed_problem<D: MultigridDevice>(dev: &D) {
    use Condition::*;
    let coarse = channel();
    for smoother in [Smoother::JACOBI, Smoother::BLOCK_CHEBYSHEV] {
        for levels in 1..=3 {
            let mesh = refine(&coarse, levels).unwrap();
            // Parts: inflow, outflow, walls, obstacle.
            let pure = multigrid_steps(
                dev,
                &mut mesh.clone(),
                &Conditions(vec![Neumann; 4]),
                smoother,
            );
            let mixed = multigrid_steps(
                dev,
                &mut mesh.clone(),
                &Conditions(vec![Neumann, Dirichlet, Neumann, Neumann]),
                smoother,
            );
            println!(
                "channel, {levels} levels, {smoother:?}: pure Neumann {pure} steps, mixed {mixed}"
            );
            assert!(
                pure <= mixed + 2 && pure <= 20,
                "{levels} levels, {smoother:?}: {pure} vs {mixed}"
            );
        }
    }
}

/// Largest |i − j| over the stored entries.
fn bandwidth(a: &tensorfem::sparse::Csr<f64>) -> usize {
    (0..a.nrows())
        .flat_map(|r| a.row(r).0.iter().map(move |&c| (c as usize).abs_diff(r)))
        .max()
        .unwrap_or(0)
}

/// A refined mesh numbers nodes by coarse entity, so neighbours lie far apart; the
/// hierarchy's own order (reverse Cuthill–McKee) brings them within a narrow band, which
/// the row-chunked kernels need to run in parallel.
#[test]
fn the_hierarchy_orders_a_refined_mesh_into_a_narrow_band() {
    let mesh = flow(5, &[Condition::Dirichlet; 4]);
    let a = assemble_poisson(&mesh, |_| 0.0).unwrap().matrix;
    let ps = hierarchy::prolongations(&mesh, 3).unwrap();
    let params = MgParams {
        schedule: vec![Precision::F64; 3],
        smoother: Smoother::JACOBI,
        base_tolerance: 1e-4,
        residual_scaling: true,
        storage: tensorfem::device::MatrixStorage::default(),
    };
    let dev = Cpu::new();
    let mg = Multigrid::galerkin(&dev, &a, &ps, params, tensorfem::mg::NullSpace::None).unwrap();
    let order = mg.order().unwrap();
    let ordered = tensorfem::sparse::ordering::permute(&a, order, order).unwrap();
    let n = a.nrows();
    println!(
        "bandwidth {} → {} of {n} unknowns",
        bandwidth(&a),
        bandwidth(&ordered)
    );
    assert!(bandwidth(&a) > n / 2);
    assert!(bandwidth(&ordered) < n / 20);
}

/// Flexible CG around the cycle on a block whose columns differ: each column stops on its
/// own (a zero column at once, a scaled copy in as many steps as the original) and agrees
/// with the sparse Cholesky solution.
fn flexible_cg_solves_every_column_of_a_block_on_its_own<D: MultigridDevice>(dev: &D) {
    use tensorfem::reference::CholeskySolver;
    let mesh = flow(
        4,
        &[
            Condition::Neumann,
            Condition::Dirichlet,
            Condition::Neumann,
            Condition::Neumann,
        ],
    );
    let a = assemble_poisson(&mesh, |_| 0.0).unwrap().matrix;
    let n = a.nrows();
    let column: Vec<f64> = (0..n)
        .map(|i| ((i * 7919) % 113) as f64 / 113.0 - 0.5)
        .collect();
    // Columns: b, 0, 1e3·b.
    let b: Vec<f64> = column
        .iter()
        .copied()
        .chain(std::iter::repeat_n(0.0, n))
        .chain(column.iter().map(|v| 1e3 * v))
        .collect();
    let params = MgParams {
        schedule: Variant::DshMg.schedule(5),
        smoother: Smoother::JACOBI,
        base_tolerance: 1e-4,
        residual_scaling: true,
        storage: tensorfem::device::MatrixStorage::default(),
    };
    let (mut mg, _) = Multigrid::on_mesh(dev, &mesh, &a, params, false).unwrap();
    mg.set_krylov(true);
    let mut u: Vec<f64> = (0..3).flat_map(|c| random_initial_guess(n, c)).collect();
    // The zero column starts from zero: it is solved before the first step.
    u[n..2 * n].iter_mut().for_each(|v| *v = 0.0);
    let stop = StopParams {
        rtol: 1e-11,
        atol: 0.0,
        max_iterations: 60,
    };
    let info = dev.run(|| mg.solve_refined(&b, &mut u, 3, stop)).unwrap();
    println!("steps per column: {:?}", info.iterations);
    assert_eq!(info.iterations[1], 0);
    assert!(
        info.iterations[0].abs_diff(info.iterations[2]) <= 1,
        "{:?}",
        info.iterations
    );
    let reference = CholeskySolver::factor(&a).unwrap().solve(&column);
    for (c, scale) in [(0, 1.0), (1, 0.0), (2, 1e3)] {
        let got = &u[c * n..(c + 1) * n];
        let err = got
            .iter()
            .zip(&reference)
            .map(|(g, r)| (g - scale * r).abs())
            .fold(0.0f64, f64::max);
        let size = reference.iter().fold(0.0f64, |m, r| m.max(r.abs())) * scale.max(1.0);
        assert!(err <= 1e-9 * size, "column {c}: {err:e}");
    }
}

/// Flexible CG steps to 1e-10 for a block of 2 columns on `mesh` (its conditions
/// applied), with `smoother` and the precision schedule `variant`; each column's residual
/// checked in f64 on the host.
fn flexible_cg_steps<D: MultigridDevice>(
    dev: &D,
    mesh: &Mesh2d,
    variant: Variant,
    smoother: Smoother,
) -> usize {
    let a = assemble_poisson(mesh, |_| 0.0).unwrap().matrix;
    let n = a.nrows();
    let b: Vec<f64> = (0..2 * n)
        .map(|i| ((i * 7919) % 113) as f64 / 113.0 - 0.5)
        .collect();
    let levels = mesh.hierarchy.as_ref().unwrap().levels + 1;
    let params = MgParams {
        schedule: variant.schedule(levels),
        smoother,
        base_tolerance: 1e-4,
        residual_scaling: true,
        storage: tensorfem::device::MatrixStorage::default(),
    };
    let (mut mg, _) = Multigrid::on_mesh(dev, mesh, &a, params, false).unwrap();
    mg.set_krylov(true);
    let mut u = vec![0.0; 2 * n];
    let stop = StopParams {
        rtol: 1e-10,
        atol: 0.0,
        max_iterations: 100,
    };
    let info = dev.run(|| mg.solve_refined(&b, &mut u, 2, stop)).unwrap();
    for c in 0..2 {
        let (uc, bc) = (&u[c * n..(c + 1) * n], &b[c * n..(c + 1) * n]);
        let mut au = vec![0.0; n];
        tensorfem::sparse::spmv::<f64>(&a, uc, &mut au);
        let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|v| v * v).sum::<f64>().sqrt();
        let r = norm(&mut au.iter().zip(bc).map(|(a, b)| a - b));
        assert!(
            r <= 1.01e-10 * norm(&mut bc.iter().copied()),
            "column {c}: {r:e}"
        );
    }
    *info.iterations.iter().max().unwrap()
}

/// On the flow around a square (Dirichlet outflow, Neumann elsewhere), whose ring of flat
/// obtuse triangles point Jacobi smooths poorly, Chebyshev smoothing of the same degree
/// takes fewer flexible CG steps than damped Jacobi in every precision schedule, and at
/// most twice the steps the unit square of about as many unknowns takes with Jacobi.
fn chebyshev_smoothing_cuts_the_steps_on_the_flow_around_a_square<D: MultigridDevice>(dev: &D) {
    use Condition::*;
    let mesh = flow(4, &[Neumann, Dirichlet, Neumann, Neumann]);
    let mut square = unit_square_refined(2, 5, Element::P1).unwrap();
    Conditions::dirichlet(&square).apply(&mut square).unwrap();
    for variant in [Variant::DMg, Variant::DshMg, Variant::HsdMg] {
        let jacobi = flexible_cg_steps(dev, &mesh, variant, Smoother::JACOBI);
        let chebyshev = flexible_cg_steps(dev, &mesh, variant, Smoother::CHEBYSHEV);
        let on_square = flexible_cg_steps(dev, &square, variant, Smoother::JACOBI);
        println!("{variant}: flow around a square: Jacobi {jacobi}, Chebyshev {chebyshev} steps; unit square: Jacobi {on_square}");
        assert!(
            chebyshev + 3 <= jacobi,
            "{variant}: {chebyshev} vs {jacobi}"
        );
        assert!(
            chebyshev <= 2 * on_square,
            "{variant}: {chebyshev} vs {on_square}"
        );
    }
}

/// Block Chebyshev smoothing (B⁻¹A, B the block diagonal on the strongly coupled groups
/// of the flat triangles) takes fewer flexible CG steps than point Chebyshev on the flow
/// around a square in every precision schedule, within twice the unit square's steps
/// (which it smooths like point Chebyshev: no strong couplings there).
fn block_smoothing_cuts_the_steps_on_the_flow_around_a_square<D: MultigridDevice>(dev: &D) {
    use Condition::*;
    let mesh = flow(4, &[Neumann, Dirichlet, Neumann, Neumann]);
    let mut square = unit_square_refined(2, 5, Element::P1).unwrap();
    Conditions::dirichlet(&square).apply(&mut square).unwrap();
    for variant in [Variant::DMg, Variant::DshMg, Variant::HsdMg] {
        let point = flexible_cg_steps(dev, &mesh, variant, Smoother::CHEBYSHEV);
        let block = flexible_cg_steps(dev, &mesh, variant, Smoother::BLOCK_CHEBYSHEV);
        let on_square = flexible_cg_steps(dev, &square, variant, Smoother::CHEBYSHEV);
        let block_on_square = flexible_cg_steps(dev, &square, variant, Smoother::BLOCK_CHEBYSHEV);
        println!("{variant}: flow around a square: Chebyshev {point}, block Chebyshev {block} steps; unit square: {on_square}, {block_on_square}");
        assert!(block + 3 <= point, "{variant}: {block} vs {point}");
        assert!(block <= 2 * on_square, "{variant}: {block} vs {on_square}");
        assert_eq!(block_on_square, on_square, "{variant}");
    }
}

/// With block smoothing, one block of three columns gives bit for bit the solutions and
/// step counts of three single-column solves on the flow around a square.
fn block_smoothing_keeps_columns_alone<D: MultigridDevice>(dev: &D) {
    use Condition::*;
    let mesh = flow(3, &[Neumann, Dirichlet, Neumann, Neumann]);
    let a = assemble_poisson(&mesh, |_| 0.0).unwrap().matrix;
    let n = a.nrows();
    let b: Vec<f64> = (0..3 * n)
        .map(|i| ((i * 7919) % 113) as f64 / 113.0 - 0.5)
        .collect();
    let solve = |b: &[f64], nrhs: usize| {
        let params = MgParams {
            schedule: Variant::DshMg.schedule(4),
            smoother: Smoother::BLOCK_CHEBYSHEV,
            base_tolerance: 1e-4,
            residual_scaling: true,
            storage: tensorfem::device::MatrixStorage::default(),
        };
        let (mut mg, _) = Multigrid::on_mesh(dev, &mesh, &a, params, false).unwrap();
        mg.set_krylov(true);
        let mut u = vec![0.0; nrhs * n];
        let stop = StopParams {
            rtol: 1e-10,
            atol: 0.0,
            max_iterations: 100,
        };
        let info = dev.run(|| mg.solve_refined(b, &mut u, nrhs, stop)).unwrap();
        (u, info.iterations)
    };
    let (u, steps) = solve(&b, 3);
    for c in 0..3 {
        let (v, single) = solve(&b[c * n..(c + 1) * n], 1);
        assert_eq!(single[0], steps[c], "column {c}");
        assert!(
            v == u[c * n..(c + 1) * n],
            "column {c} differs from its single solve"
        );
    }
}

device_tests!(
    cuda: pure_neumann_multigrid_converges_like_a_mixed_problem,
    flexible_cg_solves_every_column_of_a_block_on_its_own,
    chebyshev_smoothing_cuts_the_steps_on_the_flow_around_a_square,
    block_smoothing_cuts_the_steps_on_the_flow_around_a_square,
    block_smoothing_keeps_columns_alone,
);
