//! The draws of llama.cpp's dist sampler: `std::mt19937` seeded with a
//! 32-bit seed, and `std::uniform_real_distribution<double>(0, 1)` over it
//! as GCC's libstdc++ computes it (`std::generate_canonical<double, 53>`:
//! two 32-bit outputs `a` then `b`, `(a + b · 2³²) / 2⁶⁴` in double, the
//! largest double below 1 where that rounds to 1). A seed therefore gives
//! llama.cpp's tokens (built with libstdc++, as on Linux) for the same
//! logits. The generator is the standard MT19937 (Matsumoto & Nishimura):
//! the C++ standard fixes its 10000th output for the default seed 5489,
//! 4123659995, which a test checks.

/// State size in 32-bit words.
const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER: u32 = 0x8000_0000;
const LOWER: u32 = 0x7fff_ffff;

/// `std::mt19937`.
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; N],
    index: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937")
            .field("index", &self.index)
            .finish()
    }
}

impl Mt19937 {
    /// `std::mt19937(seed)`.
    pub fn new(seed: u32) -> Mt19937 {
        let mut state = [0u32; N];
        state[0] = seed;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, index: N }
    }

    /// Regenerates the state (the "twist").
    fn twist(&mut self) {
        for i in 0..N {
            let y = (self.state[i] & UPPER) | (self.state[(i + 1) % N] & LOWER);
            let mut next = self.state[(i + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= MATRIX_A;
            }
            self.state[i] = next;
        }
        self.index = 0;
    }

    /// The next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `std::uniform_real_distribution<double>(0.0, 1.0)(rng)` as libstdc++
    /// computes it: a double in `[0, 1)` from two outputs.
    pub fn uniform(&mut self) -> f64 {
        const TWO_32: f64 = 4_294_967_296.0;
        let a = f64::from(self.next_u32());
        let b = f64::from(self.next_u32());
        let sum = a + b * TWO_32;
        let r = sum / (TWO_32 * TWO_32);
        if r >= 1.0 {
            // std::nextafter(1.0, 0.0)
            1.0 - f64::EPSILON / 2.0
        } else {
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_fixes_the_10000th_output_of_seed_5489() {
        let mut g = Mt19937::new(5489);
        let mut last = 0;
        for _ in 0..10_000 {
            last = g.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
    }

    #[test]
    fn first_outputs_of_seed_5489_are_the_reference_ones() {
        // The first outputs of the reference implementation (mt19937ar.c,
        // init_genrand(5489)).
        let mut g = Mt19937::new(5489);
        let first: Vec<u32> = (0..3).map(|_| g.next_u32()).collect();
        assert_eq!(first, [3_499_211_612, 581_869_302, 3_890_346_734]);
    }

    #[test]
    fn uniform_joins_two_outputs_low_first() {
        let mut g = Mt19937::new(42);
        let mut h = Mt19937::new(42);
        let (a, b) = (f64::from(h.next_u32()), f64::from(h.next_u32()));
        let u = g.uniform();
        assert_eq!(u, (a + b * 4_294_967_296.0) / 18_446_744_073_709_551_616.0);
        assert!((0.0..1.0).contains(&u));
    }
}
