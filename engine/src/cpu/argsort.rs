//! Descending argsort exactly as llama.cpp's CPU backend computes it.
//!
//! ggml's `argsort` (which `ggml_argsort_top_k` uses to pick experts) fills
//! `0..n` and calls `std::sort` with `a > b` on the values. `std::sort` is
//! not stable, so among equal values the order is whatever libstdc++'s
//! introsort leaves: insertion sort for 16 elements or fewer (stable), and
//! above that median-of-three quicksort partitions, a heap sort past the
//! depth limit `2·floor(log2 n)`, and a final insertion pass. This is that
//! algorithm step for step (GCC's `bits/stl_algo.h` and `stl_heap.h`), so
//! ties between experts resolve as they do in llama.cpp. The GPU's `top_k`
//! shader runs the same steps.

/// libstdc++'s `_S_threshold`.
const THRESHOLD: usize = 16;

/// Indices `0..values.len()` ordered by descending value, ties as
/// libstdc++'s `std::sort` orders them. NaN compares false both ways (as
/// in C++), so its position is whatever the algorithm leaves.
pub fn argsort_desc(values: &[f32]) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..values.len() as u32).collect();
    let gt = |a: u32, b: u32| values[a as usize] > values[b as usize];
    let n = idx.len();
    if n > 1 {
        let depth = 2 * (usize::BITS - 1 - n.leading_zeros()) as usize;
        introsort_loop(&mut idx, 0, n, depth, &gt);
        final_insertion_sort(&mut idx, 0, n, &gt);
    }
    idx
}

fn introsort_loop(
    v: &mut [u32],
    first: usize,
    mut last: usize,
    mut depth: usize,
    comp: &impl Fn(u32, u32) -> bool,
) {
    while last - first > THRESHOLD {
        if depth == 0 {
            heap_sort(v, first, last, comp);
            return;
        }
        depth -= 1;
        let cut = partition_pivot(v, first, last, comp);
        introsort_loop(v, cut, last, depth, comp);
        last = cut;
    }
}

/// `__unguarded_partition_pivot`: the median of `first + 1`, the middle and
/// `last - 1` moved to `first`, then an unguarded partition around it.
fn partition_pivot(
    v: &mut [u32],
    first: usize,
    last: usize,
    comp: &impl Fn(u32, u32) -> bool,
) -> usize {
    let mid = first + (last - first) / 2;
    move_median_to_first(v, first, first + 1, mid, last - 1, comp);
    let pivot = first;
    let (mut lo, mut hi) = (first + 1, last);
    loop {
        while comp(v[lo], v[pivot]) {
            lo += 1;
        }
        hi -= 1;
        while comp(v[pivot], v[hi]) {
            hi -= 1;
        }
        if lo >= hi {
            return lo;
        }
        v.swap(lo, hi);
        lo += 1;
    }
}

fn move_median_to_first(
    v: &mut [u32],
    result: usize,
    a: usize,
    b: usize,
    c: usize,
    comp: &impl Fn(u32, u32) -> bool,
) {
    let pick = if comp(v[a], v[b]) {
        if comp(v[b], v[c]) {
            b
        } else if comp(v[a], v[c]) {
            c
        } else {
            a
        }
    } else if comp(v[a], v[c]) {
        a
    } else if comp(v[b], v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

fn final_insertion_sort(
    v: &mut [u32],
    first: usize,
    last: usize,
    comp: &impl Fn(u32, u32) -> bool,
) {
    if last - first > THRESHOLD {
        insertion_sort(v, first, first + THRESHOLD, comp);
        for i in first + THRESHOLD..last {
            unguarded_linear_insert(v, i, comp);
        }
    } else {
        insertion_sort(v, first, last, comp);
    }
}

fn insertion_sort(v: &mut [u32], first: usize, last: usize, comp: &impl Fn(u32, u32) -> bool) {
    if first == last {
        return;
    }
    for i in first + 1..last {
        if comp(v[i], v[first]) {
            let val = v[i];
            v.copy_within(first..i, first + 1);
            v[first] = val;
        } else {
            unguarded_linear_insert(v, i, comp);
        }
    }
}

fn unguarded_linear_insert(v: &mut [u32], mut last: usize, comp: &impl Fn(u32, u32) -> bool) {
    let val = v[last];
    while comp(val, v[last - 1]) {
        v[last] = v[last - 1];
        last -= 1;
    }
    v[last] = val;
}

/// `__partial_sort(first, last, last)`: `__make_heap`, then `__sort_heap`.
fn heap_sort(v: &mut [u32], first: usize, last: usize, comp: &impl Fn(u32, u32) -> bool) {
    let h = &mut v[first..last];
    let len = h.len();
    if len >= 2 {
        let mut parent = (len - 2) / 2;
        loop {
            let val = h[parent];
            adjust_heap(h, parent, len, val, comp);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    let mut end = len;
    while end > 1 {
        end -= 1;
        // __pop_heap(first, end, end)
        let val = h[end];
        h[end] = h[0];
        adjust_heap(h, 0, end, val, comp);
    }
}

fn adjust_heap(
    h: &mut [u32],
    mut hole: usize,
    len: usize,
    val: u32,
    comp: &impl Fn(u32, u32) -> bool,
) {
    let top = hole;
    let mut child = hole;
    while len >= 2 && child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if comp(h[child], h[child - 1]) {
            child -= 1;
        }
        h[hole] = h[child];
        hole = child;
    }
    if len >= 2 && len.is_multiple_of(2) && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        h[hole] = h[child - 1];
        hole = child - 1;
    }
    // __push_heap
    while hole > top {
        let parent = (hole - 1) / 2;
        if !comp(h[parent], val) {
            break;
        }
        h[hole] = h[parent];
        hole = parent;
    }
    h[hole] = val;
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

    #[test]
    fn heap_sort_sorts() {
        let values: Vec<f32> = (0..40).map(|i| ((i * 7) % 11) as f32).collect();
        let mut idx: Vec<u32> = (0..40).collect();
        let gt = |a: u32, b: u32| values[a as usize] > values[b as usize];
        heap_sort(&mut idx, 0, 40, &gt);
        check_sorted(&values, &idx);
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
