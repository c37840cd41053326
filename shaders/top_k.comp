#version 450
// The k largest of each row of probabilities, largest first: ids (as f32)
// and values. One invocation per row sorts the row's indices by descending
// value with exactly the steps of libstdc++'s std::sort (introsort: median-
// of-three quicksort partitions while longer than 16 elements, heap sort
// past the depth limit 2 floor(log2 n), then a final insertion sort), as
// engine/src/cpu/argsort.rs does, so ties come out in the CPU's (and
// llama.cpp's) order. The recursion on the right part becomes an explicit
// stack: the parts are disjoint and each is sorted by its own steps, so the
// order in which they are done does not change the result.
// Bindings: 0 = probs (read), 1 = ids (written), 2 = weights (written).
// Push: TopKPush.

#include "moe.glsl"
#include "index.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) readonly buffer P { float probs[]; };
layout(set = 0, binding = 1, std430) writeonly buffer I { float ids[]; };
layout(set = 0, binding = 2, std430) writeonly buffer Wt { float weights[]; };

layout(push_constant) uniform Push { TopKPush p; };

// Longest row (llama.cpp's most experts); the host checks n against it
// (op_moe.rs TOP_K_MAX).
#define MAX_N 512u
// libstdc++'s _S_threshold.
#define THRESHOLD 16u
// Stack entries: the parts waiting have strictly decreasing depth budgets,
// at most 2 floor(log2 512) + 1 = 19 of them.
#define STACK 20u

uint v[MAX_N]; // the indices being sorted
uint base;     // first element of the row in probs

// comp(a, b) of the CPU's sort: the value of a is greater (NaN: false).
bool gt(uint a, uint b) {
    return probs[base + a] > probs[base + b];
}

void swap_at(uint i, uint j) {
    uint t = v[i];
    v[i] = v[j];
    v[j] = t;
}

// __move_median_to_first.
void move_median_to_first(uint result, uint a, uint b, uint c) {
    uint pick;
    if (gt(v[a], v[b])) {
        if (gt(v[b], v[c])) {
            pick = b;
        } else if (gt(v[a], v[c])) {
            pick = c;
        } else {
            pick = a;
        }
    } else if (gt(v[a], v[c])) {
        pick = a;
    } else if (gt(v[b], v[c])) {
        pick = c;
    } else {
        pick = b;
    }
    swap_at(result, pick);
}

// __unguarded_partition_pivot.
uint partition_pivot(uint first, uint last) {
    uint mid = first + (last - first) / 2u;
    move_median_to_first(first, first + 1u, mid, last - 1u);
    uint lo = first + 1u;
    uint hi = last;
    for (;;) {
        while (gt(v[lo], v[first])) {
            lo++;
        }
        hi--;
        while (gt(v[first], v[hi])) {
            hi--;
        }
        if (lo >= hi) {
            return lo;
        }
        swap_at(lo, hi);
        lo++;
    }
    return lo; // not reached
}

// __adjust_heap on the heap v[first..first + len], then __push_heap.
void adjust_heap(uint first, uint hole, uint len, uint val) {
    uint top = hole;
    uint child = hole;
    while (len >= 2u && child < (len - 1u) / 2u) {
        child = 2u * (child + 1u);
        if (gt(v[first + child], v[first + child - 1u])) {
            child--;
        }
        v[first + hole] = v[first + child];
        hole = child;
    }
    if (len >= 2u && (len & 1u) == 0u && child == (len - 2u) / 2u) {
        child = 2u * (child + 1u);
        v[first + hole] = v[first + child - 1u];
        hole = child - 1u;
    }
    while (hole > top) {
        uint parent = (hole - 1u) / 2u;
        if (!gt(v[first + parent], val)) {
            break;
        }
        v[first + hole] = v[first + parent];
        hole = parent;
    }
    v[first + hole] = val;
}

// __partial_sort(first, last, last): __make_heap, then __sort_heap.
void heap_sort(uint first, uint last) {
    uint len = last - first;
    if (len >= 2u) {
        for (uint parent = (len - 2u) / 2u + 1u; parent > 0u; parent--) {
            adjust_heap(first, parent - 1u, len, v[first + parent - 1u]);
        }
    }
    for (uint end = len; end > 1u;) {
        end--;
        uint val = v[first + end];
        v[first + end] = v[first];
        adjust_heap(first, 0u, end, val);
    }
}

// __unguarded_linear_insert.
void unguarded_linear_insert(uint last) {
    uint val = v[last];
    while (gt(val, v[last - 1u])) {
        v[last] = v[last - 1u];
        last--;
    }
    v[last] = val;
}

// __insertion_sort.
void insertion_sort(uint first, uint last) {
    if (first == last) {
        return;
    }
    for (uint i = first + 1u; i < last; i++) {
        if (gt(v[i], v[first])) {
            uint val = v[i];
            for (uint j = i; j > first; j--) {
                v[j] = v[j - 1u];
            }
            v[first] = val;
        } else {
            unguarded_linear_insert(i);
        }
    }
}

void main() {
    uint row = global_index_1d();
    if (row >= p.rows) {
        return;
    }
    uint n = p.n;
    base = p.probs_offset + row * n;
    for (uint i = 0u; i < n; i++) {
        v[i] = i;
    }
    if (n > 1u) {
        // __introsort_loop with the right parts on a stack: (first, last, depth).
        uvec3 stack[STACK];
        uint sp = 0u;
        stack[sp++] = uvec3(0u, n, 2u * uint(findMSB(n)));
        while (sp > 0u) {
            uvec3 part = stack[--sp];
            uint first = part.x;
            uint last = part.y;
            uint depth = part.z;
            while (last - first > THRESHOLD) {
                if (depth == 0u) {
                    heap_sort(first, last);
                    break;
                }
                depth--;
                uint cut = partition_pivot(first, last);
                stack[sp++] = uvec3(cut, last, depth);
                last = cut;
            }
        }
        // __final_insertion_sort.
        if (n > THRESHOLD) {
            insertion_sort(0u, THRESHOLD);
            for (uint i = THRESHOLD; i < n; i++) {
                unguarded_linear_insert(i);
            }
        } else {
            insertion_sort(0u, n);
        }
    }
    for (uint j = 0u; j < p.k; j++) {
        uint e = v[j];
        ids[p.ids_offset + row * p.k + j] = float(e);
        weights[p.weights_offset + row * p.k + j] = probs[base + e];
    }
}
