//! The registry of the checks: what [`registry!`] writes from the list in
//! [`super`] (every check, one line each beside its `mod` line, in the
//! order a report writes them: the [`CheckResult`] of each, the list
//! [`ALL`] of what it keeps of each) and the list of results a report
//! holds ([`Checks`]), written to JSON as one key per check (`null`, or
//! left out, where a check did not run, as [`Check::NULL_WHEN_ABSENT`]
//! says).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::calibration::Drafted;
use super::tolerance::Figure;
use super::{Check, CheckResult, Level, LimitsEntry, ALL};

/// What the registry keeps of a check (its [`Check`] constants and its
/// calibration rule).
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub key: &'static str,
    pub level: Level,
    pub null_when_absent: bool,
    pub failures: &'static [&'static str],
    pub limit_keys: &'static [&'static str],
    pub figures: &'static [Figure],
    /// [`Check::calibrate`].
    pub calibrate: fn(&LimitsEntry) -> Result<Vec<Drafted>, String>,
}

/// The figure `--baseline` compares under `name` ([`Check::FIGURES`]).
pub fn figure(name: &str) -> Option<Figure> {
    ALL.iter()
        .flat_map(|e| e.figures)
        .find(|f| f.name == name)
        .copied()
}

/// The names of the failures of the checks at `level`, in report order
/// (JUnit's cases).
pub fn failure_names(level: Level) -> impl Iterator<Item = &'static str> {
    ALL.iter()
        .filter(move |e| e.level == level)
        .flat_map(|e| e.failures.iter().copied())
}

/// A check's place in the registry: written by [`registry!`] for each
/// result type listed there.
pub trait Registered: Sized {
    /// This result as a [`CheckResult`].
    fn wrap(self) -> CheckResult;
    /// This check's result, if `r` is one.
    fn peek(r: &CheckResult) -> Option<&Self>;
    fn peek_mut(r: &mut CheckResult) -> Option<&mut Self>;
}

/// The registry: `Variant(ResultType)`, each type implementing [`Check`].
/// Invoked where the checks' modules are declared; the names it uses
/// ([`Entry`], [`Registered`], `SerializeMap`, the [`Check`] trait's
/// types) must be in scope there.
macro_rules! registry {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        /// One check's result.
        #[derive(Clone, Debug, PartialEq)]
        pub enum CheckResult {
            $($variant($ty)),*
        }

        /// Every check, in report order.
        pub const ALL: &[Entry] = &[$(Entry {
            key: <$ty as Check>::KEY,
            level: <$ty as Check>::LEVEL,
            null_when_absent: <$ty as Check>::NULL_WHEN_ABSENT,
            failures: <$ty as Check>::FAILURES,
            limit_keys: <$ty as Check>::LIMIT_KEYS,
            figures: <$ty as Check>::FIGURES,
            calibrate: <$ty as Check>::calibrate,
        }),*];

        impl CheckResult {
            pub fn key(&self) -> &'static str {
                match self {
                    $(CheckResult::$variant(_) => <$ty as Check>::KEY),*
                }
            }

            /// The names its failures go under ([`Check::FAILURES`]).
            pub fn failure_names(&self) -> &'static [&'static str] {
                match self {
                    $(CheckResult::$variant(_) => <$ty as Check>::FAILURES),*
                }
            }

            /// Its row label and verdict in the table ([`Check::LABEL`],
            /// [`Check::passed`]).
            pub fn label(&self) -> &'static str {
                match self {
                    $(CheckResult::$variant(_) => <$ty as Check>::LABEL),*
                }
            }

            pub fn passed(&self) -> bool {
                match self {
                    $(CheckResult::$variant(x) => x.passed()),*
                }
            }

            /// This result in one cell of a table.
            pub fn summary(&self) -> String {
                match self {
                    $(CheckResult::$variant(x) => x.summary()),*
                }
            }

            /// [`Check::against`].
            pub fn against(&self) -> Option<Path> {
                match self {
                    $(CheckResult::$variant(x) => x.against()),*
                }
            }

            /// [`Check::calibrated_as`].
            pub fn calibrated_as(&self) -> Option<Results> {
                match self {
                    $(CheckResult::$variant(x) => x.calibrated_as()),*
                }
            }

            /// [`Check::regressions`] against `baseline`, the same check's
            /// result (none if it is another's).
            pub fn regressions(&self, baseline: &CheckResult) -> Vec<Found> {
                match (self, baseline) {
                    $((CheckResult::$variant(x), CheckResult::$variant(b)) => x.regressions(b),)*
                    #[allow(unreachable_patterns)]
                    _ => Vec::new(),
                }
            }

            fn write<M: SerializeMap>(&self, m: &mut M) -> Result<(), M::Error> {
                match self {
                    $(CheckResult::$variant(x) => m.serialize_entry(<$ty as Check>::KEY, x)),*
                }
            }

            /// The result under `key` at `level`, read from JSON (None:
            /// `null`, the check did not run).
            fn read(
                key: &str,
                level: Level,
                value: serde_json::Value,
            ) -> Result<Option<CheckResult>, String> {
                $(if key == <$ty as Check>::KEY && level == <$ty as Check>::LEVEL {
                    if value.is_null() {
                        return Ok(None);
                    }
                    return serde_json::from_value::<$ty>(value)
                        .map(|x| Some(CheckResult::$variant(x)))
                        .map_err(|e| format!("{key}: {e}"));
                })*
                // A key of no check of this level: a field that reports no
                // longer write, ignored as serde ignores unknown fields.
                Ok(None)
            }
        }

        $(impl Registered for $ty {
            fn wrap(self) -> CheckResult {
                CheckResult::$variant(self)
            }
            fn peek(r: &CheckResult) -> Option<&Self> {
                match r {
                    CheckResult::$variant(x) => Some(x),
                    _ => None,
                }
            }
            fn peek_mut(r: &mut CheckResult) -> Option<&mut Self> {
                match r {
                    CheckResult::$variant(x) => Some(x),
                    _ => None,
                }
            }
        })*
    };
}
pub(crate) use registry;

/// A level of the report, as a type ([`PromptLevel`], [`ModelLevel`]).
pub trait AtLevel {
    const LEVEL: Level;
}

/// The checks of one prompt on one path.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PromptLevel;
/// The checks of one model.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModelLevel;

impl AtLevel for PromptLevel {
    const LEVEL: Level = Level::Prompt;
}
impl AtLevel for ModelLevel {
    const LEVEL: Level = Level::Model;
}

/// The results of the checks that ran, at one level of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Checks<L> {
    results: Vec<CheckResult>,
    level: PhantomData<L>,
}

impl<L> Default for Checks<L> {
    fn default() -> Self {
        Checks {
            results: Vec::new(),
            level: PhantomData,
        }
    }
}

impl<L: AtLevel> Checks<L> {
    /// Check `C`'s result, if it ran.
    pub fn get<C: Check>(&self) -> Option<&C> {
        self.results.iter().find_map(C::peek)
    }

    pub fn get_mut<C: Check>(&mut self) -> Option<&mut C> {
        self.results.iter_mut().find_map(C::peek_mut)
    }

    /// Records check `C`'s result (replacing an earlier one).
    pub fn put<C: Check>(&mut self, result: C) {
        debug_assert!(C::LEVEL == L::LEVEL, "{} at the wrong level", C::KEY);
        match self.get_mut::<C>() {
            Some(r) => *r = result,
            None => self.results.push(result.wrap()),
        }
    }

    /// The results, in the registry's order.
    pub fn iter(&self) -> impl Iterator<Item = &CheckResult> {
        ALL.iter()
            .filter_map(|e| self.results.iter().find(|r| r.key() == e.key))
    }
}

impl<L: AtLevel> Serialize for Checks<L> {
    /// One key per check of this level, in the registry's order.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for e in ALL {
            if e.level != L::LEVEL {
                continue;
            }
            match self.results.iter().find(|r| r.key() == e.key) {
                Some(r) => r.write(&mut m)?,
                None if e.null_when_absent => m.serialize_entry(e.key, &())?,
                None => {}
            }
        }
        m.end()
    }
}

impl<'de, L: AtLevel> Deserialize<'de> for Checks<L> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<L>(PhantomData<L>);
        impl<'de, L: AtLevel> Visitor<'de> for Entries<L> {
            type Value = Checks<L>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("check results by key")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checks<L>, A::Error> {
                let mut out = Checks::default();
                while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
                    if let Some(r) = CheckResult::read(&key, L::LEVEL, value)
                        .map_err(serde::de::Error::custom)?
                    {
                        out.results.push(r);
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Entries(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::checks::cross::CrossResult;
    use crate::compare::checks::split::SplitResult;
    use crate::compare::checks::tokens::{ChatCheck, CorpusCheck};
    use crate::compare::report::Report;
    use crate::compare::sample;

    #[test]
    fn every_key_is_listed_once() {
        for (i, e) in ALL.iter().enumerate() {
            assert!(
                !ALL[..i]
                    .iter()
                    .any(|o| o.key == e.key && o.level == e.level),
                "{} twice",
                e.key
            );
        }
    }

    #[test]
    fn a_report_writes_each_check_under_its_key_and_reads_back_the_same() {
        let r = sample::report();
        let json = r.to_json();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        // The checks in the registry's order, between n_tokens and the
        // validation count; split and corpus (not run) left out.
        let p = serde_json::to_string_pretty(&r.models[0].prompts[1]).unwrap();
        let keys: Vec<&str> = p
            .lines()
            .filter_map(|l| l.strip_prefix("  \""))
            .filter_map(|l| l.split_once('"').map(|(k, _)| k))
            .collect();
        assert_eq!(
            keys,
            [
                "model",
                "prompt",
                "path",
                "n_tokens",
                "tokens",
                "taps",
                "logits",
                "greedy",
                "vs",
                "validation_messages",
                "failures",
                "seconds"
            ]
        );
        assert!(v["models"][0]["prompts"][0]["vs"].is_null());
        let m = &v["models"][1];
        assert!(m["tokenizer"].is_null() && m["chat"].is_null());
        assert!(m.get("sampling").is_none());
        let back = Report::from_json(&json).unwrap();
        assert_eq!(back.to_json(), json);
        let gpu = &back.models[0].prompts[1];
        assert_eq!(
            gpu.checks.get::<CrossResult>().unwrap().against.to_string(),
            "cpu"
        );
        assert!(gpu.checks.get::<SplitResult>().is_none());
        assert_eq!(
            back.models[0].checks.get::<CorpusCheck>().unwrap().compared,
            8
        );
    }

    #[test]
    fn put_replaces_and_keys_of_no_check_are_ignored() {
        let mut c: Checks<ModelLevel> = Checks::default();
        c.put(ChatCheck {
            compared: 1,
            mismatches: Vec::new(),
        });
        c.put(ChatCheck {
            compared: 2,
            mismatches: Vec::new(),
        });
        assert_eq!(c.iter().count(), 1);
        assert_eq!(c.get::<ChatCheck>().unwrap().compared, 2);
        let read: Checks<ModelLevel> =
            serde_json::from_str(r#"{"chat": {"compared": 3, "mismatches": []}, "gone": 1}"#)
                .unwrap();
        assert_eq!(read.get::<ChatCheck>().unwrap().compared, 3);
        assert!(read.get::<CorpusCheck>().is_none());
    }
}
