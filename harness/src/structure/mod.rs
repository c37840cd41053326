//! `harness structure`: the repository's structure checked from its
//! source text alone (no build, no network), as CI runs it:
//!
//! - no module cycle in a crate of the workspace ([`cycles`]: uses lifted
//!   to sibling modules, the modules read by [`modules`]);
//! - no source file (Rust or GLSL) over [`MAX_LINES_OF_CODE`] lines of code
//!   ([`size`]: comments and blank lines not counted, a file's inline
//!   unit tests counted; test targets and generated code are not in the
//!   set);
//! - README.md at most [`MAX_README_LINES`] lines;
//! - every relative link of README.md and docs/*.md resolves ([`links`]).
//!
//! Each failure is one line that names the cycle, the file or the link.

pub mod cycles;
mod lexer;
pub mod links;
pub mod modules;
pub mod size;

use std::path::{Path, PathBuf};

use thiserror::Error;

/// The most lines of code a source file may hold.
pub const MAX_LINES_OF_CODE: usize = 600;
/// The most lines README.md may hold.
pub const MAX_README_LINES: usize = 200;

/// The crates whose modules are checked for cycles: (name, root file).
pub const CRATES: &[(&str, &str)] = &[
    ("engine", "engine/src/lib.rs"),
    ("harness", "harness/src/lib.rs"),
    ("sharpi", "engine/src/bin/sharpi/main.rs"),
    ("harness-cli", "harness/src/main.rs"),
];

/// Folders whose Rust and GLSL files are source files (their `tests/`
/// folders, fuzz build outputs and `target/` are skipped).
pub const SOURCE_DIRS: &[&str] = &["engine", "harness", "shaders"];

#[derive(Debug, Error)]
pub enum StructureError {
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{file}: `mod {name};` names no file ({name}.rs or {name}/mod.rs)")]
    MissingModule { file: PathBuf, name: String },
}

/// What the checks found: each failure one line; `checked` says how much
/// was looked at.
#[derive(Debug, Default)]
pub struct Findings {
    pub failures: Vec<String>,
    pub details: Vec<String>,
    pub checked: Vec<String>,
}

/// Runs every check on the repository at `root`.
pub fn check(root: &Path) -> Result<Findings, StructureError> {
    let mut f = Findings::default();
    check_cycles(root, &mut f)?;
    check_sizes(root, &mut f)?;
    check_readme(root, &mut f)?;
    check_links(root, &mut f)?;
    Ok(f)
}

fn check_cycles(root: &Path, f: &mut Findings) -> Result<(), StructureError> {
    for (name, file) in CRATES {
        let path = root.join(file);
        if !path.is_file() {
            continue;
        }
        let krate = modules::Crate::read(name, &path)?;
        let uses = krate.uses();
        let found = cycles::cycles(&uses);
        f.checked.push(format!(
            "{name}: {} modules, {} uses, {} cycles",
            krate.module_paths().count(),
            uses.len(),
            found.len()
        ));
        for c in found {
            f.failures
                .push(format!("module cycle: {}", c.describe(name)));
            f.details
                .extend(c.evidence.iter().map(|e| format!("  {e}")));
        }
    }
    Ok(())
}

fn check_sizes(root: &Path, f: &mut Findings) -> Result<(), StructureError> {
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        source_files(&root.join(dir), &mut files)?;
    }
    files.sort();
    let mut largest = (0, PathBuf::new());
    for file in &files {
        let src = read(file)?;
        let n = size::lines_of_code(&src);
        let shown = file.strip_prefix(root).unwrap_or(file).to_path_buf();
        if n > largest.0 {
            largest = (n, shown.clone());
        }
        if n > MAX_LINES_OF_CODE {
            f.failures.push(format!(
                "file too long: {} has {n} lines of code (at most {MAX_LINES_OF_CODE})",
                shown.display()
            ));
        }
    }
    f.checked.push(format!(
        "{} source files, the largest {} with {} lines of code",
        files.len(),
        largest.1.display(),
        largest.0
    ));
    Ok(())
}

fn check_readme(root: &Path, f: &mut Findings) -> Result<(), StructureError> {
    let n = read(&root.join("README.md"))?.lines().count();
    if n > MAX_README_LINES {
        f.failures.push(format!(
            "README.md has {n} lines (at most {MAX_README_LINES})"
        ));
    }
    f.checked.push(format!("README.md: {n} lines"));
    Ok(())
}

fn check_links(root: &Path, f: &mut Findings) -> Result<(), StructureError> {
    let mut docs = vec![root.join("README.md")];
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        let mut md: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        md.sort();
        docs.extend(md);
    }
    let mut broken = 0;
    for doc in &docs {
        let label = doc.strip_prefix(root).unwrap_or(doc).display().to_string();
        for b in links::broken_links(doc, &label, &read(doc)?) {
            broken += 1;
            f.failures.push(b);
        }
    }
    f.checked.push(format!(
        "{} Markdown files, {broken} broken links",
        docs.len()
    ));
    Ok(())
}

/// The Rust and GLSL files under `dir`, `tests/`, `target/` and fuzz
/// outputs skipped.
fn source_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), StructureError> {
    let entries = std::fs::read_dir(dir).map_err(|e| StructureError::Read {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "tests" | "target" | "corpus" | "artifacts" | "proptest-regressions"
            ) {
                source_files(&path, out)?;
            }
        } else if name.ends_with(".rs") || name.ends_with(".comp") || name.ends_with(".glsl") {
            out.push(path);
        }
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, StructureError> {
    std::fs::read_to_string(path).map_err(|e| StructureError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}
