//! `harness merge`: the reports of the N shards of one run joined into the
//! report one unsharded run would have written (timings apart), with one
//! verdict.
//!
//! Refused: shards of different commits, sharpi versions, reference
//! data, limits, options or injected faults, or run on machines whose
//! numbers may differ ([`super::provenance`]: scalar against SIMD CPU
//! kernels, another Vulkan device or driver), of different item lists, a
//! shard missing or given twice, an item run by two shards or by none.
//! Accepted: shards that differ in timings, CPU model, thread count or
//! SIMD level; the merged report lists each distinct machine.

use std::collections::{HashMap, HashSet};

use super::provenance::{compatible_all, distinct_machines, same_run};
use super::{ModelReport, Provenance, Report};

/// Joins shard reports (any order) into one.
pub fn merge(mut shards: Vec<Report>) -> Result<Report, String> {
    let Some(first) = shards.first() else {
        return Err("no reports to merge".into());
    };
    let n = match first.shard {
        Some(s) => s.n,
        None => return Err("report 1 is not a shard (no --shard K/N)".into()),
    };
    let mut seen = vec![false; n];
    for (i, r) in shards.iter().enumerate() {
        let Some(s) = r.shard else {
            return Err(format!("report {} is not a shard (no --shard K/N)", i + 1));
        };
        if s.n != n {
            return Err(format!(
                "report {} is shard {s} of a run in {} shards, report 1 of one in {n}",
                i + 1,
                s.n
            ));
        }
        if std::mem::replace(&mut seen[s.k - 1], true) {
            return Err(format!("shard {s} given twice"));
        }
        same_run(&first.provenance, &r.provenance)
            .map_err(|e| format!("report {} differs from report 1 in {e}", i + 1))?;
        if r.items != first.items {
            return Err(format!(
                "report {} lists other items than report 1 ({} against {})",
                i + 1,
                r.items.len(),
                first.items.len()
            ));
        }
    }
    if let Some(k) = seen.iter().position(|&s| !s) {
        return Err(format!("shard {}/{n} is missing", k + 1));
    }
    shards.sort_by_key(|r| r.shard.map_or(0, |s| s.k));
    let machines = distinct_machines(shards.iter().flat_map(|r| &r.provenance.machines));
    compatible_all(&machines)
        .map_err(|e| format!("the shards ran on machines that differ in {e}"))?;

    // Every item run exactly once.
    let mut by: HashMap<&str, usize> = HashMap::new();
    for r in &shards {
        let k = r.shard.map_or(0, |s| s.k);
        for item in &r.ran {
            if let Some(other) = by.insert(item, k) {
                return Err(format!("item {item} ran in shards {other} and {k}"));
            }
        }
    }
    let first = &shards[0];
    if let Some(missing) = first.items.iter().find(|i| !by.contains_key(i.as_str())) {
        return Err(format!("item {missing} ran in no shard"));
    }

    let order: HashMap<&str, usize> = first
        .items
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), i))
        .collect();
    let mut model_ids: Vec<&str> = Vec::new();
    for item in &first.items {
        let id = item.rsplit_once("/text").map(|(m, _)| m);
        if let Some(id) = id.filter(|_| item.ends_with("/text")) {
            model_ids.push(id);
        }
    }
    let mut models = Vec::new();
    for id in model_ids {
        let text_key = format!("{id}/text");
        let parts: Vec<(bool, &ModelReport)> = shards
            .iter()
            .flat_map(|r| {
                let text = r.ran.contains(&text_key);
                r.models
                    .iter()
                    .filter(|m| m.id == id)
                    .map(move |m| (text, m))
            })
            .collect();
        if let Some(m) = merge_model(&parts, &order)? {
            models.push(m);
        }
    }
    Ok(Report {
        reference_dir: first.reference_dir.clone(),
        thresholds: first.thresholds.clone(),
        paths: first.paths.clone(),
        provenance: Provenance {
            machines,
            ..first.provenance.clone()
        },
        shard: None,
        items: first.items.clone(),
        ran: first.items.clone(),
        models,
        baseline: None,
        seconds: shards.iter().map(|r| r.seconds).sum(),
    })
}

/// One model from its shards' parts (`true`: the part of the shard that
/// ran its text item, which owns the model-level findings).
fn merge_model(
    parts: &[(bool, &ModelReport)],
    order: &HashMap<&str, usize>,
) -> Result<Option<ModelReport>, String> {
    let Some(text) = parts.iter().find(|(t, _)| *t).map(|(_, m)| *m) else {
        return match parts.first() {
            Some((_, m)) => Err(format!("model {}: no shard ran its text checks", m.id)),
            None => Ok(None),
        };
    };
    let mut m = text.clone();
    m.prompts.clear();
    m.seconds = 0.0;
    let mut failures: HashSet<String> = m
        .failures
        .iter()
        .map(|f| format!("{}\t{}", f.check, f.detail))
        .collect();
    for (_, part) in parts {
        if m.skipped.is_none() {
            m.skipped.clone_from(&part.skipped);
        }
        if m.paths.is_empty() {
            m.paths.clone_from(&part.paths);
        }
        // A model-level failure every shard met (the model would not
        // load, say) is reported once, as one run reports it.
        for f in &part.failures {
            if failures.insert(format!("{}\t{}", f.check, f.detail)) {
                m.failures.push(f.clone());
            }
        }
        m.prompts.extend(part.prompts.iter().cloned());
        m.seconds += part.seconds;
    }
    let at = |p: &super::PromptReport| {
        let key = format!("{}/{}/{}", p.model, p.prompt, p.path);
        order.get(key.as_str()).copied().unwrap_or(usize::MAX)
    };
    m.prompts.sort_by_key(at);
    Ok(Some(m))
}

#[cfg(test)]
mod tests {
    use super::super::provenance::Machine;
    use super::super::PromptReport;
    use super::*;
    use crate::compare::plan::matrix::Shard;
    use crate::compare::{Failure, Path, Paths};

    fn model(id: &str, prompts: Vec<PromptReport>) -> ModelReport {
        ModelReport {
            id: id.into(),
            architecture: "llama".into(),
            file: format!("{id}.gguf"),
            skipped: None,
            paths: vec![Path::Cpu, Path::Gpu],
            failures: Vec::new(),
            checks: Default::default(),
            prompts,
            text_seconds: 0.0,
            seconds: 1.0,
        }
    }

    fn prompt(m: &str, p: &str, path: Path) -> PromptReport {
        PromptReport::new(m, p, path, 3)
    }

    fn report(k: usize, ran: &[&str], models: Vec<ModelReport>) -> Report {
        let items = ["a/text", "a/p/cpu", "a/p/gpu", "a/q/cpu", "a/q/gpu"];
        Report {
            reference_dir: "r".into(),
            thresholds: "t".into(),
            paths: Paths::List(vec![Path::Cpu, Path::Gpu]),
            provenance: Provenance {
                commit: "c".into(),
                reference_sha256: "r".into(),
                thresholds_sha256: "t".into(),
                settings: "s".into(),
                machines: vec![Machine {
                    cpu: format!("cpu {k}"),
                    cpu_kernels: "avx2".into(),
                    threads: k,
                    gpu: None,
                }],
                ..Provenance::default()
            },
            shard: Some(Shard { k, n: 2 }),
            items: items.iter().map(|s| s.to_string()).collect(),
            ran: ran.iter().map(|s| s.to_string()).collect(),
            models,
            baseline: None,
            seconds: 1.0,
        }
    }

    fn two() -> (Report, Report) {
        let mut a = model(
            "a",
            vec![prompt("a", "q", Path::Cpu), prompt("a", "p", Path::Gpu)],
        );
        a.failures.push(Failure::new("chat", "differs"));
        a.failures.push(Failure::new("model", "will not load"));
        let mut b = model(
            "a",
            vec![prompt("a", "p", Path::Cpu), prompt("a", "q", Path::Gpu)],
        );
        b.failures.push(Failure::new("model", "will not load"));
        (
            report(1, &["a/text", "a/q/cpu", "a/p/gpu"], vec![a]),
            report(2, &["a/p/cpu", "a/q/gpu"], vec![b]),
        )
    }

    #[test]
    fn merges_in_run_order_and_reports_model_failures_once() {
        let (a, b) = two();
        let m = merge(vec![b, a]).unwrap();
        let keys: Vec<String> = m.models[0]
            .prompts
            .iter()
            .map(|p| format!("{}/{}", p.prompt, p.path))
            .collect();
        assert_eq!(keys, ["p/cpu", "p/gpu", "q/cpu", "q/gpu"]);
        let f: Vec<&str> = m.models[0]
            .failures
            .iter()
            .map(|f| f.check.as_str())
            .collect();
        assert_eq!(f, ["chat", "model"]);
        assert_eq!(m.shard, None);
        assert!(!m.passed());
        // Shards on two machines (CPU model, thread count): both listed.
        let cpus: Vec<&str> = m
            .provenance
            .machines
            .iter()
            .map(|m| m.cpu.as_str())
            .collect();
        assert_eq!(cpus, ["cpu 1", "cpu 2"]);
    }

    #[test]
    fn refuses_what_is_not_one_run() {
        let (a, b) = two();
        let err = |v: Vec<Report>| merge(v).unwrap_err();
        assert!(err(vec![a.clone()]).contains("shard 2/2 is missing"));
        assert!(err(vec![a.clone(), a.clone()]).contains("given twice"));
        for (what, edit) in [
            (
                "commit",
                (|p: &mut Provenance| p.commit = "d".into()) as fn(&mut Provenance),
            ),
            ("reference data", |p| p.reference_sha256 = "x".into()),
            ("limits", |p| p.thresholds_sha256 = "x".into()),
            ("options", |p| p.settings = "x".into()),
            ("faults", |p| p.faults = vec!["rope-style".into()]),
            ("CPU kernels", |p| {
                p.machines[0].cpu_kernels = "scalar".into()
            }),
        ] {
            let mut c = b.clone();
            edit(&mut c.provenance);
            assert!(err(vec![a.clone(), c]).contains(what), "{what}");
        }
        let mut c = b.clone();
        c.ran.push("a/text".into());
        assert!(err(vec![a.clone(), c]).contains("ran in shards 1 and 2"));
        let mut c = b.clone();
        c.ran.pop();
        assert!(err(vec![a.clone(), c]).contains("a/q/gpu ran in no shard"));
        let mut c = b.clone();
        c.shard = Some(Shard { k: 2, n: 3 });
        assert!(err(vec![a.clone(), c]).contains("in 3 shards"));
        let mut c = b;
        c.shard = None;
        assert!(err(vec![a, c]).contains("not a shard"));
    }
}
