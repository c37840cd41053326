//! [`Rule::RopeKv`](super::Rule::RopeKv): a RoPE then the cache write of the rows it rotated
//! becomes `shaders/rope.comp`'s KV_WRITE variant, so that the K cache
//! write runs beside the V one instead of after a barrier; the same bits.
//! Preconditions: the cache write is the command right after the RoPE and
//! writes exactly the rows rotated, rows as wide as the cache's; the RoPE
//! turns all of each head (n_rot = head_dim) in an even number of pairs.

use super::super::cmd::{Cmd, Op};
use super::list::{Ctx, Fusion, List};
use super::Bind;
use crate::vulkan::shaders;

/// [`Rule::RopeKv`](super::Rule::RopeKv) at command `i`: the RoPE with the cache write after
/// it.
pub(super) fn rope_kv(list: &List, i: usize, ctx: &Ctx) -> Option<Fusion> {
    let rope = list.at(i)?;
    let Op::Rope(p) = rope.op else {
        return None;
    };
    let j = list.next(i)?;
    let kv = list.at(j)?;
    let Op::KvWrite { ty, push: kp } = kv.op else {
        return None;
    };
    // Cache write bindings: src, cache, step; RoPE: x, step.
    let (x, dst) = (kv.bind(0), kv.bind(1));
    let elems = (x.bytes.end - x.bytes.start) / 4;
    if rope.bind(0) != x
        || elems != u64::from(kp.rows) * u64::from(kp.width)
        || 2 * p.half_rot != p.head_dim
        || p.half_rot % 2 != 0
    {
        return None;
    }
    let fused = shaders::by_kv::ROPE_KV[ty.index()];
    // Both positions: the inbox words from the lower to the higher.
    let steps = Bind::steps(p.pos_at, kp.pos_at);
    let mut push = rope.push.to_vec();
    push.extend_from_slice(&kp.pos_at.to_le_bytes());
    let groups = ctx.groups_1d(fused, u64::from(kp.rows) * u64::from(p.half_rot / 2))?;
    Some(Fusion {
        cmd: Cmd::dispatch(Op::Other, fused, &[x, steps, dst], push, groups),
        takes: vec![j],
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{bind, fused_at, parts, tagged};
    use super::*;
    use crate::ops::KvType;
    use crate::vulkan::push::{KvWritePush, RopePush};
    use crate::vulkan::PushConstants;

    #[test]
    fn rope_kv_takes_the_cache_write_of_a_whole_head_rope_after_it() {
        let (x, step, cache) = (bind(3, 0, 256), bind(2, 0, 4), bind(7, 0, 4096));
        let rope = |head_dim: u32, half_rot: u32| {
            let push = RopePush {
                rows: 1,
                width: 64,
                head_dim,
                half_rot,
                ..RopePush::default()
            };
            let binds = [x.clone(), step.clone()];
            tagged(Op::Rope(push), &shaders::ROPE, &binds, push.as_bytes())
        };
        let write = |src: &Bind, width: u32, ty: KvType| {
            let push = KvWritePush {
                rows: 1,
                width,
                src_offset: 0,
                pos_at: 1,
            };
            let binds = [src.clone(), cache.clone(), bind(2, 4, 8)];
            let shader = shaders::by_kv::KV_WRITE[ty.index()];
            tagged(Op::KvWrite { ty, push }, shader, &binds, push.as_bytes())
        };
        let cmds = [rope(16, 8), write(&x, 64, KvType::F16)];
        let (c, takes) = fused_at(rope_kv, &cmds, 0).expect("matches");
        let (shader, binds, push) = parts(&c);
        assert_eq!((shader.index, takes), (shaders::ROPE_KV_F16.index, vec![1]));
        assert_eq!((binds[2].clone(), push.len()), (cache.clone(), 40));
        // Rows of another width; other rows; a partial rotation; an odd
        // number of pairs; a command between.
        let no = |cmds: &[_]| fused_at(rope_kv, cmds, 0).is_none();
        assert!(no(&[rope(16, 8), write(&x, 32, KvType::F32)]));
        assert!(no(&[rope(16, 8), write(&bind(3, 0, 128), 32, KvType::F32)]));
        for (hd, half) in [(16, 4), (10, 5)] {
            assert!(no(&[rope(hd, half), write(&x, 64, KvType::F32)]));
        }
        let between = rope(16, 8);
        assert!(no(&[rope(16, 8), between, write(&x, 64, KvType::F32)]));
    }
}
