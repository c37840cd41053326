//! The decode fusions a comparison run may turn off (`sharpi --unfuse`,
//! [`VulkanOptions::unfused`](super::VulkanOptions)): each computes the
//! same bits as the dispatches it replaces, so turning one off changes
//! the speed, never the results.

use std::fmt;
use std::str::FromStr;

/// Which decode fusions are off (all on by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unfused {
    /// `matvec`: every decode matvec fusion (`op_matvec_fused.rs` and all
    /// that builds on it).
    pub matvec: bool,
    /// `qkv`: a layer's Q, K and V in one dispatch (`op_matvec_multi.rs`).
    pub qkv: bool,
    /// `ffn`: a feed-forward block in one dispatch (`op_matvec_ffn.rs`).
    pub ffn: bool,
    /// `oproj`: the attention's output projection in the attention's
    /// dispatch (`op_attention_oproj.rs`).
    pub oproj: bool,
    /// `subgroups`: the fused matvecs' subgroup-shuffle twins.
    pub subgroups: bool,
}

/// The names `--unfuse` takes.
pub const NAMES: &str = "matvec, qkv, ffn, oproj, subgroups";

impl FromStr for Unfused {
    type Err = String;

    /// A comma-separated list of [`NAMES`].
    fn from_str(s: &str) -> Result<Unfused, String> {
        let mut u = Unfused::default();
        for name in s.split(',').map(str::trim) {
            let flag = match name {
                "matvec" => &mut u.matvec,
                "qkv" => &mut u.qkv,
                "ffn" => &mut u.ffn,
                "oproj" => &mut u.oproj,
                "subgroups" => &mut u.subgroups,
                _ => return Err(format!("unknown fusion {name:?} (expected {NAMES})")),
            };
            *flag = true;
        }
        Ok(u)
    }
}

impl fmt::Display for Unfused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = [
            (self.matvec, "matvec"),
            (self.qkv, "qkv"),
            (self.ffn, "ffn"),
            (self.oproj, "oproj"),
            (self.subgroups, "subgroups"),
        ];
        let names: Vec<&str> = on.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
        f.write_str(&names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_back() {
        let u: Unfused = "qkv, ffn".parse().unwrap();
        assert_eq!(
            u,
            Unfused {
                qkv: true,
                ffn: true,
                ..Unfused::default()
            }
        );
        assert_eq!(u.to_string(), "qkv,ffn");
        let all: Unfused = NAMES.parse().unwrap();
        assert!(all.matvec && all.qkv && all.ffn && all.oproj && all.subgroups);
        let e = "ffn,rope".parse::<Unfused>().unwrap_err();
        assert!(e.contains("\"rope\""), "{e}");
    }
}
