//! The residual add and the RMS norm, either way round, as one
//! `shaders/rms_norm.comp` dispatch:
//!
//! - [`Rule::AddNorm`]: `x += y` then `out = rms_norm(x) · w` (a pre-norm
//!   layer's next norm) becomes the ADD variant (x = x + y, then the norm
//!   of the sum). Preconditions: the add is the last command, in place on
//!   exactly `x`; the norm has a weight; `out` overlaps neither `x` nor
//!   `y`.
//! - [`Rule::NormAdd`]: `y = rms_norm(y) · w` in place then `x += y` (a
//!   post-norm, Gemma 3's after attention and after the FFN) becomes the
//!   ADD_TO variant, which writes the normed `y` as the norm did and adds
//!   it to `x` (one rounding, as `binary.comp`). Preconditions: the norm
//!   is the last command, with its weight, in place on exactly `y`; `x` is
//!   apart from `y`.
//!
//! One dispatch and one barrier fewer each, the same bits. Neither while
//! fault `missing-barrier` is injected (it drops the barrier between the
//! add and the norm).

use super::window::Window;
use super::{on, read_u32, Fused, Rule};
use super::{Bind, VulkanBackend};
use crate::fault;
use crate::ops::Act;
use crate::vulkan::push::{is_add, BinaryPush, RmsNormPush};
use crate::vulkan::{shaders, PushConstants};

// The fused variants are dispatched with the plain norm's workgroup count.
const _: () = {
    let wg = shaders::RMS_NORM.local_size[0];
    assert!(wg == shaders::RMS_NORM_W.local_size[0]);
    assert!(wg == shaders::ADD_RMS_NORM_W.local_size[0]);
    assert!(wg == shaders::RMS_NORM_W_Q8_0.local_size[0]);
    assert!(wg == shaders::ADD_RMS_NORM_W_Q8_1.local_size[0]);
    assert!(wg == shaders::RMS_NORM_W_ADD_TO.local_size[0]);
};

/// [`Rule::AddNorm`]'s pattern: the fused kernel for `rms_norm(x, w) ->
/// out` (push `norm`) after the commands in `w`, or `None`.
pub(super) fn add_norm(
    win: Window,
    x: &Bind,
    w: &Bind,
    out: &Bind,
    norm: &RmsNormPush,
) -> Option<Fused> {
    let add = win.last()?;
    if !is_add(add.shader, add.push) {
        return None;
    }
    // Add bindings: a, b, out.
    let [a, y, sum] = [0, 1, 2].map(|i| add.access[i].bind());
    if a != *x || sum != *x || super::overlaps(out, x) || super::overlaps(out, &y) {
        return None;
    }
    let y_offset = read_u32(add.push, std::mem::offset_of!(BinaryPush, b_offset));
    let mut push = norm.as_bytes().to_vec();
    push.extend_from_slice(&0u32.to_le_bytes()); // q_offset: no quantization
    push.extend_from_slice(&y_offset.to_le_bytes());
    Some(Fused {
        shader: &shaders::ADD_RMS_NORM_W,
        binds: vec![x.clone(), out.clone(), w.clone(), y],
        push,
    })
}

/// Records `rms_norm(x, w) -> out` together with the residual add
/// recorded last ([`Rule::AddNorm`]). Returns whether it did.
pub(in super::super) fn add_into_norm(
    b: &mut VulkanBackend,
    x: Act,
    w: &Bind,
    out: Act,
    push: &RmsNormPush,
    groups: [u32; 3],
) -> bool {
    if !on(b, Rule::AddNorm) || fault::active("missing-barrier") {
        return false;
    }
    let Some(f) = add_norm(b.window(), &Bind::act(x), w, &Bind::act(out), push) else {
        return false;
    };
    b.drop_last(1);
    b.dispatch_bytes(f.shader, &f.binds, f.push, groups);
    true
}

/// [`Rule::NormAdd`]'s pattern: the fused kernel for `x += y` (element
/// offset `x_offset`) after the commands in `w`, with the norm's
/// workgroups, or `None`.
pub(super) fn norm_add(
    win: Window,
    x: &Bind,
    y: &Bind,
    x_offset: u32,
) -> Option<(Fused, [u32; 3])> {
    let norm = win.last()?;
    if norm.shader.index != shaders::RMS_NORM_W.index {
        return None;
    }
    // Norm bindings: x, out, w.
    let [src, dst, nw] = [0, 1, 2].map(|i| norm.access[i].bind());
    if src != *y || dst != *y || super::overlaps(x, y) {
        return None;
    }
    let mut push = norm.push.to_vec();
    push.extend_from_slice(&0u32.to_le_bytes()); // q_offset: no quantization
    push.extend_from_slice(&x_offset.to_le_bytes());
    #[cfg(feature = "fault-injection")]
    let shader = if fault::active("gpu-post-norm-add") {
        &shaders::RMS_NORM_W_ADD_TO_UNWEIGHTED
    } else {
        &shaders::RMS_NORM_W_ADD_TO
    };
    #[cfg(not(feature = "fault-injection"))]
    let shader = &shaders::RMS_NORM_W_ADD_TO;
    let binds = vec![y.clone(), y.clone(), nw, x.clone()];
    Some((
        Fused {
            shader,
            binds,
            push,
        },
        norm.groups,
    ))
}

/// Records `x += y` together with the post-norm of `y` recorded last
/// ([`Rule::NormAdd`]). Returns whether it did.
pub(in super::super) fn norm_into_add(b: &mut VulkanBackend, x: Act, y: Act) -> bool {
    if !on(b, Rule::NormAdd) || fault::active("missing-barrier") {
        return false;
    }
    let x_offset = u32::try_from(x.elems().start).expect("activation offsets fit u32");
    let Some((f, groups)) = norm_add(b.window(), &Bind::act(x), &Bind::act(y), x_offset) else {
        return false;
    };
    b.drop_last(1);
    b.dispatch_bytes(f.shader, &f.binds, f.push, groups);
    true
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{bind, dispatch, Cmd};
    use super::*;
    use crate::ops::BinaryOp;
    use crate::vulkan::push::binary_code;

    fn add(x: &Bind, y: &Bind) -> Cmd {
        let push = BinaryPush {
            n: 4,
            b_offset: 8,
            op: binary_code(BinaryOp::Add),
            ..BinaryPush::default()
        };
        dispatch(
            &shaders::BINARY,
            &[x.clone(), y.clone(), x.clone()],
            push.as_bytes(),
        )
    }

    fn norm(x: &Bind, out: &Bind, w: &Bind) -> Cmd {
        let push = RmsNormPush {
            n_groups: 1,
            group: 4,
            ..RmsNormPush::default()
        };
        dispatch(
            &shaders::RMS_NORM_W,
            &[x.clone(), out.clone(), w.clone()],
            push.as_bytes(),
        )
    }

    #[test]
    fn add_norm_takes_an_add_in_place_before_a_norm_of_its_sum() {
        let (x, y, out, w) = (
            bind(3, 0, 16),
            bind(4, 32, 48),
            bind(5, 0, 16),
            bind(6, 0, 16),
        );
        let cmds = [add(&x, &y)];
        let p = RmsNormPush::default();
        let f = add_norm(Window { cmds: &cmds }, &x, &w, &out, &p).expect("matches");
        assert_eq!(f.shader.index, shaders::ADD_RMS_NORM_W.index);
        assert_eq!(f.binds, [x.clone(), out.clone(), w.clone(), y.clone()]);
        assert_eq!(read_u32(&f.push, 24), 8, "the addend's offset");
        // The norm of another buffer, an output over the addend, no add.
        assert!(add_norm(Window { cmds: &cmds }, &out, &w, &x, &p).is_none());
        assert!(add_norm(Window { cmds: &cmds }, &x, &w, &bind(4, 40, 56), &p).is_none());
        let cmds = [norm(&x, &out, &w)];
        assert!(add_norm(Window { cmds: &cmds }, &x, &w, &out, &p).is_none());
    }

    #[test]
    fn norm_add_takes_a_post_norm_in_place_before_the_add_of_its_output() {
        let (x, y, w) = (bind(3, 0, 16), bind(4, 0, 16), bind(6, 0, 16));
        let cmds = [norm(&y, &y, &w)];
        let (f, _) = norm_add(Window { cmds: &cmds }, &x, &y, 0).expect("matches");
        assert_eq!(f.binds, [y.clone(), y.clone(), w.clone(), x.clone()]);
        // Not in place; the add's target overlapping the norm's rows.
        let cmds = [norm(&x, &y, &w)];
        assert!(norm_add(Window { cmds: &cmds }, &x, &y, 0).is_none());
        let cmds = [norm(&y, &y, &w)];
        assert!(norm_add(Window { cmds: &cmds }, &bind(4, 8, 24), &y, 0).is_none());
    }
}
