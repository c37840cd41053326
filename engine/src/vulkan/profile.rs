//! Device time per shader, from timestamp queries: with the environment
//! variable `SHARPI_VK_PROFILE` set (to anything but `0`), every
//! [`Submission`](super::Submission) writes a timestamp before its first
//! command and after each dispatch, and on completion adds each dispatch's
//! time (from the previous timestamp to its own: barriers and copies before
//! it count as its time) to a process-wide table by shader name. [`report`]
//! prints the table. It changes no result: the same commands run in the same
//! order, with timestamp writes between them.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use ash::vk;

use super::context::{Live, Object};
use super::error::{VkCall, VkResult};

/// Whether `SHARPI_VK_PROFILE` asks for the profile (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SHARPI_VK_PROFILE").is_some_and(|v| v != "0"))
}

/// Dispatches and nanoseconds of one shader.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    dispatches: u64,
    ns: f64,
}

fn table() -> &'static Mutex<HashMap<&'static str, Entry>> {
    static TABLE: OnceLock<Mutex<HashMap<&'static str, Entry>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// The table so far, one line per shader, the most time first:
/// milliseconds, share, dispatches, microseconds per dispatch. `None` when
/// nothing was profiled.
pub fn report() -> Option<String> {
    let t = table().lock().unwrap_or_else(|e| e.into_inner());
    if t.is_empty() {
        return None;
    }
    let mut rows: Vec<(&str, Entry)> = t.iter().map(|(k, v)| (*k, *v)).collect();
    rows.sort_by(|a, b| b.1.ns.total_cmp(&a.1.ns).then(a.0.cmp(b.0)));
    let total: f64 = rows.iter().map(|r| r.1.ns).sum();
    let mut s = format!(
        "{:<28} {:>10} {:>6} {:>10} {:>10}\n",
        "shader", "ms", "%", "dispatches", "us each"
    );
    for (name, e) in &rows {
        s += &format!(
            "{:<28} {:>10.1} {:>6.1} {:>10} {:>10.1}\n",
            name,
            e.ns / 1e6,
            100.0 * e.ns / total.max(1.0),
            e.dispatches,
            e.ns / 1e3 / e.dispatches.max(1) as f64
        );
    }
    s += &format!("{:<28} {:>10.1}\n", "total", total / 1e6);
    Some(s)
}

/// Timestamps of one submission: query 0 before the first command, query
/// `i + 1` after dispatch `i`.
pub(crate) struct Timestamps {
    pool: vk::QueryPool,
    capacity: u32,
    /// The shader of each timed dispatch.
    names: Vec<&'static str>,
    period_ns: f64,
}

/// Timestamps per submission at most (dispatches past it go untimed).
const CAPACITY: u32 = 8192;

impl Timestamps {
    /// A query pool, or `None` when profiling is off or the queue has no
    /// timestamps (`period_ns` 0).
    pub(crate) fn new(
        device: &ash::Device,
        live: &Live,
        period_ns: f32,
    ) -> VkResult<Option<Timestamps>> {
        if !enabled() || period_ns <= 0.0 {
            return Ok(None);
        }
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(CAPACITY);
        // SAFETY: valid create info for a live device; destroyed in `destroy`.
        let pool = unsafe { device.create_query_pool(&info, None) }.call("vkCreateQueryPool")?;
        live.made(Object::QueryPool);
        Ok(Some(Timestamps {
            pool,
            capacity: CAPACITY,
            names: Vec::new(),
            period_ns: f64::from(period_ns),
        }))
    }

    /// Records the reset of the pool and the first timestamp (at the start
    /// of a command buffer).
    pub(crate) fn begin(&mut self, device: &ash::Device, cmd: vk::CommandBuffer) {
        self.names.clear();
        // SAFETY: `cmd` is recording; the pool is live and no pending
        // command buffer uses it (the caller waited before reset).
        unsafe {
            device.cmd_reset_query_pool(cmd, self.pool, 0, self.capacity);
            device.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.pool, 0);
        }
    }

    /// Records the timestamp after a dispatch of `shader`.
    pub(crate) fn after(
        &mut self,
        device: &ash::Device,
        cmd: vk::CommandBuffer,
        shader: &'static str,
    ) {
        let q = self.names.len() as u32 + 1;
        if q >= self.capacity {
            return;
        }
        // SAFETY: `cmd` is recording; query `q` was reset in `begin` and is
        // written once.
        unsafe {
            device.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, self.pool, q)
        };
        self.names.push(shader);
    }

    /// Adds the times of a completed submission to the table.
    pub(crate) fn collect(&mut self, device: &ash::Device) -> VkResult<()> {
        if self.names.is_empty() {
            return Ok(());
        }
        let mut ticks = vec![0u64; self.names.len() + 1];
        // SAFETY: the submission completed (its fence signalled), so every
        // query 0..=names.len() was written; `ticks` has one u64 per query.
        unsafe {
            device.get_query_pool_results(
                self.pool,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .call("vkGetQueryPoolResults")?;
        let mut t = table().lock().unwrap_or_else(|e| e.into_inner());
        for (i, name) in self.names.iter().enumerate() {
            let e = t.entry(name).or_default();
            e.dispatches += 1;
            e.ns += ticks[i + 1].saturating_sub(ticks[i]) as f64 * self.period_ns;
        }
        self.names.clear();
        Ok(())
    }

    pub(crate) fn destroy(&mut self, device: &ash::Device, live: &Live) {
        // SAFETY: called once, after the submission's work completed.
        unsafe { device.destroy_query_pool(self.pool, None) };
        live.destroyed(Object::QueryPool);
    }
}
