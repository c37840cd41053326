//! Our intermediate tensors as the engine emits them: [`TapSink`] keeps,
//! of every tensor, the rows of the positions the capture kept, as
//! [`OurTap`]s (compared in [`super::taps`], [`super::routing`] and
//! [`super::cross`]).

use std::collections::HashMap;

use engine::trace::TraceSink;

/// One tensor we emitted, at the positions the capture keeps.
#[derive(Clone, Debug, Default)]
pub struct OurTap {
    pub name: String,
    pub layer: Option<usize>,
    /// Values per position.
    pub width: usize,
    /// Position -> row; rows at the positions asked for only.
    pub rows: HashMap<usize, Vec<f32>>,
}

/// A [`TraceSink`] that keeps, of every tensor, the rows of the positions
/// `keep` says, across the chunks a prompt is processed in.
pub struct TapSink {
    keep: std::ops::Range<usize>,
    /// Position of the first row of the chunk being processed.
    chunk_start: usize,
    chunk_len: usize,
    /// In the order the forward pass emits them (graph order).
    pub taps: Vec<OurTap>,
    index: HashMap<(String, Option<usize>), usize>,
}

impl TapSink {
    /// A sink keeping positions `keep`.
    pub fn new(keep: std::ops::Range<usize>) -> TapSink {
        TapSink {
            keep,
            chunk_start: 0,
            chunk_len: 0,
            taps: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// The next forward pass processes positions `start..start + len`.
    pub fn begin_chunk(&mut self, start: usize, len: usize) {
        self.chunk_start = start;
        self.chunk_len = len;
    }
}

impl TraceSink for TapSink {
    fn wants(&self, _name: &str, _layer: Option<usize>) -> bool {
        let chunk = self.chunk_start..self.chunk_start + self.chunk_len;
        chunk.start < self.keep.end && self.keep.start < chunk.end
    }

    fn record(&mut self, name: &str, layer: Option<usize>, shape: [usize; 2], data: &[f32]) {
        let [rows, width] = shape;
        let i = *self
            .index
            .entry((name.to_string(), layer))
            .or_insert_with(|| {
                self.taps.push(OurTap {
                    name: name.to_string(),
                    layer,
                    width,
                    rows: HashMap::new(),
                });
                self.taps.len() - 1
            });
        // A tensor of fewer rows than the chunk (the head's rows of a
        // last-position-only pass) holds the chunk's last positions.
        let first = self.chunk_start + self.chunk_len.saturating_sub(rows);
        for r in 0..rows {
            let pos = first + r;
            if self.keep.contains(&pos) {
                self.taps[i]
                    .rows
                    .insert(pos, data[r * width..(r + 1) * width].to_vec());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sink_keeps_the_asked_positions_across_chunks() {
        let mut s = TapSink::new(4..6);
        s.begin_chunk(0, 3);
        assert!(!s.wants("x", Some(0)));
        s.begin_chunk(3, 3);
        assert!(s.wants("x", Some(0)));
        // rows = positions 3, 4, 5, width 2
        s.record("x", Some(0), [3, 2], &[3.0, 3.0, 4.0, 4.0, 5.0, 5.0]);
        // one row: the chunk's last position
        s.record("h", None, [1, 1], &[9.0]);
        assert_eq!(s.taps.len(), 2);
        let x = &s.taps[0];
        assert_eq!(
            (x.rows.len(), &x.rows[&4], &x.rows[&5]),
            (2, &vec![4.0, 4.0], &vec![5.0, 5.0])
        );
        assert_eq!(s.taps[1].rows[&5], vec![9.0]);
    }
}
