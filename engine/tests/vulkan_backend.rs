//! The Vulkan backend's machinery through the `Ops` interface: transfers,
//! one submission per flush, barriers between dependent commands, sentinels,
//! and 64 dispatches of one pipeline on 64 different buffers in one command
//! buffer.

use crate::vulkan_support;

use engine::ops::{Ops, WeightSource};
use vulkan_support::{assert_nmse, values, Pair};

#[test]
fn write_read_round_trip_and_copy() {
    let mut p = Pair::new();
    let data = values(1, 3 * 37);
    let a = p.act(3, 37, &data);
    let (_, g) = p.read(a);
    assert_eq!(g, data);
    // Copy rows 1..3 of a into rows 0..2 of b.
    let b = p.zeros(4, 37);
    p.gpu.copy(a.gpu.rows_from(1, 2), b.gpu.first(2));
    p.cpu.copy(a.cpu.rows_from(1, 2), b.cpu.first(2));
    let (c, g) = p.read(b);
    assert_eq!(c, g);
    assert_eq!(&g[..74], &data[37..]);
    assert!(g[74..].iter().all(|&v| v == 0.0));
    p.finish("round trip");
}

#[test]
fn dependent_adds_are_ordered_by_barriers() {
    // x += y ten times, in place: each add reads what the previous wrote.
    let mut p = Pair::new();
    let n = 1000;
    let x = p.act(1, n, &values(2, n));
    let y = p.act(1, n, &values(3, n));
    p.read(y); // submits the setup (fills, uploads)
    let before = p.gpu.stats();
    for _ in 0..10 {
        p.cpu.add(x.cpu, y.cpu);
        p.gpu.add(x.gpu, y.gpu);
    }
    let (c, g) = p.read(x);
    let after = p.gpu.stats();
    assert_eq!(c, g, "f32 adds in the same order are exact");
    assert_eq!(after.submissions - before.submissions, 1);
    assert_eq!(after.dispatches - before.dispatches, 10);
    // One barrier between consecutive adds (9) and the two around the
    // read-back.
    assert_eq!(after.barriers - before.barriers, 9 + 2);
    p.finish("dependent adds");
}

#[test]
fn sixty_four_dispatches_of_one_pipeline_on_different_buffers() {
    // One pipeline, 64 dispatches, each with its own three buffers, all in
    // one command buffer (one flush): every output must be its own sum. A
    // descriptor set shared between dispatches would make them all read the
    // last binding.
    let mut p = Pair::new();
    let n = 300;
    let mut outs = Vec::new();
    for i in 0..64u64 {
        let a = p.act(1, n, &values(100 + i, n));
        let b = p.act(1, n, &values(200 + i, n));
        outs.push((a, b, values(100 + i, n), values(200 + i, n)));
    }
    p.read(outs[0].1);
    let before = p.gpu.stats();
    for (a, b, _, _) in &outs {
        p.gpu.add(a.gpu, b.gpu);
    }
    let mut first = vec![0.0; n];
    p.gpu.read(outs[0].0.gpu, &mut first).unwrap();
    let after = p.gpu.stats();
    assert_eq!(after.submissions - before.submissions, 1);
    assert_eq!(after.dispatches - before.dispatches, 64);
    // Independent dispatches: no barrier between them.
    assert_eq!(after.barriers - before.barriers, 2);
    for (i, (a, _, av, bv)) in outs.iter().enumerate() {
        let mut got = vec![0.0; n];
        p.gpu.read(a.gpu, &mut got).unwrap();
        let want: Vec<f32> = av.iter().zip(bv).map(|(x, y)| x + y).collect();
        assert_eq!(got, want, "dispatch {i}");
    }
    p.finish("64 dispatches");
}

#[test]
fn views_touch_only_their_rows() {
    let mut p = Pair::new();
    let (rows, w) = (5, 33);
    let x = p.act(rows, w, &values(4, rows * w));
    let y = p.act(rows, w, &values(5, rows * w));
    p.cpu.add(x.cpu.rows_from(1, 3), y.cpu.rows_from(2, 3));
    p.gpu.add(x.gpu.rows_from(1, 3), y.gpu.rows_from(2, 3));
    let (c, g) = p.read(x);
    assert_nmse("add on views", &c, &g, 0.0);
    p.finish("views");
}

#[test]
fn a_model_that_does_not_fit_is_a_clear_error() {
    let mut p = Pair::new();
    p.gpu.set_memory_budget(p.gpu.allocated_bytes() + (1 << 20));
    // 2 MiB of f32 weights against 1 MiB left.
    let w = WeightSource::from_f32("blk.0.ffn_up.weight", 512, 1024, &values(9, 512 * 1024));
    let e = p.gpu.upload(&w).unwrap_err().to_string();
    assert!(
        e.contains("blk.0.ffn_up.weight") && e.contains("does not fit in device memory"),
        "{e}"
    );
    // What fits still works.
    let small = WeightSource::from_f32("small", 64, 4, &values(10, 256));
    p.gpu.upload(&small).unwrap();
    p.finish("budget");
}
