//! Where PSC's macro elements go on a refined coarse mesh: for every L0 (the coarse mesh
//! refined L0 times makes the macro elements, L times in all the fine mesh) the class
//! sizes, counted on the macro mesh without setting anything up, and a flop model of
//! PSC-M1's set-up and apply (docs/mathematics.md §3, "Choosing L0"); the L0 whose set-up
//! plus the applies of the expected right-hand sides cost least.

use std::collections::HashSet;

use serde::Serialize;

use super::{Coupling, InfoConditions};
use crate::error::{Error, Result};
use crate::mesh::{CoarseMesh, Element};

/// PSC-M1 on a coarse mesh refined `levels` times with the macro elements after
/// `coarse_levels`: its class sizes and modelled costs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CoarseLevelCost {
    pub coarse_levels: usize,
    /// |C| (macro vertices), |E| (nodes inside macro edges), |I| (inside macro elements),
    /// Dirichlet nodes left out.
    pub c: usize,
    pub e: usize,
    pub i: usize,
    pub macro_elements: usize,
    /// Unknowns inside one macro element: the size of every C_g.
    pub block: usize,
    /// Groups of identical macro elements: the coarse cells' shapes up to similarity
    /// (refinement makes similar children).
    pub groups: usize,
    /// Set-up: the groups' Cholesky and inverse (block³ each), every element's Schur
    /// contribution D_m C_g⁻¹ D_mᵀ as dense products (2·n_b·block²), Π's (|E|³).
    pub setup_flops: f64,
    /// How the modelled apply multiplies by D.
    pub coupling: &'static str,
    /// One apply per right-hand side: the interiors' products (csr: C⁻¹ twice, D and Dᵀ;
    /// element: D̂_g C_g⁻¹ and [C_g⁻¹ | W_g], the assembly into E and the gather of x_∂),
    /// L_C⁻¹ and L_C⁻ᵀ, B and Bᵀ, Π⁻¹ (the count of `PscOperator::stage_costs` with the
    /// sparse entries modelled).
    pub apply_flops_per_rhs: f64,
    /// Π⁻¹ in f64 (the set-up's largest matrix).
    pub pi_inverse_bytes: f64,
    /// Every group's C_g and C_g⁻¹ in f64, and with the element coupling its
    /// [C_g⁻¹ | W_g] (b × (b + n_b), built in f64).
    pub block_bytes: f64,
}

impl CoarseLevelCost {
    /// Set-up plus `applies` applies to `nrhs` right-hand sides, in flops.
    pub fn total_flops(&self, nrhs: usize, applies: usize) -> f64 {
        self.setup_flops + (applies * nrhs) as f64 * self.apply_flops_per_rhs
    }
}

/// The costs for every L0 with unknowns inside the macro elements (0 ..= L − 1, fewer for
/// P1, whose macro elements need 3 cells per side), on `coarse` with the parts marked in
/// `dirichlet` (indexed like `coarse.parts`) Dirichlet, the apply multiplying by D as
/// `coupling` does.
pub fn coarse_level_costs(
    coarse: &CoarseMesh,
    levels: usize,
    dirichlet: &[bool],
    coupling: Coupling,
) -> Result<Vec<CoarseLevelCost>> {
    let groups = similar_shapes(coarse);
    let mut costs = Vec::new();
    for coarse_levels in 0..levels {
        match cost_at(coarse, groups, levels, coarse_levels, (dirichlet, coupling))? {
            Some(cost) => costs.push(cost),
            None => break,
        }
    }
    Ok(costs)
}

/// The class sizes and costs of one L0 (`coarse_level_costs`' row); none where the macro
/// elements hold no unknown.
pub fn coarse_level_cost(
    coarse: &CoarseMesh,
    levels: usize,
    coarse_levels: usize,
    dirichlet: &[bool],
    coupling: Coupling,
) -> Result<Option<CoarseLevelCost>> {
    cost_at(
        coarse,
        similar_shapes(coarse),
        levels,
        coarse_levels,
        (dirichlet, coupling),
    )
}

fn cost_at(
    coarse: &CoarseMesh,
    groups: usize,
    levels: usize,
    coarse_levels: usize,
    (dirichlet, coupling): (&[bool], Coupling),
) -> Result<Option<CoarseLevelCost>> {
    if dirichlet.len() != coarse.parts.len() || coarse_levels >= levels {
        return Err(Error::InvalidInput(format!(
            "{} Dirichlet flags for {} boundary parts, L0 = {coarse_levels} of L = {levels}",
            dirichlet.len(),
            coarse.parts.len()
        )));
    }
    let m = 1usize << (levels - coarse_levels);
    let block = match coarse.element {
        Element::P1 => (m - 1) * (m - 2) / 2,
        _ => (m - 1) * (m - 1),
    };
    if block == 0 {
        return Ok(None);
    }
    let (elements, c, free_edges) = macro_mesh_counts(coarse, coarse_levels, dirichlet)?;
    let e = free_edges * (m - 1);
    let sides = coarse.element.nodes_per_cell();
    let (n_b, couplings) = (sides * (m - 1), if sides == 3 { 2 } else { 3 });
    let d_nnz = (elements * n_b * couplings) as f64;
    let (cf, ef, bf, tf, nbf) = (
        c as f64,
        e as f64,
        block as f64,
        elements as f64,
        n_b as f64,
    );
    let interiors = match coupling {
        Coupling::Csr => 4.0 * tf * bf * bf + 4.0 * d_nnz,
        // D̂_g C_g⁻¹ (n_b × b), [C_g⁻¹ | W_g] (b × (b + n_b)); each element's n_b
        // boundary entries assembled into E and gathered back.
        Coupling::Element => tf * (2.0 * nbf * bf + 2.0 * bf * (bf + nbf) + 4.0 * nbf),
    };
    Ok(Some(CoarseLevelCost {
        coarse_levels,
        c,
        e,
        i: elements * block,
        macro_elements: elements,
        block,
        groups,
        setup_flops: groups as f64 * bf.powi(3)
            + tf * 2.0 * n_b as f64 * bf * bf
            + ef.powi(3)
            + cf.powi(3),
        coupling: coupling.name(),
        apply_flops_per_rhs: interiors + 4.0 * cf * cf + 4.0 * cf * ef + 2.0 * ef * ef,
        pi_inverse_bytes: 8.0 * ef * ef,
        block_bytes: 8.0
            * groups as f64
            * match coupling {
                Coupling::Csr => 2.0 * bf * bf,
                Coupling::Element => 2.0 * bf * bf + bf * (bf + nbf),
            },
    }))
}

impl CoarseLevelCost {
    /// Whether the set-up's dense f64 matrices fit in `memory` bytes: two |E|×|E| (Λ
    /// inverted in place, the working copy) and the groups' blocks and inverses.
    pub fn fits(&self, memory: Option<u64>) -> bool {
        memory.is_none_or(|m| 2.0 * self.pi_inverse_bytes + self.block_bytes <= m as f64)
    }
}

/// The cheapest L0 for `applies` applies to `nrhs` right-hand sides among those that fit
/// in `memory` bytes (the first on a tie: the smaller set-up); none where nothing fits.
pub fn cheapest(
    costs: &[CoarseLevelCost],
    nrhs: usize,
    applies: usize,
    memory: Option<u64>,
) -> Option<&CoarseLevelCost> {
    costs.iter().filter(|c| c.fits(memory)).min_by(|a, b| {
        a.total_flops(nrhs, applies)
            .total_cmp(&b.total_flops(nrhs, applies))
    })
}

/// `psc-info --mesh flow-around-square --levels L` without `--coarse-levels`: every L0's
/// class sizes and modelled costs, and the cheapest for `nrhs` right-hand sides at `steps`
/// applies each.
pub fn report_coarse_levels(
    levels: usize,
    bc: InfoConditions,
    nrhs: usize,
    steps: usize,
    json: bool,
) -> Result<()> {
    if !(2..=12).contains(&levels) || nrhs == 0 || steps == 0 {
        return Err(Error::InvalidInput(format!(
            "psc-info: --levels {levels}, --nrhs {nrhs}, --steps {steps} (allowed: levels 2 ..= 12, nrhs and steps ≥ 1)"
        )));
    }
    let coarse = CoarseMesh::flow_around_square();
    let dirichlet: Vec<bool> = coarse
        .parts
        .iter()
        .map(|p| bc == InfoConditions::Dirichlet || p == "outflow")
        .collect();
    let costs = coarse_level_costs(&coarse, levels, &dirichlet, Coupling::default())?;
    let memory = crate::sys::available_memory();
    let chosen = cheapest(&costs, nrhs, steps, memory).map(|c| c.coarse_levels);
    if json {
        let value = serde_json::json!({
            "mesh": "flow-around-square",
            "levels": levels,
            "conditions": bc.name(),
            "nrhs": nrhs,
            "steps": steps,
            "chosen_coarse_levels": chosen,
            "coarse_levels": costs,
        });
        println!("{value}");
        return Ok(());
    }
    println!(
        "PSC-M1 on the flow around a square, p1, L = {levels}, {}, {} coupling: the macro elements after L0 of the L refinements",
        bc.describe(),
        Coupling::default()
    );
    println!(
        "{:>3} {:>7} {:>8} {:>9} {:>8} {:>6} {:>6} {:>12} {:>13} {:>15} {:>13}",
        "L0",
        "|C|",
        "|E|",
        "|I|",
        "elements",
        "block",
        "groups",
        "Π⁻¹ f64 MiB",
        "set-up GFLOP",
        "apply MFLOP/rhs",
        "total GFLOP"
    );
    for c in &costs {
        println!(
            "{:>3} {:>7} {:>8} {:>9} {:>8} {:>6} {:>6} {:>12.1} {:>13.1} {:>15.1} {:>13.1}{}",
            c.coarse_levels,
            c.c,
            c.e,
            c.i,
            c.macro_elements,
            c.block,
            c.groups,
            c.pi_inverse_bytes / (1u64 << 20) as f64,
            c.setup_flops / 1e9,
            c.apply_flops_per_rhs / 1e6,
            c.total_flops(nrhs, steps) / 1e9,
            if Some(c.coarse_levels) == chosen {
                "  ← least"
            } else if !c.fits(memory) {
                "  (does not fit)"
            } else {
                ""
            }
        );
    }
    let available = memory.map_or("unknown".into(), |m| {
        format!("{:.1} GiB", m as f64 / 2f64.powi(30))
    });
    match chosen {
        Some(l0) => println!(
            "total: set-up plus {steps} applies to each of {nrhs} right-hand sides; least at L0 = {l0} (mesh.coarse_levels = {l0}) among the L0 whose set-up (2 × Π⁻¹ and the C_g with their inverses, in f64) fits in the available memory ({available}). A flop model: measure with `tensorfem bench solve --levels {levels} --bc {} --coarse-levels L0 --method psc-m1 --nrhs K`",
            bc.name()
        ),
        None => println!(
            "no L0 fits: every set-up's dense f64 matrices (2 × Π⁻¹, the C_g and their inverses) exceed the available memory ({available}); use PSC-M3 or multigrid"
        ),
    }
    Ok(())
}

/// The macro mesh (`coarse` refined `coarse_levels` times) in numbers, without building it:
/// its cells, its vertices off the Dirichlet parts and its edges off them. Each refinement
/// adds a vertex on every edge (and, for quadrilaterals, one inside every cell), splits
/// every edge in two and adds 3 (4) edges inside every cell, which makes 4 of it.
fn macro_mesh_counts(
    coarse: &CoarseMesh,
    coarse_levels: usize,
    dirichlet: &[bool],
) -> Result<(usize, usize, usize)> {
    let edges = coarse.edges()?;
    let on_dirichlet = |part: &Option<u16>| part.is_some_and(|p| dirichlet[p as usize]);
    let fixed_vertices: HashSet<u32> = edges
        .nodes
        .iter()
        .zip(&edges.part)
        .filter(|(_, part)| on_dirichlet(part))
        .flat_map(|(nodes, _)| nodes.iter().copied())
        .collect();
    let quads = coarse.element != Element::P1;
    let (mut v, mut e, mut t) = (coarse.coords.len(), edges.len(), coarse.num_cells());
    let (mut v_d, mut e_d) = (
        fixed_vertices.len(),
        edges.part.iter().filter(|p| on_dirichlet(p)).count(),
    );
    for _ in 0..coarse_levels {
        v += e + if quads { t } else { 0 };
        e = 2 * e + if quads { 4 } else { 3 } * t;
        t *= 4;
        v_d += e_d;
        e_d *= 2;
    }
    Ok((t, v - v_d, e - e_d))
}

/// The coarse cells' shapes up to similarity (reflections included): every vertex pair's
/// distance, sorted and divided by the largest, to 1e-9.
fn similar_shapes(coarse: &CoarseMesh) -> usize {
    let shapes: HashSet<Vec<i64>> = (0..coarse.num_cells())
        .map(|c| {
            let cell = coarse.cell(c);
            let mut d = Vec::new();
            for a in 0..cell.len() {
                for b in a + 1..cell.len() {
                    let (p, q) = (
                        coarse.coords[cell[a] as usize],
                        coarse.coords[cell[b] as usize],
                    );
                    d.push((p[0] - q[0]).hypot(p[1] - q[1]));
                }
            }
            d.sort_by(f64::total_cmp);
            let largest = d.last().copied().unwrap_or(1.0);
            d.iter()
                .map(|x| (x / largest * 1e9).round() as i64)
                .collect()
        })
        .collect();
    shapes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::refine;
    use crate::psc::{PscMethod, PscSetup};

    /// `coarse` refined `levels` times, its macro elements after `coarse_levels`, with the
    /// parts marked in `dirichlet` Dirichlet and the others Neumann.
    fn macro_mesh(
        coarse: &CoarseMesh,
        levels: usize,
        coarse_levels: usize,
        dirichlet: &[bool],
    ) -> crate::mesh::Mesh2d {
        use crate::fem::{Condition, Conditions};
        let macros = coarse.refined(coarse_levels).unwrap();
        let mut mesh = refine(&macros, levels - coarse_levels).unwrap();
        let conditions = dirichlet.iter().map(|&d| {
            if d {
                Condition::Dirichlet
            } else {
                Condition::Neumann
            }
        });
        Conditions(conditions.collect()).apply(&mut mesh).unwrap();
        mesh
    }

    /// The counted classes and groups are those of the set-up itself, with Dirichlet on the
    /// whole boundary and on the outflow alone.
    #[test]
    fn counts_equal_the_set_ups() {
        let coarse = CoarseMesh::flow_around_square();
        let outflow: Vec<bool> = coarse.parts.iter().map(|p| p == "outflow").collect();
        let everywhere = vec![true; coarse.parts.len()];
        for dirichlet in [&everywhere, &outflow] {
            let costs = coarse_level_costs(&coarse, 3, dirichlet, Coupling::Element).unwrap();
            assert_eq!(
                costs.len(),
                2,
                "L0 = 2 leaves no unknown inside a P1 macro element"
            );
            for cost in &costs {
                let mesh = macro_mesh(&coarse, 3, cost.coarse_levels, dirichlet);
                let setup = PscSetup::on_mesh(mesh, PscMethod::M1).unwrap();
                assert_eq!(
                    (cost.c, cost.e, cost.i, cost.groups),
                    (
                        setup.c_dofs.len(),
                        setup.e_dofs.len(),
                        setup.i_dofs.len(),
                        setup.groups.len()
                    ),
                    "L0 = {}",
                    cost.coarse_levels
                );
                assert_eq!(cost.block, setup.groups[0].block.nrows());
            }
        }
    }

    /// The modelled apply is the operator's own count (`PscOperator::flops_per_rhs`, M1 in
    /// f64) to within the sparse entries the model estimates, with either coupling, at
    /// L = 5 with the pressure's conditions.
    #[test]
    fn the_apply_model_counts_as_the_operator() {
        use crate::device::Cpu;
        use crate::precision::Precision;
        use crate::psc::PscOperator;
        let coarse = CoarseMesh::flow_around_square();
        let outflow: Vec<bool> = coarse.parts.iter().map(|p| p == "outflow").collect();
        let setup = PscSetup::on_mesh(macro_mesh(&coarse, 5, 1, &outflow), PscMethod::M1).unwrap();
        for coupling in Coupling::ALL {
            let model = coarse_level_cost(&coarse, 5, 1, &outflow, coupling)
                .unwrap()
                .unwrap();
            let op = PscOperator::new(&Cpu::new(), &setup, Precision::F64, coupling).unwrap();
            let counted = op.flops_per_rhs();
            let gap = (model.apply_flops_per_rhs - counted).abs() / counted;
            assert!(
                gap < 0.03,
                "{coupling}: modelled {:.4e}, counted {counted:.4e}",
                model.apply_flops_per_rhs
            );
        }
    }

    /// L = 6 with the pressure's conditions and the element coupling (docs/performance.md
    /// measured PSC-IR f32 on 64 columns at L0 = 0, 1, 2, 3 in 0.51, 0.29, 0.40, 1.01 s and
    /// the set-ups in 3.4, 4.7, 22, 124 s): the model orders the applies and the set-ups as
    /// measured, picks L0 = 0 for one solve of 64 columns (3.4 + 0.51 s against 4.7 + 0.29
    /// s) and L0 = 1 for a hundred (the measured crossover is near 6 solves, the model's near
    /// 3: it counts flops, and the set-up's factorisations run slower than the apply's GEMMs).
    #[test]
    fn the_model_orders_l0_as_measured() {
        let coarse = CoarseMesh::flow_around_square();
        let outflow: Vec<bool> = coarse.parts.iter().map(|p| p == "outflow").collect();
        let costs = coarse_level_costs(&coarse, 6, &outflow, Coupling::Element).unwrap();
        assert_eq!(costs.len(), 5);
        let (c1, e1) = (costs[1].c, costs[1].e);
        assert_eq!((c1, e1), (67, 5580), "psc-info's counts at L0 = 1");
        let apply: Vec<f64> = costs.iter().map(|c| c.apply_flops_per_rhs).collect();
        assert!(apply[1] < apply[2] && apply[2] < apply[0] && apply[0] < apply[3]);
        let setup: Vec<f64> = costs.iter().map(|c| c.setup_flops).collect();
        assert!(setup.windows(2).take(3).all(|w| w[0] < w[1]), "{setup:?}");
        assert_eq!(cheapest(&costs, 64, 3, None).unwrap().coarse_levels, 0);
        assert_eq!(cheapest(&costs, 64, 300, None).unwrap().coarse_levels, 1);
        // Within 1 GiB L0 = 2 does not fit (Π⁻¹ in f64: 832 MiB, twice); L0 = 0 does (its 3
        // groups' C_g, C_g⁻¹ and [C_g⁻¹ | W_g] in f64: 1953 × (2·1953 + 2142), 270 MiB, beside
        // 2 × 70 MiB of Π⁻¹: 410 MiB), and within 450 MiB L0 = 0 alone (L0 = 1: 2 × 238 MiB of
        // Π⁻¹ and 16 MiB of blocks).
        let gib = Some(1 << 30);
        assert!(costs[0].fits(gib) && costs[1].fits(gib) && !costs[2].fits(gib));
        let blocks = 8.0 * 3.0 * 1953.0 * (2.0 * 1953.0 + 1953.0 + 189.0);
        assert_eq!(costs[0].block_bytes, blocks);
        assert!(costs[0].fits(Some(450 << 20)) && !costs[1].fits(Some(450 << 20)));
        assert_eq!(cheapest(&costs, 64, 30_000, gib).unwrap().coarse_levels, 1);
        assert!(cheapest(&costs, 64, 3, Some(1 << 20)).is_none());
    }
}
