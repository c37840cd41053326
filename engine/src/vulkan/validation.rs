//! Collects what the validation layer reports, through a debug-utils messenger.

use std::ffi::{c_void, CStr};
use std::sync::Mutex;

use ash::vk;

/// Warnings and errors reported by the validation layer (or the driver) through
/// `VK_EXT_debug_utils`. Shared with the messenger callback by a raw pointer held
/// in `p_user_data`; the owner keeps it alive until the messenger is destroyed.
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

    fn record(&self, error: bool, text: String) {
        let mut entries = self.lock();
        entries.errors += usize::from(error);
        entries.messages.push(text);
    }
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

/// The messenger callback. `p_user_data` must point to a live [`ValidationLog`].
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
        // Arc<ValidationLog> that it keeps alive until after the messenger (and the
        // instance, for the create/destroy-time messenger) is destroyed; the log is
        // only accessed through &self and synchronises with its Mutex.
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
        log.record(error, format!("{level} [{id}] {message}"));
    });
    vk::FALSE
}
