//! The numeric side of the format: one safetensors file per (model, prompt)
//! holding token ids, top-k tables, full logits and graph tensors.
//!
//! Array names (dtype, shape; T prompt tokens, K = top_k, S greedy steps,
//! V vocabulary size):
//!
//! | name | dtype | shape | what |
//! |---|---|---|---|
//! | `tokens` | I32 | [T] | prompt token ids |
//! | `positions/top_ids` | U16 or I32 | [T, K] | per prompt position: the K highest logits' ids, best first |
//! | `positions/top_values` | F32 | [T, K] | their logits |
//! | `positions/lse` | F32 | [T] | log-sum-exp of the position's full logits |
//! | `logits/last` | F32 | [V] | every logit at the last prompt position |
//! | `greedy/tokens` | I32 | [S] | greedy continuation ids |
//! | `greedy/top_ids` (U16 or I32), `greedy/top_values`, `greedy/lse` | | [S, K], [S] | per step, the logits the step's token was chosen from |
//! | `tap/{key}` | F32 | [ne3, ne2, ne1, ne0] | a graph tensor (see [`TapInfo`](super::format::TapInfo)) |
//!
//! A `top_ids` array is U16 when every id in it is below 65536 (always for
//! a vocabulary of at most 65536 tokens, such as SmolLM2's 49152), I32
//! otherwise; the loader reads either into `i32`.
//!
//! Taps are stored row-major with ggml's dimension order reversed, always 4-D
//! (ggml's `ne` read backwards), converted to f32, contiguous. The single
//! metadata entry is `format`. The safetensors crate sorts tensors by dtype
//! and name, so equal contents give equal bytes.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use super::ReferenceError;

/// Metadata key/value written into every arrays file.
const META_FORMAT: &str = "sharpi-reference/1";

/// One row of a top-k table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TopKRow<'a> {
    /// Token ids, highest logit first (ties: lower id first).
    pub ids: &'a [i32],
    /// Their logits, non-increasing.
    pub values: &'a [f32],
    /// log(sum(exp(logits))) over the whole vocabulary, computed in f64.
    pub lse: f32,
}

/// Rows of (top-k ids, top-k values, log-sum-exp), k per row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopKTable {
    pub k: usize,
    pub ids: Vec<i32>,
    pub values: Vec<f32>,
    pub lse: Vec<f32>,
}

impl TopKTable {
    pub fn new(k: usize) -> TopKTable {
        TopKTable {
            k,
            ..TopKTable::default()
        }
    }

    pub fn rows(&self) -> usize {
        self.lse.len()
    }

    pub fn row(&self, i: usize) -> TopKRow<'_> {
        let r = i * self.k..(i + 1) * self.k;
        TopKRow {
            ids: &self.ids[r.clone()],
            values: &self.values[r],
            lse: self.lse[i],
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = TopKRow<'_>> {
        (0..self.rows()).map(|i| self.row(i))
    }

    /// Appends the top-k of one full logits vector.
    pub fn push_logits(&mut self, logits: &[f32]) {
        let (ids, values, lse) = top_k_lse(logits, self.k);
        self.ids.extend(ids);
        self.values.extend(values);
        self.lse.push(lse);
    }
}

/// The `k` highest logits (ids and values; ties broken by lower id, NaN
/// sorts highest) and the log-sum-exp of all of them, computed in f64 and
/// rounded to f32 (rounding is monotonic, so `lse >= values[0]` holds).
pub fn top_k_lse(logits: &[f32], k: usize) -> (Vec<i32>, Vec<f32>, f32) {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    let by_value_desc = |&a: &usize, &b: &usize| logits[b].total_cmp(&logits[a]).then(a.cmp(&b));
    let k = k.min(logits.len());
    if k < order.len() {
        order.select_nth_unstable_by(k, by_value_desc);
        order.truncate(k);
    }
    order.sort_unstable_by(by_value_desc);
    let ids = order.iter().map(|&i| i as i32).collect();
    let values = order.iter().map(|&i| logits[i]).collect();
    (ids, values, log_sum_exp(logits))
}

/// log(sum(exp(x))), in f64, rounded to f32. NaN if any input is NaN.
pub fn log_sum_exp(x: &[f32]) -> f32 {
    let max = x.iter().fold(f64::NEG_INFINITY, |m, &v| {
        if m.is_nan() || v.is_nan() {
            f64::NAN
        } else {
            m.max(v as f64)
        }
    });
    if !max.is_finite() {
        return max as f32;
    }
    let sum: f64 = x.iter().map(|&v| (v as f64 - max).exp()).sum();
    (max + sum.ln()) as f32
}

/// One graph tensor: ggml shape (innermost first) and f32 values in ggml
/// order (dimension 0 fastest).
#[derive(Clone, Debug, PartialEq)]
pub struct Tap {
    pub ne: [usize; 4],
    pub data: Vec<f32>,
}

impl Tap {
    /// The values at index `i` of dimension `dim` (that dimension becomes 1).
    pub fn slice(&self, dim: usize, i: usize) -> Tap {
        self.narrow(dim, i, 1)
    }

    /// Indices `start..start + len` of dimension `dim`.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Tap {
        assert!(
            dim < 4 && start + len <= self.ne[dim],
            "narrow out of range"
        );
        let inner: usize = self.ne[..dim].iter().product();
        let outer: usize = self.ne[dim + 1..].iter().product();
        let mut data = Vec::with_capacity(inner * len * outer);
        for o in 0..outer {
            let from = (o * self.ne[dim] + start) * inner;
            data.extend_from_slice(&self.data[from..from + len * inner]);
        }
        let mut ne = self.ne;
        ne[dim] = len;
        Tap { ne, data }
    }
}

/// All arrays of one (model, prompt).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PromptArrays {
    pub tokens: Vec<i32>,
    pub positions: TopKTable,
    pub last_logits: Vec<f32>,
    pub greedy_tokens: Vec<i32>,
    pub greedy: TopKTable,
    /// Key (see `TapInfo::key`) -> tensor. Aliased taps are not here.
    pub taps: BTreeMap<String, Tap>,
}

struct Owned {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Token ids of a top-k table: U16 when every id fits, I32 otherwise.
fn id_bytes(v: &[i32]) -> (Dtype, Vec<u8>) {
    if v.iter().all(|&x| u16::try_from(x).is_ok()) {
        let b = v.iter().flat_map(|&x| (x as u16).to_le_bytes()).collect();
        (Dtype::U16, b)
    } else {
        (Dtype::I32, i32_bytes(v))
    }
}

impl PromptArrays {
    /// Checks the internal consistency of the arrays (lengths, k).
    pub fn check(&self) -> Result<(), String> {
        let t = self.tokens.len();
        let k = self.positions.k;
        let table = |name: &str, tab: &TopKTable, rows: usize| -> Result<(), String> {
            if tab.rows() != rows
                || tab.ids.len() != rows * tab.k
                || tab.values.len() != rows * tab.k
            {
                return Err(format!(
                    "{name}: {} rows, {} ids, {} values for {rows} rows of {}",
                    tab.rows(),
                    tab.ids.len(),
                    tab.values.len(),
                    tab.k
                ));
            }
            Ok(())
        };
        table("positions", &self.positions, t)?;
        table("greedy", &self.greedy, self.greedy_tokens.len())?;
        if self.greedy.k != k {
            return Err(format!("greedy k {} != positions k {k}", self.greedy.k));
        }
        for (key, tap) in &self.taps {
            if tap.ne.iter().product::<usize>() != tap.data.len() {
                return Err(format!(
                    "tap {key}: shape {:?} vs {} values",
                    tap.ne,
                    tap.data.len()
                ));
            }
        }
        Ok(())
    }

    /// The safetensors bytes of these arrays.
    pub fn to_safetensors(&self) -> Result<Vec<u8>, ReferenceError> {
        self.check().map_err(ReferenceError::Invalid)?;
        let t = self.tokens.len();
        let k = self.positions.k;
        let s = self.greedy_tokens.len();
        let mut arrays: Vec<(String, Owned)> = Vec::new();
        let mut add = |name: &str, dtype: Dtype, shape: Vec<usize>, bytes: Vec<u8>| {
            arrays.push((
                name.to_string(),
                Owned {
                    dtype,
                    shape,
                    bytes,
                },
            ));
        };
        add("tokens", Dtype::I32, vec![t], i32_bytes(&self.tokens));
        let (dtype, bytes) = id_bytes(&self.positions.ids);
        add("positions/top_ids", dtype, vec![t, k], bytes);
        add(
            "positions/top_values",
            Dtype::F32,
            vec![t, k],
            f32_bytes(&self.positions.values),
        );
        add(
            "positions/lse",
            Dtype::F32,
            vec![t],
            f32_bytes(&self.positions.lse),
        );
        add(
            "logits/last",
            Dtype::F32,
            vec![self.last_logits.len()],
            f32_bytes(&self.last_logits),
        );
        add(
            "greedy/tokens",
            Dtype::I32,
            vec![s],
            i32_bytes(&self.greedy_tokens),
        );
        let (dtype, bytes) = id_bytes(&self.greedy.ids);
        add("greedy/top_ids", dtype, vec![s, k], bytes);
        add(
            "greedy/top_values",
            Dtype::F32,
            vec![s, k],
            f32_bytes(&self.greedy.values),
        );
        add(
            "greedy/lse",
            Dtype::F32,
            vec![s],
            f32_bytes(&self.greedy.lse),
        );
        for (key, tap) in &self.taps {
            let [n0, n1, n2, n3] = tap.ne;
            add(
                &format!("tap/{key}"),
                Dtype::F32,
                vec![n3, n2, n1, n0],
                f32_bytes(&tap.data),
            );
        }
        let views = arrays
            .iter()
            .map(|(name, a)| {
                TensorView::new(a.dtype, a.shape.clone(), &a.bytes)
                    .map(|v| (name.clone(), v))
                    .map_err(|e| ReferenceError::Safetensors(format!("{name}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let meta = HashMap::from([("format".to_string(), META_FORMAT.to_string())]);
        safetensors::serialize(views, Some(meta))
            .map_err(|e| ReferenceError::Safetensors(e.to_string()))
    }

    /// Parses arrays written by [`to_safetensors`](Self::to_safetensors).
    pub fn from_safetensors(bytes: &[u8]) -> Result<PromptArrays, ReferenceError> {
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| ReferenceError::Safetensors(e.to_string()))?;
        let (_, meta) = SafeTensors::read_metadata(bytes)
            .map_err(|e| ReferenceError::Safetensors(e.to_string()))?;
        let format = meta.metadata().as_ref().and_then(|m| m.get("format"));
        if format.map(String::as_str) != Some(META_FORMAT) {
            return Err(ReferenceError::Invalid(format!(
                "arrays file format {format:?}, expected {META_FORMAT:?}"
            )));
        }
        let get = |name: &str,
                   dtype: Dtype,
                   rank: usize|
         -> Result<(Vec<usize>, Cow<[u8]>), ReferenceError> {
            let v = st
                .tensor(name)
                .map_err(|e| ReferenceError::Invalid(format!("array {name}: {e}")))?;
            if v.dtype() != dtype || v.shape().len() != rank {
                return Err(ReferenceError::Invalid(format!(
                    "array {name}: {:?} {:?}, expected {dtype:?} of rank {rank}",
                    v.dtype(),
                    v.shape()
                )));
            }
            Ok((v.shape().to_vec(), Cow::Borrowed(v.data())))
        };
        let f32s = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let i32s = |b: &[u8]| -> Vec<i32> {
            b.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let table = |prefix: &str| -> Result<TopKTable, ReferenceError> {
            let name = format!("{prefix}/top_ids");
            let u16_ids = st.tensor(&name).is_ok_and(|v| v.dtype() == Dtype::U16);
            let (shape, ids) = get(&name, if u16_ids { Dtype::U16 } else { Dtype::I32 }, 2)?;
            let ids = if u16_ids {
                ids.chunks_exact(2)
                    .map(|c| i32::from(u16::from_le_bytes([c[0], c[1]])))
                    .collect()
            } else {
                i32s(&ids)
            };
            let (vshape, values) = get(&format!("{prefix}/top_values"), Dtype::F32, 2)?;
            let (lshape, lse) = get(&format!("{prefix}/lse"), Dtype::F32, 1)?;
            if vshape != shape || lshape[0] != shape[0] {
                return Err(ReferenceError::Invalid(format!(
                    "{prefix}: shapes {shape:?}, {vshape:?}, {lshape:?} disagree"
                )));
            }
            Ok(TopKTable {
                k: shape[1],
                ids,
                values: f32s(&values),
                lse: f32s(&lse),
            })
        };
        let mut taps = BTreeMap::new();
        for name in st.names() {
            if let Some(key) = name.strip_prefix("tap/") {
                let (shape, data) = get(name, Dtype::F32, 4)?;
                let tap = Tap {
                    ne: [shape[3], shape[2], shape[1], shape[0]],
                    data: f32s(&data),
                };
                taps.insert(key.to_string(), tap);
            }
        }
        let arrays = PromptArrays {
            tokens: i32s(&get("tokens", Dtype::I32, 1)?.1),
            positions: table("positions")?,
            last_logits: f32s(&get("logits/last", Dtype::F32, 1)?.1),
            greedy_tokens: i32s(&get("greedy/tokens", Dtype::I32, 1)?.1),
            greedy: table("greedy")?,
            taps,
        };
        arrays.check().map_err(ReferenceError::Invalid)?;
        Ok(arrays)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_by_value_then_id_and_lse_bounds() {
        let logits = [1.0, 3.0, -2.0, 3.0, 0.5, f32::NEG_INFINITY];
        let (ids, values, lse) = top_k_lse(&logits, 3);
        assert_eq!(ids, vec![1, 3, 0]);
        assert_eq!(values, vec![3.0, 3.0, 1.0]);
        let direct = logits.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln() as f32;
        assert!((lse - direct).abs() < 1e-6, "{lse} vs {direct}");
        assert!(lse >= values[0]);
        // k larger than the vocabulary keeps everything, sorted.
        let (ids, _, _) = top_k_lse(&logits, 10);
        assert_eq!(ids, vec![1, 3, 0, 4, 2, 5]);
    }

    #[test]
    fn lse_is_stable_for_large_logits_and_propagates_nan() {
        assert_eq!(log_sum_exp(&[1000.0]), 1000.0);
        let two = log_sum_exp(&[1000.0, 1000.0]);
        assert!((two - (1000.0 + 2f32.ln())).abs() < 1e-3, "{two}");
        assert!(log_sum_exp(&[1.0, f32::NAN]).is_nan());
        assert_eq!(log_sum_exp(&[f32::NEG_INFINITY]), f32::NEG_INFINITY);
    }

    #[test]
    fn top_ids_are_u16_when_they_fit_and_i32_otherwise() {
        let dtype_of = |a: &PromptArrays, name: &str| {
            let bytes = a.to_safetensors().unwrap();
            let st = SafeTensors::deserialize(&bytes).unwrap();
            let dtype = st.tensor(name).unwrap().dtype();
            assert_eq!(&PromptArrays::from_safetensors(&bytes).unwrap(), a);
            dtype
        };
        let mut logits = vec![0.0f32; 70_000];
        logits[65_535] = 2.0;
        logits[7] = 1.0;
        let mut a = PromptArrays {
            tokens: vec![3],
            positions: TopKTable::new(2),
            greedy: TopKTable::new(2),
            ..PromptArrays::default()
        };
        a.positions.push_logits(&logits);
        assert_eq!(a.positions.ids, vec![65_535, 7]);
        assert_eq!(dtype_of(&a, "positions/top_ids"), Dtype::U16);
        logits[65_536] = 3.0;
        a.positions = TopKTable::new(2);
        a.positions.push_logits(&logits);
        assert_eq!(a.positions.ids, vec![65_536, 65_535]);
        assert_eq!(dtype_of(&a, "positions/top_ids"), Dtype::I32);
        assert_eq!(dtype_of(&a, "greedy/top_ids"), Dtype::U16, "empty table");
    }

    #[test]
    fn slice_picks_one_index_of_a_dimension() {
        // ne = [2, 3, 2, 1]: value = i0 + 10*i1 + 100*i2
        let mut data = Vec::new();
        for i2 in 0..2 {
            for i1 in 0..3 {
                for i0 in 0..2 {
                    data.push((i0 + 10 * i1 + 100 * i2) as f32);
                }
            }
        }
        let tap = Tap {
            ne: [2, 3, 2, 1],
            data,
        };
        let s = tap.slice(1, 2);
        assert_eq!(s.ne, [2, 1, 2, 1]);
        assert_eq!(s.data, vec![20.0, 21.0, 120.0, 121.0]);
        let s = tap.slice(2, 1);
        assert_eq!(s.ne, [2, 3, 1, 1]);
        assert_eq!(s.data[..2], [100.0, 101.0]);
        let s = tap.slice(0, 1);
        assert_eq!(s.data, vec![1.0, 11.0, 21.0, 101.0, 111.0, 121.0]);
        let n = tap.narrow(1, 1, 2);
        assert_eq!(n.ne, [2, 2, 2, 1]);
        assert_eq!(
            n.data,
            vec![10.0, 11.0, 20.0, 21.0, 110.0, 111.0, 120.0, 121.0]
        );
        assert_eq!(tap.narrow(2, 0, 2), tap);
    }
}
