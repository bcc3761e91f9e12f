//! Right-hand sides from a user's HDF5 file: a dataset of shape [columns, unknowns] (h5py:
//! `f["rhs"][j]` is column j), float64 or float32, every entry finite. It is checked whole
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

pub struct InputColumns {
    path: PathBuf,
    dataset: String,
    pub columns: usize,
    unknowns: usize,
    /// xxh3-64 of every value (as f64, file order), when the dataset was scanned.
    pub content: Option<u64>,
}

impl InputColumns {
    /// Opens and checks the dataset: type and shape against the mesh's unknowns; with
    /// `scan`, also that every entry is finite, hashing them (rank 0 scans; the others trust
    /// its verdict).
    pub fn open(path: &Path, dataset: &str, unknowns: usize, scan: bool) -> Result<InputColumns> {
        let file = crate::io::h5::open(path)?;
        let ds = file.dataset(dataset).map_err(|_| {
            Error::InvalidInput(format!(
                "{}: no dataset '{dataset}' (campaign.input.dataset)",
                path.display()
            ))
        })?;
        let dtype = ds
            .dtype()
            .and_then(|t| t.to_descriptor())
            .map_err(crate::io::h5::error_in(path, &format!("type of {dataset}")))?;
        if !matches!(dtype, TypeDescriptor::Float(FloatSize::U8 | FloatSize::U4)) {
            return Err(Error::InvalidInput(format!(
                "{}: dataset '{dataset}' holds {dtype}; right-hand sides must be float64 or float32",
                path.display()
            )));
        }
        let shape = ds.shape();
        if shape.len() != 2 || shape[1] != unknowns || shape[0] == 0 {
            return Err(Error::InvalidInput(format!(
                "{}: dataset '{dataset}' has shape {shape:?}; expected [columns ≥ 1, {unknowns}] (one load vector of the mesh's {unknowns} interior unknowns per row)",
                path.display()
            )));
        }
        let mut input = InputColumns {
            path: path.to_path_buf(),
            dataset: dataset.to_string(),
            columns: shape[0],
            unknowns,
            content: None,
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
            hash.update(bytemuck::cast_slice(&block));
            start = end;
        }
        input.content = Some(hash.digest());
        Ok(input)
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
