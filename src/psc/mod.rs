//! The Prehandling-Schur-Complement direct solver (SPEC §2): hierarchical basis, partial
//! Cholesky, node classes C/E/I, the M1 solve on blocks of right-hand sides in f64, f32 or
//! f16, and PSC-IR (f64 iterative refinement around a low-precision M1).

pub(crate) mod cache;
mod hierarchical;
mod info;
mod m1;
mod refine;
mod setup;

pub use cache::{CacheOutcome, OperatorCache};
pub use hierarchical::HierarchicalBasis;
pub use info::{report as report_info, PscInfo, WholeConditionNumbers};
pub use m1::{M1Workspace, M1};
pub use refine::{RefineInfo, RefineParams, RefineWorkspace};
pub use setup::{refinement_levels, Group, PscSetup};
