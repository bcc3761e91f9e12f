//! Right-hand sides of every finite magnitude (docs/mathematics.md §6): every method and
//! precision, with one column and with many, either meets rtol = 1e-10 in the verified f64
//! residual or refuses the column by name and magnitude before solving — never returns a
//! column above its tolerance as a result. Loads from 1e-300 to 1e300 must be solved;
//! subnormal ones must be refused.

use tensorfem::config::parse;
use tensorfem::device::{Backend, Cpu};
use tensorfem::poisson::AnyPoissonSolver;
use tensorfem::stokes::StokesSolver;

/// 5e-310 is subnormal (below f64::MIN_POSITIVE = 2.2e-308).
const MAGNITUDES: [f64; 6] = [1e-300, 1e-160, 5e-310, 1.0, 1e155, 1e300];
const RTOL: f64 = 1e-10;

/// Every method and precision that can reach rtol = 1e-10: PSC with refinement in each
/// precision (M1; M2 and M3 in f32), PSC f64 alone, multigrid presets with plain and
/// flexible-CG refinement and the stand-alone f64 cycle, the sparse Cholesky.
fn solvers() -> Vec<(&'static str, String)> {
    let psc = |method: &str, precision: &str, refine: bool| {
        format!(
            "[mesh]\nn = 32\nh0 = 0.25\n[solver]\nmethod = \"{method}\"\nprecision = \"{precision}\"\nrefine = {refine}\nrtol = {RTOL:e}\ncache = false\n"
        )
    };
    let mg = |extra: &str| {
        format!("[mesh]\nn = 32\n[solver]\nmethod = \"mg\"\nrtol = {RTOL:e}\n{extra}")
    };
    vec![
        ("psc-m1 f64 alone", psc("psc-m1", "f64", false)),
        ("psc-m1 f64 + IR", psc("psc-m1", "f64", true)),
        ("psc-m1 f32 + IR", psc("psc-m1", "f32", true)),
        ("psc-m1 tf32 + IR", psc("psc-m1", "tf32", true)),
        ("psc-m1 f16 + IR", psc("psc-m1", "f16", true)),
        ("psc-m2 f32 + IR", psc("psc-m2", "f32", true)),
        ("psc-m3 f32 + IR", psc("psc-m3", "f32", true)),
        ("psc-m3 f16 + IR", psc("psc-m3", "f16", true)),
        ("mg D_MG", mg("variant = \"D_MG\"\n")),
        ("mg H_MG", mg("variant = \"H_MG\"\n")),
        (
            "mg DSH_MG + FCG",
            mg("variant = \"DSH_MG\"\nkrylov = \"cg\"\n"),
        ),
        (
            "mg f64 stand-alone",
            mg("variant = \"D_MG\"\nrefine = false\n"),
        ),
        (
            "cholesky",
            "[mesh]\nn = 32\n[solver]\nmethod = \"cholesky\"\n".to_string(),
        ),
    ]
}

/// Standard-normal-like loads (a fixed hash, no random state) times `scale`.
fn loads(n: usize, columns: &[f64]) -> Vec<f64> {
    columns
        .iter()
        .enumerate()
        .flat_map(|(c, &scale)| {
            (0..n).map(move |i| {
                let h = ((i * 7919 + c * 104_729) % 10_007) as f64 / 10_007.0;
                (2.0 * h - 1.0) * 1.7 * scale
            })
        })
        .collect()
}

/// Solves the columns of magnitudes `scales` with the solver of `config`: Ok(relative
/// residuals and tolerances) or the refusal's message.
fn solve(op: &mut AnyPoissonSolver, scales: &[f64]) -> Result<Vec<(f64, f64)>, String> {
    let n = op.unknowns();
    let b = loads(n, scales);
    let outcome = op.solve(&b, scales.len()).map_err(|e| e.to_string())?;
    let nodal = op.to_nodal(&outcome.u, None);
    let reports = op
        .reports(&b, &outcome.u, &nodal, &vec![None; scales.len()])
        .map_err(|e| e.to_string())?;
    let tolerance = op.tolerances(&b);
    Ok(reports
        .iter()
        .map(|r| r.relative_residual)
        .zip(tolerance)
        .collect())
}

#[test]
fn every_method_solves_every_magnitude_or_refuses_it_by_name() {
    let backend = Backend::Cpu { threads: 2 };
    let mut failures = Vec::new();
    for (name, text) in solvers() {
        let config = parse(&format!("{text}[output]\npath = \"x.h5\"\n"), name).unwrap();
        let mut op = AnyPoissonSolver::new(&backend, &config.mesh, &config.solver).unwrap();
        let mut check = |what: String, scales: &[f64]| match solve(&mut op, scales) {
            Ok(columns) => {
                // The sweep's target, and each column's own tolerance (the Cholesky
                // reference's check is f64's 1e-8; every other one is rtol here).
                for (c, (residual, tolerance)) in columns.into_iter().enumerate() {
                    if !(residual <= RTOL && residual <= tolerance) {
                        failures.push(format!(
                            "{what}, column {c}: relative residual {residual:e} (tolerance {tolerance:e})"
                        ));
                    }
                }
            }
            Err(message) => {
                let subnormal = scales.iter().position(|&s| s < f64::MIN_POSITIVE);
                match subnormal {
                    Some(c)
                        if message.contains(&format!("right-hand side {c}"))
                            && message.contains("subnormal") => {}
                    _ => failures.push(format!("{what}: refused: {message}")),
                }
            }
        };
        for magnitude in MAGNITUDES {
            check(format!("{name}, 1 column of {magnitude:e}"), &[magnitude]);
            check(
                format!("{name}, 3 columns of {magnitude:e}"),
                &[magnitude; 3],
            );
        }
        // Every normal magnitude in one block: solved in groups, each column to rtol.
        let mixed = [1e300, 1e-300, 1.0, 1e155, 1e-160];
        check(format!("{name}, one block of {mixed:?}"), &mixed);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Stokes FGMRES (preconditioner in f64, f32 and f16) on its own loads scaled to every
/// magnitude: the same property, on the residual of the stored solution.
#[test]
fn stokes_solves_every_magnitude_or_refuses_it_by_name() {
    for precision in ["f64", "f32", "f16"] {
        let config = parse(
            &format!(
                "[mesh]\nn = 8\n[solver]\nmethod = \"stokes\"\nprecision = \"{precision}\"\nrtol = {RTOL:e}\n[output]\npath = \"x.h5\"\n"
            ),
            "stokes",
        )
        .unwrap();
        let spec = config.stokes.unwrap();
        let mut solver = StokesSolver::new(&Cpu::new(), &spec).unwrap();
        let base = solver.manufactured_rhs().to_vec();
        let largest = base.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for magnitude in MAGNITUDES {
            let b: Vec<f64> = base.iter().map(|v| v / largest * magnitude).collect();
            match solver.solve(&b) {
                Ok((flow, _)) => {
                    let residual = solver.relative_residual(&b, &flow).unwrap();
                    assert!(
                        residual <= RTOL,
                        "stokes {precision}, loads of {magnitude:e}: relative residual {residual:e}"
                    );
                }
                Err(e) => {
                    let message = e.to_string();
                    assert!(
                        magnitude < f64::MIN_POSITIVE
                            && message.contains("right-hand side 0")
                            && message.contains("subnormal"),
                        "stokes {precision}, loads of {magnitude:e}: {message}"
                    );
                }
            }
        }
    }
}
