//! The table of GGML tensor types: ids as GGUF stores them, names, block
//! geometry. Removed ids are kept so a file that uses one is rejected by name.
//! Also the list of weight types the backends have kernels for
//! ([`WEIGHT_TYPES`]). engine/build.rs includes this file as well (it uses
//! nothing outside `std`).

use std::fmt;

/// A GGML tensor element type, as stored in a GGUF tensor info.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
}

/// What a raw type id from a file means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeId {
    Known(GgmlType),
    /// An id ggml once used and has since removed (the name it had).
    Removed(&'static str),
    Unknown(u32),
}

/// (id, type, name, elements per block, bytes per block)
const TABLE: &[(u32, GgmlType, &str, usize, usize)] = &[
    (0, GgmlType::F32, "F32", 1, 4),
    (1, GgmlType::F16, "F16", 1, 2),
    (2, GgmlType::Q4_0, "Q4_0", 32, 18),
    (3, GgmlType::Q4_1, "Q4_1", 32, 20),
    (6, GgmlType::Q5_0, "Q5_0", 32, 22),
    (7, GgmlType::Q5_1, "Q5_1", 32, 24),
    (8, GgmlType::Q8_0, "Q8_0", 32, 34),
    (9, GgmlType::Q8_1, "Q8_1", 32, 36),
    (10, GgmlType::Q2_K, "Q2_K", 256, 84),
    (11, GgmlType::Q3_K, "Q3_K", 256, 110),
    (12, GgmlType::Q4_K, "Q4_K", 256, 144),
    (13, GgmlType::Q5_K, "Q5_K", 256, 176),
    (14, GgmlType::Q6_K, "Q6_K", 256, 210),
    (15, GgmlType::Q8_K, "Q8_K", 256, 292),
    (16, GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66),
    (17, GgmlType::IQ2_XS, "IQ2_XS", 256, 74),
    (18, GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98),
    (19, GgmlType::IQ1_S, "IQ1_S", 256, 50),
    (20, GgmlType::IQ4_NL, "IQ4_NL", 32, 18),
    (21, GgmlType::IQ3_S, "IQ3_S", 256, 110),
    (22, GgmlType::IQ2_S, "IQ2_S", 256, 82),
    (23, GgmlType::IQ4_XS, "IQ4_XS", 256, 136),
    (24, GgmlType::I8, "I8", 1, 1),
    (25, GgmlType::I16, "I16", 1, 2),
    (26, GgmlType::I32, "I32", 1, 4),
    (27, GgmlType::I64, "I64", 1, 8),
    (28, GgmlType::F64, "F64", 1, 8),
    (29, GgmlType::IQ1_M, "IQ1_M", 256, 56),
    (30, GgmlType::BF16, "BF16", 1, 2),
    (34, GgmlType::TQ1_0, "TQ1_0", 256, 54),
    (35, GgmlType::TQ2_0, "TQ2_0", 256, 66),
    (39, GgmlType::MXFP4, "MXFP4", 32, 17),
];

/// The weight types the backends multiply and look rows up in (`matmul`,
/// `matmul_id`, `embed` of CPU and Vulkan alike), in the order every kernel
/// table is indexed by ([`weight_index`]). The one list to extend with a
/// new weight type: engine/build.rs compiles each weight-reading shader once
/// per entry (define `WEIGHT_<NAME>`, block layout in
/// `shaders/common/blocks.glsl`), and the CPU's dot-product tables
/// (`cpu::dot`) are put in this order at compile time from the rows each
/// kernel family keys by type (a missing or doubled row fails the build).
pub const WEIGHT_TYPES: [GgmlType; 13] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Position of `ty` in [`WEIGHT_TYPES`] (the index of its kernels), or
/// `None` for a type no backend multiplies. A `const fn`, so that kernel
/// tables can be put in this order at compile time from rows keyed by type.
pub const fn weight_index(ty: GgmlType) -> Option<usize> {
    let mut i = 0;
    while i < WEIGHT_TYPES.len() {
        if WEIGHT_TYPES[i] as u32 == ty as u32 {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Ids ggml has removed; a file that uses one was written by an old tool.
const REMOVED: &[(u32, &str)] = &[
    (4, "Q4_2"),
    (5, "Q4_3"),
    (31, "Q4_0_4_4"),
    (32, "Q4_0_4_8"),
    (33, "Q4_0_8_8"),
    (36, "IQ4_NL_4_4"),
    (37, "IQ4_NL_4_8"),
    (38, "IQ4_NL_8_8"),
];

impl GgmlType {
    /// Every known type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|e| e.1)
    }

    fn entry(self) -> &'static (u32, GgmlType, &'static str, usize, usize) {
        TABLE
            .iter()
            .find(|e| e.1 == self)
            .expect("every GgmlType variant has a table row")
    }

    /// Classifies a raw id read from a file.
    pub fn from_id(id: u32) -> TypeId {
        if let Some(e) = TABLE.iter().find(|e| e.0 == id) {
            return TypeId::Known(e.1);
        }
        if let Some(r) = REMOVED.iter().find(|r| r.0 == id) {
            return TypeId::Removed(r.1);
        }
        TypeId::Unknown(id)
    }

    /// Looks a type up by its name, case-insensitively ("q4_k", "F16").
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE
            .iter()
            .find(|e| e.2.eq_ignore_ascii_case(name))
            .map(|e| e.1)
    }

    pub fn id(self) -> u32 {
        self.entry().0
    }

    pub fn name(self) -> &'static str {
        self.entry().2
    }

    /// Elements per block (1 for plain scalar types).
    pub fn block_elems(self) -> usize {
        self.entry().3
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.entry().4
    }

    /// Bytes taken by `n` elements, or `None` when `n` is not a whole number
    /// of blocks or the size overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let be = self.block_elems() as u64;
        if !n.is_multiple_of(be) {
            return None;
        }
        (n / be).checked_mul(self.block_bytes() as u64)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        for t in GgmlType::all() {
            assert_eq!(GgmlType::from_id(t.id()), TypeId::Known(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        let mut ids: Vec<u32> = TABLE
            .iter()
            .map(|e| e.0)
            .chain(REMOVED.iter().map(|r| r.0))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), TABLE.len() + REMOVED.len());
    }

    #[test]
    fn removed_and_unknown_ids_are_named() {
        assert_eq!(GgmlType::from_id(4), TypeId::Removed("Q4_2"));
        assert_eq!(GgmlType::from_id(31), TypeId::Removed("Q4_0_4_4"));
        assert_eq!(GgmlType::from_id(1000), TypeId::Unknown(1000));
    }

    #[test]
    fn bytes_for_checks_block_multiples_and_overflow() {
        assert_eq!(GgmlType::Q4_K.bytes_for(512), Some(288));
        assert_eq!(GgmlType::Q4_K.bytes_for(100), None);
        assert_eq!(GgmlType::F32.bytes_for(u64::MAX), None);
    }
}
