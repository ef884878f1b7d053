//! Running the workspace's benchmark scripts (`benches/`) from tests: the interpreter found
//! by [`require`], the script by its name under `benches/`, and what it printed.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;

use crate::require;

/// What a script run left: its exit code (-1 when a signal ended it) and its output.
#[derive(Debug)]
pub struct ScriptRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The workspace's `benches/<name>`.
pub fn bench_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../benches")
        .join(name)
}

/// Runs `benches/<name>` with `interpreter` (`bash`, `python3`), `args` and `env` added to
/// this process's environment, and waits for it; `None` when the interpreter is missing (a
/// failure under `CI=true`, see [`require`]).
pub fn run_bench_script(
    interpreter: &str,
    name: &str,
    args: &[&OsStr],
    env: &[(&str, &OsStr)],
) -> Option<ScriptRun> {
    let program = require(interpreter)?;
    let out = Command::new(program)
        .arg(bench_script(name))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("run {interpreter} benches/{name}: {e}"));
    Some(ScriptRun {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}
