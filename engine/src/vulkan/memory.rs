//! Buffers through gpu-allocator: device-local storage buffers and host-visible
//! staging buffers ([`transfer`](super::transfer) copies through the latter).

use std::mem::ManuallyDrop;

use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use gpu_allocator::MemoryLocation;

use super::context::{Context, Object};
use super::error::{VkCall, VkError, VkResult};

/// What a buffer is for; decides its memory and usage flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferKind {
    /// Device-local storage buffer: shader reads/writes, copy source and target.
    Storage,
    /// Host-visible staging buffer the host writes and the device copies from.
    Upload,
    /// Host-visible staging buffer the device copies into and the host reads.
    Download,
}

impl BufferKind {
    fn usage(self) -> vk::BufferUsageFlags {
        match self {
            Self::Storage => {
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST
            }
            Self::Upload => vk::BufferUsageFlags::TRANSFER_SRC,
            Self::Download => vk::BufferUsageFlags::TRANSFER_DST,
        }
    }

    fn location(self) -> MemoryLocation {
        match self {
            Self::Storage => MemoryLocation::GpuOnly,
            Self::Upload => MemoryLocation::CpuToGpu,
            Self::Download => MemoryLocation::GpuToCpu,
        }
    }
}

/// Plain scalar types whose slices can be copied to and from buffers as bytes.
///
/// # Safety
/// Implementors have no padding and no invalid bit patterns (every byte
/// sequence of the right length is a valid value).
pub unsafe trait HostScalar: Copy + Default + 'static {}

macro_rules! host_scalar {
    ($($t:ty),*) => {$(
        // SAFETY: a primitive number type: no padding, every bit pattern valid.
        unsafe impl HostScalar for $t {}
    )*};
}
host_scalar!(
    u8,
    i8,
    u16,
    i16,
    u32,
    i32,
    u64,
    i64,
    f32,
    f64,
    half::f16,
    half::bf16
);

pub(crate) fn bytes_of<T: HostScalar>(data: &[T]) -> &[u8] {
    // SAFETY: HostScalar types have no padding, so the slice's memory is
    // size_of_val(data) initialised bytes; u8 has alignment 1; the result borrows
    // `data`.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

fn bytes_of_mut<T: HostScalar>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as in bytes_of; in addition every byte pattern written through the
    // returned slice is a valid T (HostScalar's contract), and the result borrows
    // `data` mutably, so nothing else sees it meanwhile.
    unsafe {
        std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(data))
    }
}

/// A `VkBuffer` with its own allocation. Keeps its [`Context`] alive; Drop
/// destroys the buffer, then frees the memory. Dropping a buffer that pending
/// GPU work uses is prevented by [`Submission`](super::Submission) borrowing it
/// (or holding a clone of its `Arc`).
pub struct Buffer {
    pub(crate) ctx: Context,
    pub(crate) raw: vk::Buffer,
    allocation: ManuallyDrop<Allocation>,
    size: u64,
    kind: BufferKind,
    name: String,
}

impl Context {
    /// Creates a buffer of `size` bytes (`size > 0`). `name` shows in errors and
    /// in gpu-allocator reports.
    pub fn create_buffer(&self, name: &str, size: u64, kind: BufferKind) -> VkResult<Buffer> {
        let fail = |message: String| VkError::Buffer {
            name: name.to_string(),
            message,
        };
        if size == 0 {
            return Err(fail("size 0".into()));
        }
        if kind == BufferKind::Storage
            && size > u64::from(self.shared.dev.limits.max_storage_buffer_range)
        {
            return Err(fail(format!(
                "{size} bytes exceed the device's maxStorageBufferRange ({})",
                self.shared.dev.limits.max_storage_buffer_range
            )));
        }
        let device = self.shared.device();
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(kind.usage())
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create info for a live device; the buffer is destroyed in
        // Drop (or below on failure).
        let raw = unsafe { device.create_buffer(&info, None) }.call("vkCreateBuffer")?;
        self.shared.live.made(Object::Buffer);
        // SAFETY: `raw` is a live buffer of this device.
        let requirements = unsafe { device.get_buffer_memory_requirements(raw) };
        let allocation = self.shared.allocator().allocate(&AllocationCreateDesc {
            name,
            requirements,
            location: kind.location(),
            linear: true,
            allocation_scheme: AllocationScheme::GpuAllocatorManaged,
        });
        let allocation = match allocation {
            Ok(a) => a,
            Err(source) => {
                // SAFETY: `raw` is unused and has no memory bound.
                unsafe { device.destroy_buffer(raw, None) };
                self.shared.live.destroyed(Object::Buffer);
                return Err(VkError::Alloc {
                    what: format!("buffer `{name}`, {size} bytes"),
                    source,
                });
            }
        };
        // SAFETY: the allocation satisfies `requirements` of `raw` (the allocator
        // chose type, size and alignment from them) and is not bound elsewhere; it is
        // freed only after the buffer is destroyed (Drop).
        let bound =
            unsafe { device.bind_buffer_memory(raw, allocation.memory(), allocation.offset()) };
        if let Err(result) = bound {
            // SAFETY: `raw` is unused; its allocation is freed right after.
            unsafe { device.destroy_buffer(raw, None) };
            self.shared.live.destroyed(Object::Buffer);
            let _ = self.shared.allocator().free(allocation);
            return Err(VkError::Vk {
                call: "vkBindBufferMemory",
                result,
            });
        }
        Ok(Buffer {
            ctx: self.clone(),
            raw,
            allocation: ManuallyDrop::new(allocation),
            size,
            kind,
            name: name.into(),
        })
    }

    /// A device-local storage buffer of `len` elements of `T`.
    pub fn storage_buffer<T: HostScalar>(&self, name: &str, len: usize) -> VkResult<Buffer> {
        self.create_buffer(
            name,
            (len * std::mem::size_of::<T>()) as u64,
            BufferKind::Storage,
        )
    }
}

impl Buffer {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// What the buffer is for.
    pub fn kind(&self) -> BufferKind {
        self.kind
    }

    /// The name given at creation.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw handle, for recording commands this module does not wrap.
    pub fn raw(&self) -> vk::Buffer {
        self.raw
    }

    pub(crate) fn check_range(&self, offset: u64, len: u64) -> VkResult<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(self.error(format!(
                "range {offset}..+{len} exceeds its {} bytes",
                self.size
            ))),
        }
    }

    fn error(&self, message: String) -> VkError {
        VkError::Buffer {
            name: self.name.clone(),
            message,
        }
    }

    /// Writes `data` at byte `offset` of a host-visible buffer. The memory is
    /// host-coherent (gpu-allocator picks HOST_COHERENT for CpuToGpu/GpuToCpu), and
    /// vkQueueSubmit makes host writes visible to commands submitted after it.
    pub fn write<T: HostScalar>(&mut self, offset: u64, data: &[T]) -> VkResult<()> {
        let bytes = bytes_of(data);
        self.check_range(offset, bytes.len() as u64)?;
        let name = self.name.clone();
        let mapped = self.allocation.mapped_slice_mut().ok_or(VkError::Buffer {
            name,
            message: "not host-visible".into(),
        })?;
        mapped[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    /// [`write`](Self::write) of bytes through a shared handle: for a
    /// staging buffer that a kept submission also holds (an `Arc` clone, so
    /// no `&mut` is to be had).
    ///
    /// # Safety
    /// No device work in flight may access the buffer (its submissions have
    /// completed), and no other host code may read or write it during the
    /// call.
    pub(crate) unsafe fn write_shared(&self, offset: u64, data: &[u8]) -> VkResult<()> {
        self.check_range(offset, data.len() as u64)?;
        let ptr = self
            .allocation
            .mapped_ptr()
            .ok_or_else(|| self.error("not host-visible".into()))?;
        // SAFETY: the mapping covers the whole buffer and the range is in
        // bounds (checked above); the caller guarantees that nothing else
        // reads or writes these bytes during the copy; `data` is host memory
        // that cannot overlap the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                ptr.as_ptr().cast::<u8>().add(offset as usize),
                data.len(),
            )
        };
        Ok(())
    }

    /// Reads `out.len()` elements from byte `offset` of a host-visible buffer. The
    /// device writes must have been made visible to the host first (a transfer ->
    /// host barrier, then the fence wait), as [`Context::download`] does.
    pub fn read<T: HostScalar>(&self, offset: u64, out: &mut [T]) -> VkResult<()> {
        let dst = bytes_of_mut(out);
        self.check_range(offset, dst.len() as u64)?;
        let mapped = self
            .allocation
            .mapped_slice()
            .ok_or_else(|| self.error("not host-visible".into()))?;
        dst.copy_from_slice(&mapped[offset as usize..offset as usize + dst.len()]);
        Ok(())
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("name", &self.name)
            .field("size", &self.size)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: no pending work uses the buffer: a Submission borrows every buffer
        // it records for its whole life, or holds its Arc until the fence has
        // signalled, and waits for its fence before it drops.
        // The buffer is destroyed before its memory is freed.
        unsafe { self.ctx.shared.device().destroy_buffer(self.raw, None) };
        self.ctx.shared.live.destroyed(Object::Buffer);
        // SAFETY: taken exactly once, here; `self.allocation` is not used again.
        let allocation = unsafe { ManuallyDrop::take(&mut self.allocation) };
        let _ = self.ctx.shared.allocator().free(allocation);
    }
}
