//! The dynamic work queue. Rank 0 owns it: a dispatcher thread answers the other ranks'
//! requests over MPI (polling, so a waiting rank sleeps instead of spinning on a core the
//! solvers need) while rank 0's own worker takes batches straight from the shared state.
//! A rank asking for work gets, in this order: a batch of the operator it already holds
//! (its set-up is reused), a batch of an operator whose cache is ready (its file existed at
//! the start, or its writer has finished it), a batch whose cache file no other rank is
//! writing (it becomes that file's only writer), or waits. A batch
//! is done only when its file is durable and rank 0 has journaled it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::journal::Journal;
use super::perf::{BatchRecord, StageTotals};
use super::signals;
use crate::comm::Messenger;
use crate::error::{Error, Result};

const TAG_TO_ROOT: i32 = 7101;
const TAG_FROM_ROOT: i32 = 7102;
/// How long rank 0's dispatcher sleeps between polls (it shares a core with rank 0's
/// worker: each wake-up takes a little of its time).
const POLL: Duration = Duration::from_millis(1);
/// How long a rank waiting for its order first sleeps between polls, doubling up to
/// [`POLL`]: an order usually comes within a few ms, and the short sleeps shorten that wait
/// (a round trip 3.3 → 1.4–2.2 ms on a 2-core VM with both ranks busy); a long wait (for
/// another rank's set-up) polls at the slower pace.
const FIRST_WORKER_POLL: Duration = Duration::from_micros(100);

/// What a worker is told to do next.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Order {
    /// Solve `batch`; with `lock`, this rank alone writes the operator's cache file and
    /// reports when it is ready.
    Solve {
        batch: usize,
        lock: bool,
    },
    Stop,
}

#[derive(Debug, Serialize, Deserialize)]
enum ToRoot {
    Request { holding: Option<usize> },
    CacheReady { operator: usize },
    Done { record: BatchRecord },
    Abandon { batch: usize },
    Failed { message: String },
    Leave { host: String, totals: StageTotals },
}

/// The queue's state (rank 0).
pub struct Queue {
    operator_of_batch: Vec<usize>,
    /// Per operator: the cache file its set-up reads and writes, if any.
    cache_file: Vec<Option<PathBuf>>,
    /// Per operator: its size; larger operators' batches are handed out first.
    size: Vec<usize>,
    /// Batches not yet handed out, in hand-out order: (larger first, batch index).
    pending: BTreeSet<(Reverse<usize>, usize)>,
    assigned: BTreeMap<usize, usize>,
    ready: HashSet<usize>,
    busy: HashMap<PathBuf, usize>,
    failure: Option<String>,
    journal: Option<Journal>,
    /// Records of the batches done in this run.
    pub done_now: Vec<BatchRecord>,
    /// Ranks that have left, with their stage totals.
    pub left: Vec<(usize, String, StageTotals)>,
    /// Every worker has left: the progress report ends.
    finished: bool,
}

impl Queue {
    /// `size`: per operator, a measure of its batches' cost (its unknowns). Batches are
    /// handed out largest operator first (longest processing time first), so a study's
    /// largest operators do not come last and leave one rank working while the others idle.
    pub fn new(
        operator_of_batch: Vec<usize>,
        cache_file: Vec<Option<PathBuf>>,
        size: Vec<usize>,
        done: &BTreeSet<usize>,
        journal: Option<Journal>,
    ) -> Queue {
        let pending = (0..operator_of_batch.len())
            .filter(|b| !done.contains(b))
            .map(|b| (Reverse(size[operator_of_batch[b]]), b))
            .collect();
        // A cache file that exists is read by every rank at once: reading needs no turn (a
        // rank that rewrites it, to add its precision's copies, replaces it atomically).
        // Turns are for building one.
        let ready = (0..cache_file.len())
            .filter(|&o| cache_file[o].as_ref().is_some_and(|f| f.is_file()))
            .collect();
        Queue {
            operator_of_batch,
            cache_file,
            size,
            pending,
            assigned: BTreeMap::new(),
            ready,
            busy: HashMap::new(),
            failure: None,
            journal,
            done_now: Vec::new(),
            left: Vec::new(),
            finished: false,
        }
    }

    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    fn is_ready(&self, operator: usize) -> bool {
        self.cache_file[operator].is_none() || self.ready.contains(&operator)
    }

    /// The next order for `rank`, or None: wait (every remaining batch needs a cache file
    /// another rank is writing).
    fn decide(&mut self, rank: usize, holding: Option<usize>) -> Option<Order> {
        if self.failure.is_some() || signals::stop_requested() || self.pending.is_empty() {
            return Some(Order::Stop);
        }
        let of = |b: &usize| self.operator_of_batch[*b];
        let mut pending = self.pending.iter().map(|(_, b)| b);
        let pick = holding
            .and_then(|h| pending.clone().find(|b| of(b) == h))
            .or_else(|| pending.clone().find(|b| self.is_ready(of(b))))
            .map(|&b| (b, false))
            .or_else(|| {
                pending
                    .find(|b| {
                        let file = self.cache_file[of(b)]
                            .as_ref()
                            .expect("not ready: has a file");
                        !self.busy.contains_key(file)
                    })
                    .map(|&b| (b, true))
            });
        let (batch, lock) = pick?;
        if lock {
            let file = self.cache_file[of(&batch)]
                .clone()
                .expect("locked: has a file");
            self.busy.insert(file, rank);
        }
        let key = self.pending_key(batch);
        self.pending.remove(&key);
        self.assigned.insert(batch, rank);
        Some(Order::Solve { batch, lock })
    }

    fn pending_key(&self, batch: usize) -> (Reverse<usize>, usize) {
        (Reverse(self.size[self.operator_of_batch[batch]]), batch)
    }

    fn cache_ready(&mut self, operator: usize) {
        self.ready.insert(operator);
        if let Some(file) = &self.cache_file[operator] {
            self.busy.remove(file);
        }
    }

    fn done(&mut self, record: BatchRecord) {
        self.assigned.remove(&record.batch);
        if let Some(journal) = &mut self.journal {
            if let Err(e) = journal.done(record.batch, record.rank, &record.failed_columns) {
                self.fail(format!("journaling batch {}: {e}", record.batch));
                return;
            }
        }
        self.done_now.push(record);
    }

    fn abandon(&mut self, batch: usize) {
        if self.assigned.remove(&batch).is_some() {
            self.pending.insert(self.pending_key(batch));
        }
    }

    fn fail(&mut self, message: String) {
        self.failure.get_or_insert(message);
    }

    fn leave(&mut self, rank: usize, host: String, totals: StageTotals) {
        // Whatever it still held goes back (it left on a signal or a failure).
        let held: Vec<usize> = self
            .assigned
            .iter()
            .filter(|(_, &r)| r == rank)
            .map(|(&b, _)| b)
            .collect();
        for b in held {
            self.abandon(b);
        }
        self.busy.retain(|_, r| *r != rank);
        self.left.push((rank, host, totals));
    }
}

/// How a worker talks to the queue.
pub trait Dispatch {
    fn next(&mut self, holding: Option<usize>) -> Result<Order>;
    fn cache_ready(&mut self, operator: usize) -> Result<()>;
    fn done(&mut self, record: BatchRecord) -> Result<()>;
    fn abandon(&mut self, batch: usize);
    fn failed(&mut self, message: String);
    fn leave(&mut self, host: String, totals: StageTotals);
}

pub type Shared = Arc<(Mutex<Queue>, Condvar)>;

/// How often the progress report looks at the queue.
const PROGRESS_POLL: Duration = Duration::from_millis(200);

/// Keeps `progress` at the number of batches done in this run until [`stop_progress`].
pub fn report_progress(shared: &Shared, progress: &crate::progress::Progress) {
    loop {
        let (done, finished) = {
            let queue = shared.0.lock().expect("queue lock");
            (queue.done_now.len(), queue.finished)
        };
        progress.set(done as f64);
        if finished {
            return;
        }
        std::thread::sleep(PROGRESS_POLL);
    }
}

/// Ends [`report_progress`].
pub fn stop_progress(shared: &Shared) {
    shared.0.lock().expect("queue lock").finished = true;
}

/// Rank 0's own worker: straight to the shared state.
pub struct LocalDispatch(pub Shared);

impl LocalDispatch {
    fn with<R>(&self, f: impl FnOnce(&mut Queue) -> R) -> R {
        let (lock, wake) = &*self.0;
        let r = f(&mut lock.lock().expect("queue lock"));
        wake.notify_all();
        r
    }
}

impl Dispatch for LocalDispatch {
    fn next(&mut self, holding: Option<usize>) -> Result<Order> {
        let (lock, wake) = &*self.0;
        let mut queue = lock.lock().expect("queue lock");
        loop {
            if let Some(order) = queue.decide(0, holding) {
                return Ok(order);
            }
            queue = wake
                .wait_timeout(queue, Duration::from_millis(50))
                .expect("queue lock")
                .0;
        }
    }
    fn cache_ready(&mut self, operator: usize) -> Result<()> {
        self.with(|q| q.cache_ready(operator));
        Ok(())
    }
    fn done(&mut self, record: BatchRecord) -> Result<()> {
        self.with(|q| {
            q.done(record);
            q.failure
                .clone()
                .map_or(Ok(()), |m| Err(Error::Campaign(m)))
        })
    }
    fn abandon(&mut self, batch: usize) {
        self.with(|q| q.abandon(batch));
    }
    fn failed(&mut self, message: String) {
        self.with(|q| q.fail(format!("rank 0: {message}")));
    }
    fn leave(&mut self, host: String, totals: StageTotals) {
        self.with(|q| q.leave(0, host, totals));
    }
}

/// Serves the other ranks until all of them have left (rank 0, its own thread).
pub fn serve(queue: Shared, messenger: Box<dyn Messenger>, remote_ranks: usize) {
    let (lock, wake) = &*queue;
    let mut deferred: Vec<(usize, Option<usize>)> = Vec::new();
    let mut left = 0;
    let reply = |rank: usize, order: Order| {
        let bytes = serde_json::to_vec(&order).expect("orders serialise");
        messenger.send(rank, TAG_FROM_ROOT, &bytes);
    };
    while left < remote_ranks {
        let mut progressed = false;
        while let Some((from, bytes)) = messenger.try_receive(None, TAG_TO_ROOT) {
            progressed = true;
            let mut q = lock.lock().expect("queue lock");
            match serde_json::from_slice::<ToRoot>(&bytes) {
                Ok(ToRoot::Request { holding }) => match q.decide(from, holding) {
                    Some(order) => reply(from, order),
                    None => deferred.push((from, holding)),
                },
                Ok(ToRoot::CacheReady { operator }) => q.cache_ready(operator),
                Ok(ToRoot::Done { record }) => q.done(record),
                Ok(ToRoot::Abandon { batch }) => q.abandon(batch),
                Ok(ToRoot::Failed { message }) => q.fail(format!("rank {from}: {message}")),
                Ok(ToRoot::Leave { host, totals }) => {
                    q.leave(from, host, totals);
                    left += 1;
                }
                Err(e) => q.fail(format!("unreadable message from rank {from}: {e}")),
            }
        }
        if !deferred.is_empty() {
            let mut q = lock.lock().expect("queue lock");
            deferred.retain(|&(rank, holding)| match q.decide(rank, holding) {
                Some(order) => {
                    reply(rank, order);
                    false
                }
                None => true,
            });
        }
        if progressed {
            wake.notify_all();
        } else {
            std::thread::sleep(POLL);
        }
    }
}

/// A worker on rank > 0: requests and reports travel to rank 0 over MPI.
pub struct RemoteDispatch(pub Box<dyn Messenger>);

impl RemoteDispatch {
    fn send(&self, message: &ToRoot) {
        let bytes = serde_json::to_vec(message).expect("messages serialise");
        self.0.send(0, TAG_TO_ROOT, &bytes);
    }
}

impl Dispatch for RemoteDispatch {
    fn next(&mut self, holding: Option<usize>) -> Result<Order> {
        self.send(&ToRoot::Request { holding });
        let mut poll = FIRST_WORKER_POLL;
        loop {
            if let Some((_, bytes)) = self.0.try_receive(Some(0), TAG_FROM_ROOT) {
                return serde_json::from_slice(&bytes)
                    .map_err(|e| Error::Mpi(format!("unreadable order from rank 0: {e}")));
            }
            std::thread::sleep(poll);
            poll = (poll * 2).min(POLL);
        }
    }
    fn cache_ready(&mut self, operator: usize) -> Result<()> {
        self.send(&ToRoot::CacheReady { operator });
        Ok(())
    }
    fn done(&mut self, record: BatchRecord) -> Result<()> {
        self.send(&ToRoot::Done { record });
        Ok(())
    }
    fn abandon(&mut self, batch: usize) {
        self.send(&ToRoot::Abandon { batch });
    }
    fn failed(&mut self, message: String) {
        self.send(&ToRoot::Failed { message });
    }
    fn leave(&mut self, host: String, totals: StageTotals) {
        self.send(&ToRoot::Leave { host, totals });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two operators share one cache file: the second rank waits while the first writes
    /// it, ranks keep the operator they hold, and nothing is handed out twice.
    #[test]
    fn cache_files_have_one_writer_and_operators_are_reused() {
        let file = Some(PathBuf::from("cache.h5"));
        let mut q = Queue::new(
            vec![0, 0, 1, 1],
            vec![file.clone(), file],
            vec![1, 1],
            &BTreeSet::new(),
            None,
        );
        assert_eq!(
            q.decide(0, None),
            Some(Order::Solve {
                batch: 0,
                lock: true
            })
        );
        assert_eq!(q.decide(1, None), None, "the file is being written");
        q.cache_ready(0);
        assert_eq!(
            q.decide(1, None),
            Some(Order::Solve {
                batch: 1,
                lock: false
            })
        );
        assert_eq!(
            q.decide(0, Some(0)),
            Some(Order::Solve {
                batch: 2,
                lock: true
            })
        );
        assert_eq!(q.decide(1, Some(0)), None);
        q.cache_ready(1);
        assert_eq!(
            q.decide(1, Some(0)),
            Some(Order::Solve {
                batch: 3,
                lock: false
            })
        );
        assert_eq!(q.decide(0, Some(1)), Some(Order::Stop));
        // A rank leaving with a batch hands it back.
        let mut q = Queue::new(vec![0, 0], vec![None], vec![1], &BTreeSet::from([0]), None);
        assert_eq!(
            q.decide(2, None),
            Some(Order::Solve {
                batch: 1,
                lock: false
            })
        );
        q.leave(2, "h".into(), StageTotals::default());
        assert_eq!(
            q.decide(0, None),
            Some(Order::Solve {
                batch: 1,
                lock: false
            })
        );
    }

    /// The largest operators' batches go out first; equal sizes in batch order.
    #[test]
    fn larger_operators_are_handed_out_first() {
        let mut q = Queue::new(
            vec![0, 1, 1, 2],
            vec![None; 3],
            vec![10, 40, 20],
            &BTreeSet::new(),
            None,
        );
        let order: Vec<_> = (0..4)
            .map(|_| match q.decide(0, None) {
                Some(Order::Solve { batch, .. }) => batch,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(order, vec![1, 2, 3, 0]);
    }

    /// A cache file present at the start needs no turns: every rank reads it at once.
    #[test]
    fn an_existing_cache_file_is_read_by_every_rank_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cache.h5");
        std::fs::write(&file, b"cached").unwrap();
        let mut q = Queue::new(
            vec![0, 0],
            vec![Some(file)],
            vec![1],
            &BTreeSet::new(),
            None,
        );
        for (rank, batch) in [(0, 0), (1, 1)] {
            assert_eq!(
                q.decide(rank, None),
                Some(Order::Solve { batch, lock: false })
            );
        }
    }
}
