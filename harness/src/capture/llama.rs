//! A thin, safe layer over the llama.cpp C API (crate llama-cpp-sys-2):
//! backend, model, context, batch, tokenizer. Every `unsafe` block of the
//! capture's llama.cpp use is here or in `taps.rs`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::NonNull;

use llama_cpp_sys_2 as sys;

use super::taps::{self, TapRecorder};
use crate::reference::format::{LlamaCppInfo, ModelFacts, VocabFacts};

/// The crate that builds llama.cpp, as pinned in Cargo.toml.
pub const CRATE_VERSION: &str = "llama-cpp-sys-2 0.1.161";
/// utilityai/llama-cpp-rs commit the published 0.1.161 crate was packaged
/// from (its .cargo_vcs_info.json). Update both together with the pin.
pub const CRATE_COMMIT: &str = "e7af607ebd5ec2932709ef918c17cca2f9b0fce4";

/// Copies a C string owned by llama.cpp (static or valid for the call).
fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: llama.cpp returns NUL-terminated strings that stay valid at
    // least until the next call into it; we copy right away.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A log callback that drops every message.
unsafe extern "C" fn silent_log(
    _level: sys::ggml_log_level,
    _text: *const c_char,
    _user: *mut c_void,
) {
}

/// llama.cpp's global state, initialised once for the process.
pub struct Backend {
    _not_send: PhantomData<*const ()>,
}

impl Backend {
    /// Initialises llama.cpp; its logging is silenced unless `verbose`.
    pub fn init(verbose: bool) -> Backend {
        if !verbose {
            // SAFETY: the callback is a plain function that ignores its
            // arguments; llama_log_set only stores it (and ggml's copy).
            unsafe { sys::llama_log_set(Some(silent_log), std::ptr::null_mut()) };
        }
        // SAFETY: called once, before any other llama.cpp use, on this thread.
        unsafe { sys::llama_backend_init() };
        Backend {
            _not_send: PhantomData,
        }
    }

    /// Versions and build facts of the llama.cpp in this binary.
    pub fn info(&self) -> LlamaCppInfo {
        // SAFETY: these return pointers to static strings.
        let (llama, ggml, commit, system) = unsafe {
            (
                sys::llama_version(),
                sys::ggml_version(),
                sys::ggml_commit(),
                sys::llama_print_system_info(),
            )
        };
        LlamaCppInfo {
            crate_version: CRATE_VERSION.to_string(),
            crate_commit: CRATE_COMMIT.to_string(),
            llama_version: c_str(llama),
            ggml_version: c_str(ggml),
            ggml_commit: c_str(commit),
            system_info: c_str(system).trim().to_string(),
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // SAFETY: every model and context borrows the backend, so they are gone.
        unsafe { sys::llama_backend_free() };
    }
}

/// A loaded model (weights on the CPU, no weight repacking).
pub struct Model<'b> {
    ptr: NonNull<sys::llama_model>,
    vocab: NonNull<sys::llama_vocab>,
    _backend: PhantomData<&'b Backend>,
}

impl<'b> Model<'b> {
    pub fn load(_backend: &'b Backend, path: &Path) -> Result<Model<'b>, String> {
        let cpath = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| format!("{}: path contains NUL", path.display()))?;
        // SAFETY: default params are plain data.
        let mut params = unsafe { sys::llama_model_default_params() };
        params.n_gpu_layers = 0;
        params.use_extra_bufts = false;
        // SAFETY: cpath is a valid NUL-terminated path for the call; params
        // holds no pointers we set.
        let ptr = unsafe { sys::llama_model_load_from_file(cpath.as_ptr(), params) };
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| format!("{}: llama.cpp could not load the model", path.display()))?;
        // SAFETY: ptr is a live model; the vocab lives as long as the model.
        let vocab = unsafe { sys::llama_model_get_vocab(ptr.as_ptr()) };
        let Some(vocab) = NonNull::new(vocab as *mut sys::llama_vocab) else {
            // SAFETY: ptr came from llama_model_load_from_file and is freed once.
            unsafe { sys::llama_model_free(ptr.as_ptr()) };
            return Err(format!("{}: model has no vocabulary", path.display()));
        };
        Ok(Model {
            ptr,
            vocab,
            _backend: PhantomData,
        })
    }

    fn raw(&self) -> *const sys::llama_model {
        self.ptr.as_ptr()
    }

    fn vocab(&self) -> *const sys::llama_vocab {
        self.vocab.as_ptr()
    }

    pub fn n_vocab(&self) -> usize {
        // SAFETY: live vocab.
        unsafe { sys::llama_vocab_n_tokens(self.vocab()) as usize }
    }

    pub fn facts(&self) -> ModelFacts {
        let mut buf = vec![0u8; 256];
        // SAFETY: live model; buf has buf.len() bytes and llama_model_desc
        // writes at most that many, NUL-terminated.
        let n = unsafe { sys::llama_model_desc(self.raw(), buf.as_mut_ptr().cast(), buf.len()) };
        buf.truncate(n.clamp(0, 255) as usize);
        // SAFETY: live model; plain getters.
        unsafe {
            ModelFacts {
                n_layer: sys::llama_model_n_layer(self.raw()) as u32,
                n_embd: sys::llama_model_n_embd(self.raw()) as u32,
                n_head: sys::llama_model_n_head(self.raw()) as u32,
                n_head_kv: sys::llama_model_n_head_kv(self.raw()) as u32,
                n_vocab: self.n_vocab() as u32,
                n_ctx_train: sys::llama_model_n_ctx_train(self.raw()) as u32,
                desc: String::from_utf8_lossy(&buf).into_owned(),
            }
        }
    }

    pub fn vocab_facts(&self) -> VocabFacts {
        let v = self.vocab();
        let n = self.n_vocab() as i32;
        // SAFETY: live vocab; plain getters.
        unsafe {
            VocabFacts {
                n_tokens: n as u32,
                add_bos: sys::llama_vocab_get_add_bos(v),
                add_eos: sys::llama_vocab_get_add_eos(v),
                bos: sys::llama_vocab_bos(v),
                eos: sys::llama_vocab_eos(v),
                eot: sys::llama_vocab_eot(v),
                eog_tokens: (0..n).filter(|&t| sys::llama_vocab_is_eog(v, t)).collect(),
            }
        }
    }

    /// `llama_model_chat_template(model, NULL)`.
    pub fn chat_template(&self) -> Option<String> {
        // SAFETY: live model; the result is NULL or a string owned by the model.
        let p = unsafe { sys::llama_model_chat_template(self.raw(), std::ptr::null()) };
        (!p.is_null()).then(|| c_str(p))
    }

    pub fn is_eog(&self, token: i32) -> bool {
        // SAFETY: live vocab.
        unsafe { sys::llama_vocab_is_eog(self.vocab(), token) }
    }

    /// `llama_tokenize`.
    pub fn tokenize(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<i32>, String> {
        let len = i32::try_from(text.len()).map_err(|_| "text too long to tokenize".to_string())?;
        let mut out = vec![0i32; text.len() + 8];
        loop {
            // SAFETY: text is valid for len bytes (need not be NUL-terminated);
            // out has out.len() writable tokens.
            let n = unsafe {
                sys::llama_tokenize(
                    self.vocab(),
                    text.as_ptr().cast(),
                    len,
                    out.as_mut_ptr(),
                    out.len() as i32,
                    add_special,
                    parse_special,
                )
            };
            if n >= 0 {
                out.truncate(n as usize);
                return Ok(out);
            }
            if n == i32::MIN {
                return Err("tokenization overflowed".to_string());
            }
            out.resize((-n) as usize, 0);
        }
    }

    /// `llama_detokenize` (special tokens neither removed nor rendered).
    pub fn detokenize(&self, tokens: &[i32]) -> Vec<u8> {
        let mut buf = vec![0u8; tokens.len() * 16 + 16];
        loop {
            // SAFETY: tokens is valid for its length; buf has buf.len() bytes.
            let n = unsafe {
                sys::llama_detokenize(
                    self.vocab(),
                    tokens.as_ptr(),
                    tokens.len() as i32,
                    buf.as_mut_ptr().cast(),
                    buf.len() as i32,
                    false,
                    false,
                )
            };
            if n >= 0 {
                buf.truncate(n as usize);
                return buf;
            }
            buf.resize((-n) as usize, 0);
        }
    }
}

impl Drop for Model<'_> {
    fn drop(&mut self) {
        // SAFETY: contexts borrow the model, so none is alive; freed once.
        unsafe { sys::llama_model_free(self.ptr.as_ptr()) };
    }
}

/// What a context is created with.
#[derive(Clone, Copy, Debug)]
pub struct ContextSettings {
    pub n_ctx: u32,
    /// n_batch = n_ubatch: a whole prompt is one ubatch, one graph.
    pub n_batch: u32,
    pub threads: u32,
    /// An F16 KV cache instead of F32.
    pub kv_f16: bool,
}

/// A llama.cpp context: flash attention off, F32 (or F16) KV cache, full-size SWA
/// cache, one sequence; optionally with a tap recorder as cb_eval.
pub struct Context<'m, 'r> {
    ptr: NonNull<sys::llama_context>,
    n_vocab: usize,
    recorder: Option<NonNull<TapRecorder>>,
    _model: PhantomData<&'m Model<'m>>,
    _recorder: PhantomData<&'r mut TapRecorder>,
}

impl<'m, 'r> Context<'m, 'r> {
    pub fn new(
        model: &'m Model<'m>,
        s: ContextSettings,
        recorder: Option<&'r mut TapRecorder>,
    ) -> Result<Context<'m, 'r>, String> {
        // SAFETY: default params are plain data.
        let mut p = unsafe { sys::llama_context_default_params() };
        p.n_ctx = s.n_ctx;
        p.n_batch = s.n_batch;
        p.n_ubatch = s.n_batch;
        p.n_seq_max = 1;
        p.n_outputs_max = 0;
        p.n_outputs_max_per_seq = 0;
        p.n_threads = s.threads as i32;
        p.n_threads_batch = s.threads as i32;
        p.flash_attn_type = sys::LLAMA_FLASH_ATTN_TYPE_DISABLED;
        let kv = if s.kv_f16 {
            sys::GGML_TYPE_F16
        } else {
            sys::GGML_TYPE_F32
        };
        p.type_k = kv;
        p.type_v = kv;
        p.swa_full = true;
        p.offload_kqv = false;
        p.op_offload = false;
        p.no_perf = true;
        p.embeddings = false;
        let recorder = recorder.map(NonNull::from);
        if let Some(rec) = recorder {
            p.cb_eval = Some(taps::eval_callback);
            p.cb_eval_user_data = rec.as_ptr().cast();
        }
        // SAFETY: live model; the callback's user data (if any) is an
        // exclusive borrow that outlives the context ('r), and the callback
        // only runs inside llama_decode on this context.
        let ptr = unsafe { sys::llama_init_from_model(model.ptr.as_ptr(), p) };
        let ptr = NonNull::new(ptr).ok_or("llama.cpp could not create a context")?;
        let ctx = Context {
            ptr,
            n_vocab: model.n_vocab(),
            recorder,
            _model: PhantomData,
            _recorder: PhantomData,
        };
        // SAFETY: live context; plain getters.
        let (n_ctx, n_batch, n_ubatch) = unsafe {
            (
                sys::llama_n_ctx(ptr.as_ptr()),
                sys::llama_n_batch(ptr.as_ptr()),
                sys::llama_n_ubatch(ptr.as_ptr()),
            )
        };
        if n_ctx != s.n_ctx || n_batch != s.n_batch || n_ubatch != s.n_batch {
            return Err(format!(
                "llama.cpp changed the context settings: n_ctx {n_ctx} n_batch {n_batch} n_ubatch {n_ubatch}, asked {} {} {}",
                s.n_ctx, s.n_batch, s.n_batch
            ));
        }
        Ok(ctx)
    }

    /// The attached recorder, between decodes.
    pub fn recorder(&mut self) -> Option<&mut TapRecorder> {
        // SAFETY: the pointer comes from an exclusive borrow that lives as
        // long as the context ('r); the callback uses it only inside
        // llama_decode, which needs &mut self, so the borrow returned here
        // never overlaps it.
        self.recorder.map(|mut p| unsafe { p.as_mut() })
    }

    /// Decodes `tokens` at positions `pos0..`, sequence 0, asking for the
    /// logits of every token.
    pub fn decode(&mut self, tokens: &[i32], pos0: i32) -> Result<(), String> {
        let n = tokens.len() as i32;
        // SAFETY: allocates a batch for n tokens, one sequence id each.
        let batch = unsafe { sys::llama_batch_init(n, 0, 1) };
        let guard = BatchGuard(batch);
        for (i, &t) in tokens.iter().enumerate() {
            // SAFETY: the batch arrays hold n entries (llama_batch_init) and
            // i < n; seq_id[i] points to room for one id.
            unsafe {
                *guard.0.token.add(i) = t;
                *guard.0.pos.add(i) = pos0 + i as i32;
                *guard.0.n_seq_id.add(i) = 1;
                **guard.0.seq_id.add(i) = 0;
                *guard.0.logits.add(i) = 1;
            }
        }
        let mut b = guard.0;
        b.n_tokens = n;
        // SAFETY: live context; the batch is fully initialised for n tokens.
        let rc = unsafe { sys::llama_decode(self.ptr.as_ptr(), b) };
        drop(guard);
        if rc != 0 {
            return Err(format!("llama_decode returned {rc}"));
        }
        Ok(())
    }

    /// The logits of the i-th token of the last decoded batch.
    pub fn logits(&self, i: usize) -> Result<&[f32], String> {
        // SAFETY: live context; the pointer is NULL or n_vocab floats valid
        // until the next decode, which needs &mut self.
        unsafe {
            let p = sys::llama_get_logits_ith(self.ptr.as_ptr(), i as i32);
            if p.is_null() {
                return Err(format!("no logits for batch index {i}"));
            }
            Ok(std::slice::from_raw_parts(p, self.n_vocab))
        }
    }
}

impl Drop for Context<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: created by llama_init_from_model, freed once.
        unsafe { sys::llama_free(self.ptr.as_ptr()) };
    }
}

struct BatchGuard(sys::llama_batch);

impl Drop for BatchGuard {
    fn drop(&mut self) {
        // SAFETY: allocated by llama_batch_init, freed once.
        unsafe { sys::llama_batch_free(self.0) };
    }
}
