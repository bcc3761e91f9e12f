//! The unit cube: the uniform n×n×n Q1 (trilinear hexahedron) mesh.

use super::{check_node_count, Element, Mesh3d};
use crate::error::{Error, Result};

/// The uniform n×n×n mesh of the unit cube; node `(i, j, k)` is `i + (n+1)(j + (n+1) k)`.
pub fn unit_cube(n: usize) -> Result<Mesh3d> {
    if n == 0 {
        return Err(Error::InvalidInput(
            "a mesh needs at least 1 cell per direction".into(),
        ));
    }
    let side = n + 1;
    check_node_count(
        side.saturating_mul(side).saturating_mul(side),
        &format!("a {n}³ cube mesh"),
    )?;
    let h = 1.0 / n as f64;
    let node = |i: usize, j: usize, k: usize| (i + side * (j + side * k)) as u32;
    let mut coords = Vec::with_capacity(side * side * side);
    let mut on_boundary = Vec::with_capacity(side * side * side);
    for k in 0..side {
        for j in 0..side {
            for i in 0..side {
                coords.push([i as f64 * h, j as f64 * h, k as f64 * h]);
                on_boundary.push([i, j, k].iter().any(|&a| a == 0 || a == n));
            }
        }
    }
    let mut cells = Vec::with_capacity(8 * n * n * n);
    for k in 0..n {
        for j in 0..n {
            for i in 0..n {
                for (dk, dj, di) in (0..8).map(|c| ((c >> 2) & 1, (c >> 1) & 1, c & 1)) {
                    cells.push(node(i + di, j + dj, k + dk));
                }
            }
        }
    }
    Ok(Mesh3d {
        element: Element::Q1Hex,
        n,
        coords,
        cells,
        on_boundary,
        hierarchy: None,
        boundary: super::BoundaryParts::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_boundary() {
        let mesh = unit_cube(3).unwrap();
        assert_eq!(mesh.num_nodes(), 64);
        assert_eq!(mesh.num_cells(), 27);
        assert_eq!(mesh.num_interior(), 8);
        assert_eq!(mesh.cell(0), &[0, 1, 4, 5, 16, 17, 20, 21]);
        assert!(unit_cube(0).is_err());
        assert!(unit_cube(5000).is_err());
    }
}
