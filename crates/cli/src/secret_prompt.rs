//! The terminal while `source add NAME --secret` reads a key with echo off.
//!
//! rpassword turns echo, line editing and the terminal's own Ctrl-C off for the prompt and puts
//! them back when it returns; but a typed Ctrl-C makes it raise SIGINT *before* it puts them
//! back, and a SIGINT, SIGTERM, SIGHUP or SIGQUIT from elsewhere ends the process where it
//! stands. Either way the process died and left the user's terminal silent: what they type next
//! at their shell (the key again, another secret) is not shown to them, and typed believing the
//! prompt is still up it goes to the shell. [`TerminalKept`] holds the terminal's modes from
//! before the prompt and, while the prompt is up, catches those signals to put them back, say
//! so in a fixed line and exit with the shell's code for the signal (130 for SIGINT).

use std::io;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The signals that end a process at a prompt: Ctrl-C (raised by rpassword, or sent), `kill`'s
/// default, the terminal hanging up, Ctrl-\ sent.
const ENDING: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// What the handler says, whatever the signal: fixed, nothing of what was typed.
const SAID: &[u8] =
    b"\nsecret not read: interrupted (nothing was stored; the terminal is as it was)\n";

/// The terminal's modes from before the prompt, for the handler: a pointer, since a signal
/// handler may only read what one atomic load gives it (no lock, no allocation). Set before any
/// handler is installed and never freed (one `termios` per prompt, a few dozen bytes), so a
/// handler running on another thread while the prompt ends never reads freed memory.
static BEFORE: AtomicPtr<libc::termios> = AtomicPtr::new(std::ptr::null_mut());

/// While alive, a signal in [`ENDING`] puts the terminal on standard input back as it was when
/// this was made, writes [`SAID`] to stderr and exits 128 + the signal. Dropped, the previous
/// handlers are back.
pub(crate) struct TerminalKept {
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

impl TerminalKept {
    /// Reads standard input's terminal modes and installs the handlers. An error (standard input
    /// is no terminal, a handler could not be installed) leaves every handler as it was.
    pub(crate) fn new() -> io::Result<TerminalKept> {
        // SAFETY: `termios` is plain data; tcgetattr fills it or fails, and it is read only on
        // success.
        let mut modes: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut modes) } != 0 {
            return Err(io::Error::last_os_error());
        }
        BEFORE.store(Box::into_raw(Box::new(modes)), Ordering::SeqCst);
        let mut kept = TerminalKept {
            previous: Vec::new(),
        };
        for signal in ENDING {
            // SAFETY: a zeroed sigaction is a valid one (no flags, empty mask) before the
            // handler is set; `put_back` is async-signal-safe (see there).
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = put_back as extern "C" fn(libc::c_int) as libc::sighandler_t;
            let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
            unsafe { libc::sigemptyset(&mut action.sa_mask) };
            if unsafe { libc::sigaction(signal, &action, &mut previous) } != 0 {
                // Dropping `kept` puts back the ones already installed.
                return Err(io::Error::last_os_error());
            }
            kept.previous.push((signal, previous));
        }
        Ok(kept)
    }
}

impl Drop for TerminalKept {
    fn drop(&mut self) {
        for (signal, previous) in &self.previous {
            // SAFETY: `previous` is what sigaction returned for this signal.
            unsafe { libc::sigaction(*signal, previous, std::ptr::null_mut()) };
        }
    }
}

/// The handler: only async-signal-safe calls (tcsetattr, write, _exit), on the modes stored
/// before it was installed. `_exit`, not `exit`: no destructor or buffered stream runs in a
/// handler, and nothing was sent to the node yet, so nothing is left half done.
extern "C" fn put_back(signal: libc::c_int) {
    let before = BEFORE.load(Ordering::SeqCst);
    // SAFETY: `before` is null or a `termios` never freed (see `BEFORE`); SAID is static.
    unsafe {
        if !before.is_null() {
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, before);
        }
        libc::write(libc::STDERR_FILENO, SAID.as_ptr().cast(), SAID.len());
        libc::_exit(128 + signal);
    }
}
