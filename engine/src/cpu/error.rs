//! What a CPU op can refuse: shapes that do not fit, types without kernels,
//! a SIMD level this CPU lacks, a thread pool that could not start.

use crate::ggml_type::GgmlType;

use crate::simd::SimdLevel;
use crate::threads::ThreadsError;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpuError {
    #[error("{ty}: {cols} columns is not a whole number of {block_elems}-element blocks")]
    NotBlockMultiple {
        ty: GgmlType,
        cols: usize,
        block_elems: usize,
    },
    #[error("{ty} [{rows} x {cols}]: the size overflows")]
    SizeOverflow {
        ty: GgmlType,
        rows: usize,
        cols: usize,
    },
    #[error("{ty} [{rows} x {cols}] takes {expected} bytes, the buffer has {actual}")]
    DataLength {
        ty: GgmlType,
        rows: usize,
        cols: usize,
        expected: usize,
        actual: usize,
    },
    #[error("{0} has no CPU matrix kernels")]
    NoKernels(GgmlType),
    #[error("{0} is not an activation format (F32, F16, BF16, Q8_0, Q8_1, Q8_K)")]
    NotActivation(GgmlType),
    #[error("{what}: expected {expected} elements, got {actual}")]
    Length {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("{what}: {actual} elements is not a multiple of {multiple_of}")]
    NotMultiple {
        what: &'static str,
        multiple_of: usize,
        actual: usize,
    },
    #[error("row {row} is out of range for a matrix of {rows} rows")]
    RowOutOfRange { row: usize, rows: usize },
    #[error("this CPU cannot run the {0} kernels")]
    SimdUnsupported(SimdLevel),
    #[error(transparent)]
    Threads(#[from] ThreadsError),
}
