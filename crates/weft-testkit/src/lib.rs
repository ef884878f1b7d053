//! What the workspace's integration tests share, so that each crate's `tests/common` holds only
//! what is its own: a guard that kills a child process by PID ([`ChildGuard`]), a free port,
//! waiting for a listener, the peers the tests compare against (the real memcached, nginx) and
//! the rule for a missing one ([`require`]), and [`server_from_env`]: `WEFT_TEST_SERVER`
//! pointing the protocol tests at a server that is already running; and running a script of
//! `benches/` ([`run_bench_script`]).
//!
//! A dev-dependency only: no library or binary of the workspace depends on it, and it depends
//! on no crate of the workspace (so every crate's tests, `weft-load`'s included, may use it).
//!
//! Invariants: a test whose peer is missing fails under `CI=true` with the command that installs
//! it, and elsewhere prints one `SKIP:` line and passes; every child a helper starts is owned by
//! a [`ChildGuard`], so it is killed by its PID when the test ends, passes or panics.

mod net;
mod peers;
mod process;
mod scripts;

pub use net::{
    free_port, listening_within, new_time_wait_to, server_from_env, time_wait_sockets_to,
    NotListening, SERVER_ENV,
};
pub use peers::{
    find_program, install_hint, missing, require, start_listening, start_memcached, start_nginx,
    MEMCACHED,
};
pub use process::{
    descriptor_table_size, is_root, settle_count, status_kib, threads_named, wait_exit, ChildGuard,
};
pub use scripts::{
    bench_script, bench_script_json, bench_script_refuses, build_bench_c, run_bench_functions,
    run_bench_script, scratch_dir, ScriptRun,
};
