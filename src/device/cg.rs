//! Block CG's per-column scalars kept where the device computes: dot products land in a
//! device buffer, α and β are formed there ([`VectorKernels::cg_scalars`]) and read by the
//! column updates from it, so an iteration needs no host round trip. The host reads the
//! active flags only to decide when to stop (on a GPU every few iterations: iterations
//! after every column stopped change nothing, and the count excludes them).
//!
//! The buffer holds `SLOTS` rows of one value per column, `slot · cols + c`, then the
//! iterations counted.

use super::VectorKernels;

/// α_c.
pub const ALPHA: usize = 0;
/// 1 (the fixed coefficient of the updates).
pub const ONES: usize = 1;
/// −α_c.
pub const MINUS_ALPHA: usize = 2;
/// β_c.
pub const BETA: usize = 3;
/// r_c · r_c.
pub const RR: usize = 4;
/// The new r_c · r_c.
pub const RR_NEW: usize = 5;
/// p_c · A p_c.
pub const PQ: usize = 6;
/// The ‖r_c‖₂ to reach.
pub const TARGET: usize = 7;
/// 1 while column c iterates, else 0.
pub const ACTIVE: usize = 8;
/// Slots per column; the iterations counted follow them.
pub const SLOTS: usize = 9;

/// Values of the buffer for `cols` columns.
pub fn buffer_len(cols: usize) -> usize {
    SLOTS * cols + 1
}

/// One step of the scalar logic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CgStep {
    /// From RR = b·b: the targets max(tol (·‖b‖ if relative), 10 u ‖b‖), the active flags
    /// (‖b‖ above its target), ONES, and the count reset.
    Start {
        tolerance: f64,
        relative: bool,
        unit_roundoff: f64,
    },
    /// From PQ: counts the iteration if any column is active, drops columns with p·Ap ≤ 0
    /// or not finite, α = RR / PQ (0 where inactive) and −α.
    Alpha,
    /// From RR_NEW: β = RR_NEW / RR (0 where inactive), drops columns whose ‖r‖ reached the
    /// target, RR = RR_NEW.
    Beta,
}

impl CgStep {
    /// The kernel's code of the step and its parameters (tolerance, relative, u).
    pub fn code(self) -> (u32, f64, u32, f64) {
        match self {
            CgStep::Start {
                tolerance,
                relative,
                unit_roundoff,
            } => (0, tolerance, u32::from(relative), unit_roundoff),
            CgStep::Alpha => (1, 0.0, 0, 0.0),
            CgStep::Beta => (2, 0.0, 0, 0.0),
        }
    }
}

/// The step on a host buffer (the CPU backend; kernels/vector.cu's `cg_scalars` does the
/// same on a GPU).
pub fn step_on_host(step: CgStep, s: &mut [f64], cols: usize) {
    let at = |slot: usize, c: usize| slot * cols + c;
    let count = SLOTS * cols;
    match step {
        CgStep::Start {
            tolerance,
            relative,
            unit_roundoff,
        } => {
            for c in 0..cols {
                let b_norm = s[at(RR, c)].sqrt();
                let wanted = if relative {
                    tolerance * b_norm
                } else {
                    tolerance
                };
                let target = wanted.max(10.0 * unit_roundoff * b_norm);
                s[at(TARGET, c)] = target;
                s[at(ACTIVE, c)] = f64::from(u8::from(b_norm > target));
                s[at(ONES, c)] = 1.0;
            }
            s[count] = 0.0;
        }
        CgStep::Alpha => {
            if (0..cols).any(|c| s[at(ACTIVE, c)] != 0.0) {
                s[count] += 1.0;
            }
            for c in 0..cols {
                let pq = s[at(PQ, c)];
                let active = s[at(ACTIVE, c)] != 0.0 && pq > 0.0 && pq.is_finite();
                let alpha = if active { s[at(RR, c)] / pq } else { 0.0 };
                s[at(ACTIVE, c)] = f64::from(u8::from(active));
                s[at(ALPHA, c)] = alpha;
                s[at(MINUS_ALPHA, c)] = -alpha;
            }
        }
        CgStep::Beta => {
            for c in 0..cols {
                let active = s[at(ACTIVE, c)] != 0.0;
                let rr_new = s[at(RR_NEW, c)];
                s[at(BETA, c)] = if active { rr_new / s[at(RR, c)] } else { 0.0 };
                s[at(ACTIVE, c)] = f64::from(u8::from(active && rr_new.sqrt() > s[at(TARGET, c)]));
                s[at(RR, c)] = rr_new;
            }
        }
    }
}

/// Whether the device should be asked for the flags before this iteration: every iteration
/// where reads are free (the CPU), every fourth where a read waits for the device.
pub fn check_before<D: VectorKernels>(dev: &D, iteration: usize) -> bool {
    !dev.reads_synchronize() || iteration.is_multiple_of(4)
}
