//! Where a report came from ([`Provenance`]): the code (sharpi's version,
//! the commit and whether the tree was dirty), the reference data (its
//! manifest's SHA-256 and llama.cpp's version), the limits, the options,
//! and the machines it ran on ([`Machine`]: CPU, CPU kernels, threads, the
//! Vulkan device and driver when a GPU path ran).
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

use super::report::Report;
use super::run::Options;
use crate::reference::format::Manifest;

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
    /// Fills in what a finished run's `report` adds to the provenance
    /// `run` recorded at its start (commit, reference, limits, options):
    /// sharpi's version, the dirty flag, llama.cpp's version, the limits
    /// file's SHA-256, injected faults and this machine.
    pub fn complete(report: &mut Report, opts: &Options, manifest: &Manifest) {
        let ran_gpu = report
            .models
            .iter()
            .flat_map(|m| &m.prompts)
            .any(|p| p.path.uses_gpu());
        let models: Vec<&str> = report
            .items
            .iter()
            .filter_map(|i| i.split('/').next())
            .collect();
        let p = &mut report.provenance;
        p.dirty = p.commit.ends_with("+dirty");
        p.sharpi_version = env!("CARGO_PKG_VERSION").to_string();
        p.llama_cpp = llama_cpp_versions(
            manifest
                .models
                .iter()
                .filter(|m| models.contains(&m.id.as_str()))
                .map(|m| (m.id.as_str(), m.llama_cpp_version.as_deref())),
        );
        p.thresholds_file_sha256 =
            crate::reference::writer::sha256_file(std::path::Path::new(&opts.thresholds.source))
                .unwrap_or_else(|_| "not a file".into());
        p.faults = injected_faults();
        p.machines = vec![Machine::this(opts, ran_gpu)];
    }
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
    /// This machine, as `opts` runs on it (the GPU: the device `opts`
    /// selects, listed when `gpu` says a GPU path ran).
    fn this(opts: &Options, gpu: bool) -> Machine {
        let threads = match opts.threads {
            // As the engine resolves it (cpu/backend.rs).
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        Machine {
            cpu: cpu_model(),
            cpu_kernels: engine::simd::SimdLevel::detected().to_string(),
            threads,
            gpu: gpu.then(|| vulkan_device(&opts.device)),
        }
    }

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

/// The CPU's model name from /proc/cpuinfo, else the architecture.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim() == "model name")
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The Vulkan device `selector` picks (as a session does) with its driver,
/// or why there is none.
fn vulkan_device(selector: &engine::vulkan::DeviceSelector) -> Gpu {
    let found = engine::vulkan::list_devices()
        .map_err(|e| e.to_string())
        .and_then(|devices| {
            selector
                .choose(&devices)
                .cloned()
                .map_err(|e| e.to_string())
        });
    match found {
        Ok(d) => {
            let (major, minor, patch) = d.api_version;
            Gpu {
                name: d.name,
                kind: format!("{:?}", d.kind),
                vulkan: format!("{major}.{minor}.{patch}"),
                driver: d.driver,
            }
        }
        Err(e) => Gpu {
            name: format!("unknown ({e})"),
            ..Gpu::default()
        },
    }
}

/// The faults injected in this process (none without the feature).
fn injected_faults() -> Vec<String> {
    #[cfg(feature = "fault-injection")]
    {
        engine::fault::FAULTS
            .iter()
            .filter(|(name, _)| engine::fault::active(name))
            .map(|(name, _)| name.to_string())
            .collect()
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        Vec::new()
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
