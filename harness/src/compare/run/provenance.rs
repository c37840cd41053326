//! What a run records about itself in its report's provenance
//! ([`crate::compare::report::provenance`]) once it has run: sharpi's version, the
//! dirty flag, llama.cpp's version, the limits file's SHA-256, the faults
//! injected and this machine (CPU model, CPU kernels, threads, and the
//! Vulkan device and driver when a GPU path ran).

use crate::compare::plan::Options;
use crate::compare::report::provenance::{llama_cpp_versions, Gpu, Machine};
use crate::compare::report::Report;
use crate::reference::format::Manifest;

/// Fills in what a finished run's `report` adds to the provenance `run`
/// recorded at its start (commit, reference, limits, options).
pub(super) fn complete(report: &mut Report, opts: &Options, manifest: &Manifest) {
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
    p.machines = vec![this_machine(opts, ran_gpu)];
}

/// This machine, as `opts` runs on it (the GPU: the device `opts`
/// selects, listed when `gpu` says a GPU path ran).
fn this_machine(opts: &Options, gpu: bool) -> Machine {
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
