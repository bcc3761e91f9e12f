//! M1, the direct PSC solve (SPEC §2.4), on n × Nrhs blocks:
//!
//!   b ↦ Sᵀb ↦ L⁻¹ ↦ x_E = Π⁻¹(b_E − Bᵀb_C − D C⁻¹ b_I), x_C = b_C − B x_E,
//!   x_I = C⁻¹(b_I − Dᵀx_E) ↦ L⁻ᵀ ↦ S.
//!
//! Every dense product is one GEMM over the whole block (C⁻¹ group-wise, with the I part
//! of a group reshaped to one column per macro element and right-hand side); for a single
//! right-hand side in f32/f64 the Π⁻¹ product is a streaming GEMV instead. Operators are stored in the
//! working precision S; vectors between the GEMMs are in S's compute precision. The
//! workspace is allocated once per block width: the apply allocates nothing of its own
//! (the `gemm` crate manages its packing buffers).

use num_traits::{One, Zero};
use rayon::prelude::*;

use super::PscSetup;
use crate::backend::cpu::{self, Operand};
use crate::error::{Error, Result};
use crate::precision::{convert_checked, Precision, Real, Stored};
use crate::sparse::Csr;
use num_traits::Float;

/// A group's I rows: `count` macro elements of `size` unknowns from `offset` on.
#[derive(Clone, Copy, Debug)]
struct GroupLayout {
    offset: usize,
    size: usize,
    count: usize,
}

/// The M1 operators in storage precision `S`.
pub struct M1<S: Stored> {
    setup_n: usize,
    hb: super::HierarchicalBasis,
    c_dofs: Vec<u32>,
    e_dofs: Vec<u32>,
    i_dofs: Vec<u32>,
    /// L_C⁻¹ (|C|×|C|, column-major) and the diagonal scalings, in the compute precision.
    l_c_inv: Vec<S::Compute>,
    scale_e: Vec<S::Compute>,
    scale_i: Vec<S::Compute>,
    pi_inv: Vec<S>,
    b: Vec<S>,
    c_inv: Vec<Vec<S>>,
    groups: Vec<GroupLayout>,
    d: Csr<S>,
    dt: Csr<S>,
}

/// What M1 takes from the set-up besides the operators it stores in its precision.
pub(super) struct M1Parts {
    pub hb: super::HierarchicalBasis,
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

/// M1's operators in its storage precision: Π⁻¹ and B column-major, one C_g⁻¹ per group, Dᵀ.
pub(super) struct StoredOperators<'a, S> {
    pub pi_inv: &'a [S],
    pub b: &'a [S],
    pub c_inv: &'a [Vec<S>],
    pub dt: &'a Csr<S>,
}

/// A dense matrix as a column-major vector.
pub(super) fn dense_col_major(m: &faer::Mat<f64>) -> Vec<f64> {
    (0..m.ncols())
        .flat_map(|j| m.col(j).iter().copied().collect::<Vec<_>>())
        .collect()
}

/// Buffers for one block width.
pub struct M1Workspace<S: Stored> {
    nrhs: usize,
    nodal: Vec<S::Compute>,
    bc: Vec<S::Compute>,
    be: Vec<S::Compute>,
    bi: Vec<S::Compute>,
    ti: Vec<S::Compute>,
    te: Vec<S::Compute>,
    column_scale: Vec<S::Compute>,
    c_low: Vec<S>,
    e_low: Vec<S>,
    e_low2: Vec<S>,
    i_low: Vec<S>,
    i_low2: Vec<S>,
}

/// Entries per rayon task in the element-wise passes between GEMMs.
const CHUNK: usize = 1 << 14;

fn to_storage<S: Stored>(src: &[S::Compute], dst: &mut [S]) {
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| {
            d.iter_mut()
                .zip(s)
                .for_each(|(d, &s)| *d = S::from_compute(s));
        });
}

fn to_compute<S: Stored>(src: &[S], dst: &mut [S::Compute]) {
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| {
            d.iter_mut().zip(s).for_each(|(d, &s)| *d = s.to_compute());
        });
}

/// out = a − b − out (b widened), element-wise in parallel.
fn minus_minus<S: Stored>(a: &[S::Compute], b: &[S], out: &mut [S::Compute]) {
    out.par_chunks_mut(CHUNK)
        .zip(a.par_chunks(CHUNK))
        .zip(b.par_chunks(CHUNK))
        .for_each(|((o, a), b)| {
            for ((o, &a), &b) in o.iter_mut().zip(a).zip(b) {
                *o = a - b.to_compute() - *o;
            }
        });
}

/// Converts a dense f64 operator to S. Entries below S's resolution relative to the
/// operator's largest entry (|v| ≤ u·max|M|) may flush to zero: they are below what S can
/// represent next to that entry anyway. Overflow, non-finite values and the flush of a
/// larger entry are errors naming the operator.
fn convert_dense<S: Stored>(what: &str, m: &faer::Mat<f64>) -> Result<Vec<S>> {
    let data = dense_col_major(m);
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

impl<S: Stored> M1<S> {
    /// Converts the f64 set-up to storage precision S; values out of S's range are an error
    /// naming the operator.
    pub fn new(setup: &PscSetup) -> Result<Self> {
        let parts = M1Parts {
            hb: setup.hb,
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
        };
        Ok(M1::from_parts(
            parts,
            convert_dense("Π⁻¹", &setup.pi_inv)?,
            convert_dense("B", &setup.b)?,
            setup
                .groups
                .iter()
                .map(|g| convert_dense("C⁻¹", &g.inverse))
                .collect::<Result<_>>()?,
            setup.dt.convert()?,
        ))
    }

    /// Assembles M1 from its parts and operators already in precision S (Π⁻¹ and B
    /// column-major, one C_g⁻¹ per group, Dᵀ).
    pub(super) fn from_parts(
        parts: M1Parts,
        pi_inv: Vec<S>,
        b: Vec<S>,
        c_inv: Vec<Vec<S>>,
        dt: Csr<S>,
    ) -> Self {
        let compute = |v: &[f64]| {
            v.iter()
                .map(|&x| S::Compute::from_f64(x))
                .collect::<Vec<_>>()
        };
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
        M1 {
            setup_n: parts.c_dofs.len() + parts.e_dofs.len() + parts.i_dofs.len(),
            hb: parts.hb,
            l_c_inv: compute(&parts.l_c_inv),
            scale_e: compute(&parts.scale_e),
            scale_i: compute(&parts.scale_i),
            c_dofs: parts.c_dofs,
            e_dofs: parts.e_dofs,
            i_dofs: parts.i_dofs,
            pi_inv,
            b,
            c_inv,
            groups,
            d: dt.transpose(),
            dt,
        }
    }

    /// The operators stored in precision S (for the cache).
    pub(super) fn stored_operators(&self) -> StoredOperators<'_, S> {
        StoredOperators {
            pi_inv: &self.pi_inv,
            b: &self.b,
            c_inv: &self.c_inv,
            dt: &self.dt,
        }
    }

    pub fn precision(&self) -> Precision {
        S::PRECISION
    }

    pub fn num_unknowns(&self) -> usize {
        self.setup_n
    }

    /// |C|, |E|, |I| and the number of groups of identical macro elements.
    pub fn class_sizes(&self) -> (usize, usize, usize, usize) {
        (
            self.c_dofs.len(),
            self.e_dofs.len(),
            self.i_dofs.len(),
            self.groups.len(),
        )
    }

    /// Bytes of the stored operators (what one apply must read at least once).
    pub fn operator_bytes(&self) -> usize {
        let s = S::PRECISION.bytes();
        let sparse = |m: &Csr<S>| m.nnz() * (s + 4) + m.row_ptr().len() * 8;
        s * (self.pi_inv.len() + self.b.len() + self.c_inv.iter().map(Vec::len).sum::<usize>())
            + sparse(&self.d)
            + sparse(&self.dt)
    }

    /// Floating-point operations of one apply per right-hand side, counted operation by
    /// operation (GEMMs 2mnk, sparse products 2 nnz; the O(N) transforms are left out).
    pub fn flops_per_rhs(&self) -> f64 {
        let (nc, ne) = (self.c_dofs.len() as f64, self.e_dofs.len() as f64);
        let c_inv: f64 = self
            .groups
            .iter()
            .map(|g| 2.0 * (g.size * g.size * g.count) as f64)
            .sum();
        2.0 * ne * ne
            + 2.0 * 2.0 * nc * ne
            + 2.0 * c_inv
            + 2.0 * 2.0 * self.d.nnz() as f64
            + 2.0 * 2.0 * nc * nc
    }

    pub fn workspace(&self, nrhs: usize) -> M1Workspace<S> {
        let (nc, ne, ni) = (self.c_dofs.len(), self.e_dofs.len(), self.i_dofs.len());
        let zeros = |len: usize| vec![S::Compute::zero(); len * nrhs];
        let low = |len: usize| vec![S::default(); len * nrhs];
        M1Workspace {
            nrhs,
            nodal: zeros(self.setup_n),
            bc: zeros(nc),
            be: zeros(ne),
            bi: zeros(ni),
            ti: zeros(ni),
            te: zeros(ne),
            column_scale: vec![S::Compute::zero(); nrhs],
            c_low: low(nc),
            e_low: low(ne),
            e_low2: low(ne),
            i_low: low(ni),
            i_low2: low(ni),
        }
    }

    /// x_I-type product: out = C⁻¹ inp for every group (inputs and outputs in S).
    fn apply_c_inv(&self, nrhs: usize, inp: &[S], out: &mut [S]) {
        let ni = self.i_dofs.len();
        if let [g] = self.groups[..] {
            // One group spans all of I: the block is one size × (count·Nrhs) matrix.
            cpu::gemm(
                g.size,
                g.count * nrhs,
                g.size,
                out,
                g.size,
                Operand::col_major(&self.c_inv[0], g.size),
                Operand::col_major(inp, g.size),
            );
            return;
        }
        for col in 0..nrhs {
            for (g, inverse) in self.groups.iter().zip(&self.c_inv) {
                let span = col * ni + g.offset..col * ni + g.offset + g.size * g.count;
                cpu::gemm(
                    g.size,
                    g.count,
                    g.size,
                    &mut out[span.clone()],
                    g.size,
                    Operand::col_major(inverse, g.size),
                    Operand::col_major(&inp[span], g.size),
                );
            }
        }
    }

    /// X = A⁻¹ B for a column-major block of `ws.nrhs` right-hand sides (length N each).
    /// A non-finite result (an overflow in a low precision) is an error, never returned.
    pub fn solve(
        &self,
        b: &[S::Compute],
        x: &mut [S::Compute],
        ws: &mut M1Workspace<S>,
    ) -> Result<()> {
        let (n, k) = (self.setup_n, ws.nrhs);
        let (nc, ne, ni) = (self.c_dofs.len(), self.e_dofs.len(), self.i_dofs.len());
        assert_eq!(b.len(), n * k, "M1: right-hand side block is not N × Nrhs");
        assert_eq!(x.len(), n * k, "M1: solution block is not N × Nrhs");
        let zero = S::Compute::zero();

        // b̃ = Sᵀ b, then L⁻¹ into the C/E/I numbering.
        ws.nodal.copy_from_slice(b);
        self.hb.apply_transpose(&mut ws.nodal);
        ws.nodal
            .par_chunks(n)
            .zip(ws.bc.par_chunks_mut(nc.max(1)))
            .zip(ws.be.par_chunks_mut(ne))
            .zip(ws.bi.par_chunks_mut(ni))
            .zip(ws.column_scale.par_iter_mut())
            .for_each(|((((col, bc), be), bi), column_scale)| {
                for (kk, out) in bc.iter_mut().enumerate().take(nc) {
                    let mut s = zero;
                    for (l, &d) in self.c_dofs.iter().enumerate().take(kk + 1) {
                        s = s + self.l_c_inv[kk + l * nc] * col[d as usize];
                    }
                    *out = s;
                }
                for ((out, &d), &scale) in be.iter_mut().zip(&self.e_dofs).zip(&self.scale_e) {
                    *out = col[d as usize] * scale;
                }
                for ((out, &d), &scale) in bi.iter_mut().zip(&self.i_dofs).zip(&self.scale_i) {
                    *out = col[d as usize] * scale;
                }
                // Scale each column to max-norm 1, so f16 operands stay in range.
                let max = bc
                    .iter()
                    .take(nc)
                    .chain(be.iter())
                    .chain(bi.iter())
                    .fold(zero, |m, v| m.max(v.abs()));
                let scale = if max > zero { max } else { S::Compute::one() };
                *column_scale = scale;
                let inv = S::Compute::one() / scale;
                for v in bc
                    .iter_mut()
                    .take(nc)
                    .chain(be.iter_mut())
                    .chain(bi.iter_mut())
                {
                    *v = *v * inv;
                }
            });

        // t_I = C⁻¹ b_I; r_E = b_E − Bᵀ b_C − D t_I.
        to_storage(&ws.bi, &mut ws.i_low);
        self.apply_c_inv(k, &ws.i_low, &mut ws.i_low2);
        to_compute(&ws.i_low2, &mut ws.ti);
        cpu::spmv_block(
            &self.d,
            faer::MatRef::from_column_major_slice(&ws.ti, ni, k),
            faer::MatMut::from_column_major_slice_mut(&mut ws.te, ne, k),
        );
        to_storage(&ws.bc, &mut ws.c_low);
        cpu::gemm(
            ne,
            k,
            nc,
            &mut ws.e_low,
            ne,
            Operand::transposed(&self.b, nc),
            Operand::col_major(&ws.c_low, nc),
        );
        minus_minus(&ws.be, &ws.e_low, &mut ws.te);

        // x_E = Π⁻¹ r_E: a GEMM on blocks; for one right-hand side in f32/f64 a streaming
        // GEMV (faster there than the GEMM; for f16 operands the GEMM widens them faster).
        if k == 1 && S::as_compute(&self.pi_inv).is_some() {
            cpu::gemv(ne, ne, &self.pi_inv, ne, &ws.te, &mut ws.be); // b_E is no longer needed
            std::mem::swap(&mut ws.te, &mut ws.be);
            to_storage(&ws.te, &mut ws.e_low);
        } else {
            to_storage(&ws.te, &mut ws.e_low2);
            cpu::gemm(
                ne,
                k,
                ne,
                &mut ws.e_low,
                ne,
                Operand::col_major(&self.pi_inv, ne),
                Operand::col_major(&ws.e_low2, ne),
            );
            to_compute(&ws.e_low, &mut ws.te); // te = x_E
        }

        // x_C = b_C − B x_E (into bc).
        cpu::gemm(
            nc,
            k,
            ne,
            &mut ws.c_low,
            nc,
            Operand::col_major(&self.b, nc),
            Operand::col_major(&ws.e_low, ne),
        );
        for (bc, &t) in ws.bc.iter_mut().zip(&ws.c_low) {
            *bc = *bc - t.to_compute(); // |C| × Nrhs: small
        }

        // x_I = C⁻¹ (b_I − Dᵀ x_E) (into ti).
        cpu::spmv_block(
            &self.dt,
            faer::MatRef::from_column_major_slice(&ws.te, ne, k),
            faer::MatMut::from_column_major_slice_mut(&mut ws.ti, ni, k),
        );
        ws.ti
            .par_chunks_mut(CHUNK)
            .zip(ws.bi.par_chunks(CHUNK))
            .for_each(|(t, b)| {
                t.iter_mut().zip(b).for_each(|(t, &b)| *t = b - *t);
            });
        to_storage(&ws.ti, &mut ws.i_low);
        self.apply_c_inv(k, &ws.i_low, &mut ws.i_low2);
        to_compute(&ws.i_low2, &mut ws.ti);

        // L⁻ᵀ back to the lexicographic numbering, then S, and undo the column scaling.
        ws.nodal
            .par_chunks_mut(n)
            .zip(ws.bc.par_chunks(nc.max(1)))
            .zip(ws.te.par_chunks(ne))
            .zip(ws.ti.par_chunks(ni))
            .zip(ws.column_scale.par_iter())
            .for_each(|((((col, xc), xe), xi), &scale)| {
                for (l, &d) in self.c_dofs.iter().enumerate() {
                    let mut s = zero;
                    for (kk, &v) in xc.iter().enumerate().take(nc).skip(l) {
                        s = s + self.l_c_inv[kk + l * nc] * v;
                    }
                    col[d as usize] = s * scale;
                }
                for ((&d, &x), &s) in self.e_dofs.iter().zip(xe).zip(&self.scale_e) {
                    col[d as usize] = x * s * scale;
                }
                for ((&d, &x), &s) in self.i_dofs.iter().zip(xi).zip(&self.scale_i) {
                    col[d as usize] = x * s * scale;
                }
            });
        self.hb.apply(&mut ws.nodal);
        x.copy_from_slice(&ws.nodal);
        if let Some(bad) = x.iter().position(|v| !v.is_finite()) {
            return Err(Error::Solver(format!(
                "PSC M1 in {}: the solution of right-hand side {} is not finite (overflow in {} arithmetic)",
                S::PRECISION,
                bad / n,
                S::PRECISION
            )));
        }
        Ok(())
    }
}
