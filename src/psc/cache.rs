//! The PSC operator cache: a set-up saved to HDF5 in f64, keyed by a hash of everything it
//! depends on, with a checksum over its arrays. A run with the same key loads it (and says
//! so); an unreadable, corrupted or mismatching file is rebuilt, never used.
//!
//! A set-up is of one PSC method (the key names it): M1's file holds Π⁻¹, M2's Λ⁻¹ and
//! Θ⁻¹, M3's the sparse E. Besides the f64 set-up, the file holds the method's operators
//! (B, C_g⁻¹, Dᵀ and its own) in the working precision of the run that wrote it, under
//! `working/<precision>` with their own checksum: a run in that precision reads only those
//! (an f16 run reads a quarter of the bytes of the f64 Π⁻¹). A run in another precision
//! converts from f64 and rewrites the file with its own copies beside the ones it had (each
//! verified before it is kept), so runs alternating between precisions load both.
//!
//! A working copy has two checksums: one over its dense inverses (M1's Π⁻¹, M2's Λ⁻¹ and
//! Θ⁻¹: nearly all its bytes) and one over the rest. The rest is verified on every load.
//! The inverses are verified on load when they give the solution directly, and only after
//! a failure when they precondition f64 refinement ([`InverseCheck`]).

use std::path::{Path, PathBuf};
use std::time::Instant;

use bytemuck::Pod;
use faer::Mat;
use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

use half::f16;
use hdf5::H5Type;

use super::operator::{dense_col_major, Parts};
use super::{HierarchicalBasis, MacroGroup, PscHost, PscMethod, PscSetup, Schur, SchurHost};
use crate::device::{DenseInverse, HostArray, OnHost, Storage};
use crate::error::{Error, Result};
use crate::fem::assemble_stiffness;
use crate::io::h5;
use crate::mesh::{Element, Mesh2d};
use crate::precision::{Precision, Stored};
use crate::sparse::{Csr, SparseRows};

/// Version of the set-up algorithm and of this file layout: bump when either changes
/// (4: the working copy's dense inverses have a checksum of their own).
const SETUP_VERSION: u32 = 4;

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

/// When a working copy's dense inverses are checked against their checksum: a read of
/// them, about what one product with them costs (Π⁻¹ of h = 1/256 in f32 is 207 MB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InverseCheck {
    /// On loading, with the rest: the inverses give the solution directly (PSC alone).
    OnLoad,
    /// Only when a solve fails ([`UncheckedInverses::intact`]): inside f64 refinement the
    /// inverses precondition, and every solution is accepted by its f64 residual with the
    /// stiffness matrix the run assembles itself. A corrupted inverse can slow or stop the
    /// refinement, never change an accepted solution; the check then tells corruption
    /// apart from a problem the method cannot solve.
    OnFailure,
}

/// The dense inverses of a cache file's working copy, loaded without their checksum
/// verified ([`InverseCheck::OnFailure`]).
#[derive(Clone, Debug)]
pub struct UncheckedInverses {
    path: PathBuf,
    method: PscMethod,
    precision: Precision,
    checksum: String,
}

impl UncheckedInverses {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file's inverses still have their checksum (read and hashed again: the
    /// file, not a copy on a device).
    pub fn intact(&self) -> Result<bool> {
        let actual = match self.precision {
            Precision::F64 => stored_inverses_checksum::<f64>(&self.path, self.method)?,
            Precision::F32 | Precision::Tf32 => {
                stored_inverses_checksum::<f32>(&self.path, self.method)?
            }
            Precision::F16 => stored_inverses_checksum::<f16>(&self.path, self.method)?,
        };
        Ok(actual.map(|c| format!("{c:016x}")).as_ref() == Some(&self.checksum))
    }
}

/// The checksum of the dense inverses of the working copy in S of the file at `path`.
fn stored_inverses_checksum<S: Storage + H5Type>(
    path: &Path,
    method: PscMethod,
) -> Result<Option<u64>> {
    let f = h5::open(path)?;
    let mapped = MappedFile {
        path,
        file: std::fs::File::open(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?,
    };
    let wg = f
        .group(&format!("working/{}", S::PRECISION))
        .map_err(h5::error_in(path, "opening the working copy"))?;
    let inverses = inverse_names(method)
        .iter()
        .map(|name| read_operator::<S>(&mapped, &wg, name).map(|(_, _, data)| data))
        .collect::<Result<Vec<_>>>()?;
    let views: Vec<&[S]> = inverses.iter().map(|a| &a[..]).collect();
    Ok(inverses_checksum(&views))
}

/// The datasets of a method's dense inverses in a working copy.
fn inverse_names(method: PscMethod) -> &'static [&'static str] {
    match method {
        PscMethod::M1 => &["pi_inv"],
        PscMethod::M2 => &["lambda_inv", "theta_inv"],
        PscMethod::M3 => &[],
    }
}

/// A working copy's dense inverses, in the order of [`inverse_names`].
fn dense_inverses<S: Storage>(schur: &SchurHost<S>) -> Vec<&[S]> {
    match schur {
        SchurHost::M1 { pi_inv } => vec![pi_inv],
        SchurHost::M2 {
            lambda_inv,
            theta_inv,
        } => vec![lambda_inv, theta_inv],
        SchurHost::M3 { .. } => Vec::new(),
    }
}

/// Bytes per piece of an array's checksum.
const HASH_PIECE: usize = 1 << 22;

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
    /// An array's bytes: xxh3 of fixed pieces, in parallel, folded in order (the same
    /// value on any number of threads, at memory speed: a 207 MB inverse in about 20 ms,
    /// where a word-by-word FNV took 60).
    fn array<T: Pod + Sync>(&mut self, v: &[T]) {
        let pieces: Vec<u64> = bytemuck::cast_slice::<T, u8>(v)
            .par_chunks(HASH_PIECE)
            .map(xxh3_64)
            .collect();
        pieces.into_iter().for_each(|p| self.word(p));
        self.word(v.len() as u64);
    }
}

/// What a cached set-up is of: a text naming everything the set-up depends on (stored in
/// the file and compared on loading) and the readable part of the file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetupKey {
    text: String,
    name: String,
}

impl SetupKey {
    /// `method` on the unit square refined `levels` times from n0×n0 cells, u = 0 on its
    /// boundary.
    pub fn unit_square(element: Element, n0: usize, levels: usize, method: PscMethod) -> Self {
        SetupKey {
            text: format!(
                "tensorfem PSC set-up v{SETUP_VERSION}; crate {}; method {}; element {}; n0 {n0}; levels {levels}",
                env!("CARGO_PKG_VERSION"),
                method.name(),
                element.name()
            ),
            name: format!(
                "psc-{}-{}-n{}-n0-{n0}",
                method.name(),
                element.name(),
                n0 << levels
            ),
        }
    }

    /// `method` on any other mesh and conditions: `identity` names them completely (the
    /// coarse mesh's content, the levels, the condition of every boundary part), `name` is
    /// readable.
    pub fn described(element: Element, method: PscMethod, identity: &str, name: &str) -> Self {
        SetupKey {
            text: format!(
                "tensorfem PSC set-up v{SETUP_VERSION}; crate {}; method {}; element {}; {identity}",
                env!("CARGO_PKG_VERSION"),
                method.name(),
                element.name()
            ),
            name: format!("psc-{}-{}-{name}", method.name(), element.name()),
        }
    }

    fn hash(&self) -> u64 {
        let mut h = Fnv::new();
        h.bytes(self.text.as_bytes());
        h.0
    }
}

/// n, n0 (the unit square's, with its grid transform) and levels of a set-up on `mesh`.
fn shape(mesh: &Mesh2d, hb: &HierarchicalBasis) -> Result<(usize, Option<usize>, usize)> {
    let h = mesh
        .hierarchy
        .as_ref()
        .ok_or_else(|| Error::InvalidInput("PSC needs a mesh refined from a coarse mesh".into()))?;
    let n0 = match hb {
        HierarchicalBasis::Grid(_) => h.n0,
        HierarchicalBasis::Levels(_) => None,
    };
    Ok((mesh.n, n0, h.levels))
}

fn hash_csr<S: Storage>(h: &mut Fnv, m: &Csr<S>) {
    h.word(m.nrows() as u64);
    h.word(m.ncols() as u64);
    let row_ptr: Vec<u64> = m.row_ptr().iter().map(|&p| p as u64).collect();
    h.array(&row_ptr);
    h.array(m.col_idx());
    h.array(m.values());
}

fn checksum(s: &PscSetup) -> u64 {
    let mut h = Fnv::new();
    for v in [&s.c_dofs, &s.e_dofs, &s.i_dofs] {
        h.array(v);
    }
    for m in [&s.l_c, &s.l_c_inv, &s.b] {
        h.array(&dense_col_major(m));
    }
    match &s.schur {
        Schur::M1 { pi_inv } => h.array(&dense_col_major(pi_inv)),
        Schur::M2 {
            lambda_inv,
            theta_inv,
        } => {
            h.array(&dense_col_major(lambda_inv));
            h.array(&dense_col_major(theta_inv));
        }
        Schur::M3 { e } => hash_csr(&mut h, e),
    }
    h.array(&s.scale_e);
    h.array(&s.scale_i);
    h.array(s.dt.col_idx());
    h.array(s.dt.values());
    for g in &s.groups {
        h.array(&g.macros);
        h.array(&dense_col_major(&g.block));
        h.array(&dense_col_major(&g.inverse));
    }
    h.0
}

/// A directory of cached set-ups.
pub struct OperatorCache {
    dir: PathBuf,
    /// Where a set-up it computes inverts its dense matrices (the host unless told).
    dense: Box<dyn DenseInverse + Send + Sync>,
}

impl OperatorCache {
    pub fn new(dir: &Path) -> Self {
        OperatorCache {
            dir: dir.to_path_buf(),
            dense: Box::new(OnHost),
        }
    }

    /// Set-ups it computes invert their dense matrices on `dense` (a GPU).
    pub fn inverting_on(self, dense: impl DenseInverse + Send + Sync + 'static) -> Self {
        OperatorCache {
            dense: Box::new(dense),
            ..self
        }
    }

    pub fn path_for(&self, key: &SetupKey) -> PathBuf {
        self.dir
            .join(format!("{}-{:016x}.h5", key.name, key.hash()))
    }

    /// Reads the f64 set-up at `path`; on failure, why (logged), and nothing.
    fn try_load(path: &Path, key: &SetupKey, mesh: &Mesh2d) -> (Option<PscSetup>, Option<String>) {
        if !path.exists() {
            return (None, None);
        }
        let t = Instant::now();
        match load(path, key, mesh) {
            Ok(setup) => {
                log::info!(
                    "PSC set-up loaded from the cache {} in {:.2} s",
                    path.display(),
                    t.elapsed().as_secs_f64()
                );
                (Some(setup), None)
            }
            Err(e) => {
                log::warn!(
                    "PSC cache {} is unusable ({e}); rebuilding it",
                    path.display()
                );
                (None, Some(e.to_string()))
            }
        }
    }

    fn outcome(path: PathBuf, loaded: bool, reason: Option<String>) -> CacheOutcome {
        match (loaded, reason) {
            (true, _) => CacheOutcome::Loaded(path),
            (false, Some(reason)) => CacheOutcome::Rebuilt { path, reason },
            (false, None) => CacheOutcome::Built(path),
        }
    }

    /// The f64 set-up of `method` on `mesh` (what `key` names) from the cache, or built
    /// (and saved) when the cache has no usable copy.
    pub fn load_or_build(
        &self,
        key: &SetupKey,
        mesh: &Mesh2d,
        method: PscMethod,
    ) -> Result<(PscSetup, CacheOutcome)> {
        let path = self.path_for(key);
        let (loaded, reason) = Self::try_load(&path, key, mesh);
        if let Some(setup) = loaded {
            return Ok((setup, CacheOutcome::Loaded(path)));
        }
        let setup = PscSetup::on_mesh_inverting_on(mesh.clone(), method, self.dense.as_ref())?;
        save::<f64>(&path, key, &setup, None, &KeptCopies::default())?;
        log::info!("PSC set-up saved to the cache {}", path.display());
        Ok((setup, Self::outcome(path, false, reason)))
    }

    /// The method's operators in precision S: straight from the cache's copies in S when
    /// it has them (with their dense inverses still to check where `check` says so); else
    /// from its f64 set-up, or computed; in both cases the file is (re)written with copies
    /// in S (and, beside an f64 set-up it loaded, the copies in other precisions it had).
    pub fn load_or_build_host<S: Storage + H5Type>(
        &self,
        key: &SetupKey,
        mesh: &Mesh2d,
        method: PscMethod,
        check: InverseCheck,
    ) -> Result<(PscHost<S>, CacheOutcome, Option<UncheckedInverses>)> {
        let path = self.path_for(key);
        if path.exists() {
            let t = Instant::now();
            match load_host::<S>(&path, key, mesh, check) {
                Ok(Some((host, unchecked))) => {
                    log::info!(
                        "PSC operators in {} loaded from the cache {} in {:.2} s",
                        S::PRECISION,
                        path.display(),
                        t.elapsed().as_secs_f64()
                    );
                    return Ok((host, CacheOutcome::Loaded(path), unchecked));
                }
                Ok(None) => log::info!(
                    "the cache {} has no {} operators: converting from f64",
                    path.display(),
                    S::PRECISION
                ),
                Err(e) => log::warn!(
                    "the {} operators in the cache {} are unusable ({e})",
                    S::PRECISION,
                    path.display()
                ),
            }
        }
        let (loaded, reason) = Self::try_load(&path, key, mesh);
        let was_loaded = loaded.is_some();
        // The other precisions' copies are kept only beside the f64 set-up they came from.
        let kept = match was_loaded {
            true => KeptCopies::read(&path, key, mesh, S::PRECISION),
            false => KeptCopies::default(),
        };
        let setup = match loaded {
            Some(setup) => setup,
            None => PscSetup::on_mesh_inverting_on(mesh.clone(), method, self.dense.as_ref())?,
        };
        let host = PscHost::<S>::new(&setup)?;
        save(&path, key, &setup, Some(&host), &kept)?;
        log::info!(
            "PSC set-up and its {} operators saved to the cache {}",
            S::PRECISION,
            path.display()
        );
        Ok((host, Self::outcome(path, was_loaded, reason), None))
    }
}

/// Checksum over everything [`load_host`] reads but the dense inverses.
fn parts_checksum<S: Storage>(
    s: &PscSetup,
    schur: &SchurHost<S>,
    b: &[S],
    c_inv: &[HostArray<S>],
    dt_values: &[S],
) -> u64 {
    let mut h = Fnv::new();
    for v in [&s.c_dofs, &s.e_dofs, &s.i_dofs] {
        h.array(v);
    }
    h.array(&dense_col_major(&s.l_c_inv));
    h.array(&s.scale_e);
    h.array(&s.scale_i);
    h.array(s.dt.col_idx());
    for g in &s.groups {
        h.word(g.macros.len() as u64);
    }
    if let SchurHost::M3 { e } = schur {
        hash_csr(&mut h, e);
    }
    h.array(b);
    c_inv.iter().for_each(|c| h.array(c));
    h.array(dt_values);
    h.0
}

/// Checksum of a working copy's dense inverses; None for a method without any.
fn inverses_checksum<S: Storage>(inverses: &[&[S]]) -> Option<u64> {
    if inverses.is_empty() {
        return None;
    }
    let mut h = Fnv::new();
    inverses.iter().for_each(|a| h.array(a));
    Some(h.0)
}

fn write_mat(
    group: &hdf5::Group,
    name: &str,
    m: &Mat<f64>,
    progress: &crate::progress::Progress,
) -> Result<()> {
    progress.stage(name);
    let data = dense_col_major(m);
    let report = |bytes: usize| progress.advance(bytes as f64);
    h5::write_dense_reporting(group, name, m.nrows(), m.ncols(), &data, &report).map(|_| ())
}

/// A dense size × size operator in precision S; another shape is `bad`.
fn read_square<S: Storage + H5Type>(
    file: &MappedFile,
    group: &hdf5::Group,
    name: &str,
    size: usize,
    bad: impl Fn(String) -> Error,
) -> Result<HostArray<S>> {
    let (rows, cols, data) = read_operator::<S>(file, group, name)?;
    if rows != size || cols != size {
        return Err(bad(format!(
            "{name} is {rows}×{cols}, the mesh needs {size}×{size}"
        )));
    }
    Ok(data)
}

/// The cache file opened for mapping.
struct MappedFile<'a> {
    path: &'a Path,
    file: std::fs::File,
}

/// A dense working operator (rows, columns, values): mapped from the file where it lies
/// contiguously and aligned (files written since set-up v3) and the file system maps
/// files, else read. A file changed between the HDF5 open and this one fails the checksum.
fn read_operator<S: Storage + H5Type>(
    file: &MappedFile,
    group: &hdf5::Group,
    name: &str,
) -> Result<(usize, usize, HostArray<S>)> {
    let (rows, cols, offset) = h5::dense_location::<S>(group, name)?;
    if let Some(offset) = offset {
        match HostArray::map(&file.file, offset, rows * cols) {
            Ok(Some(mapped)) => return Ok((rows, cols, mapped)),
            Ok(None) => {}
            // A file system without mmap support: the values are read instead.
            Err(e) => log::info!(
                "cannot map {name} of {} ({e}): reading it",
                file.path.display()
            ),
        }
    }
    let (rows, cols, data) = h5::read_dense::<S>(group, name)?;
    Ok((rows, cols, data.into()))
}

fn read_mat(group: &hdf5::Group, name: &str) -> Result<Mat<f64>> {
    let (r, c, data) = h5::read_dense::<f64>(group, name)?;
    Ok(Mat::from_fn(r, c, |i, j| data[i + j * r]))
}

fn write_csr<S: H5Type + Stored>(group: &hdf5::Group, name: &str, m: &Csr<S>) -> Result<()> {
    let row_ptr: Vec<u64> = m.row_ptr().iter().map(|&p| p as u64).collect();
    h5::write_vector(group, &format!("{name}_row_ptr"), &row_ptr)?;
    h5::write_vector(group, &format!("{name}_col_idx"), m.col_idx())?;
    h5::write_vector(group, &format!("{name}_values"), m.values())?;
    Ok(())
}

fn read_csr<S: H5Type + Stored>(
    group: &hdf5::Group,
    name: &str,
    nrows: usize,
    ncols: usize,
) -> Result<Csr<S>> {
    let row_ptr: Vec<usize> = h5::read_vector::<u64>(group, &format!("{name}_row_ptr"))?
        .iter()
        .map(|&p| p as usize)
        .collect();
    Csr::new(
        nrows,
        ncols,
        row_ptr,
        h5::read_vector(group, &format!("{name}_col_idx"))?,
        h5::read_vector(group, &format!("{name}_values"))?,
    )
}

/// Writes a set-up, and its method's operators in their precision when given, and the
/// working copies in other precisions `kept` from the file it replaces (atomically: a crash
/// leaves no half-written cache file).
pub fn save<S: Storage + H5Type>(
    path: &Path,
    key: &SetupKey,
    s: &PscSetup,
    working: Option<&PscHost<S>>,
    kept: &KeptCopies,
) -> Result<()> {
    let (nc, ne) = (s.c_dofs.len() as f64, s.e_dofs.len() as f64);
    let dense = match s.method() {
        PscMethod::M1 => ne * ne,
        PscMethod::M2 => ne * ne + nc * nc,
        PscMethod::M3 => 0.0,
    } + nc * ne;
    let working_bytes = working.map_or(0, |_| std::mem::size_of::<S>()) + kept.value_bytes();
    let bytes = dense * (8 + working_bytes) as f64;
    let progress = if bytes > PROGRESS_MIN_BYTES {
        crate::progress::Progress::new(
            &format!("operator cache write ({:.1} GiB)", bytes / 2f64.powi(30)),
            bytes,
        )
    } else {
        crate::progress::Progress::hidden()
    };
    let w = h5::H5Writer::create(path)?;
    let root = w.root();
    h5::write_provenance(root, None)?;
    h5::write_str_attr(root, "psc_key", &key.text)?;
    h5::write_str_attr(root, "checksum", &format!("{:016x}", checksum(s)))?;
    h5::write_str_attr(root, "method", s.method().name())?;
    h5::write_scalar_attr(root, "a_ci_relative", s.a_ci_relative)?;
    h5::write_vector(root, "c_dofs", &s.c_dofs)?;
    h5::write_vector(root, "e_dofs", &s.e_dofs)?;
    h5::write_vector(root, "i_dofs", &s.i_dofs)?;
    h5::write_vector(root, "scale_e", &s.scale_e)?;
    h5::write_vector(root, "scale_i", &s.scale_i)?;
    write_mat(root, "l_c", &s.l_c, &progress)?;
    write_mat(root, "l_c_inv", &s.l_c_inv, &progress)?;
    write_mat(root, "b", &s.b, &progress)?;
    match &s.schur {
        Schur::M1 { pi_inv } => write_mat(root, "pi_inv", pi_inv, &progress)?,
        Schur::M2 {
            lambda_inv,
            theta_inv,
        } => {
            write_mat(root, "lambda_inv", lambda_inv, &progress)?;
            write_mat(root, "theta_inv", theta_inv, &progress)?;
        }
        Schur::M3 { e } => write_csr(root, "e", e)?,
    }
    let row_ptr: Vec<u64> = s.dt.row_ptr().iter().map(|&p| p as u64).collect();
    h5::write_vector(root, "dt_row_ptr", &row_ptr)?;
    h5::write_vector(root, "dt_col_idx", s.dt.col_idx())?;
    h5::write_vector(root, "dt_values", s.dt.values())?;
    h5::write_scalar_attr(root, "groups", s.groups.len() as u64)?;
    for (k, g) in s.groups.iter().enumerate() {
        let gg = root
            .create_group(&format!("group_{k}"))
            .map_err(h5::error_in(path, &format!("creating group group_{k}")))?;
        h5::write_vector(&gg, "macros", &g.macros)?;
        write_mat(&gg, "block", &g.block, &progress)?;
        write_mat(&gg, "inverse", &g.inverse, &progress)?;
    }
    if let Some(host) = working {
        write_working(root, path, s, host, &progress)?;
    }
    kept.write(root, path, s, &progress)?;
    progress.stage("syncing the file to disk");
    w.commit()?;
    Ok(())
}

/// Writes the working copy `host` of the set-up `s` under `working/<precision>` of `root`,
/// with its checksums.
fn write_working<S: Storage + H5Type>(
    root: &hdf5::Group,
    path: &Path,
    s: &PscSetup,
    host: &PscHost<S>,
    progress: &crate::progress::Progress,
) -> Result<()> {
    let PscHost {
        schur,
        b,
        c_inv,
        dt,
        ..
    } = host;
    let wg = root
        .create_group(&format!("working/{}", S::PRECISION))
        .map_err(h5::error_in(path, "creating group working"))?;
    let checksum = parts_checksum(s, schur, b, c_inv, dt.values());
    h5::write_str_attr(&wg, "checksum", &format!("{checksum:016x}"))?;
    if let Some(checksum) = inverses_checksum(&dense_inverses(schur)) {
        h5::write_str_attr(&wg, "inverses_checksum", &format!("{checksum:016x}"))?;
    }
    let (nc, ne) = (s.c_dofs.len(), s.e_dofs.len());
    let report = |bytes: usize| progress.advance(bytes as f64);
    let write = |name: &str, rows: usize, cols: usize, data: &[S]| {
        progress.stage(&format!("{name} in {}", S::PRECISION));
        h5::write_dense_reporting(&wg, name, rows, cols, data, &report).map(drop)
    };
    match schur {
        SchurHost::M1 { pi_inv } => write("pi_inv", ne, ne, pi_inv)?,
        SchurHost::M2 {
            lambda_inv,
            theta_inv,
        } => {
            write("lambda_inv", ne, ne, lambda_inv)?;
            write("theta_inv", nc, nc, theta_inv)?;
        }
        SchurHost::M3 { e } => write_csr(&wg, "e", e)?,
    }
    write("b", nc, ne, b)?;
    for (k, c) in c_inv.iter().enumerate() {
        let size = s.groups[k].block_size();
        h5::write_dense(&wg, &format!("c_inv_{k}"), size, size, c)?;
    }
    h5::write_vector(&wg, "dt_values", dt.values())?;
    Ok(())
}

/// The working copies of a cache file in precisions other than the one being written,
/// kept when the file is rewritten.
#[derive(Default)]
pub struct KeptCopies {
    f16: Option<PscHost<f16>>,
    f32: Option<PscHost<f32>>,
    f64: Option<PscHost<f64>>,
}

impl KeptCopies {
    /// The working copies of the file at `path` in every precision but `except`, each
    /// verified in full (its dense inverses too: a rewrite must not carry a corrupted copy
    /// under a fresh checksum); one that fails is left out.
    fn read(path: &Path, key: &SetupKey, mesh: &Mesh2d, except: Precision) -> Self {
        fn one<T: Storage + H5Type>(
            path: &Path,
            key: &SetupKey,
            mesh: &Mesh2d,
            except: Precision,
        ) -> Option<PscHost<T>> {
            if T::PRECISION == except {
                return None;
            }
            match load_host::<T>(path, key, mesh, InverseCheck::OnLoad) {
                Ok(copy) => copy.map(|(host, _)| host),
                Err(e) => {
                    log::warn!(
                        "the {} operators in the cache {} are unusable ({e}): not kept",
                        T::PRECISION,
                        path.display()
                    );
                    None
                }
            }
        }
        KeptCopies {
            f16: one(path, key, mesh, except),
            f32: one(path, key, mesh, except),
            f64: one(path, key, mesh, except),
        }
    }

    /// Bytes per value of the kept copies together (2 for f16, 4 for f32, 8 for f64).
    fn value_bytes(&self) -> usize {
        [
            (self.f16.is_some(), 2),
            (self.f32.is_some(), 4),
            (self.f64.is_some(), 8),
        ]
        .iter()
        .filter(|(kept, _)| *kept)
        .map(|(_, bytes)| bytes)
        .sum()
    }

    fn write(
        &self,
        root: &hdf5::Group,
        path: &Path,
        s: &PscSetup,
        progress: &crate::progress::Progress,
    ) -> Result<()> {
        if let Some(host) = &self.f16 {
            write_working(root, path, s, host, progress)?;
        }
        if let Some(host) = &self.f32 {
            write_working(root, path, s, host, progress)?;
        }
        if let Some(host) = &self.f64 {
            write_working(root, path, s, host, progress)?;
        }
        Ok(())
    }
}

/// Bytes above which the cache write shows its progress.
const PROGRESS_MIN_BYTES: f64 = 256.0 * 1048576.0;

/// The method a cache file was written for.
fn stored_method(f: &hdf5::Group, bad: impl Fn(String) -> Error) -> Result<PscMethod> {
    h5::read_str_attr(f, "method")?.parse().map_err(bad)
}

/// Reads a method's operators in precision S from the cache's `working/<precision>` copies
/// (the dense ones mapped, see [`HostArray::map`]), with their dense inverses still to be
/// checked where `check` leaves that for later: None when the file has none; an error when
/// it is unusable (key, checksums or shapes).
pub fn load_host<S: Storage + H5Type>(
    path: &Path,
    key: &SetupKey,
    mesh: &Mesh2d,
    check: InverseCheck,
) -> Result<Option<(PscHost<S>, Option<UncheckedInverses>)>> {
    let bad = |message: String| Error::Hdf5 {
        path: path.to_path_buf(),
        message,
    };
    let f = h5::open(path)?;
    let mapped = MappedFile {
        path,
        file: std::fs::File::open(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?,
    };
    if h5::read_str_attr(&f, "psc_key")? != key.text {
        return Err(bad("the cache was built for another problem".into()));
    }
    let Ok(wg) = f.group(&format!("working/{}", S::PRECISION)) else {
        return Ok(None);
    };
    // The small f64 parts (numbering, scalings, L_C⁻¹) come from the f64 set-up.
    let ngroups = h5::read_scalar_attr::<u64>(&f, "groups")? as usize;
    let mut macros = Vec::with_capacity(ngroups);
    let mut c_inv = Vec::with_capacity(ngroups);
    let mut group_sizes = Vec::with_capacity(ngroups);
    for k in 0..ngroups {
        let members: Vec<u32> = h5::read_vector(
            &f.group(&format!("group_{k}"))
                .map_err(|e| bad(format!("group_{k}: {e}")))?,
            "macros",
        )?;
        let (size, cols, inverse) = read_operator::<S>(&mapped, &wg, &format!("c_inv_{k}"))?;
        if size != cols {
            return Err(bad(format!("c_inv_{k} is not square")));
        }
        group_sizes.push((size, members.len()));
        macros.push(members);
        c_inv.push(inverse);
    }
    let c_dofs: Vec<u32> = h5::read_vector(&f, "c_dofs")?;
    let e_dofs: Vec<u32> = h5::read_vector(&f, "e_dofs")?;
    let i_dofs: Vec<u32> = h5::read_vector(&f, "i_dofs")?;
    let (nc, ne, ni) = (c_dofs.len(), e_dofs.len(), i_dofs.len());
    let schur = match stored_method(&f, bad)? {
        PscMethod::M1 => SchurHost::M1 {
            pi_inv: read_square::<S>(&mapped, &wg, "pi_inv", ne, bad)?,
        },
        PscMethod::M2 => SchurHost::M2 {
            lambda_inv: read_square::<S>(&mapped, &wg, "lambda_inv", ne, bad)?,
            theta_inv: read_square::<S>(&mapped, &wg, "theta_inv", nc, bad)?,
        },
        PscMethod::M3 => SchurHost::M3 {
            e: read_csr(&wg, "e", ne, ne)?,
        },
    };
    let (_, _, b) = read_operator::<S>(&mapped, &wg, "b")?;
    let row_ptr: Vec<usize> = h5::read_vector::<u64>(&f, "dt_row_ptr")?
        .iter()
        .map(|&p| p as usize)
        .collect();
    let dt_values: Vec<S> = h5::read_vector(&wg, "dt_values")?;
    let dt = Csr::new(
        ni,
        ne,
        row_ptr,
        h5::read_vector(&f, "dt_col_idx")?,
        dt_values,
    )?;
    let l_c_inv = read_mat(&f, "l_c_inv")?;
    if b.len() != nc * ne || l_c_inv.nrows() != nc || nc + ne + ni != mesh.num_interior() {
        return Err(bad("array sizes do not fit the mesh".into()));
    }
    // Verify with the same checksum the writer computed (over what M1 is built from).
    let hb = HierarchicalBasis::new(mesh)?;
    let (n, n0, levels) = shape(mesh, &hb)?;
    let probe = PscSetup {
        element: mesh.element,
        n,
        n0,
        levels,
        hb,
        stiffness: Csr::new(0, 0, vec![0], vec![], vec![])?,
        c_dofs,
        e_dofs,
        i_dofs,
        l_c: Mat::zeros(0, 0),
        l_c_inv,
        scale_e: h5::read_vector(&f, "scale_e")?,
        scale_i: h5::read_vector(&f, "scale_i")?,
        b: Mat::zeros(0, 0),
        d: Csr::new(0, 0, vec![0], vec![], vec![])?,
        dt: dt.to_f64(),
        groups: macros
            .into_iter()
            .map(|m| MacroGroup {
                macros: m,
                block: Mat::zeros(0, 0),
                inverse: Mat::zeros(0, 0),
            })
            .collect(),
        schur: Schur::M1 {
            pi_inv: Mat::zeros(0, 0),
        },
        a_ci_relative: 0.0,
    };
    let stored = h5::read_str_attr(&wg, "checksum")?;
    let actual = format!(
        "{:016x}",
        parts_checksum(&probe, &schur, &b, &c_inv, dt.values())
    );
    if stored != actual {
        return Err(bad(format!(
            "checksum of the {} operators does not match: the file is corrupted",
            S::PRECISION
        )));
    }
    let method = schur.method();
    let unchecked = match method {
        PscMethod::M3 => None,
        PscMethod::M1 | PscMethod::M2 => {
            let stored = h5::read_str_attr(&wg, "inverses_checksum")?;
            match check {
                InverseCheck::OnFailure => Some(UncheckedInverses {
                    path: path.to_path_buf(),
                    method,
                    precision: S::PRECISION,
                    checksum: stored,
                }),
                InverseCheck::OnLoad => {
                    let actual =
                        inverses_checksum(&dense_inverses(&schur)).map(|c| format!("{c:016x}"));
                    if actual.as_ref() != Some(&stored) {
                        return Err(bad(format!(
                            "checksum of the {} inverses does not match: the file is corrupted",
                            S::PRECISION
                        )));
                    }
                    None
                }
            }
        }
    };
    let parts = Parts {
        hb: probe.hb,
        l_c_inv: dense_col_major(&probe.l_c_inv),
        c_dofs: probe.c_dofs,
        e_dofs: probe.e_dofs,
        i_dofs: probe.i_dofs,
        scale_e: probe.scale_e,
        scale_i: probe.scale_i,
        group_sizes,
    };
    let host = PscHost {
        parts,
        schur,
        b,
        c_inv,
        dt,
    };
    Ok(Some((host, unchecked)))
}

/// Reads the set-up of `mesh` (the mesh `key` names), checking its key and checksum.
pub fn load(path: &Path, key: &SetupKey, mesh: &Mesh2d) -> Result<PscSetup> {
    let bad = |message: String| Error::Hdf5 {
        path: path.to_path_buf(),
        message,
    };
    let f = h5::open(path)?;
    let stored_key = h5::read_str_attr(&f, "psc_key")?;
    if stored_key != key.text {
        return Err(bad(format!(
            "the cache holds '{stored_key}', expected '{}'",
            key.text
        )));
    }
    let groups = (0..h5::read_scalar_attr::<u64>(&f, "groups")? as usize)
        .map(|k| {
            let g = f
                .group(&format!("group_{k}"))
                .map_err(|e| bad(format!("group_{k}: {e}")))?;
            Ok(MacroGroup {
                macros: h5::read_vector(&g, "macros")?,
                block: read_mat(&g, "block")?,
                inverse: read_mat(&g, "inverse")?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let hb = HierarchicalBasis::new(mesh)?;
    let (n, n0, levels) = shape(mesh, &hb)?;
    let (stiffness, _) = assemble_stiffness(mesh)?;
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
    let (nc, ne) = (h5::read_vector::<u32>(&f, "c_dofs")?.len(), e_dofs.len());
    let schur = match stored_method(&f, bad)? {
        PscMethod::M1 => Schur::M1 {
            pi_inv: read_mat(&f, "pi_inv")?,
        },
        PscMethod::M2 => Schur::M2 {
            lambda_inv: read_mat(&f, "lambda_inv")?,
            theta_inv: read_mat(&f, "theta_inv")?,
        },
        PscMethod::M3 => Schur::M3 {
            e: read_csr(&f, "e", ne, ne)?,
        },
    };
    let square = |m: &Mat<f64>, size: usize| m.nrows() == size && m.ncols() == size;
    let fits = match &schur {
        Schur::M1 { pi_inv } => square(pi_inv, ne),
        Schur::M2 {
            lambda_inv,
            theta_inv,
        } => square(lambda_inv, ne) && square(theta_inv, nc),
        Schur::M3 { .. } => true,
    };
    if !fits {
        return Err(bad("array sizes do not fit the mesh".into()));
    }
    let setup = PscSetup {
        element: mesh.element,
        n,
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
        schur,
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
    if nc + ne + ni != setup.num_unknowns() || setup.b.shape() != (nc, ne) {
        return Err(bad("array sizes do not fit the mesh".into()));
    }
    Ok(setup)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// Overwrites entry `index` of a dataset with `value`, in place.
    fn corrupt<T: H5Type + Copy>(path: &Path, dataset: &str, index: usize, value: T) {
        let f = hdf5::File::open_rw(path).unwrap();
        let ds = f.dataset(dataset).unwrap();
        let mut data: Vec<T> = ds.read_raw().unwrap();
        data[index] = value;
        ds.write_raw(&data).unwrap();
    }

    #[test]
    fn copies_load_and_corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let cache = OperatorCache::new(dir.path());
        let (element, n0, levels) = (Element::Q1, 4, 2);
        let key = SetupKey::unit_square(element, n0, levels, PscMethod::M1);
        let mesh = crate::mesh::unit_square_refined(n0, levels, element).unwrap();
        let (built, outcome, _) = cache
            .load_or_build_host::<f16>(&key, &mesh, PscMethod::M1, InverseCheck::OnLoad)
            .unwrap();
        assert!(matches!(outcome, CacheOutcome::Built(_)));
        let path = cache.path_for(&key);

        // The f16 copies load as they were built.
        let (loaded, _) = load_host::<f16>(&path, &key, &mesh, InverseCheck::OnLoad)
            .unwrap()
            .expect("f16 copies stored");
        assert_eq!(loaded.schur, built.schur);
        assert_eq!(loaded.dt, built.dt);
        let on_load = |path: &Path| load_host::<f32>(path, &key, &mesh, InverseCheck::OnLoad);
        assert!(on_load(&path).unwrap().is_none(), "no f32 copies yet");
        let (_, outcome, _) = cache
            .load_or_build_host::<f16>(&key, &mesh, PscMethod::M1, InverseCheck::OnLoad)
            .unwrap();
        assert!(matches!(outcome, CacheOutcome::Loaded(_)));

        // An f32 run converts from f64 and rewrites the file with its own copies beside
        // the f16 ones.
        let (_, outcome, _) = cache
            .load_or_build_host::<f32>(&key, &mesh, PscMethod::M1, InverseCheck::OnLoad)
            .unwrap();
        assert!(matches!(outcome, CacheOutcome::Loaded(_)));
        assert!(on_load(&path).unwrap().is_some());
        let f16_copy = |path: &Path| load_host::<f16>(path, &key, &mesh, InverseCheck::OnLoad);
        let (kept, _) = f16_copy(&path).unwrap().expect("f16 copies kept");
        assert_eq!(kept.schur, built.schur);
        assert_eq!(kept.dt, built.dt);

        // A rewrite keeps only verified copies: a changed f16 copy is left out when an f64
        // run adds its own, and the f32 copy stays.
        corrupt(&path, "working/f16/pi_inv", 5, f16::from_f32(0.5));
        let (_, outcome, _) = cache
            .load_or_build_host::<f64>(&key, &mesh, PscMethod::M1, InverseCheck::OnLoad)
            .unwrap();
        assert!(matches!(outcome, CacheOutcome::Loaded(_)));
        assert!(
            f16_copy(&path).unwrap().is_none(),
            "the changed copy was dropped"
        );
        assert!(on_load(&path).unwrap().is_some());
        assert!(load_host::<f64>(&path, &key, &mesh, InverseCheck::OnLoad)
            .unwrap()
            .is_some());

        // A changed working copy fails its checksum, and the run rebuilds from f64.
        corrupt(&path, "working/f32/pi_inv", 3, 0.5f32);
        assert!(on_load(&path).is_err());
        let (_, outcome, _) = cache
            .load_or_build_host::<f32>(&key, &mesh, PscMethod::M1, InverseCheck::OnLoad)
            .unwrap();
        assert!(
            matches!(outcome, CacheOutcome::Loaded(_)),
            "the f64 set-up was intact"
        );
        assert!(on_load(&path).unwrap().is_some());

        // A changed f64 array fails the set-up checksum: recomputed, never used.
        corrupt(&path, "pi_inv", 7, 123.0f64);
        assert!(load(&path, &key, &mesh).is_err());
        let (setup, outcome) = cache.load_or_build(&key, &mesh, PscMethod::M1).unwrap();
        assert!(
            matches!(outcome, CacheOutcome::Rebuilt { .. }),
            "{outcome:?}"
        );
        let pi_inv = setup.pi_inv().expect("M1");
        assert_ne!(pi_inv[(7 % pi_inv.nrows(), 7 / pi_inv.nrows())], 123.0);
        assert!(load(&path, &key, &mesh).is_ok());

        // A cache file of another problem under this name is refused.
        let other = SetupKey::unit_square(element, 8, 1, PscMethod::M1);
        let other_mesh = crate::mesh::unit_square_refined(8, 1, element).unwrap();
        std::fs::copy(&path, cache.path_for(&other)).unwrap();
        assert!(load(&cache.path_for(&other), &other, &other_mesh).is_err());
    }

    /// Large working operators are mapped from the file (page-aligned there), read the
    /// same values as were built, and a changed byte under the mapping fails the checksum:
    /// on loading, or when checked after a failure (the rest of the copy is checked on
    /// loading either way).
    #[test]
    fn large_working_copies_are_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let cache = OperatorCache::new(dir.path());
        let (element, n0, levels) = (Element::Q1, 8, 3);
        let key = SetupKey::unit_square(element, n0, levels, PscMethod::M1);
        let mesh = crate::mesh::unit_square_refined(n0, levels, element).unwrap();
        let (built, _, unchecked) = cache
            .load_or_build_host::<f32>(&key, &mesh, PscMethod::M1, InverseCheck::OnFailure)
            .unwrap();
        assert!(unchecked.is_none(), "built here, not loaded");
        let path = cache.path_for(&key);
        let SchurHost::M1 { pi_inv: built_pi } = &built.schur else {
            panic!("M1")
        };
        assert!(built_pi.len() * 4 >= 1 << 20, "Π⁻¹ is large enough to map");
        let f = h5::open(&path).unwrap();
        let (rows, cols, offset) =
            h5::dense_location::<f32>(&f.group("working/f32").unwrap(), "pi_inv").unwrap();
        assert_eq!(rows * cols, built_pi.len());
        assert_eq!(offset.expect("contiguous") % 4096, 0, "page-aligned");
        drop(f);

        let load = |check| load_host::<f32>(&path, &key, &mesh, check);
        let (loaded, unchecked) = load(InverseCheck::OnFailure).unwrap().unwrap();
        let SchurHost::M1 { pi_inv } = &loaded.schur else {
            panic!("M1")
        };
        assert!(pi_inv.is_mapped());
        assert_eq!(pi_inv, built_pi);
        assert_eq!(loaded.b, built.b);
        assert_eq!(loaded.c_inv, built.c_inv);
        let unchecked = unchecked.expect("M1's Π⁻¹ left to check");
        assert_eq!(unchecked.path(), path);
        assert!(unchecked.intact().unwrap());
        assert!(load(InverseCheck::OnLoad).unwrap().unwrap().1.is_none());
        drop(loaded); // rewritten in place below: not while mapped

        corrupt(&path, "working/f32/pi_inv", 12345, 0.25f32);
        let err = load(InverseCheck::OnLoad).err().expect("corrupted");
        assert!(err.to_string().contains("checksum"), "{err}");
        let (_, unchecked) = load(InverseCheck::OnFailure).unwrap().unwrap();
        assert!(!unchecked.unwrap().intact().unwrap());

        // A changed part other than the inverses is refused on loading in both cases.
        corrupt(&path, "working/f32/b", 7, 0.5f32);
        for check in [InverseCheck::OnLoad, InverseCheck::OnFailure] {
            let err = load(check).err().expect("corrupted");
            assert!(err.to_string().contains("checksum"), "{err}");
        }
    }

    /// M2's and M3's operators have their own files (the key names the method), load as
    /// they were built, and a corrupted working copy of their own operators is detected:
    /// M2's dense Θ⁻¹ on loading or when checked later, M3's sparse E on loading.
    #[test]
    fn every_method_has_its_own_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = OperatorCache::new(dir.path());
        let (element, n0, levels) = (Element::P1, 4, 2);
        let mesh = crate::mesh::unit_square_refined(n0, levels, element).unwrap();
        let paths: Vec<PathBuf> = PscMethod::ALL
            .iter()
            .map(|&m| cache.path_for(&SetupKey::unit_square(element, n0, levels, m)))
            .collect();
        assert!(paths[0] != paths[1] && paths[1] != paths[2]);
        for (method, dataset) in [
            (PscMethod::M2, "working/f32/theta_inv"),
            (PscMethod::M3, "working/f32/e_values"),
        ] {
            let key = SetupKey::unit_square(element, n0, levels, method);
            let (built, outcome, _) = cache
                .load_or_build_host::<f32>(&key, &mesh, method, InverseCheck::OnLoad)
                .unwrap();
            assert!(matches!(outcome, CacheOutcome::Built(_)));
            assert_eq!(built.schur.method(), method);
            let path = cache.path_for(&key);
            let host = |check| load_host::<f32>(&path, &key, &mesh, check);
            let (loaded, unchecked) = host(InverseCheck::OnFailure).unwrap().unwrap();
            assert_eq!(loaded.schur, built.schur);
            assert_eq!(unchecked.is_some(), method == PscMethod::M2, "{method}");
            assert_eq!(load(&path, &key, &mesh).unwrap().method(), method);
            drop(loaded);
            corrupt(&path, dataset, 1, 0.123f32);
            assert!(host(InverseCheck::OnLoad).is_err(), "{method}");
            match host(InverseCheck::OnFailure) {
                Ok(Some((_, Some(unchecked)))) => {
                    assert_eq!(method, PscMethod::M2);
                    assert!(!unchecked.intact().unwrap());
                }
                Ok(_) => panic!("{method}: a corrupted copy loaded as checked"),
                Err(e) => {
                    assert_eq!(method, PscMethod::M3);
                    assert!(e.to_string().contains("checksum"), "{e}");
                }
            }
            let (_, outcome, _) = cache
                .load_or_build_host::<f32>(&key, &mesh, method, InverseCheck::OnLoad)
                .unwrap();
            assert!(
                matches!(outcome, CacheOutcome::Loaded(_)),
                "f64 set-up intact"
            );
        }
    }
}
