//! A cgroup that caps the CPU time of the processes put in it, for benchmarks that must give two
//! servers the same fraction of a core (so that one load core can drive them past saturation).
//!
//! Uses the cgroup v1 `cpu` controller (`cpu.cfs_quota_us`) where it is mounted on its own, else
//! cgroup v2 `cpu.max`. The period is 10 ms, so a throttled server stalls for milliseconds, not
//! for most of a 100 ms default period. The directory is removed on drop, after the processes
//! in it have exited (callers drop their process guards first).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

const PERIOD_US: u32 = 10_000;

/// One CPU-capped cgroup.
#[derive(Debug)]
pub struct CpuLimit {
    dir: PathBuf,
}

impl CpuLimit {
    /// A new cgroup named `name-<pid>` whose members together get at most `percent` % of one CPU.
    pub fn new(name: &str, percent: u32) -> anyhow::Result<CpuLimit> {
        if percent == 0 || percent > 100 {
            bail!("the CPU limit must be between 1 and 100 %, not {percent}");
        }
        let quota_us = PERIOD_US * percent / 100;
        let leaf = format!("{name}-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let (dir, files): (PathBuf, Vec<(&str, String)>) = if v1.join("cpu.cfs_quota_us").exists() {
            (
                v1.join(&leaf),
                vec![
                    ("cpu.cfs_period_us", PERIOD_US.to_string()),
                    ("cpu.cfs_quota_us", quota_us.to_string()),
                ],
            )
        } else {
            let root = Path::new("/sys/fs/cgroup");
            let controllers =
                std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
            if !controllers.split_whitespace().any(|c| c == "cpu") {
                bail!(
                    "no cgroup cpu controller here (neither /sys/fs/cgroup/cpu nor cpu in \
                         /sys/fs/cgroup/cgroup.controllers): cannot limit the servers' CPU"
                );
            }
            (
                root.join(&leaf),
                vec![("cpu.max", format!("{quota_us} {PERIOD_US}"))],
            )
        };
        std::fs::create_dir(&dir)
            .with_context(|| format!("creating cgroup {} (needs root)", dir.display()))?;
        let limit = CpuLimit { dir };
        for (file, value) in files {
            std::fs::write(limit.dir.join(file), value)
                .with_context(|| format!("writing {}/{file}", limit.dir.display()))?;
        }
        Ok(limit)
    }

    /// Moves process `pid` (all its threads, and the threads it starts later) into the cgroup.
    pub fn add(&self, pid: u32) -> anyhow::Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {pid} into {}", self.dir.display()))
    }
}

impl Drop for CpuLimit {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_percentage_outside_1_to_100() {
        for pct in [0, 101] {
            let err = CpuLimit::new("weft-test-bad", pct).unwrap_err().to_string();
            assert!(err.contains("between 1 and 100"), "{err}");
        }
    }

    #[test]
    fn writes_the_quota_holds_a_process_and_is_removed_on_drop() {
        let limit = match CpuLimit::new("weft-test-limit", 25) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("SKIP: cannot create a cgroup here: {e:#}");
                return;
            }
        };
        let dir = limit.dir.clone();
        let v1 = dir.join("cpu.cfs_quota_us");
        if v1.exists() {
            assert_eq!(std::fs::read_to_string(&v1).unwrap().trim(), "2500");
            let period = std::fs::read_to_string(dir.join("cpu.cfs_period_us")).unwrap();
            assert_eq!(period.trim(), "10000");
        } else {
            let max = std::fs::read_to_string(dir.join("cpu.max")).unwrap();
            assert_eq!(max.trim(), "2500 10000");
        }
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        limit.add(child.id()).unwrap();
        let members = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert!(
            members.lines().any(|l| l.trim() == child.id().to_string()),
            "{members}"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        drop(limit);
        assert!(!dir.exists(), "{} was not removed", dir.display());
    }
}
