use super::super::read_u32;
use super::super::test_support::{bind, copy, fused_at, parts, tagged, Cmd};
use super::super::Bind;
use super::*;
use crate::ops::BinaryOp;
use crate::vulkan::push::{binary_code, RmsNormPush};

fn add(x: &Bind, y: &Bind) -> Cmd {
    let push = BinaryPush {
        n: 4,
        a_offset: 4,
        b_offset: 8,
        out_offset: 4,
        op: binary_code(BinaryOp::Add),
    };
    let binds = [x.clone(), y.clone(), x.clone()];
    tagged(Op::Add, &shaders::BINARY, &binds, push.as_bytes())
}

fn norm(x: &Bind, out: &Bind, w: &Bind) -> Cmd {
    let push = RmsNormPush {
        n_groups: 1,
        group: 4,
        ..RmsNormPush::default()
    };
    let binds = [x.clone(), out.clone(), w.clone()];
    tagged(
        Op::RmsNorm(push),
        &shaders::RMS_NORM_W,
        &binds,
        push.as_bytes(),
    )
}

#[test]
fn add_norm_takes_the_norm_of_the_sum_after_an_add_in_place() {
    let (x, y, out, w) = (
        bind(3, 0, 16),
        bind(4, 32, 48),
        bind(5, 0, 16),
        bind(6, 0, 16),
    );
    let cmds = [add(&x, &y), norm(&x, &out, &w)];
    let (c, takes) = fused_at(add_norm, &cmds, 0).expect("matches");
    let (shader, binds, push) = parts(&c);
    assert_eq!(
        (shader.index, takes),
        (shaders::ADD_RMS_NORM_W.index, vec![1])
    );
    assert_eq!(binds, [x.clone(), out.clone(), w.clone(), y.clone()]);
    assert_eq!(read_u32(&push, 24), 8, "the addend's offset");
    assert!(add_norm_takes(&cmds, 1, &Ctx::for_tests()));
    // The norm of another buffer, an output over the addend or the sum, a
    // command between, no add.
    let no = |cmds: &[Cmd]| fused_at(add_norm, cmds, 0).is_none();
    assert!(no(&[add(&x, &y), norm(&out, &x, &w)]));
    assert!(no(&[add(&x, &y), norm(&x, &bind(4, 40, 56), &w)]));
    assert!(no(&[add(&x, &y), norm(&x, &x, &w)]));
    assert!(no(&[add(&x, &y), copy(9, 10, 4), norm(&x, &out, &w)]));
    assert!(no(&[norm(&y, &y, &w), norm(&x, &out, &w)]));
    let mut off = Ctx::for_tests();
    off.off.set(Rule::AddNorm, true);
    assert!(add_norm(&List::new(&cmds), 0, &off).is_none());
    assert!(!add_norm_takes(&cmds, 1, &off));
}

#[test]
fn norm_add_takes_the_add_of_a_post_norm_in_place_after_it() {
    let (x, y, w) = (bind(3, 0, 16), bind(4, 0, 16), bind(6, 0, 16));
    let cmds = [norm(&y, &y, &w), add(&x, &y)];
    let (c, takes) = fused_at(norm_add, &cmds, 0).expect("matches");
    let (shader, binds, push) = parts(&c);
    assert_eq!(
        (shader.index, takes),
        (shaders::RMS_NORM_W_ADD_TO.index, vec![1])
    );
    assert_eq!(binds, [y.clone(), y.clone(), w.clone(), x.clone()]);
    assert_eq!(read_u32(&push, 24), 4, "the residual's offset");
    // Not in place; the add's target overlapping the norm's rows; an add
    // of another row; a command between.
    let no = |cmds: &[Cmd]| fused_at(norm_add, cmds, 0).is_none();
    assert!(no(&[norm(&x, &y, &w), add(&x, &y)]));
    assert!(no(&[norm(&y, &y, &w), add(&bind(4, 8, 24), &y)]));
    assert!(no(&[norm(&y, &y, &w), add(&x, &bind(5, 0, 16))]));
    assert!(no(&[norm(&y, &y, &w), copy(9, 10, 4), add(&x, &y)]));
}
