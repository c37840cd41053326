//! What a rule sees of the recorded commands: [`Window`], a view of a
//! command list (pure: the rules' unit tests build one from a plain list),
//! and the backend's edits of its own list that a matched rule makes.

use super::super::cmd::Cmd;
use super::super::VulkanBackend;
use super::list::{dispatch_of, Dispatch};
use super::Bind;
use crate::vulkan::Shader;

/// Commands a rule looks back over for the one it joins
/// ([`Window::last_touching`]): a layer's q and k chains interleave (norm
/// q, norm k, RoPE q, RoPE k, scale q).
pub(in super::super) const LOOK_BACK: usize = 8;

/// A view of a recorded command list, the latest command last.
#[derive(Clone, Copy)]
pub(in super::super) struct Window<'a> {
    pub cmds: &'a [Cmd],
}

impl<'a> Window<'a> {
    /// The command `back` commands before the last one, when it is a
    /// dispatch.
    pub fn back(&self, back: usize) -> Option<Dispatch<'a>> {
        let i = self.cmds.len().checked_sub(back + 1)?;
        self.at(i)
    }

    /// The command recorded last, when it is a dispatch.
    pub fn last(&self) -> Option<Dispatch<'a>> {
        self.back(0)
    }

    /// Command `i`, when it is a dispatch.
    pub fn at(&self, i: usize) -> Option<Dispatch<'a>> {
        dispatch_of(self.cmds.get(i)?)
    }

    /// The latest of the last [`LOOK_BACK`] commands that touches any byte
    /// of `bind`, when it is a dispatch (a rule may record it again in
    /// place where the commands after it touch nothing of the new one:
    /// [`Window::untouched_after`]).
    pub fn last_touching(&self, bind: &Bind) -> Option<usize> {
        let from = self.cmds.len().saturating_sub(LOOK_BACK);
        let i = (from..self.cmds.len())
            .rev()
            .find(|&i| touches(&self.cmds[i], std::slice::from_ref(bind)))?;
        matches!(self.cmds[i], Cmd::Dispatch { .. }).then_some(i)
    }

    /// Whether no command after command `i` touches any byte of `binds`.
    pub fn untouched_after(&self, i: usize, binds: &[Bind]) -> bool {
        !self.cmds[i + 1..].iter().any(|c| touches(c, binds))
    }
}

/// Whether command `c` touches any byte of `binds`.
fn touches(c: &Cmd, binds: &[Bind]) -> bool {
    let hit = |buf: u32, r: &std::ops::Range<u64>| {
        binds
            .iter()
            .any(|b| b.buf == buf && r.start < b.bytes.end && b.bytes.start < r.end)
    };
    match c {
        Cmd::Dispatch { access, .. } => access.iter().any(|a| hit(a.buf, &a.range)),
        _ => c.access().iter().any(|a| hit(a.buf, &a.range)),
    }
}

impl VulkanBackend {
    /// The recorded commands, as the rules see them.
    pub(in super::super) fn window(&self) -> Window<'_> {
        Window { cmds: &self.cmds }
    }

    /// Drops the last `n` commands (those a rule replaces).
    pub(in super::super) fn drop_last(&mut self, n: usize) {
        self.cmds.truncate(self.cmds.len() - n);
    }

    /// Records `shader` in place of command `i` (a rule; the commands
    /// after it touch nothing of the new one).
    pub(in super::super) fn replace_dispatch(
        &mut self,
        i: usize,
        shader: &'static Shader,
        binds: &[Bind],
        push: Vec<u8>,
        groups: [u32; 3],
    ) {
        let n = self.cmds.len();
        self.dispatch_bytes(shader, binds, push, groups);
        if self.cmds.len() > n {
            let c = self.cmds.pop().expect("recorded above");
            self.cmds[i] = c;
        }
    }
}
