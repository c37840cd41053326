//! The driver's own statistics of each compute pipeline (registers, shared
//! memory, instruction counts: whatever the driver reports), from
//! VK_KHR_pipeline_executable_properties. With the environment variable
//! `SHARPI_VK_PIPELINE_STATS` set (to anything but `0`), a device that has
//! the extension is opened with it, every pipeline is created with
//! `CAPTURE_STATISTICS` and its statistics go to stderr once, one line per
//! shader variant as it is first used. Logging only: the same SPIR-V
//! runs, created with the one flag that asks the driver to collect the
//! statistics; a device without the extension says so once.

use std::ffi::CStr;
use std::sync::OnceLock;

use ash::vk;

use super::error::VkResult;
use super::instance::{extension_features, Instance};

/// Whether `SHARPI_VK_PIPELINE_STATS` asks for the statistics (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SHARPI_VK_PIPELINE_STATS").is_some_and(|v| v != "0"))
}

/// Whether `physical` has the extension with `pipelineExecutableInfo`.
pub(crate) fn supported(instance: &Instance, physical: vk::PhysicalDevice) -> VkResult<bool> {
    let mut exec = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
    let name = ash::khr::pipeline_executable_properties::NAME;
    Ok(extension_features(instance, physical, name, &mut exec)?
        && exec.pipeline_executable_info == vk::TRUE)
}

/// One statistic as text: `name=value`.
fn statistic(s: &vk::PipelineExecutableStatisticKHR) -> String {
    let name = s
        .name_as_c_str()
        .map_or_else(|_| "?".into(), |n| n.to_string_lossy().into_owned());
    // SAFETY: the driver wrote the union member that `format` names.
    let value = unsafe {
        match s.format {
            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => (s.value.b32 != 0).to_string(),
            vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
            vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
            vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => format!("{:.3}", s.value.f64),
            _ => "?".into(),
        }
    };
    format!("{name}={value}")
}

/// Prints `pipeline`'s statistics (created with `CAPTURE_STATISTICS`) as
/// one line, `shader` first. A query the driver refuses is reported, not
/// raised: the pipeline itself is fine.
pub(crate) fn report(
    loader: &ash::khr::pipeline_executable_properties::Device,
    pipeline: vk::Pipeline,
    shader: &str,
) {
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    // SAFETY: `pipeline` is live, created on the loader's device with
    // CAPTURE_STATISTICS.
    let executables = match unsafe { loader.get_pipeline_executable_properties(&info) } {
        Ok(e) => e,
        Err(e) => {
            eprintln!("sharpi: pipeline stats {shader}: vkGetPipelineExecutablePropertiesKHR: {e}");
            return;
        }
    };
    for (i, exe) in executables.iter().enumerate() {
        let exe_info = vk::PipelineExecutableInfoKHR::default()
            .pipeline(pipeline)
            .executable_index(i as u32);
        // SAFETY: as above; `i` indexes the executables the driver listed.
        let stats = match unsafe { loader.get_pipeline_executable_statistics(&exe_info) } {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "sharpi: pipeline stats {shader}: vkGetPipelineExecutableStatisticsKHR: {e}"
                );
                continue;
            }
        };
        let exe_name = exe.name_as_c_str().map_or_else(
            |_| String::new(),
            |n: &CStr| n.to_string_lossy().into_owned(),
        );
        let line: Vec<String> = stats.iter().map(statistic).collect();
        eprintln!(
            "sharpi: pipeline stats {shader} [{exe_name}] subgroup {}: {}",
            exe.subgroup_size,
            line.join(" ")
        );
    }
}
