//! llama-perplexity's printout, line for line: the running perplexity, the
//! final estimate, the per-chunk table of a `--kl-divergence` run and its
//! closing statistics. Numbers are formatted as C's `printf("%W.Pf")`
//! formats them (`nan`, `-nan`, `inf` included).

use std::fmt::Write;

use super::stats::{KldSummary, KldSums, PplSums};

/// `printf("%{width}.{prec}f", x)`.
pub fn c_fixed(x: f64, width: usize, prec: usize) -> String {
    let s = if x.is_nan() {
        if x.is_sign_negative() { "-nan" } else { "nan" }.to_string()
    } else if x.is_infinite() {
        if x < 0.0 { "-inf" } else { "inf" }.to_string()
    } else {
        format!("{x:.prec$}")
    };
    format!("{s:>width$}")
}

/// `[c]PPL,`: the running estimate after chunk `c` (0-based).
pub fn ppl_chunk(c: usize, sums: &PplSums) -> String {
    format!("[{}]{},", c + 1, c_fixed(sums.ppl(), 0, 4))
}

/// `Final estimate: PPL = X +/- Y`, or llama.cpp's line for a variance that
/// is not positive.
pub fn ppl_final(sums: &PplSums) -> String {
    match sums.estimate() {
        Some((ppl, unc)) => format!(
            "Final estimate: PPL = {} +/- {}",
            c_fixed(ppl, 0, 4),
            c_fixed(unc, 0, 5)
        ),
        None => "Unexpected negative standard deviation of log(prob)".to_string(),
    }
}

/// The head of the per-chunk table of a `--kl-divergence` run.
pub const KLD_TABLE_HEAD: &str = "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p";

/// One row of that table, after chunk `c` (0-based): running PPL(Q),
/// ln(PPL(Q)/PPL(base)), mean KLD, RMS Δp and same top-1, each with its
/// uncertainty.
pub fn kld_chunk(c: usize, sums: &KldSums) -> String {
    let (lp, dlp) = sums.log_ppl();
    let ppl = lp.exp();
    let (lr, dlr) = sums.log_ppl_ratio();
    let (k, dk) = sums.kld();
    let (rms, drms) = sums.rms_p_diff();
    let (top, dtop) = sums.same_top();
    format!(
        "{:>4}    {} ± {}    {} ± {}    {} ± {}    {} ± {} %    {} ± {} %",
        c + 1,
        c_fixed(ppl, 9, 4),
        c_fixed(ppl * dlp, 9, 4),
        c_fixed(lr, 10, 5),
        c_fixed(dlr, 10, 5),
        c_fixed(k, 10, 5),
        c_fixed(dk, 10, 5),
        c_fixed(100.0 * rms, 6, 3),
        c_fixed(100.0 * drms, 6, 3),
        c_fixed(100.0 * top, 6, 3),
        c_fixed(100.0 * dtop, 6, 3),
    )
}

/// The three closing sections (perplexity, KL divergence, token
/// probability), each line ending in a newline, a blank line between.
pub fn kld_summary(s: &KldSummary) -> String {
    let f = c_fixed;
    let pm = |(v, u): (f64, f64)| format!("{} ± {}", f(v, 10, 6), f(u, 10, 6));
    let pct = |(v, u): (f64, f64)| format!("{} ± {} %", f(100.0 * v, 6, 3), f(100.0 * u, 5, 3));
    let k = |v: f32| f(f64::from(v), 10, 6);
    let d = |v: f32| format!("{}%", f(100.0 * f64::from(v), 6, 3));
    let mut o = String::new();
    // Writing to a String cannot fail.
    let _ = (|| -> std::fmt::Result {
        writeln!(o, "====== Perplexity statistics ======")?;
        writeln!(o, "Mean PPL(Q)                   : {}", pm(s.ppl))?;
        writeln!(o, "Mean PPL(base)                : {}", pm(s.ppl_base))?;
        writeln!(
            o,
            "Cor(ln(PPL(Q)), ln(PPL(base))): {}%",
            f(100.0 * s.log_ppl_cor, 6, 2)
        )?;
        writeln!(o, "Mean ln(PPL(Q)/PPL(base))     : {}", pm(s.log_ppl_ratio))?;
        writeln!(o, "Mean PPL(Q)/PPL(base)         : {}", pm(s.ppl_ratio))?;
        writeln!(o, "Mean PPL(Q)-PPL(base)         : {}", pm(s.ppl_diff))?;
        writeln!(o)?;
        writeln!(o, "====== KL divergence statistics ======")?;
        writeln!(o, "Mean    KLD: {}", pm(s.kld))?;
        writeln!(o, "Maximum KLD: {}", k(s.kld_max))?;
        writeln!(o, "99.9%   KLD: {}", k(s.kld_99_9))?;
        writeln!(o, "99.0%   KLD: {}", k(s.kld_99))?;
        writeln!(o, "95.0%   KLD: {}", k(s.kld_95))?;
        writeln!(o, "90.0%   KLD: {}", k(s.kld_90))?;
        writeln!(o, "Median  KLD: {}", k(s.kld_median))?;
        writeln!(o, "10.0%   KLD: {}", k(s.kld_10))?;
        writeln!(o, " 5.0%   KLD: {}", k(s.kld_5))?;
        writeln!(o, " 1.0%   KLD: {}", k(s.kld_1))?;
        writeln!(o, " 0.1%   KLD: {}", k(s.kld_0_1))?;
        writeln!(o, "Minimum KLD: {}", k(s.kld_min))?;
        writeln!(o)?;
        writeln!(o, "====== Token probability statistics ======")?;
        writeln!(o, "Mean    Δp: {}", pct(s.p_diff))?;
        writeln!(o, "Maximum Δp: {}", d(s.p_diff_max))?;
        writeln!(o, "99.9%   Δp: {}", d(s.p_diff_99_9))?;
        writeln!(o, "99.0%   Δp: {}", d(s.p_diff_99))?;
        writeln!(o, "95.0%   Δp: {}", d(s.p_diff_95))?;
        writeln!(o, "90.0%   Δp: {}", d(s.p_diff_90))?;
        writeln!(o, "75.0%   Δp: {}", d(s.p_diff_75))?;
        writeln!(o, "Median  Δp: {}", d(s.p_diff_median))?;
        writeln!(o, "25.0%   Δp: {}", d(s.p_diff_25))?;
        writeln!(o, "10.0%   Δp: {}", d(s.p_diff_10))?;
        writeln!(o, " 5.0%   Δp: {}", d(s.p_diff_5))?;
        writeln!(o, " 1.0%   Δp: {}", d(s.p_diff_1))?;
        writeln!(o, " 0.1%   Δp: {}", d(s.p_diff_0_1))?;
        writeln!(o, "Minimum Δp: {}", d(s.p_diff_min))?;
        writeln!(o, "RMS Δp    : {}", pct(s.rms_p_diff))?;
        writeln!(o, "Same top p: {}", pct(s.same_top))
    })();
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_fixed_pads_and_names_non_finite_values_as_printf_does() {
        assert_eq!(c_fixed(1.23456, 10, 6), "  1.234560");
        assert_eq!(c_fixed(-0.5, 6, 3), "-0.500");
        assert_eq!(c_fixed(12.34567, 0, 4), "12.3457");
        assert_eq!(c_fixed(f64::NAN, 6, 3), "   nan");
        assert_eq!(c_fixed(-f64::NAN, 6, 3), "  -nan");
        assert_eq!(c_fixed(f64::INFINITY, 5, 1), "  inf");
    }

    #[test]
    fn ppl_lines() {
        let mut s = PplSums::default();
        for v in [1.0, 2.0, 3.0] {
            s.add(v);
        }
        assert_eq!(ppl_chunk(0, &s), "[1]7.3891,");
        // μ = 2, σ_μ = sqrt((14/3 − 4)/2) = sqrt(1/3), σ_PPL = e² σ_μ.
        assert_eq!(ppl_final(&s), "Final estimate: PPL = 7.3891 +/- 4.26607");
    }

    #[test]
    fn kld_row_layout() {
        let mut sums = KldSums::default();
        for i in 0..20 {
            let x = i as f32 * 0.1;
            sums.add(&crate::perplexity::PositionScore {
                nll: 1.0 + x,
                nll_base: 1.0 + x * 0.9,
                kld: 0.01,
                p_diff: 0.02,
                top: 1,
                top_base: 1,
            });
        }
        let row = kld_chunk(2, &sums);
        assert!(row.starts_with("   3    "), "{row:?}");
        assert!(row.contains("   0.01000 ±    0.00000"), "{row:?}");
        assert!(row.ends_with("100.000 ±  0.000 %"), "{row:?}");
    }
}
