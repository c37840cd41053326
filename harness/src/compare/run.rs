//! Running the comparison: every selected model, prompt and path.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use engine::chat::{ChatTemplate, CHAT_TEMPLATE_KEY};
use engine::gguf::GgufFile;
use engine::model::{spec, Model, ModelError, ModelOptions};
use engine::ops::KvType;
use engine::session::{Outputs, Session, SessionConfig};
use engine::tokenizer::Tokenizer;
use engine::vulkan::{DeviceSelector, VulkanOptions};

use super::cross::{self, CrossResult, PathOutputs};
use super::report::{ModelReport, PromptReport, Report};
use super::taps::TapSink;
use super::thresholds::{Limits, Thresholds};
use super::tokens::{self, PromptTokens};
use super::{greedy, logits, taps, within, Failure, Path, Paths};
use crate::reference::arrays::TopKTable;
use crate::reference::format::{Manifest, ManifestModel, Positions, PromptCapture};
use crate::reference::writer::sha256_file;
use crate::reference::{ModelRef, PromptData, ReferenceData};

/// Rows per forward pass by default. Each pass returns the logits of all
/// its rows (every position's next-token distribution is compared), so
/// this bounds the logits buffer: 128 × 262,144 × 4 bytes = 128 MiB for
/// Gemma.
pub const CHUNK: usize = 128;

/// What to compare.
#[derive(Clone, Debug)]
pub struct Options {
    /// The reference data (reference-data/).
    pub reference_dir: PathBuf,
    /// Model files are relative to it.
    pub repo: PathBuf,
    /// Model ids; empty: every captured model (unsupported architectures
    /// skipped). A model named here fails when it cannot be compared.
    pub models: Vec<String>,
    /// Prompt ids; empty: every captured prompt.
    pub prompts: Vec<String>,
    /// The paths per model, the first the reference of the others.
    pub paths: Paths,
    pub thresholds: Thresholds,
    /// Passed to the engine's model loader (tests edit the architecture
    /// table through it).
    pub model_options: ModelOptions,
    /// Greedy tokens compared at most (the capture has up to 32).
    pub greedy_steps: usize,
    /// Compare the tokenizer corpus and the chat-template renders.
    pub corpus: bool,
    /// CPU threads (0: one per core).
    pub threads: usize,
    /// Prompt rows per forward pass ([`CHUNK`]).
    pub chunk: usize,
    /// Check every reference file's size and SHA-256 first.
    pub verify_files: bool,
    /// A line on stderr per prompt.
    pub progress: bool,
    /// The Vulkan device of the GPU paths.
    pub device: DeviceSelector,
    /// Run the GPU paths with the Vulkan validation layer (synchronization
    /// validation on); any message fails the prompt.
    pub validation: bool,
}

impl Options {
    /// Everything, on the CPU, for the repository at `repo`.
    pub fn new(repo: &FsPath, thresholds: Thresholds) -> Options {
        Options {
            reference_dir: repo.join("reference-data"),
            repo: repo.to_path_buf(),
            models: Vec::new(),
            prompts: Vec::new(),
            paths: Paths::List(vec![Path::Cpu]),
            thresholds,
            model_options: ModelOptions::default(),
            greedy_steps: usize::MAX,
            corpus: true,
            threads: 0,
            chunk: CHUNK,
            verify_files: true,
            progress: false,
            device: DeviceSelector::Auto,
            validation: engine::vulkan::validation_layer_present(),
        }
    }
}

/// Runs the comparison. Errors are about the setup (unreadable reference
/// data, an unknown model id); everything about a model is in the report.
pub fn run(opts: &Options) -> Result<Report, String> {
    let start = Instant::now();
    let data =
        ReferenceData::open_models(&opts.reference_dir, &opts.models).map_err(|e| e.to_string())?;
    if opts.verify_files {
        data.verify_files_of(&opts.models)
            .map_err(|e| format!("reference data: {e}"))?;
    }
    let manifest = data.manifest();
    if let Some(unknown) = opts
        .models
        .iter()
        .find(|id| !manifest.models.iter().any(|m| &m.id == *id))
    {
        let known: Vec<&str> = manifest.models.iter().map(|m| m.id.as_str()).collect();
        return Err(format!(
            "no model {unknown:?} in {}; known: {}",
            opts.reference_dir.join("manifest.json").display(),
            known.join(", ")
        ));
    }
    if let Some(unknown) = opts
        .prompts
        .iter()
        .find(|id| !manifest.prompts.iter().any(|p| &p.id == *id))
    {
        let known: Vec<&str> = manifest.prompts.iter().map(|p| p.id.as_str()).collect();
        return Err(format!(
            "no prompt {unknown:?} in the reference data; known: {}",
            known.join(", ")
        ));
    }
    let mut report = Report {
        reference_dir: opts.reference_dir.display().to_string(),
        thresholds: opts.thresholds.source.clone(),
        paths: opts.paths.clone(),
        models: Vec::new(),
        seconds: 0.0,
    };
    for entry in &manifest.models {
        if !opts.models.is_empty() && !opts.models.contains(&entry.id) {
            continue;
        }
        report.models.push(run_model(opts, &data, entry));
    }
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

fn run_model(opts: &Options, data: &ReferenceData, entry: &ManifestModel) -> ModelReport {
    let start = Instant::now();
    let explicit = opts.models.contains(&entry.id);
    let mut r = ModelReport::new(entry);
    let skip = |r: &mut ModelReport, why: String| {
        if explicit {
            r.failures.push(Failure::new("model", why));
        } else {
            r.skipped = Some(why);
        }
    };
    let Some(model_ref) = data.model(&entry.id) else {
        skip(&mut r, "not captured".into());
        return r;
    };

    let gguf = match open_as_captured(opts, entry) {
        Ok(g) => g,
        Err(e) => {
            r.failures.push(Failure::new("model", e));
            return r;
        }
    };

    // Tokenizer and chat template: they need no forward pass, so they are
    // compared for every model, whatever its architecture.
    let tok = match Tokenizer::from_gguf(&gguf) {
        Ok(t) => t,
        Err(e) => {
            r.failures
                .push(Failure::new("tokenizer", format!("cannot build it: {e}")));
            return r;
        }
    };
    eog_check(model_ref, &tok, &mut r);
    let template = chat_template(model_ref, &gguf, &tok, &mut r);
    if opts.corpus {
        corpus_check(opts, model_ref, &tok, &mut r);
        if let Some(t) = &template {
            render_check(opts, model_ref, &gguf, t, &mut r);
        }
    }

    if spec::lookup(&entry.architecture).is_none() {
        skip(
            &mut r,
            format!("architecture {} not implemented", entry.architecture),
        );
        r.seconds = start.elapsed().as_secs_f64();
        return r;
    }
    let model = match Model::from_gguf_with(Arc::clone(&gguf), &opts.model_options) {
        Ok(m) => Arc::new(m),
        // A feature the engine refuses by name (experts, say) is skipped
        // as an architecture it lacks is.
        Err(e @ ModelError::Unsupported { .. }) => {
            skip(&mut r, format!("{}: {e}", entry.file));
            r.seconds = start.elapsed().as_secs_f64();
            return r;
        }
        Err(e) => {
            r.failures
                .push(Failure::new("model", format!("{}: {e}", entry.file)));
            return r;
        }
    };

    // One session per path for all the prompts (reset between them): the
    // context fits the longest prompt and its greedy steps.
    let n_ctx = model_ref
        .prompts()
        .map(|p| p.n_tokens + opts.greedy_steps.min(64) + 1)
        .max()
        .unwrap_or(1);
    r.paths = opts.paths.for_layers(model.hparams().n_layer);
    let ctx = ModelCtx {
        paths: r.paths.clone(),
        opts,
        manifest: data.manifest(),
        model_ref,
        model,
        tok,
        template,
        n_ctx,
        sessions: RefCell::new(HashMap::new()),
    };
    for prompt in model_ref.prompts() {
        if opts.prompts.is_empty() || opts.prompts.contains(&prompt.id) {
            r.prompts.extend(ctx.run_prompt_paths(prompt));
        }
    }
    r.seconds = start.elapsed().as_secs_f64();
    r
}

/// The model file at `entry.file`, checked to be the file llama.cpp ran.
fn open_as_captured(opts: &Options, entry: &ManifestModel) -> Result<Arc<GgufFile>, String> {
    let file = opts.repo.join(&entry.file);
    if !file.is_file() {
        return Err(format!(
            "{} is missing: run scripts/fetch-models and scripts/make-models",
            file.display()
        ));
    }
    let sha = sha256_file(&file).map_err(|e| e.to_string())?;
    if sha != entry.sha256 {
        return Err(format!(
            "{}: SHA-256 {sha}, captured from {}",
            file.display(),
            entry.sha256
        ));
    }
    GgufFile::open(&file)
        .map(Arc::new)
        .map_err(|e| format!("{}: {e}", file.display()))
}

/// What every prompt of one model needs.
struct ModelCtx<'a> {
    opts: &'a Options,
    /// This model's paths (`--paths all` depends on its layer count).
    paths: Vec<Path>,
    manifest: &'a Manifest,
    model_ref: ModelRef<'a>,
    model: Arc<Model>,
    tok: Tokenizer,
    template: Option<ChatTemplate>,
    /// Context of every session.
    n_ctx: usize,
    /// The session of each path, made on first use (or why it could not be).
    sessions: RefCell<HashMap<Path, Result<Session, String>>>,
}

impl ModelCtx<'_> {
    /// Runs `f` on `path`'s session, reset to position 0.
    fn with_session<T>(
        &self,
        path: Path,
        f: impl FnOnce(&mut Session) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut sessions = self.sessions.borrow_mut();
        let s = sessions.entry(path).or_insert_with(|| {
            let cfg = SessionConfig {
                n_ctx: self.n_ctx,
                n_batch: self.opts.chunk.clamp(1, self.n_ctx),
                kv_type: KvType::F32,
                threads: self.opts.threads,
            };
            let vk = VulkanOptions {
                device: self.opts.device.clone(),
                validation: self.opts.validation,
            };
            path.session(Arc::clone(&self.model), &cfg, &vk)
        });
        match s {
            Ok(session) => {
                session.reset();
                f(session)
            }
            Err(e) => Err(e.clone()),
        }
    }

    /// One prompt: its tokens once, then the engine on each path.
    fn run_prompt_paths(&self, prompt: &PromptCapture) -> Vec<PromptReport> {
        let opts = self.opts;
        let data = self
            .model_ref
            .load_prompt(&prompt.id)
            .map_err(|e| e.to_string());
        let tokens = data.as_ref().map_err(Clone::clone).and_then(|d| {
            prompt_tokens(
                opts,
                self.manifest,
                prompt,
                d,
                &self.tok,
                self.template.as_ref(),
            )
        });
        let mut out = Vec::new();
        let mut baseline: Option<PathOutputs> = None;
        for &path in &self.paths {
            let (p, outputs) = self.run_prompt(&data, prompt, path, &tokens, baseline.as_ref());
            if baseline.is_none() {
                baseline = outputs;
            }
            if opts.progress {
                eprintln!(
                    "[compare] {} {} {}: {} in {:.1} s",
                    p.model,
                    p.prompt,
                    path,
                    if p.passed() { "pass" } else { "FAIL" },
                    p.seconds
                );
            }
            out.push(p);
        }
        out
    }
}

/// The model's chat template, with `strftime_now` frozen where the renders
/// froze it (None for a model without one; a failure when it has one we
/// cannot load).
fn chat_template(
    model_ref: ModelRef<'_>,
    gguf: &GgufFile,
    tok: &Tokenizer,
    r: &mut ModelReport,
) -> Option<ChatTemplate> {
    if !model_ref.capture().model.has_chat_template {
        return None;
    }
    let loaded = ChatTemplate::from_gguf(gguf, tok)
        .map_err(|e| e.to_string())
        .and_then(|t| match model_ref.chat_renders() {
            Ok(Some(renders)) => tokens::template_for_renders(t, &renders),
            Ok(None) => Ok(t),
            Err(e) => Err(e.to_string()),
        });
    loaded
        .map_err(|e| r.failures.push(Failure::new("chat", e)))
        .ok()
}

/// The tokens that end generation (where `sharpi` stops a reply) against
/// llama.cpp's `llama_vocab_is_eog` set: an extra one cuts replies short, a
/// missing one runs past their end.
fn eog_check(model_ref: ModelRef<'_>, tok: &Tokenizer, r: &mut ModelReport) {
    let theirs = &model_ref.capture().vocab.eog_tokens;
    let ours = tok.eog_ids();
    let extra: Vec<_> = ours
        .iter()
        .filter(|&&t| !theirs.iter().any(|&x| x as i64 == t as i64))
        .collect();
    let missing: Vec<_> = theirs
        .iter()
        .filter(|&&x| !ours.iter().any(|&t| x as i64 == t as i64))
        .collect();
    if !extra.is_empty() || !missing.is_empty() {
        r.failures.push(Failure::new(
            "eog",
            format!(
                "end-of-generation tokens: ours {ours:?}, llama.cpp {theirs:?} (extra {extra:?}, missing {missing:?})"
            ),
        ));
    }
}

/// Every chat-template render, ours against Jinja2's.
fn render_check(
    opts: &Options,
    model_ref: ModelRef<'_>,
    gguf: &GgufFile,
    template: &ChatTemplate,
    r: &mut ModelReport,
) {
    let renders = match model_ref.chat_renders() {
        Ok(Some(renders)) => renders,
        Ok(None) => return,
        Err(e) => return r.failures.push(Failure::new("chat", e.to_string())),
    };
    let source = gguf
        .get_str_opt(CHAT_TEMPLATE_KEY)
        .ok()
        .flatten()
        .unwrap_or_default();
    match tokens::compare_renders(&opts.reference_dir, &renders, source, template) {
        Ok(c) => {
            if let Some(m) = c.mismatches.first() {
                r.failures.push(Failure::new(
                    "chat",
                    format!(
                        "{} of {} renders differ; first: {} (add_generation_prompt {}): {}",
                        c.mismatches.len(),
                        c.compared,
                        m.id,
                        m.add_generation_prompt,
                        m.detail
                    ),
                ));
            }
            r.chat = Some(c);
        }
        Err(e) => r.failures.push(Failure::new("chat", e)),
    }
}

/// The tokenizer corpus, line by line.
fn corpus_check(opts: &Options, model_ref: ModelRef<'_>, tok: &Tokenizer, r: &mut ModelReport) {
    let cap = match model_ref.tokenizer() {
        Ok(c) => c,
        Err(e) => {
            r.failures.push(Failure::new("tokenizer", e.to_string()));
            return;
        }
    };
    match tokens::compare_corpus(&opts.reference_dir, &cap, tok) {
        Ok(c) => {
            if let Some(m) = c.mismatches.first() {
                let line = m
                    .line
                    .map_or("the whole corpus".to_string(), |l| format!("line {l}"));
                r.failures.push(Failure::new(
                    "tokenizer",
                    format!(
                        "{} of {} tokenizations differ; first: {line} (parse_special {}): {}",
                        c.mismatches.len(),
                        c.compared,
                        m.parse_special,
                        m.detail
                    ),
                ));
            }
            r.tokenizer = Some(c);
        }
        Err(e) => r.failures.push(Failure::new("tokenizer", e)),
    }
}

/// Our tokenization of a prompt's text against the captured ids.
fn prompt_tokens(
    opts: &Options,
    manifest: &Manifest,
    prompt: &PromptCapture,
    data: &PromptData,
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
) -> Result<PromptTokens, String> {
    let entry = manifest
        .prompts
        .iter()
        .find(|p| p.id == prompt.id)
        .ok_or_else(|| format!("prompt {} is not in the manifest", prompt.id))?;
    let text = tokens::prompt_text(&opts.reference_dir, &entry.file, prompt.kind, template)?;
    Ok(tokens::compare_prompt(&text, prompt, data.tokens(), tok))
}

/// Limits that pass everything: the measurements of a model without
/// thresholds are still reported (that is how a new model is calibrated).
fn unlimited() -> Limits {
    Limits {
        logits_nmse: f64::INFINITY,
        kld_mean: f64::INFINITY,
        kld_max: f64::INFINITY,
        top1_min: 0.0,
        near_tie: f64::INFINITY,
        taps: [("default".to_string(), f64::INFINITY)].into(),
        taps_layer0: Default::default(),
    }
}

impl ModelCtx<'_> {
    /// One prompt on one path: its tokens, then the engine on the captured
    /// ids (and against `baseline`, the first path's outputs, if any).
    fn run_prompt(
        &self,
        data: &Result<PromptData, String>,
        prompt: &PromptCapture,
        path: Path,
        tokens: &Result<PromptTokens, String>,
        baseline: Option<&PathOutputs>,
    ) -> (PromptReport, Option<PathOutputs>) {
        let opts = self.opts;
        let model_id = self.model_ref.id();
        let start = Instant::now();
        let mut r = PromptReport::new(model_id, &prompt.id, path, prompt.n_tokens);
        match tokens {
            Ok(t) => {
                if let Some(d) = &t.detail {
                    r.failures.push(Failure::new("tokens", d.clone()));
                }
                r.tokens = Some(t.clone());
            }
            Err(e) => r.failures.push(Failure::new("tokens", e.clone())),
        }
        let limits = self.limits(model_id, &path.to_string(), path, &mut r);
        let cross_limits = baseline.map(|b| {
            let found = opts.thresholds.cross_limits(model_id, path, b.path);
            self.found_or_unlimited(found, model_id, &format!("{path}-vs-{}", b.path), &mut r)
        });
        let checked = data.as_ref().map_err(Clone::clone).and_then(|d| {
            self.with_session(path, |session| {
                let before = session.devices().validation_messages().len();
                let outputs = engine_checks(opts, session, d, prompt, &limits, &mut r, baseline)?;
                if path.uses_gpu() && opts.validation {
                    let msgs = session.devices().validation_messages();
                    let new = &msgs[before.min(msgs.len())..];
                    r.validation_messages = Some(new.len());
                    if let Some(first) = new.first() {
                        r.failures.push(Failure::new(
                            "validation",
                            format!("{} validation message(s); first: {first}", new.len()),
                        ));
                    }
                }
                Ok(outputs)
            })
        });
        let outputs = match checked {
            Ok(o) => Some(o),
            Err(e) => {
                r.failures.push(Failure::new("engine", e));
                None
            }
        };
        let outputs = outputs.map(|(o, per_position)| {
            if let (Some(base), Some(l)) = (baseline, &cross_limits) {
                r.vs = Some(cross_check(base, &o, per_position, l, &mut r));
            }
            o
        });
        r.seconds = start.elapsed().as_secs_f64();
        (r, outputs)
    }

    /// The limits of `path`; unlimited with a failure when the thresholds
    /// file has none.
    fn limits(&self, model_id: &str, key: &str, path: Path, r: &mut PromptReport) -> Limits {
        let found = self.opts.thresholds.limits(model_id, path);
        self.found_or_unlimited(found, model_id, key, r)
    }

    /// `found`, or unlimited with a failure naming `key`.
    fn found_or_unlimited(
        &self,
        found: Option<&Limits>,
        model_id: &str,
        key: &str,
        r: &mut PromptReport,
    ) -> Limits {
        found.cloned().unwrap_or_else(|| {
            r.failures.push(Failure::new(
                "thresholds",
                format!(
                    "no limits for [{model_id}.{key}] in {}: measured, not judged",
                    self.opts.thresholds.source
                ),
            ));
            unlimited()
        })
    }
}

/// This path's outputs against the first path's: taps and logits, failures
/// under "vs".
fn cross_check(
    base: &PathOutputs,
    ours: &PathOutputs,
    per_position: Vec<logits::PositionStat>,
    limits: &Limits,
    r: &mut PromptReport,
) -> CrossResult {
    let against = base.path;
    let taps = (!base.taps.is_empty())
        .then(|| cross::compare_taps(&base.taps, &ours.taps, against, limits));
    if let Some(d) = taps.as_ref().and_then(|t| t.first_divergence.as_ref()) {
        r.failures.push(Failure::new(
            "vs",
            format!(
                "against {against}: first divergence: layer {} {}: NMSE {:.3e} > {:.1e}",
                d.layer.map_or("-".to_string(), |l| l.to_string()),
                d.name,
                d.nmse,
                d.limit
            ),
        ));
    }
    let l = logits::summarize(&base.last, &ours.last, per_position, limits.near_tie);
    let mut fail = |what: String| {
        r.failures
            .push(Failure::new("vs", format!("against {against}: {what}")))
    };
    if !within(l.nmse, limits.logits_nmse) {
        fail(format!(
            "last-position logits NMSE {:.3e} > {:.1e}",
            l.nmse, limits.logits_nmse
        ));
    }
    if !within(l.kld.mean, limits.kld_mean) {
        fail(format!(
            "mean KLD {:.3e} > {:.1e}",
            l.kld.mean, limits.kld_mean
        ));
    }
    if !within(l.kld.max, limits.kld_max) {
        fail(format!(
            "max KLD {:.3e} > {:.1e}",
            l.kld.max, limits.kld_max
        ));
    }
    if l.top1_rate() < limits.top1_min {
        fail(format!(
            "top-1 agreement {}/{} < {:.1}%",
            l.top1_agree,
            l.positions,
            100.0 * limits.top1_min
        ));
    }
    if l.top1_hard > 0 {
        fail(format!(
            "{} position(s) disagree on the most likely token beyond the near-tie margin",
            l.top1_hard
        ));
    }
    CrossResult {
        against,
        taps,
        logits: l,
    }
}

/// Runs the engine on the captured ids and fills taps, logits and greedy.
#[allow(clippy::type_complexity)]
fn engine_checks(
    opts: &Options,
    session: &mut Session,
    data: &PromptData,
    prompt: &PromptCapture,
    limits: &Limits,
    r: &mut PromptReport,
    baseline: Option<&PathOutputs>,
) -> Result<(PathOutputs, Vec<logits::PositionStat>), String> {
    let ids: Vec<u32> = data
        .tokens()
        .iter()
        .map(|&t| u32::try_from(t).map_err(|_| format!("captured token id {t}")))
        .collect::<Result<_, _>>()?;
    let n = ids.len();
    if n == 0 {
        return Err("the capture has no prompt tokens".into());
    }
    let steps = data.greedy_tokens().len().min(opts.greedy_steps);
    if n + steps > session.n_ctx() {
        return Err(format!(
            "{n} prompt tokens and {steps} greedy steps exceed the session's context of {}",
            session.n_ctx()
        ));
    }
    let model = Arc::clone(session.model());
    let n_vocab = model.hparams().n_vocab;
    if n_vocab != data.last_logits().len() {
        return Err(format!(
            "{} logits per position, llama.cpp has {}",
            n_vocab,
            data.last_logits().len()
        ));
    }

    // Prompt: every position's distribution, the last one's logits, taps.
    let keep = match prompt.tap_positions {
        Positions::All => 0..n,
        Positions::Last => n - 1..n,
    };
    let mut sink = prompt.taps_recorded.then(|| TapSink::new(keep));
    let mut per_position = Vec::with_capacity(n);
    let mut cross_positions = Vec::new();
    let mut top = TopKTable::new(cross::TOP_K);
    // Kept by the first path only, when other paths compare with it.
    let keep_top = baseline.is_none() && opts.paths.several();
    let mut last = Vec::new();
    let chunk_len = opts.chunk.max(1);
    for (c, chunk) in ids.chunks(chunk_len).enumerate() {
        let pos0 = c * chunk_len;
        if let Some(s) = sink.as_mut() {
            s.begin_chunk(pos0, chunk.len());
        }
        let tap = sink
            .as_mut()
            .map(|s| s as &mut dyn engine::trace::TraceSink);
        let all = session
            .forward(chunk, Outputs::All, tap)
            .map_err(|e| e.to_string())?;
        for (i, row) in all.chunks_exact(n_vocab).enumerate() {
            let p = pos0 + i;
            per_position.push(logits::position(data.position(p), row));
            if keep_top {
                top.push_logits(row);
            }
            if let Some(b) = baseline.filter(|b| p < b.top.rows()) {
                cross_positions.push(logits::position(b.top.row(p), row));
            }
            if p == n - 1 {
                last = row.to_vec();
            }
        }
    }

    // Taps.
    if let Some(sink) = &sink {
        let t = taps::compare(data, &sink.taps, limits);
        if let Some(d) = &t.first_divergence {
            r.failures.push(Failure::new(
                "taps",
                format!(
                    "first divergence: layer {} {} (llama.cpp {} {}): NMSE {:.3e} > {:.1e}; {} of {} taps over their limits",
                    d.layer.map_or("-".to_string(), |l| l.to_string()),
                    d.name,
                    d.reference,
                    d.op,
                    d.nmse,
                    d.limit,
                    t.failed(),
                    t.rows.len()
                ),
            ));
        }
        if !t.unmatched.is_empty() {
            r.failures.push(Failure::new(
                "taps",
                format!("not comparable: {}", t.unmatched.join("; ")),
            ));
        }
        r.taps = Some(t);
    }

    // Logits.
    let l = logits::summarize(data.last_logits(), &last, per_position, limits.near_tie);
    if !within(l.nmse, limits.logits_nmse) {
        r.failures.push(Failure::new(
            "logits_nmse",
            format!(
                "last-position logits NMSE {:.3e} > {:.1e}",
                l.nmse, limits.logits_nmse
            ),
        ));
    }
    if !within(l.kld.mean, limits.kld_mean) {
        r.failures.push(Failure::new(
            "kld_mean",
            format!("mean KLD {:.3e} > {:.1e}", l.kld.mean, limits.kld_mean),
        ));
    }
    if !within(l.kld.max, limits.kld_max) {
        let worst = l.per_position.iter().position(|p| p.kld == l.kld.max);
        r.failures.push(Failure::new(
            "kld_max",
            format!(
                "max KLD {:.3e} > {:.1e} (position {})",
                l.kld.max,
                limits.kld_max,
                worst.map_or("?".into(), |p| p.to_string())
            ),
        ));
    }
    if l.top1_rate() < limits.top1_min {
        r.failures.push(Failure::new(
            "top1",
            format!(
                "top-1 agreement {}/{} ({:.1}%) < {:.1}%",
                l.top1_agree,
                l.positions,
                100.0 * l.top1_rate(),
                100.0 * limits.top1_min
            ),
        ));
    }
    if let Some((pos, p)) = l
        .per_position
        .iter()
        .enumerate()
        .find(|(_, p)| p.hard_disagreement(limits.near_tie))
    {
        r.failures.push(Failure::new(
            "top1",
            format!(
                "{} position(s) where our most likely token is not llama.cpp's and not a near-tie; first: position {pos}, llama.cpp's margin to ours {} >= {}",
                l.top1_hard,
                p.margin_to_ours
                    .map_or("(not in its top-64)".to_string(), |m| format!("{m:.3}")),
                limits.near_tie
            ),
        ));
    }
    r.logits = Some(l);

    // Greedy continuation, from the prompt's last logits.
    let g = greedy::run(
        data.greedy_tokens(),
        |i| data.greedy_step(i),
        &last,
        steps,
        limits.near_tie,
        |t| {
            session
                .decode(t)
                .map(|l| l.to_vec())
                .map_err(|e| e.to_string())
        },
    )?;
    if g.outcome == greedy::Outcome::Diverged {
        let m = g.mismatch.as_ref().expect("a divergence has a mismatch");
        r.failures.push(Failure::new(
            "greedy",
            format!(
                "step {}: ours {} llama.cpp {}, llama.cpp's margin to ours {} (top-2 {:.3}) >= near-tie {}",
                m.step,
                m.ours,
                m.reference,
                m.reference_margin_to_ours
                    .map_or("(not in its top-64)".to_string(), |x| format!("{x:.3}")),
                m.reference_top2_margin,
                limits.near_tie
            ),
        ));
    }
    r.greedy = Some(g);
    let taps = sink.map(|s| s.taps).unwrap_or_default();
    Ok((
        PathOutputs {
            path: r.path,
            taps,
            top,
            last,
        },
        cross_positions,
    ))
}
