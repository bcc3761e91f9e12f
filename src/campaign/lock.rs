//! One run per campaign directory. Rank 0 holds an exclusive `flock` on
//! `<directory>/.tensorfem.lock` from before it reads the journal (or `--fresh` removes
//! anything) until the run ends. The kernel drops the lock with the process, so a killed
//! run never blocks its resume; the file's text (pid and host) only serves the
//! message a second run gets.
//!
//! Shared file systems: on NFS (v3 with lockd, v4) Linux turns `flock` into a byte-range
//! lock the server arbitrates, so runs on different nodes exclude each other; a lock held by
//! a node that dies is released when the server's lease expires (NFSv4: about 90 s). Lustre
//! arbitrates across nodes when mounted with `-o flock`; with `-o localflock` only runs on
//! the same node exclude each other; without either option `flock` fails, and the run then
//! goes on with a warning that the directory is not protected.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The held lock; dropping it (or the process ending) releases it.
pub struct DirectoryLock {
    _file: File,
}

pub fn path_in(directory: &Path) -> PathBuf {
    directory.join(".tensorfem.lock")
}

/// Takes the lock of `directory` (which exists), or says who holds it. None: the file
/// system offers no locks (warned).
pub fn acquire(directory: &Path) -> Result<Option<DirectoryLock>> {
    let path = path_in(directory);
    let io_error = |source| Error::Write {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io_error)?;
    match file.try_lock() {
        Ok(()) => {
            let holder = format!("pid {} on {}\n", std::process::id(), crate::sys::hostname());
            file.set_len(0)
                .and_then(|_| file.write_all(holder.as_bytes()))
                .map_err(io_error)?;
            Ok(Some(DirectoryLock { _file: file }))
        }
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            Err(Error::InvalidInput(format!(
                "campaign.directory {} is in use by another run ({}): wait for it to end or stop it, or choose another campaign.directory (the lock {} is released when that run's process ends, killed or not)",
                directory.display(),
                if holder.is_empty() { "holder unknown" } else { holder },
                path.display()
            )))
        }
        Err(TryLockError::Error(e)) if unsupported(&e) => {
            log::warn!(
                "the file system of {} offers no file locks ({e}): nothing stops a second run from using this campaign directory at the same time (Lustre: mount with -o flock)",
                directory.display()
            );
            Ok(None)
        }
        Err(TryLockError::Error(e)) => Err(io_error(e)),
    }
}

/// Errors that mean "this file system has no locks", not "locked".
fn unsupported(e: &std::io::Error) -> bool {
    const ENOLCK: i32 = 37;
    const ENOSYS: i32 = 38;
    const EOPNOTSUPP: i32 = 95;
    e.kind() == std::io::ErrorKind::Unsupported
        || matches!(e.raw_os_error(), Some(ENOLCK | ENOSYS | EOPNOTSUPP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path()).unwrap().expect("tmpfs has locks");
        let err = match acquire(dir.path()) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("locked twice"),
        };
        assert!(
            err.contains("is in use by another run")
                && err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        assert!(acquire(dir.path()).unwrap().is_some());
    }
}
