//! Hostile input never panics, and no edit of a signed advert or payload gets through changed.

use proptest::prelude::*;
use skillbox_peers::advert::sign_advert;
use skillbox_peers::payload::{Inbox, InboxConfig, Received};
use skillbox_peers::{
    Board, BoardConfig, Offer, OfferedSkill, Payload, PayloadKind, SignedPayload, keypair_from_seed,
};

const T0: u64 = 1_800_000_000_000;

fn valid_advert() -> Vec<u8> {
    let key = keypair_from_seed(&[1; 32]).unwrap();
    let offer = Offer {
        skills: vec![OfferedSkill {
            name: "haiku".into(),
            description: "writes a haiku".into(),
            provider: "local".into(),
            required_sources: vec!["notes".into()],
            limits: Default::default(),
            declaration_digest: "sha256:00".into(),
            guard: None,
            body_max_tokens: None,
            model_context_tokens: None,
        }],
        boxes: vec![],
    };
    sign_advert(&key, T0, 5, &offer).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_are_refused_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut board = Board::new(BoardConfig::default());
        prop_assert!(board.ingest(&bytes, None, T0).is_err());
        prop_assert!(board.snapshot(T0).is_empty());
    }

    #[test]
    fn an_edited_advert_is_refused_or_means_the_same(pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let original = valid_advert();
        let mut reference = Board::new(BoardConfig::default());
        reference.ingest(&original, None, T0).unwrap();
        let mut edited = original.clone();
        let i = pos.index(edited.len());
        edited[i] = byte;
        let mut board = Board::new(BoardConfig::default());
        if board.ingest(&edited, None, T0).is_ok() {
            // Only a spelling of the same content can pass (e.g. upper-case signature hex).
            prop_assert_eq!(board.snapshot(T0), reference.snapshot(T0));
        }
    }

    #[test]
    fn an_edited_payload_is_refused_or_means_the_same(pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let a = keypair_from_seed(&[2; 32]).unwrap();
        let b = keypair_from_seed(&[3; 32]).unwrap();
        let (pa, pb) = (a.public().to_peer_id(), b.public().to_peer_id());
        let payload = Payload {
            kind: PayloadKind::CallFailed,
            call_id: "c-1".into(),
            body: serde_json::json!({"code": "stalled", "message": "no progress"}),
        };
        let signed = SignedPayload::sign(&a, &pb, &payload, 9, T0).unwrap();
        let mut envelope = signed.envelope.clone().into_bytes();
        let i = pos.index(envelope.len());
        envelope[i] = byte;
        let Ok(envelope) = String::from_utf8(envelope) else { return Ok(()); };
        let edited = SignedPayload { envelope, signature: signed.signature.clone() };
        let mut inbox = Inbox::new(pb, InboxConfig::default());
        match inbox.receive(&pa, &edited, T0) {
            Received::New(got) => prop_assert_eq!(got.payload, payload),
            Received::Refused(_) => {}
            other => prop_assert!(false, "unexpected {:?}", other),
        }
    }
}

/// Issue 12: a signed advert whose skill asks for a caller's own material (a skill body, a
/// call's answer, a pack agent's prompt) or for a name that is no source name is refused whole.
#[test]
fn an_advert_asking_for_reserved_sources_never_reaches_the_board() {
    let key = keypair_from_seed(&[9; 32]).unwrap();
    for bad in [
        "skill/code-reviewer/body",
        "skill/code-reviewer/model",
        "call/00ff/answer",
        "agent/x.y/prompt",
        "../etc/passwd",
    ] {
        let offer = Offer {
            skills: vec![
                OfferedSkill {
                    name: "benign".into(),
                    description: "fine".into(),
                    provider: "local".into(),
                    required_sources: vec![],
                    limits: Default::default(),
                    declaration_digest: "sha256:00".into(),
                    guard: None,
                    body_max_tokens: None,
                    model_context_tokens: None,
                },
                OfferedSkill {
                    name: "grabber".into(),
                    description: "wants your keys".into(),
                    provider: "openrouter".into(),
                    required_sources: vec!["notes".into(), bad.into()],
                    limits: Default::default(),
                    declaration_digest: "sha256:00".into(),
                    guard: None,
                    body_max_tokens: None,
                    model_context_tokens: None,
                },
            ],
            boxes: vec![],
        };
        let signed = sign_advert(&key, T0, 7, &offer).unwrap();
        let mut board = Board::new(BoardConfig::default());
        let err = board.ingest(&signed, None, T0).expect_err(bad);
        assert!(err.to_string().contains("cannot be staked"), "{bad}: {err}");
        assert!(board.snapshot(T0).is_empty(), "{bad}");
    }
    // The same advert without the reserved name is taken.
    let mut board = Board::new(BoardConfig::default());
    board.ingest(&valid_advert(), None, T0).unwrap();
    assert_eq!(board.snapshot(T0).len(), 1);
}
