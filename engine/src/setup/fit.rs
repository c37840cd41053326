//! How many layers fit the GPU: [`largest_fit`] (named by the error for a
//! plan that does not fit) and [`auto_fit`] (`-g auto`).

use super::bytes::{DeviceBytes, ModelBytes};
use crate::placement::{Placement, Side};

/// The bytes the GPU holds under `-g n --fixed-on fixed` (0 when it runs
/// nothing).
fn gpu_part(m: &ModelBytes, n: usize, fixed: Option<Side>) -> u64 {
    let b = m.budget(&Placement::gpu_split(m.layers.len(), n, fixed));
    b.get(Side::Gpu as usize).map_or(0, DeviceBytes::total)
}

/// The largest `n` up to `n_gpu` for which the GPU part of `-g n
/// --fixed-on fixed` fits in `limit` bytes (None: not even `-g 0`'s, which
/// is empty unless `fixed` puts the embedding and head on the GPU).
pub fn largest_fit(m: &ModelBytes, n_gpu: usize, fixed: Option<Side>, limit: u64) -> Option<usize> {
    (0..=n_gpu).rev().find(|&n| gpu_part(m, n, fixed) <= limit)
}

/// `-g auto`: the largest `n` up to `n_layer` for which the GPU part of
/// `-g n --fixed-on fixed` fits in `limit` bytes, where `bytes(n)` is what
/// the model needs with `n` GPU layers (with `--moe-cache NMiB` the slots
/// of a layer depend on how many layers share the MiB). None as for
/// [`largest_fit`].
pub fn auto_fit(
    n_layer: usize,
    fixed: Option<Side>,
    limit: u64,
    bytes: impl Fn(usize) -> ModelBytes,
) -> Option<usize> {
    (0..=n_layer)
        .rev()
        .find(|&n| gpu_part(&bytes(n), n, fixed) <= limit)
}

#[cfg(test)]
mod tests {
    use super::super::bytes::tests::model_bytes;
    use super::*;

    #[test]
    fn largest_fit_lowers_n_until_the_gpu_part_fits() {
        let m = model_bytes();
        // All 3 layers need 1339 bytes on the GPU.
        assert_eq!(largest_fit(&m, 3, None, 1339), Some(3));
        // -g 2: 1000 + 200 + 14 + 5 = 1219 (the head goes to the CPU).
        assert_eq!(largest_fit(&m, 3, None, 1338), Some(2));
        assert_eq!(largest_fit(&m, 3, None, 1219), Some(2));
        assert_eq!(largest_fit(&m, 3, None, 1218), Some(1));
        // Layers only (--fixed-on cpu): -g 1 is 100 + 7 + 5 = 112 bytes.
        assert_eq!(largest_fit(&m, 3, Some(Side::Cpu), 111), Some(0));
        assert_eq!(largest_fit(&m, 3, Some(Side::Cpu), 112), Some(1));
        // --fixed-on gpu: even -g 0 puts 1010 + 3 + 5 bytes there.
        assert_eq!(largest_fit(&m, 3, Some(Side::Gpu), 1017), None);
        assert_eq!(largest_fit(&m, 3, Some(Side::Gpu), 1018), Some(0));
    }

    #[test]
    fn auto_fit_is_the_largest_fit_over_every_layer() {
        let m = model_bytes();
        for fixed in [None, Some(Side::Cpu), Some(Side::Gpu)] {
            for limit in [0, 111, 112, 1017, 1018, 1218, 1219, 1338, 1339, 5000] {
                assert_eq!(
                    auto_fit(3, fixed, limit, |_| m.clone()),
                    largest_fit(&m, 3, fixed, limit),
                    "{fixed:?} {limit}"
                );
            }
        }
        // The model's bytes may depend on n: here 600 bytes of expert
        // slots shared by the GPU layers (as --moe-cache NMiB shares its
        // MiB). -g 3: 1339 + 600 = 1939; -g 2: 1000 + 2 * (100 + 300) + 14
        // + 5 = 1819; -g 1: 1000 + 700 + 7 + 5 = 1712 (the head on the CPU).
        let shared = |n: usize| {
            let mut m = model_bytes();
            for (l, layer) in m.layers.iter_mut().enumerate() {
                layer.push((format!("blk.{l}.slots"), 600 / n.max(1) as u64));
            }
            m
        };
        assert_eq!(auto_fit(3, None, 1939, shared), Some(3));
        assert_eq!(auto_fit(3, None, 1938, shared), Some(2));
        assert_eq!(auto_fit(3, None, 1819, shared), Some(2));
        assert_eq!(auto_fit(3, None, 1818, shared), Some(1));
        // Where the bytes of -g 3 would say -g 2 (1619) fits, it does not.
        assert_eq!(largest_fit(&shared(3), 3, None, 1712), Some(2));
        assert_eq!(auto_fit(3, None, 1712, shared), Some(1));
        assert_eq!(auto_fit(3, None, 1711, shared), Some(0));
    }
}
