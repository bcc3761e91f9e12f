//! Multigrid as the driver uses it: set up once for a mesh (the hierarchy it coarsens
//! along, a pure Neumann problem on every node), then blocks of right-hand sides solved
//! with refinement around the V-cycle or by stand-alone cycles, each column from its own
//! seeded random initial guess, in chunks where the device cannot hold a block whole or a
//! narrower one runs faster from its cache.

use super::{random_initial_guess, MgParams, Multigrid, PinnedEmbedding, StopParams};
use crate::device::MultigridDevice;
use crate::error::Result;
use crate::linalg::{
    solve_in_chunks, BlockOutcome, BlockSolver, ColumnPlan, Footprint, Scope, TimedStage,
};
use crate::mesh::{unit_square_refined, Element, Mesh2d, MeshSpec};
use crate::sparse::Csr;

/// How multigrid solves every block: f64 refinement around the cycle (accelerated by
/// flexible CG with `krylov`) or stand-alone cycles, when it stops, and the seed of each
/// column's random initial guess (the seed plus the column's index in the caller's block).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MgSolveSettings {
    pub refine: bool,
    pub krylov: bool,
    pub stop: StopParams,
    pub seed: u64,
    pub cycle_columns: CycleColumns,
}

/// How many of a block's columns one multigrid solve carries (`solver.cycle_columns`):
/// each column's answer is the same whichever, only the speed differs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CycleColumns {
    /// 8, 16, 32, … columns by the device's last-level cache ([`cache_width`]); the
    /// whole block on a device without one (a GPU).
    #[default]
    Auto,
    /// The whole block (as far as the device's memory holds it).
    All,
    /// At most this many.
    AtMost(usize),
}

/// Columns one multigrid solve carries on a device whose last-level cache holds `cache`
/// bytes, for a finest level of `unknowns` unknowns: the widest of 8, 16, 32, … (halves
/// and multiples of the CPU block kernels' 16-column tiles) whose four f64 vectors of the
/// finest level per column fit in the cache, at least 8. Measured on a 2-core EPYC with
/// 32 MiB of L3, 64 columns to 1e-10 (`tensorfem bench solve --cycle-columns
/// 4,8,16,32,all`): 64 ran fastest with 10k unknowns (or 32), 16 with 41k–65k, 8 with
/// 230k–261k, 1.1–1.4× faster than the whole block there; 4, 6, 12 and 24 were never the
/// fastest.
pub fn cache_width(cache: usize, unknowns: usize) -> usize {
    const VECTORS: usize = 4;
    let fit = cache / (VECTORS * 8 * unknowns.max(1));
    let mut width = 8;
    while 2 * width <= fit {
        width *= 2;
    }
    width
}

/// A generous estimate of the bytes multigrid takes for `unknowns` unknowns in `dim`
/// dimensions and `nrhs` columns: the levels hold 4/3 (2D) or 8/7 (3D) of the finest;
/// ELLPACK with 12 bytes per entry in f64, three block vectors per level, the f64
/// refinement state.
pub fn estimated_bytes(unknowns: usize, dim: usize, nrhs: usize) -> f64 {
    let width = if dim == 2 { 9.0 } else { 27.0 };
    unknowns as f64 * 1.5 * (width * 12.0 * 2.0 + nrhs as f64 * 8.0 * 6.0)
}

/// Multigrid, refined or stand-alone, from a seeded random initial guess per column.
pub struct MultigridSolver<D: MultigridDevice> {
    dev: D,
    mg: Box<Multigrid<D>>,
    settings: MgSolveSettings,
    /// A pure Neumann problem: multigrid solves the singular system of every node.
    singular: Option<PinnedEmbedding>,
    columns: ColumnPlan,
    /// The most columns one solve carries by `settings.cycle_columns` (decided and logged
    /// on first use).
    cycle_width: Option<usize>,
}

impl<D: MultigridDevice> MultigridSolver<D> {
    /// Sets up multigrid with the levels of `levels` for the assembled `matrix` of
    /// `mesh_spec` (`general`: the mesh when it is a refined domain or has boundary
    /// conditions); returns it with a note on its size.
    pub fn set_up(
        dev: &D,
        matrix: &Csr<f64>,
        mesh_spec: &MeshSpec,
        general: Option<&Mesh2d>,
        levels: MgParams,
        settings: MgSolveSettings,
    ) -> Result<(Self, String)> {
        let count = levels.schedule.len();
        let pure_neumann = mesh_spec
            .boundary
            .as_ref()
            .is_some_and(|b| b.conditions().is_pure_neumann());
        let (mg, singular) = match hierarchy_mesh(general, mesh_spec, count)? {
            Some(mesh) => Multigrid::on_mesh(dev, &mesh, matrix, levels, pure_neumann)?,
            None => (
                Multigrid::new(dev, mesh_spec.dim(), mesh_spec.n, matrix, levels)?,
                None,
            ),
        };
        let note = format!(
            "{count} levels, matrices {:.1} MiB (ELLPACK, each level in its precision)",
            mg.operator_bytes() / 1048576.0
        );
        let solver = Self::new(dev, mg, singular, settings, ColumnPlan::default());
        Ok((solver, note))
    }

    /// The solver of a hierarchy already set up; blocks solved in chunks as `columns`
    /// plans.
    pub fn new(
        dev: &D,
        mut mg: Multigrid<D>,
        singular: Option<PinnedEmbedding>,
        settings: MgSolveSettings,
        columns: ColumnPlan,
    ) -> Self {
        mg.set_krylov(settings.krylov);
        MultigridSolver {
            dev: dev.clone(),
            mg: Box::new(mg),
            settings,
            singular,
            columns,
            cycle_width: None,
        }
    }

    /// The most columns one solve carries, by `settings.cycle_columns`.
    fn cycle_width(&mut self) -> usize {
        if let Some(width) = self.cycle_width {
            return width;
        }
        let unknowns = self.mg.unknowns();
        let width = match self.settings.cycle_columns {
            CycleColumns::All => usize::MAX,
            CycleColumns::AtMost(k) => k.max(1),
            CycleColumns::Auto => match self.dev.cache_bytes() {
                Some(cache) => {
                    let width = cache_width(cache, unknowns);
                    log::info!(
                        "multigrid on {}: {:.0} MiB of last-level cache, {unknowns} unknowns on the finest level: blocks are solved {width} columns at a time (solver.cycle_columns)",
                        self.dev.name(),
                        cache as f64 / 1048576.0
                    );
                    width
                }
                None => usize::MAX,
            },
        };
        self.cycle_width = Some(width);
        width
    }

    /// Solves one block of the scope's columns (each from its own seeded initial guess).
    fn solve_block(&mut self, b: &[f64], scope: &Scope) -> Result<BlockOutcome> {
        let nrhs = scope.columns.len();
        let embedded;
        let b = match &self.singular {
            Some(embedding) => {
                embedded = embedding.embed(b, nrhs);
                &embedded
            }
            None => b,
        };
        let n = self.mg.unknowns();
        let seed = self.settings.seed;
        let mut u: Vec<f64> = scope
            .columns
            .iter()
            .flat_map(|&c| random_initial_guess(n, seed + c as u64))
            .collect();
        let mut stop = self.settings.stop;
        stop.atol *= scope.factor;
        let refine = self.settings.refine;
        let mg = &mut self.mg;
        let info = self.dev.run(|| {
            if refine {
                mg.solve_refined(b, &mut u, nrhs, stop)
            } else {
                mg.solve_plain(b, &mut u, nrhs, stop)
            }
        })?;
        if let Some(embedding) = &self.singular {
            u = embedding.extract(&u);
        }
        Ok(BlockOutcome {
            u,
            iterations: Some(info.max_iterations()),
            inner_iterations: None,
            flops: None,
        })
    }
}

impl<D: MultigridDevice> BlockSolver for MultigridSolver<D> {
    /// Solves the column-major block `b`, in chunks of columns where the device cannot
    /// hold it whole or its cache holds fewer (each column from its own seeded initial
    /// guess: the same answers).
    fn solve(&mut self, _a: &Csr<f64>, b: &[f64], scope: &Scope) -> Result<BlockOutcome> {
        let nrhs = scope.columns.len();
        let plan = Footprint {
            what: "mg",
            operators: self.mg.operator_bytes(),
            per_column: self.mg.bytes_per_column(),
            advice: "use a smaller mesh.n or fewer levels in f64",
        };
        let width = self.columns.width(&self.dev, plan, nrhs)?;
        let width = width.min(self.cycle_width());
        let n = b.len() / nrhs.max(1);
        solve_in_chunks(b, n, scope, width, |part, chunk| {
            self.solve_block(part, chunk)
        })
    }

    /// The cycles' stages and the refinement's between them ([`Multigrid::time_stages`]).
    fn time_stages(&mut self, on: bool) {
        self.mg.time_stages(on);
    }

    /// The seconds of each cycle stage (no model: multigrid's kernels are modelled by
    /// `bench mg --kernels`), then the refinement's stages with their models.
    fn take_stages(&mut self) -> Result<Vec<TimedStage>> {
        let mut stages: Vec<TimedStage> = self
            .mg
            .take_stage_seconds()?
            .into_iter()
            .map(|t| TimedStage {
                stage: t.stage,
                seconds: t.seconds,
                cost: None,
            })
            .collect();
        stages.extend(self.mg.take_refinement_stages()?);
        Ok(stages)
    }
}

/// The mesh whose hierarchy multigrid coarsens along: `general` (a refined domain, or the
/// unit square with boundary conditions) or the unit square of P1 elements, with the
/// unit square's hierarchy added for `count` levels; None for the structured Q1 unit
/// square and cube (uniform grid transfers, rediscretised levels).
fn hierarchy_mesh(
    general: Option<&Mesh2d>,
    mesh_spec: &MeshSpec,
    count: usize,
) -> Result<Option<Mesh2d>> {
    let square = |on_boundary: Option<&[bool]>| -> Result<Mesh2d> {
        let levels = count - 1;
        let mut mesh = unit_square_refined(mesh_spec.n >> levels, levels, mesh_spec.element)?;
        if let Some(on_boundary) = on_boundary {
            mesh.on_boundary = on_boundary.to_vec();
        }
        Ok(mesh)
    };
    Ok(match general {
        Some(m) if m.hierarchy.is_some() => Some(m.clone()),
        Some(m) => Some(square(Some(&m.on_boundary))?),
        None if mesh_spec.dim() == 2 && mesh_spec.element == Element::P1 => Some(square(None)?),
        None => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Cpu;

    /// Multigrid in chunks of two columns gives bit for bit the solutions and the step
    /// count of the whole block: each column from its own seeded initial guess.
    #[test]
    fn chunked_multigrid_equals_the_whole_block() {
        let mesh = crate::mesh::unit_square(32, Element::Q1).unwrap();
        let (matrix, dofs) = crate::fem::assemble_stiffness(&mesh).unwrap();
        let (n, nrhs) = (dofs.len(), 5);
        let b: Vec<f64> = (0..n * nrhs)
            .map(|i| ((i * 7919) % 101) as f64 / 50.0 - 1.0)
            .collect();
        let solver = |max_columns, cycle_columns| {
            let params = MgParams {
                schedule: crate::mg::Variant::HMg.schedule(4),
                smoother: crate::mg::Smoother::JACOBI,
                base_tolerance: 1e-4,
                residual_scaling: true,
                storage: crate::device::MatrixStorage::default(),
            };
            let dev = Cpu::new();
            let mg = Multigrid::new(&dev, 2, 32, &matrix, params).unwrap();
            let settings = MgSolveSettings {
                refine: true,
                krylov: false,
                stop: StopParams {
                    rtol: 1e-10,
                    atol: 0.0,
                    max_iterations: 40,
                },
                seed: 7,
                cycle_columns,
            };
            MultigridSolver::new(&dev, mg, None, settings, ColumnPlan::at_most(max_columns))
        };
        let columns: Vec<usize> = (0..nrhs).collect();
        let scope = Scope::unscaled(&columns);
        let whole = solver(None, CycleColumns::All)
            .solve(&matrix, &b, &scope)
            .unwrap();
        assert!(whole.iterations.is_some_and(|i| i > 0));
        for (max_columns, cycle_columns) in [
            (Some(2), CycleColumns::All),
            (None, CycleColumns::AtMost(2)),
            (None, CycleColumns::AtMost(4)),
            (None, CycleColumns::Auto),
        ] {
            let chunked = solver(max_columns, cycle_columns)
                .solve(&matrix, &b, &scope)
                .unwrap();
            let case = format!("{max_columns:?}, {cycle_columns:?}");
            assert!(whole.u == chunked.u, "chunked solutions differ: {case}");
            assert_eq!(whole.iterations, chunked.iterations, "{case}");
        }
    }

    /// The cache's width: 8, 16, 32, … columns whose four finest-level f64 vectors fit
    /// (32 MiB: 16 up to 65,536 unknowns, 64 at 10k), never below 8.
    #[test]
    fn cache_widths() {
        let l3 = 32 << 20;
        assert_eq!(cache_width(l3, 10_399), 64);
        assert_eq!(cache_width(l3, 41_151), 16);
        assert_eq!(cache_width(l3, 65_536), 16);
        assert_eq!(cache_width(l3, 65_537), 8);
        assert_eq!(cache_width(l3, 261_121), 8);
        assert_eq!(cache_width(l3, 100_000_000), 8);
        assert_eq!(cache_width(0, 0), 8);
    }
}
