//! Compiles every `shaders/*.comp` to SPIR-V with shaderc and generates the Rust
//! table that `engine/src/vulkan/shaders.rs` includes.
//!
//! - `#include "x.glsl"` resolves next to the including file first, then in
//!   `shaders/common/`, then among the generated headers; `#include
//!   <x.glsl>` skips the first.
//! - Generated header: `op_codes.glsl`, the op codes of `src/op_codes.rs`
//!   (included here) as GLSL `#define`s.
//! - Optimisation is on and warnings are errors; a failing shader fails the build
//!   with shaderc's message.
//! - Variants are data (`build/variants.rs`): kernel families, each
//!   compiled at every point of its axes (weight type of `WEIGHT_TYPES` in
//!   `src/ggml_type.rs` and KV cache type of `KV_TYPES` in
//!   `src/kv_type.rs`, both included here; activation format; plain or
//!   subgroup; fault). A `.comp` file named there by no family is
//!   compiled once under its file stem.
//! - A small SPIR-V reflection pass (`build/reflect.rs`) records, per shader,
//!   the storage-buffer bindings of set 0 (and whether each is read-only /
//!   write-only), the size of the push-constant block and the workgroup size,
//!   so that the pipeline layout comes from the shader itself and Rust's
//!   push-constant mirrors can be checked.
//! - Besides one constant per variant, the table has, per weight-reading
//!   family, an array of its variants indexed as `WEIGHT_TYPES`
//!   (`by_type::MATVEC`), and per family over the KV cache type one indexed
//!   as `KvType` (`by_kv::ATTENTION`).

#[allow(dead_code)]
#[path = "src/ggml_type.rs"]
mod ggml_type;
#[allow(dead_code)]
#[path = "src/kv_type.rs"]
mod kv_type;
#[allow(dead_code)]
#[path = "src/op_codes.rs"]
mod op_codes;
#[path = "build/reflect.rs"]
mod reflect;
#[path = "build/variants.rs"]
mod variants;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

use ggml_type::WEIGHT_TYPES;
use kv_type::KV_TYPES;
use reflect::{reflect, Access};
use variants::{Grouped, Variant};

/// The Vulkan version the SPIR-V targets (SPIR-V 1.5). The context requires a
/// device of at least this version.
const TARGET_VULKAN: shaderc::EnvVersion = shaderc::EnvVersion::Vulkan1_2;

fn main() {
    if let Err(message) = run() {
        // A plain message (not a panic) so that shaderc's diagnostics read as they are.
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let root = manifest
        .parent()
        .ok_or("engine crate has no parent folder")?
        .to_path_buf();
    let shader_dir = root.join("shaders");
    let common_dir = shader_dir.join("common");
    let out_dir = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let spv_dir = out_dir.join("shaders");
    fs::create_dir_all(&spv_dir).map_err(|e| format!("{}: {e}", spv_dir.display()))?;
    let generated_dir = out_dir.join("glsl");
    fs::create_dir_all(&generated_dir).map_err(|e| format!("{}: {e}", generated_dir.display()))?;
    write_if_changed(
        &generated_dir.join("op_codes.glsl"),
        op_codes_glsl().as_bytes(),
    )?;
    let big_endian = env::var("CARGO_CFG_TARGET_ENDIAN").as_deref() == Ok("big");

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rerun-if-changed=src/ggml_type.rs");
    println!("cargo:rerun-if-changed=src/kv_type.rs");
    println!("cargo:rerun-if-changed=src/op_codes.rs");
    println!("cargo:rerun-if-changed={}", shader_dir.display());
    for file in files_under(&shader_dir)? {
        println!("cargo:rerun-if-changed={}", file.display());
    }

    // Every .comp in shaders/ (not in common/), sorted for a stable table.
    let mut comp_files = BTreeSet::new();
    for entry in fs::read_dir(&shader_dir).map_err(|e| format!("{}: {e}", shader_dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_file() && path.extension().is_some_and(|x| x == "comp") {
            let file = path
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or("non-UTF-8 shader file name")?;
            comp_files.insert(file.to_string());
        }
    }

    // Cargo sets this for the build script of a build with the feature.
    let faults = env::var_os("CARGO_FEATURE_FAULT_INJECTION").is_some();
    let mut variants = variants::listed(faults);
    for v in &variants {
        if !comp_files.contains(&v.source) {
            return Err(format!(
                "shader variant `{}` names shaders/{}, which does not exist",
                v.name, v.source
            ));
        }
    }
    for file in &comp_files {
        if !variants.iter().any(|v| &v.source == file) {
            let stem = file.trim_end_matches(".comp").to_string();
            variants.push(Variant {
                name: stem,
                source: file.clone(),
                defines: Vec::new(),
                by_type: None,
                by_kv: None,
            });
        }
    }
    let mut seen = BTreeSet::new();
    for v in &variants {
        let valid = !v.name.is_empty()
            && v.name.starts_with(|c: char| c.is_ascii_lowercase())
            && v.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(format!(
                "shader name `{}` (from {}) must be a lower-case identifier",
                v.name, v.source
            ));
        }
        if !seen.insert(v.name.clone()) {
            return Err(format!("two shader variants are named `{}`", v.name));
        }
    }

    let compiler = shaderc::Compiler::new().map_err(|e| format!("shaderc: {e}"))?;
    let mut table = String::new();
    table.push_str("// @generated by engine/build.rs from shaders/; do not edit.\n\n");
    let mut all = Vec::new();
    for (index, v) in variants.iter().enumerate() {
        let source_path = shader_dir.join(&v.source);
        let text = fs::read_to_string(&source_path)
            .map_err(|e| format!("{}: {e}", source_path.display()))?;
        let mut options = shaderc::CompileOptions::new().map_err(|e| format!("shaderc: {e}"))?;
        options.set_source_language(shaderc::SourceLanguage::GLSL);
        options.set_target_env(shaderc::TargetEnv::Vulkan, TARGET_VULKAN as u32);
        options.set_optimization_level(shaderc::OptimizationLevel::Performance);
        options.set_warnings_as_errors();
        for (key, value) in &v.defines {
            options.add_macro_definition(key, Some(value));
        }
        let root_for_includes = root.clone();
        let dirs = [common_dir.clone(), generated_dir.clone()];
        options.set_include_callback(move |requested, kind, requesting, _depth| {
            resolve_include(&root_for_includes, &dirs, requested, kind, requesting)
        });
        let display_name = format!("shaders/{}", v.source);
        let artifact = compiler
            .compile_into_spirv(
                &text,
                shaderc::ShaderKind::Compute,
                &display_name,
                "main",
                Some(&options),
            )
            .map_err(|e| {
                format!(
                    "shader `{}` ({display_name}) failed to compile: {e}",
                    v.name
                )
            })?;
        let words = artifact.as_binary();
        let info =
            reflect(words).map_err(|e| format!("shader `{}` ({display_name}): {e}", v.name))?;

        let mut bytes = Vec::with_capacity(words.len() * 4);
        for w in words {
            bytes.extend_from_slice(&if big_endian {
                w.to_be_bytes()
            } else {
                w.to_le_bytes()
            });
        }
        let spv_name = format!("{}.spv", v.name);
        let spv_path = spv_dir.join(&spv_name);
        write_if_changed(&spv_path, &bytes)?;

        let upper = v.name.to_ascii_uppercase();
        let defines: Vec<String> = v
            .defines
            .iter()
            .map(|(k, x)| format!("({k:?}, {x:?})"))
            .collect();
        let bindings: Vec<&str> = info
            .bindings
            .iter()
            .map(|b| match b {
                Access::Unused => "BindingAccess::Unused",
                Access::Read => "BindingAccess::Read",
                Access::Write => "BindingAccess::Write",
                Access::ReadWrite => "BindingAccess::ReadWrite",
            })
            .collect();
        let [lx, ly, lz] = info.local_size;
        writeln!(
            table,
            "/// `{name}`: compiled from `shaders/{source}`.\n\
             pub const {upper}: Shader = Shader {{\n    \
                 index: {index},\n    \
                 name: {name:?},\n    \
                 source: {source:?},\n    \
                 defines: &[{defines}],\n    \
                 words: || {{\n        \
                     static BYTES: SpirvBytes<{len}> =\n            \
                         SpirvBytes(*include_bytes!(concat!(env!(\"OUT_DIR\"), \"/shaders/{spv_name}\")));\n        \
                     BYTES.words()\n    \
                 }},\n    \
                 bindings: &[{bindings}],\n    \
                 push_constant_size: {push},\n    \
                 local_size: [{lx}, {ly}, {lz}],\n\
             }};\n",
            name = v.name,
            source = v.source,
            defines = defines.join(", "),
            len = bytes.len(),
            bindings = bindings.join(", "),
            push = info.push_constant_size,
        )
        .map_err(|e| e.to_string())?;
        all.push(upper);
    }
    writeln!(
        table,
        "/// Every compiled shader, in index order.\npub const ALL: &[Shader] = &[{}];",
        all.join(", ")
    )
    .map_err(|e| e.to_string())?;
    grouped_arrays(
        &mut table,
        &variants,
        |v| v.by_type.as_ref(),
        "by_type",
        "The weight-reading families' variants, one array per family, indexed as\n\
         /// [`crate::ggml_type::WEIGHT_TYPES`] ([`crate::ggml_type::weight_index`]).",
        (WEIGHT_TYPES.len(), "WEIGHT_TYPES.len()"),
        "\n    use crate::ggml_type::WEIGHT_TYPES;",
    )
    .map_err(|e| e.to_string())?;
    grouped_arrays(
        &mut table,
        &variants,
        |v| v.by_kv.as_ref(),
        "by_kv",
        "The variants of the families over the KV cache type, one array per\n\
         /// family, indexed as [`crate::kv_type::KV_TYPES`] ([`crate::kv_type::KvType::index`]).",
        (KV_TYPES.len(), &KV_TYPES.len().to_string()),
        "",
    )
    .map_err(|e| e.to_string())?;
    write_if_changed(&out_dir.join("shaders.rs"), table.as_bytes())
}

/// The GLSL header of the op codes (`#define UNARY_SCALE 0u`: macros, so
/// that a kernel's SPIR-V holds only the codes it compares with).
fn op_codes_glsl() -> String {
    let mut out = String::from(
        "// @generated by engine/build.rs from engine/src/op_codes.rs; do not edit.\n\
         #ifndef SHARPI_OP_CODES_GLSL\n#define SHARPI_OP_CODES_GLSL\n",
    );
    for (name, code) in op_codes::ALL {
        out.push_str(&format!("#define {name} {code}u\n"));
    }
    out.push_str("#endif\n");
    out
}

/// `pub mod {module}`: per family over one axis, its variants indexed along
/// it (`group` gives a variant's place), `len.0` entries each (written
/// `len.1`; `None` where a family lacks the axis value).
fn grouped_arrays(
    table: &mut String,
    variants: &[Variant],
    group: impl Fn(&Variant) -> Option<&Grouped>,
    module: &str,
    doc: &str,
    len: (usize, &str),
    import: &str,
) -> std::fmt::Result {
    writeln!(
        table,
        "/// {doc}\npub mod {module} {{\n    #[allow(unused_imports)]\n    use super::*;{import}\n"
    )?;
    // Arrays in the order of their first variant: name, whether whole, and
    // (index, constant) of each member.
    type Array<'a> = (&'a str, bool, Vec<(usize, String)>);
    let mut arrays: Vec<Array> = Vec::new();
    for v in variants {
        let Some(g) = group(v) else { continue };
        let at = match arrays.iter().position(|a| a.0 == g.array) {
            Some(at) => at,
            None => {
                arrays.push((&g.array, g.whole, Vec::new()));
                arrays.len() - 1
            }
        };
        arrays[at].2.push((g.index, v.name.to_ascii_uppercase()));
    }
    for (array, whole, members) in arrays {
        let list: Vec<String> = (0..len.0)
            .map(|i| {
                let member = members.iter().find(|m| m.0 == i).map(|m| &m.1);
                match (whole, member) {
                    (true, Some(m)) => format!("&{m}"),
                    (false, Some(m)) => format!("Some(&{m})"),
                    (_, None) => "None".to_string(),
                }
            })
            .collect();
        let item = if whole { "&Shader" } else { "Option<&Shader>" };
        writeln!(
            table,
            "    /// `{array}` by index.\n    \
             pub const {upper}: [{item}; {len}] = [{list}];",
            len = len.1,
            upper = array.to_ascii_uppercase(),
            list = list.join(", ")
        )?;
    }
    writeln!(table, "}}")
}

/// An include's file: next to `requesting` (a relative include only), else
/// in the first of `dirs` (shaders/common/, the generated headers') that
/// has it.
fn resolve_include(
    root: &Path,
    dirs: &[PathBuf],
    requested: &str,
    kind: shaderc::IncludeType,
    requesting: &str,
) -> shaderc::IncludeCallbackResult {
    let mut candidates = Vec::new();
    if kind == shaderc::IncludeType::Relative {
        if let Some(dir) = root.join(requesting).parent() {
            candidates.push(dir.join(requested));
        }
    }
    candidates.extend(dirs.iter().map(|d| d.join(requested)));
    for path in candidates {
        if path.is_file() {
            let content =
                fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let resolved_name = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            return Ok(shaderc::ResolvedInclude {
                resolved_name,
                content,
            });
        }
    }
    Err(format!(
        "cannot find include `{requested}` (looked next to {requesting}, in shaders/common/ \
         and among the generated headers)"
    ))
}

fn files_under(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Writing only on change keeps the engine crate from recompiling when a shader
/// edit does not change its SPIR-V.
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if fs::read(path).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}
