//! Helpers shared by the integration tests: running the `tensorfem` binary, the meshes
//! shipped in inputs/, the grid transfer's P as a matrix, Vanka maps of permuted patches.
#![allow(dead_code)]

pub mod outputs;

use std::path::Path;
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_tensorfem");

pub fn run(args: &[&str], dir: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("tensorfem runs")
}

/// Writes a config into `dir` and returns its path.
pub fn write_config(dir: &Path, body: &str) -> String {
    let path = dir.join("case.toml");
    std::fs::write(&path, body).unwrap();
    path.to_string_lossy().into_owned()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// mpirun as root (OpenMPI refuses without these) and on machines with fewer cores than ranks.
pub fn mpirun(n: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "-n", &n.to_string()])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}

/// The DFG channel with a cylinder, made in Gmsh (inputs/meshes/channel-cylinder.geo).
pub fn channel() -> tensorfem::mesh::CoarseMesh {
    tensorfem::mesh::read_gmsh(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/inputs/meshes/channel-cylinder.msh"
    )))
    .unwrap()
}

/// The uniform grid transfer's P (fine × coarse points), column-major like
/// `Csr::to_dense_f64`: column j is the prolongation of coarse unit vector j.
pub fn grid_prolongation<D: tensorfem::device::MultigridKernels>(
    dev: &D,
    fine: tensorfem::device::GridShape,
    coarse: tensorfem::device::GridShape,
) -> Vec<f64> {
    use tensorfem::device::{Block, Layout, LevelTransfer, Stats};
    use tensorfem::precision::Precision;
    let grid = LevelTransfer::Grid { fine, coarse };
    let mut stats = Stats::new(dev, 1).unwrap();
    (0..coarse.points())
        .flat_map(|j| {
            let mut e = vec![0.0; coarse.points()];
            e[j] = 1.0;
            let e =
                Block::from_f64(dev, &e, e.len(), 1, Precision::F64, Layout::NodeMajor).unwrap();
            let mut column =
                Block::zeros(dev, fine.points(), 1, Precision::F64, Layout::NodeMajor).unwrap();
            dev.prolongate_add(&grid, &e, &mut column, &[1.0], &mut stats)
                .unwrap();
            column.to_f64(dev).unwrap()
        })
        .collect()
}

/// Vanka maps of a grid whose patches sit in the buffer columns permuted by k ↦ 7k mod
/// patches, every column using inverse k mod `inverses`: the returned `column_of` with them.
pub fn permuted_vanka_maps<D: tensorfem::device::Device>(
    dev: &D,
    g: tensorfem::device::stokes::Grid,
    inverses: u32,
) -> (tensorfem::device::stokes::VankaMaps<D>, Vec<u32>) {
    let patches = g.pressure_len();
    let patch_of_column: Vec<u32> = (0..patches as u32)
        .map(|k| (k * 7) % patches as u32)
        .collect();
    let mut column_of = vec![0u32; patches];
    for (column, &patch) in patch_of_column.iter().enumerate() {
        column_of[patch as usize] = column as u32;
    }
    let inverse_of_column: Vec<u32> = (0..patches as u32).map(|k| k % inverses).collect();
    let maps = tensorfem::device::stokes::VankaMaps {
        column_of: dev.upload(&column_of).unwrap(),
        patch_of_column: dev.upload(&patch_of_column).unwrap(),
        inverse_of_column: dev.upload(&inverse_of_column).unwrap(),
    };
    (maps, column_of)
}
