//! Launch geometry and kernel signatures, host logic testable without a GPU: every launch
//! is checked against the signature of its kernel's op, and a test checks the signatures
//! against the parameters in the compiled PTX, so a mismatch is an error, never a kernel
//! reading garbage.

use cudarc::driver::LaunchConfig;

use crate::error::{Error, Result};

/// Threads per block; kernels/prelude.cuh's REDUCE_THREADS (shared-memory trees) is this.
pub const THREADS: u32 = 256;

/// Most blocks of a grid-stride launch (more add nothing but scheduling).
pub const MAX_BLOCKS: u64 = 1 << 16;

/// Most blocks along the grid's y axis (the hardware limit).
pub const MAX_GRID_Y: u32 = 65_535;

/// Rows per chunk of the per-column reductions: fixed by nothing but this constant, so a
/// column's sums are the same in any block width and run to run.
pub const REDUCE_CHUNK: u64 = 16_384;

/// Columns of a node-major block one thread block of a per-column reduction takes
/// together, reading a row's entries of them side by side (kernels/prelude.cuh's
/// COLUMN_GROUP).
pub const COLUMN_GROUP: u32 = 8;

/// Columns a warp of the SYMV kernel takes at once, sharing its loads of x
/// (kernels/dense.cu's SYMV_COLUMNS).
pub const SYMV_COLUMNS: u64 = 4;

/// Columns of a block a thread of the CSR kernels takes at once, sharing its row's indices
/// and values (kernels/sparse.cu's CSR_COLUMNS).
pub const CSR_COLUMNS: u32 = 8;

/// One kernel argument (pointers and u64 are both `.u64` in PTX).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    Ptr(u64),
    U64(u64),
    U32(u32),
    F64(f64),
}

impl Arg {
    fn ptx_type(&self) -> &'static str {
        match self {
            Arg::Ptr(_) | Arg::U64(_) => ".u64",
            Arg::U32(_) => ".u32",
            Arg::F64(_) => ".f64",
        }
    }
}

/// A grid-stride launch over `n` elements.
pub fn elementwise(n: u64) -> LaunchConfig {
    let blocks = n.div_ceil(THREADS as u64).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride launch with one warp per item (`n` items).
pub fn warp_per_item(n: u64) -> LaunchConfig {
    elementwise(n.saturating_mul(32))
}

/// Chunks per column of `rows` rows for the per-column reductions.
pub fn chunks(rows: u64) -> u32 {
    rows.div_ceil(REDUCE_CHUNK).max(1) as u32
}

/// Column groups of a per-column reduction over `cols` columns: COLUMN_GROUP columns each
/// in a node-major block, one each in a column-major one.
pub fn column_groups(cols: u32, node_major: bool) -> u32 {
    match node_major {
        true => cols.div_ceil(COLUMN_GROUP),
        false => cols,
    }
}

/// Block (q, g) per chunk q and column group g ([`column_groups`]; groups beyond the y
/// limit loop in the kernel).
pub fn per_chunk_and_group(rows: u64, cols: u32, node_major: bool) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            chunks(rows),
            column_groups(cols, node_major).clamp(1, MAX_GRID_Y),
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One block per column (columns beyond the limit loop in the kernel).
pub fn per_column(cols: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (cols.clamp(1, MAX_GRID_Y), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Block (q, c) for items q·THREADS… of column c, for kernels with a thread per item of
/// each column (u32 indices within a column, no 64-bit division); at most about
/// [`MAX_BLOCKS`] blocks, columns beyond the y limit and items beyond the x extent looping
/// in the kernel.
pub fn per_item_and_column(items: u64, cols: u32) -> LaunchConfig {
    let y = cols.clamp(1, MAX_GRID_Y);
    let x = items
        .div_ceil(THREADS as u64)
        .clamp(1, (MAX_BLOCKS / y as u64).max(1));
    LaunchConfig {
        grid_dim: (x as u32, y, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Most row chunks of a node-major launch ([`rows_and_columns`]): each chunk's statistics
/// are a triple per column that the final reduction adds in order.
pub const NODE_MAJOR_CHUNKS: u64 = 2048;

/// Blocks of (cw, THREADS / cw) threads for the node-major kernels of kernels/multigrid.cu:
/// cw lanes along the columns (the power of two ≥ `cols`, at most a warp), the rest along
/// the rows; block (q, t) for columns t·cw… and the rows of chunk q. The number of chunks
/// (gridDim.x) depends on the rows alone, so a column's statistics are summed in the same
/// order whatever the block's width.
pub fn rows_and_columns(rows: u64, cols: u32) -> Result<LaunchConfig> {
    let lanes = cols.clamp(1, 32).next_power_of_two();
    let column_blocks = cols.max(1).div_ceil(lanes);
    if column_blocks > MAX_GRID_Y {
        return Err(Error::Backend(format!(
            "{cols} columns exceed the node-major kernels' {} (a grid's y extent × 32)",
            MAX_GRID_Y as u64 * 32
        )));
    }
    let chunks = rows.div_ceil(THREADS as u64).clamp(1, NODE_MAJOR_CHUNKS);
    Ok(LaunchConfig {
        grid_dim: (chunks as u32, column_blocks, 1),
        block_dim: (lanes, THREADS / lanes, 1),
        shared_mem_bytes: 0,
    })
}

/// One block (the final reductions).
pub fn single_block() -> LaunchConfig {
    LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The op of an entry point: its name without the dtype suffixes (`axpby_f32` → `axpby`,
/// `csr_spmm_f16_f32` → `csr_spmm`).
pub fn op_of(entry: &str) -> &str {
    let mut op = entry;
    while let Some(rest) = ["_f16", "_f32", "_f64"]
        .iter()
        .find_map(|s| op.strip_suffix(s))
    {
        op = rest;
    }
    op
}

/// Parameter types of each op's kernels, in order: p pointer, l u64, i u32, d f64.
const SIGNATURES: &[(&str, &str)] = &[
    ("fill", "pld"),
    ("axpby", "ldpdp"),
    ("scale", "ldp"),
    ("shift", "ldp"),
    ("scaled_product", "ldppp"),
    ("scaled_product_add", "ldpppp"),
    ("column_axpby", "pppplii"),
    ("column_stats", "pliilidp"),
    ("column_dots", "ppliilip"),
    ("sum_partials", "pllp"),
    ("convert", "ppl"),
    ("relayout", "pplii"),
    ("scale_columns", "pppliilidp"),
    ("cg_scalars", "piidid"),
    ("stats_reduce", "ppiip"),
    ("sums_reduce", "piip"),
    ("gemv_partial", "pliippi"),
    ("gemv_reduce", "piip"),
    ("symv", "plippi"),
    ("csr_spmm", "lpppplpi"),
    ("csr_subtract", "lpppplppi"),
    ("csr_residual", "lppppppi"),
    ("csr_refine_update", "lpppppppi"),
    ("hierarchical_forward", "piilii"),
    ("hierarchical_transpose", "piilii"),
    ("row_update", "plippppi"),
    ("psc_gather", "plpipipipppppppi"),
    ("psc_gather_scale", "pppiiipipi"),
    ("psc_scatter", "pppppipipippppli"),
    ("ell_sweep", "iippiddpppidp"),
    ("ell_jacobi_from_zero", "ipdppidp"),
    ("ell_refine_update", "iippppppip"),
    ("grid_sweep", "iiipiddpppidp"),
    ("grid_refine_update", "iiipppppip"),
    ("grid_restrict", "ppiiipdp"),
    ("grid_prolongate_add", "ppiiipdp"),
    ("matrix_transfer", "ipppppiipdp"),
    ("flushed_column", "ppidp"),
    ("stokes_apply", "i pppp pppp pppp dd pp d ppip"),
    ("stokes_laplacian", "i pppp pp"),
    ("stokes_gradient", "i pppp pppp dd pp"),
    ("stokes_divergence", "ippdpp"),
    ("pressure_stencil", "iipdpp"),
    ("stokes_transfer", "iipp"),
    ("vanka_gather", "ippidp"),
    ("vanka_products", "ppiipp"),
    ("vanka_scatter", "ippddp"),
    ("coarse_solve", "piippp"),
];

/// The PTX parameter types of the kernels of `op`, or None for an op without a signature.
pub fn signature(op: &str) -> Option<Vec<&'static str>> {
    let (_, codes) = SIGNATURES.iter().find(|(name, _)| *name == op)?;
    Some(
        codes
            .chars()
            .filter(|c| !c.is_whitespace())
            .map(|c| match c {
                'p' | 'l' => ".u64",
                'i' => ".u32",
                'd' => ".f64",
                other => unreachable!("signature code {other}"),
            })
            .collect(),
    )
}

/// Fails unless `args` match the signature of `entry`'s op.
pub fn check_args(entry: &str, args: &[Arg]) -> Result<()> {
    let expected = signature(op_of(entry))
        .ok_or_else(|| Error::Backend(format!("kernel {entry} has no signature in launch.rs")))?;
    let given: Vec<&str> = args.iter().map(Arg::ptx_type).collect();
    if given == expected {
        Ok(())
    } else {
        Err(Error::Backend(format!(
            "kernel {entry} takes ({}) but was given ({})",
            expected.join(", "),
            given.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_signatures_and_geometry() {
        assert_eq!(op_of("axpby_f32"), "axpby");
        assert_eq!(op_of("csr_spmm_f16_f32"), "csr_spmm");
        assert_eq!(op_of("stats_reduce"), "stats_reduce");
        assert_eq!(signature("fill").unwrap(), [".u64", ".u64", ".f64"]);
        assert!(check_args("fill_f32", &[Arg::Ptr(0), Arg::U64(3), Arg::F64(1.0)]).is_ok());
        let err = check_args("fill_f32", &[Arg::Ptr(0), Arg::U32(3), Arg::F64(1.0)]).unwrap_err();
        assert!(err.to_string().contains("fill_f32 takes"), "{err}");
        assert!(check_args("no_such_kernel", &[]).is_err());

        assert_eq!(elementwise(0).grid_dim, (1, 1, 1));
        assert_eq!(elementwise(1000).grid_dim, (4, 1, 1));
        assert_eq!(elementwise(u64::MAX / 2).grid_dim.0 as u64, MAX_BLOCKS);
        assert_eq!(chunks(0), 1);
        assert_eq!(chunks(REDUCE_CHUNK), 1);
        assert_eq!(chunks(REDUCE_CHUNK + 1), 2);
        assert_eq!(
            per_chunk_and_group(1 << 20, 100_000, false).grid_dim,
            (64, MAX_GRID_Y, 1)
        );
        assert_eq!(per_column(0).grid_dim, (1, 1, 1));
        assert_eq!(
            [
                column_groups(64, true),
                column_groups(9, true),
                column_groups(1, true)
            ],
            [8, 2, 1]
        );
        assert_eq!(column_groups(9, false), 9);
        // A warp per item: 8 items per block of 256 threads.
        assert_eq!(warp_per_item(14_880).grid_dim, (1_860, 1, 1));

        // Node-major blocks: one column runs 256 rows a block, 64 columns two blocks of
        // 32 lanes × 8 rows across, 3 columns 4 lanes (one idle) × 64 rows; the chunks
        // (gridDim.x) are the same for every width.
        let one = rows_and_columns(1000, 1).unwrap();
        assert_eq!((one.block_dim, one.grid_dim), ((1, 256, 1), (4, 1, 1)));
        let wide = rows_and_columns(1 << 24, 64).unwrap();
        assert_eq!((wide.block_dim, wide.grid_dim), ((32, 8, 1), (2048, 2, 1)));
        let three = rows_and_columns(10, 3).unwrap();
        assert_eq!((three.block_dim, three.grid_dim), ((4, 64, 1), (1, 1, 1)));
        for cols in [1, 3, 32, 33, 1000] {
            let cfg = rows_and_columns(1 << 24, cols).unwrap();
            assert_eq!(cfg.grid_dim.0 as u64, NODE_MAJOR_CHUNKS, "{cols} columns");
            assert_eq!(
                cfg.grid_dim.1,
                cols.div_ceil(32.min(cols.next_power_of_two()))
            );
        }
        assert!(rows_and_columns(10, u32::MAX).is_err());
    }

    /// The shared-memory trees of kernels/prelude.cuh size themselves for THREADS threads.
    #[test]
    fn reduction_blocks_have_the_threads_the_kernels_expect() {
        let prelude = include_str!("../../../kernels/prelude.cuh");
        assert!(
            prelude.contains(&format!("#define REDUCE_THREADS {THREADS}\n")),
            "REDUCE_THREADS in kernels/prelude.cuh differs from launch::THREADS"
        );
        assert!(
            prelude.contains(&format!("#define COLUMN_GROUP {COLUMN_GROUP}\n")),
            "COLUMN_GROUP in kernels/prelude.cuh differs from launch::COLUMN_GROUP"
        );
    }

    /// The launches size their grids by the columns the kernels take per warp or thread.
    #[test]
    fn column_groups_are_the_kernels_own() {
        for (file, text, define) in [
            (
                "dense.cu",
                include_str!("../../../kernels/dense.cu"),
                format!("#define SYMV_COLUMNS {SYMV_COLUMNS}\n"),
            ),
            (
                "sparse.cu",
                include_str!("../../../kernels/sparse.cu"),
                format!("#define CSR_COLUMNS {CSR_COLUMNS}\n"),
            ),
        ] {
            assert!(text.contains(&define), "kernels/{file} lacks {define:?}");
        }
    }
}
