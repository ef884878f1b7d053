//! [`Metadata`]: what `statx(2)` says about an open file.

use std::io;
use std::time::{Duration, SystemTime};

/// Metadata of an open file, from `statx(2)` (`STATX_BASIC_STATS`).
#[derive(Clone, Copy)]
pub struct Metadata {
    raw: libc::statx,
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metadata")
            .field("len", &self.len())
            .field("mode", &format_args!("{:o}", self.mode()))
            .field("ino", &self.ino())
            .finish()
    }
}

fn time(ts: &libc::statx_timestamp) -> SystemTime {
    let since = Duration::new(ts.tv_sec.unsigned_abs(), ts.tv_nsec);
    if ts.tv_sec >= 0 {
        SystemTime::UNIX_EPOCH + since
    } else {
        SystemTime::UNIX_EPOCH - since
    }
}

impl Metadata {
    pub(crate) fn from_raw(raw: libc::statx) -> Metadata {
        Metadata { raw }
    }

    /// A zeroed buffer for the kernel to fill.
    pub(crate) fn empty_raw() -> libc::statx {
        // SAFETY: `statx` is plain integers; all-zero is a valid value.
        unsafe { std::mem::zeroed() }
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.raw.stx_size
    }

    /// Whether the size is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it is a regular file.
    pub fn is_file(&self) -> bool {
        u32::from(self.raw.stx_mode) & libc::S_IFMT == libc::S_IFREG
    }

    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        u32::from(self.raw.stx_mode) & libc::S_IFMT == libc::S_IFDIR
    }

    /// The full `st_mode` (type and permission bits).
    pub fn mode(&self) -> u32 {
        u32::from(self.raw.stx_mode)
    }

    /// Inode number.
    pub fn ino(&self) -> u64 {
        self.raw.stx_ino
    }

    /// Number of hard links.
    pub fn nlink(&self) -> u32 {
        self.raw.stx_nlink
    }

    /// 512-byte blocks allocated.
    pub fn blocks(&self) -> u64 {
        self.raw.stx_blocks
    }

    /// Last modification time.
    pub fn modified(&self) -> io::Result<SystemTime> {
        Ok(time(&self.raw.stx_mtime))
    }

    /// Last access time.
    pub fn accessed(&self) -> io::Result<SystemTime> {
        Ok(time(&self.raw.stx_atime))
    }
}
