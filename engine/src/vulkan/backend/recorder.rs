//! The command list of a [`VulkanBackend`] and its submission: one command
//! buffer, barriers where [`HazardTracker`] asks for them, one fence wait.

use super::hazard::{Access, HazardTracker};
use super::{VulkanBackend, DOWNLOAD, INBOX, UPLOAD};
use crate::fault;
use crate::vulkan::{shaders, Buffer, BufferKind, Shader, Stages, VkError, VkResult};

/// One recorded command.
pub(super) enum Cmd {
    Dispatch {
        shader: &'static Shader,
        /// Buffer slot per binding.
        bufs: Vec<u32>,
        push: Vec<u8>,
        groups: [u32; 3],
        access: Vec<Access>,
    },
    Copy {
        src: u32,
        src_offset: u64,
        dst: u32,
        dst_offset: u64,
        size: u64,
    },
    Fill {
        buf: u32,
        offset: u64,
        size: u64,
        value: u32,
    },
}

impl Cmd {
    fn access(&self) -> Vec<Access> {
        match self {
            Cmd::Dispatch { access, .. } => access.clone(),
            Cmd::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                size,
            } => vec![
                Access {
                    buf: *src,
                    range: *src_offset..src_offset + size,
                    write: false,
                },
                Access {
                    buf: *dst,
                    range: *dst_offset..dst_offset + size,
                    write: true,
                },
            ],
            Cmd::Fill {
                buf, offset, size, ..
            } => vec![Access {
                buf: *buf,
                range: *offset..offset + size,
                write: true,
            }],
        }
    }
}

/// Grows a host-visible staging slot to at least `size` bytes.
fn ensure(b: &mut VulkanBackend, slot: u32, size: u64, kind: BufferKind) -> VkResult<()> {
    let s = &mut b.slots[slot as usize];
    if s.buffer.as_ref().is_some_and(|x| x.size() >= size) {
        return Ok(());
    }
    // Round up so that slowly growing requests do not reallocate every time.
    let size = size.next_power_of_two().max(4096);
    let name = match slot {
        UPLOAD => "upload staging",
        DOWNLOAD => "download staging",
        _ => "inbox",
    };
    s.buffer = None;
    s.buffer = Some(b.ctx.create_buffer(name, size, kind)?);
    s.usable = size;
    Ok(())
}

/// Records every pending command into one command buffer and submits it;
/// with `wait`, waits and downloads `read` (buffer, byte offset, values),
/// otherwise leaves it running as the backend's `pending` (no `read`).
/// Waits first for what an earlier call left running: the staging buffers
/// are reused, and the commands here need no barrier against it.
pub(super) fn flush(
    b: &mut VulkanBackend,
    read: Option<(u32, u64, &mut [f32])>,
    wait: bool,
) -> VkResult<()> {
    assert!(wait || read.is_none(), "a read waits for its submission");
    if let Some(mut p) = b.pending.take() {
        p.wait()?;
    }
    let cmds = std::mem::take(&mut b.cmds);
    let staged = std::mem::take(&mut b.staged);
    let read_bytes = read
        .as_ref()
        .map_or(0, |r| std::mem::size_of_val(r.2) as u64);
    if cmds.is_empty() && read_bytes == 0 {
        return Ok(());
    }
    if !staged.is_empty() {
        ensure(b, UPLOAD, staged.len() as u64, BufferKind::Upload)?;
        ensure(b, INBOX, staged.len() as u64, BufferKind::Storage)?;
        b.slots[UPLOAD as usize]
            .buffer
            .as_mut()
            .expect("ensured")
            .write(0, &staged)?;
    }
    if read_bytes > 0 {
        ensure(b, DOWNLOAD, read_bytes, BufferKind::Download)?;
    }

    let mut tracker = HazardTracker::default();
    let (mut dispatches, mut barriers) = (0, 0);
    let running = {
        let slots = &b.slots;
        let buf = |id: u32| -> VkResult<&Buffer> {
            slots[id as usize]
                .buffer
                .as_ref()
                .ok_or(VkError::Submission("command refers to a missing buffer"))
        };
        let mut sub = b.ctx.submission()?;
        // Everything before this submission on the queue has completed (each
        // flush waits), so the first commands need no barrier against it.
        if !staged.is_empty() {
            sub.copy(buf(UPLOAD)?, 0, buf(INBOX)?, 0, staged.len() as u64)?;
            sub.barrier(Stages::TRANSFER, Stages::COMPUTE | Stages::TRANSFER)?;
            barriers += 1;
        }
        let mut prev: Option<&Cmd> = None;
        for cmd in &cmds {
            let needed = tracker.record(&cmd.access());
            if needed && !(fault::active("missing-barrier") && add_then_norm(prev, cmd)) {
                sub.barrier(
                    Stages::COMPUTE | Stages::TRANSFER,
                    Stages::COMPUTE | Stages::TRANSFER,
                )?;
                barriers += 1;
            }
            match cmd {
                Cmd::Dispatch {
                    shader,
                    bufs,
                    push,
                    groups,
                    ..
                } => {
                    let pipeline = b.ctx.pipeline(shader)?;
                    let bound = bufs
                        .iter()
                        .map(|&id| buf(id))
                        .collect::<VkResult<Vec<_>>>()?;
                    sub.dispatch_bytes(pipeline, &bound, push, *groups)?;
                    dispatches += 1;
                }
                Cmd::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => sub.copy(buf(*src)?, *src_offset, buf(*dst)?, *dst_offset, *size)?,
                Cmd::Fill {
                    buf: id,
                    offset,
                    size,
                    value,
                } => sub.fill(buf(*id)?, *offset, *size, *value)?,
            }
            prev = Some(cmd);
        }
        if let Some((src, offset, _)) = &read {
            sub.barrier(Stages::COMPUTE | Stages::TRANSFER, Stages::TRANSFER)?;
            sub.copy(buf(*src)?, *offset, buf(DOWNLOAD)?, 0, read_bytes)?;
            sub.barrier(Stages::TRANSFER, Stages::HOST)?;
            barriers += 2;
        }
        if wait {
            sub.submit_and_wait()?;
            None
        } else {
            sub.submit()?;
            Some(sub)
        }
    };
    if let Some(sub) = running {
        // SAFETY: only the lifetime changes. The submission borrows buffers
        // of `b.slots`; the backend drops a tensor buffer only when it is
        // dropped itself, and `pending` is its first field, dropped (which
        // waits for the fence) before `slots`. The staging buffers that
        // `ensure` may replace are replaced only by a later flush, which
        // waits for `pending` first, as does every other use of the queue's
        // results (`read`, `check_sentinels`, `upload`).
        b.pending = Some(unsafe {
            std::mem::transmute::<crate::vulkan::Submission<'_>, crate::vulkan::Submission<'static>>(
                sub,
            )
        });
    }
    b.stats.submissions += 1;
    b.stats.dispatches += dispatches;
    b.stats.barriers += barriers;
    if let Some((_, _, out)) = read {
        b.slots[DOWNLOAD as usize]
            .buffer
            .as_ref()
            .expect("ensured")
            .read(0, out)?;
    }
    Ok(())
}

/// A residual add followed by the RMS norm that reads its sum (fault
/// `missing-barrier` drops the barrier between them).
fn add_then_norm(prev: Option<&Cmd>, cmd: &Cmd) -> bool {
    let is = |c: Option<&Cmd>, names: &[&str]| matches!(c, Some(Cmd::Dispatch { shader, .. }) if names.contains(&shader.name));
    matches!(prev, Some(Cmd::Dispatch { shader, push, .. }) if super::op_elementwise::is_add(shader, push))
        && is(
            Some(cmd),
            &[shaders::RMS_NORM.name, shaders::RMS_NORM_W.name],
        )
}
