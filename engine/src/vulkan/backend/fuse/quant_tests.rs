use super::super::test_support::{bind, dispatch, fused_at, parts, tagged, Cmd, Op};
use super::*;
use crate::ops::{BinaryOp, GluKind};
use crate::vulkan::push::{binary_code, QuantizePush};
use crate::vulkan::PushConstants;

fn norm(x: &super::super::Bind, out: &super::super::Bind, group: u32) -> Cmd {
    let push = RmsNormPush {
        n_groups: 1,
        group,
        ..RmsNormPush::default()
    };
    let w = bind(9, 0, 4 * u64::from(group));
    tagged(
        Op::RmsNorm(push),
        &shaders::RMS_NORM_W,
        &[x.clone(), out.clone(), w],
        push.as_bytes(),
    )
}

fn quantize(fmt: GgmlType, x: &super::super::Bind, q: &super::super::Bind, word0: u32) -> Cmd {
    let push = QuantizePush {
        n_seg: 1,
        x_offset: 0,
        out_offset: word0,
    };
    let shader = match fmt {
        GgmlType::Q8_0 => &shaders::QUANTIZE_Q8_0,
        GgmlType::Q8_1 => &shaders::QUANTIZE_Q8_1,
        _ => &shaders::QUANTIZE_Q8_K,
    };
    tagged(
        Op::Quantize { fmt, push },
        shader,
        &[x.clone(), q.clone()],
        push.as_bytes(),
    )
}

#[test]
fn norm_quant_takes_the_quantization_of_the_norm_output_after_it() {
    let (x, xn, q) = (bind(3, 0, 256), bind(4, 0, 256), bind(5, 0, 72));
    let cmds = [norm(&x, &xn, 64), quantize(GgmlType::Q8_0, &xn, &q, 7)];
    let (c, takes) = fused_at(norm_quant, &cmds, 0).expect("matches");
    let (shader, binds, push) = parts(&c);
    assert_eq!(shader.index, shaders::RMS_NORM_W_Q8_0.index);
    assert_eq!((binds[3].clone(), takes), (q.clone(), vec![1]));
    assert_eq!(read_u32(&push, 20), 7);
    // Q8_K; another row; a command between; a norm in place; a group of
    // no whole blocks or over the shared-memory limit; no weight.
    let no = |cmds: &[Cmd]| fused_at(norm_quant, cmds, 0).is_none();
    assert!(no(&[
        norm(&x, &xn, 64),
        quantize(GgmlType::Q8_K, &xn, &q, 7)
    ]));
    assert!(no(&[
        norm(&x, &xn, 64),
        quantize(GgmlType::Q8_0, &x, &q, 7)
    ]));
    let between = dispatch(&shaders::UNARY, &[bind(8, 0, 4)], &[0; 20]);
    assert!(no(&[
        norm(&x, &xn, 64),
        between,
        quantize(GgmlType::Q8_0, &xn, &q, 7)
    ]));
    assert!(no(&[norm(&x, &x, 64), quantize(GgmlType::Q8_0, &x, &q, 0)]));
    for group in [48, 4096] {
        let big = bind(4, 0, 4 * u64::from(group));
        let n = norm(&bind(3, 0, 4 * u64::from(group)), &big, group);
        assert!(no(&[n, quantize(GgmlType::Q8_1, &big, &q, 0)]));
    }
    let plain = dispatch(
        &shaders::RMS_NORM,
        &[x.clone(), xn.clone()],
        RmsNormPush::default().as_bytes(),
    );
    assert!(no(&[plain, quantize(GgmlType::Q8_0, &xn, &q, 7)]));
}

#[test]
fn glu_quant_takes_the_quantization_of_the_unit_output_after_it() {
    let (x, y, q) = (bind(3, 0, 256), bind(4, 0, 256), bind(5, 0, 72));
    let unit = |op: BinaryOp, x: &super::super::Bind| {
        let push = BinaryPush {
            n: 64,
            op: binary_code(op),
            ..BinaryPush::default()
        };
        let tag = match op {
            BinaryOp::Glu(k) => Op::Glu(k),
            _ => Op::Add,
        };
        tagged(
            tag,
            &shaders::BINARY,
            &[x.clone(), y.clone(), x.clone()],
            push.as_bytes(),
        )
    };
    let swiglu = || unit(BinaryOp::Glu(GluKind::SwiGlu), &x);
    let cmds = [swiglu(), quantize(GgmlType::Q8_1, &x, &q, 0)];
    let (c, takes) = fused_at(glu_quant, &cmds, 0).expect("matches");
    let (shader, binds, _) = parts(&c);
    assert_eq!((shader.index, binds.len()), (shaders::GLU_Q8_1.index, 4));
    assert_eq!(takes, [1]);
    // A row of no whole blocks; another row; Q8_K; not a unit.
    let no = |cmds: &[Cmd]| fused_at(glu_quant, cmds, 0).is_none();
    let part = bind(3, 0, 192);
    let glu48 = unit(BinaryOp::Glu(GluKind::GeGluTanh), &part);
    assert!(fused_at(
        glu_quant,
        &[
            glu48.clone(),
            quantize(GgmlType::Q8_1, &bind(3, 0, 256), &q, 0)
        ],
        0
    )
    .is_none());
    assert!(no(&[glu48, quantize(GgmlType::Q8_1, &part, &q, 0)]));
    assert!(no(&[swiglu(), quantize(GgmlType::Q8_1, &y, &q, 0)]));
    assert!(no(&[swiglu(), quantize(GgmlType::Q8_K, &x, &q, 0)]));
    assert!(no(&[
        unit(BinaryOp::Add, &x),
        quantize(GgmlType::Q8_1, &x, &q, 0)
    ]));
}
