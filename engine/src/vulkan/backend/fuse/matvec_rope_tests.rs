use super::*;
use crate::vulkan::PushConstants;

fn push(rows: u32, n_out: u32, col0: u32) -> Vec<u8> {
    let p = MatvecFusedPush {
        w: WeightPush {
            rows,
            n_out,
            col0,
            ..WeightPush::default()
        },
        ..MatvecFusedPush::default()
    };
    p.as_bytes().to_vec()
}

#[test]
fn rope_epilogues_need_rows_that_pair_within_workgroups() {
    assert!(pairs_whole(&push(64, 64, 0), 4));
    assert!(!pairs_whole(&push(64, 64, 0), 3), "odd rows a workgroup");
    assert!(!pairs_whole(&push(63, 63, 0), 4), "odd rows");
    assert!(!pairs_whole(&push(32, 64, 32), 4), "a chunk of the rows");
}

#[test]
fn the_epilogue_words_read_back() {
    let e = RopeEpi {
        rope: 1,
        head_dim: 64,
        pos_at: 3,
        theta_scale: 0.5,
        freq_scale: 1.0,
        kv: 2,
        kv_pos_at: 4,
        kv_width: 128,
    };
    let mut p = push(64, 64, 0);
    push_epi(&mut p, &e);
    assert_eq!(p.len(), PUSH_BYTES + 32);
    assert_eq!(read_epi(&p), e);
}

use super::super::test_support::{bind, copy, dispatch, Cmd};
use crate::ggml_type::{weight_index, GgmlType};

fn t() -> usize {
    weight_index(GgmlType::Q4_1).unwrap()
}

/// A fused product of `kind` into `out`, `rows` of its `n_out` rows from
/// row `col0` (the norm's input slot 3, its weight slot 4, its output
/// slot 6).
fn product(kind: Kind, out: &Bind, rows: u32, n_out: u32, col0: u32) -> Cmd {
    let mut binds = vec![bind(20, 0, 4096), bind(3, 0, 256), out.clone()];
    if kind != Kind::Quant {
        binds.push(bind(4, 0, 256));
    }
    if kind == Kind::NormOut {
        binds.push(bind(6, 0, 256));
    }
    let p = MatvecFusedPush {
        w: WeightPush {
            n_in: 64,
            rows,
            n_out,
            col0,
            ..WeightPush::default()
        },
        ..MatvecFusedPush::default()
    };
    dispatch(family(kind, false)[t()].unwrap(), &binds, p.as_bytes())
}

fn normed(out: &Bind) -> Cmd {
    product(Kind::Norm, out, 64, 64, 0)
}

/// The RoPE of heads of 32 (NORM pairs), the position in inbox word 3.
fn rope_push() -> RopePush {
    RopePush {
        head_dim: 32,
        half_rot: 16,
        pos_at: 3,
        theta_scale: 0.5,
        freq_scale: 1.0,
        ..RopePush::default()
    }
}

#[test]
fn matvec_rope_takes_the_rope_of_the_normed_product_that_wrote_the_row() {
    let x = Act::new(5, 1, 64);
    let xb = Bind::act(x);
    let p = rope_push();
    let rope = |cmds: &[Cmd], x: Act, p: &RopePush| matvec_rope(Window { cmds }, x, p, false);
    let (j, f, _) = rope(&[normed(&xb)], x, &p).expect("matches");
    assert_eq!((j, kind_of(f.shader)), (0, Some((Kind::NormRope, t()))));
    assert_eq!(&f.binds[4..], [Bind::step(3), xb.clone()]);
    let epi = read_epi(&f.push);
    assert_eq!((epi.rope, epi.head_dim, epi.pos_at, epi.kv), (1, 32, 3, 0));
    // The product that writes the norm's output; the subgroup twin; Q's
    // RoPE after K and V; seven commands after the product.
    let cmds = [product(Kind::NormOut, &xb, 64, 64, 0)];
    let (_, f, _) = rope(&cmds, x, &p).unwrap();
    assert_eq!(kind_of(f.shader), Some((Kind::NormOutRope, t())));
    let (_, f, _) = matvec_rope(Window { cmds: &cmds }, x, &p, true).unwrap();
    assert!(f.shader.name.contains("_sg"));
    let kv = [
        normed(&xb),
        normed(&bind(7, 0, 256)),
        normed(&bind(8, 0, 256)),
    ];
    assert_eq!(rope(&kv, x, &p).map(|m| m.0), Some(0));
    let mut far = vec![normed(&xb)];
    far.extend((0..7).map(|_| copy(9, 10, 4)));
    assert!(rope(&far, x, &p).is_some());
    // Two rows; NEOX pairs; a rotation of part of the head; heads of
    // none; a row of part of a head.
    let two = Act::new(5, 2, 64);
    assert!(rope(&[normed(&Bind::act(two))], two, &p).is_none());
    let no_p = |p: RopePush| rope(&[normed(&xb)], x, &p).is_none();
    assert!(no_p(RopePush { neox: 1, ..p }));
    assert!(no_p(RopePush { half_rot: 8, ..p }));
    assert!(no_p(RopePush {
        head_dim: 0,
        half_rot: 0,
        ..p
    }));
    assert!(no_p(RopePush {
        head_dim: 48,
        half_rot: 24,
        ..p
    }));
    // No normed product; one that wrote more than the row; the row
    // touched after it (a copy, a product reading it); the product past
    // the look-back; rows of one chunk of two, or odd.
    let no = |cmds: &[Cmd]| rope(cmds, x, &p).is_none();
    assert!(no(&[product(Kind::Quant, &xb, 64, 64, 0)]));
    assert!(no(&[normed(&bind(5, 0, 512))]));
    assert!(no(&[normed(&xb), copy(5, 10, 4)]));
    let reads_x = dispatch(
        family(Kind::Quant, false)[t()].unwrap(),
        &[bind(21, 0, 4096), xb.clone(), bind(7, 0, 256)],
        MatvecFusedPush::default().as_bytes(),
    );
    assert!(no(&[normed(&xb), reads_x]));
    far.push(copy(9, 10, 4));
    assert!(no(&far));
    assert!(no(&[product(Kind::Norm, &xb, 32, 64, 32)]));
    assert!(no(&[product(Kind::Norm, &xb, 63, 63, 0)]));
}

#[test]
fn matvec_kv_takes_the_cache_write_of_the_normed_product_rotated_or_not() {
    let x = Act::new(5, 1, 64);
    let xb = Bind::act(x);
    let cache = bind(30, 0, 4096);
    let code = KvType::F16.cache_code().unwrap();
    let kv = |cmds: &[Cmd], x: Act, width: usize, dst: &Bind| {
        matvec_kv(Window { cmds }, x, width, dst, KvType::F16, 9, false)
    };
    // V: a plain normed product.
    let (j, f, _) = kv(&[normed(&xb)], x, 64, &cache).expect("matches");
    assert_eq!((j, kind_of(f.shader)), (0, Some((Kind::NormRope, t()))));
    assert_eq!(&f.binds[4..], [Bind::step(9), cache.clone()]);
    let epi = read_epi(&f.push);
    assert_eq!(
        (epi.rope, epi.pos_at, epi.kv, epi.kv_pos_at, epi.kv_width),
        (0, 9, code, 9, 64)
    );
    // A product that writes the norm's output.
    let cmds = [product(Kind::NormOut, &xb, 64, 64, 0)];
    let (_, f, _) = kv(&cmds, x, 64, &cache).unwrap();
    assert_eq!(kind_of(f.shader), Some((Kind::NormOutRope, t())));
    // K: the product its RoPE took, its epilogue kept.
    let cmds = [normed(&xb)];
    let (_, r, _) = matvec_rope(Window { cmds: &cmds }, x, &rope_push(), false).unwrap();
    let rotated = [dispatch(r.shader, &r.binds, &r.push)];
    let (_, f, _) = kv(&rotated, x, 64, &cache).expect("matches");
    assert_eq!(kind_of(f.shader), Some((Kind::NormRope, t())));
    assert_eq!(f.binds.len(), 6);
    assert_eq!(&f.binds[4..], [Bind::steps(3, 9), cache.clone()]);
    assert_eq!(f.push.len(), PUSH_BYTES + 32);
    let epi = read_epi(&f.push);
    assert_eq!(
        (epi.rope, epi.pos_at, epi.kv, epi.kv_pos_at),
        (1, 3, code, 9)
    );
    // Two rows; a cache row of another width; an odd width.
    let two = Act::new(5, 2, 64);
    assert!(kv(&[normed(&Bind::act(two))], two, 64, &cache).is_none());
    assert!(kv(&[normed(&xb)], x, 32, &cache).is_none());
    let odd = Act::new(5, 1, 63);
    assert!(kv(&[normed(&Bind::act(odd))], odd, 63, &cache).is_none());
    // A cache over the row; the cache touched after the product; a cache
    // write already there; no normed product; the row touched after it;
    // rows of one chunk of two.
    assert!(kv(&[normed(&xb)], x, 64, &bind(5, 128, 512)).is_none());
    assert!(kv(&[normed(&xb), copy(9, 30, 4)], x, 64, &cache).is_none());
    let (_, w, _) = kv(&rotated, x, 64, &cache).unwrap();
    let written = [dispatch(w.shader, &w.binds, &w.push)];
    assert!(kv(&written, x, 64, &bind(31, 0, 4096)).is_none());
    assert!(kv(&[product(Kind::Quant, &xb, 64, 64, 0)], x, 64, &cache).is_none());
    assert!(kv(&[normed(&xb), copy(5, 10, 4)], x, 64, &cache).is_none());
    assert!(kv(&[product(Kind::Norm, &xb, 32, 64, 32)], x, 64, &cache).is_none());
}
