//! A bounds-checked little-endian reader over the file's bytes that knows its
//! byte offset, so every error can say where the defect is.

use super::error::{ErrorKind, GgufError};

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }

    /// The absolute offset of the next byte to be read.
    pub fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the current position.
    pub fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    /// An error located at the current position.
    pub fn err(&self, kind: ErrorKind) -> GgufError {
        GgufError::new(self.pos(), kind)
    }

    /// Takes the next `n` bytes, or fails with `Truncated` (at the current
    /// position) naming `what` was being read.
    pub fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        let available = self.remaining();
        if n > available {
            return Err(self.err(ErrorKind::Truncated {
                what,
                needed: n,
                available,
            }));
        }
        // n <= remaining <= usize::MAX, so the cast is exact.
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn i8(&mut self, what: &'static str) -> Result<i8, GgufError> {
        Ok(i8::from_le_bytes(self.array(what)?))
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, GgufError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub fn i16(&mut self, what: &'static str) -> Result<i16, GgufError> {
        Ok(i16::from_le_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn i32(&mut self, what: &'static str) -> Result<i32, GgufError> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub fn i64(&mut self, what: &'static str) -> Result<i64, GgufError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }

    pub fn f32(&mut self, what: &'static str) -> Result<f32, GgufError> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }

    pub fn f64(&mut self, what: &'static str) -> Result<f64, GgufError> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// Checks that `count` items of at least `min_bytes` each can still fit
    /// in the remaining bytes, so a claimed count may be used to reserve
    /// memory. The error is placed at `at` (the count field).
    pub fn check_fits(
        &self,
        count: u64,
        min_bytes: u64,
        what: &'static str,
        at: u64,
    ) -> Result<(), GgufError> {
        let available = self.remaining();
        let fits = count
            .checked_mul(min_bytes)
            .is_some_and(|need| need <= available);
        if fits {
            Ok(())
        } else {
            Err(GgufError::new(
                at,
                ErrorKind::CountExceedsFile {
                    what,
                    count,
                    min_bytes,
                    available,
                },
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_tracks_offset() {
        let bytes = [1u8, 2, 0, 0, 0xff, 3, 0, 0, 0, 0, 0, 0, 0];
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.u8("a").unwrap(), 1);
        assert_eq!(c.u32("b").unwrap(), 0xff00_0002);
        assert_eq!(c.pos(), 5);
        assert_eq!(c.u8("c").unwrap(), 3);
        assert_eq!(c.remaining(), 7);
        let e = c.u64("d").unwrap_err();
        assert_eq!(e.offset, 6);
        assert!(matches!(
            e.kind,
            ErrorKind::Truncated {
                what: "d",
                needed: 8,
                available: 7
            }
        ));
        // A failed read consumes nothing.
        assert_eq!(c.pos(), 6);
    }

    #[test]
    fn take_rejects_lengths_past_the_end_without_overflow() {
        let bytes = [0u8; 4];
        let mut c = Cursor::new(&bytes);
        c.u8("x").unwrap();
        assert!(c.take(u64::MAX, "huge").is_err());
        assert_eq!(c.take(3, "rest").unwrap().len(), 3);
        assert!(c.take(1, "more").is_err());
        assert_eq!(c.take(0, "nothing").unwrap().len(), 0);
    }

    #[test]
    fn check_fits_guards_against_overflow() {
        let bytes = [0u8; 100];
        let c = Cursor::new(&bytes);
        assert!(c.check_fits(10, 10, "items", 0).is_ok());
        assert!(c.check_fits(11, 10, "items", 0).is_err());
        assert!(c.check_fits(u64::MAX, 2, "items", 0).is_err());
        assert!(c.check_fits(1 << 62, 4, "items", 0).is_err());
        let e = c.check_fits(101, 1, "items", 42).unwrap_err();
        assert_eq!(e.offset, 42);
    }
}
