//! Stage times of a device's work from marks in its queue ([`Device::mark`]): a CUDA event
//! recorded on the stream, or the host clock where kernels run synchronously (the CPU). No
//! stage waits for the device; the seconds are read once, after the work.

use super::Device;
use crate::error::Result;

/// One stage and its seconds (summed over every span of it since the clock was last
/// taken), in the order the stages first ran.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StageTime {
    pub stage: &'static str,
    pub seconds: f64,
}

/// Marks in a device's queue, each ending a stage that began at the mark before it.
pub struct StageMarks<D: Device> {
    start: Option<D::Mark>,
    ends: Vec<(&'static str, D::Mark)>,
}

impl<D: Device> Default for StageMarks<D> {
    fn default() -> Self {
        StageMarks {
            start: None,
            ends: Vec::new(),
        }
    }
}

impl<D: Device> StageMarks<D> {
    /// Starts a span of work (what was queued before is not its).
    pub fn begin(&mut self, dev: &D) -> Result<()> {
        if self.start.is_none() {
            self.start = Some(dev.mark()?);
        } else {
            self.ends.push(("", dev.mark()?));
        }
        Ok(())
    }

    /// Ends `stage` at this point of the queue.
    pub fn end(&mut self, dev: &D, stage: &'static str) -> Result<()> {
        if self.start.is_none() {
            self.start = Some(dev.mark()?);
            return Ok(());
        }
        self.ends.push((stage, dev.mark()?));
        Ok(())
    }

    /// Seconds per stage since the clock was last taken (waits for the last mark), and
    /// forgets the marks. Spans between a [`StageMarks::begin`] and the mark before it
    /// belong to no stage.
    pub fn take(&mut self, dev: &D) -> Result<Vec<StageTime>> {
        let mut times: Vec<StageTime> = Vec::new();
        let Some(mut previous) = self.start.take() else {
            return Ok(times);
        };
        for (stage, mark) in std::mem::take(&mut self.ends) {
            let seconds = dev.seconds_between(&previous, &mark)?;
            previous = mark;
            if stage.is_empty() {
                continue;
            }
            match times.iter_mut().find(|t| t.stage == stage) {
                Some(t) => t.seconds += seconds,
                None => times.push(StageTime { stage, seconds }),
            }
        }
        Ok(times)
    }
}
