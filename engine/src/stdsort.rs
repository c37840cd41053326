//! GCC libstdc++'s `std::sort` and `std::partial_sort`, step for step
//! (`bits/stl_algo.h`, `bits/stl_heap.h`), for any element and any
//! "less" comparison. Neither is stable: among elements the comparison
//! cannot tell apart, the order is whatever the algorithm leaves, and
//! llama.cpp's results (the experts its MoE routing picks, the candidates
//! its samplers keep, in their order) depend on it. These reproduce it:
//!
//! - `std::sort`: introsort, median-of-three quicksort partitions while
//!   more than 16 elements remain, a heap sort past the depth limit
//!   `2·floor(log2 n)`, then a final insertion pass;
//! - `std::partial_sort(first, middle, last)`: a heap of the first
//!   `middle` elements, each later element that is less than its top
//!   swapped in (`__heap_select`), then the heap sorted (`__sort_heap`).
//!
//! A comparison that is false both ways (equal keys, NaN) behaves as in
//! C++.

/// libstdc++'s `_S_threshold`.
const THRESHOLD: usize = 16;

/// `std::sort(v.begin(), v.end(), less)`.
pub fn sort<T: Copy>(v: &mut [T], less: impl Fn(&T, &T) -> bool) {
    let n = v.len();
    if n > 1 {
        let depth = 2 * (usize::BITS - 1 - n.leading_zeros()) as usize;
        introsort_loop(v, 0, n, depth, &less);
        final_insertion_sort(v, 0, n, &less);
    }
}

/// `std::partial_sort(v.begin(), v.begin() + middle, v.end(), less)`: the
/// first `middle` elements end up the least, sorted; the rest in the order
/// the heap selection leaves.
pub fn partial_sort<T: Copy>(v: &mut [T], middle: usize, less: impl Fn(&T, &T) -> bool) {
    let middle = middle.min(v.len());
    heap_select(v, middle, &less);
    sort_heap(&mut v[..middle], &less);
}

fn introsort_loop<T: Copy>(
    v: &mut [T],
    first: usize,
    mut last: usize,
    mut depth: usize,
    less: &impl Fn(&T, &T) -> bool,
) {
    while last - first > THRESHOLD {
        if depth == 0 {
            // __partial_sort(first, last, last)
            let h = &mut v[first..last];
            let len = h.len();
            heap_select(h, len, less);
            sort_heap(h, less);
            return;
        }
        depth -= 1;
        let cut = partition_pivot(v, first, last, less);
        introsort_loop(v, cut, last, depth, less);
        last = cut;
    }
}

/// `__unguarded_partition_pivot`: the median of `first + 1`, the middle and
/// `last - 1` moved to `first`, then an unguarded partition around it.
fn partition_pivot<T: Copy>(
    v: &mut [T],
    first: usize,
    last: usize,
    less: &impl Fn(&T, &T) -> bool,
) -> usize {
    let mid = first + (last - first) / 2;
    move_median_to_first(v, first, first + 1, mid, last - 1, less);
    let pivot = first;
    let (mut lo, mut hi) = (first + 1, last);
    loop {
        while less(&v[lo], &v[pivot]) {
            lo += 1;
        }
        hi -= 1;
        while less(&v[pivot], &v[hi]) {
            hi -= 1;
        }
        if lo >= hi {
            return lo;
        }
        v.swap(lo, hi);
        lo += 1;
    }
}

fn move_median_to_first<T: Copy>(
    v: &mut [T],
    result: usize,
    a: usize,
    b: usize,
    c: usize,
    less: &impl Fn(&T, &T) -> bool,
) {
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

fn final_insertion_sort<T: Copy>(
    v: &mut [T],
    first: usize,
    last: usize,
    less: &impl Fn(&T, &T) -> bool,
) {
    if last - first > THRESHOLD {
        insertion_sort(v, first, first + THRESHOLD, less);
        for i in first + THRESHOLD..last {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, first, last, less);
    }
}

fn insertion_sort<T: Copy>(v: &mut [T], first: usize, last: usize, less: &impl Fn(&T, &T) -> bool) {
    if first == last {
        return;
    }
    for i in first + 1..last {
        if less(&v[i], &v[first]) {
            let val = v[i];
            v.copy_within(first..i, first + 1);
            v[first] = val;
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn unguarded_linear_insert<T: Copy>(v: &mut [T], mut last: usize, less: &impl Fn(&T, &T) -> bool) {
    let val = v[last];
    while less(&val, &v[last - 1]) {
        v[last] = v[last - 1];
        last -= 1;
    }
    v[last] = val;
}

/// `__heap_select(first, first + middle, last)`: a max-heap (by `less`) of
/// the first `middle`, then every later element less than the top popped
/// in.
fn heap_select<T: Copy>(v: &mut [T], middle: usize, less: &impl Fn(&T, &T) -> bool) {
    make_heap(&mut v[..middle], less);
    for i in middle..v.len() {
        if middle > 0 && less(&v[i], &v[0]) {
            // __pop_heap(first, middle, i)
            let val = v[i];
            v[i] = v[0];
            adjust_heap(&mut v[..middle], 0, middle, val, less);
        }
    }
}

fn make_heap<T: Copy>(h: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let len = h.len();
    if len < 2 {
        return;
    }
    let mut parent = (len - 2) / 2;
    loop {
        let val = h[parent];
        adjust_heap(h, parent, len, val, less);
        if parent == 0 {
            return;
        }
        parent -= 1;
    }
}

/// `__sort_heap`: pops the top to the end until one element is left.
fn sort_heap<T: Copy>(h: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let mut end = h.len();
    while end > 1 {
        end -= 1;
        // __pop_heap(first, end, end)
        let val = h[end];
        h[end] = h[0];
        adjust_heap(h, 0, end, val, less);
    }
}

fn adjust_heap<T: Copy>(
    h: &mut [T],
    mut hole: usize,
    len: usize,
    val: T,
    less: &impl Fn(&T, &T) -> bool,
) {
    let top = hole;
    let mut child = hole;
    while len >= 2 && child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if less(&h[child], &h[child - 1]) {
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
        if !less(&h[parent], &val) {
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

    /// (key, tag) pairs: sorted by key only, so tags show the tie order.
    fn by_key(a: &(u8, u32), b: &(u8, u32)) -> bool {
        a.0 < b.0
    }

    #[test]
    fn small_sorts_are_insertion_sorts_and_keep_tie_order() {
        let mut v = [(2, 0), (1, 1), (2, 2), (0, 3), (1, 4)];
        sort(&mut v, by_key);
        assert_eq!(v, [(0, 3), (1, 1), (1, 4), (2, 0), (2, 2)]);
    }

    #[test]
    fn partial_sort_of_equal_keys_is_g_plus_plus_s() {
        // g++ 12.2 (libstdc++): std::partial_sort of 8 equal keys to 3
        // leaves the tags 0 1 2 first.
        let mut v: Vec<(u8, u32)> = (0..8).map(|i| (0, i)).collect();
        partial_sort(&mut v, 3, by_key);
        let tags: Vec<u32> = v[..3].iter().map(|x| x.1).collect();
        assert_eq!(tags, [0, 1, 2]);
    }

    /// Keys 0..7 from the C library's LCG (seed 12345), tagged by index:
    /// Σ (i + 1) · tag after std::sort and after std::partial_sort to n/3,
    /// as g++ 12.2's libstdc++ gives them (many ties, so the tie order
    /// decides the sums).
    #[test]
    fn tie_orders_are_libstdc_plus_plus_s() {
        let mut s: u32 = 12345;
        let mut rnd = || {
            s = s.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (s >> 16) & 0x7fff
        };
        let sum = |v: &[(u8, u32)]| -> u64 {
            v.iter()
                .enumerate()
                .map(|(i, x)| (i as u64 + 1) * u64::from(x.1))
                .sum()
        };
        for (n, want_sort, want_partial) in [
            (40usize, 15729u64, 19115u64),
            (300, 6_736_555, 7_669_335),
            (1000, 247_574_865, 277_420_270),
        ] {
            let a: Vec<(u8, u32)> = (0..n).map(|i| ((rnd() % 7) as u8, i as u32)).collect();
            let mut b = a.clone();
            sort(&mut b, by_key);
            let mut c = a.clone();
            partial_sort(&mut c, n / 3, by_key);
            assert_eq!((sum(&b), sum(&c)), (want_sort, want_partial), "n = {n}");
        }
    }

    proptest! {
        #[test]
        fn sort_and_partial_sort_order_the_keys(
            v in prop::collection::vec(0u8..5, 0..200),
            k in 0usize..200,
        ) {
            let tagged: Vec<(u8, u32)> = v.iter().enumerate().map(|(i, &x)| (x, i as u32)).collect();
            let mut s = tagged.clone();
            sort(&mut s, by_key);
            prop_assert!(s.windows(2).all(|w| w[0].0 <= w[1].0));
            let mut want = tagged.clone();
            want.sort();
            let mut got = s.clone();
            got.sort();
            prop_assert_eq!(&got, &want);
            let mut p = tagged.clone();
            partial_sort(&mut p, k, by_key);
            let k = k.min(p.len());
            let mut keys: Vec<u8> = v.clone();
            keys.sort();
            let head: Vec<u8> = p[..k].iter().map(|x| x.0).collect();
            prop_assert_eq!(&head[..], &keys[..k]);
        }
    }
}
