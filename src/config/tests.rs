//! Config parsing and validation, end to end from TOML text.

use std::path::PathBuf;

use super::*;
use crate::device::BackendChoice;
use crate::linalg::Tolerance;
use crate::mesh::{Element, MeshKind, MeshSpec};
use crate::mg::{default_levels, Smoother, Variant};
use crate::precision::Precision;

#[test]
fn quickstart_is_valid() {
    let c = parse(QUICKSTART, "quickstart").unwrap();
    assert_eq!(c.solver.method, Method::PscM1);
    let campaign = c.campaign.expect("the quickstart is a campaign");
    assert_eq!(
        campaign.rhs,
        RhsSource::TimeSeries {
            steps: 32,
            t_end: 1.0
        }
    );
    assert_eq!(campaign.batch_size, 8);
    assert_eq!(
        campaign.operators[0].solver.cache_dir,
        Some(PathBuf::from("../out/quickstart/psc-cache"))
    );
    assert_eq!(c.source, QUICKSTART);
}

#[test]
fn full_config() {
    let c = parse(
        "backend = \"cpu\"\n[mesh]\nkind = \"unit-square\"\nelement = \"p1\"\nh = 0.0078125\nh0 = 0.25\n\
         [problem]\nk = 20\n[solver]\nmethod = \"cholesky\"\nprecision = \"f64\"\n[output]\npath = \"a/b.h5\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.backend, BackendChoice::Cpu);
    assert_eq!(
        c.mesh,
        MeshSpec {
            kind: MeshKind::UnitSquare,
            element: Element::P1,
            n: 128,
            coarse: Some((4, 5)),
            domain: None,
            boundary: None,
        }
    );
    assert_eq!(c.ks, vec![20]);
    assert_eq!(c.solver.cache_dir, None);
    assert_eq!(c.output, PathBuf::from("a/b.h5"));
    let c = parse(
        "[mesh]\nn = 64\nh0 = 0.125\n[problem]\nk = [1, 4]\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f16\"\nnrhs = 5\n[output]\npath = \"r/x.h5\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.ks, vec![1, 4, 1, 4, 1]);
    assert!(c.solver.refine, "low precisions refine by default");
    assert_eq!(c.solver.cache_dir, Some(PathBuf::from("r/psc-cache")));
}

#[test]
fn example_inputs_are_valid() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/inputs");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
}

#[test]
fn multigrid_settings() {
    let c = parse(
        "[mesh]\nn = 4096\n[solver]\nmethod = \"mg\"\n[output]\npath = \"m.h5\"\n",
        "t",
    )
    .unwrap();
    let mg = c.solver.mg.unwrap();
    assert_eq!(mg.schedule, vec![Precision::F64; 10]);
    assert_eq!(mg.variant, Some(Variant::DMg));
    assert!(c.solver.refine && mg.residual_scaling);
    // The default smoother: Jacobi on Q1, Chebyshev on triangles (refined domains, P1).
    assert_eq!(
        (mg.smoother, mg.smoother_name.as_str()),
        (Smoother::JACOBI, "jacobi")
    );
    for mesh in [
        "n = 64\nelement = \"p1\"",
        "kind = \"flow-around-square\"\nlevels = 3",
    ] {
        let c = parse(
            &format!("[mesh]\n{mesh}\n[solver]\nmethod = \"mg\"\n[output]\npath = \"m.h5\"\n"),
            "t",
        )
        .unwrap();
        let mg = c.solver.mg.unwrap();
        assert_eq!(
            (mg.smoother, mg.smoother_name.as_str()),
            (Smoother::CHEBYSHEV, "chebyshev"),
            "{mesh}"
        );
    }
    assert_eq!(
        (c.solver.rtol, c.solver.atol, c.solver.max_iterations),
        (1e-10, 0.0, 100)
    );
    let c = parse(
        "[mesh]\nkind = \"unit-cube\"\nn = 32\n[solver]\nmethod = \"mg\"\nschedule = [\"f16\", \"f32\", \"f64\"]\nlevels = 3\nsmoother = \"richardson\"\nseed = 5\n[output]\npath = \"m.h5\"\n",
        "t",
    )
    .unwrap();
    let mg = c.solver.mg.unwrap();
    assert_eq!(
        mg.schedule,
        vec![Precision::F16, Precision::F32, Precision::F64]
    );
    assert_eq!(
        (mg.variant, mg.smoother, mg.seed),
        (None, Smoother::RICHARDSON, 5)
    );
    let p = problems(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nschedule = [\"f16\", \"f32\"]\nresidual_scaling = \"yes\"\n[output]\npath = \"m.h5\"\n",
    );
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        ["solver.residual_scaling", "solver.schedule"],
        "{p:?}"
    );
    let p = problems(
        "[mesh]\nn = 64\n[solver]\nmethod = \"cholesky\"\nvariant = \"H_MG\"\n[output]\npath = \"m.h5\"\n",
    );
    assert_eq!(p[0].key, "solver.variant");
    // The smoother's damping and steps: any V(ν₁, ν₂) cycle, named in the plan's setting.
    let c = parse(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nomega = 0.9\npre_smoothing = 2\npost_smoothing = 2\n[output]\npath = \"m.h5\"\n",
        "t",
    )
    .unwrap();
    let mg = c.solver.mg.unwrap();
    assert_eq!(
        (mg.smoother.omega(), mg.smoother.pre, mg.smoother.post),
        (Some(0.9), 2, 2)
    );
    assert_eq!(mg.smoother_name, "jacobi (ω = 0.9, 2 + 2 steps)");
    let p = problems(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nomega = 2.0\npre_smoothing = -1\npost_smoothing = 99\n[output]\npath = \"m.h5\"\n",
    );
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        ["solver.pre_smoothing", "solver.post_smoothing"],
        "{p:?}"
    );
    let p = problems(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nomega = 2.0\n[output]\npath = \"m.h5\"\n",
    );
    assert_eq!(p[0].key, "solver.omega", "{p:?}");
    // Chebyshev smoothing: its degree on each side; no damping to give.
    let c = parse(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nsmoother = \"chebyshev\"\npre_smoothing = 4\n[output]\npath = \"m.h5\"\n",
        "t",
    )
    .unwrap();
    let mg = c.solver.mg.unwrap();
    assert_eq!(
        (mg.smoother.omega(), mg.smoother.pre, mg.smoother.post),
        (None, 4, 3)
    );
    assert_eq!(mg.smoother_name, "chebyshev (4 + 3 steps)");
    let c = parse(
        "[mesh]\nkind = \"flow-around-square\"\nlevels = 3\n[solver]\nmethod = \"mg\"\nsmoother = \"block-chebyshev\"\n[output]\npath = \"m.h5\"\n",
        "t",
    )
    .unwrap();
    let mg = c.solver.mg.unwrap();
    assert_eq!(
        (mg.smoother, mg.smoother_name.as_str()),
        (Smoother::BLOCK_CHEBYSHEV, "block-chebyshev")
    );
    let p = problems(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nsmoother = \"chebyshev\"\nomega = 0.9\n[output]\npath = \"m.h5\"\n",
    );
    assert_eq!(p[0].key, "solver.omega", "{p:?}");
    assert!(
        p[0].message
            .contains("jacobi and richardson smoothers only"),
        "{p:?}"
    );
    let p = problems(
        "[mesh]\nn = 64\n[solver]\nmethod = \"cholesky\"\nomega = 0.9\npre_smoothing = 2\n[output]\npath = \"m.h5\"\n",
    );
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert!(
        keys.contains(&"solver.omega") && keys.contains(&"solver.pre_smoothing"),
        "{p:?}"
    );
    // Flexible CG around the cycle: refinement only, mg only.
    let c = parse(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nkrylov = \"cg\"\n[output]\npath = \"m.h5\"\n",
        "t",
    )
    .unwrap();
    let mg = c.solver.mg.unwrap();
    assert!(mg.krylov);
    assert_eq!(mg.storage, crate::device::MatrixStorage::Grid);
    let c = parse(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nstorage = \"indexed\"\n[output]\npath = \"m.h5\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(
        c.solver.mg.unwrap().storage,
        crate::device::MatrixStorage::Indexed
    );
    for (body, key) in [
        ("method = \"mg\"\nstorage = \"csr\"", "solver.storage"),
        ("method = \"psc-m1\"\nstorage = \"grid\"", "solver.storage"),
        ("method = \"mg\"\nkrylov = \"gmres\"", "solver.krylov"),
        (
            "method = \"mg\"\nkrylov = \"cg\"\nrefine = false",
            "solver.krylov",
        ),
        ("method = \"psc-m1\"\nkrylov = \"cg\"", "solver.krylov"),
        ("method = \"mg\"\ncycle_columns = 0", "solver.cycle_columns"),
        (
            "method = \"mg\"\ncycle_columns = \"half\"",
            "solver.cycle_columns",
        ),
        (
            "method = \"psc-m1\"\ncycle_columns = 8",
            "solver.cycle_columns",
        ),
    ] {
        let p = problems(&format!(
            "[mesh]\nn = 64\n[solver]\n{body}\n[output]\npath = \"m.h5\"\n"
        ));
        assert!(p.iter().any(|p| p.key == key), "{body}: {p:?}");
    }
    // The columns one multigrid solve carries: the cache's choice by default.
    use crate::mg::CycleColumns;
    for (value, expected) in [
        ("", CycleColumns::Auto),
        ("cycle_columns = \"AUTO\"\n", CycleColumns::Auto),
        ("cycle_columns = \"all\"\n", CycleColumns::All),
        ("cycle_columns = 16\n", CycleColumns::AtMost(16)),
    ] {
        let c = parse(
            &format!(
                "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\n{value}[output]\npath = \"m.h5\"\n"
            ),
            "t",
        )
        .unwrap();
        assert_eq!(c.solver.mg.unwrap().cycle_columns, expected, "{value}");
    }
    // Refined domains: one level per refinement, down to the coarse mesh by default.
    let c = parse(
        "[mesh]\nkind = \"flow-around-square\"\nlevels = 5\n[boundary]\ninflow = \"neumann\"\noutflow = \"dirichlet\"\nwalls = \"neumann\"\nobstacle = \"neumann\"\n[solver]\nmethod = \"mg\"\nvariant = \"DSH_MG\"\n[output]\npath = \"m.h5\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.solver.mg.unwrap().schedule.len(), 6);
    let p = problems(
        "[mesh]\nkind = \"flow-around-square\"\nlevels = 5\ncoarse_levels = 2\n[solver]\nmethod = \"mg\"\nlevels = 7\n[output]\npath = \"m.h5\"\n",
    );
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["solver.levels", "mesh.coarse_levels"], "{p:?}");
    // P1 on the unit square (Galerkin levels along its hierarchy).
    let c = parse(
        "[mesh]\nn = 64\nelement = \"p1\"\n[solver]\nmethod = \"mg\"\n[output]\npath = \"m.h5\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.solver.mg.unwrap().schedule.len(), default_levels(64));
}

fn problems(text: &str) -> Vec<ConfigProblem> {
    match parse(text, "t") {
        Err(Error::Config { problems, .. }) => problems,
        other => panic!("expected config problems, got {other:?}"),
    }
}

#[test]
fn three_mistakes_are_all_reported() {
    let p = problems(
        "[mesh]\nn = 64\nelemnt = \"q1\"\n[solver]\nmethod = \"lu\"\n[output]\npath = \"x.h5\"\n[problem]\nk = 0\n",
    );
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["mesh.elemnt", "problem.k", "solver.method"], "{p:?}");
    assert!(
        p[0].message
            .contains("allowed in [mesh]: kind, element, n, h, h0"),
        "{}",
        p[0].message
    );
    assert!(p[2].message.contains("allowed: cholesky"));
}

#[test]
fn type_errors_in_two_sections_are_both_reported() {
    let p = problems("[mesh]\nn = \"big\"\nelement = \"q2\"\n[output]\npath = 3\n");
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["mesh.n", "output.path", "mesh.element"], "{p:?}");
    assert_eq!(
        p[0].message, "must be an integer (found string \"big\")",
        "{}",
        p[0].message
    );
    assert!(
        p[1].message.starts_with("must be a string"),
        "{}",
        p[1].message
    );
}

/// A mistyped key inside a sub-table is named itself, once, and not also reported missing.
#[test]
fn type_errors_in_sub_tables_name_the_key() {
    let p = problems(
        "[mesh]\nn = 16\n[campaign]\nrhs = \"time-series\"\ndirectory = \"d\"\n\
         [campaign.time_series]\nsteps = 2.5\n",
    );
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].key, "campaign.time_series.steps");
    assert_eq!(
        p[0].message,
        "must be an integer (found floating point `2.5`)"
    );
}

#[test]
fn value_checks() {
    let base = "[output]\npath = \"x.h5\"\n[mesh]\n";
    let one = |extra: &str| problems(&format!("{base}{extra}"));
    assert_eq!(one("n = 1\n")[0].key, "mesh.n");
    assert_eq!(one("n = 8\nh = 0.125\n")[0].key, "mesh.n");
    assert_eq!(one("h = 0.3\n")[0].key, "mesh.h");
    assert_eq!(one("n = 24\nh0 = 0.25\n")[0].key, "mesh.h0");
    assert_eq!(one("n = 64\nh0 = 0.3\n")[0].key, "mesh.h0");
    assert_eq!(
        one("n = 8\nkind = \"unit-cube\"\nelement = \"p1\"\n")[0].key,
        "mesh.element"
    );
    assert_eq!(
        one("n = 8\nkind = \"unit-cube\"\nh0 = 0.5\n")[0].key,
        "mesh.h0"
    );
    assert_eq!(one("n = 70000\n")[0].key, "mesh.n");
    assert!(problems("[mesh]\nn = 8\n")[0].key == "output.path");
    let p = problems("backend = \"gpu\"\n[mesh]\nn = 8\n[output]\npath = \"x.h5\"\n[solver]\nprecision = \"f16\"\n");
    assert_eq!(
        p.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(),
        ["backend", "solver.precision"]
    );
    let p = problems("bogus = 1\n[mesh]\nn = 8\n[output]\npath = \"x.h5\"\n");
    assert_eq!(p[0].key, "bogus");
    let psc = |extra: &str| {
        problems(&format!(
            "[output]\npath = \"x.h5\"\n[solver]\nmethod = \"psc-m1\"\n{extra}"
        ))
    };
    assert_eq!(psc("[mesh]\nn = 64\n")[0].key, "mesh.h0");
    assert_eq!(psc("[mesh]\nn = 64\nh0 = 1.0\n")[0].key, "mesh.h0");
    assert_eq!(
        psc("nrhs = 0\n[mesh]\nn = 64\nh0 = 0.25\n")[0].key,
        "solver.nrhs"
    );
    assert_eq!(
        psc("rtol = 2.0\n[mesh]\nn = 64\nh0 = 0.25\n")[0].key,
        "solver.rtol"
    );
    assert_eq!(
        problems("[mesh]\nn = 8\n[problem]\nk = []\n[output]\npath = \"x.h5\"\n")[0].key,
        "problem.k"
    );
    assert_eq!(
        problems("[mesh]\nn = 8\n[solver]\nrefine = true\n[output]\npath = \"x.h5\"\n")[0].key,
        "solver.refine"
    );
}

#[test]
fn syntax_errors_name_the_line() {
    let p = problems("[mesh]\nn = 8\n[output\n");
    assert_eq!(p[0].key, "(syntax)");
    assert!(p[0].message.contains("line 3"), "{}", p[0].message);
}

/// A misspelt method is the one problem reported (no follow-on errors about the keys of
/// the method meant), with the name it is closest to; misspelt keys get the same hint.
#[test]
fn typos_are_named_once_with_a_suggestion() {
    let p = problems(
        "[output]\npath = \"x.h5\"\n[mesh]\nn = 16\n[solver]\nmethod = \"mgg\"\n\
         schedule = [\"f32\", \"f16\"]\nsmoother = \"jacobi\"\npreconditioner = \"multigrid\"\n",
    );
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].key, "solver.method");
    assert!(
        p[0].message.contains("did you mean 'mg'?"),
        "{}",
        p[0].message
    );
    let p = problems("[output]\npath = \"x.h5\"\n[mesh]\nn = 16\n[solver]\nmethod = \"cholesky\"\nmax_iteration = 9\n");
    assert_eq!(p[0].key, "solver.max_iteration");
    assert!(
        p[0].message.contains("did you mean 'max_iterations'?"),
        "{}",
        p[0].message
    );
    let p = problems("[output]\npath = \"x.h5\"\n[mesh]\nn = 16\n[solver]\nmethod = \"quux\"\n");
    assert!(!p[0].message.contains("did you mean"), "{}", p[0].message);
}

/// rtol and atol for every iterative method, with the method's defaults; the old
/// `tolerance` is refused naming both new keys and what to write.
#[test]
fn rtol_and_atol_mean_the_same_for_every_method() {
    let parse_ok = |body: &str| parse(body, "t").unwrap();
    let psc = parse_ok(
        "[mesh]\nn = 64\nh0 = 0.25\n[solver]\nmethod = \"psc-m1\"\n[output]\npath = \"x.h5\"\n",
    );
    assert_eq!((psc.solver.rtol, psc.solver.atol), (1e-10, 0.0));
    let mg = parse_ok(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nrtol = 1e-8\n[output]\npath = \"x.h5\"\n",
    );
    assert_eq!((mg.solver.rtol, mg.solver.atol), (1e-8, 0.0));
    assert_eq!(
        mg.solver.tolerance,
        Tolerance {
            rtol: 1e-8,
            atol: 0.0
        }
    );
    // A direct solve is checked against rtol when given, else against its precision's
    // accuracy; the sparse Cholesky against f64's.
    let alone = |precision: &str, extra: &str| {
        parse_ok(&format!(
            "[mesh]\nn = 64\nh0 = 0.25\n[solver]\nmethod = \"psc-m1\"\nprecision = \"{precision}\"\nrefine = false\n{extra}[output]\npath = \"x.h5\"\n"
        ))
        .solver
        .tolerance
        .rtol
    };
    assert_eq!(alone("f64", ""), 1e-8);
    assert_eq!(alone("f32", ""), 1e-2);
    assert_eq!(alone("f16", ""), 0.5);
    assert_eq!(alone("f32", "rtol = 1e-6\n"), 1e-6);
    let cholesky = parse_ok("[mesh]\nn = 64\n[output]\npath = \"x.h5\"\n");
    assert_eq!(cholesky.solver.tolerance.rtol, 1e-8);
    let stokes = parse_ok(
        "[mesh]\nn = 16\n[solver]\nmethod = \"stokes\"\natol = 1e-10\n[output]\npath = \"x.h5\"\n",
    );
    let fgmres = stokes.stokes.unwrap().fgmres;
    assert_eq!((fgmres.rtol, fgmres.atol), (1e-8, 1e-10));

    let p = problems(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\ntolerance = 1e-9\n[output]\npath = \"x.h5\"\n",
    );
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].key, "solver.tolerance");
    for wanted in [
        "solver.rtol and solver.atol",
        "write rtol = 1e-9",
        "write atol = 1e-9",
    ] {
        assert!(p[0].message.contains(wanted), "{}", p[0].message);
    }
    let p = problems(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nrtol = 0.0\n[output]\npath = \"x.h5\"\n",
    );
    assert_eq!(p[0].key, "solver.rtol");
    assert!(p[0].message.contains("both 0"), "{}", p[0].message);
    let p = problems(
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\natol = -1.0\n[output]\npath = \"x.h5\"\n",
    );
    assert_eq!(p[0].key, "solver.atol");
    let p = problems(
        "[mesh]\nn = 64\n[solver]\nmethod = \"cholesky\"\nrtol = 1e-8\n[output]\npath = \"x.h5\"\n",
    );
    assert_eq!(p[0].key, "solver.rtol");
}

/// Relative paths in a config file are relative to its folder, from any working directory;
/// leading `..` climb that folder; absolute paths stay.
#[test]
fn relative_paths_are_resolved_against_the_config_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().canonicalize().unwrap().join("configs");
    std::fs::create_dir(&folder).unwrap();
    let path = folder.join("c.toml");
    std::fs::write(
        &path,
        "[mesh]\nn = 16\nh0 = 0.25\n[solver]\nmethod = \"psc-m1\"\n[campaign]\nrhs = \"hdf5\"\n\
         directory = \"../out/c\"\n[campaign.input]\npath = \"./data/rhs.h5\"\n",
    )
    .unwrap();
    let c = load(&path).unwrap();
    let campaign = c.campaign.unwrap();
    let root = folder.parent().unwrap();
    assert_eq!(campaign.directory, root.join("out/c"));
    assert_eq!(
        campaign.rhs,
        RhsSource::Hdf5 {
            path: folder.join("data/rhs.h5"),
            dataset: "rhs".into()
        }
    );
    assert_eq!(
        campaign.operators[0].solver.cache_dir,
        Some(root.join("out/c/psc-cache"))
    );
    std::fs::write(
        &path,
        "[mesh]\nn = 16\n[solver]\nmethod = \"cholesky\"\n[output]\npath = \"/abs/run.h5\"\n",
    )
    .unwrap();
    assert_eq!(load(&path).unwrap().output, PathBuf::from("/abs/run.h5"));
}

const STOKES_STUDY: &str = "[mesh]\nelement = \"q2-q1\"\n[solver]\nmethod = \"stokes\"\n\
     [campaign]\nrhs = \"study\"\ndirectory = \"s\"\n[campaign.study]\n";

/// A Stokes study: every combination is one operator, parameters a relaxation does not use
/// do not multiply the operators, and each operator solves the manufactured problem once.
#[test]
fn stokes_study_expands_into_operators() {
    let c = parse(
        &format!(
            "{STOKES_STUDY}n = [16, 32]\nprecision = [\"f64\", \"f32\"]\n\
             preconditioner = [\"multigrid\", \"block-triangular\"]\n\
             relaxation = [\"vanka-tuned\", \"braess-sarazin\"]\nt = [1.0, 1.5]\n"
        ),
        "t",
    )
    .unwrap();
    let campaign = c.campaign.unwrap();
    assert_eq!(campaign.rhs, RhsSource::StokesStudy);
    assert_eq!(campaign.batch_size, 1);
    assert!(campaign.is_stokes());
    // Per n and precision: vanka-tuned (t unused), braess-sarazin × 2 t, block-triangular.
    assert_eq!(campaign.operators.len(), 2 * 2 * 4);
    let specs: Vec<_> = campaign
        .operators
        .iter()
        .map(|o| o.stokes.expect("Stokes operators"))
        .collect();
    for (i, a) in specs.iter().enumerate() {
        assert!(!specs[i + 1..].contains(a), "operator {i} appears twice");
    }
    let ts: Vec<f64> = specs
        .iter()
        .filter_map(|s| match s.preconditioner {
            crate::stokes::Preconditioner::Multigrid(crate::stokes::Relaxation::BraessSarazin(
                p,
            )) => Some(p.t),
            _ => None,
        })
        .collect();
    assert_eq!(ts, vec![1.0, 1.5, 1.0, 1.5, 1.0, 1.5, 1.0, 1.5]);
    assert!(specs.iter().all(|s| [16, 32].contains(&s.n)));
    assert_eq!(campaign.operators[0].mesh.n, 16);
}

#[test]
fn stokes_study_mistakes_are_named() {
    let cases = [
        (
            format!("{STOKES_STUDY}k = [1, 2]\nh0 = [0.25]\n"),
            vec!["campaign.study.k", "campaign.study.h0"],
        ),
        (
            STOKES_STUDY.replace("rhs = \"study\"", "rhs = \"time-series\"\nbatch_size = 4"),
            vec!["campaign.rhs", "campaign.batch_size"],
        ),
        (
            format!("{STOKES_STUDY}method = [\"stokes\", \"mg\"]\n"),
            vec!["campaign.study.method"],
        ),
        (
            format!("{STOKES_STUDY}relaxation = [\"vanka\"]\nt = [1.0, 2.0]\n"),
            vec!["campaign.study.t"],
        ),
        (
            format!("{STOKES_STUDY}n = [16, 100]\n"),
            vec!["campaign.study"],
        ),
        (
            "[mesh]\nn = 16\n[campaign]\nrhs = \"study\"\ndirectory = \"s\"\n\
             [campaign.study]\nk = [1]\nmethod = [\"cholesky\"]\npreconditioner = [\"multigrid\"]\n"
                .to_string(),
            vec!["campaign.study.preconditioner"],
        ),
    ];
    for (text, keys) in cases {
        let found = problems(&text);
        for key in keys {
            assert!(
                found.iter().any(|p| p.key == key),
                "{text}: no problem about {key} in {found:?}"
            );
        }
    }
    // The combination that fails is named, with the solver's own message.
    let found = problems(&format!("{STOKES_STUDY}n = [16, 100]\n"));
    assert!(
        found
            .iter()
            .any(|p| p.message.contains("n = 100") && p.message.contains("mesh.n")),
        "{found:?}"
    );
}

/// A study over mesh.levels on a refined domain: one operator per level and method, each
/// with its levels and conditions (multigrid down to the coarse mesh, without PSC's macro
/// elements); levels on the unit square is a problem of every combination.
#[test]
fn studies_over_levels_on_refined_domains() {
    let body = "[mesh]\nkind = \"flow-around-square\"\nlevels = 3\ncoarse_levels = 1\n\
                [boundary]\ninflow = \"neumann\"\noutflow = \"dirichlet\"\nwalls = \"neumann\"\nobstacle = \"neumann\"\n\
                [solver]\nmethod = \"psc-m1\"\n\
                [campaign]\nrhs = \"study\"\ndirectory = \"d\"\n\
                [campaign.study]\nk = [1, 2]\nlevels = [3, 4, 5]\nmethod = [\"psc-m1\", \"cholesky\", \"mg\"]\n";
    let c = parse(body, "t").unwrap();
    let ops = &c.campaign.unwrap().operators;
    let levels: Vec<usize> = ops
        .iter()
        .map(|o| o.mesh.domain.as_ref().unwrap().levels)
        .collect();
    assert_eq!(levels, [3, 3, 3, 4, 4, 4, 5, 5, 5]);
    assert!(ops.iter().all(|o| o.mesh.boundary.is_some()));
    for o in ops.iter().filter(|o| o.solver.method == Method::Mg) {
        let domain = o.mesh.domain.as_ref().unwrap();
        assert_eq!(domain.coarse_levels, 0);
        assert_eq!(
            o.solver.mg.as_ref().unwrap().schedule.len(),
            domain.levels + 1
        );
    }
    let p = problems(
        "[mesh]\nn = 16\n[campaign]\nrhs = \"study\"\ndirectory = \"d\"\n[campaign.study]\nlevels = [2, 3]\n",
    );
    assert!(
        p.iter()
            .any(|p| p.key == "campaign.study" && p.message.contains("mesh.levels: applies to")),
        "{p:?}"
    );
}

/// psc-m2 and psc-m3 parse like psc-m1; solver.cg_rtol belongs to psc-m3 (in (0, 1)), and a
/// study over the three methods keeps it for psc-m3's operators only.
#[test]
fn psc_methods_and_the_cg_tolerance() {
    let config = |method: &str, extra: &str| {
        format!(
            "[mesh]\nn = 64\nh0 = 0.125\n[solver]\nmethod = \"{method}\"\n{extra}[output]\npath = \"x.h5\"\n"
        )
    };
    for (name, method) in [
        ("psc-m1", Method::PscM1),
        ("psc-m2", Method::PscM2),
        ("psc-m3", Method::PscM3),
    ] {
        let c = parse(&config(name, ""), "t").unwrap();
        assert_eq!(c.solver.method, method);
        assert_eq!(c.solver.method.name(), name);
        assert_eq!(c.solver.cg_rtol, None);
    }
    let c = parse(&config("psc-m3", "cg_rtol = 1e-6\n"), "t").unwrap();
    assert_eq!(c.solver.cg_rtol, Some(1e-6));
    for (method, extra) in [
        ("psc-m1", "cg_rtol = 1e-6\n"),
        ("mg", "cg_rtol = 1e-6\n"),
        ("psc-m3", "cg_rtol = 0.0\n"),
        ("psc-m3", "cg_rtol = 2.0\n"),
    ] {
        let p = problems(&config(method, extra));
        assert!(
            p.iter().any(|p| p.key == "solver.cg_rtol"),
            "{method} {extra}: {p:?}"
        );
    }
    let p = problems(&config("psc-m3", "").replace("h0 = 0.125\n", ""));
    assert!(
        p.iter()
            .any(|p| p.key == "mesh.h0" && p.message.contains("psc-m3")),
        "{p:?}"
    );
    let study = "[mesh]\nn = 64\nh0 = 0.125\n[solver]\nmethod = \"psc-m3\"\ncg_rtol = 1e-5\n\
                 [campaign]\nrhs = \"study\"\ndirectory = \"d\"\n\
                 [campaign.study]\nk = [1]\nmethod = [\"psc-m1\", \"psc-m2\", \"psc-m3\"]\n";
    let c = parse(study, "t").unwrap();
    let tolerances: Vec<Option<f64>> = c
        .campaign
        .unwrap()
        .operators
        .iter()
        .map(|o| o.solver.cg_rtol)
        .collect();
    assert_eq!(tolerances, [None, None, Some(1e-5)]);
}

/// solver.coupling: element by default, csr when asked, for the psc methods only; a
/// study over methods drops it for the others.
#[test]
fn psc_coupling() {
    use crate::config::Coupling;
    let config = |method: &str, extra: &str| {
        format!(
            "[mesh]\nn = 64\nh0 = 0.125\n[solver]\nmethod = \"{method}\"\n{extra}[output]\npath = \"x.h5\"\n"
        )
    };
    assert_eq!(
        parse(&config("psc-m1", ""), "t").unwrap().solver.coupling,
        Coupling::Element
    );
    let c = parse(&config("psc-m3", "coupling = \"csr\"\n"), "t").unwrap();
    assert_eq!(c.solver.coupling, Coupling::Csr);
    for (method, extra, says) in [
        (
            "psc-m1",
            "coupling = \"dense\"\n",
            "\"dense\" (allowed: element, csr)",
        ),
        ("mg", "coupling = \"csr\"\n", "psc methods only"),
        ("cholesky", "coupling = \"csr\"\n", "psc methods only"),
    ] {
        let p = problems(&config(method, extra));
        assert!(
            p.iter()
                .any(|p| p.key == "solver.coupling" && p.message.contains(says)),
            "{method} {extra}: {p:?}"
        );
    }
    let study = "[mesh]\nn = 64\nh0 = 0.125\n[solver]\nmethod = \"psc-m1\"\ncoupling = \"csr\"\n\
                 [campaign]\nrhs = \"study\"\ndirectory = \"d\"\n\
                 [campaign.study]\nk = [1]\nmethod = [\"psc-m1\", \"mg\"]\n";
    let c = parse(study, "t").unwrap();
    let couplings: Vec<_> = c
        .campaign
        .unwrap()
        .operators
        .iter()
        .map(|o| (o.solver.method, o.solver.coupling))
        .collect();
    assert_eq!(
        couplings,
        [
            (Method::PscM1, Coupling::Csr),
            (Method::Mg, Coupling::Element)
        ]
    );
}

#[test]
fn tf32_is_a_psc_precision_only() {
    let c = parse(
        "[mesh]\nn = 64\nh0 = 0.125\n[solver]\nmethod = \"psc-m1\"\nprecision = \"tf32\"\n[output]\npath = \"x.h5\"\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.solver.precision, Precision::Tf32);
    assert!(
        c.solver.refine,
        "tf32 refines by default, as every low precision"
    );
    for (text, key) in [
        (
            "[mesh]\nn = 16\n[solver]\nmethod = \"stokes\"\nprecision = \"tf32\"\n[output]\npath = \"x.h5\"\n",
            "solver.precision",
        ),
        (
            "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nschedule = [\"tf32\", \"f32\", \"f64\"]\nlevels = 3\n[output]\npath = \"x.h5\"\n",
            "solver.schedule",
        ),
        (
            "[mesh]\nn = 64\n[solver]\nmethod = \"cholesky\"\nprecision = \"tf32\"\n[output]\npath = \"x.h5\"\n",
            "solver.precision",
        ),
    ] {
        let p = problems(text);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].key, key);
    }
    let p = problems(
        "[mesh]\nn = 16\n[solver]\nmethod = \"stokes\"\nprecision = \"tf32\"\n[output]\npath = \"x.h5\"\n",
    );
    assert!(p[0].message.contains("psc-m1"), "{p:?}");
}

/// An embedding program's config: no [output] or [problem], boundary values allowed (the
/// caller's loads are file-like), the sections of a run refused by name.
#[test]
fn embedded_configs_take_the_callers_loads() {
    let text = r#"
[mesh]
kind = "unit-square"
n = 16
[boundary]
left = { condition = "dirichlet", value = 1.5 }
right = "neumann"
bottom = "neumann"
top = "neumann"
[solver]
method = "cholesky"
"#;
    let config = parse_embedded(text, "embedded").unwrap();
    assert_eq!(config.solver.method, Method::Cholesky);
    assert!(config.mesh.boundary.is_some());
    let refused = parse(text, "file").unwrap_err().to_string();
    assert!(refused.contains("left.value"), "{refused}");
    for (section, key) in [
        ("[output]\npath = \"x.h5\"\n", "[output]"),
        ("[problem]\nk = 2\n", "[problem]"),
    ] {
        let message = parse_embedded(&format!("{text}{section}"), "embedded")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains(key) && message.contains("the caller passes"),
            "{message}"
        );
    }
    let stokes = parse_embedded("[solver]\nmethod = \"stokes\"\n", "embedded").unwrap_err();
    assert!(
        stokes.to_string().contains("not a Poisson method"),
        "{stokes}"
    );
}
