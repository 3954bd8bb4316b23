//! Payload envelopes and the receiving side's checks, without sockets; and the memory transport.

use proptest::prelude::*;
use serde_json::json;
use skillbox_peers::payload::{
    Envelope, Inbox, InboxConfig, MIN_PADDED_BYTES, PadElided, PayloadRefusal, REFUSAL_CODES,
    Received, padded_size, refusal_code,
};
use skillbox_peers::{
    Keypair, MemoryNetwork, Payload, PayloadKind, PayloadTransport, PeerId, PeersError,
    SignedPayload, keypair_from_seed, now_ms,
};

const T0: u64 = 1_800_000_000_000;

/// Whether the payload was taken as new (handed on), whatever it carried.
fn is_new(r: Received) -> bool {
    matches!(r, Received::New(_))
}

fn request(call: &str) -> Payload {
    Payload {
        kind: PayloadKind::CallRequest,
        call_id: call.into(),
        body: json!({"skill": "haiku", "program": {"n": 1}}),
    }
}

/// A party to a test: the key from `seed` (every byte that value) and its peer id.
fn party(seed: u8) -> (Keypair, PeerId) {
    let key = keypair_from_seed(&[seed; 32]).unwrap();
    let id = key.public().to_peer_id();
    (key, id)
}

/// `me`'s inbox with its senders' token bucket at `rate_per_sec` and `burst`.
fn rated_inbox(me: PeerId, rate_per_sec: f64, burst: f64) -> Inbox {
    Inbox::new(
        me,
        InboxConfig {
            rate_per_sec,
            burst,
            ..InboxConfig::default()
        },
    )
}

#[test]
fn a_payload_is_delivered_once_and_its_replay_changes_nothing() {
    let (a, pa) = party(1);
    let (_, pb) = party(2);
    let mut inbox = Inbox::new(pb, InboxConfig::default());
    let signed = SignedPayload::sign(&a, &pb, &request("c1"), 7, T0).unwrap();
    let Received::New(got) = inbox.receive(&pa, &signed, T0 + 5) else {
        panic!("first delivery must be new");
    };
    assert_eq!(got.from, pa);
    assert_eq!(got.payload, request("c1"));
    assert_eq!(got.seq, 7);
    assert_eq!(inbox.receive(&pa, &signed, T0 + 10), Received::Duplicate);
    assert_eq!(inbox.remembered(), 1);
    // A second payload with a new sequence number is new.
    let next = SignedPayload::sign(&a, &pb, &request("c1"), 8, T0).unwrap();
    assert!(is_new(inbox.receive(&pa, &next, T0 + 10)));
}

#[test]
fn tampered_misaddressed_and_misattributed_payloads_are_refused() {
    let (a, pa) = party(3);
    let (_, pb) = party(4);
    let (_, pc) = party(5);
    let mut inbox = Inbox::new(pb, InboxConfig::default());
    let signed = SignedPayload::sign(&a, &pb, &request("c2"), 1, T0).unwrap();

    let mut tampered = signed.clone();
    // Same length, so it is the signature that refuses it (not the padding).
    tampered.envelope = tampered.envelope.replace("haiku", "tanka");
    assert_eq!(
        inbox.receive(&pa, &tampered, T0),
        Received::Refused(PayloadRefusal::BadSignature)
    );
    // Relayed by C: the transport peer is not the signer.
    assert!(matches!(
        inbox.receive(&pc, &signed, T0),
        Received::Refused(PayloadRefusal::SenderMismatch(_))
    ));
    // Addressed to C, replayed to B.
    let to_c = SignedPayload::sign(&a, &pc, &request("c2"), 2, T0).unwrap();
    assert!(matches!(
        inbox.receive(&pa, &to_c, T0),
        Received::Refused(PayloadRefusal::WrongRecipient { .. })
    ));
    // Too old to be remembered, or from the future.
    assert!(matches!(
        inbox.receive(&pa, &signed, T0 + 11 * 60 * 1000),
        Received::Refused(PayloadRefusal::OutOfWindow { .. })
    ));
    assert!(matches!(
        inbox.receive(&pa, &signed, T0 - 60_000),
        Received::Refused(PayloadRefusal::OutOfWindow { .. })
    ));
    assert!(matches!(
        inbox.receive(
            &pa,
            &SignedPayload {
                envelope: "{".into(),
                signature: "00".into()
            },
            T0
        ),
        Received::Refused(PayloadRefusal::Malformed(_))
    ));
    assert_eq!(inbox.remembered(), 0);
}

#[test]
fn an_oversized_payload_is_refused() {
    let (a, pa) = party(6);
    let (_, pb) = party(7);
    let mut inbox = Inbox::new(pb, InboxConfig::default());
    let mut p = request("c3");
    p.body = json!({"program": "x".repeat(1024 * 1024)});
    let signed = SignedPayload::sign(&a, &pb, &p, 1, T0).unwrap();
    assert!(matches!(
        inbox.receive(&pa, &signed, T0),
        Received::Refused(PayloadRefusal::TooLarge { .. })
    ));
}

#[test]
fn a_sender_over_its_rate_is_told_to_retry_and_recovers() {
    let (a, pa) = party(8);
    let (_, pb) = party(9);
    let mut inbox = rated_inbox(pb, 2.0, 3.0);
    let sign = |seq| SignedPayload::sign(&a, &pb, &request("c4"), seq, T0).unwrap();
    for seq in 1..=3 {
        assert!(is_new(inbox.receive(&pa, &sign(seq), T0)));
    }
    let fourth = sign(4);
    assert_eq!(inbox.receive(&pa, &fourth, T0), Received::RateLimited);
    // Not remembered while refused for rate: the retry half a second later is delivered.
    assert!(is_new(inbox.receive(&pa, &fourth, T0 + 500)));
}

#[test]
fn bad_call_ids_are_refused_when_signing() {
    let (a, _) = party(10);
    let (_, pb) = party(11);
    for bad in ["", "a\nb"] {
        let err = SignedPayload::sign(&a, &pb, &request(bad), 1, T0).unwrap_err();
        assert!(matches!(err, PeersError::InvalidPayload(_)), "{err}");
    }
    let long = "x".repeat(129);
    assert!(SignedPayload::sign(&a, &pb, &request(&long), 1, T0).is_err());
}

#[tokio::test]
async fn the_memory_transport_delivers_signed_payloads_once() {
    let net = MemoryNetwork::new();
    let (ta, _ra) = net.join(party(12).0, InboxConfig::default(), 8);
    let (tb, mut rb) = net.join(party(13).0, InboxConfig::default(), 8);
    let pb = tb.local_peer_id();
    ta.send(pb, request("m1")).await.unwrap();
    let got = rb.try_recv().unwrap();
    assert_eq!(got.from, ta.local_peer_id());
    assert_eq!(got.payload.call_id, "m1");
    assert!(got.sent_at <= now_ms());

    let signed = ta.sign(&pb, &request("m2")).unwrap();
    assert!(is_new(ta.send_signed(pb, &signed).unwrap()));
    assert_eq!(ta.send_signed(pb, &signed).unwrap(), Received::Duplicate);
    assert_eq!(rb.try_recv().unwrap().payload.call_id, "m2");
    assert!(rb.try_recv().is_err(), "a replay must not be handed on");

    net.leave(&pb);
    let err = ta.send(pb, request("m3")).await.unwrap_err();
    assert!(matches!(err, PeersError::Unreachable { .. }), "{err}");
}

/// Only closed codes cross in a refusal: what the receiver tells the sender names the kind of
/// refusal, never its details (a parser's message quoting the payload, the receiver's clock);
/// and whatever a receiver writes there, the sender takes one of the codes or `other` — a
/// hostile receiver's text does not reach the sender's logs and errors.
#[test]
fn a_refusal_carries_a_closed_code_both_ways() {
    let quoting = PayloadRefusal::Malformed("expected `,` near \"PEER-TEXT-9d1\"".into());
    let ack = Received::Refused(quoting).ack();
    assert_eq!(
        ack,
        skillbox_peers::Ack::Refused {
            reason: "malformed".into()
        }
    );
    for code in REFUSAL_CODES {
        assert_eq!(refusal_code(code), code);
    }
    for written in [
        "payload of 2 bytes exceeds the limit of 1 bytes",
        "malformed\n2026-12-06 INFO forged line",
        "\u{1b}]52;c;ZXZpbA==\u{7}",
        "",
    ] {
        assert_eq!(refusal_code(written), "other", "{written:?}");
    }
}

/// A peer sending payloads that are refused (garbage, another node's envelopes, bad
/// signatures) pays its rate for each before any is parsed or verified: past its burst it gets
/// `RateLimited` and nothing more is checked. Refusals used to take no token, so a peer had this
/// node decode keys and verify Ed25519 signatures for it as fast as it could send.
#[test]
fn refused_payloads_cost_the_sender_its_rate_before_they_are_checked() {
    let (a, pa) = party(31);
    let (_, pb) = party(32);
    let (m, pm) = party(33);
    let mut inbox = rated_inbox(pb, 1.0, 5.0);
    // Mallory sends A's genuine envelope (a relay of someone else's signature) and envelopes
    // with a broken signature, as fast as it likes.
    let relayed = SignedPayload::sign(&a, &pb, &request("c9"), 1, T0).unwrap();
    let mut forged = SignedPayload::sign(&m, &pb, &request("c9"), 2, T0).unwrap();
    forged.signature = "00".repeat(64);
    let garbage = SignedPayload {
        envelope: "{\"not\": \"an envelope\"}".into(),
        signature: String::new(),
    };
    let mut refused = 0;
    let mut limited = 0;
    for i in 0..300 {
        let signed = [&relayed, &forged, &garbage][i % 3];
        match inbox.receive(&pm, signed, T0) {
            Received::Refused(_) => refused += 1,
            Received::RateLimited => limited += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((refused, limited), (5, 295));
    // Its own good payload waits for its rate like any other; A is untouched.
    let own = SignedPayload::sign(&m, &pb, &request("c9"), 3, T0).unwrap();
    assert_eq!(inbox.receive(&pm, &own, T0), Received::RateLimited);
    assert!(is_new(inbox.receive(&pm, &own, T0 + 1_000)));
    assert!(is_new(inbox.receive(&pa, &relayed, T0)));
}

/// The envelope's sender is compared with the transport peer as text, before the key is
/// decoded: another node's envelope relayed is refused as a sender mismatch even with a
/// signature that would not verify.
#[test]
fn a_relayed_envelope_is_refused_by_its_sender_before_its_signature() {
    let (a, _) = party(34);
    let (_, pb) = party(35);
    let (_, pm) = party(36);
    let mut relayed = SignedPayload::sign(&a, &pb, &request("c10"), 1, T0).unwrap();
    relayed.signature = "00".repeat(64);
    let mut inbox = Inbox::new(pb, InboxConfig::default());
    assert!(matches!(
        inbox.receive(&pm, &relayed, T0),
        Received::Refused(PayloadRefusal::SenderMismatch(_))
    ));
}

/// The `i`th of many fresh sender ids (a flood's, or a light peer's among them).
fn fresh_sender(i: u32) -> Keypair {
    let mut seed = [41u8; 32];
    seed[..4].copy_from_slice(&i.to_be_bytes());
    keypair_from_seed(&seed).unwrap()
}

/// When every sender holds one entry, which one is forgotten went by `PeerId`, which a sender
/// chooses freely: a flood of one-entry ids sorting below an honest peer's made the honest entry
/// the one forgotten at the flood's next payload (its retry after a lost ack then taken as new).
/// Now the sender whose oldest entry arrived first goes: a light sender whose id sorts after
/// every flood id keeps its entry for as many payloads after it as the memory holds, and is
/// forgotten only then, like anyone's.
#[test]
fn a_flood_of_one_entry_ids_cannot_choose_whose_entry_is_forgotten() {
    let (_, pm) = party(42);
    let cap = 64;
    let config = InboxConfig {
        max_remembered: cap,
        ..InboxConfig::default()
    };
    let mut inbox = Inbox::new(pm, config);
    let flood: Vec<_> = (0..500 + cap as u32).map(fresh_sender).collect();
    let last_flood_id = flood.iter().map(|k| k.public().to_peer_id()).max().unwrap();
    // An honest id that sorts after every flood id: the one a tie by `PeerId` forgets first.
    let honest = (1_000_000..)
        .map(fresh_sender)
        .find(|k| k.public().to_peer_id() > last_flood_id)
        .unwrap();
    let send = |inbox: &mut Inbox, k: &Keypair, call: &str| {
        let signed = SignedPayload::sign(k, &pm, &request(call), 1, T0).unwrap();
        inbox.receive(&k.public().to_peer_id(), &signed, T0 + 1)
    };
    for (i, k) in flood[..500].iter().enumerate() {
        assert!(is_new(send(&mut inbox, k, "flood")), "flood {i}");
    }
    assert_eq!(inbox.remembered(), cap);
    assert!(is_new(send(&mut inbox, &honest, "honest")));
    // The flood goes on: as many fresh ids after it as the memory holds beside it.
    for (i, k) in flood[500..500 + cap - 1].iter().enumerate() {
        assert!(is_new(send(&mut inbox, k, "flood")), "flood after {i}");
    }
    assert_eq!(
        send(&mut inbox, &honest, "honest"),
        Received::Duplicate,
        "the honest sender's entry was forgotten for its id while older flood entries stayed"
    );
    // One more and it is the oldest: forgotten, as any sender's would be.
    assert!(is_new(send(&mut inbox, &flood[500 + cap - 1], "flood")));
    assert!(is_new(send(&mut inbox, &honest, "honest")));
    assert_eq!(inbox.remembered(), cap);
}

/// Sender ids cost nothing and the rate is per sender: a flood of fresh ids, each signing
/// payloads within its own rate, grew the de-duplication memory without bound (10 minutes of
/// every id's payloads). The memory stops at its cap — and a full memory keeps nobody out: a
/// cap that answered `busy` let ~22 ids at their rate refuse every other peer's payloads for
/// good. Past the cap the oldest entry of the sender holding the most goes, so a heavy sender
/// forgets its own first and a light one keeps its entries (until the flood of one-entry ids
/// below makes it the oldest).
#[test]
fn a_flood_of_fresh_sender_ids_cannot_grow_the_replay_memory_past_its_cap_nor_keep_others_out() {
    let (me, pm) = party(40);
    let config = InboxConfig {
        max_remembered: 64,
        ..InboxConfig::default()
    };
    let window = config.replay_window_ms;
    let mut inbox = Inbox::new(pm, config);
    let sender = fresh_sender;
    // An honest peer's one payload, then one id sending its whole burst.
    let honest = sender(u32::MAX);
    let ph = honest.public().to_peer_id();
    let kept = SignedPayload::sign(&honest, &pm, &request("honest"), 1, T0).unwrap();
    assert!(is_new(inbox.receive(&ph, &kept, T0 + 1)));
    let heavy = sender(u32::MAX - 1);
    let pheavy = heavy.public().to_peer_id();
    for seq in 1..=100 {
        let signed = SignedPayload::sign(&heavy, &pm, &request("heavy"), seq, T0).unwrap();
        assert!(
            is_new(inbox.receive(&pheavy, &signed, T0 + 1)),
            "heavy {seq}"
        );
    }
    assert_eq!(
        inbox.remembered(),
        64,
        "the replay memory grew past its cap"
    );
    assert_eq!(
        inbox.receive(&ph, &kept, T0 + 2),
        Received::Duplicate,
        "the heavy sender forgot its own entries, not the light sender's"
    );
    // A flood of fresh ids: every payload taken, the memory at its cap.
    for i in 0..500u32 {
        let flood = sender(i);
        let signed = SignedPayload::sign(&flood, &pm, &request("flood"), 1, T0).unwrap();
        let from = flood.public().to_peer_id();
        assert!(is_new(inbox.receive(&from, &signed, T0 + 1)), "flood {i}");
    }
    assert_eq!(
        inbox.remembered(),
        64,
        "the replay memory grew past its cap"
    );
    // Another peer's payload is still taken, not turned away for the flood's sake.
    let late = sender(u32::MAX - 2);
    let plate = late.public().to_peer_id();
    let signed = SignedPayload::sign(&late, &pm, &request("late"), 1, T0).unwrap();
    assert!(
        is_new(inbox.receive(&plate, &signed, T0 + 3)),
        "a full memory kept another peer out"
    );
    assert_eq!(inbox.remembered(), 64);
    // Past the window the entries go.
    let later = T0 + window + 10;
    let signed = SignedPayload::sign(&me, &pm, &request("after"), 2, later).unwrap();
    assert!(is_new(inbox.receive(&pm, &signed, later)));
    assert_eq!(inbox.remembered(), 1);
}

/// `envelope`'s canonical text with `pad` written in place of its padding (as it stands, so a
/// test can write it wrong), signed by `key` as a sender signs: a validly signed envelope whatever
/// its padding.
fn signed_with_pad(key: &Keypair, envelope: &Envelope, pad: &str) -> SignedPayload {
    let mut e = envelope.clone();
    e.pad = "PAD".into();
    let text = skillbox_jcs::to_string(&e).unwrap().replacen(
        "\"pad\":\"PAD\"",
        &format!("\"pad\":\"{pad}\""),
        1,
    );
    signed_text(key, text)
}

/// `text` with a signature by `key` that is valid for it, whatever it holds: over the canonical
/// text, with an empty pad, of the envelope it parses as (what a sender signs), or over the text
/// itself if it parses as none. So a refusal is the padding's or the form's, never the
/// signature's.
fn signed_text(key: &Keypair, text: String) -> SignedPayload {
    let signed = match serde_json::from_str::<Envelope>(&text) {
        Ok(mut e) => {
            e.pad = String::new();
            skillbox_jcs::to_string(&e).unwrap()
        }
        Err(_) => text.clone(),
    };
    let mut msg = b"skillbox/payload/v3\n".to_vec();
    msg.extend_from_slice(signed.as_bytes());
    SignedPayload {
        envelope: text,
        signature: hex::encode(key.sign(&msg).unwrap()),
    }
}

/// The padding a sender writes is stripped on receipt; padding that is not zeros (a sender
/// smuggling bytes past whoever checks the payload's fields), written escaped, or not the length
/// its bucket needs (a size that says more than its bucket) is refused `bad_padding`, however
/// well signed.
#[test]
fn padding_is_zeros_to_its_bucket_or_the_payload_is_refused() {
    let (a, pa) = party(50);
    let (_, pb) = party(51);
    let honest = SignedPayload::sign(&a, &pb, &request("c20"), 1, T0).unwrap();
    assert_eq!(honest.size(), MIN_PADDED_BYTES);
    let envelope = honest.open().unwrap();
    assert!(envelope.pad.bytes().all(|c| c == b'0'));
    let zeros = envelope.pad.len();
    // Signed again by the test as the sender signs: taken, and the padding is gone.
    let mut inbox = Inbox::new(pb, InboxConfig::default());
    let resigned = signed_with_pad(&a, &envelope, &envelope.pad);
    assert_eq!(resigned, honest);
    let Received::New(got) = inbox.receive(&pa, &resigned, T0) else {
        panic!("the honest padding was refused");
    };
    assert_eq!(got.payload, request("c20"));

    let mut seq = 1;
    let mut refused_as = |pad: String, code: &str| {
        seq += 1;
        let mut e = envelope.clone();
        e.seq = seq;
        let signed = signed_with_pad(&a, &e, &pad);
        let got = inbox.receive(&pa, &signed, T0);
        assert_eq!(
            got.ack(),
            skillbox_peers::Ack::Refused {
                reason: code.into()
            },
            "padding of {} bytes ({}...)",
            pad.len(),
            pad.chars().take(12).collect::<String>(),
        );
    };
    // Zeros written escaped: the same text decoded, other bytes signed (not the canonical
    // form every sender signs).
    refused_as(format!("\\u0030{}", "0".repeat(zeros - 6)), "malformed");
    let mut refused = |pad: String| refused_as(pad, "bad_padding");
    // Data in the padding, its length right.
    refused(format!("{}{}", "secret", "0".repeat(zeros - 6)));
    refused(format!("{}1", "0".repeat(zeros - 1)));
    // One short of the bucket, and a whole bucket too many.
    refused("0".repeat(zeros - 1));
    refused("0".repeat(zeros + MIN_PADDED_BYTES));
    // No padding at all (an unpadded sender).
    refused(String::new());
    assert_eq!(inbox.remembered(), 1);
}

/// The signature covers the envelope with an empty pad, so the zeros on the wire are not signed:
/// someone on the path (or a relay) keeps the honest signature and changes the pad, in any byte,
/// by one byte more or less, or re-pads the envelope to the next bucket. Every such payload is
/// refused before its signature is checked (the pad must be exactly the zeros the rest implies),
/// and the honest one is still taken after them.
#[test]
fn a_pad_changed_on_the_path_under_the_honest_signature_is_refused() {
    let (a, pa) = party(60);
    let (_, pb) = party(61);
    let honest = SignedPayload::sign(&a, &pb, &request("c25"), 1, T0).unwrap();
    let zeros = honest.open().unwrap().pad.len();
    let end = honest.envelope.rfind("\",\"recipient\":\"").unwrap();
    let start = end - zeros;
    assert!(honest.envelope[start..end].bytes().all(|c| c == b'0'));
    let with_pad = |pad: &str| SignedPayload {
        envelope: format!(
            "{}{pad}{}",
            &honest.envelope[..start],
            &honest.envelope[end..]
        ),
        signature: honest.signature.clone(),
    };
    // A rate the ~1,100 forgeries stay under: each must be refused for its pad.
    let mut inbox = rated_inbox(pb, 1e9, 1e9);
    let mut refused = |forged: SignedPayload, what: &str| {
        let got = inbox.receive(&pa, &forged, T0);
        assert!(
            matches!(
                got,
                Received::Refused(PayloadRefusal::BadPadding(_) | PayloadRefusal::Malformed(_))
            ),
            "{what} answered {:?}",
            got.ack()
        );
    };
    // Any byte of the pad changed (every 61st, and both ends), to a digit, a letter, a quote.
    for at in (0..zeros).step_by(61).chain([1, zeros - 2, zeros - 1]) {
        for to in ["1", "x", " ", "\\"] {
            let mut pad = "0".repeat(zeros);
            pad.replace_range(at..at + 1, to);
            refused(with_pad(&pad), &format!("pad byte {at} as {to:?}"));
        }
    }
    // One zero more, one less; none; the envelope re-padded to the next bucket.
    refused(with_pad(&"0".repeat(zeros + 1)), "one zero more");
    refused(with_pad(&"0".repeat(zeros - 1)), "one zero less");
    refused(with_pad(""), "no pad");
    refused(
        with_pad(&"0".repeat(zeros + MIN_PADDED_BYTES)),
        "the next bucket's pad",
    );
    assert_eq!(inbox.remembered(), 0);
    assert!(is_new(inbox.receive(&pa, &honest, T0)));
}

#[test]
fn buckets_are_powers_of_two_from_the_smallest() {
    assert_eq!(padded_size(0), Some(MIN_PADDED_BYTES));
    assert_eq!(padded_size(MIN_PADDED_BYTES), Some(MIN_PADDED_BYTES));
    assert_eq!(
        padded_size(MIN_PADDED_BYTES + 1),
        Some(2 * MIN_PADDED_BYTES)
    );
    assert_eq!(padded_size(usize::MAX), None);
    // The largest payload the default limit takes fits it padded.
    assert_eq!(
        padded_size(skillbox_peers::payload::DEFAULT_MAX_PAYLOAD_BYTES),
        Some(skillbox_peers::payload::DEFAULT_MAX_PAYLOAD_BYTES)
    );
    let (a, _) = party(52);
    let (_, pb) = party(53);
    // A program of `len` bytes and ~500 bytes of envelope around it: the bucket that holds both.
    for (len, bucket) in [
        (0, 16 * 1024),
        (20_000, 32 * 1024),
        (40_000, 64 * 1024),
        (700_000, 1024 * 1024),
    ] {
        let mut p = request("c21");
        p.body = json!({"program": "x".repeat(len)});
        let signed = SignedPayload::sign(&a, &pb, &p, 1, T0).unwrap();
        assert_eq!(signed.size(), bucket, "a program of {len} bytes");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A send queue holds payloads without their zeros: what goes onto the stream is the signed
    /// payload byte for byte, whatever text it holds (a node's own, or one a test sends as is).
    #[test]
    fn a_payload_held_without_its_zeros_is_sent_as_signed(
        text in prop_oneof![any::<String>(), "[0\"pad:]{0,60}"],
        zeros in 0usize..3_000,
        signature in "[0-9a-f]{0,130}",
    ) {
        let (a, _) = party(58);
        let (_, pb) = party(59);
        let honest = SignedPayload::sign(&a, &pb, &request("c24"), 1, T0).unwrap();
        let held = PadElided::new(honest.clone());
        prop_assert!(held.held_bytes() < 1024, "{}", held.held_bytes());
        prop_assert_eq!(held.padded(), honest);
        let odd = SignedPayload { envelope: format!("{text}{}", "0".repeat(zeros)), signature };
        prop_assert_eq!(PadElided::new(odd.clone()).padded(), odd);
    }

    /// Unpadding reads what a peer wrote: any padding text, any size around the bucket, any
    /// envelope text is an answer (taken or refused), never a panic.
    #[test]
    fn unpadding_never_panics(
        pad in prop_oneof![
            "[0]{0,40}",
            any::<String>(),
            "[0\\\\u\"]{0,40}",
        ],
        extra in 0usize..40_000,
        seq in 1u64..1000,
        text in any::<String>(),
        signature in "[0-9a-f]{0,130}",
    ) {
        let (a, pa) = party(54);
        let (_, pb) = party(55);
        let mut envelope = SignedPayload::sign(&a, &pb, &request("c22"), seq, T0)
            .unwrap()
            .open()
            .unwrap();
        envelope.pad = String::new();
        let mut inbox = Inbox::new(pb, InboxConfig::default());
        let padded = format!("{pad}{}", "0".repeat(extra));
        let _ = inbox.receive(&pa, &signed_with_pad(&a, &envelope, &padded), T0);
        let _ = inbox.receive(&pa, &SignedPayload { envelope: text.clone(), signature: signature.clone() }, T0);
        let quoted = format!("{{\"pad\":\"{text}");
        let _ = inbox.receive(&pa, &SignedPayload { envelope: quoted, signature }, T0);
    }
}

/// F7: the receiver found the pad by the last `"pad":"` in the text. A sender writing its
/// members in another order, data in its own `pad` and a body `{"pad":"000…"}` after it, sized
/// to a bucket, had the body's zeros checked in place of the pad: the data passed. The parsed
/// pad is checked now, and the text must be the canonical form (what every sender signs).
#[test]
fn a_body_pad_after_the_envelope_pad_does_not_stand_in_for_it() {
    let (a, pa) = party(56);
    let (_, pb) = party(57);
    let e = SignedPayload::sign(&a, &pb, &request("c23"), 1, T0)
        .unwrap()
        .open()
        .unwrap();
    // Members out of canonical order, the envelope's pad before the body: `pad` holds data.
    let text = |pad: &str, filler: &str, body_pad: &str| {
        format!(
            "{{\"v\":{},\"type\":{},\"callId\":{},\"sender\":{},\"senderKey\":{},\"recipient\":{},\"seq\":{},\"time\":{},\"pad\":\"{pad}\",\"body\":{{\"f\":\"{filler}\",\"pad\":\"{body_pad}\"}}}}",
            e.v,
            json_text(&e.kind),
            json_text(&e.call_id),
            json_text(&e.sender),
            json_text(&e.sender_key),
            json_text(&e.recipient),
            e.seq,
            e.time
        )
    };
    // Sized so that the text the old check read passed it: the body's zeros as long as the pad,
    // and the whole a bucket that the size less the pad needs.
    let bucket = 2 * MIN_PADDED_BYTES;
    let base = text("", "", "").len() + 128;
    let filler = "f".repeat((bucket - base) % 2);
    let len = (bucket - base - filler.len()) / 2;
    let data = format!("secret{}", "0".repeat(len - 6));
    let forged = signed_text(&a, text(&data, &filler, &"0".repeat(len)));
    assert_eq!(forged.size(), bucket);
    assert_eq!(padded_size(bucket - len), Some(bucket));
    let mut inbox = Inbox::new(pb, InboxConfig::default());
    let got = inbox.receive(&pa, &forged, T0);
    assert!(
        matches!(got, Received::Refused(PayloadRefusal::BadPadding(_))),
        "data in the pad behind a body pad answered {:?}",
        got.ack()
    );
    // Zeros in the pad, members reordered: refused as not canonical.
    let reordered = signed_text(&a, text(&"0".repeat(len), &filler, &"0".repeat(len)));
    let got = inbox.receive(&pa, &reordered, T0);
    assert!(
        matches!(got, Received::Refused(PayloadRefusal::Malformed(_))),
        "a reordered envelope answered {:?}",
        got.ack()
    );
}

/// A member's JSON text, as the F7 test writes members.
fn json_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}
