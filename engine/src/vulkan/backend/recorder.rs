//! The submission of a [`VulkanBackend`]'s command list: one command
//! buffer, barriers where [`HazardTracker`] asks for them, one fence wait.

use super::cmd::Cmd;
use super::hazard::HazardTracker;
use super::replay::{Key, Replay};
use std::sync::Arc;

use super::{VulkanBackend, DOWNLOAD, INBOX, UPLOAD};
use crate::fault;
use crate::vulkan::{shaders, Buffer, BufferKind, Stages, Submission, VkError, VkResult};

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
    s.buffer = Some(Arc::new(b.ctx.create_buffer(name, size, kind)?));
    s.usable = size;
    Ok(())
}

/// Records every pending command into one command buffer and submits it;
/// with `wait`, waits and downloads `read` (buffer, byte offset, values),
/// otherwise leaves it running as the backend's `pending` (no `read`; the
/// submission holds a clone of every buffer it records, so none is freed
/// before it completes). Waits first for what an earlier call left running:
/// the staging buffers are reused, and the commands here need no barrier
/// against it. A waited submission is kept; the next waited one with the
/// same commands replays it ([`super::replay`]).
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
    let key = Key::new(
        cmds,
        staged.len(),
        read.as_ref().map(|r| (r.0, r.1, read_bytes)),
        (b.fuse.off, b.matvec_subgroups),
    );
    let replayed = wait && b.replay_enabled && b.replay.as_ref().is_some_and(|r| r.key == key);
    if replayed {
        replay(b, &staged)?;
    } else {
        // Dropped first: it holds the staging buffers, which may be regrown.
        b.replay = None;
        record(b, key, &staged, wait)?;
    }
    if let Some((_, _, out)) = read {
        b.slots[DOWNLOAD as usize]
            .buffer
            .as_ref()
            .expect("ensured")
            .read(0, out)?;
    }
    Ok(())
}

/// Submits the kept recording again with the inbox's new bytes, and waits.
fn replay(b: &mut VulkanBackend, staged: &[u8]) -> VkResult<()> {
    let r = b.replay.as_mut().expect("checked by the caller");
    if !staged.is_empty() {
        let upload = b.slots[UPLOAD as usize].buffer.as_ref().expect("recorded");
        // SAFETY: the kept submission, the only other holder of the upload
        // buffer, has completed (every flush waits for it before the next
        // one), and nothing else on the host touches the staging buffers.
        unsafe { upload.write_shared(0, staged) }?;
    }
    r.sub.replay()?;
    r.sub.wait()?;
    b.stats.submissions += 1;
    b.stats.replays += 1;
    b.stats.dispatches += r.dispatches;
    b.stats.barriers += r.barriers;
    Ok(())
}

/// Records `key`'s commands into a fresh command buffer and submits it;
/// with `wait`, waits and keeps it for replay (when replay is on).
fn record(b: &mut VulkanBackend, key: Key, staged: &[u8], wait: bool) -> VkResult<()> {
    let read_bytes = key.read.map_or(0, |r| r.2);
    if !staged.is_empty() {
        ensure(b, UPLOAD, staged.len() as u64, BufferKind::Upload)?;
        ensure(b, INBOX, staged.len() as u64, BufferKind::Storage)?;
        let upload = b.slots[UPLOAD as usize].buffer.as_mut().expect("ensured");
        // The only other holders were the submission waited for above and
        // the kept recording, dropped by the caller.
        Arc::get_mut(upload)
            .ok_or(VkError::Submission("upload staging buffer still in use"))?
            .write(0, staged)?;
    }
    if read_bytes > 0 {
        ensure(b, DOWNLOAD, read_bytes, BufferKind::Download)?;
    }
    let keep = wait && b.replay_enabled;
    // What is recorded: the list after the fusion pass (the key keeps the
    // plain list, so a replayed step runs no pass).
    let fused = super::fuse::pass(b, &key.cmds);
    let cmds: &[Cmd] = fused.as_deref().unwrap_or(&key.cmds);

    let mut tracker = HazardTracker::default();
    let (mut dispatches, mut barriers) = (0, 0);
    let slots = &b.slots;
    let buf = |id: u32| -> VkResult<&Arc<Buffer>> {
        slots[id as usize]
            .buffer
            .as_ref()
            .ok_or(VkError::Submission("command refers to a missing buffer"))
    };
    // Records shared buffers only ('static): it may outlive this call.
    let mut sub: Submission<'static> = if keep {
        b.ctx.reusable_submission()?
    } else {
        b.ctx.submission()?
    };
    // Everything before this submission on the queue has completed (each
    // flush waits), so the first commands need no barrier against it.
    if !staged.is_empty() {
        sub.copy(buf(UPLOAD)?, 0, buf(INBOX)?, 0, staged.len() as u64)?;
        sub.barrier(Stages::TRANSFER, Stages::COMPUTE | Stages::TRANSFER)?;
        barriers += 1;
    }
    // Where barriers go (before command i when `placed[i]`), then what
    // each one waits for and holds back: the stages of the commands since
    // the previous barrier, and of those up to the next. A decode step's
    // commands are all dispatches (compute to compute); a copy or fill on
    // either side adds the transfer stage.
    let mut prev: Option<&Cmd> = None;
    let placed: Vec<bool> = cmds
        .iter()
        .map(|cmd| {
            let needed = tracker.record(&cmd.access());
            let skip = fault::active("missing-barrier") && add_then_norm(prev, cmd);
            prev = Some(cmd);
            needed && !skip
        })
        .collect();
    let starts: Vec<usize> = (0..cmds.len()).filter(|&i| placed[i]).collect();
    let segment = |from: usize, to: usize| {
        cmds[from..to]
            .iter()
            .map(Cmd::stage)
            .fold(Stages::NONE, |a, s| a | s)
    };
    for (i, cmd) in cmds.iter().enumerate() {
        if placed[i] {
            let k = starts.partition_point(|&s| s < i);
            let before = if k == 0 { 0 } else { starts[k - 1] };
            let after = starts.get(k + 1).copied().unwrap_or(cmds.len());
            sub.barrier(segment(before, i), segment(i, after))?;
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
                let pipeline = b.ctx.pipeline(shader.0)?;
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
    }
    if let Some((src, offset, _)) = key.read {
        sub.barrier(Stages::COMPUTE | Stages::TRANSFER, Stages::TRANSFER)?;
        sub.copy(buf(src)?, offset, buf(DOWNLOAD)?, 0, read_bytes)?;
        sub.barrier(Stages::TRANSFER, Stages::HOST)?;
        barriers += 2;
    }
    b.stats.submissions += 1;
    b.stats.dispatches += dispatches;
    b.stats.barriers += barriers;
    if !wait {
        sub.submit()?;
        // Every later use of the queue's results (a flush, `read`,
        // `check_sentinels`, `upload`) waits for it first.
        b.pending = Some(sub);
        return Ok(());
    }
    sub.submit_and_wait()?;
    if keep {
        b.replay = Some(Replay {
            key,
            sub,
            dispatches,
            barriers,
        });
    }
    Ok(())
}

/// A residual add followed by the RMS norm that reads its sum (fault
/// `missing-barrier` drops the barrier between them).
fn add_then_norm(prev: Option<&Cmd>, cmd: &Cmd) -> bool {
    let is = |c: Option<&Cmd>, names: &[&str]| matches!(c, Some(Cmd::Dispatch { shader, .. }) if names.contains(&shader.name));
    matches!(prev, Some(Cmd::Dispatch { shader, push, .. }) if crate::vulkan::push::is_add(shader, push))
        && is(
            Some(cmd),
            &[
                shaders::RMS_NORM.name,
                shaders::RMS_NORM_W.name,
                shaders::RMS_NORM_W_Q8_0.name,
                shaders::RMS_NORM_W_Q8_1.name,
                shaders::ADD_RMS_NORM_W.name,
                shaders::ADD_RMS_NORM_W_Q8_0.name,
                shaders::ADD_RMS_NORM_W_Q8_1.name,
            ],
        )
}
