//! Ctrl-C in a conversation: while an answer is being generated it stops
//! the answer (the turn goes back to the user); while sharpi waits for
//! input it ends the program (exit status 130), as llama-cli does.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set while an answer is generated.
static GENERATING: AtomicBool = AtomicBool::new(false);
/// Set by Ctrl-C during an answer; cleared when the next one starts.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    if GENERATING.load(Ordering::SeqCst) {
        INTERRUPTED.store(true, Ordering::SeqCst);
        return;
    }
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is a
    // static byte string.
    unsafe {
        libc::write(2, b"\n".as_ptr().cast(), 1);
        libc::_exit(130);
    }
}

/// Installs the SIGINT handler (reads restart after it).
pub fn install() -> std::io::Result<()> {
    // SAFETY: the sigaction struct is zeroed (a valid empty mask and no
    // flags) before its fields are set; the handler only touches atomics
    // and async-signal-safe calls.
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Marks an answer in progress until dropped: Ctrl-C meanwhile sets
/// [`interrupted`] instead of ending the program.
pub struct Answering(());

impl Answering {
    pub fn start() -> Answering {
        INTERRUPTED.store(false, Ordering::SeqCst);
        GENERATING.store(true, Ordering::SeqCst);
        Answering(())
    }

    /// Whether Ctrl-C was pressed since this answer started.
    pub fn interrupted(&self) -> bool {
        INTERRUPTED.load(Ordering::SeqCst)
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        GENERATING.store(false, Ordering::SeqCst);
    }
}
