//! `sharpi --list-devices` as a process: every device the loader
//! enumerates (these tests need one, lavapipe at least), one line each
//! with the index `--device` takes, its type, memory, Vulkan version and
//! driver; and with no driver, one line and exit code 0.

use std::process::{Command, Output};

fn sharpi(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sharpi"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run sharpi")
}

#[test]
fn lists_every_device_with_its_index() {
    let devices = engine::vulkan::list_devices().unwrap_or_else(|e| {
        panic!("no Vulkan device for the Vulkan tests: {e} (run scripts/setup)")
    });
    assert!(!devices.is_empty());
    // No model, no prompt: the flag alone.
    let o = sharpi(&["--list-devices"], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), devices.len() + 1, "{out}");
    assert!(lines[0].contains("--device"), "{out}");
    for (d, line) in devices.iter().zip(&lines[1..]) {
        let (major, minor, _) = d.api_version;
        assert!(
            line.starts_with(&format!("  {}: {}: ", d.index, d.name)),
            "{line}"
        );
        assert!(line.contains(&format!("Vulkan {major}.{minor}.")), "{line}");
        assert!(line.contains(" MiB device-local"), "{line}");
        assert!(line.contains(&d.driver), "{line}");
        assert!(d.device_local_bytes > 0, "{d:?}");
    }
    // Mesa's lavapipe, where it is installed, is a CPU device.
    if let Some(l) = lines.iter().find(|l| l.contains("llvmpipe")) {
        assert!(l.contains(": cpu, "), "{l}");
    }
}

#[test]
fn no_driver_is_one_line_and_exit_0() {
    let none = "/nonexistent/icd.json";
    let o = sharpi(
        &["--list-devices"],
        &[("VK_ICD_FILENAMES", none), ("VK_DRIVER_FILES", none)],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("No Vulkan devices"), "{out}");
}
