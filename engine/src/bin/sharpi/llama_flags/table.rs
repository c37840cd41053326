//! The table: every llama-cli / llama-completion option, in the order of
//! engine/tests/data/llama-cli-flags.txt (llama.cpp's arg.cpp), then the
//! retired spellings. The descriptions are ours, not llama.cpp's help.

use super::{LlamaOption, Status, Value};

const fn same(spellings: &'static [&'static str], values: u8) -> LlamaOption {
    LlamaOption {
        spellings,
        values,
        status: Status::Same,
        retired: false,
    }
}

const fn rename(spellings: &'static [&'static str], values: u8, to: &'static str) -> LlamaOption {
    LlamaOption {
        spellings,
        values,
        status: Status::Rename(to),
        retired: false,
    }
}

const fn convert(
    spellings: &'static [&'static str],
    values: u8,
    to: &'static str,
    value: Value,
) -> LlamaOption {
    LlamaOption {
        spellings,
        values,
        status: Status::Convert { to, value },
        retired: false,
    }
}

const fn hint(
    spellings: &'static [&'static str],
    values: u8,
    does: &'static str,
    instead: &'static str,
) -> LlamaOption {
    LlamaOption {
        spellings,
        values,
        status: Status::Hint { does, instead },
        retired: false,
    }
}

const fn retired(o: LlamaOption) -> LlamaOption {
    LlamaOption { retired: true, ..o }
}

// What sharpi offers instead, shared by options of one kind.
const LOCAL_FILES: &str = "sharpi reads local GGUF files only: download the model and give -m FILE";
const NO_SERVER: &str = "sharpi runs the model in its own process: give -m FILE";
const THREADS: &str =
    "sharpi runs prompt and generation on the same -t/--threads workers and leaves their placement and priority to the OS";
const CONTEXT: &str =
    "sharpi keeps the whole context in its KV cache and stops generating when -c/--ctx-size is full";
const KV_CACHE: &str = "sharpi sizes and lays out its KV cache itself, from -c/--ctx-size";
const KV_TYPE: &str = "use --kv-type f32|f16 (one type for K and V)";
const PROMPT_CACHE: &str =
    "sharpi keeps no prompt cache between runs; with --conversation it reuses the KV cache of earlier turns";
const KERNELS: &str = "sharpi chooses its attention kernels itself";
const LAYOUT: &str = "sharpi chooses its weight layouts and buffers itself";
const TIMINGS: &str =
    "sharpi prints the token counts and speeds on stderr after every run (--json has them too; `sharpi bench` measures speed)";
const INTERACTIVE: &str = "use --conversation: turns read from stdin through the chat template";
const TURN_FRAMING: &str =
    "sharpi frames turns with the chat template: --chat-template NAME|TEXT or --chat-template-file FILE";
const SAMPLING: &str =
    "sharpi samples with --temp, --top-k, --top-p, --min-p, --typical, --repeat-penalty, --repeat-last-n, --presence-penalty, --frequency-penalty and -s/--seed, in llama.cpp's default order";
const CONSTRAINED: &str =
    "sharpi has no constrained decoding: generate freely and check the output";
const ROPE: &str = "sharpi takes RoPE and YaRN settings from the model file";
const PLACEMENT: &str =
    "sharpi places whole layers, weights and KV cache together: -g/--gpu-layers N|-1|auto, --fixed-on cpu|gpu";
const ONE_GPU: &str =
    "sharpi runs on one GPU: --device INDEX|NAME picks it (--list-devices lists them), -g/--gpu-layers sets the layers on it";
const MOE: &str =
    "use --moe-cache N|NMiB: experts of the GPU layers stay in host memory, N slots per layer on the GPU";
const FIT: &str = "use -g auto: the most layers whose GPU part fits the device memory";
const MEMORY_MAP: &str = "sharpi reads a model that fits half of the available memory into huge pages, and maps a larger one read-only";
const ONE_SEQUENCE: &str =
    "sharpi decodes one sequence; `sharpi bench` measures prefill and decode speed";
const MULTIMODAL: &str = "sharpi runs text models only";
const MACHINE: &str = "sharpi uses the devices of this machine (--list-devices lists them)";
const ADAPTERS: &str =
    "sharpi loads no adapters: merge one into the model file first (llama.cpp's llama-export-lora)";
const METADATA: &str =
    "sharpi uses the model file's metadata as it is (`sharpi inspect FILE` shows it)";
const JINJA: &str =
    "sharpi always renders chat templates with its own Jinja engine (--raw sends the prompt without one)";
const REASONING: &str =
    "sharpi prints the model's output as it is generated, thinking included, and parses no replies";
const LOGGING: &str =
    "sharpi writes only errors, token counts and speeds to stderr; --verbose-prompt adds the prompt's tokens, --json a machine-readable record";
const SPECULATIVE: &str =
    "sharpi has no speculative decoding: it decodes with the one model given by -m";
const PRESETS: &str = "sharpi has no built-in model presets: give -m FILE and the flags you want";
const NO_ECHO: &str =
    "sharpi never echoes the prompt; --verbose-prompt prints its tokens on stderr";
const PLAIN_IO: &str = "sharpi reads stdin and writes stdout as plain streams already";

/// Every llama-cli / llama-completion option and what sharpi does with it
/// (one line per option, as in the data file).
#[rustfmt::skip]
pub static OPTIONS: &[LlamaOption] = &[
    rename(&["-h", "--help", "--usage"], 0, "--help"),
    same(&["--version"], 0),
    hint(&["-cl", "--cache-list"], 0, "list the models in its download cache", LOCAL_FILES),
    hint(&["--completion-bash"], 0, "print a bash completion script", "`sharpi --help` and `sharpi SUBCOMMAND --help` list every flag"),
    hint(&["--server-base"], 1, "talk to a running llama-server", NO_SERVER),
    same(&["--verbose-prompt"], 0),
    hint(&["--display-prompt"], 0, "print the prompt before the output", NO_ECHO),
    same(&["--no-display-prompt"], 0),
    convert(&["-co", "--color"], 1, "--color", Value::Toggle),
    convert(&["-t", "--threads"], 1, "--threads", Value::Threads),
    hint(&["-tb", "--threads-batch"], 1, "set the threads of prompt processing", THREADS),
    hint(&["-C", "--cpu-mask"], 1, "pin threads to the CPUs of a mask", THREADS),
    hint(&["-Cr", "--cpu-range"], 1, "pin threads to a range of CPUs", THREADS),
    hint(&["--cpu-strict"], 1, "place threads strictly on the chosen CPUs", THREADS),
    hint(&["--prio"], 1, "set the threads' scheduling priority", THREADS),
    hint(&["--poll"], 1, "set how busily threads wait for work", THREADS),
    hint(&["-Cb", "--cpu-mask-batch"], 1, "pin prompt-processing threads to the CPUs of a mask", THREADS),
    hint(&["-Crb", "--cpu-range-batch"], 1, "pin prompt-processing threads to a range of CPUs", THREADS),
    hint(&["--cpu-strict-batch"], 1, "place prompt-processing threads strictly", THREADS),
    hint(&["--prio-batch"], 1, "set the prompt-processing threads' priority", THREADS),
    hint(&["--poll-batch"], 1, "set how busily prompt-processing threads wait", THREADS),
    same(&["-c", "--ctx-size"], 1),
    rename(&["-n", "--predict", "--n-predict"], 1, "--n-predict"),
    same(&["-b", "--batch-size"], 1),
    rename(&["-ub", "--ubatch-size"], 1, "--ubatch-size"),
    hint(&["--keep"], 1, "keep the first N prompt tokens when the context shifts", CONTEXT),
    hint(&["--swa-full"], 0, "keep a full-size cache for sliding-window layers", KV_CACHE),
    hint(&["-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"], 1, "keep N context checkpoints per sequence", CONTEXT),
    hint(&["-cram", "--cache-ram"], 1, "bound the host memory of its prompt cache", PROMPT_CACHE),
    hint(&["--context-shift"], 0, "drop old tokens when the context is full and go on", CONTEXT),
    hint(&["--no-context-shift"], 0, "stop at a full context instead of shifting it", CONTEXT),
    hint(&["-fa", "--flash-attn"], 1, "turn Flash Attention on, off or auto", KERNELS),
    same(&["-p", "--prompt"], 1),
    rename(&["-sys", "--system-prompt"], 1, "--system-prompt"),
    hint(&["--perf"], 0, "print libllama's internal timings", TIMINGS),
    hint(&["--no-perf"], 0, "leave out libllama's internal timings", TIMINGS),
    hint(&["--show-timings"], 0, "print timings after each reply", TIMINGS),
    hint(&["--no-show-timings"], 0, "leave out the timings after each reply", TIMINGS),
    same(&["-f", "--file"], 1),
    hint(&["-sysf", "--system-prompt-file"], 1, "read the system prompt from a file", "give its text: --system-prompt \"$(cat FILE)\""),
    hint(&["-bf", "--binary-file"], 1, "read the prompt from a binary file", "sharpi reads a text prompt with -f FILE"),
    same(&["-e", "--escape"], 0),
    same(&["--no-escape"], 0),
    hint(&["-ptc", "--print-token-count"], 1, "print the token count every N tokens", TIMINGS),
    hint(&["--prompt-cache"], 1, "save and reuse the prompt's state in a file", PROMPT_CACHE),
    hint(&["--prompt-cache-all"], 0, "save the generated tokens in the prompt cache too", PROMPT_CACHE),
    hint(&["--prompt-cache-ro"], 0, "read the prompt cache without updating it", PROMPT_CACHE),
    same(&["-r", "--reverse-prompt"], 1),
    hint(&["-sp", "--special"], 0, "print special tokens in the output", "sharpi prints the text of ordinary tokens; --json lists every generated token id"),
    rename(&["-cnv", "--conversation"], 0, "--conversation"),
    rename(&["-no-cnv", "--no-conversation"], 0, "--no-conversation"),
    hint(&["-st", "--single-turn"], 0, "answer one chat turn and exit", "sharpi answers -p/-f once and exits unless --conversation is given"),
    hint(&["-i", "--interactive"], 0, "let the user type into the running generation", INTERACTIVE),
    hint(&["-if", "--interactive-first"], 0, "wait for the user's input before generating", INTERACTIVE),
    hint(&["-mli", "--multiline-input"], 0, "read multi-line input without trailing backslashes", INTERACTIVE),
    hint(&["--in-prefix-bos"], 0, "start each user input with a BOS token", TURN_FRAMING),
    hint(&["--in-prefix"], 1, "put a text before each user input", TURN_FRAMING),
    hint(&["--in-suffix"], 1, "put a text after each user input", TURN_FRAMING),
    hint(&["--warmup"], 0, "run an empty warm-up pass before the prompt", "sharpi runs no warm-up pass; `sharpi bench` measures speed"),
    hint(&["--no-warmup"], 0, "skip the empty warm-up pass", "sharpi runs no warm-up pass; `sharpi bench` measures speed"),
    hint(&["--samplers"], 1, "choose the samplers and their order by name", SAMPLING),
    convert(&["-s", "--seed"], 1, "--seed", Value::Seed),
    hint(&["--sampler-seq", "--sampling-seq"], 1, "choose the samplers and their order by letter", SAMPLING),
    same(&["--ignore-eos"], 0),
    rename(&["--temp", "--temperature"], 1, "--temp"),
    same(&["--top-k"], 1),
    same(&["--top-p"], 1),
    same(&["--min-p"], 1),
    hint(&["--top-nsigma", "--top-n-sigma"], 1, "keep tokens within N standard deviations of the top logit", SAMPLING),
    hint(&["--xtc-probability"], 1, "set how often XTC removes top choices", SAMPLING),
    hint(&["--xtc-threshold"], 1, "set the probability above which XTC removes choices", SAMPLING),
    rename(&["--typical", "--typical-p"], 1, "--typical"),
    same(&["--repeat-last-n"], 1),
    same(&["--repeat-penalty"], 1),
    same(&["--presence-penalty"], 1),
    same(&["--frequency-penalty"], 1),
    hint(&["--dry-multiplier"], 1, "set the strength of the DRY repetition penalty", SAMPLING),
    hint(&["--dry-base"], 1, "set the growth base of the DRY penalty", SAMPLING),
    hint(&["--dry-allowed-length"], 1, "set the repeat length DRY lets pass", SAMPLING),
    hint(&["--dry-penalty-last-n"], 1, "set the tokens DRY looks back over", SAMPLING),
    hint(&["--dry-sequence-breaker"], 1, "add a text that resets DRY's matching", SAMPLING),
    hint(&["--adaptive-target"], 1, "aim adaptive-p sampling at a probability", SAMPLING),
    hint(&["--adaptive-decay"], 1, "set how fast adaptive-p sampling adapts", SAMPLING),
    hint(&["--dynatemp-range"], 1, "vary the temperature by entropy within a range", SAMPLING),
    hint(&["--dynatemp-exp"], 1, "set the exponent of dynamic temperature", SAMPLING),
    hint(&["--mirostat"], 1, "sample with Mirostat 1 or 2", SAMPLING),
    hint(&["--mirostat-lr"], 1, "set Mirostat's learning rate", SAMPLING),
    hint(&["--mirostat-ent"], 1, "set Mirostat's target entropy", SAMPLING),
    hint(&["-l", "--logit-bias"], 1, "add a bias to chosen tokens' logits", SAMPLING),
    hint(&["--grammar"], 1, "constrain the output to a GBNF grammar", CONSTRAINED),
    hint(&["--grammar-file"], 1, "constrain the output to a GBNF grammar file", CONSTRAINED),
    hint(&["-j", "--json-schema"], 1, "constrain the output to a JSON schema", CONSTRAINED),
    hint(&["-jf", "--json-schema-file"], 1, "constrain the output to a JSON schema file", CONSTRAINED),
    hint(&["-bs", "--backend-sampling"], 0, "sample on the compute backend", SAMPLING),
    hint(&["--rope-scaling"], 1, "choose the RoPE scaling method", ROPE),
    hint(&["--rope-scale"], 1, "stretch the context by a RoPE factor", ROPE),
    hint(&["--rope-freq-base"], 1, "set the RoPE base frequency", ROPE),
    hint(&["--rope-freq-scale"], 1, "scale the RoPE frequencies", ROPE),
    hint(&["--yarn-orig-ctx"], 1, "set YaRN's original context length", ROPE),
    hint(&["--yarn-ext-factor"], 1, "set YaRN's extrapolation mix", ROPE),
    hint(&["--yarn-attn-factor"], 1, "set YaRN's attention scale", ROPE),
    hint(&["--yarn-beta-slow"], 1, "set YaRN's high correction dimension", ROPE),
    hint(&["--yarn-beta-fast"], 1, "set YaRN's low correction dimension", ROPE),
    hint(&["-gan", "--grp-attn-n"], 1, "set the group factor of self-extend attention", CONTEXT),
    hint(&["-gaw", "--grp-attn-w"], 1, "set the width of self-extend attention", CONTEXT),
    hint(&["-kvo", "--kv-offload"], 0, "keep the KV cache on the GPU", PLACEMENT),
    hint(&["-nkvo", "--no-kv-offload"], 0, "keep the KV cache in host memory", PLACEMENT),
    hint(&["--repack"], 0, "repack weights for the CPU's kernels", LAYOUT),
    hint(&["-nr", "--no-repack"], 0, "keep weights as the file stores them", LAYOUT),
    hint(&["--no-host"], 0, "skip host buffers so that extra buffer types are used", LAYOUT),
    hint(&["-ctk", "--cache-type-k"], 1, "set the KV cache type of K", KV_TYPE),
    hint(&["-ctv", "--cache-type-v"], 1, "set the KV cache type of V", KV_TYPE),
    hint(&["-dt", "--defrag-thold"], 1, "set when to defragment the KV cache", KV_CACHE),
    hint(&["-np", "--parallel"], 1, "decode N sequences in parallel", ONE_SEQUENCE),
    hint(&["-mm", "--mmproj"], 1, "load a multimodal projector file", MULTIMODAL),
    hint(&["-mmu", "--mmproj-url"], 1, "download a multimodal projector", MULTIMODAL),
    hint(&["--mmproj-auto"], 0, "find the multimodal projector by itself", MULTIMODAL),
    hint(&["--no-mmproj", "--no-mmproj-auto"], 0, "skip the multimodal projector", MULTIMODAL),
    hint(&["--mmproj-offload"], 0, "run the multimodal projector on the GPU", MULTIMODAL),
    hint(&["--no-mmproj-offload"], 0, "run the multimodal projector on the CPU", MULTIMODAL),
    hint(&["-mmdev", "--mmproj-device"], 1, "choose the device of the multimodal projector", MULTIMODAL),
    hint(&["--image", "--audio", "--video"], 1, "give the model an image, audio or video file", MULTIMODAL),
    hint(&["--image-min-tokens"], 1, "set the fewest tokens per image", MULTIMODAL),
    hint(&["--image-max-tokens"], 1, "set the most tokens per image", MULTIMODAL),
    hint(&["--video-fps"], 1, "set the frames per second read from a video", MULTIMODAL),
    hint(&["--video-timestamp-interval"], 1, "set how often video frames get timestamps", MULTIMODAL),
    hint(&["--video-ffmpeg-dir"], 1, "say where ffmpeg is for video input", MULTIMODAL),
    hint(&["--rpc"], 1, "offload to RPC servers on other machines", MACHINE),
    hint(&["-lm", "--load-mode"], 1, "choose mmap, mlock or direct I/O loading", MEMORY_MAP),
    hint(&["-lzm", "--lazy-mode"], 1, "read some tensors from disk on demand", MEMORY_MAP),
    hint(&["--numa"], 1, "spread or pin threads over NUMA nodes", THREADS),
    rename(&["-dev", "--device"], 1, "--device"),
    same(&["--list-devices"], 0),
    hint(&["-ot", "--override-tensor"], 1, "place tensors matching a pattern on a buffer type", PLACEMENT),
    hint(&["-cmoe", "--cpu-moe"], 0, "keep all mixture-of-experts weights on the CPU", MOE),
    hint(&["-ncmoe", "--n-cpu-moe"], 1, "keep the experts of the first N layers on the CPU", MOE),
    hint(&["-ncffn", "--n-cpu-ffn"], 1, "keep the FFN weights of the first N layers on the CPU", PLACEMENT),
    convert(&["-ngl", "--gpu-layers", "--n-gpu-layers"], 1, "--gpu-layers", Value::GpuLayers),
    hint(&["-sm", "--split-mode"], 1, "split the model over several GPUs", ONE_GPU),
    hint(&["-ts", "--tensor-split"], 1, "set each GPU's share of the model", ONE_GPU),
    hint(&["-mg", "--main-gpu"], 1, "choose the GPU of unsplit work", ONE_GPU),
    hint(&["-fit", "--fit"], 1, "adjust unset settings to fit device memory", FIT),
    hint(&["-fitt", "--fit-target"], 1, "set the memory left free per device when fitting", FIT),
    hint(&["-fitc", "--fit-ctx"], 1, "set the smallest context fitting may choose", FIT),
    hint(&["--check-tensors"], 0, "check tensor data for invalid values", "`sharpi inspect FILE` reads and lists every tensor"),
    hint(&["--override-kv"], 1, "override model metadata", METADATA),
    hint(&["--op-offload"], 0, "offload host tensor operations to the GPU", PLACEMENT),
    hint(&["--no-op-offload"], 0, "keep host tensor operations on the CPU", PLACEMENT),
    hint(&["--lora"], 1, "apply a LoRA adapter", ADAPTERS),
    hint(&["--lora-scaled"], 1, "apply a LoRA adapter with a scale", ADAPTERS),
    hint(&["--control-vector"], 1, "add a control vector", ADAPTERS),
    hint(&["--control-vector-scaled"], 1, "add a control vector with a scale", ADAPTERS),
    hint(&["--control-vector-layer-range"], 2, "choose the layers control vectors apply to", ADAPTERS),
    same(&["-m", "--model"], 1),
    hint(&["-mu", "--model-url"], 1, "download the model from a URL", LOCAL_FILES),
    hint(&["-dr", "--docker-repo"], 1, "download the model from Docker Hub", LOCAL_FILES),
    hint(&["-hf", "-hfr", "--hf-repo"], 1, "download the model from Hugging Face", LOCAL_FILES),
    hint(&["-hff", "--hf-file"], 1, "choose the file of a Hugging Face download", LOCAL_FILES),
    hint(&["-hft", "--hf-token"], 1, "give a Hugging Face access token", LOCAL_FILES),
    hint(&["-o", "--output", "--output-file"], 1, "write the output to a file", "redirect sharpi's stdout (--json for a machine-readable record)"),
    hint(&["--chat-template-kwargs"], 1, "pass extra variables to the chat template", TURN_FRAMING),
    hint(&["--jinja"], 0, "render the chat template with its Jinja engine", JINJA),
    hint(&["--no-jinja"], 0, "use its built-in chat formats instead of Jinja", JINJA),
    hint(&["--reasoning-format"], 1, "choose how thinking is parsed out of replies", REASONING),
    hint(&["-rea", "--reasoning"], 1, "turn the model's thinking on or off", REASONING),
    hint(&["--reasoning-effort"], 1, "set the model's reasoning effort", REASONING),
    hint(&["--reasoning-budget"], 1, "bound the tokens spent thinking", REASONING),
    hint(&["--reasoning-budget-message"], 1, "add a message when the thinking budget runs out", REASONING),
    hint(&["--reasoning-preserve"], 0, "keep earlier turns' thinking in the history", REASONING),
    hint(&["--no-reasoning-preserve"], 0, "drop earlier turns' thinking from the history", REASONING),
    same(&["--chat-template"], 1),
    same(&["--chat-template-file"], 1),
    hint(&["--skip-chat-parsing"], 0, "print replies without parsing them", REASONING),
    hint(&["--no-skip-chat-parsing"], 0, "parse replies for thinking and tool calls", REASONING),
    hint(&["--simple-io"], 0, "use basic console I/O", PLAIN_IO),
    hint(&["--log-disable"], 0, "turn its log off", LOGGING),
    hint(&["--log-file"], 1, "write its log to a file", LOGGING),
    hint(&["--log-jsonl"], 0, "write its log as JSON lines", LOGGING),
    hint(&["--no-log-jsonl"], 0, "write its log as text", LOGGING),
    hint(&["--log-prompts-dir"], 1, "save each prompt to a folder", LOGGING),
    hint(&["--log-colors"], 1, "color its log", LOGGING),
    hint(&["-v", "--verbose", "--log-verbose"], 0, "log everything", LOGGING),
    hint(&["--offline"], 0, "use only its download cache", LOCAL_FILES),
    hint(&["-lv", "--verbosity", "--log-verbosity"], 1, "set the log's verbosity", LOGGING),
    hint(&["--log-prefix"], 0, "prefix log lines with their level", LOGGING),
    hint(&["--no-log-prefix"], 0, "leave out log line prefixes", LOGGING),
    hint(&["--log-timestamps"], 0, "timestamp log lines", LOGGING),
    hint(&["--no-log-timestamps"], 0, "leave out log timestamps", LOGGING),
    hint(&["--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft"], 1, "download a draft model from Hugging Face", SPECULATIVE),
    hint(&["--spec-draft-threads", "-td", "--threads-draft"], 1, "set the draft model's threads", SPECULATIVE),
    hint(&["--spec-draft-threads-batch", "-tbd", "--threads-batch-draft"], 1, "set the draft model's prompt threads", SPECULATIVE),
    hint(&["--spec-draft-cpu-mask", "-Cd", "--cpu-mask-draft"], 1, "pin the draft model's threads to a mask", SPECULATIVE),
    hint(&["--spec-draft-cpu-range", "-Crd", "--cpu-range-draft"], 1, "pin the draft model's threads to a range", SPECULATIVE),
    hint(&["--spec-draft-cpu-strict", "--cpu-strict-draft"], 1, "place the draft model's threads strictly", SPECULATIVE),
    hint(&["--spec-draft-prio", "--prio-draft"], 1, "set the draft model's thread priority", SPECULATIVE),
    hint(&["--spec-draft-poll", "--poll-draft"], 1, "set how busily the draft model's threads wait", SPECULATIVE),
    hint(&["--spec-draft-cpu-mask-batch", "-Cbd", "--cpu-mask-batch-draft"], 1, "pin the draft model's prompt threads to a mask", SPECULATIVE),
    hint(&["--spec-draft-cpu-strict-batch", "--cpu-strict-batch-draft"], 1, "place the draft model's prompt threads strictly", SPECULATIVE),
    hint(&["--spec-draft-prio-batch", "--prio-batch-draft"], 1, "set the draft model's prompt thread priority", SPECULATIVE),
    hint(&["--spec-draft-poll-batch", "--poll-batch-draft"], 1, "set how busily the draft model's prompt threads wait", SPECULATIVE),
    hint(&["--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"], 1, "set the draft model's KV cache type of K", SPECULATIVE),
    hint(&["--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"], 1, "set the draft model's KV cache type of V", SPECULATIVE),
    hint(&["--spec-draft-override-tensor", "-otd", "--override-tensor-draft"], 1, "place the draft model's tensors by pattern", SPECULATIVE),
    hint(&["--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft"], 0, "keep the draft model's experts on the CPU", SPECULATIVE),
    hint(&["--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncmoed", "--n-cpu-moe-draft"], 1, "keep the draft model's first N layers' experts on the CPU", SPECULATIVE),
    hint(&["--spec-draft-n-max"], 1, "set the most tokens drafted at once", SPECULATIVE),
    hint(&["--spec-draft-n-min"], 1, "set the fewest tokens drafted at once", SPECULATIVE),
    hint(&["--spec-synth-len"], 1, "simulate a mean acceptance length", SPECULATIVE),
    hint(&["--spec-synth-rates"], 1, "simulate acceptance rates", SPECULATIVE),
    hint(&["--spec-draft-p-split", "--draft-p-split"], 1, "set the probability at which drafting splits", SPECULATIVE),
    hint(&["--spec-draft-p-min", "--draft-p-min"], 1, "set the least probability a drafted token needs", SPECULATIVE),
    hint(&["--spec-draft-backend-sampling"], 0, "sample drafts on the compute backend", SPECULATIVE),
    hint(&["--no-spec-draft-backend-sampling"], 0, "sample drafts on the CPU", SPECULATIVE),
    hint(&["--spec-draft-sampling"], 1, "choose greedy or probabilistic drafting", SPECULATIVE),
    hint(&["--spec-draft-device", "-devd", "--device-draft"], 1, "choose the draft model's devices", SPECULATIVE),
    hint(&["--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"], 1, "set the draft model's GPU layers", SPECULATIVE),
    hint(&["--spec-draft-model", "-md", "--model-draft"], 1, "load a draft model for speculative decoding", SPECULATIVE),
    hint(&["--spec-type"], 1, "choose the kinds of speculative decoding", SPECULATIVE),
    hint(&["--spec-ngram-mod-n-min"], 1, "set the n-gram-mod drafter's shortest draft", SPECULATIVE),
    hint(&["--spec-ngram-mod-n-max"], 1, "set the n-gram-mod drafter's longest draft", SPECULATIVE),
    hint(&["--spec-ngram-mod-n-match"], 1, "set the n-gram-mod drafter's match length", SPECULATIVE),
    hint(&["--spec-ngram-simple-size-n"], 1, "set the simple n-gram drafter's key length", SPECULATIVE),
    hint(&["--spec-ngram-simple-size-m"], 1, "set the simple n-gram drafter's draft length", SPECULATIVE),
    hint(&["--spec-ngram-simple-min-hits"], 1, "set the simple n-gram drafter's hit threshold", SPECULATIVE),
    hint(&["--spec-ngram-map-k-size-n"], 1, "set the n-gram-map-k drafter's key length", SPECULATIVE),
    hint(&["--spec-ngram-map-k-size-m"], 1, "set the n-gram-map-k drafter's draft length", SPECULATIVE),
    hint(&["--spec-ngram-map-k-min-hits"], 1, "set the n-gram-map-k drafter's hit threshold", SPECULATIVE),
    hint(&["--spec-ngram-map-k4v-size-n"], 1, "set the n-gram-map-k4v drafter's key length", SPECULATIVE),
    hint(&["--spec-ngram-map-k4v-size-m"], 1, "set the n-gram-map-k4v drafter's draft length", SPECULATIVE),
    hint(&["--spec-ngram-map-k4v-min-hits"], 1, "set the n-gram-map-k4v drafter's hit threshold", SPECULATIVE),
    hint(&["--draft", "--draft-n", "--draft-max"], 1, "set the draft length (removed there for --spec-draft-n-max)", SPECULATIVE),
    hint(&["--draft-min", "--draft-n-min"], 1, "set the least draft length (removed there for --spec-draft-n-min)", SPECULATIVE),
    hint(&["--gpt-oss-20b-default"], 0, "download and run gpt-oss-20b with preset settings", PRESETS),
    hint(&["--gpt-oss-120b-default"], 0, "download and run gpt-oss-120b with preset settings", PRESETS),
    hint(&["--vision-gemma-4b-default"], 0, "download and run Gemma 3 4B vision with preset settings", PRESETS),
    hint(&["--vision-gemma-12b-default"], 0, "download and run Gemma 3 12B vision with preset settings", PRESETS),
    hint(&["--spec-default"], 0, "turn on a default speculative decoding setup", SPECULATIVE),
    // Spellings of older llama.cpp versions (replaced by --load-mode).
    retired(hint(&["--mlock"], 0, "lock the model in RAM", MEMORY_MAP)),
    retired(hint(&["--mmap"], 0, "memory-map the model file", MEMORY_MAP)),
    retired(hint(&["--no-mmap"], 0, "read the model file instead of mapping it", MEMORY_MAP)),
];
