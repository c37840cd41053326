//! Collects what the validation layer reports, through a debug-utils messenger.
//!
//! Contexts share their device and instance (see [`super::device`]), so a
//! message is attributed by thread: the layer reports during the call that
//! caused it, on the calling thread, and every context marks itself on the
//! thread before it calls into Vulkan ([`attribute_to`]). A message raised
//! while no context is marked (creating the instance or a device) goes to
//! the instance's log, which every context reports as well.

use std::cell::RefCell;
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

use ash::vk;

/// Warnings and errors reported by the validation layer (or the driver) through
/// `VK_EXT_debug_utils`: one per context, and one per instance for what no
/// context's call raised (the messenger's `p_user_data`).
#[derive(Debug, Default)]
pub struct ValidationLog {
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    messages: Vec<String>,
    errors: usize,
}

impl ValidationLog {
    /// Every warning and error message so far, formatted as
    /// `"ERROR [VUID or id name] message"`.
    pub fn messages(&self) -> Vec<String> {
        self.lock().messages.clone()
    }

    /// Number of warning and error messages so far.
    pub fn count(&self) -> usize {
        self.lock().messages.len()
    }

    /// Number of error-severity messages so far.
    pub fn error_count(&self) -> usize {
        self.lock().errors
    }

    /// Forgets all messages so far.
    pub fn clear(&self) {
        let mut entries = self.lock();
        entries.messages.clear();
        entries.errors = 0;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A poisoned lock only means a panic elsewhere while holding it; the
        // Vec is still consistent, and the callback must never panic.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn record(&self, error: bool, text: String) {
        let mut entries = self.lock();
        entries.errors += usize::from(error);
        entries.messages.push(text);
    }
}

thread_local! {
    /// The log of the context whose Vulkan call this thread makes.
    static ATTRIBUTED: RefCell<Option<Arc<ValidationLog>>> = const { RefCell::new(None) };
}

/// Attributes what the layer reports on this thread from now on to `log`
/// (`None`: to the instance's log).
pub(crate) fn attribute_to(log: Option<&Arc<ValidationLog>>) {
    ATTRIBUTED.with(|a| {
        let Ok(mut a) = a.try_borrow_mut() else {
            return;
        };
        let same = match (a.as_ref(), log) {
            (Some(x), Some(y)) => Arc::ptr_eq(x, y),
            (None, None) => true,
            _ => false,
        };
        if !same {
            *a = log.cloned();
        }
    });
}

/// The log marked on this thread, if any.
fn attributed() -> Option<Arc<ValidationLog>> {
    ATTRIBUTED
        .try_with(|a| a.try_borrow().ok().and_then(|a| a.clone()))
        .ok()
        .flatten()
}

/// The severities the messenger subscribes to.
pub(crate) fn severities() -> vk::DebugUtilsMessageSeverityFlagsEXT {
    vk::DebugUtilsMessageSeverityFlagsEXT::WARNING | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
}

/// The message types the messenger subscribes to.
pub(crate) fn message_types() -> vk::DebugUtilsMessageTypeFlagsEXT {
    vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
        | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE
}

/// The messenger callback: records in the log marked on the calling thread,
/// else in the one `p_user_data` points to (the instance's, live for the
/// life of the process).
/// Never panics and never unwinds into the caller: the body runs under
/// `catch_unwind` and a failure there is dropped.
pub(crate) unsafe extern "system" fn callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user_data: *mut c_void,
) -> vk::Bool32 {
    let _ = std::panic::catch_unwind(|| {
        if user_data.is_null() {
            return;
        }
        // SAFETY: the instance code sets p_user_data to a pointer into an
        // Arc<ValidationLog> that the instance keeps, and instances are never
        // destroyed (device.rs); the log is only accessed through &self and
        // synchronises with its Mutex.
        let log = unsafe { &*user_data.cast::<ValidationLog>() };
        let error = severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR);
        let level = if error { "ERROR" } else { "WARNING" };
        let (id, message) = if data.is_null() {
            (String::new(), String::from("(no callback data)"))
        } else {
            // SAFETY: the layer passes a valid callback-data struct for the duration
            // of the call; its string pointers are null or NUL-terminated.
            let data = unsafe { &*data };
            let text = |p: *const std::ffi::c_char| {
                if p.is_null() {
                    String::new()
                } else {
                    // SAFETY: non-null strings from the layer are NUL-terminated
                    // and valid during the callback.
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                }
            };
            (text(data.p_message_id_name), text(data.p_message))
        };
        let text = format!("{level} [{id}] {message}");
        match attributed() {
            Some(mine) => mine.record(error, text),
            None => log.record(error, text),
        }
    });
    vk::FALSE
}
