//! A memory-limited cgroup for one server, so its page cache cannot hold the file set
//! (`weft experiment disk`). cgroup v2 `memory.max` when the unified hierarchy has the memory
//! controller; otherwise the v1 memory controller's `memory.limit_in_bytes`, which charges
//! and reclaims page cache the same way (a page is charged to the group of the task that
//! read it in).
//!
//! Invariants: the group is a child of the group this process is in (so every limit above us
//! still applies and nothing outside our own subtree is touched); it is removed on drop,
//! after its members exited (callers stop their server first), and a group that cannot be
//! removed is reported, not retried forever.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// Which interface the group uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// One memory-limited cgroup.
#[derive(Debug)]
pub struct MemoryLimit {
    dir: PathBuf,
    version: Version,
}

impl MemoryLimit {
    /// A new group `name-<pid>` whose members may use at most `bytes` (anonymous memory and
    /// page cache together).
    pub fn new(name: &str, bytes: u64) -> anyhow::Result<MemoryLimit> {
        let own =
            std::fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
        let leaf = format!("{name}-{}", std::process::id());
        let (parent, version) = match place(&own, Path::new("/sys/fs/cgroup")) {
            Some(p) => p,
            None => bail!(
                "no writable memory cgroup: neither cgroup v2 with the memory controller nor \
                 the v1 memory controller is mounted under /sys/fs/cgroup"
            ),
        };
        let dir = parent.join(leaf);
        std::fs::create_dir(&dir).with_context(|| format!("creating cgroup {}", dir.display()))?;
        let group = MemoryLimit { dir, version };
        let (file, value) = match version {
            Version::V2 => ("memory.max", bytes.to_string()),
            Version::V1 => ("memory.limit_in_bytes", bytes.to_string()),
        };
        std::fs::write(group.dir.join(file), &value)
            .with_context(|| format!("writing {value} to {}", group.dir.join(file).display()))?;
        if version == Version::V2 {
            // No swap here, but say so anyway: the limit must bind on memory, not move it.
            let _ = std::fs::write(group.dir.join("memory.swap.max"), "0");
        }
        Ok(group)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// Moves process `pid` (all its threads, and the ones it starts later) into the group.
    pub fn add(&self, pid: u32) -> anyhow::Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .with_context(|| format!("moving {pid} into {}", self.dir.display()))
    }

    /// The members' memory now (anonymous and page cache), in bytes.
    pub fn current(&self) -> Option<u64> {
        let file = match self.version {
            Version::V2 => "memory.current",
            Version::V1 => "memory.usage_in_bytes",
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        eprintln!("warning: could not remove cgroup {}", self.dir.display());
    }
}

/// Where a child of our own group goes: v2 when `root` (a v2 mount) or its `unified`
/// sub-mount lists `memory` among its controllers, else v1's `memory` hierarchy.
fn place(proc_self_cgroup: &str, root: &Path) -> Option<(PathBuf, Version)> {
    let own = |hierarchy: &dyn Fn(&str) -> bool| {
        proc_self_cgroup.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            hierarchy(controllers).then(|| path.trim_start_matches('/').to_owned())
        })
    };
    let v2_path = own(&|c: &str| c.is_empty());
    for mount in [root.to_path_buf(), root.join("unified")] {
        let controllers = std::fs::read_to_string(mount.join("cgroup.controllers"));
        if let (Ok(c), Some(p)) = (controllers, &v2_path) {
            if c.split_whitespace().any(|c| c == "memory") {
                let parent = mount.join(p);
                // A v2 group holding processes cannot enable controllers for children;
                // only a parent that already delegates memory to its children works.
                let delegated = std::fs::read_to_string(parent.join("cgroup.subtree_control"))
                    .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"));
                if delegated {
                    return Some((parent, Version::V2));
                }
            }
        }
    }
    let v1 = root.join("memory");
    if v1.join("memory.limit_in_bytes").exists() {
        let p = own(&|c: &str| c.split(',').any(|c| c == "memory")).unwrap_or_default();
        return Some((v1.join(p), Version::V1));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_memory_hierarchy_places_the_group_under_our_own() {
        let dir = std::env::temp_dir().join(format!("weft-cgroup-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("memory")).unwrap();
        std::fs::create_dir_all(dir.join("unified")).unwrap();
        std::fs::write(dir.join("unified/cgroup.controllers"), "hugetlb\n").unwrap();
        std::fs::write(dir.join("memory/memory.limit_in_bytes"), "1\n").unwrap();
        let own = "4:memory:/jobs/abc\n1:cpu:/\n0::/\n";
        assert_eq!(
            place(own, &dir),
            Some((dir.join("memory/jobs/abc"), Version::V1))
        );
        // v2 with memory delegated to our group's children wins.
        std::fs::write(dir.join("unified/cgroup.controllers"), "cpu memory\n").unwrap();
        std::fs::create_dir_all(dir.join("unified/jobs")).unwrap();
        std::fs::write(dir.join("unified/jobs/cgroup.subtree_control"), "memory\n").unwrap();
        let own = "4:memory:/x\n0::/jobs\n";
        assert_eq!(
            place(own, &dir),
            Some((dir.join("unified/jobs"), Version::V2))
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(place(own, &dir), None);
    }
}
