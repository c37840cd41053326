//! Decode attention with the output projection and its residual add as
//! the attention's epilogue (`fuse/oproj.rs`, `attention.comp`
//! OUT_PROJ) against the same ops with the epilogue off, on the GPU
//! kernel layout: the attention output, the projection and the residual
//! are the same bits, one dispatch fewer a step, for the plain decode
//! kernel and the split-K one (positions past 64), f32 and f16 caches,
//! both subgroup twins of the projection; a weight type without the
//! epilogue (Q4_K) keeps its dispatches.

use crate::vulkan_support;

use engine::ggml_type::GgmlType;
use engine::ops::{KvType, Ops, RopeStyle};
use engine::vulkan::KernelLayout;
use vulkan_support::weights::weight;
use vulkan_support::{bits, layer_params, values, Pair};

/// An attention block's shape: (query heads, KV heads, head dim).
type Heads = (usize, usize, usize);

/// A prefill of `pos` rows (the cache's keys and values before the
/// step), then one decode step at `pos`: attention, the output
/// projection, the residual add. The step's attention output,
/// projection and residual read back, and the step's dispatches.
fn step(
    p: &mut Pair,
    oproj: bool,
    w_o: engine::ops::Weight,
    (nh, nkv, hd): Heads,
    kv_ty: KvType,
    pos: usize,
    seed: u64,
) -> (Vec<Vec<f32>>, usize) {
    p.gpu.set_oproj_fusion(oproj);
    let d = nh * hd;
    let kv = p.gpu.alloc_kv(pos + 1, nkv * hd, nkv * hd, kv_ty).unwrap();
    let (_, ap) = layer_params(RopeStyle::Norm, (nh, nkv, hd), 1.0 / (hd as f32).sqrt());
    let rows = |p: &mut Pair, n: usize, w: usize, s: u64| {
        let v: Vec<f32> = values(s, n * w).iter().map(|x| x * 2.0).collect();
        p.act(n, w, &v)
    };
    if pos > 0 {
        let (q, k, v) = (
            rows(p, pos, d, seed),
            rows(p, pos, nkv * hd, seed + 1),
            rows(p, pos, nkv * hd, seed + 2),
        );
        let att = p.zeros(pos, d);
        p.gpu.attention(kv, q.gpu, k.gpu, v.gpu, att.gpu, 0, &ap);
        p.read(att);
    }
    let (q, k, v) = (
        rows(p, 1, d, seed + 3),
        rows(p, 1, nkv * hd, seed + 4),
        rows(p, 1, nkv * hd, seed + 5),
    );
    let x = rows(p, 1, d, seed + 6);
    let att = p.zeros(1, d);
    let proj = p.zeros(1, d);
    let before = p.gpu.stats().dispatches;
    p.gpu.attention(kv, q.gpu, k.gpu, v.gpu, att.gpu, pos, &ap);
    p.gpu.matmul(w_o, att.gpu, proj.gpu);
    p.gpu.add(x.gpu, proj.gpu);
    let out = vec![p.read(att).1, p.read(proj).1, p.read(x).1];
    // Three transfers: the first one submitted the step.
    (out, p.gpu.stats().dispatches - before)
}

#[test]
fn the_output_projection_in_the_attention_epilogue_writes_the_unfused_bits() {
    let mut p = Pair::new();
    p.gpu.set_kernel_layout(KernelLayout::Gpu);
    // (weight type, heads, cache type, whether the epilogue applies).
    let cases = [
        (GgmlType::Q4_1, (9, 3, 64), KvType::F32, true),
        (GgmlType::Q4_1, (9, 3, 64), KvType::F16, true),
        (GgmlType::Q8_0, (8, 2, 32), KvType::F16, true),
        (GgmlType::Q5_0, (4, 1, 128), KvType::F32, true),
        (GgmlType::Q4_K, (4, 2, 64), KvType::F32, false),
    ];
    let mut fused_runs = 0;
    for (case, &(ty, heads, kv_ty, applies)) in cases.iter().enumerate() {
        let d = heads.0 * heads.2;
        let seed = 6000 + 20 * case as u64;
        let (w, _) = weight(ty, d, d, seed);
        let w_o = p.weight(&w).1;
        // Position 3: the plain decode kernel; 130: split-K in 3 runs.
        for pos in [3, 130] {
            let what = format!("{} {heads:?} {kv_ty:?} at {pos}", ty.name());
            let (want, apart) = step(&mut p, false, w_o, heads, kv_ty, pos, seed + 1);
            for sg in [false, true] {
                p.gpu.set_matvec_subgroups(sg);
                let what = format!("{what} subgroups {sg}");
                let (got, n) = step(&mut p, true, w_o, heads, kv_ty, pos, seed + 1);
                for (name, (a, b)) in ["attention", "projection", "residual"]
                    .iter()
                    .zip(want.iter().zip(&got))
                {
                    assert!(
                        bits(a) == bits(b),
                        "{what}: the {name} differs from the unfused bits"
                    );
                }
                let fewer = usize::from(applies);
                assert_eq!(apart - n, fewer, "{what}: dispatches the epilogue saves");
                fused_runs += fewer;
            }
        }
    }
    assert_eq!(fused_runs, 16);
    p.finish("attention output projection");
}
