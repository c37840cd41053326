//! Routing near-ties of a mixture of experts.
//!
//! Two experts whose router probabilities are within rounding of each
//! other (the 8th and 9th of 32, say) are ordered by rounding: a path that
//! computes the router's input a little differently (the GPU, on f32
//! activations) may rank them the other way round, as a near-tie of the
//! logits may pick another next token. Where both paths pick the same
//! experts in another slot order, nothing downstream changes beyond
//! rounding; where the near-tie decides which expert is chosen at all, the
//! two compute different experts, and from that layer's sum on the
//! position's tensors differ by far more than rounding (measured on the
//! synthetic Qwen3-MoE: one such choice moves `ffn_moe_out` by NMSE ~5e-2
//! and the next layer routes differently).
//!
//! [`Routing::find`] compares our `ffn_moe_topk` with the reference's at
//! every position and layer they both hold. A difference is accepted only
//! when
//!
//! 1. our top-k is the top-k of our own probabilities (`ffn_moe_probs`) in
//!    llama.cpp's order ([`engine::cpu::argsort_desc`], libstdc++'s
//!    `std::sort`): a top-k that orders or picks experts other than its
//!    own probabilities say (exact ties broken the other way, say) is a
//!    fault, never a near-tie; and
//! 2. where the two chose other experts, the choice is a near-tie in the
//!    *reference's* probabilities: every expert only it chose is at most
//!    the path's `routing_tie` (`ci/thresholds.toml`, calibrated per model
//!    and path) more probable than every expert only we chose, or within
//!    [`ROUTING_TIE`] of it, relative. How far our own router is from the
//!    reference does not widen this.
//!
//! The same experts in another order need no bound: nothing is left out for
//! them (below), so every value is still compared, and a router far off
//! fails its own taps (`ffn_moe_logits`, `ffn_moe_probs`, and
//! `ffn_moe_weights` expert by expert).
//!
//! What an accepted difference leaves out ([`Routing::select`]), at that
//! position only:
//!
//! - the same experts in another slot order: nothing. The taps holding a
//!   block per slot (`ffn_moe_topk` .. `ffn_moe_weighted`, [`PER_SLOT`])
//!   are compared with our slots put in the reference's order, matched by
//!   expert id; the sum over the slots (`ffn_moe_out`) and everything
//!   after it are compared as they are (the slots are added in another
//!   order: a rounding difference).
//! - other experts chosen: in that layer, the slots of the experts only one
//!   side chose (the other slots compared matched by expert id),
//!   `ffn_moe_weights_norm` (divided by the chosen set's sum) and the
//!   taps after the sum (`ffn_moe_out`, `ffn_out`, `l_out`,
//!   [`FROM_SET`]); in every later layer, and in the output taps
//!   (`result_norm`, `result_output`), the position. Other positions
//!   stay compared; the position's routing decisions of later layers are
//!   not judged. The layer's taps before the routing (`ffn_moe_logits`,
//!   `ffn_moe_probs`, ...) are always compared.
//!
//! A difference refused as a near-tie is compared as it is (and fails
//! `ffn_moe_topk`, held to 0). Logits, KLD and top-1 still see every
//! position (with their own near-tie rule). Every routing difference is
//! listed in the report (`routing_near_ties`), with its gap.

use std::borrow::Cow;
use std::collections::HashMap;

use super::sink::OurTap;

/// Two router probabilities of the reference within this fraction of the
/// larger are a near-tie whatever the path (the CPU path, quantizing as
/// llama.cpp does, reordered experts 2.5e-4..8.5e-4 apart, relative).
pub const ROUTING_TIE: f64 = 1e-3;

/// Our taps of a layer that hold one block per chosen expert (slot), in
/// the order of `ffn_moe_topk`.
pub const PER_SLOT: [&str; 9] = [
    "ffn_moe_topk",
    "ffn_moe_weights",
    "ffn_moe_weights_norm",
    "ffn_moe_up",
    "ffn_moe_gate",
    "ffn_moe_swiglu",
    "ffn_moe_geglu",
    "ffn_moe_down",
    "ffn_moe_weighted",
];

/// Our taps of a layer computed from the chosen experts as a set: left out
/// in the layer where a near-tie chose other experts.
pub const FROM_SET: [&str; 4] = ["ffn_moe_weights_norm", "ffn_moe_out", "ffn_out", "l_out"];

/// Rows of a tap by position.
pub type Rows = HashMap<usize, Vec<f32>>;

/// What of a row pair is compared: (the reference's values, ours).
pub type Compared<'a> = (Cow<'a, [f32]>, Cow<'a, [f32]>);

/// How one position's routing in one layer differs at a near-tie.
#[derive(Clone, Debug, PartialEq)]
enum Choice {
    /// The same experts: `ours[j]` is our slot holding the reference's
    /// slot `j`'s expert.
    Reordered { ours: Vec<usize> },
    /// Other experts: (reference slot, our slot) of each expert both chose.
    Changed {
        shared: Vec<(usize, usize)>,
        k: usize,
    },
}

/// Where each position's comparison is narrowed by a routing near-tie.
#[derive(Clone, Debug, Default)]
pub struct Routing {
    /// (layer, position) -> the near-tie there.
    choices: HashMap<(usize, usize), Choice>,
    /// Position -> the layer where a near-tie chose other experts.
    cut: HashMap<usize, usize>,
    /// One line per routing difference: accepted (and what it leaves out)
    /// or refused (and why).
    pub notes: Vec<String>,
    /// The largest gap of the accepted choices of other experts.
    pub set_gap: Option<f64>,
}

/// Why our top-k `ours` is not the top-k of our own probabilities `q` in
/// llama.cpp's order, or None when it is.
fn inconsistent(ours: &[usize], q: Option<&[f32]>, n: usize) -> Option<String> {
    let k = ours.len();
    let Some(q) = q.filter(|q| q.len() == n) else {
        return Some("our ffn_moe_probs are missing".into());
    };
    let own: Vec<usize> = engine::cpu::argsort_desc(q)[..k]
        .iter()
        .map(|&e| e as usize)
        .collect();
    (own != ours)
        .then(|| format!("not the top-{k} of our own probabilities in llama.cpp's order, {own:?}"))
}

/// The gap of a choice of other experts in the reference's probabilities
/// `pr`: how much more probable the likeliest expert only it chose
/// (`theirs`) is than the least likely one only we chose (`ours`).
fn set_gap(ours: &[usize], theirs: &[usize], pr: &[f32]) -> (f64, f64) {
    let p = |e: &usize| f64::from(pr[*e]);
    let top = theirs.iter().map(p).fold(f64::NEG_INFINITY, f64::max);
    let low = ours.iter().map(p).fold(f64::INFINITY, f64::min);
    (top - low, top)
}

/// The largest gap in `pr` between two experts the two orders put in the
/// same slot.
fn order_gap(ours: &[usize], theirs: &[usize], pr: &[f32]) -> f64 {
    ours.iter()
        .zip(theirs)
        .map(|(&o, &t)| (f64::from(pr[o]) - f64::from(pr[t])).abs())
        .fold(0.0, f64::max)
}

impl Routing {
    /// Compares our `ffn_moe_topk` taps with the reference's, judging each
    /// difference as the module says; `routing_tie` is the path's
    /// absolute bound. `reference(name, layer)` gives the reference's rows
    /// of a tap by position.
    pub fn find(
        ours: &[OurTap],
        reference: impl Fn(&str, usize) -> Option<Rows>,
        routing_tie: f64,
    ) -> Routing {
        let mut r = Routing::default();
        let mut topk: Vec<&OurTap> = ours
            .iter()
            .filter(|t| t.name == "ffn_moe_topk" && t.layer.is_some())
            .collect();
        topk.sort_by_key(|t| t.layer);
        for tap in topk {
            let l = tap.layer.expect("filtered");
            let our_probs = ours
                .iter()
                .find(|t| t.name == "ffn_moe_probs" && t.layer == Some(l));
            let (Some(ids), Some(probs)) =
                (reference("ffn_moe_topk", l), reference("ffn_moe_probs", l))
            else {
                continue;
            };
            let mut positions: Vec<usize> = tap.rows.keys().copied().collect();
            positions.sort_unstable();
            for p in positions {
                if r.cut.contains_key(&p) {
                    continue;
                }
                let (Some(o), Some(t), Some(pr)) = (tap.rows.get(&p), ids.get(&p), probs.get(&p))
                else {
                    continue;
                };
                let as_ids = |v: &[f32]| v.iter().map(|&x| x as usize).collect::<Vec<usize>>();
                let (o, t) = (as_ids(o), as_ids(t));
                if o == t || o.len() != t.len() || o.iter().chain(&t).any(|&e| e >= pr.len()) {
                    continue;
                }
                let at =
                    format!("layer {l} position {p}: experts {o:?} where the reference has {t:?}");
                let q = our_probs.and_then(|q| q.rows.get(&p)).map(Vec::as_slice);
                if let Some(why) = inconsistent(&o, q, pr.len()) {
                    r.notes.push(format!("{at}: {why}; compared as it is"));
                    continue;
                }
                let slot_of = |e: usize| o.iter().position(|&x| x == e);
                let only_ours: Vec<usize> = o.iter().copied().filter(|e| !t.contains(e)).collect();
                let only_theirs: Vec<usize> =
                    t.iter().copied().filter(|e| !o.contains(e)).collect();
                if only_ours.is_empty() {
                    let gap = order_gap(&o, &t, pr);
                    let ours = t.iter().map(|&e| slot_of(e).expect("same set")).collect();
                    r.choices.insert((l, p), Choice::Reordered { ours });
                    r.notes.push(format!(
                        "{at}: the same experts in another order (largest gap {gap:.2e} in the \
                         reference's probabilities); slots compared by expert, nothing left out"
                    ));
                    continue;
                }
                let (gap, top) = set_gap(&only_ours, &only_theirs, pr);
                if gap > ROUTING_TIE * top && gap > routing_tie {
                    r.notes.push(format!(
                        "{at}: not a near-tie: the reference's probabilities of {only_theirs:?} \
                         exceed those of {only_ours:?} by {gap:.2e} (routing_tie {routing_tie:.0e}, \
                         or {ROUTING_TIE:.0e} of the larger); compared as it is"
                    ));
                    continue;
                }
                let shared: Vec<(usize, usize)> = t
                    .iter()
                    .enumerate()
                    .filter_map(|(j, &e)| slot_of(e).map(|i| (j, i)))
                    .collect();
                r.choices
                    .insert((l, p), Choice::Changed { shared, k: o.len() });
                r.cut.insert(p, l);
                r.set_gap = Some(r.set_gap.map_or(gap, |g| g.max(gap)));
                r.notes.push(format!(
                    "{at}: {only_ours:?} for {only_theirs:?} at a near-tie (gap {gap:.2e}); left out: \
                     their slots, ffn_moe_weights_norm and ffn_moe_out..l_out of layer {l}, the \
                     position in later layers and the output"
                ));
            }
        }
        r
    }

    /// What of our row `ours` and the reference's row `theirs` of tap
    /// `name` in `layer` at position `p` is compared, as (reference, ours);
    /// None when the position is left out of this tap.
    pub fn select<'a>(
        &self,
        name: &str,
        layer: Option<usize>,
        p: usize,
        theirs: &'a [f32],
        ours: &'a [f32],
    ) -> Option<Compared<'a>> {
        let whole = Some((Cow::Borrowed(theirs), Cow::Borrowed(ours)));
        if let Some(&cut) = self.cut.get(&p) {
            match layer {
                None => return None,
                Some(l) if l > cut => return None,
                Some(l) if l == cut && FROM_SET.contains(&name) => return None,
                _ => {}
            }
        }
        let Some(choice) = layer.and_then(|l| self.choices.get(&(l, p))) else {
            return whole;
        };
        if !PER_SLOT.contains(&name) || ours.len() != theirs.len() {
            return whole;
        }
        let pairs: Vec<(usize, usize)> = match choice {
            Choice::Reordered { ours } => ours.iter().copied().enumerate().collect(),
            Choice::Changed { shared, .. } => shared.clone(),
        };
        let k = match choice {
            Choice::Reordered { ours } => ours.len(),
            Choice::Changed { k, .. } => *k,
        };
        if k == 0 || !theirs.len().is_multiple_of(k) {
            return whole;
        }
        let w = theirs.len() / k;
        let (mut want, mut got) = (Vec::new(), Vec::new());
        for (j, i) in pairs {
            want.extend_from_slice(&theirs[j * w..(j + 1) * w]);
            got.extend_from_slice(&ours[i * w..(i + 1) * w]);
        }
        Some((Cow::Owned(want), Cow::Owned(got)))
    }

    /// How many positions a near-tie cut from a layer on.
    pub fn cut_positions(&self) -> usize {
        self.cut.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tap(name: &str, layer: usize, rows: &[(usize, Vec<f32>)]) -> OurTap {
        OurTap {
            name: name.into(),
            layer: Some(layer),
            width: rows[0].1.len(),
            rows: rows.iter().cloned().collect(),
        }
    }

    type Row = (usize, Vec<f32>);

    /// Reference rows: ids and probabilities of one position per entry.
    fn reference(ids: Vec<Row>, probs: Vec<Row>) -> impl Fn(&str, usize) -> Option<Rows> {
        move |name: &str, _l: usize| -> Option<Rows> {
            Some(match name {
                "ffn_moe_topk" => ids.iter().cloned().collect(),
                "ffn_moe_probs" => probs.iter().cloned().collect(),
                _ => return None,
            })
        }
    }

    fn ours(ids: Vec<Row>, probs: Vec<Row>) -> Vec<OurTap> {
        vec![
            tap("ffn_moe_probs", 1, &probs),
            tap("ffn_moe_topk", 1, &ids),
        ]
    }

    fn kept(r: &Routing, name: &str, layer: Option<usize>, p: usize) -> bool {
        r.select(name, layer, p, &[0.0, 1.0], &[0.0, 1.0]).is_some()
    }

    #[test]
    fn the_same_experts_in_another_order_leave_nothing_out() {
        // Experts 1 and 2 at 0.3 and 0.25 in the reference; our router
        // (far off) ranks 2 first: no bound applies, every value is still
        // compared, slot by expert.
        let probs = vec![0.4, 0.3, 0.25, 0.05];
        let our_probs = vec![0.4, 0.2, 0.35, 0.05];
        let r = Routing::find(
            &ours(vec![(0, vec![0.0, 2.0, 1.0])], vec![(0, our_probs)]),
            reference(vec![(0, vec![0.0, 1.0, 2.0])], vec![(0, probs)]),
            0.0,
        );
        assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
        assert!(r.notes[0].contains("nothing left out"), "{}", r.notes[0]);
        for name in ["ffn_moe_out", "l_out", "attn_norm"] {
            assert!(kept(&r, name, Some(1), 0) && kept(&r, name, Some(2), 0));
        }
        assert!(kept(&r, "result_output", None, 0));
        // Per-slot taps: our slots in the reference's order.
        let (want, got) = r
            .select(
                "ffn_moe_up",
                Some(1),
                0,
                &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0],
                &[1.0, 1.0, 3.0, 3.0, 2.0, 2.0],
            )
            .unwrap();
        assert_eq!(want, got);
        let (want, got) = r
            .select(
                "ffn_moe_weights",
                Some(1),
                0,
                &[0.4, 0.3, 0.25],
                &[0.4, 0.35, 0.2],
            )
            .unwrap();
        assert_eq!(
            (&*want, &*got),
            (&[0.4, 0.3, 0.25][..], &[0.4, 0.2, 0.35][..])
        );
        assert_eq!((r.cut_positions(), r.set_gap), (0, None));
    }

    #[test]
    fn other_experts_at_a_near_tie_cut_exactly_what_they_feed() {
        // Position 0: we choose 3 where the reference chose 2 (0.2999 vs
        // 0.2998, within ROUTING_TIE); position 1 agrees.
        let probs = vec![0.4, 0.3, 0.2999, 0.2998];
        let our_probs = vec![0.4, 0.3, 0.2997, 0.2998];
        let r = Routing::find(
            &ours(
                vec![(0, vec![0.0, 1.0, 3.0]), (1, vec![0.0, 1.0, 2.0])],
                vec![(0, our_probs), (1, probs.clone())],
            ),
            reference(
                vec![(0, vec![0.0, 1.0, 2.0]), (1, vec![0.0, 1.0, 2.0])],
                vec![(0, probs.clone()), (1, probs)],
            ),
            0.0,
        );
        assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
        assert!(r.notes[0].contains("[3] for [2]"), "{}", r.notes[0]);
        // Before the routing, and in earlier layers: compared.
        assert!(kept(&r, "ffn_moe_probs", Some(1), 0));
        assert!(kept(&r, "l_out", Some(0), 0));
        // The shared slots of the per-slot taps: compared; slot 2 left out.
        let (want, got) = r
            .select(
                "ffn_moe_down",
                Some(1),
                0,
                &[1.0, 2.0, 3.0],
                &[1.0, 2.0, 9.0],
            )
            .unwrap();
        assert_eq!((&*want, &*got), (&[1.0, 2.0][..], &[1.0, 2.0][..]));
        // The set's sum and what follows: left out, in this layer and later.
        for name in ["ffn_moe_weights_norm", "ffn_moe_out", "ffn_out", "l_out"] {
            assert!(!kept(&r, name, Some(1), 0), "{name}");
        }
        assert!(!kept(&r, "attn_norm", Some(2), 0));
        assert!(!kept(&r, "result_output", None, 0));
        // The other position: all of it.
        assert!(kept(&r, "ffn_moe_out", Some(1), 1));
        assert!(kept(&r, "result_output", None, 1));
        assert_eq!(r.cut_positions(), 1);
        assert!((r.set_gap.unwrap() - 1e-4).abs() < 1e-6);
    }

    #[test]
    fn a_grossly_different_routing_is_no_near_tie_however_far_our_router_is() {
        // The reference chose expert 1 (0.695) where we chose 2 (0.014):
        // our own probabilities say 2 (our router is far off), but in the
        // reference's that is no tie, even with a loose routing_tie.
        let probs = vec![0.2, 0.695, 0.014, 0.091];
        let our_probs = vec![0.2, 0.01, 0.7, 0.09];
        let r = Routing::find(
            &ours(vec![(0, vec![2.0, 0.0])], vec![(0, our_probs)]),
            reference(vec![(0, vec![1.0, 0.0])], vec![(0, probs)]),
            0.2,
        );
        assert_eq!(r.notes.len(), 1);
        assert!(r.notes[0].contains("not a near-tie"), "{}", r.notes[0]);
        let (want, got) = r
            .select("ffn_moe_topk", Some(1), 0, &[1.0, 0.0], &[2.0, 0.0])
            .unwrap();
        assert_ne!(want, got);
        assert!(kept(&r, "l_out", Some(2), 0));
        assert_eq!(r.set_gap, None);
    }

    #[test]
    fn exact_ties_broken_against_our_own_probabilities_are_a_fault() {
        // Experts 1 and 3 tie exactly on both sides; llama.cpp's order of
        // our own probabilities puts 1 first, we put 3 first.
        let probs = vec![0.1, 0.35, 0.2, 0.35];
        let r = Routing::find(
            &ours(vec![(0, vec![3.0, 1.0])], vec![(0, probs.clone())]),
            reference(vec![(0, vec![1.0, 3.0])], vec![(0, probs.clone())]),
            1.0,
        );
        assert_eq!(r.notes.len(), 1);
        assert!(r.notes[0].contains("own probabilities"), "{}", r.notes[0]);
        let (want, got) = r
            .select("ffn_moe_topk", Some(1), 0, &[1.0, 3.0], &[3.0, 1.0])
            .unwrap();
        assert_ne!(want, got);
        // The same tie in llama.cpp's order: nothing to judge.
        let r = Routing::find(
            &ours(vec![(0, vec![1.0, 3.0])], vec![(0, probs.clone())]),
            reference(vec![(0, vec![1.0, 3.0])], vec![(0, probs)]),
            1.0,
        );
        assert!(r.notes.is_empty());
    }

    #[test]
    fn the_relative_and_the_absolute_bound() {
        // The reference chose expert 1 (p1) over 2 (p2); we chose 2.
        let judge = |p1: f32, p2: f32, routing_tie: f64| {
            let pr = vec![0.5, p1, p2];
            let q = vec![0.5, p2, p1];
            Routing::find(
                &ours(vec![(0, vec![0.0, 2.0])], vec![(0, q)]),
                reference(vec![(0, vec![0.0, 1.0])], vec![(0, pr)]),
                routing_tie,
            )
            .set_gap
            .is_some()
        };
        // Within 1e-3 of the larger: a near-tie on any path.
        assert!(judge(0.3, 0.29975, 0.0));
        assert!(!judge(0.3, 0.2996, 0.0));
        // Beyond it: as far as the path's routing_tie.
        assert!(judge(0.3, 0.2996, 5e-4));
        assert!(judge(0.01, 0.0085, 2e-3));
        assert!(!judge(0.01, 0.0075, 2e-3));
    }
}
