//! The checkpoint journal: one line per durable batch, appended and synced by rank 0 after
//! the batch's file is on disk. Each line carries a CRC-32 of its text, so a record torn by
//! a crash is recognised and dropped: that batch is simply redone. A crash can tear only the
//! last line; a damaged line with valid records after it, or a file of no records at all,
//! was altered by something else and is refused with what to do.
//!
//! Line format: `<crc32 as 8 hex digits> <JSON>\n`. The first record names the plan (its
//! fingerprint and settings); a journal of another plan is refused, naming the settings
//! that changed.

use std::collections::BTreeSet;
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
    Done { batch: usize, rank: usize },
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

/// The settings that differ between the journal's plan and this one, each as
/// `key: journal value → value now`.
fn changes(journal: &Settings, now: &Settings) -> Vec<String> {
    let keys: BTreeSet<&String> = journal.keys().chain(now.keys()).collect();
    let unset = "(not set)".to_string();
    keys.into_iter()
        .filter_map(|key| {
            let (old, new) = (
                journal.get(key).unwrap_or(&unset),
                now.get(key).unwrap_or(&unset),
            );
            (old != new).then(|| format!("{key}: {old} → {new}"))
        })
        .collect()
}

/// An open journal (rank 0).
pub struct Journal {
    file: File,
    path: PathBuf,
}

/// What a journal on disk says.
pub struct JournalState {
    pub done: BTreeSet<usize>,
    /// Bytes of valid records; anything after them is a torn tail.
    valid_bytes: u64,
    torn: bool,
}

impl Journal {
    pub fn path_in(directory: &Path) -> PathBuf {
        directory.join("journal.log")
    }

    /// Reads the journal in `directory`, if there is one, checking it belongs to `plan`.
    pub fn read(directory: &Path, plan: &Plan) -> Result<Option<JournalState>> {
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
        let refuse = |what: String| {
            Err(Error::Campaign(format!(
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
            valid_bytes: lines[..=last].iter().map(|(l, _)| l.len() as u64).sum(),
            torn: last + 1 < n,
        };
        let expected = format!("{:016x}", plan.fingerprint);
        for (number, (_, record)) in lines[..=last].iter().enumerate() {
            match (number, record.as_ref().expect("checked above")) {
                (0, Record::Plan {
                    fingerprint,
                    settings,
                    ..
                }) => {
                    if *fingerprint != expected {
                        let done = lines[1..=last].len();
                        let what = match settings {
                            Some(old) => format!("changed: {}", changes(old, &plan.settings).join("; ")),
                            None => "its settings were not recorded (written by an older tensorfem)".into(),
                        };
                        return refuse(format!(
                            "was written for other settings ({what}); its {done} finished batch(es) would be mixed with results of the new ones. Restore the setting(s) to resume, run with --fresh to start over, or choose another campaign.directory"
                        ));
                    }
                }
                (0, other) => {
                    return refuse(format!(
                        "does not start with a plan record (line 1 is {other:?}): run with --fresh to start over"
                    ))
                }
                (_, &Record::Done { batch, .. }) if batch < plan.batches.len() => {
                    state.done.insert(batch);
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

    /// Records a batch as done (its file is already durable).
    pub fn done(&mut self, batch: usize, rank: usize) -> Result<()> {
        self.append(&Record::Done { batch, rank })
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
        }
    }

    fn done(dir: &Path) -> Vec<usize> {
        let state = Journal::read(dir, &plan(7, "1e-12")).unwrap().unwrap();
        state.done.into_iter().collect()
    }

    fn refusal(dir: &Path, plan: &Plan) -> String {
        match Journal::read(dir, plan) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("the journal is accepted"),
        }
    }

    #[test]
    fn a_torn_last_record_is_dropped_and_the_batch_redone() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), None).unwrap();
        j.done(0, 1).unwrap();
        j.done(3, 0).unwrap();
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
            let state = Journal::read(dir.path(), &plan(7, "1e-12"))
                .unwrap()
                .unwrap();
            assert_eq!(state.done.iter().copied().collect::<Vec<_>>(), vec![0, 3]);
            assert!(state.torn);
            let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), Some(&state)).unwrap();
            j.done(4, 1).unwrap();
            drop(j);
            assert_eq!(done(dir.path()), vec![0, 3, 4]);
            std::fs::write(&path, &good).unwrap();
        }
        // A first record torn while the journal was created: as if there were none.
        std::fs::write(&path, &good[..20]).unwrap();
        assert!(Journal::read(dir.path(), &plan(7, "1e-12"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn damage_a_crash_cannot_cause_is_refused_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), None).unwrap();
        for batch in 0..4 {
            j.done(batch, 0).unwrap();
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

    #[test]
    fn another_plan_is_refused_naming_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), &plan(7, "1e-12"), None).unwrap();
        j.done(2, 0).unwrap();
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
