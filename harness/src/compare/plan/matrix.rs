//! The comparison as a list of items, and its slices (`--shard K/N`).
//!
//! An [`Item`] is one prompt of one model on one path, or one model's text
//! checks (end-of-generation set, tokenizer corpus, chat renders: the
//! checks that need no forward pass; they also own the model-level
//! failures). [`super::plan`] lists every item a run selects, in the order an
//! unsharded run takes them; [`Shard::pick`] splits that list into N
//! slices balanced by measured cost ([`Costs`]: each item's wall time in
//! an earlier report), deterministically, so that N jobs with the same
//! inputs pick disjoint slices whose union is the whole list.
//!
//! A non-first path of a prompt is compared with the prompt's first path
//! (the CPU): a slice that holds the one without the other runs the first
//! path too, without reporting it (its cost counts towards that slice).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path as FsPath;
use std::str::FromStr;

use engine::gguf::GgufFile;
use engine::model::spec;
use serde::{Deserialize, Serialize};

use crate::compare::{Path, Paths};

/// One item of the comparison.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Item {
    pub model: String,
    /// `None`: the model's text checks.
    pub prompt: Option<String>,
    /// `None`: the model's text checks.
    pub path: Option<Path>,
}

impl Item {
    pub fn text(model: &str) -> Item {
        Item {
            model: model.to_string(),
            prompt: None,
            path: None,
        }
    }

    pub fn prompt(model: &str, prompt: &str, path: Path) -> Item {
        Item {
            model: model.to_string(),
            prompt: Some(prompt.to_string()),
            path: Some(path),
        }
    }

    /// Whether this is a model's corpus item (`corpus:NAME` on a path): the
    /// engine over the chunks of its corpus base, judged against llama.cpp's
    /// distributions only (no first-path reference).
    pub fn is_corpus(&self) -> bool {
        self.prompt.as_deref().is_some_and(is_corpus_id)
    }

    /// `model/prompt/path`, or `model/text` for the text checks.
    pub fn key(&self) -> String {
        match (&self.prompt, &self.path) {
            (Some(p), Some(path)) => format!("{}/{p}/{path}", self.model),
            _ => format!("{}/text", self.model),
        }
    }
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.prompt, &self.path) {
            (Some(p), Some(path)) => write!(f, "{} {p} {path}", self.model),
            _ => write!(f, "{} text checks", self.model),
        }
    }
}

/// The item id of a corpus base: `corpus:NAME` (prompt ids cannot hold a
/// colon, so none collides with a prompt's).
pub fn is_corpus_id(id: &str) -> bool {
    id.starts_with("corpus:")
}

/// What [`super::plan`] found of one model: its paths (empty where it cannot run
/// the engine: a missing file, an architecture not implemented).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelPlan {
    pub id: String,
    pub paths: Vec<Path>,
}

/// The paths of `paths` for a model whose GGUF is at `file`: empty when
/// the file cannot be read or its architecture is not implemented (the
/// text checks then report why).
pub fn model_paths(paths: &Paths, file: &FsPath) -> Vec<Path> {
    let Ok(g) = GgufFile::open(file) else {
        return Vec::new();
    };
    let Ok(arch) = g.architecture() else {
        return Vec::new();
    };
    if spec::lookup(arch).is_none() {
        return Vec::new();
    }
    let Ok(n_layer) = g.arch_u32("block_count") else {
        return Vec::new();
    };
    let n_expert = g
        .arch_key("expert_count")
        .ok()
        .and_then(|k| g.get_u32_opt(&k).ok().flatten())
        .unwrap_or(0);
    paths.for_model(n_layer as usize, n_expert as usize)
}

/// `--shard K/N`: the K-th of N slices (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub k: usize,
    pub n: usize,
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("--shard {s:?}: expected K/N with 1 <= K <= N, e.g. 2/4");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n) = (
            k.trim().parse::<usize>().map_err(|_| bad())?,
            n.trim().parse::<usize>().map_err(|_| bad())?,
        );
        if k == 0 || n == 0 || k > n {
            return Err(bad());
        }
        Ok(Shard { k, n })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// Seconds per item key (`Item::key`), from earlier reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    pub seconds: BTreeMap<String, f64>,
}

impl Costs {
    /// Reads a costs file (`harness costs` writes one).
    pub fn load(file: &FsPath) -> Result<Costs, String> {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
    }

    /// The estimated seconds of each item: its measured time, else the mean
    /// of the measured items of the same prompt and path kind (`cpu`, `gpu`,
    /// `hybrid`, `cache`, text) on other models (a long prompt is long on
    /// every model), else of the same model and path kind, else of the
    /// same path kind, else 1.
    pub fn estimate(&self, items: &[Item]) -> Vec<f64> {
        // (model, prompt, kind) of a key.
        let parts = |key: &str| -> (String, String, String) {
            let v: Vec<&str> = key.splitn(3, '/').collect();
            match v.as_slice() {
                [m, p, path] => {
                    let k = match path.parse::<Path>() {
                        Ok(p) => path_kind(p).to_string(),
                        Err(_) => path.to_string(),
                    };
                    (m.to_string(), p.to_string(), k)
                }
                [m, ..] => (m.to_string(), String::new(), "text".into()),
                [] => Default::default(),
            }
        };
        let mut by: HashMap<(u8, String, String), (f64, usize)> = HashMap::new();
        for (key, &s) in &self.seconds {
            let (m, p, k) = parts(key);
            for group in [(0, p, k.clone()), (1, m, k.clone()), (2, String::new(), k)] {
                let e = by.entry(group).or_default();
                e.0 += s;
                e.1 += 1;
            }
        }
        let mean = |g: (u8, String, String)| by.get(&g).map(|(s, n)| s / *n as f64);
        items
            .iter()
            .map(|it| {
                let key = it.key();
                if let Some(&s) = self.seconds.get(&key) {
                    return s;
                }
                let (m, p, k) = parts(&key);
                let prompt_kind = if it.prompt.is_some() {
                    mean((0, p, k.clone()))
                } else {
                    None
                };
                prompt_kind
                    .or_else(|| mean((1, m, k.clone())))
                    .or_else(|| mean((2, String::new(), k)))
                    .unwrap_or(1.0)
            })
            .collect()
    }
}

impl Shard {
    /// The items of this slice, as indices into `items`, in run order.
    ///
    /// Longest first: each item (its estimated cost, plus its prompt's
    /// first path where that is not already in the slice) goes to the
    /// slice whose total is least so far (ties: the lower slice), items of
    /// equal cost in run order. The same items and costs give the same
    /// slices in every job.
    pub fn pick(&self, items: &[Item], cost: &[f64]) -> Vec<usize> {
        assignment(items, cost, self.n)
            .into_iter()
            .enumerate()
            .filter(|&(_, s)| s + 1 == self.k)
            .map(|(i, _)| i)
            .collect()
    }
}

/// The slice (0-based) of every item, for `n` slices.
pub fn assignment(items: &[Item], cost: &[f64], n: usize) -> Vec<usize> {
    let first_of = first_paths(items);
    let split_of = split_refs(items);
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| cost[b].total_cmp(&cost[a]).then(a.cmp(&b)));
    let mut load = vec![0.0f64; n.max(1)];
    let mut has: Vec<HashSet<usize>> = vec![HashSet::new(); n.max(1)];
    let mut slice = vec![0usize; items.len()];
    for i in order {
        // What item i adds to each slice: itself, its prompt's first path
        // and (a hybrid split) its gpu path when the slice lacks them.
        let needs = || first_of[i].into_iter().chain(split_of[i]);
        let extra = |s: usize| -> f64 {
            needs()
                .filter(|&f| f != i && !has[s].contains(&f))
                .map(|f| cost[f])
                .sum()
        };
        let best = (0..load.len())
            .min_by(|&a, &b| {
                (load[a] + cost[i] + extra(a))
                    .total_cmp(&(load[b] + cost[i] + extra(b)))
                    .then(a.cmp(&b))
            })
            .expect("at least one slice");
        load[best] += cost[i] + extra(best);
        for f in needs() {
            has[best].insert(f);
        }
        has[best].insert(i);
        slice[i] = best;
    }
    slice
}

/// Prompts where faults have hidden before: the long one (several chunks,
/// a long KV cache), the chat ones (templates, special tokens) and the
/// multilingual one (byte-level merges); [`quick`] keeps each.
pub const FAULT_PRONE: &[&str] = &[
    "long-context",
    "chat-multiturn",
    "chat-system-user",
    "multilingual",
];

/// The kind of a path: `cpu`, `gpu`, `hybrid` (any split) or `cache` (an
/// expert slot cache size, on all layers or a split).
pub fn path_kind(p: Path) -> &'static str {
    match p {
        Path::Cpu => "cpu",
        Path::Gpu => "gpu",
        Path::Hybrid(_) => "hybrid",
        Path::Cached { .. } => "cache",
    }
}

/// The representative selection (`compare --quick`, the default of
/// `scripts/run`), as indices into `items` in run order, picked by
/// measured cost:
/// - every model's text checks;
/// - every model's [`FAULT_PRONE`] prompts and its corpus on its first
///   path (the CPU);
/// - for every model and path kind it has (gpu, hybrid, cache), its
///   cheapest item of that kind, and its cheapest fault-prone prompt on
///   the GPU path (not for a `variant`: another capture of a GGUF the
///   run has, with another KV cache type, whose fault-prone prompts the
///   GPU already runs on the first capture);
/// - for every fault-prone prompt, its cheapest item on the GPU path of
///   any model;
/// - and the first path of each selected prompt (the reference of the
///   others) and the gpu path of each selected hybrid split (the reference
///   of its hand-off check), which run either way.
pub fn quick(items: &[Item], cost: &[f64], variant: &dyn Fn(&str) -> bool) -> Vec<usize> {
    let first = first_paths(items);
    let split_of = split_refs(items);
    let mut pick = vec![false; items.len()];
    let cheapest = |pred: &dyn Fn(&Item) -> bool| -> Option<usize> {
        (0..items.len())
            .filter(|&i| pred(&items[i]))
            .min_by(|&a, &b| cost[a].total_cmp(&cost[b]).then(a.cmp(&b)))
    };
    let prone = |it: &Item| {
        it.prompt
            .as_deref()
            .is_some_and(|p| FAULT_PRONE.contains(&p))
    };
    for (i, it) in items.iter().enumerate() {
        let is_first = first[i] == Some(i);
        let first_path = first_paths_of(items, i);
        if it.prompt.is_none() || (is_first && prone(it)) || (it.is_corpus() && first_path) {
            pick[i] = true;
        }
    }
    let mut models: Vec<&str> = items.iter().map(|it| it.model.as_str()).collect();
    models.dedup();
    for m in models {
        for kind in ["gpu", "hybrid", "cache"] {
            let of = |it: &Item| it.model == m && it.path.is_some_and(|p| path_kind(p) == kind);
            if let Some(i) = cheapest(&of) {
                pick[i] = true;
            }
        }
        if variant(m) {
            continue;
        }
        let prone_gpu = |it: &Item| it.model == m && prone(it) && it.path == Some(Path::Gpu);
        if let Some(i) = cheapest(&prone_gpu) {
            pick[i] = true;
        }
    }
    for p in FAULT_PRONE {
        let of = |it: &Item| {
            it.prompt.as_deref() == Some(*p) && it.path == Some(Path::Gpu) && !variant(&it.model)
        };
        if let Some(i) = cheapest(&of) {
            pick[i] = true;
        }
    }
    for i in 0..items.len() {
        if pick[i] {
            for f in first[i].into_iter().chain(split_of[i]) {
                pick[f] = true;
            }
        }
    }
    (0..items.len()).filter(|&i| pick[i]).collect()
}

/// Whether item `i` is the first of its model and prompt in `items`.
fn first_paths_of(items: &[Item], i: usize) -> bool {
    let it = &items[i];
    !items[..i]
        .iter()
        .any(|o| o.model == it.model && o.prompt == it.prompt)
}

/// For each `hybrid:N` item, the index of its prompt's `gpu` item (the
/// reference of its state at the split, [`crate::compare::checks::split`]), when `items`
/// hold one before it.
pub fn split_refs(items: &[Item]) -> Vec<Option<usize>> {
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let (r, _) = crate::compare::checks::split::reference(it.path?)?;
            items[..i]
                .iter()
                .position(|o| o.model == it.model && o.prompt == it.prompt && o.path == Some(r))
        })
        .collect()
}

/// For each prompt item, the index of its prompt's first path (the
/// reference of the others); `None` for text items and corpus items
/// (judged against llama.cpp alone).
pub fn first_paths(items: &[Item]) -> Vec<Option<usize>> {
    let mut first: HashMap<(&str, &str), usize> = HashMap::new();
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            if it.is_corpus() {
                return None;
            }
            let p = it.prompt.as_deref()?;
            Some(*first.entry((it.model.as_str(), p)).or_insert(i))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Vec<Item> {
        let mut v = Vec::new();
        for m in ["a", "b"] {
            v.push(Item::text(m));
            for p in ["p1", "p2", "p3"] {
                for path in [Path::Cpu, Path::Gpu, Path::Hybrid(1)] {
                    v.push(Item::prompt(m, p, path));
                }
            }
        }
        v
    }

    #[test]
    fn shards_cover_the_matrix_once_and_balance_by_cost() {
        let items = items();
        // GPU items cost 10, hybrid 5, the rest 1.
        let cost: Vec<f64> = items
            .iter()
            .map(|it| match it.path {
                Some(Path::Gpu) => 10.0,
                Some(Path::Hybrid(_)) => 5.0,
                _ => 1.0,
            })
            .collect();
        for n in 1..=7 {
            let mut seen = vec![0usize; items.len()];
            let mut loads = Vec::new();
            for k in 1..=n {
                let picked = Shard { k, n }.pick(&items, &cost);
                assert!(picked.windows(2).all(|w| w[0] < w[1]), "run order");
                for &i in &picked {
                    seen[i] += 1;
                }
                loads.push(picked.iter().map(|&i| cost[i]).sum::<f64>());
            }
            assert!(seen.iter().all(|&c| c == 1), "n={n}: {seen:?}");
            if n == 2 {
                // 2 x (1 + 3 x 16) = 98: two slices of 49 ± the CPU
                // items a slice repeats as references.
                assert!(
                    loads.iter().all(|&l| (40.0..=58.0).contains(&l)),
                    "{loads:?}"
                );
            }
        }
        // Deterministic.
        assert_eq!(
            Shard { k: 2, n: 3 }.pick(&items, &cost),
            Shard { k: 2, n: 3 }.pick(&items, &cost)
        );
    }

    #[test]
    fn quick_runs_a_kv_variant_without_its_fault_prone_gpu_items() {
        let mut items = Vec::new();
        for m in ["a", "a-kv"] {
            items.push(Item::text(m));
            for p in ["short", "long-context"] {
                for path in [Path::Cpu, Path::Gpu] {
                    items.push(Item::prompt(m, p, path));
                }
            }
        }
        // The variant's GPU items are the cheapest: without the rule they
        // would be picked for the fault-prone prompt.
        let cost: Vec<f64> = items
            .iter()
            .map(|it| match (it.model.as_str(), it.path) {
                ("a", Some(Path::Gpu)) => 10.0,
                _ => 1.0,
            })
            .collect();
        let keys: Vec<String> = quick(&items, &cost, &|m| m == "a-kv")
            .iter()
            .map(|&i| items[i].key())
            .collect();
        assert_eq!(
            keys,
            [
                "a/text",
                "a/short/cpu",
                "a/short/gpu",
                "a/long-context/cpu",
                "a/long-context/gpu",
                "a-kv/text",
                "a-kv/short/cpu",
                "a-kv/short/gpu",
                "a-kv/long-context/cpu",
            ]
        );
    }

    #[test]
    fn quick_covers_every_model_path_kind_and_fault_prone_prompt() {
        let mut items = Vec::new();
        for m in ["a", "b"] {
            items.push(Item::text(m));
            for p in ["short", "long-context", "multilingual"] {
                for path in [Path::Cpu, Path::Gpu, Path::Hybrid(1)] {
                    items.push(Item::prompt(m, p, path));
                }
            }
        }
        // Model b is dearer; long prompts are dearer; the GPU dearest.
        let cost: Vec<f64> = items
            .iter()
            .map(|it| {
                let m = if it.model == "b" { 2.0 } else { 1.0 };
                let p = match it.prompt.as_deref() {
                    Some("long-context") => 10.0,
                    Some("multilingual") => 3.0,
                    _ => 1.0,
                };
                let k = match it.path {
                    Some(Path::Gpu) => 20.0,
                    Some(Path::Hybrid(_)) => 5.0,
                    _ => 1.0,
                };
                m * p * k
            })
            .collect();
        let keys: Vec<String> = quick(&items, &cost, &|_| false)
            .iter()
            .map(|&i| items[i].key())
            .collect();
        assert_eq!(
            keys,
            [
                "a/text",
                "a/short/cpu",
                "a/short/gpu",
                "a/short/hybrid:1",
                "a/long-context/cpu",
                "a/long-context/gpu",
                "a/multilingual/cpu",
                "a/multilingual/gpu",
                "b/text",
                "b/short/cpu",
                "b/short/gpu",
                "b/short/hybrid:1",
                "b/long-context/cpu",
                "b/multilingual/cpu",
                "b/multilingual/gpu",
            ]
        );
    }

    #[test]
    fn quick_keeps_the_gpu_item_of_each_hybrid_split_it_picks() {
        let mut items = vec![Item::text("a")];
        for p in ["p1", "p2"] {
            for path in [Path::Cpu, Path::Gpu, Path::Hybrid(1)] {
                items.push(Item::prompt("a", p, path));
            }
        }
        // p1 is the cheapest hybrid item, p2 the cheapest gpu item.
        let cost = [0.1, 1.0, 30.0, 1.0, 1.0, 10.0, 5.0];
        assert_eq!(split_refs(&items)[3], Some(2));
        assert_eq!(split_refs(&items)[2], None);
        let keys: Vec<String> = quick(&items, &cost, &|_| false)
            .iter()
            .map(|&i| items[i].key())
            .collect();
        assert_eq!(
            keys,
            [
                "a/text",
                "a/p1/cpu",
                "a/p1/gpu",
                "a/p1/hybrid:1",
                "a/p2/cpu",
                "a/p2/gpu"
            ]
        );
    }

    #[test]
    fn shard_parse() {
        assert_eq!("2/4".parse::<Shard>(), Ok(Shard { k: 2, n: 4 }));
        for bad in ["0/4", "5/4", "1/0", "x/2", "2", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn estimates_fall_back_by_prompt_model_and_path_kind() {
        let mut c = Costs::default();
        c.seconds.insert("a/p1/gpu".into(), 10.0);
        c.seconds.insert("a/p2/gpu".into(), 20.0);
        c.seconds.insert("b/p1/cpu".into(), 2.0);
        c.seconds.insert("b/p1/hybrid:4".into(), 6.0);
        c.seconds.insert("b/text".into(), 0.5);
        let it = [
            Item::prompt("a", "p1", Path::Gpu),
            // a's GPU items
            Item::prompt("a", "p9", Path::Gpu),
            // p1 on the GPU elsewhere
            Item::prompt("c", "p1", Path::Gpu),
            // p1 on a hybrid split elsewhere (any split)
            Item::prompt("c", "p1", Path::Hybrid(3)),
            // GPU items of any model and prompt
            Item::prompt("c", "p7", Path::Gpu),
            // no cache item measured
            Item::prompt(
                "c",
                "p7",
                Path::Cached {
                    layers: None,
                    slots: 2,
                },
            ),
            Item::text("a"),
        ];
        assert_eq!(c.estimate(&it), vec![10.0, 15.0, 10.0, 6.0, 15.0, 1.0, 0.5]);
    }
}
