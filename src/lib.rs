//! tensorfem: finite-element Poisson solvers for many right-hand sides at once, and Q2-Q1
//! Stokes solvers, for HPC clusters (MPI, one rank per GPU) and plain CPU machines alike.
//!
//! The mathematics is in docs/mathematics.md, the architecture in docs/architecture.md;
//! user documentation under docs/. Module map:
//! - [`cli`], [`run`]: the command line; reads a config, picks the backend and runs it (a
//!   single run, a Stokes run, or a [`campaign`], the main job)
//! - [`poisson`]: a Poisson problem set up once and solved many times — the mesh, its
//!   matrix and the configured solver on a backend, the tolerance contract of every column
//! - [`config`]: the TOML config and its validation, section by section
//! - [`mesh`], [`fem`]: meshes with refinement hierarchy; Q1/P1/Q1-hex assembly; the
//!   verification of solutions
//! - [`device`]: where solver data lives and the kernels that work on it: the CPU backend (the
//!   reference for every kernel) and the CUDA backend (cudarc: NVRTC kernels, cuBLAS,
//!   cuSOLVER), which runs PSC, multigrid and Stokes; buffers whose precision is a run-time
//!   value
//! - [`linalg`]: the operator interface, iterative refinement, CG, FGMRES, Lanczos; the
//!   tolerance every column must meet and right-hand sides of any magnitude
//! - [`psc`], [`mg`], [`stokes`]: the solvers, written once over any device
//! - [`sparse`], [`numeric`]: host storage formats and reproducible host reductions
//! - [`reference`]: faer's sparse Cholesky, the independent reference solver
//! - [`bench`]: machine ceilings and solver benchmarks
//! - [`io`]: HDF5 output written atomically, XDMF sidecars, the single runs' file layout
//! - [`comm`], [`sys`]: serial and MPI communicators; host facts
//! - [`error`], [`precision`]: the crate's error; f16/f32/f64 storage and compute types
//! - [`progress`]: progress of long work (a bar on a terminal, log lines under mpirun/SLURM)

pub mod bench;
pub mod campaign;
pub mod cli;
pub mod comm;
pub mod config;
pub mod device;
pub mod error;
pub mod fem;
pub mod io;
pub mod linalg;
pub mod mesh;
pub mod mg;
pub mod numeric;
pub mod poisson;
pub mod precision;
pub mod progress;
pub mod psc;
pub mod reference;
pub mod run;
pub mod sparse;
pub mod stokes;
pub mod sys;

pub use error::{Error, Result};
