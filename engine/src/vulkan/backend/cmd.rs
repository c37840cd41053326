//! The commands a [`VulkanBackend`](super::VulkanBackend) records, with the
//! byte ranges each reads and writes.

use super::hazard::Access;
use crate::vulkan::{Shader, Stages};

/// One recorded command.
#[derive(Clone, PartialEq)]
pub(super) enum Cmd {
    Dispatch {
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
