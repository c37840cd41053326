//! The commands a [`VulkanBackend`](super::VulkanBackend) records, with the
//! byte ranges each reads and writes.

use super::hazard::Access;
use super::Bind;
use crate::ggml_type::GgmlType;
use crate::ops::{GluKind, KvType};
use crate::vulkan::push::{KvWritePush, QuantizePush, RmsNormPush, RopePush};
use crate::vulkan::{BindingAccess, Shader, Stages};

/// What a plain dispatch computes, as the decode fusion pass reads it
/// (`fuse/pass.rs`): each op file records its kernel with the tag of its
/// op, and the rules match these tags (with the dispatch's bindings)
/// instead of guessing from shaders and push bytes. Every other dispatch,
/// a fused one included, is [`Op::Other`]: no rule looks into it by its
/// tag.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Op {
    /// `x += y` (`binary.comp`; bindings x, y, x).
    Add,
    /// `x = glu(x, y)` (`binary.comp`; bindings x, y, x).
    Glu(GluKind),
    /// `x *= s` (`unary.comp`; binding x).
    Scale(f32),
    /// An RMS norm with its weight (`rms_norm.comp` W; bindings x, out, w).
    RmsNorm(RmsNormPush),
    /// A RoPE in place (`rope.comp`; bindings x, inbox step).
    Rope(RopePush),
    /// A cache write of rows (`kv_write.comp`; bindings src, cache, inbox
    /// step).
    KvWrite { ty: KvType, push: KvWritePush },
    /// The quantization of an activation row for the integer products
    /// (`quantize_act.comp`; bindings x, blocks).
    Quantize { fmt: GgmlType, push: QuantizePush },
    /// Anything else.
    Other,
}

/// One recorded command.
#[derive(Clone, PartialEq)]
pub(super) enum Cmd {
    Dispatch {
        /// The op, for the fusion pass.
        op: Op,
        shader: ShaderRef,
        /// Buffer slot per binding.
        bufs: Vec<u32>,
        push: Vec<u8>,
        groups: [u32; 3],
        access: Vec<Access>,
    },
    Copy {
        src: u32,
        src_offset: u64,
        dst: u32,
        dst_offset: u64,
        size: u64,
    },
    Fill {
        buf: u32,
        offset: u64,
        size: u64,
        value: u32,
    },
}

/// A shader as a command names it: equal when it is the same variant.
#[derive(Clone, Copy)]
pub(super) struct ShaderRef(pub &'static Shader);

impl PartialEq for ShaderRef {
    fn eq(&self, other: &ShaderRef) -> bool {
        self.0.index == other.0.index
    }
}

impl std::ops::Deref for ShaderRef {
    type Target = Shader;
    fn deref(&self) -> &Shader {
        self.0
    }
}

impl Cmd {
    /// A dispatch of `shader` with `binds` at bindings 0.. and `push`, over
    /// `groups` workgroups, tagged `op` (the accesses from the shader's
    /// bindings).
    ///
    /// # Panics
    /// When the bindings or push constants do not match the shader (a bug in
    /// the op's or rule's code).
    pub(super) fn dispatch(
        op: Op,
        shader: &'static Shader,
        binds: &[Bind],
        push: Vec<u8>,
        groups: [u32; 3],
    ) -> Cmd {
        assert_eq!(
            binds.len(),
            shader.bindings.len(),
            "{}: {} bindings for {}",
            shader.name,
            binds.len(),
            shader.bindings.len()
        );
        assert_eq!(
            push.len(),
            shader.push_constant_size as usize,
            "{}: push-constant size",
            shader.name
        );
        let access = binds
            .iter()
            .zip(shader.bindings)
            .map(|(b, how)| Access {
                buf: b.buf,
                range: b.bytes.clone(),
                write: !matches!(how, BindingAccess::Read),
            })
            .collect();
        Cmd::Dispatch {
            op,
            shader: ShaderRef(shader),
            bufs: binds.iter().map(|b| b.buf).collect(),
            push,
            groups,
            access,
        }
    }

    /// The pipeline stage the command runs in.
    pub(super) fn stage(&self) -> Stages {
        match self {
            Cmd::Dispatch { .. } => Stages::COMPUTE,
            Cmd::Copy { .. } | Cmd::Fill { .. } => Stages::TRANSFER,
        }
    }

    pub(super) fn access(&self) -> Vec<Access> {
        match self {
            Cmd::Dispatch { access, .. } => access.clone(),
            Cmd::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                size,
            } => vec![
                Access {
                    buf: *src,
                    range: *src_offset..src_offset + size,
                    write: false,
                },
                Access {
                    buf: *dst,
                    range: *dst_offset..dst_offset + size,
                    write: true,
                },
            ],
            Cmd::Fill {
                buf, offset, size, ..
            } => vec![Access {
                buf: *buf,
                range: *offset..offset + size,
                write: true,
            }],
        }
    }
}
