//! `sharpi inspect MODEL [--json]`: metadata (long arrays summarised), a
//! tensor table, and totals per tensor type.

use super::CliError;
use engine::gguf::{GgufFile, TensorInfo, Value};
use engine::GgmlType;
use serde_json::{json, Map};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Array elements shown before an array is summarised as "... (N more)".
const ARRAY_HEAD: usize = 8;
/// String values longer than this are cut in the text view (JSON keeps them whole).
const TEXT_STRING_MAX: usize = 160;

/// Count and bytes of the tensors of one type.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TypeTotal {
    pub tensors: usize,
    pub bytes: u64,
    pub elements: u64,
}

/// Totals per tensor type, in type-id order.
pub fn totals_by_type(tensors: &[TensorInfo]) -> BTreeMap<GgmlType, TypeTotal> {
    let mut totals: BTreeMap<GgmlType, TypeTotal> = BTreeMap::new();
    for t in tensors {
        let e = totals.entry(t.ty).or_default();
        e.tensors += 1;
        e.bytes += t.n_bytes;
        e.elements += t.n_elements();
    }
    totals
}

/// Opens `path` and writes the report to `out`.
pub fn run(path: &Path, json_out: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let file = super::open_model(path)?;
    if json_out {
        let v = to_json(path, &file);
        serde_json::to_writer_pretty(&mut *out, &v)?;
        writeln!(out)?;
    } else {
        write_text(path, &file, out)?;
    }
    Ok(())
}

fn shape(dims: &[u64]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

fn text_scalar(v: &Value) -> String {
    match v {
        Value::String(s) => {
            let chars = s.chars().count();
            if chars > TEXT_STRING_MAX {
                let head: String = s.chars().take(TEXT_STRING_MAX).collect();
                format!("{head:?}... ({chars} chars)")
            } else {
                format!("{s:?}")
            }
        }
        Value::Array(items) => {
            let head: Vec<String> = items.iter().take(ARRAY_HEAD).map(text_scalar).collect();
            let elem = items.first().map(Value::type_name).unwrap_or("?");
            if items.len() > ARRAY_HEAD {
                format!(
                    "[{elem}; {}] [{}, ... ({} more)]",
                    items.len(),
                    head.join(", "),
                    items.len() - ARRAY_HEAD
                )
            } else {
                format!("[{elem}; {}] [{}]", items.len(), head.join(", "))
            }
        }
        Value::U8(x) => x.to_string(),
        Value::I8(x) => x.to_string(),
        Value::U16(x) => x.to_string(),
        Value::I16(x) => x.to_string(),
        Value::U32(x) => x.to_string(),
        Value::I32(x) => x.to_string(),
        Value::U64(x) => x.to_string(),
        Value::I64(x) => x.to_string(),
        Value::F32(x) => x.to_string(),
        Value::F64(x) => x.to_string(),
        Value::Bool(x) => x.to_string(),
    }
}

fn write_text(path: &Path, f: &GgufFile, out: &mut dyn Write) -> Result<(), CliError> {
    writeln!(out, "file: {} ({} bytes)", path.display(), f.file_size())?;
    writeln!(
        out,
        "GGUF v{}, alignment {}, tensor data at byte {}",
        f.version(),
        f.alignment(),
        f.data_offset()
    )?;
    writeln!(out, "\nmetadata ({} keys):", f.metadata().len())?;
    for (k, v) in f.metadata() {
        writeln!(out, "  {k} [{}] = {}", v.type_name(), text_scalar(v))?;
    }

    let tensors = f.tensors();
    writeln!(out, "\ntensors ({}):", tensors.len())?;
    let name_w = tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        out,
        "  {:<name_w$}  {:<7}  {:<22}  {:>12}  {:>12}",
        "name", "type", "shape", "bytes", "offset"
    )?;
    for t in tensors {
        writeln!(
            out,
            "  {:<name_w$}  {:<7}  {:<22}  {:>12}  {:>12}",
            t.name,
            t.ty.name(),
            shape(&t.dims),
            t.n_bytes,
            t.offset
        )?;
    }

    writeln!(out, "\ntotals by type:")?;
    let totals = totals_by_type(tensors);
    for (ty, tot) in &totals {
        writeln!(
            out,
            "  {:<7} {:>5} tensors  {:>12} elements  {:>12} bytes",
            ty.name(),
            tot.tensors,
            tot.elements,
            tot.bytes
        )?;
    }
    let all_bytes: u64 = totals.values().map(|t| t.bytes).sum();
    writeln!(
        out,
        "  {:<7} {:>5} tensors  {:>12} elements  {:>12} bytes",
        "all",
        tensors.len(),
        totals.values().map(|t| t.elements).sum::<u64>(),
        all_bytes
    )?;
    Ok(())
}

fn json_value(v: &Value) -> serde_json::Value {
    match v {
        Value::Array(items) => {
            let head: Vec<serde_json::Value> =
                items.iter().take(ARRAY_HEAD).map(json_value).collect();
            json!({
                "array_of": items.first().map(Value::type_name).unwrap_or("?"),
                "len": items.len(),
                "head": head,
            })
        }
        Value::String(s) => json!(s),
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        // Non-finite floats have no JSON number: write them as strings.
        Value::F32(x) if !x.is_finite() => json!(x.to_string()),
        Value::F64(x) if !x.is_finite() => json!(x.to_string()),
        Value::F32(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Bool(x) => json!(x),
    }
}

fn to_json(path: &Path, f: &GgufFile) -> serde_json::Value {
    let mut meta = Map::new();
    for (k, v) in f.metadata() {
        meta.insert(
            k.clone(),
            json!({ "type": v.type_name(), "value": json_value(v) }),
        );
    }
    let tensors: Vec<serde_json::Value> = f
        .tensors()
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "type": t.ty.name(),
                "shape": t.dims,
                "bytes": t.n_bytes,
                "offset": t.offset,
            })
        })
        .collect();
    let totals: Map<String, serde_json::Value> = totals_by_type(f.tensors())
        .into_iter()
        .map(|(ty, t)| {
            (
                ty.name().to_string(),
                json!({ "tensors": t.tensors, "elements": t.elements, "bytes": t.bytes }),
            )
        })
        .collect();
    json!({
        "file": path.display().to_string(),
        "file_size": f.file_size(),
        "version": f.version(),
        "alignment": f.alignment(),
        "data_offset": f.data_offset(),
        "metadata": meta,
        "tensor_count": f.tensors().len(),
        "tensors": tensors,
        "totals_by_type": totals,
    })
}
