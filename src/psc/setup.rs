//! The PSC set-up in f64 (docs/mathematics.md §3): Ã = SᵀAS, the node classes C, E, I with I
//! numbered macro element by macro element in one geometric order, groups of identical
//! macro-element blocks (detected, not assumed), the partial Cholesky scaling, the blocks
//! B = A_CE, E = A_EE, D = A_EI, the inverses C_g⁻¹, and what the method stores besides
//! (docs/mathematics.md §3): Π⁻¹ for M1 (Π = Λ − BᵀB, Λ = E − D C⁻¹ Dᵀ), Λ⁻¹ and Θ⁻¹ for M2
//! (Θ = I − B Λ⁻¹ Bᵀ), the sparse E for M3 (nothing dense of size |E|).

use faer::linalg::solvers::DenseSolveCore;
use faer::{Accum, Mat, Par, Side};
use rayon::prelude::*;

use super::macro_elements::{group_blocks, Lattice, SparseBlock};
use super::HierarchicalBasis;
use crate::device::{DenseInverse, Inverted, OnHost};
use crate::error::{Error, Result};
use crate::fem::assemble_stiffness;
use crate::linalg::{mirror_lower, spd_inverse_in_place_reporting};
use crate::mesh::{unit_square_refined, Element, MacroLocation, Mesh2d};
use crate::sparse::{spgemm, Csr};

/// Relative size below which an entry that must vanish (A_CI, couplings between
/// different macro elements) counts as zero, and two blocks count as identical.
const ZERO_TOLERANCE: f64 = 1e-12;

/// One group of identical macro-element blocks.
#[derive(Clone, Debug)]
pub struct MacroGroup {
    /// Macro elements (coarse cells) of the group, in I order.
    pub macros: Vec<u32>,
    /// C_g (scaled I-block of every member) and its inverse.
    pub block: Mat<f64>,
    pub inverse: Mat<f64>,
}

impl MacroGroup {
    pub fn block_size(&self) -> usize {
        self.block.nrows()
    }
}

/// The PSC methods of docs/mathematics.md §3. They share the transforms, C_g⁻¹, B and D;
/// they differ in what they store for the C/E system and how they solve it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PscMethod {
    /// Direct: Π⁻¹ (dense |E|×|E|).
    M1,
    /// Direct: Λ⁻¹ (dense |E|×|E|) and Θ⁻¹ (dense |C|×|C|).
    M2,
    /// Semi-direct: CG on the C/E system; stores only the sparse E besides the shared parts.
    M3,
}

impl PscMethod {
    pub const ALL: [PscMethod; 3] = [PscMethod::M1, PscMethod::M2, PscMethod::M3];

    /// "m1", "m2", "m3".
    pub fn name(self) -> &'static str {
        match self {
            PscMethod::M1 => "m1",
            PscMethod::M2 => "m2",
            PscMethod::M3 => "m3",
        }
    }

    /// "PSC-M1", … for reports.
    pub fn label(self) -> &'static str {
        match self {
            PscMethod::M1 => "PSC-M1",
            PscMethod::M2 => "PSC-M2",
            PscMethod::M3 => "PSC-M3",
        }
    }
}

impl std::fmt::Display for PscMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl std::str::FromStr for PscMethod {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        PscMethod::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown PSC method '{s}' (m1, m2, m3)"))
    }
}

/// What a method stores for the C/E system, in f64 (E, Λ and Π in the scaled C/E/I basis).
#[derive(Clone, Debug)]
pub enum Schur {
    M1 {
        pi_inv: Mat<f64>,
    },
    M2 {
        lambda_inv: Mat<f64>,
        theta_inv: Mat<f64>,
    },
    M3 {
        e: Csr<f64>,
    },
}

impl Schur {
    pub fn method(&self) -> PscMethod {
        match self {
            Schur::M1 { .. } => PscMethod::M1,
            Schur::M2 { .. } => PscMethod::M2,
            Schur::M3 { .. } => PscMethod::M3,
        }
    }
}

/// Everything a PSC method needs, in f64. Unknown vectors in the C/E/I numbering are
/// `[x_C; x_E; x_I]` with I grouped (group by group, macro by macro, local order).
pub struct PscSetup {
    pub element: Element,
    /// Fine cells per direction of the unit square (h = 1/n), or per coarse cell side of
    /// another coarse mesh.
    pub n: usize,
    /// Coarse cells per direction when the mesh is the unit square's.
    pub n0: Option<usize>,
    pub levels: usize,
    pub hb: HierarchicalBasis,
    /// The nodal stiffness matrix (interior unknowns, lexicographic).
    pub stiffness: Csr<f64>,
    /// Unknown (lexicographic) of each C, E and I entry.
    pub c_dofs: Vec<u32>,
    pub e_dofs: Vec<u32>,
    pub i_dofs: Vec<u32>,
    /// Cholesky factor of Ã_CC (lower) and its inverse.
    pub l_c: Mat<f64>,
    pub l_c_inv: Mat<f64>,
    /// diag(Ã)^{-1/2} on E and I.
    pub scale_e: Vec<f64>,
    pub scale_i: Vec<f64>,
    /// B = L_C⁻¹ Ã_CE diag^{-1/2}: |C| × |E|.
    pub b: Mat<f64>,
    /// D = A_EI (scaled), |E| × |I|, and its transpose.
    pub d: Csr<f64>,
    pub dt: Csr<f64>,
    pub groups: Vec<MacroGroup>,
    /// The method's own operators.
    pub schur: Schur,
    /// Largest |Ã_CI| relative to max |diag Ã| (checked to vanish).
    pub a_ci_relative: f64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    C(u32),
    E(u32),
    /// macro element and local index
    I(u32, u32),
}

/// Progress of a set-up (`crate::progress`: a bar on a terminal, log lines otherwise),
/// shown for set-ups big enough to take more than a few seconds. Work is counted in flops
/// of a model: the sparse steps a few thousand per unknown, Λ's products 10·|E|², the
/// dense inverses |E|³ (the Cholesky factor, L⁻¹ and L⁻ᵀL⁻¹ each |E|³/3) and M1's BᵀB
/// 2·|C|·|E|², so that the estimate of the time left follows the |E|³ that dominates.
struct Progress {
    shown: crate::progress::Progress,
    /// Where each step begins, in the model's flops.
    blocks_start: f64,
    lambda_start: f64,
    gram_start: f64,
    inverse_start: f64,
    /// Flops of the inverse of the |E|×|E| matrix.
    inverse: f64,
}

/// |E| above which a set-up takes seconds on a workstation.
const PROGRESS_MIN_E: usize = 3000;

impl Progress {
    fn new(unknowns: usize, e: usize, c: usize, method: PscMethod) -> Self {
        let (n, e, c) = (unknowns as f64, e as f64, c as f64);
        let sparse = 2000.0 * n;
        let (lambda, inverse, gram) = match method {
            PscMethod::M3 => (0.0, 0.0, 0.0),
            PscMethod::M2 => (10.0 * e * e, e * e * e, 0.0),
            PscMethod::M1 => (10.0 * e * e, e * e * e, 2.0 * c * e * e),
        };
        let total = 2.0 * sparse + lambda + gram + inverse;
        let shown = if (e as usize) < PROGRESS_MIN_E {
            crate::progress::Progress::hidden()
        } else {
            crate::progress::Progress::new("PSC set-up", total)
        };
        Progress {
            shown,
            blocks_start: sparse,
            lambda_start: 2.0 * sparse,
            gram_start: 2.0 * sparse + lambda,
            inverse_start: 2.0 * sparse + lambda + gram,
            inverse,
        }
    }

    fn assembling(&self) {
        self.shown.stage("assembling SᵀAS");
    }

    fn blocks(&self) {
        self.shown.stage("macro-element blocks and C_g⁻¹");
        self.shown.set(self.blocks_start);
    }

    fn lambda(&self) {
        self.shown.stage("Λ = E − D C⁻¹ Dᵀ");
        self.shown.set(self.lambda_start);
    }

    fn inverses(&self, what: &str) {
        self.shown.stage(what);
        self.shown.set(self.gram_start);
    }

    /// The inverse is the fraction `done` of the way.
    fn inverting(&self, done: f64) {
        self.shown.set(self.inverse_start + done * self.inverse);
    }
}

/// The refinements j with n = n0·2^j, for command-line sizes; n0 ≥ 2 and j ≥ 1 so the
/// coarse mesh has interior nodes and there is something to prehandle.
pub fn refinement_levels(n: usize, n0: usize) -> Result<usize> {
    let ratio = n / n0.max(1);
    if n0 < 2 || !n.is_multiple_of(n0) || !ratio.is_power_of_two() || ratio < 2 {
        return Err(Error::InvalidInput(format!(
            "--n {n} --n0 {n0}: need n = n0·2^j with n0 ≥ 2 and j ≥ 1"
        )));
    }
    Ok(ratio.trailing_zeros() as usize)
}

/// |C| and |E| on the unit square of n×n cells refined from n0×n0 (docs/mathematics.md §3).
pub fn class_counts(element: Element, n: usize, n0: usize) -> (usize, usize) {
    let (n, n0) = (n as isize, n0 as isize);
    let c = (n0 - 1) * (n0 - 1);
    let e = match element {
        Element::P1 => (3 * n0 - 2) * (n - n0),
        _ => 2 * (n0 - 1) * (n - n0),
    };
    (c.max(0) as usize, e.max(0) as usize)
}

/// A generous estimate of the host bytes a set-up of `method` and a solve of `nrhs`
/// columns take, before anything is allocated: SᵀAS (about 40 entries per row and level),
/// B in f64 and in its working precision, `host_vectors` f64 block vectors per column (a
/// dozen when the solve runs on the host, only the copies that cross PCIe when it runs on
/// a GPU), and for M1 and M2 two dense |E|×|E| f64 matrices: Λ, inverted in place into
/// Π⁻¹ (or Λ⁻¹), and the operator's copy in the working precision (f64 at most). M3 has
/// nothing of that size.
pub fn estimated_bytes(
    method: PscMethod,
    unknowns: usize,
    (c, e): (usize, usize),
    levels: usize,
    nrhs: usize,
    host_vectors: f64,
) -> f64 {
    let (c, e, unknowns) = (c as f64, e as f64, unknowns as f64);
    let dense = match method {
        PscMethod::M1 | PscMethod::M2 => 2.0 * 8.0 * e * e,
        PscMethod::M3 => 0.0,
    };
    dense
        + 2.0 * 8.0 * c * e
        + unknowns * (40.0 * levels as f64 + 40.0) * 12.0
        + nrhs as f64 * unknowns * 8.0 * host_vectors
}

/// f64 vectors per column of a PSC solve on the host (the method's workspace, PSC-IR's).
pub const HOST_SOLVE_VECTORS: f64 = 12.0;

impl PscSetup {
    /// Builds `method`'s operators for the unit square refined `levels` times from
    /// `n0`×`n0`, every step on the host.
    pub fn new(element: Element, n0: usize, levels: usize, method: PscMethod) -> Result<Self> {
        Self::new_inverting_on(element, n0, levels, method, &OnHost)
    }

    /// [`PscSetup::new`] with the dense inversions (Π⁻¹, Λ⁻¹) on `dense` (a GPU).
    pub fn new_inverting_on(
        element: Element,
        n0: usize,
        levels: usize,
        method: PscMethod,
        dense: &dyn DenseInverse,
    ) -> Result<Self> {
        if element == Element::Q1Hex {
            return Err(Error::InvalidInput(
                "PSC works on 2D meshes (q1, p1)".into(),
            ));
        }
        if levels == 0 || n0 < 2 {
            return Err(Error::InvalidInput(format!(
                "PSC needs a coarse mesh with interior nodes (n0 ≥ 2, got {n0}) refined at least once (got {levels})"
            )));
        }
        Self::on_mesh_inverting_on(unit_square_refined(n0, levels, element)?, method, dense)
    }

    /// Builds `method`'s operators for any mesh refined from a coarse mesh at least once,
    /// whose coarse mesh has an interior vertex (the class C), every step on the host.
    pub fn on_mesh(mesh: Mesh2d, method: PscMethod) -> Result<Self> {
        Self::on_mesh_inverting_on(mesh, method, &OnHost)
    }

    /// [`PscSetup::on_mesh`] with the dense inversions (Π⁻¹, Λ⁻¹) on `dense` (a GPU).
    pub fn on_mesh_inverting_on(
        mesh: Mesh2d,
        method: PscMethod,
        dense: &dyn DenseInverse,
    ) -> Result<Self> {
        let Some(hierarchy) = mesh.hierarchy.as_ref() else {
            return Err(Error::InvalidInput(
                "PSC needs a mesh refined from a coarse mesh".into(),
            ));
        };
        if hierarchy.levels == 0 {
            return Err(Error::InvalidInput(
                "PSC needs a mesh refined at least once from its coarse mesh".into(),
            ));
        }
        let edge_nodes = hierarchy
            .location
            .iter()
            .filter(|l| matches!(l, MacroLocation::Edge(_)))
            .count();
        let coarse_vertices = hierarchy
            .location
            .iter()
            .filter(|l| matches!(l, MacroLocation::Vertex(_)))
            .count();
        let progress = Progress::new(mesh.num_nodes(), edge_nodes, coarse_vertices, method);
        progress.assembling();
        let hb = HierarchicalBasis::new(&mesh)?;
        let (stiffness, dofs) = assemble_stiffness(&mesh)?;
        let s = hb.matrix();
        let a_hb = spgemm(&s.transpose(), &spgemm(&stiffness, &s)?)?;
        log::debug!("SᵀAS: {} nonzeros", a_hb.nnz());
        progress.blocks();
        Self::from_hierarchical(
            mesh,
            hb,
            stiffness,
            &a_hb,
            &dofs.node_of_dof,
            method,
            &progress,
            dense,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn from_hierarchical(
        mesh: Mesh2d,
        hb: HierarchicalBasis,
        stiffness: Csr<f64>,
        a_hb: &Csr<f64>,
        node_of_dof: &[u32],
        method: PscMethod,
        progress: &Progress,
        dense: &dyn DenseInverse,
    ) -> Result<Self> {
        let hierarchy = mesh.hierarchy.as_ref().expect("refined mesh");
        let (element, n, levels) = (mesh.element, mesh.n, hierarchy.levels);
        // The unit square's n0 names a set-up (the operator cache's key) only with Dirichlet
        // conditions everywhere, which is when the grid transform applies.
        let n0 = match hb {
            HierarchicalBasis::Grid(_) => hierarchy.n0,
            HierarchicalBasis::Levels(_) => None,
        };
        let lattice = Lattice::new(element, levels);
        let per_macro = lattice.len();
        if per_macro == 0 {
            return Err(Error::InvalidInput(format!(
                "PSC needs nodes inside the macro elements: {} macro elements need at least 2 refinements (got {levels})",
                element.name()
            )));
        }
        let num_macros = hierarchy.macros;

        // Classes in unknown order; I numbered macro by macro in the lattice order, then
        // sorted by group.
        let mut c_dofs = Vec::new();
        let mut e_dofs = Vec::new();
        let mut macro_dofs = vec![vec![u32::MAX; per_macro]; num_macros];
        for (dof, &node) in node_of_dof.iter().enumerate() {
            match hierarchy.location[node as usize] {
                MacroLocation::Vertex(_) => c_dofs.push(dof as u32),
                MacroLocation::Edge(_) => e_dofs.push(dof as u32),
                MacroLocation::Interior(m) => {
                    let local = lattice.index(hierarchy.macro_lattice[node as usize]);
                    macro_dofs[m as usize][local] = dof as u32;
                }
            }
        }
        if macro_dofs.iter().flatten().any(|&d| d == u32::MAX) {
            return Err(Error::InvalidInput(
                "macro elements do not all have the same interior nodes".into(),
            ));
        }
        if c_dofs.is_empty() {
            return Err(Error::InvalidInput(
                "PSC needs a coarse mesh with an interior vertex (the class C is empty)".into(),
            ));
        }
        let mut class = vec![Class::C(0); node_of_dof.len()];
        for (k, &d) in c_dofs.iter().enumerate() {
            class[d as usize] = Class::C(k as u32);
        }
        for (k, &d) in e_dofs.iter().enumerate() {
            class[d as usize] = Class::E(k as u32);
        }
        for (m, dofs) in macro_dofs.iter().enumerate() {
            for (l, &d) in dofs.iter().enumerate() {
                class[d as usize] = Class::I(m as u32, l as u32);
            }
        }

        let diag = a_hb.diagonal();
        let max_diag = diag.iter().fold(0.0f64, |a, &b| a.max(b.abs()));
        if diag.iter().any(|&v| v <= 0.0) {
            return Err(Error::Solver(
                "SᵀAS has a non-positive diagonal entry".into(),
            ));
        }
        let inv_sqrt = |d: u32| 1.0 / diag[d as usize].sqrt();
        let scale_e: Vec<f64> = e_dofs.iter().map(|&d| inv_sqrt(d)).collect();
        let (nc, ne) = (c_dofs.len(), e_dofs.len());

        // Per macro element: the scaled I-block (checking that I couples only inside its
        // macro element and not at all with C) and the scaled couplings to E; entries at
        // rounding level are couplings that cancel exactly and are dropped.
        let negligible = ZERO_TOLERANCE * max_diag;
        struct MacroBlocks {
            block: SparseBlock,
            /// (local I row, E index, scaled value)
            ie: Vec<(u32, u32, f64)>,
            a_ci: f64,
            foreign: f64,
        }
        let blocks: Vec<MacroBlocks> = macro_dofs
            .par_iter()
            .enumerate()
            .map(|(m, dofs)| {
                let mut rows = Vec::with_capacity(per_macro);
                let (mut ie, mut a_ci, mut foreign) = (Vec::new(), 0.0f64, 0.0f64);
                for (l, &d) in dofs.iter().enumerate() {
                    let (cols, vals) = a_hb.row(d as usize);
                    let mut row = Vec::new();
                    for (&c, &v) in cols.iter().zip(vals) {
                        let scaled = v * inv_sqrt(d) * inv_sqrt(c);
                        match class[c as usize] {
                            Class::I(mm, ll) if mm as usize == m && v.abs() > negligible => {
                                row.push((ll, scaled))
                            }
                            Class::I(mm, _) if mm as usize == m => {}
                            Class::I(..) => foreign = foreign.max(v.abs()),
                            Class::C(_) => a_ci = a_ci.max(v.abs()),
                            Class::E(e) if v.abs() > negligible => ie.push((l as u32, e, scaled)),
                            Class::E(_) => {}
                        }
                    }
                    row.sort_unstable_by_key(|e| e.0);
                    rows.push(row);
                }
                MacroBlocks {
                    block: SparseBlock { rows },
                    ie,
                    a_ci,
                    foreign,
                }
            })
            .collect();
        let a_ci_relative = blocks.iter().fold(0.0f64, |a, b| a.max(b.a_ci)) / max_diag;
        let foreign = blocks.iter().fold(0.0f64, |a, b| a.max(b.foreign)) / max_diag;
        if a_ci_relative > ZERO_TOLERANCE || foreign > ZERO_TOLERANCE {
            let hint = if element == Element::Q1 {
                " (Q1 macro elements must be rectangles: on other quadrilaterals the coarse basis functions are not a-orthogonal to those inside a macro element)"
            } else {
                ""
            };
            return Err(Error::Solver(format!(
                "the prehandled matrix lacks the PSC structure: max |A_CI| = {a_ci_relative:.2e}, max coupling between macro elements = {foreign:.2e} (relative){hint}"
            )));
        }

        // Groups of blocks identical up to a symmetry of the local numbering; σ takes a
        // member's local index to its representative's.
        let symmetries = lattice.symmetries();
        let block_refs: Vec<&SparseBlock> = blocks.iter().map(|b| &b.block).collect();
        let grouping = group_blocks(&block_refs, &symmetries, ZERO_TOLERANCE);
        let sigma = |m: usize| &symmetries[grouping.symmetry_of[m]];
        log::info!("PSC: |C| = {nc}, |E| = {ne}, {num_macros} macro elements in {} group(s) of identical blocks", grouping.representatives.len());
        let mut groups: Vec<MacroGroup> = grouping
            .representatives
            .par_iter()
            .map(|&r| {
                let block = blocks[r].block.to_dense();
                let inverse = block
                    .llt(Side::Lower)
                    .map_err(|e| {
                        Error::Solver(format!("Cholesky of a macro-element block failed: {e:?}"))
                    })?
                    .inverse();
                Ok(MacroGroup {
                    macros: Vec::new(),
                    block,
                    inverse,
                })
            })
            .collect::<Result<_>>()?;
        for m in 0..num_macros {
            groups[grouping.group_of[m]].macros.push(m as u32);
        }
        // Each member's unknowns in its representative's local order.
        for (m, dofs) in macro_dofs.iter_mut().enumerate() {
            let mut ordered = vec![0; per_macro];
            for (l, &d) in dofs.iter().enumerate() {
                ordered[sigma(m)[l] as usize] = d;
            }
            *dofs = ordered;
        }
        let i_dofs: Vec<u32> = groups
            .iter()
            .flat_map(|g| {
                g.macros
                    .iter()
                    .flat_map(|&m| macro_dofs[m as usize].iter().copied())
            })
            .collect();
        let scale_i: Vec<f64> = i_dofs.iter().map(|&d| inv_sqrt(d)).collect();
        // Position of each macro element's first I entry in the grouped order.
        let mut macro_offset = vec![0usize; num_macros];
        let mut offset = 0;
        for g in &groups {
            for &m in &g.macros {
                macro_offset[m as usize] = offset;
                offset += per_macro;
            }
        }

        // Dᵀ (|I| × |E|) from the macro blocks' E couplings, and D.
        let mut triplets: Vec<(u32, u32, f64)> = blocks
            .iter()
            .enumerate()
            .flat_map(|(m, b)| {
                let (offset, sigma) = (macro_offset[m], sigma(m));
                b.ie.iter()
                    .map(move |&(l, e, v)| ((offset + sigma[l as usize] as usize) as u32, e, v))
            })
            .collect();
        triplets.sort_unstable_by_key(|t| (t.0, t.1));
        let mut row_ptr = vec![0usize; i_dofs.len() + 1];
        for t in &triplets {
            row_ptr[t.0 as usize + 1] += 1;
        }
        for r in 0..i_dofs.len() {
            row_ptr[r + 1] += row_ptr[r];
        }
        let dt = Csr::new(
            i_dofs.len(),
            ne,
            row_ptr,
            triplets.iter().map(|t| t.1).collect(),
            triplets.iter().map(|t| t.2).collect(),
        )?;
        let d = dt.transpose();

        // Partial Cholesky on C: Ã_CC = L_C L_Cᵀ.
        let mut a_cc = Mat::<f64>::zeros(nc, nc);
        let mut b = Mat::<f64>::zeros(nc, ne);
        for (k, &dof) in c_dofs.iter().enumerate() {
            let (cols, vals) = a_hb.row(dof as usize);
            for (&c, &v) in cols.iter().zip(vals) {
                match class[c as usize] {
                    Class::C(kk) => a_cc[(k, kk as usize)] = v,
                    Class::E(e) => b[(k, e as usize)] = v * inv_sqrt(c),
                    Class::I(..) => {}
                }
            }
        }
        // E = A_EE scaled, sparse (entries at rounding level are couplings that cancel).
        let mut e_row_ptr = vec![0usize];
        let (mut e_cols, mut e_values) = (Vec::new(), Vec::new());
        for &dof in &e_dofs {
            let (cols, vals) = a_hb.row(dof as usize);
            let mut row: Vec<(u32, f64)> = cols
                .iter()
                .zip(vals)
                .filter_map(|(&c, &v)| match class[c as usize] {
                    Class::E(ee) if v.abs() > negligible => {
                        Some((ee, v * inv_sqrt(dof) * inv_sqrt(c)))
                    }
                    _ => None,
                })
                .collect();
            row.sort_unstable_by_key(|t| t.0);
            e_cols.extend(row.iter().map(|t| t.0));
            e_values.extend(row.iter().map(|t| t.1));
            e_row_ptr.push(e_cols.len());
        }
        let e = Csr::new(ne, ne, e_row_ptr, e_cols, e_values)?;
        let l_c = a_cc
            .llt(Side::Lower)
            .map_err(|e| Error::Solver(format!("Cholesky of the coarse block Ã_CC failed: {e:?}")))?
            .L()
            .to_owned();
        let l_c_inv = {
            let mut inv = Mat::<f64>::identity(nc, nc);
            faer::linalg::triangular_solve::solve_lower_triangular_in_place(
                l_c.as_ref(),
                inv.as_mut(),
                Par::rayon(0),
            );
            inv
        };
        faer::linalg::triangular_solve::solve_lower_triangular_in_place(
            l_c.as_ref(),
            b.as_mut(),
            Par::rayon(0),
        );

        let schur = match method {
            PscMethod::M3 => Schur::M3 { e },
            PscMethod::M1 | PscMethod::M2 => {
                progress.lambda();
                // Λ = E − Σ_m D_m C_g⁻¹ D_mᵀ, one dense product per macro element.
                let mut lambda = Mat::<f64>::zeros(ne, ne);
                for r in 0..ne {
                    let (cols, vals) = e.row(r);
                    for (&c, &v) in cols.iter().zip(vals) {
                        lambda[(r, c as usize)] = v;
                    }
                }
                let products: Vec<(Vec<u32>, Mat<f64>)> = (0..num_macros)
                    .into_par_iter()
                    .map(|m| {
                        let ie = &blocks[m].ie;
                        let mut e_local: Vec<u32> = ie.iter().map(|t| t.1).collect();
                        e_local.sort_unstable();
                        e_local.dedup();
                        let mut dm_t = Mat::<f64>::zeros(per_macro, e_local.len());
                        for &(l, e, v) in ie {
                            let col = e_local.binary_search(&e).expect("listed");
                            dm_t[(sigma(m)[l as usize] as usize, col)] = v;
                        }
                        let inverse = &groups[grouping.group_of[m]].inverse;
                        let w = inverse * &dm_t;
                        (e_local, dm_t.transpose() * &w)
                    })
                    .collect();
                for (e_local, product) in products {
                    for (a, &ea) in e_local.iter().enumerate() {
                        for (bb, &eb) in e_local.iter().enumerate() {
                            lambda[(ea as usize, eb as usize)] -= product[(a, bb)];
                        }
                    }
                }
                progress.inverses(&format!("{method} inverses (|E| = {ne})"));
                match method {
                    PscMethod::M1 => Schur::M1 {
                        pi_inv: pi_inverse(dense, lambda, &b, &|f| progress.inverting(f))?,
                    },
                    _ => {
                        let (lambda_inv, theta_inv) =
                            lambda_theta_inverses(dense, lambda, &b, &|f| progress.inverting(f))?;
                        Schur::M2 {
                            lambda_inv,
                            theta_inv,
                        }
                    }
                }
            }
        };

        Ok(PscSetup {
            element,
            n,
            n0,
            levels,
            hb,
            stiffness,
            c_dofs,
            e_dofs,
            i_dofs,
            l_c,
            l_c_inv,
            scale_e,
            scale_i,
            b,
            d,
            dt,
            groups,
            schur,
            a_ci_relative,
        })
    }

    pub fn num_unknowns(&self) -> usize {
        self.hb.len()
    }

    pub fn method(&self) -> PscMethod {
        self.schur.method()
    }

    /// M1's Π⁻¹ (None for the other methods).
    pub fn pi_inv(&self) -> Option<&Mat<f64>> {
        match &self.schur {
            Schur::M1 { pi_inv } => Some(pi_inv),
            _ => None,
        }
    }
}

/// A ← (A − GᵀG)⁻¹ for the symmetric A (`gram` G, when given) on `dense`'s device, or on
/// the host where it leaves it there (reporting the fraction done); a failed Cholesky pivot
/// is an error naming `what`.
fn spd_inverse(
    dense: &dyn DenseInverse,
    a: &mut Mat<f64>,
    gram: Option<&Mat<f64>>,
    what: &str,
    report: &dyn Fn(f64),
) -> Result<()> {
    let not_positive = |index: usize| {
        Error::Solver(format!(
            "Cholesky of {what} failed: pivot {index} is not positive"
        ))
    };
    match dense.spd_inverse(a, gram)? {
        Inverted::Done => {
            mirror_lower(a.as_mut());
            return Ok(());
        }
        Inverted::NotPositiveDefinite { index } => return Err(not_positive(index)),
        Inverted::LeftToHost => {}
    }
    if let Some(g) = gram {
        faer::linalg::matmul::matmul(
            a.as_mut(),
            Accum::Add,
            g.transpose(),
            g.as_ref(),
            -1.0,
            Par::rayon(0),
        );
    }
    spd_inverse_in_place_reporting(a, report).map_err(|e| not_positive(e.index))
}

/// M1's Π⁻¹ = (Λ − BᵀB)⁻¹, in place: Λ becomes Π and Π becomes Π⁻¹ in one |E|×|E|
/// allocation.
fn pi_inverse(
    dense: &dyn DenseInverse,
    lambda: Mat<f64>,
    b: &Mat<f64>,
    report: &dyn Fn(f64),
) -> Result<Mat<f64>> {
    let mut pi = lambda;
    let what = format!("Π (|E| = {})", pi.nrows());
    spd_inverse(dense, &mut pi, Some(b), &what, report)?;
    Ok(pi)
}

/// M2's Λ⁻¹ (in place of Λ) and Θ⁻¹ = (I − B Λ⁻¹ Bᵀ)⁻¹.
fn lambda_theta_inverses(
    dense: &dyn DenseInverse,
    lambda: Mat<f64>,
    b: &Mat<f64>,
    report: &dyn Fn(f64),
) -> Result<(Mat<f64>, Mat<f64>)> {
    let mut lambda_inv = lambda;
    let what = format!("Λ (|E| = {})", lambda_inv.nrows());
    spd_inverse(dense, &mut lambda_inv, None, &what, report)?;
    let nc = b.nrows();
    let w = b * &lambda_inv;
    let mut theta = Mat::<f64>::identity(nc, nc);
    faer::linalg::matmul::matmul(
        theta.as_mut(),
        Accum::Add,
        w.as_ref(),
        b.transpose(),
        -1.0,
        Par::rayon(0),
    );
    // Symmetric in exact arithmetic; the product's rounding is not.
    let theta = Mat::from_fn(nc, nc, |i, j| 0.5 * (theta[(i, j)] + theta[(j, i)]));
    // |C|² is small: Θ stays on the host.
    let mut theta_inv = theta;
    spd_inverse(
        &OnHost,
        &mut theta_inv,
        None,
        &format!("Θ (|C| = {nc})"),
        &|_| {},
    )?;
    Ok((lambda_inv, theta_inv))
}
