use super::*;

#[test]
fn kind_of_names_every_variant_of_both_twins() {
    for kind in Kind::ALL {
        for sg in [false, true] {
            for (t, s) in family(kind, sg).iter().enumerate() {
                if let Some(s) = s {
                    assert_eq!(kind_of(s), Some((kind, t)), "{}", s.name);
                }
            }
        }
    }
    assert_eq!(kind_of(&shaders::RMS_NORM_W), None);
}

#[test]
fn matvec_glu_takes_the_unit_of_the_two_products_of_one_norm() {
    use super::super::test_support::{bind, dispatch};
    use crate::ggml_type::GgmlType;
    use crate::vulkan::PushConstants;
    let t = weight_index(GgmlType::Q4_1).unwrap();
    let (src, nw, xn) = (bind(3, 0, 256), bind(4, 0, 256), bind(5, 0, 256));
    let (gate, up) = (bind(6, 0, 256), bind(7, 0, 256));
    let product = |w: u32, out: &Bind, write: bool, ty: GgmlType| {
        let kind = if write { Kind::NormOut } else { Kind::Norm };
        let t = weight_index(ty).unwrap();
        let mut binds = vec![bind(w, 0, 4096), src.clone(), out.clone(), nw.clone()];
        if write {
            binds.push(xn.clone());
        }
        let push = MatvecFusedPush {
            w: WeightPush {
                n_in: 64,
                rows: 64,
                n_out: 64,
                ..WeightPush::default()
            },
            ..MatvecFusedPush::default()
        };
        dispatch(family(kind, false)[t].unwrap(), &binds, push.as_bytes())
    };
    let q = GgmlType::Q4_1;
    let cmds = [product(20, &gate, true, q), product(21, &up, false, q)];
    let win = Window { cmds: &cmds };
    let (f, _) = matvec_glu(win, GluKind::SwiGlu, (&gate, &up), false).expect("matches");
    assert_eq!(kind_of(f.shader), Some((Kind::NormOutGlu, t)));
    assert_eq!((f.binds.len(), &f.binds[5]), (7, &bind(21, 0, 4096)));
    // The unit the other way round takes the weights the other way.
    let (f, _) = matvec_glu(win, GluKind::GeGluTanh, (&up, &gate), false).unwrap();
    assert_eq!(f.binds[0], bind(21, 0, 4096));
    // Another output; two types; the norm's writer last.
    assert!(matvec_glu(win, GluKind::SwiGlu, (&gate, &xn), false).is_none());
    let cmds = [
        product(20, &gate, true, q),
        product(21, &up, false, GgmlType::Q8_0),
    ];
    let win = Window { cmds: &cmds };
    assert!(matvec_glu(win, GluKind::SwiGlu, (&gate, &up), false).is_none());
    let cmds = [product(21, &up, false, q), product(20, &gate, true, q)];
    let win = Window { cmds: &cmds };
    assert!(matvec_glu(win, GluKind::SwiGlu, (&gate, &up), false).is_none());
}

#[test]
fn matvec_add_takes_the_add_of_a_quantizing_product_output() {
    use super::super::test_support::{bind, dispatch};
    use crate::ggml_type::GgmlType;
    use crate::vulkan::PushConstants;
    let t = weight_index(GgmlType::Q4_1).unwrap();
    let (w, input, y, x) = (
        bind(8, 0, 4096),
        bind(3, 0, 256),
        bind(4, 0, 256),
        bind(5, 0, 256),
    );
    let push = MatvecFusedPush::default();
    for (kind, sg) in [
        (Kind::Quant, false),
        (Kind::Quant, true),
        (Kind::Norm, false),
    ] {
        let shader = family(kind, sg)[t].unwrap();
        let mut binds = vec![w.clone(), input.clone(), y.clone()];
        if kind == Kind::Norm {
            binds.push(bind(9, 0, 256));
        }
        let cmds = [dispatch(shader, &binds, push.as_bytes())];
        let win = Window { cmds: &cmds };
        let got = matvec_add(win, &x, &y, 64, sg);
        if kind != Kind::Quant {
            assert!(got.is_none(), "a normed product keeps its add apart");
            continue;
        }
        let (f, _) = got.expect("matches");
        assert_eq!(kind_of(f.shader), Some((Kind::QuantAdd, t)));
        assert_eq!(f.shader.name.contains("_sg"), sg);
        assert_eq!((f.binds.len(), &f.binds[3]), (4, &x));
        // Another output; a residual over the product's input.
        assert!(matvec_add(win, &x, &input, 64, sg).is_none());
        assert!(matvec_add(win, &bind(3, 128, 384), &y, 64, sg).is_none());
    }
}

#[test]
fn post_norm_takes_a_post_norm_in_place_and_its_add_after_a_product() {
    use super::super::test_support::{bind, dispatch, tagged, Cmd, Op};
    use crate::ggml_type::GgmlType;
    use crate::vulkan::PushConstants;
    let t = weight_index(GgmlType::Q4_1).unwrap();
    let (input, y, x, nw) = (
        bind(3, 0, 256),
        bind(4, 0, 256),
        bind(5, 0, 256),
        bind(6, 0, 256),
    );
    let product = |out: &Bind, col0: u32| {
        let p = MatvecFusedPush {
            w: WeightPush {
                n_in: 64,
                rows: 64,
                n_out: 64,
                col0,
                ..WeightPush::default()
            },
            ..MatvecFusedPush::default()
        };
        let binds = [bind(8, 0, 4096), input.clone(), out.clone()];
        dispatch(family(Kind::Quant, false)[t].unwrap(), &binds, p.as_bytes())
    };
    let norm = |src: &Bind, out: &Bind, n_groups: u32| {
        let p = RmsNormPush {
            n_groups,
            group: 64 / n_groups,
            ..RmsNormPush::default()
        };
        let binds = [src.clone(), out.clone(), nw.clone()];
        tagged(Op::RmsNorm(p), &shaders::RMS_NORM_W, &binds, p.as_bytes())
    };
    let cmds = [product(&y, 0), norm(&y, &y, 1)];
    let win = Window { cmds: &cmds };
    let (f, _) = post_norm(win, (&x, &y), 0, 64, true).expect("matches");
    assert_eq!(kind_of(f.shader), Some((Kind::QuantPost, t)));
    assert!(f.shader.name.contains("_sg"));
    assert_eq!(
        f.binds,
        [
            bind(8, 0, 4096),
            input.clone(),
            y.clone(),
            nw.clone(),
            x.clone()
        ]
    );
    let no = |cmds: &[Cmd], x: &Bind, width: usize| {
        post_norm(Window { cmds }, (x, &y), 0, width, false).is_none()
    };
    // A row too long; a norm of groups, or not in place; a product of
    // part of the rows or of another output; a residual over the
    // product's input or over `y`; no product before the norm.
    assert!(no(&cmds, &x, 9000));
    assert!(no(&cmds, &x, 32));
    assert!(no(&[product(&y, 0), norm(&y, &y, 2)], &x, 64));
    assert!(no(&[product(&y, 0), norm(&x, &y, 1)], &x, 64));
    assert!(no(&[product(&y, 32), norm(&y, &y, 1)], &x, 64));
    assert!(no(&[product(&x, 0), norm(&y, &y, 1)], &x, 64));
    assert!(no(&cmds, &bind(3, 128, 384), 64));
    assert!(no(&cmds, &bind(4, 128, 384), 64));
    assert!(no(&[norm(&y, &y, 1), norm(&y, &y, 1)], &x, 64));
}

fn weight(ty: crate::ggml_type::GgmlType, n_in: usize, n_out: usize, chunks: usize) -> GpuWeight {
    use super::super::super::WeightChunk;
    let rows = n_out / chunks;
    GpuWeight {
        name: "w".into(),
        ty,
        n_in,
        n_out,
        row_bytes: n_in / 32 * 20,
        chunks: (0..chunks)
            .map(|i| WeightChunk {
                buf: 20 + i as u32,
                row0: i * rows,
                rows,
            })
            .collect(),
    }
}

#[test]
fn matvec_fits_one_row_of_whole_blocks_of_one_chunk_not_yet_quantized() {
    use crate::ggml_type::GgmlType;
    let q = GgmlType::Q4_1;
    let t = weight_index(q).unwrap();
    let x = Act::new(5, 1, 64);
    let fits = |gw: &GpuWeight, x: Act, held: Option<bool>| matvec_fits(gw, x, held, false);
    let rows = matvec_rows(family(Kind::Quant, false)[t].unwrap());
    assert_eq!(
        fits(&weight(q, 64, 64, 1), x, Some(false)),
        Some((t, 64 / rows))
    );
    assert_eq!(
        matvec_fits(&weight(q, 64, 64, 1), x, Some(false), true).map(|f| f.0),
        Some(t)
    );
    // The most workgroups, and the most elements of the row.
    let most = MAX_FUSED_WORKGROUPS * rows;
    assert!(fits(&weight(q, 64, most, 1), x, Some(false)).is_some());
    assert!(fits(&weight(q, MAX_K, 64, 1), Act::new(5, 1, MAX_K), Some(false)).is_some());
    // A type with no fused variants; one with no activation format; the
    // row already quantized; two rows; two chunks; a row of part of a
    // block; one too long; too many workgroups.
    let f16 = GgmlType::F16;
    assert!(family(Kind::Quant, false)[weight_index(f16).unwrap()].is_none());
    assert!(fits(&weight(f16, 64, 64, 1), x, Some(false)).is_none());
    assert!(fits(&weight(q, 64, 64, 1), x, None).is_none());
    assert!(fits(&weight(q, 64, 64, 1), x, Some(true)).is_none());
    assert!(fits(&weight(q, 64, 64, 1), Act::new(5, 2, 64), Some(false)).is_none());
    assert!(fits(&weight(q, 64, 64, 2), x, Some(false)).is_none());
    assert!(fits(&weight(q, 48, 64, 1), Act::new(5, 1, 48), Some(false)).is_none());
    let long = Act::new(5, 1, MAX_K + 32);
    assert!(fits(&weight(q, MAX_K + 32, 64, 1), long, Some(false)).is_none());
    assert!(fits(&weight(q, 64, most + rows, 1), x, Some(false)).is_none());
}

#[test]
fn norm_source_takes_the_norm_of_the_row_recorded_last_or_the_prologue_before() {
    use super::super::test_support::{bind, copy, tagged, Cmd, Op};
    use crate::ops::BinaryOp;
    use crate::vulkan::push::{binary_code, BinaryPush};
    use crate::vulkan::PushConstants;
    let x = Act::new(5, 1, 64);
    let xb = Bind::act(x);
    let (src, nw) = (bind(3, 0, 256), bind(4, 0, 256));
    let norm = |src: &Bind, out: &Bind, n_groups: u32, group: u32| {
        let p = RmsNormPush {
            n_groups,
            group,
            x_offset: 7,
            eps: 1e-5,
            ..RmsNormPush::default()
        };
        let binds = [src.clone(), out.clone(), nw.clone()];
        tagged(Op::RmsNorm(p), &shaders::RMS_NORM_W, &binds, p.as_bytes())
    };
    let add = {
        let p = BinaryPush {
            n: 64,
            op: binary_code(BinaryOp::Add),
            ..BinaryPush::default()
        };
        let binds = [src.clone(), bind(6, 0, 256), src.clone()];
        tagged(Op::Add, &shaders::BINARY, &binds, p.as_bytes())
    };
    let ctx = Ctx::for_tests();
    let source = |cmds: &[Cmd], pro: Option<&NormPrologue>, ctx: &Ctx| {
        norm_source(Window { cmds }, pro, x, &xb, ctx)
    };
    let cmds = [norm(&src, &xb, 1, 64)];
    let Some(Source::Norm {
        src: s,
        w,
        src_offset,
        eps,
        write,
    }) = source(&cmds, None, &ctx)
    else {
        panic!("matches");
    };
    assert_eq!(
        (s, w, src_offset, eps, write),
        (src.clone(), nw.clone(), 7, 1e-5, true)
    );
    // The norm's output an earlier product computed: kept there.
    let pro = NormPrologue {
        out: xb.clone(),
        src: src.clone(),
        w: nw.clone(),
        src_offset: 7,
        eps: 1e-5,
        at: (0, 0),
    };
    let got = source(&[copy(9, 10, 4)], Some(&pro), &ctx);
    assert!(matches!(got, Some(Source::Norm { write: false, .. })));
    let other = NormPrologue {
        out: bind(5, 0, 128),
        ..pro.clone()
    };
    assert!(source(&[copy(9, 10, 4)], Some(&other), &ctx).is_none());
    let got = source(&cmds, Some(&other), &ctx);
    assert!(matches!(got, Some(Source::Norm { write: true, .. })));
    // A norm the add before it takes (unless that rule is off).
    let taken = [add.clone(), norm(&src, &xb, 1, 64)];
    assert!(source(&taken, None, &ctx).is_none());
    let mut off = ctx;
    off.off.set(Rule::AddNorm, true);
    assert!(source(&taken, None, &off).is_some());
    // No command; not a norm last; a norm of groups, or of part of the
    // row; into another output; in place.
    assert!(source(&[], None, &ctx).is_none());
    assert!(source(&[cmds[0].clone(), copy(9, 10, 4)], None, &ctx).is_none());
    assert!(source(&[norm(&src, &xb, 2, 32)], None, &ctx).is_none());
    assert!(source(&[norm(&src, &xb, 1, 32)], None, &ctx).is_none());
    assert!(source(&[norm(&src, &bind(5, 0, 128), 1, 64)], None, &ctx).is_none());
    assert!(source(&[norm(&xb, &xb, 1, 64)], None, &ctx).is_none());
}
