//! [`Rule::RopeKv`]: a RoPE then the cache write of the rows it rotated
//! becomes `shaders/rope.comp`'s KV_WRITE variant, so that the K cache
//! write runs beside the V one instead of after a barrier; the same bits.
//! Preconditions: the RoPE is the last command and rotated exactly the
//! rows written (`width` elements a row, the cache's row width), all of
//! each head (n_rot = head_dim) in an even number of pairs.

use super::window::Window;
use super::{on, read_u32, Fused, Rule};
use super::{Bind, VulkanBackend};
use crate::ops::{Act, KvType};
use crate::vulkan::push::RopePush;
use crate::vulkan::shaders;

/// [`Rule::RopeKv`]'s pattern: the fused kernel, its bindings and push
/// bytes, and its invocations for `rows` rows.
pub(super) fn rope_kv(
    win: Window,
    x: &Bind,
    width_matches: bool,
    dst: &Bind,
    ty: KvType,
    pos_at: u32,
    rows: u64,
) -> Option<(Fused, u64)> {
    let rope = win.last()?;
    if rope.shader.index != shaders::ROPE.index {
        return None;
    }
    let field = |at: usize| read_u32(rope.push, at);
    let head_dim = field(std::mem::offset_of!(RopePush, head_dim));
    let half_rot = field(std::mem::offset_of!(RopePush, half_rot));
    let rope_pos_at = field(std::mem::offset_of!(RopePush, pos_at));
    if rope.access[0].bind() != *x
        || 2 * half_rot != head_dim
        || half_rot % 2 != 0
        || !width_matches
    {
        return None;
    }
    let fused = shaders::by_kv::ROPE_KV[ty.index()];
    // Both positions: the inbox words from the lower to the higher.
    let steps = Bind::steps(rope_pos_at, pos_at);
    let mut push = rope.push.to_vec();
    push.extend_from_slice(&pos_at.to_le_bytes());
    let binds = vec![x.clone(), steps, dst.clone()];
    let fused = Fused {
        shader: fused,
        binds,
        push,
    };
    Some((fused, rows * u64::from(half_rot / 2)))
}

/// Records the write of `src` (`width` elements a row, into the cache
/// `dst` of `ty` at the position in inbox word `pos_at`) within the RoPE
/// recorded last ([`Rule::RopeKv`]). Returns whether it did.
pub(in super::super) fn kv_into_rope(
    b: &mut VulkanBackend,
    src: Act,
    width: usize,
    dst: &Bind,
    ty: KvType,
    pos_at: u32,
) -> bool {
    if !on(b, Rule::RopeKv) {
        return false;
    }
    let x = Bind::act(src);
    let rows = src.rows() as u64;
    let Some((f, n)) = rope_kv(b.window(), &x, src.width() == width, dst, ty, pos_at, rows) else {
        return false;
    };
    b.drop_last(1);
    let groups = b.groups_1d(f.shader, n);
    b.dispatch_bytes(f.shader, &f.binds, f.push, groups);
    true
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{bind, dispatch};
    use super::*;
    use crate::vulkan::PushConstants;

    #[test]
    fn rope_kv_takes_a_whole_head_rope_of_the_rows_written() {
        let (x, step, cache) = (bind(3, 0, 256), bind(2, 0, 4), bind(7, 0, 4096));
        let rope = |head_dim: u32, half_rot: u32| {
            let push = RopePush {
                rows: 1,
                width: 64,
                head_dim,
                half_rot,
                ..RopePush::default()
            };
            dispatch(&shaders::ROPE, &[x.clone(), step.clone()], push.as_bytes())
        };
        let cmds = [rope(16, 8)];
        let w = Window { cmds: &cmds };
        let (f, n) = rope_kv(w, &x, true, &cache, KvType::F16, 1, 1).unwrap();
        assert_eq!((f.shader.index, n), (shaders::ROPE_KV_F16.index, 4));
        assert_eq!((f.binds[2].clone(), f.push.len()), (cache.clone(), 40));
        // Rows of another width; other rows; a partial rotation; an odd
        // number of pairs.
        assert!(rope_kv(w, &x, false, &cache, KvType::F16, 1, 1).is_none());
        assert!(rope_kv(w, &bind(3, 0, 128), true, &cache, KvType::F32, 1, 1).is_none());
        for (hd, half) in [(16, 4), (10, 5)] {
            let cmds = [rope(hd, half)];
            let w = Window { cmds: &cmds };
            assert!(rope_kv(w, &x, true, &cache, KvType::F32, 1, 1).is_none());
        }
    }
}
