//! The campaign's files: one HDF5 file per batch (written by the rank that solved it under a
//! temporary name, synced, renamed: a batch's file is complete or absent, which is what
//! makes it safe to journal), and at the end `campaign.h5`, a merge of every batch in
//! campaign order with the meshes, the config echo and the performance log, plus an XDMF
//! sidecar for ParaView. Layout: docs/hdf5.md.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hdf5::Group;

use super::perf::{BatchRecord, FailureRecord, StageTotals};
use super::plan::{ColumnSource, Plan};
use crate::config::CampaignSpec;
use crate::config::RunConfig;
use crate::error::{Error, Result};
use crate::fem::{ColumnReport, Exact, Mode};
use crate::io::{h5, xdmf};
use crate::mesh::Mesh;
use crate::mesh::{build as build_mesh, AnyMesh};
use crate::precision::Precision;

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

const REPORT_FIELDS: [&str; 4] = [
    "relative_residual",
    "l2_error",
    "relative_l2_error",
    "nodal_l2_error",
];

fn report_values(reports: &[ColumnReport]) -> [Vec<f64>; 4] {
    [
        reports.iter().map(|r| r.relative_residual).collect(),
        reports.iter().map(|r| r.l2_error).collect(),
        reports.iter().map(|r| r.relative_l2_error).collect(),
        reports.iter().map(|r| r.nodal_l2_error).collect(),
    ]
}

/// How solutions are stored: precision and gzip level (campaign.store, campaign.compression).
#[derive(Clone, Copy, Debug)]
pub struct Storage {
    pub precision: Precision,
    pub deflate: u8,
}

impl Storage {
    pub fn of(spec: &CampaignSpec) -> Self {
        Storage {
            precision: spec.store,
            deflate: spec.compression,
        }
    }
}

/// Writes a batch's solutions (nodal, column-major nodes × columns), its column reports and
/// its performance record, durably.
pub fn write_batch(
    path: &Path,
    fingerprint: u64,
    storage: Storage,
    record: &BatchRecord,
    nodes: usize,
    nodal: &[f64],
    reports: &[ColumnReport],
) -> Result<()> {
    let writer = h5::H5Writer::create(path)?;
    let root = writer.root();
    h5::write_provenance(root, None)?;
    h5::write_str_attr(root, "plan", &format!("{fingerprint:016x}"))?;
    h5::write_scalar_attr(root, "batch", record.batch as u64)?;
    let perf = serde_json::to_string(record).expect("records serialise");
    h5::write_str_attr(root, "perf", &perf)?;
    h5::write_block(root, "u", nodes, nodal, storage.precision, storage.deflate)?;
    for (name, values) in REPORT_FIELDS.iter().zip(report_values(reports)) {
        h5::write_vector(root, name, &values)?;
    }
    writer.commit()?;
    Ok(())
}

/// A batch file read back.
pub struct BatchFile {
    pub record: BatchRecord,
    pub nodes: usize,
    pub u: Vec<f64>,
    pub reports: Vec<ColumnReport>,
}

pub fn read_batch(path: &Path, fingerprint: u64) -> Result<BatchFile> {
    let file = h5::open(path)?;
    let plan = h5::read_str_attr(&file, "plan")?;
    if plan != format!("{fingerprint:016x}") {
        return Err(Error::Campaign(format!(
            "{} was written for another plan ({plan})",
            path.display()
        )));
    }
    let record: BatchRecord =
        serde_json::from_str(&h5::read_str_attr(&file, "perf")?).map_err(|e| Error::Hdf5 {
            path: path.to_path_buf(),
            message: format!("attribute perf: {e}"),
        })?;
    let (nodes, columns, u) = h5::read_block(&file, "u")?;
    let mut fields = Vec::new();
    for name in REPORT_FIELDS {
        let v = h5::read_vector::<f64>(&file, name)?;
        if v.len() != columns {
            return Err(Error::Hdf5 {
                path: path.to_path_buf(),
                message: format!("{name} has {} entries for {columns} columns", v.len()),
            });
        }
        fields.push(v);
    }
    let reports = (0..columns)
        .map(|c| ColumnReport {
            relative_residual: fields[0][c],
            l2_error: fields[1][c],
            relative_l2_error: fields[2][c],
            nodal_l2_error: fields[3][c],
        })
        .collect();
    Ok(BatchFile {
        record,
        nodes,
        u,
        reports,
    })
}

/// What `campaign.h5` holds besides the solutions, for the printed summary.
pub struct Merged {
    pub reports: Vec<ColumnReport>,
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
    h5::write_str_attr(root, "rhs_source", spec.rhs.name())?;
    h5::write_scalar_attr(root, "ranks", ranks as u64)?;
    h5::write_scalar_attr(root, "batch_size", spec.batch_size as u64)?;
    let hdf5_error = |what: String| h5::error_in(&path, &what);
    let group = |parent: &Group, name: &str| {
        parent
            .create_group(name)
            .map_err(hdf5_error(format!("creating group {name}")))
    };

    let mut records = Vec::with_capacity(plan.batches.len());
    let mut reports = Vec::with_capacity(plan.columns.len());
    let mut iterations = Vec::with_capacity(plan.columns.len());
    let operators = group(root, "operators")?;
    let mut grids = Vec::new();
    for (o, op) in spec.operators.iter().enumerate() {
        let g = group(&operators, &o.to_string())?;
        let mesh = build_mesh(&op.mesh)?;
        let (nodes, cells, element) = match &mesh {
            AnyMesh::Square(m) => {
                h5::write_mesh(&group(&g, "mesh")?, m)?;
                (m.num_nodes(), m.num_cells(), m.element)
            }
            AnyMesh::Cube(m) => {
                h5::write_mesh(&group(&g, "mesh")?, m)?;
                (m.num_nodes(), m.num_cells(), m.element)
            }
        };
        h5::write_str_attr(&g, "method", op.solver.method.name())?;
        let precision = match &op.solver.mg {
            Some(mg) => crate::mg::schedule_name(&mg.schedule),
            None => op.solver.precision.name().to_string(),
        };
        h5::write_str_attr(&g, "precision", &precision)?;
        h5::write_scalar_attr(&g, "n", op.mesh.n as u64)?;
        h5::write_scalar_attr(
            &g,
            "h0",
            op.mesh.coarse.map_or(f64::NAN, |(n0, _)| 1.0 / n0 as f64),
        )?;
        h5::write_scalar_attr(&g, "unknowns", op.mesh.unknowns() as u64)?;
        let columns = plan.operator_columns[o];
        let storage = Storage::of(spec);
        let u = h5::create_block(&g, "u", nodes, columns, storage.precision, storage.deflate)?;
        let mut exact_values = Vec::new();
        let mut mode_nodes = ModesAtNodes::default();
        for batch in plan.batches.iter().filter(|b| b.operator == o) {
            let file = read_batch(&batch_path(&spec.directory, batch.index), plan.fingerprint)?;
            let count = batch.columns.len();
            if file.nodes != nodes || file.reports.len() != count {
                return Err(Error::Campaign(format!(
                    "{} holds {} columns of {} nodes, the plan says {count} of {nodes}: run with --fresh",
                    batch_path(&spec.directory, batch.index).display(),
                    file.reports.len(),
                    file.nodes
                )));
            }
            let first = plan.columns[batch.columns.start].index_in_operator;
            h5::write_block_rows(&u, first, nodes, &file.u, storage.precision)?;
            let dim = op.mesh.dim();
            for c in batch.columns.clone() {
                if let Some(exact) = plan.columns[c].source.exact(dim) {
                    match &mesh {
                        AnyMesh::Square(m) => exact_values.extend(mode_nodes.exact(m, &exact)),
                        AnyMesh::Cube(m) => exact_values.extend(mode_nodes.exact(m, &exact)),
                    }
                }
            }
            iterations.extend(std::iter::repeat_n(
                file.record.iterations.map_or(-1, |i| i as i64),
                count,
            ));
            reports.extend(file.reports);
            records.push(file.record);
        }
        if exact_values.len() == columns * nodes {
            h5::write_block(
                &g,
                "exact",
                nodes,
                &exact_values,
                storage.precision,
                storage.deflate,
            )?;
        }
        grids.push((o, element, nodes, cells, columns, !exact_values.is_empty()));
    }
    if spec.operators.len() == 1 {
        // One operator: its solutions are also /solution/u, as in a single run's file.
        root.link_soft("/operators/0", "solution")
            .map_err(hdf5_error("linking /solution".into()))?;
    }

    let columns = group(root, "columns")?;
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
    let mut batch_of = vec![0u64; plan.columns.len()];
    for b in &plan.batches {
        batch_of[b.columns.clone()].fill(b.index as u64);
    }
    h5::write_vector(&columns, "batch", &batch_of)?;
    h5::write_vector(&columns, "iterations", &iterations)?;
    for (name, values) in REPORT_FIELDS.iter().zip(report_values(&reports)) {
        h5::write_vector(&columns, name, &values)?;
    }

    write_perf(&group(root, "perf")?, &records, stage_totals)?;
    let output = writer.commit()?;

    // ParaView: one grid per operator, every solution column (and exact solution) a field.
    let names: Vec<Vec<(String, String, usize, usize)>> = grids
        .iter()
        .map(|&(o, _, _, _, columns, has_exact)| {
            (0..columns)
                .flat_map(|c| {
                    let mut f = vec![(format!("u_{c}"), format!("/operators/{o}/u"), c, columns)];
                    if has_exact {
                        f.push((
                            format!("exact_{c}"),
                            format!("/operators/{o}/exact"),
                            c,
                            columns,
                        ));
                    }
                    f
                })
                .collect()
        })
        .collect();
    let fields: Vec<Vec<xdmf::NodalField<'_>>> = names
        .iter()
        .map(|list| {
            list.iter()
                .map(|(name, dataset, column, columns)| xdmf::NodalField {
                    name,
                    dataset,
                    column: *column,
                    columns: *columns,
                    bytes: spec.store.bytes(),
                })
                .collect()
        })
        .collect();
    let grid_names: Vec<(String, String)> = grids
        .iter()
        .map(|g| {
            (
                format!("operator_{}", g.0),
                format!("/operators/{}/mesh", g.0),
            )
        })
        .collect();
    let xdmf_grids: Vec<xdmf::Grid<'_>> = grids
        .iter()
        .zip(&fields)
        .zip(&grid_names)
        .map(
            |((&(_, element, nodes, cells, _, _), fields), (name, mesh_group))| xdmf::Grid {
                name,
                mesh_group,
                element,
                num_nodes: nodes,
                num_cells: cells,
                fields,
            },
        )
        .collect();
    let xdmf = xdmf::write_grids(&output, &xdmf_grids)?;
    Ok(Merged { reports, xdmf })
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
