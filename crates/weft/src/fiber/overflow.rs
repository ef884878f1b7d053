//! Reporting a fiber's stack overflow as what it is, with the fiber's name.
//!
//! A fiber that runs off its stack touches the guard page and gets `SIGSEGV`. Rust's own handler
//! only knows thread stacks, so it would report a plain segmentation fault. This module installs
//! a handler (once, on its own alternate signal stack per processor thread) that checks whether
//! the faulting address lies in the guard page of the fiber running on this thread; if so it
//! writes `fiber '<name>' (id N) has overflowed its stack` to stderr and aborts. Any other fault
//! goes to the handler that was there before (Rust's, or the default action).
//!
//! Everything the handler touches is async-signal-safe: the processor's const-initialised
//! thread-local `RUNNING` (no destructor), the running fiber's record (alive: it is the one that
//! faulted), `write(2)` and `abort(3)`.

use std::mem::MaybeUninit;
use std::sync::Once;

static INSTALL: Once = Once::new();
static mut PREVIOUS_SEGV: MaybeUninit<libc::sigaction> = MaybeUninit::uninit();
static mut PREVIOUS_BUS: MaybeUninit<libc::sigaction> = MaybeUninit::uninit();

/// Installs the handler for the process (first call only).
pub(crate) fn install_handler() {
    INSTALL.call_once(|| {
        // SAFETY: sigaction with a zeroed struct plus handler and flags is the documented way to
        // install a handler; PREVIOUS_* are written here, once, before the handler can run, and
        // only read by the handler afterwards.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(
                libc::SIGSEGV,
                &action,
                (*std::ptr::addr_of_mut!(PREVIOUS_SEGV)).as_mut_ptr(),
            );
            libc::sigaction(
                libc::SIGBUS,
                &action,
                (*std::ptr::addr_of_mut!(PREVIOUS_BUS)).as_mut_ptr(),
            );
        }
    });
}

/// An alternate signal stack for the current thread, so the handler can run after the fiber
/// stack is exhausted. Dropping it removes it.
pub(crate) struct AltStack {
    mapping: Option<(usize, usize)>,
}

impl AltStack {
    /// Sets one up unless the thread already has one (Rust gives its threads one).
    pub(crate) fn ensure() -> AltStack {
        const SIZE: usize = 64 * 1024;
        // SAFETY: querying the current alternate stack with a null new-stack pointer only writes
        // into `old`.
        let has_one = unsafe {
            let mut old: libc::stack_t = std::mem::zeroed();
            libc::sigaltstack(std::ptr::null(), &mut old) == 0
                && old.ss_flags & libc::SS_DISABLE == 0
        };
        if has_one {
            return AltStack { mapping: None };
        }
        // SAFETY: a fresh anonymous mapping becomes this thread's alternate signal stack; it is
        // unregistered before it is unmapped (Drop).
        unsafe {
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if ptr == libc::MAP_FAILED {
                return AltStack { mapping: None };
            }
            let stack = libc::stack_t {
                ss_sp: ptr,
                ss_flags: 0,
                ss_size: SIZE,
            };
            libc::sigaltstack(&stack, std::ptr::null_mut());
            AltStack {
                mapping: Some((ptr as usize, SIZE)),
            }
        }
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        if let Some((ptr, len)) = self.mapping {
            // SAFETY: disable the alternate stack this value registered, then unmap it; the
            // thread is not running a signal handler on it (we are in ordinary code).
            unsafe {
                let disable = libc::stack_t {
                    ss_sp: std::ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                libc::sigaltstack(&disable, std::ptr::null_mut());
                libc::munmap(ptr as *mut libc::c_void, len);
            }
        }
    }
}

fn write_stderr(bytes: &[u8]) {
    // SAFETY: write(2) on fd 2 with a valid buffer is async-signal-safe.
    unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
}

fn write_number(mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    write_stderr(&buf[i..]);
}

extern "C" fn handler(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let address = unsafe { (*info).si_addr() } as usize;
    let running = crate::fiber::current::current_fiber_ptr();
    // SAFETY: a non-null RUNNING is the fiber resumed on this thread, alive while it runs (and
    // it is running: this fault interrupted it or the processor code around it).
    if let Some(fiber) = unsafe { running.as_ref() } {
        let (low, high) = fiber.guard;
        if address >= low && address < high {
            write_stderr(b"\nfiber '");
            match fiber.name.as_deref() {
                Some(name) => write_stderr(name.as_bytes()),
                None => write_stderr(b"<unnamed>"),
            }
            write_stderr(b"' (id ");
            write_number(fiber.id);
            write_stderr(b") has overflowed its stack (");
            write_number(fiber.stack_size as u64);
            write_stderr(
                b" bytes; raise it with weft::Builder::stack_size)\nfatal runtime error: stack overflow\n",
            );
            // SAFETY: abort is async-signal-safe.
            unsafe { libc::abort() };
        }
    }
    // Not ours: hand over to what was installed before.
    // SAFETY: PREVIOUS_* were written by install_handler before this handler was installed.
    unsafe {
        let previous = if signal == libc::SIGBUS {
            (*std::ptr::addr_of!(PREVIOUS_BUS)).assume_init_ref()
        } else {
            (*std::ptr::addr_of!(PREVIOUS_SEGV)).assume_init_ref()
        };
        let h = previous.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            // Restore the default action and return: the faulting instruction runs again and
            // the kernel delivers the signal with its default effect.
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(h);
            f(signal, info, context);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
            f(signal);
        }
    }
}
