//! The compiled shader table: one [`Shader`] constant per variant that
//! `engine/build.rs` compiled from `shaders/` (e.g. [`BINARY`]), plus [`ALL`]
//! and, per kernel family with the weight-type axis, its variants in an
//! array indexed as [`crate::ggml_type::WEIGHT_TYPES`] ([`by_type`]); per
//! family with the KV-type axis, one indexed as
//! [`crate::kv_type::KV_TYPES`] ([`by_kv`]).

/// How a shader accesses one storage-buffer binding (from SPIR-V decorations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingAccess {
    /// Declared `readonly`.
    Read,
    /// Declared `writeonly`.
    Write,
    /// Read and written.
    ReadWrite,
    /// No buffer declared at this binding number (a gap), or neither read nor written.
    Unused,
}

/// One compiled compute shader and what reflection found in it.
#[derive(Clone, Copy, Debug)]
pub struct Shader {
    /// Position in [`ALL`]; the pipeline cache is indexed by it.
    pub index: usize,
    /// Variant name (the key pipelines are cached under).
    pub name: &'static str,
    /// Source file under `shaders/`.
    pub source: &'static str,
    /// Macros this variant was compiled with.
    pub defines: &'static [(&'static str, &'static str)],
    words: fn() -> &'static [u32],
    /// Storage-buffer bindings of descriptor set 0, indexed by binding number.
    pub bindings: &'static [BindingAccess],
    /// Size in bytes of the push-constant block (0 if none).
    pub push_constant_size: u32,
    /// `local_size_x/y/z` of the shader.
    pub local_size: [u32; 3],
}

impl Shader {
    /// The SPIR-V words (native endianness, 4-byte aligned).
    pub fn spirv(&self) -> &'static [u32] {
        (self.words)()
    }
}

/// Looks a shader up by variant name.
pub fn by_name(name: &str) -> Option<&'static Shader> {
    ALL.iter().find(|s| s.name == name)
}

/// SPIR-V bytes as `include_bytes!` gives them, aligned for reading as `u32` words.
#[repr(C, align(4))]
struct SpirvBytes<const N: usize>([u8; N]);

impl<const N: usize> SpirvBytes<N> {
    fn words(&'static self) -> &'static [u32] {
        const {
            assert!(
                N.is_multiple_of(4),
                "SPIR-V is a whole number of 32-bit words"
            )
        };
        // SAFETY: `self` is a 'static, immutable, 4-byte-aligned (repr align(4)) array
        // of N bytes with N a multiple of 4, so it holds exactly N / 4 properly aligned,
        // initialised u32 values (every bit pattern is a valid u32). build.rs wrote the
        // words in the target's byte order.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u32>(), N / 4) }
    }
}

include!(concat!(env!("OUT_DIR"), "/shaders.rs"));

/// Weight rows per workgroup of a `matvec` variant: `ROWS_PER_WG` for the
/// block types, `NR` (2) of `shaders/matvec.comp` for the float types.
pub(crate) fn matvec_rows(shader: &Shader) -> usize {
    if shader.defines.iter().any(|(k, _)| *k == "ROWS_PER_WG") {
        define(shader, "ROWS_PER_WG")
    } else {
        2
    }
}

/// The value of macro `name` in `shader`'s variant (`ROWS`, `TOKENS` of the
/// `matmul_cpu.comp` variants in engine/build/variants.rs).
pub(crate) fn define(shader: &Shader, name: &str) -> usize {
    shader
        .defines
        .iter()
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("shader {} has no numeric {name}", shader.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_indexed_and_spirv_is_valid() {
        for (i, shader) in ALL.iter().enumerate() {
            assert_eq!(shader.index, i);
            let words = shader.spirv();
            assert_eq!(words[0], 0x0723_0203, "{}: SPIR-V magic", shader.name);
            assert_eq!(words.as_ptr() as usize % 4, 0);
            assert_eq!(by_name(shader.name).unwrap().index, i);
        }
        assert!(by_name("no-such-shader").is_none());
    }

    #[test]
    fn by_kv_arrays_are_indexed_as_kv_types() {
        use crate::kv_type::KV_TYPES;
        let families = [
            by_kv::ATTENTION,
            by_kv::ATTENTION_ROWS,
            by_kv::ATTENTION_SPLIT,
            by_kv::ATTENTION_CPU,
            by_kv::ATTENTION_KEYS_CPU,
            by_kv::KV_WRITE,
            by_kv::ROPE_KV,
        ];
        for ty in KV_TYPES {
            assert_eq!(
                by_kv::ATTENTION[ty.index()].name,
                format!("attention_{}", ty.name())
            );
            assert_eq!(
                by_kv::KV_WRITE[ty.index()].name,
                format!("kv_write_{}", ty.name())
            );
            for family in families {
                let shader = family[ty.index()];
                let defined = |d: &str| shader.defines.iter().any(|(k, _)| *k == d);
                for other in KV_TYPES.into_iter().filter_map(|t| t.define()) {
                    assert_eq!(
                        defined(other),
                        ty.define() == Some(other),
                        "{}",
                        shader.name
                    );
                }
            }
        }
    }

    #[test]
    fn binary_reflection() {
        assert_eq!(BINARY.name, "binary");
        assert_eq!(
            BINARY.bindings,
            &[
                BindingAccess::Read,
                BindingAccess::Read,
                BindingAccess::Write
            ]
        );
        assert_eq!(BINARY.push_constant_size, 20);
        assert_eq!(BINARY.local_size, [256, 1, 1]);
    }
}
