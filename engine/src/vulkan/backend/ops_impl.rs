//! The [`Ops`] interface of [`VulkanBackend`]: each op records commands
//! (see the module docs of [`super`]); transfers submit them.

use std::ops::Range;

use super::{
    op_attention, op_bias, op_elementwise, op_matmul, op_matmul_id, op_moe, recorder, Bind, GpuKv,
    GpuWeight, VulkanBackend, WeightChunk,
};
use crate::ops::{
    Act, AttnParams, BackendError, BinaryOp, Kv, KvType, Ops, RopeParams, UnaryOp, Weight,
    WeightSource,
};

impl Ops for VulkanBackend {
    fn name(&self) -> String {
        format!("vulkan ({})", self.ctx.device_info().name)
    }

    fn validation_messages(&self) -> Vec<String> {
        self.ctx.validation_messages()
    }

    fn submissions(&self) -> (usize, usize) {
        (self.stats.submissions, self.stats.replays)
    }

    fn dispatches(&self) -> usize {
        self.stats.dispatches
    }

    fn upload(&mut self, w: &WeightSource) -> Result<Weight, BackendError> {
        self.wait_pending()?;
        if !op_matmul::supports(w.ty()) {
            return Err(BackendError::UnsupportedWeight {
                backend: self.name(),
                name: w.name().to_string(),
                ty: w.ty(),
            });
        }
        let row_bytes = w.row_bytes();
        let limit = u64::from(self.ctx.limits().max_storage_buffer_range).min(1 << 30);
        // A smaller limit set by a test (set_max_chunk_bytes).
        let limit = self.max_chunk_bytes.map_or(limit, |m| m.min(limit));
        let rows_per_chunk = ((limit / row_bytes.max(1) as u64) as usize).max(1);
        // Stacked matrices (experts) are not split across chunks when one
        // fits: matmul_id reads each expert from one chunk.
        let per_matrix = w.n_out() / w.matrices();
        let rows_per_chunk = if w.matrices() > 1 && rows_per_chunk >= per_matrix {
            rows_per_chunk / per_matrix * per_matrix
        } else {
            rows_per_chunk
        };
        let mut chunks = Vec::new();
        let mut row0 = 0;
        while row0 < w.n_out() {
            let rows = rows_per_chunk.min(w.n_out() - row0);
            let bytes = &w.bytes()[row0 * row_bytes..(row0 + rows) * row_bytes];
            let size = bytes.len() as u64;
            let buf = self
                .new_buffer(w.name(), size, false, false)
                .map_err(|e| self.vk_err("weights", size, e))?;
            // Whole words: pad the tail of a chunk whose size is not a multiple of 4.
            let mut padded = bytes.to_vec();
            padded.resize(bytes.len().div_ceil(4) * 4, 0);
            let b = self.slots[buf as usize].buffer.as_ref().expect("just made");
            self.ctx
                .upload(b, 0, &padded)
                .map_err(|e| self.vk_err("weights", size, e))?;
            chunks.push(WeightChunk { buf, row0, rows });
            row0 += rows;
        }
        self.weights.push(GpuWeight {
            name: w.name().to_string(),
            ty: w.ty(),
            n_in: w.n_in(),
            n_out: w.n_out(),
            row_bytes,
            chunks,
        });
        Ok(Weight(self.weights.len() as u32 - 1))
    }

    fn write_weight_rows(
        &mut self,
        w: Weight,
        row0: usize,
        bytes: &[u8],
    ) -> Result<(), BackendError> {
        let gw = &self.weights[w.0 as usize];
        let rb = gw.row_bytes;
        assert!(
            bytes.len().is_multiple_of(rb) && row0 + bytes.len() / rb <= gw.n_out,
            "write_weight_rows {}: {} bytes at row {row0} of {} rows of {rb}",
            gw.name,
            bytes.len(),
            gw.n_out
        );
        let rows = row0..row0 + bytes.len() / rb;
        // (chunk buffer, byte offset in it, byte range of `bytes`) per chunk
        // the rows touch.
        let parts: Vec<(u32, u64, Range<usize>)> = gw
            .chunks
            .iter()
            .filter_map(|c| {
                let (a, b) = (rows.start.max(c.row0), rows.end.min(c.row0 + c.rows));
                (a < b).then(|| {
                    let src = (a - row0) * rb..(b - row0) * rb;
                    (c.buf, ((a - c.row0) * rb) as u64, src)
                })
            })
            .collect();
        for (buf, offset, src) in parts {
            let (inbox, at) = self.stage_bytes(&bytes[src.clone()]);
            self.copy_bytes(inbox, at, buf, offset, src.len() as u64);
        }
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        Ok(())
    }

    fn alloc(&mut self, rows: usize, width: usize) -> Result<Act, BackendError> {
        let bytes = (rows * width * 4) as u64;
        let id = self
            .new_buffer_filled("activation", bytes, crate::poison::fill())
            .map_err(|e| self.vk_err("activations", bytes, e))?;
        Ok(Act::new(id, rows, width))
    }

    fn alloc_kv(
        &mut self,
        n_ctx: usize,
        k_width: usize,
        v_width: usize,
        ty: KvType,
    ) -> Result<Kv, BackendError> {
        let eb = ty.elem_bytes();
        let kb = (n_ctx * k_width * eb) as u64;
        let vb = (n_ctx * v_width * eb) as u64;
        let k = self
            .new_buffer("kv k", kb, true, true)
            .map_err(|e| self.vk_err("KV cache", kb, e))?;
        let v = self
            .new_buffer("kv v", vb, true, true)
            .map_err(|e| self.vk_err("KV cache", vb, e))?;
        self.kvs.push(GpuKv {
            k,
            v,
            n_ctx,
            k_width,
            v_width,
            ty,
        });
        Ok(Kv(self.kvs.len() as u32 - 1))
    }

    fn write(&mut self, dst: Act, src: &[f32]) -> Result<(), BackendError> {
        assert_eq!(src.len(), dst.len(), "write: length");
        let words: Vec<u32> = src.iter().map(|v| v.to_bits()).collect();
        let (inbox, at) = self.stage_u32(&words);
        let b = Bind::act(dst);
        self.copy_bytes(
            inbox,
            u64::from(at) * 4,
            b.buf,
            b.bytes.start,
            b.bytes.end - b.bytes.start,
        );
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        Ok(())
    }

    fn submit(&mut self) -> Result<(), BackendError> {
        if let Some(e) = self.error.take() {
            self.cmds.clear();
            self.staged.clear();
            return Err(e);
        }
        recorder::flush(self, None, false).map_err(|e| self.err(e))
    }

    fn read(&mut self, src: Act, dst: &mut [f32]) -> Result<(), BackendError> {
        assert_eq!(src.len(), dst.len(), "read: length");
        let b = Bind::act(src);
        self.flush(Some((b.buf, b.bytes.start, dst)))
    }

    fn embed(&mut self, table: Weight, tokens: &[u32], out: Act) {
        op_matmul::embed(self, table, tokens, out)
    }

    fn rms_norm(&mut self, x: Act, w: Option<Weight>, eps: f32, group: usize, out: Act) {
        op_elementwise::rms_norm(self, x, w, eps, group, out)
    }

    fn matmul(&mut self, w: Weight, x: Act, out: Act) {
        op_matmul::matmul(self, w, x, out)
    }

    fn add_bias(&mut self, x: Act, bias: Weight) {
        op_bias::add_bias(self, x, bias)
    }

    fn rope(&mut self, x: Act, p: &RopeParams, pos0: usize) {
        op_elementwise::rope(self, x, p, pos0)
    }

    fn attention(&mut self, kv: Kv, q: Act, k: Act, v: Act, out: Act, pos0: usize, p: &AttnParams) {
        op_attention::attention(self, kv, q, k, v, out, pos0, p)
    }

    fn binary(&mut self, op: BinaryOp, x: Act, y: Act) {
        op_elementwise::binary(self, op, x, y)
    }

    fn unary(&mut self, op: UnaryOp, x: Act) {
        op_elementwise::unary(self, op, x)
    }

    fn copy(&mut self, src: Act, dst: Act) {
        assert_eq!(src.len(), dst.len(), "copy: shapes");
        assert!(!src.overlaps(dst), "copy: overlapping views");
        let (s, d) = (Bind::act(src), Bind::act(dst));
        self.copy_bytes(
            s.buf,
            s.bytes.start,
            d.buf,
            d.bytes.start,
            s.bytes.end - s.bytes.start,
        );
    }

    fn softmax(&mut self, x: Act) {
        op_moe::softmax(self, x)
    }

    fn top_k(&mut self, probs: Act, ids: Act, weights: Act) {
        op_moe::top_k(self, probs, ids, weights)
    }

    fn normalize_rows(&mut self, x: Act) {
        op_moe::normalize_rows(self, x)
    }

    fn matmul_id(&mut self, w: Weight, n_expert: usize, ids: Act, x: Act, out: Act) {
        op_matmul_id::matmul_id(self, w, n_expert, ids, x, out)
    }

    fn mul_groups(&mut self, x: Act, s: Act) {
        op_moe::mul_groups(self, x, s)
    }

    fn sum_groups(&mut self, x: Act, out: Act) {
        op_moe::sum_groups(self, x, out)
    }
}
