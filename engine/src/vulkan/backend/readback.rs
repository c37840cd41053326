//! Waiting for a [`VulkanBackend`]'s work and reading its results back: the
//! flush before a host read, and the check of the sentinel tails.

use super::{recorder, VulkanBackend, SENTINEL_BYTES, SENTINEL_WORD};
use crate::ops::BackendError;

impl VulkanBackend {
    /// Submits everything recorded and waits; then downloads `read` (buffer,
    /// byte offset, f32 count) into `out`.
    pub(super) fn flush(
        &mut self,
        read: Option<(u32, u64, &mut [f32])>,
    ) -> Result<(), BackendError> {
        if let Some(e) = self.error.take() {
            self.cmds.clear();
            self.staged.clear();
            return Err(e);
        }
        recorder::flush(self, read, true).map_err(|e| self.err(e))
    }

    /// Waits for the work [`Ops::submit`] started, if any.
    pub(super) fn wait_pending(&mut self) -> Result<(), BackendError> {
        if let Some(mut p) = self.pending.take() {
            p.wait().map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Checks every sentinel tail; `Err` lists the buffers whose tail
    /// changed. Submits pending work first.
    pub fn check_sentinels(&mut self) -> Result<(), BackendError> {
        self.flush(None)?;
        let mut bad = Vec::new();
        for (id, slot) in self.slots.iter().enumerate() {
            let (Some(b), true) = (&slot.buffer, slot.sentinel) else {
                continue;
            };
            let words: Vec<u32> = self
                .ctx
                .download_vec(b, slot.usable, (SENTINEL_BYTES / 4) as usize)
                .map_err(|e| self.err(e))?;
            if let Some(i) = words.iter().position(|&w| w != SENTINEL_WORD) {
                bad.push(format!(
                    "buffer {id} `{}`: word {i} after the end is {:#010x}",
                    b.name(),
                    words[i]
                ));
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(self.err(format!("sentinels overwritten: {}", bad.join("; "))))
        }
    }
}
