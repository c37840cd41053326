//! Push-constant blocks mirrored from `shaders/common/push.glsl`.

/// A `#[repr(C)]` push-constant block that can be handed to the device as bytes.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, contain only 32-bit scalar fields
/// (`u32`, `i32`, `f32`) laid out exactly as the GLSL block, and have no padding,
/// so that every byte of the value is initialised.
pub unsafe trait PushConstants: Copy + 'static {
    /// The block's bytes, as `vkCmdPushConstants` takes them.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: the trait's contract: `Self` is repr(C) with only 32-bit scalar
        // fields and no padding, so all size_of::<Self>() bytes behind `self` are
        // initialised; the slice borrows `self` and lives no longer than it.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                std::mem::size_of::<Self>(),
            )
        }
    }
}

/// No push constants, for shaders without a push-constant block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoPush;

// SAFETY: a zero-sized repr(C) struct has no bytes at all.
unsafe impl PushConstants for NoPush {}

/// `BinaryPush` of `push.glsl`: elementwise binary ops over f32
/// (`shaders/binary.comp`), `out[out_offset + i] = a[a_offset + i] OP
/// b[b_offset + i]` for `i < n`, `OP` chosen by `op` (0: add; the codes are
/// listed in `binary.comp`). Offsets count elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BinaryPush {
    pub n: u32,
    pub a_offset: u32,
    pub b_offset: u32,
    pub out_offset: u32,
    pub op: u32,
}

const _: () = assert!(std::mem::size_of::<BinaryPush>() == 20);
const _: () = assert!(
    std::mem::size_of::<BinaryPush>() == super::shaders::BINARY.push_constant_size as usize
);

// SAFETY: repr(C), five u32 fields, 20 bytes (asserted above): no padding.
unsafe impl PushConstants for BinaryPush {}

impl BinaryPush {
    /// An add (`op` 0) of `n` elements from the start of each buffer.
    pub fn new(n: u32) -> Self {
        Self {
            n,
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_push_bytes() {
        let p = BinaryPush {
            n: 1,
            a_offset: 2,
            b_offset: 3,
            out_offset: 4,
            op: 5,
        };
        let bytes = p.as_bytes();
        assert_eq!(bytes.len(), 20);
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [1, 2, 3, 4, 5]);
        assert!(NoPush.as_bytes().is_empty());
    }
}
