//! XDMF sidecars: a small XML file next to an HDF5 file that tells ParaView/VisIt where the
//! mesh and the nodal fields are, so the output opens directly.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::mesh::Element;

/// A nodal field stored in the HDF5 file: column `column` of a `[columns, nodes]` f64
/// dataset (a block of nodal vectors as written by `h5::write_dense`).
pub struct NodalField<'a> {
    pub name: &'a str,
    /// Dataset path inside the HDF5 file, e.g. "/solution/u".
    pub dataset: &'a str,
    pub column: usize,
    pub columns: usize,
    /// Bytes per value stored: 8 (f64) or 4 (f32).
    pub bytes: usize,
}

/// A mesh stored in the HDF5 file under `mesh_group` (docs/hdf5.md) with nodal fields.
pub struct Grid<'a> {
    pub name: &'a str,
    /// Group path of the mesh, e.g. "/mesh".
    pub mesh_group: &'a str,
    pub element: Element,
    pub num_nodes: usize,
    pub num_cells: usize,
    pub fields: &'a [NodalField<'a>],
}

/// Writes `<h5 stem>.xdmf` next to `h5_path` for a mesh stored under `/mesh` (docs/hdf5.md).
pub fn write_sidecar(
    h5_path: &Path,
    element: Element,
    num_nodes: usize,
    num_cells: usize,
    fields: &[NodalField<'_>],
) -> Result<PathBuf> {
    write_grids(
        h5_path,
        &[Grid {
            name: "mesh",
            mesh_group: "/mesh",
            element,
            num_nodes,
            num_cells,
            fields,
        }],
    )
}

/// Writes `<h5 stem>.xdmf` next to `h5_path` with one grid per mesh (a spatial collection
/// when there are several).
pub fn write_grids(h5_path: &Path, grids: &[Grid<'_>]) -> Result<PathBuf> {
    let h5_name = h5_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::InvalidInput(format!("{} has no file name", h5_path.display())))?;
    let xdmf_path = h5_path.with_extension("xdmf");
    let mut xml = String::new();
    xml.push_str("<?xml version=\"1.0\" ?>\n<Xdmf Version=\"3.0\">\n <Domain>\n");
    if grids.len() > 1 {
        xml.push_str(
            "  <Grid Name=\"operators\" GridType=\"Collection\" CollectionType=\"Spatial\">\n",
        );
    }
    for grid in grids {
        grid_xml(&mut xml, &h5_name, grid);
    }
    if grids.len() > 1 {
        xml.push_str("  </Grid>\n");
    }
    xml.push_str(" </Domain>\n</Xdmf>\n");

    let write_error = |source| Error::Write {
        path: xdmf_path.clone(),
        source,
    };
    let temporary = xdmf_path.with_extension(format!("xdmf.tmp-{}", std::process::id()));
    let mut file = std::fs::File::create(&temporary).map_err(write_error)?;
    file.write_all(xml.as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(write_error)?;
    std::fs::rename(&temporary, &xdmf_path).map_err(write_error)?;
    Ok(xdmf_path)
}

fn grid_xml(xml: &mut String, h5_name: &str, grid: &Grid<'_>) {
    let (num_nodes, num_cells, group) = (grid.num_nodes, grid.num_cells, grid.mesh_group);
    let k = grid.element.nodes_per_cell();
    let (geometry, dim) = if grid.element.dim() == 3 {
        ("XYZ", 3)
    } else {
        ("XY", 2)
    };
    xml.push_str(&format!(
        "  <Grid Name=\"{}\" GridType=\"Uniform\">\n",
        grid.name
    ));
    xml.push_str(&format!(
        "   <Topology TopologyType=\"{}\" NumberOfElements=\"{num_cells}\">\n    <DataItem Dimensions=\"{num_cells} {k}\" NumberType=\"UInt\" Precision=\"4\" Format=\"HDF\">{h5_name}:{group}/cells</DataItem>\n   </Topology>\n",
        grid.element.xdmf_topology()
    ));
    xml.push_str(&format!(
        "   <Geometry GeometryType=\"{geometry}\">\n    <DataItem Dimensions=\"{num_nodes} {dim}\" NumberType=\"Float\" Precision=\"8\" Format=\"HDF\">{h5_name}:{group}/coordinates</DataItem>\n   </Geometry>\n"
    ));
    for field in grid.fields {
        // A hyperslab picks row `column` of the [columns, nodes] dataset.
        xml.push_str(&format!(
            "   <Attribute Name=\"{}\" AttributeType=\"Scalar\" Center=\"Node\">\n    <DataItem ItemType=\"HyperSlab\" Dimensions=\"1 {num_nodes}\" Type=\"HyperSlab\">\n     <DataItem Dimensions=\"3 2\" Format=\"XML\">{} 0 1 1 1 {num_nodes}</DataItem>\n     <DataItem Dimensions=\"{} {num_nodes}\" NumberType=\"Float\" Precision=\"{}\" Format=\"HDF\">{h5_name}:{}</DataItem>\n    </DataItem>\n   </Attribute>\n",
            field.name, field.column, field.columns, field.bytes, field.dataset
        ));
    }
    xml.push_str("  </Grid>\n");
}
