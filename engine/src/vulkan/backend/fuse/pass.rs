//! The decode fusion pass: one walk over a submission's plain command
//! list (what the op files recorded, each dispatch tagged with its
//! [`Op`]) that tries, at each command, the rules of [`PASS`] in their
//! order; a rule that matches reads ahead of that command for the rest of
//! its pattern and gives the fused kernel that stands in its place, and
//! the commands after it that it takes in. Commands taken in are skipped
//! when the walk comes to them, and a rule reading ahead does not see
//! them (they were moved up into an earlier kernel). As ggml-vulkan's
//! graph fusion (`ggml_can_fuse` and its callers): the rules see the whole
//! step, not only what was recorded before an op.
//!
//! Each rule is a pure function of the list and a [`Ctx`] (the switches
//! and the device's workgroup limits), so that its unit tests need no
//! device.

use super::super::cmd::{Cmd, Op};
use super::super::hazard::Access;
use super::super::VulkanBackend;
use super::{norm, norm_rope, qkv, quant, rope_kv, Bind, Rule, Unfused};
use crate::fault;
use crate::vulkan::pipeline::groups_1d as pipeline_groups_1d;
use crate::vulkan::Shader;

/// A rule of the pass: at command `i` of the list, the fused kernel and
/// the later commands it takes in, or `None`.
type RuleFn = fn(&List, usize, &Ctx) -> Option<Fusion>;

/// The rules of the pass, in stages: each stage is one walk over the list
/// the stage before it left, trying its rules in their order (that of
/// [`super::RULES`]) at each command. A later stage's rules take in the
/// kernels of an earlier one (the norm with its add, [`Rule::AddNorm`],
/// then its quantization, [`Rule::NormQuant`]). A rule whose pattern goes
/// on past its first match ([`Rule::NormRope`]: the scale and the cache
/// write after it) takes those too when their rules are on.
const STAGES: [&[(Rule, RuleFn)]; 2] = [
    &[
        (Rule::AddNorm, norm::add_norm),
        (Rule::NormAdd, norm::norm_add),
    ],
    &[
        (Rule::NormQuant, quant::norm_quant),
        (Rule::GluQuant, quant::glu_quant),
        (Rule::RopeKv, rope_kv::rope_kv),
        (Rule::NormRope, norm_rope::norm_rope),
        (Rule::Qkv, qkv::qkv),
    ],
];

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
        self.on(rule)
            && !fault::active("missing-barrier")
            && !fault::active("gpu-act-f16-truncate")
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
        !(from + 1..to).any(|j| !self.taken[j] && !skip.contains(&j) && touches(&self.cmds[j], binds))
    }
}

/// Whether two bindings share a byte.
pub(in super::super) fn overlaps(a: &Bind, b: &Bind) -> bool {
    a.buf == b.buf && a.bytes.start < b.bytes.end && b.bytes.start < a.bytes.end
}

/// Whether command `c` touches any byte of `binds`.
fn touches(c: &Cmd, binds: &[Bind]) -> bool {
    c.access().iter().any(|a| binds.iter().any(|b| overlaps(&a.bind(), b)))
}

/// `cmds` with the rules of [`STAGES`] applied, or `None` where none
/// matched.
pub(super) fn fuse(cmds: &[Cmd], ctx: &Ctx) -> Option<Vec<Cmd>> {
    let mut fused: Option<Vec<Cmd>> = None;
    for rules in STAGES {
        let now = fused.as_deref().unwrap_or(cmds);
        if let Some(next) = walk(now, rules, ctx) {
            fused = Some(next);
        }
    }
    fused
}

/// One walk of a stage's `rules` over `cmds`, or `None` where none
/// matched.
fn walk(cmds: &[Cmd], rules: &[(Rule, RuleFn)], ctx: &Ctx) -> Option<Vec<Cmd>> {
    let mut list = List::new(cmds);
    let mut out = Vec::with_capacity(cmds.len());
    let mut any = false;
    for i in 0..cmds.len() {
        if list.taken[i] {
            continue;
        }
        let fused = rules
            .iter()
            .filter(|(rule, _)| ctx.on(*rule))
            .find_map(|(_, f)| f(&list, i, ctx));
        match fused {
            Some(f) => {
                for j in f.takes {
                    debug_assert!(j > i && !list.taken[j], "a rule takes in later commands");
                    list.taken[j] = true;
                }
                out.push(f.cmd);
                any = true;
            }
            None => out.push(cmds[i].clone()),
        }
    }
    any.then_some(out)
}

/// The pass over `b`'s plain list `cmds` with its switches, or `None`
/// where no rule matched (the list is recorded as it is).
pub(in super::super) fn run(b: &VulkanBackend, cmds: &[Cmd]) -> Option<Vec<Cmd>> {
    fuse(cmds, &Ctx::of(b))
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
