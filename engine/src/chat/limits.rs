//! What one render of a chat template may use: the rendered length, the
//! memory and time of the render (kept by [`crate::bounded`]), nesting
//! depth, and a cap on every width, indent and padding argument that a
//! filter or method turns into bytes.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use minijinja::{Error, ErrorKind};

/// The largest width, indent, padding or precision a template may ask of
/// `indent`, `format`, `str.format` and `tojson`. Real templates use 2 or
/// 4; a width of this size is already more than any prompt line.
pub const MAX_WIDTH: usize = 1024;

/// The longest `strftime_now` format, in bytes.
pub const MAX_STRFTIME_FORMAT: usize = 256;

/// How deep a value may nest when printed or serialised (`{{ value }}`,
/// `tojson`); a namespace that holds itself stops here.
pub const MAX_VALUE_DEPTH: usize = 64;

/// How deep macro calls and includes may nest (minijinja allows 500).
pub const MAX_RECURSION: usize = 64;

/// Bounds on one render.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenderLimits {
    /// The longest rendered text, in bytes. A prompt that renders longer
    /// cannot fit the context anyway: the CLI sets it to the context's
    /// byte bound ([`crate::tokenizer::Tokenizer::max_text_bytes`]).
    pub output_bytes: usize,
    /// Bytes the render may hold at once.
    pub memory: u64,
    /// Bytes the render may allocate in all (frees not subtracted): bounds
    /// the copying a template can make it do.
    pub allocated: u64,
    /// Wall-clock time of the render.
    pub time: Duration,
}

impl Default for RenderLimits {
    /// 16 MiB of text, 256 MiB held, 4 GiB allocated in all, 10 s.
    fn default() -> RenderLimits {
        RenderLimits {
            output_bytes: 16 << 20,
            memory: 256 << 20,
            allocated: 4 << 30,
            time: Duration::from_secs(10),
        }
    }
}

/// The stack of the render thread: deep enough for [`MAX_RECURSION`]
/// levels of minijinja and [`MAX_VALUE_DEPTH`] levels of printing.
pub(crate) const RENDER_STACK: usize = 64 << 20;

/// Refuses a width argument past [`MAX_WIDTH`].
pub(crate) fn check_width(what: &str, width: u64) -> Result<(), Error> {
    if width > MAX_WIDTH as u64 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{what} {width} is over the cap of {MAX_WIDTH}"),
        ));
    }
    Ok(())
}

/// Which syntax a format string uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FormatSyntax {
    /// `'%5s'|format(x)`
    Printf,
    /// `'{:>5}'.format(x)`
    Braces,
}

/// Refuses a format string with a width or precision past [`MAX_WIDTH`]
/// in any of its conversion specs (numbers in the literal text are not
/// looked at).
pub(crate) fn check_format(syntax: FormatSyntax, fmt: &str) -> Result<(), Error> {
    for n in spec_numbers(syntax, fmt) {
        check_width("format width or precision", n)?;
    }
    Ok(())
}

/// The numbers written in the conversion specs of `fmt` (widths,
/// precisions, field indices), saturating at `u64::MAX`.
fn spec_numbers(syntax: FormatSyntax, fmt: &str) -> Vec<u64> {
    let b = fmt.as_bytes();
    let mut numbers = Vec::new();
    let mut i = 0;
    let mut take_numbers = |from: usize, to: usize| {
        let mut n: Option<u64> = None;
        for &c in &b[from..to] {
            if c.is_ascii_digit() {
                let d = u64::from(c - b'0');
                n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d));
            } else if let Some(v) = n.take() {
                numbers.push(v);
            }
        }
        numbers.extend(n);
    };
    while i < b.len() {
        match (syntax, b[i]) {
            (FormatSyntax::Printf, b'%') => {
                // Up to the conversion letter (or `%`), past a `(name)`.
                let mut j = i + 1;
                if b.get(j) == Some(&b'(') {
                    while j < b.len() && b[j] != b')' {
                        j += 1;
                    }
                }
                let start = j;
                while j < b.len() && !b[j].is_ascii_alphabetic() && b[j] != b'%' {
                    j += 1;
                }
                take_numbers(start, j);
                i = j + 1;
            }
            (FormatSyntax::Braces, b'{') if b.get(i + 1) == Some(&b'{') => i += 2,
            (FormatSyntax::Braces, b'{') => {
                let mut j = i + 1;
                let mut depth = 1;
                while j < b.len() && depth > 0 {
                    match b[j] {
                        b'{' => depth += 1,
                        b'}' => depth -= 1,
                        _ => {}
                    }
                    j += 1;
                }
                // The spec after the first `:` (the field name before it
                // is an index or a name, not a size).
                if let Some(colon) = b[i..j].iter().position(|&c| c == b':') {
                    take_numbers(i + colon, j);
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    numbers
}

/// An `io::Write` into memory that refuses to grow past a length, and
/// says afterwards whether that is why a write failed.
pub(crate) struct BoundedText {
    pub(crate) bytes: Vec<u8>,
    cap: usize,
    overflowed: Arc<AtomicBool>,
}

impl BoundedText {
    pub(crate) fn new(cap: usize) -> (BoundedText, Arc<AtomicBool>) {
        let overflowed = Arc::new(AtomicBool::new(false));
        let text = BoundedText {
            bytes: Vec::new(),
            cap,
            overflowed: Arc::clone(&overflowed),
        };
        (text, overflowed)
    }
}

impl io::Write for BoundedText {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.cap {
            self.overflowed.store(true, Ordering::Relaxed);
            return Err(io::Error::other("the rendered text is too long"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_specs_give_their_numbers() {
        let p = |s| spec_numbers(FormatSyntax::Printf, s);
        assert_eq!(p("%5s and %-10.3f"), vec![5, 10, 3]);
        assert_eq!(p("year 100000: %s"), Vec::<u64>::new());
        assert_eq!(p("%(name)12s %%"), vec![12]);
        assert_eq!(p("%1000000000000000000000000s"), vec![u64::MAX]);
        let f = |s| spec_numbers(FormatSyntax::Braces, s);
        assert_eq!(f("{0:>20} {name:.5}"), vec![20, 5]);
        assert_eq!(f("{{100000}} {} {1}"), Vec::<u64>::new());
        assert_eq!(f("{:>1000000000000}"), vec![1_000_000_000_000]);
        assert_eq!(f("{:{}}"), Vec::<u64>::new());
    }

    #[test]
    fn widths_past_the_cap_are_refused() {
        assert!(check_format(FormatSyntax::Printf, "%1024s").is_ok());
        assert!(check_format(FormatSyntax::Printf, "%1025s").is_err());
        assert!(check_format(FormatSyntax::Braces, "{:>1025}").is_err());
        assert!(check_format(FormatSyntax::Braces, "{:.2000f}").is_err());
        assert!(check_width("indent", 4).is_ok());
    }

    #[test]
    fn bounded_text_stops_at_its_cap() {
        use std::io::Write;
        let (mut t, over) = BoundedText::new(4);
        assert!(t.write_all(b"abc").is_ok());
        assert!(!over.load(Ordering::Relaxed));
        assert!(t.write_all(b"de").is_err());
        assert!(over.load(Ordering::Relaxed));
        assert_eq!(t.bytes, b"abc");
    }
}
