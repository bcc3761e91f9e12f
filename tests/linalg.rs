//! The device-generic solvers of `linalg` (FGMRES, block CG, iterative refinement) on
//! small systems with known solutions, through test-local operators built from device
//! kernels alone; run on every backend (`device_tests!`).

use tensorfem::device::{Block, CsrMatrix, Layout, StokesDevice};
use tensorfem::device_tests;
use tensorfem::linalg::{
    fgmres, BlockCg, BlockKind, CgParams, Cost, FgmresParams, FgmresWorkspace, LinOp,
    RefineFailure, RefineParams, Refinement,
};
use tensorfem::precision::Precision;
use tensorfem::sparse::Csr;

/// The tridiagonal matrix with diagonal d_i = 3 + i/n, −1.3 below and −0.7 above
/// (nonsymmetric, diagonally dominant); `symmetric` puts −1 on both sides instead.
fn tridiagonal(n: usize, symmetric: bool) -> Csr<f64> {
    let (below, above) = if symmetric {
        (-1.0, -1.0)
    } else {
        (-1.3, -0.7)
    };
    let mut row_ptr = vec![0];
    let (mut cols, mut vals) = (vec![], vec![]);
    for i in 0..n {
        if i > 0 {
            cols.push(i as u32 - 1);
            vals.push(below);
        }
        cols.push(i as u32);
        vals.push(diagonal(i, n));
        if i + 1 < n {
            cols.push(i as u32 + 1);
            vals.push(above);
        }
        row_ptr.push(cols.len());
    }
    Csr::new(n, n, row_ptr, cols, vals).unwrap()
}

fn diagonal(i: usize, n: usize) -> f64 {
    3.0 + i as f64 / n as f64
}

/// b = A x on the host.
fn product(a: &Csr<f64>, x: &[f64]) -> Vec<f64> {
    let mut b = vec![0.0; x.len()];
    tensorfem::sparse::spmv(a, x, &mut b);
    b
}

fn max_error(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// y = A x with a sparse matrix in storage `precision` on column-major blocks.
struct SparseOp<D: StokesDevice> {
    dev: D,
    a: CsrMatrix<D>,
    precision: Precision,
}

impl<D: StokesDevice> SparseOp<D> {
    fn new(dev: &D, a: &Csr<f64>, precision: Precision) -> Self {
        let a = match precision {
            Precision::F32 => CsrMatrix::upload(dev, &a.convert::<f32>().unwrap()),
            _ => CsrMatrix::upload(dev, a),
        };
        SparseOp {
            dev: dev.clone(),
            a: a.unwrap(),
            precision,
        }
    }
}

impl<D: StokesDevice> LinOp<D> for SparseOp<D> {
    fn size(&self) -> usize {
        self.a.nrows
    }
    fn input(&self) -> BlockKind {
        BlockKind {
            precision: self.precision,
            layout: Layout::ColMajor,
        }
    }
    fn output(&self) -> BlockKind {
        self.input()
    }
    fn prepare(&mut self, _nrhs: usize) -> tensorfem::Result<()> {
        Ok(())
    }
    fn apply(&mut self, x: &Block<D>, y: &mut Block<D>) -> tensorfem::Result<()> {
        self.dev.csr_spmm(&self.a, x, y)
    }
    fn cost(&self, nrhs: usize) -> Cost {
        Cost {
            flops: 2.0 * self.a.nnz() as f64 * nrhs as f64,
            bytes: self.a.bytes() as f64,
        }
    }
}

/// z = D⁻¹ r (Jacobi) in `precision`, one column or a block; with `narrow`, also on
/// narrower blocks ([`LinOp::prepare_narrow`]), the widths it was applied to recorded.
struct Jacobi<D: StokesDevice> {
    dev: D,
    inverse_diagonal: Block<D>,
    precision: Precision,
    narrow: Option<Block<D>>,
    can_narrow: bool,
    widths: Vec<usize>,
}

impl<D: StokesDevice> Jacobi<D> {
    fn new(dev: &D, n: usize, nrhs: usize, precision: Precision) -> Self {
        Jacobi {
            dev: dev.clone(),
            inverse_diagonal: Self::inverse(dev, n, nrhs, precision),
            precision,
            narrow: None,
            can_narrow: false,
            widths: Vec::new(),
        }
    }

    fn with_narrow(self) -> Self {
        Jacobi {
            can_narrow: true,
            ..self
        }
    }

    fn inverse(dev: &D, n: usize, nrhs: usize, precision: Precision) -> Block<D> {
        let inverse: Vec<f64> = (0..n * nrhs).map(|k| 1.0 / diagonal(k % n, n)).collect();
        Block::from_f64(dev, &inverse, n, nrhs, precision, Layout::ColMajor).unwrap()
    }
}

impl<D: StokesDevice> LinOp<D> for Jacobi<D> {
    fn size(&self) -> usize {
        self.inverse_diagonal.rows()
    }
    fn input(&self) -> BlockKind {
        BlockKind {
            precision: self.precision,
            layout: Layout::ColMajor,
        }
    }
    fn output(&self) -> BlockKind {
        self.input()
    }
    fn prepare(&mut self, nrhs: usize) -> tensorfem::Result<()> {
        assert_eq!(nrhs, self.inverse_diagonal.cols());
        Ok(())
    }
    fn prepare_narrow(&mut self, width: usize) -> tensorfem::Result<bool> {
        if self.can_narrow {
            let n = self.size();
            self.narrow = Some(Self::inverse(&self.dev, n, width, self.precision));
        }
        Ok(self.can_narrow)
    }
    fn apply(&mut self, x: &Block<D>, y: &mut Block<D>) -> tensorfem::Result<()> {
        self.widths.push(x.cols());
        let inverse = match &self.narrow {
            Some(narrow) if narrow.cols() == x.cols() => narrow,
            _ => &self.inverse_diagonal,
        };
        self.dev
            .scaled_product(1.0, inverse.view(), x.view(), y.view_mut())
    }
    fn cost(&self, nrhs: usize) -> Cost {
        let n = (self.size() * nrhs) as f64;
        Cost {
            flops: n,
            bytes: 3.0 * n * self.precision.bytes() as f64,
        }
    }
}

/// A nonsymmetric tridiagonal system against its known solution, with and without a
/// (Jacobi) preconditioner and with restarts; the residual history falls to the
/// tolerance and the returned relative residual is the true one.
fn fgmres_solves_a_nonsymmetric_system<D: StokesDevice>(dev: &D) {
    let n = 200;
    let matrix = tridiagonal(n, false);
    let exact: Vec<f64> = (0..n).map(|i| (i as f64 * 0.1).sin()).collect();
    let b_host = product(&matrix, &exact);
    let b = Block::from_f64(dev, &b_host, n, 1, Precision::F64, Layout::ColMajor).unwrap();
    let mut a = SparseOp::new(dev, &matrix, Precision::F64);
    let mut jacobi = Jacobi::new(dev, n, 1, Precision::F64);
    let identity_matrix = Csr::new(
        n,
        n,
        (0..=n).collect(),
        (0..n as u32).collect(),
        vec![1.0; n],
    )
    .unwrap();
    let mut identity = SparseOp::new(dev, &identity_matrix, Precision::F64);
    for restart in [5, 30] {
        let mut work = FgmresWorkspace::new(dev, n, restart, 500).unwrap();
        let preconditioners: [&mut dyn LinOp<D>; 2] = [&mut jacobi, &mut identity];
        for m in preconditioners {
            let mut x = Block::vector(dev, n, Precision::F64).unwrap();
            let params = FgmresParams {
                restart,
                rtol: 1e-10,
                atol: 0.0,
                max_iterations: 500,
            };
            let info = fgmres(params, &b, &mut x, &mut work, &mut a, m, |_| Ok(())).unwrap();
            assert!(info.converged, "restart {restart}: {info:?}");
            assert!(info.relative_residual <= 1e-10);
            assert_eq!(info.history.len(), info.iterations);
            let x = x.to_f64(dev).unwrap();
            let r: f64 = product(&matrix, &x)
                .iter()
                .zip(&b_host)
                .map(|(ax, b)| (b - ax).powi(2))
                .sum::<f64>()
                .sqrt();
            let b_norm = b_host.iter().map(|v| v * v).sum::<f64>().sqrt();
            assert!((r / b_norm - info.relative_residual).abs() < 1e-12);
            let error = max_error(&exact, &x);
            assert!(error < 1e-8, "restart {restart}: error {error}");
        }
    }
    // Too few iterations: a NotConverged error that carries the history.
    let mut work = FgmresWorkspace::new(dev, n, 5, 3).unwrap();
    let mut x = Block::vector(dev, n, Precision::F64).unwrap();
    let params = FgmresParams {
        restart: 5,
        rtol: 1e-14,
        atol: 0.0,
        max_iterations: 3,
    };
    let err = fgmres(params, &b, &mut x, &mut work, &mut a, &mut jacobi, |_| {
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(
        err.failure,
        tensorfem::linalg::FgmresFailure::NotConverged
    ));
    assert_eq!(err.info.iterations, 3);
    assert_eq!(err.info.history.len(), 3);
    assert!(err.info.relative_residual > 1e-14 && err.info.relative_residual < 1.0);
}

/// Block CG: each column of a symmetric positive definite system converges to its own
/// solution in f64; a zero column stays zero; f32 blocks reach what f32 can attain.
fn block_cg_solves_each_column<D: StokesDevice>(dev: &D) {
    let n = 300;
    let matrix = tridiagonal(n, true);
    let nrhs = 3;
    let exact: Vec<f64> = (0..n * nrhs)
        .map(|k| match k / n {
            0 => ((k % n) as f64 * 0.05).cos(),
            1 => 0.0,
            _ => 1e-3 * (k % 7) as f64,
        })
        .collect();
    let b_host: Vec<f64> = exact.chunks(n).flat_map(|x| product(&matrix, x)).collect();
    for (precision, tolerance, allowed) in
        [(Precision::F64, 1e-12, 1e-10), (Precision::F32, 1e-5, 1e-4)]
    {
        let b = Block::from_f64(dev, &b_host, n, nrhs, precision, Layout::ColMajor).unwrap();
        let mut x = Block::zeros(dev, n, nrhs, precision, Layout::ColMajor).unwrap();
        let mut cg = BlockCg::new(dev, n, nrhs, precision, Layout::ColMajor).unwrap();
        let a = SparseOp::new(dev, &matrix, precision);
        let a_matrix = &a.a;
        let params = CgParams {
            tolerance,
            relative: true,
            max_iterations: 200,
        };
        let info = cg
            .solve(dev, |p, q| dev.csr_spmm(a_matrix, p, q), &b, &mut x, params)
            .unwrap();
        assert!(info.iterations < 200, "{precision}: {info:?}");
        let x = x.to_f64(dev).unwrap();
        for c in 0..nrhs {
            let (got, want) = (&x[c * n..(c + 1) * n], &exact[c * n..(c + 1) * n]);
            let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-300);
            let error = max_error(got, want);
            if c == 1 {
                assert_eq!(error, 0.0, "the zero column stays zero");
            } else {
                assert!(error / scale < allowed, "{precision} column {c}: {error}");
            }
        }
    }
}

/// Iterative refinement of a sparse f64 system around an f32 Jacobi step: every column
/// reaches the f64 tolerance (far below what f32 alone attains) and the recorded history
/// falls; a NaN right-hand side, a residual that flushes to zero in f16 and too few steps
/// are refused with the reason and the record.
fn refinement_reaches_f64_accuracy_and_refuses_bad_input<D: StokesDevice>(dev: &D) {
    let n = 400;
    let nrhs = 2;
    let matrix = tridiagonal(n, false);
    let a = CsrMatrix::upload(dev, &matrix).unwrap();
    let exact: Vec<f64> = (0..n * nrhs)
        .map(|k| ((k % n) as f64 * 0.03 + (k / n) as f64).sin() * 10f64.powi((k / n) as i32 * 3))
        .collect();
    let b_host: Vec<f64> = exact.chunks(n).flat_map(|x| product(&matrix, x)).collect();
    let b = Block::from_f64(dev, &b_host, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
    let params = RefineParams {
        rtol: 1e-13,
        atol: 0.0,
        max_iterations: 100,
        residual_scaling: true,
    };
    let mut refinement =
        Refinement::new(dev, Jacobi::new(dev, n, nrhs, Precision::F32), nrhs, 100).unwrap();
    let mut x = Block::zeros(dev, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
    let info = refinement.solve(&a, &b, &mut x, params).unwrap().clone();
    let got = x.to_f64(dev).unwrap();
    for c in 0..nrhs {
        assert!(info.relative_residual(c) <= 1e-13, "column {c}: {info:?}");
        let (g, w) = (&got[c * n..(c + 1) * n], &exact[c * n..(c + 1) * n]);
        let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(max_error(g, w) / scale < 1e-12, "column {c}");
        // Jacobi contracts the residual by at most (1.3 + 0.7)/3 per step: the history
        // falls until the column converges, then stays.
        let target = 1e-13 * info.b_norms[c];
        for s in 1..info.recorded() {
            let (now, before) = (info.step(s)[c], info.step(s - 1)[c]);
            if before > target {
                assert!(
                    now <= before * 0.7,
                    "column {c} step {s}: {now:e} after {before:e}"
                );
            } else {
                assert_eq!(now, before, "column {c} converged before step {s}");
            }
        }
    }
    assert!(info.steps() > 5, "f32 steps alone cannot reach 1e-13");

    // From zero, whatever x holds (NaN here): the same steps, residuals and solution bit for
    // bit, the first residual copied from b instead of computed.
    let nan = vec![f64::NAN; n * nrhs];
    let mut x = Block::from_f64(dev, &nan, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
    let from_zero = refinement
        .solve_from_zero(&a, &b, &mut x, params)
        .unwrap()
        .clone();
    assert_eq!(from_zero.history, info.history);
    assert_eq!(from_zero.iterations, info.iterations);
    let same = x.to_f64(dev).unwrap();
    assert!(same
        .iter()
        .zip(&got)
        .all(|(s, g)| s.to_bits() == g.to_bits()));

    // Too few steps: NotConverged, naming the column, with the history so far.
    let few = RefineParams {
        max_iterations: 3,
        ..params
    };
    let mut x = Block::zeros(dev, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
    let err = refinement.solve(&a, &b, &mut x, few).unwrap_err();
    assert!(
        matches!(err.failure, RefineFailure::NotConverged { .. }),
        "{err}"
    );
    assert_eq!(err.info.recorded(), 4);

    // A NaN in b: refused as not finite before any inner solve.
    let mut bad = b_host.clone();
    bad[7] = f64::NAN;
    let bad = Block::from_f64(dev, &bad, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
    let mut x = Block::zeros(dev, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
    let err = refinement.solve(&a, &bad, &mut x, params).unwrap_err();
    assert!(matches!(err.failure, RefineFailure::NotFinite), "{err}");
    // From zero, b is the first residual: refused the same way.
    let err = refinement
        .solve_from_zero(&a, &bad, &mut x, params)
        .unwrap_err();
    assert!(matches!(err.failure, RefineFailure::NotFinite), "{err}");
    assert_eq!(err.info.recorded(), 1, "no step taken");

    // An f16 inner step without residual scaling: a column of size 1e-9 flushes to zero.
    let tiny: Vec<f64> = b_host.iter().map(|v| v * 1e-9 / 1e3).collect();
    let tiny = Block::from_f64(dev, &tiny, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
    let mut low =
        Refinement::new(dev, Jacobi::new(dev, n, nrhs, Precision::F16), nrhs, 10).unwrap();
    let unscaled = RefineParams {
        residual_scaling: false,
        max_iterations: 10,
        ..params
    };
    let mut x = Block::zeros(dev, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
    let err = low.solve(&a, &tiny, &mut x, unscaled).unwrap_err();
    match err.failure {
        RefineFailure::Input {
            flushed: Some((0, largest)),
            precision: Precision::F16,
        } => assert!(largest > 0.0 && largest < 1e-8),
        other => panic!("expected column 0 flushed in f16, got {other:?}"),
    }
}

/// Once few columns are left above their threshold, plain and flexible-CG refinement
/// solve them alone in narrow blocks: the same steps, residual history and solution bit
/// for bit as on the whole block (Jacobi and the updates treat each column alone), where
/// 13 of 16 columns, 10⁻⁴ of the others' size, stop early on the absolute tolerance.
fn refinement_solves_few_unconverged_columns_alone<D: StokesDevice>(dev: &D) {
    let (n, nrhs) = (300, 16);
    let matrix = tridiagonal(n, true);
    let a = CsrMatrix::upload(dev, &matrix).unwrap();
    let hard = [3, 4, 11];
    let b_host: Vec<f64> = (0..n * nrhs)
        .map(|k| {
            let (i, c) = (k % n, k / n);
            let size = if hard.contains(&c) { 1.0 } else { 1e-4 };
            size * ((i * (c + 2)) as f64 * 0.37).sin()
        })
        .collect();
    let b = Block::from_f64(dev, &b_host, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
    let params = RefineParams {
        rtol: 1e-12,
        atol: 1e-9,
        max_iterations: 200,
        residual_scaling: true,
    };
    for krylov in [false, true] {
        let solve = |jacobi: Jacobi<D>| {
            let mut refinement = Refinement::new(dev, jacobi, nrhs, 200).unwrap();
            if krylov {
                refinement = refinement.with_krylov().unwrap();
            }
            let mut x = Block::zeros(dev, n, nrhs, Precision::F64, Layout::ColMajor).unwrap();
            let info = refinement
                .solve_from_zero(&a, &b, &mut x, params)
                .unwrap()
                .clone();
            (info, x.to_f64(dev).unwrap(), refinement.into_inner().widths)
        };
        let jacobi = || Jacobi::new(dev, n, nrhs, Precision::F32);
        let (whole, whole_x, whole_widths) = solve(jacobi());
        let (narrow, narrow_x, narrow_widths) = solve(jacobi().with_narrow());
        assert!(whole_widths.iter().all(|&w| w == nrhs));
        assert!(
            narrow_widths.contains(&4) && narrow_widths[0] == nrhs,
            "krylov {krylov}: widths {narrow_widths:?}"
        );
        let steps = &narrow.iterations;
        let (mut hard_steps, mut easy_steps) = (usize::MAX, 0);
        for (c, &s) in steps.iter().enumerate() {
            if hard.contains(&c) {
                hard_steps = hard_steps.min(s);
            } else {
                easy_steps = easy_steps.max(s);
            }
        }
        assert!(hard_steps > easy_steps, "krylov {krylov}: steps {steps:?}");
        assert_eq!(narrow.iterations, whole.iterations, "krylov {krylov}");
        assert_eq!(narrow.history, whole.history, "krylov {krylov}");
        assert!(
            narrow_x
                .iter()
                .zip(&whole_x)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "krylov {krylov}: the solutions differ"
        );
    }
}

device_tests!(
    fgmres_solves_a_nonsymmetric_system,
    block_cg_solves_each_column,
    refinement_reaches_f64_accuracy_and_refuses_bad_input,
    refinement_solves_few_unconverged_columns_alone,
);
