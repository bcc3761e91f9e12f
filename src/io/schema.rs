//! The HDF5 layout of single runs (docs/hdf5.md): the Poisson run's mesh, solutions, exact
//! values, per-column verification and settings, with an XDMF sidecar; the Stokes run's
//! velocity, pressure and FGMRES history. Every file is written atomically (a temporary
//! file renamed at the end).

use std::path::PathBuf;

use super::{h5, xdmf};
use crate::config::RunConfig;
use crate::error::Result;
use crate::fem::ColumnReport;
use crate::mesh::Mesh;
use crate::stokes::{StokesSolution, StokesSpec};

#[allow(clippy::too_many_arguments)]
pub fn write_run<const D: usize>(
    config: &RunConfig,
    mesh: &Mesh<D>,
    nodal: &[f64],
    // The exact solutions at the nodes, nodes × columns.
    exact: &[f64],
    columns: &[ColumnReport],
    // The relative residual each column had to reach.
    tolerance: &[f64],
    // (attribute name, seconds) of each stage timed before the write.
    seconds: &[(&str, f64)],
    backend: &str,
    nonzeros: usize,
    refine_iterations: Option<usize>,
    cg_iterations: Option<usize>,
) -> Result<(PathBuf, PathBuf)> {
    let nodes = mesh.num_nodes();
    let nrhs = columns.len();
    let hdf5_error = |what: &str| h5::error_in(&config.output, what);
    let writer = h5::H5Writer::create(&config.output)?;
    let root = writer.root();
    h5::write_provenance(root, Some(&config.source))?;
    {
        let mesh_group = root
            .create_group("mesh")
            .map_err(hdf5_error("creating group mesh"))?;
        h5::write_mesh(&mesh_group, mesh)?;
        let solution = root
            .create_group("solution")
            .map_err(hdf5_error("creating group solution"))?;
        h5::write_dense(&solution, "u", nodes, nrhs, nodal)?;
        h5::write_dense(&solution, "exact", nodes, nrhs, exact)?;
        h5::write_vector(&solution, "k", &config.ks)?;
        h5::write_vector(
            &solution,
            "l2_error",
            &columns.iter().map(|c| c.l2_error).collect::<Vec<_>>(),
        )?;
        h5::write_vector(
            &solution,
            "relative_l2_error",
            &columns
                .iter()
                .map(|c| c.relative_l2_error)
                .collect::<Vec<_>>(),
        )?;
        h5::write_vector(
            &solution,
            "nodal_l2_error",
            &columns.iter().map(|c| c.nodal_l2_error).collect::<Vec<_>>(),
        )?;
        h5::write_vector(
            &solution,
            "relative_residual",
            &columns
                .iter()
                .map(|c| c.relative_residual)
                .collect::<Vec<_>>(),
        )?;
        h5::write_vector(&solution, "tolerance", tolerance)?;
        h5::write_vector(
            &solution,
            "passed",
            &columns
                .iter()
                .zip(tolerance)
                .map(|(c, &t)| u8::from(c.relative_residual <= t))
                .collect::<Vec<u8>>(),
        )?;
        h5::write_str_attr(&solution, "method", config.solver.method.name())?;
        match &config.solver.mg {
            // Multigrid: the precision of every level, finest first.
            Some(mg) => {
                let names: Vec<&str> = mg.schedule.iter().map(|p| p.name()).collect();
                h5::write_str_attr(&solution, "precision", &names.join(","))?;
            }
            None => h5::write_str_attr(&solution, "precision", config.solver.precision.name())?,
        }
        h5::write_str_attr(&solution, "backend", backend)?;
        h5::write_scalar_attr(
            &solution,
            "refine_iterations",
            refine_iterations.map_or(-1, |i| i as i64),
        )?;
        if let Some(cg) = cg_iterations {
            // PSC-M3: block-CG iterations of the whole solve (all refinement steps).
            h5::write_scalar_attr(&solution, "cg_iterations", cg as u64)?;
        }
        h5::write_scalar_attr(&solution, "unknowns", mesh.num_interior() as u64)?;
        h5::write_scalar_attr(&solution, "nonzeros", nonzeros as u64)?;
        for &(name, value) in seconds {
            h5::write_scalar_attr(&solution, name, value)?;
        }
    }
    let output = writer.commit()?;
    let fields = (0..nrhs)
        .flat_map(|c| [("u", "/solution/u", c), ("exact", "/solution/exact", c)])
        .map(|(name, dataset, c)| xdmf::NodalField {
            name: format!("{name}_{c}"),
            dataset: dataset.into(),
            column: c,
            columns: nrhs,
            bytes: 8,
            components: 1,
        })
        .collect();
    let xdmf = xdmf::write_sidecar(&output, mesh.element, nodes, mesh.num_cells(), fields)?;
    Ok((output, xdmf))
}

/// Writes the solution file (atomically: a temporary file renamed at the end).
pub fn write_stokes(config: &RunConfig, spec: &StokesSpec, s: &StokesSolution) -> Result<PathBuf> {
    let path = &config.output;
    let writer = h5::H5Writer::create(path)?;
    let root = writer.root();
    let err = |what: &'static str| h5::error_in(path, what);
    h5::write_provenance(root, Some(&config.source))?;
    let g = s.grid;
    let (m, np, h) = (g.m(), g.np(), 1.0 / g.n as f64);
    h5::write_str_attr(root, "problem", "stokes-q2q1")?;
    h5::write_str_attr(root, "preconditioner", spec.preconditioner.name())?;
    h5::write_str_attr(root, "precision", spec.precision.name())?;
    for (name, value) in [
        ("n", g.n as f64),
        ("h", h),
        ("iterations", s.info.iterations as f64),
        ("restart", spec.fgmres.restart as f64),
        ("rtol", spec.fgmres.rtol),
        ("atol", spec.fgmres.atol),
        ("relative_residual", s.info.relative_residual),
        ("velocity_l2_error", s.velocity_l2_error),
        ("pressure_l2_error", s.pressure_l2_error),
        ("assembly_seconds", s.assembly_seconds),
        ("setup_seconds", s.setup_seconds),
        ("solve_seconds", s.solve_seconds),
    ] {
        h5::write_scalar_attr(root, name, value)?;
    }
    let mesh = root
        .create_group("mesh")
        .map_err(err("creating group mesh"))?;
    let lattice: Vec<f64> = (0..m).map(|i| i as f64 * h / 2.0).collect();
    let pressure_nodes: Vec<f64> = (0..np).map(|i| i as f64 * h).collect();
    h5::write_vector(&mesh, "lattice_coordinates", &lattice)?;
    h5::write_vector(&mesh, "pressure_coordinates", &pressure_nodes)?;
    let (ux, uy, p) = crate::stokes::lattice::split(&s.flow, g);
    let velocity = root
        .create_group("velocity")
        .map_err(err("creating group velocity"))?;
    h5::write_dense(&velocity, "x", m, m, ux)?;
    h5::write_dense(&velocity, "y", m, m, uy)?;
    h5::write_dense(root, "pressure", np, np, p)?;
    let fgmres = root
        .create_group("fgmres")
        .map_err(err("creating group fgmres"))?;
    h5::write_vector(&fgmres, "history", &s.info.history)?;
    writer.commit()
}

/// `tensorfem mesh`: a refined mesh with its hierarchy and boundary parts (docs/hdf5.md,
/// `/mesh`), and two nodal fields for a look in ParaView: `level` (the level each node
/// first appears on) and `boundary_part` (1 + the part of a boundary edge at the node, 0
/// inside), with an XDMF sidecar.
pub fn write_mesh_file(
    path: &std::path::Path,
    mesh: &Mesh<2>,
    on_dirichlet_parts: &[bool],
) -> Result<(PathBuf, PathBuf)> {
    let nodes = mesh.num_nodes();
    let writer = h5::H5Writer::create(path)?;
    let root = writer.root();
    h5::write_provenance(root, None)?;
    let mesh_group = root
        .create_group("mesh")
        .map_err(h5::error_in(path, "creating group mesh"))?;
    h5::write_mesh(&mesh_group, mesh)?;
    // The nodes a right-hand-side row holds (off the Dirichlet parts) and those the
    // dataset of Dirichlet values holds, both in node order.
    let (dirichlet, loads): (Vec<u32>, Vec<u32>) =
        (0..nodes as u32).partition(|&v| on_dirichlet_parts[v as usize]);
    h5::write_vector(&mesh_group, "load_nodes", &loads)?;
    h5::write_vector(&mesh_group, "dirichlet_nodes", &dirichlet)?;
    h5::write_str_attr(
        &mesh_group,
        "fingerprint",
        &mesh.fingerprint(on_dirichlet_parts),
    )?;
    let fields = root
        .create_group("fields")
        .map_err(h5::error_in(path, "creating group fields"))?;
    let level: Vec<f64> = match &mesh.hierarchy {
        Some(h) => h.level.iter().map(|&l| f64::from(l)).collect(),
        None => vec![0.0; nodes],
    };
    let mut part = vec![0.0; nodes];
    for edge in &mesh.boundary.edges {
        for v in edge.nodes {
            if part[v as usize] == 0.0 {
                part[v as usize] = 1.0 + f64::from(edge.part);
            }
        }
    }
    h5::write_dense(&fields, "level", nodes, 1, &level)?;
    h5::write_dense(&fields, "boundary_part", nodes, 1, &part)?;
    let output = writer.commit()?;
    let fields = ["level", "boundary_part"]
        .map(|name| xdmf::NodalField {
            name: name.into(),
            dataset: format!("/fields/{name}"),
            column: 0,
            columns: 1,
            bytes: 8,
            components: 1,
        })
        .into_iter()
        .collect();
    let xdmf = xdmf::write_sidecar(&output, mesh.element, nodes, mesh.num_cells(), fields)?;
    Ok((output, xdmf))
}

/// `tensorfem mesh`: the mesh of `spec` with its conditions written to `path`; returns a
/// line saying what was written.
pub fn export_mesh(spec: &crate::mesh::MeshSpec, path: &std::path::Path) -> Result<String> {
    let crate::mesh::AnyMesh::Square(mesh) = crate::mesh::build(spec)? else {
        return Err(crate::error::Error::InvalidInput(
            "tensorfem mesh writes 2D meshes".into(),
        ));
    };
    let conditions = match &spec.boundary {
        Some(b) => b.conditions(),
        None => crate::mesh::Conditions::dirichlet(&mesh),
    };
    let on_dirichlet = conditions.on_dirichlet_parts(&mesh);
    let (h5, xdmf) = write_mesh_file(path, &mesh, &on_dirichlet)?;
    let described: Vec<String> = mesh
        .boundary
        .names
        .iter()
        .zip(&conditions.0)
        .map(|(name, c)| format!("{name} {}", c.name()))
        .collect();
    Ok(format!(
        "{} nodes, {} cells, {} unknowns, {} load nodes (boundary: {}): {} ({})",
        mesh.num_nodes(),
        mesh.num_cells(),
        mesh.num_interior(),
        on_dirichlet.iter().filter(|d| !**d).count(),
        described.join(", "),
        h5.display(),
        xdmf.display()
    ))
}
