//! Checking a GGUF file's tensors against its architecture's table.

use std::collections::{BTreeMap, HashSet};

use super::error::ModelError;
use super::hparams::Hparams;
use super::spec::{ArchSpec, Dim, Presence, Role};
use crate::gguf::{GgufFile, TensorInfo};
use crate::quant::can_dequantize;

/// Tensors by role: the whole-model ones and one map per layer. When the
/// head is tied, [`Role::Output`] maps to `token_embd.weight`.
#[derive(Clone, Debug)]
pub struct TensorTable {
    pub global: BTreeMap<Role, TensorInfo>,
    pub layers: Vec<BTreeMap<Role, TensorInfo>>,
    /// Whether the output head reuses the token embeddings.
    pub tied_output: bool,
}

fn resolve(d: Dim, hp: &Hparams) -> u64 {
    (match d {
        Dim::Embd => hp.n_embd,
        Dim::Vocab => hp.n_vocab,
        Dim::Ff => hp.n_ff,
        Dim::Q => hp.q_width(),
        Dim::K => hp.k_width(),
        Dim::V => hp.v_width(),
        Dim::AttnOutIn => hp.attn_out_width(),
        Dim::HeadDimK => hp.head_dim_k,
        Dim::Expert => hp.moe.map_or(0, |m| m.n_expert),
        Dim::FfExp => hp.moe.map_or(0, |m| m.n_ff_exp),
    }) as u64
}

/// Finds every tensor of `spec` in `gguf`, checks shapes and types, and
/// refuses tensors the architecture does not use. Sets `hp.n_vocab` from
/// `token_embd.weight` (checking `vocab_size` when the file has it).
pub fn check_tensors(
    gguf: &GgufFile,
    spec: &ArchSpec,
    hp: &mut Hparams,
) -> Result<TensorTable, ModelError> {
    let arch = spec.name;
    let embd = gguf
        .tensor("token_embd.weight")
        .ok_or_else(|| ModelError::MissingTensor {
            arch,
            name: "token_embd.weight".into(),
        })?;
    hp.n_vocab = match embd.dims.as_slice() {
        [d, v] if *d == hp.n_embd as u64 && *v > 0 => *v as usize,
        _ => {
            return Err(ModelError::WrongShape {
                arch,
                name: embd.name.clone(),
                expected: vec![hp.n_embd as u64, 0],
                found: embd.dims.clone(),
            })
        }
    };
    let vocab_key = format!("{arch}.vocab_size");
    if let Some(v) = gguf
        .get_u64_opt(&vocab_key)
        .map_err(|source| ModelError::Metadata { arch, source })?
    {
        if v != hp.n_vocab as u64 {
            return Err(ModelError::BadValue {
                arch,
                key: vocab_key,
                value: v.to_string(),
                why: format!("token_embd.weight has {} rows", hp.n_vocab),
            });
        }
    }

    let mut used: HashSet<&str> = HashSet::new();
    let mut find =
        |spec_t: &super::spec::TensorSpec, l: usize| -> Result<Option<TensorInfo>, ModelError> {
            let name = spec_t.name_for(l);
            let applies = match spec_t.presence {
                Presence::Dense => hp.moe.is_none(),
                Presence::Moe => hp.moe.is_some(),
                Presence::Required | Presence::OrTokenEmbedding | Presence::Optional => true,
            };
            if !applies {
                // Left unused: a file that has it is refused below.
                return Ok(None);
            }
            let Some(info) = gguf.tensor(&name) else {
                return match spec_t.presence {
                    Presence::OrTokenEmbedding | Presence::Optional => Ok(None),
                    _ => Err(ModelError::MissingTensor { arch, name }),
                };
            };
            let expected: Vec<u64> = spec_t.shape.iter().map(|&d| resolve(d, hp)).collect();
            if info.dims != expected {
                return Err(ModelError::WrongShape {
                    arch,
                    name,
                    expected,
                    found: info.dims.clone(),
                });
            }
            if !can_dequantize(info.ty) {
                return Err(ModelError::WrongType {
                    arch,
                    name,
                    ty: info.ty,
                    why: "dequantized (no CPU support)",
                });
            }
            if spec_t.shape.len() == 1 && info.ty.block_elems() != 1 {
                return Err(ModelError::WrongType {
                    arch,
                    name,
                    ty: info.ty,
                    why: "a norm vector or a bias (must be F32, F16 or BF16)",
                });
            }
            used.insert(info.name.as_str());
            Ok(Some(info.clone()))
        };

    let mut global = BTreeMap::new();
    let mut layers = vec![BTreeMap::new(); hp.n_layer];
    let mut tied_output = false;
    for t in spec.tensors {
        if t.per_layer() {
            for (l, map) in layers.iter_mut().enumerate() {
                if let Some(info) = find(t, l)? {
                    map.insert(t.role, info);
                }
            }
        } else {
            match find(t, 0)? {
                Some(info) => {
                    global.insert(t.role, info);
                }
                None if t.presence == Presence::OrTokenEmbedding => {
                    tied_output = true;
                    global.insert(t.role, embd.clone());
                }
                None => {}
            }
        }
    }
    if let Some(extra) = gguf
        .tensors()
        .iter()
        .find(|t| !used.contains(t.name.as_str()))
    {
        return Err(ModelError::UnexpectedTensor {
            arch,
            name: extra.name.clone(),
        });
    }
    Ok(TensorTable {
        global,
        layers,
        tied_output,
    })
}
