//! The host memory a new allocation may take: what the kernel reports as
//! available (`MemAvailable` in /proc/meminfo), so that a buffer sized from
//! untrusted input (a KV cache for `-c 100000`) is refused with its size
//! instead of aborting the process when the allocator fails.

/// Bytes the kernel says a new allocation can take without swapping, or
/// `None` where that is not known (no /proc/meminfo).
pub fn available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

/// `MemAvailable:` of a /proc/meminfo text, in bytes.
fn parse_mem_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_available_in_bytes() {
        let text = "MemTotal:       16318336 kB\nMemFree:  1 kB\nMemAvailable:    8000 kB\n";
        assert_eq!(parse_mem_available(text), Some(8000 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots kB\n"), None);
    }
}
