//! The expert slot cache of a GPU layer whose experts stay in host memory
//! (`--moe-cache N|NMiB`): the model's [`ExpertRunner`] for such a layer,
//! owned by the session and lent to each forward pass.
//!
//! Such a layer keeps its expert tensors mapped on the host and holds, on
//! the GPU, three slot weights (gate, up, down) of `n_slots` experts each,
//! in the experts' own types. Routing runs on the GPU as in any layer; then
//! [`LayerCache`]'s [`ExpertRunner::run`] reads the top-k ids back and,
//! per (row, slot) pair:
//!
//! - an expert held in a slot (a hit) is multiplied on the GPU, by
//!   `matmul_id` over the slot weights with the ids remapped to slots;
//! - any other (a miss) is multiplied on the host from the mapped tensors,
//!   by the `matmul_id` and `glu` of a CPU device ([`HostDevice`]); its GPU
//!   output (that of some slot) is zeroed by a 0/1 mask and the host result
//!   added in its place.
//!
//! The GPU's work is ordered by the backend's hazard tracking: the ids,
//! mask and host results are [`Ops::write`]s recorded between the ops that
//! use them; refilling a slot ([`Ops::write_weight_rows`]) comes after the
//! products that read its old expert. The model continues on the GPU with
//! the weighting and the sum, as without a cache. The cache size changes
//! where an expert is multiplied, never what: outputs differ between cache
//! sizes only as the CPU's products differ from the GPU's.
//!
//! With a slot for every expert the slots are the experts (slot `e` holds
//! expert `e` for good) and the layer runs as without a cache: no
//! read-back.
//!
//! Policy: the slots start with experts `0..n_slots`. After each step the
//! experts it missed are filled in, most-routed first (ties: lower id),
//! each into the least recently used slot that the step did not use; what
//! finds no such slot waits for a later miss. Per layer, hits and
//! (row, slot) pairs are counted ([`LayerStats`], `--expert-stats`).

mod host;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use crate::fault;
use crate::model::moe::{self, moe_glu_tap, ExpertRunner, ExpertWeights, Experts};
use crate::model::{Cx, Hparams};
use crate::ops::{Act, BackendError, Ops, Weight, WeightSource};
use crate::placement::Devices;
pub use host::HostDevice;
use host::HostPart;

/// `--moe-cache`: expert slots per layer, or device memory for the slots
/// of all the cached layers together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheSize {
    Slots(usize),
    MiB(u64),
}

impl FromStr for CacheSize {
    type Err = String;

    fn from_str(s: &str) -> Result<CacheSize, String> {
        let bad = || {
            format!("invalid --moe-cache {s:?}: expected a slot count per layer (8) or MiB for all layers (512MiB)")
        };
        match s.strip_suffix("MiB") {
            Some(n) => n.parse().map(CacheSize::MiB).map_err(|_| bad()),
            None => s.parse().map(CacheSize::Slots).map_err(|_| bad()),
        }
    }
}

impl fmt::Display for CacheSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheSize::Slots(n) => write!(f, "{n}"),
            CacheSize::MiB(m) => write!(f, "{m}MiB"),
        }
    }
}

impl CacheSize {
    /// Slots per layer for `n_layers` cached layers whose experts take
    /// `expert_bytes` each (gate, up and down together), at most
    /// `n_expert`.
    pub fn slots(self, n_expert: usize, expert_bytes: u64, n_layers: usize) -> usize {
        match self {
            CacheSize::Slots(n) => n.min(n_expert),
            CacheSize::MiB(m) => {
                let per_layer = (m << 20) / (n_layers.max(1) as u64);
                ((per_layer / expert_bytes.max(1)) as usize).min(n_expert)
            }
        }
    }
}

/// Hits and (row, slot) pairs of one cached layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayerStats {
    pub layer: usize,
    pub slots: usize,
    pub hits: u64,
    pub pairs: u64,
}

impl LayerStats {
    /// Hits per pair (1 with no pairs yet).
    pub fn hit_rate(&self) -> f64 {
        match self.pairs {
            0 => 1.0,
            p => self.hits as f64 / p as f64,
        }
    }
}

/// GPU buffers a cached layer works in (shared by all of them).
#[derive(Clone, Copy, Debug)]
pub struct CacheBufs {
    /// `[n_batch, k]`: each pair's slot (as f32).
    pub slot_ids: Act,
    /// `[n_batch, k]`: 1 for a hit, 0 for a miss.
    pub mask: Act,
    /// `[n_batch, k · n_embd]`: the misses' outputs, zero at hits.
    pub missed: Act,
}

impl CacheBufs {
    /// Each buffer's name and width (each is `[n_batch, width]`), in the
    /// order [`CacheBufs::alloc`] allocates them (none without experts):
    /// what the setup's sizing counts on the GPU.
    pub fn widths(hp: &Hparams) -> Vec<(&'static str, usize)> {
        match hp.moe {
            None => Vec::new(),
            Some(m) => vec![
                ("slot_ids", m.n_used),
                ("mask", m.n_used),
                ("missed", m.n_used * hp.n_embd),
            ],
        }
    }

    /// Allocates the buffers of [`CacheBufs::widths`] on device `dev`.
    ///
    /// # Panics
    /// For a model without experts.
    pub fn alloc(
        devices: &mut Devices,
        dev: usize,
        hp: &Hparams,
        n_batch: usize,
    ) -> Result<CacheBufs, BackendError> {
        let mut bufs = BTreeMap::new();
        for (name, width) in CacheBufs::widths(hp) {
            bufs.insert(name, devices.alloc(dev, n_batch, width)?);
        }
        let b = |name: &str| bufs[name];
        Ok(CacheBufs {
            slot_ids: b("slot_ids"),
            mask: b("mask"),
            missed: b("missed"),
        })
    }
}

/// The expert slots of one GPU layer and the host experts behind them.
pub struct LayerCache {
    stats: LayerStats,
    n_expert: usize,
    /// Gate, up, down on the host: `[n_embd, n_ff_exp, n_expert]`,
    /// `[n_embd, n_ff_exp, n_expert]`, `[n_ff_exp, n_embd, n_expert]`.
    host: [WeightSource; 3],
    /// The same as weights of `host_device`.
    host_weights: [Weight; 3],
    /// The same on the device with `n_slots` matrices each (none for 0).
    slots: Option<[Weight; 3]>,
    table: SlotTable,
    bufs: CacheBufs,
    host_device: Arc<Mutex<HostDevice>>,
}

/// Which expert each slot holds, and the policy that refills them (see
/// the module docs); no device involved.
#[derive(Clone, Debug)]
pub struct SlotTable {
    /// `[n_slots]`: the expert each slot holds.
    slot_expert: Vec<usize>,
    /// `[n_expert]`: the slot holding each expert.
    expert_slot: Vec<Option<usize>>,
    /// `[n_slots]`: the step that last used each slot (0: none yet).
    last_used: Vec<u64>,
    /// Steps so far.
    clock: u64,
}

impl SlotTable {
    /// `n_slots` slots (at most `n_expert`) holding experts `0..n_slots`.
    pub fn new(n_expert: usize, n_slots: usize) -> SlotTable {
        assert!(
            n_slots <= n_expert,
            "{n_slots} slots for {n_expert} experts"
        );
        let mut expert_slot = vec![None; n_expert];
        for (s, e) in expert_slot.iter_mut().take(n_slots).enumerate() {
            *e = Some(s);
        }
        SlotTable {
            slot_expert: (0..n_slots).collect(),
            expert_slot,
            last_used: vec![0; n_slots],
            clock: 0,
        }
    }

    pub fn n_slots(&self) -> usize {
        self.slot_expert.len()
    }

    /// Starts a step: lookups from here on count as its uses.
    pub fn begin_step(&mut self) {
        self.clock += 1;
    }

    /// The slot holding `expert`, marked used by this step.
    pub fn lookup(&mut self, expert: usize) -> Option<usize> {
        let s = self.expert_slot[expert]?;
        self.last_used[s] = self.clock;
        Some(s)
    }

    /// After a step that missed `missed` (one entry per pair): the
    /// experts to load, as (slot, expert), most-missed first (ties: lower
    /// id), each into the least recently used slot this step has not used
    /// (ties: lower slot); the table already says they are there.
    pub fn refill(&mut self, missed: &[usize]) -> Vec<(usize, usize)> {
        let mut count: BTreeMap<usize, usize> = BTreeMap::new();
        for &ex in missed {
            *count.entry(ex).or_default() += 1;
        }
        let mut wanted: Vec<(usize, usize)> = count.into_iter().collect();
        wanted.sort_by_key(|&(ex, c)| (std::cmp::Reverse(c), ex));
        let mut out = Vec::new();
        for (ex, _) in wanted {
            if self.expert_slot[ex].is_some() {
                continue;
            }
            let victim = (0..self.n_slots())
                .filter(|&s| self.last_used[s] < self.clock)
                .min_by_key(|&s| (self.last_used[s], s));
            let Some(s) = victim else { break };
            self.expert_slot[self.slot_expert[s]] = None;
            self.slot_expert[s] = ex;
            self.expert_slot[ex] = Some(s);
            self.last_used[s] = self.clock;
            out.push((s, ex));
        }
        out
    }
}

/// Experts `0..n` of a stacked weight, as a weight of `n` matrices.
fn first_experts(src: &WeightSource, n: usize) -> WeightSource {
    let per = src.n_out() / src.matrices();
    let bytes = src.bytes()[..n * per * src.row_bytes()].to_vec();
    let name = format!("{} slots", src.name());
    WeightSource::from_bytes(&name, src.ty(), src.n_in(), n * per, bytes).stacked(n)
}

impl LayerCache {
    /// The cache of layer `layer` with `n_slots` slots on `gpu`, holding
    /// experts `0..n_slots` to begin with. `host` is gate, up, down; the
    /// misses are multiplied on `host_device`.
    pub fn new(
        layer: usize,
        host: [WeightSource; 3],
        n_slots: usize,
        gpu: &mut dyn Ops,
        bufs: CacheBufs,
        host_device: Arc<Mutex<HostDevice>>,
    ) -> Result<LayerCache, BackendError> {
        let n_expert = host[0].matrices();
        let slots = match n_slots {
            0 => None,
            n => Some([
                gpu.upload(&first_experts(&host[0], n))?,
                gpu.upload(&first_experts(&host[1], n))?,
                gpu.upload(&first_experts(&host[2], n))?,
            ]),
        };
        let host_weights = lock(&host_device).upload(&host)?;
        Ok(LayerCache {
            stats: LayerStats {
                layer,
                slots: n_slots,
                ..LayerStats::default()
            },
            n_expert,
            host,
            host_weights,
            slots,
            table: SlotTable::new(n_expert, n_slots),
            bufs,
            host_device,
        })
    }

    pub fn stats(&self) -> LayerStats {
        self.stats
    }
}

impl ExpertRunner for LayerCache {
    /// The expert products of `e` (see the module docs), tapping
    /// `ffn_moe_up`, `ffn_moe_gate`, the activation and `ffn_moe_down`
    /// assembled from both devices.
    fn run(&mut self, cx: &mut Cx<'_, '_>, e: &Experts) -> Result<(), BackendError> {
        let (n, k) = (e.ids.rows(), e.ids.width());
        let (d, f) = (e.out.width() / k, e.up.width() / k);
        if let Some([gate, up, down]) = self.slots.filter(|_| self.table.n_slots() == self.n_expert)
        {
            // Every expert in its own slot for good (slot e holds expert e,
            // nothing is ever refilled): the plain products, no read-back.
            self.stats.hits += (n * k) as u64;
            self.stats.pairs += (n * k) as u64;
            let w = Some(ExpertWeights { gate, up, down });
            return moe::experts(cx, &Experts { w, ..*e });
        }
        // ids: [n, k]
        let mut ids = vec![0.0; n * k];
        cx.read(e.ids, &mut ids)?;
        self.table.begin_step();

        // slot_ids, mask: [n, k]; misses: (pair, expert)
        let (mut slot_ids, mut mask) = (vec![0.0; n * k], vec![0.0; n * k]);
        let mut misses = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let ex = id as usize;
            assert!(ex < self.n_expert, "expert id {id} of {}", self.n_expert);
            match self.table.lookup(ex) {
                Some(s) => {
                    slot_ids[i] = s as f32;
                    mask[i] = 1.0;
                }
                None => misses.push((i, ex)),
            }
        }
        self.stats.hits += (n * k - misses.len()) as u64;
        self.stats.pairs += (n * k) as u64;
        // x: [n, n_embd] on the host, when a miss needs it.
        let mut x = Vec::new();
        if !misses.is_empty() {
            x.resize(n * d, 0.0);
            cx.read(e.xb, &mut x)?;
        }

        // Taps of up, gate, the activation: [n, k · n_ff_exp]. When the
        // sink wants any, the host's part comes first (the taps merge it);
        // otherwise the device's part is submitted first and runs while the
        // host multiplies the misses.
        let (shape, glu) = ([n, k * f], moe_glu_tap(e.kind));
        let traced = ["ffn_moe_up", "ffn_moe_gate", glu]
            .iter()
            .any(|name| cx.wants(name));
        let mut host = None;
        if traced {
            host = Some(self.host_part(e.kind, &misses, &x, k, d)?);
        }
        let on_device = self.slots.filter(|_| misses.len() < n * k);
        if let Some([sg, su, sd]) = on_device {
            let none = HostPart::default();
            let h = host.as_ref().unwrap_or(&none);
            let (sid, mk) = (self.bufs.slot_ids.first(n), self.bufs.mask.first(n));
            cx.write(sid, &slot_ids)?;
            cx.write(mk, &mask)?;
            let ns = self.table.n_slots();
            cx.matmul_id(su, ns, sid, e.xb, e.up);
            tap_merged(cx, "ffn_moe_up", shape, Some(e.up), &misses, &h.up)?;
            cx.matmul_id(sg, ns, sid, e.xb, e.gate);
            tap_merged(cx, "ffn_moe_gate", shape, Some(e.gate), &misses, &h.gate)?;
            cx.glu(e.kind, e.gate, e.up);
            tap_merged(cx, glu, shape, Some(e.gate), &misses, &h.act)?;
            cx.matmul_id(sd, ns, sid, e.gate, e.out);
            cx.mul_groups(e.out, mk);
            cx.submit()?;
        }
        let h = match host {
            Some(h) => h,
            None => self.host_part(e.kind, &misses, &x, k, d)?,
        };
        if on_device.is_none() {
            tap_merged(cx, "ffn_moe_up", shape, None, &misses, &h.up)?;
            tap_merged(cx, "ffn_moe_gate", shape, None, &misses, &h.gate)?;
            tap_merged(cx, glu, shape, None, &misses, &h.act)?;
        }
        // missed: [n, k · n_embd], the misses' outputs in their pairs' places.
        let mut missed = vec![0.0; n * k * d];
        for (q, &(i, _)) in misses.iter().enumerate() {
            missed[i * d..(i + 1) * d].copy_from_slice(&h.down[q * d..(q + 1) * d]);
        }
        match on_device {
            None => cx.write(e.out, &missed)?,
            Some(_) if !misses.is_empty() => {
                let ms = self.bufs.missed.first(n);
                cx.write(ms, &missed)?;
                cx.add(e.out, ms);
            }
            Some(_) => {}
        }
        cx.tap("ffn_moe_down", e.out)?;
        self.fill(&mut **cx, &misses)
    }
}

impl LayerCache {
    /// The missed (pair, expert)s multiplied on the host, from `x` `[n,
    /// n_embd]` with `k` pairs a row; `d` is `n_embd`.
    fn host_part(
        &self,
        kind: crate::ops::GluKind,
        misses: &[(usize, usize)],
        x: &[f32],
        k: usize,
        d: usize,
    ) -> Result<HostPart, BackendError> {
        if misses.is_empty() {
            return Ok(HostPart::default());
        }
        // xs: [m, n_embd], each miss's row; mids: [m] its expert.
        let mut xs = Vec::with_capacity(misses.len() * d);
        for &(i, _) in misses {
            let t = i / k;
            xs.extend_from_slice(&x[t * d..(t + 1) * d]);
        }
        let mids: Vec<f32> = misses.iter().map(|&(_, ex)| ex as f32).collect();
        lock(&self.host_device).products(self.host_weights, self.n_expert, kind, &mids, &xs)
    }

    /// Fills the slots with the experts `misses` wanted (see the module
    /// docs for the policy).
    fn fill(&mut self, gpu: &mut dyn Ops, misses: &[(usize, usize)]) -> Result<(), BackendError> {
        let Some(slots) = self.slots else {
            return Ok(());
        };
        let missed: Vec<usize> = misses.iter().map(|&(_, ex)| ex).collect();
        for (slot, ex) in self.table.refill(&missed) {
            if fault::active("expert-cache-stale") {
                continue;
            }
            for (w, src) in slots.iter().zip(&self.host) {
                let (rows, rb) = (src.n_out() / src.matrices(), src.row_bytes());
                let bytes = &src.bytes()[ex * rows * rb..(ex + 1) * rows * rb];
                gpu.write_weight_rows(*w, slot * rows, bytes)?;
            }
        }
        Ok(())
    }
}

/// The host device, also after a panic elsewhere left its lock poisoned
/// (its buffers are written afresh by every use).
fn lock(d: &Mutex<HostDevice>) -> std::sync::MutexGuard<'_, HostDevice> {
    d.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Taps `name` (`[n, k · f]`) when the sink wants it: the device's values
/// of `dev` (zeros without), with the host's `host` (`[m, f]`) in the
/// places of `misses`.
fn tap_merged(
    cx: &mut Cx<'_, '_>,
    name: &str,
    shape: [usize; 2],
    dev: Option<Act>,
    misses: &[(usize, usize)],
    host: &[f32],
) -> Result<(), BackendError> {
    if !cx.wants(name) {
        return Ok(());
    }
    let mut all = vec![0.0; shape[0] * shape[1]];
    if let Some(a) = dev {
        cx.read(a, &mut all)?;
    }
    let f = host.len().checked_div(misses.len()).unwrap_or(0);
    for (q, &(i, _)) in misses.iter().enumerate() {
        all[i * f..(i + 1) * f].copy_from_slice(&host[q * f..(q + 1) * f]);
    }
    cx.tap_host(name, shape, &all);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_size_parses_and_gives_slots() {
        assert_eq!("8".parse(), Ok(CacheSize::Slots(8)));
        assert_eq!("512MiB".parse(), Ok(CacheSize::MiB(512)));
        for bad in ["", "-1", "8MB", "MiB", "1.5"] {
            let e = bad.parse::<CacheSize>().unwrap_err();
            assert!(e.contains("--moe-cache") && !e.contains('\n'), "{e}");
        }
        assert_eq!(CacheSize::Slots(99).slots(32, 1000, 4), 32);
        // 1 MiB over 2 layers: 524288 bytes a layer, 5 experts of 100000.
        assert_eq!(CacheSize::MiB(1).slots(32, 100_000, 2), 5);
        assert_eq!(CacheSize::MiB(64).slots(32, 100_000, 2), 32);
        assert_eq!(CacheSize::MiB(0).slots(32, 100_000, 2), 0);
    }

    #[test]
    fn slots_refill_least_recently_used_first() {
        let mut t = SlotTable::new(8, 3);
        // Step 1 uses experts 0 and 2 and misses 5 (twice) and 7.
        t.begin_step();
        assert_eq!(
            (t.lookup(0), t.lookup(2), t.lookup(5)),
            (Some(0), Some(2), None)
        );
        // Only slot 1 is free of this step's use: 5 (missed more) gets it.
        assert_eq!(t.refill(&[5, 7, 5]), [(1, 5)]);
        assert_eq!(t.lookup(5), Some(1));
        assert_eq!(t.lookup(1), None);
        // Step 2 uses 5; slots 0 and 2 were used by step 1, 0 first.
        t.begin_step();
        assert_eq!(t.lookup(5), Some(1));
        assert_eq!(t.refill(&[7, 6]), [(0, 6), (2, 7)]);
        // Step 3 uses nothing: a refill counts as a use, so all three were
        // last used by step 2; the tie goes to the lower slot.
        t.begin_step();
        assert_eq!(t.refill(&[3]), [(0, 3)]);
        assert_eq!(
            (t.lookup(3), t.lookup(5), t.lookup(6)),
            (Some(0), Some(1), None)
        );
        // No slots: nothing ever held.
        let mut z = SlotTable::new(8, 0);
        z.begin_step();
        assert_eq!((z.lookup(0), z.refill(&[0, 1])), (None, vec![]));
    }

    #[test]
    fn a_full_table_always_hits() {
        let mut t = SlotTable::new(4, 4);
        t.begin_step();
        assert!((0..4).all(|e| t.lookup(e) == Some(e)));
        assert!(t.refill(&[]).is_empty());
    }
}
