//! Fault injection: named switch points where a real bug would live, for
//! proving that `harness compare` catches each class of bug where it
//! happens (`harness mutants`).
//!
//! Without the cargo feature `fault-injection`, [`active`] is a constant
//! `false`, every switch point compiles away and nothing else of this
//! module exists. With it, [`active`] reads a process-wide set of fault
//! names that the harness sets at run time (`set`, `Injected`); nothing
//! reads the environment. The faults: `FAULTS`.

/// Every fault the engine knows, with where its switch point sits.
#[cfg(feature = "fault-injection")]
pub const FAULTS: &[(&str, &str)] = &[
    (
        "rope-style",
        "model/forward: the spec's RoPE pairing read swapped (NORM <-> NEOX)",
    ),
    (
        "attn-scale",
        "model/hparams: attention scale 1/d instead of 1/sqrt(d)",
    ),
    (
        "kv-offset",
        "cpu/kv, vulkan op_attention: K/V rows written one position late",
    ),
    (
        "descriptor-reuse",
        "vulkan/descriptors: one descriptor set per pipeline, updated for every dispatch",
    ),
    (
        "missing-barrier",
        "vulkan recorder: no barrier between a residual add and the norm that reads it (while injected the add is fused neither into the norm nor into the matvec before it, nor the norm into the matvec after it)",
    ),
    (
        "gpu-softmax-unshifted",
        "vulkan op_attention: the attention kernels' online softmax does not subtract the running max (exp(s) itself)",
    ),
    (
        "gpu-act-f16-truncate",
        "vulkan op_quantize: the activation quantizer's f16 block scale (Q8_0, Q8_1) truncated instead of rounded to nearest even (while injected the decode matvec does not quantize its input itself)",
    ),
    (
        "gpu-post-norm-add",
        "vulkan op_elementwise: a post-norm fused with the residual add after it adds the normed value before its weight multiplies it",
    ),
    (
        "gpu-qkv-merge",
        "vulkan fuse/qkv: a merged Q/K/V dispatch binds K's and V's weights the wrong way round",
    ),
    (
        "gpu-ffn-bind",
        "vulkan fuse/ffn: the one-dispatch feed-forward block binds the up projection's weight where the gate's goes",
    ),
    (
        "gpu-oproj-residual",
        "vulkan fuse/oproj: the attention's output-projection epilogue adds the projection into its own output instead of the residual",
    ),
    (
        "gpu-embed-row",
        "vulkan op_matmul: the embedding lookup reads the next row",
    ),
    (
        "hybrid-handoff",
        "placement: the hidden state handed across devices is the previous token's",
    ),
    (
        "handoff-stale",
        "placement: the hand-off's copy into the destination skipped (it keeps what it held)",
    ),
    (
        "stop-token",
        "tokenizer/special: the BOS token counted as end-of-generation",
    ),
    (
        "pre-tokenizer",
        "tokenizer/pre: the wrong pre-tokenizer expressions (digits not split)",
    ),
    (
        "moe-renorm",
        "model/moe: the chosen experts' weights not renormalised to sum 1",
    ),
    (
        "moe-tie-order",
        "cpu/moe top_k: experts of exactly equal probability taken in the reverse of llama.cpp's order",
    ),
    (
        "expert-cache-stale",
        "expert_cache: a slot given a new expert without its weights re-uploaded",
    ),
    (
        "chat-no-generation-prompt",
        "chat: the template rendered without add_generation_prompt",
    ),
    (
        "kv-f16-truncate",
        "cpu/kv: an F16 KV cache stores values rounded toward zero, not to nearest",
    ),
    (
        "last-layer-scale",
        "model/forward: the last layer's attention scale off by one part in a million",
    ),
    (
        "q8k-fused-round",
        "cpu/act: Q8_K activations rounded with the product fused into the rounding add (an FMA build's bytes, not llama.cpp's)",
    ),
    (
        "query-scale-late",
        "model/forward: Gemma 3's attention scale applied to the scores, not to the query before an F16 cache rounds it",
    ),
    (
        "sampler-top-p",
        "sampler/stages: top-p leaves out the token whose probability reaches p",
    ),
];

#[cfg(feature = "fault-injection")]
mod imp {
    use std::sync::RwLock;

    static ACTIVE: RwLock<Vec<String>> = RwLock::new(Vec::new());

    pub fn active(name: &str) -> bool {
        debug_assert!(
            super::FAULTS.iter().any(|(n, _)| *n == name),
            "unknown fault {name:?}"
        );
        ACTIVE
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|n| n == name)
    }

    pub fn set(names: &[&str]) -> Result<(), String> {
        if let Some(bad) = names
            .iter()
            .find(|n| !super::FAULTS.iter().any(|(f, _)| f == *n))
        {
            return Err(format!(
                "unknown fault {bad:?}; known: {}",
                super::FAULTS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        *ACTIVE.write().unwrap_or_else(|e| e.into_inner()) =
            names.iter().map(|n| n.to_string()).collect();
        Ok(())
    }
}

/// Whether fault `name` is injected (always false without the feature).
#[cfg(feature = "fault-injection")]
pub fn active(name: &str) -> bool {
    imp::active(name)
}

/// Whether fault `name` is injected (always false without the feature).
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub const fn active(_name: &str) -> bool {
    false
}

/// Makes `names` the injected faults of the whole process (empty: none).
/// Errors on a name not in [`FAULTS`].
#[cfg(feature = "fault-injection")]
pub fn set(names: &[&str]) -> Result<(), String> {
    imp::set(names)
}

/// The faults in `names` injected while this lives; none after it.
#[cfg(feature = "fault-injection")]
pub struct Injected(());

#[cfg(feature = "fault-injection")]
impl Injected {
    pub fn new(names: &[&str]) -> Result<Injected, String> {
        set(names)?;
        Ok(Injected(()))
    }
}

#[cfg(feature = "fault-injection")]
impl Drop for Injected {
    fn drop(&mut self) {
        let _ = set(&[]);
    }
}

#[cfg(all(test, feature = "fault-injection"))]
mod tests {
    use super::*;

    #[test]
    fn faults_are_set_and_cleared() {
        assert!(!active("rope-style"));
        {
            let _f = Injected::new(&["rope-style"]).unwrap();
            assert!(active("rope-style"));
            assert!(!active("attn-scale"));
        }
        assert!(!active("rope-style"));
        assert!(set(&["no-such-fault"]).is_err());
    }
}
