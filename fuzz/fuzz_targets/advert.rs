//! Fuzz the presence advert check: any bytes from the wire give a verified advert or a refusal,
//! never a panic; an accepted advert's node id is its key's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use skillbox_peers::advert::{peer_of_public_key_hex, verify_advert};

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = verify_advert(data, 128 * 1024) {
        let (peer, _) = peer_of_public_key_hex(&v.advert.public_key).expect("checked key");
        assert_eq!(peer, v.peer);
        assert_eq!(peer.to_base58(), v.advert.node);
    }
});
