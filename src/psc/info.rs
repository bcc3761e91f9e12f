//! The figures of the PSC paper's Table 1 (docs/mathematics.md §8.1) for a PSC set-up:
//! class sizes, the groups of identical macro elements, condition numbers of the blocks,
//! storage relative to the FEM matrix; optionally the whole-matrix condition numbers of A,
//! SᵀAS and the prehandled matrix.

use std::path::PathBuf;
use std::time::Instant;

use faer::Side;

use super::{refinement_levels, PscMethod, PscSetup};
use crate::error::{Error, Result};
use crate::fem::{Condition, Conditions};
use crate::linalg::{extreme_eigenvalues, LanczosParams};
use crate::mesh::{read_gmsh, refine, CoarseMesh, Element, Mesh2d};
use crate::reference::CholeskySolver;
use crate::sparse::spmv;

/// The boundary conditions `psc-info` sets up for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InfoConditions {
    /// Dirichlet on the whole boundary (what the published counts describe).
    Dirichlet,
    /// The pressure of a projection method: Dirichlet on the part named `outflow`, Neumann
    /// on every other part (inflow, walls, obstacle).
    Pressure,
}

impl InfoConditions {
    pub(super) fn name(self) -> &'static str {
        match self {
            InfoConditions::Dirichlet => "dirichlet",
            InfoConditions::Pressure => "pressure",
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            InfoConditions::Dirichlet => "Dirichlet everywhere",
            InfoConditions::Pressure => "Dirichlet at the outflow, Neumann elsewhere",
        }
    }
}

/// The mesh with the conditions applied (its Dirichlet nodes marked).
fn with_conditions(mut mesh: Mesh2d, bc: InfoConditions) -> Result<Mesh2d> {
    if bc == InfoConditions::Pressure {
        let names = &mesh.boundary.names;
        if !names.iter().any(|n| n == "outflow") {
            return Err(Error::InvalidInput(format!(
                "--bc pressure needs a boundary part named outflow (this mesh has {})",
                names.join(", ")
            )));
        }
        let conditions = Conditions(
            names
                .iter()
                .map(|n| {
                    if n == "outflow" {
                        Condition::Dirichlet
                    } else {
                        Condition::Neumann
                    }
                })
                .collect(),
        );
        conditions.apply(&mut mesh)?;
    }
    Ok(mesh)
}

/// The meshes `psc-info` reports on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InfoMesh {
    /// The unit square refined from h0 = 1/n0 to h = 1/n.
    UnitSquare {
        n: usize,
        n0: usize,
        element: Element,
    },
    /// The flow around a square (P1): its coarse mesh refined `coarse_levels` times makes
    /// the macro elements, `levels` times in all the fine mesh.
    FlowAroundSquare { levels: usize, coarse_levels: usize },
    /// A Gmsh file's mesh, its cells the macro elements, refined `levels` times; the element
    /// when one was asked for (the file's cells decide it).
    Gmsh {
        file: PathBuf,
        levels: usize,
        element: Option<Element>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct PscInfo {
    pub element: &'static str,
    /// Unknowns N = |C| + |E| + |I|.
    pub unknowns: usize,
    pub c: usize,
    pub e: usize,
    pub i: usize,
    pub groups: Vec<GroupInfo>,
    /// Largest κ(C_g) over the groups.
    pub kappa_ci: f64,
    pub kappa_pi: f64,
    /// Σ_g NNZ(C_g⁻¹) / NNZ_FEM and NNZ(Π⁻¹) / NNZ_FEM (numerical nonzeros).
    pub nnz_ci_inv_over_fem: f64,
    pub nnz_pi_inv_over_fem: f64,
    pub whole: Option<WholeConditionNumbers>,
}

/// One group of identical macro elements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupInfo {
    pub members: usize,
    pub block_size: usize,
    /// κ(C_g), spectral.
    pub kappa: f64,
}

/// Spectral condition numbers of the whole matrices (docs/mathematics.md §8.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WholeConditionNumbers {
    pub kappa_a: f64,
    pub kappa_hb: f64,
    pub kappa_prehandled: f64,
}

/// Groups listed one per line in the table; more are summarised (all are in the JSON).
const LISTED_GROUPS: usize = 12;

/// Block size above which κ comes from Lanczos instead of all eigenvalues: the dense
/// eigensolver costs O(n³) (minutes at n = 8,001, the flow around a square's L0 = 0).
const DENSE_EIGEN_MAX: usize = 1500;

/// Spectral condition number of a symmetric positive definite matrix.
fn condition_number(m: &faer::Mat<f64>) -> Result<f64> {
    if m.nrows() > DENSE_EIGEN_MAX {
        let lanczos = extreme_eigenvalues(m.nrows(), LanczosParams::default(), |x, y| {
            let yv = m * faer::ColRef::from_slice(x);
            y.iter_mut().zip(yv.iter()).for_each(|(a, b)| *a = *b);
        })?;
        return Ok(lanczos.largest / lanczos.smallest);
    }
    let ev = m
        .self_adjoint_eigenvalues(Side::Lower)
        .map_err(|e| Error::Solver(format!("eigenvalues: {e:?}")))?;
    Ok(ev[ev.len() - 1] / ev[0])
}

fn numerical_nnz(m: &faer::Mat<f64>) -> usize {
    (0..m.ncols())
        .map(|j| m.col(j).iter().filter(|v| **v != 0.0).count())
        .sum()
}

impl PscInfo {
    pub fn compute(setup: &PscSetup, whole: bool) -> Result<Self> {
        let fem = setup.stiffness.numerical_nnz() as f64;
        let mut groups = Vec::new();
        let mut nnz_ci = 0usize;
        for g in &setup.groups {
            groups.push(GroupInfo {
                members: g.macros.len(),
                block_size: g.block_size(),
                kappa: condition_number(&g.block)?,
            });
            nnz_ci += numerical_nnz(&g.inverse);
        }
        let kappa_ci = groups.iter().fold(0.0f64, |a, g| a.max(g.kappa));
        // κ(Π) = κ(Π⁻¹): Lanczos on the stored inverse (|E| can be large).
        let pi_inv = setup
            .pi_inv()
            .ok_or_else(|| Error::InvalidInput("psc-info reports M1's Π⁻¹: set up M1".into()))?;
        let ne = pi_inv.nrows();
        let lanczos = extreme_eigenvalues(ne, LanczosParams::default(), |x, y| {
            let xv = faer::ColRef::from_slice(x);
            let yv = pi_inv * xv;
            y.iter_mut().zip(yv.iter()).for_each(|(a, b)| *a = *b);
        })?;
        Ok(PscInfo {
            element: setup.element.name(),
            unknowns: setup.num_unknowns(),
            c: setup.c_dofs.len(),
            e: setup.e_dofs.len(),
            i: setup.i_dofs.len(),
            groups,
            kappa_ci,
            kappa_pi: lanczos.largest / lanczos.smallest,
            nnz_ci_inv_over_fem: nnz_ci as f64 / fem,
            nnz_pi_inv_over_fem: numerical_nnz(pi_inv) as f64 / fem,
            whole: if whole {
                Some(whole_condition_numbers(setup)?)
            } else {
                None
            },
        })
    }
}

/// κ of the standard stiffness matrix A (λmin through Lanczos on A⁻¹ by sparse Cholesky:
/// κ(A) grows like h⁻², too slow for plain Lanczos), of SᵀAS and of the prehandled
/// L⁻¹SᵀASL⁻ᵀ (both well conditioned: plain Lanczos).
fn whole_condition_numbers(setup: &PscSetup) -> Result<WholeConditionNumbers> {
    let a = &setup.stiffness;
    let n = a.row_ptr().len() - 1;
    let params = LanczosParams::default();
    let top = extreme_eigenvalues(n, params, |x, y| spmv(a, x, y))?;
    let cholesky = CholeskySolver::factor(a)?;
    let inverse = extreme_eigenvalues(n, params, |x, y| y.copy_from_slice(&cholesky.solve(x)))?;
    let kappa_a = top.largest * inverse.largest;

    let s_matrix = setup.hb.matrix();
    let st_matrix = s_matrix.transpose();
    let (mut work, mut work2) = (vec![0.0; n], vec![0.0; n]);
    let hb_info = extreme_eigenvalues(n, params, |x, y| {
        spmv(&s_matrix, x, &mut work);
        spmv(a, &work, &mut work2);
        spmv(&st_matrix, &work2, y);
    })?;

    // Prehandled: x ↦ L⁻¹ Sᵀ A S L⁻ᵀ x with L = blockdiag(L_C, diag^{1/2}).
    let scale = prehandling_scale(setup, n);
    let (lc_inv, c_pos) = (&setup.l_c_inv, &setup.c_dofs);
    let nc = c_pos.len();
    let mut work3 = vec![0.0; n];
    let pre = extreme_eigenvalues(n, params, |x, y| {
        // work = L⁻ᵀ x
        work.iter_mut()
            .zip(x)
            .zip(&scale)
            .for_each(|((w, xi), s)| *w = xi * s);
        for (k, &d) in c_pos.iter().enumerate() {
            work[d as usize] = (0..nc).map(|l| lc_inv[(l, k)] * x[c_pos[l] as usize]).sum();
        }
        spmv(&s_matrix, &work, &mut work3);
        spmv(a, &work3, &mut work2);
        spmv(&st_matrix, &work2, &mut work3);
        std::mem::swap(&mut work2, &mut work3);
        // y = L⁻¹ work2
        y.iter_mut()
            .zip(&work2)
            .zip(&scale)
            .for_each(|((yi, w), s)| *yi = w * s);
        for (k, &d) in c_pos.iter().enumerate() {
            y[d as usize] = (0..nc)
                .map(|l| lc_inv[(k, l)] * work2[c_pos[l] as usize])
                .sum();
        }
    })?;
    Ok(WholeConditionNumbers {
        kappa_a,
        kappa_hb: hb_info.largest / hb_info.smallest,
        kappa_prehandled: pre.largest / pre.smallest,
    })
}

/// diag^{-1/2} at every E and I unknown (lexicographic); C entries are handled by L_C.
fn prehandling_scale(setup: &PscSetup, n: usize) -> Vec<f64> {
    let mut scale = vec![0.0; n];
    for (&d, &s) in setup.e_dofs.iter().zip(&setup.scale_e) {
        scale[d as usize] = s;
    }
    for (&d, &s) in setup.i_dofs.iter().zip(&setup.scale_i) {
        scale[d as usize] = s;
    }
    scale
}

/// `tensorfem psc-info`: the figures of a mesh's PSC set-up, printed as a table or one
/// JSON object, with the seconds the set-up and the figures took.
pub fn report(mesh: &InfoMesh, bc: InfoConditions, whole: bool, json: bool) -> Result<()> {
    let start = Instant::now();
    let (setup, title) = match mesh {
        &InfoMesh::UnitSquare { n, n0, element } => {
            if bc == InfoConditions::Pressure {
                return Err(Error::InvalidInput(
                    "--bc pressure needs a boundary part named outflow: the flow around a square, or a Gmsh mesh with one".into(),
                ));
            }
            (
                PscSetup::new(element, n0, refinement_levels(n, n0)?, PscMethod::M1)?,
                format!(
                    "the unit square, {}, h = 1/{n}, h0 = 1/{n0}",
                    element.name()
                ),
            )
        }
        &InfoMesh::FlowAroundSquare {
            levels,
            coarse_levels,
        } => {
            let macros = CoarseMesh::flow_around_square().refined(coarse_levels)?;
            (
                PscSetup::on_mesh(
                    with_conditions(refine(&macros, levels - coarse_levels)?, bc)?,
                    PscMethod::M1,
                )?,
                format!("the flow around a square, p1, L = {levels}, L0 = {coarse_levels}"),
            )
        }
        InfoMesh::Gmsh {
            file,
            levels,
            element,
        } => {
            let coarse = read_gmsh(file)?;
            if element.is_some_and(|e| e != coarse.element) {
                return Err(Error::InvalidInput(format!(
                    "--element {}: {} holds {} cells",
                    element.map_or("", Element::name),
                    file.display(),
                    coarse.element.name()
                )));
            }
            let element = coarse.element.name();
            (
                PscSetup::on_mesh(
                    with_conditions(refine(&coarse, *levels)?, bc)?,
                    PscMethod::M1,
                )?,
                format!("{}, {element}, refined {levels} times", file.display()),
            )
        }
    };
    let title = format!("{title}, {}", bc.describe());
    let setup_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let info = PscInfo::compute(&setup, whole)?;
    let info_seconds = start.elapsed().as_secs_f64();
    let kappa_ci = info.kappa_ci;
    if json {
        let mut object = serde_json::json!({
            "element": info.element, "N": info.unknowns,
            "C": info.c, "E": info.e, "I": info.i, "groups": info.groups.len(),
            "group_blocks": info.groups.iter().map(|g| serde_json::json!({
                "members": g.members, "block_size": g.block_size, "kappa": g.kappa,
            })).collect::<Vec<_>>(),
            "kappa_Ci": kappa_ci, "kappa_Pi": info.kappa_pi,
            "nnz_Ci_inv_over_fem": info.nnz_ci_inv_over_fem,
            "nnz_Pi_inv_over_fem": info.nnz_pi_inv_over_fem,
            "bc": bc.name(),
            "setup_seconds": setup_seconds, "info_seconds": info_seconds,
            "peak_memory_bytes": crate::sys::peak_memory(),
        });
        match mesh {
            &InfoMesh::UnitSquare { n, n0, .. } => {
                object["mesh"] = "unit-square".into();
                object["n"] = n.into();
                object["n0"] = n0.into();
            }
            &InfoMesh::FlowAroundSquare {
                levels,
                coarse_levels,
            } => {
                object["mesh"] = "flow-around-square".into();
                object["levels"] = levels.into();
                object["coarse_levels"] = coarse_levels.into();
            }
            InfoMesh::Gmsh { file, levels, .. } => {
                object["mesh"] = "gmsh".into();
                object["file"] = file.display().to_string().into();
                object["levels"] = (*levels).into();
            }
        }
        if let Some(w) = info.whole {
            object["kappa_A"] = w.kappa_a.into();
            object["kappa_hb"] = w.kappa_hb.into();
            object["kappa_prehandled"] = w.kappa_prehandled.into();
        }
        println!("{object}");
    } else {
        println!("PSC on {title}");
        println!(
            "  N = {}: |C| = {}, |E| = {}, |I| = {}",
            info.unknowns, info.c, info.e, info.i
        );
        if info.groups.len() <= LISTED_GROUPS {
            println!(
                "  {} group(s) of identical macro elements:",
                info.groups.len()
            );
            for (k, g) in info.groups.iter().enumerate() {
                println!(
                    "    group {k}: {} members, block {}, κ(C_g) = {:.1}",
                    g.members, g.block_size, g.kappa
                );
            }
        } else {
            let members = info.groups.iter().map(|g| g.members);
            let kappa = info.groups.iter().map(|g| g.kappa);
            println!(
                "  {} groups of identical macro elements (listed in --json): {}–{} members, block {}, κ(C_g) {:.1}–{:.1}",
                info.groups.len(),
                members.clone().min().unwrap_or(0),
                members.max().unwrap_or(0),
                info.groups[0].block_size,
                kappa.clone().fold(f64::INFINITY, f64::min),
                kappa.fold(0.0, f64::max),
            );
        }
        println!("  κ(C_i) (max over groups)      {kappa_ci:.1}");
        println!("  κ(Π)                          {:.1}", info.kappa_pi);
        println!(
            "  NNZ(C_i⁻¹)/NNZ_FEM (summed)   {:.3}",
            info.nnz_ci_inv_over_fem
        );
        println!(
            "  NNZ(Π⁻¹)/NNZ_FEM              {:.2}",
            info.nnz_pi_inv_over_fem
        );
        if let Some(w) = info.whole {
            println!(
                "  κ(A), κ(SᵀAS), κ(prehandled)  {:.0}, {:.1}, {:.1}",
                w.kappa_a, w.kappa_hb, w.kappa_prehandled
            );
        }
        let peak = crate::sys::peak_memory().map_or(String::new(), |b| {
            format!(", peak memory {:.2} GB", b as f64 / 1e9)
        });
        println!("  set-up {setup_seconds:.1} s, figures {info_seconds:.1} s{peak}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::Element;

    #[test]
    fn small_case_runs() {
        let setup = PscSetup::new(Element::Q1, 4, 3, PscMethod::M1).unwrap();
        let info = PscInfo::compute(&setup, true).unwrap();
        assert_eq!((info.c, info.e, info.i), (9, 2 * 3 * 28, 28 * 28));
        assert_eq!(info.groups.len(), 1);
        assert_eq!(info.unknowns, 31 * 31);
        let whole = info.whole.unwrap();
        assert!(whole.kappa_prehandled < whole.kappa_hb && whole.kappa_hb < whole.kappa_a);
    }
}
