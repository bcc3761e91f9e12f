//! The Prehandling-Schur-Complement direct solver (SPEC §2): hierarchical basis, partial
//! Cholesky, node classes C/E/I (the set-up, f64 on the host, cached in HDF5), the M1 solve
//! on blocks of right-hand sides in f64, f32 or f16 on any device (a `LinOp`), and PSC-IR
//! (f64 iterative refinement around a low-precision M1).

pub(crate) mod cache;
mod error;
mod hierarchical;
mod info;
mod m1;
mod macros;
mod refine;
mod setup;

pub use cache::{CacheOutcome, OperatorCache, SetupKey};
pub use error::{PscError, PscFailure};
pub use hierarchical::HierarchicalBasis;
pub use info::{
    report as report_info, GroupInfo, InfoConditions, InfoMesh, PscInfo, WholeConditionNumbers,
};
pub use m1::{M1Host, M1};
pub use refine::{PscIr, RefineParams};
pub use setup::{refinement_levels, Group, PscSetup};
