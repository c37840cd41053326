//! End-to-end checks of the Vulkan toolchain: shaders compiled by build.rs run on
//! whatever device exists (Mesa lavapipe on a machine without a GPU) with the
//! validation layer and synchronization validation on, and every test requires
//! zero validation messages, except the one that proves the gate can fail.
//!
//! Pick a device with SHARPI_VK_DEVICE (an index or a name substring).

use crate::vulkan_support;

use std::time::Instant;

use engine::vulkan::{
    shaders, BinaryPush, Buffer, BufferKind, Context, ContextOptions, Stages, Submission,
};
use vulkan_support::values;

/// A context with validation on. Validation is required here: without the
/// layer these tests cannot tell a correct program from a lucky one.
fn context() -> Context {
    match Context::new(&ContextOptions {
        validation: true,
        device: vulkan_support::device(),
    }) {
        Ok(ctx) => {
            eprintln!("device: {}", ctx.device_info());
            ctx
        }
        Err(e) => panic!(
            "cannot create a Vulkan context with validation: {e}\n\
             run scripts/setup (it installs Mesa lavapipe, the Vulkan loader and \
             VK_LAYER_KHRONOS_validation)"
        ),
    }
}

fn assert_no_validation_messages(ctx: &Context, test: &str) {
    let messages = ctx.validation_messages();
    eprintln!("{test}: {} validation messages", messages.len());
    for m in &messages {
        eprintln!("  {m}");
    }
    assert!(
        messages.is_empty(),
        "{test}: {} validation messages (listed above)",
        messages.len()
    );
    assert_eq!(ctx.validation_error_count(), 0);
}

fn assert_bits_eq(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad = got
        .iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits());
    if let Some(i) = bad {
        panic!("{what}: element {i}: got {} want {}", got[i], want[i]);
    }
}

const N: usize = 100_003;
const SENTINEL_LEN: usize = 1021;
const SENTINEL: u32 = 0x7fa5_5a5a; // a NaN payload no arithmetic produces

#[test]
fn add_matches_cpu_exactly_and_validation_is_clean() {
    let start = Instant::now();
    let ctx = context();
    let a = values(1, N);
    let b = values(2, N);
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();

    let a_buf = ctx.storage_buffer::<f32>("a", N).unwrap();
    let b_buf = ctx.storage_buffer::<f32>("b", N).unwrap();
    let out = ctx.storage_buffer::<f32>("out", N + SENTINEL_LEN).unwrap();
    ctx.upload(&a_buf, 0, &a).unwrap();
    ctx.upload(&b_buf, 0, &b).unwrap();
    ctx.upload(&out, 0, &vec![f32::from_bits(SENTINEL); N + SENTINEL_LEN])
        .unwrap();

    let add = ctx.pipeline(&shaders::BINARY).unwrap();
    let groups = add.groups_for(N as u64).unwrap();
    assert_eq!(groups, [N.div_ceil(256) as u32, 1, 1]);
    let mut sub = ctx.submission().unwrap();
    sub.dispatch(
        add,
        &[&a_buf, &b_buf, &out],
        &BinaryPush::new(N as u32),
        groups,
    )
    .unwrap();
    sub.submit_and_wait().unwrap();
    drop(sub);

    let got: Vec<f32> = ctx.download_vec(&out, 0, N + SENTINEL_LEN).unwrap();
    assert_bits_eq(&got[..N], &want, "a + b");
    assert!(
        got[N..].iter().all(|x| x.to_bits() == SENTINEL),
        "the sentinel region after the {N} elements was written"
    );
    eprintln!(
        "add of {N} elements: {:.1} ms in all",
        start.elapsed().as_secs_f64() * 1e3
    );
    assert_no_validation_messages(&ctx, "add");

    // Destruction reports nothing either: the buffers and the context
    // destroy every Vulkan object they made (the context's drop counts them
    // into its log, which outlives it).
    let log = ctx.validation_log();
    drop((a_buf, b_buf, out, ctx));
    assert_eq!(
        log.messages(),
        Vec::<String>::new(),
        "messages while destroying the context"
    );
}

/// Records, in `sub`: uploads of a and b through staging, d = a + b into
/// scratch[0..n], optionally a barrier, e = d + a into scratch[n..2n] (push
/// offsets), and the download of scratch into `readback`.
fn record_chain<'a>(
    sub: &mut Submission<'a>,
    ctx: &Context,
    bufs: &'a ChainBuffers,
    with_barrier: bool,
) {
    let n = bufs.n;
    let bytes = (n * 4) as u64;
    sub.copy(&bufs.staging_a, 0, &bufs.a, 0, bytes).unwrap();
    sub.copy(&bufs.staging_b, 0, &bufs.b, 0, bytes).unwrap();
    sub.barrier(Stages::TRANSFER, Stages::COMPUTE).unwrap();
    let add = ctx.pipeline(&shaders::BINARY).unwrap();
    let groups = add.groups_for(n as u64).unwrap();
    let first = BinaryPush::new(n as u32);
    sub.dispatch(add, &[&bufs.a, &bufs.b, &bufs.scratch], &first, groups)
        .unwrap();
    if with_barrier {
        sub.barrier(Stages::COMPUTE, Stages::COMPUTE).unwrap();
    }
    let second = BinaryPush {
        n: n as u32,
        a_offset: 0,
        b_offset: 0,
        out_offset: n as u32,
        op: 0,
    };
    sub.dispatch(
        add,
        &[&bufs.scratch, &bufs.a, &bufs.scratch],
        &second,
        groups,
    )
    .unwrap();
    sub.barrier(Stages::COMPUTE, Stages::TRANSFER).unwrap();
    sub.copy(&bufs.scratch, 0, &bufs.readback, 0, 2 * bytes)
        .unwrap();
    sub.barrier(Stages::TRANSFER, Stages::HOST).unwrap();
}

struct ChainBuffers {
    n: usize,
    staging_a: Buffer,
    staging_b: Buffer,
    a: Buffer,
    b: Buffer,
    scratch: Buffer,
    readback: Buffer,
}

impl ChainBuffers {
    fn new(ctx: &Context, a: &[f32], b: &[f32]) -> Self {
        let n = a.len();
        let bytes = (n * 4) as u64;
        let mut staging_a = ctx
            .create_buffer("staging a", bytes, BufferKind::Upload)
            .unwrap();
        let mut staging_b = ctx
            .create_buffer("staging b", bytes, BufferKind::Upload)
            .unwrap();
        staging_a.write(0, a).unwrap();
        staging_b.write(0, b).unwrap();
        Self {
            n,
            staging_a,
            staging_b,
            a: ctx.storage_buffer::<f32>("a", n).unwrap(),
            b: ctx.storage_buffer::<f32>("b", n).unwrap(),
            scratch: ctx.storage_buffer::<f32>("scratch", 2 * n).unwrap(),
            readback: ctx
                .create_buffer("readback", 2 * bytes, BufferKind::Download)
                .unwrap(),
        }
    }
}

#[test]
fn chained_dispatches_with_barrier_are_correct_and_clean() {
    let start = Instant::now();
    let ctx = context();
    let a = values(3, N);
    let b = values(4, N);
    let d: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let e: Vec<f32> = d.iter().zip(&a).map(|(x, y)| x + y).collect();

    let bufs = ChainBuffers::new(&ctx, &a, &b);
    let mut sub = ctx.submission().unwrap();
    record_chain(&mut sub, &ctx, &bufs, true);
    assert_eq!(sub.dispatch_count(), 2);
    sub.submit_and_wait().unwrap();
    let mut got = vec![0f32; 2 * N];
    bufs.readback.read(0, &mut got).unwrap();
    assert_bits_eq(&got[..N], &d, "d = a + b");
    assert_bits_eq(&got[N..], &e, "e = d + a");

    // The same submission again after reset: its command buffer and descriptor
    // pools are reused once the fence has signalled.
    sub.reset().unwrap();
    assert_eq!(sub.dispatch_count(), 0);
    record_chain(&mut sub, &ctx, &bufs, true);
    sub.submit_and_wait().unwrap();
    bufs.readback.read(0, &mut got).unwrap();
    assert_bits_eq(&got[N..], &e, "e = d + a (after reset)");
    drop(sub);

    eprintln!(
        "chained adds of {N} elements, twice: {:.1} ms in all",
        start.elapsed().as_secs_f64() * 1e3
    );
    assert_no_validation_messages(&ctx, "chained");
}

/// Proves the gate can fail: the second dispatch reads what the first wrote with
/// no barrier between them. Lavapipe runs dispatches in order, so the numbers
/// may well come out right; synchronization validation must still report it.
#[test]
fn validation_reports_a_missing_barrier() {
    let ctx = context();
    let n = 4099;
    let a = values(5, n);
    let b = values(6, n);
    let bufs = ChainBuffers::new(&ctx, &a, &b);
    let mut sub = ctx.submission().unwrap();
    record_chain(&mut sub, &ctx, &bufs, false);
    sub.submit_and_wait().unwrap();
    drop(sub);

    let messages = ctx.validation_messages();
    eprintln!(
        "missing barrier: {} validation messages, {} errors",
        messages.len(),
        ctx.validation_error_count()
    );
    for m in &messages {
        eprintln!("  {}", m.chars().take(300).collect::<String>());
    }
    assert!(
        ctx.validation_error_count() > 0,
        "the missing barrier went unreported"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("SYNC-HAZARD-READ-AFTER-WRITE")),
        "expected SYNC-HAZARD-READ-AFTER-WRITE among the messages"
    );
}

/// Many dispatches in one submission (more descriptor sets than one pool holds),
/// ping-ponging between two buffers with a barrier before each, then the same
/// after a reset.
#[test]
fn many_dispatches_grow_and_reuse_descriptor_pools() {
    let start = Instant::now();
    let ctx = context();
    let n = 1000;
    let steps = 600;
    let a = values(7, n);
    let b = values(8, n);
    let mut want = a.clone();
    for _ in 0..steps {
        want = want.iter().zip(&b).map(|(x, y)| x + y).collect();
    }

    let x = ctx.storage_buffer::<f32>("x", n).unwrap();
    let y = ctx.storage_buffer::<f32>("y", n).unwrap();
    let b_buf = ctx.storage_buffer::<f32>("b", n).unwrap();
    ctx.upload(&b_buf, 0, &b).unwrap();
    let add = ctx.pipeline(&shaders::BINARY).unwrap();
    let groups = add.groups_for(n as u64).unwrap();
    let push = BinaryPush::new(n as u32);

    let mut sub = ctx.submission().unwrap();
    for round in 0..2 {
        if round > 0 {
            sub.reset().unwrap();
        }
        ctx.upload(&x, 0, &a).unwrap();
        let (mut src, mut dst) = (&x, &y);
        for _ in 0..steps {
            sub.barrier(Stages::COMPUTE | Stages::TRANSFER, Stages::COMPUTE)
                .unwrap();
            sub.dispatch(add, &[src, &b_buf, dst], &push, groups)
                .unwrap();
            std::mem::swap(&mut src, &mut dst);
        }
        assert_eq!(sub.dispatch_count(), steps);
        sub.submit_and_wait().unwrap();
        let got: Vec<f32> = ctx.download_vec(src, 0, n).unwrap();
        assert_bits_eq(&got, &want, &format!("round {round}: a + {steps} * b"));
    }
    drop(sub);
    eprintln!(
        "2 x {steps} dispatches: {:.1} ms in all",
        start.elapsed().as_secs_f64() * 1e3
    );
    assert_no_validation_messages(&ctx, "many dispatches");
}

#[test]
fn buffer_misuse_is_an_error_not_ub() {
    let ctx = context();
    let small = ctx.storage_buffer::<f32>("small", 4).unwrap();
    let add = ctx.pipeline(&shaders::BINARY).unwrap();
    let mut sub = ctx.submission().unwrap();
    let err = sub
        .dispatch(add, &[&small, &small], &BinaryPush::new(4), [1, 1, 1])
        .unwrap_err();
    assert!(
        err.to_string().contains("2 buffers for 3 bindings"),
        "{err}"
    );
    let err = sub.copy(&small, 0, &small, 8, 16).unwrap_err();
    assert!(err.to_string().contains("exceeds"), "{err}");
    let err = ctx.upload(&small, 0, &[0f32; 5]).unwrap_err();
    assert!(err.to_string().contains("small"), "{err}");
    let err = ctx
        .create_buffer("empty", 0, BufferKind::Storage)
        .unwrap_err();
    assert!(err.to_string().contains("size 0"), "{err}");
    sub.submit_and_wait().unwrap();
    let err = sub.barrier(Stages::COMPUTE, Stages::COMPUTE).unwrap_err();
    assert!(err.to_string().contains("not recording"), "{err}");
    drop(sub);
    assert_no_validation_messages(&ctx, "misuse");
}

#[test]
fn lists_devices() {
    let devices =
        engine::vulkan::list_devices().unwrap_or_else(|e| panic!("{e} (run scripts/setup)"));
    assert!(!devices.is_empty());
    for d in &devices {
        eprintln!("{d}");
        let ctx = Context::new(&ContextOptions {
            validation: true,
            device: engine::vulkan::DeviceSelector::Index(d.index),
        });
        match ctx {
            Ok(ctx) => eprintln!("  {:?}", ctx.limits()),
            Err(e) => eprintln!("  cannot be opened: {e}"),
        }
    }
}
