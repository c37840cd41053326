//! What the rules of the fusion pass (`pass.rs`) read: the plain list,
//! less the commands an earlier match took in ([`List`]), each dispatch
//! as a [`Dispatch`] with its op tag, and the switches and device limits
//! ([`Ctx`]); and what a rule gives ([`Fusion`]). Pure: the rules' unit
//! tests build a list of plain commands with no device.

use super::super::cmd::{Cmd, Op};
use super::super::hazard::Access;
use super::super::VulkanBackend;
use super::{Bind, Rule, Unfused};
use crate::fault;
use crate::vulkan::pipeline::groups_1d as pipeline_groups_1d;
use crate::vulkan::Shader;

/// What a rule reads besides the list.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ctx {
    /// The rules turned off.
    pub off: Unfused,
    /// Whether the fused matvecs run their subgroup-shuffle twins.
    pub sg: bool,
    /// The device's workgroup counts.
    pub max_groups: [u32; 3],
}

impl Ctx {
    /// Whether `rule` is on.
    pub fn on(&self, rule: Rule) -> bool {
        !self.off.is_off(rule)
    }

    /// Whether the rules of fused matvecs may run: `rule` on and no fault
    /// that acts on the kernels they replace (the add before a norm, the
    /// standalone quantizers).
    pub fn allowed(&self, rule: Rule) -> bool {
        self.on(rule) && !fault::active("missing-barrier") && !fault::active("gpu-act-f16-truncate")
    }

    /// Workgroups for `n` invocations of `shader`, or `None` past the
    /// device's counts (the plain kernels then run as recorded).
    pub fn groups_1d(&self, shader: &Shader, n: u64) -> Option<[u32; 3]> {
        pipeline_groups_1d(n, shader.local_size[0], self.max_groups).ok()
    }

    /// Every rule on, no subgroup twins, generous workgroup counts.
    #[cfg(test)]
    pub fn for_tests() -> Ctx {
        Ctx {
            off: Unfused::default(),
            sg: false,
            max_groups: [65535; 3],
        }
    }
}

/// A recorded dispatch as a rule reads it.
pub(in super::super) struct Dispatch<'a> {
    pub op: Op,
    pub shader: &'static Shader,
    pub push: &'a [u8],
    pub groups: [u32; 3],
    pub access: &'a [Access],
}

impl Dispatch<'_> {
    /// Its bindings, in binding order.
    pub fn binds(&self) -> Vec<Bind> {
        self.access.iter().map(Access::bind).collect()
    }

    /// Binding `k`.
    pub fn bind(&self, k: usize) -> Bind {
        self.access[k].bind()
    }
}

/// The dispatch `c` is, if it is one.
pub(in super::super) fn dispatch_of(c: &Cmd) -> Option<Dispatch<'_>> {
    match c {
        Cmd::Dispatch {
            op,
            shader,
            push,
            groups,
            access,
            ..
        } => Some(Dispatch {
            op: *op,
            shader: shader.0,
            push,
            groups: *groups,
            access,
        }),
        _ => None,
    }
}

/// A rule's match: the kernel that stands in place of the command the
/// rule was tried at, and the later commands it takes in.
pub(super) struct Fusion {
    pub cmd: Cmd,
    pub takes: Vec<usize>,
}

/// The plain list as the rules read it: the commands, less those an
/// earlier match took in.
pub(super) struct List<'a> {
    cmds: &'a [Cmd],
    taken: Vec<bool>,
}

impl<'a> List<'a> {
    pub fn new(cmds: &'a [Cmd]) -> List<'a> {
        List {
            cmds,
            taken: vec![false; cmds.len()],
        }
    }

    /// Command `i`, when it is a dispatch not taken in.
    pub fn at(&self, i: usize) -> Option<Dispatch<'a>> {
        if *self.taken.get(i)? {
            return None;
        }
        dispatch_of(&self.cmds[i])
    }

    /// Whether an earlier match took command `i` in.
    pub fn taken(&self, i: usize) -> bool {
        self.taken[i]
    }

    /// Marks command `i` taken in.
    pub fn take(&mut self, i: usize) {
        self.taken[i] = true;
    }

    /// Command `i`, taken in or not.
    pub fn cmd(&self, i: usize) -> &'a Cmd {
        &self.cmds[i]
    }

    /// The command after command `i` (skipping those taken in).
    pub fn next(&self, i: usize) -> Option<usize> {
        (i + 1..self.cmds.len()).find(|&j| !self.taken[j])
    }

    /// The first command after command `i` that touches any byte of
    /// `bind`.
    pub fn next_touching(&self, i: usize, bind: &Bind) -> Option<usize> {
        (i + 1..self.cmds.len())
            .find(|&j| !self.taken[j] && touches(&self.cmds[j], std::slice::from_ref(bind)))
    }

    /// Whether no command strictly between `from` and `to` (but those in
    /// `skip`, which a match takes in) touches any byte of `binds`.
    pub fn untouched(&self, from: usize, to: usize, binds: &[Bind], skip: &[usize]) -> bool {
        !(from + 1..to)
            .any(|j| !self.taken[j] && !skip.contains(&j) && touches(&self.cmds[j], binds))
    }
}

/// Whether two bindings share a byte.
pub(in super::super) fn overlaps(a: &Bind, b: &Bind) -> bool {
    a.buf == b.buf && a.bytes.start < b.bytes.end && b.bytes.start < a.bytes.end
}

/// Whether command `c` touches any byte of `binds`.
fn touches(c: &Cmd, binds: &[Bind]) -> bool {
    let hit = |a: &Access| binds.iter().any(|b| overlaps(&a.bind(), b));
    match c {
        Cmd::Dispatch { access, .. } => access.iter().any(hit),
        _ => c.access().iter().any(hit),
    }
}

impl Ctx {
    /// `b`'s switches and workgroup counts.
    pub fn of(b: &VulkanBackend) -> Ctx {
        Ctx {
            off: b.fuse.off,
            sg: b.matvec_subgroups,
            max_groups: b.ctx.limits().max_compute_work_group_count,
        }
    }
}
