//! Commands for the rules' unit tests, made as the backend records them
//! (the accesses from the shader's bindings), with no device.

pub(super) use super::super::cmd::Cmd;
use super::super::cmd::ShaderRef;
use super::super::hazard::Access;
use super::Bind;
use crate::vulkan::{BindingAccess, Shader};

/// Bytes `start..end` of buffer slot `buf`.
pub(super) fn bind(buf: u32, start: u64, end: u64) -> Bind {
    Bind {
        buf,
        bytes: start..end,
    }
}

/// A dispatch of `shader` with `binds` and `push`, one workgroup.
pub(super) fn dispatch(shader: &'static Shader, binds: &[Bind], push: &[u8]) -> Cmd {
    assert_eq!(binds.len(), shader.bindings.len(), "{}", shader.name);
    assert_eq!(
        push.len(),
        shader.push_constant_size as usize,
        "{}",
        shader.name
    );
    Cmd::Dispatch {
        shader: ShaderRef(shader),
        bufs: binds.iter().map(|b| b.buf).collect(),
        push: push.to_vec(),
        groups: [1, 1, 1],
        access: binds
            .iter()
            .zip(shader.bindings)
            .map(|(b, how)| Access {
                buf: b.buf,
                range: b.bytes.clone(),
                write: !matches!(how, BindingAccess::Read),
            })
            .collect(),
    }
}
