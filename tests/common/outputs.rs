//! Seeded test outputs written to files, so that one run can be checked against another
//! (a GPU's against the CUDA stand-in's) by `scripts/compare-test-outputs.py`.
//!
//! With `TENSORFEM_TEST_OUTPUTS=<dir>`, every recorded result becomes one JSON line of
//! `<dir>/<test binary>/<test>.jsonl`: `what`, `precision`, `tolerance` (relative to the
//! largest magnitude, as the test compares it), `length`, `step` and `values`: entries 0,
//! step, 2·step, … as base64 of little-endian IEEE numbers in `encoding` (f16, f32 or f64:
//! the narrowest that holds every one of them exactly, so nothing is rounded). The step is
//! 1 (every entry) unless `TENSORFEM_TEST_OUTPUTS_LIMIT=<n>` caps each output at about n
//! entries, as a GPU machine that returns only small files needs. Without the directory,
//! recording does nothing. A test's file is rewritten by each run of the test.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use base64::Engine;
use tensorfem::precision::Precision;

/// The files this process has begun: the first record of a run truncates its test's file.
static BEGUN: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Appends `values` (computed in `precision`, compared with `tolerance`) to the running
/// test's output file, when `TENSORFEM_TEST_OUTPUTS` names a directory.
pub fn record(what: &str, precision: Precision, tolerance: f64, values: &[f64]) {
    let Some(dir) = std::env::var_os("TENSORFEM_TEST_OUTPUTS") else {
        return;
    };
    let limit = std::env::var("TENSORFEM_TEST_OUTPUTS_LIMIT").map_or(usize::MAX, |v| {
        v.parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("TENSORFEM_TEST_OUTPUTS_LIMIT={v}: not a positive count"))
    });
    // The test harness runs each test on a thread named after the test's path.
    let test = std::thread::current()
        .name()
        .unwrap_or("main")
        .replace("::", ".");
    let dir = PathBuf::from(dir).join(env!("CARGO_CRATE_NAME"));
    let path = dir.join(format!("{test}.jsonl"));
    let step = values.len().div_ceil(limit).max(1);
    let kept: Vec<f64> = values.iter().step_by(step).copied().collect();
    let (encoding, bytes) = encode(&kept);
    let line = serde_json::json!({
        "what": what,
        "precision": precision.name(),
        "tolerance": tolerance,
        "length": values.len(),
        "step": step,
        "encoding": encoding,
        "values": base64::engine::general_purpose::STANDARD.encode(bytes),
    });
    let mut begun = BEGUN.lock().unwrap_or_else(|e| e.into_inner());
    let first = begun.get_or_insert_with(HashSet::new).insert(path.clone());
    let file = std::fs::create_dir_all(&dir).and_then(|()| {
        if first {
            File::create(&path)
        } else {
            OpenOptions::new().append(true).open(&path)
        }
    });
    let written = file.and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        panic!(
            "TENSORFEM_TEST_OUTPUTS: cannot write {}: {e}",
            path.display()
        );
    }
}

/// The values in the narrowest of f16, f32 and f64 that holds each exactly (a NaN as a
/// NaN), little-endian.
fn encode(values: &[f64]) -> (&'static str, Vec<u8>) {
    let exact = |round: fn(f64) -> f64| values.iter().all(|&v| v.is_nan() || round(v) == v);
    if exact(|v| half::f16::from_f64(v).to_f64()) {
        let bytes = values
            .iter()
            .flat_map(|&v| half::f16::from_f64(v).to_le_bytes());
        ("f16", bytes.collect())
    } else if exact(|v| f64::from(v as f32)) {
        (
            "f32",
            values
                .iter()
                .flat_map(|&v| (v as f32).to_le_bytes())
                .collect(),
        )
    } else {
        (
            "f64",
            values.iter().flat_map(|&v| v.to_le_bytes()).collect(),
        )
    }
}
