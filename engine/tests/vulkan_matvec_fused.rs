//! The decode matvec fused with its neighbours (`fuse/matvec.rs`,
//! `shaders/matvec.comp`'s PRO_* / EPI_ADD variants) against the same ops
//! unfused, on the GPU kernel layout: a layer's chain (norm, two products
//! of the normed row, a product of an f32 row, the residual add) recorded
//! with the fusions on and off writes the same bits everywhere, in fewer
//! dispatches (the 32-element and the super-block types alike); where a
//! fusion does not apply (a row over 3072, an output of more than 1024
//! workgroups) the counts are the unfused ones; with a gated unit between the two products and the third
//! (a feed-forward block), the two products and the unit are one dispatch,
//! and with the product of the unit and the add (`fuse/ffn.rs`, the
//! 32-element types) the whole block is.
//! The normed row is also the CPU's, bit for bit. Merged at submission
//! (`fuse/qkv.rs`), the two products of the normed row, and a
//! layer's Q, K and V with or without their RoPE and cache-write
//! epilogues, are one dispatch with the same bits. Each fused case runs
//! twice: on the plain fused variants and on their `_sg` twins, whose
//! reductions end in subgroup shuffles (lavapipe's subgroups of 8: the
//! trees' strides of 8 and more through shared memory, the rest
//! shuffled).

use crate::vulkan_support;

use engine::ggml_type::GgmlType;
use engine::ops::{GluKind, KvType, Ops, RopeStyle, WeightSource};
use engine::vulkan::KernelLayout;
use vulkan_support::weights::weight;
use vulkan_support::{bits, layer_params, values, Both, Pair};

/// One run of the chain: (h, o1, o2, o3, x after the add) read back, and
/// the dispatches it took. With `glu`, o1 = glu(o1, o2) before o1's
/// product (a feed-forward block: o1 the gate, o2 the up projection,
/// recorded first when `up_first`).
fn chain(
    p: &mut Pair,
    (fused, merge): (bool, bool),
    ws: &[(engine::ops::Weight, engine::ops::Weight); 4],
    x0: &[f32],
    dims: (usize, usize, usize),
    glu: Option<(GluKind, bool)>,
) -> (Vec<Vec<f32>>, usize) {
    let (d, m1, m2) = dims;
    p.gpu.set_matvec_fusion(fused);
    p.gpu.set_matvec_merge(merge);
    let x = p.act(1, d, x0);
    let h = p.zeros(1, d);
    let o1 = p.zeros(1, m1);
    let o2 = p.zeros(1, m2);
    let o3 = p.zeros(1, d);
    let before = p.gpu.stats().dispatches;
    // As a layer records them: norm, two products of its output (Q and K;
    // gate and up), a product of an f32 row (the attention output into
    // the output projection), the residual add.
    p.gpu.rms_norm(x.gpu, Some(ws[0].1), 1e-5, d, h.gpu);
    if glu.is_some_and(|(_, up_first)| up_first) {
        p.gpu.matmul(ws[2].1, h.gpu, o2.gpu);
        p.gpu.matmul(ws[1].1, h.gpu, o1.gpu);
    } else {
        p.gpu.matmul(ws[1].1, h.gpu, o1.gpu);
        p.gpu.matmul(ws[2].1, h.gpu, o2.gpu);
    }
    if let Some((kind, _)) = glu {
        p.gpu.glu(kind, o1.gpu, o2.gpu);
    }
    p.gpu.matmul(ws[3].1, o1.gpu, o3.gpu);
    p.gpu.add(x.gpu, o3.gpu);
    let read = |p: &mut Pair, a: Both| p.read(a).1;
    let out = vec![
        read(p, h),
        read(p, o1),
        read(p, o2),
        read(p, o3),
        read(p, x),
    ];
    // Five transfers: the first one submitted the chain.
    (out, p.gpu.stats().dispatches - before)
}

fn same_bits(what: &str, want: &[Vec<f32>], got: &[Vec<f32>]) {
    for (name, (a, b)) in ["h", "o1", "o2", "o3", "x"]
        .iter()
        .zip(want.iter().zip(got))
    {
        assert!(
            bits(a) == bits(b),
            "{what}: {name} differs from the unfused bits"
        );
    }
}

#[test]
fn fused_decode_matvecs_write_the_unfused_bits() {
    let mut p = Pair::new();
    p.gpu.set_kernel_layout(KernelLayout::Gpu);
    let mut glu_runs = 0;
    let mut ffn_runs = 0;
    // (type of the products, d, m1, m2, dispatches unfused and fused).
    // Unfused: the norm with its quantization, three products, the
    // quantization of o1, the add; the norm and the quantization apart
    // where the norm's group is over 3072 or the format Q8_K. Fused: one
    // dispatch per product, the add in the last.
    let cases = [
        (GgmlType::Q4_0, 576, 576, 192, 6, 3),
        (GgmlType::Q4_1, 576, 1536, 1536, 6, 3),
        (GgmlType::Q5_0, 640, 1024, 1024, 6, 3),
        (GgmlType::Q5_1, 256, 3072, 64, 6, 3),
        (GgmlType::Q8_0, 3072, 96, 32, 6, 3),
        // A row past the 3072 the prologue holds: only o1's product (64
        // wide) and the add fuse.
        (GgmlType::Q4_1, 4096, 64, 32, 7, 5),
        // Q8_K activations (the super-block types): unfused, the norm and
        // its quantization are two dispatches.
        (GgmlType::Q4_K, 512, 256, 256, 7, 3),
        (GgmlType::Q6_K, 1024, 2048, 2048, 7, 3),
        (GgmlType::Q2_K, 256, 3072, 512, 7, 3),
        (GgmlType::Q3_K, 768, 256, 768, 7, 3),
        (GgmlType::Q5_K, 3072, 512, 256, 7, 3),
        // 8224 rows: 1028 workgroups of 8 rows (and o1 too long for W3's
        // prologue); the second product reads the norm's quantization.
        (GgmlType::Q8_0, 64, 8224, 32, 6, 6),
    ];
    for (case, &(ty, d, m1, m2, unfused, fused)) in cases.iter().enumerate() {
        let seed = 900 + 10 * case as u64;
        let what = format!("{} d {d} m1 {m1} m2 {m2}", ty.name());
        let wn = values(seed, d);
        let norm = WeightSource::from_f32("norm.weight", d, 1, &wn);
        let (w1, _) = weight(ty, d, m1, seed + 1);
        let (w2, _) = weight(ty, d, m2, seed + 2);
        let (w3, _) = weight(ty, m1, d, seed + 3);
        let ws = [p.weight(&norm), p.weight(&w1), p.weight(&w2), p.weight(&w3)];
        let x0: Vec<f32> = values(seed + 4, d).iter().map(|v| v * 5.0).collect();
        let (want, plain) = chain(&mut p, (false, false), &ws, &x0, (d, m1, m2), None);
        assert_eq!(plain, unfused, "{what}: unfused dispatches");
        for sg in [false, true] {
            // The fused variants, then their twins ending their reductions
            // in subgroup shuffles.
            assert_eq!(p.gpu.set_matvec_subgroups(sg), sg);
            let what = format!("{what} subgroups {sg}");
            let (got, fewer) = chain(&mut p, (true, false), &ws, &x0, (d, m1, m2), None);
            same_bits(&what, &want, &got);
            assert_eq!(fewer, fused, "{what}: fused dispatches");
            // Merged at submission: where both products of the normed row
            // fused, they are one dispatch.
            let (got, merged) = chain(&mut p, (true, true), &ws, &x0, (d, m1, m2), None);
            same_bits(&format!("{what} merged"), &want, &got);
            let fewer_merged = if fused == 3 { 2 } else { fused };
            assert_eq!(merged, fewer_merged, "{what}: merged dispatches");
        }
        if m1 == m2 {
            // A feed-forward block: unfused, the gated unit takes the
            // quantization of o1 in (the same count; Q8_K: the unit is a
            // dispatch of its own); fused, the two products and the unit
            // are one dispatch where the products were fused.
            for (i, kind) in [GluKind::SwiGlu, GluKind::GeGluTanh]
                .into_iter()
                .enumerate()
            {
                let up_first = (case + i) % 2 == 0;
                let glu = Some((kind, up_first));
                let what = format!("{what} {kind:?} up first {up_first}");
                let (want, plain) = chain(&mut p, (false, false), &ws, &x0, (d, m1, m2), glu);
                let k_unit = usize::from(ty.block_elems() == 256);
                let counts = if fused == 3 {
                    (unfused + k_unit, 2)
                } else {
                    (unfused + 1, fused + 1)
                };
                for (sg, ffn) in [(false, false), (true, false), (false, true), (true, true)] {
                    p.gpu.set_matvec_subgroups(sg);
                    // The whole block in one dispatch (32-element types).
                    p.gpu.set_ffn_fusion(ffn);
                    let what = format!("{what} subgroups {sg} one-dispatch block {ffn}");
                    let (got, fewer) = chain(&mut p, (true, true), &ws, &x0, (d, m1, m2), glu);
                    same_bits(&what, &want, &got);
                    let one = ffn && fused == 3 && ty.block_elems() == 32;
                    let counts = if one { (counts.0, 1) } else { counts };
                    assert_eq!((plain, fewer), counts, "{what}: dispatches");
                    ffn_runs += usize::from(one);
                }
                glu_runs += usize::from(fused == 3);
            }
        }
        // The norm is the CPU's.
        let x = p.act(1, d, &x0);
        let h = p.zeros(1, d);
        p.cpu.rms_norm(x.cpu, Some(ws[0].0), 1e-5, d, h.cpu);
        let (c, _) = p.read(h);
        assert!(
            bits(&c) == bits(&want[0]),
            "{what}: the norm differs from the CPU's"
        );
    }
    assert_eq!(glu_runs, 8);
    assert_eq!(ffn_runs, 8);
    p.finish("fused matvecs");
}

/// An attention block's shape: (model dim, query heads, KV heads, head dim).
type Heads = (usize, usize, usize, usize);

/// Three decode steps of an attention block (norm; Q, K and V products;
/// RoPE of Q and K; attention, which writes K and V into the cache): per
/// step Q, K, V and the attention output read back, and the dispatches
/// the steps took.
fn attention_steps(
    p: &mut Pair,
    (fused, merge): (bool, bool),
    ws: &[(engine::ops::Weight, engine::ops::Weight); 4],
    heads: Heads,
    style: RopeStyle,
    ty: KvType,
    seed: u64,
) -> (Vec<Vec<f32>>, usize) {
    let (d, nh, nkv, hd) = heads;
    p.gpu.set_matvec_fusion(fused);
    p.gpu.set_matvec_merge(merge);
    let kv = p.gpu.alloc_kv(8, nkv * hd, nkv * hd, ty).unwrap();
    let (rope, ap) = layer_params(style, (nh, nkv, hd), 1.0 / (hd as f32).sqrt());
    let mut out = Vec::new();
    let before = p.gpu.stats().dispatches;
    for pos in 0..3 {
        let x0: Vec<f32> = values(seed + pos as u64, d)
            .iter()
            .map(|v| v * 3.0)
            .collect();
        let x = p.act(1, d, &x0);
        let h = p.zeros(1, d);
        let q = p.zeros(1, nh * hd);
        let k = p.zeros(1, nkv * hd);
        let v = p.zeros(1, nkv * hd);
        let att = p.zeros(1, nh * hd);
        let before_step = p.gpu.stats().dispatches;
        p.gpu.rms_norm(x.gpu, Some(ws[0].1), 1e-5, d, h.gpu);
        p.gpu.matmul(ws[1].1, h.gpu, q.gpu);
        p.gpu.matmul(ws[2].1, h.gpu, k.gpu);
        p.gpu.matmul(ws[3].1, h.gpu, v.gpu);
        p.gpu.rope(q.gpu, &rope, pos);
        p.gpu.rope(k.gpu, &rope, pos);
        p.gpu.attention(kv, q.gpu, k.gpu, v.gpu, att.gpu, pos, &ap);
        for a in [q, k, v, att] {
            out.push(p.read(a).1);
        }
        assert!(p.gpu.stats().dispatches > before_step);
    }
    (out, p.gpu.stats().dispatches - before)
}

#[test]
fn rope_and_cache_writes_in_the_matvec_epilogue_write_the_unfused_bits() {
    let mut p = Pair::new();
    p.gpu.set_kernel_layout(KernelLayout::Gpu);
    // (weight type, shape, KV cache type).
    let cases = [
        (GgmlType::Q4_1, (576, 9, 3, 64), KvType::F32),
        (GgmlType::Q4_1, (576, 9, 3, 64), KvType::F16),
        (GgmlType::Q8_0, (256, 4, 2, 32), KvType::F16),
        (GgmlType::Q5_0, (128, 2, 1, 128), KvType::F32),
        (GgmlType::Q6_K, (512, 4, 2, 64), KvType::F16),
    ];
    for (case, &(ty, heads, kv_ty)) in cases.iter().enumerate() {
        let (d, nh, nkv, hd) = heads;
        let seed = 2000 + 10 * case as u64;
        let wn = values(seed, d);
        let norm = WeightSource::from_f32("norm.weight", d, 1, &wn);
        let (wq, _) = weight(ty, d, nh * hd, seed + 1);
        let (wk, _) = weight(ty, d, nkv * hd, seed + 2);
        let (wv, _) = weight(ty, d, nkv * hd, seed + 3);
        let ws = [p.weight(&norm), p.weight(&wq), p.weight(&wk), p.weight(&wv)];
        // NORM pairs: the RoPE of Q and K and both cache writes are
        // epilogues (three steps, three dispatches fewer each); NEOX: only
        // V's cache write (K's stays in its RoPE dispatch).
        for (style, fewer) in [(RopeStyle::Norm, 9), (RopeStyle::Neox, 3)] {
            let what = format!("{} {heads:?} {kv_ty:?} {style:?}", ty.name());
            let steps = |p: &mut Pair, on: (bool, bool)| {
                attention_steps(p, on, &ws, heads, style, kv_ty, seed + 4)
            };
            let (want, plain) = steps(&mut p, (false, false));
            for sg in [false, true] {
                p.gpu.set_matvec_subgroups(sg);
                let what = format!("{what} subgroups {sg}");
                // The matvec fusions without the epilogue: what the epilogue
                // removes is counted against them.
                p.gpu.set_rope_epilogue(false);
                let (mid, without) = steps(&mut p, (true, false));
                // Q, K and V merged into one dispatch, without the epilogue.
                let (mid_merged, without_merged) = steps(&mut p, (true, true));
                p.gpu.set_rope_epilogue(true);
                let (got, n) = steps(&mut p, (true, false));
                let (got_merged, n_merged) = steps(&mut p, (true, true));
                for (i, a) in want.iter().enumerate() {
                    let name = ["q", "k", "v", "attention"][i % 4];
                    let step = i / 4;
                    for (how, b) in [
                        ("epilogue", &got),
                        ("fused", &mid),
                        ("merged", &mid_merged),
                        ("merged with the epilogue", &got_merged),
                    ] {
                        assert!(
                            bits(a) == bits(&b[i]),
                            "{what}: step {step} {name} {how} differs from the unfused bits"
                        );
                    }
                }
                assert!(plain > without, "{what}: the matvec fusions apply");
                assert_eq!(without - n, fewer, "{what}: dispatches the epilogue saves");
                // Two dispatches fewer a step (three steps).
                assert_eq!(
                    without - without_merged,
                    6,
                    "{what}: dispatches the merge saves"
                );
                assert_eq!(n - n_merged, 6, "{what}: dispatches the merge saves");
            }
        }
    }
    p.finish("rope epilogue");
}

/// A matvec of an f32 row, the RMS norm of its output in place and the add
/// of that into the residual, twice in one recording (Gemma-3's post-norms:
/// the second finds the counter back at zero): (out, residual) of each,
/// and the dispatches.
fn post_norm_chain(
    p: &mut Pair,
    fused: bool,
    w: engine::ops::Weight,
    norm: engine::ops::Weight,
    dims: (usize, usize),
    seed: u64,
) -> (Vec<Vec<f32>>, usize) {
    let (n_in, n_out) = dims;
    p.gpu.set_matvec_fusion(fused);
    let x = p.act(1, n_out, &values(seed, n_out));
    let mut outs = Vec::new();
    let before = p.gpu.stats().dispatches;
    for i in 0..2u64 {
        let a0: Vec<f32> = values(seed + 1 + i, n_in).iter().map(|v| v * 3.0).collect();
        let a = p.act(1, n_in, &a0);
        let y = p.zeros(1, n_out);
        p.gpu.matmul(w, a.gpu, y.gpu);
        p.gpu.rms_norm(y.gpu, Some(norm), 1e-6, n_out, y.gpu);
        p.gpu.add(x.gpu, y.gpu);
        outs.push(y);
    }
    let mut got: Vec<Vec<f32>> = outs.into_iter().map(|y| p.read(y).1).collect();
    got.push(p.read(x).1);
    (got, p.gpu.stats().dispatches - before)
}

#[test]
fn a_post_norm_and_its_add_in_the_matvec_epilogue_write_the_unfused_bits() {
    let mut p = Pair::new();
    p.gpu.set_kernel_layout(KernelLayout::Gpu);
    // (type, n_in, n_out, fused): 8224 outputs is past the 1024
    // workgroups a fused matvec takes.
    let cases = [
        (GgmlType::Q4_K, 1024, 640, true),
        (GgmlType::Q6_K, 2048, 640, true),
        (GgmlType::Q4_1, 576, 576, true),
        (GgmlType::Q5_0, 256, 3000, true),
        (GgmlType::Q8_0, 64, 8224, false),
    ];
    for (case, &(ty, n_in, n_out, fuses)) in cases.iter().enumerate() {
        let seed = 4000 + 10 * case as u64;
        let what = format!("{} {n_in} -> {n_out}", ty.name());
        let (w, _) = weight(ty, n_in, n_out, seed);
        let wn = WeightSource::from_f32("post_norm.weight", n_out, 1, &values(seed + 1, n_out));
        let (w, norm) = (p.weight(&w).1, p.weight(&wn).1);
        let (want, plain) = post_norm_chain(&mut p, false, w, norm, (n_in, n_out), seed + 2);
        // Unfused: the quantization, the product, the norm with its add;
        // fused: one dispatch each time.
        assert_eq!(plain, 6, "{what}: unfused dispatches");
        for sg in [false, true] {
            p.gpu.set_matvec_subgroups(sg);
            let what = format!("{what} subgroups {sg}");
            let (got, n) = post_norm_chain(&mut p, true, w, norm, (n_in, n_out), seed + 2);
            for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                assert!(
                    bits(a) == bits(b),
                    "{what}: output {i} differs from the unfused bits"
                );
            }
            assert_eq!(n, if fuses { 2 } else { 6 }, "{what}: fused dispatches");
        }
    }
    p.finish("post-norm epilogue");
}
