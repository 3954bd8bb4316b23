//! Who holds a loopback provider's port (audit 32 A32-2).
//!
//! A loopback TCP port is not this user's: any user of the machine binds an unprivileged port
//! that is free (Ollama's 127.0.0.1:11434 while Ollama is stopped, any `--provider-url` port),
//! and would then read the whole prompt a box sends there — the skill body, the caller's
//! request and staked sources — and write the answer the caller gets. So before every request
//! to a loopback provider the box reads the kernel's socket tables (`/proc/net/tcp` and
//! `/proc/net/tcp6`, this process's network namespace) and sends only when every socket
//! listening where the request could land belongs to the box's own user or root, and at least
//! one does (an address one of ours holds cannot be bound by another user, so a listener that
//! appears between the check and the connect would have to replace ours). A port held by
//! another uid fails the run `unavailable` with nothing sent; tables that cannot be read fail
//! closed the same way (no `/proc`: a loopback provider cannot be used).
//!
//! Parsing is pure ([`parse_line`], [`judge`]) and tested on its own; only [`check`] reads.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use reqwest::Url;

use crate::ProviderError;

/// The kernel's `TCP_LISTEN` state as `/proc/net/tcp` prints it (`0A`).
const TCP_LISTEN: u8 = 0x0A;

/// One row of `/proc/net/tcp{,6}`: the socket's local address and port, its state, its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketRow {
    pub addr: IpAddr,
    pub port: u16,
    pub state: u8,
    pub uid: u32,
}

/// One line of `/proc/net/tcp` or `/proc/net/tcp6` as a [`SocketRow`]; `None` for the header
/// and for anything not shaped like a row (never a panic, whatever the line). The address is
/// printed as the kernel holds it, 32-bit words in this machine's byte order, so it is read back
/// with the same order.
pub fn parse_line(line: &str) -> Option<SocketRow> {
    let mut fields = line.split_ascii_whitespace();
    let slot = fields.next()?;
    if !slot.ends_with(':') || slot[..slot.len() - 1].parse::<u64>().is_err() {
        return None;
    }
    let local = fields.next()?;
    let _remote = fields.next()?;
    let state = u8::from_str_radix(fields.next()?, 16).ok()?;
    // tx_queue:rx_queue, tr:tm->when, retrnsmt, then the uid.
    let uid = fields.nth(3)?.parse::<u32>().ok()?;
    let (addr, port) = local.split_once(':')?;
    if port.len() != 4 {
        return None;
    }
    let port = u16::from_str_radix(port, 16).ok()?;
    let addr = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(addr)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(addr.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketRow {
        addr,
        port,
        state,
        uid,
    })
}

/// Eight hex digits, a 32-bit word the kernel printed in this machine's byte order, as the
/// bytes it holds in memory (network order for an address).
fn word(hex: &str) -> Option<[u8; 4]> {
    if hex.len() != 8 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes)
}

/// Where a request to the provider's host could land: the host's own address, or (for a name
/// such as `localhost`, which may resolve to either family) any loopback address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Ip(IpAddr),
    AnyLoopback,
}

impl Target {
    /// Whether a socket listening on `addr` could accept a connection to this target: the same
    /// address, a wildcard (`0.0.0.0`, `::`, which also takes IPv4 unless v6-only), or an
    /// IPv4-mapped form of either.
    fn reached_by(self, addr: IpAddr) -> bool {
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        if addr.is_unspecified() {
            return true;
        }
        match self {
            Target::Ip(ip) => ip == addr,
            Target::AnyLoopback => addr.is_loopback(),
        }
    }
}

/// Who holds the port, as far as a request to it is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// Every socket listening where the request could land is `me`'s or root's, and there is one.
    Ours,
    /// A socket listening where the request could land belongs to this other uid.
    Another(u32),
    /// Nothing listens there (the connection would be refused).
    Nobody,
}

/// The [`Holder`] of `port` at `target` from the rows of both tables, for the user `me`.
pub fn judge(
    rows: impl IntoIterator<Item = SocketRow>,
    target: Target,
    port: u16,
    me: u32,
) -> Holder {
    let mut ours = false;
    for row in rows {
        if row.state != TCP_LISTEN || row.port != port || !target.reached_by(row.addr) {
            continue;
        }
        if row.uid != me && row.uid != 0 {
            return Holder::Another(row.uid);
        }
        ours = true;
    }
    if ours { Holder::Ours } else { Holder::Nobody }
}

/// Refuses a request to the loopback base URL `base` of `provider` unless its port is held by
/// this user or root (see the module's words). Not loopback: nothing to check.
pub(crate) fn check(provider: &str, base: &Url) -> Result<(), ProviderError> {
    if !crate::http::is_loopback(base) {
        return Ok(());
    }
    let Some(port) = base.port_or_known_default() else {
        return Err(ProviderError::Config(
            "a loopback base URL without a port".into(),
        ));
    };
    let host = base.host_str().unwrap_or_default();
    let target = match host.trim_start_matches('[').trim_end_matches(']').parse() {
        Ok(ip) => Target::Ip(ip),
        Err(_) => Target::AnyLoopback,
    };
    let mut rows = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        match std::fs::read_to_string(table) {
            Ok(text) => rows.extend(text.lines().filter_map(parse_line)),
            // No IPv6 in this kernel: no IPv6 socket can hold the port either.
            Err(e) if table.ends_with('6') && e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => {
                tracing::warn!(
                    provider,
                    port,
                    "the loopback provider's port owner cannot be read from /proc/net: nothing was sent"
                );
                return Err(ProviderError::Unavailable(format!(
                    "cannot tell which user holds the loopback port {port} of provider \
                     {provider} ({table} is unreadable), so nothing was sent: a loopback \
                     provider is used only where the box can see that its own user holds the port"
                )));
            }
        }
    }
    match judge(rows, target, port, this_user()) {
        Holder::Ours => Ok(()),
        Holder::Another(uid) => {
            tracing::warn!(
                provider,
                port,
                uid,
                "a loopback provider's port is held by another user of this machine: nothing was sent"
            );
            Err(ProviderError::Unavailable(format!(
                "the loopback port {port} of provider {provider} is held by another user of this \
                 machine (uid {uid}), who would read the prompt: nothing was sent"
            )))
        }
        // What connecting would have said, without connecting: a listener appearing now could
        // be anyone's.
        Holder::Nobody => Err(ProviderError::Transport(format!(
            "nothing listens on the loopback port {port} of provider {provider}"
        ))),
    }
}

fn this_user() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";

    /// A row as this machine's kernel prints it (words in native byte order).
    fn row4(addr: Ipv4Addr, port: u16, state: u8, uid: u32) -> String {
        format!(
            "   3: {:08X}:{port:04X} 00000000:0000 {state:02X} 00000000:00000000 00:00000000 00000000 {uid:>6}        0 94 1 000000001d83b42d 100 0 0 10 0",
            u32::from_ne_bytes(addr.octets())
        )
    }

    fn row6(addr: Ipv6Addr, port: u16, state: u8, uid: u32) -> String {
        let hex: String = addr
            .octets()
            .chunks_exact(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect();
        format!(
            "   0: {hex}:{port:04X} 00000000000000000000000000000000:0000 {state:02X} 00000000:00000000 00:00000000 00000000  {uid}        0 1234 1 0000000000000000 100 0 0 10 0"
        )
    }

    #[test]
    fn rows_of_both_tables_parse_and_the_header_does_not() {
        assert_eq!(parse_line(HEADER), None);
        let r = parse_line(&row4(Ipv4Addr::LOCALHOST, 11434, 0x0A, 1001)).expect("v4 row");
        assert_eq!(
            r,
            SocketRow {
                addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
                port: 11434,
                state: 0x0A,
                uid: 1001
            }
        );
        let r = parse_line(&row6(Ipv6Addr::LOCALHOST, 8000, 0x01, 0)).expect("v6 row");
        assert_eq!(r.addr, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!((r.port, r.state, r.uid), (8000, 1, 0));
    }

    /// A line the kernel of a little-endian machine wrote, as it wrote it.
    #[cfg(target_endian = "little")]
    #[test]
    fn a_real_little_endian_line_reads_as_127_0_0_1() {
        let line = "   1: 0100007F:2CAA 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 5512 1 0000000000000000 100 0 0 10 0";
        let r = parse_line(line).expect("row");
        assert_eq!(r.addr, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!((r.port, r.state, r.uid), (11434, TCP_LISTEN, 1001));
    }

    #[test]
    fn the_port_is_ours_only_when_every_listener_there_is_ours_or_roots() {
        const ME: u32 = 1000;
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let t = Target::Ip(lo);
        let rows = |lines: &[String]| -> Vec<SocketRow> {
            lines.iter().filter_map(|l| parse_line(l)).collect()
        };
        let mine = row4(Ipv4Addr::LOCALHOST, 11434, TCP_LISTEN, ME);
        let roots = row4(Ipv4Addr::LOCALHOST, 11434, TCP_LISTEN, 0);
        let theirs = row4(Ipv4Addr::LOCALHOST, 11434, TCP_LISTEN, 1001);
        assert_eq!(
            judge(rows(std::slice::from_ref(&mine)), t, 11434, ME),
            Holder::Ours
        );
        assert_eq!(judge(rows(&[roots]), t, 11434, ME), Holder::Ours);
        assert_eq!(
            judge(rows(std::slice::from_ref(&theirs)), t, 11434, ME),
            Holder::Another(1001)
        );
        assert_eq!(
            judge(rows(&[mine.clone(), theirs]), t, 11434, ME),
            Holder::Another(1001)
        );
        assert_eq!(judge(rows(&[]), t, 11434, ME), Holder::Nobody);
        // Another port, a connection rather than a listener, another loopback address: not
        // where the request lands.
        let elsewhere = [
            row4(Ipv4Addr::LOCALHOST, 11435, TCP_LISTEN, 1001),
            row4(Ipv4Addr::LOCALHOST, 11434, 0x01, 1001),
            row4(Ipv4Addr::new(127, 0, 0, 2), 11434, TCP_LISTEN, 1001),
            row6(Ipv6Addr::LOCALHOST, 11434, TCP_LISTEN, 1001),
        ];
        assert_eq!(judge(rows(&elsewhere), t, 11434, ME), Holder::Nobody);
        // A wildcard listener (either family) or a v4-mapped one takes 127.0.0.1's connections.
        for wide in [
            row4(Ipv4Addr::UNSPECIFIED, 11434, TCP_LISTEN, 1001),
            row6(Ipv6Addr::UNSPECIFIED, 11434, TCP_LISTEN, 1001),
            row6(
                Ipv4Addr::LOCALHOST.to_ipv6_mapped(),
                11434,
                TCP_LISTEN,
                1001,
            ),
        ] {
            assert_eq!(
                judge(rows(&[mine.clone(), wide.clone()]), t, 11434, ME),
                Holder::Another(1001),
                "{wide}"
            );
        }
        // `localhost` may resolve to ::1 or 127.x: any loopback listener counts.
        let v6 = rows(&[row6(Ipv6Addr::LOCALHOST, 11434, TCP_LISTEN, 1001)]);
        assert_eq!(
            judge(v6.clone(), Target::AnyLoopback, 11434, ME),
            Holder::Another(1001)
        );
        assert_eq!(
            judge(v6, Target::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)), 11434, ME),
            Holder::Another(1001)
        );
    }

    #[test]
    fn a_url_elsewhere_is_not_checked_and_a_port_nobody_holds_is_not_sent_to() {
        let remote = Url::parse("https://api.openai.com/v1/").expect("url");
        check("openai", &remote).expect("not loopback: nothing to check");
        // A port of ours just let go: nobody listens there.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let url = Url::parse(&format!("http://127.0.0.1:{port}/v1/")).expect("url");
        assert!(matches!(
            check("ollama", &url),
            Err(ProviderError::Transport(_))
        ));
        let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = held.local_addr().expect("addr").port();
        let url = Url::parse(&format!("http://127.0.0.1:{port}/v1/")).expect("url");
        check("ollama", &url).expect("our own listener");
    }

    proptest! {
        /// No line makes the parser panic: printable junk, and rows with every field mangled.
        #[test]
        fn no_line_panics(line in "\\PC{0,200}") {
            let _ = parse_line(&line);
        }

        #[test]
        fn no_mangled_row_panics(
            slot in "[0-9a-z:]{0,5}",
            addr in "[0-9A-Fa-fx:]{0,40}",
            st in "[0-9A-Zz]{0,3}",
            uid in "[0-9-]{0,12}",
            tail in "( [0-9A-F:]{0,10}){0,12}",
        ) {
            let line = format!("{slot} {addr} 00000000:0000 {st} 0:0 00:0 0 {uid}{tail}");
            let _ = parse_line(&line);
        }

        /// Every row built from real values reads back as those values.
        #[test]
        fn rows_round_trip(a in any::<u32>(), b in any::<u128>(), port in any::<u16>(), st in any::<u8>(), uid in any::<u32>()) {
            let v4 = Ipv4Addr::from(a);
            let r = parse_line(&row4(v4, port, st, uid)).expect("v4");
            prop_assert_eq!(r, SocketRow { addr: IpAddr::V4(v4), port, state: st, uid });
            let v6 = Ipv6Addr::from(b);
            let r = parse_line(&row6(v6, port, st, uid)).expect("v6");
            prop_assert_eq!(r, SocketRow { addr: IpAddr::V6(v6), port, state: st, uid });
        }
    }
}
