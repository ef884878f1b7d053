//! Running the workspace's benchmark scripts (`benches/`) from tests: the interpreter found
//! by [`require`], the script by its name under `benches/`, and what it printed; or some of a
//! bash script's functions alone ([`run_bench_functions`]).

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

/// A directory of one test's own under the system's temporary directory, named after the
/// suite (`prefix`), this process and the test, emptied first so that a rerun starts clean.
pub fn scratch_dir(prefix: &str, test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("make the scratch directory {}: {e}", dir.display()));
    dir
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

/// Runs `benches/<name>` as [`run_bench_script`] does, with `--json` after `args`, requires it
/// to exit 0 (a failure shows what it wrote to stderr) and returns what it printed, the JSON
/// document for the caller to parse; `None` when the interpreter is missing.
pub fn bench_script_json(interpreter: &str, name: &str, args: &[&OsStr]) -> Option<String> {
    let mut with = args.to_vec();
    with.push(OsStr::new("--json"));
    let out = run_bench_script(interpreter, name, &with, &[])?;
    assert_eq!(out.code, 0, "benches/{name} --json failed: {}", out.stderr);
    Some(out.stdout)
}

/// Builds the C program `benches/<source>` with `cc -O2 -Wall <flags> -o <binary> <source>
/// <libs>` into a fresh [`scratch_dir`] (`prefix`, `test`), the binary named after the source
/// file; panics with cc's output when the build fails; `None` when `cc` is missing (a failure
/// under `CI=true`, see [`require`]).
pub fn build_bench_c(
    source: &str,
    prefix: &str,
    test: &str,
    flags: &[&str],
    libs: &[&str],
) -> Option<PathBuf> {
    let cc = require("cc")?;
    let source_path = bench_script(source);
    let stem = source_path.file_stem().expect("a file name").to_owned();
    let binary = scratch_dir(prefix, test).join(stem);
    let out = Command::new(cc)
        .args(["-O2", "-Wall"])
        .args(flags)
        .arg("-o")
        .arg(&binary)
        .arg(&source_path)
        .args(libs)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc {source}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(binary)
}

/// Runs `benches/<name>` with `interpreter` on `args` and requires it to refuse them: exit
/// code 1 and `message` in what it printed on stderr. Returns without checking when the
/// interpreter is missing (a failure under `CI=true`, see [`require`]).
pub fn bench_script_refuses(interpreter: &str, name: &str, args: &[&OsStr], message: &str) {
    let Some(out) = run_bench_script(interpreter, name, args, &[]) else {
        return;
    };
    assert_eq!(out.code, 1, "benches/{name} did not refuse: {}", out.stdout);
    assert!(out.stderr.contains(message), "{}", out.stderr);
}

/// The lines printed by bash running `program` after `preamble` and the shell functions
/// `functions` of `benches/<name>`, each cut from the script itself (from `\nNAME() {` to the
/// first `\n}\n` after it), so a test drives the script's own code without starting what
/// the rest of it would. Panics when bash fails; `None` without bash (a failure under
/// `CI=true`).
pub fn run_bench_functions(
    name: &str,
    functions: &[&str],
    preamble: &str,
    program: &str,
) -> Option<Vec<String>> {
    let bash = require("bash")?;
    let source = std::fs::read_to_string(bench_script(name))
        .unwrap_or_else(|e| panic!("read benches/{name}: {e}"));
    let mut defined = String::new();
    for function in functions {
        let start = source
            .find(&format!("\n{function}() {{"))
            .unwrap_or_else(|| panic!("benches/{name} defines {function}"));
        let end = start + source[start..].find("\n}\n").expect("the function ends") + 3;
        defined.push_str(&source[start..end]);
    }
    let program = format!("{preamble}\n{defined}{program}");
    let out = Command::new(bash)
        .args(["-c", &program])
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    Some(text.lines().map(str::to_string).collect())
}
