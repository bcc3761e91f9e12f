//! M1, the direct PSC solve (SPEC §2.4), on n × Nrhs blocks on any device:
//!
//!   b ↦ Sᵀb ↦ L⁻¹ ↦ x_E = Π⁻¹(b_E − Bᵀb_C − D C⁻¹ b_I), x_C = b_C − B x_E,
//!   x_I = C⁻¹(b_I − Dᵀx_E) ↦ L⁻ᵀ ↦ S.
//!
//! Every dense product is one GEMM over the whole block (C⁻¹ group-wise, with the I part
//! of a group reshaped to one column per macro element and right-hand side); for a single
//! right-hand side the Π⁻¹ product is a streaming GEMV instead. Operators are
//! stored in the working precision S; vectors between the GEMMs are in S's compute
//! precision, rounded to S only where they are a GEMM operand (f16). The workspace is
//! allocated by [`LinOp::prepare`]: the apply allocates nothing.

use super::{HierarchicalBasis, PscSetup};
use crate::device::psc::Classes;
use crate::device::{
    Batch, Block, CsrMatrix, Data, Layout, MatMut, MatRef, PscDevice, Stats, Storage,
};
use crate::error::{Error, Result};
use crate::linalg::{BlockKind, Cost, LinOp};
use crate::precision::{convert_checked, Precision};
use crate::sparse::{Csr, SparseRows};

/// A group's I rows: `count` macro elements of `size` unknowns from `offset` on.
#[derive(Clone, Copy, Debug)]
struct GroupLayout {
    offset: usize,
    size: usize,
    count: usize,
}

/// What M1 takes from the set-up besides the operators it stores in its precision.
#[derive(Clone, Debug)]
pub(super) struct M1Parts {
    pub hb: HierarchicalBasis,
    pub c_dofs: Vec<u32>,
    pub e_dofs: Vec<u32>,
    pub i_dofs: Vec<u32>,
    /// L_C⁻¹, column-major, f64.
    pub l_c_inv: Vec<f64>,
    pub scale_e: Vec<f64>,
    pub scale_i: Vec<f64>,
    /// (block size, members) per group.
    pub group_sizes: Vec<(usize, usize)>,
}

impl M1Parts {
    pub(super) fn of(setup: &PscSetup) -> Self {
        M1Parts {
            hb: setup.hb.clone(),
            c_dofs: setup.c_dofs.clone(),
            e_dofs: setup.e_dofs.clone(),
            i_dofs: setup.i_dofs.clone(),
            l_c_inv: dense_col_major(&setup.l_c_inv),
            scale_e: setup.scale_e.clone(),
            scale_i: setup.scale_i.clone(),
            group_sizes: setup
                .groups
                .iter()
                .map(|g| (g.block_size(), g.macros.len()))
                .collect(),
        }
    }
}

/// M1's operators in storage precision S on the host: what the operator cache stores and
/// what the device receives. Π⁻¹ and B column-major, one C_g⁻¹ per group, Dᵀ.
pub struct M1Host<S> {
    pub(super) parts: M1Parts,
    pub pi_inv: Vec<S>,
    pub b: Vec<S>,
    pub c_inv: Vec<Vec<S>>,
    pub dt: Csr<S>,
}

/// A dense matrix as a column-major vector.
pub(super) fn dense_col_major(m: &faer::Mat<f64>) -> Vec<f64> {
    (0..m.ncols())
        .flat_map(|j| m.col(j).iter().copied().collect::<Vec<_>>())
        .collect()
}

/// Converts an f64 operator's values to S. Entries below S's resolution relative to the
/// operator's largest entry (|v| ≤ u·max|M|) may flush to zero: they are below what S can
/// represent next to that entry anyway (on meshes with nearly right angles, couplings of
/// 1e-10 relative occur). Overflow, non-finite values and the flush of a larger entry are
/// errors naming the operator.
fn convert_values<S: Storage>(what: &str, data: &[f64]) -> Result<Vec<S>> {
    let negligible = S::PRECISION.unit_roundoff() * data.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    data.iter()
        .enumerate()
        .map(|(index, &v)| {
            if v.abs() <= negligible {
                Ok(S::from_f64(v))
            } else {
                convert_checked::<S>(v).map_err(|problem| Error::PrecisionRange {
                    what: what.to_string(),
                    precision: S::PRECISION,
                    index,
                    problem,
                })
            }
        })
        .collect()
}

/// [`convert_values`] of a dense operator, column-major.
fn convert_dense<S: Storage>(what: &str, m: &faer::Mat<f64>) -> Result<Vec<S>> {
    convert_values(what, &dense_col_major(m))
}

/// [`convert_values`] of a sparse operator, its pattern kept.
fn convert_sparse<S: Storage>(what: &str, m: &Csr<f64>) -> Result<Csr<S>> {
    Csr::new(
        m.nrows(),
        m.ncols(),
        m.row_ptr().to_vec(),
        m.col_idx().to_vec(),
        convert_values(what, m.values())?,
    )
}

impl<S: Storage> M1Host<S> {
    /// Converts the f64 set-up to storage precision S; values out of S's range are an error
    /// naming the operator.
    pub fn new(setup: &PscSetup) -> Result<Self> {
        Ok(M1Host {
            parts: M1Parts::of(setup),
            pi_inv: convert_dense("Π⁻¹", &setup.pi_inv)?,
            b: convert_dense("B", &setup.b)?,
            c_inv: setup
                .groups
                .iter()
                .map(|g| convert_dense("C⁻¹", &g.inverse))
                .collect::<Result<_>>()?,
            dt: convert_sparse("Dᵀ", &setup.dt)?,
        })
    }
}

/// Buffers for one block width, in the compute precision (`*_low`: storage precision, for
/// GEMM operands when it differs).
struct Workspace<D: PscDevice> {
    nrhs: usize,
    bc: Block<D>,
    be: Block<D>,
    bi: Block<D>,
    ti: Block<D>,
    te: Block<D>,
    et: Block<D>,
    ct: Block<D>,
    c_low: Block<D>,
    e_low: Block<D>,
    i_low: Block<D>,
    column_scale: Data<D>,
    stats: Stats<D>,
}

/// The M1 operators on a device, in a storage precision.
pub struct M1<D: PscDevice> {
    dev: D,
    precision: Precision,
    n: usize,
    transform: crate::device::psc::HierarchicalTransform<D>,
    classes: Classes<D>,
    pi_inv: Data<D>,
    b: Data<D>,
    c_inv: Vec<Data<D>>,
    groups: Vec<GroupLayout>,
    d: CsrMatrix<D>,
    dt: CsrMatrix<D>,
    d_nnz: usize,
    ws: Option<Workspace<D>>,
}

impl<D: PscDevice> M1<D> {
    /// M1 of an f64 set-up in storage precision `precision`; values out of its range are an
    /// error naming the operator.
    pub fn new(dev: &D, setup: &PscSetup, precision: Precision) -> Result<Self> {
        match precision {
            Precision::F16 => Self::upload(dev, M1Host::<half::f16>::new(setup)?),
            Precision::F32 => Self::upload(dev, M1Host::<f32>::new(setup)?),
            Precision::F64 => Self::upload(dev, M1Host::<f64>::new(setup)?),
        }
    }

    /// M1 from operators already in their storage precision (converted or from the cache).
    pub fn upload<S: Storage>(dev: &D, host: M1Host<S>) -> Result<Self> {
        let M1Host {
            parts,
            pi_inv,
            b,
            c_inv,
            dt,
        } = host;
        let compute = S::PRECISION.compute();
        let mut groups = Vec::new();
        let mut offset = 0;
        for &(size, count) in &parts.group_sizes {
            groups.push(GroupLayout {
                offset,
                size,
                count,
            });
            offset += size * count;
        }
        let d = dt.transpose();
        Ok(M1 {
            n: parts.c_dofs.len() + parts.e_dofs.len() + parts.i_dofs.len(),
            transform: parts.hb.transform(dev, compute)?,
            classes: Classes::upload(
                dev,
                &parts.c_dofs,
                &parts.e_dofs,
                &parts.i_dofs,
                &parts.l_c_inv,
                &parts.scale_e,
                &parts.scale_i,
                compute,
            )?,
            pi_inv: Data::from_owned(dev, pi_inv)?,
            b: Data::from_owned(dev, b)?,
            c_inv: c_inv
                .into_iter()
                .map(|c| Data::from_owned(dev, c))
                .collect::<Result<_>>()?,
            groups,
            d_nnz: d.nnz(),
            d: CsrMatrix::upload(dev, &d)?,
            dt: CsrMatrix::upload(dev, &dt)?,
            precision: S::PRECISION,
            dev: dev.clone(),
            ws: None,
        })
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    pub fn num_unknowns(&self) -> usize {
        self.n
    }

    /// |C|, |E|, |I| and the number of groups of identical macro elements.
    pub fn class_sizes(&self) -> (usize, usize, usize, usize) {
        let (c, e, i) = self.classes.sizes;
        (c, e, i, self.groups.len())
    }

    /// Bytes of the stored operators (what one apply must read at least once).
    pub fn operator_bytes(&self) -> usize {
        self.pi_inv.bytes()
            + self.b.bytes()
            + self.c_inv.iter().map(Data::bytes).sum::<usize>()
            + self.d.bytes()
            + self.dt.bytes()
    }

    /// Floating-point operations of one apply per right-hand side, counted operation by
    /// operation (GEMMs 2mnk, sparse products 2 nnz; the O(N) transforms are left out).
    pub fn flops_per_rhs(&self) -> f64 {
        let (nc, ne, _) = self.classes.sizes;
        let (nc, ne) = (nc as f64, ne as f64);
        let c_inv: f64 = self
            .groups
            .iter()
            .map(|g| 2.0 * (g.size * g.size * g.count) as f64)
            .sum();
        2.0 * ne * ne
            + 2.0 * 2.0 * nc * ne
            + 2.0 * c_inv
            + 2.0 * 2.0 * self.d_nnz as f64
            + 2.0 * 2.0 * nc * nc
    }

    /// out = C⁻¹ inp for every group (inp in the storage precision, out in the compute).
    fn apply_c_inv(&self, nrhs: usize, inp: &Block<D>, out: &mut Block<D>) -> Result<()> {
        let ni = self.classes.sizes.2;
        if let [g] = self.groups[..] {
            // One group spans all of I: the block is one size × (count·Nrhs) matrix.
            let columns = g.count * nrhs;
            return self.dev.gemm(
                MatRef::col_major(&self.c_inv[0], 0, g.size, g.size, g.size),
                MatRef::col_major(&inp.data, 0, g.size, columns, g.size),
                MatMut::col_major(&mut out.data, 0, g.size, columns, g.size),
            );
        }
        // Several groups: per group, one batched product over the right-hand sides (the
        // group's I rows of column c start at c·|I| + offset).
        for (g, inverse) in self.groups.iter().zip(&self.c_inv) {
            self.dev.gemm_batched(
                MatRef::col_major(inverse, 0, g.size, g.size, g.size),
                MatRef::col_major(&inp.data, g.offset, g.size, g.count, g.size),
                MatMut::col_major(&mut out.data, g.offset, g.size, g.count, g.size),
                Batch {
                    count: nrhs,
                    stride_a: 0,
                    stride_b: ni,
                    stride_c: ni,
                },
            )?;
        }
        Ok(())
    }

    fn workspace(&self, nrhs: usize) -> Result<Workspace<D>> {
        let (nc, ne, ni) = self.classes.sizes;
        let compute = self.precision.compute();
        let dev = &self.dev;
        let block = |rows: usize, p: Precision| Block::zeros(dev, rows, nrhs, p, Layout::ColMajor);
        // Storage-precision copies only where storage and compute differ (f16).
        let low = |rows: usize| {
            block(
                if self.precision == compute { 0 } else { rows },
                self.precision,
            )
        };
        Ok(Workspace {
            nrhs,
            bc: block(nc, compute)?,
            be: block(ne, compute)?,
            bi: block(ni, compute)?,
            ti: block(ni, compute)?,
            te: block(ne, compute)?,
            et: block(ne, compute)?,
            ct: block(nc, compute)?,
            c_low: low(nc)?,
            e_low: low(ne)?,
            i_low: low(ni)?,
            column_scale: Data::zeros(dev, nrhs, compute)?,
            stats: Stats::new(dev, nrhs)?,
        })
    }
}

/// `v` as a GEMM operand in the storage precision: itself when storage and compute agree,
/// else rounded into `low`.
fn operand<'a, D: PscDevice>(
    dev: &D,
    v: &'a Block<D>,
    low: &'a mut Block<D>,
) -> Result<&'a Block<D>> {
    if low.is_empty() {
        return Ok(v);
    }
    dev.copy(v.view(), low.view_mut())?;
    Ok(low)
}

impl<D: PscDevice> LinOp<D> for M1<D> {
    fn size(&self) -> usize {
        self.n
    }

    fn input(&self) -> BlockKind {
        BlockKind {
            precision: self.precision.compute(),
            layout: Layout::ColMajor,
        }
    }

    fn output(&self) -> BlockKind {
        self.input()
    }

    fn prepare(&mut self, nrhs: usize) -> Result<()> {
        if self.ws.as_ref().is_none_or(|w| w.nrhs != nrhs) {
            self.ws = Some(self.workspace(nrhs)?);
        }
        Ok(())
    }

    /// X = A⁻¹ B for a column-major block of right-hand sides. A non-finite result (an
    /// overflow in a low precision) is an error, never returned.
    fn apply(&mut self, b: &Block<D>, x: &mut Block<D>) -> Result<()> {
        let k = b.cols();
        self.prepare(k)?;
        let mut ws = self.ws.take().expect("prepared");
        let result = self.solve(b, x, &mut ws).and_then(|()| {
            self.dev.column_stats(x, &mut ws.stats)?;
            let s = ws.stats.read(&self.dev)?;
            let limit = self.precision.compute().max();
            match (0..k).find(|&c| !(s.sumsq[c].is_finite() && s.max_abs[c] <= limit)) {
                Some(c) => Err(Error::from(super::PscError::not_finite(self.precision, c))),
                None => Ok(()),
            }
        });
        self.ws = Some(ws);
        result
    }

    fn cost(&self, nrhs: usize) -> Cost {
        let k = nrhs as f64;
        let vectors = 12.0 * (self.n * self.precision.compute().bytes()) as f64;
        Cost {
            flops: self.flops_per_rhs() * k,
            bytes: self.operator_bytes() as f64 + k * vectors,
        }
    }
}

impl<D: PscDevice> M1<D> {
    fn solve(&self, b: &Block<D>, x: &mut Block<D>, ws: &mut Workspace<D>) -> Result<()> {
        let dev = &self.dev;
        let k = ws.nrhs;
        let (nc, ne, _) = self.classes.sizes;
        if x.rows() != self.n || b.rows() != self.n || x.cols() != k {
            return Err(Error::InvalidInput(format!(
                "PSC M1: blocks of {}×{} and {}×{} for {} unknowns",
                b.rows(),
                b.cols(),
                x.rows(),
                x.cols(),
                self.n
            )));
        }
        // b̃ = Sᵀ b (in x, the nodal workspace), then L⁻¹ into the C/E/I numbering, each
        // column scaled to max-norm 1.
        dev.copy(b.view(), x.view_mut())?;
        dev.hierarchical_transform(&self.transform, x, true)?;
        dev.psc_gather(
            &self.classes,
            x,
            &mut ws.bc,
            &mut ws.be,
            &mut ws.bi,
            &mut ws.column_scale,
        )?;

        // t_I = C⁻¹ b_I; r_E = b_E − Bᵀ b_C − D t_I.
        let bi = operand(dev, &ws.bi, &mut ws.i_low)?;
        self.apply_c_inv(k, bi, &mut ws.ti)?;
        dev.csr_spmm(&self.d, &ws.ti, &mut ws.te)?;
        let bc = operand(dev, &ws.bc, &mut ws.c_low)?;
        dev.gemm(
            MatRef::transposed(&self.b, 0, ne, nc, nc),
            MatRef::col_major(&bc.data, 0, nc, k, nc),
            MatMut::col_major(&mut ws.et.data, 0, ne, k, ne),
        )?;
        dev.axpby(1.0, ws.be.view(), -1.0, ws.et.view_mut())?; // b_E − Bᵀ b_C
        dev.axpby(1.0, ws.et.view(), -1.0, ws.te.view_mut())?; // … − D t_I

        // x_E = Π⁻¹ r_E: a GEMM on blocks; for one right-hand side a streaming GEMV (one
        // pass over Π⁻¹, widened on the fly for f16: faster there than the GEMM).
        if k == 1 {
            dev.gemv(
                MatRef::col_major(&self.pi_inv, 0, ne, ne, ne),
                ws.te.view(),
                ws.be.view_mut(),
            )?;
            std::mem::swap(&mut ws.te, &mut ws.be); // te = x_E; b_E is no longer needed
        } else {
            let re = operand(dev, &ws.te, &mut ws.e_low)?;
            dev.gemm(
                MatRef::col_major(&self.pi_inv, 0, ne, ne, ne),
                MatRef::col_major(&re.data, 0, ne, k, ne),
                MatMut::col_major(&mut ws.be.data, 0, ne, k, ne),
            )?;
            std::mem::swap(&mut ws.te, &mut ws.be); // te = x_E
        }

        // x_C = b_C − B x_E (into bc).
        let xe = operand(dev, &ws.te, &mut ws.e_low)?;
        dev.gemm(
            MatRef::col_major(&self.b, 0, nc, ne, nc),
            MatRef::col_major(&xe.data, 0, ne, k, ne),
            MatMut::col_major(&mut ws.ct.data, 0, nc, k, nc),
        )?;
        dev.axpby(-1.0, ws.ct.view(), 1.0, ws.bc.view_mut())?;

        // x_I = C⁻¹ (b_I − Dᵀ x_E) (into bi).
        dev.csr_spmm(&self.dt, &ws.te, &mut ws.ti)?;
        dev.axpby(1.0, ws.bi.view(), -1.0, ws.ti.view_mut())?;
        let ri = operand(dev, &ws.ti, &mut ws.i_low)?;
        self.apply_c_inv(k, ri, &mut ws.bi)?;

        // L⁻ᵀ back to the lexicographic numbering, then S, and undo the column scaling.
        dev.psc_scatter(&self.classes, &ws.bc, &ws.te, &ws.bi, &ws.column_scale, x)?;
        dev.hierarchical_transform(&self.transform, x, false)
    }
}

#[cfg(test)]
impl M1Host<f64> {
    /// The first group split in two groups holding the same inverse: the several-groups
    /// path on a mesh that has one group (tested in run::solver, which may name a device).
    pub(crate) fn with_first_group_split(mut self) -> Self {
        let (size, count) = self.parts.group_sizes[0];
        self.parts.group_sizes[0] = (size, count / 2);
        self.parts.group_sizes.insert(1, (size, count - count / 2));
        self.c_inv.insert(1, self.c_inv[0].clone());
        self
    }

    pub(crate) fn groups(&self) -> usize {
        self.parts.group_sizes.len()
    }
}
