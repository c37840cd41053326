//! Invariants of the committed reference data (reference-data/), read with
//! the harness's loader: what a later `compare` relies on.

use std::collections::BTreeSet;
use std::path::PathBuf;

use harness::reference::arrays::top_k_lse;
use harness::reference::format::{expected_ne, GreedyStop, Positions, PromptKind};
use harness::reference::inputs::{self, corpus_lines};
use harness::reference::writer::sha256_hex;
use harness::reference::{ReferenceData, TapSel};

const SMOLLM2: &str = "smollm2-135m-instruct-q4_1";
const SMOLLM2_Q4K: &str = "smollm2-135m-instruct-q4_k_m";
const GEMMA: &str = "gemma-3-270m-q4_k_m";
const QWEN3: &str = "synth-qwen3";
const QWEN3MOE: &str = "synth-qwen3moe";
const SMOLLM2_MOE: &str = "smollm2-moe";
const QWEN3_BIGSCORES: &str = "synth-qwen3-bigscores";
const QWEN3MOE_TIES: &str = "synth-qwen3moe-ties";
const SMOLLM2_KV_F16: &str = "smollm2-135m-instruct-q4_1-kv-f16";
const GEMMA_KV_F16: &str = "gemma-3-270m-q4_k_m-kv-f16";
const ALL_MODELS: [&str; 10] = [
    SMOLLM2,
    GEMMA,
    SMOLLM2_Q4K,
    QWEN3,
    QWEN3MOE,
    SMOLLM2_MOE,
    QWEN3_BIGSCORES,
    QWEN3MOE_TIES,
    SMOLLM2_KV_F16,
    GEMMA_KV_F16,
];
/// Budget of all of reference-data/ (MiB = 2^20 bytes).
const BUDGET: u64 = 92 << 20;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reference-data")
}

fn data() -> ReferenceData {
    ReferenceData::open(&root()).expect("reference-data/manifest.json loads")
}

#[test]
fn manifest_lists_every_file_with_its_size_and_hash_and_stays_in_budget() {
    let data = data();
    data.verify_files().unwrap();
    let m = data.manifest();
    // every prompt file of prompts/ is in the manifest, and at least 12
    let prompts = inputs::list_prompts(&root()).unwrap();
    assert!(prompts.len() >= 12, "{} prompts", prompts.len());
    let listed: Vec<&str> = m.prompts.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(
        listed,
        prompts.iter().map(|p| p.id.as_str()).collect::<Vec<_>>()
    );
    assert!(m.tokenizer_corpus.count >= 300);
    assert!(m.conversations.count >= 10);
    let models: Vec<&str> = m.models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(models, ALL_MODELS, "models.json order");
    for id in ALL_MODELS {
        assert!(data.model(id).is_some(), "{id} not captured");
    }
    assert_eq!(m.total_bytes, m.files.iter().map(|f| f.bytes).sum::<u64>());
    assert!(
        m.total_bytes < BUDGET,
        "reference data is {} bytes",
        m.total_bytes
    );
    // everything under reference-data/ (README, manifest, quant/ ... too)
    fn bytes_under(p: &std::path::Path) -> u64 {
        let meta = std::fs::symlink_metadata(p).unwrap();
        if meta.is_dir() {
            std::fs::read_dir(p)
                .unwrap()
                .map(|e| bytes_under(&e.unwrap().path()))
                .sum()
        } else {
            meta.len()
        }
    }
    let all = bytes_under(&root());
    assert!(all < BUDGET, "reference-data/ holds {all} bytes");
    let paths: BTreeSet<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
    for model in data.models() {
        for p in model.prompts() {
            assert!(
                paths.contains(p.file.as_str()),
                "{} not in the manifest",
                p.file
            );
        }
    }
}

#[test]
fn every_prompt_has_consistent_tokens_topk_logits_and_greedy_steps() {
    let data = data();
    let entries = inputs::load_models_file(&root()).unwrap().models;
    for model in data.models() {
        let c = model.capture();
        // The entry as models.json has it now (a capture keeps the entry it
        // was made from, which may predate a `prompts` list naming what it
        // already captured).
        let entry = entries.iter().find(|e| e.id == model.id()).unwrap();
        let n_vocab = c.facts.n_vocab as usize;
        let k = c.settings.top_k;
        let eog = &c.vocab.eog_tokens;
        assert!(
            eog.contains(&c.vocab.eos),
            "{}: EOS is not end-of-generation",
            model.id()
        );
        // Every prompt that applies, or the ones its entry names.
        let applicable = inputs::list_prompts(&root())
            .unwrap()
            .iter()
            .filter(|p| p.kind == PromptKind::Text || c.model.has_chat_template)
            .filter(|p| entry.prompts.as_ref().is_none_or(|ids| ids.contains(&p.id)))
            .count();
        assert!(applicable >= entry.prompts.as_ref().map_or(10, Vec::len));
        assert_eq!(model.prompts().count(), applicable, "{}", model.id());
        for info in model.prompts() {
            let what = format!("{}/{}", model.id(), info.id);
            let p = model.load_prompt(&info.id).unwrap();
            let t = p.tokens().len();
            assert_eq!(t, info.n_tokens, "{what}");
            assert!(t >= 1);
            assert!(
                t <= c.settings.n_ubatch as usize,
                "{what}: prompt longer than one ubatch"
            );
            assert_eq!(info.parse_special, info.kind == PromptKind::Chat, "{what}");
            if c.vocab.add_bos && info.add_special {
                assert_eq!(p.tokens()[0], c.vocab.bos, "{what}: BOS first");
            }
            assert!(
                p.tokens().iter().all(|&id| (id as usize) < n_vocab),
                "{what}"
            );
            assert_eq!(p.arrays.positions.rows(), t, "{what}");
            for i in 0..t {
                let row = p.position(i);
                assert_eq!(row.ids.len(), k);
                assert!(
                    row.values.windows(2).all(|w| w[0] >= w[1]),
                    "{what} position {i}: not sorted"
                );
                assert!(
                    row.lse >= row.values[0],
                    "{what} position {i}: lse {} < top {}",
                    row.lse,
                    row.values[0]
                );
                let distinct: BTreeSet<i32> = row.ids.iter().copied().collect();
                assert_eq!(distinct.len(), k, "{what} position {i}: repeated ids");
                assert!(row.ids.iter().all(|&id| id >= 0 && (id as usize) < n_vocab));
            }
            // the full last-position logits give exactly the stored last row
            assert_eq!(p.last_logits().len(), n_vocab, "{what}");
            let (ids, values, lse) = top_k_lse(p.last_logits(), k);
            let last = p.position(t - 1);
            assert_eq!(
                (ids.as_slice(), values.as_slice(), lse),
                (last.ids, last.values, last.lse),
                "{what}"
            );
            // the first-token margin: top-1 minus top-2 there
            assert_eq!(
                info.first_token_margin,
                last.values[0] - last.values[1],
                "{what}"
            );
            if let Some(min) = c.model.min_first_token_margin {
                assert!(
                    f64::from(info.first_token_margin) >= min,
                    "{what}: first-token margin {} < {min}",
                    info.first_token_margin
                );
            }

            // greedy: each token is its step's argmax; step 0 is the last position
            let g = p.greedy_tokens();
            assert_eq!(g.len(), info.greedy.n_tokens, "{what}");
            assert!(
                !g.is_empty() && g.len() <= c.settings.greedy_steps,
                "{what}"
            );
            assert_eq!(p.arrays.greedy.rows(), g.len());
            assert_eq!(p.greedy_step(0), last, "{what}");
            for (i, &tok) in g.iter().enumerate() {
                let step = p.greedy_step(i);
                assert_eq!(step.ids[0], tok, "{what} step {i}");
                assert!(step.lse >= step.values[0]);
                let is_eog = eog.contains(&tok);
                if i + 1 < g.len() {
                    assert!(
                        !is_eog,
                        "{what}: continued after an end-of-generation token"
                    );
                }
            }
            match info.greedy.stop {
                GreedyStop::Length => assert_eq!(g.len(), c.settings.greedy_steps, "{what}"),
                GreedyStop::EndOfGeneration => assert!(eog.contains(g.last().unwrap()), "{what}"),
            }
            if info.greedy.text_hex.is_some() {
                assert!(
                    info.greedy.text.contains('\u{fffd}'),
                    "{what}: hex only for invalid UTF-8"
                );
            }
        }
    }
}

/// The models whose FFNs are experts.
const MOE_MODELS: [&str; 3] = [QWEN3MOE, SMOLLM2_MOE, QWEN3MOE_TIES];

/// llama.cpp's MoE block (`build_moe_ffn`, softmax gating, weights
/// renormalised), in graph order.
const MOE_TAPS: [&str; 14] = [
    "ffn_moe_logits",
    "ffn_moe_probs",
    "ffn_moe_argsort",
    "ffn_moe_topk",
    "ffn_moe_weights",
    "ffn_moe_weights_sum",
    "ffn_moe_weights_sum_clamped",
    "ffn_moe_weights_norm",
    "ffn_moe_gate",
    "ffn_moe_up",
    "ffn_moe_swiglu",
    "ffn_moe_down",
    "ffn_moe_weighted",
    "ffn_moe_out",
];

/// Tap names every layer must have, per architecture and FFN kind
/// (llama.cpp's names).
fn layer_taps(arch: &str, moe: bool) -> Vec<&'static str> {
    let mut names = vec![
        "attn_norm",
        "Qcur",
        "Kcur",
        "Vcur",
        "kq",
        "kq_soft_max",
        "kqv",
        "kqv_out",
        "ffn_norm",
        "l_out",
    ];
    match (arch, moe) {
        ("llama", false) => names.extend([
            "attn_out",
            "ffn_inp",
            "ffn_gate",
            "ffn_up",
            "ffn_swiglu",
            "ffn_out",
        ]),
        // No ffn_out: the residual ADD after ffn_moe_out is named l_out.
        ("llama", true) => names.extend(["attn_out", "ffn_inp"].into_iter().chain(MOE_TAPS)),
        ("gemma3", false) => names.extend([
            "Qcur_normed",
            "Kcur_normed",
            "attn_post_norm",
            "sa_out",
            "ffn_gate",
            "ffn_up",
            "ffn_geglu",
            "ffn_out",
            "ffn_post_norm",
        ]),
        ("qwen3", false) => names.extend([
            "Qcur_normed",
            "Kcur_normed",
            "ffn_inp",
            "ffn_gate",
            "ffn_up",
            "ffn_swiglu",
            "ffn_out",
        ]),
        ("qwen3moe", true) => names.extend(
            ["Qcur_normed", "Kcur_normed", "ffn_inp"]
                .into_iter()
                .chain(MOE_TAPS),
        ),
        other => panic!("no tap list for architecture and experts {other:?}"),
    }
    names
}

#[test]
fn taps_cover_every_layer_and_have_the_catalog_shapes() {
    let data = data();
    for model in data.models() {
        let c = model.capture();
        let n_layer = c.facts.n_layer;
        for l in 0..n_layer {
            let moe = MOE_MODELS.contains(&model.id());
            for base in layer_taps(&c.model.architecture, moe) {
                let info = model.tap_info(base, Some(l), TapSel::Last);
                assert!(
                    info.is_some_and(|t| t.is_recorded()),
                    "{}: no {base}-{l}",
                    model.id()
                );
            }
        }
        assert!(c.taps.iter().all(|t| t.layer.is_none_or(|l| l < n_layer)));
        for base in ["result_norm", "result_output"] {
            assert!(
                model.tap_info(base, None, TapSel::Last).is_some(),
                "{}: no {base}",
                model.id()
            );
        }
        // RoPE'd Q and K are the last Qcur/Kcur of a layer
        assert_eq!(
            model.tap_info("Qcur", Some(0), TapSel::Last).unwrap().op,
            "ROPE"
        );
        assert_eq!(
            model.tap_info("Kcur", Some(0), TapSel::Last).unwrap().op,
            "ROPE"
        );
        let keys: BTreeSet<&str> = c.taps.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys.len(), c.taps.len(), "{}: duplicate keys", model.id());
        // unweighted norms are catalogued, not stored; their weighted tap is
        for t in &c.taps {
            let is_norm = t.op == "RMS_NORM" || t.op == "NORM";
            assert_eq!(
                is_norm,
                !t.is_recorded(),
                "{}: {} ({}) every norm is weighted by a named MUL",
                model.id(),
                t.key,
                t.op
            );
            if let Some(w) = &t.weighted_tap {
                let wt = c.taps.iter().find(|x| &x.key == w).unwrap();
                assert!(wt.op == "MUL" && wt.is_recorded(), "{}: {w}", model.id());
                assert_eq!(
                    (wt.ne_one_token, wt.token_dim),
                    (t.ne_one_token, t.token_dim)
                );
            }
            if let Some([a, b]) = &t.derived_from {
                for o in [a, b] {
                    let ot = c.taps.iter().position(|x| &x.key == o).unwrap();
                    let me = c.taps.iter().position(|x| x.key == t.key).unwrap();
                    assert!(ot < me && c.taps[ot].is_recorded(), "{}: {o}", model.id());
                }
            }
        }
        // the residual sums are rebuilt from their operands
        for (base, l) in [("l_out", 0), ("l_out", n_layer - 1)] {
            let t = model.tap_info(base, Some(l), TapSel::Last).unwrap();
            assert_eq!(t.op, "ADD", "{}", model.id());
            assert!(t.derived_from.is_some(), "{}: {base}-{l}", model.id());
        }

        let mut all_positions = 0;
        let mut tapped = 0;
        for info in model.prompts() {
            let what = format!("{}/{}", model.id(), info.id);
            if !info.taps_recorded {
                let p = model.load_prompt(&info.id).unwrap();
                assert!(p.arrays.taps.is_empty(), "{what}");
                assert!(info.tap_aliases.is_empty(), "{what}");
                continue;
            }
            tapped += 1;
            if info.tap_positions == Positions::All {
                all_positions += 1;
            }
            assert_eq!(
                info.tap_run_logits_max_abs_diff, 0.0,
                "{what}: the tapped run computed other logits"
            );
            assert_eq!(info.kv_len, Some(info.n_tokens as u64), "{what}");
            let p = model.load_prompt(&info.id).unwrap();
            let mut derived = 0;
            for t in &c.taps {
                let tap = p.tap_by_key(&t.key);
                if !t.is_recorded() {
                    assert!(tap.is_none(), "{what}: {} stored", t.key);
                    continue;
                }
                let tap = tap.unwrap_or_else(|| panic!("{what}: no tap {}", t.key));
                assert_eq!(tap.ne, expected_ne(t, info), "{what}: {}", t.key);
                assert!(
                    tap.data.iter().all(|v| !v.is_nan()),
                    "{what}: NaN in {}",
                    t.key
                );
                if t.derived_from.is_some() && !p.arrays.taps.contains_key(&t.key) {
                    derived += 1;
                }
            }
            // the logits tap is the stored last-position logits
            let (_, out) = p.tap("result_output", None, TapSel::Last).unwrap();
            assert_eq!(out.data, p.last_logits(), "{what}");
            // every recorded catalog entry is stored, aliased or derived
            assert_eq!(
                p.arrays.taps.len() + info.tap_aliases.len() + derived,
                c.taps.iter().filter(|t| t.is_recorded()).count(),
                "{what}"
            );
        }
        // One all-positions prompt, unless the entry's prompts leave it out.
        let all_pos = &data.manifest().capture.all_positions_prompt;
        let has_all = c
            .model
            .prompts
            .as_ref()
            .is_none_or(|ids| ids.contains(all_pos));
        assert_eq!(
            all_positions,
            usize::from(has_all),
            "{}: all-positions prompts",
            model.id()
        );
        match &c.model.tap_prompts {
            Some(ids) => assert_eq!(tapped, ids.len(), "{}", model.id()),
            None => assert_eq!(tapped, model.prompts().count(), "{}", model.id()),
        }
    }
}

#[test]
fn moe_routing_taps_are_consistent() {
    let data = data();
    for id in [QWEN3, QWEN3MOE, QWEN3MOE_TIES] {
        let c = data.model(id).unwrap().capture();
        assert_eq!(c.model.min_first_token_margin, Some(0.5), "{id}");
    }
    for id in MOE_MODELS {
        moe_routing_is_consistent(&data, id);
    }
}

fn moe_routing_is_consistent(data: &ReferenceData, id: &str) {
    let moe = data.model(id).unwrap();
    let c = moe.capture();
    for info in moe.prompts().filter(|p| p.taps_recorded) {
        let what = format!("{id}/{}", info.id);
        let p = moe.load_prompt(&info.id).unwrap();
        for l in 0..c.facts.n_layer {
            let get = |base: &str| p.tap(base, Some(l), TapSel::Last).unwrap().1;
            let (probs, argsort, topk) = (
                get("ffn_moe_probs"),
                get("ffn_moe_argsort"),
                get("ffn_moe_topk"),
            );
            let (weights, norm) = (get("ffn_moe_weights"), get("ffn_moe_weights_norm"));
            let n_expert = probs.ne[0];
            let used = topk.ne[0];
            assert!(used < n_expert, "{what}");
            for (i, row) in probs.data.chunks(n_expert).enumerate() {
                let sum: f32 = row.iter().sum();
                assert!(
                    (sum - 1.0).abs() < 1e-4,
                    "{what} layer {l}: probs sum {sum}"
                );
                let ids = &topk.data[i * used..(i + 1) * used];
                // the top-k ids are the first of the argsort, by falling probability
                assert_eq!(ids, &argsort.data[i * n_expert..i * n_expert + used]);
                let w: Vec<f32> = ids.iter().map(|&e| row[e as usize]).collect();
                assert!(w.windows(2).all(|x| x[0] >= x[1]), "{what} layer {l}");
                assert_eq!(w, &weights.data[i * used..(i + 1) * used], "{what}");
                let n: f32 = norm.data[i * used..(i + 1) * used].iter().sum();
                assert!(
                    (n - 1.0).abs() < 1e-5,
                    "{what} layer {l}: weights_norm sum {n}"
                );
            }
        }
    }
}

/// Every routing decision llama.cpp took on the captures: its `argsort`
/// of its own probabilities (`ffn_moe_argsort`, all experts) is what
/// `engine::cpu::argsort_desc` (and so sharpi's `top_k` on every backend)
/// gives for the same values, exact ties included. Calls back with the
/// probabilities, the order and the experts used of each (prompt, layer,
/// position).
fn each_routing(data: &ReferenceData, id: &str, mut f: impl FnMut(&[f32], &[f32], usize)) {
    let moe = data.model(id).unwrap();
    for info in moe.prompts().filter(|p| p.taps_recorded) {
        let what = format!("{id}/{}", info.id);
        let p = moe.load_prompt(&info.id).unwrap();
        for l in 0..moe.capture().facts.n_layer {
            let (_, probs) = p.tap("ffn_moe_probs", Some(l), TapSel::Last).unwrap();
            let (_, argsort) = p.tap("ffn_moe_argsort", Some(l), TapSel::Last).unwrap();
            let (_, topk) = p.tap("ffn_moe_topk", Some(l), TapSel::Last).unwrap();
            let (n, k) = (probs.ne[0], topk.ne[0]);
            for (row, order) in probs.data.chunks(n).zip(argsort.data.chunks(n)) {
                let ours: Vec<f32> = engine::cpu::argsort_desc(row)
                    .iter()
                    .map(|&e| e as f32)
                    .collect();
                assert_eq!(ours, order, "{what} layer {l}: {row:?}");
                f(row, order, k);
            }
        }
    }
}

#[test]
fn llama_cpp_orders_experts_as_argsort_desc_does_ties_included() {
    let data = data();
    for id in MOE_MODELS {
        each_routing(&data, id, |_, _, _| {});
    }
    // The model made for it ties exactly: in the top k (which expert comes
    // first) and across its boundary (which one is chosen at all).
    let (mut decisions, mut inside, mut across) = (0, 0, 0);
    each_routing(&data, QWEN3MOE_TIES, |row, order, k| {
        let v = |j: usize| row[order[j] as usize];
        decisions += 1;
        inside += (0..k - 1).filter(|&j| v(j) == v(j + 1)).count();
        across += usize::from(v(k - 1) == v(k));
    });
    assert!(decisions >= 6, "{decisions} routing decisions");
    assert!(inside >= decisions, "{inside} ties in {decisions} top-ks");
    assert!(across >= 1, "no tie across the top-k boundary");
}

#[test]
fn the_all_positions_prompt_keeps_distinct_rows_per_position() {
    let data = data();
    for model in data.models() {
        let last_layer = model.capture().facts.n_layer - 1;
        let all_pos = &data.manifest().capture.all_positions_prompt;
        let Some(info) = model.prompts().find(|p| p.tap_positions == Positions::All) else {
            // Only a model whose entry leaves that prompt out lacks it.
            let own = model.capture().model.prompts.as_ref();
            assert!(
                own.is_some_and(|ids| !ids.contains(all_pos)),
                "{}: no all-positions prompt",
                model.id()
            );
            continue;
        };
        assert!(
            info.n_tokens >= 2,
            "{}: all-positions prompt of one token",
            model.id()
        );
        let p = model.load_prompt(&info.id).unwrap();
        for (base, layer) in [
            ("attn_norm", Some(0)),
            ("l_out", Some(last_layer)),
            ("result_norm", None),
        ] {
            let (ti, tap) = p.tap(base, layer, TapSel::Last).unwrap();
            let d = ti.token_dim.unwrap();
            assert_eq!(tap.ne[d], info.n_tokens, "{}: {base}", model.id());
            let first = tap.slice(d, 0);
            let last = tap.slice(d, info.n_tokens - 1);
            assert_ne!(
                first.data,
                last.data,
                "{}: {base} rows look identical",
                model.id()
            );
        }
    }
}

#[test]
fn sanity_continuations_match_what_llama_cpp_is_known_to_produce() {
    let data = data();
    let smol = data.model(SMOLLM2).unwrap();
    let capital = smol.prompt("capital-france").unwrap();
    assert!(
        capital.greedy.text.starts_with(" Paris."),
        "{:?}",
        capital.greedy.text
    );
    // our Q4_K_M requantization of the same weights keeps both answers
    let q4k = data.model(SMOLLM2_Q4K).unwrap();
    let capital = q4k.prompt("capital-france").unwrap();
    assert!(
        capital.greedy.text.starts_with(" Paris."),
        "{:?}",
        capital.greedy.text
    );
    let chat = q4k.prompt("chat-system-user").unwrap();
    assert!(chat.greedy.text.contains("Paris"), "{:?}", chat.greedy.text);
    let counting = q4k.prompt("counting").unwrap();
    assert!(
        counting.greedy.text.starts_with(" 6, 7, 8, 9, 10,"),
        "{:?}",
        counting.greedy.text
    );
    // SmolLM2 with its FFNs made into 4 noisy experts, 2 used, still knows
    let moe = data.model(SMOLLM2_MOE).unwrap();
    let capital = moe.prompt("capital-france").unwrap();
    assert!(
        capital.greedy.text.starts_with(" Paris."),
        "{:?}",
        capital.greedy.text
    );
    let chat = moe.prompt("chat-system-user").unwrap();
    assert!(chat.greedy.text.contains("Paris"), "{:?}", chat.greedy.text);
    let gemma = data.model(GEMMA).unwrap();
    let counting = gemma.prompt("counting").unwrap();
    assert!(
        counting.greedy.text.starts_with(" 6, 7, 8, 9, 10,"),
        "{:?}",
        counting.greedy.text
    );
}

#[test]
fn tokenizer_captures_cover_the_corpus() {
    let data = data();
    let corpus = inputs::read_text(&root(), inputs::TOKENIZER_CORPUS).unwrap();
    let lines = corpus_lines(&corpus);
    for model in data.models() {
        let c = model.capture();
        let t = model.tokenizer().unwrap();
        assert_eq!(
            t.corpus_sha256,
            sha256_hex(corpus.as_bytes()),
            "{}: stale tokenizer capture",
            model.id()
        );
        assert_eq!(t.lines.len(), lines.len(), "{}", model.id());
        for (line, tok) in lines.iter().zip(&t.lines) {
            if c.vocab.add_bos {
                assert_eq!(
                    tok.plain.first(),
                    Some(&c.vocab.bos),
                    "{}: {line:?}",
                    model.id()
                );
            }
            if !line.contains('<') {
                assert_eq!(
                    tok.plain,
                    tok.special,
                    "{}: {line:?} has no special-token text",
                    model.id()
                );
            }
        }
        assert!(t.whole.plain.len() > lines.len(), "{}", model.id());
    }
    // SmolLM2: "<|im_start|>" is one control token only with parse_special
    let smol = data.model(SMOLLM2).unwrap().tokenizer().unwrap();
    let i = lines.iter().position(|l| *l == "<|im_start|>").unwrap();
    assert_eq!(smol.lines[i].special, vec![1]);
    assert!(smol.lines[i].plain.len() > 1);
    // the requantized and the synthetic models carry SmolLM2's tokenizer
    for id in [SMOLLM2_Q4K, QWEN3, QWEN3MOE, QWEN3MOE_TIES] {
        let t = data.model(id).unwrap().tokenizer().unwrap();
        assert_eq!((&t.whole, &t.lines), (&smol.whole, &smol.lines), "{id}");
    }
    // Gemma: "<start_of_turn>" likewise (after BOS)
    let gemma = data.model(GEMMA).unwrap().tokenizer().unwrap();
    let i = lines.iter().position(|l| *l == "<start_of_turn>").unwrap();
    assert_eq!(gemma.lines[i].special.len(), 2);
    assert!(gemma.lines[i].plain.len() > 2);
}

#[test]
fn chat_prompts_are_the_committed_renders() {
    let data = data();
    for model in data.models() {
        let c = model.capture();
        let renders = model.chat_renders().unwrap();
        let chat: Vec<_> = model
            .prompts()
            .filter(|p| p.kind == PromptKind::Chat)
            .collect();
        let Some(renders) = renders else {
            assert!(!c.model.has_chat_template);
            assert!(
                chat.is_empty(),
                "{}: chat prompts without a template",
                model.id()
            );
            continue;
        };
        assert!(renders.conversations.len() >= 20, "{}", model.id());
        for r in &renders.conversations {
            let ends = r.text.ends_with("<|im_start|>assistant\n");
            assert_eq!(
                ends,
                r.add_generation_prompt,
                "{} {}: {:?}",
                model.id(),
                r.id,
                r.text
            );
        }
        // Every chat prompt, unless the entry's prompts leave them out.
        assert!(
            !chat.is_empty() || c.model.prompts.is_some(),
            "{}",
            model.id()
        );
        for p in chat {
            let r = renders.prompts.iter().find(|r| r.id == p.id).unwrap();
            assert_eq!(
                p.text_sha256,
                sha256_hex(r.text.as_bytes()),
                "{}: {} stale",
                model.id(),
                p.id
            );
        }
    }
}
