//! One model: its file checked, the checks that need no forward pass (the
//! text item), and each selected prompt on each selected path (one session
//! per path).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use engine::chat::ChatTemplate;
use engine::gguf::GgufFile;
use engine::model::{spec, Model, ModelError};
use engine::ops::KvType;
use engine::session::{Session, SessionConfig};
use engine::tokenizer::Tokenizer;
use engine::vulkan::VulkanOptions;

use super::corpus_item::CorpusRun;
use super::engine_checks::{cross_check, engine_checks, split_check};
use super::progress::Progress;
use super::text_checks::{
    chat_template, corpus_check, eog_check, prompt_tokens, render_check, sampling_check,
};
use crate::compare::checks::cross::PathOutputs;
use crate::compare::checks::thresholds::Limits;
use crate::compare::checks::tokens::PromptTokens;
use crate::compare::checks::{profile, split};
use crate::compare::plan::matrix::Item;
use crate::compare::plan::Options;
use crate::compare::report::{ModelReport, PromptReport};
use crate::compare::{Failure, Path};
use crate::reference::format::{Manifest, ManifestModel, PromptCapture};
use crate::reference::writer::sha256_file;
use crate::reference::{ModelRef, PromptData, ReferenceData};

/// One model's share of a run: the items of `selected` that belong to
/// model `entry`, whose paths are `paths`.
#[derive(Clone, Copy)]
pub(super) struct ModelRun<'a> {
    pub opts: &'a Options,
    pub data: &'a ReferenceData,
    pub entry: &'a ManifestModel,
    pub paths: &'a [Path],
    pub selected: &'a HashSet<Item>,
}

impl ModelRun<'_> {
    /// Runs the model's items. The model-level checks and failures belong
    /// to its text item: a run without it (another shard's) makes them but
    /// reports none.
    pub(super) fn report(self, progress: &mut Progress) -> ModelReport {
        let start = Instant::now();
        let text = self.selected.contains(&Item::text(&self.entry.id));
        let mut r = self.measure(progress, text);
        if !text {
            // Model-level findings are the text item's.
            r.failures.clear();
            r.checks = Default::default();
            r.text_seconds = 0.0;
        }
        r.seconds = start.elapsed().as_secs_f64();
        r
    }

    /// The model's checks and items, with its model-level findings made
    /// whether or not `text` (its text item is this run's) says to keep
    /// them.
    fn measure(self, progress: &mut Progress, text: bool) -> ModelReport {
        let ModelRun {
            opts,
            data,
            entry,
            paths,
            selected,
        } = self;
        let start = Instant::now();
        let explicit = opts.models.contains(&entry.id);
        let mut r = ModelReport::new(entry);
        let text_item = Item::text(&entry.id);
        // The text item ends where the text checks do, or where the model
        // cannot go further.
        let text_done = |r: &mut ModelReport, progress: &mut Progress| {
            if text && r.text_seconds == 0.0 {
                r.text_seconds = start.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
                progress.done(&text_item, r.failures.is_empty(), r.text_seconds);
            }
        };
        let skip = |r: &mut ModelReport, why: String| {
            if explicit {
                r.failures.push(Failure::new("model", why));
            } else {
                r.skipped = Some(why);
            }
        };
        let Some(model_ref) = data.model(&entry.id) else {
            skip(&mut r, "not captured".into());
            text_done(&mut r, progress);
            return r;
        };

        let gguf = match open_as_captured(opts, entry) {
            Ok(g) => g,
            Err(e) => {
                r.failures.push(Failure::new("model", e));
                text_done(&mut r, progress);
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
                text_done(&mut r, progress);
                return r;
            }
        };
        let template = chat_template(model_ref, &gguf, &tok, &mut r);
        if text {
            eog_check(model_ref, &tok, &mut r);
            if opts.corpus {
                corpus_check(opts, model_ref, &tok, &mut r);
                sampling_check(data, model_ref, &mut r);
                if let Some(t) = &template {
                    render_check(opts, model_ref, &gguf, t, &mut r);
                }
            }
        }

        if spec::lookup(&entry.architecture).is_none() {
            skip(
                &mut r,
                format!("architecture {} not implemented", entry.architecture),
            );
            text_done(&mut r, progress);
            return r;
        }
        text_done(&mut r, progress);
        let wanted = |prompt: &str| -> Vec<bool> {
            paths
                .iter()
                .map(|&p| selected.contains(&Item::prompt(&entry.id, prompt, p)))
                .collect()
        };
        let corpus_item = data.corpus_item(&entry.id);
        let corpus_want = corpus_item.as_deref().map(&wanted);
        let any_corpus = corpus_want.as_ref().is_some_and(|w| w.contains(&true));
        if !any_corpus && !model_ref.prompts().any(|p| wanted(&p.id).contains(&true)) {
            return r;
        }
        let model = match Model::from_gguf_with(Arc::clone(&gguf), &opts.model_options) {
            Ok(m) => Arc::new(m),
            // A feature the engine refuses by name (experts, say) is skipped
            // as an architecture it lacks is.
            Err(e @ ModelError::Unsupported { .. }) => {
                skip(&mut r, format!("{}: {e}", entry.file));
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
        r.paths = paths.to_vec();
        let cpu_profile = match opts.thresholds.limits(&entry.id, Path::Cpu) {
            Some(l) => profile::cpu_profile(opts.profile, l, model_ref.capture()),
            None => Err("no limits".into()),
        };
        let ctx = ModelCtx {
            cpu_profile,
            paths: r.paths.clone(),
            opts,
            manifest: data.manifest(),
            model_ref,
            model,
            tok,
            template,
            n_ctx,
            kv_type: entry.kv_type(),
            sessions: RefCell::new(HashMap::new()),
        };
        for prompt in model_ref.prompts() {
            let want = wanted(&prompt.id);
            if want.contains(&true) {
                r.prompts
                    .extend(ctx.run_prompt_paths(prompt, &want, progress));
            }
        }
        if let (Some(item), Some(want), Some(base)) =
            (&corpus_item, &corpus_want, data.corpus(&entry.id))
        {
            if any_corpus {
                // The prompts' sessions are no longer needed.
                ctx.sessions.borrow_mut().clear();
                let run = CorpusRun {
                    opts,
                    kv_type: entry.kv_type(),
                    model_id: &entry.id,
                    model: &ctx.model,
                    tok: &ctx.tok,
                    paths: &ctx.paths,
                };
                r.prompts.extend(run.run(base, item, want, progress));
            }
        }
        r
    }
}

/// The model file at `entry.file`, checked to be the file llama.cpp ran.
fn open_as_captured(opts: &Options, entry: &ManifestModel) -> Result<Arc<GgufFile>, String> {
    let file = match opts.model_files.get(&entry.id) {
        Some(f) => f.clone(),
        None => opts.repo.join(&entry.file),
    };
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
    /// KV cache type of every session (the capture's).
    kv_type: KvType,
    /// The session of each path, made on first use (or why it could not be).
    sessions: RefCell<HashMap<Path, Result<Session, String>>>,
    /// The CPU path's profile: `Ok` exact, `Err(why)` calibrated.
    cpu_profile: Result<(), String>,
}

impl ModelCtx<'_> {
    /// Whether `path` is held to the exact profile.
    fn exact(&self, path: Path) -> bool {
        path == Path::Cpu && self.cpu_profile.is_ok()
    }

    /// Prompt rows per forward pass on `path`: the capture's batch under
    /// the exact profile (llama.cpp picks its attention kernels by the
    /// rows of a batch), else `--chunk`.
    fn chunk(&self, path: Path) -> usize {
        if self.exact(path) {
            self.model_ref.capture().settings.n_ubatch as usize
        } else {
            self.opts.chunk
        }
    }

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
                n_batch: self.chunk(path).clamp(1, self.n_ctx),
                kv_type: self.kv_type,
                threads: self.opts.threads,
            };
            let vk = VulkanOptions {
                device: self.opts.device.clone(),
                validation: self.opts.validation,
                kernel_layout: self.opts.kernel_layout,
                ..VulkanOptions::default()
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

    /// One prompt: its tokens once, then the engine on each path `want`
    /// selects, and on the first path for their reference where they
    /// need it (not reported then: another shard reports it).
    fn run_prompt_paths(
        &self,
        prompt: &PromptCapture,
        want: &[bool],
        progress: &mut Progress,
    ) -> Vec<PromptReport> {
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
        let others = want.iter().skip(1).any(|&w| w);
        // The paths the wanted hybrid paths' splits are checked against
        // (`gpu`), run where the run has them, reported or not.
        let split_refs: Vec<Path> = self
            .paths
            .iter()
            .zip(want)
            .filter(|&(_, &w)| w)
            .filter_map(|(&p, _)| split::reference(p).map(|(r, _)| r))
            .filter(|r| self.paths.contains(r))
            .collect();
        let mut split_outputs: HashMap<Path, PathOutputs> = HashMap::new();
        for (i, &path) in self.paths.iter().enumerate() {
            let is_ref = split_refs.contains(&path);
            if !(want[i] || (i == 0 && others) || is_ref) {
                continue;
            }
            let split_base =
                split::reference(path).and_then(|(r, n)| split_outputs.get(&r).map(|o| (o, n)));
            let (p, outputs) =
                self.run_prompt(&data, prompt, path, &tokens, baseline.as_ref(), split_base);
            if let (true, Some(o)) = (is_ref, &outputs) {
                split_outputs.insert(path, o.clone());
            }
            if i == 0 {
                baseline = outputs;
            }
            if want[i] {
                let it = Item::prompt(&p.model, &p.prompt, path);
                progress.done(&it, p.passed(), p.seconds);
                out.push(p);
            }
        }
        let _ = opts;
        out
    }
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
        routing_tie: f64::INFINITY,
        taps: [("default".to_string(), f64::INFINITY)].into(),
        taps_layer0: Default::default(),
        corpus: None,
        exact: false,
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
        split_base: Option<(&PathOutputs, usize)>,
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
                r.checks.put(t.clone());
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
                let chunk = self.chunk(path);
                let outputs =
                    engine_checks(opts, session, d, prompt, chunk, &limits, &mut r, baseline)?;
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
                let v = cross_check(base, &o, per_position, l, &mut r);
                r.checks.put(v);
            }
            if let Some((base, n)) = split_base.filter(|(b, _)| !b.taps.is_empty()) {
                let s = split_check(base, &o, n, &limits, &mut r);
                r.checks.put(s);
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
        let limits = self.found_or_unlimited(found, model_id, key, r);
        if path != Path::Cpu {
            return limits;
        }
        match &self.cpu_profile {
            Ok(()) => {
                r.profile = Some("exact".into());
                profile::exact_limits(&limits)
            }
            Err(why) => {
                r.profile = Some(format!("calibrated: {why}"));
                // The model's exact marker chose the profile; the
                // calibrated limits hold no position's logits to their bits.
                Limits {
                    exact: false,
                    ..limits
                }
            }
        }
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
