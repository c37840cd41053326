//! Commands for the rules' unit tests, made as the backend records them
//! (the accesses from the shader's bindings), with no device.

pub(super) use super::super::cmd::{Cmd, Op};
pub(super) use super::list::{Ctx, List};
use super::Bind;
use crate::vulkan::Shader;

/// Bytes `start..end` of buffer slot `buf`.
pub(super) fn bind(buf: u32, start: u64, end: u64) -> Bind {
    Bind {
        buf,
        bytes: start..end,
    }
}

/// A dispatch of `shader` tagged `op` with `binds` and `push`, one
/// workgroup.
pub(super) fn tagged(op: Op, shader: &'static Shader, binds: &[Bind], push: &[u8]) -> Cmd {
    Cmd::dispatch(op, shader, binds, push.to_vec(), [1, 1, 1])
}

/// An untagged dispatch ([`Op::Other`]: a fused kernel, or one no rule
/// reads by its op).
pub(super) fn dispatch(shader: &'static Shader, binds: &[Bind], push: &[u8]) -> Cmd {
    tagged(Op::Other, shader, binds, push)
}

/// A copy of `size` bytes from slot `src` to slot `dst`.
pub(super) fn copy(src: u32, dst: u32, size: u64) -> Cmd {
    Cmd::Copy {
        src,
        src_offset: 0,
        dst,
        dst_offset: 0,
        size,
    }
}

/// The kernel a rule gives at command `i` of `cmds` with every rule on,
/// and the commands it takes in.
pub(super) fn fused_at(
    rule: fn(&List, usize, &Ctx) -> Option<super::list::Fusion>,
    cmds: &[Cmd],
    i: usize,
) -> Option<(Cmd, Vec<usize>)> {
    rule(&List::new(cmds), i, &Ctx::for_tests()).map(|f| (f.cmd, f.takes))
}

/// The shader, bindings and push bytes of dispatch `c`.
pub(super) fn parts(c: &Cmd) -> (&'static Shader, Vec<Bind>, Vec<u8>) {
    let d = super::list::dispatch_of(c).expect("a dispatch");
    (d.shader, d.binds(), d.push.to_vec())
}
