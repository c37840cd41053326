use super::super::read_u32;
use super::super::test_support::{bind, copy, fused_at, parts, tagged, Cmd};
use super::*;
use crate::ops::KvType;
use crate::vulkan::push::{KvWritePush, RmsNormPush, RopePush, UnaryPush};

/// A per-head norm of two heads of `group` from slot `out.buf - 2` into
/// `out`, its weight at slot `out.buf + 20`.
fn norm(out: &Bind, group: u32) -> Cmd {
    let push = RmsNormPush {
        n_groups: 2,
        group,
        ..RmsNormPush::default()
    };
    let (x, w) = (bind(out.buf - 2, 0, 64), bind(out.buf + 20, 0, 32));
    let binds = [x, out.clone(), w];
    tagged(
        Op::RmsNorm(push),
        &shaders::RMS_NORM_W,
        &binds,
        push.as_bytes(),
    )
}

fn rope(x: &Bind, head_dim: u32, half_rot: u32) -> Cmd {
    let push = RopePush {
        rows: 1,
        width: 16,
        head_dim,
        half_rot,
        pos_at: 1,
        ..RopePush::default()
    };
    let binds = [x.clone(), bind(2, 4, 8)];
    tagged(Op::Rope(push), &shaders::ROPE, &binds, push.as_bytes())
}

fn scale(x: &Bind) -> Cmd {
    let push = UnaryPush {
        n: 16,
        a: 0.25,
        ..UnaryPush::default()
    };
    tagged(
        Op::Scale(0.25),
        &shaders::UNARY,
        std::slice::from_ref(x),
        push.as_bytes(),
    )
}

fn write(x: &Bind, cache: &Bind, width: u32) -> Cmd {
    let push = KvWritePush {
        rows: 1,
        width,
        src_offset: 0,
        pos_at: 2,
    };
    let ty = KvType::F16;
    let binds = [x.clone(), cache.clone(), bind(2, 8, 12)];
    let shader = shaders::by_kv::KV_WRITE[ty.index()];
    tagged(Op::KvWrite { ty, push }, shader, &binds, push.as_bytes())
}

#[test]
fn norm_rope_takes_the_rope_of_its_output_read_ahead() {
    let (q, k) = (bind(5, 0, 64), bind(6, 0, 64));
    // q's and k's chains interleaved, as a layer records them.
    let cmds = [norm(&q, 8), norm(&k, 8), rope(&q, 8, 4), rope(&k, 8, 4)];
    let (c, takes) = fused_at(norm_rope, &cmds, 0).expect("matches");
    assert_eq!(
        (parts(&c).0.index, takes),
        (shaders::NORM_ROPE.index, vec![2])
    );
    // A partial rotation, an odd number of pairs, heads other than the
    // norm's groups, a RoPE of part of the output.
    for r in [rope(&q, 8, 2), rope(&q, 6, 3), rope(&q, 16, 8)] {
        assert!(fused_at(norm_rope, &[norm(&q, 8), r], 0).is_none());
    }
    let part = rope(&bind(5, 0, 32), 8, 4);
    assert!(fused_at(norm_rope, &[norm(&q, 8), part], 0).is_none());
    // A command between that touches the output, or the norm's input.
    for between in [copy(5, 9, 64), copy(3, 9, 64)] {
        let cmds = [norm(&q, 8), between, rope(&q, 8, 4)];
        assert!(fused_at(norm_rope, &cmds, 0).is_none());
    }
}

#[test]
fn norm_rope_goes_on_to_the_scale_and_the_cache_write() {
    let (q, k, cache) = (bind(5, 0, 64), bind(6, 0, 64), bind(7, 0, 4096));
    let cmds = [norm(&q, 8), rope(&q, 8, 4), scale(&q)];
    let (c, takes) = fused_at(norm_rope, &cmds, 0).expect("matches");
    let push = parts(&c).2;
    assert_eq!(takes, [1, 2]);
    assert_eq!(read_u32(&push, at!(has_scale)), 1);
    assert_eq!(read_u32(&push, at!(scale)), 0.25f32.to_bits());
    let cmds = [norm(&k, 8), rope(&k, 8, 4), write(&k, &cache, 16)];
    let (c, takes) = fused_at(norm_rope, &cmds, 0).expect("matches");
    let (_, binds, push) = parts(&c);
    assert_eq!((takes, binds[4].clone()), (vec![1, 2], cache.clone()));
    assert_eq!(read_u32(&push, at!(kv)), 2);
    assert_eq!(read_u32(&push, at!(kv_pos_at)), 2);
    // No scale once the cache is written (it holds the unscaled rows), no
    // second write; a write of rows of another width; a write after a
    // command that touches the cache; the rules off.
    let takes = |cmds: &[Cmd], ctx: &Ctx| norm_rope(&List::new(cmds), 0, ctx).unwrap().takes;
    let on = Ctx::for_tests();
    let w = || write(&k, &cache, 16);
    assert_eq!(
        takes(&[norm(&k, 8), rope(&k, 8, 4), w(), scale(&k)], &on),
        [1, 2]
    );
    assert_eq!(takes(&[norm(&k, 8), rope(&k, 8, 4), w(), w()], &on), [1, 2]);
    let narrow = write(&k, &cache, 8);
    assert_eq!(takes(&[norm(&k, 8), rope(&k, 8, 4), narrow], &on), [1]);
    let cmds = [norm(&k, 8), copy(9, 7, 4), rope(&k, 8, 4), w()];
    assert_eq!(takes(&cmds, &on), [2]);
    let mut off = Ctx::for_tests();
    off.off.set(Rule::NormRopeScale, true);
    off.off.set(Rule::NormRopeKv, true);
    assert_eq!(takes(&[norm(&q, 8), rope(&q, 8, 4), scale(&q)], &off), [1]);
    assert_eq!(takes(&[norm(&k, 8), rope(&k, 8, 4), w()], &off), [1]);
}
