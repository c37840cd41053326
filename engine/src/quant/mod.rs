//! (filled in by the quant work)
