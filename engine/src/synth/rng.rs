//! The pinned pseudo-random generator behind synthetic weights.
//!
//! Written out here (not taken from a crate) so that a seed gives the same
//! numbers forever, on every machine:
//! - [`splitmix64`] (Steele, Lea, Flood 2014) turns a seed into well-mixed
//!   64-bit words; it seeds the main generator and derives one stream per
//!   tensor from the model seed and the tensor's name ([`fnv1a64`]).
//! - [`Xoshiro256StarStar`] (Blackman and Vigna 2018) is the main generator.
//! - [`Xoshiro256StarStar::uniform`] takes the top 24 bits of a word, so the
//!   f32 is exact; [`Xoshiro256StarStar::normal`] is the Irwin-Hall sum of
//!   four uniforms, centred and scaled to unit variance: a bell curve on
//!   [-2*sqrt(3), 2*sqrt(3)] built from additions and one multiplication in
//!   f32, with no transcendental function whose last bit could differ
//!   between math libraries.

/// One step of SplitMix64: advances `state` and returns the next word.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a, 64-bit: a fixed hash of a tensor name.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// xoshiro256**: 256 bits of state, period 2^256 - 1.
#[derive(Clone, Debug)]
pub struct Xoshiro256StarStar {
    s: [u64; 4],
}

impl Xoshiro256StarStar {
    /// A generator with exactly this state (must not be all zero).
    pub fn from_state(s: [u64; 4]) -> Xoshiro256StarStar {
        assert!(s != [0; 4], "xoshiro256** state must not be all zero");
        Xoshiro256StarStar { s }
    }

    /// State filled by SplitMix64 from `seed` (never all zero: SplitMix64
    /// is a bijection of its counter, and four consecutive outputs cannot
    /// all be zero).
    pub fn seed_from(seed: u64) -> Xoshiro256StarStar {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Xoshiro256StarStar::from_state(s)
    }

    /// The stream for one named tensor of a model with seed `seed`.
    pub fn for_tensor(seed: u64, name: &str) -> Xoshiro256StarStar {
        let mut sm = seed ^ fnv1a64(name.as_bytes());
        Xoshiro256StarStar::seed_from(splitmix64(&mut sm))
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform on [0, 1), a multiple of 2^-24 (exact in f32).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / 16_777_216.0)
    }

    /// Approximately standard normal: (u1 + u2 + u3 + u4 - 2) * sqrt(3),
    /// mean 0, variance 1, bounded by 2*sqrt(3). Evaluated left to right
    /// in f32, so bit-for-bit reproducible.
    pub fn normal(&mut self) -> f32 {
        const SQRT_3: f32 = 1.732_050_8;
        let s = self.uniform() + self.uniform() + self.uniform() + self.uniform();
        (s - 2.0) * SQRT_3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference() {
        // The reference implementation's first outputs for seed 0.
        let mut s = 0;
        assert_eq!(splitmix64(&mut s), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(&mut s), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn xoshiro256starstar_matches_the_reference() {
        // From state {1, 2, 3, 4}: rotl(2 * 5, 7) * 9 = 11520, then 0.
        let mut r = Xoshiro256StarStar::from_state([1, 2, 3, 4]);
        assert_eq!(r.next_u64(), 11520);
        assert_eq!(r.next_u64(), 0);
        assert_eq!(r.next_u64(), 1_509_978_240);
        assert_eq!(r.next_u64(), 1_215_971_899_390_074_240);
    }

    #[test]
    fn fnv1a64_matches_the_reference() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn streams_are_pinned() {
        // Golden values: a change here changes every synthetic model.
        let mut r = Xoshiro256StarStar::for_tensor(42, "token_embd.weight");
        let words: Vec<u64> = (0..2).map(|_| r.next_u64()).collect();
        let floats: Vec<u32> = (0..3).map(|_| r.normal().to_bits()).collect();
        assert_eq!(words, GOLDEN_WORDS);
        assert_eq!(floats, GOLDEN_NORMALS);
    }

    const GOLDEN_WORDS: [u64; 2] = [14_833_461_959_655_940_541, 12_194_034_866_766_686_917];
    const GOLDEN_NORMALS: [u32; 3] = [1_033_363_288, 1_074_789_044, 3_213_013_017];

    #[test]
    fn normal_has_unit_variance_and_bounded_support() {
        let mut r = Xoshiro256StarStar::seed_from(7);
        let n = 200_000;
        let (mut sum, mut sq, mut max) = (0f64, 0f64, 0f32);
        for _ in 0..n {
            let x = r.normal();
            sum += f64::from(x);
            sq += f64::from(x) * f64::from(x);
            max = max.max(x.abs());
        }
        let mean = sum / n as f64;
        let var = sq / n as f64 - mean * mean;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "variance {var}");
        assert!(max <= 2.0 * 1.732_050_8);
        let u = r.uniform();
        assert!((0.0..1.0).contains(&u));
    }
}
