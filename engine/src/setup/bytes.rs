//! What a model needs on each device: weights by placement, KV caches,
//! scratch ([`ModelBytes`], [`ModelBytes::budget`]), counted before anything
//! is loaded.

use std::collections::HashSet;

use crate::expert_cache::CacheBufs;
use crate::gguf::TensorInfo;
use crate::model::{Model, Role, Scratch, HEAD_BLOCK};
use crate::ops::KvType;
use crate::placement::{Placement, Side};
use crate::vulkan::{attention_partial_bytes, twin_bytes};

/// Bytes a device holds for a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceBytes {
    pub weights: u64,
    pub kv: u64,
    /// Activations: scratch, the hidden state, the logits (head's device).
    pub scratch: u64,
}

impl DeviceBytes {
    pub fn total(&self) -> u64 {
        self.weights + self.kv + self.scratch
    }
}

/// Room a device buffer may take beyond its contents: the Vulkan backend's
/// 256-byte sentinel and rounding to whole words.
pub const BUFFER_SLACK: u64 = 256 + 4;

/// What a model needs, stage by stage, for a session of `n_ctx` positions
/// and `n_batch` rows: the input of [`ModelBytes::budget`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelBytes {
    /// Tensors (name, bytes) of the embedding, the head (a tied head names
    /// `token_embd.weight`), each layer.
    pub embed: Vec<(String, u64)>,
    pub head: Vec<(String, u64)>,
    pub layers: Vec<Vec<(String, u64)>>,
    /// K and V caches of one layer.
    pub kv_per_layer: u64,
    /// Scratch and hidden state of every device that runs a stage.
    pub scratch: u64,
    /// The logits buffer, on the head's device.
    pub logits: u64,
    /// With an expert slot cache (`--moe-cache`): what each layer holds
    /// when it runs on the GPU (slots instead of the experts), and the
    /// cache's buffers there.
    pub gpu_layers: Option<Vec<Vec<(String, u64)>>>,
    pub gpu_scratch: u64,
    /// On the Vulkan device: the quantized twin of each activation buffer
    /// (`vulkan::twin_bytes`: matrix products on block weights read their
    /// input quantized to the weight type's dot format), and split-K
    /// attention's partials (`vulkan::attention_partial_bytes`).
    pub gpu_act: u64,
}

impl ModelBytes {
    /// From the model's tensor table and shapes (what `Session` allocates,
    /// each buffer with [`BUFFER_SLACK`]).
    pub fn of(model: &Model, n_ctx: usize, n_batch: usize, kv_type: KvType) -> ModelBytes {
        let hp = model.hparams();
        let table = model.tensors();
        let t = |i: &TensorInfo| (i.name.clone(), i.n_bytes.div_ceil(4) * 4);
        let (mut embed, mut head) = (Vec::new(), Vec::new());
        for (&role, info) in &table.global {
            match role {
                Role::TokEmbd => embed.push(t(info)),
                _ => head.push(t(info)),
            }
        }
        let layers = table
            .layers
            .iter()
            .map(|m| m.values().map(t).collect())
            .collect();
        let buf =
            |rows: usize, width: usize, bytes: usize| (rows * width * bytes) as u64 + BUFFER_SLACK;
        let eb = kv_type.elem_bytes();
        // Scratch (see [`Scratch::widths`]) and the hidden state.
        let scratch: u64 = Scratch::widths(hp)
            .iter()
            .map(|&(_, w)| buf(n_batch, w, 4))
            .sum();
        let twin = |width: usize| twin_bytes((n_batch * width) as u64 + 64) + BUFFER_SLACK;
        let gpu_act = Scratch::widths(hp)
            .iter()
            .map(|&(_, w)| twin(w))
            .sum::<u64>()
            + twin(hp.n_embd)
            + attention_partial_bytes(hp.n_head, hp.head_dim_v)
            + BUFFER_SLACK;
        ModelBytes {
            embed,
            head,
            layers,
            kv_per_layer: buf(n_ctx, hp.k_width(), eb) + buf(n_ctx, hp.v_width(), eb),
            scratch: scratch + buf(n_batch, hp.n_embd, 4),
            logits: buf(HEAD_BLOCK, hp.n_vocab, 4),
            gpu_layers: None,
            gpu_scratch: 0,
            gpu_act,
        }
    }

    /// The same with GPU layers holding `n_slots` expert slots instead of
    /// their experts (each slot weight with [`BUFFER_SLACK`]) and the
    /// cache's buffers for `n_batch` rows.
    pub fn with_expert_slots(
        mut self,
        model: &Model,
        n_slots: usize,
        n_batch: usize,
    ) -> ModelBytes {
        let Some(moe) = model.hparams().moe else {
            return self;
        };
        let gpu = model
            .tensors()
            .layers
            .iter()
            .map(|map| {
                map.iter()
                    .filter_map(|(role, i)| {
                        let slots = |i: &TensorInfo| {
                            let b = i.n_bytes / moe.n_expert as u64 * n_slots as u64;
                            (
                                format!("{} slots", i.name),
                                b.div_ceil(4) * 4 + BUFFER_SLACK,
                            )
                        };
                        match role.is_expert_matrix() {
                            true if n_slots == 0 => None,
                            true => Some(slots(i)),
                            false => Some((i.name.clone(), i.n_bytes.div_ceil(4) * 4)),
                        }
                    })
                    .collect()
            })
            .collect();
        let buf = |width: usize| (n_batch * width * 4) as u64 + BUFFER_SLACK;
        self.gpu_layers = Some(gpu);
        self.gpu_scratch = CacheBufs::widths(model.hparams())
            .iter()
            .map(|&(_, w)| buf(w) + twin_bytes((n_batch * w) as u64 + 64) + BUFFER_SLACK)
            .sum();
        self
    }
}

/// Bytes of one expert of a layer of `model` (gate, up and down together).
pub fn expert_bytes(model: &Model) -> u64 {
    let n_expert = model.hparams().moe.map_or(1, |m| m.n_expert) as u64;
    model.tensors().layers.first().map_or(0, |map| {
        map.iter()
            .filter(|(r, _)| r.is_expert_matrix())
            .map(|(_, i)| i.n_bytes / n_expert)
            .sum()
    })
}

impl ModelBytes {
    /// What each device (index) holds under `table`; devices it does not
    /// use get zeros.
    pub fn budget(&self, table: &Placement) -> Vec<DeviceBytes> {
        let m = self;
        let n_dev = table.devices_used().last().map_or(0, |&d| d + 1);
        let mut out = vec![DeviceBytes::default(); n_dev];
        // A tensor needed twice on one device (a tied head) is held once.
        let mut seen: HashSet<(usize, &str)> = HashSet::new();
        let on_gpu = |d: usize, l: usize| match &m.gpu_layers {
            Some(g) if d == Side::Gpu as usize => &g[l],
            _ => &m.layers[l],
        };
        let layers = table
            .layers
            .iter()
            .enumerate()
            .map(|(l, &d)| (d, on_gpu(d, l)));
        let stages = [(table.embed, &m.embed), (table.head, &m.head)]
            .into_iter()
            .chain(layers);
        for (d, tensors) in stages {
            for (name, bytes) in tensors {
                if seen.insert((d, name.as_str())) {
                    out[d].weights += bytes;
                }
            }
        }
        for &d in &table.layers {
            out[d].kv += m.kv_per_layer;
        }
        for d in table.devices_used() {
            out[d].scratch += m.scratch;
        }
        if table.devices_used().contains(&(Side::Gpu as usize)) {
            out[Side::Gpu as usize].scratch += m.gpu_act;
        }
        if m.gpu_layers.is_some() && table.layers.contains(&(Side::Gpu as usize)) {
            out[Side::Gpu as usize].scratch += m.gpu_scratch;
        }
        out[table.head].scratch += m.logits;
        out
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::setup::largest_fit;

    /// Three layers of 100 bytes each (two tensors), an embedding of 1000
    /// that a tied head reuses, an output norm of 10.
    pub(crate) fn model_bytes() -> ModelBytes {
        let t = |n: &str, b: u64| (n.to_string(), b);
        ModelBytes {
            embed: vec![t("token_embd.weight", 1000)],
            head: vec![t("output_norm.weight", 10), t("token_embd.weight", 1000)],
            layers: (0..3)
                .map(|l| vec![t(&format!("blk.{l}.a"), 60), t(&format!("blk.{l}.b"), 40)])
                .collect(),
            kv_per_layer: 7,
            scratch: 5,
            logits: 3,
            gpu_layers: None,
            gpu_scratch: 0,
            gpu_act: 0,
        }
    }

    #[test]
    fn budget_adds_weights_kv_and_scratch_per_device() {
        let m = model_bytes();
        let db = |weights, kv, scratch| DeviceBytes {
            weights,
            kv,
            scratch,
        };
        // CPU only: the tied embedding once.
        let b = m.budget(&Placement::gpu_split(3, 0, None));
        assert_eq!(b, vec![db(1310, 21, 8)]);
        // -g 1: the GPU holds the embedding and layer 0, the CPU the rest
        // and the head, which needs the embedding table again.
        let b = m.budget(&Placement::gpu_split(3, 1, None));
        assert_eq!(b, vec![db(200 + 10 + 1000, 14, 8), db(1000 + 100, 7, 5)]);
        // --fixed-on cpu: the GPU holds layers only.
        let b = m.budget(&Placement::gpu_split(3, 2, Some(Side::Cpu)));
        assert_eq!(b, vec![db(1110, 7, 8), db(200, 14, 5)]);
        // Everything on the GPU.
        let b = m.budget(&Placement::gpu_split(3, 3, None));
        assert_eq!(b[1], db(1310, 21, 8));
        assert_eq!(b[1].total(), 1339);
        assert_eq!(b[0], DeviceBytes::default());
    }

    #[test]
    fn expert_slots_replace_a_gpu_layers_experts_in_the_budget() {
        let db = |weights, kv, scratch| DeviceBytes {
            weights,
            kv,
            scratch,
        };
        // On the GPU a layer holds 60 + 10 (slots) instead of 100; the
        // cache's buffers add 4 there. The CPU's layers keep their tensors.
        let mut m = model_bytes();
        let t = |n: &str, b: u64| (n.to_string(), b);
        m.gpu_layers = Some(
            (0..3)
                .map(|l| {
                    vec![
                        t(&format!("blk.{l}.a"), 60),
                        t(&format!("blk.{l}.b slots"), 10),
                    ]
                })
                .collect(),
        );
        m.gpu_scratch = 4;
        let b = m.budget(&Placement::gpu_split(3, 1, None));
        assert_eq!(b, vec![db(200 + 10 + 1000, 14, 8), db(1000 + 70, 7, 5 + 4)]);
        // No GPU layer: no slots, no cache buffers.
        let b = m.budget(&Placement::gpu_split(3, 0, Some(Side::Gpu)));
        assert_eq!(b[1], db(1010, 0, 8));
        assert_eq!(largest_fit(&m, 3, None, 1010 + 210 + 21 + 12), Some(3));
    }
}
