//! The decode fusions a comparison run may turn off (`sharpi --unfuse`,
//! [`VulkanOptions::unfused`](super::super::VulkanOptions)): any rule of
//! [`RULES`] by its name, and `subgroups` (the fused matvecs'
//! subgroup-shuffle twins). Each rule computes the same bits as the
//! dispatches it replaces, so turning one off changes the speed, never the
//! results.

use std::fmt;
use std::str::FromStr;

use super::{Rule, RULES};

/// Which decode fusions are off (all on by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unfused {
    /// Bit `r as usize`: rule `r` off.
    rules: u32,
    /// `subgroups`: the fused matvecs' subgroup-shuffle twins.
    pub subgroups: bool,
}

const _: () = assert!(RULES.len() <= 32);

impl Unfused {
    /// Whether `rule` is off.
    pub fn is_off(&self, rule: Rule) -> bool {
        self.rules & (1 << rule as u32) != 0
    }

    /// Turns `rule` off (`off`) or on.
    pub fn set(&mut self, rule: Rule, off: bool) {
        if off {
            self.rules |= 1 << rule as u32;
        } else {
            self.rules &= !(1 << rule as u32);
        }
    }

    /// The names `--unfuse` takes, comma-separated: the rules', then
    /// `subgroups`.
    pub fn names() -> String {
        let mut names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
        names.push("subgroups");
        names.join(", ")
    }
}

impl FromStr for Unfused {
    type Err = String;

    /// A comma-separated list of [`Unfused::names`].
    fn from_str(s: &str) -> Result<Unfused, String> {
        let mut u = Unfused::default();
        for name in s.split(',').map(str::trim) {
            if name == "subgroups" {
                u.subgroups = true;
                continue;
            }
            let Some(r) = RULES.iter().find(|r| r.name == name) else {
                let names = Unfused::names();
                return Err(format!("unknown fusion {name:?} (expected {names})"));
            };
            u.set(r.rule, true);
        }
        Ok(u)
    }
}

impl fmt::Display for Unfused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = RULES
            .iter()
            .filter(|r| self.is_off(r.rule))
            .map(|r| r.name)
            .collect();
        if self.subgroups {
            names.push("subgroups");
        }
        f.write_str(&names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_back() {
        let u: Unfused = "qkv, ffn".parse().unwrap();
        assert!(u.is_off(Rule::Qkv) && u.is_off(Rule::Ffn) && !u.is_off(Rule::Matvec));
        assert!(!u.subgroups);
        assert_eq!(u.to_string(), "qkv,ffn");
        let all: Unfused = Unfused::names().parse().unwrap();
        assert!(RULES.iter().all(|r| all.is_off(r.rule)) && all.subgroups);
        assert_eq!(all.to_string().split(',').count(), RULES.len() + 1);
        let e = "ffn,rope".parse::<Unfused>().unwrap_err();
        assert!(e.contains("\"rope\"") && e.contains("norm-rope-kv"), "{e}");
    }
}
