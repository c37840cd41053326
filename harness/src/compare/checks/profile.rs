//! The CPU path's profile: `exact` (every tap, the logits and every greedy
//! step bit-identical to llama.cpp's capture) or `calibrated` (the
//! measured limits of `ci/thresholds.toml`).
//!
//! sharpi's CPU path computes, by default (`--cpu-numerics ggml`), what
//! ggml's CPU backend computes when built for x86-64 with AVX2, FMA and
//! F16C (no AVX-512), llamafile's sgemm on, flash attention off, an F32 or
//! F16 KV cache and no weight repacking, with glibc's `cosf`/`sinf`/`powf`/`expf`:
//! the same kernels' element order, lanes and precision, on any machine
//! (its scalar code computes the same bits as its SIMD code). A capture
//! made with that configuration can be held to zero, on the models whose
//! every op sharpi reproduces (`exact = true` in the thresholds file). Any
//! other capture (another ISA, a quantized KV cache, a model with an op that
//! still differs) keeps its calibrated limits, and the report says why.

use crate::reference::format::ModelCapture;

use super::thresholds::Limits;

/// Which limits the CPU path is held to (`compare --profile`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// Exact where the capture and the model allow it, else calibrated.
    #[default]
    Auto,
    /// Exact on every CPU item (a capture it does not fit then fails).
    Exact,
    /// The calibrated limits everywhere.
    Calibrated,
}

impl std::str::FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Profile, String> {
        match s {
            "auto" => Ok(Profile::Auto),
            "exact" => Ok(Profile::Exact),
            "calibrated" => Ok(Profile::Calibrated),
            _ => Err(format!("{s:?}: auto, exact or calibrated")),
        }
    }
}

/// The CPU features of the ggml build whose arithmetic sharpi reproduces.
const FEATURES: [&str; 4] = ["AVX2", "FMA", "F16C", "LLAMAFILE"];

/// The features `llama_print_system_info()` reports as on (`NAME = 1`).
fn features_on(system_info: &str) -> Vec<&str> {
    system_info
        .split('|')
        .filter_map(|part| {
            let part = part.rsplit(':').next().unwrap_or(part);
            let (name, value) = part.split_once('=')?;
            (value.trim() == "1").then(|| name.trim())
        })
        .collect()
}

/// Why the exact profile cannot hold for `capture` (None: it can).
pub fn exact_blocker(capture: &ModelCapture) -> Option<String> {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return Some(
            "sharpi is not built on glibc, whose cosf/sinf/powf/expf the capture used".into(),
        );
    }
    let on = features_on(&capture.llama_cpp.system_info);
    if let Some(f) = FEATURES.iter().find(|f| !on.contains(f)) {
        return Some(format!("the capture's llama.cpp was built without {f}"));
    }
    if let Some(f) = on.iter().find(|f| f.starts_with("AVX512")) {
        return Some(format!(
            "the capture's llama.cpp was built with {f} (16-lane sums sharpi does not reproduce)"
        ));
    }
    let s = &capture.settings;
    if s.flash_attn != "disabled" {
        return Some(format!(
            "the capture ran flash attention ({})",
            s.flash_attn
        ));
    }
    let float = |t: &str| t == "f32" || t == "f16";
    if !float(&s.type_k) || !float(&s.type_v) {
        return Some(format!(
            "the capture's KV cache is {}/{}, not f32 or f16",
            s.type_k, s.type_v
        ));
    }
    if s.weight_repack {
        return Some("the capture repacked its weights".into());
    }
    None
}

/// The CPU path's profile for one model: `Ok(())` exact, `Err(why)`
/// calibrated.
pub fn cpu_profile(choice: Profile, limits: &Limits, capture: &ModelCapture) -> Result<(), String> {
    match choice {
        Profile::Exact => Ok(()),
        Profile::Calibrated => Err("--profile calibrated".into()),
        Profile::Auto if !limits.exact => {
            Err("not marked exact in the thresholds (an op still differs)".into())
        }
        Profile::Auto => exact_blocker(capture).map_or(Ok(()), Err),
    }
}

/// Limits of zero: every tap NMSE 0, the last logits NMSE 0, every
/// position's top token llama.cpp's, no near-tie (a greedy step that
/// differs fails); with `exact` set, every position's top-64 logits must
/// be llama.cpp's bit for bit (checked where the logits are). The KLD, a
/// figure computed from those logits with rounding of its own (llama.cpp's
/// log-sum-exp is stored as f32), keeps its calibrated limits.
pub fn exact_limits(calibrated: &Limits) -> Limits {
    Limits {
        logits_nmse: 0.0,
        kld_mean: calibrated.kld_mean,
        kld_max: calibrated.kld_max,
        top1_min: 1.0,
        near_tie: 0.0,
        routing_tie: 0.0,
        taps: [("default".to_string(), 0.0)].into(),
        taps_layer0: Default::default(),
        corpus: calibrated.corpus.clone(),
        exact: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_info_features() {
        let info = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | \
                    BMI2 = 1 | AVX512 = 0 | LLAMAFILE = 1 | REPACK = 1 |";
        let on = features_on(info);
        assert_eq!(
            on,
            [
                "SSE3",
                "SSSE3",
                "AVX",
                "AVX2",
                "F16C",
                "FMA",
                "BMI2",
                "LLAMAFILE",
                "REPACK"
            ]
        );
    }

    #[test]
    fn profile_names() {
        assert_eq!("auto".parse::<Profile>(), Ok(Profile::Auto));
        assert_eq!("exact".parse::<Profile>(), Ok(Profile::Exact));
        assert_eq!("calibrated".parse::<Profile>(), Ok(Profile::Calibrated));
        assert!("zero".parse::<Profile>().is_err());
    }
}
