//! Meshes that are tensor-product grids: the structured unit square (Q1) and cube, or any
//! mesh whose nodes and cells are numbered as theirs are. On such a grid, integrals of
//! separable functions against the Q1 basis factor into one-dimensional integrals per
//! axis (see `fem::modes`).

use super::{Element, Mesh};

/// The coordinates of a tensor-product grid along each axis.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorGrid<const D: usize> {
    /// Per axis, the coordinates of the grid lines, strictly increasing (at least two).
    pub lines: [Vec<f64>; D],
}

impl<const D: usize> TensorGrid<D> {
    /// Nodes per axis.
    pub fn points(&self) -> [usize; D] {
        std::array::from_fn(|d| self.lines[d].len())
    }

    /// The node at grid index `index`: lexicographic, axis 0 fastest.
    pub fn node(&self, index: [usize; D]) -> usize {
        let mut node = 0;
        for d in (0..D).rev() {
            node = node * self.lines[d].len() + index[d];
        }
        node
    }

    /// Whether the node at grid index `index` lies on the boundary of the grid.
    pub fn on_boundary(&self, index: [usize; D]) -> bool {
        (0..D).any(|d| index[d] == 0 || index[d] + 1 == self.lines[d].len())
    }
}

/// Grid index of item `i` of a lexicographic numbering (axis 0 fastest) of `sizes`.
pub fn grid_index<const D: usize>(mut i: usize, sizes: [usize; D]) -> [usize; D] {
    std::array::from_fn(|d| {
        let at = i % sizes[d];
        i /= sizes[d];
        at
    })
}

/// The next index of a lexicographic numbering (axis 0 fastest) of `sizes`: what
/// [`grid_index`] gives for the next item, without its divisions.
pub fn step<const D: usize>(index: &mut [usize; D], sizes: [usize; D]) {
    for d in 0..D {
        index[d] += 1;
        if index[d] < sizes[d] {
            return;
        }
        index[d] = 0;
    }
}

impl<const D: usize> Mesh<D> {
    /// The mesh as a tensor-product grid, when it is one: Q1 cells in 2D or Q1 hexahedra
    /// in 3D; nodes numbered lexicographically (axis 0 fastest), each exactly at the
    /// product of one coordinate per axis; cells lexicographic too, their corners in the
    /// element's order. None for any other mesh (triangles, refined coarse meshes, any
    /// other numbering). Costs one pass over the nodes and the cells.
    pub fn tensor_grid(&self) -> Option<TensorGrid<D>> {
        let k = self.element.nodes_per_cell();
        if self.element == Element::P1 || self.element.dim() != D || self.coords.is_empty() {
            return None;
        }
        // Each axis's line: the nodes from the first along that axis's stride, as long as
        // the coordinates of the later axes stay those of the first node.
        let first = self.coords[0];
        let mut stride = 1;
        let lines: [Vec<f64>; D] = std::array::from_fn(|d| {
            let line: Vec<f64> = (0..)
                .map(|i| i * stride)
                .take_while(|&node| {
                    node < self.coords.len() && (d + 1..D).all(|e| self.coords[node][e] == first[e])
                })
                .map(|node| self.coords[node][d])
                .collect();
            stride *= line.len().max(1);
            line
        });
        let grid = TensorGrid { lines };
        let sizes = grid.points();
        if sizes.iter().product::<usize>() != self.coords.len()
            || grid
                .lines
                .iter()
                .any(|line| line.len() < 2 || !line.windows(2).all(|w| w[0] < w[1]))
        {
            return None;
        }
        let mut index = [0; D];
        let nodes_match = self.coords.iter().all(|x| {
            let on_lines = (0..D).all(|d| x[d] == grid.lines[d][index[d]]);
            step(&mut index, sizes);
            on_lines
        });
        let cell_sizes: [usize; D] = std::array::from_fn(|d| sizes[d] - 1);
        let offsets: Vec<[usize; 3]> = (0..k)
            .map(|a| self.element.box_corner(a))
            .collect::<Option<_>>()?;
        // Corner a of a cell is node first + corner[a], first its lower corner's node.
        let corner: Vec<usize> = offsets
            .iter()
            .map(|offset| grid.node(std::array::from_fn(|d| offset[d])))
            .collect();
        let mut cell = [0; D];
        let cells_match = self.num_cells() == cell_sizes.iter().product::<usize>()
            && self.cells.chunks_exact(k).all(|nodes| {
                let first = grid.node(cell);
                step(&mut cell, cell_sizes);
                nodes
                    .iter()
                    .zip(&corner)
                    .all(|(&node, at)| node as usize == first + at)
            });
        (nodes_match && cells_match).then_some(grid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::{unit_cube, unit_square, unit_square_refined};

    #[test]
    fn structured_meshes_are_grids() {
        let square = unit_square(4, Element::Q1).unwrap();
        let grid = square.tensor_grid().expect("the unit square is a grid");
        assert_eq!(grid.lines[0], vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        assert_eq!(grid.lines[1], grid.lines[0]);
        assert_eq!(grid.node([1, 2]), 11);
        assert!(grid.on_boundary([4, 2]) && !grid.on_boundary([1, 3]));
        let refined = unit_square_refined(2, 2, Element::Q1).unwrap();
        assert_eq!(refined.tensor_grid().unwrap().points(), [9, 9]);
        let cube = unit_cube(3)
            .unwrap()
            .tensor_grid()
            .expect("the unit cube is a grid");
        assert_eq!(cube.points(), [4, 4, 4]);
        assert_eq!(cube.node([1, 2, 3]), 1 + 4 * (2 + 4 * 3));
        assert_eq!(grid_index(57, [4, 4, 4]), [1, 2, 3]);
    }

    #[test]
    fn other_meshes_are_not_grids() {
        assert!(unit_square(4, Element::P1).unwrap().tensor_grid().is_none());
        // A node moved off its line.
        let mut moved = unit_square(4, Element::Q1).unwrap();
        moved.coords[7][1] += 1e-3;
        assert!(moved.tensor_grid().is_none());
        // The same nodes, one cell's corners in another order.
        let mut turned = unit_square(4, Element::Q1).unwrap();
        turned.cells[4..8].rotate_left(1);
        assert!(turned.tensor_grid().is_none());
        // Nodes renumbered (two swapped, cells following them).
        let mut renumbered = unit_square(4, Element::Q1).unwrap();
        renumbered.coords.swap(6, 7);
        for v in renumbered.cells.iter_mut() {
            *v = match *v {
                6 => 7,
                7 => 6,
                other => other,
            };
        }
        assert!(renumbered.tensor_grid().is_none());
        // A cell missing.
        let mut holed = unit_square(4, Element::Q1).unwrap();
        holed.cells.truncate(holed.cells.len() - 4);
        assert!(holed.tensor_grid().is_none());
    }
}
