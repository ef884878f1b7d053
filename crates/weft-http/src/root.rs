//! The served directory, and opening paths below it with no way out.
//!
//! Invariant: [`Root::open`] only returns files whose resolved path is below the root (unless
//! the operator allowed symlinks to leave it). It asks the kernel to enforce that with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` — one system call, no race. That flag
//! also refuses absolute symlinks and symlinks that climb out with `..` (`EXDEV`); those paths
//! are then resolved with `realpath` and served only if the result is still below the root,
//! so a symlink that stays inside the tree works however it is spelt. Kernels without
//! `openat2` (before 5.6, or filtered by seccomp) take that second route for every path.
//!
//! Every call here may touch the disk (directory lookups): callers run them on the blocking
//! pool.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Why a path could not be opened, in the terms a response needs.
#[derive(Debug)]
pub enum OpenError {
    /// No such file (or a non-directory in the middle, or a name too long): 404.
    NotFound,
    /// Permission denied, or the path leaves the root: 403.
    Forbidden,
    /// Anything else: 500.
    Other(io::Error),
}

impl OpenError {
    /// Classifies an errno the way nginx's static module does.
    pub fn from_io(e: io::Error) -> OpenError {
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG) => OpenError::NotFound,
            Some(libc::EACCES | libc::EPERM | libc::EXDEV | libc::ELOOP) => OpenError::Forbidden,
            _ => OpenError::Other(e),
        }
    }

    /// The response status.
    pub fn status(&self) -> u16 {
        match self {
            OpenError::NotFound => 404,
            OpenError::Forbidden => 403,
            OpenError::Other(_) => 500,
        }
    }
}

/// The served directory.
#[derive(Debug)]
pub struct Root {
    /// The directory, opened once (`O_PATH`); every lookup starts here.
    dir: OwnedFd,
    /// Its canonical path, for the `realpath` route.
    canonical: PathBuf,
    /// Cleared when the kernel refuses `openat2` itself (not a path), so it is not tried again.
    openat2_works: AtomicBool,
    /// Whether symlinks may point outside the root (off by default).
    symlinks_may_leave_root: bool,
}

/// `RESOLVE_NO_MAGICLINKS` from `<linux/openat2.h>` (`/proc/self/fd/N`-style links).
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;

impl Root {
    /// Opens `path`, which must be a readable directory; the error says which check failed.
    pub fn new(path: &Path, symlinks_may_leave_root: bool) -> io::Result<Root> {
        let canonical = std::fs::canonicalize(path)
            .map_err(|e| io::Error::new(e.kind(), format!("root {}: {e}", path.display())))?;
        let meta = std::fs::metadata(&canonical)?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("root {} is not a directory", path.display()),
            ));
        }
        std::fs::read_dir(&canonical).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("root {} cannot be read: {e}", path.display()),
            )
        })?;
        let c = CString::new(canonical.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "root path has a NUL"))?;
        // SAFETY: `c` is a valid C string; the result is checked.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Root {
            // SAFETY: `open` just returned this descriptor and nothing else owns it.
            dir: unsafe { OwnedFd::from_raw_fd(fd) },
            canonical,
            openat2_works: AtomicBool::new(true),
            symlinks_may_leave_root,
        })
    }

    /// The root's canonical path.
    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Opens `relative` (a normalised path with no `..`, see `target.rs`; empty for the root)
    /// read-only, refusing paths that resolve outside the root. Blocking.
    pub fn open(&self, relative: &[u8]) -> Result<File, OpenError> {
        let relative: &[u8] = if relative.is_empty() { b"." } else { relative };
        let c = CString::new(relative).map_err(|_| OpenError::NotFound)?;
        if self.symlinks_may_leave_root {
            return self.openat(&c);
        }
        if self.openat2_works.load(Ordering::Relaxed) {
            match self.openat2_beneath(&c) {
                Ok(f) => return Ok(f),
                Err(e) => match e.raw_os_error() {
                    // A symlink that is absolute or climbs with `..`: check where it lands.
                    Some(libc::EXDEV) => {}
                    // The kernel refused the call itself.
                    Some(libc::ENOSYS | libc::E2BIG) => {
                        self.openat2_works.store(false, Ordering::Relaxed);
                    }
                    Some(libc::EAGAIN) => {}
                    _ => return Err(OpenError::from_io(e)),
                },
            }
        }
        self.open_by_realpath(relative)
    }

    /// `openat(root, path)`: follows symlinks anywhere.
    fn openat(&self, c: &CString) -> Result<File, OpenError> {
        // SAFETY: valid descriptor and C string; the result is checked.
        let fd = unsafe { libc::openat(self.dir.as_raw_fd(), c.as_ptr(), open_flags() as i32) };
        if fd < 0 {
            return Err(OpenError::from_io(io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nothing else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    fn openat2_beneath(&self, c: &CString) -> io::Result<File> {
        // SAFETY: `open_how` is plain integers; all-zero is valid (mode 0, no flags).
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = open_flags();
        how.resolve = libc::RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
        loop {
            // SAFETY: `how` and `c` outlive the call; the size matches the struct passed.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    self.dir.as_raw_fd(),
                    c.as_ptr(),
                    &how as *const libc::open_how,
                    std::mem::size_of::<libc::open_how>(),
                )
            };
            if fd >= 0 {
                // SAFETY: a fresh descriptor nothing else owns.
                return Ok(unsafe { File::from_raw_fd(fd as i32) });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Resolves every symlink, checks the result is below the root, opens it.
    fn open_by_realpath(&self, relative: &[u8]) -> Result<File, OpenError> {
        let joined = self.canonical.join(OsStr::from_bytes(relative));
        let resolved = std::fs::canonicalize(&joined).map_err(OpenError::from_io)?;
        if !resolved.starts_with(&self.canonical) {
            return Err(OpenError::Forbidden);
        }
        let c = CString::new(resolved.as_os_str().as_bytes()).map_err(|_| OpenError::NotFound)?;
        // The resolved path has no symlinks left; O_NOFOLLOW refuses one swapped in since.
        // SAFETY: valid C string; the result is checked.
        let fd = unsafe { libc::open(c.as_ptr(), open_flags() as i32 | libc::O_NOFOLLOW) };
        if fd < 0 {
            return Err(OpenError::from_io(io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nothing else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// `fstatat` of `relative` below the root, following symlinks (used to notice that a
    /// cached path now names another file; the reopen then checks containment again).
    /// Non-blocking in practice: the dentries of a served path are cached.
    pub fn stat(&self, relative: &[u8]) -> io::Result<libc::stat> {
        let relative: &[u8] = if relative.is_empty() { b"." } else { relative };
        with_c_path(relative, |c| {
            // SAFETY: an all-zero `stat` is valid storage for the kernel to fill.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: valid descriptor, C string and out-pointer.
            let r = unsafe { libc::fstatat(self.dir.as_raw_fd(), c.as_ptr(), &mut st, 0) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(st)
        })
    }
}

/// Paths up to this long become C strings on the stack (one revalidation a second a path
/// served, on the processor: no allocation for it).
const STACK_PATH_BYTES: usize = 512;

/// Runs `f` with `path` as a C string: on the stack when it is short, else allocated. A NUL
/// in `path` is an `InvalidInput` error (a target never holds one, see `target.rs`).
fn with_c_path<T>(path: &[u8], f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
    let nul = || io::Error::new(io::ErrorKind::InvalidInput, "NUL in path");
    if path.len() < STACK_PATH_BYTES {
        let mut stack = [0u8; STACK_PATH_BYTES];
        stack[..path.len()].copy_from_slice(path);
        let c = CStr::from_bytes_with_nul(&stack[..=path.len()]).map_err(|_| nul())?;
        f(c)
    } else {
        f(&CString::new(path).map_err(|_| nul())?)
    }
}

/// Read-only, close-on-exec, and non-blocking so that opening a FIFO cannot hang.
fn open_flags() -> u64 {
    (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, tempfile::TempDir) {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        std::fs::write(root.path().join("d/f"), b"f").unwrap();
        symlink("d/f", root.path().join("rel_inside")).unwrap();
        symlink(root.path().join("d/f"), root.path().join("abs_inside")).unwrap();
        symlink("../d/f", root.path().join("d/up_inside")).unwrap();
        symlink(outside.path().join("secret"), root.path().join("abs_out")).unwrap();
        symlink("../../../../../../../../tmp", root.path().join("rel_out")).unwrap();
        (root, outside)
    }

    #[test]
    fn opens_inside_refuses_outside() {
        let (dir, _outside) = tree();
        let root = Root::new(dir.path(), false).unwrap();
        for ok in ["d/f", "rel_inside", "abs_inside", "d/up_inside", "d", ""] {
            assert!(root.open(ok.as_bytes()).is_ok(), "{ok}");
        }
        for refused in ["abs_out", "rel_out"] {
            assert!(
                matches!(root.open(refused.as_bytes()), Err(OpenError::Forbidden)),
                "{refused}"
            );
        }
        assert!(matches!(root.open(b"nope"), Err(OpenError::NotFound)));
        assert!(matches!(root.open(b"d/f/x"), Err(OpenError::NotFound)));
    }

    #[test]
    fn stat_names_the_file_without_allocating_for_a_short_path() {
        let (dir, _outside) = tree();
        let root = Root::new(dir.path(), false).unwrap();
        let want = std::fs::metadata(dir.path().join("d/f")).unwrap();
        let mut st = None;
        let n = crate::alloc_count::allocations_in(|| st = Some(root.stat(b"d/f").unwrap()));
        assert_eq!(n, 0);
        use std::os::unix::fs::MetadataExt;
        assert_eq!(st.unwrap().st_ino, want.ino());
        assert_eq!(
            root.stat(b"").unwrap().st_ino,
            std::fs::metadata(dir.path()).unwrap().ino()
        );
        // A long path takes the allocating route and means the same; a NUL is refused.
        let long = format!("d/{}f", "./".repeat(STACK_PATH_BYTES));
        assert_eq!(root.stat(long.as_bytes()).unwrap().st_ino, want.ino());
        for bad in [&b"d/f"[..], &[b'a'; STACK_PATH_BYTES + 3][..]] {
            let mut bad = bad.to_vec();
            bad[1] = 0;
            let e = root.stat(&bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn realpath_route_agrees() {
        let (dir, _outside) = tree();
        let root = Root::new(dir.path(), false).unwrap();
        root.openat2_works.store(false, Ordering::Relaxed);
        assert!(root.open(b"abs_inside").is_ok());
        assert!(matches!(root.open(b"abs_out"), Err(OpenError::Forbidden)));
    }

    #[test]
    fn symlinks_may_leave_when_allowed() {
        let (dir, _outside) = tree();
        let root = Root::new(dir.path(), true).unwrap();
        assert!(root.open(b"abs_out").is_ok());
    }

    #[test]
    fn bad_roots_say_why() {
        let e = Root::new(Path::new("/nonexistent/weft"), false).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/weft"), "{e}");
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = Root::new(f.path(), false).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
    }
}
