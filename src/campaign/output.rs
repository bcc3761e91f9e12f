//! The campaign's files: one HDF5 file per batch (written by the rank that solved it under a
//! temporary name, synced, renamed: a batch's file is complete or absent, which is what
//! makes it safe to journal), and at the end `campaign.h5`, a merge of every batch in
//! campaign order with the meshes, the config echo and the performance log, plus an XDMF
//! sidecar for ParaView. Layout: docs/hdf5.md.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hdf5::Group;

use super::operator::{Checks, POISSON_ERRORS, STOKES_ERRORS};
use super::perf::{BatchRecord, FailureRecord, StageTotals};
use super::plan::{ColumnSource, Plan};
use crate::config::{CampaignSpec, OperatorSpec, RunConfig};
use crate::error::{Error, Result};
use crate::fem::{integral, node_weights, Exact, Mode};
use crate::io::{h5, xdmf};
use crate::mesh::{build as build_mesh, AnyMesh, Element, Mesh};
use crate::precision::Precision;
use crate::stokes::assembly::exact_at_nodes;
use crate::stokes::lattice::{lattice_coordinates, q2_cells, split};
use crate::stokes::{Grid, Preconditioner, Relaxation, StokesSpec};

pub fn batches_dir(directory: &Path) -> PathBuf {
    directory.join("batches")
}

pub fn batch_path(directory: &Path, batch: usize) -> PathBuf {
    batches_dir(directory).join(format!("batch-{batch:06}.h5"))
}

pub fn failures_dir(directory: &Path) -> PathBuf {
    directory.join("failures")
}

/// Writes a failed batch's record as JSON to `failures/batch-<b>-rank-<r>.json` (a
/// temporary name, synced, renamed: complete or absent); returns its path.
pub fn write_failure(directory: &Path, record: &FailureRecord) -> Result<PathBuf> {
    let dir = failures_dir(directory);
    let name = format!("batch-{:06}-rank-{}.json", record.batch, record.rank);
    let path = dir.join(&name);
    let temporary = dir.join(format!(".{name}.tmp"));
    let write_error = |source| Error::Write {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(write_error)?;
    let json = serde_json::to_string_pretty(record).expect("records serialise");
    std::fs::write(&temporary, json + "\n").map_err(write_error)?;
    std::fs::File::open(&temporary)
        .and_then(|f| f.sync_all())
        .map_err(write_error)?;
    std::fs::rename(&temporary, &path).map_err(write_error)?;
    Ok(path)
}

/// Removes the failure records of `batch` (it has now passed): a resumed campaign keeps
/// only the failures still standing. A record that cannot be removed is logged.
pub fn clear_failures(directory: &Path, batch: usize) {
    let dir = failures_dir(directory);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let prefix = format!("batch-{batch:06}-rank-");
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with(&prefix) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => log::info!(
                    "batch {batch} passed: its earlier failure record {} was removed",
                    entry.path().display()
                ),
                Err(e) => log::warn!(
                    "could not remove the old failure record {}: {e}",
                    entry.path().display()
                ),
            }
        }
    }
    // An empty failures/ goes too.
    let _ = std::fs::remove_dir(&dir);
}

/// Whether the batch file at `path` is whole and of `plan`: Err says what is wrong with it
/// (a file truncated or altered after it was journaled).
pub fn check_batch_file(path: &Path, plan: &Plan) -> std::result::Result<(), String> {
    let file = hdf5::File::open(path).map_err(|e| h5::describe(&e))?;
    let written = h5::read_str_attr(&file, "plan").map_err(|e| e.to_string())?;
    if !u64::from_str_radix(&written, 16).is_ok_and(|f| plan.accepts(f)) {
        return Err(format!("written for another plan ({written})"));
    }
    let u = file.dataset("u").map_err(|e| h5::describe(&e))?;
    // Reading the last value reaches the end of the data a truncation would cut off.
    let shape = u.shape();
    if shape.len() != 2 || shape.contains(&0) {
        return Err(format!("its solutions have the shape {shape:?}"));
    }
    u.read_slice_2d::<f64, _>(ndarray::s![shape[0] - 1.., shape[1] - 1..])
        .map_err(|e| h5::describe(&e))?;
    Ok(())
}

/// How solutions are stored: precision and gzip level (campaign.store, campaign.compression).
#[derive(Clone, Copy, Debug)]
pub struct SolutionStorage {
    pub precision: Precision,
    pub deflate: u8,
}

impl SolutionStorage {
    pub fn of(spec: &CampaignSpec) -> Self {
        SolutionStorage {
            precision: spec.store,
            deflate: spec.compression,
        }
    }
}

/// The error names the columns of `spec`'s campaign carry.
pub fn error_names(spec: &CampaignSpec) -> &'static [&'static str] {
    if spec.is_stokes() {
        &STOKES_ERRORS
    } else {
        &POISSON_ERRORS
    }
}

/// Writes a batch's solutions (nodal, column-major nodes × columns), its checks and its
/// performance record, durably.
pub fn write_batch(
    path: &Path,
    fingerprint: u64,
    storage: SolutionStorage,
    record: &BatchRecord,
    nodes: usize,
    nodal: &[f64],
    checks: &Checks,
) -> Result<()> {
    let writer = h5::H5Writer::create(path)?;
    let root = writer.root();
    h5::write_provenance(root, None)?;
    h5::write_str_attr(root, "plan", &format!("{fingerprint:016x}"))?;
    h5::write_scalar_attr(root, "batch", record.batch as u64)?;
    let perf = serde_json::to_string(record).expect("records serialise");
    h5::write_str_attr(root, "perf", &perf)?;
    h5::write_block(root, "u", nodes, nodal, storage.precision, storage.deflate)?;
    h5::write_vector(root, "relative_residual", &checks.relative_residual)?;
    h5::write_vector(root, "tolerance", &checks.tolerance)?;
    for (name, values) in &checks.errors {
        h5::write_vector(root, name, values)?;
    }
    writer.commit()?;
    Ok(())
}

/// A batch file read back.
pub struct BatchFile {
    pub record: BatchRecord,
    pub nodes: usize,
    pub u: Vec<f64>,
    pub checks: Checks,
}

/// Reads a batch file of `plan` whose columns carry the errors `names`.
pub fn read_batch(path: &Path, plan: &Plan, names: &[&'static str]) -> Result<BatchFile> {
    let file = h5::open(path)?;
    let written = h5::read_str_attr(&file, "plan")?;
    if !u64::from_str_radix(&written, 16).is_ok_and(|f| plan.accepts(f)) {
        return Err(Error::Campaign(format!(
            "{} was written for another plan ({written})",
            path.display()
        )));
    }
    let record: BatchRecord =
        serde_json::from_str(&h5::read_str_attr(&file, "perf")?).map_err(|e| Error::Hdf5 {
            path: path.to_path_buf(),
            message: format!("attribute perf: {e}"),
        })?;
    let (nodes, columns, u) = h5::read_block(&file, "u")?;
    let read = |name: &str| -> Result<Vec<f64>> {
        let v = h5::read_vector::<f64>(&file, name)?;
        if v.len() != columns {
            return Err(Error::Hdf5 {
                path: path.to_path_buf(),
                message: format!("{name} has {} entries for {columns} columns", v.len()),
            });
        }
        Ok(v)
    };
    let checks = Checks {
        relative_residual: read("relative_residual")?,
        tolerance: read("tolerance")?,
        errors: names
            .iter()
            .map(|&name| Ok((name, read(name)?)))
            .collect::<Result<_>>()?,
    };
    Ok(BatchFile {
        record,
        nodes,
        u,
        checks,
    })
}

/// The plan fingerprint of a complete `campaign.h5` at `path`, if there is one.
pub fn merged_plan(path: &Path) -> Option<u64> {
    let file = hdf5::File::open(path).ok()?;
    let plan = h5::read_str_attr(&file, "plan").ok()?;
    u64::from_str_radix(&plan, 16).ok()
}

/// The per-column checks stored in `campaign.h5` (errors named `names`).
pub fn read_merged_checks(path: &Path, names: &[&'static str]) -> Result<Checks> {
    let file = h5::open(path)?;
    let columns = file
        .group("columns")
        .map_err(h5::error_in(path, "opening /columns"))?;
    let read = |name: &str| h5::read_vector::<f64>(&columns, name);
    let relative_residual = read("relative_residual")?;
    Ok(Checks {
        tolerance: read("tolerance")?,
        errors: names
            .iter()
            .map(|&name| Ok((name, read(name)?)))
            .collect::<Result<_>>()?,
        relative_residual,
    })
}

/// What `campaign.h5` holds besides the solutions, for the printed summary.
pub struct Merged {
    pub checks: Checks,
    /// Every batch's record, in batch order.
    pub records: Vec<BatchRecord>,
    pub xdmf: PathBuf,
}

/// Merges every batch file into `campaign.h5` (written under a temporary name, renamed when
/// complete). Solutions are copied, not referenced: the file stands alone.
pub fn write_campaign(
    config: &RunConfig,
    spec: &CampaignSpec,
    plan: &Plan,
    ranks: usize,
    stage_totals: &[(usize, String, StageTotals)],
) -> Result<Merged> {
    let path = spec.output_file();
    let writer = h5::H5Writer::create(&path)?;
    let root = writer.root();
    h5::write_provenance(root, Some(&config.source))?;
    h5::write_str_attr(root, "plan", &format!("{:016x}", plan.fingerprint))?;
    h5::write_str_attr(
        root,
        "problem",
        if spec.is_stokes() {
            "stokes-q2q1"
        } else {
            "poisson"
        },
    )?;
    h5::write_str_attr(root, "rhs_source", spec.rhs.name())?;
    h5::write_scalar_attr(root, "ranks", ranks as u64)?;
    h5::write_scalar_attr(root, "batch_size", spec.batch_size as u64)?;
    let storage = SolutionStorage::of(spec);

    let mut gathered = Gathered::default();
    let operators = create_group(root, "operators")?;
    let mut grids = Vec::new();
    for (o, op) in spec.operators.iter().enumerate() {
        let g = create_group(&operators, &o.to_string())?;
        h5::write_str_attr(&g, "method", op.solver.method.name())?;
        let precision = match &op.solver.mg {
            Some(mg) => crate::mg::schedule_name(&mg.schedule),
            None => op.solver.precision.name().to_string(),
        };
        h5::write_str_attr(&g, "precision", &precision)?;
        h5::write_scalar_attr(&g, "n", op.mesh.n as u64)?;
        let batches = OperatorBatches {
            spec,
            plan,
            operator: o,
        };
        match &op.stokes {
            Some(stokes) => grids.extend(write_stokes_operator(
                &g,
                stokes,
                batches,
                &mut gathered,
                storage,
            )?),
            None => grids.push(write_poisson_operator(
                &g,
                op,
                batches,
                &mut gathered,
                storage,
            )?),
        }
    }
    let Gathered {
        records,
        checks,
        iterations,
    } = gathered;
    if spec.operators.len() == 1 && !spec.is_stokes() {
        // One operator: its solutions are also /solution/u, as in a single run's file.
        root.link_soft("/operators/0", "solution")
            .map_err(h5::error_in(&path, "linking /solution"))?;
    }

    let columns = create_group(root, "columns")?;
    let sources: Vec<ColumnSource> = plan.columns.iter().map(|c| c.source).collect();
    h5::write_vector(
        &columns,
        "operator",
        &plan
            .columns
            .iter()
            .map(|c| c.operator as u32)
            .collect::<Vec<_>>(),
    )?;
    h5::write_vector(
        &columns,
        "index",
        &plan
            .columns
            .iter()
            .map(|c| c.index_in_operator as u64)
            .collect::<Vec<_>>(),
    )?;
    if !spec.is_stokes() {
        h5::write_vector(
            &columns,
            "k",
            &sources
                .iter()
                .map(|s| match s {
                    ColumnSource::Wave { k } => *k,
                    _ => 0,
                })
                .collect::<Vec<_>>(),
        )?;
        h5::write_vector(
            &columns,
            "t",
            &sources
                .iter()
                .map(|s| match s {
                    ColumnSource::TimeStep { t, .. } => *t,
                    _ => f64::NAN,
                })
                .collect::<Vec<_>>(),
        )?;
        h5::write_vector(
            &columns,
            "input_column",
            &sources
                .iter()
                .map(|s| match s {
                    ColumnSource::Input { index } => *index as i64,
                    _ => -1,
                })
                .collect::<Vec<_>>(),
        )?;
    }
    let mut batch_of = vec![0u64; plan.columns.len()];
    for b in &plan.batches {
        batch_of[b.columns.clone()].fill(b.index as u64);
    }
    h5::write_vector(&columns, "batch", &batch_of)?;
    h5::write_vector(&columns, "iterations", &iterations)?;
    h5::write_vector(&columns, "relative_residual", &checks.relative_residual)?;
    h5::write_vector(&columns, "tolerance", &checks.tolerance)?;
    h5::write_vector(
        &columns,
        "passed",
        &(0..checks.columns())
            .map(|c| u8::from(checks.passed(c)))
            .collect::<Vec<u8>>(),
    )?;
    for (name, values) in &checks.errors {
        h5::write_vector(&columns, name, values)?;
    }

    write_perf(&create_group(root, "perf")?, &records, stage_totals)?;
    let output = writer.commit()?;
    let xdmf = xdmf::write_grids(&output, &grids)?;
    Ok(Merged {
        checks,
        records,
        xdmf,
    })
}

/// The campaign-wide columns a merge gathers from the batch files, operator by operator.
#[derive(Default)]
struct Gathered {
    records: Vec<BatchRecord>,
    checks: Checks,
    iterations: Vec<i64>,
}

/// The batch files of one operator of a campaign.
struct OperatorBatches<'a> {
    spec: &'a CampaignSpec,
    plan: &'a Plan,
    operator: usize,
}

impl OperatorBatches<'_> {
    fn columns(&self) -> usize {
        self.plan.operator_columns[self.operator]
    }

    fn sources(&self) -> Vec<ColumnSource> {
        let o = self.operator;
        let columns = self.plan.columns.iter().filter(|c| c.operator == o);
        columns.map(|c| c.source).collect()
    }

    /// Reads the batch files in order into `gathered` (records, checks, iterations) and
    /// hands each file's solutions (nodes × its columns) to `solutions` with the position
    /// of its first column among the operator's: one batch is held at a time.
    fn read(
        &self,
        gathered: &mut Gathered,
        mut solutions: impl FnMut(usize, usize, &[f64]) -> Result<()>,
    ) -> Result<()> {
        let (spec, plan) = (self.spec, self.plan);
        for batch in plan.batches.iter().filter(|b| b.operator == self.operator) {
            let path = batch_path(&spec.directory, batch.index);
            let file = read_batch(&path, plan, error_names(spec))?;
            let count = batch.columns.len();
            if file.checks.columns() != count || file.u.len() != count * file.nodes {
                return Err(Error::Campaign(format!(
                    "{} holds {} columns, the plan says {count}: run with --fresh",
                    path.display(),
                    file.checks.columns()
                )));
            }
            let first = plan.columns[batch.columns.start].index_in_operator;
            solutions(first, file.nodes, &file.u)?;
            gathered.iterations.extend(std::iter::repeat_n(
                file.record.iterations.map_or(-1, |i| i as i64),
                count,
            ));
            gathered.checks.extend(file.checks);
            gathered.records.push(file.record);
        }
        Ok(())
    }
}

fn create_group(parent: &Group, name: &str) -> Result<Group> {
    parent
        .create_group(name)
        .map_err(h5::error_at(parent, &format!("creating group {name}")))
}

/// A field of `columns` columns for ParaView, stored at `dataset`.
fn fields(
    name: &str,
    dataset: String,
    columns: usize,
    components: usize,
    storage: SolutionStorage,
) -> impl Iterator<Item = xdmf::NodalField> + '_ {
    (0..columns).map(move |c| xdmf::NodalField {
        name: format!("{name}_{c}"),
        dataset: dataset.clone(),
        column: c,
        columns,
        bytes: storage.precision.bytes(),
        components,
    })
}

/// A Poisson operator's mesh, solutions `u` and (where known) exact solutions at the
/// nodes; its grid for ParaView.
fn write_poisson_operator(
    g: &Group,
    op: &OperatorSpec,
    batches: OperatorBatches<'_>,
    gathered: &mut Gathered,
    storage: SolutionStorage,
) -> Result<xdmf::XdmfGrid> {
    let o = batches.operator;
    let mesh = build_mesh(&op.mesh)?;
    let (nodes, cells, element) = match &mesh {
        AnyMesh::Square(m) => {
            h5::write_mesh(&create_group(g, "mesh")?, m)?;
            (m.num_nodes(), m.num_cells(), m.element)
        }
        AnyMesh::Cube(m) => {
            h5::write_mesh(&create_group(g, "mesh")?, m)?;
            (m.num_nodes(), m.num_cells(), m.element)
        }
    };
    let h0 = match (&op.mesh.domain, op.mesh.coarse) {
        (None, Some((n0, _))) => 1.0 / n0 as f64,
        _ => f64::NAN,
    };
    h5::write_scalar_attr(g, "h0", h0)?;
    h5::write_scalar_attr(g, "unknowns", op.mesh.unknowns() as u64)?;
    h5::write_str_attr(g, "mesh_kind", op.mesh.kind.name())?;
    if let Some(d) = &op.mesh.domain {
        h5::write_scalar_attr(g, "levels", d.levels as u64)?;
        h5::write_scalar_attr(g, "coarse_levels", d.coarse_levels as u64)?;
    }
    // "part=condition" per boundary part, one per line (u = 0 everywhere: none).
    let conditions = op
        .mesh
        .boundary
        .as_ref()
        .map_or(String::new(), |b| b.describe("=", "\n"));
    h5::write_str_attr(g, "boundary_conditions", &conditions)?;
    let (sources, columns) = (batches.sources(), batches.columns());
    let u = h5::create_block(g, "u", nodes, columns, storage.precision, storage.deflate)?;
    batches.read(gathered, |first, file_nodes, values| {
        if file_nodes != nodes {
            return Err(Error::Campaign(format!(
                "the batch files of operator {o} hold solutions of {file_nodes} nodes, its mesh has {nodes}: run with --fresh"
            )));
        }
        h5::write_block_rows(&u, first, nodes, values, storage.precision)
    })?;
    let mut exact_values = Vec::new();
    let mut mode_nodes = ModesAtNodes::default();
    let pure_neumann = op
        .mesh
        .boundary
        .as_ref()
        .is_some_and(|b| b.conditions().is_pure_neumann());
    // |Ω|, once per operator (pure Neumann exact solutions are shown less their mean).
    let area = match (&mesh, pure_neumann) {
        (AnyMesh::Square(m), true) => node_weights(m).iter().sum(),
        _ => f64::NAN,
    };
    let stored_exact = sources
        .iter()
        .filter(|_| batches.spec.store_exact)
        .filter_map(|s| s.exact(op.mesh.dim()));
    for exact in stored_exact {
        match &mesh {
            AnyMesh::Square(m) => {
                let mut values = mode_nodes.exact(m, &exact);
                // A pure Neumann solution has mean zero: so has the exact one it is shown with.
                if pure_neumann {
                    let mean = integral(m, |x| exact.u(x)) / area;
                    values.iter_mut().for_each(|v| *v -= mean);
                }
                exact_values.extend(values)
            }
            AnyMesh::Cube(m) => exact_values.extend(mode_nodes.exact(m, &exact)),
        }
    }
    let has_exact = exact_values.len() == columns * nodes && columns > 0;
    if has_exact {
        h5::write_block(
            g,
            "exact",
            nodes,
            &exact_values,
            storage.precision,
            storage.deflate,
        )?;
    }
    // ParaView: every solution column (and exact solution) a field.
    let mut list: Vec<_> = fields("u", format!("/operators/{o}/u"), columns, 1, storage).collect();
    if has_exact {
        let exact = fields(
            "exact",
            format!("/operators/{o}/exact"),
            columns,
            1,
            storage,
        );
        // u_0, exact_0, u_1, exact_1, ...
        list = list
            .into_iter()
            .zip(exact)
            .flat_map(|(u, e)| [u, e])
            .collect();
    }
    Ok(xdmf::XdmfGrid {
        name: format!("operator_{o}"),
        mesh_group: format!("/operators/{o}/mesh"),
        cells: xdmf::Cells::Of(element),
        num_nodes: nodes,
        num_cells: cells,
        fields: list,
    })
}

/// A Stokes operator's meshes (the Q2 lattice of the velocity, the Q1 mesh of the
/// pressure), its solutions and the exact solution split into velocity `[columns, lattice
/// nodes, 2]` and pressure `[columns, pressure nodes]`, and its solver's settings; its two
/// grids for ParaView.
fn write_stokes_operator(
    g: &Group,
    spec: &StokesSpec,
    batches: OperatorBatches<'_>,
    gathered: &mut Gathered,
    storage: SolutionStorage,
) -> Result<[xdmf::XdmfGrid; 2]> {
    let (o, columns) = (batches.operator, batches.columns());
    let grid = Grid { n: spec.n };
    let (lattice, pressure_nodes) = (grid.lattice_len(), grid.pressure_len());
    // One column per operator: its solution is small enough to hold whole.
    let mut flows = Vec::new();
    batches.read(gathered, |_, _, values| {
        flows.extend_from_slice(values);
        Ok(())
    })?;
    if flows.len() != columns * grid.flow_len() {
        return Err(Error::Campaign(format!(
            "the batch files of operator {o} do not hold {columns} Stokes solutions of {} unknowns: run with --fresh",
            grid.flow_len()
        )));
    }
    h5::write_scalar_attr(g, "unknowns", grid.flow_len() as u64)?;
    h5::write_str_attr(g, "preconditioner", spec.preconditioner.name())?;
    for (name, value) in stokes_parameters(spec) {
        h5::write_scalar_attr(g, name, value)?;
    }
    h5::write_scalar_attr(g, "restart", spec.fgmres.restart as u64)?;
    h5::write_scalar_attr(g, "rtol", spec.fgmres.rtol)?;
    h5::write_scalar_attr(g, "atol", spec.fgmres.atol)?;

    let velocity_mesh = create_group(g, "velocity_mesh")?;
    h5::write_dense(
        &velocity_mesh,
        "coordinates",
        2,
        lattice,
        &lattice_coordinates(grid),
    )?;
    h5::write_dense(&velocity_mesh, "cells", 9, grid.n * grid.n, &q2_cells(grid))?;
    let pressure_mesh = create_group(g, "pressure_mesh")?;
    let q1 = crate::mesh::unit_square(spec.n, Element::Q1)?;
    h5::write_mesh(&pressure_mesh, &q1)?;

    let (mut velocity, mut pressure) = (Vec::new(), Vec::new());
    for flow in flows.chunks_exact(grid.flow_len()) {
        let (ux, uy, p) = split(flow, grid);
        velocity.extend(ux.iter().zip(uy).flat_map(|(x, y)| [*x, *y]));
        pressure.extend_from_slice(p);
    }
    let SolutionStorage { precision, deflate } = storage;
    h5::write_vector_block(g, "velocity", lattice, 2, &velocity, precision, deflate)?;
    h5::write_block(g, "pressure", pressure_nodes, &pressure, precision, deflate)?;
    let store_exact = batches.spec.store_exact;
    if store_exact {
        let (exact_velocity, exact_pressure) = exact_at_nodes(grid);
        let repeat = |v: &[f64]| v.repeat(columns);
        h5::write_vector_block(
            g,
            "exact_velocity",
            lattice,
            2,
            &repeat(&exact_velocity),
            precision,
            deflate,
        )?;
        h5::write_block(
            g,
            "exact_pressure",
            pressure_nodes,
            &repeat(&exact_pressure),
            precision,
            deflate,
        )?;
    }

    let at = |name: &str| format!("/operators/{o}/{name}");
    // u_0, exact_0, u_1, exact_1, … where the exact solution is stored.
    let pair = |a: Vec<xdmf::NodalField>, b: Vec<xdmf::NodalField>| {
        if store_exact {
            a.into_iter().zip(b).flat_map(|(a, b)| [a, b]).collect()
        } else {
            a
        }
    };
    Ok([
        xdmf::XdmfGrid {
            name: format!("operator_{o}_velocity"),
            mesh_group: at("velocity_mesh"),
            cells: xdmf::Cells::Quad9,
            num_nodes: lattice,
            num_cells: grid.n * grid.n,
            fields: pair(
                fields("velocity", at("velocity"), columns, 2, storage).collect(),
                fields("exact_velocity", at("exact_velocity"), columns, 2, storage).collect(),
            ),
        },
        xdmf::XdmfGrid {
            name: format!("operator_{o}_pressure"),
            mesh_group: at("pressure_mesh"),
            cells: xdmf::Cells::Of(Element::Q1),
            num_nodes: pressure_nodes,
            num_cells: grid.n * grid.n,
            fields: pair(
                fields("pressure", at("pressure"), columns, 1, storage).collect(),
                fields("exact_pressure", at("exact_pressure"), columns, 1, storage).collect(),
            ),
        },
    ])
}

/// The relaxation parameters a Stokes preconditioner uses, by config key.
pub fn stokes_parameters(spec: &StokesSpec) -> Vec<(&'static str, f64)> {
    match spec.preconditioner {
        Preconditioner::Multigrid(Relaxation::Vanka { omega, .. }) => vec![("omega", omega)],
        Preconditioner::Multigrid(Relaxation::BraessSarazin(p) | Relaxation::SchurUzawa(p)) => {
            vec![
                ("omega", p.omega),
                ("t", p.t),
                ("jacobi_steps", p.jacobi_steps as f64),
                ("jacobi_weight", p.jacobi_weight),
            ]
        }
        Preconditioner::BlockTriangular => vec![],
    }
}

/// Exact solutions at every node from each sine mode's nodal values, computed once per
/// operator and mode: bitwise `exact.u(x)` (the same products and sums), without sines per
/// node per column.
#[derive(Default)]
struct ModesAtNodes(HashMap<Mode, Vec<f64>>);

impl ModesAtNodes {
    fn exact<const D: usize>(&mut self, mesh: &Mesh<D>, exact: &Exact) -> Vec<f64> {
        let mut values = vec![0.0; mesh.num_nodes()];
        for (a, mode) in exact.modes() {
            let phi = self
                .0
                .entry(mode)
                .or_insert_with(|| mesh.coords.iter().map(|x| mode.value(x)).collect());
            for (v, p) in values.iter_mut().zip(phi.iter()) {
                *v += a * p;
            }
        }
        values
    }
}

/// The performance log: one entry per batch in batch order, and this run's stage totals
/// per rank.
fn write_perf(
    perf: &Group,
    records: &[BatchRecord],
    stage_totals: &[(usize, String, StageTotals)],
) -> Result<()> {
    let f = |get: fn(&BatchRecord) -> f64| records.iter().map(get).collect::<Vec<f64>>();
    let s = |get: fn(&BatchRecord) -> &str| {
        records
            .iter()
            .map(|r| get(r).to_string())
            .collect::<Vec<String>>()
    };
    let u = |get: fn(&BatchRecord) -> usize| {
        records.iter().map(|r| get(r) as u64).collect::<Vec<u64>>()
    };
    h5::write_vector(perf, "batch", &u(|r| r.batch))?;
    h5::write_vector(perf, "operator", &u(|r| r.operator))?;
    h5::write_vector(perf, "rank", &u(|r| r.rank))?;
    h5::write_vector(perf, "nrhs", &u(|r| r.nrhs))?;
    h5::write_vector(perf, "unknowns", &u(|r| r.unknowns))?;
    h5::write_strings(perf, "host", &s(|r| &r.host))?;
    h5::write_strings(perf, "device", &s(|r| &r.device))?;
    h5::write_strings(perf, "method", &s(|r| &r.method))?;
    h5::write_strings(perf, "precision", &s(|r| &r.precision))?;
    for (name, get) in [
        (
            "setup_seconds",
            (|r| r.setup_seconds) as fn(&BatchRecord) -> f64,
        ),
        ("rhs_seconds", |r| r.rhs_seconds),
        ("solve_seconds", |r| r.solve_seconds),
        ("verify_seconds", |r| r.verify_seconds),
        ("write_seconds", |r| r.write_seconds),
        ("mdofs", |r| r.mdofs),
        ("gflops", |r| r.gflops.unwrap_or(f64::NAN)),
        ("max_relative_residual", |r| r.max_relative_residual),
        ("max_relative_l2_error", |r| {
            r.max_relative_l2_error.unwrap_or(f64::NAN)
        }),
        ("start", |r| r.start),
        ("end", |r| r.end),
    ] {
        h5::write_vector(perf, name, &f(get))?;
    }
    h5::write_vector(
        perf,
        "iterations",
        &records
            .iter()
            .map(|r| r.iterations.map_or(-1, |i| i as i64))
            .collect::<Vec<_>>(),
    )?;
    h5::write_vector(
        perf,
        "cg_iterations",
        &records
            .iter()
            .map(|r| r.cg_iterations.map_or(-1, |i| i as i64))
            .collect::<Vec<_>>(),
    )?;
    let ranks = perf
        .create_group("ranks")
        .map_err(h5::error_at(perf, "creating group /perf/ranks"))?;
    h5::write_vector(
        &ranks,
        "rank",
        &stage_totals.iter().map(|r| r.0 as u64).collect::<Vec<_>>(),
    )?;
    h5::write_strings(
        &ranks,
        "host",
        &stage_totals.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
    )?;
    for (i, name) in [
        "setup_seconds",
        "rhs_seconds",
        "solve_seconds",
        "verify_seconds",
        "io_seconds",
        "idle_seconds",
    ]
    .iter()
    .enumerate()
    {
        h5::write_vector(
            &ranks,
            name,
            &stage_totals
                .iter()
                .map(|r| r.2.stages()[i])
                .collect::<Vec<_>>(),
        )?;
    }
    h5::write_vector(
        &ranks,
        "wall_seconds",
        &stage_totals.iter().map(|r| r.2.wall).collect::<Vec<_>>(),
    )?;
    h5::write_vector(
        &ranks,
        "batches",
        &stage_totals
            .iter()
            .map(|r| r.2.batches as u64)
            .collect::<Vec<_>>(),
    )?;
    Ok(())
}
