//! Input and output: HDF5 files (meshes, vectors, dense matrices, provenance) written
//! atomically. The layout is documented in docs/hdf5.md.

pub mod h5;
pub mod xdmf;
