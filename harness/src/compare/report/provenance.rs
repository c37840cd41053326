//! Where a report came from ([`Provenance`]): the code (sharpi's version,
//! the commit and whether the tree was dirty), the reference data (its
//! manifest's SHA-256 and llama.cpp's version), the limits, the options,
//! and the machines it ran on ([`Machine`]: CPU, CPU kernels, threads, the
//! Vulkan device and driver when a GPU path ran). A run fills it in
//! (`run/provenance.rs`).
//!
//! `harness merge` joins shards only when [`same_run`] holds: the same
//! code, reference data, limits, options and injected faults. Machines may
//! differ ([`compatible_machines`]) where the results cannot: CPU model
//! and thread count (every thread count computes the same numbers), and
//! the SIMD level of the CPU kernels among the SIMD levels (they compute
//! the same numbers; the scalar kernels round differently). A GPU path's
//! numbers depend on the device and its driver: shards whose GPU paths ran
//! on different ones are refused.

use serde::{Deserialize, Serialize};

/// The inputs of a run that decide its result, recorded in its report
/// (JSON, the JUnit properties, the HTML header).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// `git rev-parse HEAD` of the repository (`+dirty` with uncommitted
    /// changes to tracked files; `unknown` outside git).
    pub commit: String,
    /// Whether the tree had uncommitted changes to tracked files.
    #[serde(default)]
    pub dirty: bool,
    /// sharpi's version (the workspace's `version`).
    #[serde(default)]
    pub sharpi_version: String,
    /// SHA-256 of the reference data's manifest.json (which holds every
    /// reference file's SHA-256 and each capture's llama.cpp version).
    pub reference_sha256: String,
    /// The llama.cpp version of the captures of the run's models (one
    /// value, or `model: version` pairs when they differ).
    #[serde(default)]
    pub llama_cpp: String,
    /// SHA-256 of the limits as read (their JSON form: a comment's edit
    /// does not change it).
    pub thresholds_sha256: String,
    /// SHA-256 of the thresholds file's bytes (`sha256sum` of it).
    #[serde(default)]
    pub thresholds_file_sha256: String,
    /// The options that select and judge: models, prompts, paths, greedy
    /// steps, chunk, corpus, validation, device.
    pub settings: String,
    /// Engine faults injected for the run (`--inject`; none normally).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
    /// The machines it ran on: one for a run, each distinct one of the
    /// shards for a merged report.
    #[serde(default)]
    pub machines: Vec<Machine>,
}

/// One machine a run ran on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// The CPU's model name (/proc/cpuinfo), or the architecture.
    pub cpu: String,
    /// The SIMD level of the CPU kernels the engine dispatched to
    /// (`engine::simd::SimdLevel::detected`: scalar, avx2, avx512vnni).
    pub cpu_kernels: String,
    /// CPU worker threads (`--threads`, 0 resolved to one per core).
    pub threads: usize,
    /// The Vulkan device of the GPU paths, when one ran.
    pub gpu: Option<Gpu>,
}

/// A Vulkan device and its driver.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    pub name: String,
    /// Discrete, Integrated, Virtual, Cpu (lavapipe), Other.
    pub kind: String,
    /// The Vulkan version it supports.
    pub vulkan: String,
    /// The driver's name and version, as the driver reports them.
    pub driver: String,
}

impl Provenance {
    /// Every field as a name and a one-line value, in reading order (the
    /// JUnit properties and the HTML header): `machine` once per machine.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("sharpi_version", self.sharpi_version.clone()),
            ("commit", self.commit.clone()),
            ("dirty", self.dirty.to_string()),
            ("llama_cpp", self.llama_cpp.clone()),
            ("reference_sha256", self.reference_sha256.clone()),
            ("thresholds_sha256", self.thresholds_sha256.clone()),
            (
                "thresholds_file_sha256",
                self.thresholds_file_sha256.clone(),
            ),
            ("settings", self.settings.clone()),
        ];
        if !self.faults.is_empty() {
            out.push(("faults_injected", self.faults.join(",")));
        }
        out.extend(self.machines.iter().map(|m| ("machine", m.describe())));
        out
    }
}

impl Machine {
    /// One line: `CPU (kernels, N threads); GPU (kind, Vulkan v, driver)`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} ({} kernels, {} threads)",
            self.cpu, self.cpu_kernels, self.threads
        );
        if let Some(g) = &self.gpu {
            s += &format!(
                "; Vulkan device {} ({}, Vulkan {}; driver {})",
                g.name, g.kind, g.vulkan, g.driver
            );
        }
        s
    }
}

/// One llama.cpp version for all `models` when they share it, else
/// `id: version` pairs; `unknown` for a capture that does not say.
pub fn llama_cpp_versions<'a>(models: impl Iterator<Item = (&'a str, Option<&'a str>)>) -> String {
    let pairs: Vec<(&str, &str)> = models.map(|(id, v)| (id, v.unwrap_or("unknown"))).collect();
    let first = pairs.first().map(|p| p.1);
    if pairs.iter().all(|p| Some(p.1) == first) {
        return first.unwrap_or("none").to_string();
    }
    pairs
        .iter()
        .map(|(id, v)| format!("{id}: {v}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A field that must be the same in every shard: its name in messages,
/// and its value.
type Field = (&'static str, fn(&Provenance) -> String);

/// Whether two reports' provenances describe one run (shards of it): the
/// same commit, sharpi version, reference data, limits (as read and the
/// file), options and injected faults (the machines: [`compatible_all`]).
/// The error names the first difference, `this` against `first`.
pub fn same_run(first: &Provenance, this: &Provenance) -> Result<(), String> {
    let fields: [Field; 7] = [
        ("the commit", |p| p.commit.clone()),
        ("the sharpi version", |p| p.sharpi_version.clone()),
        ("the reference data (manifest SHA-256)", |p| {
            p.reference_sha256.clone()
        }),
        ("the limits (thresholds SHA-256)", |p| {
            p.thresholds_sha256.clone()
        }),
        ("the limits file (SHA-256)", |p| {
            p.thresholds_file_sha256.clone()
        }),
        ("the options", |p| p.settings.clone()),
        ("the injected faults", |p| p.faults.join(",")),
    ];
    for (what, f) in fields {
        if f(first) != f(this) {
            return Err(format!("{what}: {} against {}", f(this), f(first)));
        }
    }
    Ok(())
}

/// Every pair of `machines` compatible ([`compatible_machines`]).
pub fn compatible_all(machines: &[Machine]) -> Result<(), String> {
    for (i, a) in machines.iter().enumerate() {
        for b in &machines[i + 1..] {
            compatible_machines(a, b)?;
        }
    }
    Ok(())
}

/// Whether results measured on machine `a` and on `b` belong in one
/// report: CPU kernels both scalar or both SIMD (every SIMD level computes
/// the same numbers), and the same Vulkan device and driver where both
/// ran a GPU path. CPU model and thread count may differ.
pub fn compatible_machines(a: &Machine, b: &Machine) -> Result<(), String> {
    let scalar = |m: &Machine| m.cpu_kernels == "scalar";
    if scalar(a) != scalar(b) {
        return Err(format!(
            "the CPU kernels: {} against {} (the scalar kernels round differently)",
            b.cpu_kernels, a.cpu_kernels
        ));
    }
    if let (Some(ga), Some(gb)) = (&a.gpu, &b.gpu) {
        if (&ga.name, &ga.driver) != (&gb.name, &gb.driver) {
            return Err(format!(
                "the Vulkan device: {} ({}) against {} ({})",
                gb.name, gb.driver, ga.name, ga.driver
            ));
        }
    }
    Ok(())
}

/// The machines of several reports, each distinct one once, in order; a
/// machine that ran no GPU path is the same machine as one that did
/// (and is otherwise equal), which stands for both.
pub fn distinct_machines<'a>(all: impl Iterator<Item = &'a Machine>) -> Vec<Machine> {
    let all: Vec<&Machine> = all.collect();
    let host = |m: &Machine| (m.cpu.clone(), m.cpu_kernels.clone(), m.threads);
    let mut out: Vec<Machine> = Vec::new();
    for m in &all {
        let same_with_gpu =
            m.gpu.is_none() && all.iter().any(|o| o.gpu.is_some() && host(o) == host(m));
        if !same_with_gpu && !out.contains(m) {
            out.push((*m).clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(cpu: &str, kernels: &str, gpu: Option<(&str, &str)>) -> Machine {
        Machine {
            cpu: cpu.into(),
            cpu_kernels: kernels.into(),
            threads: 2,
            gpu: gpu.map(|(name, driver)| Gpu {
                name: name.into(),
                kind: "Cpu".into(),
                vulkan: "1.3.0".into(),
                driver: driver.into(),
            }),
        }
    }

    #[test]
    fn machines_may_differ_where_the_numbers_cannot() {
        let lvp = Some(("llvmpipe", "llvmpipe, Mesa 22.3.6"));
        let a = machine("Xeon", "avx512vnni", lvp);
        // Another CPU, other SIMD kernels, no GPU path: compatible.
        assert!(compatible_machines(&a, &machine("EPYC", "avx2", None)).is_ok());
        assert!(compatible_machines(&a, &machine("EPYC", "avx2", lvp)).is_ok());
        // Scalar against SIMD kernels, another driver: not.
        let e = compatible_machines(&a, &machine("Xeon", "scalar", lvp)).unwrap_err();
        assert!(e.contains("scalar against avx512vnni"), "{e}");
        let e = compatible_machines(&a, &machine("Xeon", "avx2", Some(("llvmpipe", "Mesa 23"))))
            .unwrap_err();
        assert!(e.contains("Vulkan device"), "{e}");
        let m = distinct_machines([&a, &a, &machine("EPYC", "avx2", None)].into_iter());
        assert_eq!(m.len(), 2);
        // A shard without a GPU item on the machine of one with: one machine.
        let m = distinct_machines([&machine("Xeon", "avx512vnni", None), &a].into_iter());
        assert_eq!(m.len(), 1);
        assert_eq!(m[0], a);
        assert!(compatible_all(&m).is_ok());
        // Each compatible with a machine without a GPU path, not with each
        // other.
        let other = machine("Xeon", "avx2", Some(("radv", "Mesa 24")));
        assert!(compatible_all(&[machine("x", "avx2", None), a, other]).is_err());
    }

    #[test]
    fn one_run_is_one_code_reference_limits_and_options() {
        let p = Provenance {
            commit: "c".into(),
            sharpi_version: "0.1.0".into(),
            reference_sha256: "r".into(),
            thresholds_sha256: "t".into(),
            thresholds_file_sha256: "f".into(),
            settings: "s".into(),
            machines: vec![machine("Xeon", "avx2", None)],
            ..Provenance::default()
        };
        assert!(same_run(&p, &p).is_ok());
        let mut q = p.clone();
        q.machines = vec![machine("EPYC", "avx512vnni", None)];
        assert!(same_run(&p, &q).is_ok());
        for (what, edit) in [
            (
                "commit",
                (|p: &mut Provenance| p.commit = "d".into()) as fn(&mut Provenance),
            ),
            ("sharpi version", |p| p.sharpi_version = "0.2.0".into()),
            ("reference data", |p| p.reference_sha256 = "x".into()),
            ("limits (thresholds", |p| p.thresholds_sha256 = "x".into()),
            ("limits file", |p| p.thresholds_file_sha256 = "x".into()),
            ("options", |p| p.settings = "x".into()),
            ("faults", |p| p.faults = vec!["rope-style".into()]),
        ] {
            let mut q = p.clone();
            edit(&mut q);
            let e = same_run(&p, &q).unwrap_err();
            assert!(e.contains(what), "{what}: {e}");
        }
    }

    #[test]
    fn llama_cpp_version_once_when_shared() {
        let v = |pairs: &[(&'static str, Option<&'static str>)]| {
            llama_cpp_versions(pairs.iter().copied())
        };
        assert_eq!(
            v(&[("a", Some("0.1.161")), ("b", Some("0.1.161"))]),
            "0.1.161"
        );
        assert_eq!(
            v(&[("a", Some("0.1.161")), ("b", None)]),
            "a: 0.1.161; b: unknown"
        );
        assert_eq!(v(&[]), "none");
    }
}
