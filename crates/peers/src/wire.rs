//! The request-response wire of `/skillbox/payload/1`: its messages and the codec that reads
//! them. One protocol carries three exchanges (a payload and its ack, a board sync, an advert
//! fetch), so the codec bounds each answer by what was asked: a stream's codec writes the
//! request and then reads that request's answer (libp2p clones the codec per stream), and it
//! remembers what it wrote. The stock CBOR codec had one 8 MiB cap for every answer and decoded
//! any count of strings: a peer answered a board sync with ~8.4 million one-byte strings
//! (~256 MiB decoded), or an ack with megabytes.
//!
//! A payload request's length is its envelope's size bucket plus a fixed CBOR framing (the
//! envelope pads itself, `payload::padded_size`): what a stream carries says which bucket, not
//! which call message.

use std::io;

use futures::prelude::*;
use libp2p::StreamProtocol;
use libp2p::request_response::{self, cbor};
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::payload::{Ack, SignedPayload};

/// An answer to a payload: an [`Ack`] (a refusal carries a closed code) is tens of bytes.
pub(crate) const ACK_RESPONSE_LIMIT: u64 = 4 * 1024;
/// What one advert fetch's answer may add to the advert itself (CBOR framing).
pub(crate) const ADVERT_RESPONSE_SLACK: u64 = 1024;
/// A board sync answer's bytes at most; the sender stays under [`SYNC_MAX_BYTES`].
pub(crate) const SYNC_RESPONSE_LIMIT: u64 = 8 * 1024 * 1024;
pub(crate) const SYNC_MAX_BYTES: usize = 6 * 1024 * 1024;
/// Adverts one board sync answer may hold: refused whole past this while it is decoded, and
/// the sender sends at most this many.
pub(crate) const SYNC_MAX_ADVERTS: usize = 2_000;

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum WireRequest {
    Payload(SignedPayload),
    /// "Send me the adverts you hold": a joining node fills its board without waiting.
    BoardSync,
    /// "Send me your own current advert": a search fetching a provider the index named.
    Advert,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum WireResponse {
    Ack(Ack),
    Adverts(SyncAdverts),
    Advert(Option<String>),
}

/// A board sync's adverts: on the wire a list of strings as before, but decoding stops with an
/// error at the [`SYNC_MAX_ADVERTS`]-th + 1, before it is held.
#[derive(Debug, Default)]
pub(crate) struct SyncAdverts(pub(crate) Vec<String>);

impl Serialize for SyncAdverts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(&self.0)
    }
}

impl<'de> Deserialize<'de> for SyncAdverts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Bounded;
        impl<'de> Visitor<'de> for Bounded {
            type Value = SyncAdverts;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "a list of at most {SYNC_MAX_ADVERTS} adverts")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SyncAdverts, A::Error> {
                let hint = seq.size_hint().unwrap_or(0);
                if hint > SYNC_MAX_ADVERTS {
                    return Err(serde::de::Error::invalid_length(hint, &self));
                }
                let mut out = Vec::with_capacity(hint);
                while let Some(advert) = seq.next_element::<String>()? {
                    if out.len() == SYNC_MAX_ADVERTS {
                        return Err(serde::de::Error::invalid_length(out.len() + 1, &self));
                    }
                    out.push(advert);
                }
                Ok(SyncAdverts(out))
            }
        }
        d.deserialize_seq(Bounded)
    }
}

/// What this stream asked, so its answer is read under that answer's limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asked {
    Nothing,
    Payload,
    BoardSync,
    Advert,
}

/// The CBOR codec of `/skillbox/payload/1` with a response limit per request kind.
#[derive(Clone)]
pub(crate) struct WireCodec {
    ack: cbor::codec::Codec<WireRequest, WireResponse>,
    advert: cbor::codec::Codec<WireRequest, WireResponse>,
    sync: cbor::codec::Codec<WireRequest, WireResponse>,
    asked: Asked,
}

impl WireCodec {
    /// `request_limit`: an inbound request's bytes (a payload); `max_advert_bytes`: one advert.
    pub(crate) fn new(request_limit: u64, max_advert_bytes: usize) -> WireCodec {
        let codec = |response_limit: u64| {
            cbor::codec::Codec::default()
                .set_request_size_maximum(request_limit)
                .set_response_size_maximum(response_limit)
        };
        WireCodec {
            ack: codec(ACK_RESPONSE_LIMIT),
            advert: codec(max_advert_bytes as u64 + ADVERT_RESPONSE_SLACK),
            sync: codec(SYNC_RESPONSE_LIMIT),
            asked: Asked::Nothing,
        }
    }
}

impl request_response::Codec for WireCodec {
    type Protocol = StreamProtocol;
    type Request = WireRequest;
    type Response = WireResponse;

    async fn read_request<T>(&mut self, p: &StreamProtocol, io: &mut T) -> io::Result<WireRequest>
    where
        T: AsyncRead + Unpin + Send,
    {
        // Every inner codec has the same request limit.
        self.ack.read_request(p, io).await
    }

    async fn read_response<T>(&mut self, p: &StreamProtocol, io: &mut T) -> io::Result<WireResponse>
    where
        T: AsyncRead + Unpin + Send,
    {
        match self.asked {
            Asked::Payload => self.ack.read_response(p, io).await,
            Asked::Advert => self.advert.read_response(p, io).await,
            Asked::BoardSync => self.sync.read_response(p, io).await,
            Asked::Nothing => Err(io::Error::other("an answer to nothing asked")),
        }
    }

    async fn write_request<T>(
        &mut self,
        p: &StreamProtocol,
        io: &mut T,
        req: WireRequest,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        self.asked = match req {
            WireRequest::Payload(_) => Asked::Payload,
            WireRequest::BoardSync => Asked::BoardSync,
            WireRequest::Advert => Asked::Advert,
        };
        self.ack.write_request(p, io, req).await
    }

    async fn write_response<T>(
        &mut self,
        p: &StreamProtocol,
        io: &mut T,
        res: WireResponse,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        self.ack.write_response(p, io, res).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use request_response::Codec as _;

    fn protocol() -> StreamProtocol {
        StreamProtocol::new("/skillbox/payload/1")
    }

    /// Reads `answer` as the response to `asked` through a fresh stream's codec.
    fn read_answer(asked: WireRequest, answer: &[u8]) -> io::Result<WireResponse> {
        futures::executor::block_on(async {
            let mut codec = WireCodec::new(1 << 20, crate::advert::DEFAULT_MAX_ADVERT_BYTES);
            let mut sent = Vec::new();
            codec.write_request(&protocol(), &mut sent, asked).await?;
            codec
                .read_response(&protocol(), &mut futures::io::Cursor::new(answer))
                .await
        })
    }

    /// CBOR of `{"Adverts": [n strings of `len` bytes]}`, as a hostile peer would answer.
    fn sync_answer(n: usize, item: &[u8]) -> Vec<u8> {
        let mut out = vec![0xa1, 0x67];
        out.extend_from_slice(b"Adverts");
        out.push(0x9a); // array, 32-bit length
        out.extend_from_slice(&(n as u32).to_be_bytes());
        for _ in 0..n {
            match item.len() {
                l @ 0..=23 => out.push(0x60 + l as u8),
                l => {
                    out.push(0x79);
                    out.extend_from_slice(&(l as u16).to_be_bytes());
                }
            }
            out.extend_from_slice(item);
        }
        out
    }

    #[test]
    fn a_board_sync_answer_of_millions_of_strings_is_refused_while_decoded() {
        // The attack: 8 MiB of empty strings, ~8.4 million of them (~200 MiB as `String`s).
        let bomb = sync_answer(8 * 1024 * 1024 - 16, b"");
        assert!(bomb.len() as u64 <= SYNC_RESPONSE_LIMIT);
        let answer = read_answer(WireRequest::BoardSync, &bomb);
        assert!(
            answer.is_err(),
            "decoded {:?} adverts",
            match answer {
                Ok(WireResponse::Adverts(a)) => a.0.len(),
                _ => 0,
            }
        );
        // 25,000 copies of one advert: refused the same way (the count, not the content).
        let advert = br#"{"advert":{},"signature":""}"#;
        assert!(read_answer(WireRequest::BoardSync, &sync_answer(25_000, advert)).is_err());
        // An honest answer at the limit is read whole.
        match read_answer(
            WireRequest::BoardSync,
            &sync_answer(SYNC_MAX_ADVERTS, advert),
        ) {
            Ok(WireResponse::Adverts(a)) => assert_eq!(a.0.len(), SYNC_MAX_ADVERTS),
            other => panic!("{other:?}"),
        }
    }

    /// The bytes `payload` puts on a `/skillbox/payload/1` stream, signed as a node signs it.
    fn wire_bytes(payload: &crate::Payload) -> Vec<u8> {
        let key = crate::keypair_from_seed(&[11; 32]).expect("key");
        let to = crate::keypair_from_seed(&[12; 32])
            .expect("key")
            .public()
            .to_peer_id();
        let signed =
            SignedPayload::sign(&key, &to, payload, 1_800_000_000_000_000, 1_800_000_000_000)
                .expect("signs");
        let mut out = Vec::new();
        futures::executor::block_on(WireCodec::new(1 << 21, 1024).write_request(
            &protocol(),
            &mut out,
            WireRequest::Payload(signed),
        ))
        .expect("encodes");
        out
    }

    fn fixture(path: &str) -> Vec<u8> {
        let at = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(path);
        std::fs::read(&at).unwrap_or_else(|e| panic!("{}: {e}", at.display()))
    }

    /// As long as the base64 of `bytes` (only the length reaches the wire's size).
    fn base64_sized(bytes: &[u8]) -> String {
        "A".repeat(bytes.len().div_ceil(3) * 4)
    }

    /// PEM blocks' base64 bodies, as a DER list in evidence carries them.
    fn pem_bodies(pem: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(pem)
            .split("-----BEGIN CERTIFICATE-----")
            .filter_map(|b| b.split("-----END CERTIFICATE-----").next())
            .map(|b| b.split_whitespace().collect::<String>())
            .filter(|b| !b.is_empty())
            .collect()
    }

    /// A `call.session` body as the caller sends it, with an attestation of `platform` whose
    /// evidence is `evidence` (what `jc::attest::Attestation` holds: a base64 statement of a
    /// real statement's size, the evidence, the provider table).
    fn session(platform: &str, evidence: Option<serde_json::Value>) -> serde_json::Value {
        let mut body = serde_json::json!({
            "box": "https://box-7.example.net:8443",
            "runId": "9f".repeat(16),
        });
        if let Some(evidence) = evidence {
            body["attestation"] = serde_json::json!({
                "platform": platform,
                "statement": "A".repeat(1_200),
                "evidence": evidence,
                "providers": {"local": "in-process"},
            });
            body["nonce"] = serde_json::json!("5e".repeat(32));
        }
        body
    }

    /// P3 (path audit): noise and QUIC hide a payload's bytes, not its length, so an observer on
    /// the path (or a circuit relay) read each call message's kind from its size — a request,
    /// an acceptance or a refusal, a session, and the platform of the box from the forwarded
    /// attestation. Every message of a call on an insecure-dev, SEV-SNP or Nitro box now puts
    /// the same count of bytes on the stream.
    #[test]
    fn every_call_message_of_a_call_is_one_length_on_the_wire() {
        use crate::{Payload, PayloadKind};
        let message = |kind, body| Payload {
            kind,
            call_id: "call-3b9e1c07d2a44f1e".into(),
            body,
        };
        // The jc crate's sample program, signed by both parties as a call.request carries it.
        let mut program: serde_json::Value =
            serde_json::from_slice(&fixture("jc/tests/data/program.json")).expect("program");
        program["signatures"] = serde_json::json!([
            {"keyid": "d7".repeat(32), "sig": "a1".repeat(64)},
            {"keyid": "3d".repeat(32), "sig": "b2".repeat(64)},
        ]);
        let dev = serde_json::json!({
            "report_data": "00".repeat(64), "key": "d7".repeat(32), "signature": "a1".repeat(64),
        });
        let snp_report = hex::decode(
            String::from_utf8_lossy(&fixture("jc/tests/data/sev-snp/virtee-report_milan.hex"))
                .split_whitespace()
                .collect::<String>(),
        )
        .expect("report hex");
        let snp = serde_json::json!({
            "report": base64_sized(&snp_report),
            "vek": base64_sized(&fixture("jc/tests/data/sev-snp/virtee-vcek_milan.der")),
            "chain": pem_bodies(&fixture("jc/tests/data/sev-snp/virtee-cert_chain_milan.pem")),
        });
        let nitro_doc = fixture("attest/tests/data/nitro/evervault-valid-attestation-doc-base64");
        let nitro = serde_json::json!({
            "document": String::from_utf8_lossy(&nitro_doc).trim(),
        });
        let tdx: serde_json::Value = serde_json::json!({
            "quote": base64_sized(&fixture("jc/tests/data/tdx/dcapqvl-tdx_quote")),
            "collateral": serde_json::from_slice::<serde_json::Value>(&fixture(
                "jc/tests/data/tdx/dcapqvl-tdx_quote_collateral.json"
            ))
            .expect("collateral"),
        });
        let call = [
            (
                "call.request",
                message(
                    PayloadKind::CallRequest,
                    serde_json::json!({"skill": "song-picker", "program": program}),
                ),
            ),
            (
                "call.accepted",
                message(
                    PayloadKind::CallAccepted,
                    serde_json::json!({
                        "signature": {"keyid": "3d".repeat(32), "sig": "b2".repeat(64)},
                        "nonce": "c4".repeat(32),
                    }),
                ),
            ),
            (
                "call.failed",
                message(
                    PayloadKind::CallFailed,
                    serde_json::json!({"code": "not_admitted", "message": "the owner did not admit the call"}),
                ),
            ),
            (
                "call.session",
                message(PayloadKind::CallSession, session("", None)),
            ),
            (
                "call.session insecure-dev",
                message(PayloadKind::CallSession, session("insecure-dev", Some(dev))),
            ),
            (
                "call.session sev-snp",
                message(PayloadKind::CallSession, session("sev-snp", Some(snp))),
            ),
            (
                "call.session nitro",
                message(PayloadKind::CallSession, session("nitro", Some(nitro))),
            ),
        ];
        let lengths: Vec<(&str, usize)> = call
            .iter()
            .map(|(name, p)| (*name, wire_bytes(p).len()))
            .collect();
        let first = lengths[0].1;
        assert!(
            lengths.iter().all(|(_, l)| *l == first),
            "call messages differ in length on the wire: {lengths:?}"
        );
        // The padding is a bucket's, and the CBOR around it a few dozen bytes.
        assert!(
            (crate::payload::MIN_PADDED_BYTES..crate::payload::MIN_PADDED_BYTES + 64)
                .contains(&first),
            "{lengths:?}"
        );
        // TDX's collateral does not fit the smallest bucket: its session goes to the next one
        // (known and written down; its attestation fetch from the box shows that size anyway).
        let tdx = wire_bytes(&message(
            PayloadKind::CallSession,
            session("tdx", Some(tdx)),
        ))
        .len();
        assert_eq!(
            tdx - first,
            crate::payload::MIN_PADDED_BYTES,
            "a TDX session is the next bucket"
        );
    }

    #[test]
    fn each_answer_is_read_under_its_own_limit() {
        let encode = |r: WireResponse| {
            let mut out = Vec::new();
            futures::executor::block_on(WireCodec::new(1 << 20, 1024).write_response(
                &protocol(),
                &mut out,
                r,
            ))
            .expect("encodes");
            out
        };
        // A payload answered with a megabyte (a "refusal" with a long reason): cut at 4 KiB,
        // so it does not decode.
        let long_ack = encode(WireResponse::Ack(Ack::Refused {
            reason: "x".repeat(1 << 20),
        }));
        let payload = || {
            let key = crate::keypair_from_seed(&[7; 32]).expect("key");
            let to = key.public().to_peer_id();
            let p = crate::Payload {
                kind: crate::PayloadKind::CallFailed,
                call_id: "c".into(),
                body: serde_json::json!({}),
            };
            WireRequest::Payload(SignedPayload::sign(&key, &to, &p, 1, 1).expect("signs"))
        };
        assert!(read_answer(payload(), &long_ack).is_err());
        let ok = encode(WireResponse::Ack(Ack::Delivered));
        assert!(matches!(
            read_answer(payload(), &ok),
            Ok(WireResponse::Ack(Ack::Delivered))
        ));
        // An advert fetch answered with 2 MiB: past one advert's limit.
        let big = encode(WireResponse::Advert(Some("a".repeat(2 << 20))));
        assert!(read_answer(WireRequest::Advert, &big).is_err());
        let small = encode(WireResponse::Advert(Some("a".repeat(1000))));
        assert!(matches!(
            read_answer(WireRequest::Advert, &small),
            Ok(WireResponse::Advert(Some(_)))
        ));
    }
}
