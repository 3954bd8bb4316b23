//! What padding costs a call payload: its bytes and the CPU of signing and receiving it (the
//! sender's canonical text and signature; the receiver's parse, padding check and verify).
//! And what a send queue holds of it: the payload without its zeros, padded again onto the
//! stream. Run: `cargo bench -p skillbox-peers --bench payload` (env PAYLOAD_ROUNDS overrides the count).

use std::time::{Duration, Instant};

use serde_json::json;
use skillbox_peers::payload::{Inbox, InboxConfig, PadElided, Received};
use skillbox_peers::{Payload, PayloadKind, SignedPayload};
use skillbox_testkit::bench::{env_usize, peer_key, percentile};

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let rounds = env_usize("PAYLOAD_ROUNDS", 2_000);
    let (from, to) = (peer_key(1), peer_key(2));
    let (pf, pt) = (from.public().to_peer_id(), to.public().to_peer_id());
    let now: u64 = 1_800_000_000_000;
    // Bodies of the sizes a call's messages have (the node suite's: ~2.3 KB requests,
    // ~0.7 KB acceptances, ~2 KB sessions with an insecure-dev attestation).
    let messages = [
        (
            "call.request",
            PayloadKind::CallRequest,
            json!({"skill": "song-picker", "program": {"template": "p".repeat(1_900)}}),
        ),
        (
            "call.accepted",
            PayloadKind::CallAccepted,
            json!({"signature": {"keyid": "3d".repeat(32), "sig": "b2".repeat(64)}, "nonce": "c4".repeat(32)}),
        ),
        (
            "call.session",
            PayloadKind::CallSession,
            json!({"box": "https://box.example:8443", "runId": "9f".repeat(16),
                   "attestation": {"statement": "A".repeat(1_200), "evidence": "e".repeat(300)},
                   "nonce": "5e".repeat(32)}),
        ),
    ];
    for (name, kind, body) in messages {
        let payload = Payload {
            kind,
            call_id: "call-3b9e1c07d2a44f1e".into(),
            body,
        };
        let mut inbox = Inbox::new(
            pt,
            InboxConfig {
                rate_per_sec: 1e9,
                burst: 1e9,
                ..InboxConfig::default()
            },
        );
        let (mut sign, mut receive, mut elide, mut pad) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut size, mut held) = (0, 0);
        for seq in 1..=rounds as u64 {
            let started = Instant::now();
            let signed = SignedPayload::sign(&from, &pt, &payload, seq, now).expect("signs");
            sign.push(started.elapsed());
            size = signed.size();
            let copy = signed.clone();
            let started = Instant::now();
            let queued = PadElided::new(copy);
            elide.push(started.elapsed());
            held = queued.held_bytes();
            let started = Instant::now();
            let sent = queued.padded();
            pad.push(started.elapsed());
            assert_eq!(sent, signed, "{name} not sent as signed");
            let started = Instant::now();
            let got = inbox.receive(&pf, &signed, now);
            receive.push(started.elapsed());
            assert!(matches!(got, Received::New(_)), "{name} refused");
        }
        for d in [&mut sign, &mut receive, &mut elide, &mut pad] {
            d.sort();
        }
        println!(
            "{name:>14}: {size:>6} bytes ({held:>5} queued)  sign p50 {:>6.1} us  receive p50 {:>6.1} us  \
             elide p50 {:>5.1} us  pad p50 {:>5.1} us",
            us(percentile(&sign, 0.5)),
            us(percentile(&receive, 0.5)),
            us(percentile(&elide, 0.5)),
            us(percentile(&pad, 0.5)),
        );
    }
}
