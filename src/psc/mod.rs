//! The Prehandling-Schur-Complement solvers (docs/mathematics.md §3): hierarchical basis,
//! partial Cholesky, node classes C/E/I (the set-up, f64 on the host, cached in HDF5), the
//! methods M1, M2 (direct) and M3 (CG on the C/E system) on blocks of right-hand sides in
//! f64, f32 or f16 on any device (a `LinOp`), PSC-IR (f64 iterative refinement around a
//! low-precision method), and [`PscSolver`]: all of it set up once from the configuration
//! and solving blocks many times, as the driver uses it.

pub(crate) mod cache;
mod choice;
mod coupling;
mod error;
mod hierarchical;
mod info;
mod macro_elements;
mod operator;
mod refine;
mod setup;
mod solver;

pub use cache::{CacheOutcome, InverseCheck, OperatorCache, SetupKey, UncheckedInverses};
pub use choice::{
    cheapest, coarse_level_cost, coarse_level_costs, report_coarse_levels, CoarseLevelCost,
};
pub use coupling::Coupling;
pub use error::{PscError, PscFailure};
pub use hierarchical::HierarchicalBasis;
pub use info::{
    report as report_info, GroupInfo, InfoConditions, InfoMesh, PscInfo, WholeConditionNumbers,
};
pub use operator::{ApplyCounts, InnerCg, PscHost, PscOperator, SchurHost};
pub use refine::{PscIr, PscIrParams};
pub use setup::{
    class_counts, estimated_bytes, refinement_levels, MacroGroup, PscMethod, PscSetup, Schur,
    HOST_SOLVE_VECTORS,
};
pub use solver::{class_sizes, configured_bytes, operator_cache_file, PscSolver};
