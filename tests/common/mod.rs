//! Helpers shared by the integration tests: running the `tensorfem` binary, the meshes
//! shipped in inputs/.
#![allow(dead_code)]

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
