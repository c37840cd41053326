//! One-shot host transfers: [`Context::upload`] and [`Context::download`]
//! copy through a staging buffer in a submission of their own, and wait.

use super::context::Context;
use super::error::VkResult;
use super::memory::{bytes_of, Buffer, BufferKind, HostScalar};
use super::submit::Stages;

impl Context {
    /// Copies `data` into `dst` at byte `offset` through a staging buffer, and
    /// waits. Begins with a compute/transfer -> transfer barrier (earlier work on
    /// the queue is done with `dst`) and ends with a transfer -> compute/transfer
    /// barrier, so later dispatches and copies on this queue see the data.
    pub fn upload<T: HostScalar>(&self, dst: &Buffer, offset: u64, data: &[T]) -> VkResult<()> {
        let bytes = bytes_of(data);
        if bytes.is_empty() {
            return Ok(());
        }
        dst.check_range(offset, bytes.len() as u64)?;
        let mut staging = self.create_buffer(
            &format!("{} (upload)", dst.name()),
            bytes.len() as u64,
            BufferKind::Upload,
        )?;
        staging.write(0, data)?;
        let mut sub = self.submission()?;
        sub.barrier(Stages::COMPUTE | Stages::TRANSFER, Stages::TRANSFER)?;
        sub.copy(&staging, 0, dst, offset, bytes.len() as u64)?;
        sub.barrier(Stages::TRANSFER, Stages::COMPUTE | Stages::TRANSFER)?;
        sub.submit_and_wait()
    }

    /// Copies `out.len()` elements from `src` at byte `offset` through a staging
    /// buffer, and waits. Begins with a compute/transfer -> transfer barrier, so
    /// earlier dispatches' and copies' writes are seen.
    pub fn download<T: HostScalar>(
        &self,
        src: &Buffer,
        offset: u64,
        out: &mut [T],
    ) -> VkResult<()> {
        let size = std::mem::size_of_val(out) as u64;
        if size == 0 {
            return Ok(());
        }
        src.check_range(offset, size)?;
        let staging = self.create_buffer(
            &format!("{} (download)", src.name()),
            size,
            BufferKind::Download,
        )?;
        let mut sub = self.submission()?;
        sub.barrier(Stages::COMPUTE | Stages::TRANSFER, Stages::TRANSFER)?;
        sub.copy(src, offset, &staging, 0, size)?;
        sub.barrier(Stages::TRANSFER, Stages::HOST)?;
        sub.submit_and_wait()?;
        drop(sub);
        staging.read(0, out)
    }

    /// [`Context::download`] into a new vector of `len` elements.
    pub fn download_vec<T: HostScalar>(
        &self,
        src: &Buffer,
        offset: u64,
        len: usize,
    ) -> VkResult<Vec<T>> {
        let mut out = vec![T::default(); len];
        self.download(src, offset, &mut out)?;
        Ok(out)
    }
}
