//! Campaigns as users launch them: under mpirun on 1, 2 and 3 ranks, killed and resumed,
//! stopped by SIGTERM, and refused on bad input before any work.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{mpirun, text};
use tensorfem::io::h5;

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// A study over two operators (PSC-M1 in f32 with refinement, and the sparse Cholesky),
/// five wave numbers in batches of two: six batches.
fn study(dir: &Path) -> String {
    format!(
        "[mesh]\nn = 64\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f32\"\nrtol = 1e-12\n\
         [campaign]\nrhs = \"study\"\nbatch_size = 2\ndirectory = \"{}\"\n\
         [campaign.study]\nk = [1, 2, 3, 4, 5]\nh0 = [0.125]\nmethod = [\"psc-m1\", \"cholesky\"]\n",
        dir.display()
    )
}

/// A time series long enough to be interrupted: 24 batches of one column.
fn series(dir: &Path) -> String {
    format!(
        "[mesh]\nn = 192\n[solver]\nmethod = \"cholesky\"\n\
         [campaign]\nrhs = \"time-series\"\nbatch_size = 1\ndirectory = \"{}\"\n\
         [campaign.time_series]\nsteps = 24\nt_end = 0.5\n",
        dir.display()
    )
}

fn run_campaign(ranks: usize, config: &Path, extra: &[&str]) -> std::process::Output {
    mpirun(ranks)
        // The HDF5 library opens files without close-on-exec: an input file this process
        // writes can be inherited, locked, by another test's mpirun forked meanwhile, and
        // the ranks here would find it locked. File locking is not what these tests check.
        .env("HDF5_USE_FILE_LOCKING", "FALSE")
        .arg(common::BIN)
        .arg("run")
        .arg(config)
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .expect("mpirun runs")
}

/// Every dataset a user reads the results from, as raw f64 (or integer) values.
fn results(file: &Path) -> Vec<(String, Vec<u64>)> {
    let f = h5::open(file).unwrap();
    let mut out = Vec::new();
    let operators = f.group("operators").unwrap().member_names().unwrap();
    for o in operators {
        let g = f.group(&format!("operators/{o}")).unwrap();
        for name in ["u", "exact"] {
            if let Ok((_, _, v)) = h5::read_dense::<f64>(&g, name) {
                out.push((
                    format!("{o}/{name}"),
                    v.iter().map(|x| x.to_bits()).collect(),
                ));
            }
        }
    }
    let columns = f.group("columns").unwrap();
    for name in ["relative_residual", "l2_error", "t"] {
        let v = h5::read_vector::<f64>(&columns, name).unwrap();
        out.push((name.into(), v.iter().map(|x| x.to_bits()).collect()));
    }
    out
}

fn journal_batches(dir: &Path) -> Vec<usize> {
    let text = std::fs::read_to_string(dir.join("journal.log")).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(_, json)| serde_json::from_str::<serde_json::Value>(json).ok())
        .filter(|v| v["record"] == "done")
        .map(|v| v["batch"].as_u64().unwrap() as usize)
        .collect()
}

/// A time-series campaign of `steps` batches of about a second each (mg at n = 512), so
/// that signals land inside one: its config and directory under `tmp`.
fn slow_series(tmp: &Path, steps: usize) -> (PathBuf, PathBuf) {
    let dir = tmp.join("series");
    let config = write(
        tmp,
        "series.toml",
        &format!(
            "[mesh]\nn = 512\n[solver]\nmethod = \"mg\"\n\
             [campaign]\nrhs = \"time-series\"\nbatch_size = 1\ndirectory = \"{}\"\n\
             [campaign.time_series]\nsteps = {steps}\n",
            dir.display()
        ),
    );
    (config, dir)
}

/// Waits until the journal of `dir` holds `done` batches (at most `limit`).
fn wait_for_batches(dir: &Path, done: usize, limit: Duration) {
    let t = Instant::now();
    while journal_batches(dir).len() < done {
        assert!(t.elapsed() < limit, "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The rank processes of a campaign started with `config` (not mpirun itself).
fn rank_pids(config: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if comm.trim() == "tensorfem"
            && String::from_utf8_lossy(&cmdline).contains(&*config.to_string_lossy())
        {
            pids.push(pid);
        }
    }
    pids
}

fn signal(pid: u32, name: &str) {
    std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
}

/// Starts a campaign on 2 ranks and waits until `done` batches are journaled.
fn start_and_wait(config: &Path, dir: &Path, done: usize) -> Child {
    let mut child = mpirun(2)
        .arg(common::BIN)
        .arg("run")
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while journal_batches(dir).len() < done {
        assert!(t.elapsed() < Duration::from_secs(120), "no progress");
        assert!(child.try_wait().unwrap().is_none(), "finished too early");
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

/// Starts the 2-rank campaign of `config` (directory `dir`, `batches` batches), SIGKILLs
/// rank 1 once 3 batches are journaled, and runs it again: the killed job fails in the
/// middle without a merged file, and the resumed one journals every batch exactly once.
fn kill_a_rank_and_resume(config: &Path, dir: &Path, batches: usize) {
    let mut child = start_and_wait(config, dir, 3);
    let pids = rank_pids(config);
    assert_eq!(pids.len(), 2, "two ranks running");
    signal(pids[1], "KILL");
    let status = child.wait().unwrap();
    assert!(!status.success(), "the job aborts when a rank is killed");
    let before = journal_batches(dir).len();
    assert!(before < batches, "killed in the middle ({before} done)");
    assert!(!dir.join("campaign.h5").exists());

    let out = run_campaign(2, config, &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("were done before (journal)"), "{stdout}");
    let mut all = journal_batches(dir);
    all.sort();
    assert_eq!(
        all,
        (0..batches).collect::<Vec<_>>(),
        "every batch journaled exactly once"
    );
}

#[test]
fn the_same_campaign_on_1_2_and_3_ranks_gives_the_same_solutions() {
    let tmp = tempfile::tempdir().unwrap();
    let mut reference = None;
    for ranks in [1, 2, 3] {
        let dir = tmp.path().join(format!("r{ranks}"));
        let config = write(tmp.path(), &format!("study{ranks}.toml"), &study(&dir));
        let out = run_campaign(ranks, &config, &[]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
        assert!(stdout.contains("10 columns in 6 batches"), "{stdout}");
        assert!(stdout.contains(&format!("{ranks} rank(s)")), "{stdout}");
        let file = dir.join("campaign.h5");
        let f = h5::open(&file).unwrap();
        let residuals =
            h5::read_vector::<f64>(&f.group("columns").unwrap(), "relative_residual").unwrap();
        assert_eq!(residuals.len(), 10);
        assert!(residuals.iter().all(|&r| r < 1e-11), "{residuals:?}");
        let errors =
            h5::read_vector::<f64>(&f.group("columns").unwrap(), "relative_l2_error").unwrap();
        assert!(errors.iter().all(|&e| e < 0.1), "{errors:?}");
        let perf_ranks = h5::read_vector::<u64>(&f.group("perf").unwrap(), "rank").unwrap();
        assert_eq!(perf_ranks.len(), 6);
        assert!(perf_ranks.iter().all(|&r| (r as usize) < ranks));
        assert!(dir.join("campaign.xdmf").exists());
        let r = results(&file);
        match &reference {
            None => reference = Some(r),
            Some(reference) => assert!(r == *reference, "{ranks} ranks differ from 1 rank"),
        }
    }
}

#[test]
fn a_campaign_killed_with_sigkill_resumes_and_does_every_batch_once() {
    let tmp = tempfile::tempdir().unwrap();
    let uninterrupted = tmp.path().join("whole");
    let config = write(tmp.path(), "whole.toml", &series(&uninterrupted));
    let out = run_campaign(2, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let dir = tmp.path().join("killed");
    let config = write(tmp.path(), "killed.toml", &series(&dir));
    kill_a_rank_and_resume(&config, &dir, 24);
    assert!(
        results(&dir.join("campaign.h5")) == results(&uninterrupted.join("campaign.h5")),
        "the resumed campaign equals the uninterrupted one"
    );
}

#[test]
fn sigterm_stops_cleanly_and_the_campaign_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("stopped");
    let config = write(tmp.path(), "series.toml", &series(&dir));
    let child = start_and_wait(&config, &dir, 2);
    let t = Instant::now();
    for pid in rank_pids(&config) {
        signal(pid, "TERM");
    }
    let out = child.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(75),
        "exit 75 (stopped, resumable) on SIGTERM: {stdout}{}",
        text(&out.stderr)
    );
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "stops within a batch or two"
    );
    assert!(
        stdout.contains("run the same command again to resume"),
        "{stdout}"
    );
    assert!(stdout.contains("stop requested by a signal"), "{stdout}");
    let done = journal_batches(&dir);
    assert!(done.len() < 24);
    for b in &done {
        assert!(dir.join(format!("batches/batch-{b:06}.h5")).exists());
    }
    let out = run_campaign(1, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut all = journal_batches(&dir);
    all.sort();
    assert_eq!(all, (0..24).collect::<Vec<_>>());
    // --fresh starts over.
    let out = run_campaign(1, &config, &["--fresh"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("done before"));
    assert_eq!(journal_batches(&dir).len(), 24);
}

/// Columns of a user's HDF5 file: solved, and checked (shape, type, NaN) before any work.
#[test]
fn hdf5_right_hand_sides_and_bad_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let unknowns = 15 * 15;
    let good: Vec<f64> = (0..3 * unknowns).map(|i| ((i % 7) as f64) - 3.0).collect();
    let writer = h5::H5Writer::create(&tmp.path().join("rhs.h5")).unwrap();
    h5::write_dense(writer.root(), "rhs", unknowns, 3, &good).unwrap();
    writer.commit().unwrap();
    let mut bad = good.clone();
    bad[unknowns + 5] = f64::NAN;
    let writer = h5::H5Writer::create(&tmp.path().join("nan.h5")).unwrap();
    h5::write_dense(writer.root(), "rhs", unknowns, 3, &bad).unwrap();
    writer.commit().unwrap();
    let writer = h5::H5Writer::create(&tmp.path().join("shape.h5")).unwrap();
    h5::write_dense(
        writer.root(),
        "rhs",
        unknowns - 1,
        3,
        &good[..3 * (unknowns - 1)],
    )
    .unwrap();
    writer.commit().unwrap();
    std::fs::write(tmp.path().join("text.h5"), "not HDF5").unwrap();

    let out_dir = tmp.path().join("out");
    let config = |input: &str, extra: &str| {
        format!(
            "[mesh]\nn = 16\n[solver]\nmethod = \"cholesky\"\n[campaign]\nrhs = \"hdf5\"\nbatch_size = 2\ndirectory = \"{}\"\n{extra}[campaign.input]\npath = \"{}\"\n",
            out_dir.display(),
            tmp.path().join(input).display()
        )
    };
    let good_config = write(tmp.path(), "good.toml", &config("rhs.h5", ""));
    let out = run_campaign(2, &good_config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let f = h5::open(&out_dir.join("campaign.h5")).unwrap();
    let residuals =
        h5::read_vector::<f64>(&f.group("columns").unwrap(), "relative_residual").unwrap();
    assert_eq!(residuals.len(), 3);
    assert!(residuals.iter().all(|&r| r < 1e-13), "{residuals:?}");
    drop(f);
    let before = std::fs::read(out_dir.join("campaign.h5")).unwrap();

    let bad_cases: Vec<(String, &str)> = vec![
        (config("nan.h5", ""), "column 1 entry 5 is NaN"),
        (config("shape.h5", ""), "expected [columns ≥ 1, 225]"),
        (config("missing.h5", ""), "missing.h5"),
        (config("text.h5", ""), "text.h5"),
        (
            config("rhs.h5", "batch_size = 0\n").replace("batch_size = 2\n", ""),
            "campaign.batch_size",
        ),
        (config("rhs.h5", "colour = 1\n"), "campaign.colour"),
        (
            study(&out_dir).replace("h0 = [0.125]", "h0 = [0.125]\nn = [64, 100]"),
            "n = 100, h0 = 0.125, method = psc-m1",
        ),
        (
            config("rhs.h5", "").replace(
                &format!("directory = \"{}\"", out_dir.display()),
                &format!(
                    "directory = \"{}/sub\"",
                    tmp.path().join("rhs.h5").display()
                ),
            ),
            "rhs.h5/sub",
        ),
    ];
    for (body, expected) in bad_cases {
        let path = write(tmp.path(), "bad.toml", &body);
        let out = run_campaign(2, &path, &[]);
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "bad input exits 2: {body}\n{stderr}"
        );
        assert!(
            stderr.contains(expected),
            "expected '{expected}' in:\n{stderr}"
        );
        assert_eq!(
            std::fs::read(out_dir.join("campaign.h5")).unwrap(),
            before,
            "nothing existing is overwritten"
        );
    }
}

/// A batch whose solver fails (PSC-IR in f16 asked for 1e-14 in two steps) stops the
/// campaign with the solver's error and a non-zero exit, and its failure record in
/// `failures/` holds the solver's iterations per column and residual history.
#[test]
fn a_failing_solve_stops_the_campaign_and_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("failing");
    let config = write(
        tmp.path(),
        "failing.toml",
        &format!(
            "[mesh]\nn = 32\nh0 = 0.125\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f16\"\n\
             rtol = 1e-14\nmax_iterations = 2\n\
             [campaign]\nrhs = \"study\"\nbatch_size = 2\ndirectory = \"{}\"\n\
             [campaign.study]\nk = [1, 2]\n",
            dir.display()
        ),
    );
    let out = run_campaign(1, &config, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("batch 0") && stderr.contains("failure record"),
        "{stderr}"
    );
    let path = dir.join("failures/batch-000000-rank-0.json");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(record["method"], "psc-m1");
    assert_eq!(record["precision"], "f16");
    assert_eq!(record["nrhs"], 2);
    assert_eq!(record["exit_code"], 1);
    assert!(
        record["error"].as_str().unwrap().contains("PSC-IR"),
        "{record}"
    );
    let solver = &record["solver"];
    assert_eq!(solver["iterations"], serde_json::json!([2, 2]), "{record}");
    // The initial residual and one entry per step, falling but not to 1e-14.
    let history: Vec<f64> = solver["residual_history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(history.len(), 3, "{record}");
    assert!(
        history[2] < history[0] && history[2] > 1e-14 * history[0],
        "{history:?}"
    );
    assert!(!dir.join("campaign.h5").exists());
}

/// Every file a campaign left in `dir` (the lock file aside), with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if !path.ends_with(".tensorfem.lock") {
                files.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

/// Runs `config` and expects a refusal with `expected` in its message, leaving `dir` as it
/// was.
fn refused(config: &Path, extra: &[&str], dir: &Path, expected: &str) -> String {
    let before = snapshot(dir);
    let out = run_campaign(1, config, extra);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a refusal is bad input: {}{stderr}",
        text(&out.stdout)
    );
    assert!(
        stderr.contains(expected),
        "expected '{expected}' in:\n{stderr}"
    );
    assert!(snapshot(dir) == before, "the previous campaign is intact");
    stderr
}

fn write_rhs(path: &Path, columns: usize, unknowns: usize, shift: f64) {
    let values: Vec<f64> = (0..columns * unknowns)
        .map(|i| ((i % 7) as f64) - 3.0 + shift)
        .collect();
    let writer = h5::H5Writer::create(path).unwrap();
    h5::write_dense(writer.root(), "rhs", unknowns, columns, &values).unwrap();
    writer.commit().unwrap();
}

/// A campaign does not resume over a rewritten input file, or with a setting its finished
/// batches depend on changed (the message names it); a setting they cannot depend on
/// (max_iterations) resumes.
#[test]
fn changed_inputs_and_settings_are_named_and_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let rhs = tmp.path().join("rhs.h5");
    write_rhs(&rhs, 3, 15 * 15, 0.0);
    let body = |extra: &str| {
        format!(
            "[mesh]\nn = 16\nh0 = 0.25\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f32\"\n{extra}\
             [campaign]\nrhs = \"hdf5\"\nbatch_size = 2\ndirectory = \"{}\"\n\
             [campaign.input]\npath = \"{}\"\n",
            dir.display(),
            rhs.display()
        )
    };
    let config = write(tmp.path(), "c.toml", &body(""));
    let out = run_campaign(1, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // The same file rewritten with other values of the same shape.
    write_rhs(&rhs, 3, 15 * 15, 0.5);
    let stderr = refused(&config, &[], &dir, "changed: campaign.input content: xxh3 ");
    assert!(stderr.contains("--fresh"), "{stderr}");
    // Moved (same content): not a change.
    write_rhs(&rhs, 3, 15 * 15, 0.0);
    let out = run_campaign(1, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let config = write(tmp.path(), "c.toml", &body("rtol = 1e-9\n"));
    let stderr = refused(&config, &[], &dir, "changed: solver.rtol: 1e-10 → 1e-9");
    assert!(stderr.contains("No batch has failed columns"), "{stderr}");
    let config = write(tmp.path(), "c.toml", &body("max_iterations = 50\n"));
    let out = run_campaign(1, &config, &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("every batch was solved and merged before"),
        "{stdout}"
    );
}

/// Output locations are checked before --fresh removes anything; what lies in the way is
/// named; a journal damaged otherwise than by a crash is refused.
#[test]
fn bad_output_locations_and_damaged_journals_leave_the_campaign_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let body = |solver: &str| {
        format!(
            "[mesh]\nn = 16\nh0 = 0.25\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f32\"\n{solver}\
             [campaign]\nrhs = \"study\"\nbatch_size = 1\ndirectory = \"{}\"\n\
             [campaign.study]\nk = [1, 2]\n",
            dir.display()
        )
    };
    let config = write(tmp.path(), "c.toml", &body(""));
    let out = run_campaign(1, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = write(tmp.path(), "a-file", "x");

    let under_file = format!("cache_dir = \"{}/cache\"\n", file.display());
    let config = write(tmp.path(), "c.toml", &body(&under_file));
    refused(&config, &["--fresh"], &dir, "solver.cache_dir");

    let config = write(tmp.path(), "c.toml", &body(""));
    let journal = dir.join("journal.log");
    let good = std::fs::read(&journal).unwrap();
    std::fs::write(&journal, "not a journal\nat all\n").unwrap();
    refused(&config, &[], &dir, "is not a tensorfem journal");
    let mut lines: Vec<String> = String::from_utf8(good.clone())
        .unwrap()
        .lines()
        .map(|l| format!("{l}\n"))
        .collect();
    lines[1] = lines[1].replace("\"rank\":0", "\"rank\":1");
    std::fs::write(&journal, lines.concat()).unwrap();
    refused(&config, &[], &dir, "line 2 of 3 is damaged");
    std::fs::write(&journal, &good).unwrap();

    // A campaign.h5 that is a folder, and an input among the campaign's own files.
    let merged = std::fs::read(dir.join("campaign.h5")).unwrap();
    std::fs::remove_file(dir.join("campaign.h5")).unwrap();
    std::fs::create_dir(dir.join("campaign.h5")).unwrap();
    refused(&config, &["--fresh"], &dir, "campaign.h5 is in the way");
    std::fs::remove_dir(dir.join("campaign.h5")).unwrap();
    std::fs::write(dir.join("campaign.h5"), &merged).unwrap();
    let input_inside = format!(
        "[mesh]\nn = 16\n[solver]\nmethod = \"cholesky\"\n[campaign]\nrhs = \"hdf5\"\ndirectory = \"{}\"\n\
         [campaign.input]\npath = \"{}\"\n",
        dir.display(),
        dir.join("batches/batch-000000.h5").display()
    );
    let config = write(tmp.path(), "inside.toml", &input_inside);
    refused(
        &config,
        &["--fresh"],
        &dir,
        "lies among the files the campaign",
    );
}

/// One run per campaign directory: a second run of it, and a --fresh run of another config
/// into it, are refused while the first runs; the first finishes every batch once.
#[test]
fn a_campaign_directory_is_held_by_one_run_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("busy");
    let config = write(tmp.path(), "series.toml", &series(&dir));
    let child = start_and_wait(&config, &dir, 1);
    // Frozen mid-run, so the refusals below cannot race its end.
    let pids = rank_pids(&config);
    pids.iter().for_each(|&pid| signal(pid, "STOP"));
    let out = run_campaign(1, &config, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a refusal exits 2: {stderr}");
    assert!(
        stderr.contains("is in use by another run (pid "),
        "{stderr}"
    );
    let other = write(
        tmp.path(),
        "other.toml",
        &series(&dir).replace("steps = 24", "steps = 3"),
    );
    let out = run_campaign(1, &other, &["--fresh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is in use by another run"));
    pids.iter().for_each(|&pid| signal(pid, "CONT"));

    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut all = journal_batches(&dir);
    all.sort();
    assert_eq!(all, (0..24).collect::<Vec<_>>(), "every batch once");
    // The lock went with the process: the next run resumes (nothing left to do).
    let out = run_campaign(1, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `campaign.store = "f32"` and `campaign.compression`: the solutions of campaign.h5 and
/// the batch files are f32 (gzip-compressed), equal to the f64 campaign's rounded to f32,
/// with the verification of the f64 solutions; the XDMF says 4-byte values; the files are
/// smaller; changing `store` is a plan change, changing only `compression` resumes.
#[test]
fn solutions_stored_in_f32_and_compressed() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("f64");
    let config = write(tmp.path(), "f64.toml", &study(&full));
    let out = run_campaign(2, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let small = tmp.path().join("f32");
    let body = |compression: u8| {
        study(&small).replace(
            "batch_size = 2\n",
            &format!("batch_size = 2\nstore = \"f32\"\ncompression = {compression}\n"),
        )
    };
    let config = write(tmp.path(), "f32.toml", &body(6));
    let out = run_campaign(2, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let (a, b) = (
        h5::open(&full.join("campaign.h5")).unwrap(),
        h5::open(&small.join("campaign.h5")).unwrap(),
    );
    for o in ["0", "1"] {
        let ds = b.dataset(&format!("operators/{o}/u")).unwrap();
        assert_eq!(ds.dtype().unwrap().size(), 4, "stored in f32");
        assert!(!ds.filters().is_empty(), "compressed");
        let (_, _, u64s) =
            h5::read_dense::<f64>(&a.group(&format!("operators/{o}")).unwrap(), "u").unwrap();
        let (_, _, u32s) =
            h5::read_block(&b.group(&format!("operators/{o}")).unwrap(), "u").unwrap();
        assert_eq!(u64s.len(), u32s.len());
        for (x, y) in u64s.iter().zip(&u32s) {
            assert_eq!(*x as f32 as f64, *y, "f64 rounded to f32");
        }
    }
    let columns = |f: &hdf5::File| {
        h5::read_vector::<f64>(&f.group("columns").unwrap(), "relative_residual").unwrap()
    };
    assert_eq!(columns(&a), columns(&b), "verified in f64 before storing");
    let xdmf = std::fs::read_to_string(small.join("campaign.xdmf")).unwrap();
    assert!(
        xdmf.contains("Precision=\"4\" Format=\"HDF\">campaign.h5:/operators/0/u"),
        "{xdmf}"
    );
    let stored = |f: &hdf5::File| f.dataset("operators/0/u").unwrap().storage_size();
    assert!(
        stored(&b) * 2 < stored(&a),
        "f32 + gzip at least halves the solutions ({} vs {} bytes)",
        stored(&b),
        stored(&a)
    );

    // compression alone does not change the results: the finished campaign resumes.
    let config = write(tmp.path(), "f32.toml", &body(0));
    let out = run_campaign(1, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let back = study(&small);
    let config = write(tmp.path(), "f32.toml", &back);
    refused(&config, &[], &small, "changed: campaign.store: f32 → f64");
}

/// A Stokes parameter study (mesh size × preconditioner × relaxation) on 2 ranks: the same
/// queue, journal, batch files and merge as a Poisson campaign; the summary names every
/// operator; campaign.xdmf opens in a reader (tests/python/stokes_study_xdmf.py: h5py and
/// the XML, checked against the exact solution); run again, it resumes with nothing left.
#[test]
fn stokes_study_on_two_ranks_writes_a_readable_xdmf() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("stokes");
    let config = write(
        dir.path(),
        "stokes.toml",
        &format!(
            "[mesh]\nelement = \"q2-q1\"\n[solver]\nmethod = \"stokes\"\nprecision = \"f32\"\n\
             [campaign]\nrhs = \"study\"\ndirectory = \"{}\"\nstore_exact = true\nkeep_batches = true\n\
             [campaign.study]\nn = [16, 32]\npreconditioner = [\"multigrid\", \"block-triangular\"]\n\
             relaxation = [\"vanka-tuned\", \"braess-sarazin\"]\n",
            out_dir.display()
        ),
    );
    let out = run_campaign(2, &config, &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("6 columns in 6 batches of ≤ 1 over 6 operator(s), 2 rank(s)"),
        "{stdout}"
    );
    assert!(stdout.contains("max velocity L2 error"), "{stdout}");
    for name in ["vanka-tuned", "braess-sarazin", "block-triangular"] {
        assert_eq!(
            stdout.lines().filter(|l| l.contains(name)).count(),
            2,
            "{name} once per n: {stdout}"
        );
    }
    let mut journaled = journal_batches(&out_dir);
    journaled.sort();
    assert_eq!(journaled, (0..6).collect::<Vec<_>>());
    assert_eq!(
        std::fs::read_dir(out_dir.join("batches")).unwrap().count(),
        6
    );

    let check = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/stokes_study_xdmf.py"
        ))
        .arg(&out_dir)
        .output()
        .expect("python3 runs");
    assert!(
        check.status.success(),
        "{}{}",
        text(&check.stdout),
        text(&check.stderr)
    );

    let merged = std::fs::read(out_dir.join("campaign.h5")).unwrap();
    let again = run_campaign(2, &config, &[]);
    let stdout = text(&again.stdout);
    assert!(again.status.success(), "{stdout}{}", text(&again.stderr));
    assert!(stdout.contains("nothing to do"), "{stdout}");
    assert!(
        stdout.contains("all 6 columns met their tolerance"),
        "{stdout}"
    );
    assert!(
        std::fs::read(out_dir.join("campaign.h5")).unwrap() == merged,
        "a finished campaign's file is left as it was"
    );
}

/// A campaign of one operator whose PSC set-up goes to the cache: the other rank waits for
/// the file, so the rank building it uses the host's cores (both ranks unbound here, as
/// jobs/run-local.sh starts them); the results are bitwise those of one rank, whose set-up
/// ran on its own threads.
#[test]
fn a_waited_for_set_up_borrows_the_waiting_ranks_cores() {
    let dir = tempfile::tempdir().unwrap();
    let config = |name: &str| {
        write(
            dir.path(),
            &format!("{name}.toml"),
            &format!(
                "[mesh]\nn = 128\nh0 = 0.125\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f32\"\n\
                 [campaign]\nrhs = \"time-series\"\nbatch_size = 4\ndirectory = \"{}\"\n\
                 [campaign.time_series]\nsteps = 8\n",
                dir.path().join(name).display()
            ),
        )
    };
    let two = mpirun(2)
        .args(["--bind-to", "none"])
        .arg(common::BIN)
        .arg("run")
        .arg(config("two"))
        .env("RUST_LOG", "info")
        .env_remove("RAYON_NUM_THREADS")
        .env("HDF5_USE_FILE_LOCKING", "FALSE")
        .output()
        .expect("mpirun runs");
    let log = text(&two.stderr);
    assert!(two.status.success(), "{}{log}", text(&two.stdout));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores >= 2 {
        assert!(
            log.contains("(on 2 threads: the other ranks wait for it)")
                || log.contains(&format!(
                    "(on {cores} threads: the other ranks wait for it)"
                )),
            "{log}"
        );
    }
    let one = run_campaign(1, &config("one"), &[]);
    assert!(one.status.success(), "{}", text(&one.stderr));
    assert_eq!(
        results(&dir.path().join("two/campaign.h5")),
        results(&dir.path().join("one/campaign.h5"))
    );
}

/// A campaign of a direct f32 solve asked for more than f32 gives (rtol = 1e-7): every
/// batch is solved, written and journaled with its failed columns named, campaign.h5 marks
/// them, the batch files stay, and the run exits 1 saying what to do; run again it only
/// reports (exit 1 again); `--retry-failed` with a tolerance the solve meets re-solves those
/// batches alone, passes, merges and clears the failure records and the batch files.
#[test]
fn columns_that_miss_their_tolerance_fail_the_campaign_and_can_be_retried() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("strict");
    let body = |rtol: &str| {
        format!(
            "[mesh]\nn = 32\nh0 = 0.25\n[solver]\nmethod = \"psc-m1\"\nprecision = \"f32\"\n\
             refine = false\nrtol = {rtol}\n\
             [campaign]\nrhs = \"study\"\nbatch_size = 2\ndirectory = \"{}\"\n\
             [campaign.study]\nk = [1, 2, 3, 4]\n",
            dir.display()
        )
    };
    let config = write(tmp.path(), "c.toml", &body("1e-7"));
    let out = run_campaign(1, &config, &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("verification        FAILED: 4 of 4 columns missed their tolerance"),
        "{stdout}"
    );
    assert!(
        stderr.contains("missed their tolerance") && stderr.contains("--retry-failed"),
        "{stderr}"
    );
    let f = h5::open(&dir.join("campaign.h5")).unwrap();
    let columns = f.group("columns").unwrap();
    assert_eq!(
        h5::read_vector::<u8>(&columns, "passed").unwrap(),
        [0, 0, 0, 0]
    );
    let tolerance = h5::read_vector::<f64>(&columns, "tolerance").unwrap();
    let residual = h5::read_vector::<f64>(&columns, "relative_residual").unwrap();
    assert!(tolerance.iter().all(|&t| t == 1e-7), "{tolerance:?}");
    assert!(residual.iter().all(|&r| r > 1e-7), "{residual:?}");
    drop(f);
    for b in 0..2 {
        assert!(dir.join(format!("batches/batch-00000{b}.h5")).exists());
        let record: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("failures/batch-00000{b}-rank-0.json")))
                .unwrap(),
        )
        .unwrap();
        assert!(
            record["error"]
                .as_str()
                .unwrap()
                .contains("missed their tolerance"),
            "{record}"
        );
    }
    let journal = std::fs::read_to_string(dir.join("journal.log")).unwrap();
    assert!(journal.contains("\"failed\":[0,1]"), "{journal}");

    // Run again as it is: nothing is solved, the failure stands.
    let again = run_campaign(1, &config, &[]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stdout).contains("nothing to do"));

    // A tolerance the f32 solve meets, for the failed batches only.
    let config = write(tmp.path(), "c.toml", &body("1e-2"));
    let retry = run_campaign(1, &config, &["--retry-failed"]);
    let (stdout, stderr) = (text(&retry.stdout), text(&retry.stderr));
    assert!(retry.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("all 4 columns met their tolerance"),
        "{stdout}"
    );
    let f = h5::open(&dir.join("campaign.h5")).unwrap();
    assert_eq!(
        h5::read_vector::<u8>(&f.group("columns").unwrap(), "passed").unwrap(),
        [1, 1, 1, 1]
    );
    assert!(!dir.join("failures").exists(), "failure records cleared");
    assert!(
        !dir.join("batches").exists(),
        "merged and passed: no batch files"
    );
}

/// A journaled batch file that was truncated later is solved again on resume from its
/// inputs; a failed batch's record goes when a later run solves it; a finished campaign run
/// again leaves campaign.h5 (and its timings) as it was; the exact solution is stored when
/// asked, and batch files are kept when asked.
#[test]
fn damaged_batch_files_stale_failures_and_disk_use() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("series");
    let body = |extra: &str| {
        format!(
            "[mesh]\nn = 32\n[solver]\nmethod = \"mg\"\n{extra}\
             [campaign]\nrhs = \"time-series\"\nbatch_size = 2\ndirectory = \"{}\"\nkeep_batches = true\n\
             [campaign.time_series]\nsteps = 6\n",
            dir.display()
        )
    };
    // Two V-cycles are too few: batch 0 fails and stops the campaign, recorded.
    let config = write(tmp.path(), "c.toml", &body("max_iterations = 2\n"));
    let out = run_campaign(1, &config, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(dir.join("failures/batch-000000-rank-0.json").exists());
    let config = write(tmp.path(), "c.toml", &body(""));
    let out = run_campaign(1, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !dir.join("failures").exists(),
        "the old failure record is gone"
    );
    assert!(dir.join("batches/batch-000002.h5").exists(), "keep_batches");

    // A batch file truncated after it was journaled: solved again from its inputs.
    let merged = h5::open(&dir.join("campaign.h5")).unwrap();
    let before =
        h5::read_vector::<f64>(&merged.group("columns").unwrap(), "relative_residual").unwrap();
    assert!(
        merged.dataset("operators/0/exact").is_err(),
        "no exact solution by default"
    );
    drop(merged);
    std::fs::remove_file(dir.join("campaign.h5")).unwrap();
    let batch = dir.join("batches/batch-000001.h5");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&batch)
        .unwrap();
    file.set_len(4000).unwrap();
    drop(file);
    let out = run_campaign(1, &config, &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("batch 1 is journaled but its file")
            && stderr.contains("is damaged")
            && stderr.contains("solving it again"),
        "{stderr}"
    );
    assert!(
        stdout.contains("this run            1 batch(es)"),
        "{stdout}"
    );
    let merged = h5::open(&dir.join("campaign.h5")).unwrap();
    let after =
        h5::read_vector::<f64>(&merged.group("columns").unwrap(), "relative_residual").unwrap();
    assert_eq!(
        before, after,
        "the batch solved again gives the same results"
    );
    drop(merged);

    // Run again: nothing to do, campaign.h5 untouched (its timings are the real ones).
    let bytes = std::fs::read(dir.join("campaign.h5")).unwrap();
    let out = run_campaign(1, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("nothing to do"));
    assert!(std::fs::read(dir.join("campaign.h5")).unwrap() == bytes);

    // store_exact: the exact solutions beside the computed ones; by default the batch
    // files go after a merge in which every column passed.
    let config = write(
        tmp.path(),
        "c.toml",
        &body("").replace("keep_batches = true\n", "store_exact = true\n"),
    );
    let out = run_campaign(1, &config, &["--fresh"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let merged = h5::open(&dir.join("campaign.h5")).unwrap();
    assert!(merged.dataset("operators/0/exact").is_ok());
    assert!(!dir.join("batches").exists());
}

/// Ctrl-C (SIGINT) stops a campaign after the batch in progress with exit 75 and a message;
/// a second one stops it at once; the same command then resumes and completes. A campaign
/// that is not on a terminal logs its progress (fraction, elapsed, estimate).
#[test]
fn ctrl_c_stops_a_campaign_and_progress_is_logged() {
    let tmp = tempfile::tempdir().unwrap();
    let (config, dir) = slow_series(tmp.path(), 8);
    let start = |env_progress: bool| {
        let mut command = std::process::Command::new(common::BIN);
        command
            .arg("run")
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if env_progress {
            command.env("TENSORFEM_PROGRESS_SECONDS", "0.2");
        }
        command.spawn().unwrap()
    };
    let wait_for = |done: usize| wait_for_batches(&dir, done, Duration::from_secs(120));
    let child = start(true);
    wait_for(1);
    signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(75), "{stdout}{stderr}");
    assert!(
        stderr.contains("SIGINT (Ctrl-C) received: finishing the batch in progress"),
        "{stderr}"
    );
    assert!(
        stdout.contains("run the same command again to resume"),
        "{stdout}"
    );
    let progress = stderr
        .lines()
        .find(|l| l.contains("campaign: ") && l.contains(" elapsed"))
        .unwrap_or_else(|| panic!("no progress line in:\n{stderr}"));
    assert!(progress.contains(" %"), "{progress}");
    let stopped_at = journal_batches(&dir).len();
    assert!(stopped_at < 8);

    // Twice: at once.
    let child = start(false);
    wait_for(stopped_at + 1);
    signal(child.id(), "INT");
    std::thread::sleep(Duration::from_millis(50));
    signal(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(
        text(&out.stderr).contains("stopped at once by a second SIGINT"),
        "{}",
        text(&out.stderr)
    );

    let out = run_campaign(1, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut all = journal_batches(&dir);
    all.sort();
    all.dedup();
    assert_eq!(all, (0..8).collect::<Vec<_>>());
}

/// A full file system while a batch file is written: exit 1, the message names the file,
/// says the file system is full and how much space is left, without the HDF5 library's
/// dump. Needs a small tmpfs (root); skipped where mounting is not allowed.
#[test]
fn a_full_disk_is_named_plainly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("small");
    std::fs::create_dir(&dir).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&dir)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        eprintln!("a_full_disk_is_named_plainly: skipped (cannot mount a tmpfs here)");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&dir);
    let config = write(
        tmp.path(),
        "c.toml",
        &format!(
            "[mesh]\nn = 128\n[solver]\nmethod = \"mg\"\n\
             [campaign]\nrhs = \"time-series\"\nbatch_size = 4\ndirectory = \"{}\"\n\
             [campaign.time_series]\nsteps = 8\n",
            dir.display()
        ),
    );
    let out = run_campaign(1, &config, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the file system is full")
            && stderr.contains("MiB free on the file system of")
            && stderr.contains("batch-00000"),
        "{stderr}"
    );
    assert!(!stderr.contains("errno"), "{stderr}");
}

/// Under mpirun (OpenMPI), SIGUSR1 sent to mpirun reaches every rank: each finishes its
/// batch, and the job exits 75. jobs/run-local.sh (`make run`) turns SIGTERM and Ctrl-C
/// into that (mpirun itself would kill the ranks on them within a second). The campaign then
/// resumes to the end.
#[test]
fn mpirun_and_run_local_stop_a_campaign_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    // Enough batches that the second stop lands before the end even when mpirun forwards
    // the signal late on a loaded machine (a batch here can take 0.15 s).
    let steps = 24;
    let (config, dir) = slow_series(tmp.path(), steps);
    let wait_for = |done: usize| wait_for_batches(&dir, done, Duration::from_secs(180));
    let script =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/jobs/run-local.sh"))
            .args(["-n", "2"])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
    wait_for(1);
    signal(script.id(), "TERM");
    let out = script.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(75), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("stop requested by a signal"), "{stdout}");
    let done = journal_batches(&dir).len();
    assert!(done < steps, "stopped early ({done} done)");

    let child = mpirun(2)
        .arg(common::BIN)
        .arg("run")
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(done + 1);
    signal(child.id(), "USR1");
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    let out = run_campaign(2, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut all = journal_batches(&dir);
    all.sort();
    assert_eq!(
        all,
        (0..steps).collect::<Vec<_>>(),
        "every batch journaled once"
    );
}

/// A time series of 12 batches of one column, PSC-M1 in f32 refined to 1e-12 on `backend`.
fn series_on(backend: &str, dir: &Path) -> String {
    format!(
        "backend = \"{backend}\"\n[mesh]\nn = 64\nh0 = 0.125\n\
         [solver]\nmethod = \"psc-m1\"\nprecision = \"f32\"\nrtol = 1e-12\n\
         [campaign]\nrhs = \"time-series\"\nbatch_size = 1\ndirectory = \"{}\"\n\
         [campaign.time_series]\nsteps = 12\nt_end = 0.5\n",
        dir.display()
    )
}

/// The solutions of a campaign's operator `name`, as values.
fn solutions(file: &Path, name: &str) -> Vec<f64> {
    let f = h5::open(file).unwrap();
    let g = f.group(&format!("operators/{name}")).unwrap();
    h5::read_dense::<f64>(&g, "u").unwrap().2
}

/// The GPU's main job: a campaign with `backend = "cuda"` on 2 ranks, each bound to its own
/// device where there are two (the CUDA stand-in's in `make test`). Killed with SIGKILL in
/// the middle and resumed, it equals the uninterrupted CUDA run bit for bit and the CPU
/// backend's run within the refinement's tolerance; its perf log names each rank's device.
/// Skipped (said on stderr) where there is no CUDA device, unless TENSORFEM_REQUIRE_CUDA=1.
#[test]
fn campaign_on_cuda_on_two_ranks_killed_and_resumed_equals_the_uninterrupted_run() {
    let Some(device) = tensorfem::device::cuda::test_device() else {
        return;
    };
    let devices = tensorfem::device::cuda::probe().devices().len();
    drop(device);
    let tmp = tempfile::tempdir().unwrap();
    let whole = tmp.path().join("whole");
    let config = write(tmp.path(), "whole.toml", &series_on("cuda", &whole));
    let out = run_campaign(2, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let perf = h5::open(&whole.join("campaign.h5")).unwrap();
    let perf = perf.group("perf").unwrap();
    let ranks = h5::read_vector::<u64>(&perf, "rank").unwrap();
    let names: Vec<String> = h5::read_vector::<hdf5::types::VarLenUnicode>(&perf, "device")
        .unwrap()
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(names.len(), 12, "one perf record a batch");
    for (rank, name) in ranks.iter().zip(&names) {
        let ordinal = *rank as usize % devices;
        assert!(
            name.starts_with(&format!("cuda device {ordinal} (")),
            "rank {rank} on device {ordinal}: {name}"
        );
        if std::env::var("TENSORFEM_CUDA_STANDIN").is_ok_and(|v| v == "1") {
            assert!(name.contains("stand-in"), "{name}");
        }
    }
    assert!(
        ranks.contains(&0) && ranks.contains(&1),
        "both ranks solved"
    );

    let dir = tmp.path().join("killed");
    let config = write(tmp.path(), "killed.toml", &series_on("cuda", &dir));
    kill_a_rank_and_resume(&config, &dir, 12);
    assert!(
        results(&dir.join("campaign.h5")) == results(&whole.join("campaign.h5")),
        "the resumed CUDA campaign equals the uninterrupted one bit for bit"
    );

    let cpu = tmp.path().join("cpu");
    let config = write(tmp.path(), "cpu.toml", &series_on("cpu", &cpu));
    let out = run_campaign(2, &config, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let name = h5::open(&cpu.join("campaign.h5"))
        .unwrap()
        .group("operators")
        .unwrap()
        .member_names()
        .unwrap()
        .remove(0);
    let (on_cpu, on_cuda) = (
        solutions(&cpu.join("campaign.h5"), &name),
        solutions(&whole.join("campaign.h5"), &name),
    );
    assert_eq!(on_cpu.len(), on_cuda.len());
    let scale = on_cpu.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let worst = on_cpu
        .iter()
        .zip(&on_cuda)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    // Both refined to a relative residual of 1e-12 on a system of condition ~1e3.
    assert!(
        worst <= 1e-8 * scale,
        "CUDA against CPU: {worst:e} of {scale:e}"
    );
}
