//! Module cycles: each use is lifted to the two sibling modules under the
//! nearest common ancestor of its two ends (`model::step` using
//! `placement::table` is an edge `model -> placement`); uses between a
//! module and its own ancestor (a child naming its parent's items, a parent
//! re-exporting its child's) are how a module and its parts fit together
//! and are not edges. A cycle is a strongly connected set of two or more
//! siblings.

use std::collections::BTreeMap;

use super::modules::{ModPath, Use};

/// One cycle among siblings: its modules in order, and for each edge of
/// the loop the uses that make it (at most three shown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    pub modules: Vec<ModPath>,
    pub evidence: Vec<String>,
}

impl Cycle {
    /// `a -> b -> a` with the crate's name in front of each module, or
    /// the members of a tangle whose loop passes a module twice.
    pub fn describe(&self, krate: &str) -> String {
        let name = |m: &ModPath| {
            std::iter::once(krate.to_string())
                .chain(m.iter().cloned())
                .collect::<Vec<_>>()
                .join("::")
        };
        let mut names: Vec<String> = self.modules.iter().map(name).collect();
        let mut set = names.clone();
        set.sort();
        set.dedup();
        if set.len() < names.len() {
            // A tangle, not one loop: its members, the uses below.
            return format!("{} modules in one tangle: {}", set.len(), set.join(", "));
        }
        names.push(name(&self.modules[0]));
        names.join(" -> ")
    }
}

/// The lifted edge of one use, or None for a use between a module and its
/// ancestor.
fn lift(u: &Use) -> Option<(ModPath, ModPath)> {
    let k = u.from.iter().zip(&u.to).take_while(|(a, b)| a == b).count();
    if k == u.from.len() || k == u.to.len() {
        return None;
    }
    Some((u.from[..=k].to_vec(), u.to[..=k].to_vec()))
}

/// Every cycle among sibling modules, each as one loop through all of its
/// strongly connected set.
pub fn cycles(uses: &[Use]) -> Vec<Cycle> {
    let mut edges: BTreeMap<(ModPath, ModPath), Vec<&Use>> = BTreeMap::new();
    for u in uses {
        if let Some(e) = lift(u) {
            edges.entry(e).or_default().push(u);
        }
    }
    let mut graph: BTreeMap<ModPath, Vec<ModPath>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        graph.entry(a.clone()).or_default().push(b.clone());
        graph.entry(b.clone()).or_default();
    }
    let mut out = Vec::new();
    for scc in strongly_connected(&graph) {
        if scc.len() < 2 {
            continue;
        }
        let order = loop_through(&scc, &graph);
        let mut evidence = Vec::new();
        for w in 0..order.len() {
            let (a, b) = (&order[w], &order[(w + 1) % order.len()]);
            for u in edges[&(a.clone(), b.clone())].iter().take(3) {
                evidence.push(format!(
                    "{}:{}: {} uses {} ({})",
                    u.file.display(),
                    u.line,
                    a.join("::"),
                    b.join("::"),
                    u.item
                ));
            }
        }
        out.push(Cycle {
            modules: order,
            evidence,
        });
    }
    out
}

/// Tarjan's strongly connected components of `graph`.
fn strongly_connected(graph: &BTreeMap<ModPath, Vec<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'g> {
        graph: &'g BTreeMap<ModPath, Vec<ModPath>>,
        index: BTreeMap<&'g ModPath, usize>,
        low: BTreeMap<&'g ModPath, usize>,
        stack: Vec<&'g ModPath>,
        on_stack: BTreeMap<&'g ModPath, bool>,
        next: usize,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g ModPath) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v, true);
        for w in &s.graph[v] {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.get(w).copied().unwrap_or(false) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.insert(w, false);
                scc.push(w.clone());
                if w == v {
                    break;
                }
            }
            scc.sort();
            s.out.push(scc);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeMap::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

/// A closed walk from the set's first module that visits every module of
/// the strongly connected set `scc` (shortest hops between them), without
/// its closing step.
fn loop_through(scc: &[ModPath], graph: &BTreeMap<ModPath, Vec<ModPath>>) -> Vec<ModPath> {
    let inside = |m: &ModPath| scc.contains(m);
    let path = |from: &ModPath, to: &ModPath| -> Vec<ModPath> {
        // Breadth-first inside the set; `to` is reachable (same set).
        let mut prev: BTreeMap<ModPath, ModPath> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([from.clone()]);
        while let Some(v) = queue.pop_front() {
            for w in graph[&v].iter().filter(|w| inside(w)) {
                if !prev.contains_key(w) && w != from {
                    prev.insert(w.clone(), v.clone());
                    queue.push_back(w.clone());
                }
            }
            if prev.contains_key(to) {
                break;
            }
        }
        let mut walk = vec![to.clone()];
        while let Some(p) = prev.get(walk.last().expect("non-empty")) {
            if p == from {
                break;
            }
            walk.push(p.clone());
        }
        walk.reverse();
        walk
    };
    let mut order = vec![scc[0].clone()];
    for target in scc.iter().skip(1) {
        if order.contains(target) {
            continue;
        }
        let here = order.last().expect("non-empty").clone();
        order.extend(path(&here, target));
    }
    let here = order.last().expect("non-empty").clone();
    let mut back = path(&here, &scc[0]);
    back.pop();
    order.extend(back);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(from: &str, to: &str) -> Use {
        let p = |s: &str| -> ModPath {
            s.split("::")
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect()
        };
        Use {
            from: p(from),
            to: p(to),
            item: to.to_string(),
            file: "f.rs".into(),
            line: 1,
        }
    }

    #[test]
    fn uses_lift_to_siblings_and_ancestors_do_not_count() {
        assert_eq!(
            lift(&u("model::step", "placement::table")).unwrap().1,
            vec!["placement".to_string()]
        );
        assert!(lift(&u("cpu::kv", "cpu")).is_none());
        assert!(lift(&u("cpu", "cpu::kv")).is_none());
        assert!(cycles(&[u("cpu::kv", "cpu"), u("cpu", "cpu::kv")]).is_empty());
    }

    #[test]
    fn a_loop_of_three_is_one_cycle_through_all_three() {
        let c = cycles(&[u("a", "b::x"), u("b", "c"), u("c::y", "a"), u("a", "d")]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].describe("k"), "k::a -> k::b -> k::c -> k::a");
        assert_eq!(c[0].evidence.len(), 3);
    }

    #[test]
    fn a_cycle_deep_in_the_tree_is_named_there() {
        let c = cycles(&[
            u("v::backend::op_a", "v::backend::op_b"),
            u("v::backend::op_b::inner", "v::backend::op_a"),
        ]);
        assert_eq!(c.len(), 1);
        assert_eq!(
            c[0].describe("e"),
            "e::v::backend::op_a -> e::v::backend::op_b -> e::v::backend::op_a"
        );
    }

    #[test]
    fn a_dag_has_no_cycle() {
        assert!(cycles(&[u("a", "b"), u("b", "c"), u("a", "c")]).is_empty());
    }
}
