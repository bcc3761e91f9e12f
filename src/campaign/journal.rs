//! The checkpoint journal: one line per durable batch, appended and synced by rank 0 after
//! the batch's file is on disk. Each line carries a CRC-32 of its text, so a record torn by
//! a crash is recognised and dropped: that batch is simply redone. A crash can tear only the
//! last line; a damaged line with valid records after it, or a file of no records at all,
//! was altered by something else and is refused with what to do.
//!
//! Line format: `<crc32 as 8 hex digits> <JSON>\n`. The first record names the plan (its
//! fingerprint and settings); a journal of another plan is refused, naming the settings
//! that changed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::plan::{Plan, Settings};
use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record")]
enum Record {
    #[serde(rename = "plan")]
    Plan {
        fingerprint: String,
        batches: usize,
        /// Absent in journals of tensorfem before 0.1.0's settings record.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        settings: Option<Settings>,
    },
    #[serde(rename = "done")]
    Done {
        batch: usize,
        rank: usize,
        /// Its columns (positions in the batch) that missed their tolerance.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        failed: Vec<usize>,
    },
}

fn encode(record: &Record) -> String {
    let json = serde_json::to_string(record).expect("records serialise");
    format!("{:08x} {json}\n", crc32fast::hash(json.as_bytes()))
}

/// A decoded line (with its newline), or None for a torn or damaged one.
fn decode(line: &[u8]) -> Option<Record> {
    let line = std::str::from_utf8(line.strip_suffix(b"\n")?).ok()?;
    let (crc, json) = line.split_once(' ')?;
    (u32::from_str_radix(crc, 16).ok()? == crc32fast::hash(json.as_bytes()))
        .then(|| serde_json::from_str(json).ok())
        .flatten()
}

/// The settings that differ between the journal's plan and this one: (key, `key: journal
/// value → value now`).
fn changes(journal: &Settings, now: &Settings) -> Vec<(String, String)> {
    let keys: BTreeSet<&String> = journal.keys().chain(now.keys()).collect();
    let unset = "(not set)".to_string();
    keys.into_iter()
        .filter_map(|key| {
            let (old, new) = (
                journal.get(key).unwrap_or(&unset),
                now.get(key).unwrap_or(&unset),
            );
            (old != new).then(|| (key.clone(), format!("{key}: {old} → {new}")))
        })
        .collect()
}

/// Whether `key` is a solver setting (`solver.rtol`, or `operator 2: solver.rtol` in a
/// study): what `--retry-failed` may change. The mesh, the boundary conditions, the
/// right-hand sides, the batches and the stored precision define what a column is and
/// must stay.
fn is_solver_setting(key: &str) -> bool {
    key.rsplit(": ")
        .next()
        .is_some_and(|k| k.starts_with("solver."))
}

/// How a journal whose plan differs from this run's is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replan {
    /// Refused, naming what changed.
    Refuse,
    /// Accepted where only solver settings changed (`--retry-failed`).
    SolverSettings,
}

/// An open journal (rank 0).
pub struct Journal {
    file: File,
    path: PathBuf,
}

/// What a journal on disk says.
pub struct JournalState {
    pub done: BTreeSet<usize>,
    /// The done batches whose latest record lists columns that missed their tolerance.
    pub failed: BTreeMap<usize, Vec<usize>>,
    /// Fingerprints of every plan the journal's batches were solved under (more than one
    /// after `--retry-failed` with other solver settings).
    pub fingerprints: BTreeSet<u64>,
    /// The solver settings that changed since the journal's last plan record (`key: old →
    /// new`), accepted for `--retry-failed`; a new plan record is appended when it opens.
    pub replanned: Option<Vec<String>>,
    /// Bytes of valid records; anything after them is a torn tail.
    valid_bytes: u64,
    torn: bool,
}

impl Journal {
    pub fn path_in(directory: &Path) -> PathBuf {
        directory.join("journal.log")
    }

    /// Reads the journal in `directory`, if there is one, checking it belongs to `plan`
    /// (or, with [`Replan::SolverSettings`], to a plan that differs in solver settings only).
    pub fn read(directory: &Path, plan: &Plan, replan: Replan) -> Result<Option<JournalState>> {
        let path = Self::path_in(directory);
        let mut text = Vec::new();
        match File::open(&path) {
            Ok(mut f) => f.read_to_end(&mut text).map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(Error::Read { path, source }),
        };
        // A journal that cannot be resumed is bad input (exit 2): nothing was touched.
        let refuse = |what: String| {
            Err(Error::InvalidInput(format!(
                "the journal {} {what}",
                path.display()
            )))
        };
        let lines: Vec<(&[u8], Option<Record>)> = text
            .split_inclusive(|&b| b == b'\n')
            .map(|line| (line, decode(line)))
            .collect();
        let n = lines.len();
        let Some(last) = lines.iter().rposition(|(_, r)| r.is_some()) else {
            if n <= 1 {
                // Empty, or its first record torn while it was created: no batch was done.
                if n == 1 {
                    log::warn!(
                        "journal {}: dropping a torn first record (no batch was journaled)",
                        path.display()
                    );
                }
                return Ok(None);
            }
            return refuse(format!(
                "is not a tensorfem journal: none of its {n} lines is a record (checksum and JSON); it was overwritten or is another file. Run with --fresh to start over (every batch is solved again), or choose another campaign.directory"
            ));
        };
        if let Some(bad) = lines[..last].iter().position(|(_, r)| r.is_none()) {
            return refuse(format!(
                "line {} of {n} is damaged (checksum mismatch or not a record) and valid records follow it: a crash tears only the last record, so the file was altered. Delete line {} to solve the batch it recorded again, or run with --fresh to start over",
                bad + 1,
                bad + 1
            ));
        }
        if n - last > 2 {
            return refuse(format!(
                "ends with {} damaged lines (lines {}..={n}): a crash tears only the last record, so the file was altered. Delete those lines to resume (their batches are solved again), or run with --fresh to start over",
                n - last - 1,
                last + 2
            ));
        }
        let mut state = JournalState {
            done: BTreeSet::new(),
            failed: BTreeMap::new(),
            fingerprints: BTreeSet::new(),
            replanned: None,
            valid_bytes: lines[..=last].iter().map(|(l, _)| l.len() as u64).sum(),
            torn: last + 1 < n,
        };
        // The plan the journal's latest records were written under.
        let mut latest: Option<(&String, &Option<Settings>)> = None;
        for (number, (_, record)) in lines[..=last].iter().enumerate() {
            match (number, record.as_ref().expect("checked above")) {
                (
                    _,
                    Record::Plan {
                        fingerprint,
                        settings,
                        ..
                    },
                ) => {
                    if let Ok(f) = u64::from_str_radix(fingerprint, 16) {
                        state.fingerprints.insert(f);
                    }
                    latest = Some((fingerprint, settings));
                }
                (0, other) => {
                    return refuse(format!(
                        "does not start with a plan record (line 1 is {other:?}): run with --fresh to start over"
                    ))
                }
                (_, Record::Done { batch, failed, .. }) if *batch < plan.batches.len() => {
                    state.done.insert(*batch);
                    // A batch solved again replaces its earlier record.
                    if failed.is_empty() {
                        state.failed.remove(batch);
                    } else {
                        state.failed.insert(*batch, failed.clone());
                    }
                }
                (_, other) => {
                    return refuse(format!(
                        "line {} is an unexpected record {other:?} (the plan has {} batches): run with --fresh to start over",
                        number + 1,
                        plan.batches.len()
                    ))
                }
            }
        }
        let (fingerprint, settings) = latest.expect("the first record is a plan");
        if *fingerprint != format!("{:016x}", plan.fingerprint) {
            let done = state.done.len();
            let changed = settings
                .as_ref()
                .map(|old| changes(old, &plan.settings))
                .unwrap_or_default();
            let solver_only = settings.is_some()
                && !changed.is_empty()
                && changed.iter().all(|(key, _)| is_solver_setting(key));
            let list = changed
                .iter()
                .map(|(_, text)| text.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            if replan == Replan::SolverSettings && solver_only && !state.failed.is_empty() {
                log::info!(
                    "--retry-failed with other solver settings ({list}): the batches that passed keep their solutions (each verified against its own tolerance); the failed ones are solved with the new settings"
                );
                state.replanned = Some(changed.into_iter().map(|(_, text)| text).collect());
                return Ok(Some(state));
            }
            let what = match settings {
                Some(_) => format!("changed: {list}"),
                None => "its settings were not recorded (written by an older tensorfem)".into(),
            };
            let retry = match (solver_only, state.failed.is_empty()) {
                (true, false) => " Only solver settings changed: `--retry-failed` solves the batches whose columns failed with them and keeps the others.",
                (true, true) => " (No batch has failed columns, so `--retry-failed` has nothing to solve again with them.)",
                _ => "",
            };
            return Err(Error::InvalidInput(format!(
                "the journal {} was written for other settings ({what}); its {done} finished batch(es) would be mixed with results of the new ones. Restore the setting(s) to resume, run with --fresh to start over, or choose another campaign.directory.{retry}",
                path.display()
            )));
        }
        Ok(Some(state))
    }

    /// Opens the journal for appending: continues `state` (dropping a torn tail) or starts a
    /// new one with the plan record.
    pub fn open(directory: &Path, plan: &Plan, state: Option<&JournalState>) -> Result<Journal> {
        let path = Self::path_in(directory);
        let write_error = |source| Error::Write {
            path: path.clone(),
            source,
        };
        let journal = match state {
            Some(state) => {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(write_error)?;
                if state.torn {
                    log::warn!(
                        "journal {}: dropping a torn last record (its batch is redone)",
                        path.display()
                    );
                }
                file.set_len(state.valid_bytes).map_err(write_error)?;
                let mut journal = Journal {
                    file,
                    path: path.clone(),
                };
                std::io::Seek::seek(&mut journal.file, std::io::SeekFrom::End(0))
                    .map_err(write_error)?;
                if state.replanned.is_some() {
                    journal.append(&Record::Plan {
                        fingerprint: format!("{:016x}", plan.fingerprint),
                        batches: plan.batches.len(),
                        settings: Some(plan.settings.clone()),
                    })?;
                }
                journal
            }
            None => {
                let file = File::create(&path).map_err(write_error)?;
                let mut journal = Journal {
                    file,
                    path: path.clone(),
                };
                journal.append(&Record::Plan {
                    fingerprint: format!("{:016x}", plan.fingerprint),
                    batches: plan.batches.len(),
                    settings: Some(plan.settings.clone()),
                })?;
                if let Some(dir) = path.parent() {
                    File::open(dir)
                        .and_then(|d| d.sync_all())
                        .map_err(write_error)?;
                }
                journal
            }
        };
        journal
            .file
            .sync_all()
            .map_err(|source| Error::Write { path, source })?;
        Ok(journal)
    }

    fn append(&mut self, record: &Record) -> Result<()> {
        self.file
            .write_all(encode(record).as_bytes())
            .and_then(|_| self.file.sync_data())
            .map_err(|source| Error::Write {
                path: self.path.clone(),
                source,
            })
    }

    /// Records a batch as done (its file is already durable), with its columns that missed
    /// their tolerance.
    pub fn done(&mut self, batch: usize, rank: usize, failed: &[usize]) -> Result<()> {
        self.append(&Record::Done {
            batch,
            rank,
            failed: failed.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::plan::Batch;

    /// A plan of five batches with one setting.
    fn plan(fingerprint: u64, tolerance: &str) -> Plan {
        Plan {
            columns: Vec::new(),
            batches: (0..5)
                .map(|index| Batch {
                    index,
                    operator: 0,
                    columns: index..index + 1,
                })
                .collect(),
            operator_columns: vec![5],
            settings: [("solver.rtol".to_string(), tolerance.to_string())].into(),
            fingerprint,
            earlier: BTreeSet::new(),
        }
    }

    fn done(dir: &Path) -> Vec<usize> {
        let state = Journal::read(dir, &plan(7, "1e-12"), Replan::Refuse)
            .unwrap()
            .unwrap();
        state.done.into_iter().collect()
    }

    fn refusal(dir: &Path, plan: &Plan) -> String {
        match Journal::read(dir, plan, Replan::Refuse) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("the journal is accepted"),
        }
    }

    #[test]
    fn a_torn_last_record_is_dropped_and_the_batch_redone() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), None).unwrap();
        j.done(0, 1, &[]).unwrap();
        j.done(3, 0, &[]).unwrap();
        drop(j);
        let path = Journal::path_in(dir.path());
        let good = std::fs::read(&path).unwrap();
        // A torn record (no newline), then one with a bad checksum.
        for tail in [
            &b"1234abcd {\"record\":\"done\",\"ba"[..],
            &b"00000000 {\"record\":\"done\",\"batch\":4,\"rank\":0}\n"[..],
        ] {
            let mut bytes = good.clone();
            bytes.extend_from_slice(tail);
            std::fs::write(&path, &bytes).unwrap();
            let state = Journal::read(dir.path(), &plan(7, "1e-12"), Replan::Refuse)
                .unwrap()
                .unwrap();
            assert_eq!(state.done.iter().copied().collect::<Vec<_>>(), vec![0, 3]);
            assert!(state.torn);
            let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), Some(&state)).unwrap();
            j.done(4, 1, &[]).unwrap();
            drop(j);
            assert_eq!(done(dir.path()), vec![0, 3, 4]);
            std::fs::write(&path, &good).unwrap();
        }
        // A first record torn while the journal was created: as if there were none.
        std::fs::write(&path, &good[..20]).unwrap();
        assert!(Journal::read(dir.path(), &plan(7, "1e-12"), Replan::Refuse)
            .unwrap()
            .is_none());
    }

    #[test]
    fn damage_a_crash_cannot_cause_is_refused_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), None).unwrap();
        for batch in 0..4 {
            j.done(batch, 0, &[]).unwrap();
        }
        drop(j);
        let path = Journal::path_in(dir.path());
        let good = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<String> = good.lines().map(|l| format!("{l}\n")).collect();

        // One flipped digit in the middle (line 3 of 5).
        let middle = lines[2].replace("\"batch\":1", "\"batch\":2");
        let altered: String = [&lines[..2], &[middle], &lines[3..]].concat().concat();
        std::fs::write(&path, altered).unwrap();
        let err = refusal(dir.path(), &plan(7, "1e-12"));
        assert!(
            err.contains("line 3 of 5 is damaged") && err.contains("Delete line 3"),
            "{err}"
        );

        // Two damaged lines at the end.
        lines.push("garbage\n".into());
        lines.push("more garbage\n".into());
        std::fs::write(&path, lines.concat()).unwrap();
        let err = refusal(dir.path(), &plan(7, "1e-12"));
        assert!(
            err.contains("ends with 2 damaged lines (lines 6..=7)"),
            "{err}"
        );

        // No record at all.
        std::fs::write(&path, "hello\nworld\n").unwrap();
        let err = refusal(dir.path(), &plan(7, "1e-12"));
        assert!(
            err.contains("is not a tensorfem journal") && err.contains("--fresh"),
            "{err}"
        );

        // Records, but not starting with the plan.
        std::fs::write(&path, lines[1..5].concat()).unwrap();
        let err = refusal(dir.path(), &plan(7, "1e-12"));
        assert!(err.contains("does not start with a plan record"), "{err}");
    }

    /// A batch journaled with columns that missed their tolerance stays failed until a
    /// later record of it (a retry) lists none.
    #[test]
    fn failed_columns_are_kept_until_the_batch_passes() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), None).unwrap();
        j.done(0, 0, &[]).unwrap();
        j.done(1, 0, &[2, 5]).unwrap();
        j.done(2, 1, &[0]).unwrap();
        drop(j);
        let state = Journal::read(dir.path(), &plan(7, "1e-12"), Replan::Refuse)
            .unwrap()
            .unwrap();
        assert_eq!(state.done.len(), 3);
        assert_eq!(state.failed, [(1, vec![2, 5]), (2, vec![0])].into());
        let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), Some(&state)).unwrap();
        j.done(1, 1, &[]).unwrap();
        drop(j);
        let state = Journal::read(dir.path(), &plan(7, "1e-12"), Replan::Refuse)
            .unwrap()
            .unwrap();
        assert_eq!(state.failed, [(2, vec![0])].into());
        // Records without the field (written before it existed) read as passed.
        assert_eq!(
            decode(
                encode(&Record::Done {
                    batch: 3,
                    rank: 0,
                    failed: vec![]
                })
                .as_bytes()
            ),
            Some(Record::Done {
                batch: 3,
                rank: 0,
                failed: vec![]
            })
        );
        let old = "{\"record\":\"done\",\"batch\":3,\"rank\":0}";
        assert!(!encode(&Record::Done {
            batch: 3,
            rank: 0,
            failed: vec![]
        })
        .contains("failed"));
        assert_eq!(
            serde_json::from_str::<Record>(old).unwrap(),
            Record::Done {
                batch: 3,
                rank: 0,
                failed: vec![]
            }
        );
    }

    /// With --retry-failed a plan that differs in solver settings only is accepted: a new
    /// plan record is appended, and both plans' batches count.
    #[test]
    fn solver_settings_may_change_for_a_retry() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), None).unwrap();
        j.done(0, 0, &[]).unwrap();
        j.done(1, 0, &[3]).unwrap();
        drop(j);
        let new = plan(8, "1e-10");
        let state = Journal::read(dir.path(), &new, Replan::SolverSettings)
            .unwrap()
            .unwrap();
        assert_eq!(
            state.replanned,
            Some(vec!["solver.rtol: 1e-12 → 1e-10".to_string()])
        );
        let mut j = Journal::open(dir.path(), &new, Some(&state)).unwrap();
        j.done(1, 1, &[]).unwrap();
        drop(j);
        let state = Journal::read(dir.path(), &new, Replan::Refuse)
            .unwrap()
            .unwrap();
        assert_eq!(state.done.len(), 2);
        assert!(state.failed.is_empty());
        assert_eq!(state.fingerprints, [7, 8].into());
        // Another change than a solver setting is refused even for a retry.
        let mut other = plan(9, "1e-10");
        other.settings.insert("mesh.n".into(), "64".into());
        let e = match Journal::read(dir.path(), &other, Replan::SolverSettings) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        };
        assert!(e.contains("mesh.n: (not set) → 64"), "{e}");
    }

    #[test]
    fn another_plan_is_refused_naming_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), None).unwrap();
        j.done(2, 0, &[]).unwrap();
        drop(j);
        let err = refusal(dir.path(), &plan(8, "1e-10"));
        assert!(
            err.contains("changed: solver.rtol: 1e-12 → 1e-10")
                && err.contains("1 finished batch(es)")
                && err.contains("--fresh"),
            "{err}"
        );
        assert_eq!(done(dir.path()), vec![2]);
    }
}
