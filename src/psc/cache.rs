//! The PSC operator cache: a set-up saved to HDF5 in f64, keyed by a hash of everything it
//! depends on, with a checksum over its arrays. A run with the same key loads it (and says
//! so); an unreadable, corrupted or mismatching file is rebuilt, never used.
//!
//! Only f64 is stored: the working-precision operators are converted on load (one pass
//! over Π⁻¹), so one file serves f64, f32 and f16 runs alike.

use std::path::{Path, PathBuf};
use std::time::Instant;

use faer::Mat;

use super::{Group, HierarchicalBasis, PscSetup};
use crate::error::{Error, Result};
use crate::fem::assemble_poisson;
use crate::io::h5;
use crate::mesh::{unit_square_refined, Element};
use crate::sparse::Csr;

/// Version of the set-up algorithm and of this file layout: bump when either changes.
const SETUP_VERSION: u32 = 1;

/// What loading the cache did.
#[derive(Clone, Debug, PartialEq)]
pub enum CacheOutcome {
    Loaded(PathBuf),
    Built(PathBuf),
    /// A file with the key existed but could not be used (the reason), and was replaced.
    Rebuilt {
        path: PathBuf,
        reason: String,
    },
}

/// FNV-1a over 64-bit words: a stable hash (std's hasher may change between releases).
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(0x0000_0100_0000_01b3);
    }
    fn bytes(&mut self, b: &[u8]) {
        for chunk in b.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.word(u64::from_le_bytes(w));
        }
        self.word(b.len() as u64);
    }
    fn f64s(&mut self, v: &[f64]) {
        v.iter().for_each(|x| self.word(x.to_bits()));
        self.word(v.len() as u64);
    }
    fn u32s(&mut self, v: &[u32]) {
        v.iter().for_each(|&x| self.word(x as u64));
        self.word(v.len() as u64);
    }
}

fn cache_key(element: Element, n0: usize, levels: usize) -> (String, u64) {
    let key = format!(
        "tensorfem PSC set-up v{SETUP_VERSION}; crate {}; element {}; n0 {n0}; levels {levels}",
        env!("CARGO_PKG_VERSION"),
        element.name()
    );
    let mut h = Fnv::new();
    h.bytes(key.as_bytes());
    (key, h.0)
}

fn col_major(m: &Mat<f64>) -> Vec<f64> {
    (0..m.ncols())
        .flat_map(|j| m.col(j).iter().copied().collect::<Vec<_>>())
        .collect()
}

fn checksum(s: &PscSetup) -> u64 {
    let mut h = Fnv::new();
    for v in [&s.c_dofs, &s.e_dofs, &s.i_dofs] {
        h.u32s(v);
    }
    for m in [&s.l_c, &s.l_c_inv, &s.b, &s.pi_inv] {
        h.f64s(&col_major(m));
    }
    h.f64s(&s.scale_e);
    h.f64s(&s.scale_i);
    h.u32s(s.dt.col_idx());
    h.f64s(s.dt.values());
    for g in &s.groups {
        h.u32s(&g.macros);
        h.f64s(&col_major(&g.block));
        h.f64s(&col_major(&g.inverse));
    }
    h.0
}

/// A directory of cached set-ups.
pub struct OperatorCache {
    dir: PathBuf,
}

impl OperatorCache {
    pub fn new(dir: &Path) -> Self {
        OperatorCache {
            dir: dir.to_path_buf(),
        }
    }

    pub fn path_for(&self, element: Element, n0: usize, levels: usize) -> PathBuf {
        let (_, hash) = cache_key(element, n0, levels);
        self.dir.join(format!(
            "psc-{}-n{}-n0-{n0}-{hash:016x}.h5",
            element.name(),
            n0 << levels
        ))
    }

    /// The set-up from the cache, or built (and saved) when the cache has no usable copy.
    pub fn load_or_build(
        &self,
        element: Element,
        n0: usize,
        levels: usize,
    ) -> Result<(PscSetup, CacheOutcome)> {
        let path = self.path_for(element, n0, levels);
        let mut reason = None;
        if path.exists() {
            let t = Instant::now();
            match load(&path, element, n0, levels) {
                Ok(setup) => {
                    log::info!(
                        "PSC set-up loaded from the cache {} in {:.2} s",
                        path.display(),
                        t.elapsed().as_secs_f64()
                    );
                    return Ok((setup, CacheOutcome::Loaded(path)));
                }
                Err(e) => {
                    log::warn!(
                        "PSC cache {} is unusable ({e}); rebuilding it",
                        path.display()
                    );
                    reason = Some(e.to_string());
                }
            }
        }
        let setup = PscSetup::new(element, n0, levels)?;
        save(&path, &setup)?;
        log::info!("PSC set-up saved to the cache {}", path.display());
        Ok(match reason {
            Some(reason) => (setup, CacheOutcome::Rebuilt { path, reason }),
            None => (setup, CacheOutcome::Built(path)),
        })
    }
}

fn write_mat(group: &hdf5::Group, name: &str, m: &Mat<f64>) -> Result<()> {
    h5::write_dense(group, name, m.nrows(), m.ncols(), &col_major(m)).map(|_| ())
}

fn read_mat(group: &hdf5::Group, name: &str) -> Result<Mat<f64>> {
    let (r, c, data) = h5::read_dense::<f64>(group, name)?;
    Ok(Mat::from_fn(r, c, |i, j| data[i + j * r]))
}

/// Writes a set-up (atomically: a crash leaves no half-written cache file).
pub fn save(path: &Path, s: &PscSetup) -> Result<()> {
    let (key, _) = cache_key(s.element, s.n0, s.levels);
    let w = h5::H5Writer::create(path)?;
    let root = w.root();
    h5::write_provenance(root, None)?;
    h5::write_str_attr(root, "psc_key", &key)?;
    h5::write_str_attr(root, "checksum", &format!("{:016x}", checksum(s)))?;
    h5::write_scalar_attr(root, "a_ci_relative", s.a_ci_relative)?;
    h5::write_vector(root, "c_dofs", &s.c_dofs)?;
    h5::write_vector(root, "e_dofs", &s.e_dofs)?;
    h5::write_vector(root, "i_dofs", &s.i_dofs)?;
    h5::write_vector(root, "scale_e", &s.scale_e)?;
    h5::write_vector(root, "scale_i", &s.scale_i)?;
    write_mat(root, "l_c", &s.l_c)?;
    write_mat(root, "l_c_inv", &s.l_c_inv)?;
    write_mat(root, "b", &s.b)?;
    write_mat(root, "pi_inv", &s.pi_inv)?;
    let row_ptr: Vec<u64> = s.dt.row_ptr().iter().map(|&p| p as u64).collect();
    h5::write_vector(root, "dt_row_ptr", &row_ptr)?;
    h5::write_vector(root, "dt_col_idx", s.dt.col_idx())?;
    h5::write_vector(root, "dt_values", s.dt.values())?;
    h5::write_scalar_attr(root, "groups", s.groups.len() as u64)?;
    for (k, g) in s.groups.iter().enumerate() {
        let gg = root
            .create_group(&format!("group_{k}"))
            .map_err(|e| Error::Hdf5 {
                path: path.to_path_buf(),
                message: format!("creating group group_{k}: {e}"),
            })?;
        h5::write_vector(&gg, "macros", &g.macros)?;
        write_mat(&gg, "block", &g.block)?;
        write_mat(&gg, "inverse", &g.inverse)?;
    }
    w.commit()?;
    Ok(())
}

/// Reads a set-up, checking its key and checksum.
pub fn load(path: &Path, element: Element, n0: usize, levels: usize) -> Result<PscSetup> {
    let bad = |message: String| Error::Hdf5 {
        path: path.to_path_buf(),
        message,
    };
    let f = h5::open(path)?;
    let (key, _) = cache_key(element, n0, levels);
    let stored_key = h5::read_str_attr(&f, "psc_key")?;
    if stored_key != key {
        return Err(bad(format!(
            "the cache holds '{stored_key}', expected '{key}'"
        )));
    }
    let groups = (0..h5::read_scalar_attr::<u64>(&f, "groups")? as usize)
        .map(|k| {
            let g = f
                .group(&format!("group_{k}"))
                .map_err(|e| bad(format!("group_{k}: {e}")))?;
            Ok(Group {
                macros: h5::read_vector(&g, "macros")?,
                block: read_mat(&g, "block")?,
                inverse: read_mat(&g, "inverse")?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mesh = unit_square_refined(n0, levels, element)?;
    let hb = HierarchicalBasis::new(&mesh)?;
    let stiffness = assemble_poisson(&mesh, |_| 0.0)?.matrix;
    let e_dofs: Vec<u32> = h5::read_vector(&f, "e_dofs")?;
    let i_dofs: Vec<u32> = h5::read_vector(&f, "i_dofs")?;
    let row_ptr: Vec<usize> = h5::read_vector::<u64>(&f, "dt_row_ptr")?
        .iter()
        .map(|&p| p as usize)
        .collect();
    let dt = Csr::new(
        i_dofs.len(),
        e_dofs.len(),
        row_ptr,
        h5::read_vector(&f, "dt_col_idx")?,
        h5::read_vector(&f, "dt_values")?,
    )?;
    let setup = PscSetup {
        element,
        n: n0 << levels,
        n0,
        levels,
        hb,
        stiffness,
        c_dofs: h5::read_vector(&f, "c_dofs")?,
        e_dofs,
        i_dofs,
        l_c: read_mat(&f, "l_c")?,
        l_c_inv: read_mat(&f, "l_c_inv")?,
        scale_e: h5::read_vector(&f, "scale_e")?,
        scale_i: h5::read_vector(&f, "scale_i")?,
        b: read_mat(&f, "b")?,
        d: dt.transpose(),
        dt,
        groups,
        pi_inv: read_mat(&f, "pi_inv")?,
        a_ci_relative: h5::read_scalar_attr(&f, "a_ci_relative")?,
    };
    let stored = h5::read_str_attr(&f, "checksum")?;
    let actual = format!("{:016x}", checksum(&setup));
    if stored != actual {
        return Err(bad(format!(
            "checksum mismatch (stored {stored}, computed {actual}): the file is corrupted"
        )));
    }
    let (nc, ne, ni) = (setup.c_dofs.len(), setup.e_dofs.len(), setup.i_dofs.len());
    if nc + ne + ni != setup.num_unknowns()
        || setup.pi_inv.nrows() != ne
        || setup.b.shape() != (nc, ne)
    {
        return Err(bad("array sizes do not fit the mesh".into()));
    }
    Ok(setup)
}
