use std::time::{Duration, Instant};
use weft::Cluster;

#[test]
fn spawn_join_yield_sleep_panic() {
    let c = Cluster::builder()
        .name("smoke")
        .processors(2)
        .build()
        .unwrap();
    let h = c.spawn(|| 40 + 2);
    assert_eq!(h.join().unwrap(), 42);
    let handles: Vec<_> = (0..1000)
        .map(|i| {
            c.spawn(move || {
                for _ in 0..10 {
                    weft::yield_now();
                }
                i
            })
        })
        .collect();
    let sum: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(sum, 999 * 1000 / 2);
    let t = Instant::now();
    c.spawn(|| weft::sleep(Duration::from_millis(50)).unwrap())
        .join()
        .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(50));
    let err = c.spawn(|| panic!("boom")).join().unwrap_err();
    assert_eq!(err.panic_message(), Some("boom"));
    // nested spawn + join inside a fiber
    let v = c
        .spawn(|| {
            let hs: Vec<_> = (0..100).map(|i| weft::spawn(move || i * 2)).collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum::<i32>()
        })
        .join()
        .unwrap();
    assert_eq!(v, 9900);
}
