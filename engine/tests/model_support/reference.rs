//! Just enough of the reference-data format to compare against a llama.cpp
//! capture while developing: a safetensors reader for F32, I32 and U16
//! arrays (the harness has the full loader).

use std::collections::BTreeMap;
use std::path::Path;

/// One array: shape and values (I32 and U16 arrays converted to f32 as
/// well; U16 ones to i32 too).
pub struct Array {
    pub shape: Vec<usize>,
    pub f32: Vec<f32>,
    pub i32: Vec<i32>,
}

/// Every array of a safetensors file, by name.
pub fn read_safetensors(path: &Path) -> BTreeMap<String, Array> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut out = BTreeMap::new();
    for (name, info) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        let shape: Vec<usize> = info["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let off = info["data_offsets"].as_array().unwrap();
        let raw = &data[off[0].as_u64().unwrap() as usize..off[1].as_u64().unwrap() as usize];
        let words = raw.chunks_exact(4).map(|c| c.try_into().unwrap());
        let (f, i) = match info["dtype"].as_str().unwrap() {
            "F32" => (words.map(f32::from_le_bytes).collect(), Vec::new()),
            "I32" | "U16" => {
                let i: Vec<i32> = if info["dtype"] == "I32" {
                    words.map(i32::from_le_bytes).collect()
                } else {
                    raw.chunks_exact(2)
                        .map(|c| i32::from(u16::from_le_bytes([c[0], c[1]])))
                        .collect()
                };
                (i.iter().map(|&v| v as f32).collect(), i)
            }
            other => panic!("{name}: dtype {other}"),
        };
        out.insert(
            name.clone(),
            Array {
                shape,
                f32: f,
                i32: i,
            },
        );
    }
    out
}

/// sum((a - b)²) / sum(b²), in f64 (b is the reference).
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (f64::from(x) - f64::from(y)).powi(2);
        den += f64::from(y).powi(2);
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}
