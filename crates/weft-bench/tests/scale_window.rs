//! benches/scale.sh's `window_busy`: besides the server's own CPU over the measured window
//! (`server_busy`), a point records CPU 0's busy fraction over it whoever ran
//! (`server_cpu0_busy`). A server's own time leaves out the kernel work it causes while its
//! CPU is otherwise idle (timer and network softirqs then run in the idle task), so two
//! servers that sleep differently can differ in `server_busy` while the CPU does the same work.

use weft_testkit::run_bench_functions;

/// The figures `window_busy` writes for a window of 0.4 s over a sleeping process (the
/// "server"), with `load` running in the background through it; `None` without bash.
fn window(load: &str) -> Option<Vec<f64>> {
    let program = format!(
        "file=$(mktemp)\n{load} &\nload=$!\nsleep 5 &\nquiet=$!\nsleep 0.1\n\
         window_busy \"$quiet\" 1 0 \"$file\"\ncat \"$file\"\nrm -f \"$file\"\n\
         kill \"$load\" \"$quiet\"\n"
    );
    let lines = run_bench_functions(
        "scale.sh",
        &["cpu_ticks", "steal_ticks", "idle_ticks", "window_busy"],
        "WARMUP=0\nDURATION=0.4",
        &program,
    )?;
    let last = lines.last().expect("window_busy wrote its figures");
    Some(
        last.split_whitespace()
            .map(|f| {
                f.parse()
                    .unwrap_or_else(|e| panic!("{f:?} in {last:?}: {e}"))
            })
            .collect(),
    )
}

#[test]
fn a_window_records_cpu_0s_own_busy_fraction_beside_the_servers() {
    // A spinner on CPU 0 that is not the process measured: CPU 0 is busy, the process is not.
    let Some(figures) = window("taskset -c 0 bash -c 'while :; do :; done'") else {
        return;
    };
    assert_eq!(
        figures.len(),
        4,
        "server busy, steal on CPU 0 and 1, CPU 0 busy: {figures:?}"
    );
    let (server, cpu0) = (figures[0], figures[3]);
    assert!(server < 0.1, "the measured process sleeps: {figures:?}");
    assert!(
        cpu0 > 0.5 && cpu0 <= 1.0,
        "the spinner kept CPU 0 busy: {figures:?}"
    );
}
