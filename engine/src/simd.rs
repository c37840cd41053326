//! Which SIMD kernels this CPU can run, detected once per process.

use std::fmt;
use std::sync::OnceLock;

/// A family of kernels. Every level computes the same numbers as every other
/// SIMD level (they reproduce ggml's AVX2 kernels' arithmetic); only
/// [`SimdLevel::Scalar`] differs, by float rounding (it reproduces ggml's
/// generic kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SimdLevel {
    /// Plain Rust, on every platform.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C (Haswell, Zen 1 and later).
    Avx2,
    /// AVX2 plus AVX-512 F/BW/VL and VNNI (Ice Lake, Zen 4 and later):
    /// `vpdpbusd` integer dots and 32 vector registers.
    Avx512Vnni,
}

impl SimdLevel {
    pub const ALL: [SimdLevel; 3] = [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512Vnni];

    /// The best level this CPU supports, detected on first use and cached.
    pub fn detected() -> SimdLevel {
        static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            SimdLevel::ALL
                .into_iter()
                .rev()
                .find(|l| l.is_supported())
                .unwrap_or(SimdLevel::Scalar)
        })
    }

    /// Every level this CPU can run, lowest first.
    pub fn supported() -> impl Iterator<Item = SimdLevel> {
        SimdLevel::ALL.into_iter().filter(|l| l.is_supported())
    }

    /// Whether this CPU can run the level's kernels.
    pub fn is_supported(self) -> bool {
        match self {
            SimdLevel::Scalar => true,
            SimdLevel::Avx2 => avx2(),
            SimdLevel::Avx512Vnni => avx512_vnni(),
        }
    }

    /// Looks a level up by name ("scalar", "avx2", "avx512vnni").
    pub fn from_name(name: &str) -> Option<SimdLevel> {
        SimdLevel::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(name))
    }

    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512Vnni => "avx512vnni",
        }
    }
}

impl fmt::Display for SimdLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(target_arch = "x86_64")]
fn avx512_vnni() -> bool {
    avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_vnni() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detected_level_is_supported_and_names_round_trip() {
        assert!(SimdLevel::detected().is_supported());
        assert!(SimdLevel::Scalar.is_supported());
        for l in SimdLevel::ALL {
            assert_eq!(SimdLevel::from_name(l.name()), Some(l));
        }
        assert_eq!(SimdLevel::supported().next(), Some(SimdLevel::Scalar));
    }
}
