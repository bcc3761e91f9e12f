//! Large host ↔ device copies through page-locked (pinned) staging memory.
//!
//! The DMA engine reads and writes pinned pages directly, at the link's rate; from pageable
//! memory the driver first copies through bounce buffers of its own, on one thread, and
//! the copy waits for them. Here two pinned halves alternate: while chunk i crosses PCIe
//! from (or into) one half, all cores copy chunk i+1 into (or chunk i−1 out of) the
//! other. Blocks of right-hand sides and solutions (gigabytes per campaign batch) take
//! this path; small copies (parameters, statistics) go directly.
//!
//! The order of the steps ([`upload_steps`], [`download_steps`]) is plain data, checked on
//! the CPU against a model of the copy engine; [`Staging`] carries it out on a stream.

use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaStream, PinnedHostSlice};
use rayon::prelude::*;
use std::sync::Arc;

use super::device::driver;
use crate::error::Result;

/// Bytes of one staging half: one chunk of a copy.
pub const CHUNK_BYTES: usize = 32 << 20;
/// Copies of at least this many bytes are staged; smaller ones go directly.
pub const STAGED_BYTES: usize = 4 << 20;
const _: () = assert!(STAGED_BYTES <= CHUNK_BYTES);

/// One step of a staged copy, in the order the host issues it. Ranges are bytes of the host
/// block (and of the device range, from its start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Wait until the last DMA queued on `half` has finished.
    Wait { half: usize },
    /// Copy host bytes start..end into `half` (host work, all cores).
    Fill {
        half: usize,
        start: usize,
        end: usize,
    },
    /// Queue the DMA of bytes start..end between `half` and the device (upload: half to
    /// device; download: device to half) and mark its end on the half.
    Dma {
        half: usize,
        start: usize,
        end: usize,
    },
    /// Copy `half` out to host bytes start..end (host work, all cores).
    Drain {
        half: usize,
        start: usize,
        end: usize,
    },
}

fn chunks(len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    (0..len)
        .step_by(chunk.max(1))
        .enumerate()
        .map(move |(i, start)| (i % 2, start, (start + chunk).min(len)))
}

/// Host to device: fill a half once its previous DMA is done, then queue its DMA; the
/// next fill goes to the other half while this DMA runs.
pub fn upload_steps(len: usize, chunk: usize) -> Vec<Step> {
    chunks(len, chunk)
        .flat_map(|(half, start, end)| {
            [
                Step::Wait { half },
                Step::Fill { half, start, end },
                Step::Dma { half, start, end },
            ]
        })
        .collect()
}

/// Device to host: queue chunk i's DMA, then drain chunk i−1 (its DMA waited for) while
/// chunk i crosses; the last chunk is drained after the loop. A half is drained before
/// its next DMA is queued.
pub fn download_steps(len: usize, chunk: usize) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut previous: Option<(usize, usize, usize)> = None;
    for (half, start, end) in chunks(len, chunk) {
        steps.push(Step::Dma { half, start, end });
        if let Some((half, start, end)) = previous {
            steps.push(Step::Wait { half });
            steps.push(Step::Drain { half, start, end });
        }
        previous = Some((half, start, end));
    }
    if let Some((half, start, end)) = previous {
        steps.push(Step::Wait { half });
        steps.push(Step::Drain { half, start, end });
    }
    steps
}

/// `dst` = `src` on every core, in 1 MiB pieces.
fn parallel_copy(dst: &mut [u8], src: &[u8]) {
    const PIECE: usize = 1 << 20;
    dst.par_chunks_mut(PIECE)
        .zip(src.par_chunks(PIECE))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// Two pinned halves of [`CHUNK_BYTES`] and an event per half marking its last DMA.
pub struct Staging {
    halves: [PinnedHostSlice<u8>; 2],
    events: [CudaEvent; 2],
}

impl Staging {
    /// Page-locked halves, cached (not write-combined: solutions are read back on the
    /// host, and write-combined memory reads at a fraction of the memory's speed).
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let half = || {
            // SAFETY: the halves are written (Fill, DMA) before anything reads them.
            unsafe { ctx.alloc_pinned_with_flags::<u8>(CHUNK_BYTES, 0) }
                .map_err(|e| driver("pinned staging memory", e))
        };
        let event = || ctx.new_event(None).map_err(|e| driver("event", e));
        Ok(Staging {
            halves: [half()?, half()?],
            events: [event()?, event()?],
        })
    }

    /// Copies `host` to the device at `dst` on `stream`. Returns once the last chunk is
    /// queued: the halves are the staging's own, so the host block is free again.
    pub fn upload(
        &mut self,
        stream: &CudaStream,
        host: &[u8],
        dst: sys::CUdeviceptr,
    ) -> Result<()> {
        for step in upload_steps(host.len(), CHUNK_BYTES) {
            match step {
                Step::Wait { half } => self.wait(half)?,
                Step::Fill { half, start, end } => {
                    parallel_copy(&mut self.half(half)?[..end - start], &host[start..end])
                }
                Step::Dma { half, start, end } => {
                    let src = &self.half(half)?[..end - start];
                    // SAFETY: the device range dst + start.. lies inside the destination
                    // buffer (the caller's length check), the source half stays alive
                    // and untouched until the event recorded next has passed (Wait).
                    unsafe {
                        result::memcpy_htod_async(dst + start as u64, src, stream.cu_stream())
                    }
                    .map_err(|e| driver("staged upload", e))?;
                    self.mark(half, stream)?;
                }
                Step::Drain { .. } => unreachable!("uploads drain nothing"),
            }
        }
        Ok(())
    }

    /// Copies the device range at `src` into `host`, after the work queued on `stream`.
    pub fn download(
        &mut self,
        stream: &CudaStream,
        src: sys::CUdeviceptr,
        host: &mut [u8],
    ) -> Result<()> {
        for step in download_steps(host.len(), CHUNK_BYTES) {
            match step {
                Step::Dma { half, start, end } => {
                    let dst = &mut self.half(half)?[..end - start];
                    // SAFETY: the device range src + start.. lies inside the source buffer
                    // (the caller's check); the half is not read until the event recorded
                    // next has passed (Wait before Drain).
                    unsafe {
                        result::memcpy_dtoh_async(dst, src + start as u64, stream.cu_stream())
                    }
                    .map_err(|e| driver("staged download", e))?;
                    self.mark(half, stream)?;
                }
                Step::Wait { half } => self.wait(half)?,
                Step::Drain { half, start, end } => {
                    parallel_copy(&mut host[start..end], &self.half(half)?[..end - start])
                }
                Step::Fill { .. } => unreachable!("downloads fill nothing"),
            }
        }
        Ok(())
    }

    fn half(&mut self, half: usize) -> Result<&mut [u8]> {
        // The halves' own events are never recorded (the DMAs mark `events`), so this
        // does not wait.
        self.halves[half]
            .as_mut_slice()
            .map_err(|e| driver("pinned staging memory", e))
    }

    fn mark(&self, half: usize, stream: &CudaStream) -> Result<()> {
        self.events[half]
            .record(stream)
            .map_err(|e| driver("event", e))
    }

    fn wait(&self, half: usize) -> Result<()> {
        self.events[half]
            .synchronize()
            .map_err(|e| driver("staged copy", e))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // No DMA may still use a half when it is freed.
        for event in &self.events {
            let _ = event.synchronize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of the copy engine: a queued DMA completes only when its half is waited
    /// for. Runs `steps` between `host` and `device` and checks that no half is filled,
    /// drained or reused by a DMA while one of its DMAs is pending or undrained.
    fn simulate(steps: &[Step], upload: bool, host: &mut [u8], device: &mut [u8], chunk: usize) {
        let mut halves = [vec![0u8; chunk], vec![0u8; chunk]];
        // Per half: the DMA queued and not yet waited for (start, end).
        let mut pending: [Option<(usize, usize)>; 2] = [None, None];
        // Per half (downloads): holds a chunk not yet drained.
        let mut undrained = [false; 2];
        for &step in steps {
            match step {
                Step::Wait { half } => {
                    if let Some((start, end)) = pending[half].take() {
                        let n = end - start;
                        if upload {
                            device[start..end].copy_from_slice(&halves[half][..n]);
                        } else {
                            halves[half][..n].copy_from_slice(&device[start..end]);
                            undrained[half] = true;
                        }
                    }
                }
                Step::Fill { half, start, end } => {
                    assert!(
                        pending[half].is_none(),
                        "fill of half {half} during its DMA"
                    );
                    halves[half][..end - start].copy_from_slice(&host[start..end]);
                }
                Step::Dma { half, start, end } => {
                    assert!(pending[half].is_none(), "second DMA on half {half}");
                    assert!(
                        !undrained[half],
                        "DMA into half {half} before it was drained"
                    );
                    pending[half] = Some((start, end));
                }
                Step::Drain { half, start, end } => {
                    assert!(
                        pending[half].is_none(),
                        "drain of half {half} during its DMA"
                    );
                    assert!(
                        undrained[half],
                        "drain of half {half} without a finished DMA"
                    );
                    host[start..end].copy_from_slice(&halves[half][..end - start]);
                    undrained[half] = false;
                }
            }
        }
        if upload {
            // The copy engine finishes what was queued after the host returns.
            for half in 0..2 {
                if let Some((start, end)) = pending[half].take() {
                    device[start..end].copy_from_slice(&halves[half][..end - start]);
                }
            }
        } else {
            assert_eq!(
                pending,
                [None, None],
                "a download returned with a DMA pending"
            );
            assert_eq!(
                undrained,
                [false, false],
                "a download left a chunk undrained"
            );
        }
    }

    #[test]
    fn staged_copies_move_every_byte_and_never_touch_a_busy_half() {
        let chunk = 16;
        for len in [0, 1, 15, 16, 17, 32, 33, 100, 161] {
            let source: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8 + 1).collect();
            let mut device = vec![0u8; len];
            let mut host = source.clone();
            simulate(
                &upload_steps(len, chunk),
                true,
                &mut host,
                &mut device,
                chunk,
            );
            assert_eq!(device, source, "upload of {len} bytes");
            let mut back = vec![0u8; len];
            simulate(
                &download_steps(len, chunk),
                false,
                &mut back,
                &mut device,
                chunk,
            );
            assert_eq!(back, source, "download of {len} bytes");
        }
    }

    #[test]
    fn chunks_alternate_halves_and_overlap_host_work_with_a_dma() {
        let steps = download_steps(40, 16);
        // The second chunk's DMA is queued before the first chunk is drained.
        let dma_1 = steps
            .iter()
            .position(|s| matches!(s, Step::Dma { half: 1, .. }))
            .unwrap();
        let drain_0 = steps
            .iter()
            .position(|s| matches!(s, Step::Drain { half: 0, .. }))
            .unwrap();
        assert!(dma_1 < drain_0, "{steps:?}");
        let halves: Vec<usize> = upload_steps(40, 16)
            .iter()
            .filter_map(|s| match s {
                Step::Dma { half, .. } => Some(*half),
                _ => None,
            })
            .collect();
        assert_eq!(halves, [0, 1, 0]);
    }
}
