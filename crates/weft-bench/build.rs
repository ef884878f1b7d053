//! Embeds the commit the crate was built from (`WEFT_COMMIT`), so `report.html` can name it
//! wherever the binary runs (outside a checkout, too). `git describe --always --dirty`, or
//! "unknown (built outside a git checkout)". Re-runs when HEAD, the branch it names or the
//! index changes; "dirty" is as of that moment.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().next()?.trim().to_string();
    (!line.is_empty()).then_some(line)
}

fn main() {
    let commit = git(&["describe", "--always", "--dirty", "--abbrev=12"])
        .unwrap_or_else(|| "unknown (built outside a git checkout)".to_string());
    println!("cargo:rustc-env=WEFT_COMMIT={commit}");
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = std::path::PathBuf::from(dir);
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        println!("cargo:rerun-if-changed={}", dir.join("index").display());
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            // A worktree's branches live in the common directory.
            let common = git(&["rev-parse", "--git-common-dir"])
                .map(std::path::PathBuf::from)
                .map(|c| if c.is_absolute() { c } else { dir.join(c) })
                .unwrap_or(dir.clone());
            println!("cargo:rerun-if-changed={}", common.join(&branch).display());
            println!(
                "cargo:rerun-if-changed={}",
                common.join("packed-refs").display()
            );
        }
    }
}
