//! HDF5 reading and writing (hdf5-metno).
//!
//! Files are written under a temporary name in the destination directory and renamed when
//! complete and synced, so a crash never leaves a half-written file under the final name.
//! Dense matrices and blocks of vectors are column-major in memory and stored with the
//! shape `[ncols, nrows]`: in h5py, `f[name][j]` is column j (one solution per row).

use std::path::{Path, PathBuf};

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, Group, H5Type, Location};

use crate::error::{Error, Result};
use crate::mesh::{BoundaryEdge, BoundaryParts, Element, Hierarchy, MacroLocation, Mesh, Parents};
use crate::precision::Precision;

/// Version of the layout in docs/hdf5.md, stored as the root attribute `schema_version`.
pub const SCHEMA_VERSION: u32 = 3;
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const GIT_REVISION: &str = env!("TENSORFEM_GIT_REVISION");

/// An HDF5 library error in words: when a system call failed (the library reports its
/// errno), the system's message and what to do, instead of the library's dump.
pub fn describe(e: &hdf5::Error) -> String {
    let text = e.to_string();
    let errno = text
        .split("errno = ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse::<i32>().ok());
    let Some(code) = errno else {
        return text.replace('\n', " ");
    };
    const EPERM: i32 = 1;
    const EACCES: i32 = 13;
    const EISDIR: i32 = 21;
    const ENOSPC: i32 = 28;
    const EROFS: i32 = 30;
    const EDQUOT: i32 = 122;
    let advice = match code {
        ENOSPC | EDQUOT => {
            ": the file system is full (or your quota is used up); free space there or write elsewhere"
        }
        EISDIR => ": a directory is in the way; move it or name another file",
        EPERM | EACCES => ": permission denied; choose a location you can write",
        EROFS => ": the file system is read-only; write elsewhere",
        _ => "",
    };
    format!("{}{advice}", std::io::Error::from_raw_os_error(code))
}

/// Turns an HDF5 library error into ours: in the file `path`, while doing `what` (a full
/// file system is named with the space left on it).
pub fn error_in(path: &Path, what: &str) -> impl Fn(hdf5::Error) -> Error {
    let (path, what) = (path.to_path_buf(), what.to_string());
    move |e| {
        let full = "the file system is full";
        let mut message = format!("{what}: {}", describe(&e));
        if message.contains(full) {
            message = message.replace(full, &format!("{full}{}", crate::sys::space_left(&path)));
        }
        Error::Hdf5 {
            path: path.clone(),
            message,
        }
    }
}

/// [`error_in`] the file of `loc`.
pub fn error_at(loc: &Location, what: &str) -> impl Fn(hdf5::Error) -> Error {
    error_in(Path::new(&loc.filename()), what)
}

/// An HDF5 file being written: under a temporary name until [`H5Writer::commit`].
pub struct H5Writer {
    file: Option<hdf5::File>,
    temporary: PathBuf,
    destination: PathBuf,
}

impl H5Writer {
    /// The file name of `path` and its folder, created if missing.
    fn name_and_folder(path: &Path) -> Result<(&std::ffi::OsStr, &Path)> {
        let name = path.file_name().ok_or_else(|| {
            Error::InvalidInput(format!("output path {} has no file name", path.display()))
        })?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|source| Error::Write {
            path: path.to_path_buf(),
            source,
        })?;
        Ok((name, dir))
    }

    /// Checks, before any work is done, that `path` can be written: it names a file, not a
    /// directory, and its folder exists or can be created and accepts a new file (tried
    /// with an empty probe file, removed again).
    pub fn check_destination(path: &Path) -> Result<()> {
        if path.is_dir() {
            return Err(Error::InvalidInput(format!(
                "output path {} is a directory; name a file in it, e.g. {}",
                path.display(),
                path.join("result.h5").display()
            )));
        }
        let (name, dir) = Self::name_and_folder(path)?;
        crate::sys::probe_writable(dir, &name.to_string_lossy()).map_err(|source| Error::Write {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Starts writing `path` (parent directories are created). A destination that cannot
    /// be replaced fails at [`H5Writer::commit`], leaving it as it was.
    pub fn create(path: &Path) -> Result<Self> {
        let (name, dir) = Self::name_and_folder(path)?;
        let temporary = dir.join(format!(
            ".{}.tmp-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        // Large datasets start on a page: readers can map them (the PSC operator cache).
        let file = hdf5::File::with_options()
            .with_fapl(|p| p.alignment(ALIGN_ABOVE, PAGE))
            .create(&temporary)
            .map_err(error_in(&temporary, "cannot create"))?;
        Ok(H5Writer {
            file: Some(file),
            temporary,
            destination: path.to_path_buf(),
        })
    }

    /// The root group.
    pub fn root(&self) -> &hdf5::File {
        self.file.as_ref().expect("file is open until commit")
    }

    /// Closes the file, syncs it to disk and renames it to its final name. On failure the
    /// temporary file is removed and the destination is left as it was.
    pub fn commit(mut self) -> Result<PathBuf> {
        let file = self.file.take().expect("file is open until commit");
        let result = self.finish(file);
        if result.is_err() {
            let _ = std::fs::remove_file(&self.temporary);
        }
        result
    }

    fn finish(&self, file: hdf5::File) -> Result<PathBuf> {
        file.flush()
            .map_err(error_in(&self.temporary, "writing it to disk"))?;
        file.close()
            .map_err(error_in(&self.temporary, "closing it"))?;
        let write_error = |source| Error::Write {
            path: self.destination.clone(),
            source,
        };
        std::fs::File::open(&self.temporary)
            .and_then(|f| f.sync_all())
            .map_err(write_error)?;
        std::fs::rename(&self.temporary, &self.destination).map_err(write_error)?;
        if let Some(dir) = self
            .destination
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            // Make the rename itself durable.
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(write_error)?;
        }
        Ok(self.destination.clone())
    }
}

impl Drop for H5Writer {
    /// An uncommitted file is removed: it never appears under the final name.
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            drop(file);
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

/// Opens an HDF5 file the user gave (`key`: the setting that names it). What makes it
/// unusable is bad input (exit 2), named with what to do: missing, a directory, empty, not
/// HDF5, or held open for writing by another process (HDF5's file locking; which process
/// holds it is named where /proc/locks tells).
pub fn open_input(path: &Path, key: &str) -> Result<hdf5::File> {
    let refuse = |why: String| {
        Err(Error::InvalidInput(format!(
            "{key} {}: {why}",
            path.display()
        )))
    };
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return refuse("no such file".into()),
        Err(e) => return refuse(format!("cannot be read ({e})")),
    };
    if meta.is_dir() {
        return refuse("is a directory; name the HDF5 file in it".into());
    }
    if meta.len() == 0 {
        return refuse(
            "is empty (0 bytes), not an HDF5 file: it was not written to the end; write it again (postprocess/build_rhs.py)".into(),
        );
    }
    match hdf5::File::open(path) {
        Ok(file) => Ok(file),
        Err(e) => {
            let text = e.to_string();
            if text.contains("errno = 11") || text.contains("unable to lock file") {
                let holder = lock_holder(path).map_or(String::new(), |h| format!(" (held by {h})"));
                refuse(format!(
                    "is held open for writing by another program{holder} (HDF5 file locking); wait until it has closed the file, or, if the file is complete and only held open, run with HDF5_USE_FILE_LOCKING=FALSE"
                ))
            } else if text.contains("file signature not found") {
                refuse("is not an HDF5 file (no HDF5 signature)".into())
            } else if text.contains("truncated file") {
                refuse("is truncated (shorter than its own header says): it was not written to the end; write it again".into())
            } else {
                refuse(describe(&e))
            }
        }
    }
}

/// The process holding a lock on `path`, from /proc/locks ("pid 123 (python3)"), if any.
fn lock_holder(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(path).ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = locks.lines().find_map(|line| {
        // "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234567 0 EOF"
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (pid, device_inode) = (fields.get(4)?, fields.get(5)?);
        let locked_inode: u64 = device_inode.rsplit(':').next()?.parse().ok()?;
        (locked_inode == inode).then(|| pid.to_string())
    })?;
    let command = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|c| c.replace('\0', " ").trim().to_string())
        .filter(|c| !c.is_empty());
    Some(match command {
        Some(command) => format!("pid {pid}: {command}"),
        None => format!("pid {pid}"),
    })
}

/// Opens an existing file for reading.
pub fn open(path: &Path) -> Result<hdf5::File> {
    if !path.exists() {
        return Err(Error::Read {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        });
    }
    hdf5::File::open(path).map_err(error_in(path, "cannot open"))
}

/// Datasets of at least this many bytes start at a multiple of [`PAGE`] in written files
/// (at most a page of padding each, under 0.4 %).
const ALIGN_ABOVE: u64 = 1 << 20;
const PAGE: u64 = 4096;

/// Writes a 1-D dataset.
pub fn write_vector<T: H5Type>(group: &Group, name: &str, data: &[T]) -> Result<Dataset> {
    let err = error_at(group, &format!("writing dataset {name}"));
    let ds = group
        .new_dataset::<T>()
        .shape([data.len()])
        .create(name)
        .map_err(&err)?;
    ds.write_raw(data).map_err(&err)?;
    Ok(ds)
}

/// Opens a dataset, checking that it holds `T` (no silent conversion) with `rank` axes.
fn open_typed<T: H5Type>(group: &Group, name: &str, rank: usize) -> Result<Dataset> {
    let ds = group
        .dataset(name)
        .map_err(error_at(group, &format!("dataset {name}")))?;
    let stored = ds
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(error_at(group, &format!("type of dataset {name}")))?;
    let wanted = T::type_descriptor();
    if stored != wanted {
        return Err(Error::Hdf5 {
            path: PathBuf::from(group.filename()),
            message: format!("dataset {name} holds {stored}, expected {wanted}"),
        });
    }
    if ds.ndim() != rank {
        return Err(Error::Hdf5 {
            path: PathBuf::from(group.filename()),
            message: format!(
                "dataset {name} has shape {:?}, expected {rank} axes",
                ds.shape()
            ),
        });
    }
    Ok(ds)
}

/// Reads a 1-D dataset of exactly type `T`.
pub fn read_vector<T: H5Type>(group: &Group, name: &str) -> Result<Vec<T>> {
    let ds = open_typed::<T>(group, name, 1)?;
    ds.read_raw()
        .map_err(error_at(group, &format!("reading dataset {name}")))
}

/// Where a dense matrix written by [`write_dense`] lies in its file: (rows, columns, byte
/// offset of its column-major values), the offset None unless the values are stored
/// contiguously, unfiltered and in this machine's byte order (so the file's bytes are the
/// values: they can be mapped instead of read).
pub fn dense_location<T: H5Type>(group: &Group, name: &str) -> Result<(usize, usize, Option<u64>)> {
    let ds = open_typed::<T>(group, name, 2)?;
    let shape = ds.shape();
    let native = ds.dtype().is_ok_and(|t| {
        t.byte_order()
            == if cfg!(target_endian = "little") {
                hdf5::datatype::ByteOrder::LittleEndian
            } else {
                hdf5::datatype::ByteOrder::BigEndian
            }
    });
    let offset = ds.offset().filter(|_| native && ds.filters().is_empty());
    Ok((shape[1], shape[0], offset))
}

/// Writes a column-major `nrows × ncols` matrix as the dataset shape `[ncols, nrows]`.
pub fn write_dense<T: H5Type>(
    group: &Group,
    name: &str,
    nrows: usize,
    ncols: usize,
    col_major: &[T],
) -> Result<Dataset> {
    write_dense_reporting(group, name, nrows, ncols, col_major, &|_| {})
}

/// Bytes of one slice a large dense matrix is written in.
const SLICE_BYTES: usize = 64 << 20;

/// [`write_dense`] in slices of columns of about 64 MiB, calling `report` with the bytes
/// of each slice written (an operator of gigabytes takes minutes on a slow file system).
pub fn write_dense_reporting<T: H5Type>(
    group: &Group,
    name: &str,
    nrows: usize,
    ncols: usize,
    col_major: &[T],
    report: &dyn Fn(usize),
) -> Result<Dataset> {
    assert_eq!(
        col_major.len(),
        nrows * ncols,
        "write_dense: data length is not nrows × ncols"
    );
    let err = error_at(group, &format!("writing dataset {name}"));
    let ds = group
        .new_dataset::<T>()
        .shape([ncols, nrows])
        .create(name)
        .map_err(&err)?;
    let column_bytes = nrows * std::mem::size_of::<T>();
    if ncols * column_bytes <= SLICE_BYTES || nrows == 0 {
        ds.write_raw(col_major).map_err(&err)?;
        report(ncols * column_bytes);
        return Ok(ds);
    }
    let per_slice = (SLICE_BYTES / column_bytes.max(1)).max(1);
    for first in (0..ncols).step_by(per_slice) {
        let count = per_slice.min(ncols - first);
        let values = &col_major[first * nrows..(first + count) * nrows];
        let view = ndarray::ArrayView2::from_shape((count, nrows), values).expect("shape");
        ds.write_slice(view, ndarray::s![first..first + count, ..])
            .map_err(&err)?;
        report(count * column_bytes);
    }
    Ok(ds)
}

/// Creates a `[columns, nodes]` dataset of solutions in `precision` (f64 or f32), one
/// column per chunk and, with `deflate` in 1..=9, gzip-compressed at that level after byte
/// shuffling. Fill it with [`write_block_rows`]. Campaign solutions.
pub fn create_block(
    group: &Group,
    name: &str,
    nodes: usize,
    columns: usize,
    precision: Precision,
    deflate: u8,
) -> Result<Dataset> {
    create_solutions(group, name, &[columns, nodes], precision, deflate)
}

/// A dataset of solutions of `shape` (columns first), one column per chunk when
/// compressed: [`create_block`]'s and [`write_vector_block`]'s.
fn create_solutions(
    group: &Group,
    name: &str,
    shape: &[usize],
    precision: Precision,
    deflate: u8,
) -> Result<Dataset> {
    fn create<T: H5Type>(
        group: &Group,
        name: &str,
        shape: &[usize],
        deflate: u8,
    ) -> hdf5::Result<Dataset> {
        let builder = group.new_dataset::<T>().shape(shape);
        let builder = if deflate > 0 && shape.iter().all(|&s| s > 0) {
            let mut chunk = shape.to_vec();
            chunk[0] = 1;
            builder.chunk(chunk).shuffle().deflate(deflate)
        } else {
            builder
        };
        builder.create(name)
    }
    match precision {
        Precision::F32 => create::<f32>(group, name, shape, deflate),
        _ => create::<f64>(group, name, shape, deflate),
    }
    .map_err(error_at(group, &format!("creating dataset {name}")))
}

/// Writes a block of vector fields, `components` values per node and `nodes` per column
/// (column after column, components interleaved), as a `[columns, nodes, components]`
/// dataset in `precision`, compressed as [`create_block`] says.
pub fn write_vector_block(
    group: &Group,
    name: &str,
    nodes: usize,
    components: usize,
    values: &[f64],
    precision: Precision,
    deflate: u8,
) -> Result<Dataset> {
    let columns = values.len() / (nodes * components).max(1);
    let ds = create_solutions(
        group,
        name,
        &[columns, nodes, components],
        precision,
        deflate,
    )?;
    let err = error_at(group, &format!("writing dataset {name}"));
    match precision {
        Precision::F32 => {
            let narrow: Vec<f32> = values.iter().map(|&v| v as f32).collect();
            ds.write_raw(&narrow).map_err(err)?
        }
        _ => ds.write_raw(values).map_err(err)?,
    }
    Ok(ds)
}

/// Writes the column-major block `values` (nodes × columns) into rows `first..` of a
/// dataset made by [`create_block`], converted to its `precision`.
pub fn write_block_rows(
    ds: &Dataset,
    first: usize,
    nodes: usize,
    values: &[f64],
    precision: Precision,
) -> Result<()> {
    let count = values.len() / nodes.max(1);
    let rows = ndarray::s![first..first + count, ..];
    let err = error_in(
        Path::new(&ds.filename()),
        &format!("writing rows {first}.. of {}", ds.name()),
    );
    match precision {
        Precision::F32 => {
            let narrow: Vec<f32> = values.iter().map(|&v| v as f32).collect();
            let view = ndarray::ArrayView2::from_shape((count, nodes), &narrow).expect("shape");
            ds.write_slice(view, rows).map_err(err)
        }
        _ => {
            let view = ndarray::ArrayView2::from_shape((count, nodes), values).expect("shape");
            ds.write_slice(view, rows).map_err(err)
        }
    }
}

/// [`create_block`] and [`write_block_rows`] for a whole block.
pub fn write_block(
    group: &Group,
    name: &str,
    nodes: usize,
    values: &[f64],
    precision: Precision,
    deflate: u8,
) -> Result<Dataset> {
    let columns = values.len() / nodes.max(1);
    let ds = create_block(group, name, nodes, columns, precision, deflate)?;
    write_block_rows(&ds, 0, nodes, values, precision)?;
    Ok(ds)
}

/// Reads a block written by [`write_block`] (f64 or f32 stored) as f64: (nodes, columns,
/// column-major data).
pub fn read_block(group: &Group, name: &str) -> Result<(usize, usize, Vec<f64>)> {
    let err = error_at(group, &format!("reading dataset {name}"));
    let ds = group.dataset(name).map_err(&err)?;
    let shape = ds.shape();
    if shape.len() != 2 {
        return Err(Error::Hdf5 {
            path: PathBuf::from(group.filename()),
            message: format!("dataset {name} has shape {shape:?}, expected 2 axes"),
        });
    }
    let data: Vec<f64> = ds.read_raw().map_err(&err)?;
    Ok((shape[1], shape[0], data))
}

/// Reads a matrix written by [`write_dense`]: (nrows, ncols, column-major data).
pub fn read_dense<T: H5Type>(group: &Group, name: &str) -> Result<(usize, usize, Vec<T>)> {
    let ds = open_typed::<T>(group, name, 2)?;
    let shape = ds.shape();
    let data = ds
        .read_raw()
        .map_err(error_at(group, &format!("reading dataset {name}")))?;
    Ok((shape[1], shape[0], data))
}

pub fn write_str_attr(loc: &Location, name: &str, value: &str) -> Result<()> {
    let err = error_at(loc, &format!("writing attribute {name}"));
    let v: VarLenUnicode = value
        .parse()
        .map_err(|_| Error::InvalidInput(format!("attribute {name}: text contains a NUL byte")))?;
    loc.new_attr::<VarLenUnicode>()
        .create(name)
        .map_err(&err)?
        .write_scalar(&v)
        .map_err(&err)
}

/// Writes a 1-D dataset of variable-length UTF-8 strings.
pub fn write_strings(group: &Group, name: &str, values: &[String]) -> Result<Dataset> {
    let v: Vec<VarLenUnicode> = values
        .iter()
        .map(|s| {
            s.parse().map_err(|_| {
                Error::InvalidInput(format!("dataset {name}: text contains a NUL byte"))
            })
        })
        .collect::<Result<_>>()?;
    write_vector(group, name, &v)
}

pub fn read_str_attr(loc: &Location, name: &str) -> Result<String> {
    let err = error_at(loc, &format!("reading attribute {name}"));
    let v: VarLenUnicode = loc.attr(name).map_err(&err)?.read_scalar().map_err(&err)?;
    Ok(v.as_str().to_string())
}

pub fn write_scalar_attr<T: H5Type>(loc: &Location, name: &str, value: T) -> Result<()> {
    let err = error_at(loc, &format!("writing attribute {name}"));
    loc.new_attr::<T>()
        .create(name)
        .map_err(&err)?
        .write_scalar(&value)
        .map_err(&err)
}

pub fn read_scalar_attr<T: H5Type>(loc: &Location, name: &str) -> Result<T> {
    let err = error_at(loc, &format!("reading attribute {name}"));
    loc.attr(name).map_err(&err)?.read_scalar().map_err(&err)
}

/// Root attributes every file carries: what wrote it, from which config, when.
pub fn write_provenance(file: &hdf5::File, config: Option<&str>) -> Result<()> {
    write_scalar_attr(file, "schema_version", SCHEMA_VERSION)?;
    write_str_attr(file, "tensorfem_version", VERSION)?;
    write_str_attr(file, "git_revision", GIT_REVISION)?;
    write_str_attr(file, "host", &crate::sys::hostname())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    write_scalar_attr(file, "created_unix_seconds", now)?;
    if let Some(config) = config {
        write_str_attr(file, "config", config)?;
    }
    Ok(())
}

const NO_PARENT: i64 = -1;

/// Writes a mesh into `group` (layout in docs/hdf5.md).
pub fn write_mesh<const D: usize>(group: &Group, mesh: &Mesh<D>) -> Result<()> {
    let k = mesh.element.nodes_per_cell();
    let coords: Vec<f64> = mesh.coords.iter().flatten().copied().collect();
    write_dense(group, "coordinates", D, mesh.num_nodes(), &coords)?;
    write_dense(group, "cells", k, mesh.num_cells(), &mesh.cells)?;
    let boundary: Vec<u8> = mesh.on_boundary.iter().map(|&b| u8::from(b)).collect();
    write_vector(group, "on_boundary", &boundary)?;
    write_str_attr(group, "element", mesh.element.name())?;
    write_scalar_attr(group, "cells_per_direction", mesh.n as u64)?;
    if !mesh.boundary.edges.is_empty() {
        let edges: Vec<u32> = mesh.boundary.edges.iter().flat_map(|e| e.nodes).collect();
        write_dense(
            group,
            "boundary_edges",
            2,
            mesh.boundary.edges.len(),
            &edges,
        )?;
        let parts: Vec<u16> = mesh.boundary.edges.iter().map(|e| e.part).collect();
        write_vector(group, "boundary_edge_part", &parts)?;
        write_str_attr(group, "boundary_parts", &mesh.boundary.names.join("\n"))?;
    }
    if let Some(h) = &mesh.hierarchy {
        let hg = group
            .create_group("hierarchy")
            .map_err(error_at(group, "creating group hierarchy"))?;
        if let Some(n0) = h.n0 {
            write_scalar_attr(&hg, "coarse_cells_per_direction", n0 as u64)?;
        }
        write_scalar_attr(&hg, "levels", h.levels as u64)?;
        write_scalar_attr(&hg, "macro_elements", h.macros as u64)?;
        let lattice: Vec<u32> = h.macro_lattice.iter().flatten().copied().collect();
        write_dense(&hg, "macro_lattice", 2, mesh.num_nodes(), &lattice)?;
        write_vector(&hg, "level", &h.level)?;
        let parents: Vec<i64> = h
            .parents
            .iter()
            .flat_map(|p| {
                let mut row = [NO_PARENT; 4];
                match p {
                    Parents::None => {}
                    Parents::Edge(e) => row[..2].copy_from_slice(&[e[0] as i64, e[1] as i64]),
                    Parents::Cell(c) => row = c.map(|v| v as i64),
                }
                row
            })
            .collect();
        write_dense(&hg, "parents", 4, mesh.num_nodes(), &parents)?;
        let (kinds, indices): (Vec<u8>, Vec<u32>) = h
            .location
            .iter()
            .map(|l| match *l {
                MacroLocation::Vertex(i) => (0, i),
                MacroLocation::Edge(i) => (1, i),
                MacroLocation::Interior(i) => (2, i),
            })
            .unzip();
        write_vector(&hg, "location_kind", &kinds)?;
        write_vector(&hg, "location_index", &indices)?;
        write_vector(&hg, "cell_macro", &h.cell_macro)?;
    }
    Ok(())
}

/// Reads a mesh written by [`write_mesh`], checking its consistency.
pub fn read_mesh<const D: usize>(group: &Group) -> Result<Mesh<D>> {
    let bad = |message: String| Error::Hdf5 {
        path: PathBuf::from(group.filename()),
        message,
    };
    let element = match read_str_attr(group, "element")?.as_str() {
        "q1" => Element::Q1,
        "p1" => Element::P1,
        "q1-hex" => Element::Q1Hex,
        other => return Err(bad(format!("unknown mesh element '{other}'"))),
    };
    if element.dim() != D {
        return Err(bad(format!(
            "mesh is {}-dimensional, expected {D}",
            element.dim()
        )));
    }
    let n = read_scalar_attr::<u64>(group, "cells_per_direction")? as usize;
    let (dim, nnodes, coords) = read_dense::<f64>(group, "coordinates")?;
    let (k, ncells, cells) = read_dense::<u32>(group, "cells")?;
    let boundary = read_vector::<u8>(group, "on_boundary")?;
    if dim != D || k != element.nodes_per_cell() || boundary.len() != nnodes {
        return Err(bad(format!(
            "mesh arrays disagree: coordinates {nnodes}×{dim}, cells {ncells}×{k}, on_boundary {}",
            boundary.len()
        )));
    }
    if cells.iter().any(|&v| v as usize >= nnodes) {
        return Err(bad("mesh cells refer to nodes that do not exist".into()));
    }
    let boundary_parts = if group.link_exists("boundary_edges") {
        let (_, _, nodes) = read_dense::<u32>(group, "boundary_edges")?;
        let parts = read_vector::<u16>(group, "boundary_edge_part")?;
        let names: Vec<String> = read_str_attr(group, "boundary_parts")?
            .lines()
            .map(String::from)
            .collect();
        if nodes.len() != 2 * parts.len()
            || nodes.iter().any(|&v| v as usize >= nnodes)
            || parts.iter().any(|&p| p as usize >= names.len())
        {
            return Err(bad("mesh boundary edges do not match the mesh".into()));
        }
        BoundaryParts {
            names,
            edges: nodes
                .chunks(2)
                .zip(parts)
                .map(|(n, part)| BoundaryEdge {
                    nodes: [n[0], n[1]],
                    part,
                })
                .collect(),
        }
    } else {
        BoundaryParts::default()
    };
    let hierarchy = if group.link_exists("hierarchy") {
        let hg = group
            .group("hierarchy")
            .map_err(error_at(group, "group hierarchy"))?;
        let level = read_vector::<u8>(&hg, "level")?;
        let (_, _, parents) = read_dense::<i64>(&hg, "parents")?;
        let kinds = read_vector::<u8>(&hg, "location_kind")?;
        let indices = read_vector::<u32>(&hg, "location_index")?;
        let cell_macro = read_vector::<u32>(&hg, "cell_macro")?;
        let (_, _, lattice) = read_dense::<u32>(&hg, "macro_lattice")?;
        if [
            level.len(),
            kinds.len(),
            indices.len(),
            parents.len() / 4,
            lattice.len() / 2,
        ] != [nnodes; 5]
            || cell_macro.len() != ncells
        {
            return Err(bad("mesh hierarchy arrays do not match the mesh".into()));
        }
        let parents = parents
            .chunks(4)
            .map(|p| match p.iter().filter(|&&v| v != NO_PARENT).count() {
                0 => Ok(Parents::None),
                2 => Ok(Parents::Edge([p[0] as u32, p[1] as u32])),
                4 => Ok(Parents::Cell([
                    p[0] as u32,
                    p[1] as u32,
                    p[2] as u32,
                    p[3] as u32,
                ])),
                _ => Err(bad("a hierarchy node has neither 0, 2 nor 4 parents".into())),
            })
            .collect::<Result<Vec<_>>>()?;
        let location = kinds
            .iter()
            .zip(&indices)
            .map(|(&kind, &i)| match kind {
                0 => Ok(MacroLocation::Vertex(i)),
                1 => Ok(MacroLocation::Edge(i)),
                2 => Ok(MacroLocation::Interior(i)),
                _ => Err(bad(format!("unknown location kind {kind}"))),
            })
            .collect::<Result<Vec<_>>>()?;
        let n0 = if hg.attr("coarse_cells_per_direction").is_ok() {
            Some(read_scalar_attr::<u64>(&hg, "coarse_cells_per_direction")? as usize)
        } else {
            None
        };
        Some(Hierarchy {
            n0,
            levels: read_scalar_attr::<u64>(&hg, "levels")? as usize,
            macros: read_scalar_attr::<u64>(&hg, "macro_elements")? as usize,
            level,
            parents,
            location,
            cell_macro,
            macro_lattice: lattice.chunks(2).map(|p| [p[0], p[1]]).collect(),
        })
    } else {
        None
    };
    Ok(Mesh {
        element,
        n,
        coords: coords
            .chunks(D)
            .map(|c| std::array::from_fn(|d| c[d]))
            .collect(),
        cells,
        on_boundary: boundary.iter().map(|&b| b != 0).collect(),
        hierarchy,
        boundary: boundary_parts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Library errors caused by the system (a full disk, a directory in the way) are named
    /// plainly, with what to do, and not as the library's dump.
    #[test]
    fn system_errors_are_named_plainly() {
        let full = hdf5::File::create("/dev/full")
            .and_then(|f| {
                f.new_dataset::<f64>()
                    .shape(1 << 16)
                    .create("x")?
                    .write(&vec![1.0; 1 << 16])?;
                f.flush()
            })
            .expect_err("/dev/full takes no data");
        let message = describe(&full);
        assert!(
            message.starts_with("No space left on device")
                && message.contains("the file system is full")
                && !message.contains("errno"),
            "{message}"
        );
        let dir = tempfile::tempdir().unwrap();
        let message = describe(&hdf5::File::create(dir.path()).expect_err("a directory"));
        assert!(
            message.contains("Is a directory") && message.contains("a directory is in the way"),
            "{message}"
        );
    }
}
