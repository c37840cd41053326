//! [`WeightView`]: a weight matrix as ggml lays it out, borrowed.

use crate::ggml_type::GgmlType;

use super::error::CpuError;

/// A `[rows, cols]` weight matrix in ggml's layout: `cols` (ggml's `ne[0]`,
/// the input features) is the row length; each row is `cols / block_elems`
/// consecutive blocks; rows follow each other with no padding. `rows`
/// (ggml's `ne[1]`) is the number of output features.
#[derive(Clone, Copy, Debug)]
pub struct WeightView<'a> {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: &'a [u8],
}

impl<'a> WeightView<'a> {
    /// Checks that `cols` is a whole number of blocks and that `data` holds
    /// exactly `rows` rows of them.
    pub fn new(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: &'a [u8],
    ) -> Result<WeightView<'a>, CpuError> {
        let block_elems = ty.block_elems();
        if !cols.is_multiple_of(block_elems) {
            return Err(CpuError::NotBlockMultiple {
                ty,
                cols,
                block_elems,
            });
        }
        let overflow = CpuError::SizeOverflow { ty, rows, cols };
        let row_bytes = (cols / block_elems)
            .checked_mul(ty.block_bytes())
            .ok_or(overflow.clone())?;
        let expected = row_bytes.checked_mul(rows).ok_or(overflow)?;
        if data.len() != expected {
            return Err(CpuError::DataLength {
                ty,
                rows,
                cols,
                expected,
                actual: data.len(),
            });
        }
        Ok(WeightView {
            ty,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Output features: ggml's `ne[1]`.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features, the row length in elements: ggml's `ne[0]`.
    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// The bytes of row `r`, or `None` past the last row.
    pub fn row(&self, r: usize) -> Option<&'a [u8]> {
        if r >= self.rows {
            return None;
        }
        let start = r * self.row_bytes;
        self.data.get(start..start + self.row_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked_without_panicking() {
        let data = vec![0u8; 2 * 20];
        let w = WeightView::new(GgmlType::Q4_1, 2, 32, &data).unwrap();
        assert_eq!((w.rows(), w.cols(), w.row_bytes()), (2, 32, 20));
        assert_eq!(w.row(1).map(<[u8]>::len), Some(20));
        assert!(w.row(2).is_none());
        assert!(matches!(
            WeightView::new(GgmlType::Q4_1, 2, 33, &data),
            Err(CpuError::NotBlockMultiple { .. })
        ));
        assert!(matches!(
            WeightView::new(GgmlType::Q4_1, 3, 32, &data),
            Err(CpuError::DataLength { expected: 60, .. })
        ));
        assert!(matches!(
            WeightView::new(GgmlType::F32, usize::MAX, 4, &data),
            Err(CpuError::SizeOverflow { .. })
        ));
        assert!(matches!(
            WeightView::new(GgmlType::Q8_0, 1, usize::MAX - 31, &data),
            Err(CpuError::SizeOverflow { .. }) | Err(CpuError::NotBlockMultiple { .. })
        ));
        // Zero-sized matrices are valid.
        assert!(WeightView::new(GgmlType::Q8_0, 0, 64, &[]).is_ok());
    }
}
