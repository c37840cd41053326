//! A crate's module tree read from its source files (`mod NAME;` from the
//! crate root down; inline `mod NAME { .. }` blocks as modules of their
//! own) and the uses of each module: every `use` tree and every path in
//! code that starts at `crate`, `super`, `self` or a name a `use` bound,
//! resolved to the module that holds the item, through `pub use`
//! re-exports. Items under `#[cfg(test)]` are left out: a test may import
//! what it tests from anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::lexer::{tokens, Token};
use super::StructureError;

/// A module's path from its crate's root (empty for the root).
pub type ModPath = Vec<String>;

/// One use of an item of another module.
#[derive(Debug, Clone)]
pub struct Use {
    pub from: ModPath,
    /// The module holding the item (re-exports followed).
    pub to: ModPath,
    /// The item as written (`cpu::matmul_id`).
    pub item: String,
    pub file: PathBuf,
    pub line: usize,
}

#[derive(Debug, Default)]
struct Module {
    children: Vec<String>,
    /// `pub use` re-exports: the name it is known by here -> the path.
    reexports: BTreeMap<String, Vec<String>>,
    /// `pub use path::*` re-exports.
    globs: Vec<Vec<String>>,
}

/// A path as written, before resolution: the module it was written in and
/// its segments (`crate`, `super`, `self` kept).
struct Written {
    at: ModPath,
    segs: Vec<String>,
    file: PathBuf,
    line: usize,
}

/// A crate read from its root file.
pub struct Crate {
    pub name: String,
    modules: BTreeMap<ModPath, Module>,
    written: Vec<Written>,
}

impl Crate {
    /// Reads the crate whose root file is `root` (lib.rs, main.rs or a
    /// file of src/bin/), following `mod NAME;` to the files they name.
    pub fn read(name: &str, root: &Path) -> Result<Crate, StructureError> {
        let mut krate = Crate {
            name: name.to_string(),
            modules: BTreeMap::new(),
            written: Vec::new(),
        };
        let dir = root.parent().unwrap_or(Path::new(".")).to_path_buf();
        krate.read_file(root, Vec::new(), &dir)?;
        Ok(krate)
    }

    /// Every module path of the crate.
    pub fn module_paths(&self) -> impl Iterator<Item = &ModPath> {
        self.modules.keys()
    }

    /// Reads one file as module `at`; its `mod NAME;` children live in `dir`.
    fn read_file(&mut self, file: &Path, at: ModPath, dir: &Path) -> Result<(), StructureError> {
        let src = std::fs::read_to_string(file).map_err(|e| StructureError::Read {
            path: file.to_path_buf(),
            reason: e.to_string(),
        })?;
        let toks = tokens(&src);
        let mut files = Vec::new();
        self.modules.entry(at.clone()).or_default();
        self.read_items(&toks, 0, toks.len(), &at, file, &mut files);
        for (name, given) in files {
            let mut child = at.clone();
            child.push(name.clone());
            let a = dir.join(format!("{name}.rs"));
            let b = dir.join(&name).join("mod.rs");
            let (path, child_dir) = if let Some(given) = given {
                // `#[path = "..."]`: relative to the declaring file's folder.
                let p = file.parent().unwrap_or(Path::new(".")).join(given);
                if !p.is_file() {
                    return Err(StructureError::MissingModule {
                        file: file.to_path_buf(),
                        name,
                    });
                }
                let d = p.parent().unwrap_or(Path::new(".")).to_path_buf();
                (p, d)
            } else if a.is_file() {
                (a, dir.join(&name))
            } else if b.is_file() {
                (b, dir.join(&name))
            } else {
                return Err(StructureError::MissingModule {
                    file: file.to_path_buf(),
                    name,
                });
            };
            self.read_file(&path, child, &child_dir)?;
        }
        Ok(())
    }

    /// Reads the items of `toks[start..end]`, written in module `at`;
    /// pushes the names of `mod NAME;` declarations onto `files`, each with
    /// its `#[path = "..."]` if it has one.
    fn read_items(
        &mut self,
        toks: &[Token],
        start: usize,
        end: usize,
        at: &ModPath,
        file: &Path,
        files: &mut Vec<(String, Option<String>)>,
    ) {
        let mut i = start;
        let mut given_path: Option<String> = None;
        let mut bound: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut paths: Vec<(Vec<String>, usize)> = Vec::new();
        while i < end {
            if let Some(after) = test_only_attr(toks, i) {
                i = skip_item(toks, after, end);
                continue;
            }
            let t = &toks[i];
            if t.is("#")
                && i + 5 < end
                && toks[i + 1].is("[")
                && toks[i + 2].is("path")
                && toks[i + 3].is("=")
            {
                given_path = Some(toks[i + 4].text.trim_matches('"').to_string());
                i += 5;
                continue;
            }
            if t.is("mod") && i + 2 < end && toks[i + 1].is_ident() {
                let name = toks[i + 1].text.clone();
                if toks[i + 2].is(";") {
                    files.push((name.clone(), given_path.take()));
                    self.child(at, &name);
                    i += 3;
                    continue;
                }
                if toks[i + 2].is("{") {
                    let close = matching(toks, i + 2, end);
                    let mut inner = at.clone();
                    inner.push(name.clone());
                    self.child(at, &name);
                    self.modules.entry(inner.clone()).or_default();
                    self.read_items(toks, i + 3, close, &inner, file, files);
                    i = close + 1;
                    continue;
                }
            }
            if t.is("use") {
                let public = i > 0 && is_pub_before(toks, i);
                let semi = (i..end).find(|&k| toks[k].is(";")).unwrap_or(end);
                let mut trees = Vec::new();
                use_tree(&toks[i + 1..semi], Vec::new(), &mut trees);
                for tree in trees {
                    let line = t.line;
                    match tree {
                        UseTree::Name { path, name } => {
                            if public {
                                let abs = self.absolute(at, &path, &bound);
                                self.modules
                                    .entry(at.clone())
                                    .or_default()
                                    .reexports
                                    .insert(name.clone(), abs);
                            }
                            bound.insert(name, path.clone());
                            paths.push((path, line));
                        }
                        UseTree::Glob { path } => {
                            if public {
                                let abs = self.absolute(at, &path, &bound);
                                self.modules.entry(at.clone()).or_default().globs.push(abs);
                            }
                            paths.push((path, line));
                        }
                    }
                }
                i = semi + 1;
                continue;
            }
            if t.is_ident()
                && (i == 0 || !toks[i - 1].is("::"))
                && toks.get(i + 1).is_some_and(|n| n.is("::"))
            {
                let mut segs = vec![t.text.clone()];
                let mut k = i + 1;
                while k + 1 < end && toks[k].is("::") && toks[k + 1].is_ident() {
                    segs.push(toks[k + 1].text.clone());
                    k += 2;
                }
                paths.push((segs, t.line));
                i = k;
                continue;
            }
            i += 1;
        }
        // Paths are resolved at the end of the module: a `use` may come
        // after the code that relies on it.
        for (segs, line) in paths {
            let first = segs[0].as_str();
            let segs = if matches!(first, "crate" | "super" | "self") {
                segs
            } else if let Some(b) = bound.get(first) {
                b.iter().cloned().chain(segs[1..].iter().cloned()).collect()
            } else if self.is_child(at, first) {
                std::iter::once("self".to_string()).chain(segs).collect()
            } else {
                continue;
            };
            self.written.push(Written {
                at: at.clone(),
                segs,
                file: file.to_path_buf(),
                line,
            });
        }
    }

    fn child(&mut self, at: &ModPath, name: &str) {
        let m = self.modules.entry(at.clone()).or_default();
        if !m.children.iter().any(|c| c == name) {
            m.children.push(name.to_string());
        }
    }

    fn is_child(&self, at: &ModPath, name: &str) -> bool {
        self.modules
            .get(at)
            .is_some_and(|m| m.children.iter().any(|c| c == name))
    }

    /// `segs` (written in `at`) as a path from the crate root; a path that
    /// starts at another crate or at a name bound by no `use` comes back
    /// with the marker `::extern` first.
    fn absolute(
        &self,
        at: &ModPath,
        segs: &[String],
        bound: &BTreeMap<String, Vec<String>>,
    ) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut rest = segs;
        match segs.first().map(String::as_str) {
            Some("crate") => rest = &segs[1..],
            Some("self") => {
                out = at.clone();
                rest = &segs[1..];
            }
            Some("super") => {
                out = at.clone();
                while rest.first().is_some_and(|s| s == "super" || s == "self") {
                    if rest[0] == "super" {
                        out.pop();
                    }
                    rest = &rest[1..];
                }
            }
            Some(first) if self.is_child(at, first) => out = at.clone(),
            Some(first)
                if bound.contains_key(first)
                    && bound[first].first().is_some_and(|f| f != first) =>
            {
                let mut p = self.absolute(at, &bound[first], &BTreeMap::new());
                p.extend(segs[1..].iter().cloned());
                return p;
            }
            _ => {
                return std::iter::once("::extern".to_string())
                    .chain(segs.iter().cloned())
                    .collect()
            }
        }
        out.extend(rest.iter().cloned());
        out
    }

    /// The module that holds the item at absolute path `abs`: the longest
    /// module prefix, through re-exports (at most 8 hops).
    fn holder(&self, abs: &[String], hops: usize) -> Option<ModPath> {
        if abs.first().is_some_and(|s| s == "::extern") {
            return None;
        }
        let mut k = abs.len();
        while k > 0 && !self.modules.contains_key(&abs[..k]) {
            k -= 1;
        }
        let module = abs[..k].to_vec();
        if k == abs.len() || hops == 0 {
            return Some(module);
        }
        let m = &self.modules[&module];
        if let Some(target) = m.reexports.get(&abs[k]) {
            let mut next = target.clone();
            next.extend(abs[k + 1..].iter().cloned());
            if next.as_slice() != abs {
                return self.holder(&next, hops - 1).or(Some(module));
            }
        }
        for glob in &m.globs {
            let mut next = glob.clone();
            next.extend(abs[k..].iter().cloned());
            if let Some(found) = self.holder(&next, hops - 1) {
                if found.len() > glob.len()
                    || self.modules.get(&found).is_some_and(|_| found == *glob)
                {
                    return Some(found);
                }
            }
        }
        Some(module)
    }

    /// Every resolved use of one module's item by another module.
    pub fn uses(&self) -> Vec<Use> {
        let mut out = Vec::new();
        for w in &self.written {
            let abs = self.absolute(&w.at, &w.segs, &BTreeMap::new());
            let Some(to) = self.holder(&abs, 8) else {
                continue;
            };
            if to == w.at {
                continue;
            }
            out.push(Use {
                from: w.at.clone(),
                to,
                item: w.segs.join("::"),
                file: w.file.clone(),
                line: w.line,
            });
        }
        out
    }
}

/// One leaf of a `use` tree: a name it binds (an alias, the last segment,
/// or the module for `self`) with its path, or a glob.
enum UseTree {
    Name { path: Vec<String>, name: String },
    Glob { path: Vec<String> },
}

/// Expands the use tree in `toks` (without `use` and `;`) under `prefix`.
fn use_tree(toks: &[Token], prefix: Vec<String>, out: &mut Vec<UseTree>) {
    let mut path = prefix;
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        if t.is("::") {
            i += 1;
        } else if t.is("{") {
            let close = matching(toks, i, toks.len());
            let mut start = i + 1;
            let mut depth = 0;
            for k in i + 1..=close.min(toks.len() - 1) {
                let tk = &toks[k];
                if tk.is("{") {
                    depth += 1;
                } else if tk.is("}") && depth > 0 {
                    depth -= 1;
                } else if (tk.is(",") && depth == 0) || k == close {
                    if k > start {
                        use_tree(&toks[start..k], path.clone(), out);
                    }
                    start = k + 1;
                }
            }
            return;
        } else if t.is("*") {
            out.push(UseTree::Glob { path });
            return;
        } else if t.is("as") {
            if let Some(alias) = toks.get(i + 1) {
                if !alias.is("_") && !path.is_empty() {
                    out.push(UseTree::Name {
                        path,
                        name: alias.text.clone(),
                    });
                }
            }
            return;
        } else if t.is("self") && !path.is_empty() && i > 0 {
            // `a::b::{self}` binds b.
            let name = path.last().cloned().unwrap_or_default();
            out.push(UseTree::Name { path, name });
            return;
        } else if t.is_ident() {
            path.push(t.text.clone());
            i += 1;
        } else {
            i += 1;
        }
    }
    if let Some(name) = path.last().cloned() {
        if !matches!(name.as_str(), "crate" | "super" | "self") {
            out.push(UseTree::Name { path, name });
        }
    }
}

/// The index of the bracket closing the one at `open` (or `end - 1`).
fn matching(toks: &[Token], open: usize, end: usize) -> usize {
    let (o, c) = match toks[open].text.as_str() {
        "(" => ("(", ")"),
        "[" => ("[", "]"),
        _ => ("{", "}"),
    };
    let mut depth = 0;
    for (k, t) in toks.iter().enumerate().take(end).skip(open) {
        if t.is(o) {
            depth += 1;
        } else if t.is(c) {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
    }
    end.saturating_sub(1)
}

/// After a `#[cfg(...)]` attribute at `i` that holds only under test
/// (`test` named, `not` not), the index past it; None otherwise.
fn test_only_attr(toks: &[Token], i: usize) -> Option<usize> {
    if !(toks[i].is("#") && toks.get(i + 1)?.is("[") && toks.get(i + 2)?.is("cfg")) {
        return None;
    }
    let close = matching(toks, i + 1, toks.len());
    let inner = &toks[i + 3..close];
    let test = inner.iter().any(|t| t.is("test"));
    let not = inner.iter().any(|t| t.is("not"));
    (test && !not).then_some(close + 1)
}

/// Past the item starting at `i` (its attributes included): a `use`,
/// `const`, `static` or `type` ends at its `;`, others at their `;` or at
/// the brace closing their body, whichever comes first.
fn skip_item(toks: &[Token], mut i: usize, end: usize) -> usize {
    while i < end && toks[i].is("#") {
        i = matching(toks, i + 1, end) + 1;
    }
    let kw = (i..end.min(i + 4))
        .map(|k| toks[k].text.as_str())
        .find(|t| {
            matches!(
                *t,
                "use"
                    | "const"
                    | "static"
                    | "type"
                    | "fn"
                    | "mod"
                    | "impl"
                    | "struct"
                    | "enum"
                    | "trait"
                    | "macro_rules"
            )
        });
    let semi_only = matches!(kw, Some("use" | "const" | "static" | "type"));
    let mut k = i;
    while k < end {
        if toks[k].is(";") {
            return k + 1;
        }
        if toks[k].is("{") && !semi_only {
            return matching(toks, k, end) + 1;
        }
        if toks[k].is("{") || toks[k].is("(") || toks[k].is("[") {
            k = matching(toks, k, end) + 1;
            continue;
        }
        k += 1;
    }
    end
}

/// Whether a `pub` (or `pub(crate)`, `pub(super)`) stands right before the
/// `use` at `i`.
fn is_pub_before(toks: &[Token], i: usize) -> bool {
    if toks[i - 1].is("pub") {
        return true;
    }
    i >= 4 && toks[i - 1].is(")") && toks[i - 4].is("pub")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate made of `files` (path under src/, text) in a fresh folder.
    fn krate(tag: &str, files: &[(&str, &str)]) -> (Crate, PathBuf) {
        let dir = std::env::temp_dir().join(format!("structure-mod-{tag}-{}", std::process::id()));
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        (Crate::read("k", &dir.join("lib.rs")).unwrap(), dir)
    }

    fn edges(c: &Crate) -> Vec<(String, String)> {
        let mut e: Vec<(String, String)> = c
            .uses()
            .into_iter()
            .map(|u| (u.from.join("::"), u.to.join("::")))
            .collect();
        e.sort();
        e.dedup();
        e
    }

    #[test]
    fn uses_resolve_through_reexports_bound_names_and_super() {
        let (c, dir) = krate(
            "resolve",
            &[
                ("lib.rs", "mod a; pub mod b;\nuse b::Thing;\n"),
                ("a.rs", "use crate::b;\nfn f() { b::inner::g(); }\n"),
                ("b/mod.rs", "pub mod inner;\npub use inner::Thing;\n"),
                (
                    "b/inner.rs",
                    "pub struct Thing;\npub fn g() { super::super::a::h(); }\n",
                ),
            ],
        );
        std::fs::remove_dir_all(dir).unwrap();
        let e = edges(&c);
        assert!(e.contains(&("a".into(), "b".into())), "{e:?}");
        assert!(e.contains(&("a".into(), "b::inner".into())), "{e:?}");
        assert!(
            e.contains(&("".into(), "b::inner".into())),
            "re-export followed: {e:?}"
        );
        assert!(e.contains(&("b::inner".into(), "a".into())), "{e:?}");
    }

    #[test]
    fn test_items_are_left_out_and_inline_modules_count() {
        let (c, dir) = krate(
            "tests",
            &[
                ("lib.rs", "mod a; mod b;\n#[cfg(test)]\nmod t;\n"),
                ("a.rs", "#[cfg(test)]\nuse crate::b::X;\n#[cfg(test)]\nmod tests { use crate::b::Y; }\nmod imp { use super::super::b::Z; }\n"),
                ("b.rs", "pub struct X; pub struct Y; pub struct Z;\n"),
            ],
        );
        std::fs::remove_dir_all(dir).unwrap();
        // Only the inline module's use remains; `mod t;` (a test file) is not read.
        assert_eq!(edges(&c), vec![("a::imp".to_string(), "b".to_string())]);
    }

    #[test]
    fn a_planted_cycle_is_found() {
        let (c, dir) = krate(
            "cycle",
            &[
                ("lib.rs", "mod ops; mod cpu;\n"),
                ("ops.rs", "use crate::cpu::Numerics;\npub trait Ops {}\n"),
                ("cpu/mod.rs", "mod backend;\npub struct Numerics;\n"),
                ("cpu/backend.rs", "use crate::ops::Ops;\n"),
            ],
        );
        std::fs::remove_dir_all(dir).unwrap();
        let found = super::super::cycles::cycles(&c.uses());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].describe("k"), "k::cpu -> k::ops -> k::cpu");
    }

    #[test]
    fn a_path_attribute_names_the_file() {
        let (c, dir) = krate(
            "path",
            &[
                (
                    "lib.rs",
                    "mod a;\n#[path = \"elsewhere/b_file.rs\"]\nmod b;\n",
                ),
                ("a.rs", "use crate::b::X;\n"),
                ("elsewhere/b_file.rs", "pub struct X;\n"),
            ],
        );
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(edges(&c), vec![("a".to_string(), "b".to_string())]);
    }

    #[test]
    fn a_missing_module_file_is_an_error() {
        let dir =
            std::env::temp_dir().join(format!("structure-mod-missing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("lib.rs"), "mod gone;\n").unwrap();
        let err = Crate::read("k", &dir.join("lib.rs")).err().unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert!(
            err.to_string().contains("`mod gone;` names no file"),
            "{err}"
        );
    }
}
