//! XDMF sidecars: a small XML file next to an HDF5 file that tells ParaView/VisIt where the
//! mesh and the nodal fields are, so the output opens directly.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::mesh::Element;

/// A nodal field stored in the HDF5 file: column `column` of a `[columns, nodes]` dataset
/// (a block of nodal vectors as written by `h5::write_dense`), or of a `[columns, nodes, 2]`
/// dataset for a 2D vector field.
pub struct NodalField {
    pub name: String,
    /// Dataset path inside the HDF5 file, e.g. "/solution/u".
    pub dataset: String,
    pub column: usize,
    pub columns: usize,
    /// Bytes per value stored: 8 (f64) or 4 (f32).
    pub bytes: usize,
    /// 1: a scalar; 2: a vector (x, y) per node.
    pub components: usize,
}

/// The cells of a grid: a mesh's element, or the 9-node biquadratic quadrilateral of a
/// Q2 lattice (nodes in VTK's order: corners counterclockwise from the lower left, then
/// the midpoints of the lower, right, upper and left edges, then the centre).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cells {
    Of(Element),
    Quad9,
}

impl Cells {
    fn topology(self) -> &'static str {
        match self {
            Cells::Of(e) => e.xdmf_topology(),
            Cells::Quad9 => "Quadrilateral_9",
        }
    }

    fn nodes_per_cell(self) -> usize {
        match self {
            Cells::Of(e) => e.nodes_per_cell(),
            Cells::Quad9 => 9,
        }
    }

    fn dim(self) -> usize {
        match self {
            Cells::Of(e) => e.dim(),
            Cells::Quad9 => 2,
        }
    }
}

/// A mesh stored in the HDF5 file under `mesh_group` (`coordinates` [nodes, dim] f64,
/// `cells` [cells, nodes per cell] u32; docs/hdf5.md) with nodal fields.
pub struct XdmfGrid {
    pub name: String,
    /// Group path of the mesh, e.g. "/mesh".
    pub mesh_group: String,
    pub cells: Cells,
    pub num_nodes: usize,
    pub num_cells: usize,
    pub fields: Vec<NodalField>,
}

/// Writes `<h5 stem>.xdmf` next to `h5_path` for a mesh stored under `/mesh` (docs/hdf5.md).
pub fn write_sidecar(
    h5_path: &Path,
    element: Element,
    num_nodes: usize,
    num_cells: usize,
    fields: Vec<NodalField>,
) -> Result<PathBuf> {
    write_grids(
        h5_path,
        &[XdmfGrid {
            name: "mesh".into(),
            mesh_group: "/mesh".into(),
            cells: Cells::Of(element),
            num_nodes,
            num_cells,
            fields,
        }],
    )
}

/// Writes `<h5 stem>.xdmf` next to `h5_path` with one grid per mesh (a spatial collection
/// when there are several).
pub fn write_grids(h5_path: &Path, grids: &[XdmfGrid]) -> Result<PathBuf> {
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

fn grid_xml(xml: &mut String, h5_name: &str, grid: &XdmfGrid) {
    let (num_nodes, num_cells, group) = (grid.num_nodes, grid.num_cells, &grid.mesh_group);
    let k = grid.cells.nodes_per_cell();
    let (geometry, dim) = if grid.cells.dim() == 3 {
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
        grid.cells.topology()
    ));
    xml.push_str(&format!(
        "   <Geometry GeometryType=\"{geometry}\">\n    <DataItem Dimensions=\"{num_nodes} {dim}\" NumberType=\"Float\" Precision=\"8\" Format=\"HDF\">{h5_name}:{group}/coordinates</DataItem>\n   </Geometry>\n"
    ));
    for field in &grid.fields {
        // A hyperslab picks row `column` of the [columns, nodes(, 2)] dataset.
        let (kind, shape, slab) = match field.components {
            1 => (
                "Scalar",
                format!("{num_nodes}"),
                format!(
                    "Dimensions=\"3 2\" Format=\"XML\">{} 0 1 1 1 {num_nodes}",
                    field.column
                ),
            ),
            c => (
                "Vector",
                format!("{num_nodes} {c}"),
                format!(
                    "Dimensions=\"3 3\" Format=\"XML\">{} 0 0 1 1 1 1 {num_nodes} {c}",
                    field.column
                ),
            ),
        };
        xml.push_str(&format!(
            "   <Attribute Name=\"{}\" AttributeType=\"{kind}\" Center=\"Node\">\n    <DataItem ItemType=\"HyperSlab\" Dimensions=\"1 {shape}\" Type=\"HyperSlab\">\n     <DataItem {slab}</DataItem>\n     <DataItem Dimensions=\"{} {shape}\" NumberType=\"Float\" Precision=\"{}\" Format=\"HDF\">{h5_name}:{}</DataItem>\n    </DataItem>\n   </Attribute>\n",
            field.name, field.columns, field.bytes, field.dataset
        ));
    }
    xml.push_str("  </Grid>\n");
}
