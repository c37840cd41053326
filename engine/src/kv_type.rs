//! The KV cache's element types: the enum the backends allocate and
//! dispatch by, and the KV axis of the shader variants (engine/build.rs
//! includes this file, so it imports nothing). A type's reads and writes
//! in the kernels are its branch of `shaders/common/kv.glsl`; the
//! variants of a kernel over the KV axis are `vulkan::shaders::by_kv`'s
//! arrays, indexed by [`KvType::index`].

use crate::op_codes;

/// Element type of a KV cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvType {
    /// f32: what the reference captures use; the default.
    #[default]
    F32,
    /// IEEE half: K and V rounded to nearest-even f16 when written.
    F16,
}

/// Every KV type, in index order.
pub const KV_TYPES: [KvType; 2] = [KvType::F32, KvType::F16];

impl KvType {
    /// Its place in [`KV_TYPES`] (and in the `by_kv` shader arrays).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The type of that name ([`KvType::name`], as llama.cpp's tools and
    /// flags spell a cache type); None for a name no type has.
    pub fn from_name(name: &str) -> Option<KvType> {
        KV_TYPES.into_iter().find(|t| t.name() == name)
    }

    /// Its name in shader variant names (`attention_f16`), on the command
    /// line (`--kv-type f16`) and in reference-data/models.json.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
        }
    }

    /// The macro that selects its branch of `shaders/common/kv.glsl`
    /// (f32, the branch without one: none).
    pub fn define(self) -> Option<&'static str> {
        match self {
            KvType::F32 => None,
            KvType::F16 => Some("KV_F16"),
        }
    }

    /// Bytes per element of a cache buffer (an f16 cache's 32-bit words
    /// hold two elements).
    pub fn elem_bytes(self) -> usize {
        match self {
            KvType::F32 => 4,
            KvType::F16 => 2,
        }
    }

    /// The invocations of `kv_write.comp` that write `n` elements
    /// (kv.glsl's KV_WRITE_RANGE: f32 one an element; f16 one a word, the
    /// words n elements touch being n / 2 + 1 at most).
    pub fn write_invocations(self, n: usize) -> usize {
        match self {
            KvType::F32 => n,
            KvType::F16 => n / 2 + 1,
        }
    }

    /// Its code for the decode kernels that write a cache of any type
    /// (`KV_CACHE_*` of kv.glsl: norm_rope.comp, matvec.comp's
    /// `EPI_ROPE`), which store a pair of elements at a time; `None`: they
    /// cannot write it (their fusions then leave the write to
    /// `kv_write.comp`).
    pub fn cache_code(self) -> Option<u32> {
        match self {
            KvType::F32 => Some(op_codes::KV_CACHE_F32),
            KvType::F16 => Some(op_codes::KV_CACHE_F16),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_types_are_listed_in_index_order() {
        for (i, ty) in KV_TYPES.into_iter().enumerate() {
            assert_eq!(ty.index(), i);
        }
    }

    #[test]
    fn every_kv_type_is_found_by_its_name_and_no_other() {
        for ty in KV_TYPES {
            assert_eq!(KvType::from_name(ty.name()), Some(ty));
        }
        assert_eq!(KvType::from_name("q9"), None);
        assert_eq!(KvType::from_name("F16"), None);
    }
}
