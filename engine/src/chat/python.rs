//! Python's ways of printing values, for templates written against Python's
//! Jinja: `str()` for `{{ value }}`, `repr()` inside lists and dicts, and
//! `json.dumps` for the `tojson` filter as transformers defines it.

use std::fmt::Write;

use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::limits::{check_width, MAX_VALUE_DEPTH};

/// Python's `repr(float)`: shortest round-trip digits, positional for
/// exponents -4..16, else `1e+16` style; always a `.0` on whole numbers.
pub(crate) fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e-5".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if point as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{body}")
    } else {
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs())
    }
}

/// Python's `str(value)` for what `{{ value }}` prints: `None`, `True`,
/// `False`, Python float and list/dict notation; undefined prints nothing.
/// A value nested deeper than [`MAX_VALUE_DEPTH`] (a namespace holding
/// itself) is an error.
pub(crate) fn py_str(v: &Value) -> Result<String, Error> {
    Ok(match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => {
            let mut out = String::new();
            py_repr(v, 0, &mut out)?;
            out
        }
    })
}

/// Refuses nesting past [`MAX_VALUE_DEPTH`].
fn check_depth(level: usize) -> Result<(), Error> {
    if level > MAX_VALUE_DEPTH {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("a value nested deeper than {MAX_VALUE_DEPTH} levels (does it hold itself?)"),
        ));
    }
    Ok(())
}

fn py_repr(v: &Value, level: usize, out: &mut String) -> Result<(), Error> {
    check_depth(level)?;
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&number(v)),
        ValueKind::String => str_repr(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(items) = v.try_iter() {
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr(&item, level + 1, out)?;
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(keys) = v.try_iter() {
                for (i, k) in keys.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr(&k, level + 1, out)?;
                    out.push_str(": ");
                    py_repr(&v.get_item(&k).unwrap_or_default(), level + 1, out)?;
                }
            }
            out.push('}');
        }
        _ => out.push_str(&v.to_string()),
    }
    Ok(())
}

fn number(v: &Value) -> String {
    if v.is_integer() {
        v.to_string()
    } else {
        f64::try_from(v.clone()).map_or_else(|_| v.to_string(), float_repr)
    }
}

/// Python's `repr(str)`: single quotes unless the text holds `'` and no `"`.
fn str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7F..=0xA0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Options of Python's `json.dumps` that transformers' `tojson` passes on.
struct Dumps {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

/// The `tojson` filter as transformers defines it:
/// `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, arguments positional or by name.
pub(crate) fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let mut pos = args.0.into_iter();
    let mut arg = |name: &str| -> Result<Option<Value>, Error> {
        let by_name: Option<Value> = kwargs.get(name)?;
        Ok(pos.next().or(by_name).filter(|v| !v.is_none()))
    };
    let ensure_ascii = arg("ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = match arg("indent")? {
        None => None,
        Some(v) if v.is_integer() => {
            let n = i64::try_from(v)?.max(0) as u64;
            check_width("tojson indent", n)?;
            Some(" ".repeat(n as usize))
        }
        Some(v) => match v.as_str() {
            Some(s) => {
                check_width("tojson indent", s.len() as u64)?;
                Some(s.to_string())
            }
            None => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an integer or a string",
                ))
            }
        },
    };
    let (item_sep, key_sep) = match arg("separators")? {
        None => (
            if indent.is_some() { "," } else { ", " }.to_string(),
            ": ".to_string(),
        ),
        Some(v) => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => (
                    a.as_str().unwrap_or_default().to_string(),
                    b.as_str().unwrap_or_default().to_string(),
                ),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    ))
                }
            }
        }
    };
    let sort_keys = arg("sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let opts = Dumps {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    dump(value, &opts, 0, &mut out)?;
    Ok(Value::from(out))
}

fn dump(v: &Value, o: &Dumps, level: usize, out: &mut String) -> Result<(), Error> {
    check_depth(level)?;
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                let x = f64::try_from(v.clone())?;
                out.push_str(&match x {
                    x if x.is_nan() => "NaN".to_string(),
                    x if x.is_infinite() => if x > 0.0 { "Infinity" } else { "-Infinity" }.into(),
                    x => float_repr(x),
                });
            }
        }
        ValueKind::String => json_string(v.as_str().unwrap_or_default(), o.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(o, level + 1, out);
                dump(item, o, level + 1, out)?;
            }
            newline(o, level, out);
            out.push(']');
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for k in v.try_iter()? {
                let value = v.get_item(&k)?;
                entries.push((key_string(&k)?, value));
            }
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if o.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            out.push('{');
            for (i, (k, value)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(o, level + 1, out);
                json_string(k, o.ensure_ascii, out);
                out.push_str(&o.key_sep);
                dump(value, o, level + 1, out)?;
            }
            newline(o, level, out);
            out.push('}');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "tojson: object of kind {} is not JSON serializable",
                    v.kind()
                ),
            ))
        }
    }
    Ok(())
}

fn newline(o: &Dumps, level: usize, out: &mut String) {
    if let Some(indent) = &o.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(indent);
        }
    }
}

/// A dict key as json.dumps writes it: strings as they are, numbers, bools
/// and None converted.
fn key_string(k: &Value) -> Result<String, Error> {
    Ok(match k.kind() {
        ValueKind::String => k.as_str().unwrap_or_default().to_string(),
        ValueKind::None => "null".into(),
        ValueKind::Bool => if k.is_true() { "true" } else { "false" }.into(),
        ValueKind::Number => number(k),
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: keys must be str, int, float, bool or None",
            ))
        }
    })
}

/// A JSON string as Python writes it: `"` and `\` escaped, control
/// characters as `\n`-style or `\u00XX`; with `ensure_ascii`, everything
/// past ASCII as `\uXXXX` (surrogate pairs beyond the BMP).
fn json_string(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7E => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345.0, "123456789012345.0"),
            (1.5e20, "1.5e+20"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (0.1, "0.1"),
            (-0.0, "-0.0"),
            (2.5e-7, "2.5e-07"),
            (1e22, "1e+22"),
            (2.75, "2.75"),
            (-12.5, "-12.5"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x:e}");
        }
    }

    #[test]
    fn lists_print_as_python_repr() {
        let v = Value::from(vec![
            Value::from("a"),
            Value::from("it's"),
            Value::from("say \"hi\""),
            Value::from("both ' \""),
            Value::from(()),
            Value::from(true),
            Value::from(1.0),
        ]);
        assert_eq!(
            py_str(&v).unwrap(),
            r#"['a', "it's", 'say "hi"', 'both \' "', None, True, 1.0]"#
        );
    }

    #[test]
    fn json_strings_escape_as_python() {
        let mut out = String::new();
        json_string("é\u{2028}\u{7f}\u{1}\"\\\n", false, &mut out);
        assert_eq!(out, "\"é\u{2028}\u{7f}\\u0001\\\"\\\\\\n\"");
        out.clear();
        json_string("é😀", true, &mut out);
        assert_eq!(out, r#""\u00e9\ud83d\ude00""#);
    }
}
