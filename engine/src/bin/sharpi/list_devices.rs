//! `sharpi --list-devices`: the Vulkan devices, each with the index that
//! `--device` takes, its type, device-local memory, Vulkan version and
//! driver (llama-cli's `--list-devices`).
//!
//! A loader that finds no device (or no driver) is an answer, not a
//! failure: one line saying so, exit code 0. No Vulkan loader at all
//! (`libvulkan.so.1` missing) is an error, exit code 1: the machine cannot
//! run Vulkan whatever its hardware, and a script should see it.

use std::io::Write;

use super::CliError;
use engine::vulkan::{self, DeviceInfo, DeviceKind, VkError};

/// Lists the devices on `out`.
pub fn run(out: &mut dyn Write) -> Result<(), CliError> {
    match vulkan::list_devices() {
        Ok(devices) if devices.is_empty() => writeln!(out, "No Vulkan devices.")?,
        Ok(devices) => out.write_all(format_devices(&devices).as_bytes())?,
        Err(VkError::NoDevice) => writeln!(out, "No Vulkan devices.")?,
        Err(VkError::NoDriver) => writeln!(
            out,
            "No Vulkan devices: the loader found no usable driver (vkCreateInstance: ERROR_INCOMPATIBLE_DRIVER)."
        )?,
        Err(e) => return Err(CliError::ListDevices(e)),
    }
    Ok(())
}

/// A heading, then one line per device:
/// `  0: NAME: TYPE, N MiB device-local, Vulkan X.Y.Z, driver DRIVER`.
pub fn format_devices(devices: &[DeviceInfo]) -> String {
    let mut s =
        String::from("Available Vulkan devices (--device takes the index or part of the name):\n");
    for d in devices {
        let (major, minor, patch) = d.api_version;
        s.push_str(&format!(
            "  {}: {}: {}, {} MiB device-local, Vulkan {major}.{minor}.{patch}, driver {}\n",
            d.index,
            d.name,
            kind_name(d.kind),
            d.device_local_bytes >> 20,
            d.driver
        ));
    }
    s
}

/// The type as `--list-devices` prints it.
fn kind_name(kind: DeviceKind) -> &'static str {
    match kind {
        DeviceKind::Discrete => "discrete",
        DeviceKind::Integrated => "integrated",
        DeviceKind::Virtual => "virtual",
        DeviceKind::Cpu => "cpu",
        DeviceKind::Other => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_device_with_its_index() {
        let d = DeviceInfo {
            index: 1,
            name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
            kind: DeviceKind::Cpu,
            api_version: (1, 3, 230),
            vendor_id: 0x10005,
            device_id: 0,
            driver: "llvmpipe, Mesa 22.3.6 (LLVM 15.0.6)".into(),
            device_local_bytes: 3 << 30,
        };
        let s = format_devices(&[d]);
        assert_eq!(
            s.lines().nth(1),
            Some(
                "  1: llvmpipe (LLVM 15.0.6, 256 bits): cpu, 3072 MiB device-local, \
                 Vulkan 1.3.230, driver llvmpipe, Mesa 22.3.6 (LLVM 15.0.6)"
            )
        );
        assert_eq!(s.lines().count(), 2);
    }
}
