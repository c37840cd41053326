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
