//! The Vulkan `add_bias` (`shaders/add_bias.comp`) against the CPU's, bit
//! for bit: each element is one f32 addition on both. Widths that are not
//! multiples of a workgroup, several rows, views at a row offset inside a
//! larger buffer (the rows outside unchanged), values up to ±3e38 with
//! planted ±inf and NaN (sums that overflow, `inf + -inf`), and
//! `Pair::finish` (sentinels, no validation message) at the end.

use crate::vulkan_support;

use engine::ops::{Ops, WeightSource};
use vulkan_support::{values, Pair};

/// `v` with every 37th element ±inf or NaN in turn.
fn planted(mut v: Vec<f32>) -> Vec<f32> {
    let specials = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
    for (k, i) in (0..v.len()).step_by(37).enumerate() {
        v[i] = specials[k % 3];
    }
    v
}

#[test]
fn add_bias_matches_the_cpu_bit_for_bit() {
    let mut pair = Pair::new();
    let mut seed = 1;
    for width in [1usize, 7, 64, 255, 256, 257, 700] {
        for (off, rows, after) in [(0usize, 1usize, 0usize), (2, 3, 1), (1, 5, 0)] {
            for scale in [1.0f32, 3e38] {
                seed += 1;
                let total = off + rows + after;
                let scaled = |v: Vec<f32>| v.into_iter().map(|x| x * scale).collect::<Vec<_>>();
                let mut xv = scaled(values(seed, total * width));
                let mut bv = scaled(values(seed ^ 0x55, width));
                if scale > 1.0 {
                    (xv, bv) = (planted(xv), planted(bv));
                }
                let x = pair.act(total, width, &xv);
                let (bc, bg) = pair.weight(&WeightSource::from_f32("bias", width, 1, &bv));
                let view = x.rows_from(off, rows);
                pair.cpu.add_bias(view.cpu, bc);
                pair.gpu.add_bias(view.gpu, bg);
                let (c, g) = pair.read(x);
                for (i, ((&c, &g), &x0)) in c.iter().zip(&g).zip(&xv).enumerate() {
                    let what = format!(
                        "width {width}, rows {off}..{}, ×{scale}, element {i}",
                        off + rows
                    );
                    assert!(
                        c.to_bits() == g.to_bits() || (c.is_nan() && g.is_nan()),
                        "{what}: GPU {g} against the CPU's {c}"
                    );
                    let t = i / width;
                    if !(off..off + rows).contains(&t) {
                        assert_eq!(c.to_bits(), x0.to_bits(), "{what}: outside the view");
                    } else {
                        let want = x0 + bv[i % width];
                        assert!(
                            c.to_bits() == want.to_bits() || (c.is_nan() && want.is_nan()),
                            "{what}"
                        );
                    }
                }
            }
        }
    }
    pair.finish("add_bias");
}
