//! [`Plan`]: what the setup decided, as printed on stderr.

use std::fmt;

use super::bytes::DeviceBytes;
use crate::placement::Placement;

/// What `-g N --fixed-on` decided: which device runs what, the bytes each
/// holds, and the GPU's device-local memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The table, numbered as [`crate::placement::Devices`] numbers its
    /// backends.
    pub placement: Placement,
    /// Per device: its name and what it holds.
    pub names: Vec<String>,
    pub bytes: Vec<DeviceBytes>,
    /// Per device: its memory limit (the GPU's device-local bytes).
    pub limits: Vec<Option<u64>>,
    /// With `--moe-cache`: the GPU layers' expert slots each (their
    /// experts stay on the host).
    pub expert_slots: Option<usize>,
    /// With `-g auto`: what it chose.
    pub auto: Option<AutoFit>,
}

/// What `-g auto` chose: the first `layers` layers on the GPU, the most
/// whose GPU part fits in `limit` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoFit {
    pub layers: usize,
    pub limit: u64,
}

/// `b` bytes in MiB, one decimal ("49.5 MiB").
pub(super) fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

impl fmt::Display for Plan {
    /// One line per device: "plan: cpu (2 threads): layers 15-29, output
    /// head: weights 40.0 MiB + KV 7.5 MiB + scratch 2.0 MiB = 49.5 MiB";
    /// with `-g auto`, first a line with its choice ("plan: -g auto: 15 of
    /// 30 layers fit in 512.0 MiB of device-local memory").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(a) = self.auto {
            writeln!(
                f,
                "plan: -g auto: {} of {} layers fit in {} of device-local memory",
                a.layers,
                self.placement.n_layer(),
                mib(a.limit)
            )?;
        }
        for (d, name) in self.names.iter().enumerate() {
            let b = self.bytes[d];
            write!(
                f,
                "plan: {name}: {}: weights {} + KV {} + scratch {} = {}",
                self.placement.describe(d),
                mib(b.weights),
                mib(b.kv),
                mib(b.scratch),
                mib(b.total())
            )?;
            if let Some(limit) = self.limits[d] {
                write!(f, " of {}", mib(limit))?;
                if let Some(n) = self.expert_slots {
                    write!(f, "; experts on the host, {n} slots a layer here")?;
                }
            }
            if d + 1 < self.names.len() {
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_one_line_per_device_after_what_auto_chose() {
        let mut plan = Plan {
            placement: Placement::split(4, 1, 1, 0),
            names: vec!["cpu (2 threads)".into(), "gpu".into()],
            bytes: vec![
                DeviceBytes {
                    weights: 3 << 20,
                    kv: 1 << 20,
                    scratch: 1 << 19,
                },
                DeviceBytes {
                    weights: 1 << 20,
                    kv: 0,
                    scratch: 0,
                },
            ],
            limits: vec![None, Some(2 << 20)],
            expert_slots: None,
            auto: None,
        };
        let cpu = "plan: cpu (2 threads): layers 1-3, output head: \
                   weights 3.0 MiB + KV 1.0 MiB + scratch 0.5 MiB = 4.5 MiB";
        let gpu = "plan: gpu: embedding, layer 0: \
                   weights 1.0 MiB + KV 0.0 MiB + scratch 0.0 MiB = 1.0 MiB of 2.0 MiB";
        assert_eq!(plan.to_string(), format!("{cpu}\n{gpu}"));
        plan.auto = Some(AutoFit {
            layers: 1,
            limit: 2 << 20,
        });
        let auto = "plan: -g auto: 1 of 4 layers fit in 2.0 MiB of device-local memory";
        assert_eq!(plan.to_string(), format!("{auto}\n{cpu}\n{gpu}"));
    }
}
