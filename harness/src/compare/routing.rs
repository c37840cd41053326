//! Routing near-ties of a mixture of experts.
//!
//! A router that ranks two experts within rounding of each other (the 8th
//! and 9th of 32, say) chooses between them by rounding, as a near-tie of
//! the logits chooses the next token. The two choices then compute
//! different experts: from that layer on, the position's tensors differ by
//! far more than rounding (measured on the synthetic Qwen3-MoE: one such
//! choice moves `ffn_moe_out` by NMSE ~5e-2 and the next layer routes
//! differently), as a greedy continuation differs after a near-tie token.
//! So, as greedy stops at a near-tie, a position's tap comparison stops at
//! its first routing near-tie: from the routed tensors of that layer
//! (`ffn_moe_topk` .. `ffn_moe_out`, `l_out`) on, the position is left
//! out, and listed. Positions whose experts differ without a near-tie stay
//! in, and fail their taps. Logits, KLD and top-1 still see every
//! position (with their own near-tie rule).

use std::collections::HashMap;

use super::sink::OurTap;

/// Two router probabilities of the reference closer than this (relative to
/// the larger) are a near-tie; so are two whose gap is within our own
/// probabilities' distance from the reference's at those two experts (the
/// GPU's router, on f32 activations, is ~5e-3 off llama.cpp's, so it
/// reorders experts up to about that far apart; the CPU's, quantizing as
/// llama.cpp does, reordered experts 2.5e-4..8.5e-4 apart).
pub const ROUTING_TIE: f64 = 1e-3;

/// Our taps of a layer computed from its routing, in graph order.
const AFTER_ROUTING: [&str; 12] = [
    "ffn_moe_topk",
    "ffn_moe_weights",
    "ffn_moe_weights_norm",
    "ffn_moe_up",
    "ffn_moe_gate",
    "ffn_moe_swiglu",
    "ffn_moe_geglu",
    "ffn_moe_down",
    "ffn_moe_weighted",
    "ffn_moe_out",
    "ffn_out",
    "l_out",
];

/// Rows of a tap by position.
pub type Rows = HashMap<usize, Vec<f32>>;

/// Where each position's comparison stops.
#[derive(Clone, Debug, Default)]
pub struct Routing {
    /// Position -> the first layer where it was routed differently at a
    /// near-tie.
    cut: HashMap<usize, usize>,
    /// One line per such choice.
    pub notes: Vec<String>,
}

impl Routing {
    /// Compares our `ffn_moe_topk` taps with the reference's, judging each
    /// difference on the reference's `ffn_moe_probs`. `reference(name,
    /// layer)` gives the reference's rows of a tap by position.
    pub fn find(ours: &[OurTap], reference: impl Fn(&str, usize) -> Option<Rows>) -> Routing {
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
                let (Some(ours), Some(theirs), Some(pr)) =
                    (tap.rows.get(&p), ids.get(&p), probs.get(&p))
                else {
                    continue;
                };
                for (j, (&o, &t)) in ours.iter().zip(theirs).enumerate() {
                    let (o, t) = (o as usize, t as usize);
                    if o == t || o >= pr.len() || t >= pr.len() {
                        continue;
                    }
                    let (po, pt) = (f64::from(pr[o]), f64::from(pr[t]));
                    // Our own probabilities' distance from the reference's
                    // at the two experts: a gap smaller than that is one
                    // our rounding can reorder.
                    let ours_off = our_probs
                        .and_then(|q| q.rows.get(&p))
                        .filter(|q| q.len() == pr.len())
                        .map_or(0.0, |q| {
                            (f64::from(q[o]) - po).abs() + (f64::from(q[t]) - pt).abs()
                        });
                    let gap = (po - pt).abs();
                    if gap <= ROUTING_TIE * po.max(pt) || gap <= ours_off {
                        r.cut.insert(p, l);
                        r.notes.push(format!(
                            "layer {l} position {p} slot {j}: expert {o} for {t} (probabilities {po:.6e} \
                             and {pt:.6e}); position left out from there"
                        ));
                        break;
                    }
                }
            }
        }
        r
    }

    /// Whether position `p` of our tap `name` in `layer` is compared.
    pub fn keeps(&self, name: &str, layer: Option<usize>, p: usize) -> bool {
        match (self.cut.get(&p), layer) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(&cut), Some(l)) => l < cut || (l == cut && !AFTER_ROUTING.contains(&name)),
        }
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

    #[test]
    fn a_near_tie_cuts_the_position_from_its_routed_tensors_on() {
        let mut ours = vec![tap(
            "ffn_moe_topk",
            1,
            &[(0, vec![0.0, 2.0]), (1, vec![1.0, 0.0])],
        )];
        let reference = |name: &str, _l: usize| -> Option<Rows> {
            Some(match name {
                // Position 0 chose 1 where we chose 2 (0.3000 vs 0.2999: a
                // near-tie); position 1 chose 2 where we chose 0 (0.5 vs 0.2).
                "ffn_moe_topk" => Rows::from([(0, vec![0.0, 1.0]), (1, vec![1.0, 2.0])]),
                _ => Rows::from([(0, vec![0.4, 0.3, 0.2999]), (1, vec![0.2, 0.3, 0.5])]),
            })
        };
        let r = Routing::find(&ours, reference);
        assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
        assert!(r.keeps("ffn_moe_probs", Some(1), 0));
        assert!(!r.keeps("ffn_moe_topk", Some(1), 0));
        assert!(!r.keeps("ffn_moe_out", Some(1), 0));
        assert!(!r.keeps("attn_norm", Some(2), 0));
        assert!(!r.keeps("result_output", None, 0));
        assert!(r.keeps("l_out", Some(0), 0));
        // Not a near-tie: compared (and failing) as it is.
        assert!(r.keeps("ffn_moe_out", Some(1), 1));
        assert!(r.keeps("result_output", None, 1));
        // With our probabilities 0.45 / 0.3 at position 1, the reference's
        // 0.5 / 0.2 is within our error: a near-tie too.
        ours.push(tap(
            "ffn_moe_probs",
            1,
            &[(0, vec![0.4, 0.3, 0.2999]), (1, vec![0.45, 0.3, 0.25])],
        ));
        let r = Routing::find(&ours, reference);
        assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
        assert!(!r.keeps("ffn_moe_out", Some(1), 1));
    }
}
