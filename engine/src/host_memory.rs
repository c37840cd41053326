//! The host memory a new allocation may take: what the kernel reports as
//! available (`MemAvailable` in /proc/meminfo), and no more than the
//! process's address-space limit (`ulimit -v`, RLIMIT_AS) leaves, so that
//! a buffer sized from untrusted input (a KV cache for `-c 100000`) is
//! refused with its size instead of aborting the process when the
//! allocator fails.

/// Bytes a new allocation can take: the smaller of what the kernel says
/// is available without swapping and what the address-space limit leaves
/// (the limit less the current size); `None` where neither is known.
pub fn available_bytes() -> Option<u64> {
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| parse_mem_available(&t));
    let space = address_space_left();
    match (mem, space) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What the address-space limit leaves: RLIMIT_AS (from
/// /proc/self/limits) less the current virtual size (VmSize in
/// /proc/self/status); `None` when there is no limit or it is unknown.
fn address_space_left() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let limit = parse_address_limit(&limits)?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let size = parse_kib_field(&status, "VmSize:")?;
    Some(limit.saturating_sub(size))
}

/// The soft "Max address space" of a /proc/self/limits text, in bytes;
/// `None` when unlimited.
fn parse_address_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max address space"))?;
    let soft = line["Max address space".len()..]
        .split_whitespace()
        .next()?;
    soft.parse().ok()
}

/// A `Name:   N kB` field of a /proc status-like text, in bytes.
fn parse_kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `MemAvailable:` of a /proc/meminfo text, in bytes.
fn parse_mem_available(text: &str) -> Option<u64> {
    parse_kib_field(text, "MemAvailable:")
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

    #[test]
    fn reads_the_address_space_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max address space         4294967296           unlimited            bytes\n";
        assert_eq!(parse_address_limit(text), Some(4 << 30));
        let text = "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(parse_address_limit(text), None);
        assert_eq!(
            parse_kib_field("VmSize:\t  1000 kB\n", "VmSize:"),
            Some(1_024_000)
        );
    }
}
