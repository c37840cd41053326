//! Tensor descriptions read from the header.

use crate::ggml_type::GgmlType;

/// One tensor as the header describes it, already validated: its type is
/// known, its dimensions are nonzero and within the limits, its rows are
/// whole blocks of its type, and its bytes lie inside the file without
/// overlapping any other tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub ty: GgmlType,
    /// Dimensions in ggml `ne` order: `dims[0]` is the row length (the
    /// fastest-varying index). 1 to 4 entries.
    pub dims: Vec<u64>,
    /// Absolute offset of the tensor's first byte in the file.
    pub offset: u64,
    /// Size of the tensor's data in bytes.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Number of elements (product of the dimensions). Exact for a parsed
    /// tensor; saturates at `u64::MAX` for a hand-built one that overflows.
    pub fn n_elements(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// Row length: `dims[0]` (0 for a hand-built tensor with no dimensions).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(0)
    }

    /// Number of rows: the product of all dimensions but the first.
    pub fn n_rows(&self) -> u64 {
        match self.row_len() {
            0 => 0,
            r => self.n_elements() / r,
        }
    }

    /// The byte range `offset..offset + n_bytes` (saturating).
    pub fn byte_range(&self) -> std::ops::Range<u64> {
        self.offset..self.offset.saturating_add(self.n_bytes)
    }
}
