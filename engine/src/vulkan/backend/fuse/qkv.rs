//! A layer's Q, K and V products in one dispatch: `shaders/matvec.comp`'s
//! `MULTI` variants (`by_type::MATVEC_NORM_MULTI`).
//!
//! The decode step records Q, K and V as three fused matvecs of one normed
//! row (`matvec.rs`), each with its RoPE and cache-write epilogue
//! where one applies (`matvec_rope.rs`), one after another with nothing
//! between them. [`Rule::Qkv`] of the pass (`pass.rs`): a run of two or
//! three such dispatches, one right after another, that read the same norm
//! of the same row, have one weight type and row width, and touch nothing
//! another of them writes becomes one dispatch whose workgroups are the
//! run's workgroups one product after another: two dispatches fewer on a
//! layer's first stage, none of them dependent. Every row is computed by
//! the code its own variant ran (the same prologue, products and
//! epilogue), so the results are the same bits (tests:
//! `engine/tests/vulkan_matvec_fused.rs`). Preconditions (each product):
//! a normed product (`Norm` / `NormOut`, with or without its RoPE
//! epilogue) whose rows pair within its workgroups; after the first, not
//! the norm's first product; the rest as [`joins`] states.

use super::super::cmd::{Cmd, Op};
use super::super::hazard::Access;
use super::super::INBOX;
use super::list::{Ctx, Fusion, List};
use super::matvec::{family, kind_of, Kind};
use super::matvec_rope::{pairs_whole, read_epi};
use super::{overlaps, read_u32, Bind, Rule};
use crate::fault;
use crate::vulkan::push::{
    MatvecFusedPush, MultiEpi, RopeEpi, WeightPush, KV_SHIFT, MAX_WIDTH, MAX_WORD, PUSH_BYTES,
    ROTATE, SEGMENTS, WIDTH_SHIFT, WRITE_NORM,
};
use crate::vulkan::shaders::matvec_rows;

/// One product of a run, as its own dispatch recorded it.
struct Product {
    kind: Kind,
    ty: usize,
    /// Bindings: weight, norm input, out, norm weight, then the norm's
    /// output (the `Out` kinds), then the inbox words and the cache (the
    /// `Rope` kinds).
    binds: Vec<Bind>,
    access: Vec<Access>,
    push: Vec<u8>,
    /// The epilogue (all zero without one).
    epi: RopeEpi,
}

impl Product {
    fn of(cmd: &Cmd) -> Option<Product> {
        let Cmd::Dispatch {
            shader,
            push,
            access,
            ..
        } = cmd
        else {
            return None;
        };
        // Every command of every submission comes here: the names first
        // (the normed families' all start so), the variant tables after.
        if !shader.name.starts_with("matvec_norm") {
            return None;
        }
        let (kind, ty) = kind_of(shader)?;
        let rope = match kind {
            Kind::Norm | Kind::NormOut => false,
            Kind::NormRope | Kind::NormOutRope => true,
            _ => return None,
        };
        if !pairs_whole(push, matvec_rows(shader)) {
            return None;
        }
        Some(Product {
            kind,
            ty,
            binds: access.iter().map(Access::bind).collect(),
            access: access.clone(),
            push: push.clone(),
            epi: if rope {
                read_epi(push)
            } else {
                RopeEpi::default()
            },
        })
    }

    fn writes_norm(&self) -> bool {
        matches!(self.kind, Kind::NormOut | Kind::NormOutRope)
    }

    fn weight_field(&self, at: usize) -> u32 {
        read_u32(&self.push, std::mem::offset_of!(MatvecFusedPush, w) + at)
    }

    /// The inbox words its epilogue reads.
    fn step(&self) -> Option<&Bind> {
        let rope = matches!(self.kind, Kind::NormRope | Kind::NormOutRope);
        rope.then(|| &self.binds[self.binds.len() - 2])
    }

    /// The cache it writes, when it writes one.
    fn cache(&self) -> Option<&Bind> {
        (self.epi.kv != 0).then(|| &self.binds[self.binds.len() - 1])
    }
}

/// Whether `next` may join `run`: the same weight type, norm (input,
/// weight, offset, eps) and row width; not the norm's first product; the
/// same rope (head dim, frequencies) where both rotate; an epilogue the
/// packed push words hold; no byte one writes that the other touches.
fn joins(run: &[Product], next: &Product) -> bool {
    let first = &run[0];
    let f = std::mem::offset_of!(MatvecFusedPush, f);
    let same_push = |a: &Product, at: std::ops::Range<usize>| a.push[at.clone()] == next.push[at];
    let w = |field: usize| {
        std::mem::offset_of!(MatvecFusedPush, w) + field
            ..std::mem::offset_of!(MatvecFusedPush, w) + field + 4
    };
    let same_row = same_push(first, w(std::mem::offset_of!(WeightPush, n_in)))
        && same_push(first, w(std::mem::offset_of!(WeightPush, row_bytes)))
        && same_push(first, w(std::mem::offset_of!(WeightPush, x_offset)))
        && same_push(first, w(std::mem::offset_of!(WeightPush, units)));
    // FusedPush: src_offset, aux_offset (the norm's), eps.
    let same_norm = first.binds[1] == next.binds[1]
        && first.binds[3] == next.binds[3]
        && same_push(first, f..f + 8)
        && same_push(first, f + 16..f + 20);
    let rope_agrees = run.iter().all(|p| {
        let (a, b) = (&p.epi, &next.epi);
        a.rope == 0
            || b.rope == 0
            || (a.head_dim, a.theta_scale.to_bits(), a.freq_scale.to_bits())
                == (b.head_dim, b.theta_scale.to_bits(), b.freq_scale.to_bits())
    });
    let clash = |x: &Access, y: &Access| (x.write || y.write) && overlaps(&x.bind(), &y.bind());
    let independent = run.iter().all(|p| {
        !p.access
            .iter()
            .any(|x| next.access.iter().any(|y| clash(x, y)))
    });
    run.len() < SEGMENTS
        && next.ty == first.ty
        && !next.writes_norm()
        && same_row
        && same_norm
        && rope_agrees
        && packs(first)
        && packs(next)
        && independent
}

/// Whether a product's epilogue fits [`MultiEpi`]'s packed words.
fn packs(p: &Product) -> bool {
    p.epi.kv_width <= MAX_WIDTH && p.epi.pos_at <= MAX_WORD && p.epi.kv_pos_at <= MAX_WORD
}

/// The longest run of products starting at command `i` (one or none when
/// nothing joins), and the commands of the run after the first.
fn run_at(list: &List, i: usize) -> (Vec<Product>, Vec<usize>) {
    let Some(first) = list.at(i).and_then(|_| Product::of(list.cmd(i))) else {
        return (Vec::new(), Vec::new());
    };
    let (mut run, mut takes) = (vec![first], Vec::new());
    let mut at = i;
    while let Some(j) = list.next(at) {
        let Some(next) = Product::of(list.cmd(j)) else {
            break;
        };
        if !joins(&run, &next) {
            break;
        }
        run.push(next);
        takes.push(j);
        at = j;
    }
    (run, takes)
}

/// [`Rule::Qkv`] at command `i`: the run of products there as one
/// `MULTI` dispatch, when it is more than one (and the fusions of matvecs
/// may run).
pub(super) fn qkv(list: &List, i: usize, ctx: &Ctx) -> Option<Fusion> {
    if !ctx.allowed(Rule::Qkv) {
        return None;
    }
    let (run, takes) = run_at(list, i);
    if run.len() < 2 {
        return None;
    }
    let cmd = record(&run, ctx)?;
    Some(Fusion { cmd, takes })
}

/// The run's products as one `MULTI` dispatch.
fn record(run: &[Product], ctx: &Ctx) -> Option<Cmd> {
    let first = &run[0];
    let shader = family(Kind::Multi, ctx.sg)[first.ty].expect("every family has the same types");
    let rows_per_wg = matvec_rows(shader) as u64;
    let mut epi = MultiEpi::default();
    if let Some(r) = run.iter().find(|p| p.epi.rope != 0) {
        epi.head_dim = r.epi.head_dim;
        (epi.theta_scale, epi.freq_scale) = (r.epi.theta_scale, r.epi.freq_scale);
    }
    let mut groups = 0;
    let mut segs: Vec<[Bind; 3]> = Vec::new();
    for (k, p) in run.iter().enumerate() {
        let rows = p.weight_field(std::mem::offset_of!(WeightPush, rows));
        let out = p.weight_field(std::mem::offset_of!(WeightPush, out_offset));
        let e = &p.epi;
        let mut flags = (e.rope * ROTATE) | (e.kv << KV_SHIFT) | (e.kv_width << WIDTH_SHIFT);
        if k == 0 && p.writes_norm() {
            flags |= WRITE_NORM;
        }
        epi.seg[k] = [rows, out, flags, e.pos_at | (e.kv_pos_at << 16)];
        groups += u64::from(rows).div_ceil(rows_per_wg);
        let cache = p.cache().unwrap_or(&p.binds[2]).clone();
        segs.push([p.binds[0].clone(), p.binds[2].clone(), cache]);
    }
    // A missing third segment: no rows, the second's bindings again.
    while segs.len() < SEGMENTS {
        segs.push(segs[segs.len() - 1].clone());
    }
    if fault::active("gpu-qkv-merge") && run.len() == SEGMENTS {
        // The second and third products' weights bound the wrong way round.
        let w1 = segs[1][0].clone();
        segs[1][0] = std::mem::replace(&mut segs[2][0], w1);
    }
    // The inbox words any epilogue reads (none: the norm input, unread).
    let steps: Vec<&Bind> = run.iter().filter_map(Product::step).collect();
    let step = match (
        steps.iter().map(|s| s.bytes.start).min(),
        steps.iter().map(|s| s.bytes.end).max(),
    ) {
        (Some(lo), Some(hi)) => Bind {
            buf: INBOX,
            bytes: lo..hi,
        },
        _ => first.binds[1].clone(),
    };
    let norm_out = if first.writes_norm() {
        first.binds[4].clone()
    } else {
        first.binds[2].clone()
    };
    let [s0, s1, s2] = [&segs[0], &segs[1], &segs[2]];
    let binds = [
        s0[0].clone(),
        first.binds[1].clone(),
        s0[1].clone(),
        first.binds[3].clone(),
        norm_out,
        step,
        s0[2].clone(),
        s1[0].clone(),
        s1[1].clone(),
        s1[2].clone(),
        s2[0].clone(),
        s2[1].clone(),
        s2[2].clone(),
    ];
    let mut push = first.push[..PUSH_BYTES].to_vec();
    for v in [
        epi.head_dim,
        epi.theta_scale.to_bits(),
        epi.freq_scale.to_bits(),
    ] {
        push.extend_from_slice(&v.to_le_bytes());
    }
    for v in epi.seg.iter().flatten() {
        push.extend_from_slice(&v.to_le_bytes());
    }
    let groups = ctx.groups_1d(shader, groups * u64::from(shader.local_size[0]))?;
    Some(Cmd::dispatch(Op::Other, shader, &binds, push, groups))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{bind, dispatch};
    use super::*;
    use crate::ggml_type::{weight_index, GgmlType};
    use crate::vulkan::push::FusedPush;
    use crate::vulkan::PushConstants;

    /// A normed product of 64 rows of weight `w` into `out`, the row
    /// normed from slot 3 with the weight at slot 4 (`write`: the first
    /// product of that norm, writing it to slot 5).
    fn product(ty: GgmlType, w: u32, out: &Bind, write: bool) -> Cmd {
        let t = weight_index(ty).unwrap();
        let kind = if write { Kind::NormOut } else { Kind::Norm };
        let shader = family(kind, false)[t].unwrap();
        let push = MatvecFusedPush {
            w: WeightPush {
                n_in: 64,
                rows: 64,
                n_out: 64,
                n_tok: 1,
                ..WeightPush::default()
            },
            f: FusedPush {
                eps: 1e-5,
                ..FusedPush::default()
            },
        };
        let mut binds = vec![
            bind(w, 0, 4096),
            bind(3, 0, 256),
            out.clone(),
            bind(4, 0, 256),
        ];
        if write {
            binds.push(bind(5, 0, 256));
        }
        dispatch(shader, &binds, push.as_bytes())
    }

    #[test]
    fn qkv_runs_the_products_of_one_norm_of_one_type() {
        let ty = GgmlType::Q4_1;
        let (q, k, v) = (bind(10, 0, 256), bind(11, 0, 256), bind(12, 0, 256));
        let cmds = [
            product(ty, 20, &q, true),
            product(ty, 21, &k, false),
            product(ty, 22, &v, false),
        ];
        assert_eq!(run_at(&List::new(&cmds), 0).0.len(), 3);
        // The norm's first product does not join a run; a product of
        // another type, or one that reads what another writes, ends it.
        assert_eq!(run_at(&List::new(&cmds), 1).0.len(), 2);
        let cmds = [
            product(ty, 20, &q, true),
            product(GgmlType::Q8_0, 21, &k, false),
        ];
        assert_eq!(run_at(&List::new(&cmds), 0).0.len(), 1);
        let cmds = [
            product(ty, 20, &q, true),
            product(ty, 21, &bind(3, 0, 256), false),
        ];
        assert_eq!(run_at(&List::new(&cmds), 0).0.len(), 1);
        let cmds = [product(ty, 20, &q, true)];
        assert!(run_at(&List::new(&cmds), 0).0.len() == 1 && Product::of(&cmds[0]).is_some());
    }

    #[test]
    fn qkv_merges_a_run_of_more_than_one_product_next_to_each_other() {
        use super::super::test_support::{copy, fused_at, parts};
        let ty = GgmlType::Q4_1;
        let (q, k, v) = (bind(10, 0, 256), bind(11, 0, 256), bind(12, 0, 256));
        let cmds = [
            product(ty, 20, &q, true),
            product(ty, 21, &k, false),
            product(ty, 22, &v, false),
        ];
        let (c, takes) = fused_at(qkv, &cmds, 0).expect("matches");
        let (shader, binds, _) = parts(&c);
        let t = weight_index(ty).unwrap();
        assert_eq!(shader.index, family(Kind::Multi, false)[t].unwrap().index);
        assert_eq!((takes, binds.len()), (vec![1, 2], 13));
        // One product alone; a command between.
        assert!(fused_at(qkv, &cmds[..1], 0).is_none());
        let cmds = [
            product(ty, 20, &q, true),
            copy(30, 31, 4),
            product(ty, 21, &k, false),
        ];
        assert!(fused_at(qkv, &cmds, 0).is_none());
    }
}
