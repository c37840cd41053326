//! `engine::bounded::run`: results come back, and work past its memory,
//! allocation or time limit, or that panics, becomes an error while the
//! process goes on (this binary allocates through `BudgetAlloc`).

use std::time::Duration;

use engine::bounded::{run, Exceeded, Limits};

const LIMITS: Limits = Limits {
    bytes: 16 << 20,
    acquired: 64 << 20,
    time: Duration::from_secs(2),
    stack: 1 << 20,
};

#[test]
fn bounded_work_returns_its_result_or_why_not() {
    assert!(engine::bounded::installed());
    assert_eq!(run("sum", LIMITS, || (1..=10u32).sum::<u32>()), Ok(55));
    // Holding 15 MiB is allowed, 32 MiB is not (and is never allocated).
    assert_eq!(
        run("15", LIMITS, || vec![1u8; 15 << 20].len()),
        Ok(15 << 20)
    );
    assert_eq!(
        run("32", LIMITS, || vec![1u8; 32 << 20].len()),
        Err(Exceeded::Bytes { limit: 16 << 20 })
    );
    // 100 MiB allocated 1 MiB at a time, each freed: held stays small, the
    // total passes 64 MiB.
    let churn = || {
        (0..100)
            .map(|i| vec![i as u8; 1 << 20].len())
            .sum::<usize>()
    };
    assert_eq!(
        run("churn", LIMITS, churn),
        Err(Exceeded::Acquired { limit: 64 << 20 })
    );
    // A string doubled until it would pass the budget.
    let doubling = || {
        let mut s = String::from("x");
        for _ in 0..40 {
            s = format!("{s}{s}");
        }
        s.len()
    };
    assert_eq!(
        run("doubling", LIMITS, doubling),
        Err(Exceeded::Bytes { limit: 16 << 20 })
    );
    let slow = || std::thread::sleep(Duration::from_secs(4));
    assert_eq!(run("slow", LIMITS, slow), Err(Exceeded::Time(LIMITS.time)));
    let panics = || -> u32 { panic!("boom\nsecond line") };
    assert_eq!(
        run("panics", LIMITS, panics),
        Err(Exceeded::Panicked("boom second line".into()))
    );
    // The caller's own allocations are not counted.
    let big = vec![0u8; 64 << 20];
    assert_eq!(run("after", LIMITS, || 7), Ok(7));
    drop(big);
}
