//! Per-thread scratch of the CPU kernels: the bands of low-precision vectors widened to
//! their compute precision, accumulators, rounded outputs. Each rayon worker has its own
//! arena, used only inside a chunk of work (sequential code that starts no parallel work,
//! so a worker never needs its arena twice at once).
//!
//! An arena grows when a chunk needs more than it holds, and every thread's arena is then
//! grown to the largest size any thread needed ([`sync`] after each kernel): once a solve
//! has run, the next one with the same shapes allocates nothing, whichever thread does
//! which chunk.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Scratch buffers a chunk may hold at once.
pub const SLOTS: usize = 6;

/// The largest size (in 8-byte words) any thread has grown each slot to.
static HIGH_WATER: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// Some arena grew since the last [`sync`].
static GROWN: AtomicBool = AtomicBool::new(false);

thread_local! {
    static ARENA: RefCell<Arena> = RefCell::new(Arena::default());
}

/// One thread's scratch: `SLOTS` buffers of 8-byte words (aligned for f16, f32 and f64).
#[derive(Default)]
pub struct Arena {
    slots: [Vec<u64>; SLOTS],
}

/// Words of 8 bytes that hold `len` values of `T`.
fn words<T>(len: usize) -> usize {
    (len * std::mem::size_of::<T>()).div_ceil(8)
}

fn grow(slot: &mut Vec<u64>, index: usize, words: usize) {
    if slot.len() < words {
        let target = words.max(HIGH_WATER[index].load(Ordering::Relaxed));
        slot.resize(target, 0);
        if HIGH_WATER[index].fetch_max(target, Ordering::Relaxed) < target {
            GROWN.store(true, Ordering::Relaxed);
        }
    }
}

/// `len` values of `T` in the words of `slot` (previous contents: unspecified). `T` may be
/// wider than a word (tiles of values): only the words that hold whole values are cast.
fn typed<T: bytemuck::Pod>(slot: &mut [u64], len: usize) -> &mut [T] {
    let size = std::mem::size_of::<T>();
    let whole = (slot.len() * 8 / size * size).div_ceil(8);
    &mut bytemuck::cast_slice_mut::<u64, T>(&mut slot[..whole])[..len]
}

impl Arena {
    /// One buffer of `len` values of `T` from slot `index`.
    pub fn one<T: bytemuck::Pod>(&mut self, index: usize, len: usize) -> &mut [T] {
        let slot = &mut self.slots[index];
        grow(slot, index, words::<T>(len));
        typed(slot, len)
    }

    /// Four buffers from slots 0..4 (any types).
    #[allow(clippy::type_complexity)]
    pub fn four<A: bytemuck::Pod, B: bytemuck::Pod, C: bytemuck::Pod, E: bytemuck::Pod>(
        &mut self,
        a: usize,
        b: usize,
        c: usize,
        e: usize,
    ) -> (&mut [A], &mut [B], &mut [C], &mut [E]) {
        let [s0, s1, s2, s3, ..] = &mut self.slots;
        grow(s0, 0, words::<A>(a));
        grow(s1, 1, words::<B>(b));
        grow(s2, 2, words::<C>(c));
        grow(s3, 3, words::<E>(e));
        (typed(s0, a), typed(s1, b), typed(s2, c), typed(s3, e))
    }

    /// Five buffers from slots 0..5 (any types).
    #[allow(clippy::type_complexity)]
    pub fn five<
        A: bytemuck::Pod,
        B: bytemuck::Pod,
        C: bytemuck::Pod,
        E: bytemuck::Pod,
        F: bytemuck::Pod,
    >(
        &mut self,
        a: usize,
        b: usize,
        c: usize,
        e: usize,
        f: usize,
    ) -> (&mut [A], &mut [B], &mut [C], &mut [E], &mut [F]) {
        let [s0, s1, s2, s3, s4, ..] = &mut self.slots;
        grow(s0, 0, words::<A>(a));
        grow(s1, 1, words::<B>(b));
        grow(s2, 2, words::<C>(c));
        grow(s3, 3, words::<E>(e));
        grow(s4, 4, words::<F>(f));
        (
            typed(s0, a),
            typed(s1, b),
            typed(s2, c),
            typed(s3, e),
            typed(s4, f),
        )
    }

    fn grow_to_high_water(&mut self) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let target = HIGH_WATER[index].load(Ordering::Relaxed);
            if slot.len() < target {
                slot.resize(target, 0);
            }
        }
    }
}

/// Runs `f` with this thread's arena. Only for sequential chunk bodies.
pub fn with<R>(f: impl FnOnce(&mut Arena) -> R) -> R {
    ARENA.with(|a| f(&mut a.borrow_mut()))
}

/// After a kernel: if some arena grew, grows every worker's arena to the high-water marks
/// (allocations happen in the first solve only).
pub fn sync() {
    if GROWN.swap(false, Ordering::Relaxed) {
        rayon::broadcast(|_| with(Arena::grow_to_high_water));
        with(Arena::grow_to_high_water);
    }
}

/// The caller's scratch of a kernel whose parallel tasks write partial results that one
/// pass then adds up: kept from one call to the next (grown on first use).
static SHARED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// Runs `f` with `len` values of `T` of shared scratch (previous contents: unspecified). A
/// second caller while the first still holds it gets a buffer of its own instead of waiting.
pub fn with_shared<T: bytemuck::Pod, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    let words = words::<T>(len);
    match SHARED.try_lock() {
        Ok(mut slot) => {
            if slot.len() < words {
                slot.resize(words, 0);
            }
            f(typed(&mut slot, len))
        }
        Err(_) => f(typed(&mut vec![0; words], len)),
    }
}
