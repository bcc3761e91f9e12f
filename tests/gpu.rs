//! Every CUDA kernel against its CPU reference on seeded inputs, through the kernel-family
//! traits (tolerance per precision: the two backends round alike but add in other orders).
//! On a machine without a GPU each test says it is skipped; `make test-gpu` sets
//! TENSORFEM_REQUIRE_CUDA=1, so there a missing GPU fails.
//!
//! Each test names the entry points it exercises in a `covers(&[…])` call: tests/nvrtc.rs
//! fails for any entry point of the compiled PTX not named here.

mod common;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use tensorfem::device::cuda::staging::{CHUNK_BYTES, STAGED_BYTES};
use tensorfem::device::cuda::{test_device, Cuda};
use tensorfem::device::psc::{
    CellParents, Classes, GridTransform, HierarchicalTransform, PscKernels,
};
use tensorfem::device::{
    Block, CsrMatrix, Data, DenseKernels, Device, EllMatrix, FlagLog, GridShape, Layout,
    LevelTransfer, MatMut, MatRef, MatrixStorage, MultigridDevice, RowOp, Scratch, SparseKernels,
    Stats, VectorKernels,
};
use tensorfem::precision::GemmMath;
use tensorfem::precision::Precision::{self, Tf32, F16, F32, F64};
use tensorfem::sparse::{Csr, Ell, SparseRows};

const ALL: [Precision; 3] = [F16, F32, F64];
const LAYOUTS: [Layout; 2] = [Layout::ColMajor, Layout::NodeMajor];

/// The entry points a test exercises (read by tests/nvrtc.rs; nothing to do at run time).
fn covers(_entries: &[&str]) {}

/// Relative tolerance of results computed in precision `p` on both backends.
fn tolerance(p: Precision) -> f64 {
    match p {
        // TF32 rounds like f16 (11 significant bits); the CPU rounds operands to nearest,
        // a GPU may round them otherwise.
        F16 | Tf32 => 2e-3,
        F32 => 2e-6,
        F64 => 1e-13,
    }
}

fn random(seed: u64, len: usize) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// Asserts `got` (computed in `p` on the GPU) ≈ `want` entry by entry, relative to the
/// largest magnitude of `want`; `got` is recorded as a seeded output (tests/common/outputs.rs).
fn close(what: &str, p: Precision, got: &[f64], want: &[f64], tol: f64) {
    common::outputs::record(what, p, tol, got);
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1e-300f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}: entry {i}: CUDA {g:e}, CPU {w:e} (tolerance {tol:e} × {scale:e})"
        );
    }
}

fn block<D: Device>(
    dev: &D,
    host: &[f64],
    rows: usize,
    cols: usize,
    p: Precision,
    l: Layout,
) -> Block<D> {
    Block::from_f64(dev, host, rows, cols, p, l).unwrap()
}

fn stats_of<D: Device>(dev: &D, stats: &mut Stats<D>) -> Vec<f64> {
    let s = stats.read(dev).unwrap();
    let mut v: Vec<f64> = s.sumsq.unwrap().iter().chain(s.max_abs).copied().collect();
    v.push(f64::from(u8::from(s.in_range)));
    v
}

/// Named results of one backend, each with the tolerance of the precision it was computed
/// in (sums over many values: looser, the CPU adds f32 values in f32).
#[derive(Default)]
struct Parts(Vec<(String, Precision, f64, Vec<f64>)>);

impl Parts {
    fn add(&mut self, what: &str, p: Precision, values: Vec<f64>) {
        self.0
            .push((format!("{what} ({p})"), p, tolerance(p), values));
    }

    fn add_sum(&mut self, what: &str, p: Precision, values: Vec<f64>) {
        // A result stored in f16 is rounded to its ulp (2⁻¹⁰ relative), wherever it was
        // summed: two summation orders can round to neighbouring f16 values.
        let tol = match p {
            F16 | Tf32 => tolerance(p),
            F32 => 1e-4,
            F64 => 1e-12,
        };
        self.0.push((format!("{what} ({p})"), p, tol, values));
    }

    fn compare(&self, cpu: &Parts, case: &str) {
        assert_eq!(self.0.len(), cpu.0.len());
        for ((what, p, tol, got), (_, _, _, want)) in self.0.iter().zip(&cpu.0) {
            close(&format!("{case}: {what}"), *p, got, want, *tol);
        }
    }
}

fn gpu() -> Option<Cuda> {
    test_device()
}

/// Host ↔ device copies of every size class return every value: direct (below the staged
/// size), staged in one chunk, and staged in several with a partial last one; written over
/// and read back from an offset, in f64 and in f16 (whose byte count is not a multiple of 8).
#[test]
fn staged_copies_round_trip() {
    let Some(gpu) = gpu() else { return };
    for bytes in [
        STAGED_BYTES - 8,
        STAGED_BYTES,
        2 * CHUNK_BYTES + CHUNK_BYTES / 2 + 24,
    ] {
        let len = bytes / 8;
        let host: Vec<f64> = (0..len).map(|i| i as f64 * 0.5 - 3.0).collect();
        let mut buffer = gpu.upload(&host).unwrap();
        let mut back = vec![0.0; len];
        gpu.download(&buffer, &mut back).unwrap();
        assert!(back == host, "{bytes} bytes: upload and download");
        let other: Vec<f64> = host.iter().map(|v| -v).collect();
        gpu.write(&other, &mut buffer).unwrap();
        let offset = 5;
        let mut tail = vec![0.0; len - offset];
        gpu.read(&buffer, offset, &mut tail).unwrap();
        assert!(
            tail == other[offset..],
            "{bytes} bytes: write and read at an offset"
        );
        let halves: Vec<half::f16> = (0..2 * len + 3)
            .map(|i| half::f16::from_f64((i % 2048) as f64))
            .collect();
        let buffer = gpu.upload(&halves).unwrap();
        let mut back = vec![half::f16::ZERO; halves.len()];
        gpu.download(&buffer, &mut back).unwrap();
        assert!(back == halves, "{} f16 bytes", 2 * halves.len());
    }
}

/// The set-up's dense inversion on the GPU (SYRK, potrf, trtri, the row-block product)
/// equals the host's: (A − GᵀG)⁻¹ of a 700 × 700 SPD matrix (two row blocks, the second
/// partial), a matrix that is not positive definite refused at its pivot, and M1's Π⁻¹
/// of a whole set-up.
#[test]
fn dense_inverse_matches_the_host() {
    use faer::Mat;
    use tensorfem::device::{DenseInverse, Inverted};
    use tensorfem::linalg::{mirror_lower, spd_inverse_in_place};
    let Some(gpu) = gpu() else { return };
    let (n, k) = (1100, 30);
    let g = Mat::from_fn(k, n, |i, j| ((i * 31 + j * 17) % 13) as f64 / 40.0);
    let a = Mat::from_fn(n, n, |i, j| {
        let coupling = 1.0 / (1.0 + (i as f64 - j as f64).abs());
        coupling + if i == j { n as f64 } else { 0.0 }
    });
    let mut on_gpu = a.clone();
    assert_eq!(
        gpu.spd_inverse(&mut on_gpu, Some(&g)).unwrap(),
        Inverted::Done
    );
    mirror_lower(on_gpu.as_mut());
    let diagonal: Vec<f64> = (0..n).map(|i| on_gpu[(i, i)]).collect();
    common::outputs::record("inverse's diagonal", F64, 1e-12, &diagonal);
    let mut on_host = &a - g.transpose() * &g;
    spd_inverse_in_place(&mut on_host).unwrap();
    let scale = on_host.norm_max();
    let difference = (&on_gpu - &on_host).norm_max();
    assert!(
        difference <= 1e-12 * scale,
        "GPU and host inverses differ by {difference:e}"
    );
    let mut indefinite = a.clone();
    indefinite[(5, 5)] = -1.0;
    assert_eq!(
        gpu.spd_inverse(&mut indefinite, None).unwrap(),
        Inverted::NotPositiveDefinite { index: 5 }
    );
    let setup = |dense: &dyn DenseInverse| {
        tensorfem::psc::PscSetup::new_inverting_on(
            tensorfem::mesh::Element::Q1,
            4,
            3,
            tensorfem::psc::PscMethod::M1,
            dense,
        )
        .unwrap()
    };
    let (pi_gpu, pi_host) = (setup(&gpu), setup(&tensorfem::device::OnHost));
    let (pi_gpu, pi_host) = (pi_gpu.pi_inv().unwrap(), pi_host.pi_inv().unwrap());
    let entries: Vec<f64> = (0..pi_gpu.ncols())
        .flat_map(|j| (0..pi_gpu.nrows()).map(move |i| pi_gpu[(i, j)]))
        .collect();
    common::outputs::record("M1's Π⁻¹", F64, 1e-12, &entries);
    let difference = (pi_gpu - pi_host).norm_max();
    assert!(
        difference <= 1e-12 * pi_host.norm_max(),
        "Π⁻¹ differs by {difference:e}"
    );
}

#[test]
fn element_wise_kernels_match_the_cpu() {
    covers(&[
        "fill_f16",
        "fill_f32",
        "fill_f64",
        "axpby_f16",
        "axpby_f32",
        "axpby_f64",
        "scale_f16",
        "scale_f32",
        "scale_f64",
        "shift_f16",
        "shift_f32",
        "shift_f64",
        "scaled_product_f16",
        "scaled_product_f32",
        "scaled_product_f64",
        "scaled_product_add_f16",
        "scaled_product_add_f32",
        "scaled_product_add_f64",
    ]);
    let Some(gpu) = gpu() else { return };
    let cpu = tensorfem::device::Cpu::new();
    let n = 70_001;
    let (x, y, d, z) = (random(1, n), random(2, n), random(3, n), random(4, n));
    for p in ALL {
        macro_rules! run {
            ($dev:expr) => {{
                let dev = $dev;
                let v = |h: &[f64]| Data::from_f64(dev, h, p).unwrap();
                let (xd, dd, zd) = (v(&x), v(&d), v(&z));
                let mut out = Vec::new();
                let mut yd = v(&y);
                dev.fill(yd.slice_mut(10..20), 0.375).unwrap();
                dev.axpby(0.5, xd.view(), -1.25, yd.view_mut()).unwrap();
                dev.scale(1.5, yd.slice_mut(100..n)).unwrap();
                dev.shift(yd.slice_mut(0..n - 7), 0.125).unwrap();
                out.extend(yd.to_f64(dev).unwrap());
                let mut w = v(&y);
                dev.scaled_product(0.75, dd.view(), xd.view(), w.view_mut())
                    .unwrap();
                out.extend(w.to_f64(dev).unwrap());
                dev.scaled_product_add(0.5, dd.view(), xd.view(), zd.view(), w.view_mut())
                    .unwrap();
                out.extend(w.to_f64(dev).unwrap());
                out
            }};
        }
        close(
            &format!("element-wise {p}"),
            p,
            &run!(&gpu),
            &run!(&cpu),
            tolerance(p),
        );
    }
}

#[test]
fn copies_relayouts_and_column_kernels_match_the_cpu() {
    covers(&[
        "convert_f16_f32",
        "convert_f16_f64",
        "convert_f32_f16",
        "convert_f32_f64",
        "convert_f64_f16",
        "convert_f64_f32",
        "relayout_f16",
        "relayout_f16_f32",
        "relayout_f16_f64",
        "relayout_f32_f16",
        "relayout_f32",
        "relayout_f32_f64",
        "relayout_f64_f16",
        "relayout_f64_f32",
        "relayout_f64",
        "column_axpby_f16",
        "column_axpby_f32",
        "column_axpby_f64",
        "column_stats_f16",
        "column_stats_f32",
        "column_stats_f64",
        "stats_reduce",
        "column_dots_f16",
        "column_dots_f32",
        "column_dots_f64",
        "sums_reduce",
        "scale_columns_f16",
        "scale_columns_f16_f32",
        "scale_columns_f16_f64",
        "scale_columns_f32_f16",
        "scale_columns_f32",
        "scale_columns_f32_f64",
        "scale_columns_f64_f16",
        "scale_columns_f64_f32",
        "scale_columns_f64",
        "sum_partials_f32",
        "sum_partials_f64",
    ]);
    let Some(gpu) = gpu() else { return };
    let cpu = tensorfem::device::Cpu::new();
    // More rows than one reduction chunk, and a column count that is not a power of two.
    let (rows, cols) = (40_003, 5);
    let (x, y) = (random(5, rows * cols), random(6, rows * cols));
    let alpha: Vec<f64> = (0..cols).map(|c| 0.5 + c as f64).collect();
    let beta: Vec<f64> = (0..cols).map(|c| 1.0 - 0.25 * c as f64).collect();
    let scale = [2.0, 0.5, 0.0, 4.0, 1.0];
    for a in ALL {
        for layout in LAYOUTS {
            let other = match layout {
                Layout::ColMajor => Layout::NodeMajor,
                Layout::NodeMajor => Layout::ColMajor,
            };
            macro_rules! run {
                ($dev:expr) => {{
                    let dev = $dev;
                    let mut out = Parts::default();
                    let xb = block(dev, &x, rows, cols, a, layout);
                    let mut yb = block(dev, &y, rows, cols, a, layout);
                    dev.column_axpby(&alpha, &xb, &beta, &mut yb).unwrap();
                    out.add("column_axpby", a, yb.to_f64(dev).unwrap());
                    let mut stats = Stats::new(dev, cols).unwrap();
                    dev.column_stats(&yb, &mut stats).unwrap();
                    out.add("column_stats", a, stats_of(dev, &mut stats));
                    let mut dots = vec![0.0; cols];
                    let mut scratch = Scratch::new(dev).unwrap();
                    dev.column_dots(&xb, &yb, &mut dots, &mut scratch).unwrap();
                    out.add_sum("column_dots", a, dots);
                    for b in ALL {
                        let mut moved = Block::zeros(dev, rows, cols, b, other).unwrap();
                        dev.relayout(&xb, &mut moved).unwrap();
                        out.add("relayout", b, moved.to_f64(dev).unwrap());
                        let mut scaled = Block::zeros(dev, rows, cols, b, layout).unwrap();
                        dev.scale_columns(&xb, &scale, &mut scaled, &mut stats)
                            .unwrap();
                        out.add("scale_columns", b, scaled.to_f64(dev).unwrap());
                        out.add("scale_columns statistics", b, stats_of(dev, &mut stats));
                        let mut copied = Block::zeros(dev, rows, cols, b, layout).unwrap();
                        dev.copy(xb.view(), copied.view_mut()).unwrap();
                        out.add("copy", b, copied.to_f64(dev).unwrap());
                    }
                    if a != F16 {
                        out.add_sum("sum", a, vec![dev.sum(xb.view()).unwrap()]);
                        out.add_sum("dot", a, vec![dev.dot(xb.view(), yb.view()).unwrap()]);
                        out.add_sum("nrm2", a, vec![dev.nrm2(xb.view()).unwrap()]);
                    }
                    out
                }};
            }
            run!(&gpu).compare(&run!(&cpu), &format!("{a} {layout:?}"));
        }
    }
}

#[test]
fn dense_products_match_the_cpu() {
    covers(&[
        "gemv_partial_f16_f32",
        "gemv_partial_f32",
        "gemv_partial_f64",
        "gemv_reduce_f32",
        "gemv_reduce_f64",
        "symv_f16_f32",
        "symv_f32",
        "symv_f64",
    ]);
    let Some(gpu) = gpu() else { return };
    let cpu = tensorfem::device::Cpu::new();
    let (m, k, n) = (67, 45, 33);
    let (a, b) = (random(7, m * k), random(8, k * n));
    for (s, c, math) in [
        (F16, F16, GemmMath::Full),
        (F16, F32, GemmMath::Full),
        (F32, F32, GemmMath::Full),
        (F32, F32, GemmMath::Tf32),
        (F64, F64, GemmMath::Full),
    ] {
        for transposed in [false, true] {
            macro_rules! run {
                ($dev:expr) => {{
                    let dev = $dev;
                    let mut out = Parts::default();
                    let ad = Data::from_f64(dev, &a, s).unwrap();
                    let bd = Data::from_f64(dev, &b, s).unwrap();
                    let mut cd = Data::zeros(dev, m * n, c).unwrap();
                    // A as stored (m × k, ld m) or as the transpose of a k × m matrix.
                    let a_op = if transposed {
                        MatRef::transposed(&ad, 0, m, k, k)
                    } else {
                        MatRef::col_major(&ad, 0, m, k, m)
                    };
                    dev.gemm(
                        a_op,
                        MatRef::col_major(&bd, 0, k, n, k),
                        MatMut::col_major(&mut cd, 0, m, n, m),
                        math,
                    )
                    .unwrap();
                    let product = if math == GemmMath::Tf32 { Tf32 } else { c };
                    out.add_sum("gemm", product, cd.to_f64(dev).unwrap());
                    if c == s.compute() && math == GemmMath::Full {
                        let x = Data::from_f64(dev, &b[..k], c).unwrap();
                        let mut y = Data::zeros(dev, m, c).unwrap();
                        dev.gemv(MatRef::col_major(&ad, 0, m, k, m), x.view(), y.view_mut())
                            .unwrap();
                        out.add_sum("gemv", c, y.to_f64(dev).unwrap());
                    }
                    out
                }};
            }
            run!(&gpu).compare(
                &run!(&cpu),
                &format!("{s}→{c} in {math:?} transposed {transposed}"),
            );
        }
    }
    // GEMV of a short, wide matrix (B's shape) in column slices: 13 × 300 with ld 16, five
    // slices of 64 columns, the last one partly filled.
    let (rows, cols, ld) = (13, 300, 16);
    let wide = random(11, ld * cols);
    let x = random(12, cols);
    for s in [F16, F32, F64] {
        macro_rules! run {
            ($dev:expr) => {{
                let dev = $dev;
                let mut out = Parts::default();
                let ad = Data::from_f64(dev, &wide, s).unwrap();
                let xd = Data::from_f64(dev, &x, s.compute()).unwrap();
                let mut y = Data::zeros(dev, rows, s.compute()).unwrap();
                dev.gemv(
                    MatRef::col_major(&ad, 0, rows, cols, ld),
                    xd.view(),
                    y.view_mut(),
                )
                .unwrap();
                out.add_sum("gemv", s.compute(), y.to_f64(dev).unwrap());
                out
            }};
        }
        run!(&gpu).compare(&run!(&cpu), &format!("wide GEMV {s}"));
    }
    // SYMV: unaligned columns (n = 45), aligned columns with a tail of single values
    // (n = 68 in columns of 72) and aligned columns without one (n = 200).
    for (n, ld) in [(45, 45), (68, 72), (200, 200)] {
        let mut sym = random(9, ld * n);
        for j in 0..n {
            for i in 0..j {
                sym[i + j * ld] = sym[j + i * ld];
            }
        }
        let x = random(10, n);
        for s in [F16, F32, F64] {
            macro_rules! run {
                ($dev:expr) => {{
                    let dev = $dev;
                    let mut out = Parts::default();
                    let ad = Data::from_f64(dev, &sym, s).unwrap();
                    let xd = Data::from_f64(dev, &x, s.compute()).unwrap();
                    let mut y = Data::zeros(dev, n, s.compute()).unwrap();
                    dev.symv(MatRef::col_major(&ad, 0, n, n, ld), xd.view(), y.view_mut())
                        .unwrap();
                    out.add_sum("symv", s.compute(), y.to_f64(dev).unwrap());
                    out
                }};
            }
            run!(&gpu).compare(&run!(&cpu), &format!("symv {s} n = {n}, ld = {ld}"));
        }
    }
    // Gram-Schmidt on f64 vectors.
    let len = 5_000;
    macro_rules! gram_schmidt {
        ($dev:expr) => {{
            let dev = $dev;
            let basis: Vec<Block<_>> = (0..3)
                .map(|j| block(dev, &random(20 + j, len), len, 1, F64, Layout::ColMajor))
                .collect();
            let mut w = block(dev, &random(30, len), len, 1, F64, Layout::ColMajor);
            let mut h = vec![0.0; 3];
            let mut scratch = Scratch::new(dev).unwrap();
            let (before, after) = dev
                .orthogonalize(&basis, &mut w, &mut h, &mut scratch)
                .unwrap();
            let mut out = Parts::default();
            out.add_sum(
                "orthogonalize",
                F64,
                [vec![before, after], h, w.to_f64(dev).unwrap()].concat(),
            );
            out
        }};
    }
    gram_schmidt!(&gpu).compare(&gram_schmidt!(&cpu), "orthogonalize");
}

/// A random sparse n × n matrix with about `per_row` entries per row, diagonal first.
fn sparse_matrix(seed: u64, n: usize, per_row: usize) -> Csr<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut row_ptr, mut cols, mut vals) = (vec![0], vec![], vec![]);
    for i in 0..n {
        let mut row: Vec<u32> = (0..per_row)
            .map(|_| rng.random_range(0..n as u32))
            .collect();
        row.push(i as u32);
        row.sort_unstable();
        row.dedup();
        for c in row {
            cols.push(c);
            vals.push(if c as usize == i {
                4.0
            } else {
                rng.random_range(-1.0..1.0)
            });
        }
        row_ptr.push(cols.len());
    }
    Csr::new(n, n, row_ptr, cols, vals).unwrap()
}

#[test]
fn sparse_products_match_the_cpu() {
    covers(&[
        "csr_spmm_f16_f32",
        "csr_spmm_f32",
        "csr_spmm_f64",
        "csr_subtract_f16_f32",
        "csr_subtract_f16_f32_f16",
        "csr_subtract_f32",
        "csr_subtract_f64",
        "csr_residual_f64",
        "csr_refine_update_f16",
        "csr_refine_update_f32",
        "csr_refine_update_f64",
    ]);
    let Some(gpu) = gpu() else { return };
    let cpu = tensorfem::device::Cpu::new();
    let (n, k) = (20_011, 3);
    let a = sparse_matrix(9, n, 6);
    let (x, b) = (random(10, n * k), random(11, n * k));
    let alpha = [1.0, -0.5, 0.25];
    for s in ALL {
        macro_rules! run {
            ($dev:expr) => {{
                let dev = $dev;
                let mut out = Parts::default();
                let c = s.compute();
                let stored: Csr<f64> = a.clone();
                let am = match s {
                    F16 => CsrMatrix::upload(dev, &stored.convert::<half::f16>().unwrap()).unwrap(),
                    F32 | Tf32 => {
                        CsrMatrix::upload(dev, &stored.convert::<f32>().unwrap()).unwrap()
                    }
                    F64 => CsrMatrix::upload(dev, &stored).unwrap(),
                };
                let xb = block(dev, &x, n, k, c, Layout::ColMajor);
                let mut yb = Block::zeros(dev, n, k, c, Layout::ColMajor).unwrap();
                dev.csr_spmm(&am, &xb, &mut yb).unwrap();
                out.add_sum("csr_spmm", c, yb.to_f64(dev).unwrap());
                // y = b − A x into the compute precision and into the storage one.
                let bc = block(dev, &b, n, k, c, Layout::ColMajor);
                let storage = s.storage();
                for out_p in if storage == c {
                    vec![c]
                } else {
                    vec![c, storage]
                } {
                    let mut yd = Block::zeros(dev, n, k, out_p, Layout::ColMajor).unwrap();
                    dev.csr_subtract(&am, &xb, &bc, &mut yd).unwrap();
                    out.add_sum("csr_subtract", out_p, yd.to_f64(dev).unwrap());
                }

                let a64 = CsrMatrix::upload(dev, &a).unwrap();
                let bb = block(dev, &b, n, k, F64, Layout::ColMajor);
                let mut xx = block(dev, &x, n, k, F64, Layout::ColMajor);
                let mut r = Block::zeros(dev, n, k, F64, Layout::ColMajor).unwrap();
                let mut stats = Stats::new(dev, k).unwrap();
                dev.csr_residual(&a64, &bb, &xx, &mut r, &mut stats)
                    .unwrap();
                out.add_sum("csr_residual", F64, r.to_f64(dev).unwrap());
                out.add_sum("csr_residual statistics", F64, stats_of(dev, &mut stats));
                let correction = block(dev, &random(12, n * k), n, k, s, Layout::ColMajor);
                dev.csr_refine_update(&a64, &correction, &alpha, &mut xx, &mut r, &mut stats)
                    .unwrap();
                out.add_sum("refine x", F64, xx.to_f64(dev).unwrap());
                out.add_sum("refine r", F64, r.to_f64(dev).unwrap());
                out.add_sum("refine statistics", F64, stats_of(dev, &mut stats));
                out
            }};
        }
        run!(&gpu).compare(&run!(&cpu), &format!("sparse {s}"));
    }
}

#[test]
fn psc_passes_match_the_cpu() {
    covers(&[
        "hierarchical_forward_f32",
        "hierarchical_forward_f64",
        "hierarchical_transpose_f32",
        "hierarchical_transpose_f64",
        "row_update_f32",
        "row_update_f64",
        "psc_gather_f32",
        "psc_gather_scale_f32",
        "psc_gather_f64",
        "psc_gather_scale_f64",
        "psc_scatter_f32",
        "psc_scatter_f64",
    ]);
    let Some(gpu) = gpu() else { return };
    let cpu = tensorfem::device::Cpu::new();
    let (n, levels, k) = (24, 3, 3);
    let len = (n - 1) * (n - 1);
    let x = random(13, len * k);
    // Classes: a seeded permutation of the unknowns cut into C, E, I.
    let mut order: Vec<u32> = (0..len as u32).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let (nc, ne) = (9, 60);
    let (c_dofs, e_dofs, i_dofs) = (&order[..nc], &order[nc..nc + ne], &order[nc + ne..]);
    let mut l_c_inv = random(15, nc * nc);
    for j in 0..nc {
        for i in 0..j {
            l_c_inv[i + j * nc] = 0.0;
        }
    }
    let scale_e: Vec<f64> = random(16, ne).iter().map(|v| 1.0 + v.abs()).collect();
    let scale_i: Vec<f64> = random(17, len - nc - ne)
        .iter()
        .map(|v| 1.0 + v.abs())
        .collect();
    for p in [F32, F64] {
        for cell_parents in [CellParents::Corners, CellParents::Diagonal] {
            let grid = GridTransform {
                n,
                levels,
                cell_parents,
            };
            macro_rules! run {
                ($dev:expr) => {{
                    let dev = $dev;
                    let t = HierarchicalTransform::Grid(grid);
                    let mut out = Parts::default();
                    let mut xb = block(dev, &x, len, k, p, Layout::ColMajor);
                    dev.hierarchical_transform(&t, &mut xb, true).unwrap();
                    out.add_sum("Sᵀ", p, xb.to_f64(dev).unwrap());
                    let classes = Classes::upload(
                        dev, c_dofs, e_dofs, i_dofs, &l_c_inv, &scale_e, &scale_i, p,
                    )
                    .unwrap();
                    let zeros = |rows| Block::zeros(dev, rows, k, p, Layout::ColMajor).unwrap();
                    let (mut bc, mut be, mut bi) = (zeros(nc), zeros(ne), zeros(len - nc - ne));
                    let mut column_scale = Data::zeros(dev, k, p).unwrap();
                    dev.psc_gather(&classes, &xb, &mut bc, &mut be, &mut bi, &mut column_scale)
                        .unwrap();
                    for (what, part) in [("b_C", &bc), ("b_E", &be), ("b_I", &bi)] {
                        out.add_sum(what, p, part.to_f64(dev).unwrap());
                    }
                    out.add_sum("column scale", p, column_scale.to_f64(dev).unwrap());
                    dev.psc_scatter(&classes, &bc, &be, &bi, &column_scale, &mut xb)
                        .unwrap();
                    out.add_sum("scatter", p, xb.to_f64(dev).unwrap());
                    dev.hierarchical_transform(&t, &mut xb, false).unwrap();
                    out.add_sum("S", p, xb.to_f64(dev).unwrap());
                    out
                }};
            }
            run!(&gpu).compare(&run!(&cpu), &format!("PSC passes {p} {cell_parents:?}"));
        }
        // S and Sᵀ as sparse level rows, on a mesh without a grid.
        let mesh =
            tensorfem::mesh::refine(&tensorfem::mesh::CoarseMesh::flow_around_square(), 3).unwrap();
        let hb = tensorfem::psc::HierarchicalBasis::new(&mesh).unwrap();
        let x = random(18, hb.len() * k);
        macro_rules! run {
            ($dev:expr) => {{
                let dev = $dev;
                let t = hb.transform(dev, p).unwrap();
                let mut out = Parts::default();
                let mut xb = block(dev, &x, hb.len(), k, p, Layout::ColMajor);
                dev.hierarchical_transform(&t, &mut xb, true).unwrap();
                out.add_sum("Sᵀ", p, xb.to_f64(dev).unwrap());
                dev.hierarchical_transform(&t, &mut xb, false).unwrap();
                out.add_sum("S Sᵀ", p, xb.to_f64(dev).unwrap());
                out
            }};
        }
        run!(&gpu).compare(&run!(&cpu), &format!("PSC level rows {p}"));
    }
}

/// The row passes of one level matrix in every precision: the three sweeps, the first
/// Jacobi step and the refinement update with a correction in each precision (A, u, r in
/// f64), with their statistics; the matrix stored as `storage` asks on `grid`.
fn row_passes<D: MultigridDevice>(
    dev: &D,
    out: &mut Parts,
    case: &str,
    (a, grid, storage): (&Csr<f64>, Option<GridShape>, MatrixStorage),
    nrhs: usize,
    seed: u64,
) {
    let n = a.nrows();
    let ell = Ell::from_csr_diagonal_first(a, dev.ell_layout()).unwrap();
    let node = |v: &[f64], rows, p| block(dev, v, rows, nrhs, p, Layout::NodeMajor);
    let (x, b) = (random(seed, n * nrhs), random(seed + 1, n * nrhs));
    for p in ALL {
        let matrix = EllMatrix::upload_stored(dev, &ell, p, storage, grid).unwrap();
        let without_indices = storage == MatrixStorage::Grid && dev.reads_grid_rows();
        assert_eq!(matrix.grid.is_some(), without_indices, "{case}");
        let (xb, bb) = (node(&x, n, p), node(&b, n, p));
        let mut result = node(&vec![0.0; n * nrhs], n, p);
        let mut stats = Stats::new(dev, nrhs).unwrap();
        let chebyshev = |previous_zero| RowOp::Chebyshev {
            omega: 0.8,
            momentum: 0.4,
            previous_zero,
        };
        let correction = |previous_zero| RowOp::Correction {
            omega: 0.8,
            momentum: 0.3,
            previous_zero,
        };
        // The Chebyshev steps and corrections read the previous op's result as the
        // previous iterate.
        for op in [
            RowOp::Apply,
            RowOp::Residual,
            RowOp::Jacobi { omega: 0.8 },
            chebyshev(false),
            chebyshev(true),
            RowOp::Scaled { omega: 0.8 },
            correction(false),
            correction(true),
        ] {
            let b = op.reads_b().then_some(&bb);
            dev.ell_sweep(&matrix, op, &xb, b, &mut result, &mut stats)
                .unwrap();
            out.add(&format!("{case}{op:?}"), p, result.to_f64(dev).unwrap());
            out.add_sum(
                &format!("{case}{op:?} statistics"),
                p,
                stats_of(dev, &mut stats),
            );
        }
        dev.ell_jacobi_from_zero(&matrix, 0.8, &bb, &mut result, &mut stats)
            .unwrap();
        out.add(
            &format!("{case}Jacobi from zero"),
            p,
            result.to_f64(dev).unwrap(),
        );
        out.add_sum(
            &format!("{case}Jacobi from zero statistics"),
            p,
            stats_of(dev, &mut stats),
        );
        let f64_matrix = EllMatrix::upload_stored(dev, &ell, F64, storage, grid).unwrap();
        let correction = node(&random(seed + 2, n * nrhs), n, p);
        let alpha: Vec<f64> = (0..nrhs).map(|c| 0.5 + c as f64).collect();
        let (mut u, mut r) = (node(&x, n, F64), node(&b, n, F64));
        dev.ell_refine_update(&f64_matrix, &correction, &alpha, &mut u, &mut r, &mut stats)
            .unwrap();
        out.add(&format!("{case}refinement u"), F64, u.to_f64(dev).unwrap());
        out.add(&format!("{case}refinement r"), F64, r.to_f64(dev).unwrap());
        out.add_sum(
            &format!("{case}refinement statistics"),
            F64,
            stats_of(dev, &mut stats),
        );
    }
}

/// The multigrid kernels of one device on seeded inputs: sweeps, the first Jacobi step and
/// the refinement update of the 2D Q1 stencil, indexed and (2D and 3D) stored without
/// indices where the device reads that (the GPU; the CPU keeps the indices: the same values
/// in the same order), grid transfers in 2D and 3D and matrix transfers between every pair
/// of precisions, with their statistics; blocks of 1, 5 and 40 columns (one lane, a partly
/// idle group of lanes, two column blocks).
fn multigrid_parts<D: MultigridDevice>(dev: &D, nrhs: usize) -> Parts {
    let mut out = Parts::default();
    let node = |v: &[f64], rows, p| block(dev, v, rows, nrhs, p, Layout::NodeMajor);
    let square = tensorfem::mg::assemble_level(2, 16).unwrap();
    row_passes(
        dev,
        &mut out,
        "",
        (&square, None, MatrixStorage::Indexed),
        nrhs,
        30,
    );
    for (dim, cells) in [(2, 16), (3, 8)] {
        let a = tensorfem::mg::assemble_level(dim, cells).unwrap();
        let grid = Some(GridShape { dim, m: cells - 1 });
        let case = format!("{dim}D grid rows: ");
        row_passes(
            dev,
            &mut out,
            &case,
            (&a, grid, MatrixStorage::Grid),
            nrhs,
            35,
        );
    }
    // Transfers: the last column inactive (scale 0), the others scaled.
    let scale: Vec<f64> = (0..nrhs)
        .map(|c| {
            if c + 1 == nrhs && nrhs > 1 {
                0.0
            } else {
                1.0 + 0.25 * c as f64
            }
        })
        .collect();
    for dim in [2, 3] {
        let (fine, coarse) = (GridShape { dim, m: 7 }, GridShape { dim, m: 3 });
        let prolongation = grid_prolongation(fine, coarse);
        let transfers = [
            LevelTransfer::Grid { fine, coarse },
            LevelTransfer::matrix(dev, &prolongation).unwrap(),
        ];
        let (nf, nc) = (fine.points(), coarse.points());
        let (f, c) = (random(33, nf * nrhs), random(34, nc * nrhs));
        for (t, transfer) in transfers.iter().enumerate() {
            for sp in ALL {
                for tp in ALL {
                    let case = format!("{dim}D transfer {t} {sp}→{tp}");
                    let mut stats = Stats::new(dev, nrhs).unwrap();
                    let mut coarse_block = node(&c, nc, tp);
                    dev.restrict(
                        transfer,
                        &node(&f, nf, sp),
                        &mut coarse_block,
                        &scale,
                        &mut stats,
                    )
                    .unwrap();
                    // The column the restriction flushed to zero (the last: its scale is 0),
                    // checked where the statistics are.
                    let mut fine_stats = Stats::new(dev, nrhs).unwrap();
                    dev.column_stats(&node(&f, nf, sp), &mut fine_stats)
                        .unwrap();
                    let mut log = FlagLog::new(dev).unwrap();
                    log.reserve(dev, 2).unwrap();
                    dev.log_flushed_column(&fine_stats, &stats, tp.tiny() / 2.0, &mut log)
                        .unwrap();
                    let flushed = log.read(dev).unwrap().to_vec();
                    out.add(&format!("{case} flushed column"), F64, flushed);
                    out.add(
                        &format!("{case} restrict"),
                        tp,
                        coarse_block.to_f64(dev).unwrap(),
                    );
                    out.add_sum(
                        &format!("{case} restrict statistics"),
                        tp,
                        stats_of(dev, &mut stats),
                    );
                    let mut fine_block = node(&f, nf, tp);
                    dev.prolongate_add(
                        transfer,
                        &node(&c, nc, sp),
                        &mut fine_block,
                        &scale,
                        &mut stats,
                    )
                    .unwrap();
                    out.add(
                        &format!("{case} prolongate"),
                        tp,
                        fine_block.to_f64(dev).unwrap(),
                    );
                    out.add_sum(
                        &format!("{case} prolongate statistics"),
                        tp,
                        stats_of(dev, &mut stats),
                    );
                }
            }
        }
    }
    out
}

/// The bilinear (trilinear) interpolation between two grids as a CSR matrix (fine × coarse).
fn grid_prolongation(fine: GridShape, coarse: GridShape) -> Csr<f64> {
    let weights_1d = |i: usize| -> Vec<(usize, f64)> {
        if i % 2 == 1 {
            vec![((i - 1) / 2, 1.0)]
        } else {
            [
                (i / 2).checked_sub(1),
                Some(i / 2).filter(|&r| r < coarse.m),
            ]
            .into_iter()
            .flatten()
            .map(|r| (r, 0.5))
            .collect()
        }
    };
    let (mf, mc) = (fine.m, coarse.m);
    let (mut row_ptr, mut col_idx, mut values) = (vec![0], Vec::new(), Vec::new());
    for point in 0..fine.points() {
        let (i, j, k) = (point % mf, (point / mf) % mf, point / (mf * mf));
        let zs = if fine.dim == 2 {
            vec![(0, 1.0)]
        } else {
            weights_1d(k)
        };
        // Columns in increasing order: z, then y, then x.
        for &(z, wz) in &zs {
            for &(y, wy) in &weights_1d(j) {
                for &(x, wx) in &weights_1d(i) {
                    col_idx.push((x + mc * (y + mc * z)) as u32);
                    values.push(wx * wy * wz);
                }
            }
        }
        row_ptr.push(col_idx.len());
    }
    Csr::new(fine.points(), coarse.points(), row_ptr, col_idx, values).unwrap()
}

#[test]
fn multigrid_kernels_match_the_cpu() {
    covers(&[
        "ell_sweep_f16",
        "ell_sweep_f32",
        "ell_sweep_f64",
        "ell_jacobi_from_zero_f16",
        "ell_jacobi_from_zero_f32",
        "ell_jacobi_from_zero_f64",
        "ell_refine_update_f16",
        "ell_refine_update_f32",
        "ell_refine_update_f64",
        "grid_sweep_f16",
        "grid_sweep_f32",
        "grid_sweep_f64",
        "grid_refine_update_f16",
        "grid_refine_update_f32",
        "grid_refine_update_f64",
        "grid_restrict_f16",
        "grid_restrict_f16_f32",
        "grid_restrict_f16_f64",
        "grid_restrict_f32_f16",
        "grid_restrict_f32",
        "grid_restrict_f32_f64",
        "grid_restrict_f64_f16",
        "grid_restrict_f64_f32",
        "grid_restrict_f64",
        "grid_prolongate_add_f16",
        "grid_prolongate_add_f16_f32",
        "grid_prolongate_add_f16_f64",
        "grid_prolongate_add_f32_f16",
        "grid_prolongate_add_f32",
        "grid_prolongate_add_f32_f64",
        "grid_prolongate_add_f64_f16",
        "grid_prolongate_add_f64_f32",
        "grid_prolongate_add_f64",
        "matrix_transfer_f16",
        "matrix_transfer_f16_f32",
        "matrix_transfer_f16_f64",
        "matrix_transfer_f32_f16",
        "matrix_transfer_f32",
        "matrix_transfer_f32_f64",
        "matrix_transfer_f64_f16",
        "matrix_transfer_f64_f32",
        "matrix_transfer_f64",
        "flushed_column",
    ]);
    // The CPU's side runs without a GPU too, so the test itself is exercised everywhere.
    let cpu = tensorfem::device::Cpu::new();
    let reference: Vec<Parts> = [1, 5, 40].map(|nrhs| multigrid_parts(&cpu, nrhs)).into();
    let Some(gpu) = gpu() else { return };
    for (nrhs, cpu_parts) in [1, 5, 40].into_iter().zip(&reference) {
        multigrid_parts(&gpu, nrhs).compare(cpu_parts, &format!("{nrhs} columns"));
    }
}

/// The Stokes kernels of one device on the manufactured operator of an 8×8 mesh stored in
/// `p`, with seeded vectors in its compute precision: A x and b − A x, L, Bᵀ, B, a 3×3 and
/// a 5×5 pressure stencil, the four grid transfers, Vanka's gather, patch products (from
/// the first column and from a later one) and scatter, and the coarsest dense solve.
fn stokes_parts<D: tensorfem::device::StokesDevice>(dev: &D, p: Precision) -> Parts {
    use tensorfem::device::stokes::{CoarseSolve, Transfer, PATCH};
    let mut out = Parts::default();
    let c = p.compute();
    let op = tensorfem::stokes::StokesProblem::manufactured(8).operator;
    let g = op.grid;
    let a = op.upload(dev, p).unwrap();
    let vector = |seed, len| Block::from_f64(dev, &random(seed, len), len, 1, c, Layout::ColMajor);
    let (x, b) = (
        vector(40, g.flow_len()).unwrap(),
        vector(41, g.flow_len()).unwrap(),
    );
    let mut y = vector(42, g.flow_len()).unwrap();
    dev.stokes_apply(&a, &x, None, &mut y).unwrap();
    out.add("A x", c, y.to_f64(dev).unwrap());
    dev.stokes_apply(&a, &x, Some(&b), &mut y).unwrap();
    out.add("b − A x", c, y.to_f64(dev).unwrap());
    let [ux, _, pressure] = g.parts();
    let mut lattice = vector(43, g.lattice_len()).unwrap();
    dev.stokes_laplacian(&a, x.data.slice(ux), lattice.view_mut())
        .unwrap();
    out.add("L ux", c, lattice.to_f64(dev).unwrap());
    dev.stokes_gradient(&a, x.data.slice(pressure.clone()), &mut y)
        .unwrap();
    out.add("Bᵀ p", c, y.to_f64(dev).unwrap());
    let mut q = vector(44, g.pressure_len()).unwrap();
    dev.stokes_divergence(&a, &x, q.view_mut()).unwrap();
    out.add("B u", c, q.to_f64(dev).unwrap());
    dev.pressure_stencil(&a.mass, x.data.slice(pressure.clone()), q.view_mut())
        .unwrap();
    out.add("M p", c, q.to_f64(dev).unwrap());
    let wide = tensorfem::stokes::lattice::HostPressureRows {
        grid: g,
        scale: 0.25,
        width: 25,
        coefficients: random(45, 25 * g.pressure_len()),
    }
    .upload(dev, p)
    .unwrap();
    dev.pressure_stencil(&wide, x.data.slice(pressure), q.view_mut())
        .unwrap();
    out.add("5×5 stencil", c, q.to_f64(dev).unwrap());

    // Transfers between the 4×4 and 8×8 meshes, in the vectors' precision.
    for kind in [
        Transfer::Q2Prolong,
        Transfer::Q2Restrict,
        Transfer::Q1Prolong,
        Transfer::Q1Restrict,
    ] {
        let (from, to) = kind.lens(4);
        let input = vector(46, from).unwrap();
        let mut output = vector(47, to).unwrap();
        dev.stokes_transfer(kind, 4, input.view(), output.view_mut())
            .unwrap();
        out.add(&format!("{kind:?}"), c, output.to_f64(dev).unwrap());
    }

    // Vanka on a permutation of the patches, three stored inverses shared.
    let patches = g.pressure_len();
    let (maps, _) = common::permuted_vanka_maps(dev, g, 3);
    let inverses = Data::from_f64(dev, &random(48, 3 * PATCH * PATCH), p).unwrap();
    let mut gathered = Data::zeros(dev, patches * PATCH, c).unwrap();
    dev.vanka_gather(g, &x, &maps, 8.0, &mut gathered).unwrap();
    out.add("Vanka gather", c, gathered.to_f64(dev).unwrap());
    let mut corrections = Data::from_f64(dev, &random(49, patches * PATCH), c).unwrap();
    for first in [0, patches - 5] {
        dev.vanka_products(&inverses, &maps, first, &gathered, &mut corrections)
            .unwrap();
        out.add_sum(
            &format!("Vanka products from column {first}"),
            c,
            corrections.to_f64(dev).unwrap(),
        );
    }
    let mut relaxed = vector(50, g.flow_len()).unwrap();
    dev.vanka_scatter(g, &corrections, &maps, 0.7, 8.0, &mut relaxed)
        .unwrap();
    out.add_sum("Vanka scatter", c, relaxed.to_f64(dev).unwrap());

    // The dense solve on every third flow entry, one bordering row more.
    let positions: Vec<u32> = (0..g.flow_len() as u32).step_by(3).collect();
    let size = positions.len() + 1;
    let solve = CoarseSolve {
        unknowns: positions.len(),
        positions: dev.upload(&positions).unwrap(),
        size,
        inverse: Data::from_f64(dev, &random(51, size * size), F64).unwrap(),
    };
    dev.coarse_solve(&solve, x.view(), y.view_mut()).unwrap();
    out.add_sum("coarse solve", c, y.to_f64(dev).unwrap());
    out
}

#[test]
fn stokes_kernels_match_the_cpu() {
    covers(&[
        "stokes_apply_f16",
        "stokes_apply_f32",
        "stokes_apply_f64",
        "stokes_laplacian_f16",
        "stokes_laplacian_f32",
        "stokes_laplacian_f64",
        "stokes_gradient_f16",
        "stokes_gradient_f32",
        "stokes_gradient_f64",
        "stokes_divergence_f16",
        "stokes_divergence_f32",
        "stokes_divergence_f64",
        "pressure_stencil_f16",
        "pressure_stencil_f32",
        "pressure_stencil_f64",
        "stokes_transfer_f32",
        "stokes_transfer_f64",
        "vanka_gather_f32",
        "vanka_gather_f64",
        "vanka_products_f16",
        "vanka_products_f32",
        "vanka_products_f64",
        "vanka_scatter_f32",
        "vanka_scatter_f64",
        "coarse_solve_f32",
        "coarse_solve_f64",
    ]);
    // The CPU's side runs without a GPU too, so the test itself is exercised everywhere.
    let cpu = tensorfem::device::Cpu::new();
    let reference = ALL.map(|p| stokes_parts(&cpu, p));
    let Some(gpu) = gpu() else { return };
    for (p, cpu_parts) in ALL.into_iter().zip(&reference) {
        stokes_parts(&gpu, p).compare(cpu_parts, &format!("Stokes stored in {p}"));
    }
}

/// Whole Stokes solves on the GPU against the CPU backend: every preconditioner in every
/// storage precision on a 32×32 mesh reaches the same relative residual in the same number
/// of FGMRES iterations (or one more or fewer), and the flows agree to the precision's
/// bound: the two backends differ only in summation order (cuBLAS's GEMM of tuned Vanka,
/// the reductions of the Krylov dot products).
#[test]
fn stokes_solves_match_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let cpu = tensorfem::device::Cpu::new();
    for name in tensorfem::stokes::Preconditioner::NAMES {
        for p in ALL {
            let spec = tensorfem::stokes::StokesSpec {
                n: 32,
                preconditioner: tensorfem::stokes::Preconditioner::by_name(name).unwrap(),
                precision: p,
                fgmres: tensorfem::linalg::FgmresParams {
                    restart: 30,
                    rtol: 1e-10,
                    atol: 0.0,
                    max_iterations: 300,
                },
            };
            let on_gpu = tensorfem::stokes::solve(&gpu, &spec).unwrap();
            let on_cpu = cpu.run(|| tensorfem::stokes::solve(&cpu, &spec)).unwrap();
            let case = format!("{name} in {p}");
            assert!(
                on_gpu.info.iterations.abs_diff(on_cpu.info.iterations) <= 1,
                "{case}: {} FGMRES iterations on the GPU, {} on the CPU",
                on_gpu.info.iterations,
                on_cpu.info.iterations
            );
            assert!(
                on_gpu.info.relative_residual <= 1e-10,
                "{case}: {:?}",
                on_gpu.info
            );
            // Both solve to 1e-10 of the same system (κ ≈ 10⁴ at n = 32): the flows agree
            // to about κ · 1e-10 relative, far below the discretization error.
            close(
                &format!("{case}: flow"),
                p,
                &on_gpu.flow,
                &on_cpu.flow,
                1e-5,
            );
            let rel = |a: f64, b: f64| (a / b - 1.0).abs();
            assert!(
                rel(on_gpu.velocity_l2_error, on_cpu.velocity_l2_error) < 1e-3
                    && rel(on_gpu.pressure_l2_error, on_cpu.pressure_l2_error) < 1e-3,
                "{case}: errors {} {} on the GPU, {} {} on the CPU",
                on_gpu.velocity_l2_error,
                on_gpu.pressure_l2_error,
                on_cpu.velocity_l2_error,
                on_cpu.pressure_l2_error
            );
        }
    }
}

/// Block CG's device-side scalars: dots into the buffer, the three steps of the scalar
/// logic (some columns with p·Ap ≤ 0 or a norm below the target), and the updates reading
/// α and β from it; 1, 5 and 300 columns (more than one block's threads).
fn cg_parts<D: tensorfem::device::VectorKernels>(dev: &D, cols: usize) -> Parts {
    use tensorfem::device::cg::{self, CgStep};
    let mut out = Parts::default();
    let rows = 50;
    let x = block(
        dev,
        &random(60, rows * cols),
        rows,
        cols,
        F64,
        Layout::NodeMajor,
    );
    let mut y = block(
        dev,
        &random(61, rows * cols),
        rows,
        cols,
        F64,
        Layout::NodeMajor,
    );
    let mut scalars = dev.zeros::<f64>(cg::buffer_len(cols)).unwrap();
    let mut scratch = Scratch::new(dev).unwrap();
    let read = |scalars: &D::Buffer<f64>| {
        let mut host = vec![0.0; cg::buffer_len(cols)];
        dev.read(scalars, 0, &mut host).unwrap();
        host
    };
    dev.column_dots_to(&x, &x, &mut scalars, cg::RR * cols, &mut scratch)
        .unwrap();
    // A target near the columns' norms (about 4.1): some columns start inactive.
    let start = CgStep::Start {
        tolerance: 4.1,
        relative: false,
        unit_roundoff: 1e-16,
    };
    dev.cg_scalars(start, &mut scalars, cols).unwrap();
    out.add("start", F64, read(&scalars));
    dev.column_dots_to(&x, &y, &mut scalars, cg::PQ * cols, &mut scratch)
        .unwrap();
    dev.cg_scalars(CgStep::Alpha, &mut scalars, cols).unwrap();
    out.add("alpha", F64, read(&scalars));
    dev.column_axpby_from(&scalars, cg::ALPHA * cols, &x, cg::ONES * cols, &mut y)
        .unwrap();
    out.add("y + αx", F64, y.to_f64(dev).unwrap());
    dev.column_dots_to(&y, &y, &mut scalars, cg::RR_NEW * cols, &mut scratch)
        .unwrap();
    dev.cg_scalars(CgStep::Beta, &mut scalars, cols).unwrap();
    out.add_sum("beta", F64, read(&scalars));
    dev.column_axpby_from(&scalars, cg::ONES * cols, &x, cg::BETA * cols, &mut y)
        .unwrap();
    out.add_sum("x + βy", F64, y.to_f64(dev).unwrap());
    out
}

#[test]
fn cg_scalars_match_the_cpu() {
    covers(&["cg_scalars"]);
    let cpu = tensorfem::device::Cpu::new();
    let reference: Vec<Parts> = [1, 5, 300].map(|cols| cg_parts(&cpu, cols)).into();
    let Some(gpu) = gpu() else { return };
    for (cols, cpu_parts) in [1, 5, 300].into_iter().zip(&reference) {
        cg_parts(&gpu, cols).compare(cpu_parts, &format!("CG scalars, {cols} columns"));
    }
}
