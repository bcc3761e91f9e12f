//! Every device kernel against an independent host reference (naive loops, the host sparse
//! products, the sparse S matrix), written once and run on every backend (`device_tests!`).

// The references index like the formulas they check.
#![allow(clippy::needless_range_loop)]

mod common;

use half::f16;
use tensorfem::device::psc::{Classes, PADDING_SLOT};
use tensorfem::device::stokes::{Grid, Transfer};
use tensorfem::device::{
    Block, CsrMatrix, Data, EllMatrix, GemmBatch, GridShape, Layout, LevelTransfer, MatMut, MatRef,
    MultigridDevice, PscDevice, RowOp, Scratch, Stats, StokesDevice,
};
use tensorfem::device_tests;
use tensorfem::mesh::{refine, unit_square_refined, CoarseMesh, Element};
use tensorfem::mg::assemble_level;
use tensorfem::precision::{f16_from_f64, round_to_tf32, GemmMath, Precision, Stored};
use tensorfem::psc::HierarchicalBasis;
use tensorfem::sparse::{self, Csr, Ell};

/// Deterministic test values in [−1, 1).
fn values(n: usize, seed: usize) -> Vec<f64> {
    // splitmix64 of (seed, i): uncorrelated between seeds, in [-1, 1).
    (0..n as u64)
        .map(|i| {
            let mut z = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

fn vector<D: PscDevice>(dev: &D, host: &[f64], p: Precision) -> Block<D> {
    Block::from_f64(dev, host, host.len(), 1, p, Layout::ColMajor).unwrap()
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// [`test_matrix`] with 4 on the diagonal (so Jacobi steps stay finite): rows of up to 4
/// entries, not a stencil's 9 or 27 (the CPU kernels' generic width).
fn test_matrix_with_diagonal(n: usize) -> Csr<f64> {
    let a = test_matrix(n);
    let values = (0..n)
        .flat_map(|r| {
            let (cols, vals) = a.row(r);
            cols.iter()
                .zip(vals)
                .map(move |(&c, &v)| if c as usize == r { 4.0 } else { v })
        })
        .collect();
    Csr::new(n, n, a.row_ptr().to_vec(), a.col_idx().to_vec(), values).unwrap()
}

/// A random-ish sparse matrix with `n` rows, several entries per row.
fn test_matrix(n: usize) -> Csr<f64> {
    let mut row_ptr = vec![0];
    let (mut cols, mut vals) = (vec![], vec![]);
    for r in 0..n {
        let mut row: Vec<u32> = [r, (r * 7 + 3) % n, (r * 13 + 1) % n, (r + n - 1) % n]
            .iter()
            .map(|&c| c as u32)
            .collect();
        row.sort();
        row.dedup();
        for &c in &row {
            cols.push(c);
            vals.push(((r * 31 + c as usize * 17) % 23) as f64 / 8.0 - 1.0);
        }
        row_ptr.push(cols.len());
    }
    Csr::new(n, n, row_ptr, cols, vals).unwrap()
}

/// Conversions round to nearest exactly like `half` and `as`; axpby, scale, shift, the
/// reductions and the pointwise products match naive loops.
fn vector_kernels_match_naive_loops<D: PscDevice>(dev: &D) {
    let n = 40_000;
    let (x, y) = (values(n, 1), values(n, 2));
    // f64 → f16 and f32 → f16 round like `half`; back to f64 exactly.
    let wide = vector(dev, &x, Precision::F64);
    for p in [Precision::F16, Precision::F32] {
        let mut low = Block::vector(dev, n, p).unwrap();
        dev.copy(wide.view(), low.view_mut()).unwrap();
        let got = low.to_f64(dev).unwrap();
        for (g, &v) in got.iter().zip(&x) {
            let want = match p {
                Precision::F16 => f16_from_f64(v).to_f64(),
                _ => v as f32 as f64,
            };
            assert_eq!(g.to_bits(), want.to_bits(), "{p} rounding of {v}");
        }
    }
    let x32 = vector(dev, &x, Precision::F32);
    let mut h = Block::vector(dev, n, Precision::F16).unwrap();
    dev.copy(x32.view(), h.view_mut()).unwrap();
    for (g, &v) in h.to_f64(dev).unwrap().iter().zip(&x) {
        assert_eq!(*g, f16::from_f32(v as f32).to_f64());
    }

    let mut yb = vector(dev, &y, Precision::F64);
    dev.axpby(0.5, wide.view(), -2.0, yb.view_mut()).unwrap();
    let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| 0.5 * a - 2.0 * b).collect();
    assert_eq!(yb.to_f64(dev).unwrap(), want);
    dev.scale(3.0, yb.view_mut()).unwrap();
    dev.shift(yb.view_mut(), 1.5).unwrap();
    let want: Vec<f64> = want.iter().map(|v| 3.0 * v + 1.5).collect();
    assert_eq!(yb.to_f64(dev).unwrap(), want);

    let dot: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
    let got = dev
        .dot(wide.view(), vector(dev, &y, Precision::F64).view())
        .unwrap();
    assert!((got - dot).abs() < 1e-10 * dot.abs().max(1.0));
    let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!((dev.nrm2(wide.view()).unwrap() - norm).abs() < 1e-12 * norm);
    let sum: f64 = x.iter().sum();
    assert!((dev.sum(wide.view()).unwrap() - sum).abs() < 1e-10);
    let mut nan = x.clone();
    nan[1234] = f64::NAN;
    assert!(dev
        .nrm2(vector(dev, &nan, Precision::F64).view())
        .unwrap()
        .is_nan());

    // Pointwise products over a slice of the vectors.
    let d = values(n, 3);
    let (db, xb, zb) = (
        vector(dev, &d, Precision::F64),
        vector(dev, &x, Precision::F64),
        vector(dev, &y, Precision::F64),
    );
    let mut out = Block::vector(dev, n, Precision::F64).unwrap();
    dev.scaled_product(2.0, db.view(), xb.view(), out.view_mut())
        .unwrap();
    let want: Vec<f64> = d.iter().zip(&x).map(|(d, x)| 2.0 * d * x).collect();
    assert_eq!(out.to_f64(dev).unwrap(), want);
    let range = 100..30_100;
    dev.scaled_product_add(
        0.5,
        db.data.slice(range.clone()),
        xb.data.slice(range.clone()),
        zb.data.slice(range.clone()),
        out.data.slice_mut(range.clone()),
    )
    .unwrap();
    let got = out.to_f64(dev).unwrap();
    for i in 0..n {
        let want = if range.contains(&i) {
            want[i] + 0.5 * d[i] * (x[i] - y[i])
        } else {
            want[i]
        };
        assert_eq!(got[i], want, "entry {i}");
    }
}

/// Column statistics, per-column dots and axpbys, the scaled cast and the relayout, in
/// both layouts, against naive loops; a column holds the same sums alone and in a block.
fn block_kernels_match_naive_loops<D: PscDevice>(dev: &D) {
    let (n, k) = (9_000, 5);
    let col_major = values(n * k, 4);
    let cm = Block::from_f64(dev, &col_major, n, k, Precision::F64, Layout::ColMajor).unwrap();
    let mut nm = Block::zeros(dev, n, k, Precision::F64, Layout::NodeMajor).unwrap();
    dev.relayout(&cm, &mut nm).unwrap();
    let node = nm.to_f64(dev).unwrap();
    for c in 0..k {
        for i in 0..n {
            assert_eq!(node[i * k + c], col_major[c * n + i]);
        }
    }
    let mut back = Block::zeros(dev, n, k, Precision::F32, Layout::ColMajor).unwrap();
    dev.relayout(&nm, &mut back).unwrap();
    let back = back.to_f64(dev).unwrap();
    assert!(max_diff(&back, &col_major) < 1e-7);

    let mut stats = Stats::new(dev, k).unwrap();
    for block in [&cm, &nm] {
        dev.column_stats(block, &mut stats).unwrap();
        let s = stats.read(dev).unwrap();
        assert!(s.in_range);
        for c in 0..k {
            let column = &col_major[c * n..(c + 1) * n];
            let sumsq: f64 = column.iter().map(|v| v * v).sum();
            let max = column.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            assert!((s.sumsq.unwrap()[c] - sumsq).abs() < 1e-10 * sumsq);
            assert_eq!(s.max_abs[c], max);
        }
    }
    // A column alone has the same statistics as in the block (node-major, bitwise).
    let mut single = Stats::new(dev, 1).unwrap();
    let column: Vec<f64> = col_major[2 * n..3 * n].to_vec();
    let alone = Block::from_f64(dev, &column, n, 1, Precision::F64, Layout::NodeMajor).unwrap();
    dev.column_stats(&alone, &mut single).unwrap();
    dev.column_stats(&nm, &mut stats).unwrap();
    assert_eq!(
        single.read(dev).unwrap().sumsq.unwrap()[0].to_bits(),
        stats.read(dev).unwrap().sumsq.unwrap()[2].to_bits()
    );
    // And column-major: the column alone and in the block agree bitwise.
    let alone = Block::from_f64(dev, &column, n, 1, Precision::F64, Layout::ColMajor).unwrap();
    dev.column_stats(&alone, &mut single).unwrap();
    dev.column_stats(&cm, &mut stats).unwrap();
    assert_eq!(
        single.read(dev).unwrap().sumsq.unwrap()[0].to_bits(),
        stats.read(dev).unwrap().sumsq.unwrap()[2].to_bits()
    );

    // Cast with a scale per column into f16: rounded once; a huge value is out of range.
    let scale = [2.0, 0.0, 1.0, 4.0, 0.5];
    let mut low = Block::zeros(dev, n, k, Precision::F16, Layout::NodeMajor).unwrap();
    dev.scale_columns(&nm, &scale, &mut low, &mut stats)
        .unwrap();
    let got = low.to_f64(dev).unwrap();
    for i in 0..n {
        for c in 0..k {
            let v = if scale[c] > 0.0 {
                node[i * k + c] / scale[c]
            } else {
                0.0
            };
            assert_eq!(got[i * k + c], f16::from_f32(v as f32).to_f64());
        }
    }
    assert!(stats.read(dev).unwrap().in_range);
    dev.scale_columns(&nm, &[1e-6; 5], &mut low, &mut stats)
        .unwrap();
    assert!(!stats.read(dev).unwrap().in_range);

    let other = values(n * k, 5);
    let om = Block::from_f64(dev, &other, n, k, Precision::F64, Layout::ColMajor).unwrap();
    let mut dots = vec![0.0; k];
    dev.column_dots(&cm, &om, &mut dots, &mut Scratch::new(dev).unwrap())
        .unwrap();
    let (alpha, beta) = ([1.0, -2.0, 0.5, 0.0, 3.0], [1.0, 1.0, -1.0, 2.0, 0.0]);
    let mut y = Block::from_f64(dev, &other, n, k, Precision::F64, Layout::ColMajor).unwrap();
    dev.column_axpby(&alpha, &cm, &beta, &mut y).unwrap();
    let y = y.to_f64(dev).unwrap();
    for c in 0..k {
        let span = c * n..(c + 1) * n;
        let want: f64 = col_major[span.clone()]
            .iter()
            .zip(&other[span.clone()])
            .map(|(a, b)| a * b)
            .sum();
        assert!((dots[c] - want).abs() < 1e-10);
        for i in span {
            assert_eq!(y[i], alpha[c] * col_major[i] + beta[c] * other[i]);
        }
    }
    // Node-major dots: the same sums, and a column alone equals it in the block (bitwise).
    let mut onm = Block::zeros(dev, n, k, Precision::F64, Layout::NodeMajor).unwrap();
    dev.relayout(&om, &mut onm).unwrap();
    let mut node_dots = vec![0.0; k];
    let mut scratch = Scratch::new(dev).unwrap();
    dev.column_dots(&nm, &onm, &mut node_dots, &mut scratch)
        .unwrap();
    for c in 0..k {
        assert!((node_dots[c] - dots[c]).abs() < 1e-10, "column {c}");
    }
    let other_column = &other[2 * n..3 * n];
    let alone = Block::from_f64(dev, &column, n, 1, Precision::F64, Layout::NodeMajor).unwrap();
    let other_alone =
        Block::from_f64(dev, other_column, n, 1, Precision::F64, Layout::NodeMajor).unwrap();
    let mut single_dot = [0.0];
    dev.column_dots(&alone, &other_alone, &mut single_dot, &mut scratch)
        .unwrap();
    assert_eq!(single_dot[0].to_bits(), node_dots[2].to_bits());
}

/// In a node-major block wider than one group of columns a device reduces together (13
/// columns: a whole group of 8 and a part), a column of the second group has alone the
/// statistics, dot with another column and scaled cast it has in the block, bit for bit.
fn wide_block_columns_reduce_as_alone<D: PscDevice>(dev: &D) {
    let (n, k, c) = (20_000, 13, 10);
    let (x, y) = (values(n * k, 8), values(n * k, 9));
    let node_major = |v: &[f64]| {
        let mut out = vec![0.0; n * k];
        for (i, v) in v.iter().enumerate() {
            out[(i % n) * k + i / n] = *v;
        }
        Block::from_f64(dev, &out, n, k, Precision::F64, Layout::NodeMajor).unwrap()
    };
    let alone = |v: &[f64]| {
        Block::from_f64(
            dev,
            &v[c * n..(c + 1) * n],
            n,
            1,
            Precision::F64,
            Layout::NodeMajor,
        )
        .unwrap()
    };
    let (xb, yb, xc, yc) = (node_major(&x), node_major(&y), alone(&x), alone(&y));
    let (mut stats, mut single) = (Stats::new(dev, k).unwrap(), Stats::new(dev, 1).unwrap());
    let mut scratch = Scratch::new(dev).unwrap();
    let bits = |s: &mut Stats<D>, column: usize| {
        let s = s.read(dev).unwrap();
        (
            s.sumsq.unwrap()[column].to_bits(),
            s.max_abs[column].to_bits(),
        )
    };

    dev.column_stats(&xb, &mut stats).unwrap();
    dev.column_stats(&xc, &mut single).unwrap();
    assert_eq!(bits(&mut stats, c), bits(&mut single, 0));

    let (mut dots, mut dot) = (vec![0.0; k], [0.0]);
    dev.column_dots(&xb, &yb, &mut dots, &mut scratch).unwrap();
    dev.column_dots(&xc, &yc, &mut dot, &mut scratch).unwrap();
    assert_eq!(dots[c].to_bits(), dot[0].to_bits());
    let want: f64 = (c * n..(c + 1) * n).map(|i| x[i] * y[i]).sum();
    assert!((dot[0] - want).abs() < 1e-10 * n as f64);

    let scale: Vec<f64> = (0..k).map(|j| 0.5 + j as f64).collect();
    let mut low = Block::zeros(dev, n, k, Precision::F32, Layout::NodeMajor).unwrap();
    let mut low_alone = Block::zeros(dev, n, 1, Precision::F32, Layout::NodeMajor).unwrap();
    dev.scale_columns(&xb, &scale, &mut low, &mut stats)
        .unwrap();
    dev.scale_columns(&xc, &scale[c..c + 1], &mut low_alone, &mut single)
        .unwrap();
    assert_eq!(bits(&mut stats, c), bits(&mut single, 0));
    let (low, low_alone) = (low.to_f64(dev).unwrap(), low_alone.to_f64(dev).unwrap());
    for i in 0..n {
        assert_eq!(low[i * k + c], low_alone[i]);
        assert_eq!(low_alone[i], ((x[c * n + i] / scale[c]) as f32) as f64);
    }
}

/// GEMM in every precision (plain, transposed, offsets and leading dimensions) and GEMV
/// against naive products; small integers make every product exact.
fn dense_kernels_match_naive_products<D: PscDevice>(dev: &D) {
    let (m, n, k) = (237, 45, 300);
    let a: Vec<f64> = (0..m * k).map(|i| ((i * 13) % 7) as f64 - 3.0).collect();
    let b: Vec<f64> = (0..k * n).map(|i| ((i * 5) % 11) as f64 - 5.0).collect();
    let naive = |i: usize, j: usize, transposed: bool| -> f64 {
        (0..k)
            .map(|l| if transposed { a[l + i * k] } else { a[i + l * m] } * b[l + j * k])
            .sum()
    };
    for p in Precision::STORED {
        for out in [p, p.compute()] {
            let (ad, bd) = (
                Data::from_f64(dev, &a, p).unwrap(),
                Data::from_f64(dev, &b, p).unwrap(),
            );
            let mut d = Data::zeros(dev, m * n, out).unwrap();
            dev.gemm(
                MatRef::col_major(&ad, 0, m, k, m),
                MatRef::col_major(&bd, 0, k, n, k),
                MatMut::col_major(&mut d, 0, m, n, m),
                GemmMath::Full,
            )
            .unwrap();
            let got = d.to_f64(dev).unwrap();
            for j in 0..n {
                for i in 0..m {
                    let want = naive(i, j, false);
                    // f16 results round sums beyond 2048 (f16 has 11 significant bits).
                    let tolerance = if out == Precision::F16 { 2.0 } else { 0.0 };
                    assert!(
                        (got[i + j * m] - want).abs() <= tolerance,
                        "{p} → {out} ({i}, {j}): {} vs {want}",
                        got[i + j * m]
                    );
                }
            }
            // Aᵀ with A stored k×m, into a sub-block of a larger C (offset, ld).
            let mut big = Data::zeros(dev, (m + 3) * (n + 1), out).unwrap();
            dev.gemm(
                MatRef::transposed(&ad, 0, m, k, k),
                MatRef::col_major(&bd, 0, k, n, k),
                MatMut::col_major(&mut big, m + 3 + 2, m, n, m + 3),
                GemmMath::Full,
            )
            .unwrap();
            let got = big.to_f64(dev).unwrap();
            let tolerance = if out == Precision::F16 { 2.0 } else { 0.0 };
            assert!((got[(m + 3) + 2 + 3 + 2 * (m + 3)] - naive(3, 2, true)).abs() <= tolerance);
            assert_eq!(got[0], 0.0, "outside the sub-block");
        }
        // y = A x for one right-hand side.
        let x: Vec<f64> = (0..k).map(|i| (i % 5) as f64 - 2.0).collect();
        let ad = Data::from_f64(dev, &a, p).unwrap();
        let xb = vector(dev, &x, p.compute());
        let mut yb = Block::vector(dev, m, p.compute()).unwrap();
        dev.gemv(MatRef::col_major(&ad, 0, m, k, m), xb.view(), yb.view_mut())
            .unwrap();
        let want: Vec<f64> = (0..m)
            .map(|i| (0..k).map(|l| a[i + l * m] * x[l]).sum())
            .collect();
        assert_eq!(yb.to_f64(dev).unwrap(), want, "{p} GEMV");
    }
}

/// y = A x for one right-hand side: GEMV on a sub-block (offset, leading dimension > rows)
/// and on wide and tall shapes, SYMV on symmetric matrices of sizes that split into several
/// parts with partial tiles, in every precision. Small integers, so every sum is exact and
/// the results equal the f64 products. Where the device's SYMV reads only the lower
/// triangle, the strict upper one holds NaN and must not show.
fn matrix_vector_products_match_f64_products<D: PscDevice>(dev: &D) {
    let entry = |i: usize, j: usize| ((i * 7 + j * 3 + i * j) % 7) as f64 - 3.0;
    for p in Precision::STORED {
        for (m, n, ld, offset) in [(225, 7200, 225, 0), (37, 5, 40, 3), (3001, 90, 3001, 0)] {
            let mut a = vec![0.0; offset + ld * n];
            for j in 0..n {
                for i in 0..m {
                    a[offset + i + j * ld] = entry(i, j);
                }
            }
            let x: Vec<f64> = (0..n).map(|j| (j % 5) as f64 - 2.0).collect();
            let ad = Data::from_f64(dev, &a, p).unwrap();
            let mut y = Block::vector(dev, m, p.compute()).unwrap();
            dev.gemv(
                MatRef::col_major(&ad, offset, m, n, ld),
                vector(dev, &x, p.compute()).view(),
                y.view_mut(),
            )
            .unwrap();
            let want: Vec<f64> = (0..m)
                .map(|i| (0..n).map(|j| entry(i, j) * x[j]).sum())
                .collect();
            assert_eq!(y.to_f64(dev).unwrap(), want, "{p} GEMV {m}×{n}");
        }
        // Odd sizes take the scalar path of the CUDA kernel, 1030 (f64) and 1504 (every
        // precision) its 16-byte loads; all but 1504 end with fewer columns than a warp takes.
        for n in [1, 5, 37, 1030, 1501, 1504, 2003] {
            let symmetric = |i: usize, j: usize| entry(i.max(j), i.min(j));
            let lower_only = dev.symv_reads_lower_triangle();
            let a: Vec<f64> = (0..n * n)
                .map(|k| {
                    let (i, j) = (k % n, k / n);
                    if lower_only && i < j {
                        f64::NAN
                    } else {
                        symmetric(i, j)
                    }
                })
                .collect();
            let x: Vec<f64> = (0..n).map(|j| (j % 5) as f64 - 2.0).collect();
            let ad = Data::from_f64(dev, &a, p).unwrap();
            let mut y = Block::vector(dev, n, p.compute()).unwrap();
            dev.symv(
                MatRef::col_major(&ad, 0, n, n, n),
                vector(dev, &x, p.compute()).view(),
                y.view_mut(),
            )
            .unwrap();
            let want: Vec<f64> = (0..n)
                .map(|i| (0..n).map(|j| symmetric(i, j) * x[j]).sum())
                .collect();
            assert_eq!(y.to_f64(dev).unwrap(), want, "{p} SYMV {n}×{n}");
        }
    }
}

/// On the CPU the grid transforms S and Sᵀ of a column alone (its rows split among threads)
/// are bitwise those of the same column inside a block (a column per task), and match the
/// sparse matrices.
#[test]
fn cpu_grid_transform_of_a_column_alone_equals_it_in_a_block() {
    use tensorfem::device::PscKernels;
    let dev = tensorfem::device::Cpu::new();
    for element in [Element::Q1, Element::P1] {
        let hb = HierarchicalBasis::new(&unit_square_refined(4, 6, element).unwrap()).unwrap();
        let (s, n) = (hb.matrix(), hb.len());
        let st = s.transpose();
        let k = 4;
        let x = values(k * n, 52);
        for p in [Precision::F64, Precision::F32] {
            let transform = hb.transform(&dev, p).unwrap();
            for (transpose, matrix) in [(false, &s), (true, &st)] {
                let run = |host: &[f64], columns: usize| {
                    let mut b =
                        Block::from_f64(&dev, host, n, columns, p, Layout::ColMajor).unwrap();
                    dev.hierarchical_transform(&transform, &mut b, transpose)
                        .unwrap();
                    b.to_f64(&dev).unwrap()
                };
                let block = run(&x, k);
                for c in 0..k {
                    let column = &x[c * n..(c + 1) * n];
                    let alone = run(column, 1);
                    assert_eq!(
                        alone,
                        block[c * n..(c + 1) * n],
                        "{element:?} {p} transpose {transpose}"
                    );
                    let mut want = vec![0.0; n];
                    sparse::spmv(
                        matrix,
                        &Data::from_f64(&dev, column, p)
                            .unwrap()
                            .to_f64(&dev)
                            .unwrap(),
                        &mut want,
                    );
                    let tolerance = if p == Precision::F64 { 1e-13 } else { 1e-5 };
                    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                    assert!(
                        max_diff(&alone, &want) < tolerance * scale,
                        "{element:?} {p} transpose {transpose}: {} (scale {scale})",
                        max_diff(&alone, &want)
                    );
                }
            }
        }
    }
}

/// On the CPU the C/E/I gather and scatter of a column alone (its entries split among
/// threads) are bitwise those of the same column inside a block (a column per task); classes
/// that do not partition the unknowns are refused.
#[test]
fn cpu_class_passes_of_a_column_alone_equal_it_in_a_block() {
    use tensorfem::device::PscKernels;
    let dev = tensorfem::device::Cpu::new();
    let n = 40_000;
    // A shuffled partition: C every 997th unknown, then E and I alternating in blocks.
    let order: Vec<u32> = (0..n as u64)
        .map(|i| ((i * 7919) % n as u64) as u32)
        .collect();
    let (mut c, mut e, mut i) = (Vec::new(), Vec::new(), Vec::new());
    for (k, &d) in order.iter().enumerate() {
        match k {
            k if k % 997 == 0 => c.push(d),
            k if (k / 300) % 2 == 0 => e.push(d),
            _ => i.push(d),
        }
    }
    let nc = c.len();
    let l_c_inv: Vec<f64> = (0..nc * nc)
        .map(|k| {
            if k % nc >= k / nc {
                1.0 + (k % 7) as f64 / 8.0
            } else {
                0.0
            }
        })
        .collect();
    let (scale_e, scale_i) = (values(e.len(), 80), values(i.len(), 81));
    for p in [Precision::F64, Precision::F32] {
        let classes = Classes::upload(&dev, &c, &e, &i, &l_c_inv, &scale_e, &scale_i, p).unwrap();
        let block = |v: &[f64], rows: usize| {
            Block::from_f64(&dev, v, rows, v.len() / rows, p, Layout::ColMajor).unwrap()
        };
        let passes = |nodal: &[f64]| {
            let k = nodal.len() / n;
            let (mut bc, mut be, mut bi) = (
                block(&vec![0.0; nc * k], nc),
                block(&vec![0.0; e.len() * k], e.len()),
                block(&vec![0.0; i.len() * k], i.len()),
            );
            let mut scale = Data::zeros(&dev, k, p).unwrap();
            dev.psc_gather(
                &classes,
                &block(nodal, n),
                &mut bc,
                &mut be,
                &mut bi,
                &mut scale,
            )
            .unwrap();
            let mut back = block(&vec![0.0; n * k], n);
            dev.psc_scatter(&classes, &bc, &be, &bi, &scale, &mut back)
                .unwrap();
            let parts = [&bc, &be, &bi].map(|b| b.to_f64(&dev).unwrap());
            (
                parts,
                scale.to_f64(&dev).unwrap(),
                back.to_f64(&dev).unwrap(),
            )
        };
        let k = 3;
        let x = values(n * k, 82);
        let (parts, scales, back) = passes(&x);
        for col in 0..k {
            let (alone, scale, alone_back) = passes(&x[col * n..(col + 1) * n]);
            for (a, (whole, rows)) in alone.iter().zip(parts.iter().zip([nc, e.len(), i.len()])) {
                assert_eq!(a[..], whole[col * rows..(col + 1) * rows], "{p} gather");
            }
            assert_eq!(scale[0], scales[col], "{p} scale");
            assert_eq!(alone_back[..], back[col * n..(col + 1) * n], "{p} scatter");
        }
        if p == Precision::F64 {
            // The L_C⁻¹ products sum in the documented order, bitwise: b_C[k] over l = 0 … k
            // (then times 1/scale), and nodal[C_l] over k = l … |C| − 1 (then times scale).
            let l = |k: usize, j: usize| l_c_inv[k + j * nc];
            for col in 0..k {
                let v = &x[col * n..(col + 1) * n];
                let inv = 1.0 / scales[col];
                let bc = &parts[0][col * nc..(col + 1) * nc];
                for kk in 0..nc {
                    let sum = (0..=kk).fold(0.0, |s, j| s + l(kk, j) * v[c[j] as usize]);
                    assert_eq!(bc[kk].to_bits(), (sum * inv).to_bits(), "b_C[{kk}]");
                }
                for (j, &d) in c.iter().enumerate() {
                    let sum = (j..nc).fold(0.0, |s, kk| s + l(kk, j) * bc[kk]);
                    let got = back[col * n + d as usize];
                    assert_eq!(got.to_bits(), (sum * scales[col]).to_bits(), "C_{j}");
                }
            }
        }
    }
    // An unknown in two classes, one out of range.
    for (c, e) in [(vec![0u32], vec![0u32, 1]), (vec![0u32], vec![1u32, 5])] {
        let bad = Classes::upload(&dev, &c, &e, &[], &[1.0], &[1.0; 2], &[], Precision::F64);
        assert!(bad.is_err(), "{c:?} {e:?}");
    }
}

/// On the CPU a matrix-vector product gives bitwise the same result at every SIMD level
/// and with any number of threads (the matrix's parts depend on its shape alone).
#[test]
fn cpu_matrix_vector_products_are_the_same_at_every_simd_level_and_thread_count() {
    use tensorfem::device::cpu::simd::{self, SimdLevel};
    use tensorfem::device::DenseKernels;
    let dev = tensorfem::device::Cpu::new();
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let before = simd::level();
    for p in Precision::STORED {
        for n in [37, 2003] {
            let a = values(n * n, 70);
            let symmetric: Vec<f64> = (0..n * n)
                .map(|k| {
                    let (i, j) = (k % n, k / n);
                    a[i.max(j) + i.min(j) * n]
                })
                .collect();
            let x = values(n, 71);
            let (ad, sd) = (
                Data::from_f64(&dev, &a, p).unwrap(),
                Data::from_f64(&dev, &symmetric, p).unwrap(),
            );
            let xb = vector(&dev, &x, p.compute());
            let products = |at: SimdLevel| {
                simd::set_level(at);
                let mut y = Block::vector(&dev, n, p.compute()).unwrap();
                let mut z = Block::vector(&dev, n, p.compute()).unwrap();
                dev.gemv(MatRef::col_major(&ad, 0, n, n, n), xb.view(), y.view_mut())
                    .unwrap();
                dev.symv(MatRef::col_major(&sd, 0, n, n, n), xb.view(), z.view_mut())
                    .unwrap();
                (y.to_f64(&dev).unwrap(), z.to_f64(&dev).unwrap())
            };
            let scalar = products(SimdLevel::Scalar);
            // Within rounding of the f64 products.
            let tolerance = match p {
                Precision::F64 => 1e-12,
                Precision::F32 | Precision::Tf32 => 1e-4,
                Precision::F16 => 1e-4,
            };
            let stored = |v: &[f64]| Data::from_f64(&dev, v, p).unwrap().to_f64(&dev).unwrap();
            let (sa, ss) = (stored(&a), stored(&symmetric));
            for (got, m) in [(&scalar.0, &sa), (&scalar.1, &ss)] {
                let want: Vec<f64> = (0..n)
                    .map(|i| (0..n).map(|j| m[i + j * n] * x[j]).sum())
                    .collect();
                assert!(
                    max_diff(got, &want) <= tolerance * (n as f64).sqrt(),
                    "{p} {n}"
                );
            }
            for level in SimdLevel::ALL.into_iter().filter(|l| l.is_supported()) {
                assert_eq!(
                    products(level),
                    scalar,
                    "{} vs scalar, {p}, n = {n}",
                    level.name()
                );
                let alone = one_thread.install(|| products(level));
                assert_eq!(alone, scalar, "one thread, {}, {p}, n = {n}", level.name());
            }
        }
    }
    simd::set_level(before);
}

/// GEMMs in TF32 math multiply f32 operands rounded to TF32 (to nearest, ties away) with
/// f32 sums, plain and batched: they equal the f64 products of the rounded operands to f32
/// accuracy and differ from the exact products by about TF32's unit roundoff. Other
/// storage precisions are refused.
fn tf32_gemms_multiply_operands_rounded_to_tf32<D: PscDevice>(dev: &D) {
    let (m, n, k, count) = (70, 33, 257, 3);
    // Values with more bits than TF32 holds (f32-exact, so f32 storage is lossless).
    let value = |i: usize, salt: usize| {
        let x = ((i * 7919 + salt * 104_729) % 65_521) as f64 / 65_521.0;
        ((1.0 + x) * if i.is_multiple_of(3) { -1.0 } else { 1.0 }) as f32 as f64
    };
    let a: Vec<f64> = (0..m * k).map(|i| value(i, 1)).collect();
    let b: Vec<f64> = (0..k * n * count).map(|i| value(i, 2)).collect();
    let tf32 = |v: f64| round_to_tf32(v as f32) as f64;
    let (ad, bd) = (
        Data::from_f64(dev, &a, Precision::F32).unwrap(),
        Data::from_f64(dev, &b, Precision::F32).unwrap(),
    );
    let mut c = Data::zeros(dev, m * n * count, Precision::F32).unwrap();
    dev.gemm(
        MatRef::col_major(&ad, 0, m, k, m),
        MatRef::col_major(&bd, 0, k, n, k),
        MatMut::col_major(&mut c, 0, m, n, m),
        GemmMath::Tf32,
    )
    .unwrap();
    let single = c.to_f64(dev).unwrap();
    dev.gemm_batched(
        MatRef::col_major(&ad, 0, m, k, m),
        MatRef::col_major(&bd, 0, k, n, k),
        MatMut::col_major(&mut c, 0, m, n, m),
        GemmBatch {
            count,
            stride_a: 0,
            stride_b: k * n,
            stride_c: m * n,
        },
        GemmMath::Tf32,
    )
    .unwrap();
    let batched = c.to_f64(dev).unwrap();
    dev.gemm(
        MatRef::col_major(&ad, 0, m, k, m),
        MatRef::col_major(&bd, 0, k, n, k),
        MatMut::col_major(&mut c, 0, m, n, m),
        GemmMath::Full,
    )
    .unwrap();
    let full = c.to_f64(dev).unwrap();
    // Largest |error| / Σ|a||b| of the TF32 and of the f32 products against the exact ones.
    let (mut tf32_error, mut f32_error): (f64, f64) = (0.0, 0.0);
    for q in 0..count {
        for j in 0..n {
            for i in 0..m {
                let (mut rounded, mut exact, mut magnitude) = (0.0, 0.0, 0.0);
                for l in 0..k {
                    let (x, y) = (a[i + l * m], b[q * k * n + l + j * k]);
                    rounded += tf32(x) * tf32(y);
                    exact += x * y;
                    magnitude += (x * y).abs();
                }
                // f32 sums of k products: |error| ≤ k·u_f32·Σ|a||b| (a loose bound).
                let f32_sums = k as f64 * Precision::F32.unit_roundoff() * magnitude;
                let got = batched[i + j * m + q * m * n];
                assert!(
                    (got - rounded).abs() <= f32_sums,
                    "batch {q} ({i}, {j}): {got} vs {rounded} of the rounded operands"
                );
                // Each operand rounds by at most u_tf32: |rounded − exact| ≤ 2u·Σ|a||b|.
                let tf32_bound = 2.1 * Precision::Tf32.unit_roundoff() * magnitude;
                assert!((got - exact).abs() <= tf32_bound + f32_sums);
                tf32_error = tf32_error.max((got - exact).abs() / magnitude);
                if q == 0 {
                    assert_eq!(got, single[i + j * m], "batched vs single ({i}, {j})");
                    f32_error = f32_error.max((full[i + j * m] - exact).abs() / magnitude);
                }
            }
        }
    }
    // The operands really were rounded: errors of TF32's size, far beyond f32's.
    assert!(
        tf32_error > 1e-5 && tf32_error > 30.0 * f32_error,
        "TF32 products err by {tf32_error:e}, f32 ones by {f32_error:e}"
    );
    for p in [Precision::F16, Precision::F64] {
        let (ad, bd) = (
            Data::from_f64(dev, &a[..4], p).unwrap(),
            Data::from_f64(dev, &b[..4], p).unwrap(),
        );
        let mut c = Data::zeros(dev, 4, p.compute()).unwrap();
        let refused = dev.gemm(
            MatRef::col_major(&ad, 0, 2, 2, 2),
            MatRef::col_major(&bd, 0, 2, 2, 2),
            MatMut::col_major(&mut c, 0, 2, 2, 2),
            GemmMath::Tf32,
        );
        let message = refused.expect_err("TF32 on other storage").to_string();
        assert!(
            message.contains("TF32") && message.contains(p.name()),
            "{message}"
        );
    }
}

/// The fused Gram-Schmidt step: h = Vᵀw, w ← w − V h, the norms before and after.
/// A batched GEMM with a shared A (stride 0) and B, C blocks at a stride with gaps between
/// them equals the products one by one; entries between the blocks stay untouched.
fn batched_gemm_equals_separate_products<D: PscDevice>(dev: &D) {
    let (m, k, n, count, stride) = (6, 6, 4, 5, 30);
    let a: Vec<f64> = (0..m * k).map(|i| ((i * 7) % 9) as f64 - 4.0).collect();
    let b: Vec<f64> = (0..stride * count)
        .map(|i| ((i * 3) % 13) as f64 - 6.0)
        .collect();
    for p in Precision::STORED {
        let (ad, bd) = (
            Data::from_f64(dev, &a, p).unwrap(),
            Data::from_f64(dev, &b, p).unwrap(),
        );
        let mut c = Data::from_f64(dev, &vec![7.0; stride * count], p.compute()).unwrap();
        dev.gemm_batched(
            MatRef::col_major(&ad, 0, m, k, m),
            MatRef::col_major(&bd, 2, k, n, k),
            MatMut::col_major(&mut c, 2, m, n, m),
            GemmBatch {
                count,
                stride_a: 0,
                stride_b: stride,
                stride_c: stride,
            },
            GemmMath::Full,
        )
        .unwrap();
        let got = c.to_f64(dev).unwrap();
        for q in 0..count {
            for j in 0..n {
                for i in 0..m {
                    let want: f64 = (0..k)
                        .map(|l| a[i + l * m] * b[q * stride + 2 + l + j * k])
                        .sum();
                    assert_eq!(
                        got[q * stride + 2 + i + j * m],
                        want,
                        "{p} product {q} ({i}, {j})"
                    );
                }
            }
            assert_eq!(got[q * stride], 7.0, "{p}: before product {q}");
            assert_eq!(got[q * stride + 2 + m * n], 7.0, "{p}: after product {q}");
        }
    }
}

/// C = A·B for a symmetric A equals the naive product, on shapes the CPU computes as
/// Cᵀ = Bᵀ·A (from 16 columns on) and on narrower ones it leaves to the GEMM: every storage
/// precision, C at an offset with a leading dimension larger than its rows (the entries
/// between its columns stay untouched). Small integers: every product and sum is exact.
fn symmetric_products_equal_naive_products<D: PscDevice>(dev: &D) {
    for (m, n) in [(300, 64), (300, 16), (213, 37), (300, 15), (64, 3)] {
        let a: Vec<f64> = (0..m * m)
            .map(|e| {
                let (i, j) = (e % m, e / m);
                ((i * j + i + j) % 5) as f64 - 2.0
            })
            .collect();
        let b: Vec<f64> = (0..m * n)
            .map(|e| ((e * 7 + e / 3) % 7) as f64 - 3.0)
            .collect();
        let (offset, ld) = (3, m + 5);
        for p in Precision::STORED {
            let (ad, bd) = (
                Data::from_f64(dev, &a, p).unwrap(),
                Data::from_f64(dev, &b, p).unwrap(),
            );
            let mut c = Data::from_f64(dev, &vec![7.0; offset + ld * n], p.compute()).unwrap();
            dev.symm(
                MatRef::col_major(&ad, 0, m, m, m),
                MatRef::col_major(&bd, 0, m, n, m),
                MatMut::col_major(&mut c, offset, m, n, ld),
                GemmMath::Full,
            )
            .unwrap();
            let got = c.to_f64(dev).unwrap();
            for j in 0..n {
                for i in 0..m {
                    let want: f64 = (0..m).map(|l| a[i + l * m] * b[l + j * m]).sum();
                    assert_eq!(got[offset + i + j * ld], want, "{p} {m}×{n}: ({i}, {j})");
                }
                for gap in m..ld {
                    assert_eq!(
                        got[offset + gap + j * ld],
                        7.0,
                        "{p} {m}×{n}: gap of column {j}"
                    );
                }
            }
        }
    }
}

fn orthogonalize_matches_naive_loops<D: PscDevice>(dev: &D) {
    let n = 50_000;
    let basis: Vec<Vec<f64>> = (0..4).map(|s| values(n, 10 + s)).collect();
    let w0 = values(n, 20);
    let blocks: Vec<Block<D>> = basis
        .iter()
        .map(|v| vector(dev, v, Precision::F64))
        .collect();
    let mut w = vector(dev, &w0, Precision::F64);
    let mut h = vec![1.0; 4];
    let (before, after) = dev
        .orthogonalize(&blocks, &mut w, &mut h, &mut Scratch::new(dev).unwrap())
        .unwrap();
    let coefficients: Vec<f64> = basis
        .iter()
        .map(|v| v.iter().zip(&w0).map(|(a, b)| a * b).sum())
        .collect();
    let mut want = w0.clone();
    for (v, c) in basis.iter().zip(&coefficients) {
        want.iter_mut().zip(v).for_each(|(w, v)| *w -= c * v);
    }
    for (h, c) in h.iter().zip(&coefficients) {
        assert!(
            (h - (1.0 + c)).abs() < 1e-9,
            "h accumulates: {h} vs 1 + {c}"
        );
    }
    let diff = max_diff(&w.to_f64(dev).unwrap(), &want);
    assert!(diff < 1e-10, "{diff} {coefficients:?}");
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((before - norm(&w0)).abs() < 1e-9 * before);
    assert!((after - norm(&want)).abs() < 1e-9 * after);
}

/// A batched GEMM large enough for several tasks (the CPU gives each task its block of
/// every product of the batch) equals the products one by one bit for bit, in every
/// storage precision and TF32 math, with a shared A and with one A per product, on any
/// number of threads; a batch whose C blocks overlap runs one product after the other.
#[test]
fn cpu_batched_gemm_in_tasks_equals_separate_products() {
    use tensorfem::device::DenseKernels;
    let dev = tensorfem::device::Cpu::new();
    let (m, k, n, count) = (203, 150, 40, 3);
    let value =
        |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 65_521) as f64 / 65_521.0 - 0.5;
    let a: Vec<f64> = (0..m * k * count).map(|i| value(i, 1)).collect();
    let b: Vec<f64> = (0..k * n * count).map(|i| value(i, 2)).collect();
    let maths = [
        (Precision::F16, GemmMath::Full),
        (Precision::F32, GemmMath::Full),
        (Precision::F32, GemmMath::Tf32),
        (Precision::F64, GemmMath::Full),
    ];
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    for (p, math) in maths {
        let (ad, bd) = (
            Data::from_f64(&dev, &a, p).unwrap(),
            Data::from_f64(&dev, &b, p).unwrap(),
        );
        for stride_a in [0, m * k] {
            let separate = {
                let mut c = Data::zeros(&dev, m * n * count, p.compute()).unwrap();
                for q in 0..count {
                    dev.gemm(
                        MatRef::col_major(&ad, q * stride_a, m, k, m),
                        MatRef::col_major(&bd, q * k * n, k, n, k),
                        MatMut::col_major(&mut c, q * m * n, m, n, m),
                        math,
                    )
                    .unwrap();
                }
                c.to_f64(&dev).unwrap()
            };
            let batched = |stride_c: usize| {
                let mut c = Data::zeros(&dev, m * n * count, p.compute()).unwrap();
                dev.gemm_batched(
                    MatRef::col_major(&ad, 0, m, k, m),
                    MatRef::col_major(&bd, 0, k, n, k),
                    MatMut::col_major(&mut c, 0, m, n, m),
                    GemmBatch {
                        count,
                        stride_a,
                        stride_b: k * n,
                        stride_c,
                    },
                    math,
                )
                .unwrap();
                c.to_f64(&dev).unwrap()
            };
            for pool in [&two, &one] {
                assert_eq!(pool.install(|| batched(m * n)), separate, "{p} {math:?}");
            }
            // C blocks one column apart overlap: each product overwrites the last one's
            // columns but its first, as one after the other would.
            let overlapping = batched(m);
            let last = m * (count - 1);
            assert_eq!(
                overlapping[last..last + m * n],
                separate[m * n * (count - 1)..],
                "{p} {math:?}"
            );
            for q in 0..count - 1 {
                assert_eq!(
                    overlapping[q * m..(q + 1) * m],
                    separate[q * m * n..q * m * n + m],
                    "{p} {math:?}: product {q}'s first column"
                );
            }
        }
    }
}

/// Gram-Schmidt twice if needed (FGMRES's) equals one step, the DGKS test, and a second
/// step, bit for bit, whether the second runs (w nearly in the span) or not. The CPU fuses
/// the two steps (other devices run them in turn): at every SIMD level and on one thread.
#[test]
fn cpu_orthogonalize_twice_equals_two_steps() {
    use tensorfem::device::cpu::simd::{self, SimdLevel};
    use tensorfem::device::DenseKernels;
    let dev = &tensorfem::device::Cpu::new();
    let n = 50_000;
    // An orthonormal basis, as FGMRES's (modified Gram-Schmidt on the host).
    let mut basis: Vec<Vec<f64>> = Vec::new();
    for s in 0..5 {
        let mut v = values(n, 40 + s);
        for u in &basis {
            let c: f64 = u.iter().zip(&v).map(|(a, b)| a * b).sum();
            v.iter_mut().zip(u).for_each(|(x, u)| *x -= c * u);
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        basis.push(v);
    }
    let blocks: Vec<Block<_>> = basis
        .iter()
        .map(|v| vector(dev, v, Precision::F64))
        .collect();
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    // w far from the span (one step), and w = Σ v + 1e-3 noise (two steps).
    let far = values(n, 50);
    let near: Vec<f64> = (0..n)
        .map(|i| basis.iter().map(|v| v[i]).sum::<f64>() + 1e-3 * far[i])
        .collect();
    let before = simd::level();
    for (w0, second) in [(&far, false), (&near, true)] {
        let mut scratch = Scratch::new(dev).unwrap();
        let mut w = vector(dev, w0, Precision::F64);
        let mut h = vec![0.5; 5];
        let (first_before, first_after) = dev
            .orthogonalize(&blocks, &mut w, &mut h, &mut scratch)
            .unwrap();
        assert_eq!(
            first_after < first_before * std::f64::consts::FRAC_1_SQRT_2,
            second
        );
        let norm = if second {
            dev.orthogonalize(&blocks, &mut w, &mut h, &mut scratch)
                .unwrap()
                .1
        } else {
            first_after
        };
        let want = (norm, h, w.to_f64(dev).unwrap());
        let twice = || {
            let mut w = vector(dev, w0, Precision::F64);
            let mut h = vec![0.5; 5];
            let norm = dev
                .orthogonalize_twice_if_needed(
                    &blocks,
                    &mut w,
                    &mut h,
                    &mut Scratch::new(dev).unwrap(),
                )
                .unwrap();
            (norm, h, w.to_f64(dev).unwrap())
        };
        for level in SimdLevel::ALL.into_iter().filter(|l| l.is_supported()) {
            simd::set_level(level);
            assert!(twice() == want, "{}, second step {second}", level.name());
            assert!(
                one_thread.install(twice) == want,
                "one thread, {}",
                level.name()
            );
        }
    }
    simd::set_level(before);
}

/// CSR products on column-major blocks against the host products; the residual and the
/// fused refinement update against loops over them.
fn csr_kernels_match_host_products<D: PscDevice>(dev: &D) {
    let n = 4_500;
    let a = test_matrix(n);
    for k in [1, 3, 8, 11] {
        let x = values(n * k, k);
        let mut want = vec![0.0; n * k];
        for c in 0..k {
            sparse::spmv(&a, &x[c * n..(c + 1) * n], &mut want[c * n..(c + 1) * n]);
        }
        for p in Precision::STORED {
            let ap: Csr<f64> = match p {
                Precision::F16 => a.convert::<f16>().unwrap().to_f64(),
                Precision::F32 | Precision::Tf32 => a.convert::<f32>().unwrap().to_f64(),
                Precision::F64 => a.clone(),
            };
            let device_a = match p {
                Precision::F16 => CsrMatrix::upload(dev, &a.convert::<f16>().unwrap()),
                Precision::F32 | Precision::Tf32 => {
                    CsrMatrix::upload(dev, &a.convert::<f32>().unwrap())
                }
                Precision::F64 => CsrMatrix::upload(dev, &a),
            }
            .unwrap();
            let xb = Block::from_f64(dev, &x, n, k, p.compute(), Layout::ColMajor).unwrap();
            let mut yb = Block::zeros(dev, n, k, p.compute(), Layout::ColMajor).unwrap();
            dev.csr_spmm(&device_a, &xb, &mut yb).unwrap();
            let mut exact = vec![0.0; n * k];
            for c in 0..k {
                let xc: Vec<f64> = xb.to_f64(dev).unwrap()[c * n..(c + 1) * n].to_vec();
                sparse::spmv(&ap, &xc, &mut exact[c * n..(c + 1) * n]);
            }
            let tolerance = if p == Precision::F64 { 1e-13 } else { 1e-5 };
            assert!(
                max_diff(&yb.to_f64(dev).unwrap(), &exact) < tolerance,
                "{p} k = {k}"
            );
            // y = b − A x in one pass, into the compute precision and (f16) rounded once
            // into the storage precision: b − (the product) rounded to y's precision.
            let bb = Block::from_f64(
                dev,
                &values(n * k, 40 + k),
                n,
                k,
                p.compute(),
                Layout::ColMajor,
            )
            .unwrap();
            let b64 = bb.to_f64(dev).unwrap();
            let outputs = match p.storage() {
                Precision::F16 => vec![p.compute(), Precision::F16],
                _ => vec![p.compute()],
            };
            for out in outputs {
                let mut diff = Block::zeros(dev, n, k, out, Layout::ColMajor).unwrap();
                dev.csr_subtract(&device_a, &xb, &bb, &mut diff).unwrap();
                let want: Vec<f64> = b64.iter().zip(&exact).map(|(b, ax)| b - ax).collect();
                let got = diff.to_f64(dev).unwrap();
                // f16: half an ulp of the rounding (2⁻¹¹ relative) on values up to ~10.
                let tolerance = if out == Precision::F16 {
                    1e-2
                } else {
                    tolerance
                };
                assert!(max_diff(&got, &want) < tolerance, "{p} into {out}, k = {k}");
                if out == Precision::F16 {
                    let rounded: Vec<f64> =
                        got.iter().map(|&v| f16::from_f64(v).to_f64()).collect();
                    assert_eq!(rounded, got, "stored as f16 values");
                }
            }
            // Other precisions are refused by name.
            let mut wrong = Block::zeros(dev, n, k, Precision::F64, Layout::ColMajor).unwrap();
            if p.compute() != Precision::F64 {
                let err = dev
                    .csr_subtract(&device_a, &xb, &bb, &mut wrong)
                    .unwrap_err();
                assert!(err.to_string().contains("csr_subtract"), "{err}");
            }
        }
        let _ = want;
    }
    // r = b − A x and the update x += α c, r −= α A c, with their statistics.
    let k = 3;
    let (b, x, c) = (values(n * k, 30), values(n * k, 31), values(n * k, 32));
    let device_a = CsrMatrix::upload(dev, &a).unwrap();
    let block =
        |v: &[f64]| Block::from_f64(dev, v, n, k, Precision::F64, Layout::ColMajor).unwrap();
    let (bb, mut xb, cb) = (block(&b), block(&x), block(&c));
    let mut rb = block(&vec![0.0; n * k]);
    let mut stats = Stats::new(dev, k).unwrap();
    dev.csr_residual(&device_a, &bb, &xb, &mut rb, &mut stats)
        .unwrap();
    let mut r = vec![0.0; n * k];
    for j in 0..k {
        let span = j * n..(j + 1) * n;
        sparse::residual(&a, &b[span.clone()], &x[span.clone()], &mut r[span]);
    }
    assert!(max_diff(&rb.to_f64(dev).unwrap(), &r) < 1e-13);
    let alpha = [0.5, 2.0, 0.0];
    dev.csr_refine_update(&device_a, &cb, &alpha, &mut xb, &mut rb, &mut stats)
        .unwrap();
    let s = stats.read(dev).unwrap();
    let (xs, rs) = (xb.to_f64(dev).unwrap(), rb.to_f64(dev).unwrap());
    for j in 0..k {
        let span = j * n..(j + 1) * n;
        let mut ac = vec![0.0; n];
        sparse::spmv(&a, &c[span.clone()], &mut ac);
        let mut sumsq = 0.0;
        for (i, g) in span.clone().enumerate() {
            assert!((xs[g] - (x[g] + alpha[j] * c[g])).abs() < 1e-14);
            let want = r[g] - alpha[j] * ac[i];
            assert!((rs[g] - want).abs() < 1e-13);
            sumsq += want * want;
        }
        assert!((s.sumsq.unwrap()[j] - sumsq).abs() < 1e-10 * sumsq);
        let cmax = c[span].iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert_eq!(s.max_abs[j], cmax, "the maxima are those of the correction");
    }
}

/// ELLPACK sweeps (apply, residual, Jacobi, Chebyshev with the previous iterate read from
/// the output or zero, the block smoother's scaled product and correction, Jacobi from
/// zero) and the refinement update on node-major blocks, in
/// every precision, against the host CSR products.
fn ell_kernels_match_host_products<D: MultigridDevice>(dev: &D) {
    let a = assemble_level(2, 64).unwrap(); // 63² unknowns, the Q1 stencil
    let n = sparse::SparseRows::nrows(&a);
    let k = 3;
    let ell = Ell::from_csr_diagonal_first(&a, dev.ell_layout()).unwrap();
    let diag = a.diagonal();
    let (x, b) = (values(n * k, 40), values(n * k, 41));
    let node = |v: &[f64], p| Block::from_f64(dev, v, n, k, p, Layout::NodeMajor).unwrap();
    let host = |v: &[f64], c: usize| -> Vec<f64> { (0..n).map(|i| v[i * k + c]).collect() };
    for p in Precision::STORED {
        let matrix = EllMatrix::upload(dev, &ell, p).unwrap();
        let (xb, bb) = (node(&x, p), node(&b, p));
        let (xr, br) = (xb.to_f64(dev).unwrap(), bb.to_f64(dev).unwrap());
        let mut out = node(&vec![0.0; n * k], p);
        let mut stats = Stats::new(dev, k).unwrap();
        let tolerance = match p {
            Precision::F16 => 4e-3,
            Precision::F32 | Precision::Tf32 => 2e-6,
            Precision::F64 => 1e-13,
        };
        for op in sweep_ops(0.7) {
            // Apply reads no b (and the matrix has more than one chunk of rows).
            let b = op.reads_b().then_some(&bb);
            // The previous iterate a Chebyshev step reads: the last op's output.
            let previous = out.to_f64(dev).unwrap();
            dev.ell_sweep(&matrix, op, &xb, b, &mut out, &mut stats)
                .unwrap();
            let got = out.to_f64(dev).unwrap();
            for c in 0..k {
                let (xc, bc) = (host(&xr, c), host(&br, c));
                let mut ax = vec![0.0; n];
                sparse::spmv(&a, &xc, &mut ax);
                for i in 0..n {
                    // The iterate before: the last op's output, or zero.
                    let before = |zero: bool| if zero { 0.0 } else { previous[i * k + c] };
                    let want = match op {
                        RowOp::Apply => ax[i],
                        RowOp::Residual => bc[i] - ax[i],
                        RowOp::Jacobi { omega } => xc[i] + omega / diag[i] * (bc[i] - ax[i]),
                        RowOp::Chebyshev {
                            omega,
                            momentum,
                            previous_zero,
                        } => {
                            let step = omega / diag[i] * (bc[i] - ax[i]);
                            xc[i] + momentum * (xc[i] - before(previous_zero)) + step
                        }
                        RowOp::Scaled { omega } => omega * ax[i],
                        RowOp::Correction {
                            omega,
                            momentum,
                            previous_zero,
                        } => bc[i] + momentum * (bc[i] - before(previous_zero)) + omega * ax[i],
                    };
                    assert!(
                        (got[i * k + c] - want).abs() <= tolerance * want.abs().max(1.0),
                        "{p} {op:?} row {i} column {c}: {} vs {want}",
                        got[i * k + c]
                    );
                }
            }
        }
        dev.ell_jacobi_from_zero(&matrix, 0.5, &bb, &mut out, &mut stats)
            .unwrap();
        let got = out.to_f64(dev).unwrap();
        for i in 0..n {
            for c in 0..k {
                let want = 0.5 / diag[i] * br[i * k + c];
                assert!((got[i * k + c] - want).abs() <= tolerance * want.abs().max(1.0));
            }
        }
    }
    let f64_matrix = EllMatrix::upload(dev, &ell, Precision::F64).unwrap();
    let correction = values(n * k, 42);
    let alpha = [1.0, 0.25, 3.0];
    let (mut ub, mut rb) = (node(&x, Precision::F64), node(&b, Precision::F64));
    let cb = node(&correction, Precision::F32);
    let mut stats = Stats::new(dev, k).unwrap();
    dev.ell_refine_update(&f64_matrix, &cb, &alpha, &mut ub, &mut rb, &mut stats)
        .unwrap();
    let cr = cb.to_f64(dev).unwrap();
    let (u, r) = (ub.to_f64(dev).unwrap(), rb.to_f64(dev).unwrap());
    for c in 0..k {
        let mut ac = vec![0.0; n];
        sparse::spmv(&a, &host(&cr, c), &mut ac);
        for i in 0..n {
            let g = i * k + c;
            assert!((u[g] - (x[g] + alpha[c] * cr[g])).abs() < 1e-14);
            assert!((r[g] - (b[g] - alpha[c] * ac[i])).abs() < 1e-12);
        }
    }
}

/// The row operations whose columns are compared alone and in blocks: each reads only
/// its own column of x, b and the output.
fn column_ops() -> [RowOp; 5] {
    [
        RowOp::Apply,
        RowOp::Residual,
        RowOp::Jacobi { omega: 0.9 },
        RowOp::Scaled { omega: 0.9 },
        RowOp::Correction {
            omega: 0.9,
            momentum: 0.3,
            previous_zero: false,
        },
    ]
}

/// Every row operation of an ELL sweep, with damping ω: apply, residual, Jacobi, the
/// Chebyshev step with the previous iterate read from the output and zero, and the block
/// smoother's scaled product and correction (previous iterate read and zero).
fn sweep_ops(omega: f64) -> [RowOp; 8] {
    let chebyshev = |previous_zero| RowOp::Chebyshev {
        omega,
        momentum: 0.4,
        previous_zero,
    };
    let correction = |previous_zero| RowOp::Correction {
        omega,
        momentum: 0.3,
        previous_zero,
    };
    [
        RowOp::Apply,
        RowOp::Residual,
        RowOp::Jacobi { omega },
        chebyshev(false),
        chebyshev(true),
        RowOp::Scaled { omega },
        correction(false),
        correction(true),
    ]
}

/// The CPU's ELL sweeps give bitwise the same block at every vector-instruction level this
/// CPU has (scalar, AVX2, AVX-512), one and many columns (whole and partial tiles), every
/// precision and row operation, for rows of 9 and 27 slots (compiled apart) and of another
/// width, with and without Σ v².
#[test]
fn ell_sweeps_are_the_same_at_every_simd_level() {
    use tensorfem::device::cpu::simd::{self, SimdLevel};
    let dev = tensorfem::device::Cpu::new();
    let before = simd::level();
    let mut levels = Vec::new();
    for level in SimdLevel::ALL {
        if !level.is_supported() {
            continue;
        }
        levels.push(level.name());
        // Two chunks and a partial last slice; a 3D stencil; a generic width.
        for a in [
            assemble_level(2, 64).unwrap(),
            assemble_level(3, 8).unwrap(),
            test_matrix_with_diagonal(700),
        ] {
            for norms in [true, false] {
                sweeps_at_simd_level(dev, &a, level, norms);
            }
        }
    }
    simd::set_level(before);
    println!("SIMD levels checked: {levels:?}");
    assert_eq!(levels[0], "scalar");
}

/// [`ell_sweeps_are_the_same_at_every_simd_level`] for one matrix and level.
fn sweeps_at_simd_level(
    dev: tensorfem::device::Cpu,
    a: &Csr<f64>,
    level: tensorfem::device::cpu::simd::SimdLevel,
    norms: bool,
) {
    use tensorfem::device::cpu::simd::{self, SimdLevel};
    use tensorfem::device::MultigridKernels;
    let n = sparse::SparseRows::nrows(a);
    let ell = Ell::from_csr_diagonal_first(a, dev.ell_layout()).unwrap();
    let new_stats = |k| {
        if norms {
            Stats::new(&dev, k).unwrap()
        } else {
            Stats::without_norms(&dev, k).unwrap()
        }
    };
    for k in [1, 3, 8, 13, 40] {
        let (x, b) = (values(n * k, 60), values(n * k, 61));
        for p in Precision::STORED {
            // As the solver stores its levels: rounding-level entries dropped (3D).
            let stored = tensorfem::mg::without_roundoff(ell.clone(), p);
            let matrix = EllMatrix::upload(&dev, &stored, p).unwrap();
            let block = |v: &[f64]| Block::from_f64(&dev, v, n, k, p, Layout::NodeMajor).unwrap();
            let bb = block(&b);
            let previous = values(n * k, 62);
            for op in sweep_ops(0.8) {
                let sweep_at = |at: SimdLevel| {
                    simd::set_level(at);
                    // What a Chebyshev step reads as the previous iterate.
                    let mut out = block(&previous);
                    let mut stats = new_stats(k);
                    let b = op.reads_b().then_some(&bb);
                    dev.ell_sweep(&matrix, op, &block(&x), b, &mut out, &mut stats)
                        .unwrap();
                    let s = stats.read(&dev).unwrap();
                    assert_eq!(s.sumsq.is_some(), norms);
                    let statistics = (s.sumsq.map(<[f64]>::to_vec), s.max_abs.to_vec(), s.in_range);
                    (out.to_f64(&dev).unwrap(), statistics)
                };
                assert_eq!(
                    sweep_at(level),
                    sweep_at(SimdLevel::Scalar),
                    "{} vs scalar, {p}, {op:?}, {k} columns, width {}, norms {norms}",
                    level.name(),
                    ell.width()
                );
            }
            let from_zero_at = |at: SimdLevel| {
                simd::set_level(at);
                let mut out = block(&vec![0.0; n * k]);
                let mut stats = new_stats(k);
                dev.ell_jacobi_from_zero(&matrix, 0.8, &bb, &mut out, &mut stats)
                    .unwrap();
                let s = stats.read(&dev).unwrap();
                let statistics = (s.sumsq.map(<[f64]>::to_vec), s.max_abs.to_vec(), s.in_range);
                (out.to_f64(&dev).unwrap(), statistics)
            };
            assert_eq!(
                from_zero_at(level),
                from_zero_at(SimdLevel::Scalar),
                "Jacobi from zero, {} vs scalar, {p}, {k} columns",
                level.name()
            );
            // The refinement update (f64 matrix, correction in p).
            let f64_matrix = EllMatrix::upload(&dev, &ell, Precision::F64).unwrap();
            let alpha: Vec<f64> = (0..k).map(|c| 0.5 + c as f64 / 7.0).collect();
            let update_at = |at: SimdLevel| {
                simd::set_level(at);
                let f64_block = |v: &[f64]| {
                    Block::from_f64(&dev, v, n, k, Precision::F64, Layout::NodeMajor).unwrap()
                };
                let (mut u, mut r) = (f64_block(&x), f64_block(&b));
                let mut stats = Stats::new(&dev, k).unwrap();
                dev.ell_refine_update(&f64_matrix, &block(&x), &alpha, &mut u, &mut r, &mut stats)
                    .unwrap();
                let s = stats.read(&dev).unwrap();
                let statistics = (s.sumsq.unwrap().to_vec(), s.max_abs.to_vec(), s.in_range);
                (u.to_f64(&dev).unwrap(), r.to_f64(&dev).unwrap(), statistics)
            };
            assert_eq!(
                update_at(level),
                update_at(SimdLevel::Scalar),
                "refinement update, {} vs scalar, correction in {p}, {k} columns",
                level.name()
            );
        }
    }
}

/// Statistics made without Σ v² (a multigrid level's) give the same maxima and the same
/// output as with, no sums, and still flag a NaN or an infinity (one column and a block;
/// without Σ v² the CPU keeps a NaN in its maxima instead).
#[test]
fn statistics_without_norms_keep_maxima_and_flag_nan() {
    use tensorfem::device::MultigridKernels;
    let dev = tensorfem::device::Cpu::new();
    let a = assemble_level(2, 32).unwrap();
    let n = sparse::SparseRows::nrows(&a);
    let ell = Ell::from_csr_diagonal_first(&a, dev.ell_layout()).unwrap();
    for p in Precision::STORED {
        let matrix = EllMatrix::upload(&dev, &ell, p).unwrap();
        for k in [1, 40] {
            let sweep = |x: &[f64], norms: bool| {
                let block = |v: &[f64]| Block::from_f64(&dev, v, n, k, p, Layout::NodeMajor);
                let (x, b) = (block(x).unwrap(), block(&values(n * k, 81)).unwrap());
                let mut out = block(&vec![0.0; n * k]).unwrap();
                let mut stats = match norms {
                    true => Stats::new(&dev, k).unwrap(),
                    false => Stats::without_norms(&dev, k).unwrap(),
                };
                let op = RowOp::Jacobi { omega: 0.8 };
                dev.ell_sweep(&matrix, op, &x, Some(&b), &mut out, &mut stats)
                    .unwrap();
                let s = stats.read(&dev).unwrap();
                assert_eq!(s.sumsq.is_some(), norms);
                (out.to_f64(&dev).unwrap(), s.max_abs.to_vec(), s.in_range)
            };
            let x = values(n * k, 80);
            let (with, without) = (sweep(&x, true), sweep(&x, false));
            assert_eq!(with, without, "{p}, {k} columns");
            assert!(without.2);
            for bad in [f64::NAN, f64::INFINITY] {
                // Not representable in f16/f32 either: the stored x is non-finite.
                let mut x = x.clone();
                x[(n / 2) * k + k - 1] = bad;
                assert!(!sweep(&x, false).2, "{bad} in x, {p}, {k} columns");
                // The first Jacobi step from zero, with the bad value in b.
                let b = Block::from_f64(&dev, &x, n, k, p, Layout::NodeMajor).unwrap();
                let mut out = Block::zeros(&dev, n, k, p, Layout::NodeMajor).unwrap();
                let mut stats = Stats::without_norms(&dev, k).unwrap();
                dev.ell_jacobi_from_zero(&matrix, 0.8, &b, &mut out, &mut stats)
                    .unwrap();
                let s = stats.read(&dev).unwrap();
                assert!(
                    !s.in_range && s.sumsq.is_none(),
                    "{bad} in b, {p}, {k} columns"
                );
            }
        }
    }
}

/// On the CPU a column's output and statistics (Σ v², max |v|) from a sweep, a first Jacobi
/// step or a refinement update of a block are bitwise those of the column alone, whatever
/// the block width: every width of a partial last tile (1 to 15 columns, each compiled for
/// its width) and whole tiles. So a column's refinement (scaling, stopping) does not depend
/// on the columns solved beside it. Also for rows of 27 slots (a 3D stencil) and of a
/// generic width, which the block kernels compile apart from the 2D stencil's 9.
#[test]
fn cpu_columns_do_not_depend_on_the_block_width() {
    let dev = tensorfem::device::Cpu::new();
    let a = assemble_level(2, 64).unwrap(); // two chunks, a partial last slice
    for k in (2..=17).chain([37]) {
        let columns: Vec<usize> = if k <= 17 {
            (0..k).collect()
        } else {
            vec![0, 15, 16, k - 1]
        };
        columns_alone_and_in_a_block(dev, &a, k, &columns);
    }
    for a in [
        assemble_level(3, 8).unwrap(),
        test_matrix_with_diagonal(700),
    ] {
        for k in [3, 16, 37] {
            let columns: Vec<usize> = [0, 1, 15, 16, k - 1]
                .into_iter()
                .filter(|&c| c < k)
                .collect();
            columns_alone_and_in_a_block(dev, &a, k, &columns);
        }
    }
}

/// [`cpu_columns_do_not_depend_on_the_block_width`] for one block width `k`.
fn columns_alone_and_in_a_block(
    dev: tensorfem::device::Cpu,
    a: &Csr<f64>,
    k: usize,
    columns: &[usize],
) {
    use tensorfem::device::MultigridKernels;
    let n = sparse::SparseRows::nrows(a);
    let ell = Ell::from_csr_diagonal_first(a, dev.ell_layout()).unwrap();
    let (x, b) = (values(n * k, 70), values(n * k, 71));
    let column = |v: &[f64], c: usize| -> Vec<f64> { (0..n).map(|i| v[i * k + c]).collect() };
    let f64_matrix = EllMatrix::upload(&dev, &ell, Precision::F64).unwrap();
    let alpha: Vec<f64> = (0..k).map(|c| 1.0 + c as f64 / 3.0).collect();
    for p in Precision::STORED {
        let matrix = EllMatrix::upload(&dev, &ell, p).unwrap();
        let block =
            |v: &[f64], cols, p| Block::from_f64(&dev, v, n, cols, p, Layout::NodeMajor).unwrap();
        for op in column_ops() {
            let sweep = |x: &[f64], b: &[f64], cols: usize| {
                let mut out = block(&vec![0.0; n * cols], cols, p);
                let mut stats = Stats::new(&dev, cols).unwrap();
                let b = block(b, cols, p);
                let b = op.reads_b().then_some(&b);
                dev.ell_sweep(&matrix, op, &block(x, cols, p), b, &mut out, &mut stats)
                    .unwrap();
                let s = stats.read(&dev).unwrap();
                (
                    out.to_f64(&dev).unwrap(),
                    s.sumsq.unwrap().to_vec(),
                    s.max_abs.to_vec(),
                )
            };
            let (out, sumsq, max_abs) = sweep(&x, &b, k);
            for &c in columns {
                let (o1, s1, m1) = sweep(&column(&x, c), &column(&b, c), 1);
                assert_eq!(o1, column(&out, c), "{p} {op:?} column {c} of {k}");
                assert_eq!(
                    (s1[0], m1[0]),
                    (sumsq[c], max_abs[c]),
                    "{p} {op:?} column {c} of {k}"
                );
            }
        }
        let from_zero = |b: &[f64], cols: usize| {
            let mut out = block(&vec![0.0; n * cols], cols, p);
            let mut stats = Stats::new(&dev, cols).unwrap();
            dev.ell_jacobi_from_zero(&matrix, 0.9, &block(b, cols, p), &mut out, &mut stats)
                .unwrap();
            let s = stats.read(&dev).unwrap();
            (
                out.to_f64(&dev).unwrap(),
                s.sumsq.unwrap().to_vec(),
                s.max_abs.to_vec(),
            )
        };
        let (out, sumsq, max_abs) = from_zero(&b, k);
        for &c in columns {
            let (o1, s1, m1) = from_zero(&column(&b, c), 1);
            assert_eq!(
                o1,
                column(&out, c),
                "Jacobi from zero, {p}, column {c} of {k}"
            );
            assert_eq!(
                (s1[0], m1[0]),
                (sumsq[c], max_abs[c]),
                "{p} column {c} of {k}"
            );
        }
        let update = |x: &[f64], b: &[f64], alpha: &[f64]| {
            let cols = alpha.len();
            let (mut u, mut r) = (
                block(x, cols, Precision::F64),
                block(b, cols, Precision::F64),
            );
            let mut stats = Stats::new(&dev, cols).unwrap();
            dev.ell_refine_update(
                &f64_matrix,
                &block(x, cols, p),
                alpha,
                &mut u,
                &mut r,
                &mut stats,
            )
            .unwrap();
            let s = stats.read(&dev).unwrap();
            (
                u.to_f64(&dev).unwrap(),
                r.to_f64(&dev).unwrap(),
                s.sumsq.unwrap().to_vec(),
                s.max_abs.to_vec(),
            )
        };
        let (u, r, sumsq, max_abs) = update(&x, &b, &alpha);
        for &c in columns {
            let (u1, r1, s1, m1) = update(&column(&x, c), &column(&b, c), &alpha[c..c + 1]);
            assert_eq!(
                u1,
                column(&u, c),
                "refinement update u, {p}, column {c} of {k}"
            );
            assert_eq!(
                r1,
                column(&r, c),
                "refinement update r, {p}, column {c} of {k}"
            );
            assert_eq!(
                (s1[0], m1[0]),
                (sumsq[c], max_abs[c]),
                "refinement update statistics, {p}, column {c} of {k}"
            );
        }
    }
}

/// A column of a wide node-major block (more columns than one pass over a matrix row
/// accumulates at once) gets exactly what it gets swept alone, in every precision and for
/// every row operation, its statistics (Σ r², max |r|) too, bit for bit: results do not
/// depend on the block width, so neither does a column's scaling or stopping.
fn ell_columns_in_wide_blocks_equal_columns_alone<D: MultigridDevice>(dev: &D) {
    let a = assemble_level(2, 32).unwrap();
    let n = sparse::SparseRows::nrows(&a);
    let k = 70;
    let ell = Ell::from_csr_diagonal_first(&a, dev.ell_layout()).unwrap();
    let (x, b) = (values(n * k, 50), values(n * k, 51));
    let column = |v: &[f64], c: usize| -> Vec<f64> { (0..n).map(|i| v[i * k + c]).collect() };
    for p in Precision::STORED {
        let matrix = EllMatrix::upload(dev, &ell, p).unwrap();
        let block =
            |v: &[f64], cols| Block::from_f64(dev, v, n, cols, p, Layout::NodeMajor).unwrap();
        for op in column_ops() {
            let b_block = block(&b, k);
            let b_wide = op.reads_b().then_some(&b_block);
            let mut wide = block(&vec![0.0; n * k], k);
            let mut stats = Stats::new(dev, k).unwrap();
            dev.ell_sweep(&matrix, op, &block(&x, k), b_wide, &mut wide, &mut stats)
                .unwrap();
            let wide = wide.to_f64(dev).unwrap();
            let wide_stats = stats.read(dev).unwrap();
            for c in [0, 31, 32, 33, 69] {
                let b_column = block(&column(&b, c), 1);
                let b_alone = op.reads_b().then_some(&b_column);
                let mut alone = block(&vec![0.0; n], 1);
                let mut stats = Stats::new(dev, 1).unwrap();
                dev.ell_sweep(
                    &matrix,
                    op,
                    &block(&column(&x, c), 1),
                    b_alone,
                    &mut alone,
                    &mut stats,
                )
                .unwrap();
                assert_eq!(
                    alone.to_f64(dev).unwrap(),
                    column(&wide, c),
                    "{p} {op:?} column {c}"
                );
                let s = stats.read(dev).unwrap();
                assert_eq!(
                    (s.sumsq.unwrap()[0], s.max_abs[0]),
                    (wide_stats.sumsq.unwrap()[c], wide_stats.max_abs[c]),
                    "{p} {op:?} column {c}: statistics alone and in a block of {k}"
                );
            }
        }
    }
}

/// The grid transfer's P as a CSR matrix.
fn grid_prolongation_csr<D: MultigridDevice>(
    dev: &D,
    fine: GridShape,
    coarse: GridShape,
) -> Csr<f64> {
    let dense = common::grid_prolongation(dev, fine, coarse);
    let (mut row_ptr, mut col_idx, mut values) = (vec![0], Vec::new(), Vec::new());
    for i in 0..fine.points() {
        for j in 0..coarse.points() {
            let v = dense[i + j * fine.points()];
            if v != 0.0 {
                col_idx.push(j as u32);
                values.push(v);
            }
        }
        row_ptr.push(col_idx.len());
    }
    Csr::new(fine.points(), coarse.points(), row_ptr, col_idx, values).unwrap()
}

/// Multigrid transfers: P maps a coarse Q1 function's nodal values to the same function's
/// fine nodal values (nested spaces), and ⟨s P c, f⟩ = s t ⟨c, Pᵀ f / t⟩ with scales per
/// column; the cast into f16 rounds once and reports overflow. The same for the grid
/// transfer and for its P stored as a matrix (the transfer of refined meshes), which agree.
fn grid_transfers_are_interpolation_and_its_transpose<D: MultigridDevice>(dev: &D) {
    for dim in [2, 3] {
        let coarse = GridShape { dim, m: 3 };
        let fine = GridShape { dim, m: 7 };
        let transfers = [
            LevelTransfer::Grid { fine, coarse },
            LevelTransfer::matrix(dev, &grid_prolongation_csr(dev, fine, coarse)).unwrap(),
        ];
        let grid = check_transfer(dev, &transfers[0], fine, coarse);
        let matrix = check_transfer(dev, &transfers[1], fine, coarse);
        for (g, m) in grid.iter().zip(&matrix) {
            assert!(
                (g - m).abs() <= 1e-14 * g.abs().max(1.0),
                "dim {dim}: {g} vs {m}"
            );
        }
    }
}

/// The CPU's one-column grid transfers against bilinear (trilinear) interpolation written
/// out here, on lines long enough for whole tiles of 16 and a partial one: fine += s P c
/// and coarse = Pᵀ f / s.
#[test]
fn cpu_one_column_grid_transfers_match_the_interpolation_weights() {
    use tensorfem::device::MultigridKernels;
    let dev = tensorfem::device::Cpu::new();
    for (dim, mc) in [(2, 31), (2, 40), (3, 17)] {
        let (coarse, fine) = (GridShape { dim, m: mc }, GridShape { dim, m: 2 * mc + 1 });
        // Fine interior point i of a line sits at (i + 1)/2 in coarse spacing: its weights.
        let weights_1d = |i: usize| -> Vec<(usize, f64)> {
            (0..mc)
                .map(|a| (a, 1.0 - ((i + 1) as f64 / 2.0 - (a + 1) as f64).abs()))
                .filter(|&(_, w)| w > 0.0)
                .collect()
        };
        let coordinates = |k: usize, m: usize| -> Vec<usize> {
            (0..dim).map(|d| (k / m.pow(d as u32)) % m).collect()
        };
        // P as (fine point, coarse point, weight) triples.
        let mut entries = Vec::new();
        for k in 0..fine.points() {
            let x = coordinates(k, fine.m);
            let mut terms = vec![(0usize, 1.0f64)];
            for (d, &i) in x.iter().enumerate() {
                terms = terms
                    .iter()
                    .flat_map(|&(a, w)| {
                        weights_1d(i)
                            .into_iter()
                            .map(move |(b, v)| (a + b * mc.pow(d as u32), w * v))
                    })
                    .collect();
            }
            entries.extend(terms.into_iter().map(|(a, w)| (k, a, w)));
        }
        let (f, c) = (values(fine.points(), 90), values(coarse.points(), 91));
        let (s_p, s_r) = (1.5, 0.25);
        let mut prolongated = f.clone();
        let mut restricted = vec![0.0; coarse.points()];
        for &(k, a, w) in &entries {
            prolongated[k] += s_p * w * c[a];
            restricted[a] += w * f[k] / s_r;
        }
        let transfer = LevelTransfer::<tensorfem::device::Cpu>::Grid { fine, coarse };
        let block = |v: &[f64]| {
            Block::from_f64(&dev, v, v.len(), 1, Precision::F64, Layout::NodeMajor).unwrap()
        };
        let mut stats = Stats::new(&dev, 1).unwrap();
        let mut fb = block(&f);
        dev.prolongate_add(&transfer, &block(&c), &mut fb, &[s_p], &mut stats)
            .unwrap();
        let mut cb = block(&vec![0.0; coarse.points()]);
        dev.restrict(&transfer, &block(&f), &mut cb, &[s_r], &mut stats)
            .unwrap();
        for (got, want, what) in [
            (fb.to_f64(&dev).unwrap(), prolongated, "prolongation"),
            (cb.to_f64(&dev).unwrap(), restricted, "restriction"),
        ] {
            let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            assert!(
                max_diff(&got, &want) <= 1e-14 * scale,
                "{what}, {dim}D, m_c = {mc}"
            );
        }
    }
}

/// Grid transfers (restriction and prolongation, 2D and 3D, every precision) give each
/// column of a block bitwise what it gets alone, and the same at every SIMD level this CPU
/// has: the one-column paths are separate loops.
#[test]
fn cpu_grid_transfers_alone_in_a_block_and_at_every_simd_level() {
    use tensorfem::device::cpu::simd::{self, SimdLevel};
    use tensorfem::device::MultigridKernels;
    let dev = tensorfem::device::Cpu::new();
    let before = simd::level();
    // A partial tile alone, and a whole tile and a partial one (blocks take fused kernels).
    for (k, fine) in [5, 21].into_iter().flat_map(|k| {
        [GridShape { dim: 2, m: 63 }, GridShape { dim: 3, m: 15 }].map(|fine| (k, fine))
    }) {
        let column =
            |v: &[f64], c: usize| -> Vec<f64> { v.iter().skip(c).step_by(k).copied().collect() };
        let coarse = fine.coarse();
        let transfer = LevelTransfer::<tensorfem::device::Cpu>::Grid { fine, coarse };
        let (f, c) = (
            values(fine.points() * k, 80),
            values(coarse.points() * k, 81),
        );
        // Column 3's scale is zero: its restriction is zero, its prolongation adds nothing.
        let scales: Vec<f64> = (0..k)
            .map(|j| if j == 3 { 0.0 } else { 0.5 + j as f64 })
            .collect();
        let mut reference: Option<Vec<Vec<f64>>> = None;
        for level in SimdLevel::ALL.into_iter().filter(|l| l.is_supported()) {
            assert!(simd::set_level(level));
            let mut outputs = Vec::new();
            for p in Precision::STORED {
                let run =
                    |f: &[f64], c: &[f64], scales: &[f64]| -> (Vec<f64>, Vec<f64>, Vec<f64>) {
                        let nrhs = scales.len();
                        let block = |v: &[f64], rows| {
                            Block::from_f64(&dev, v, rows, nrhs, p, Layout::NodeMajor).unwrap()
                        };
                        let mut stats = Stats::new(&dev, nrhs).unwrap();
                        let mut restricted = block(&vec![0.0; c.len()], coarse.points());
                        dev.restrict(
                            &transfer,
                            &block(f, fine.points()),
                            &mut restricted,
                            scales,
                            &mut stats,
                        )
                        .unwrap();
                        let mut prolongated = block(f, fine.points());
                        dev.prolongate_add(
                            &transfer,
                            &block(c, coarse.points()),
                            &mut prolongated,
                            scales,
                            &mut stats,
                        )
                        .unwrap();
                        let s = stats.read(&dev).unwrap();
                        let statistics = s.sumsq.unwrap().iter().chain(s.max_abs).copied();
                        (
                            restricted.to_f64(&dev).unwrap(),
                            prolongated.to_f64(&dev).unwrap(),
                            statistics.collect(),
                        )
                    };
                let (r_block, p_block, sumsq) = run(&f, &c, &scales);
                for j in 0..k {
                    let (r, pr, s) = run(&column(&f, j), &column(&c, j), &scales[j..j + 1]);
                    assert_eq!(
                        r,
                        column(&r_block, j),
                        "restriction {fine:?} {p:?} column {j}"
                    );
                    assert_eq!(
                        pr,
                        column(&p_block, j),
                        "prolongation {fine:?} {p:?} column {j}"
                    );
                    assert_eq!(
                        (s[0].to_bits(), s[1].to_bits()),
                        (sumsq[j].to_bits(), sumsq[k + j].to_bits()),
                        "statistics {fine:?} {p:?} column {j} of {k}"
                    );
                    if j == 3 {
                        let stored = Block::from_f64(
                            &dev,
                            &column(&f, j),
                            fine.points(),
                            1,
                            p,
                            Layout::NodeMajor,
                        )
                        .unwrap();
                        assert!(r.iter().all(|&v| v == 0.0), "zero scale restricts to zero");
                        assert!(
                            pr == stored.to_f64(&dev).unwrap(),
                            "zero scale adds nothing"
                        );
                    }
                }
                outputs.push(r_block);
                outputs.push(p_block);
            }
            match &reference {
                None => reference = Some(outputs),
                Some(first) => assert_eq!(first, &outputs, "{fine:?} at {}", level.name()),
            }
        }
    }
    simd::set_level(before);
}

/// The refinement's scaling of node-major residual blocks (dst = src / s_c in another
/// precision, with statistics): each column's values and statistics bitwise those of the
/// column alone and the same at every SIMD level, the values src / s_c rounded once into
/// the target precision (a zero scale gives zero), Σ v² and max |v| those of the stored values.
#[test]
fn cpu_scaled_columns_alone_in_a_block_and_at_every_simd_level() {
    use tensorfem::device::cpu::simd::{self, SimdLevel};
    use tensorfem::device::VectorKernels;
    let dev = tensorfem::device::Cpu::new();
    let before = simd::level();
    let rows = 10_003; // three statistics chunks, the last partial
    for k in [2, 5, 21] {
        let x = values(rows * k, 90);
        let scales: Vec<f64> = (0..k)
            .map(|j| if j == 1 { 0.0 } else { 0.25 + j as f64 })
            .collect();
        let column =
            |v: &[f64], c: usize| -> Vec<f64> { (0..rows).map(|i| v[i * k + c]).collect() };
        for a in Precision::STORED {
            for b in Precision::STORED {
                let run = |x: &[f64], scales: &[f64]| {
                    let cols = scales.len();
                    let src = Block::from_f64(&dev, x, rows, cols, a, Layout::NodeMajor).unwrap();
                    let mut dst = Block::zeros(&dev, rows, cols, b, Layout::NodeMajor).unwrap();
                    let mut stats = Stats::new(&dev, cols).unwrap();
                    dev.scale_columns(&src, scales, &mut dst, &mut stats)
                        .unwrap();
                    let s = stats.read(&dev).unwrap();
                    let sumsq = s.sumsq.unwrap().to_vec();
                    (dst.to_f64(&dev).unwrap(), sumsq, s.max_abs.to_vec())
                };
                let mut reference = None;
                for level in SimdLevel::ALL.into_iter().filter(|l| l.is_supported()) {
                    assert!(simd::set_level(level));
                    let block = run(&x, &scales);
                    match &reference {
                        None => reference = Some(block.clone()),
                        Some(first) => assert!(
                            first == &block,
                            "{a} → {b}, {k} columns at {}",
                            level.name()
                        ),
                    }
                    let (out, sumsq, max_abs) = block;
                    for j in 0..k {
                        let (alone, s1, m1) = run(&column(&x, j), &scales[j..j + 1]);
                        assert!(alone == column(&out, j), "{a} → {b}, column {j} of {k}");
                        assert_eq!(
                            (s1[0], m1[0]),
                            (sumsq[j], max_abs[j]),
                            "{a} → {b}, column {j} of {k}"
                        );
                        let stored_x =
                            Block::from_f64(&dev, &column(&x, j), rows, 1, a, Layout::NodeMajor)
                                .unwrap()
                                .to_f64(&dev)
                                .unwrap();
                        let inverse = if scales[j] == 0.0 {
                            0.0
                        } else {
                            1.0 / scales[j]
                        };
                        // Relative rounding, and f16's subnormal spacing 2⁻²⁴ for values
                        // below its smallest normal number.
                        let (bound, spacing) = match b {
                            Precision::F16 => (1e-3, 2f64.powi(-24)),
                            Precision::F32 => (1e-7, 0.0),
                            _ => (1e-15, 0.0),
                        };
                        for (o, v) in alone.iter().zip(&stored_x) {
                            let exact = v * inverse;
                            assert!(
                                (o - exact).abs() <= bound * exact.abs() + spacing,
                                "{a} → {b}: {o} for {exact}"
                            );
                        }
                        let (ss, mx) = alone
                            .iter()
                            .fold((0.0, 0.0f64), |(ss, mx), o| (ss + o * o, mx.max(o.abs())));
                        // Of the values in B's compute precision, before f16 rounds them once more.
                        let within = 2.0 * bound + 1e-12;
                        assert!((s1[0] - ss).abs() <= within * ss, "Σ v², {a} → {b}");
                        assert!((m1[0] - mx).abs() <= bound * mx, "max |v|, {a} → {b}");
                    }
                }
            }
        }
    }
    simd::set_level(before);
}

/// The checks of [`grid_transfers_are_interpolation_and_its_transpose`] on one transfer;
/// returns the restriction of a test block.
fn check_transfer<D: MultigridDevice>(
    dev: &D,
    transfer: &LevelTransfer<D>,
    fine: GridShape,
    coarse: GridShape,
) -> Vec<f64> {
    let dim = fine.dim;
    {
        // A coarse Q1 function: a hat at coarse node (2, 2[, 2]) (interior index 1).
        let mut c = vec![0.0f64; coarse.points()];
        let centre = (0..dim).map(|d| coarse.m.pow(d as u32)).sum::<usize>();
        c[centre] = 1.0;
        let cb = Block::from_f64(dev, &c, c.len(), 1, Precision::F64, Layout::NodeMajor).unwrap();
        let mut fb =
            Block::zeros(dev, fine.points(), 1, Precision::F64, Layout::NodeMajor).unwrap();
        let mut stats = Stats::new(dev, 1).unwrap();
        dev.prolongate_add(transfer, &cb, &mut fb, &[1.0], &mut stats)
            .unwrap();
        // The hat at x = 1/2 has value Π (1 − |2x_d − 1|·2) on the fine nodes x = i/8.
        for (k, &v) in fb.to_f64(dev).unwrap().iter().enumerate() {
            let expected: f64 = (0..dim)
                .map(|d| {
                    let i = (k / fine.m.pow(d as u32)) % fine.m;
                    let x = (i + 1) as f64 / 8.0;
                    (1.0 - (4.0 * (x - 0.5)).abs()).max(0.0)
                })
                .product();
            assert_eq!(v, expected, "dim {dim}, fine point {k}");
        }

        let nrhs = 2;
        let value = |k: usize| ((k * 7919) % 113) as f64 / 17.0 - 3.0;
        let c: Vec<f64> = (0..coarse.points() * nrhs).map(value).collect();
        let f: Vec<f64> = (0..fine.points() * nrhs).map(|k| value(k + 5)).collect();
        let block = |v: &[f64], rows: usize, p| {
            Block::from_f64(dev, v, rows, nrhs, p, Layout::NodeMajor).unwrap()
        };
        let mut pc = block(&vec![0.0; f.len()], fine.points(), Precision::F64);
        let mut rf = block(&vec![0.0; c.len()], coarse.points(), Precision::F64);
        let mut stats = Stats::new(dev, nrhs).unwrap();
        dev.prolongate_add(
            transfer,
            &block(&c, coarse.points(), Precision::F64),
            &mut pc,
            &[1.0, 2.0],
            &mut stats,
        )
        .unwrap();
        let fb = block(&f, fine.points(), Precision::F64);
        dev.restrict(transfer, &fb, &mut rf, &[1.0, 0.5], &mut stats)
            .unwrap();
        assert!(stats.read(dev).unwrap().in_range);
        let (pc, rf) = (pc.to_f64(dev).unwrap(), rf.to_f64(dev).unwrap());
        for col in 0..nrhs {
            let lhs: f64 = (0..fine.points())
                .map(|i| pc[i * nrhs + col] * f[i * nrhs + col])
                .sum();
            let rhs: f64 = (0..coarse.points())
                .map(|i| c[i * nrhs + col] * rf[i * nrhs + col])
                .sum();
            // Prolongation multiplies by its scale, restriction divides by its own.
            let scale = [1.0, 2.0][col] * [1.0, 0.5][col];
            assert!(
                (lhs - scale * rhs).abs() < 1e-12 * lhs.abs().max(1.0),
                "dim {dim} col {col}"
            );
        }
        // Into f16: rounded once, in range; a huge scale overflows and is reported.
        let mut low = block(&vec![0.0; c.len()], coarse.points(), Precision::F16);
        dev.restrict(transfer, &fb, &mut low, &[1.0, 0.5], &mut stats)
            .unwrap();
        assert!(stats.read(dev).unwrap().in_range);
        for (l, &r) in low.to_f64(dev).unwrap().iter().zip(&rf) {
            assert_eq!(*l, f16_from_f64(r).to_f64());
        }
        dev.restrict(transfer, &fb, &mut low, &[1e-6, 1.0], &mut stats)
            .unwrap();
        assert!(!stats.read(dev).unwrap().in_range);
        rf
    }
}

/// The level-by-level hierarchical transforms (on the unit square's grid and as sparse
/// level rows on the flow around a square) agree with the sparse S and Sᵀ; the C/E/I
/// gather and scatter are each other's inverse and match naive loops.
/// Sᵀ b with the gather, and the scatter with S, fused (`psc_transform_gather`,
/// `psc_scatter_transform`) give bitwise the passes one after the other, with one column
/// (split among threads on the CPU) and with several (a column per task), on grids (Q1,
/// P1) and on a refined mesh's level transform, in f64 and f32.
fn fused_psc_passes_equal_the_passes_in_turn<D: PscDevice>(dev: &D) {
    let meshes = [
        unit_square_refined(4, 3, Element::Q1).unwrap(),
        unit_square_refined(4, 3, Element::P1).unwrap(),
        refine(&CoarseMesh::flow_around_square(), 2).unwrap(),
    ];
    for mesh in meshes {
        let hb = HierarchicalBasis::new(&mesh).unwrap();
        let n = hb.len();
        // C every 11th unknown, then E and I alternating, I with a padding slot.
        let (mut c, mut e, mut i) = (Vec::new(), Vec::new(), vec![PADDING_SLOT]);
        for d in 0..n as u32 {
            match d {
                d if d % 11 == 0 => c.push(d),
                d if d % 3 == 1 => e.push(d),
                d => i.push(d),
            }
        }
        let nc = c.len();
        let l_c_inv: Vec<f64> = (0..nc * nc)
            .map(|k| match (k % nc, k / nc) {
                (r, j) if r >= j => 0.5 + ((r * 7 + j * 3) % 11) as f64 / 9.0,
                _ => 0.0,
            })
            .collect();
        let (scale_e, mut scale_i) = (values(e.len(), 90), values(i.len(), 91));
        scale_i[0] = 0.0;
        for p in [Precision::F64, Precision::F32] {
            let transform = hb.transform(dev, p).unwrap();
            let classes =
                Classes::upload(dev, &c, &e, &i, &l_c_inv, &scale_e, &scale_i, p).unwrap();
            for k in [1, 5] {
                let block = |v: &[f64], rows: usize| {
                    Block::from_f64(dev, v, rows, k, p, Layout::ColMajor).unwrap()
                };
                let parts = || [nc, e.len(), i.len()].map(|rows| block(&vec![0.0; rows * k], rows));
                let b = block(&values(n * k, 92), n);
                // In turn.
                let mut work = block(&vec![0.0; n * k], n);
                dev.copy(b.view(), work.view_mut()).unwrap();
                dev.hierarchical_transform(&transform, &mut work, true)
                    .unwrap();
                let [mut bc, mut be, mut bi] = parts();
                let mut scale = Data::zeros(dev, k, p).unwrap();
                dev.psc_gather(&classes, &work, &mut bc, &mut be, &mut bi, &mut scale)
                    .unwrap();
                let mut back = block(&vec![0.0; n * k], n);
                dev.psc_scatter(&classes, &bc, &be, &bi, &scale, &mut back)
                    .unwrap();
                dev.hierarchical_transform(&transform, &mut back, false)
                    .unwrap();
                // Fused.
                let mut work = block(&vec![0.0; n * k], n);
                let [mut fc, mut fe, mut fi] = parts();
                let mut fused_scale = Data::zeros(dev, k, p).unwrap();
                dev.psc_transform_gather(
                    &transform,
                    &classes,
                    &b,
                    &mut work,
                    &mut fc,
                    &mut fe,
                    &mut fi,
                    &mut fused_scale,
                )
                .unwrap();
                let mut fused_back = block(&vec![f64::NAN; n * k], n);
                dev.psc_scatter_transform(
                    &classes,
                    &transform,
                    &fc,
                    &fe,
                    &fi,
                    &fused_scale,
                    &mut fused_back,
                )
                .unwrap();
                let what = format!("{} unknowns, {p}, {k} column(s)", n);
                for (fused, in_turn) in [(&fc, &bc), (&fe, &be), (&fi, &bi), (&fused_back, &back)] {
                    let (f, t) = (fused.to_f64(dev).unwrap(), in_turn.to_f64(dev).unwrap());
                    assert!(
                        f.iter().zip(&t).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{what}"
                    );
                }
                assert_eq!(
                    fused_scale.to_f64(dev).unwrap(),
                    scale.to_f64(dev).unwrap(),
                    "{what}"
                );
            }
        }
    }
}

fn psc_passes_match_the_matrices<D: PscDevice>(dev: &D) {
    let meshes = [
        (
            unit_square_refined(3, 3, Element::Q1).unwrap(),
            "unit square q1",
        ),
        (
            unit_square_refined(3, 3, Element::P1).unwrap(),
            "unit square p1",
        ),
        (
            refine(&CoarseMesh::flow_around_square(), 3).unwrap(),
            "flow around a square",
        ),
    ];
    for (mesh, name) in meshes {
        let hb = HierarchicalBasis::new(&mesh).unwrap();
        let transform = hb.transform(dev, Precision::F64).unwrap();
        let s = hb.matrix();
        let st = s.transpose();
        let n = hb.len();
        let x: Vec<f64> = values(2 * n, 50);
        for (transpose, matrix) in [(false, &s), (true, &st)] {
            let mut xb = Block::from_f64(dev, &x, n, 2, Precision::F64, Layout::ColMajor).unwrap();
            dev.hierarchical_transform(&transform, &mut xb, transpose)
                .unwrap();
            let got = xb.to_f64(dev).unwrap();
            for c in 0..2 {
                let mut want = vec![0.0; n];
                sparse::spmv(matrix, &x[c * n..(c + 1) * n], &mut want);
                assert!(
                    max_diff(&got[c * n..(c + 1) * n], &want) < 1e-13,
                    "{name}, transpose {transpose}"
                );
            }
        }
    }
    // A small class layout: C = {0, 5}, E = {1, 2, 7}, I = {3, 4, 6} in four slots, the
    // second a padding slot.
    let pad = PADDING_SLOT;
    let (c_dofs, e_dofs, i_dofs) = (vec![0u32, 5], vec![1u32, 2, 7], vec![3u32, pad, 4, 6]);
    let l_c_inv = [2.0, 0.5, 0.0, 4.0]; // column-major, lower triangular
    let (scale_e, scale_i) = ([1.0, 2.0, 0.5], [3.0, 0.0, 0.25, 1.0]);
    let classes = Classes::upload(
        dev,
        &c_dofs,
        &e_dofs,
        &i_dofs,
        &l_c_inv,
        &scale_e,
        &scale_i,
        Precision::F64,
    )
    .unwrap();
    let nodal = values(16, 60);
    let nb = Block::from_f64(dev, &nodal, 8, 2, Precision::F64, Layout::ColMajor).unwrap();
    let part = |rows| Block::zeros(dev, rows, 2, Precision::F64, Layout::ColMajor).unwrap();
    let (mut bc, mut be, mut bi) = (part(2), part(3), part(4));
    let mut column_scale = Data::zeros(dev, 2, Precision::F64).unwrap();
    dev.psc_gather(&classes, &nb, &mut bc, &mut be, &mut bi, &mut column_scale)
        .unwrap();
    let scales = column_scale.to_f64(dev).unwrap();
    let (gc, ge, gi) = (
        bc.to_f64(dev).unwrap(),
        be.to_f64(dev).unwrap(),
        bi.to_f64(dev).unwrap(),
    );
    for col in 0..2 {
        let v = &nodal[col * 8..(col + 1) * 8];
        let c0 = 2.0 * v[0];
        let c1 = 0.5 * v[0] + 4.0 * v[5];
        let e: Vec<f64> = e_dofs
            .iter()
            .zip(scale_e)
            .map(|(&d, s)| v[d as usize] * s)
            .collect();
        let i: Vec<f64> = i_dofs
            .iter()
            .zip(scale_i)
            .map(|(&d, s)| if d == pad { 0.0 } else { v[d as usize] * s })
            .collect();
        let max = [c0, c1]
            .iter()
            .chain(&e)
            .chain(&i)
            .fold(0.0f64, |m, v| m.max(v.abs()));
        assert_eq!(scales[col], max);
        assert!(
            (gc[col * 2] - c0 / max).abs() < 1e-15 && (gc[col * 2 + 1] - c1 / max).abs() < 1e-15
        );
        for t in 0..3 {
            assert!((ge[col * 3 + t] - e[t] / max).abs() < 1e-15);
        }
        for t in 0..4 {
            assert!((gi[col * 4 + t] - i[t] / max).abs() < 1e-15);
        }
        assert_eq!(gi[col * 4 + 1], 0.0, "a padding slot gathers 0");
    }
    // The scatter applies L⁻ᵀ where the gather applied L⁻¹: with L⁻¹ the identity the two
    // are inverse, giving the nodal values back.
    let identity = Classes::upload(
        dev,
        &c_dofs,
        &e_dofs,
        &i_dofs,
        &[1.0, 0.0, 0.0, 1.0],
        &[1.0; 3],
        &[1.0, 0.0, 1.0, 1.0],
        Precision::F64,
    )
    .unwrap();
    dev.psc_gather(&identity, &nb, &mut bc, &mut be, &mut bi, &mut column_scale)
        .unwrap();
    // Whatever a padding slot holds, the scatter writes it nowhere.
    let mut slots = bi.to_f64(dev).unwrap();
    slots[1] = 1e3;
    slots[5] = -1e3;
    let bi = Block::from_f64(dev, &slots, 4, 2, Precision::F64, Layout::ColMajor).unwrap();
    let mut back = part(8);
    dev.psc_scatter(&identity, &bc, &be, &bi, &column_scale, &mut back)
        .unwrap();
    assert!(max_diff(&back.to_f64(dev).unwrap(), &nodal) < 1e-15);
}

/// Q2 and Q1 transfers reproduce quadratics and bilinears (the coarse space is nested),
/// and restriction is the transpose of prolongation.
fn stokes_transfers_are_interpolation_and_its_transpose<D: StokesDevice>(dev: &D) {
    let nc = 3;
    let (mc, mf) = (2 * nc + 1, 4 * nc + 1);
    let q = |x: f64, y: f64| (0.3 + x - x * x) * (1.0 + 2.0 * y - 3.0 * y * y);
    let coarse: Vec<f64> = (0..mc * mc)
        .map(|k| {
            q(
                (k % mc) as f64 / (mc - 1) as f64,
                (k / mc) as f64 / (mc - 1) as f64,
            )
        })
        .collect();
    let mut fine = vector(dev, &vec![0.0; mf * mf], Precision::F64);
    dev.stokes_transfer(
        Transfer::Q2Prolong,
        nc,
        vector(dev, &coarse, Precision::F64).view(),
        fine.view_mut(),
    )
    .unwrap();
    for (k, &got) in fine.to_f64(dev).unwrap().iter().enumerate() {
        let want = q(
            (k % mf) as f64 / (mf - 1) as f64,
            (k / mf) as f64 / (mf - 1) as f64,
        );
        assert!((got - want).abs() < 1e-14, "{k}: {got} vs {want}");
    }
    let (pc, pf) = (nc + 1, 2 * nc + 1);
    let bilinear = |x: f64, y: f64| 1.0 + 2.0 * x - y + 3.0 * x * y;
    let coarse: Vec<f64> = (0..pc * pc)
        .map(|k| bilinear((k % pc) as f64 / nc as f64, (k / pc) as f64 / nc as f64))
        .collect();
    let mut fine = vector(dev, &vec![0.0; pf * pf], Precision::F64);
    dev.stokes_transfer(
        Transfer::Q1Prolong,
        nc,
        vector(dev, &coarse, Precision::F64).view(),
        fine.view_mut(),
    )
    .unwrap();
    for (k, &got) in fine.to_f64(dev).unwrap().iter().enumerate() {
        let want = bilinear(
            (k % pf) as f64 / (2 * nc) as f64,
            (k / pf) as f64 / (2 * nc) as f64,
        );
        assert!((got - want).abs() < 1e-14);
    }
    // ⟨P c, f⟩ = ⟨c, Pᵀ f⟩ for interior coarse lattice vectors and any pressure.
    let nc = 4;
    let (cg, fg) = (Grid { n: nc }, Grid { n: 2 * nc });
    for (prolong, restrict, coarse_len, fine_len, m) in [
        (
            Transfer::Q2Prolong,
            Transfer::Q2Restrict,
            cg.lattice_len(),
            fg.lattice_len(),
            Some(cg.m()),
        ),
        (
            Transfer::Q1Prolong,
            Transfer::Q1Restrict,
            cg.pressure_len(),
            fg.pressure_len(),
            None,
        ),
    ] {
        let mut c = values(coarse_len, 70);
        if let Some(m) = m {
            for k in 0..m * m {
                if !cg.is_interior(k % m, k / m) {
                    c[k] = 0.0;
                }
            }
        }
        let f = values(fine_len, 71);
        let mut pcb = vector(dev, &vec![0.0; fine_len], Precision::F64);
        dev.stokes_transfer(
            prolong,
            nc,
            vector(dev, &c, Precision::F64).view(),
            pcb.view_mut(),
        )
        .unwrap();
        let mut rfb = vector(dev, &vec![0.0; coarse_len], Precision::F64);
        dev.stokes_transfer(
            restrict,
            nc,
            vector(dev, &f, Precision::F64).view(),
            rfb.view_mut(),
        )
        .unwrap();
        let (pcv, rfv) = (pcb.to_f64(dev).unwrap(), rfb.to_f64(dev).unwrap());
        let lhs: f64 = pcv.iter().zip(&f).map(|(a, b)| a * b).sum();
        let rhs: f64 = c.iter().zip(&rfv).map(|(a, b)| a * b).sum();
        assert!(
            (lhs - rhs).abs() < 1e-12 * lhs.abs().max(1.0),
            "{prolong:?}: {lhs} vs {rhs}"
        );
    }
}

/// Storage conversions of the CPU: f16 values round like `half` (the storage types agree
/// with the device's).
fn stored_values_round_trip<D: PscDevice>(dev: &D) {
    let all: Vec<f64> = (0..=u16::MAX)
        .map(f16::from_bits)
        .filter(|h| h.is_finite())
        .map(|h| h.to_f64())
        .collect();
    let data = Data::from_f64(dev, &all, Precision::F16).unwrap();
    assert_eq!(data.to_f64(dev).unwrap(), all);
    assert_eq!(<f16 as Stored>::PRECISION, Precision::F16);
}

device_tests!(
    cuda: vector_kernels_match_naive_loops,
    block_kernels_match_naive_loops,
    wide_block_columns_reduce_as_alone,
    dense_kernels_match_naive_products,
    matrix_vector_products_match_f64_products,
    batched_gemm_equals_separate_products,
    symmetric_products_equal_naive_products,
    tf32_gemms_multiply_operands_rounded_to_tf32,
    orthogonalize_matches_naive_loops,
    csr_kernels_match_host_products,
    psc_passes_match_the_matrices,
    fused_psc_passes_equal_the_passes_in_turn,
    stored_values_round_trip,
    ell_kernels_match_host_products,
    ell_columns_in_wide_blocks_equal_columns_alone,
    grid_transfers_are_interpolation_and_its_transpose,
);

device_tests!(cuda: stokes_transfers_are_interpolation_and_its_transpose);
