//! The PSC solve (docs/mathematics.md §3) on n × Nrhs blocks on any device, for the three methods:
//!
//!   b ↦ Sᵀb ↦ L⁻¹ ↦ [C/E system] ↦ x_I = C⁻¹(b_I − Dᵀx_E) ↦ L⁻ᵀ ↦ S,
//!
//! with g = D C⁻¹ b_I and the C/E system solved
//! - M1: x_E = Π⁻¹(b_E − Bᵀb_C − g), x_C = b_C − B x_E;
//! - M2: x_C = Θ⁻¹(b_C + B Λ⁻¹(g − b_E)), x_E = Λ⁻¹(b_E − Bᵀx_C − g);
//! - M3: by CG. The C block of [[I, B], [Bᵀ, Λ]] is the identity, so x_C = b_C − B x_E
//!   is eliminated exactly and CG runs on Π x_E = b_E − Bᵀb_C − g with Π = Λ − BᵀB
//!   applied as E p − D C⁻¹ Dᵀ p − Bᵀ(B p) (never formed; κ(Π) ≤ κ of the C/E system).
//!   Block CG: one Krylov iteration for all columns, per-column scalars.
//!
//! D is applied as [`Coupling`] says: sparse D and Dᵀ around two C⁻¹ products, or per macro
//! element inside them (psc/coupling.rs).
//!
//! Every dense product is one GEMM over the whole block (C⁻¹ group-wise, with the I part
//! of a group reshaped to one column per macro element and right-hand side); for a single
//! right-hand side the products with the dense inverses are streaming GEMVs instead.
//! Operators are stored in the working precision S; vectors between the GEMMs are in S's
//! compute precision, rounded to S only where they are a GEMM operand (f16). The workspace
//! is allocated by [`LinOp::prepare`]: the apply allocates nothing.

use super::coupling::{Coupling, LocalCoupling};
use super::{HierarchicalBasis, PscMethod, PscSetup, Schur};
use crate::device::psc::{i_slots, Classes, I_SLOT_ALIGN, PADDING_SLOT};
use bytemuck::Pod;

use crate::device::{
    Block, CsrMatrix, Data, GemmBatch, HostArray, Layout, MatMut, MatRef, PscDevice, StageMarks,
    StageTime, Stats, Storage,
};
use crate::error::{Error, Result};
use crate::linalg::{BlockCg, BlockKind, CgParams, Cost, LinOp};
use crate::precision::{convert_checked, GemmMath, Precision};
use crate::sparse::{Csr, SparseRows};

/// A group's I slots: `count` macro elements of `size` unknowns, each in `slots` ≥ `size`
/// slots (padded, [`i_slots`]) followed, with [`Coupling::Element`], by `boundary` slots
/// for its `boundary_size` boundary positions; from slot `offset` on.
#[derive(Clone, Copy, Debug)]
struct GroupLayout {
    offset: usize,
    size: usize,
    slots: usize,
    boundary_size: usize,
    boundary: usize,
    count: usize,
}

impl GroupLayout {
    /// Slots per macro element.
    fn stride(&self) -> usize {
        self.slots + self.boundary
    }
}

/// The I numbering of the device: each macro element's unknowns followed by its padding
/// slots (and its boundary slots, which the gather fills with zeros like padding).
struct SlotLayout {
    groups: Vec<GroupLayout>,
    /// The slot of each I entry of the set-up.
    slot_of: Vec<usize>,
    /// Per slot: its unknown and scaling ([`PADDING_SLOT`] and 0 in padding).
    dofs: Vec<u32>,
    scale: Vec<f64>,
}

impl SlotLayout {
    /// `boundary_sizes`: each group's boundary positions (none for [`Coupling::Csr`]).
    fn of(parts: &Parts, boundary_sizes: &[usize]) -> Self {
        let mut layout = SlotLayout {
            groups: Vec::new(),
            slot_of: Vec::with_capacity(parts.i_dofs.len()),
            dofs: Vec::new(),
            scale: Vec::new(),
        };
        let mut entries = parts.i_dofs.iter().zip(&parts.scale_i);
        for (g, &(size, count)) in parts.group_sizes.iter().enumerate() {
            let slots = i_slots(size);
            let boundary_size = boundary_sizes.get(g).copied().unwrap_or(0);
            // Where the I slots are padded for the GEMMs, the boundary slots are too, so
            // that every macro element's slots start on an aligned offset.
            let boundary = if slots.is_multiple_of(I_SLOT_ALIGN) && slots != size {
                boundary_size.next_multiple_of(I_SLOT_ALIGN)
            } else {
                i_slots(boundary_size)
            };
            let group = GroupLayout {
                offset: layout.dofs.len(),
                size,
                slots,
                boundary_size,
                boundary,
                count,
            };
            layout.groups.push(group);
            for _ in 0..count {
                for (&dof, &scale) in entries.by_ref().take(size) {
                    layout.slot_of.push(layout.dofs.len());
                    layout.dofs.push(dof);
                    layout.scale.push(scale);
                }
                let end = layout.dofs.len() + group.stride() - size;
                layout.dofs.resize(end, PADDING_SLOT);
                layout.scale.resize(end, 0.0);
            }
        }
        layout
    }

    /// A group's C_g⁻¹ (`size`² column-major) in `slots`² with zeros in the padding.
    fn pad_inverse<S: Pod>(inverse: HostArray<S>, g: &GroupLayout) -> HostArray<S> {
        if g.slots == g.size {
            return inverse;
        }
        let mut padded = vec![S::zeroed(); g.slots * g.slots];
        for (to, from) in padded.chunks_mut(g.slots).zip(inverse.chunks(g.size)) {
            to[..g.size].copy_from_slice(from);
        }
        padded.into()
    }

    /// Dᵀ (rows: the I entries) with its rows moved to their slots, padding rows empty.
    fn pad_rows<S: Storage>(&self, dt: Csr<S>) -> Result<Csr<S>> {
        if self.dofs.len() == dt.nrows() {
            return Ok(dt);
        }
        let mut row_ptr = vec![0; self.dofs.len() + 1];
        for (r, &slot) in self.slot_of.iter().enumerate() {
            row_ptr[slot + 1] = dt.row_ptr()[r + 1] - dt.row_ptr()[r];
        }
        for slot in 0..self.dofs.len() {
            row_ptr[slot + 1] += row_ptr[slot];
        }
        // Slots keep the order of the I entries, so the entries keep theirs.
        Csr::new(
            self.dofs.len(),
            dt.ncols(),
            row_ptr,
            dt.col_idx().to_vec(),
            dt.values().to_vec(),
        )
    }
}

/// What the solve takes from the set-up besides the operators it stores in its precision.
#[derive(Clone, Debug)]
pub(super) struct Parts {
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

impl Parts {
    pub(super) fn of(setup: &PscSetup) -> Self {
        Parts {
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

/// A method's own operators in storage precision S (dense ones column-major; owned, or
/// mapped from the operator cache).
#[derive(Clone, Debug, PartialEq)]
pub enum SchurHost<S: Pod> {
    M1 {
        pi_inv: HostArray<S>,
    },
    M2 {
        lambda_inv: HostArray<S>,
        theta_inv: HostArray<S>,
    },
    M3 {
        e: Csr<S>,
    },
}

impl<S: Pod> SchurHost<S> {
    pub fn method(&self) -> PscMethod {
        match self {
            SchurHost::M1 { .. } => PscMethod::M1,
            SchurHost::M2 { .. } => PscMethod::M2,
            SchurHost::M3 { .. } => PscMethod::M3,
        }
    }
}

/// A PSC method's operators in storage precision S on the host: what the operator cache
/// stores and what the device receives. B column-major, one C_g⁻¹ per group, Dᵀ, and the
/// method's own operators.
pub struct PscHost<S: Pod> {
    pub(super) parts: Parts,
    pub schur: SchurHost<S>,
    pub b: HostArray<S>,
    pub c_inv: Vec<HostArray<S>>,
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
pub(super) fn convert_values<S: Storage>(what: &str, data: &[f64]) -> Result<Vec<S>> {
    let negligible = S::PRECISION.unit_roundoff() * max_abs(data);
    let mut out = vec![S::default(); data.len()];
    convert_into(what, negligible, data, 0, &mut out)?;
    Ok(out)
}

fn max_abs(data: &[f64]) -> f64 {
    data.iter().fold(0.0f64, |a, v| a.max(v.abs()))
}

/// `out` = `data` converted as [`convert_values`] does; `offset` is the index of `data[0]`
/// in the operator (for the error).
fn convert_into<S: Storage>(
    what: &str,
    negligible: f64,
    data: &[f64],
    offset: usize,
    out: &mut [S],
) -> Result<()> {
    for (k, (o, &v)) in out.iter_mut().zip(data).enumerate() {
        *o = if v.abs() <= negligible {
            S::from_f64(v)
        } else {
            convert_checked::<S>(v).map_err(|problem| Error::PrecisionRange {
                what: what.to_string(),
                precision: S::PRECISION,
                index: offset + k,
                problem,
            })?
        };
    }
    Ok(())
}

/// [`convert_values`] of a dense operator into column-major order, column by column on
/// every core, with no f64 copy of it (Π⁻¹ is 30 GB at h = 1/1024). The error is the
/// first bad entry in column-major order, as the sequential conversion would name.
fn convert_dense<S: Storage>(what: &str, m: &faer::Mat<f64>) -> Result<Vec<S>> {
    use rayon::prelude::*;
    let rows = m.nrows();
    let column = |j: usize| {
        m.col(j)
            .try_as_col_major()
            .expect("faer columns are contiguous")
            .as_slice()
    };
    let largest = (0..m.ncols())
        .into_par_iter()
        .map(|j| max_abs(column(j)))
        .reduce(|| 0.0, f64::max);
    let negligible = S::PRECISION.unit_roundoff() * largest;
    let mut out = crate::device::host::zeroed_vec(rows * m.ncols());
    if rows == 0 {
        return Ok(out);
    }
    let results: Vec<Result<()>> = out
        .par_chunks_mut(rows)
        .enumerate()
        .map(|(j, o)| convert_into(what, negligible, column(j), j * rows, o))
        .collect();
    results.into_iter().collect::<Result<()>>()?;
    Ok(out)
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

impl<S: Storage> PscHost<S> {
    /// Converts the f64 set-up to storage precision S; values out of S's range are an error
    /// naming the operator.
    pub fn new(setup: &PscSetup) -> Result<Self> {
        let schur = match &setup.schur {
            Schur::M1 { pi_inv } => SchurHost::M1 {
                pi_inv: convert_dense("Π⁻¹", pi_inv)?.into(),
            },
            Schur::M2 {
                lambda_inv,
                theta_inv,
            } => SchurHost::M2 {
                lambda_inv: convert_dense("Λ⁻¹", lambda_inv)?.into(),
                theta_inv: convert_dense("Θ⁻¹", theta_inv)?.into(),
            },
            Schur::M3 { e } => SchurHost::M3 {
                e: convert_sparse("E", e)?,
            },
        };
        Ok(PscHost {
            parts: Parts::of(setup),
            schur,
            b: convert_dense("B", &setup.b)?.into(),
            c_inv: setup
                .groups
                .iter()
                .map(|g| convert_dense("C⁻¹", &g.inverse).map(HostArray::from))
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
    /// M2 and M3: a second E block; M3: a second I block and the CG (empty otherwise).
    e2: Block<D>,
    ti2: Block<D>,
    cg: Option<BlockCg<D>>,
    column_scale: Data<D>,
    stats: Stats<D>,
}

/// Bytes of a list of device arrays.
fn all_bytes<D: PscDevice>(arrays: &[Data<D>]) -> usize {
    arrays.iter().map(Data::bytes).sum()
}

/// A method's own operators on the device.
enum SchurOps<D: PscDevice> {
    M1 {
        pi_inv: Data<D>,
    },
    M2 {
        lambda_inv: Data<D>,
        theta_inv: Data<D>,
    },
    M3 {
        e: CsrMatrix<D>,
    },
}

/// The per-group products of an apply.
#[derive(Clone, Copy, Debug)]
enum GroupProduct {
    /// C_g⁻¹ on the I slots ([`Coupling::Csr`]).
    CInv,
    /// D̂_g C_g⁻¹ = W_gᵀ from the I slots into the boundary slots.
    LocalD,
    /// [C_g⁻¹ | W_g] from the I and boundary slots into the I slots.
    LocalSolve,
    /// Z_g = D̂_g C_g⁻¹ D̂_gᵀ on the boundary slots (M3).
    LocalSchur,
}

/// How the apply multiplies by D ([`Coupling`]), with the C_g⁻¹ products.
enum CouplingOps<D: PscDevice> {
    Csr {
        /// C_g⁻¹ per group (slots², zero in the padding).
        c_inv: Vec<Data<D>>,
        d: CsrMatrix<D>,
        dt: CsrMatrix<D>,
        nnz: usize,
    },
    Element {
        /// [C_g⁻¹ | W_g] per group, W_g = C_g⁻¹ D̂_gᵀ (slots × (slots + boundary slots)).
        m: Vec<Data<D>>,
        /// M3: Z_g = D̂_g W_g per group (boundary slots², empty for M1 and M2).
        z: Vec<Data<D>>,
        /// x ↦ s_∂m ∘ x_∂m into every macro element's boundary slots.
        gather: CsrMatrix<D>,
        /// The transpose: the macro elements' boundary values summed into E.
        assemble: CsrMatrix<D>,
        nnz: usize,
    },
}

/// When M3's CG stops: every column at ‖r‖₂ ≤ rtol·‖r₀‖₂ on Π x_E = r_E (the prehandled
/// system, columns scaled to max-norm 1), or after `max_iterations` (an error when
/// `strict`: inside PSC-IR an unconverged inner solve is corrected by the next step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InnerCg {
    pub rtol: f64,
    pub max_iterations: usize,
    pub strict: bool,
}

impl InnerCg {
    /// The iterations a CG of a run or benchmark may take (κ(Π) ≤ 25 on the meshes of
    /// docs/mathematics.md §8.1: 20 to 60 iterations reach 1e-12).
    pub const MAX_ITERATIONS: usize = 1000;

    /// M3 alone for a nodal relative residual of about `rtol`: CG to rtol/10 on the
    /// prehandled system, whose residual is another norm (the nodal one measured 1.5 to 4
    /// times the prehandled at h = 1/512 and 1/1024, docs/mathematics.md §3).
    pub fn alone_for_nodal(rtol: f64) -> Self {
        InnerCg::alone(rtol / 10.0, Self::MAX_ITERATIONS)
    }

    /// M3 alone: to `rtol`, failing after `max_iterations`.
    pub fn alone(rtol: f64, max_iterations: usize) -> Self {
        InnerCg {
            rtol,
            max_iterations,
            strict: true,
        }
    }

    /// M3 inside PSC-IR in `precision`: to `rtol` or, by default, to what its products
    /// resolve (1e-3 in f16 and tf32, whose unit roundoff is 2^-11; 1e-4 otherwise: more is
    /// lost to the next refinement step), never failing.
    pub fn inner(precision: Precision, rtol: Option<f64>) -> Self {
        InnerCg {
            rtol: rtol.unwrap_or(
                if precision.unit_roundoff() >= Precision::F16.unit_roundoff() {
                    1e-3
                } else {
                    1e-4
                },
            ),
            max_iterations: Self::MAX_ITERATIONS,
            strict: false,
        }
    }

    /// The rule of a run or benchmark: inside PSC-IR (`refine`) [`InnerCg::inner`], alone
    /// `cg_rtol` when given, else [`InnerCg::alone_for_nodal`] of the nodal `rtol`.
    pub fn configured(refine: bool, precision: Precision, cg_rtol: Option<f64>, rtol: f64) -> Self {
        match (refine, cg_rtol) {
            (true, _) => InnerCg::inner(precision, cg_rtol),
            (false, Some(cg_rtol)) => InnerCg::alone(cg_rtol, Self::MAX_ITERATIONS),
            (false, None) => InnerCg::alone_for_nodal(rtol),
        }
    }
}

impl Default for InnerCg {
    fn default() -> Self {
        InnerCg::alone_for_nodal(1e-9)
    }
}

/// What the applies since the last [`PscOperator::take_counts`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApplyCounts {
    pub applies: usize,
    /// M3's CG iterations, summed over the applies (one block iteration counts once).
    pub cg_iterations: usize,
    /// Counted operations (GEMMs 2mnk, sparse products 2 nnz).
    pub flops: f64,
    /// Columns the applies solved, summed.
    pub columns: usize,
    /// Each stage's modelled cost ([`PscOperator::stage_costs`]) summed over the applies,
    /// each at its own width.
    pub stages: Vec<(&'static str, Cost)>,
}

/// The stages of an apply, in the order they run, as [`PscOperator::time_stages`] and
/// [`PscOperator::stage_costs`] name them.
pub mod stage {
    pub const GATHER: &str = "Sᵀ b, gather";
    /// C_INV_B, D, DT, C_INV_R: with [`super::Coupling::Csr`].
    pub const C_INV_B: &str = "C⁻¹ b_I";
    pub const D: &str = "D";
    pub const SCHUR: &str = "C/E system";
    pub const DT: &str = "b_I − Dᵀx_E";
    pub const C_INV_R: &str = "C⁻¹ r_I";
    /// LOCAL_D, ASSEMBLE, BOUNDARY, LOCAL_SOLVE: the same four with
    /// [`super::Coupling::Element`].
    pub const LOCAL_D: &str = "D̂C⁻¹ b_I";
    pub const ASSEMBLE: &str = "assemble g";
    pub const BOUNDARY: &str = "[b_I; −x_∂]";
    pub const LOCAL_SOLVE: &str = "[C⁻¹ W] r";
    pub const SCATTER: &str = "scatter, S";
    pub const STATISTICS: &str = "statistics";
}

/// A PSC method's operators on a device, in a storage precision.
pub struct PscOperator<D: PscDevice> {
    dev: D,
    /// The operators' storage precision.
    precision: Precision,
    /// How the GEMMs multiply (TF32 on f32 operators: [`Precision::Tf32`]).
    math: GemmMath,
    n: usize,
    transform: crate::device::psc::HierarchicalTransform<D>,
    classes: Classes<D>,
    schur: SchurOps<D>,
    b: Data<D>,
    groups: Vec<GroupLayout>,
    coupling: CouplingOps<D>,
    cg: InnerCg,
    /// CG iterations of the last apply (M3).
    last_iterations: usize,
    counts: ApplyCounts,
    ws: Option<Workspace<D>>,
    /// A second workspace for blocks narrower than `ws`'s ([`LinOp::prepare_narrow`]).
    narrow_ws: Option<Workspace<D>>,
    /// The stage marks of [`PscOperator::time_stages`] (None when not timing).
    clock: std::cell::RefCell<Option<StageMarks<D>>>,
}

impl<D: PscDevice> PscOperator<D> {
    /// The method of an f64 set-up in precision `precision` (TF32: stored in f32); values
    /// out of its range are an error naming the operator.
    pub fn new(
        dev: &D,
        setup: &PscSetup,
        precision: Precision,
        coupling: Coupling,
    ) -> Result<Self> {
        let mut op = match precision.storage() {
            Precision::F16 => Self::upload(dev, PscHost::<half::f16>::new(setup)?, coupling),
            Precision::F64 => Self::upload(dev, PscHost::<f64>::new(setup)?, coupling),
            _ => Self::upload(dev, PscHost::<f32>::new(setup)?, coupling),
        }?;
        op.multiply_in(precision.gemm_math())?;
        Ok(op)
    }

    /// Multiplies the GEMMs in `math` from now on: TF32 needs f32 operators (whose
    /// precision then reads tf32); the single-column products (GEMV, SYMV) stay in f32.
    pub fn multiply_in(&mut self, math: GemmMath) -> Result<()> {
        if math == GemmMath::Tf32 && self.precision != Precision::F32 {
            return Err(Error::InvalidInput(format!(
                "TF32 products need operators stored in f32, not {}",
                self.precision
            )));
        }
        self.math = math;
        Ok(())
    }

    /// The operators already in their storage precision (converted or from the cache),
    /// applying D as `coupling` says.
    pub fn upload<S: Storage>(dev: &D, host: PscHost<S>, coupling: Coupling) -> Result<Self> {
        let PscHost {
            parts,
            schur,
            b,
            c_inv,
            dt,
        } = host;
        let compute = S::PRECISION.compute();
        let (slots, coupling) = match coupling {
            Coupling::Csr => {
                let slots = SlotLayout::of(&parts, &[]);
                let dt = slots.pad_rows(dt)?;
                let d = dt.transpose();
                let ops = CouplingOps::Csr {
                    c_inv: c_inv
                        .into_iter()
                        .zip(&slots.groups)
                        .map(|(c, g)| Data::from_owned(dev, SlotLayout::pad_inverse(c, g)))
                        .collect::<Result<_>>()?,
                    nnz: d.nnz(),
                    d: CsrMatrix::upload(dev, &d)?,
                    dt: CsrMatrix::upload(dev, &dt)?,
                };
                (slots, ops)
            }
            Coupling::Element => {
                let local = LocalCoupling::of(&parts.group_sizes, &parts.scale_e, &dt);
                drop(dt);
                let positions = local.boundary_sizes();
                log::info!("PSC: D per macro element, boundary positions per group {positions:?}");
                // Congruent macro elements share their positions; many more than one macro
                // element's boundary unknowns mean they did not match (correct, but slow).
                if positions
                    .iter()
                    .zip(&local.widest)
                    .any(|(&p, &w)| p > 2 * w)
                {
                    log::warn!(
                        "PSC: the macro elements of a group do not share their couplings with E (boundary positions per group {positions:?}, at most {:?} per macro element): the element coupling is correct but slower here than coupling = \"csr\"",
                        local.widest
                    );
                }
                let slots = SlotLayout::of(&parts, &local.boundary_sizes());
                let with_z = matches!(schur, SchurHost::M3 { .. });
                let (mut m, mut z) = (Vec::new(), Vec::new());
                for (g, (layout, c)) in slots.groups.iter().zip(&c_inv).enumerate() {
                    let shape = (layout.size, layout.slots, layout.boundary);
                    let (mg, zg) = local.operators(g, c, shape, with_z)?;
                    m.push(Data::from_owned(dev, HostArray::from(mg))?);
                    z.push(Data::from_owned(dev, HostArray::from(zg))?);
                }
                drop(c_inv);
                // The k-th macro element's boundary slots, group by group.
                let firsts: Vec<usize> = slots
                    .groups
                    .iter()
                    .flat_map(|g| (0..g.count).map(move |j| g.offset + j * g.stride() + g.slots))
                    .collect();
                let gather = local.gather::<S>(
                    slots.dofs.len(),
                    parts.e_dofs.len(),
                    &parts.scale_e,
                    |k| firsts[k],
                )?;
                let assemble = gather.transpose();
                let ops = CouplingOps::Element {
                    m,
                    z,
                    nnz: gather.nnz(),
                    gather: CsrMatrix::upload(dev, &gather)?,
                    assemble: CsrMatrix::upload(dev, &assemble)?,
                };
                (slots, ops)
            }
        };
        let schur = match schur {
            SchurHost::M1 { pi_inv } => SchurOps::M1 {
                pi_inv: Data::from_owned(dev, pi_inv)?,
            },
            SchurHost::M2 {
                lambda_inv,
                theta_inv,
            } => SchurOps::M2 {
                lambda_inv: Data::from_owned(dev, lambda_inv)?,
                theta_inv: Data::from_owned(dev, theta_inv)?,
            },
            SchurHost::M3 { e } => SchurOps::M3 {
                e: CsrMatrix::upload(dev, &e)?,
            },
        };
        Ok(PscOperator {
            n: parts.c_dofs.len() + parts.e_dofs.len() + parts.i_dofs.len(),
            transform: parts.hb.transform(dev, compute)?,
            classes: Classes::upload(
                dev,
                &parts.c_dofs,
                &parts.e_dofs,
                &slots.dofs,
                &parts.l_c_inv,
                &parts.scale_e,
                &slots.scale,
                compute,
            )?,
            schur,
            b: Data::from_owned(dev, b)?,
            groups: slots.groups,
            coupling,
            precision: S::PRECISION,
            math: GemmMath::Full,
            cg: InnerCg::default(),
            last_iterations: 0,
            counts: ApplyCounts::default(),
            clock: std::cell::RefCell::new(None),
            dev: dev.clone(),
            ws: None,
            narrow_ws: None,
        })
    }

    /// How the operator applies D.
    pub fn coupling(&self) -> Coupling {
        match self.coupling {
            CouplingOps::Csr { .. } => Coupling::Csr,
            CouplingOps::Element { .. } => Coupling::Element,
        }
    }

    pub fn method(&self) -> PscMethod {
        match self.schur {
            SchurOps::M1 { .. } => PscMethod::M1,
            SchurOps::M2 { .. } => PscMethod::M2,
            SchurOps::M3 { .. } => PscMethod::M3,
        }
    }

    /// The precision the operators are stored and multiplied in (tf32: stored in f32).
    pub fn precision(&self) -> Precision {
        match self.math {
            GemmMath::Tf32 => Precision::Tf32,
            GemmMath::Full => self.precision,
        }
    }

    pub fn num_unknowns(&self) -> usize {
        self.n
    }

    /// M3's stopping rule (the other methods ignore it).
    pub fn set_inner_cg(&mut self, cg: InnerCg) {
        self.cg = cg;
    }

    pub fn inner_cg(&self) -> InnerCg {
        self.cg
    }

    /// The counts of the applies since the last call, and zero them.
    pub fn take_counts(&mut self) -> ApplyCounts {
        std::mem::take(&mut self.counts)
    }

    /// Times every stage of the applies from now on (`true`) by marks in the device's queue
    /// (CUDA events on a GPU), which no stage waits for, or stops timing.
    pub fn time_stages(&mut self, on: bool) {
        *self.clock.get_mut() = on.then(StageMarks::default);
    }

    /// Seconds per stage of the applies since the last call (empty when not timing), and
    /// zero them. Waits for the device's last mark.
    pub fn take_stage_seconds(&mut self) -> Result<Vec<StageTime>> {
        match self.clock.get_mut().as_mut() {
            Some(marks) => marks.take(&self.dev),
            None => Ok(Vec::new()),
        }
    }

    /// Ends `stage` at this point of the device's queue when timing.
    fn mark(&self, stage: &'static str) -> Result<()> {
        match self.clock.borrow_mut().as_mut() {
            Some(marks) => marks.end(&self.dev, stage),
            None => Ok(()),
        }
    }

    /// Starts an apply's span (what was queued before is not its).
    fn start_clock(&self) -> Result<()> {
        match self.clock.borrow_mut().as_mut() {
            Some(marks) => marks.begin(&self.dev),
            None => Ok(()),
        }
    }

    /// CG iterations of the last apply (0 for the direct methods).
    pub fn last_iterations(&self) -> usize {
        self.last_iterations
    }

    /// |C|, |E|, |I| and the number of groups of identical macro elements.
    pub fn class_sizes(&self) -> (usize, usize, usize, usize) {
        let (c, e, _) = self.classes.sizes;
        (c, e, self.n - c - e, self.groups.len())
    }

    /// Bytes of the stored operators (what one apply must read at least once).
    pub fn operator_bytes(&self) -> usize {
        let schur = match &self.schur {
            SchurOps::M1 { pi_inv } => pi_inv.bytes(),
            SchurOps::M2 {
                lambda_inv,
                theta_inv,
            } => lambda_inv.bytes() + theta_inv.bytes(),
            SchurOps::M3 { e } => e.bytes(),
        };
        let coupling = match &self.coupling {
            CouplingOps::Csr { c_inv, d, dt, .. } => all_bytes(c_inv) + d.bytes() + dt.bytes(),
            CouplingOps::Element {
                m,
                z,
                gather,
                assemble,
                ..
            } => all_bytes(m) + all_bytes(z) + gather.bytes() + assemble.bytes(),
        };
        schur + self.b.bytes() + coupling
    }

    /// Bytes of the stored operators one apply on `nrhs` columns reads: all of them, but
    /// only the lower triangle of the symmetric dense inverses for one column where the
    /// device's SYMV reads half ([`DenseKernels::symv_reads_lower_triangle`]).
    pub fn operator_bytes_read(&self, nrhs: usize) -> usize {
        let unread = |m: &Data<D>| m.bytes() - self.symmetric_bytes(m, nrhs);
        self.operator_bytes()
            - match &self.schur {
                SchurOps::M1 { pi_inv } => unread(pi_inv),
                SchurOps::M2 {
                    lambda_inv,
                    theta_inv,
                } => unread(lambda_inv) + unread(theta_inv),
                SchurOps::M3 { .. } => 0,
            }
    }

    /// Operations per right-hand side of one product of every group's `rows` × `cols`
    /// operator with its macro elements, the sizes unpadded.
    fn group_flops(&self, shape: impl Fn(&GroupLayout) -> (usize, usize)) -> f64 {
        self.groups
            .iter()
            .map(|g| {
                let (rows, cols) = shape(g);
                2.0 * (rows * cols * g.count) as f64
            })
            .sum()
    }

    /// Slots per right-hand side of every macro element's `part` (its I or boundary
    /// slots).
    fn group_slots(&self, part: impl Fn(&GroupLayout) -> usize) -> usize {
        self.groups.iter().map(|g| part(g) * g.count).sum()
    }

    /// Bytes of a symmetric dense inverse one product on `nrhs` columns must read: all of
    /// it, or its lower triangle for one column where the device's SYMV reads only that
    /// ([`DenseKernels::symv_reads_lower_triangle`]).
    fn symmetric_bytes(&self, m: &Data<D>, nrhs: usize) -> usize {
        if nrhs != 1 || !self.dev.symv_reads_lower_triangle() {
            return m.bytes();
        }
        let size = m.precision().bytes();
        let n = ((m.bytes() / size) as f64).sqrt().round() as usize;
        n * (n + 1) / 2 * size
    }

    /// What each stage of one apply on `nrhs` columns must move and compute, in the order
    /// the stages run and named as [`PscOperator::time_stages`] names them; M3's C/E
    /// system with `cg_iterations` block iterations of its CG (a mean over several
    /// applies may be fractional). Bytes are compulsory: each
    /// array the stage reads or writes, once, at its stored precision (blocks in the
    /// compute precision, operators in theirs; the storage-precision copies of GEMM
    /// operands and other temporaries inside a stage are not counted). Flops are counted
    /// operation by operation (GEMMs 2mnk, sparse products 2 nnz; the O(N) transforms,
    /// scalings and subtractions left out).
    pub fn stage_costs(&self, nrhs: usize, cg_iterations: f64) -> [(&'static str, Cost); 8] {
        let (nc, ne, slots) = self.classes.sizes;
        let k = nrhs as f64;
        // `rows` × nrhs of a block in the compute precision, and of a GEMM operand in the
        // storage precision.
        let block = |rows: usize| (rows * self.precision.compute().bytes()) as f64 * k;
        let operand = |rows: usize| (rows * self.precision.bytes()) as f64 * k;
        let cost = |bytes: f64, flops_per_rhs: f64| Cost {
            bytes,
            flops: flops_per_rhs * k,
        };
        let (n, nc_f, ne_f) = (self.n, nc as f64, ne as f64);
        let classes = self.classes.bytes() as f64;
        let b = self.b.bytes() as f64;
        // The four coupling stages, and what one application of D C⁻¹ Dᵀ in M3's CG reads
        // (operators, then the slots of its vectors it passes) and computes.
        let (coupling, (pi_operators, pi_slots, pi_flops)) = match &self.coupling {
            CouplingOps::Csr { c_inv, d, dt, nnz } => {
                let c_inv_bytes = all_bytes(c_inv) as f64;
                let c_inv_flops = self.group_flops(|g| (g.size, g.size));
                let d_flops = 2.0 * *nnz as f64;
                (
                    [
                        (
                            stage::C_INV_B,
                            cost(block(2 * slots) + c_inv_bytes, c_inv_flops),
                        ),
                        (
                            stage::D,
                            cost(block(slots + ne) + d.bytes() as f64, d_flops),
                        ),
                        // r_I = b_I − Dᵀ x_E written as the next product's operand.
                        (
                            stage::DT,
                            cost(
                                block(ne + slots) + operand(slots) + dt.bytes() as f64,
                                d_flops,
                            ),
                        ),
                        (
                            stage::C_INV_R,
                            cost(block(slots) + operand(slots) + c_inv_bytes, c_inv_flops),
                        ),
                    ],
                    (
                        (dt.bytes() + d.bytes()) as f64 + c_inv_bytes,
                        3 * slots,
                        c_inv_flops + 2.0 * d_flops,
                    ),
                )
            }
            CouplingOps::Element {
                m,
                z,
                gather,
                assemble,
                nnz,
            } => {
                let inner = self.group_slots(|g| g.slots);
                let boundary = self.group_slots(|g| g.boundary);
                let w_bytes = self
                    .groups
                    .iter()
                    .map(|g| g.slots * g.boundary * self.precision.bytes())
                    .sum::<usize>() as f64;
                let d_flops = 2.0 * *nnz as f64;
                (
                    [
                        (
                            stage::LOCAL_D,
                            cost(
                                operand(inner) + block(boundary) + w_bytes,
                                self.group_flops(|g| (g.boundary_size, g.size)),
                            ),
                        ),
                        (
                            stage::ASSEMBLE,
                            cost(block(boundary + ne) + assemble.bytes() as f64, d_flops),
                        ),
                        // [b_I; −s ∘ x_∂] written as the next product's operand (b_I read
                        // with its zero boundary slots).
                        (
                            stage::BOUNDARY,
                            cost(
                                block(ne + slots) + operand(slots) + gather.bytes() as f64,
                                d_flops,
                            ),
                        ),
                        (
                            stage::LOCAL_SOLVE,
                            cost(
                                operand(slots) + block(inner) + all_bytes(m) as f64,
                                self.group_flops(|g| (g.size, g.size + g.boundary_size)),
                            ),
                        ),
                    ],
                    // The gather writes every slot (zeros on the I slots), Z reads and
                    // writes the boundary slots.
                    (
                        (gather.bytes() + assemble.bytes() + all_bytes(z)) as f64,
                        slots + 2 * boundary,
                        self.group_flops(|g| (g.boundary_size, g.boundary_size)) + 2.0 * d_flops,
                    ),
                )
            }
        };
        // x_C and x_E from b_C, b_E and g: the C/E blocks in and out, B, the inverses.
        let ce_blocks = block(2 * nc + 3 * ne);
        let schur = match &self.schur {
            SchurOps::M1 { pi_inv } => cost(
                ce_blocks + b + self.symmetric_bytes(pi_inv, nrhs) as f64,
                4.0 * nc_f * ne_f + 2.0 * ne_f * ne_f,
            ),
            SchurOps::M2 {
                lambda_inv,
                theta_inv,
            } => cost(
                ce_blocks
                    + b
                    + (self.symmetric_bytes(lambda_inv, nrhs)
                        + self.symmetric_bytes(theta_inv, nrhs)) as f64,
                4.0 * nc_f * ne_f + 4.0 * ne_f * ne_f + 2.0 * nc_f * nc_f,
            ),
            // Each CG iteration reads Π's operators (those of D C⁻¹ Dᵀ, E, B), about ten
            // E vectors and the slots D C⁻¹ Dᵀ passes.
            SchurOps::M3 { e } => {
                let iteration = cost(
                    pi_operators + e.bytes() as f64 + b + block(10 * ne + pi_slots),
                    pi_flops + 2.0 * e.nnz() as f64 + 4.0 * nc_f * ne_f,
                );
                cost(ce_blocks + b, 4.0 * nc_f * ne_f) + iteration * cg_iterations
            }
        };
        let l_c = 2.0 * nc_f * nc_f;
        // The per-column scale of the right-hand sides, written by the gather, read by
        // the scatter.
        let scale = block(1);
        let [first, d, dt, second] = coupling;
        [
            (
                stage::GATHER,
                cost(
                    block(n + nc + ne + slots)
                        + scale
                        + classes
                        + self.transform.bytes(true) as f64,
                    l_c,
                ),
            ),
            first,
            d,
            (stage::SCHUR, schur),
            dt,
            second,
            (
                stage::SCATTER,
                cost(
                    block(nc + ne + slots + n)
                        + scale
                        + classes
                        + self.transform.bytes(false) as f64,
                    l_c,
                ),
            ),
            (
                stage::STATISTICS,
                cost(block(n) + (Stats::<D>::len_for(nrhs) * 8) as f64, 0.0),
            ),
        ]
    }

    /// Operations of the last apply per right-hand side (before the first: without CG).
    pub fn flops_per_rhs(&self) -> f64 {
        let stages = self.stage_costs(1, self.last_iterations as f64);
        stages.iter().map(|(_, c)| c.flops).sum()
    }

    /// out = A_g inp on the macro elements of every group g, A_g the operator `product`
    /// names (inp in the storage precision, out in the compute).
    fn per_group(
        &self,
        nrhs: usize,
        product: GroupProduct,
        inp: &Block<D>,
        out: &mut Block<D>,
    ) -> Result<()> {
        // Group i's operator, the rows of each macro element's slots it multiplies
        // (offset, count) and those it writes.
        let shape = |i: usize| {
            let g = &self.groups[i];
            let (s, b) = (g.slots, g.boundary);
            match (&self.coupling, product) {
                (CouplingOps::Csr { c_inv, .. }, GroupProduct::CInv) => {
                    (MatRef::col_major(&c_inv[i], 0, s, s, s), (0, s), (0, s))
                }
                (CouplingOps::Element { m, .. }, GroupProduct::LocalD) => {
                    (MatRef::transposed(&m[i], s * s, b, s, s), (0, s), (s, b))
                }
                (CouplingOps::Element { m, .. }, GroupProduct::LocalSolve) => {
                    (MatRef::col_major(&m[i], 0, s, s + b, s), (0, s + b), (0, s))
                }
                (CouplingOps::Element { z, .. }, GroupProduct::LocalSchur) => {
                    (MatRef::col_major(&z[i], 0, b, b, b), (s, b), (s, b))
                }
                _ => unreachable!("{product:?} belongs to the other coupling"),
            }
        };
        let slots = self.classes.sizes.2;
        if let [g] = self.groups[..] {
            // One group spans all slots: each part is one matrix of count·Nrhs columns.
            let (a, (in_at, in_rows), (out_at, out_rows)) = shape(0);
            let (columns, ld) = (g.count * nrhs, g.stride());
            return self.dev.gemm(
                a,
                MatRef::col_major(&inp.data, in_at, in_rows, columns, ld),
                MatMut::col_major(&mut out.data, out_at, out_rows, columns, ld),
                self.math,
            );
        }
        // Several groups: per group, one batched product over the right-hand sides (the
        // group's slots of column c start at c·(all slots) + offset).
        for (i, g) in self.groups.iter().enumerate() {
            let (a, (in_at, in_rows), (out_at, out_rows)) = shape(i);
            let ld = g.stride();
            self.dev.gemm_batched(
                a,
                MatRef::col_major(&inp.data, g.offset + in_at, in_rows, g.count, ld),
                MatMut::col_major(&mut out.data, g.offset + out_at, out_rows, g.count, ld),
                GemmBatch {
                    count: nrhs,
                    stride_a: 0,
                    stride_b: slots,
                    stride_c: slots,
                },
                self.math,
            )?;
        }
        Ok(())
    }

    /// out = M v for a symmetric dense inverse M (stored in S, `rows` × `rows`): a GEMM of
    /// a symmetric operand (`symm`) on blocks, a streaming SYMV (one pass over M's lower
    /// triangle where the device can, widened on the fly for f16) for one right-hand side.
    /// `low` is v's storage-precision copy.
    fn dense_inverse(
        &self,
        m: &Data<D>,
        v: &Block<D>,
        low: &mut Block<D>,
        out: &mut Block<D>,
    ) -> Result<()> {
        let (rows, k) = (v.rows(), v.cols());
        if k == 1 {
            return self.dev.symv(
                MatRef::col_major(m, 0, rows, rows, rows),
                v.view(),
                out.view_mut(),
            );
        }
        let v = operand(&self.dev, v, low)?;
        self.dev.symm(
            MatRef::col_major(m, 0, rows, rows, rows),
            MatRef::col_major(&v.data, 0, rows, k, rows),
            MatMut::col_major(&mut out.data, 0, rows, k, rows),
            self.math,
        )
    }

    /// out_C = B v_E (a streaming GEMV for one right-hand side).
    fn b_product(&self, v: &Block<D>, low: &mut Block<D>, out: &mut Block<D>) -> Result<()> {
        let (nc, ne, _) = self.classes.sizes;
        let k = v.cols();
        if k == 1 {
            return self.dev.gemv(
                MatRef::col_major(&self.b, 0, nc, ne, nc),
                v.view(),
                out.view_mut(),
            );
        }
        let v = operand(&self.dev, v, low)?;
        self.dev.gemm(
            MatRef::col_major(&self.b, 0, nc, ne, nc),
            MatRef::col_major(&v.data, 0, ne, k, ne),
            MatMut::col_major(&mut out.data, 0, nc, k, nc),
            self.math,
        )
    }

    /// out_E = Bᵀ v_C.
    fn bt_product(&self, v: &Block<D>, low: &mut Block<D>, out: &mut Block<D>) -> Result<()> {
        let (nc, ne, _) = self.classes.sizes;
        let k = v.cols();
        let v = operand(&self.dev, v, low)?;
        self.dev.gemm(
            MatRef::transposed(&self.b, 0, ne, nc, nc),
            MatRef::col_major(&v.data, 0, nc, k, nc),
            MatMut::col_major(&mut out.data, 0, ne, k, ne),
            self.math,
        )
    }

    /// The narrow workspace or the prepared width's.
    fn workspace_slot(&mut self, narrow: bool) -> &mut Option<Workspace<D>> {
        if narrow {
            &mut self.narrow_ws
        } else {
            &mut self.ws
        }
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
        let method = self.method();
        let (e2, ti2) = match method {
            PscMethod::M1 => (0, 0),
            PscMethod::M2 => (ne, 0),
            PscMethod::M3 => (ne, ni),
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
            e2: block(e2, compute)?,
            ti2: block(ti2, compute)?,
            cg: match method {
                PscMethod::M3 => Some(BlockCg::new(dev, ne, nrhs, compute, Layout::ColMajor)?),
                _ => None,
            },
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

impl<D: PscDevice> LinOp<D> for PscOperator<D> {
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
            // A narrow workspace belongs to the width it was narrower than.
            self.narrow_ws = None;
            self.ws = Some(self.workspace(nrhs)?);
        }
        Ok(())
    }

    fn prepare_narrow(&mut self, width: usize) -> Result<bool> {
        if self.narrow_ws.as_ref().is_none_or(|w| w.nrhs != width) {
            self.narrow_ws = Some(self.workspace(width)?);
        }
        Ok(true)
    }

    /// X = A⁻¹ B for a column-major block of right-hand sides. A non-finite result (an
    /// overflow in a low precision) is an error, never returned.
    fn apply(&mut self, b: &Block<D>, x: &mut Block<D>) -> Result<()> {
        let k = b.cols();
        let narrow = self.ws.as_ref().is_none_or(|w| w.nrhs != k)
            && self.narrow_ws.as_ref().is_some_and(|w| w.nrhs == k);
        if !narrow {
            self.prepare(k)?;
        }
        let mut ws = self.workspace_slot(narrow).take().expect("prepared");
        let result = self.solve(b, x, &mut ws).and_then(|()| {
            self.dev.column_stats(x, &mut ws.stats)?;
            let s = ws.stats.read(&self.dev)?;
            self.mark(stage::STATISTICS)?;
            let limit = self.precision.compute().max();
            match (0..k).find(|&c| !(s.norm(c).is_finite() && s.max_abs[c] <= limit)) {
                Some(c) => Err(Error::from(super::PscError::not_finite(
                    self.method(),
                    self.precision(),
                    c,
                ))),
                None => Ok(()),
            }
        });
        *self.workspace_slot(narrow) = Some(ws);
        self.counts.applies += 1;
        self.counts.cg_iterations += self.last_iterations;
        self.counts.flops += self.flops_per_rhs() * k as f64;
        self.counts.columns += k;
        for (stage, cost) in self.stage_costs(k, self.last_iterations as f64) {
            match self.counts.stages.iter_mut().find(|(s, _)| *s == stage) {
                Some((_, sum)) => *sum = *sum + cost,
                None => self.counts.stages.push((stage, cost)),
            }
        }
        result
    }

    /// The sum of [`PscOperator::stage_costs`] with the last apply's CG iterations.
    fn cost(&self, nrhs: usize) -> Cost {
        let stages = self.stage_costs(nrhs, self.last_iterations as f64);
        stages
            .into_iter()
            .map(|(_, c)| c)
            .fold(Cost::default(), |a, c| a + c)
    }
}

impl<D: PscDevice> PscOperator<D> {
    fn solve(&mut self, b: &Block<D>, x: &mut Block<D>, ws: &mut Workspace<D>) -> Result<()> {
        let dev = &self.dev;
        let k = ws.nrhs;
        if x.rows() != self.n || b.rows() != self.n || x.cols() != k {
            return Err(Error::InvalidInput(format!(
                "{}: blocks of {}×{} and {}×{} for {} unknowns",
                self.method(),
                b.rows(),
                b.cols(),
                x.rows(),
                x.cols(),
                self.n
            )));
        }
        // b̃ = Sᵀ b (x is the nodal workspace), then L⁻¹ into the C/E/I numbering, each
        // column scaled to max-norm 1.
        self.start_clock()?;
        dev.psc_transform_gather(
            &self.transform,
            &self.classes,
            b,
            x,
            &mut ws.bc,
            &mut ws.be,
            &mut ws.bi,
            &mut ws.column_scale,
        )?;
        self.mark(stage::GATHER)?;

        // g = D C⁻¹ b_I (in te).
        let bi = operand(dev, &ws.bi, &mut ws.i_low)?;
        match &self.coupling {
            CouplingOps::Csr { d, .. } => {
                self.per_group(k, GroupProduct::CInv, bi, &mut ws.ti)?;
                self.mark(stage::C_INV_B)?;
                dev.csr_spmm(d, &ws.ti, &mut ws.te)?;
                self.mark(stage::D)?;
            }
            CouplingOps::Element { assemble, .. } => {
                // Each macro element's D̂_g C_g⁻¹ b_I into its boundary slots, then summed
                // into E with the E scaling.
                self.per_group(k, GroupProduct::LocalD, bi, &mut ws.ti)?;
                self.mark(stage::LOCAL_D)?;
                dev.csr_spmm(assemble, &ws.ti, &mut ws.te)?;
                self.mark(stage::ASSEMBLE)?;
            }
        }

        // The C/E system: x_C into bc, x_E into te.
        self.last_iterations = 0;
        match &self.schur {
            SchurOps::M1 { pi_inv } => {
                self.residual_e(ws)?;
                self.dense_inverse(pi_inv, &ws.te, &mut ws.e_low, &mut ws.be)?;
                std::mem::swap(&mut ws.te, &mut ws.be); // te = x_E
                self.eliminate_c(ws)?;
            }
            SchurOps::M2 {
                lambda_inv,
                theta_inv,
            } => {
                // et = g − b_E, e2 = Λ⁻¹ et, ct = b_C + B e2, x_C = Θ⁻¹ ct.
                dev.copy(ws.te.view(), ws.et.view_mut())?;
                dev.axpby(-1.0, ws.be.view(), 1.0, ws.et.view_mut())?;
                self.dense_inverse(lambda_inv, &ws.et, &mut ws.e_low, &mut ws.e2)?;
                self.b_product(&ws.e2, &mut ws.e_low, &mut ws.ct)?;
                dev.axpby(1.0, ws.bc.view(), 1.0, ws.ct.view_mut())?;
                self.dense_inverse(theta_inv, &ws.ct, &mut ws.c_low, &mut ws.bc)?;
                // x_E = Λ⁻¹(b_E − Bᵀ x_C − g).
                self.bt_product(&ws.bc, &mut ws.c_low, &mut ws.et)?;
                dev.axpby(1.0, ws.be.view(), -1.0, ws.et.view_mut())?;
                dev.axpby(-1.0, ws.te.view(), 1.0, ws.et.view_mut())?;
                self.dense_inverse(lambda_inv, &ws.et, &mut ws.e_low, &mut ws.te)?;
            }
            SchurOps::M3 { e } => {
                self.residual_e(ws)?;
                let Workspace {
                    te,
                    be,
                    ti,
                    ti2,
                    e2,
                    ct,
                    c_low,
                    e_low,
                    i_low,
                    cg,
                    ..
                } = ws;
                let cg = cg.as_mut().expect("M3 has its CG");
                let params = CgParams {
                    tolerance: self.cg.rtol,
                    relative: true,
                    max_iterations: self.cg.max_iterations,
                };
                // q = Π p = E p − D C⁻¹ Dᵀ p − Bᵀ (B p).
                let apply_pi = |p: &Block<D>, q: &mut Block<D>| -> Result<()> {
                    match &self.coupling {
                        CouplingOps::Csr { d, dt, .. } => {
                            dev.csr_spmm(dt, p, ti)?;
                            let t = operand(dev, ti, i_low)?;
                            self.per_group(k, GroupProduct::CInv, t, ti2)?;
                            dev.csr_spmm(d, ti2, q)?;
                        }
                        CouplingOps::Element {
                            gather, assemble, ..
                        } => {
                            dev.csr_spmm(gather, p, ti)?;
                            let t = operand(dev, ti, i_low)?;
                            self.per_group(k, GroupProduct::LocalSchur, t, ti2)?;
                            dev.csr_spmm(assemble, ti2, q)?;
                        }
                    }
                    dev.csr_spmm(e, p, e2)?;
                    dev.axpby(1.0, e2.view(), -1.0, q.view_mut())?;
                    self.b_product(p, e_low, ct)?;
                    self.bt_product(ct, c_low, e2)?;
                    dev.axpby(-1.0, e2.view(), 1.0, q.view_mut())
                };
                let info = cg.solve(dev, apply_pi, te, be, params)?;
                self.last_iterations = info.iterations;
                if self.cg.strict && !info.converged {
                    return Err(Error::from(super::PscError::cg_not_converged(
                        self.precision(),
                        self.cg.rtol,
                        self.cg.max_iterations,
                    )));
                }
                std::mem::swap(te, be); // te = x_E
                self.eliminate_c(ws)?;
            }
        }

        self.mark(stage::SCHUR)?;

        // The operand of the last product in one pass, in the storage precision, then
        // x_I = C⁻¹(b_I − Dᵀ x_E) (into bi).
        let ri = if ws.i_low.is_empty() {
            &mut ws.ti
        } else {
            &mut ws.i_low
        };
        match &self.coupling {
            CouplingOps::Csr { dt, .. } => {
                // r_I = b_I − Dᵀ x_E, x_I = C⁻¹ r_I.
                dev.csr_subtract(dt, &ws.te, &ws.bi, ri)?;
                self.mark(stage::DT)?;
                self.per_group(k, GroupProduct::CInv, ri, &mut ws.bi)?;
                self.mark(stage::C_INV_R)?;
            }
            CouplingOps::Element { gather, .. } => {
                // [b_I; −s ∘ x_∂] (the boundary slots of bi hold zeros), x_I = [C⁻¹ | W] · it.
                dev.csr_subtract(gather, &ws.te, &ws.bi, ri)?;
                self.mark(stage::BOUNDARY)?;
                self.per_group(k, GroupProduct::LocalSolve, ri, &mut ws.bi)?;
                self.mark(stage::LOCAL_SOLVE)?;
            }
        }

        // L⁻ᵀ back to the lexicographic numbering, then S, and undo the column scaling.
        dev.psc_scatter_transform(
            &self.classes,
            &self.transform,
            &ws.bc,
            &ws.te,
            &ws.bi,
            &ws.column_scale,
            x,
        )?;
        self.mark(stage::SCATTER)
    }

    /// te = r_E = b_E − Bᵀ b_C − g (te holds g on entry).
    fn residual_e(&self, ws: &mut Workspace<D>) -> Result<()> {
        self.bt_product(&ws.bc, &mut ws.c_low, &mut ws.et)?;
        self.dev.axpby(1.0, ws.be.view(), -1.0, ws.et.view_mut())?; // b_E − Bᵀ b_C
        self.dev.axpby(1.0, ws.et.view(), -1.0, ws.te.view_mut()) // … − g
    }

    /// bc = x_C = b_C − B x_E (te holds x_E).
    fn eliminate_c(&self, ws: &mut Workspace<D>) -> Result<()> {
        self.b_product(&ws.te, &mut ws.e_low, &mut ws.ct)?;
        self.dev.axpby(-1.0, ws.ct.view(), 1.0, ws.bc.view_mut())
    }
}

#[cfg(test)]
impl PscHost<f64> {
    /// The first group split in two groups holding the same inverse: the several-groups
    /// path on a mesh that has one group (tested in psc::solver).
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
