//! [`File`] and [`OpenOptions`]: positioned reads and writes on every backend (see the module
//! docs of [`crate::fs`] for how each backend keeps a processor from stalling on the disk).

use crate::loom::{AtomicU64, Ordering};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;

use io_uring::{opcode, types::Fd};

use super::metadata::Metadata;
use crate::io::op;
use crate::io::IoBackend;

/// The longest single read or write handed to the kernel (what Linux transfers at most).
const MAX_IO_BYTES: usize = 0x7fff_f000;

/// Options for opening a file, like `std::fs::OpenOptions`.
#[derive(Debug, Clone)]
pub struct OpenOptions(std::fs::OpenOptions);

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions::new()
    }
}

impl OpenOptions {
    /// All options off.
    pub fn new() -> OpenOptions {
        OpenOptions(std::fs::OpenOptions::new())
    }

    /// Open for reading.
    pub fn read(&mut self, on: bool) -> &mut Self {
        self.0.read(on);
        self
    }

    /// Open for writing.
    pub fn write(&mut self, on: bool) -> &mut Self {
        self.0.write(on);
        self
    }

    /// Open in append mode.
    pub fn append(&mut self, on: bool) -> &mut Self {
        self.0.append(on);
        self
    }

    /// Truncate to 0 bytes on open.
    pub fn truncate(&mut self, on: bool) -> &mut Self {
        self.0.truncate(on);
        self
    }

    /// Create if missing.
    pub fn create(&mut self, on: bool) -> &mut Self {
        self.0.create(on);
        self
    }

    /// Create, failing if it exists.
    pub fn create_new(&mut self, on: bool) -> &mut Self {
        self.0.create_new(on);
        self
    }

    /// Opens `path` (on the blocking pool from a fiber: a path lookup may read the disk).
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let opts = self.0.clone();
        let path = path.as_ref().to_owned();
        crate::blocking(move || opts.open(path)).map(File::from)
    }
}

/// An open file, like `std::fs::File`, with positioned reads and writes that park the fiber
/// rather than its processor. `Read`, `Write` and `Seek` use a cursor kept in the `File`.
#[derive(Debug)]
pub struct File {
    fd: OwnedFd,
    /// The cursor `Read`, `Write` and `Seek` use (positioned calls ignore it).
    pos: AtomicU64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Rw {
    Read,
    Write,
}

fn result(r: i32) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::from_raw_os_error(-r))
    } else {
        Ok(r as usize)
    }
}

/// `pread`/`pwrite`, retried on `EINTR`; blocking.
///
/// # Safety
/// `ptr..ptr+len` is valid for the access `rw` makes.
unsafe fn rw_blocking(fd: i32, rw: Rw, ptr: *mut u8, len: usize, offset: u64) -> io::Result<usize> {
    loop {
        // SAFETY: forwarded from the caller.
        let r = unsafe {
            match rw {
                Rw::Read => libc::pread(fd, ptr.cast(), len, offset as i64),
                Rw::Write => libc::pwrite(fd, ptr.cast(), len, offset as i64),
            }
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `preadv2`/`pwritev2` with `RWF_NOWAIT`; `None` when the kernel would have to wait.
///
/// # Safety
/// As for [`rw_blocking`].
unsafe fn rw_nowait(
    fd: i32,
    rw: Rw,
    ptr: *mut u8,
    len: usize,
    offset: u64,
) -> Option<io::Result<usize>> {
    let iov = libc::iovec {
        iov_base: ptr.cast(),
        iov_len: len,
    };
    loop {
        // SAFETY: one iovec over the caller's buffer.
        let r = unsafe {
            match rw {
                Rw::Read => libc::preadv2(fd, &iov, 1, offset as i64, libc::RWF_NOWAIT),
                Rw::Write => libc::pwritev2(fd, &iov, 1, offset as i64, libc::RWF_NOWAIT),
            }
        };
        if r >= 0 {
            return Some(Ok(r as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN | libc::EOPNOTSUPP) => return None,
            _ => return Some(Err(e)),
        }
    }
}

impl File {
    /// Opens `path` read-only.
    pub fn open(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new().read(true).open(path)
    }

    /// Opens `path` write-only, creating it or truncating it.
    pub fn create(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }

    /// Options for opening a file.
    pub fn options() -> OpenOptions {
        OpenOptions::new()
    }

    fn rw_at(&self, rw: Rw, ptr: *mut u8, len: usize, offset: u64) -> io::Result<usize> {
        let fd = self.fd.as_raw_fd();
        let len = len.min(MAX_IO_BYTES);
        // SAFETY: the caller's buffer is borrowed for this whole call, which returns only once
        // the kernel is done with it.
        let uring = unsafe {
            op::on_uring(fd, None, || match rw {
                Rw::Read => opcode::Read::new(Fd(fd), ptr, len as u32)
                    .offset(offset)
                    .build(),
                Rw::Write => opcode::Write::new(Fd(fd), ptr, len as u32)
                    .offset(offset)
                    .build(),
            })
        };
        if let Some(r) = uring {
            return result(r?);
        }
        if crate::io::backend() == Some(IoBackend::Epoll) {
            if crate::fiber::current::is_cancelled() {
                return Err(op::cancelled());
            }
            // SAFETY: as above.
            if let Some(r) = unsafe { rw_nowait(fd, rw, ptr, len, offset) } {
                return r;
            }
            let addr = ptr as usize;
            // SAFETY: `blocking` returns only after the closure has run to completion (even if
            // the fiber is cancelled meanwhile), and `self` (the descriptor) and the buffer are
            // borrowed until then.
            return crate::blocking(move || unsafe {
                rw_blocking(fd, rw, addr as *mut u8, len, offset)
            });
        }
        // SAFETY: as above.
        unsafe { rw_blocking(fd, rw, ptr, len, offset) }
    }

    /// Reads up to `buf.len()` bytes at `offset`; 0 at the end of the file.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.rw_at(Rw::Read, buf.as_mut_ptr(), buf.len(), offset)
    }

    /// Writes up to `buf.len()` bytes at `offset`.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.rw_at(Rw::Write, buf.as_ptr().cast_mut(), buf.len(), offset)
    }

    /// Fills `buf` from `offset`; `UnexpectedEof` if the file ends first.
    pub fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "failed to fill whole buffer",
                    ))
                }
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    /// Writes all of `buf` at `offset`.
    pub fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, offset)? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    /// The file's metadata, from `statx(2)` (an io_uring `STATX` operation on uring).
    pub fn metadata(&self) -> io::Result<Metadata> {
        let fd = self.fd.as_raw_fd();
        let mut raw = Metadata::empty_raw();
        let buf = &mut raw as *mut libc::statx;
        let empty = c"".as_ptr();
        // SAFETY: `raw` and the path string outlive the call.
        let uring = unsafe {
            op::on_uring(fd, None, || {
                opcode::Statx::new(Fd(fd), empty, buf.cast())
                    .flags(libc::AT_EMPTY_PATH)
                    .mask(libc::STATX_BASIC_STATS)
                    .build()
            })
        };
        match uring {
            Some(r) => {
                result(r?)?;
            }
            None => {
                // SAFETY: as above.
                let r = unsafe {
                    libc::statx(fd, empty, libc::AT_EMPTY_PATH, libc::STATX_BASIC_STATS, buf)
                };
                if r < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(Metadata::from_raw(raw))
    }

    /// Flushes data and metadata to the device (`fsync`; on the ring or the blocking pool).
    pub fn sync_all(&self) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        // SAFETY: no pointers.
        if let Some(r) = unsafe { op::on_uring(fd, None, || opcode::Fsync::new(Fd(fd)).build()) } {
            return result(r?).map(drop);
        }
        crate::blocking(move || {
            // SAFETY: `fd` stays open: `self` is borrowed until `blocking` returns.
            if unsafe { libc::fsync(fd) } < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        })
    }
}

impl Read for &File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let pos = self.pos.load(Ordering::Relaxed);
        let n = self.read_at(buf, pos)?;
        self.pos.store(pos + n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl Write for &File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let pos = self.pos.load(Ordering::Relaxed);
        let n = self.write_at(buf, pos)?;
        self.pos.store(pos + n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for &File {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let base = match to {
            SeekFrom::Start(n) => {
                self.pos.store(n, Ordering::Relaxed);
                return Ok(n);
            }
            SeekFrom::Current(d) => (self.pos.load(Ordering::Relaxed), d),
            SeekFrom::End(d) => (self.metadata()?.len(), d),
        };
        let new = base.0.checked_add_signed(base.1).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "seek to a negative position")
        })?;
        self.pos.store(new, Ordering::Relaxed);
        Ok(new)
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        (&*self).seek(to)
    }
}

impl From<std::fs::File> for File {
    fn from(f: std::fs::File) -> File {
        File {
            fd: f.into(),
            pos: AtomicU64::new(0),
        }
    }
}

impl AsRawFd for File {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for File {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl IntoRawFd for File {
    fn into_raw_fd(self) -> RawFd {
        self.fd.into_raw_fd()
    }
}

impl FromRawFd for File {
    unsafe fn from_raw_fd(fd: RawFd) -> File {
        // SAFETY: forwarded from the caller: `fd` is an open descriptor we now own.
        File::from(unsafe { std::fs::File::from_raw_fd(fd) })
    }
}
