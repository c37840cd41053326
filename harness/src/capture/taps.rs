//! Recording llama.cpp's named graph tensors through cb_eval
//! (ggml_backend_sched_eval_callback): with `ask = true` the scheduler asks,
//! node by node in graph order, whether we want a node; when we say yes it
//! computes the graph up to that node and calls again with `ask = false`,
//! and we read the node with ggml_backend_tensor_get.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_void, CStr};

use llama_cpp_sys_2 as sys;

use crate::reference::arrays::Tap;

/// Whether a graph tensor name is one llama.cpp's model code gave it
/// (`cb(cur, "Qcur", il)` names it "Qcur-3"; whole-model tensors have no
/// suffix). Excluded: unnamed nodes, ggml's automatic names ("node_12",
/// "leaf_3") and derived names ("Qcur-3 (view)", "cache_k_l0 (view)",
/// "... (permuted)", "... (copy of ...)"), which contain a space.
pub fn is_model_name(name: &str) -> bool {
    let auto = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
    };
    !name.is_empty() && !name.contains(' ') && !auto("node_") && !auto("leaf_")
}

/// Splits "Qcur-3" into ("Qcur", Some(3)); "result_norm" into itself, None.
pub fn split_layer(name: &str) -> (&str, Option<u32>) {
    if let Some((base, layer)) = name.rsplit_once('-') {
        if !base.is_empty() && !layer.is_empty() && layer.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(l) = layer.parse() {
                return (base, Some(l));
            }
        }
    }
    (name, None)
}

/// One graph node as seen when asked (no data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSeen {
    pub key: String,
    pub name: String,
    pub occurrence: u32,
    pub op: String,
    pub ggml_type: String,
    pub ne: [u64; 4],
    /// The tensor's address: identifies the node within one graph (to match
    /// operands), meaningless across graphs.
    pub addr: usize,
    /// The operands (`src`, the non-NULL ones in order): address and op
    /// ("NONE" for a weight or other leaf).
    pub srcs: Vec<(usize, String)>,
}

/// How one tap is cut when captured.
#[derive(Clone, Copy, Debug)]
pub struct TapPlan {
    /// The ggml dimension over tokens, if any.
    pub token_dim: Option<usize>,
    /// Keep only the last token's slice of `token_dim`.
    pub last_only: bool,
}

enum Mode {
    /// Record every node's name, op, type and shape; read no data. With
    /// `all`, unnamed and derived nodes too (for listing).
    Shapes { all: bool },
    /// Read the planned taps.
    Capture { plan: HashMap<String, TapPlan> },
}

/// The state cb_eval works on (one per context, reset per graph).
pub struct TapRecorder {
    mode: Mode,
    counts: HashMap<String, u32>,
    pending: Option<(String, TapPlan)>,
    /// Shapes mode: the nodes seen, in graph order.
    pub seen: Vec<NodeSeen>,
    /// Capture mode: key -> (graph type name, tensor, sliced as planned).
    pub captured: BTreeMap<String, (String, Tap)>,
    /// The first thing that went wrong inside the callback.
    pub error: Option<String>,
}

impl TapRecorder {
    pub fn shapes(all: bool) -> TapRecorder {
        TapRecorder::with_mode(Mode::Shapes { all })
    }

    pub fn capture(plan: HashMap<String, TapPlan>) -> TapRecorder {
        TapRecorder::with_mode(Mode::Capture { plan })
    }

    fn with_mode(mode: Mode) -> TapRecorder {
        TapRecorder {
            mode,
            counts: HashMap::new(),
            pending: None,
            seen: Vec::new(),
            captured: BTreeMap::new(),
            error: None,
        }
    }

    /// Starts a new graph: occurrences count from 0 again and the previous
    /// graph's records are dropped.
    pub fn begin_graph(&mut self) {
        self.counts.clear();
        self.pending = None;
        self.seen.clear();
        self.captured.clear();
        self.error = None;
    }

    fn fail(&mut self, msg: String) {
        self.error.get_or_insert(msg);
    }

    fn ask(&mut self, t: &sys::ggml_tensor) -> bool {
        let name = tensor_name(t);
        let all = matches!(self.mode, Mode::Shapes { all: true });
        if !all && !is_model_name(&name) {
            return false;
        }
        let count = self.counts.entry(name.clone()).or_insert(0);
        let occurrence = *count;
        *count += 1;
        let key = format!("{name}#{occurrence}");
        match &self.mode {
            Mode::Shapes { .. } => {
                self.seen.push(NodeSeen {
                    key,
                    name,
                    occurrence,
                    op: op_name(t),
                    ggml_type: type_name(t.type_),
                    ne: t.ne.map(|n| n as u64),
                    addr: std::ptr::from_ref(t) as usize,
                    srcs: t
                        .src
                        .iter()
                        // SAFETY: the operands of a live graph node are
                        // live tensors or NULL.
                        .filter_map(|s| unsafe { s.as_ref() })
                        .map(|s| (std::ptr::from_ref(s) as usize, op_name(s)))
                        .collect(),
                });
                false
            }
            Mode::Capture { plan, .. } => match plan.get(&key) {
                Some(p) => {
                    self.pending = Some((key, *p));
                    true
                }
                None => {
                    self.fail(format!("graph tensor {key} was not in the probe's graph"));
                    false
                }
            },
        }
    }

    fn observe(&mut self, t: &sys::ggml_tensor) -> bool {
        let Some((key, plan)) = self.pending.take() else {
            self.fail("cb_eval delivered a tensor that was not asked for".into());
            return false;
        };
        let slice = match (plan.token_dim, plan.last_only) {
            (Some(d), true) => Some((d, (t.ne[d] - 1).max(0) as usize)),
            _ => None,
        };
        match read_tensor(t, slice) {
            Ok(tap) => {
                if self
                    .captured
                    .insert(key.clone(), (type_name(t.type_), tap))
                    .is_some()
                {
                    self.fail(format!("graph tensor {key} delivered twice"));
                    return false;
                }
                true
            }
            Err(e) => {
                self.fail(format!("{key}: {e}"));
                false
            }
        }
    }
}

/// cb_eval: `user` is the context's `TapRecorder`.
///
/// # Safety
/// Called by ggml's scheduler with a live graph node and the user data the
/// context was created with, which [`super::llama::Context::new`] sets to a
/// `TapRecorder` exclusively borrowed for the context's lifetime.
pub unsafe extern "C" fn eval_callback(
    t: *mut sys::ggml_tensor,
    ask: bool,
    user: *mut c_void,
) -> bool {
    // SAFETY: see the function's contract: user is the recorder, not
    // aliased while llama_decode runs (the context holds its borrow).
    let rec = unsafe { &mut *user.cast::<TapRecorder>() };
    // SAFETY: the scheduler passes a node of the graph being computed.
    let Some(t) = (unsafe { t.as_ref() }) else {
        rec.fail("cb_eval called with a NULL tensor".into());
        return false;
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if ask {
            rec.ask(t)
        } else {
            rec.observe(t)
        }
    }));
    result.unwrap_or_else(|_| {
        // The recorder may be half-updated: stop the graph and report.
        rec.fail("panic inside cb_eval".into());
        false
    })
}

fn tensor_name(t: &sys::ggml_tensor) -> String {
    // SAFETY: ggml keeps `name` NUL-terminated within its 64 bytes.
    unsafe { CStr::from_ptr(t.name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn op_name(t: &sys::ggml_tensor) -> String {
    // SAFETY: ggml_op_name returns a static string for any op value.
    let p = unsafe { sys::ggml_op_name(t.op) };
    if p.is_null() {
        return format!("op{}", t.op);
    }
    // SAFETY: static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub fn type_name(ty: sys::ggml_type) -> String {
    // SAFETY: ggml_type_name returns a static string (or NULL) for any value.
    let p = unsafe { sys::ggml_type_name(ty) };
    if p.is_null() {
        return format!("type{ty}");
    }
    // SAFETY: static NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Reads a graph tensor as f32 in logical ggml order (dimension 0 fastest),
/// following its strides (views, permutations), converting its type with
/// ggml's own routines; with `slice = (dim, i)` only index `i` of `dim`.
fn read_tensor(t: &sys::ggml_tensor, slice: Option<(usize, usize)>) -> Result<Tap, String> {
    let mut ne = [0usize; 4];
    for (d, n) in t.ne.iter().enumerate() {
        ne[d] = usize::try_from(*n).map_err(|_| format!("negative dimension {n}"))?;
    }
    let nb = t.nb;
    let mut first = [0usize; 4];
    if let Some((d, i)) = slice {
        if i >= ne[d] {
            return Err(format!("slice {i} of dimension {d} of size {}", ne[d]));
        }
        first[d] = i;
        ne[d] = 1;
    }
    let ty = t.type_;
    // SAFETY: plain lookups in ggml's static type table.
    let (type_size, blck, traits) = unsafe {
        (
            sys::ggml_type_size(ty),
            sys::ggml_blck_size(ty) as usize,
            sys::ggml_get_type_traits(ty),
        )
    };
    // SAFETY: ggml_get_type_traits returns a pointer into a static table.
    let to_float = unsafe { traits.as_ref() }.and_then(|tr| tr.to_float);
    // SAFETY: t is a live, computed graph node (we are inside cb_eval).
    let nbytes = unsafe { sys::ggml_nbytes(t) };

    // Reads `len` bytes at byte offset `off` of the tensor's data.
    let read = |off: usize, len: usize, buf: &mut Vec<u8>| -> Result<(), String> {
        if off + len > nbytes {
            return Err(format!(
                "read of {len} bytes at {off} past the tensor's {nbytes}"
            ));
        }
        buf.resize(len, 0);
        // SAFETY: t is a live, computed node; [off, off + len) lies within
        // its ggml_nbytes; buf has len writable bytes.
        unsafe { sys::ggml_backend_tensor_get(t, buf.as_mut_ptr().cast(), off, len) };
        Ok(())
    };
    let elem = |b: &[u8]| -> Result<f32, String> {
        Ok(match ty {
            sys::GGML_TYPE_F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            sys::GGML_TYPE_I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
            sys::GGML_TYPE_I16 => i16::from_le_bytes([b[0], b[1]]) as f32,
            sys::GGML_TYPE_I8 => b[0] as i8 as f32,
            // SAFETY: ggml's scalar converters take the raw 16-bit value.
            sys::GGML_TYPE_F16 => unsafe {
                sys::ggml_fp16_to_fp32(u16::from_le_bytes([b[0], b[1]]))
            },
            // SAFETY: as above; ggml_bf16_t is a struct around the bits.
            sys::GGML_TYPE_BF16 => unsafe {
                sys::ggml_bf16_to_fp32(sys::ggml_bf16_t {
                    bits: u16::from_le_bytes([b[0], b[1]]),
                })
            },
            _ => return Err(format!("no element converter for type {}", type_name(ty))),
        })
    };

    let mut data = Vec::with_capacity(ne.iter().product());
    let mut buf = Vec::new();
    let row_contiguous = nb[0] == type_size;
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                let base =
                    (first[3] + i3) * nb[3] + (first[2] + i2) * nb[2] + (first[1] + i1) * nb[1];
                if blck > 1 {
                    // A quantized row: whole blocks, converted by ggml.
                    if first[0] != 0 || ne[0] % blck != 0 || !row_contiguous {
                        return Err(format!(
                            "cannot slice or stride quantized type {}",
                            type_name(ty)
                        ));
                    }
                    let f = to_float
                        .ok_or_else(|| format!("type {} has no to_float", type_name(ty)))?;
                    read(base, ne[0] / blck * type_size, &mut buf)?;
                    let start = data.len();
                    data.resize(start + ne[0], 0.0);
                    // SAFETY: buf holds ne[0]/blck whole blocks; the output
                    // has room for ne[0] floats.
                    unsafe {
                        f(
                            buf.as_ptr().cast(),
                            data[start..].as_mut_ptr(),
                            ne[0] as i64,
                        )
                    };
                } else if row_contiguous {
                    read(base + first[0] * type_size, ne[0] * type_size, &mut buf)?;
                    for b in buf.chunks_exact(type_size) {
                        data.push(elem(b)?);
                    }
                } else {
                    for i0 in 0..ne[0] {
                        read(base + (first[0] + i0) * nb[0], type_size, &mut buf)?;
                        data.push(elem(&buf)?);
                    }
                }
            }
        }
    }
    Ok(Tap { ne, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds tensors in a CPU backend buffer: a permuted F32 view, a
    /// transposed F16 view (elements not contiguous) and an I32 tensor,
    /// and reads them back through `read_tensor`.
    #[test]
    fn views_f16_and_i32_tensors_read_in_logical_order() {
        let value = |i0: usize, i1: usize, i2: usize| (i0 + 10 * i1 + 100 * i2) as f32;
        // SAFETY: a private ggml context and buffer, used and freed here;
        // every tensor pointer comes from that context and is live until
        // ggml_free; set/get stay within each tensor's ggml_nbytes.
        unsafe {
            let params = sys::ggml_init_params {
                mem_size: 1 << 20,
                mem_buffer: std::ptr::null_mut(),
                no_alloc: true,
            };
            let ctx = sys::ggml_init(params);
            assert!(!ctx.is_null());
            let a = sys::ggml_new_tensor_3d(ctx, sys::GGML_TYPE_F32, 4, 3, 2);
            let h = sys::ggml_new_tensor_3d(ctx, sys::GGML_TYPE_F16, 4, 3, 2);
            let n = sys::ggml_new_tensor_3d(ctx, sys::GGML_TYPE_I32, 5, 1, 1);
            let p = sys::ggml_permute(ctx, a, 1, 0, 2, 3);
            let tr = sys::ggml_transpose(ctx, h);
            let buf = sys::ggml_backend_alloc_ctx_tensors_from_buft(
                ctx,
                sys::ggml_backend_cpu_buffer_type(),
            );
            assert!(!buf.is_null());
            let mut fa = Vec::new();
            let mut fh = Vec::new();
            for i2 in 0..2 {
                for i1 in 0..3 {
                    for i0 in 0..4 {
                        fa.push(value(i0, i1, i2));
                        fh.push(sys::ggml_fp32_to_fp16(value(i0, i1, i2)));
                    }
                }
            }
            sys::ggml_backend_tensor_set(a, fa.as_ptr().cast(), 0, fa.len() * 4);
            sys::ggml_backend_tensor_set(h, fh.as_ptr().cast(), 0, fh.len() * 2);
            let ints: [i32; 5] = [-3, 0, 7, 1 << 20, i32::MAX];
            sys::ggml_backend_tensor_set(n, ints.as_ptr().cast(), 0, 20);

            // permuted: element (j0, j1, j2) is a(j1, j0, j2)
            let t = read_tensor(&*p, None).unwrap();
            assert_eq!(t.ne, [3, 4, 2, 1]);
            assert_eq!(t.data[1], value(0, 1, 0));
            assert_eq!(t.data[3], value(1, 0, 0));
            assert_eq!(
                t,
                crate::reference::arrays::Tap {
                    ne: [3, 4, 2, 1],
                    data: expected(3, 4, 2, |j0, j1, j2| value(j1, j0, j2))
                }
            );
            // transposed F16, sliced at index 3 of dimension 1
            let t = read_tensor(&*tr, Some((1, 3))).unwrap();
            assert_eq!(t.ne, [3, 1, 2, 1]);
            assert_eq!(t.data, expected(3, 1, 2, |j0, _, j2| value(3, j0, j2)));
            // slicing the innermost dimension of a contiguous tensor
            let t = read_tensor(&*a, Some((0, 2))).unwrap();
            assert_eq!(t.data, expected(1, 3, 2, |_, j1, j2| value(2, j1, j2)));
            // I32 becomes f32 as `as f32` converts it (exact below 2^24)
            let t = read_tensor(&*n, None).unwrap();
            assert_eq!(t.data, ints.map(|v| v as f32).to_vec());
            assert_eq!(type_name((*n).type_), "i32");
            assert!(
                read_tensor(&*a, Some((2, 2))).is_err(),
                "index past the dimension"
            );

            sys::ggml_backend_buffer_free(buf);
            sys::ggml_free(ctx);
        }
    }

    fn expected(
        n0: usize,
        n1: usize,
        n2: usize,
        f: impl Fn(usize, usize, usize) -> f32,
    ) -> Vec<f32> {
        let mut v = Vec::new();
        for j2 in 0..n2 {
            for j1 in 0..n1 {
                for j0 in 0..n0 {
                    v.push(f(j0, j1, j2));
                }
            }
        }
        v
    }

    #[test]
    fn model_names_exclude_automatic_and_derived_names() {
        for good in [
            "Qcur-3",
            "result_norm",
            "ffn_moe_weights_norm-12",
            "ffn_sqr(relu)-0",
            "inp_scaled",
        ] {
            assert!(is_model_name(good), "{good}");
        }
        for bad in [
            "",
            "node_12",
            "leaf_0",
            "Qcur-3 (view)",
            "Kcur-0 (permuted)",
            "cache_k_l0 (view)",
        ] {
            assert!(!is_model_name(bad), "{bad}");
        }
        // a name that merely starts like an automatic one is the model's
        assert!(is_model_name("node_x"));
    }

    #[test]
    fn layer_suffix_is_split_off() {
        assert_eq!(split_layer("Qcur-3"), ("Qcur", Some(3)));
        assert_eq!(
            split_layer("ffn_moe_weights_norm-12"),
            ("ffn_moe_weights_norm", Some(12))
        );
        assert_eq!(split_layer("result_norm"), ("result_norm", None));
        assert_eq!(split_layer("a-b"), ("a-b", None));
        assert_eq!(split_layer("-3"), ("-3", None));
    }
}
