use super::super::matvec::family;
use super::super::test_support::{bind, dispatch, Cmd};
use super::*;
use crate::ggml_type::{weight_index, GgmlType};

const UNITS: u32 = 64;

fn push(n_in: u32, rows: u32, out_offset: u32, src_offset: u32) -> Vec<u8> {
    MatvecFusedPush {
        w: WeightPush {
            n_in,
            rows,
            n_out: rows,
            out_offset,
            ..WeightPush::default()
        },
        f: FusedPush {
            src_offset,
            ..FusedPush::default()
        },
    }
    .as_bytes()
    .to_vec()
}

/// The fused gate / up / unit of `UNITS` rows of type `ty` (the unit
/// into slot 12 from element `out`).
fn glu(ty: GgmlType, units: u32, out: u32) -> Cmd {
    let t = weight_index(ty).unwrap();
    let binds = [
        bind(20, 0, 4096),
        bind(10, 0, 256),
        bind(12, 0, 512),
        bind(11, 0, 256),
        bind(13, 0, 256),
        bind(21, 0, 4096),
        bind(14, 0, 512),
    ];
    let p = push(64, units, out, 0);
    dispatch(family(Kind::NormOutGlu, false)[t].unwrap(), &binds, &p)
}

/// The down projection of the `UNITS` of the unit read from `input`
/// (element `src`) with the add into `res`.
fn down(ty: GgmlType, input: &Bind, src: u32, res: &Bind) -> Cmd {
    down_of(UNITS, ty, input, src, res)
}

fn down_of(units: u32, ty: GgmlType, input: &Bind, src: u32, res: &Bind) -> Cmd {
    let t = weight_index(ty).unwrap();
    let binds = [
        bind(22, 0, 4096),
        input.clone(),
        bind(15, 0, 256),
        res.clone(),
    ];
    let p = push(units, 64, 0, src);
    dispatch(family(Kind::QuantAdd, false)[t].unwrap(), &binds, &p)
}

#[test]
fn ffn_takes_the_unit_and_the_down_projection_of_one_block() {
    let ty = GgmlType::Q4_1;
    let (unit, x) = (bind(12, 0, 512), bind(10, 0, 256));
    let cmds = [glu(ty, UNITS, 0), down(ty, &unit, 0, &x)];
    let (f, part_bytes, groups) = ffn(Window { cmds: &cmds }).expect("matches");
    let t = weight_index(ty).unwrap();
    assert_eq!(f.shader.index, variant(t).unwrap().index);
    // Seven of the unit, then the down weight, output and residual (the
    // norm's input: a pre-norm layer's).
    assert_eq!((f.binds.len(), &f.binds[9]), (10, &x));
    assert_eq!((groups, part_bytes), (2, 2 * 64 * 4));
    let no = |cmds: &[Cmd]| ffn(Window { cmds }).is_none();
    // Another type for the down projection; units of no whole blocks; the
    // down projection reading another row or offset; a residual over the
    // up projection's output; the two the other way round.
    assert!(no(&[glu(ty, UNITS, 0), down(GgmlType::Q8_0, &unit, 0, &x)]));
    assert!(no(&[glu(ty, 48, 0), down_of(48, ty, &unit, 0, &x)]));
    assert!(no(&[glu(ty, UNITS, 0), down(ty, &bind(16, 0, 512), 0, &x)]));
    assert!(no(&[glu(ty, UNITS, 0), down(ty, &unit, 64, &x)]));
    assert!(no(&[
        glu(ty, UNITS, 0),
        down(ty, &unit, 0, &bind(14, 0, 256))
    ]));
    assert!(no(&[down(ty, &unit, 0, &x), glu(ty, UNITS, 0)]));
}
