//! The campaign's operators on this rank's backend: a Poisson problem
//! ([`AnyPoissonSolver`]) or a Stokes study ([`super::stokes`]) for each `[[operator]]`,
//! with the right-hand sides its columns name.

use std::path::PathBuf;

use crate::campaign::{BatchOperator, BatchRhs, Checks, ColumnSource, InputColumns, Operators};
use crate::config::OperatorSpec;
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::fem::Exact;
use crate::linalg::BlockOutcome;
use crate::poisson::{check_memory, AnyPoissonSolver};

/// The exact solutions of manufactured columns in `dim` dimensions.
fn exact(columns: &[ColumnSource], dim: usize) -> Vec<Exact> {
    columns
        .iter()
        .map(|c| c.exact(dim).expect("manufactured columns"))
        .collect()
}

impl BatchOperator for AnyPoissonSolver {
    fn unknowns(&self) -> usize {
        AnyPoissonSolver::unknowns(self)
    }

    fn rhs(&self, columns: &[ColumnSource], input: Option<&InputColumns>) -> Result<BatchRhs> {
        let nrhs = columns.len();
        let (b, dirichlet) = match input {
            Some(input) => {
                let ColumnSource::Input { index } = columns[0] else {
                    return Err(Error::Campaign(format!(
                        "column {:?} is not a column of the right-hand-side file",
                        columns[0]
                    )));
                };
                let rows = input.read(index..index + nrhs)?;
                let dirichlet = input.read_dirichlet(index..index + nrhs)?;
                self.file_loads(rows, nrhs, dirichlet.as_deref())?
            }
            None => self.manufactured_loads(&exact(columns, self.dim()))?,
        };
        Ok(BatchRhs { b, dirichlet })
    }

    fn solve(&mut self, rhs: &[f64], nrhs: usize) -> Result<BlockOutcome> {
        AnyPoissonSolver::solve(self, rhs, nrhs)
    }

    fn to_nodal(&self, u: &[f64], rhs: &BatchRhs) -> Vec<f64> {
        AnyPoissonSolver::to_nodal(self, u, rhs.dirichlet.as_deref())
    }

    fn verify(
        &mut self,
        rhs: &BatchRhs,
        u: &[f64],
        nodal: &[f64],
        columns: &[ColumnSource],
    ) -> Result<Checks> {
        let exact: Vec<Option<Exact>> = columns.iter().map(|c| c.exact(self.dim())).collect();
        let reports = self.reports(&rhs.b, u, nodal, &exact)?;
        Ok(Checks::poisson(&reports, self.tolerances(&rhs.b)))
    }
}

/// The operators of a campaign on this rank's backend.
pub struct CampaignOperators {
    pub backend: Backend,
}

impl Operators for CampaignOperators {
    fn device(&self) -> String {
        self.backend.to_string()
    }

    fn check_memory(&self, op: &OperatorSpec, nrhs: usize) -> Result<()> {
        match &op.stokes {
            Some(spec) => crate::stokes::check_memory(spec),
            None => check_memory(&op.mesh, &op.solver, nrhs, &self.backend),
        }
    }

    fn cache_file(&self, op: &OperatorSpec) -> Option<PathBuf> {
        crate::psc::operator_cache_file(&op.mesh, &op.solver)
    }

    fn set_up_wide(&self, op: &OperatorSpec, threads: usize) -> Result<Box<dyn BatchOperator>> {
        // CPU only: a CUDA set-up keeps the thread it was made on.
        if op.stokes.is_some() || !matches!(self.backend, Backend::Cpu { .. }) {
            return self.set_up(op);
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| {
                Error::Backend(format!("a pool of {threads} threads for the set-up: {e}"))
            })?;
        let operator =
            pool.install(|| AnyPoissonSolver::new(&self.backend, &op.mesh, &op.solver))?;
        Ok(Box::new(operator))
    }

    fn set_up(&self, op: &OperatorSpec) -> Result<Box<dyn BatchOperator>> {
        if let Some(spec) = &op.stokes {
            return super::stokes::operator(&self.backend, spec);
        }
        Ok(Box::new(AnyPoissonSolver::new(
            &self.backend,
            &op.mesh,
            &op.solver,
        )?))
    }
}
