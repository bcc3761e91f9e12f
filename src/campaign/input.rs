//! Right-hand sides from a user's HDF5 file: a dataset of shape [columns, load nodes] (h5py:
//! `f["rhs"][j]` is column j; the load nodes are the nodes off the Dirichlet parts, see
//! docs/hdf5.md), float64 or float32, every entry finite; with Dirichlet values per node
//! (`value = "hdf5"`), also the dataset `dirichlet` of shape [Dirichlet nodes] (one vector
//! for the whole campaign) or [columns, Dirichlet nodes] (one per column). It is checked whole
//! before any work starts (and hashed: the plan's fingerprint covers the values, so a
//! campaign does not resume over a rewritten file); batches then read only their own rows.
//! The check costs one read of the whole dataset by rank 0 at every start (the hash itself
//! runs at tens of GB/s; the read is the file system's speed).

use std::path::{Path, PathBuf};

use hdf5::types::{FloatSize, TypeDescriptor};

use crate::error::{Error, Result};

/// Bytes read at a time while checking the whole dataset (at least one row): small enough
/// that the buffer is reused from the allocator instead of faulted in anew.
const CHECK_BYTES: usize = 16 << 20;

/// The dataset of Dirichlet values per node, when the conditions read them from the file.
const DIRICHLET: &str = "dirichlet";

pub struct InputColumns {
    path: PathBuf,
    dataset: String,
    pub columns: usize,
    unknowns: usize,
    /// Values per Dirichlet node and whether there is one vector per column.
    dirichlet: Option<(usize, bool)>,
    /// xxh3-64 of every value (as f64, file order), when the dataset was scanned.
    pub content: Option<u64>,
    /// The root attribute `mesh_fingerprint`: the mesh the file was built for (written by
    /// postprocess/build_rhs.py from `tensorfem mesh`), when it says.
    pub mesh_fingerprint: Option<String>,
}

impl InputColumns {
    /// Opens and checks the dataset: type and shape against the mesh's load nodes
    /// (`unknowns`), and the `dirichlet` dataset's against its Dirichlet nodes when the
    /// conditions read it (`dirichlet_nodes`); with `scan`, also that every entry is finite,
    /// hashing them (rank 0 scans; the others trust its verdict).
    pub fn open(
        path: &Path,
        dataset: &str,
        unknowns: usize,
        dirichlet_nodes: Option<usize>,
        scan: bool,
    ) -> Result<InputColumns> {
        let file = crate::io::h5::open_input(path, "campaign.input.path")?;
        let ds = file.dataset(dataset).map_err(|_| {
            Error::InvalidInput(format!(
                "{}: no dataset '{dataset}' (campaign.input.dataset)",
                path.display()
            ))
        })?;
        check_float(path, dataset, &ds)?;
        let shape = ds.shape();
        if shape.len() != 2 || shape[1] != unknowns || shape[0] == 0 {
            return Err(Error::InvalidInput(format!(
                "{}: dataset '{dataset}' has shape {shape:?}; expected [columns ≥ 1, {unknowns}] (one load vector on the mesh's {unknowns} load nodes per row: the nodes off the Dirichlet parts, docs/hdf5.md)",
                path.display()
            )));
        }
        let columns = shape[0];
        let dirichlet = match dirichlet_nodes {
            None => None,
            Some(d) => {
                let ds = file.dataset(DIRICHLET).map_err(|_| {
                    Error::InvalidInput(format!(
                        "{}: no dataset '{DIRICHLET}': [boundary] reads the Dirichlet values per node (value = \"hdf5\"), shape [{d}] or [{columns}, {d}]",
                        path.display()
                    ))
                })?;
                check_float(path, DIRICHLET, &ds)?;
                match ds.shape().as_slice() {
                    [n] if *n == d => Some((d, false)),
                    [c, n] if *c == columns && *n == d => Some((d, true)),
                    other => {
                        return Err(Error::InvalidInput(format!(
                            "{}: dataset '{DIRICHLET}' has shape {other:?}; expected [{d}] (one value per Dirichlet node for every column) or [{columns}, {d}] (one row per column)",
                            path.display()
                        )))
                    }
                }
            }
        };
        let mut input = InputColumns {
            path: path.to_path_buf(),
            dataset: dataset.to_string(),
            columns,
            unknowns,
            dirichlet,
            content: None,
            mesh_fingerprint: file
                .attr("mesh_fingerprint")
                .ok()
                .and(crate::io::h5::read_str_attr(&file, "mesh_fingerprint").ok()),
        };
        if !scan {
            return Ok(input);
        }
        let mut hash = xxhash_rust::xxh3::Xxh3::new();
        let mut start = 0;
        while start < input.columns {
            let rows = (CHECK_BYTES / (8 * unknowns)).max(1);
            let end = (start + rows).min(input.columns);
            let block = input.read(start..end)?;
            if let Some(i) = block.iter().position(|v| !v.is_finite()) {
                return Err(Error::InvalidInput(format!(
                    "{}: dataset '{dataset}' column {} entry {} is {} (right-hand sides must be finite)",
                    path.display(),
                    start + i / unknowns,
                    i % unknowns,
                    block[i]
                )));
            }
            for (c, column) in block.chunks(unknowns).enumerate() {
                let largest = column.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                if largest > 0.0 && largest < f64::MIN_POSITIVE {
                    return Err(Error::InvalidInput(format!(
                        "{}: dataset '{dataset}' column {}: its largest magnitude {largest:.3e} is subnormal (below f64's smallest normal number {:.3e}), so it holds fewer than 53 significant bits and no solution can be checked to a relative tolerance; multiply the loads by a power of ten (the solution scales with them)",
                        path.display(),
                        start + c,
                        f64::MIN_POSITIVE
                    )));
                }
            }
            hash.update(bytemuck::cast_slice(&block));
            start = end;
        }
        if let Some((_, per_column)) = input.dirichlet {
            let all = if per_column {
                input.read_dirichlet(0..input.columns)?
            } else {
                input.read_dirichlet(0..1)?
            };
            let values = all.unwrap_or_default();
            if let Some(i) = values.iter().position(|v| !v.is_finite()) {
                return Err(Error::InvalidInput(format!(
                    "{}: dataset '{DIRICHLET}' entry {i} is {} (Dirichlet values must be finite)",
                    path.display(),
                    values[i]
                )));
            }
            hash.update(bytemuck::cast_slice(&values));
            input.content = Some(hash.digest());
        } else {
            input.content = Some(hash.digest());
        }
        Ok(input)
    }

    /// The Dirichlet values of columns `range`: one vector for all of them, or one per
    /// column (Dirichlet nodes × len); None when the conditions do not read them.
    pub fn read_dirichlet(&self, range: std::ops::Range<usize>) -> Result<Option<Vec<f64>>> {
        let Some((_, per_column)) = self.dirichlet else {
            return Ok(None);
        };
        let file = crate::io::h5::open(&self.path)?;
        let ds = file
            .dataset(DIRICHLET)
            .map_err(crate::io::h5::error_in(&self.path, DIRICHLET))?;
        let what = format!("reading {DIRICHLET}");
        let values = if per_column {
            let rows = ds
                .read_slice_2d::<f64, _>(ndarray::s![range, ..])
                .map_err(crate::io::h5::error_in(&self.path, &what))?;
            rows.iter().copied().collect()
        } else {
            ds.read_raw::<f64>()
                .map_err(crate::io::h5::error_in(&self.path, &what))?
        };
        Ok(Some(values))
    }

    /// Columns `range`, column-major (unknowns × len), in f64.
    pub fn read(&self, range: std::ops::Range<usize>) -> Result<Vec<f64>> {
        let file = crate::io::h5::open(&self.path)?;
        let ds = file
            .dataset(&self.dataset)
            .map_err(crate::io::h5::error_in(
                &self.path,
                &format!("dataset {}", self.dataset),
            ))?;
        let rows = ds
            .read_slice_2d::<f64, _>(ndarray::s![range.clone(), ..])
            .map_err(crate::io::h5::error_in(
                &self.path,
                &format!("reading columns {range:?} of {}", self.dataset),
            ))?;
        debug_assert_eq!(rows.ncols(), self.unknowns);
        // A freshly read array is in standard (row-major) layout: its buffer is the block.
        Ok(if rows.is_standard_layout() {
            rows.into_raw_vec_and_offset().0
        } else {
            rows.iter().copied().collect()
        })
    }
}

/// Refuses a dataset that is not float64 or float32.
fn check_float(path: &Path, name: &str, ds: &hdf5::Dataset) -> Result<()> {
    let dtype = ds
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(crate::io::h5::error_in(path, &format!("type of {name}")))?;
    if !matches!(dtype, TypeDescriptor::Float(FloatSize::U8 | FloatSize::U4)) {
        return Err(Error::InvalidInput(format!(
            "{}: dataset '{name}' holds {dtype}; right-hand sides and boundary values must be float64 or float32",
            path.display()
        )));
    }
    Ok(())
}
