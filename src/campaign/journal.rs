//! The checkpoint journal: one line per durable batch, appended and synced by rank 0 after
//! the batch's file is on disk. Each line carries a CRC-32 of its text, so a record torn by
//! a crash (or garbage after it) is recognised and dropped: that batch is simply redone.
//!
//! Line format: `<crc32 as 8 hex digits> <JSON>\n`. The first record names the plan
//! (its fingerprint); a journal of another plan is refused.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record")]
enum Record {
    #[serde(rename = "plan")]
    Plan { fingerprint: String, batches: usize },
    #[serde(rename = "done")]
    Done { batch: usize, rank: usize },
}

fn encode(record: &Record) -> String {
    let json = serde_json::to_string(record).expect("records serialise");
    format!("{:08x} {json}\n", crc32fast::hash(json.as_bytes()))
}

/// A decoded line, or None for a torn or corrupted one.
fn decode(line: &str) -> Option<Record> {
    let (crc, json) = line.split_once(' ')?;
    (u32::from_str_radix(crc, 16).ok()? == crc32fast::hash(json.as_bytes()))
        .then(|| serde_json::from_str(json).ok())
        .flatten()
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

    /// Reads the journal in `directory`, if there is one, checking it belongs to the plan.
    pub fn read(
        directory: &Path,
        fingerprint: u64,
        batches: usize,
    ) -> Result<Option<JournalState>> {
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
        let mut state = JournalState {
            done: BTreeSet::new(),
            valid_bytes: 0,
            torn: false,
        };
        let mut offset = 0usize;
        let mut plan_seen = false;
        for line in text.split_inclusive(|&b| b == b'\n') {
            let record = line
                .strip_suffix(b"\n")
                .and_then(|l| std::str::from_utf8(l).ok())
                .and_then(decode);
            let Some(record) = record else {
                state.torn = true;
                break;
            };
            match record {
                Record::Plan { fingerprint: f, .. } if !plan_seen => {
                    if f != format!("{fingerprint:016x}") {
                        return Err(Error::Campaign(format!(
                            "the journal {} belongs to another campaign (plan {f}, this config's plan {fingerprint:016x}): run with --fresh to start over, or choose another campaign.directory",
                            path.display()
                        )));
                    }
                    plan_seen = true;
                }
                Record::Done { batch, .. } if plan_seen && batch < batches => {
                    state.done.insert(batch);
                }
                other => {
                    return Err(Error::Campaign(format!(
                        "the journal {} has an unexpected record {other:?}: run with --fresh to start over",
                        path.display()
                    )))
                }
            }
            offset += line.len();
            state.valid_bytes = offset as u64;
        }
        if !plan_seen {
            // Torn before its first record was complete: as good as no journal.
            return Ok(None);
        }
        Ok(Some(state))
    }

    /// Opens the journal for appending: continues `state` (dropping a torn tail) or starts a
    /// new one with the plan record.
    pub fn open(
        directory: &Path,
        fingerprint: u64,
        batches: usize,
        state: Option<&JournalState>,
    ) -> Result<Journal> {
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
                    fingerprint: format!("{fingerprint:016x}"),
                    batches,
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

    #[test]
    fn torn_records_are_dropped_and_other_plans_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), 7, 5, None).unwrap();
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
            let state = Journal::read(dir.path(), 7, 5).unwrap().unwrap();
            assert_eq!(state.done.iter().copied().collect::<Vec<_>>(), vec![0, 3]);
            assert!(state.torn);
            let mut j = Journal::open(dir.path(), 7, 5, Some(&state)).unwrap();
            j.done(4, 1).unwrap();
            drop(j);
            let state = Journal::read(dir.path(), 7, 5).unwrap().unwrap();
            assert_eq!(
                state.done.iter().copied().collect::<Vec<_>>(),
                vec![0, 3, 4]
            );
            assert!(!state.torn);
            std::fs::write(&path, &good).unwrap();
        }
        let err = Journal::read(dir.path(), 8, 5).err().unwrap().to_string();
        assert!(
            err.contains("another campaign") && err.contains("--fresh"),
            "{err}"
        );
    }
}
