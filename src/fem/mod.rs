//! Finite elements: Q1/P1 (2D) and Q1 (3D) Poisson stiffness and load assembly with the
//! Dirichlet rows and columns removed, boundary conditions per boundary part (2D) and the
//! Poisson problem with boundary data ([`BoundaryProblem`]: loads, nodal solutions, errors),
//! manufactured solutions, L2 errors, and the verification of solutions against them.

mod assembly;
mod boundary;
mod boundary_problem;
mod element;
mod error_norms;
mod manufactured;
mod modes;
mod point_loads;
mod quadrature;
mod separable;
mod verify;

pub use assembly::{
    assemble_loads, assemble_poisson, assemble_stiffness, l2_norms_squared, Dofs, PoissonSystem,
    NORM_COLUMNS,
};
pub use boundary::{
    boundary_load, dirichlet_values, integral, neumann_loads, nodal_solution, node_weights,
    outward_normal, BoundaryData, Condition, Conditions, PINNED_NODE,
};
pub use boundary_problem::BoundaryProblem;
pub use error_norms::{l2_error, nodal_l2_error};
pub use manufactured::{Exact, Manufactured, Mode, PressureSeries};
pub use modes::{ColumnErrors, ModeBasis};
pub use point_loads::{interpolate_at_load_points, load_points, loads_at_points};
pub use quadrature::{gauss_legendre_unit, QuadratureRule};
pub use verify::{relative_residual, relative_residuals, verify, ColumnReport};
