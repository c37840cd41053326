//! autotests is off (the package's Cargo.toml; engine and harness share this
//! file): every file of its tests/ must be a test
//! binary of its own (a `[[test]]` path) or a module of one (a `#[path]` in
//! such a binary's file), or its tests would silently never run.

use std::collections::BTreeSet;
use std::path::Path;

/// The quoted strings after `key` on each line of `text` that has it.
fn quoted_after(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(key))
        .filter_map(|rest| rest.split('"').nth(1).map(str::to_string))
        .collect()
}

#[test]
fn every_test_file_is_compiled() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let binaries: Vec<String> = quoted_after(&manifest, "path = ")
        .into_iter()
        .filter_map(|p| p.strip_prefix("tests/").map(str::to_string))
        .collect();
    assert!(!binaries.is_empty(), "no [[test]] in Cargo.toml");
    let mut compiled: BTreeSet<String> = binaries.iter().cloned().collect();
    for b in &binaries {
        let text = std::fs::read_to_string(dir.join("tests").join(b)).unwrap();
        compiled.extend(quoted_after(&text, "#[path = "));
    }
    let mut missing = Vec::new();
    for e in std::fs::read_dir(dir.join("tests")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".rs") && !compiled.contains(&name) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "tests/ files no test binary compiles: {missing:?}"
    );
}
