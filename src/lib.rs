//! tensorfem: finite-element Poisson solvers for many right-hand sides at once, for HPC
//! clusters (MPI, one rank per GPU) and plain CPU machines alike.
//!
//! The mathematics is in SPEC.md, the architecture in DESIGN.md; user documentation under
//! docs/. Module map:
//! - [`config`]: the TOML run config and its validation
//! - [`mesh`], [`fem`]: structured meshes with refinement hierarchy; Q1/P1/Q1-hex assembly
//! - [`sparse`], [`backend`]: storage in f64/f32/f16 and the kernels that apply it
//! - [`reference`]: faer's sparse Cholesky, the independent reference solver
//! - [`psc`]: the Prehandling-Schur-Complement direct solver M1, PSC-IR, operator cache
//! - [`mg`]: mixed-precision geometric multigrid in f64 iterative refinement (2D, 3D)
//! - [`stokes`]: Q2-Q1 Stokes, FGMRES with monolithic multigrid or block-triangular preconditioning
//! - [`krylov`]: Krylov methods: Lanczos (condition numbers), FGMRES
//! - [`bench`]: machine ceilings and solver benchmarks
//! - [`io`]: HDF5 output written atomically, XDMF sidecars
//! - [`comm`]: serial and MPI communicators
//! - [`job`]: one configured run (a block of right-hand sides), verified and written

pub mod backend;
pub mod bench;
pub mod campaign;
pub mod cli;
pub mod comm;
pub mod config;
pub mod error;
pub mod fem;
pub mod io;
pub mod krylov;
pub mod mesh;
pub mod mg;
pub mod precision;
pub mod psc;
pub mod reference;
pub mod run;
pub mod sparse;
pub mod stokes;
pub mod sys;

pub use error::{Error, Result};
