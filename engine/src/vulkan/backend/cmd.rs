//! The commands a [`VulkanBackend`](super::VulkanBackend) records, with the
//! byte ranges each reads and writes.

use super::hazard::Access;
use crate::vulkan::Shader;

/// One recorded command.
pub(super) enum Cmd {
    Dispatch {
        shader: &'static Shader,
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

impl Cmd {
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
