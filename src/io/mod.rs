//! Input and output: HDF5 files (meshes, vectors, dense matrices, provenance) written
//! atomically, XDMF sidecars, and the layout of the single runs' files ([`schema`]). The
//! layout is documented in docs/hdf5.md.

pub mod h5;
pub mod schema;
pub mod xdmf;
