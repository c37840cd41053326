//! Shared by the Vulkan tests: the device they run on, a CPU backend and a
//! Vulkan backend (with validation and synchronization validation on) side
//! by side, inputs in [-1, 1], and the checks every op test ends with (NMSE
//! against the CPU, NaN fails, sentinels intact, zero validation messages);
//! random quantized weights and the limits of their products
//! ([`weights`]); whole models placed on the devices ([`session`]).
//!
//! Pick a device with SHARPI_VK_DEVICE (an index or a name substring).

#![allow(dead_code)]

pub mod extreme;
pub mod session;
pub mod weights;

use engine::cpu::CpuBackend;
use engine::ops::{Act, Ops, Weight, WeightSource};
use engine::vulkan::{DeviceSelector, KernelLayout, VulkanBackend, VulkanOptions};

/// The device SHARPI_VK_DEVICE names (default: discrete GPU first).
pub fn device() -> DeviceSelector {
    std::env::var("SHARPI_VK_DEVICE")
        .map(|s| s.parse().expect("infallible"))
        .unwrap_or_default()
}

/// That device with validation on.
pub fn options() -> VulkanOptions {
    VulkanOptions {
        device: device(),
        validation: true,
        record_every_step: false,
        unfused: Default::default(),
        kernel_layout: None,
    }
}

/// The same activation on both backends.
#[derive(Clone, Copy, Debug)]
pub struct Both {
    pub cpu: Act,
    pub gpu: Act,
}

/// A CPU backend and a Vulkan backend fed the same inputs.
pub struct Pair {
    pub cpu: CpuBackend,
    pub gpu: VulkanBackend,
}

impl Pair {
    pub fn new() -> Pair {
        let gpu = VulkanBackend::new(&options()).unwrap_or_else(|e| {
            panic!("cannot open a Vulkan device with validation: {e} (run scripts/setup)")
        });
        Pair {
            cpu: CpuBackend::new(2),
            gpu,
        }
    }

    /// A `[rows, width]` activation holding `data` on both backends.
    pub fn act(&mut self, rows: usize, width: usize, data: &[f32]) -> Both {
        assert_eq!(data.len(), rows * width);
        let cpu = self.cpu.alloc(rows, width).unwrap();
        let gpu = self.gpu.alloc(rows, width).unwrap();
        self.cpu.write(cpu, data).unwrap();
        self.gpu.write(gpu, data).unwrap();
        Both { cpu, gpu }
    }

    /// A zeroed activation on both (written: a fresh one holds the poison
    /// of test builds, `engine::poison`).
    pub fn zeros(&mut self, rows: usize, width: usize) -> Both {
        self.act(rows, width, &vec![0.0; rows * width])
    }

    /// The same weight on both.
    pub fn weight(&mut self, w: &WeightSource) -> (Weight, Weight) {
        (self.cpu.upload(w).unwrap(), self.gpu.upload(w).unwrap())
    }

    /// Whether the device may flush f32 denormals (it does not promise to
    /// keep them: `DeviceLimits::denorm_preserve_f32`).
    pub fn may_flush(&self) -> bool {
        !self.gpu.context().limits().denorm_preserve_f32
    }

    /// Reads an activation back from both: (cpu, gpu).
    pub fn read(&mut self, a: Both) -> (Vec<f32>, Vec<f32>) {
        let mut c = vec![0.0; a.cpu.len()];
        let mut g = vec![0.0; a.gpu.len()];
        self.cpu.read(a.cpu, &mut c).unwrap();
        self.gpu.read(a.gpu, &mut g).unwrap();
        (c, g)
    }

    /// The device's own kernel layout first, then the other one where the
    /// device can run it.
    pub fn layouts(&self) -> Vec<KernelLayout> {
        let other = match self.gpu.kernel_layout() {
            KernelLayout::Gpu => KernelLayout::Cpu,
            KernelLayout::Cpu => KernelLayout::Gpu,
        };
        let mut v = vec![self.gpu.kernel_layout()];
        if other == KernelLayout::Gpu || KernelLayout::cpu_supported(self.gpu.context().limits()) {
            v.push(other);
        }
        v
    }

    /// Sentinels intact and no validation message.
    pub fn finish(&mut self, what: &str) {
        self.gpu
            .check_sentinels()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let msgs = self.gpu.context().validation_messages();
        for m in &msgs {
            eprintln!("  {m}");
        }
        assert!(
            msgs.is_empty(),
            "{what}: {} validation messages (above)",
            msgs.len()
        );
    }
}

impl Both {
    /// Rows `row0..row0 + rows` of both.
    pub fn rows_from(self, row0: usize, rows: usize) -> Both {
        Both {
            cpu: self.cpu.rows_from(row0, rows),
            gpu: self.gpu.rows_from(row0, rows),
        }
    }
}

/// splitmix64 values mapped to multiples of 2^-23 in [-1, 1): exact in f32,
/// and so is the sum of two (an add compares exactly against the CPU).
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

/// Normalised mean squared error of `got` against `want`: sum((g-w)²) /
/// sum(w²) (as llama.cpp's test-backend-ops computes it); NaN when any
/// value is NaN or the lengths differ.
pub fn nmse(want: &[f32], got: &[f32]) -> f64 {
    if want.len() != got.len() || got.iter().chain(want).any(|v| v.is_nan()) {
        return f64::NAN;
    }
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (&w, &g) in want.iter().zip(got) {
        let d = f64::from(g) - f64::from(w);
        err += d * d;
        norm += f64::from(w) * f64::from(w);
    }
    if norm == 0.0 {
        return if err == 0.0 { 0.0 } else { f64::INFINITY };
    }
    err / norm
}

/// Fails unless `nmse(want, got) <= limit` (NaN fails).
pub fn assert_nmse(what: &str, want: &[f32], got: &[f32], limit: f64) {
    let e = nmse(want, got);
    assert!(e <= limit, "{what}: NMSE {e:e} over {limit:e}");
}

/// The bits of each value (for comparisons where -0 and NaN payloads count).
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A layer's RoPE over whole heads of `hd` (base 10000, `style` pairs)
/// and its attention: `nh` query heads over `nkv` KV heads, scores times
/// `scale`, no window or soft cap.
pub fn layer_params(
    style: engine::ops::RopeStyle,
    (nh, nkv, hd): (usize, usize, usize),
    scale: f32,
) -> (engine::ops::RopeParams, engine::ops::AttnParams) {
    let rope = engine::ops::RopeParams {
        style,
        head_dim: hd,
        n_rot: hd,
        base: 10000.0,
        freq_scale: 1.0,
    };
    let attn = engine::ops::AttnParams {
        n_head: nh,
        n_kv_head: nkv,
        head_dim_k: hd,
        head_dim_v: hd,
        scale,
        window: None,
        softcap: None,
    };
    (rope, attn)
}
