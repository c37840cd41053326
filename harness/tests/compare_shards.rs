//! `compare --shard K/N` and `harness merge`: the shards of a run cover its
//! items once each, and their merged report is the unsharded one (timings
//! apart), read back from JSON as `harness merge` reads it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use harness::compare::plan::matrix::{Costs, Shard};
use harness::compare::{self, report::merge, Options, Report, Thresholds};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn options() -> Options {
    let repo = repo();
    let t = Thresholds::load(&repo.join("ci/thresholds.toml")).unwrap();
    let mut o = Options::new(&repo, t);
    o.models = vec!["synth-qwen3".into()];
    o.prompts = ["capital-france", "once-upon", "counting"]
        .map(String::from)
        .to_vec();
    // A hybrid path's reference is the CPU path: a shard holding it without
    // the CPU path runs that too, unreported.
    o.paths = compare::Paths::List(vec![
        compare::Path::Cpu,
        compare::Path::Gpu,
        compare::Path::Hybrid(1),
    ]);
    o.greedy_steps = 4;
    // Costs as a run measured them: the GPU items dearest.
    let mut c = Costs::default();
    for p in &o.prompts {
        c.seconds.insert(format!("synth-qwen3/{p}/cpu"), 0.2);
        c.seconds.insert(format!("synth-qwen3/{p}/gpu"), 3.0);
        c.seconds.insert(format!("synth-qwen3/{p}/hybrid:1"), 0.5);
    }
    o.costs = c;
    o
}

/// The report as JSON with every wall time taken out.
fn without_timings(r: &Report) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("seconds");
                m.remove("text_seconds");
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    strip(&mut v);
    v
}

#[test]
fn merged_shards_equal_the_unsharded_run() {
    let whole = compare::run(&options()).unwrap();
    assert!(whole.passed(), "{}", whole.table());
    assert_eq!(whole.items, whole.ran);
    assert_eq!(whole.items.len(), 1 + 3 * 3);

    let n = 3;
    let mut shards = Vec::new();
    let mut ran = HashSet::new();
    for k in 1..=n {
        let mut o = options();
        o.shard = Some(Shard { k, n });
        let r = compare::run(&o).unwrap();
        assert_eq!(r.items, whole.items, "every shard lists the whole run");
        for item in &r.ran {
            assert!(ran.insert(item.clone()), "{item} in two shards");
        }
        // Through JSON, as `harness merge` reads the shards' files.
        shards.push(Report::from_json(&r.to_json()).unwrap());
    }
    let all: HashSet<String> = whole.items.iter().cloned().collect();
    assert_eq!(ran, all, "the shards together run every item");

    // Any order of the files.
    shards.reverse();
    let merged = merge::merge(shards.clone()).unwrap();
    assert_eq!(merged.passed(), whole.passed());
    assert_eq!(without_timings(&merged), without_timings(&whole));

    // Not one run: a shard left out, or one of another commit.
    assert!(merge::merge(shards[1..].to_vec()).is_err());
    let mut other = shards.clone();
    other[0].provenance.commit.push('x');
    assert!(merge::merge(other).unwrap_err().contains("commit"));
}
