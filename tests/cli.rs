//! The `tensorfem` binary as users run it: alone and under `mpirun -n 2`, with good and bad
//! configs; its HDF5 output read back by independent tools (h5dump, h5py).

mod common;

use std::process::{Command, Output};

use common::{mpirun, run, text, write_config, BIN};

#[test]
fn info_reports_backends() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["info"], dir.path());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(concat!("tensorfem ", env!("CARGO_PKG_VERSION"))));
    assert!(stdout.contains("cores"));
    assert!(stdout.contains("CUDA"));
    assert!(stdout.contains("MPI    size 1"), "{stdout}");
}

#[test]
fn info_under_mpirun_with_two_ranks() {
    let out = mpirun(2)
        .arg(BIN)
        .arg("info")
        .output()
        .expect("mpirun runs");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("MPI    size 2"), "{stdout}");
    assert!(
        stdout.contains("rank    0") && stdout.contains("rank    1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("of 2"),
        "both ranks share this host: {stdout}"
    );
    assert_eq!(
        stdout.matches("tensorfem ").count(),
        1,
        "rank 0 alone prints: {stdout}"
    );
}

#[test]
fn config_with_three_mistakes_reports_all_three() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        "[mesh]\nn = 32\nelement = \"q3\"\n[solver]\nmethod = \"lu\"\nprecison = \"f64\"\n[output]\npath = \"o.h5\"\n",
    );
    let out = run(&["run", &cfg], dir.path());
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("3 problem(s)"), "{stderr}");
    for needle in [
        "mesh.element",
        "allowed: q1, p1",
        "solver.method",
        "allowed: cholesky",
        "solver.precison",
        "allowed in [solver]: method, precision",
    ] {
        assert!(stderr.contains(needle), "missing '{needle}' in: {stderr}");
    }
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    assert!(!dir.path().join("o.h5").exists());
}

#[test]
fn config_mistakes_are_reported_once_under_mpirun() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "[mesh]\nn = 1\n[output]\npath = \"o.h5\"\n");
    let out = mpirun(2)
        .arg(BIN)
        .args(["run", &cfg])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.matches("mesh.n").count(), 1, "{stderr}");
}

#[test]
fn missing_config_file_and_cuda_without_driver_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["run", "no/such.toml"], dir.path());
    assert_eq!(out.status.code(), Some(2), "bad input exits 2");
    assert!(
        text(&out.stderr).contains("cannot read the config no/such.toml: no such file"),
        "{}",
        text(&out.stderr)
    );
    std::fs::create_dir(dir.path().join("configs")).unwrap();
    let out = run(&["run", "configs"], dir.path());
    assert_eq!(out.status.code(), Some(2), "a directory is bad input");
    assert!(
        text(&out.stderr).contains("cannot read the config configs: it is a directory"),
        "{}",
        text(&out.stderr)
    );

    let cfg = write_config(
        dir.path(),
        "backend = \"cuda\"\n[mesh]\nn = 8\n[output]\npath = \"o.h5\"\n",
    );
    let out = run(&["run", &cfg], dir.path());
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    // Either no driver here, or a driver and a method without CUDA kernels: both named.
    assert!(
        stderr.contains("no CUDA driver") || stderr.contains("no CUDA implementation"),
        "{stderr}"
    );
    assert!(!dir.path().join("o.h5").exists());
}

#[test]
fn unwritable_output_is_an_error_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("blocker"),
        "a file where a directory should be",
    )
    .unwrap();
    let cfg = write_config(
        dir.path(),
        "[mesh]\nn = 8\n[output]\npath = \"blocker/o.h5\"\n",
    );
    let out = run(&["run", &cfg], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!(
            "cannot write {}",
            dir.path()
                .canonicalize()
                .unwrap()
                .join("blocker/o.h5")
                .display()
        )),
        "{}",
        text(&out.stderr)
    );
}

/// An output path that is a directory is refused before the solve (n = 1024 would take
/// seconds to solve; the refusal is immediate), and the directory is left as it was.
#[test]
fn output_path_that_is_a_directory_is_refused_before_solving() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("results")).unwrap();
    std::fs::write(dir.path().join("results/keep.txt"), "earlier output").unwrap();
    let cfg = write_config(
        dir.path(),
        "[mesh]\nn = 1024\n[output]\npath = \"results\"\n",
    );
    let t = std::time::Instant::now();
    let out = run(&["run", &cfg], dir.path());
    assert_eq!(out.status.code(), Some(2), "bad input exits with 2");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("/results is a directory"), "{stderr}");
    assert!(
        t.elapsed().as_secs_f64() < 5.0,
        "refused only after {:?}",
        t.elapsed()
    );
    let left: Vec<_> = std::fs::read_dir(dir.path().join("results"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["keep.txt"]);
}

#[test]
fn too_large_problems_are_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    // The run of `config`, refused with exit code 2: its message.
    let refused = |config: &str| {
        let cfg = write_config(dir.path(), config);
        let out = run(&["run", &cfg], dir.path());
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        stderr
    };
    let stderr = refused("[mesh]\nkind = \"unit-cube\"\nn = 1600\n[output]\npath = \"o.h5\"\n");
    assert!(stderr.contains("GiB of memory"), "{stderr}");
    // PSC: the method and its sizes named, and M3 proposed where M1 or M2 cannot fit.
    let stderr = refused(
        "[mesh]\nn = 4096\nh0 = 0.015625\n[solver]\nmethod = \"psc-m2\"\n[output]\npath = \"o.h5\"\n",
    );
    assert!(
        stderr.contains("method psc-m2, |C| = 3969, |E| = 508032") && stderr.contains("psc-m3"),
        "{stderr}"
    );
    // On a refined domain the classes are the macro mesh's (the coarse mesh refined L0
    // times: 56,896 free vertices, its edges' 15 inner nodes each), not the unit square's.
    let stderr = refused(
        "[mesh]\nkind = \"flow-around-square\"\nlevels = 10\ncoarse_levels = 6\n[solver]\nmethod = \"psc-m1\"\n[output]\npath = \"o.h5\"\n",
    );
    assert!(
        stderr.contains("|C| = 56896, |E| = 2573760") && stderr.contains("mesh.coarse_levels"),
        "{stderr}"
    );
}

/// The run's file is read by h5dump (HDF5's own tool) and by h5py, and its numbers agree
/// with the printed summary.
#[test]
fn run_writes_a_file_h5dump_and_h5py_read() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        "[mesh]\nelement = \"p1\"\nn = 32\nh0 = 0.25\n[problem]\nk = 2\n[output]\npath = \"results/p1.h5\"\n",
    );
    let out = run(&["run", &cfg], dir.path());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for needle in [
        "unknowns            961 × 1",
        "L2 error",
        "rel. residual",
        "time [s]",
        "results/p1.h5",
    ] {
        assert!(stdout.contains(needle), "missing '{needle}' in: {stdout}");
    }
    let h5 = dir.path().join("results/p1.h5");
    assert!(dir.path().join("results/p1.xdmf").exists());

    let dump = Command::new("h5dump")
        .arg("-H")
        .arg(&h5)
        .output()
        .expect("h5dump (hdf5-tools) is installed");
    let header = text(&dump.stdout);
    assert!(dump.status.success(), "{header}");
    for needle in [
        "GROUP \"mesh\"",
        "DATASET \"coordinates\"",
        "GROUP \"hierarchy\"",
        "DATASET \"u\"",
        "ATTRIBUTE \"git_revision\"",
    ] {
        assert!(
            header.contains(needle),
            "missing {needle} in h5dump -H output"
        );
    }

    let script = r#"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    xy = f["mesh/coordinates"][...]
    u = f["solution/u"][...]
    exact = np.sin(2 * np.pi * xy[:, 0]) * np.sin(2 * np.pi * xy[:, 1])
    assert xy.shape == (33 * 33, 2) and f["mesh/cells"].shape == (2 * 32 * 32, 3)
    assert u.shape == (1, 33 * 33), u.shape
    assert np.allclose(f["solution/exact"][0], exact, atol=1e-14)
    assert np.abs(u[0] - exact).max() < 1e-2
    assert f["solution/relative_residual"][0] < 1e-12
    assert list(f["solution/k"][...]) == [2]
    assert "[mesh]" in f.attrs["config"]
    print("h5py ok", f["solution/l2_error"][0])
"#;
    let py = Command::new("python3")
        .args(["-c", script])
        .arg(&h5)
        .output()
        .expect("python3 runs");
    assert!(
        py.status.success(),
        "{}{}",
        text(&py.stdout),
        text(&py.stderr)
    );
    let l2_from_h5py: f64 = text(&py.stdout)
        .trim()
        .trim_start_matches("h5py ok ")
        .parse()
        .unwrap();
    // The first column's row: "column k L2 …".
    let printed = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("0 "))
        .unwrap();
    let printed: f64 = printed.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(
        (l2_from_h5py - printed).abs() <= 1e-4 * printed,
        "{l2_from_h5py} vs {printed}"
    );
}

#[test]
fn run_without_config_uses_the_embedded_quickstart() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["run"], dir.path());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("32 columns in 4 batches of ≤ 8 over 1 operator(s), 1 rank(s)"),
        "{stdout}"
    );
    assert!(stdout.contains("max relative residual (f64)"), "{stdout}");
    let campaign = dir.path().join("out/quickstart/campaign.h5");
    assert!(campaign.exists());

    // The post-processing script reads it: summary table and plots.
    let report = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/postprocess/report.py"
        ))
        .arg(&campaign)
        .output()
        .expect("python3 runs");
    let printed = text(&report.stdout);
    assert!(report.status.success(), "{printed}{}", text(&report.stderr));
    assert!(printed.contains("32 columns"), "{printed}");
    let figures = [
        "timeline.png",
        "throughput.png",
        "accuracy.png",
        "iterations.png",
        "solution.png",
    ];
    for png in figures {
        let path = dir.path().join("out/quickstart/report").join(png);
        let bytes = std::fs::read(&path).unwrap_or_else(|_| panic!("{} written", path.display()));
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is a PNG");
    }
    // One self-contained page: every figure embedded, the summary tables and the config.
    let page = std::fs::read_to_string(dir.path().join("out/quickstart/report/index.html"))
        .expect("index.html written");
    for png in figures {
        assert!(
            page.contains(&format!(
                "<img alt=\"{png}\" src=\"data:image/png;base64,iVBORw0KGgo"
            )),
            "{png} embedded"
        );
    }
    assert!(page.contains("<th>MDof/s while solving</th>"), "rank table");
    assert!(page.contains("<td>solve</td>"), "stage table");
    assert!(page.contains("[campaign.time_series]"), "config echo");
    assert!(
        !page.contains("src=\"http"),
        "nothing fetched from elsewhere"
    );
}

/// The f64 relative residual of a line of a run's column table (before its tolerance).
fn residual_column(line: &str) -> f64 {
    let fields: Vec<&str> = line.split_whitespace().collect();
    fields[fields.len() - 2].parse().unwrap()
}

/// A PSC block solve in f16 with refinement: every column reaches the f64 tolerance; the
/// second run loads the operator cache; a corrupted cache is detected and rebuilt.
#[test]
fn psc_runs_use_and_repair_the_operator_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        "[mesh]\nn = 64\nh0 = 0.125\n[problem]\nk = [1, 3]\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f16\"\nnrhs = 3\nrtol = 1e-12\n[output]\npath = \"o.h5\"\n",
    );
    let first = run(&["run", &cfg], dir.path());
    let stdout = text(&first.stdout);
    assert!(first.status.success(), "{stdout}{}", text(&first.stderr));
    assert!(
        stdout.contains("computed and saved to the operator cache"),
        "{stdout}"
    );
    let residuals: Vec<f64> = stdout
        .lines()
        .filter(|l| {
            l.trim_start()
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
        .map(residual_column)
        .collect();
    assert_eq!(residuals.len(), 3, "{stdout}");
    assert!(residuals.iter().all(|&r| r <= 1e-12), "{residuals:?}");

    let second = run(&["run", &cfg], dir.path());
    assert!(
        text(&second.stdout).contains("loaded from the operator cache"),
        "{}",
        text(&second.stdout)
    );

    // A truncated cache file (an interrupted copy, a full disk) is noticed and rebuilt.
    let cache = std::fs::read_dir(dir.path().join("psc-cache"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let bytes = std::fs::read(&cache).unwrap();
    std::fs::write(&cache, &bytes[..bytes.len() / 2]).unwrap();
    let third = run(&["run", &cfg], dir.path());
    let stdout = text(&third.stdout);
    assert!(third.status.success(), "{stdout}{}", text(&third.stderr));
    assert!(stdout.contains("recomputed"), "{stdout}");
    assert!(run(&["run", &cfg], dir.path()).status.success());
    assert!(
        text(&run(&["run", &cfg], dir.path()).stdout).contains("loaded from the operator cache")
    );

    // Under refinement the f16 Π⁻¹ only preconditions: its checksum is left for a failure
    // and every solution is accepted by its f64 residual. A changed entry (the last bit of
    // the first) leaves every column at the tolerance.
    let write_entries = |values: &[u16]| {
        let file = tensorfem::io::h5::open(&cache).unwrap();
        let working = file.group("working/f16").unwrap();
        let (rows, cols, offset) =
            tensorfem::io::h5::dense_location::<half::f16>(&working, "pi_inv").unwrap();
        assert!(rows * cols >= values.len());
        drop(file);
        let mut bytes = std::fs::read(&cache).unwrap();
        let at = offset.expect("stored contiguously") as usize;
        for (k, v) in values.iter().enumerate() {
            bytes[at + 2 * k..at + 2 * k + 2].copy_from_slice(&v.to_le_bytes());
        }
        std::fs::write(&cache, bytes).unwrap();
    };
    let first_entry = {
        let file = tensorfem::io::h5::open(&cache).unwrap();
        let (_, _, data) = tensorfem::io::h5::read_dense::<half::f16>(
            &file.group("working/f16").unwrap(),
            "pi_inv",
        )
        .unwrap();
        data[0].to_bits()
    };
    write_entries(&[first_entry ^ 1]);
    let changed = run(&["run", &cfg], dir.path());
    let stdout = text(&changed.stdout);
    assert!(
        changed.status.success(),
        "{stdout}{}",
        text(&changed.stderr)
    );
    assert!(
        stdout.contains("loaded from the operator cache"),
        "{stdout}"
    );
    let residuals: Vec<f64> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(residual_column)
        .collect();
    assert_eq!(residuals.len(), 3, "{stdout}");
    assert!(residuals.iter().all(|&r| r <= 1e-12), "{residuals:?}");

    // NaN entries stop the refinement: the failure is traced to the file, which is
    // removed, and the next run rebuilds it.
    write_entries(&[0x7e00; 64]);
    let failed = run(&["run", &cfg], dir.path());
    let stderr = text(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&cache.display().to_string())
            && stderr.contains("do not match their checksum: the file is corrupted")
            && stderr.contains("the next run rebuilds it"),
        "{stderr}"
    );
    assert!(!cache.exists(), "the corrupted cache file is removed");
    let rebuilt = run(&["run", &cfg], dir.path());
    assert!(rebuilt.status.success(), "{}", text(&rebuilt.stderr));
    assert!(
        text(&rebuilt.stdout).contains("computed and saved to the operator cache"),
        "{}",
        text(&rebuilt.stdout)
    );
}

/// psc-m2 and psc-m3 run from configs like psc-m1: M3 inside PSC-IR reaches the f64
/// tolerance and reports its CG iterations (terminal, /solution); a study over the three
/// methods logs M3's CG iterations per batch in /perf/cg_iterations (−1 for M1 and M2).
#[test]
fn psc_m2_and_m3_run_alone_and_in_a_study() {
    use tensorfem::io::h5;
    let dir = tempfile::tempdir().unwrap();
    for method in ["psc-m2", "psc-m3"] {
        let cfg = write_config(
            dir.path(),
            &format!("[mesh]\nn = 64\nh0 = 0.125\n[problem]\nk = [1, 3]\n[solver]\nmethod = \"{method}\"\nprecision = \"f32\"\nnrhs = 3\nrtol = 1e-12\n[output]\npath = \"{method}.h5\"\n"),
        );
        let out = run(&["run", &cfg], dir.path());
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
        assert!(stdout.contains(&format!("method {method}")), "{stdout}");
        let residuals: Vec<f64> = stdout
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .map(residual_column)
            .collect();
        assert_eq!(residuals.len(), 3, "{stdout}");
        assert!(residuals.iter().all(|&r| r <= 1e-12), "{residuals:?}");
        let file = h5::open(&dir.path().join(format!("{method}.h5"))).unwrap();
        let solution = file.group("solution").unwrap();
        let cg: Option<u64> = h5::read_scalar_attr(&solution, "cg_iterations").ok();
        if method == "psc-m3" {
            assert!(stdout.contains("CG iterations"), "{stdout}");
            assert!(cg.is_some_and(|c| c > 0), "{cg:?}");
        } else {
            assert!(
                cg.is_none() && !stdout.contains("CG iterations"),
                "{stdout}"
            );
        }
    }

    let cfg = write_config(
        dir.path(),
        "[mesh]\nn = 32\nh0 = 0.125\n[solver]\nmethod = \"psc-m3\"\nprecision = \"f32\"\ncg_rtol = 1e-5\nrtol = 1e-12\n\
         [campaign]\nrhs = \"study\"\nbatch_size = 2\ndirectory = \"study\"\n\
         [campaign.study]\nk = [1, 2]\nmethod = [\"psc-m1\", \"psc-m2\", \"psc-m3\"]\n",
    );
    let out = run(&["run", &cfg], dir.path());
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let file = h5::open(&dir.path().join("study/campaign.h5")).unwrap();
    let perf = file.group("perf").unwrap();
    let methods: Vec<String> = h5::read_vector::<hdf5::types::VarLenUnicode>(&perf, "method")
        .unwrap()
        .iter()
        .map(|m| m.as_str().to_string())
        .collect();
    let cg: Vec<i64> = h5::read_vector(&perf, "cg_iterations").unwrap();
    let residuals: Vec<f64> = h5::read_vector(&perf, "max_relative_residual").unwrap();
    assert_eq!(methods, ["psc-m1", "psc-m2", "psc-m3"]);
    assert_eq!(&cg[..2], [-1, -1]);
    assert!(cg[2] > 0, "{cg:?}");
    assert!(residuals.iter().all(|&r| r <= 1e-12), "{residuals:?}");
}

/// Every line of a successful command's output, one JSON object each.
fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_str(text(&out.stdout).trim()).expect("one JSON object")
}

#[test]
fn psc_info_prints_the_spec_keys() {
    let dir = tempfile::tempdir().unwrap();
    let v = json(&run(
        &["psc-info", "--n", "32", "--n0", "4", "--whole", "--json"],
        dir.path(),
    ));
    for key in [
        "n",
        "n0",
        "element",
        "C",
        "E",
        "I",
        "kappa_Ci",
        "kappa_Pi",
        "nnz_Ci_inv_over_fem",
        "nnz_Pi_inv_over_fem",
        "kappa_A",
        "kappa_hb",
        "kappa_prehandled",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    // The class sizes of docs/mathematics.md §3 for h = 1/32, h0 = 1/4.
    assert_eq!(
        (v["C"].as_u64(), v["E"].as_u64(), v["I"].as_u64()),
        (Some(9), Some(168), Some(784))
    );
    let p1 = json(&run(
        &[
            "psc-info",
            "--n",
            "32",
            "--n0",
            "4",
            "--element",
            "p1",
            "--json",
        ],
        dir.path(),
    ));
    assert_eq!(p1["E"].as_u64(), Some((3 * 4 - 2) * (32 - 4)));

    let bad = run(&["psc-info", "--n", "30", "--n0", "4"], dir.path());
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("n = n0·2^j"),
        "{}",
        text(&bad.stderr)
    );
}

/// The flow around a square (docs/mathematics.md §8.1): |C| = 42 at L0 = 1, three groups of
/// 12·4, 8·4 and 8·4 macro elements, N and the per-group list in the JSON; option mistakes
/// exit 2.
#[test]
fn psc_info_on_the_flow_around_a_square() {
    let dir = tempfile::tempdir().unwrap();
    let v = json(&run(
        &[
            "psc-info",
            "--mesh",
            "flow-around-square",
            "--levels",
            "4",
            "--coarse-levels",
            "1",
            "--json",
        ],
        dir.path(),
    ));
    assert_eq!(v["C"].as_u64(), Some(42));
    // N: all nodes (21 + 49·15 + 28·105) minus the 14·16 boundary nodes.
    assert_eq!(v["N"].as_u64(), Some(21 + 49 * 15 + 28 * 105 - 14 * 16));
    let sum = ["C", "E", "I"]
        .iter()
        .map(|k| v[k].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(Some(sum), v["N"].as_u64());
    let members: Vec<u64> = v["group_blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["members"].as_u64().unwrap())
        .collect();
    assert_eq!(members, [48, 32, 32]);
    assert_eq!(v["groups"].as_u64(), Some(3));
    // The pressure's conditions: Neumann except at the outflow (x = 4: 17 nodes at L = 4);
    // the 25 coarse boundary vertices off the outflow join C at L0 = 1.
    let p = json(&run(
        &[
            "psc-info",
            "--mesh",
            "flow-around-square",
            "--levels",
            "4",
            "--coarse-levels",
            "1",
            "--bc",
            "pressure",
            "--json",
        ],
        dir.path(),
    ));
    assert_eq!(p["bc"].as_str(), Some("pressure"));
    assert_eq!(p["C"].as_u64(), Some(42 + 25));
    assert_eq!(
        p["N"].as_u64(),
        Some(v["N"].as_u64().unwrap() + 14 * 16 - 17)
    );
    for (args, message) in [
        (&["--coarse-levels", "1"][..], "needs --levels"),
        (
            &["--levels", "4", "--whole"],
            "needs one L0 (--coarse-levels)",
        ),
        (&["--levels", "4", "--file", "x.msh"], "--file"),
        (&["--levels", "4", "--element", "q1"], "--element p1"),
        (
            &["--levels", "3", "--coarse-levels", "3"],
            "must be below --levels",
        ),
        (
            &["--levels", "3", "--coarse-levels", "1", "--element", "q1"],
            "--element p1",
        ),
        (
            &["--levels", "3", "--coarse-levels", "1", "--bc", "neumann"],
            "invalid value",
        ),
        (
            &["--n", "32", "--levels", "3", "--coarse-levels", "1"],
            "not --n or --n0",
        ),
    ] {
        let mut all = vec!["psc-info", "--mesh", "flow-around-square"];
        all.extend(args);
        let bad = run(&all, dir.path());
        assert_eq!(bad.status.code(), Some(2), "{args:?}");
        assert!(text(&bad.stderr).contains(message), "{}", text(&bad.stderr));
    }
    // A Gmsh file's mesh: the file decides the element; P1 needs two refinements.
    let mesh = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/inputs/meshes/channel-cylinder.msh"
    );
    let v = json(&run(
        &[
            "psc-info", "--mesh", "gmsh", "--file", mesh, "--levels", "2", "--json",
        ],
        dir.path(),
    ));
    assert_eq!(v["mesh"].as_str(), Some("gmsh"));
    assert_eq!(v["element"].as_str(), Some("p1"));
    for (args, message) in [
        (&["--levels", "1"][..], "at least 2 refinements"),
        (&["--levels", "2", "--element", "q1"], "holds p1 cells"),
    ] {
        let mut all = vec!["psc-info", "--mesh", "gmsh", "--file", mesh];
        all.extend(args);
        let bad = run(&all, dir.path());
        assert_eq!(bad.status.code(), Some(2), "{args:?}");
        assert!(text(&bad.stderr).contains(message), "{}", text(&bad.stderr));
    }
}

#[test]
fn bench_commands_print_their_json_keys() {
    let dir = tempfile::tempdir().unwrap();
    let m = json(&run(&["bench", "machine", "--json"], dir.path()));
    for key in [
        "triad_gbs",
        "read_gbs",
        "gemm_gflops_f64",
        "gemm_gflops_f32",
        "gemm_gflops_tf32",
        "gemm_gflops_f16",
    ] {
        assert!(m[key].as_f64().is_some_and(|v| v > 0.0), "{key} in {m}");
    }
    assert!(
        ["scalar", "avx2", "avx512"].contains(&m["simd"].as_str().unwrap_or("")),
        "simd in {m}"
    );
    assert_eq!(m["gemm_size"].as_u64(), Some(2048), "the default size: {m}");
    // A quick check at a given GEMM size; sizes outside 1 to 16384 refused by name.
    let small = json(&run(
        &["bench", "machine", "--json", "--gemm-size", "128"],
        dir.path(),
    ));
    assert_eq!(small["gemm_size"].as_u64(), Some(128), "{small}");
    assert!(small["gemm_gflops_f16"].as_f64().is_some_and(|v| v > 0.0));
    for bad in ["0", "16385", "big"] {
        let out = run(&["bench", "machine", "--gemm-size", bad], dir.path());
        assert_eq!(out.status.code(), Some(2), "--gemm-size {bad}");
        assert!(
            text(&out.stderr).contains("is not a GEMM size from 1 to 16384"),
            "{}",
            text(&out.stderr)
        );
    }
    // The same small problem, with more arguments each time.
    let psc = |extra: &[&str]| {
        let base = [
            "bench", "psc", "--n", "64", "--n0", "8", "--nrhs", "4", "--json",
        ];
        json(&run(&[base.as_slice(), extra].concat(), dir.path()))
    };
    let p = psc(&["--precision", "f64"]);
    for key in [
        "n",
        "n0",
        "nrhs",
        "precision",
        "setup_seconds",
        "solve_seconds",
        "mdofs",
        "gflops",
        "gemm_peak_fraction",
        "relative_residual",
        "l2_error",
    ] {
        assert!(p.get(key).is_some(), "missing {key} in {p}");
    }
    assert!(
        p["relative_residual"].as_f64().unwrap() < 1e-10,
        "f64 M1 is a direct solve: {p}"
    );
    assert!(p["l2_error"].as_f64().unwrap() < 1e-2, "{p}");
    assert!(p["refine_steps"].is_null(), "no refinement asked: {p}");

    // Lists of precisions and widths: a row each, in that order, after one set-up.
    let out = run(
        &[
            "bench",
            "psc",
            "--n",
            "64",
            "--n0",
            "8",
            "--nrhs",
            "1,4",
            "--precision",
            "f64,f32",
            "--runs",
            "1",
            "--json",
        ],
        dir.path(),
    );
    let rows = json_lines(&out);
    let order: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["precision"].as_str().unwrap().into(),
                r["nrhs"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [("f64", 1), ("f64", 4), ("f32", 1), ("f32", 4)].map(|(p, k)| (p.into(), k));
    assert_eq!(order, want);
    assert!(rows
        .iter()
        .all(|r| r["setup_seconds"] == rows[0]["setup_seconds"]));
    assert!(
        rows[1]["relative_residual"].as_f64().unwrap() < 1e-10,
        "{}",
        rows[1]
    );
    assert!(rows[0]["stage_seconds"].is_null(), "no stages asked");

    // --stages: every stage of the apply, in order, each with its seconds (the csr
    // coupling's here, the default's below).
    let st = psc(&["--precision", "f32", "--stages", "--coupling", "csr"]);
    assert_eq!(st["coupling"], "csr", "{st}");
    let stages: Vec<(String, f64)> = st["stage_seconds"]
        .as_array()
        .unwrap_or_else(|| panic!("stage_seconds in {st}"))
        .iter()
        .map(|s| {
            (
                s["stage"].as_str().unwrap().into(),
                s["seconds"].as_f64().unwrap(),
            )
        })
        .collect();
    let names: Vec<&str> = stages.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "Sᵀ b, gather",
            "C⁻¹ b_I",
            "D",
            "C/E system",
            "b_I − Dᵀx_E",
            "C⁻¹ r_I",
            "scatter, S",
            "statistics"
        ]
    );
    assert!(stages.iter().all(|(_, s)| *s > 0.0), "{st}");
    // Beside each stage its model: compulsory bytes and counted flops, and the time they
    // take at the bandwidth and GEMM peak of the same run.
    let entry = |i: usize, key: &str| st["stage_seconds"][i][key].as_f64().unwrap();
    let (bandwidth, peak) = (
        st["triad_gbs"].as_f64().unwrap() * 1e9,
        st["gemm_peak_gflops"].as_f64().unwrap() * 1e9,
    );
    for i in 0..stages.len() {
        let model = (entry(i, "bytes") / bandwidth).max(entry(i, "flops") / peak);
        assert!(model > 0.0, "{st}");
        assert!(
            (entry(i, "model_seconds") - model).abs() <= 1e-12 * model,
            "{st}"
        );
    }
    // The stages' flops are the apply's counted flops.
    let flops: f64 = (0..stages.len()).map(|i| entry(i, "flops")).sum();
    let counted = st["gflops_counted"].as_f64().unwrap() * st["solve_seconds"].as_f64().unwrap();
    assert!((flops / 1e9 - counted).abs() <= 1e-9 * counted, "{st}");
    // Counted by hand: Q1, h = 1/64, h0 = 1/8, 4 columns of f32. N = 63² = 3969 unknowns,
    // |C| = 7² = 49, |E| = 2·7·63 − 2·49 = 784, |I| = 64 macro elements of 7² = 3136 (no
    // padding below 112). The gather reads b and writes b_C, b_E, b_I (N each per
    // column), the columns' scales, and reads the C/E/I indices (u32), L_C⁻¹ (|C|²) and
    // the E and I scalings; the grid's transform reads nothing more.
    let (n, c, e, i, k, f32_bytes) = (3969.0, 49.0, 784.0, 3136.0, 4.0, 4.0);
    let gather = f32_bytes * (k * 2.0 * n + k + c * c + e + i) + 4.0 * n;
    assert_eq!(entry(0, "bytes"), gather, "{st}");
    // C⁻¹ b_I: b_I in, the product out, one 49² inverse shared by the identical macro
    // elements; 2·49²·64 flops per column.
    assert_eq!(
        entry(1, "bytes"),
        f32_bytes * (2.0 * k * i + 49.0 * 49.0),
        "{st}"
    );
    assert_eq!(entry(1, "flops"), 2.0 * 49.0 * 49.0 * 64.0 * k, "{st}");
    // The statistics read x and write 2k + 1 f64 partials.
    assert_eq!(
        entry(7, "bytes"),
        f32_bytes * k * n + 8.0 * (2.0 * k + 1.0),
        "{st}"
    );

    // The default coupling, D per macro element: its four stages in place of C⁻¹ and D.
    let el = psc(&["--precision", "f32", "--stages"]);
    assert_eq!(el["coupling"], "element", "{el}");
    let names: Vec<&str> = el["stage_seconds"]
        .as_array()
        .unwrap_or_else(|| panic!("stage_seconds in {el}"))
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Sᵀ b, gather",
            "D̂C⁻¹ b_I",
            "assemble g",
            "C/E system",
            "[b_I; −x_∂]",
            "[C⁻¹ W] r",
            "scatter, S",
            "statistics"
        ]
    );
    let entry = |i: usize, key: &str| el["stage_seconds"][i][key].as_f64().unwrap();
    // Each macro element's 7² interior unknowns and its 4·7 = 28 boundary positions: D̂C⁻¹
    // b_I reads b_I and W (49 × 28), writes 28 values per macro element and column; 2·28·49
    // flops per macro element and column. The last product reads [b_I; −x_∂] (77 slots)
    // and [C⁻¹ | W] (49 × 77), writes x_I.
    let (b, elements) = (28.0, 64.0);
    assert_eq!(
        entry(1, "bytes"),
        f32_bytes * (k * i + k * elements * b + 49.0 * b),
        "{el}"
    );
    assert_eq!(entry(1, "flops"), 2.0 * b * 49.0 * elements * k, "{el}");
    assert_eq!(
        entry(5, "bytes"),
        f32_bytes * (k * elements * (49.0 + b) + k * i + 49.0 * (49.0 + b)),
        "{el}"
    );
    assert_eq!(
        entry(5, "flops"),
        2.0 * 49.0 * (49.0 + b) * elements * k,
        "{el}"
    );
    // The same solution as the csr coupling's, to f32 rounding.
    let l2 = |r: &serde_json::Value| r["l2_error"].as_f64().unwrap();
    assert!((l2(&el) - l2(&st)).abs() <= 1e-3 * l2(&st), "{el}\n{st}");

    // --refine: f16 M1 inside f64 refinement reaches the f64 tolerance in a few steps.
    let r = psc(&["--precision", "f16", "--refine", "--rtol", "1e-11"]);
    let steps = r["refine_steps"].as_u64().expect("refine_steps");
    assert!((1..=20).contains(&steps), "{r}");
    assert!(r["relative_residual"].as_f64().unwrap() <= 1e-11, "{r}");
    // …passing 1e-6 and then 1e-10 on the way, each with its time and step.
    let at = |key: &str| r[key].as_f64().unwrap_or_else(|| panic!("{key} in {r}"));
    let (s6, s10) = (at("steps_to_1e6"), at("steps_to_1e10"));
    assert!(1.0 <= s6 && s6 <= s10 && s10 <= steps as f64, "{r}");
    assert!(
        0.0 < at("seconds_to_1e6") && at("seconds_to_1e6") <= at("seconds_to_1e10"),
        "{r}"
    );
    assert!(
        r["reference_solve_seconds"].is_null(),
        "no reference asked: {r}"
    );
    // tf32: f32 operators, GEMM operands rounded to TF32; refined to f64 accuracy too, and
    // named in the row.
    let t = psc(&["--precision", "tf32", "--refine", "--rtol", "1e-11"]);
    assert_eq!(t["precision"], "tf32", "{t}");
    assert!(t["relative_residual"].as_f64().unwrap() <= 1e-11, "{t}");
    // --reference: the sparse Cholesky's solve of the same block, timed beside it.
    let c = psc(&[
        "--precision",
        "f32",
        "--refine",
        "--rtol",
        "1e-10",
        "--reference",
    ]);
    let at = |key: &str| c[key].as_f64().unwrap_or_else(|| panic!("{key} in {c}"));
    assert!(at("reference_factor_seconds") > 0.0, "{c}");
    assert!(0.0 < at("reference_solve_seconds"), "{c}");
    assert!(
        at("reference_solve_seconds") <= at("reference_solve_seconds_median"),
        "{c}"
    );
    assert!(
        at("reference_relative_residual") < 1e-12,
        "a direct f64 solve: {c}"
    );
    // PSC-IR to a residual of 1e-10 is within κ(A)·1e-10 (κ ≈ 1,700 at n = 64) of it.
    let difference = at("reference_difference");
    assert!(0.0 < difference && difference < 1e-6, "{c}");

    // --method m3: CG iterations and the stopping rule are reported; M1 at a size whose
    // dense |E|×|E| operators no machine holds is refused before any set-up, naming the
    // method, its sizes and M3.
    let m3 = psc(&["--method", "m3", "--precision", "f64", "--rtol", "1e-11"]);
    assert_eq!(m3["method"], "PSC-M3", "{m3}");
    assert!(m3["cg_iterations"].as_u64().is_some_and(|i| i > 0), "{m3}");
    assert_eq!(m3["cg_rtol"].as_f64(), Some(1e-12), "rtol/10: {m3}");
    assert!(m3["relative_residual"].as_f64().unwrap() <= 1e-11, "{m3}");
    let out = run(
        &[
            "bench", "psc", "--n", "4096", "--n0", "64", "--method", "m1",
        ],
        dir.path(),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("PSC-M1")
            && stderr.contains("|E| = 508032")
            && stderr.contains("--method m3"),
        "{stderr}"
    );
}

#[test]
fn bench_mg_prints_its_json_keys_and_refuses_bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &[
            "bench",
            "mg",
            "--dim",
            "2",
            "--n",
            "64",
            "--variant",
            "H_MG",
            "--nrhs",
            "2",
            "--json",
        ],
        dir.path(),
    );
    let v = json(&out);
    for key in [
        "iterations",
        "seconds",
        "seconds_per_iteration",
        "mdofs",
        "gbs",
        "residual",
        "l2_error",
        "variant",
        "n",
        "dim",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["variant"], "H_MG");
    assert!(v["residual"].as_f64().unwrap() < 1e-9, "{v}");
    assert!(v["l2_error"].as_f64().unwrap() < 1e-3, "{v}");
    let all = run(
        &["bench", "mg", "--dim", "3", "--n", "16", "--json"],
        dir.path(),
    );
    let lines = json_lines(&all);
    assert_eq!(
        lines.len(),
        5,
        "four variants and the stand-alone f64 multigrid"
    );
    assert!(lines
        .iter()
        .all(|l| l["speedup_vs_d_mg"].as_f64().is_some()));
    // The stages of the cycles, in the order they first run, the refinement's own stages,
    // and what else lies between the cycles: together the time to solution.
    let staged = run(
        &[
            "bench",
            "mg",
            "--n",
            "64",
            "--variant",
            "D_MG",
            "--stages",
            "--json",
        ],
        dir.path(),
    );
    assert!(staged.status.success(), "{}", text(&staged.stderr));
    let v: serde_json::Value = serde_json::from_str(text(&staged.stdout).trim()).unwrap();
    let stages = v["stage_seconds"].as_array().unwrap();
    let names: Vec<&str> = stages
        .iter()
        .map(|t| t["stage"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "smoothing",
            "residual",
            "restriction",
            "base solve",
            "prolongation",
            "first residual",
            "scaled cast r/α",
            "update x, r",
            "between cycles"
        ]
    );
    let seconds: Vec<f64> = stages
        .iter()
        .map(|t| t["seconds"].as_f64().unwrap())
        .collect();
    assert!(seconds.iter().all(|&s| s >= 0.0), "{v}");
    let total = v["seconds"].as_f64().unwrap();
    assert!(
        (seconds.iter().sum::<f64>() - total).abs() <= 1e-9 * total.max(1.0),
        "{v}"
    );
    assert_eq!(v["device"].as_str().unwrap().split(' ').next(), Some("cpu"));
    for bad in [
        vec!["bench", "mg", "--n", "64", "--variant", "Q_MG"],
        vec!["bench", "mg", "--n", "64", "--variant", "H_MG,Q_MG"],
        vec!["bench", "mg", "--n", "63", "--levels", "3"],
        vec!["bench", "mg", "--n", "64", "--dim", "4"],
        vec!["bench", "mg", "--n", "64", "--smoother", "sor"],
        vec!["bench", "mg", "--n", "7", "--kernels"],
    ] {
        let out = run(&bad, dir.path());
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("error:"), "{bad:?}");
    }
    // Each kernel alone on the finest two levels: four sweeps (Jacobi, Chebyshev,
    // residual, Jacobi from zero), two transfers (finest level only) per precision, three
    // refinement updates (f64 matrix).
    let kernels = run(
        &["bench", "mg", "--n", "32", "--kernels", "--json"],
        dir.path(),
    );
    let lines = json_lines(&kernels);
    assert_eq!(lines.len(), (3 * 6 + 3) + (3 * 4 + 3), "{lines:?}");
    assert!(lines
        .iter()
        .all(|l| l["gbs"].as_f64().unwrap() > 0.0 && l["triad_fraction"].as_f64().unwrap() > 0.0));
    assert_eq!(lines[0]["n"], 32);
    assert_eq!(lines.last().unwrap()["n"], 16);
    // 3D: the levels' rounding-level entries are dropped as the solver drops them (f16
    // would refuse them as underflows).
    let cube = run(
        &["bench", "mg", "--dim", "3", "--n", "8", "--kernels"],
        dir.path(),
    );
    assert!(cube.status.success(), "{}", text(&cube.stderr));
}

/// `method = "mg"` runs: a 2D block with a preset, a 3D custom schedule; the output file
/// records the schedule; config mistakes specific to mg are all named.
#[test]
fn mg_runs_from_configs() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        "[mesh]\nn = 128\n[problem]\nk = [1, 20, 400]\n[solver]\nmethod = \"mg\"\nvariant = \"DSH_MG\"\n[output]\npath = \"mg.h5\"\n",
    );
    let out = run(&["run", &cfg], dir.path());
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("DSH_MG") && stdout.contains("iterations"),
        "{stdout}"
    );
    let dump = Command::new("h5dump")
        .args(["-a", "/solution/precision", "mg.h5"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        text(&dump.stdout).contains("f64,f64,f32,f16,f16"),
        "{}",
        text(&dump.stdout)
    );
    let cube = write_config(
        dir.path(),
        "[mesh]\nkind = \"unit-cube\"\nn = 16\n[solver]\nmethod = \"mg\"\nschedule = [\"f16\", \"f32\"]\nlevels = 2\n[output]\npath = \"cube.h5\"\n",
    );
    let out = run(&["run", &cube], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));

    let bad = write_config(
        dir.path(),
        "[mesh]\nn = 96\nh0 = 0.25\n[solver]\nmethod = \"mg\"\nschedule = [\"f16\", \"f64\"]\nvariant = \"H_MG\"\nlevels = 7\nrefine = false\nprecision = \"f32\"\n[output]\npath = \"x.h5\"\n",
    );
    let out = run(&["run", &bad], dir.path());
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for key in [
        "mesh.h0",
        "solver.levels",
        "solver.schedule",
        "solver.precision",
    ] {
        assert!(stderr.contains(key), "{key} not named: {stderr}");
    }
    assert!(!dir.path().join("x.h5").exists());
    let f16_standalone = write_config(
        dir.path(),
        "[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nvariant = \"H_MG\"\nrefine = false\n[output]\npath = \"y.h5\"\n",
    );
    let out = run(&["run", &f16_standalone], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("solver.refine"),
        "{}",
        text(&out.stderr)
    );
}

/// jobs/run-local.sh from another working directory: the config is found relative to where
/// it is called, and its relative `campaign.directory` lands beside the config.
#[test]
fn run_local_works_from_any_directory() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("sub")).unwrap();
    std::fs::write(
        tmp.path().join("sub/c.toml"),
        "[mesh]\nn = 16\n[solver]\nmethod = \"cholesky\"\n[campaign]\nrhs = \"study\"\n\
         batch_size = 2\ndirectory = \"out\"\n[campaign.study]\nk = [1, 2, 3]\n",
    )
    .unwrap();
    let out = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/jobs/run-local.sh"))
        .args(["-n", "1", "sub/c.toml"])
        .current_dir(tmp.path())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(tmp.path().join("sub/out/campaign.h5").exists());
    assert!(!tmp.path().join("out").exists());
}

/// `tensorfem mesh` writes a refined mesh that reads back with its hierarchy and boundary
/// parts, and an XDMF sidecar beside it; a Gmsh mesh without --file is refused.
#[test]
fn mesh_export_writes_a_readable_refined_mesh() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &[
            "mesh",
            "--mesh",
            "flow-around-square",
            "--levels",
            "2",
            "--output",
            "flow.h5",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout)
            .contains("inflow dirichlet, outflow dirichlet, walls dirichlet, obstacle dirichlet"),
        "{}",
        text(&out.stdout)
    );
    let file = tensorfem::io::h5::open(&dir.path().join("flow.h5")).unwrap();
    let mesh: tensorfem::mesh::Mesh2d =
        tensorfem::io::h5::read_mesh(&file.group("mesh").unwrap()).unwrap();
    let built =
        tensorfem::mesh::refine(&tensorfem::mesh::CoarseMesh::flow_around_square(), 2).unwrap();
    assert_eq!(mesh, built, "the mesh reads back as built");
    // 14 coarse boundary edges, 4 fine edges each.
    assert_eq!(mesh.boundary.edges.len(), 14 * 4);
    let xdmf = std::fs::read_to_string(dir.path().join("flow.xdmf")).unwrap();
    assert!(xdmf.contains("Triangle") && xdmf.contains("/fields/boundary_part"));

    let bad = run(
        &[
            "mesh", "--mesh", "gmsh", "--levels", "2", "--output", "x.h5",
        ],
        dir.path(),
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("needs --file"),
        "{}",
        text(&bad.stderr)
    );
    assert!(!dir.path().join("x.h5").exists());

    // From a config: the pressure's conditions leave every node but the outflow's 2² + 1
    // as load nodes, in node order, the outflow's as Dirichlet nodes.
    let config = write_config(
        dir.path(),
        "[mesh]\nkind = \"flow-around-square\"\nlevels = 2\ncoarse_levels = 1\n\
         [boundary]\ninflow = \"neumann\"\noutflow = \"dirichlet\"\nwalls = \"neumann\"\nobstacle = \"neumann\"\n\
         [output]\npath = \"x.h5\"\n",
    );
    let out = run(
        &["mesh", "--config", &config, "--output", "pressure.h5"],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = tensorfem::io::h5::open(&dir.path().join("pressure.h5")).unwrap();
    let group = file.group("mesh").unwrap();
    let loads: Vec<u32> = tensorfem::io::h5::read_vector(&group, "load_nodes").unwrap();
    let dirichlet: Vec<u32> = tensorfem::io::h5::read_vector(&group, "dirichlet_nodes").unwrap();
    let mesh: tensorfem::mesh::Mesh2d = tensorfem::io::h5::read_mesh(&group).unwrap();
    assert_eq!(dirichlet.len(), 5);
    assert_eq!(loads.len() + dirichlet.len(), mesh.num_nodes());
    assert!(loads.windows(2).all(|w| w[0] < w[1]));
    assert!(dirichlet
        .iter()
        .all(|&v| (mesh.coords[v as usize][0] - 4.0).abs() < 1e-12));
}

/// Runs on the refined domains with the pressure's conditions (Neumann except at the
/// outflow): psc-m1 in f32 with refinement and multigrid with f16 coarse levels agree with
/// the sparse Cholesky on the flow around a square, and a Gmsh mesh is read relative to
/// the config's folder, whatever the working directory.
#[test]
fn runs_on_refined_domains_with_boundary_conditions() {
    let dir = tempfile::tempdir().unwrap();
    let body = |method: &str, precision: &str| {
        format!(
            "backend = \"cpu\"\n[mesh]\nkind = \"flow-around-square\"\nlevels = 4\ncoarse_levels = 1\n\
             [boundary]\ninflow = \"neumann\"\noutflow = \"dirichlet\"\nwalls = \"neumann\"\nobstacle = \"neumann\"\n\
             [problem]\nk = [1, 2]\n[solver]\nmethod = \"{method}\"\nprecision = \"{precision}\"\n\
             [output]\npath = \"{method}.h5\"\n"
        )
    };
    // The L2 errors of both columns, from the printed table.
    let errors = |out: &Output| -> Vec<f64> {
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("outflow dirichlet"), "{stdout}");
        stdout
            .lines()
            .skip_while(|l| !l.contains("L2 error"))
            .skip(1)
            .take(2)
            .map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                let residual: f64 = fields[5].parse().unwrap();
                assert!(residual < 1e-10, "{l}");
                fields[2].parse().unwrap()
            })
            .collect()
    };
    let first = run(
        &["run", &write_config(dir.path(), &body("psc-m1", "f32"))],
        dir.path(),
    );
    assert!(
        text(&first.stdout).contains("computed and saved to the operator cache"),
        "{}",
        text(&first.stdout)
    );
    // The set-up of this mesh and these conditions comes from the cache the second time.
    let again = run(
        &["run", &write_config(dir.path(), &body("psc-m1", "f32"))],
        dir.path(),
    );
    assert!(
        text(&again.stdout).contains("loaded from the operator cache"),
        "{}",
        text(&again.stdout)
    );
    let psc = errors(&again);
    assert_eq!(psc, errors(&first));
    let cholesky = errors(&run(
        &["run", &write_config(dir.path(), &body("cholesky", "f64"))],
        dir.path(),
    ));
    // Multigrid along the same hierarchy, f16 on the coarse levels, down to the coarse mesh,
    // preconditioning flexible CG.
    let mg = errors(&run(
        &[
            "run",
            &write_config(
                dir.path(),
                "backend = \"cpu\"\n[mesh]\nkind = \"flow-around-square\"\nlevels = 4\n\
                 [boundary]\ninflow = \"neumann\"\noutflow = \"dirichlet\"\nwalls = \"neumann\"\nobstacle = \"neumann\"\n\
                 [problem]\nk = [1, 2]\n[solver]\nmethod = \"mg\"\nvariant = \"DSH_MG\"\nkrylov = \"cg\"\nrtol = 1e-12\natol = 0.0\n\
                 [output]\npath = \"mg.h5\"\n",
            ),
        ],
        dir.path(),
    ));
    assert_eq!(psc.len(), 2);
    for ((p, m), c) in psc.iter().zip(&mg).zip(&cholesky) {
        // O(h²) errors of a few 1e-3 at h = 1/16 of the coarse cells, equal to 4 digits.
        assert!(*c > 1e-4 && *c < 3e-2, "{c}");
        assert!((p - c).abs() <= 1e-4 * c, "psc-m1 {p} vs cholesky {c}");
        assert!((m - c).abs() <= 1e-4 * c, "mg {m} vs cholesky {c}");
    }

    let meshes = dir.path().join("configs/meshes");
    std::fs::create_dir_all(&meshes).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/inputs/meshes/channel-cylinder.msh"
        ),
        meshes.join("channel.msh"),
    )
    .unwrap();
    let gmsh = dir.path().join("configs/gmsh.toml");
    std::fs::write(
        &gmsh,
        "backend = \"cpu\"\n[mesh]\nkind = \"gmsh\"\nfile = \"meshes/channel.msh\"\nlevels = 2\n\
         [boundary]\ninflow = \"neumann\"\noutflow = \"dirichlet\"\nwalls = \"neumann\"\nobstacle = \"neumann\"\n\
         [problem]\nk = 1\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f64\"\n[output]\npath = \"gmsh.h5\"\n",
    )
    .unwrap();
    let out = run(&["run", gmsh.to_str().unwrap()], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.path().join("configs/gmsh.h5").exists());
}

/// Mistakes in [mesh] and [boundary] of the refined domains are all named at once.
#[test]
fn boundary_config_mistakes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[mesh]\nkind = \"flow-around-square\"\nlevels = 3\nh0 = 0.5\ncoarse_levels = 1\n\
         [boundary]\ninflw = \"neumann\"\noutflow = { condition = \"dirichlet\", value = 1.0 }\nwalls = \"robin\"\n\
         [solver]\nmethod = \"mg\"\nlevels = 5\n[output]\npath = \"x.h5\"\n",
    );
    let out = run(&["run", &config], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    for expected in [
        "mesh.h0: does not apply to mesh.kind = \"flow-around-square\"",
        "boundary.inflw: no boundary part 'inflw' (did you mean 'inflow'?)",
        "no condition for the part(s) inflow, obstacle",
        "boundary.outflow.value: manufactured right-hand sides take the boundary data of their exact solution",
        "boundary.walls: unknown condition 'robin'",
        "solver.levels: 5 levels on a coarse mesh refined 3 times",
        "mesh.coarse_levels: applies to the psc methods only",
    ] {
        assert!(stderr.contains(expected), "missing {expected:?} in\n{stderr}");
    }
    assert!(!dir.path().join("x.h5").exists());
    let missing = write_config(
        dir.path(),
        "[mesh]\nkind = \"gmsh\"\nfile = \"nowhere.msh\"\nlevels = 2\n[output]\npath = \"x.h5\"\n",
    );
    let out = run(&["run", &missing], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("nowhere.msh"),
        "{}",
        text(&out.stderr)
    );
}

/// An input file that cannot be used is bad input (exit 2) with what to do: a directory,
/// an empty file, a file that is not HDF5, one held open for writing (HDF5's lock: the
/// holder named), and a column whose loads are subnormal. Nothing is written.
#[test]
fn unusable_input_files_exit_2_and_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let config = |input: &str| {
        write_config(
            dir.path(),
            &format!(
                "[mesh]\nn = 16\n[campaign]\nrhs = \"hdf5\"\ndirectory = \"out\"\n\
                 [campaign.input]\npath = \"{input}\"\n"
            ),
        )
    };
    std::fs::create_dir(dir.path().join("folder")).unwrap();
    std::fs::write(dir.path().join("empty.h5"), "").unwrap();
    std::fs::write(dir.path().join("text.h5"), "not HDF5\n").unwrap();
    let unknowns = 15 * 15;
    let write_rhs = |name: &str, scale: f64| {
        let values: Vec<f64> = (0..2 * unknowns)
            .map(|i| if i < unknowns { 1.0 } else { scale })
            .collect();
        let w = tensorfem::io::h5::H5Writer::create(&dir.path().join(name)).unwrap();
        tensorfem::io::h5::write_dense(w.root(), "rhs", unknowns, 2, &values).unwrap();
        w.commit().unwrap();
    };
    write_rhs("tiny.h5", 1e-310);
    write_rhs("held.h5", 1.0);
    for (input, expected) in [
        ("folder", "campaign.input.path"),
        ("folder", "is a directory; name the HDF5 file in it"),
        ("empty.h5", "is empty (0 bytes), not an HDF5 file"),
        ("text.h5", "is not an HDF5 file"),
        ("missing.h5", "missing.h5: no such file"),
        (
            "tiny.h5",
            "column 1: its largest magnitude 1.000e-310 is subnormal",
        ),
    ] {
        let cfg = config(input);
        let out = run(&["run", &cfg], dir.path());
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{input}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{input}: expected '{expected}' in {stderr}"
        );
        assert!(!dir.path().join("out/campaign.h5").exists());
    }
    // HDF5 locks a file it writes (flock): held by this process.
    let held = std::fs::File::open(dir.path().join("held.h5")).unwrap();
    held.lock().unwrap();
    let cfg = config("held.h5");
    let out = Command::new(BIN)
        .args(["run", &cfg])
        .current_dir(dir.path())
        .env_remove("HDF5_USE_FILE_LOCKING")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is held open for writing by another program (held by pid ")
            && stderr.contains("HDF5_USE_FILE_LOCKING=FALSE"),
        "{stderr}"
    );
    held.unlock().unwrap();
}

/// RAYON_NUM_THREADS and RUST_LOG that mean nothing are warned about, and the run goes on
/// with the defaults.
#[test]
fn unusable_environment_settings_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "[mesh]\nn = 8\n[output]\npath = \"o.h5\"\n");
    let out = Command::new(BIN)
        .args(["run", &cfg])
        .current_dir(dir.path())
        .env("RAYON_NUM_THREADS", "lots")
        .env("RUST_LOG", "verbose")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("RUST_LOG = \"verbose\": \"verbose\" is neither a level")
            && stderr.contains("RAYON_NUM_THREADS = \"lots\" is not a positive integer"),
        "{stderr}"
    );
    assert!(stderr.contains("[INFO]"), "logging stays at info: {stderr}");
}

/// A single run whose columns miss their tolerance (a direct f32 solve asked for 1e-8)
/// writes its file, marks the columns, and exits 1 naming them and what to change.
#[test]
fn a_run_whose_columns_miss_their_tolerance_fails() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        "[mesh]\nn = 32\nh0 = 0.25\n[problem]\nk = [1, 2]\n[solver]\nmethod = \"psc-m1\"\n\
         precision = \"f32\"\nrefine = false\nrtol = 1e-8\n[output]\npath = \"o.h5\"\n",
    );
    let out = run(&["run", &cfg], dir.path());
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("2 of 2 column(s) missed their tolerance (column 0: relative residual")
            && stderr.contains("above its tolerance 1.0e-8")
            && stderr.contains("set refine = true"),
        "{stderr}"
    );
    let f = tensorfem::io::h5::open(&dir.path().join("o.h5")).unwrap();
    let solution = f.group("solution").unwrap();
    assert_eq!(
        tensorfem::io::h5::read_vector::<u8>(&solution, "passed").unwrap(),
        [0, 0]
    );
    // Without rtol the direct solve is checked against f32's accuracy, and passes.
    let cfg = write_config(
        dir.path(),
        "[mesh]\nn = 32\nh0 = 0.25\n[problem]\nk = [1, 2]\n[solver]\nmethod = \"psc-m1\"\n\
         precision = \"f32\"\nrefine = false\n[output]\npath = \"o.h5\"\n",
    );
    let out = run(&["run", &cfg], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("1.0e-2"),
        "{}",
        text(&out.stdout)
    );
}

/// A single run stopped by Ctrl-C or SIGTERM exits 75 with a message, leaving no output.
#[test]
fn a_stopped_single_run_exits_75_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        "[mesh]\nn = 1024\n[problem]\nk = [1, 2, 3, 4]\n[solver]\nmethod = \"mg\"\n[output]\npath = \"o.h5\"\n",
    );
    for signal in ["INT", "TERM"] {
        let child = Command::new(BIN)
            .args(["run", &cfg])
            .current_dir(dir.path())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
        Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(75), "SIG{signal}: {stderr}");
        assert!(
            stderr.contains("tensorfem: stopped by SIG")
                && stderr.contains("its output was not written"),
            "{stderr}"
        );
        assert!(!dir.path().join("o.h5").exists());
    }
}

/// `tensorfem run` with `backend = "cuda"` (on the CUDA stand-in in `make test`): PSC-M1
/// refined to 1e-12, multigrid to 1e-10 and Stokes to 1e-11 each name their device and give
/// the CPU backend's solutions within what their tolerances allow. Skipped (said on stderr)
/// where there is no CUDA device, unless TENSORFEM_REQUIRE_CUDA=1.
#[test]
fn single_runs_on_cuda_give_the_cpu_solutions() {
    if tensorfem::device::cuda::test_device().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let poisson = "[problem]\nk = [1, 3]\n[output]\npath = \"out.h5\"\n";
    let cases = [
        (
            format!("[mesh]\nn = 64\nh0 = 0.125\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f32\"\nrtol = 1e-12\n{poisson}"),
            vec!["solution/u"],
            1e-8,
        ),
        (
            format!("[mesh]\nn = 64\n[solver]\nmethod = \"mg\"\nvariant = \"DSH_MG\"\nrtol = 1e-10\n{poisson}"),
            vec!["solution/u"],
            1e-6,
        ),
        (
            "[mesh]\nelement = \"q2-q1\"\nn = 16\n[solver]\nmethod = \"stokes\"\nprecision = \"f32\"\n\
             rtol = 1e-11\n[output]\npath = \"out.h5\"\n"
                .to_string(),
            vec!["velocity/x", "velocity/y", "pressure"],
            1e-7,
        ),
    ];
    for (body, datasets, tolerance) in cases {
        let mut solutions = Vec::new();
        for backend in ["cuda", "cpu"] {
            let cfg = write_config(dir.path(), &format!("backend = \"{backend}\"\n{body}"));
            let out = run(&["run", &cfg], dir.path());
            let stdout = text(&out.stdout);
            assert!(out.status.success(), "{body}{stdout}{}", text(&out.stderr));
            let device = stdout
                .lines()
                .find(|l| l.trim_start().starts_with("backend"))
                .unwrap_or_else(|| panic!("no backend line: {stdout}"));
            assert_eq!(device.split_whitespace().nth(1), Some(backend), "{device}");
            if backend == "cuda" && std::env::var("TENSORFEM_CUDA_STANDIN").is_ok_and(|v| v == "1")
            {
                assert!(device.contains("stand-in"), "{device}");
            }
            let f = tensorfem::io::h5::open(&dir.path().join("out.h5")).unwrap();
            let values: Vec<f64> = datasets
                .iter()
                .flat_map(|name| f.dataset(name).unwrap().read_raw::<f64>().unwrap())
                .collect();
            solutions.push(values);
        }
        let (cuda, cpu) = (&solutions[0], &solutions[1]);
        assert_eq!(cuda.len(), cpu.len());
        let scale = cpu.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let worst = cuda
            .iter()
            .zip(cpu)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= tolerance * scale,
            "{body}: CUDA against CPU {worst:e} of {scale:e}"
        );
    }
}

/// `bench solve --cycle-columns`: multigrid on the whole block and in chunks of two columns
/// side by side, the same steps and residuals (each column from its own seeded guess); a
/// width of 0 is refused naming the key.
#[test]
fn bench_solve_times_multigrid_in_chunks_of_columns() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "bench", "solve", "--levels", "3", "--method", "mg", "--nrhs", "5",
    ];
    let mut chunked = args.to_vec();
    chunked.extend(["--cycle-columns", "all,2,auto", "--runs", "1", "--json"]);
    let out = run(&chunked, dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = json_lines(&out);
    let settings: Vec<&str> = rows
        .iter()
        .map(|r| r["setting"].as_str().unwrap())
        .collect();
    assert_eq!(
        settings,
        [
            "DSH_MG, chebyshev, krylov cg, cycle_columns all",
            "DSH_MG, chebyshev, krylov cg, cycle_columns 2",
            "DSH_MG, chebyshev, krylov cg"
        ]
    );
    for r in &rows[1..] {
        assert_eq!(r["iterations"], rows[0]["iterations"], "{r}");
        assert_eq!(
            r["max_relative_residual"], rows[0]["max_relative_residual"],
            "{r}"
        );
    }
    let mut zero = args.to_vec();
    zero.extend(["--cycle-columns", "0"]);
    let out = run(&zero, dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("solver.cycle_columns: 0"));
}

/// `bench solve --stages`: PSC's apply stages with their model (M1's C/E system counts
/// 4|C||E| + 2|E|² flops per column and apply, |C| and |E| as the set-up reports them),
/// multigrid's cycle stages without one, the refinement's stages with one, none for the
/// sparse Cholesky; the stages of a round never take longer than its solve.
#[test]
fn bench_solve_times_the_stages() {
    let dir = tempfile::tempdir().unwrap();
    // `bench solve --stages --json` at L = 3, L0 = 1 with `args` besides: its rows.
    let staged = |args: &[&str]| {
        let mut all = vec![
            "bench",
            "solve",
            "--levels",
            "3",
            "--coarse-levels",
            "1",
            "--stages",
            "--json",
        ];
        all.extend_from_slice(args);
        let out = run(&all, dir.path());
        assert!(out.status.success(), "{}", text(&out.stderr));
        json_lines(&out)
    };
    let rows = staged(&[
        "--method",
        "psc-m1,mg,cholesky",
        "--nrhs",
        "3",
        "--runs",
        "2",
    ]);
    let stages = |r: &serde_json::Value| r["stages"].as_array().unwrap().clone();
    for r in &rows {
        assert!(r["gemm_peak_gflops"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["bandwidth_gbs"].as_f64().unwrap() > 0.0, "{r}");
        let timed: f64 = stages(r)
            .iter()
            .map(|s| s["seconds"].as_f64().unwrap())
            .sum();
        assert!(timed <= r["solve_seconds"].as_f64().unwrap(), "{r}");
    }
    let (psc, mg, cholesky) = (&rows[0], &rows[1], &rows[2]);
    let note = psc["setup_note"].as_str().unwrap();
    let size = |key: &str| -> f64 {
        let rest = &note[note.find(key).unwrap() + key.len()..];
        rest.split(',').next().unwrap().trim().parse().unwrap()
    };
    let (c, e) = (size("|C| = "), size("|E| = "));
    for s in stages(psc) {
        assert!(s["seconds"].as_f64().unwrap() >= 0.0, "{s}");
        assert!(s["bytes"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["model_seconds"].as_f64().unwrap() > 0.0, "{s}");
    }
    let schur = stages(psc)
        .into_iter()
        .find(|s| s["stage"] == "C/E system")
        .expect("M1's C/E system is a stage");
    let applies = schur["flops"].as_f64().unwrap() / ((4.0 * c * e + 2.0 * e * e) * 3.0);
    let steps = psc["iterations"].as_u64().unwrap() as f64;
    assert!(
        (applies - applies.round()).abs() < 1e-9 && (1.0..=steps + 1.0).contains(&applies),
        "{applies} applies for {steps} steps: {schur}"
    );
    // PSC-IR's own stages between the applies, each modelled: from zero the first
    // residual is b copied (32 bytes per entry, no product), each update one product with
    // A and four flops per entry.
    let (n, nnz, k) = (
        psc["unknowns"].as_f64().unwrap(),
        psc["nonzeros"].as_f64().unwrap(),
        3.0,
    );
    let stage = |r: &serde_json::Value, name: &str| {
        stages(r)
            .into_iter()
            .find(|s| s["stage"] == name)
            .unwrap_or_else(|| panic!("no stage {name}: {r}"))
    };
    assert_eq!(stage(psc, "first residual")["bytes"], 32.0 * n * k);
    let update = stage(psc, "update x, r")["flops"].as_f64().unwrap();
    assert_eq!(update, steps * (2.0 * nnz * k + 4.0 * n * k), "{psc}");
    // Multigrid: the cycle's stages without a model, then the refinement's with one.
    let (cycle, refinement): (Vec<_>, Vec<_>) =
        stages(mg).into_iter().partition(|s| s["bytes"].is_null());
    let names = |v: &[serde_json::Value]| -> Vec<String> {
        v.iter()
            .map(|s| s["stage"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(names(&cycle).contains(&"smoothing".to_string()), "{mg}");
    assert_eq!(
        names(&refinement),
        ["first residual", "scaled cast r/α", "FCG step"],
        "{mg}"
    );
    assert!(stages(cholesky).is_empty(), "{cholesky}");
    // A solve in chunks of different widths (2 columns, then 1) reports both chunks'
    // refinement stages: the first residual's flops are those of the 3 columns at once.
    let rows = staged(&[
        "--method",
        "mg",
        "--cycle-columns",
        "3,2",
        "--nrhs",
        "3",
        "--runs",
        "1",
    ]);
    let first_flops: Vec<f64> = rows
        .iter()
        .map(|r| stage(r, "first residual")["flops"].as_f64().unwrap())
        .collect();
    assert_eq!(first_flops.len(), 2, "{rows:?}");
    assert_eq!(first_flops[0], first_flops[1], "{rows:?}");
}

/// `bench solve`: every method on the same random block of a refined mesh, each column
/// checked in f64, the sparse Cholesky as the reference of the speed-ups; the export holds
/// the matrix and block a solver outside tensorfem reads; bad arguments are named.
#[test]
fn bench_solve_compares_methods_on_any_mesh() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &[
            "bench",
            "solve",
            "--levels",
            "3",
            "--coarse-levels",
            "1",
            "--method",
            "psc-m1,mg",
            "--precision",
            "f32,f64",
            "--reference",
            "--nrhs",
            "1,3",
            "--runs",
            "2",
            "--json",
        ],
        dir.path(),
    );
    let rows = json_lines(&out);
    let methods: Vec<&str> = rows.iter().map(|r| r["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        ["psc-m1", "psc-m1", "mg", "cholesky", "psc-m1", "psc-m1", "mg", "cholesky"]
    );
    // One PSC method per precision listed: f32 inside refinement, f64 alone.
    for k in [0, 4] {
        assert_eq!(rows[k]["setting"], "f32 (PSC-IR below f64)", "{}", rows[k]);
        assert!(rows[k]["iterations"].as_u64().unwrap() >= 2, "{}", rows[k]);
        assert_eq!(rows[k + 1]["setting"], "f64 (alone)", "{}", rows[k + 1]);
        assert!(rows[k + 1]["iterations"].is_null(), "{}", rows[k + 1]);
    }
    let unknowns = rows[0]["unknowns"].as_u64().unwrap();
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["nrhs"], if i < 4 { 1 } else { 3 }, "{r}");
        assert_eq!(r["unknowns"].as_u64(), Some(unknowns), "{r}");
        assert_eq!(r["rounds"], 2, "{r}");
        let residual = r["max_relative_residual"].as_f64().unwrap();
        assert!(residual <= 1e-10 && residual > 0.0, "{r}");
        let (best, median) = (
            r["solve_seconds"].as_f64().unwrap(),
            r["solve_seconds_median"].as_f64().unwrap(),
        );
        assert!(best > 0.0 && best <= median, "{r}");
        assert!(r["first_solve_seconds"].as_f64().unwrap() > 0.0, "{r}");
        let reference = rows[(i / 4) * 4 + 3]["solve_seconds"].as_f64().unwrap();
        let speedup = r["speedup_over_reference"].as_f64().unwrap();
        assert!((speedup - reference / best).abs() <= 1e-12 * speedup, "{r}");
    }
    assert!(rows[2]["iterations"].as_u64().unwrap() >= 2);
    assert!(rows[3]["iterations"].is_null());
    assert!(rows[0]["mesh"].as_str().unwrap().contains("L = 3, L0 = 1"));

    // The export: the first method's matrix (both triangles) and the block of the largest
    // --nrhs, whose columns have the drawn normal loads' scale.
    let path = dir.path().join("problem.h5");
    let out = run(
        &[
            "bench",
            "solve",
            "--levels",
            "2",
            "--method",
            "cholesky",
            "--nrhs",
            "2",
            "--export",
            path.to_str().unwrap(),
            "--export-only",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).is_empty(), "nothing is timed");
    let file = hdf5::File::open(&path).unwrap();
    let n = file.attr("unknowns").unwrap().read_scalar::<u64>().unwrap() as usize;
    let indptr = file
        .dataset("matrix/indptr")
        .unwrap()
        .read_raw::<u64>()
        .unwrap();
    let indices = file
        .dataset("matrix/indices")
        .unwrap()
        .read_raw::<u32>()
        .unwrap();
    let data = file
        .dataset("matrix/data")
        .unwrap()
        .read_raw::<f64>()
        .unwrap();
    let rhs = file.dataset("rhs").unwrap();
    assert_eq!(rhs.shape(), [2, n]);
    assert_eq!(indptr.len(), n + 1);
    assert_eq!(indices.len(), data.len());
    let entry = |i: usize, j: u32| {
        let row = indptr[i] as usize..indptr[i + 1] as usize;
        indices[row.clone()]
            .iter()
            .position(|&c| c == j)
            .map(|k| data[row.start + k])
    };
    for i in 0..n {
        let row = indptr[i] as usize..indptr[i + 1] as usize;
        assert!(entry(i, i as u32).unwrap() > 0.0);
        for k in row {
            assert_eq!(
                entry(indices[k] as usize, i as u32),
                Some(data[k]),
                "symmetric"
            );
        }
    }
    let b = rhs.read_raw::<f64>().unwrap();
    let rms = (b.iter().map(|v| v * v).sum::<f64>() / b.len() as f64).sqrt();
    assert!(
        (0.7..1.3).contains(&rms),
        "standard normal loads: rms {rms}"
    );

    // PSC numbers a refined domain's nodes by its macro elements (L0 = 1 of 3 here), the
    // Cholesky by the coarse mesh: the same loads reach the same points, so each column
    // holds the same values and the matrices the same entries, in another order.
    let exported = |method: &str, name: &str| {
        let path = dir.path().join(name);
        let out = run(
            &[
                "bench",
                "solve",
                "--levels",
                "3",
                "--coarse-levels",
                "1",
                "--method",
                method,
                "--nrhs",
                "2",
                "--export",
                path.to_str().unwrap(),
                "--export-only",
            ],
            dir.path(),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let file = hdf5::File::open(&path).unwrap();
        let sorted = |name: &str, len: usize| {
            let v = file.dataset(name).unwrap().read_raw::<f64>().unwrap();
            v.chunks(len.max(1))
                .map(|c| {
                    let mut c = c.to_vec();
                    c.sort_by(f64::total_cmp);
                    c
                })
                .collect::<Vec<_>>()
        };
        let nnz = file.dataset("matrix/data").unwrap().size();
        let n = file.attr("unknowns").unwrap().read_scalar::<u64>().unwrap() as usize;
        (sorted("rhs", n), sorted("matrix/data", nnz))
    };
    let (psc_rhs, psc_matrix) = exported("psc-m1", "psc.h5");
    let (chol_rhs, chol_matrix) = exported("cholesky", "chol.h5");
    assert_eq!(psc_rhs, chol_rhs);
    assert_eq!(psc_matrix[0].len(), chol_matrix[0].len());
    for (p, c) in psc_matrix[0].iter().zip(&chol_matrix[0]) {
        assert!((p - c).abs() <= 1e-12 * c.abs().max(1.0), "{p} {c}");
    }

    // Without --coarse-levels PSC's macro elements follow psc-info's model for every
    // right-hand side of the rounds (2 rounds of 3 columns, f32: 3 applies each).
    let choice = json(&run(
        &[
            "psc-info",
            "--mesh",
            "flow-around-square",
            "--levels",
            "4",
            "--bc",
            "pressure",
            "--nrhs",
            "6",
            "--steps",
            "3",
            "--json",
        ],
        dir.path(),
    ));
    let rows = choice["coarse_levels"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        3,
        "L0 = 0, 1, 2 leave P1 unknowns inside: {choice}"
    );
    assert_eq!(rows[1]["c"], 67);
    let chosen = choice["chosen_coarse_levels"].as_u64().unwrap();
    let least = rows
        .iter()
        .min_by(|a, b| {
            let total = |r: &serde_json::Value| {
                r["setup_flops"].as_f64().unwrap()
                    + 18.0 * r["apply_flops_per_rhs"].as_f64().unwrap()
            };
            total(a).total_cmp(&total(b))
        })
        .unwrap();
    assert_eq!(least["coarse_levels"].as_u64(), Some(chosen));
    let chosen_run = run(
        &[
            "bench", "solve", "--levels", "4", "--method", "psc-m1", "--nrhs", "3", "--runs", "2",
            "--json",
        ],
        dir.path(),
    );
    assert!(chosen_run.status.success(), "{}", text(&chosen_run.stderr));
    assert!(
        text(&chosen_run.stdout).contains(&format!("L = 4, L0 = {chosen}")),
        "{}",
        text(&chosen_run.stdout)
    );
    let table = run(
        &["psc-info", "--mesh", "flow-around-square", "--levels", "4"],
        dir.path(),
    );
    assert!(table.status.success(), "{}", text(&table.stderr));
    assert!(
        text(&table.stdout).contains("← least"),
        "{}",
        text(&table.stdout)
    );

    // The unit square with u = 0 on its boundary.
    let square = run(
        &[
            "bench",
            "solve",
            "--mesh",
            "unit-square",
            "--n",
            "16",
            "--bc",
            "dirichlet",
            "--method",
            "psc-m2,mg,cholesky",
            "--nrhs",
            "2",
            "--runs",
            "1",
        ],
        dir.path(),
    );
    assert!(square.status.success(), "{}", text(&square.stderr));
    assert!(text(&square.stdout).contains("unit-square n = 16: 225 unknowns"));

    for bad in [
        vec!["--levels", "3", "--method", "psc-m4"],
        vec!["--levels", "3", "--method", "mg,mg"],
        vec!["--levels", "3", "--precision", "f32,f32"],
        vec!["--levels", "3", "--precision", "f8"],
        vec!["--levels", "3", "--runs", "0"],
        vec!["--levels", "3", "--nrhs", "0"],
        vec!["--levels", "3", "--rtol", "2"],
        vec!["--levels", "3", "--export-only"],
        vec!["--levels", "3", "--n", "16"],
        vec!["--mesh", "unit-square"],
        vec!["--mesh", "unit-square", "--n", "16"],
        vec![
            "--mesh",
            "unit-square",
            "--n",
            "16",
            "--bc",
            "dirichlet",
            "--levels",
            "2",
        ],
        vec!["--mesh", "gmsh", "--levels", "2"],
        vec!["--levels", "13"],
        vec!["--levels", "3", "--export", "."],
        vec!["--levels", "2", "--variant", "Q_MG", "--method", "mg"],
    ] {
        let mut args = vec!["bench", "solve"];
        args.extend(&bad);
        let out = run(&args, dir.path());
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("error"), "{bad:?}");
    }
}
