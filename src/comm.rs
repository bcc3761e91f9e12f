//! Communication between ranks: a serial implementation (tests, single process) and the
//! MPI one (rsmpi over the system MPI). Code that needs a communicator takes `&dyn Comm`.

use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;

use crate::error::{Error, Result};

/// Bytes each rank contributes to [`Comm::gather_strings`]; longer strings are cut.
const GATHER_BYTES: usize = 512;

pub trait Comm {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Rank among the processes on this host (for GPU binding).
    fn local_rank(&self) -> usize;
    fn local_size(&self) -> usize;
    /// Gathers one string per rank on rank 0 (in rank order); `None` on the other ranks.
    fn gather_strings(&self, s: &str) -> Option<Vec<String>>;
    /// The MPI library, or "serial".
    fn library(&self) -> String;
    /// Rank 0's string on every rank.
    fn broadcast_string(&self, s: &str) -> String;
    /// Point-to-point byte messages, usable from another thread than the one that
    /// initialised MPI when [`Comm::threads_may_communicate`] (None for one process).
    fn messenger(&self) -> Option<Box<dyn Messenger>>;
    /// Whether a second thread may make MPI calls (MPI_THREAD_SERIALIZED or better), as
    /// long as no two threads call at once.
    fn threads_may_communicate(&self) -> bool;

    fn is_root(&self) -> bool {
        self.rank() == 0
    }
}

/// One process, no MPI.
pub struct SerialComm;

impl Comm for SerialComm {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn local_rank(&self) -> usize {
        0
    }
    fn local_size(&self) -> usize {
        1
    }
    fn gather_strings(&self, s: &str) -> Option<Vec<String>> {
        Some(vec![s.to_string()])
    }
    fn library(&self) -> String {
        "serial".to_string()
    }
    fn broadcast_string(&self, s: &str) -> String {
        s.to_string()
    }
    fn messenger(&self) -> Option<Box<dyn Messenger>> {
        None
    }
    fn threads_may_communicate(&self) -> bool {
        true
    }
}

/// Tagged byte messages between ranks of MPI_COMM_WORLD.
pub trait Messenger: Send {
    fn send(&self, destination: usize, tag: i32, bytes: &[u8]);
    /// The next message with `tag` from `source` (any rank when None), if one has arrived:
    /// (source, bytes). Never blocks, so waiting ranks poll and sleep instead of spinning
    /// in MPI's progress engine on cores the solvers need.
    fn try_receive(&self, source: Option<usize>, tag: i32) -> Option<(usize, Vec<u8>)>;
}

/// [`Messenger`] over MPI_COMM_WORLD (a handle to the world communicator is cheap to make
/// in any thread).
struct MpiMessenger;

impl Messenger for MpiMessenger {
    fn send(&self, destination: usize, tag: i32, bytes: &[u8]) {
        SimpleCommunicator::world()
            .process_at_rank(destination as i32)
            .send_with_tag(bytes, tag);
    }
    fn try_receive(&self, source: Option<usize>, tag: i32) -> Option<(usize, Vec<u8>)> {
        let world = SimpleCommunicator::world();
        let status = match source {
            Some(r) => world
                .process_at_rank(r as i32)
                .immediate_probe_with_tag(tag)?,
            None => world.any_process().immediate_probe_with_tag(tag)?,
        };
        let from = status.source_rank();
        let (bytes, _) = world.process_at_rank(from).receive_vec_with_tag::<u8>(tag);
        Some((from as usize, bytes))
    }
}

/// MPI_COMM_WORLD, with the host-local split (MPI_COMM_TYPE_SHARED) for the local rank.
pub struct MpiComm {
    world: SimpleCommunicator,
    local_rank: usize,
    local_size: usize,
    threads_may_communicate: bool,
    // Finalises MPI when dropped: declared last so the communicators go first.
    _universe: mpi::environment::Universe,
}

impl MpiComm {
    /// Initialises MPI (once per process).
    pub fn init() -> Result<Self> {
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .ok_or_else(|| Error::Mpi("MPI was already initialised in this process".into()))?;
        let world = universe.world();
        let local = world.split_shared(world.rank());
        Ok(MpiComm {
            local_rank: local.rank() as usize,
            local_size: local.size() as usize,
            threads_may_communicate: threading >= mpi::Threading::Serialized,
            world,
            _universe: universe,
        })
    }
}

impl Comm for MpiComm {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }
    fn size(&self) -> usize {
        self.world.size() as usize
    }
    fn local_rank(&self) -> usize {
        self.local_rank
    }
    fn local_size(&self) -> usize {
        self.local_size
    }
    fn gather_strings(&self, s: &str) -> Option<Vec<String>> {
        let mut mine = [0u8; GATHER_BYTES];
        let mut len = s.len().min(GATHER_BYTES);
        while !s.is_char_boundary(len) {
            len -= 1;
        }
        mine[..len].copy_from_slice(&s.as_bytes()[..len]);
        let root = self.world.process_at_rank(0);
        if self.is_root() {
            let mut all = vec![0u8; GATHER_BYTES * self.size()];
            root.gather_into_root(&mine[..], &mut all[..]);
            Some(
                all.chunks(GATHER_BYTES)
                    .map(|c| {
                        let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
                        String::from_utf8_lossy(&c[..end]).into_owned()
                    })
                    .collect(),
            )
        } else {
            root.gather_into(&mine[..]);
            None
        }
    }
    fn broadcast_string(&self, s: &str) -> String {
        let root = self.world.process_at_rank(0);
        let mut len = s.len() as u64;
        root.broadcast_into(&mut len);
        let mut bytes = if self.is_root() {
            s.as_bytes().to_vec()
        } else {
            vec![0u8; len as usize]
        };
        root.broadcast_into(&mut bytes[..]);
        String::from_utf8_lossy(&bytes).into_owned()
    }
    fn messenger(&self) -> Option<Box<dyn Messenger>> {
        Some(Box::new(MpiMessenger))
    }
    fn threads_may_communicate(&self) -> bool {
        self.threads_may_communicate
    }
    fn library(&self) -> String {
        mpi::environment::library_version()
            // Open MPI's string ends in its C terminator.
            .map(|v| {
                let first = v.lines().next().unwrap_or("");
                first
                    .trim_matches(|c: char| c.is_whitespace() || c == '\0')
                    .to_string()
            })
            .unwrap_or_else(|_| "unknown MPI".into())
    }
}
