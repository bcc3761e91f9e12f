//! Per-column statistics of what a kernel stored: Σ v², max |v|, and whether every value
//! was finite and within the storage precision's range. Multigrid checks its levels'
//! precision ranges with them and iterative refinement takes its residual norms from them.
//!
//! The kernel that writes a block reduces its statistics in a fixed order (bitwise the same
//! whatever the number of threads); [`Stats::read`] brings them to the host, where a
//! backend that keeps them on the device copies 2·nrhs + 1 values.

use super::Device;
use crate::error::Result;

/// Statistics of a block of `nrhs` columns, with the backend's scratch for partial sums.
pub struct Stats<D: Device> {
    nrhs: usize,
    /// Backend scratch for partial sums (grown by the kernels on first use).
    pub partials: D::Buffer<f64>,
    /// The reduced values: Σ v² per column, max |v| per column, then 1.0 if some value was
    /// out of range.
    pub host: Vec<f64>,
    /// The reduced values are on the device, not yet in `host` (backends that reduce on the
    /// device set it; [`Stats::read`] copies them from the front of `partials`).
    pub on_device: bool,
    /// Σ v² is wanted ([`Stats::without_norms`] clears it: kernels may then skip it).
    norms: bool,
}

/// The statistics of one block, on the host.
#[derive(Clone, Copy, Debug)]
pub struct ColumnStats<'a> {
    /// Σ v² per column; `None` for statistics made [`Stats::without_norms`].
    pub sumsq: Option<&'a [f64]>,
    pub max_abs: &'a [f64],
    /// Every stored value finite and within the storage precision's range.
    pub in_range: bool,
}

impl ColumnStats<'_> {
    /// ‖column c‖₂ (statistics made with [`Stats::new`]; a programming error otherwise).
    pub fn norm(&self, c: usize) -> f64 {
        self.sumsq.expect("norms of statistics made without norms")[c].sqrt()
    }
}

impl<D: Device> Stats<D> {
    pub fn new(dev: &D, nrhs: usize) -> Result<Self> {
        Ok(Stats {
            nrhs,
            partials: dev.zeros(0)?,
            host: vec![0.0; Self::len_for(nrhs)],
            on_device: false,
            norms: true,
        })
    }

    /// Statistics whose readers need only max |v| and the range flag (a multigrid level's):
    /// the CPU kernels then skip Σ v², and [`Stats::read`] gives no sums.
    pub fn without_norms(dev: &D, nrhs: usize) -> Result<Self> {
        Ok(Stats {
            norms: false,
            ..Self::new(dev, nrhs)?
        })
    }

    /// Whether Σ v² is wanted.
    pub fn norms(&self) -> bool {
        self.norms
    }

    /// Values of the reduced statistics of `nrhs` columns.
    pub fn len_for(nrhs: usize) -> usize {
        2 * nrhs + 1
    }

    pub fn nrhs(&self) -> usize {
        self.nrhs
    }

    /// The statistics of the last kernel that recorded into this object.
    pub fn read(&mut self, dev: &D) -> Result<ColumnStats<'_>> {
        if self.on_device {
            dev.read(&self.partials, 0, &mut self.host)?;
            self.on_device = false;
        }
        let (sumsq, rest) = self.host.split_at(self.nrhs);
        let (max_abs, flag) = rest.split_at(self.nrhs);
        Ok(ColumnStats {
            sumsq: self.norms.then_some(sumsq),
            max_abs,
            in_range: flag[0] == 0.0,
        })
    }
}

/// The range flags of several kernels' statistics, copied where they were computed
/// ([`VectorKernels::log_range_flag`](super::VectorKernels::log_range_flag)) and read to the
/// host together: one read for many checks on a device whose host reads wait for every
/// kernel issued ([`Device::reads_synchronize`]).
pub struct FlagLog<D: Device> {
    /// What each check logged, in order: a range flag (1.0 where a kernel stored a value
    /// out of range), or a check's values ([`MultigridKernels::log_flushed_column`](super::MultigridKernels::log_flushed_column)).
    pub flags: D::Buffer<f64>,
    /// Values logged since the last read or [`FlagLog::clear`].
    pub len: usize,
    host: Vec<f64>,
}

impl<D: Device> FlagLog<D> {
    pub fn new(dev: &D) -> Result<Self> {
        Ok(FlagLog {
            flags: dev.zeros(0)?,
            len: 0,
            host: Vec::new(),
        })
    }

    /// Room for `capacity` flags (set-up; keeps what was logged).
    pub fn reserve(&mut self, dev: &D, capacity: usize) -> Result<()> {
        if D::buffer_len(&self.flags) < capacity {
            let mut logged = vec![0.0; self.len];
            dev.read(&self.flags, 0, &mut logged)?;
            let mut grown = vec![0.0; capacity];
            grown[..self.len].copy_from_slice(&logged);
            self.flags = dev.upload(&grown)?;
            self.host = vec![0.0; capacity];
        }
        Ok(())
    }

    /// The values logged since the last read (one host read), emptying the log.
    pub fn read(&mut self, dev: &D) -> Result<&[f64]> {
        let len = std::mem::take(&mut self.len);
        if len > 0 {
            dev.read(&self.flags, 0, &mut self.host[..len])?;
        }
        Ok(&self.host[..len])
    }

    /// Flags the log has room for.
    pub fn capacity(&self) -> usize {
        D::buffer_len(&self.flags)
    }

    /// Grows the log (doubling) until `count` more values fit (set-up normally reserves
    /// enough: then this allocates nothing).
    pub fn make_room(&mut self, dev: &D, count: usize) -> Result<()> {
        let mut capacity = self.capacity().max(8);
        while self.len + count > capacity {
            capacity *= 2;
        }
        self.reserve(dev, capacity)
    }

    /// The slot of the next `count` values a kernel `what` logs: an error where the log
    /// has no room ([`FlagLog::reserve`]).
    pub fn next_slot(&self, what: &str, count: usize) -> Result<usize> {
        if self.len + count <= self.capacity() {
            Ok(self.len)
        } else {
            Err(crate::error::Error::Backend(format!(
                "{what}: a log of {} values has no room for {count} more (FlagLog::reserve)",
                self.capacity()
            )))
        }
    }

    /// Forgets what was logged (a cycle that ended by another error).
    pub fn clear(&mut self) {
        self.len = 0;
    }
}
