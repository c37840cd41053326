//! What the user asks for: `-g` ([`GpuLayers`]), `--fixed-on`,
//! `--moe-cache`, `--device`, `--validate` ([`GpuRequest`]).

use std::fmt;
use std::str::FromStr;

use crate::expert_cache::CacheSize;
use crate::placement::Side;
use crate::vulkan::VulkanOptions;

/// `-g`: which layers run on the GPU (the first ones; the rest on the CPU).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuLayers {
    /// None (`-g 0`): every layer on the CPU.
    #[default]
    None,
    /// The first `n` (`-g N`; all of them when the model has fewer).
    First(usize),
    /// Every layer (`-g -1`).
    All,
    /// As many as fit the GPU's device-local memory (`-g auto`): the
    /// largest `-g N` whose GPU part fits.
    Auto,
}

impl GpuLayers {
    /// The number of GPU layers out of `n_layer`; `None` for
    /// [`GpuLayers::Auto`], which the device's memory decides.
    pub fn count(self, n_layer: usize) -> Option<usize> {
        match self {
            GpuLayers::None => Some(0),
            GpuLayers::First(n) => Some(n.min(n_layer)),
            GpuLayers::All => Some(n_layer),
            GpuLayers::Auto => None,
        }
    }
}

impl TryFrom<i64> for GpuLayers {
    type Error = String;

    /// `-1`: every layer, `0`: none, `N`: the first `N`.
    fn try_from(n: i64) -> Result<GpuLayers, String> {
        match n {
            -1 => Ok(GpuLayers::All),
            0 => Ok(GpuLayers::None),
            n if n > 0 => Ok(GpuLayers::First(n as usize)),
            n => Err(format!(
                "-g {n}: expected -1 (all), 0 (none) or a layer count"
            )),
        }
    }
}

impl FromStr for GpuLayers {
    type Err = String;

    /// `-1`, `0`, a layer count, or `auto`.
    fn from_str(s: &str) -> Result<GpuLayers, String> {
        let bad = || {
            format!(
                "invalid -g {s:?}: expected -1 (all layers), 0 (CPU only), a layer count or auto"
            )
        };
        match s {
            "auto" => Ok(GpuLayers::Auto),
            _ => s
                .parse::<i64>()
                .map_err(|_| bad())
                .and_then(|n| GpuLayers::try_from(n).map_err(|_| bad())),
        }
    }
}

impl fmt::Display for GpuLayers {
    /// As `-g` takes it: `0`, `N`, `-1`, `auto`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuLayers::None => f.write_str("0"),
            GpuLayers::First(n) => write!(f, "{n}"),
            GpuLayers::All => f.write_str("-1"),
            GpuLayers::Auto => f.write_str("auto"),
        }
    }
}

/// What `-g`, `--fixed-on`, `--device` and `--validate` ask for.
#[derive(Clone, Debug, Default)]
pub struct GpuRequest {
    /// The layers on the GPU.
    pub gpu_layers: GpuLayers,
    /// Where the embedding and the head go (None: see
    /// [`crate::placement::Placement::gpu_split`]).
    pub fixed_on: Option<Side>,
    /// CPU threads (0: one per core).
    pub threads: usize,
    pub vk: VulkanOptions,
    /// At most this many bytes on the GPU (None: its device-local memory;
    /// tests set less).
    pub memory_limit: Option<u64>,
    /// `--moe-cache`: the experts of GPU layers stay on the host, with this
    /// many slots on the GPU ([`crate::expert_cache`]).
    pub moe_cache: Option<CacheSize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_parses_to_layers_and_prints_back() {
        let g = |s: &str| s.parse::<GpuLayers>();
        assert_eq!(g("-1"), Ok(GpuLayers::All));
        assert_eq!(g("0"), Ok(GpuLayers::None));
        assert_eq!(g("7"), Ok(GpuLayers::First(7)));
        assert_eq!(g("auto"), Ok(GpuLayers::Auto));
        for s in ["-1", "0", "7", "auto"] {
            assert_eq!(g(s).unwrap().to_string(), s);
        }
        for bad in ["-2", "", "x", "Auto", "1.5", "all"] {
            let e = g(bad).unwrap_err();
            assert!(
                e.starts_with("invalid -g")
                    && ["-1 (all layers)", "0 (CPU only)", "a layer count", "auto"]
                        .iter()
                        .all(|form| e.contains(form)),
                "{e}"
            );
        }
        assert_eq!(GpuLayers::try_from(-1), Ok(GpuLayers::All));
        assert_eq!(GpuLayers::try_from(3), Ok(GpuLayers::First(3)));
        assert!(GpuLayers::try_from(-2).unwrap_err().contains("-g -2"));
        assert_eq!(GpuLayers::default(), GpuLayers::None);
    }

    #[test]
    fn g_counts_layers_of_the_model() {
        assert_eq!(GpuLayers::All.count(30), Some(30));
        assert_eq!(GpuLayers::First(99).count(30), Some(30));
        assert_eq!(GpuLayers::First(7).count(30), Some(7));
        assert_eq!(GpuLayers::None.count(30), Some(0));
        assert_eq!(GpuLayers::Auto.count(30), None);
    }
}
