//! Macro elements for PSC (docs/mathematics.md §3): a consistent local numbering of the
//! nodes inside a macro element, the symmetries of that numbering, and the detection of
//! groups of identical I-blocks (C_g) up to such a symmetry, so that similar macro
//! elements, mirror images included, share one C_g⁻¹.

use crate::mesh::Element;

/// The interior lattice points of a macro element cut into m cells per side (frames as in
/// [`crate::mesh::refine`]), numbered row by row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Lattice {
    pub triangle: bool,
    pub m: usize,
}

impl Lattice {
    pub fn new(element: Element, levels: usize) -> Self {
        Lattice {
            triangle: element == Element::P1,
            m: 1 << levels,
        }
    }

    /// Interior points: (m−1)(m−2)/2 in a triangle, (m−1)² in a quadrilateral.
    pub fn len(&self) -> usize {
        let m = self.m;
        if self.triangle {
            (m - 1) * m.saturating_sub(2) / 2
        } else {
            (m - 1) * (m - 1)
        }
    }

    /// Local index of interior point (i, j).
    pub fn index(&self, [i, j]: [u32; 2]) -> usize {
        let (i, j, m) = (i as usize, j as usize, self.m);
        if self.triangle {
            // rows j' = 1 … j−1 hold m − 1 − j' points each
            (j - 1) * (m - 1) - (j - 1) * j / 2 + (i - 1)
        } else {
            (i - 1) + (j - 1) * (m - 1)
        }
    }

    fn points(&self) -> Vec<[u32; 2]> {
        let m = self.m as u32;
        (1..m)
            .flat_map(|j| (1..m).map(move |i| [i, j]))
            .filter(|&[i, j]| !self.triangle || i + j < m)
            .collect()
    }

    /// The symmetries of the lattice as permutations of local indices (`perm[p]` is the
    /// index of the image of point p), identity first: the 6 permutations of a triangle's
    /// vertices, the 8 of the square's dihedral group.
    pub fn symmetries(&self) -> Vec<Vec<u32>> {
        let m = self.m as i64;
        type PointMap = Box<dyn Fn(i64, i64) -> (i64, i64)>;
        let maps: Vec<PointMap> = if self.triangle {
            // barycentric (a, b, c) = (m − i − j, i, j); a symmetry permutes them and
            // (i', j') = (b', c')
            vec![
                Box::new(|i, j| (i, j)),
                Box::new(|i, j| (j, i)),
                Box::new(move |i, j| (m - i - j, j)),
                Box::new(move |i, j| (i, m - i - j)),
                Box::new(move |i, j| (j, m - i - j)),
                Box::new(move |i, j| (m - i - j, i)),
            ]
        } else {
            vec![
                Box::new(|i, j| (i, j)),
                Box::new(move |i, j| (m - j, i)),
                Box::new(move |i, j| (m - i, m - j)),
                Box::new(move |i, j| (j, m - i)),
                Box::new(|i, j| (j, i)),
                Box::new(move |i, j| (m - i, j)),
                Box::new(move |i, j| (i, m - j)),
                Box::new(move |i, j| (m - j, m - i)),
            ]
        };
        let points = self.points();
        maps.iter()
            .map(|map| {
                points
                    .iter()
                    .map(|&[i, j]| {
                        let (a, b) = map(i64::from(i), i64::from(j));
                        self.index([a as u32, b as u32]) as u32
                    })
                    .collect()
            })
            .collect()
    }
}

/// A macro element's I-block in its local numbering, rows sparse with sorted columns.
pub(super) struct SparseBlock {
    pub rows: Vec<Vec<(u32, f64)>>,
}

impl SparseBlock {
    fn diagonal(&self, p: usize) -> f64 {
        self.rows[p]
            .iter()
            .find(|e| e.0 as usize == p)
            .map_or(0.0, |e| e.1)
    }

    pub fn norm_max(&self) -> f64 {
        self.rows
            .iter()
            .flatten()
            .fold(0.0f64, |a, e| a.max(e.1.abs()))
    }

    /// Whether `self` equals `other` with local point p renumbered σ(p), within
    /// `tolerance` (absolute): self[p][q] = other[σ(p)][σ(q)].
    pub fn equals_under(&self, other: &SparseBlock, sigma: &[u32], tolerance: f64) -> bool {
        let close = |a: f64, b: f64| (a - b).abs() <= tolerance;
        // The diagonal first: cheap, and it rejects almost every wrong symmetry.
        if !(0..self.rows.len()).all(|p| close(self.diagonal(p), other.diagonal(sigma[p] as usize)))
        {
            return false;
        }
        let mut mapped = Vec::new();
        self.rows.iter().enumerate().all(|(p, row)| {
            mapped.clear();
            mapped.extend(row.iter().map(|&(q, v)| (sigma[q as usize], v)));
            mapped.sort_unstable_by_key(|e| e.0);
            let target = &other.rows[sigma[p] as usize];
            mapped.len() == target.len()
                && mapped
                    .iter()
                    .zip(target)
                    .all(|(a, b)| a.0 == b.0 && close(a.1, b.1))
        })
    }

    pub fn to_dense(&self) -> faer::Mat<f64> {
        let n = self.rows.len();
        let mut dense = faer::Mat::<f64>::zeros(n, n);
        for (p, row) in self.rows.iter().enumerate() {
            for &(q, v) in row {
                dense[(p, q as usize)] = v;
            }
        }
        dense
    }
}

/// Groups of macro elements whose blocks are identical up to a lattice symmetry.
pub(super) struct Grouping {
    /// Macro element of each group's representative.
    pub representatives: Vec<usize>,
    /// Group of each macro element and the symmetry taking its local numbering to its
    /// representative's (an index into the symmetries).
    pub group_of: Vec<usize>,
    pub symmetry_of: Vec<usize>,
}

/// Groups the blocks: each joins the first representative it equals under some symmetry,
/// within `relative_tolerance` of its largest entry, or becomes a representative.
pub(super) fn group_blocks(
    blocks: &[&SparseBlock],
    symmetries: &[Vec<u32>],
    relative_tolerance: f64,
) -> Grouping {
    let mut grouping = Grouping {
        representatives: Vec::new(),
        group_of: Vec::with_capacity(blocks.len()),
        symmetry_of: Vec::with_capacity(blocks.len()),
    };
    for (m, block) in blocks.iter().enumerate() {
        let tolerance = relative_tolerance * block.norm_max();
        let found = grouping
            .representatives
            .iter()
            .enumerate()
            .find_map(|(g, &r)| {
                symmetries
                    .iter()
                    .position(|sigma| block.equals_under(blocks[r], sigma, tolerance))
                    .map(|s| (g, s))
            });
        let (g, s) = found.unwrap_or_else(|| {
            grouping.representatives.push(m);
            (grouping.representatives.len() - 1, 0)
        });
        grouping.group_of.push(g);
        grouping.symmetry_of.push(s);
    }
    grouping
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetries_are_permutations_and_a_group() {
        for (element, levels) in [(Element::P1, 3), (Element::P1, 2), (Element::Q1, 3)] {
            let lattice = Lattice::new(element, levels);
            let symmetries = lattice.symmetries();
            assert_eq!(symmetries.len(), if lattice.triangle { 6 } else { 8 });
            assert!(symmetries[0]
                .iter()
                .enumerate()
                .all(|(p, &q)| p == q as usize));
            for sigma in &symmetries {
                let mut seen = vec![false; lattice.len()];
                for &q in sigma {
                    assert!(!std::mem::replace(&mut seen[q as usize], true));
                }
                // closed under composition
                for tau in &symmetries {
                    let composed: Vec<u32> = sigma.iter().map(|&q| tau[q as usize]).collect();
                    assert!(symmetries.contains(&composed));
                }
            }
        }
    }

    #[test]
    fn blocks_equal_under_a_symmetry_are_grouped() {
        let lattice = Lattice::new(Element::P1, 3);
        let symmetries = lattice.symmetries();
        let n = lattice.len();
        // A block with distinct entries: a path coupling p and p+1 with weights p+1.
        let base = SparseBlock {
            rows: (0..n)
                .map(|p| {
                    let mut row = vec![(p as u32, 10.0 + p as f64)];
                    if p + 1 < n {
                        row.push(((p + 1) as u32, -(p as f64) - 1.0));
                    }
                    if p > 0 {
                        row.insert(0, ((p - 1) as u32, -(p as f64)));
                    }
                    row
                })
                .collect(),
        };
        // The same block seen in the numbering of symmetry 4: image[p][q] = base[σp][σq].
        let sigma = &symmetries[4];
        let image = SparseBlock {
            rows: (0..n)
                .map(|p| {
                    let mut row: Vec<(u32, f64)> = (0..n)
                        .filter_map(|q| {
                            base.rows[sigma[p] as usize]
                                .iter()
                                .find(|e| e.0 == sigma[q])
                                .map(|e| (q as u32, e.1))
                        })
                        .collect();
                    row.sort_unstable_by_key(|e| e.0);
                    row
                })
                .collect(),
        };
        let mut other = SparseBlock {
            rows: base.rows.clone(),
        };
        other.rows[0][0].1 += 1.0;
        let grouping = group_blocks(&[&base, &image, &other], &symmetries, 1e-12);
        assert_eq!(grouping.representatives, [0, 2]);
        assert_eq!(grouping.group_of, [0, 0, 1]);
        assert!(image.equals_under(&base, &symmetries[grouping.symmetry_of[1]], 1e-12));
    }
}
