//! Descending argsort exactly as llama.cpp's CPU backend computes it.
//!
//! ggml's `argsort` (which `ggml_argsort_top_k` uses to pick experts) fills
//! `0..n` and calls `std::sort` with `a > b` on the values. `std::sort` is
//! not stable, so among equal values the order is whatever libstdc++'s
//! introsort leaves: insertion sort for 16 elements or fewer (stable), and
//! above that median-of-three quicksort partitions, a heap sort past the
//! depth limit `2·floor(log2 n)`, and a final insertion pass. This is that
//! algorithm step for step ([`crate::stdsort`]), so
//! ties between experts resolve as they do in llama.cpp. The GPU's `top_k`
//! shader runs the same steps.

/// Indices `0..values.len()` ordered by descending value, ties as
/// libstdc++'s `std::sort` orders them ([`crate::stdsort::sort`]). NaN
/// compares false both ways (as in C++), so its position is whatever the
/// algorithm leaves.
pub fn argsort_desc(values: &[f32]) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..values.len() as u32).collect();
    crate::stdsort::sort(&mut idx, |&a, &b| values[a as usize] > values[b as usize]);
    idx
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check_sorted(values: &[f32], idx: &[u32]) {
        let mut seen = vec![false; values.len()];
        for &i in idx {
            assert!(!seen[i as usize], "index {i} twice");
            seen[i as usize] = true;
        }
        for w in idx.windows(2) {
            assert!(values[w[0] as usize] >= values[w[1] as usize], "{idx:?}");
        }
    }

    #[test]
    fn small_inputs_are_stable() {
        // Up to 16 elements libstdc++ runs insertion sort alone: ties keep
        // their index order.
        let v = [0.5, 0.25, 0.5, 1.0, 0.25, 0.5];
        assert_eq!(argsort_desc(&v), vec![3, 0, 2, 5, 1, 4]);
        assert_eq!(argsort_desc(&[]), Vec::<u32>::new());
        assert_eq!(argsort_desc(&[7.0]), vec![0]);
    }

    #[test]
    fn ties_above_the_threshold_follow_introsort() {
        // 32 equal values: the median-of-three partition swaps elements
        // around, so the order is not the index order. Pinned from g++ 12.2
        // (libstdc++) `std::sort` with `a > b` on this input; this file
        // gave the same order as that `std::sort` on 4,000 random inputs of
        // up to 300 values with many ties, and on 48 patterned inputs of up
        // to 2,048 values, 32 of which reach the heap sort.
        let v = [1.0f32; 32];
        let got = argsort_desc(&v);
        check_sorted(&v, &got);
        assert_eq!(
            got,
            vec![
                16, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 0, 15, 14, 13, 12,
                11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1
            ]
        );
    }

    #[test]
    fn deep_partitions_fall_back_to_the_heap_sort() {
        // An organ pipe of 512 values drives the median-of-three partitions
        // past the depth limit. Checksum Σ (i + 1) · idx[i] of g++ 12.2's
        // `std::sort` on this input: 33554722.
        let n = 512;
        let v: Vec<f32> = (0..n).map(|i: usize| i.min(n - 1 - i) as f32).collect();
        let got = argsort_desc(&v);
        check_sorted(&v, &got);
        let sum: u64 = got
            .iter()
            .enumerate()
            .map(|(i, &j)| (i as u64 + 1) * u64::from(j))
            .sum();
        assert_eq!(sum, 33554722);
    }

    proptest! {
        #[test]
        fn sorts_any_input(v in prop::collection::vec(0u8..6, 0..300)) {
            // Few distinct values: many ties.
            let values: Vec<f32> = v.iter().map(|&x| f32::from(x)).collect();
            check_sorted(&values, &argsort_desc(&values));
        }
    }
}
