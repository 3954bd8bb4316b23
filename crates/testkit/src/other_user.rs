//! Another user of the same machine, for real: a process running as uid 65534 (`nobody`), which
//! is what an attacker sharing the host is to the kernel. Only root can start one; as anyone
//! else the helpers answer `None` and the caller says why it skipped that part.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// The uid the other user's processes run as.
pub const OTHER_UID: u32 = 65534;

/// A TCP listener another user holds on 127.0.0.1: it accepts every connection and keeps every
/// byte it is sent, which [`ForeignListener::received`] hands back after stopping it.
pub struct ForeignListener {
    child: Child,
    pub port: u16,
}

/// The listener, in Python (the system's, which any user may run): print the port, then take
/// each connection's bytes until it closes or is quiet for two seconds, writing them out.
const LISTENER: &str = r#"
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(2)
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            sys.stdout.buffer.write(b)
            sys.stdout.buffer.flush()
    except Exception:
        pass
    c.close()
"#;

impl ForeignListener {
    /// Binds 127.0.0.1:`port` (0: any free port) as [`OTHER_UID`]; `Err` with the reason when
    /// this process cannot start another user's process (not root, no `/usr/bin/python3`).
    pub fn start(port: u16) -> Result<ForeignListener, String> {
        let me = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| format!("id -u: {e}"))?;
        if String::from_utf8_lossy(&me.stdout).trim() != "0" {
            return Err("only root can run a process as another user".into());
        }
        let python = "/usr/bin/python3";
        if !std::path::Path::new(python).exists() {
            return Err(format!("{python} is missing"));
        }
        let mut child = Command::new(python)
            .args(["-I", "-c", LISTENER, &port.to_string()])
            .current_dir("/")
            .env_clear()
            .uid(OTHER_UID)
            .gid(OTHER_UID)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {python} as uid {OTHER_UID}: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut reader = BufReader::new(stdout);
        let mut first = String::new();
        reader
            .read_line(&mut first)
            .expect("the listener's port line");
        let port = first
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the listener did not print a port: {first:?}"));
        child.stdout = Some(reader.into_inner());
        Ok(ForeignListener { child, port })
    }

    /// Stops the listener and hands back every byte it received.
    pub fn received(mut self) -> Vec<u8> {
        let _ = self.child.kill();
        let mut out = Vec::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            let _ = stdout.read_to_end(&mut out);
        }
        let _ = self.child.wait();
        out
    }
}

impl Drop for ForeignListener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
