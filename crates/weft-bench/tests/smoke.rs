//! Every scheduler benchmark runs briefly on both runtimes, with tiny fiber counts, and counts
//! some operations.

use std::time::Duration;

use weft_bench::sched::{self, Bench, Fibers, Params, Runtime};

fn smoke(runtime: Runtime) {
    for &bench in Bench::ALL {
        let mut params = Params::new(runtime, 2);
        params.duration = Duration::from_millis(200);
        params.ring_size = 2;
        params.fibers = Fibers::Count(if bench == Bench::Sleepers { 50 } else { 4 });
        let records = sched::run(bench, &params)
            .unwrap_or_else(|e| panic!("{bench} on {}: {e}", runtime.name()));
        assert!(!records.is_empty());
        for r in &records {
            assert!(
                r.ops > 0,
                "{bench} on {}: no operations: {r:?}",
                runtime.name()
            );
            assert!(r.seconds > 0.0 && r.ops_per_sec > 0.0, "{r:?}");
            assert_eq!(r.runtime, runtime.name());
            let expected = match runtime {
                Runtime::Weft => weft::sched::DEFAULT_POLICY,
                Runtime::Tokio => "tokio",
            };
            assert_eq!(r.scheduler, expected);
            assert_eq!(r.variant, "custom");
        }
        let main = &records[0];
        assert_eq!(main.benchmark, bench.name());
        match bench {
            Bench::Sleepers => {
                assert_eq!(main.fibers, 50);
                assert!(main.rss_bytes_per_fiber.is_some());
            }
            Bench::Switch => assert_eq!(main.processors, 1),
            Bench::SpawnJoin => assert_eq!(main.fibers, 4),
            Bench::Cycle | Bench::LocalityShared | Bench::LocalityNoshare => {
                assert_eq!(main.fibers, 4);
                assert_eq!(main.ring_size, Some(2));
            }
            _ => assert_eq!(main.fibers, 4),
        }
        if bench == Bench::Switch && runtime == Runtime::Weft {
            assert!(records.iter().any(|r| r.benchmark == "switch-raw"));
        }
    }
}

#[test]
fn every_benchmark_runs_on_weft() {
    smoke(Runtime::Weft);
}

#[test]
fn every_benchmark_runs_on_tokio() {
    smoke(Runtime::Tokio);
}

#[test]
fn presets_scale_with_processors() {
    assert_eq!(Bench::Yield.fibers(Fibers::Many, 2, 5), 2000);
    assert_eq!(Bench::Churn.fibers(Fibers::Few, 2, 5), 2);
    assert_eq!(Bench::Churn.fibers(Fibers::Few, 1, 5), 2);
    assert_eq!(Bench::Yield.fibers(Fibers::Few, 1, 5), 1);
    assert_eq!(Bench::Cycle.fibers(Fibers::Many, 2, 5), 500);
    assert_eq!(Bench::Cycle.fibers(Fibers::Few, 2, 5), 5);
    assert_eq!(Bench::Cycle.fibers(Fibers::Count(12), 2, 5), 10);
    assert_eq!(Bench::Cycle.fibers(Fibers::Count(3), 2, 5), 3);
    assert_eq!(Bench::Transfer.fibers(Fibers::Few, 1, 5), 2);
    assert_eq!(Bench::Sleepers.fibers(Fibers::Many, 2, 5), 100_000);
}
