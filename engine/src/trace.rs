//! Observing named intermediate tensors of a forward pass.
//!
//! A [`TraceSink`] attached to a forward pass receives tensors under the
//! names llama.cpp's graph builders give them with `cb(cur, name, il)`
//! (what its `cb_eval` callback sees as `"{name}-{il}"`), so that the
//! harness can line ours up with a llama.cpp capture. Without a sink
//! nothing is read back or copied.
//!
//! Names, in the order a layer emits them (see `model::forward` for where):
//!
//! | name | llama | gemma3 | what |
//! |---|---|---|---|
//! | `inp_scaled` | | whole model | embeddings times `sqrt(n_embd)` |
//! | `attn_norm` | ✓ | ✓ | RMS-normed layer input |
//! | `Qcur_normed`, `Kcur_normed` | | ✓ | after QK-norm, before RoPE |
//! | `Qcur`, `Kcur` | ✓ | ✓ | after RoPE (llama.cpp's last use of the name) |
//! | `Vcur` | ✓ | ✓ | V projection |
//! | `kqv_out` | ✓ | ✓ | attention output, before the output projection |
//! | `attn_out` | ✓ | | after the output projection |
//! | `attn_post_norm` | | ✓ | output projection, RMS-normed |
//! | `ffn_inp` / `sa_out` | llama | gemma3 | residual after attention |
//! | `ffn_norm` | ✓ | ✓ | RMS-normed FFN input |
//! | `ffn_gate`, `ffn_up` | ✓ | ✓ | gate and up projections |
//! | `ffn_swiglu` / `ffn_geglu` | llama | gemma3 | gated activation |
//! | `ffn_out` | ✓ | ✓ | down projection (llama.cpp's first `ffn_out`) |
//! | `ffn_post_norm` | | ✓ | FFN output, RMS-normed |
//! | `l_out` | ✓ | ✓ | layer output (residual stream) |
//! | `result_norm` | whole model | whole model | final RMS norm (output rows only) |
//! | `result_output` | whole model | whole model | logits (output rows only) |
//!
//! llama.cpp names llama's residual sum `ffn_out` a second time (before
//! `l_out`, which it equals); we emit that value once, as `l_out`.

/// Receives named tensors from a forward pass (which runs on a worker
/// thread of the CPU pool, hence `Send`).
pub trait TraceSink: Send {
    /// Whether the sink wants this tensor; when it says no the tensor is
    /// not read back. The default wants everything.
    fn wants(&self, name: &str, layer: Option<usize>) -> bool {
        let _ = (name, layer);
        true
    }

    /// A tensor: `name` as llama.cpp spells it, `layer` (`None` for
    /// whole-model tensors such as `result_output`), `shape` `[rows, width]`
    /// (one row per token of the batch, or per output row for
    /// `result_norm` / `result_output`), `data` row-major f32.
    fn record(&mut self, name: &str, layer: Option<usize>, shape: [usize; 2], data: &[f32]);
}

/// One recorded tensor, as [`Recorder`] keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub name: String,
    pub layer: Option<usize>,
    pub shape: [usize; 2],
    pub data: Vec<f32>,
}

impl Recorded {
    /// llama.cpp's key: `"{name}-{layer}"`, or the bare name.
    pub fn key(&self) -> String {
        match self.layer {
            Some(l) => format!("{}-{l}", self.name),
            None => self.name.clone(),
        }
    }

    /// Row `r` of the tensor.
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.shape[1]..(r + 1) * self.shape[1]]
    }

    /// The last row (the last position of a batch).
    pub fn last_row(&self) -> &[f32] {
        self.row(self.shape[0] - 1)
    }
}

/// Which tensors a [`Recorder`] keeps.
type Filter = Box<dyn Fn(&str, Option<usize>) -> bool + Send>;

/// A sink that keeps everything (or what `filter` accepts) in memory.
#[derive(Default)]
pub struct Recorder {
    pub taps: Vec<Recorded>,
    filter: Option<Filter>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// A recorder that only keeps tensors `filter` accepts.
    pub fn filtered(filter: impl Fn(&str, Option<usize>) -> bool + Send + 'static) -> Recorder {
        Recorder {
            taps: Vec::new(),
            filter: Some(Box::new(filter)),
        }
    }

    /// The last tensor recorded under llama.cpp's key `"{name}-{layer}"`.
    pub fn get(&self, key: &str) -> Option<&Recorded> {
        self.taps.iter().rev().find(|t| t.key() == key)
    }
}

impl TraceSink for Recorder {
    fn wants(&self, name: &str, layer: Option<usize>) -> bool {
        self.filter.as_ref().is_none_or(|f| f(name, layer))
    }

    fn record(&mut self, name: &str, layer: Option<usize>, shape: [usize; 2], data: &[f32]) {
        self.taps.push(Recorded {
            name: name.to_string(),
            layer,
            shape,
            data: data.to_vec(),
        });
    }
}
