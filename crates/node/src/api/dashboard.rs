//! `POST /dashboard/codes`: the dashboard's way in. The operator (the CLI's `skillbox dashboard`,
//! over the 0600 socket with the token it reads from the data dir) asks for a **sign-in code**:
//! good once, for [`CODE_LIFETIME`], on this running node only. The human types it on the
//! dashboard's sign-in page, which trades it for a session (`skillbox-ui`). The token itself is
//! never typed into a page: a look-alike page served on the node's port while the node is down
//! can then collect at most a code, which a node that is down never issued, and which is spent
//! or gone within a minute anyway (review 24a L5).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::bodies::SigninCode;
use super::{ApiError, AppState};

/// How long a sign-in code is good for: long enough to read it off a terminal and type it,
/// short enough that a code seen or kept anywhere is dead by the time it is of use.
pub const CODE_LIFETIME: Duration = Duration::from_secs(60);
/// Where a code is typed.
pub const SIGNIN_PATH: &str = "/ui/login";
/// Codes waiting at once; asking past it drops the oldest.
const MAX_PENDING: usize = 16;
/// A code's letters, 5 bits each: 20 of them are 100 random bits, which nobody guesses within a
/// code's minute whatever the rate (there is no lockout to trip a human up).
const CODE_LETTERS: usize = 20;
/// Lower-case letters and digits, without `l`, `o`, `0` and `1`, which read as one another.
const ALPHABET: &[u8; 32] = b"abcdefghijkmnpqrstuvwxyz23456789";
/// Letters shown between dashes (`abcde-fghij-…`); the dashes are not part of the code.
const GROUP: usize = 5;

/// The sign-in codes issued and not yet used, in the node's memory only (a restart ends them),
/// keyed by the SHA-256 of the code so the map's own lookups say nothing about a guess.
#[derive(Default)]
pub struct SigninCodes {
    pending: Mutex<HashMap<[u8; 32], Pending>>,
}

struct Pending {
    issued: Instant,
    /// The operator token's generation it was issued under (`Shared::operator_epoch`): a code
    /// asked for with a token since replaced is no way in.
    epoch: u64,
}

impl SigninCodes {
    /// A new code, good once for [`CODE_LIFETIME`] under the token generation `epoch`, as shown
    /// to the human (groups of letters between dashes).
    pub fn issue(&self, epoch: u64) -> std::io::Result<Zeroizing<String>> {
        self.issue_at(epoch, Instant::now())
    }

    fn issue_at(&self, epoch: u64, now: Instant) -> std::io::Result<Zeroizing<String>> {
        let raw = Zeroizing::new(crate::crypto::random_bytes::<CODE_LETTERS>()?);
        // 256 is a multiple of 32: every letter is equally likely.
        let letters: Zeroizing<Vec<u8>> =
            Zeroizing::new(raw.iter().map(|b| ALPHABET[usize::from(b & 31)]).collect());
        let mut map = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, p| p.live(now, epoch));
        make_room(&mut map, MAX_PENDING, |p| p.issued);
        map.insert(
            Sha256::digest(&letters[..]).into(),
            Pending { issued: now, epoch },
        );
        let mut shown = Zeroizing::new(String::with_capacity(CODE_LETTERS + CODE_LETTERS / GROUP));
        for (i, group) in letters.chunks(GROUP).enumerate() {
            if i > 0 {
                shown.push('-');
            }
            shown.extend(group.iter().map(|&b| char::from(b)));
        }
        Ok(shown)
    }

    /// Whether `presented` is a code this node issued under the token generation `epoch`, not
    /// used and not expired. It is used up by this call, whatever the answer: a code is good
    /// for one try at most. Dashes, spaces and capitals are the human's and do not count.
    pub fn redeem(&self, presented: &str, epoch: u64) -> bool {
        self.redeem_at(presented, epoch, Instant::now())
    }

    fn redeem_at(&self, presented: &str, epoch: u64, now: Instant) -> bool {
        let letters: Zeroizing<Vec<u8>> = Zeroizing::new(
            presented
                .bytes()
                .filter(|b| !matches!(b, b'-' | b' ' | b'\t'))
                .map(|b| b.to_ascii_lowercase())
                .collect(),
        );
        if letters.len() != CODE_LETTERS || !letters.iter().all(|b| ALPHABET.contains(b)) {
            return false;
        }
        let key: [u8; 32] = Sha256::digest(&letters[..]).into();
        let mut map = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&key).is_some_and(|p| p.live(now, epoch))
    }
}

/// Drop the entries of `map` least recently `used` until one more fits under `cap`: what the
/// dashboard's in-memory holders (these codes, its sessions) do before they take a new one, so
/// whoever asks again and again pushes out old entries rather than growing the node's memory.
pub fn make_room<K: Copy + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    cap: usize,
    used: impl Fn(&V) -> Instant,
) {
    while map.len() >= cap {
        let Some(oldest) = map.iter().min_by_key(|(_, v)| used(v)).map(|(k, _)| *k) else {
            break;
        };
        map.remove(&oldest);
    }
}

impl Pending {
    fn live(&self, now: Instant, epoch: u64) -> bool {
        self.epoch == epoch && now.duration_since(self.issued) < CODE_LIFETIME
    }
}

#[utoipa::path(
    post, path = "/dashboard/codes",
    summary = "A single-use sign-in code for the dashboard (what `skillbox dashboard` asks for over the node's socket and prints): typed on the sign-in page (`path`) within `expiresInSeconds`, it opens a dashboard session once. Held in the node's memory only: a restart, its use, its minute passing or `api.token` being replaced ends it, and no other node takes it.",
    responses(
        (status = 201, description = "A code.", body = SigninCode),
        (status = 503, description = "No random bytes for a code (`unavailable`)."),
    )
)]
pub(super) async fn issue_signin_code(
    State(s): State<AppState>,
) -> Result<(StatusCode, Json<SigninCode>), ApiError> {
    let epoch = s.operator_epoch();
    let code = s.signin_codes.issue(epoch).map_err(|e| {
        tracing::warn!(error = %e, "no random bytes for a dashboard sign-in code");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the node could not draw a sign-in code; try again",
        )
    })?;
    Ok((
        StatusCode::CREATED,
        Json(SigninCode {
            code: code.to_string(),
            expires_in_seconds: CODE_LIFETIME.as_secs(),
            path: SIGNIN_PATH,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letters(code: &str) -> String {
        code.replace('-', "")
    }

    #[test]
    fn a_code_is_100_random_bits_shown_in_groups() {
        let codes = SigninCodes::default();
        let a = codes.issue(0).expect("code");
        let b = codes.issue(0).expect("code");
        assert_ne!(a, b);
        assert_eq!(a.len(), CODE_LETTERS + CODE_LETTERS / GROUP - 1, "{}", *a);
        assert!(a.split('-').all(|g| g.len() == GROUP), "{}", *a);
        assert!(letters(&a).bytes().all(|c| ALPHABET.contains(&c)), "{}", *a);
    }

    /// Typed as the human may: capitals, without the dashes, with spaces.
    #[test]
    fn a_code_is_taken_as_a_human_types_it_and_only_once() {
        let codes = SigninCodes::default();
        let a = codes.issue(0).expect("code");
        assert!(codes.redeem(&a.to_uppercase().replace('-', " "), 0));
        assert!(!codes.redeem(&a, 0), "a code was taken twice");
        let b = codes.issue(0).expect("code");
        assert!(codes.redeem(&letters(&b), 0));
    }

    #[test]
    fn a_wrong_or_malformed_code_is_refused_and_spends_nothing_else() {
        let codes = SigninCodes::default();
        let a = codes.issue(0).expect("code");
        for wrong in [
            "",
            "abcde",
            "aaaaa-aaaaa-aaaaa-aaaaa",
            "00000-00000-00000-00000",
            &format!("{}x", letters(&a)),
            "ǅǅǅǅǅ-ǅǅǅǅǅ-ǅǅǅǅǅ-ǅǅǅǅǅ",
        ] {
            assert!(!codes.redeem(wrong, 0), "{wrong:?}");
        }
        assert!(codes.redeem(&a, 0));
    }

    /// Review 24a L5: a code is good for [`CODE_LIFETIME`]; one seen or kept anywhere (a
    /// look-alike page, a screen) is dead after it, and spent by the try.
    #[test]
    fn an_expired_code_is_refused() {
        let codes = SigninCodes::default();
        let then = Instant::now();
        let a = codes.issue_at(0, then).expect("code");
        assert!(!codes.redeem_at(&a, 0, then + CODE_LIFETIME));
        let b = codes.issue_at(0, then).expect("code");
        let just = CODE_LIFETIME - Duration::from_secs(1);
        assert!(codes.redeem_at(&b, 0, then + just));
    }

    #[test]
    fn a_code_issued_under_a_replaced_token_is_refused() {
        let codes = SigninCodes::default();
        let a = codes.issue(0).expect("code");
        assert!(!codes.redeem(&a, 1));
        assert!(!codes.redeem(&a, 0), "spent by the try");
    }

    #[test]
    fn past_the_cap_the_oldest_code_goes() {
        let codes = SigninCodes::default();
        let then = Instant::now();
        let first = codes.issue_at(0, then).expect("code");
        let rest: Vec<_> = (1..=MAX_PENDING)
            .map(|i| {
                codes
                    .issue_at(0, then + Duration::from_millis(i as u64))
                    .expect("code")
            })
            .collect();
        let now = then + Duration::from_secs(1);
        assert!(!codes.redeem_at(&first, 0, now));
        assert!(rest.iter().all(|c| codes.redeem_at(c, 0, now)));
    }
}
