//! The per-head norm fused with the RoPE, the query scale and the K cache
//! write after it (`fuse/norm_rope.rs`, `shaders/norm_rope.comp`) against
//! the same ops unfused, on both kernel layouts: a layer's chain as Gemma
//! 3 and Qwen3 record it (norm q, norm k, RoPE q, RoPE k, scale q, then
//! attention, which writes K and V into the cache), over a prompt of a
//! few rows and decode steps after it, writes the same bits in q, k and
//! the attention output (which reads the cache), in fewer dispatches; q
//! and k match the CPU's to the RoPE test's limit.

use crate::vulkan_support;

use engine::ops::{KvType, Ops, RopeStyle, UnaryOp, WeightSource};
use vulkan_support::{bits, layer_params, nmse, values, Pair};

/// q and k against the CPU's: the norm is the CPU's bits, the RoPE's
/// cos / sin within an ulp or two (`vulkan_elementwise.rs`'s RoPE limit,
/// 4e-14, measured there at 1.0e-14 at most); a norm or a pairing off
/// gives well over 1e-4.
const LIMIT: f64 = 4e-14;

/// A layer's query / key heads (query heads, KV heads, head dim), its
/// RoPE pairs, query scale and cache type.
type Case = ((usize, usize, usize), RopeStyle, Option<f32>, KvType);

/// Steps of the chain (a 3-row prompt, then two single rows): per step q,
/// k and the attention output from the GPU, q and k from the CPU, and the
/// dispatches the steps took.
fn steps(
    p: &mut Pair,
    fused: bool,
    norms: &[(engine::ops::Weight, engine::ops::Weight); 2],
    case: Case,
    seed: u64,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>, usize) {
    let ((nh, nkv, hd), style, scale, ty) = case;
    p.gpu.set_norm_rope(fused);
    let kv = p.gpu.alloc_kv(8, nkv * hd, nkv * hd, ty).unwrap();
    let q_scale = if scale.is_some() {
        1.0
    } else {
        1.0 / (hd as f32).sqrt()
    };
    let (rope, ap) = layer_params(style, (nh, nkv, hd), q_scale);
    let (mut gpu, mut cpu) = (Vec::new(), Vec::new());
    let before = p.gpu.stats().dispatches;
    let mut pos = 0;
    for (i, rows) in [3, 1, 1].into_iter().enumerate() {
        let s = seed + 10 * i as u64;
        let scaled =
            |n: usize, at: u64| -> Vec<f32> { values(s + at, n).iter().map(|v| v * 4.0).collect() };
        let q = p.act(rows, nh * hd, &scaled(rows * nh * hd, 1));
        let k = p.act(rows, nkv * hd, &scaled(rows * nkv * hd, 2));
        let v = p.act(rows, nkv * hd, &scaled(rows * nkv * hd, 3));
        let att = p.zeros(rows, nh * hd);
        let eps = 1e-6;
        p.gpu.rms_norm(q.gpu, Some(norms[0].1), eps, hd, q.gpu);
        p.gpu.rms_norm(k.gpu, Some(norms[1].1), eps, hd, k.gpu);
        p.gpu.rope(q.gpu, &rope, pos);
        p.gpu.rope(k.gpu, &rope, pos);
        p.cpu.rms_norm(q.cpu, Some(norms[0].0), eps, hd, q.cpu);
        p.cpu.rms_norm(k.cpu, Some(norms[1].0), eps, hd, k.cpu);
        p.cpu.rope(q.cpu, &rope, pos);
        p.cpu.rope(k.cpu, &rope, pos);
        if let Some(sc) = scale {
            p.gpu.unary(UnaryOp::Scale(sc), q.gpu);
            p.cpu.unary(UnaryOp::Scale(sc), q.cpu);
        }
        p.gpu.attention(kv, q.gpu, k.gpu, v.gpu, att.gpu, pos, &ap);
        for a in [q, k] {
            let (c, g) = p.read(a);
            cpu.push(c);
            gpu.push(g);
        }
        gpu.push(p.read(att).1);
        pos += rows;
    }
    (gpu, cpu, p.gpu.stats().dispatches - before)
}

#[test]
fn a_norm_fused_with_rope_scale_and_cache_write_writes_the_unfused_bits() {
    let mut p = Pair::new();
    let cases: [Case; 5] = [
        ((4, 1, 256), RopeStyle::Neox, Some(0.0625), KvType::F16),
        ((4, 1, 256), RopeStyle::Neox, Some(0.0625), KvType::F32),
        ((8, 2, 128), RopeStyle::Neox, None, KvType::F16),
        ((2, 2, 64), RopeStyle::Norm, None, KvType::F32),
        ((6, 3, 32), RopeStyle::Norm, Some(0.25), KvType::F16),
    ];
    for layout in p.layouts() {
        p.gpu.set_kernel_layout(layout);
        for (case, &(heads, style, scale, ty)) in cases.iter().enumerate() {
            let hd = heads.2;
            let what = format!("{layout:?} {heads:?} {style:?} scale {scale:?} {ty:?}");
            let seed = 3000 + 100 * case as u64;
            let wq = WeightSource::from_f32("q_norm.weight", hd, 1, &values(seed, hd));
            let wk = WeightSource::from_f32("k_norm.weight", hd, 1, &values(seed + 1, hd));
            let norms = [p.weight(&wq), p.weight(&wk)];
            let (want, cpu, plain) = steps(&mut p, false, &norms, cases[case], seed);
            let (got, _, fewer) = steps(&mut p, true, &norms, cases[case], seed);
            for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                let name = ["q", "k", "attention"][i % 3];
                assert!(
                    bits(a) == bits(b),
                    "{what}: step {} {name} differs from the unfused bits",
                    i / 3
                );
            }
            for (i, c) in cpu.iter().enumerate() {
                let g = &got[3 * (i / 2) + i % 2];
                let e = nmse(c, g);
                assert!(
                    e <= LIMIT,
                    "{what}: step {} q/k NMSE {e:e} against the CPU",
                    i / 2
                );
            }
            // Per step: the two norms, two RoPEs, the scale and K's cache
            // write become two dispatches (without the scale, the unfused
            // RoPE of K takes the write in: four become two).
            let per_step = if scale.is_some() { 4 } else { 2 };
            assert_eq!(plain - fewer, 3 * per_step, "{what}: dispatches fewer");
        }
    }
    p.finish("norm and rope");
}
