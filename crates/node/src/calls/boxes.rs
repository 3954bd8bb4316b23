//! The boxes this node accepts (`boxes.accept` in config): their identity, the providers each
//! can reach, and one HTTP client per box. A box is *accepted* only by URL from config; its
//! identity is what a program lists and what an attestation must match. An `insecure-dev` box
//! counts only when `boxes.allow_insecure_dev` is set.
//!
//! Pins, not claims: a box with a `[[boxes.pins]]` entry must show exactly that identity (its
//! `/healthz` is compared, and every attestation must be signed by the pinned key); a box off
//! loopback must have one (config refuses otherwise). A loopback box without a pin is trusted on
//! first contact: the platform and key its `/healthz` first showed are kept in the store
//! (`box_identities`, so a restart does not forget them), and its attestations must carry that
//! key. An insecure-dev box that shows no key is not used (nothing would tell it from another).
//!
//! The platform is this node's, never the box's: a pinned URL is verified only with its pin's
//! platform (a hardware pin has no insecure-dev verifier, so a hardware box cannot answer with a
//! software attestation for a key of its own), an unpinned URL only with the platform it first
//! showed, and a URL that has shown nothing yet accepts no attestation at all.
//! Provider hosts are pinned too: a box may reach a provider only at its official endpoint, a
//! host in `boxes.provider_hosts`, or a loopback host when the box itself is on loopback — an
//! official endpoint that is loopback (Ollama's) included: beside a remote box it is whatever
//! the box's operator runs or forwards on that machine.
//!
//! TLS: a box off loopback is reached over https only, and its key is the one its attestation
//! binds, not one a CA vouches for (`skillbox_jc::tls`): [`BoxClient::attest`] refuses a box
//! whose attestation came over a connection showing another key (`tls_key_not_attested`, a TLS
//! front or proxy between), a run's stakes, submits and results go over connections showing the
//! key that run's attestation bound only, and the `/healthz` whose providers and load this node
//! acts on over connections showing an attested key only (see [`Boxes::refresh`]). A restarted
//! node binds again the keys of the runs it had verified and that have not expired
//! ([`Boxes::remembering`]), so it can finish them.
//!
//! Load: when several accepted boxes can run a call, the caller tries the least loaded first —
//! the runs in flight the box reported at its last `/healthz`, plus the runs this node has sent
//! it since (so a burst between two reports is spread, not piled on the box that looked idle).
//! A box that answers `busy` or not at all hands the call to the next (see `actions::open_run`).
//!
//! The day's boxes first: an owner pins a peer's UTC day of a skill to the box instances its
//! runs went to and refuses a run on more than `1 + [guard] day_box_moves` of them
//! (`coverage::pin_box`), so spreading one skill's burst over three boxes would lose the skill
//! for the day. A call of a (peer, skill) therefore tries the boxes this node's calls of that
//! (peer, skill) used today first (least loaded among them), then the others by load; a day's
//! box that just failed is benched like any other. Calls of different (peer, skill) still
//! spread. See [`DayBoxes`].
//!
//! A move is the call's history: its record's `moves` names the box left, the box that opened
//! the run and why ([`move_reason`]). Only an open moves: nothing is staked before the run is
//! open, and a stake is sealed to that one run's key, so a box that dies after a stake is not
//! left silently (the call retries it, and ends with its reason when it does not come back).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use skillbox_calls::machine::BoxMove;
use skillbox_jc::JcError;
use skillbox_jc::attest::VerifyPolicy;
use skillbox_jc::client::BoxClient;
use skillbox_jc::program::{BoxIdentity, INSECURE_DEV};
use skillbox_jc::registry::ProviderView;
use skillbox_peers::AcceptedBox;
use skillbox_skill::ProviderId;

use crate::config::BoxPin;
use crate::store::Store;

/// What an unpinned box URL showed the first time it answered (kept in the store): the
/// platform and key every later answer and attestation of that URL must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstSeen {
    pub platform: String,
    /// The evidence key, lowercase hex (insecure-dev: always present).
    pub key: Option<String>,
}

/// The last time this node asked an accepted box who it is, and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxCheck {
    /// Unix milliseconds.
    pub at_ms: u64,
    /// `None`: it answered and is usable. Otherwise a stable code: the box's error code when it
    /// did not answer (`box_unreachable`, …), or why its answer is not used
    /// (`insecure_dev_not_allowed`, `pin_mismatch`, `key_changed`).
    pub refusal: Option<&'static str>,
}

/// An accepted box (from config) as the node's human sees it: its identity when it answered,
/// and the last check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxStatus {
    pub url: String,
    pub known: Option<KnownBox>,
    pub last_check: Option<BoxCheck>,
}

/// One accepted box as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownBox {
    pub url: String,
    pub platform: String,
    pub measurement: String,
    /// The evidence key the box showed (insecure-dev): its attestations must carry it.
    pub key: Option<String>,
    pub providers: Vec<ProviderView>,
    /// The runs the box said it had in flight when last asked.
    pub runs_in_flight: usize,
}

impl KnownBox {
    /// Whether this box's `/healthz` listed `provider` as available when last asked.
    pub fn offers(&self, provider: &str) -> bool {
        self.providers
            .iter()
            .any(|p| p.id == provider && p.available)
    }

    pub fn identity(&self) -> BoxIdentity {
        BoxIdentity {
            platform: self.platform.clone(),
            measurement: self.measurement.clone(),
        }
    }
}

pub fn normalize_url(url: &str) -> String {
    url.trim_end_matches('/').to_owned()
}

/// The host an http(s) URL names (an IPv6 address without its brackets); `None` for one with
/// userinfo (`http://127.0.0.1@evil.example` is evil.example).
pub fn url_host(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return None;
    }
    Some(match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    })
}

/// Whether an http(s) URL names a loopback host (`localhost`, 127.0.0.0/8, `[::1]`).
pub fn is_loopback_url(url: &str) -> bool {
    url_host(url).is_some_and(|host| {
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

/// Where this node lets a box reach a provider (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct ProviderHosts {
    extra: BTreeMap<String, Vec<String>>,
}

impl ProviderHosts {
    pub fn new(extra: &BTreeMap<String, Vec<String>>) -> ProviderHosts {
        ProviderHosts {
            extra: extra
                .iter()
                .map(|(id, hs)| (id.clone(), hs.iter().map(|h| normalize_url(h)).collect()))
                .collect(),
        }
    }

    /// Whether a box at `box_url` may reach `provider` at `host` (`None`: inside the box).
    pub fn allows(&self, box_url: &str, provider: &ProviderId, host: Option<&str>) -> bool {
        let Some(host) = host else {
            return *provider == ProviderId::Local;
        };
        let host = normalize_url(host);
        // A loopback host is the box's own machine: beside a loopback box that is this one,
        // elsewhere whatever the box's operator runs (or forwards) there. So a default that is
        // loopback (Ollama's) counts only beside a loopback box, like any other loopback host.
        let beside = is_loopback_url(box_url);
        (skillbox_providers::default_base_url(provider) == Some(host.as_str())
            && (beside || !is_loopback_url(&host)))
            || self
                .extra
                .get(&provider.to_string())
                .is_some_and(|hs| hs.contains(&host))
            || (is_loopback_url(&host) && beside)
    }
}

/// A pinned hardware box's verifier, shared by every attestation check of that box (its chain
/// cache outlives one call).
struct Shared(Arc<skillbox_jc::hardware::HardwareVerifier>);

impl skillbox_jc::attest::Verifier for Shared {
    fn platform(&self) -> &str {
        self.0.platform()
    }
    fn verify_evidence(
        &self,
        attestation: &skillbox_jc::attest::Attestation,
        statement: &skillbox_jc::attest::Statement,
        report_data: &[u8; 64],
        now_ms: u64,
    ) -> skillbox_jc::Result<skillbox_jc::attest::Vouched> {
        self.0
            .verify_evidence(attestation, statement, report_data, now_ms)
    }
}

pub struct Boxes {
    allow_insecure_dev: bool,
    pins: BTreeMap<String, BoxPin>,
    hardware: BTreeMap<String, Arc<skillbox_jc::hardware::HardwareVerifier>>,
    /// Per normalized URL: the GPU golden values its pin names (`[[boxes.pins]] gpu`); `None`
    /// for a pin whose table cannot be used (the box is then refused, never left unpinned).
    gpus: BTreeMap<String, Option<Arc<skillbox_attest::nvidia::Verifier>>>,
    provider_hosts: Arc<ProviderHosts>,
    clients: BTreeMap<String, BoxClient>,
    known: RwLock<BTreeMap<String, KnownBox>>,
    checks: RwLock<BTreeMap<String, BoxCheck>>,
    /// When every box was last asked.
    refreshed_at: RwLock<Option<std::time::Instant>>,
    /// Runs this node sent each box since the box last reported its load.
    claimed: Mutex<BTreeMap<String, usize>>,
    /// Boxes that just failed a call (see [`Benched`]): tried after every other for a while.
    benched: Mutex<BTreeMap<String, Benched>>,
    /// The boxes each (peer, skill)'s calls used today (see [`DayBoxes`]).
    day_boxes: Mutex<DayBoxes>,
    /// Trust on first use of the unpinned URLs, as loaded from and written to `store`.
    first_seen: RwLock<BTreeMap<String, FirstSeen>>,
    /// Where first-seen identities are kept; `None`: in memory only (unit tests).
    store: Option<Arc<Store>>,
}

/// A box that failed a call — it did not answer an open or a stake (`box_unreachable`), or
/// refused the program (`box_refused`) — goes behind every other box for new calls until
/// `until`, so they do not try the dead box first. The wait starts at [`BENCH_FIRST`] and
/// doubles with each failure in a row to [`BENCH_MOST`]; an open it answers ends it. Only the
/// order changes: a benched box is still tried when nothing else can run the call.
///
/// A `/healthz` check it did not answer benches it the same way (a box killed between calls
/// is otherwise tried first by every new call until one of them fails on it); a check it
/// answers lifts only such a bench, not one a call's failure set (a box that answers its
/// health but refuses programs stays behind the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Benched {
    until: std::time::Instant,
    wait: std::time::Duration,
    /// Set by unanswered health checks alone: an answered check ends it.
    by_health: bool,
}

/// The boxes this node's calls of each (peer, skill) opened on or chose in one UTC day of this
/// node's clock, oldest first: the owner's day pin counts the instances a day's runs went to, so
/// its next call of that (peer, skill) goes back to one of them rather than to a new one.
///
/// In memory, not in the store: it only orders boxes, a wrong order costs no more than today's
/// load order did, and a node that restarts mid-day forgets it — its next call may be one move
/// (the default `day_box_moves` tolerates one), its calls after that go back to that box.
/// Bounded: only URLs of accepted boxes are kept (config bounds them), at most
/// [`MAX_DAY_KEYS`] (peer, skill) a day, the least recently used let go first; a new day starts
/// empty.
#[derive(Debug, Default)]
struct DayBoxes {
    day: i64,
    /// Per (peer, skill): the day's box URLs, and when it was last used (a counter).
    used: BTreeMap<(String, String), (Vec<String>, u64)>,
    tick: u64,
}

/// (peer, skill) pairs whose day's boxes are kept: far more than one node calls in a day.
const MAX_DAY_KEYS: usize = 4096;

impl DayBoxes {
    /// Move on to `day` (a new day forgets the last) and count a use: the tick now.
    fn roll(&mut self, day: i64) -> u64 {
        if self.day != day {
            self.day = day;
            self.used.clear();
        }
        self.tick += 1;
        self.tick
    }

    /// The boxes `key` used on `day` (a new day forgets the last).
    fn of(&mut self, day: i64, key: &(String, String)) -> Vec<String> {
        let tick = self.roll(day);
        match self.used.get_mut(key) {
            Some((urls, last)) => {
                *last = tick;
                urls.clone()
            }
            None => Vec::new(),
        }
    }

    /// `url` is one of `key`'s boxes on `day`.
    fn note(&mut self, day: i64, key: (String, String), url: &str) {
        let tick = self.roll(day);
        if !self.used.contains_key(&key) && self.used.len() >= MAX_DAY_KEYS {
            let oldest = self
                .used
                .iter()
                .min_by_key(|(_, (_, last))| *last)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.used.remove(&k);
            }
        }
        let (urls, last) = self.used.entry(key).or_insert((Vec::new(), tick));
        *last = tick;
        if !urls.iter().any(|u| u == url) {
            urls.push(url.to_owned());
        }
    }
}

const BENCH_FIRST: std::time::Duration = std::time::Duration::from_secs(30);
const BENCH_MOST: std::time::Duration = std::time::Duration::from_secs(600);

/// What a node knows of its boxes is refreshed on demand past this age (and on the advert
/// schedule).
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

impl std::fmt::Debug for Boxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Boxes")
            .field("accept", &self.clients.keys().collect::<Vec<_>>())
            .field("allow_insecure_dev", &self.allow_insecure_dev)
            .finish()
    }
}

impl Boxes {
    /// Clients for the configured URLs. A URL the HTTP client cannot use is skipped and logged
    /// (config parsing already refused anything but http(s)).
    pub fn new(
        urls: &[String],
        allow_insecure_dev: bool,
        pins: &[BoxPin],
        provider_hosts: &BTreeMap<String, Vec<String>>,
    ) -> Boxes {
        // A release-log pin accepts the measurements its verified, logged releases name.
        let resolved = crate::pins::resolve(pins);
        let pins = resolved.as_slice();
        let mut clients = BTreeMap::new();
        for url in urls {
            let url = normalize_url(url);
            match BoxClient::new(&url) {
                Ok(c) => {
                    clients.insert(url, c);
                }
                Err(e) => tracing::warn!(%url, error = %e, "box client cannot be built"),
            }
        }
        let mut hardware = BTreeMap::new();
        for pin in pins {
            let built = pin
                .hardware_policy()
                .map_err(skillbox_jc::JcError::Internal)
                .and_then(|p| {
                    p.map(skillbox_jc::hardware::HardwareVerifier::new)
                        .transpose()
                });
            match built {
                Ok(Some(v)) => {
                    hardware.insert(normalize_url(&pin.url), Arc::new(v));
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(url = %pin.url, code = e.code(), "box pin policy unusable")
                }
            }
        }
        let mut gpus = BTreeMap::new();
        for pin in pins {
            // The config check refuses a bad table before a node starts; one that still
            // cannot be used refuses the box rather than leaving its GPUs unpinned.
            let built = match pin.gpu_policy() {
                Ok(None) => continue,
                Ok(Some(p)) => skillbox_attest::nvidia::Verifier::new(p).ok().map(Arc::new),
                Err(_) => None,
            };
            if built.is_none() {
                tracing::warn!(url = %pin.url, "box pin gpu policy unusable: box refused");
            }
            gpus.insert(normalize_url(&pin.url), built);
        }
        Boxes {
            allow_insecure_dev,
            hardware,
            gpus,
            pins: pins
                .iter()
                .map(|p| (normalize_url(&p.url), p.clone()))
                .collect(),
            provider_hosts: Arc::new(ProviderHosts::new(provider_hosts)),
            clients,
            known: RwLock::new(BTreeMap::new()),
            checks: RwLock::new(BTreeMap::new()),
            refreshed_at: RwLock::new(None),
            claimed: Mutex::new(BTreeMap::new()),
            benched: Mutex::new(BTreeMap::new()),
            day_boxes: Mutex::new(DayBoxes::default()),
            first_seen: RwLock::new(BTreeMap::new()),
            store: None,
        }
    }

    /// Keep the first-seen identities in `store`, starting from those it already holds.
    pub fn remembering(mut self, store: Arc<Store>) -> crate::Result<Boxes> {
        let rows = store.read(|c| {
            let mut st = c.prepare("SELECT url, platform, key FROM box_identities")?;
            let rows = st
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        FirstSeen {
                            platform: r.get(1)?,
                            key: r.get(2)?,
                        },
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })?;
        self.first_seen = RwLock::new(rows.into_iter().collect());
        self.admit_stored_runs(&store)?;
        self.store = Some(store);
        Ok(self)
    }

    /// The TLS keys of the unexpired runs this node verified before it restarted (each call's
    /// stored verified run): what their stakes, submits and results may go over again.
    fn admit_stored_runs(&self, store: &Store) -> crate::Result<()> {
        let rows = store.read(|c| {
            let mut st = c.prepare(
                "SELECT box_url, verified FROM calls \
                 WHERE box_url IS NOT NULL AND verified IS NOT NULL",
            )?;
            let rows = st
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })?;
        let now = u64::try_from(crate::store::now_secs()).unwrap_or(0);
        for (url, verified) in rows {
            let Some(client) = self.client(&url) else {
                continue;
            };
            // A record this node wrote; one it cannot read again is skipped (its call fails
            // `tls_key_not_attested` rather than trusting a key nobody checked).
            let run = serde_json::from_str::<skillbox_jc::attest::VerifiedRunRecord>(&verified)
                .ok()
                .and_then(|r| skillbox_jc::attest::VerifiedRun::from_record(&r).ok());
            if let Some(run) = run.filter(|r| r.expires_at > now) {
                client.admit_verified(&run);
            }
        }
        Ok(())
    }

    /// What `url` showed first: kept from before, or `shown` now (written to the store before
    /// it counts; if two checks race, the row that landed first wins).
    async fn first_seen(&self, url: &str, shown: FirstSeen) -> Result<FirstSeen, &'static str> {
        if let Some(seen) = self
            .first_seen
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(url)
        {
            return Ok(seen.clone());
        }
        let kept = match &self.store {
            None => shown,
            Some(store) => {
                let (store, url, shown) = (store.clone(), url.to_owned(), shown.clone());
                tokio::task::spawn_blocking(move || {
                    store.write(|tx| {
                        tx.execute(
                            "INSERT OR IGNORE INTO box_identities (url, platform, key, first_seen) \
                             VALUES (?1, ?2, ?3, ?4)",
                            rusqlite::params![
                                url,
                                shown.platform,
                                shown.key,
                                crate::store::now_secs()
                            ],
                        )?;
                        Ok(tx.query_row(
                            "SELECT platform, key FROM box_identities WHERE url = ?1",
                            [&url],
                            |r| {
                                Ok(FirstSeen {
                                    platform: r.get(0)?,
                                    key: r.get(1)?,
                                })
                            },
                        )?)
                    })
                })
                .await
                .map_err(|_| "store_failed")?
                .map_err(|e| {
                    tracing::warn!(error = %e, "cannot keep a box's first-seen identity");
                    "store_failed"
                })?
            }
        };
        Ok(self
            .first_seen
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(url.to_owned())
            .or_insert(kept)
            .clone())
    }

    /// What this node took `url` to be the first time it answered (`None`: pinned, or never
    /// answered).
    pub fn first_seen_of(&self, url: &str) -> Option<FirstSeen> {
        self.first_seen
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&normalize_url(url))
            .cloned()
    }

    /// Ask every accepted box who it is. A box that does not answer keeps its last identity
    /// (a restarting box is still the same box); one that answers with another identity is
    /// updated.
    ///
    /// All at once, each within [`HEALTH_WAIT`]: a box that takes the request and never
    /// answers (a hostile one, or one hung) is counted `transport` after that, and does not
    /// hold up the check of the boxes after it, the node's start or a call's start (which
    /// waits for a refresh a few seconds).
    pub async fn refresh(&self) {
        let checks = self.clients.iter().map(|(url, client)| async move {
            let refusal = tokio::time::timeout(HEALTH_WAIT, self.check(url, client))
                .await
                .unwrap_or_else(|_| {
                    tracing::debug!(%url, "box did not answer /healthz in time");
                    self.unanswered_at(url, std::time::Instant::now());
                    Some(JcError::Transport(String::new()).code())
                });
            (url, refusal)
        });
        for (url, refusal) in futures_util::future::join_all(checks).await {
            let check = BoxCheck {
                at_ms: skillbox_peers::now_ms(),
                refusal,
            };
            self.checks
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(url.clone(), check);
        }
        *self.refreshed_at.write().unwrap_or_else(|p| p.into_inner()) =
            Some(std::time::Instant::now());
    }

    /// Ask one box; `None` when it answered and is known now, else why not.
    ///
    /// What a node acts on — the providers (advertised, and which box a call may use), the load
    /// (which box a call tries first), the measurement shown — comes from an https box only over
    /// a connection showing a key its attestation bound ([`BoxClient::attested_health`]: the
    /// box attested once per key, as before an open), so a man in the middle on the path can
    /// make the check fail (the box keeps what it last showed), not forge a figure. Only an
    /// unpinned box this node never saw is asked over any key first, for the identity it is then
    /// trusted on (platform and key: the policy its attestation is checked with), nothing else.
    async fn check(&self, url: &String, client: &BoxClient) -> Option<&'static str> {
        let answered = match client.is_tls() {
            false => client.health().await,
            true => {
                if let Some(code) = self.first_contact(url, client).await {
                    return Some(code);
                }
                let platform = self
                    .pins
                    .get(url)
                    .map(|p| p.platform.clone())
                    .or_else(|| self.first_seen_of(url).map(|s| s.platform));
                if platform.as_deref() == Some(INSECURE_DEV) && !self.allow_insecure_dev {
                    return Some(dev_not_allowed(url));
                }
                client.attested_health(&self.verify_policy(url)).await
            }
        };
        let h = match answered {
            Ok(h) => h,
            Err(e) => return Some(self.health_failed(url, &e)),
        };
        let box_key = match self.identity(url, &h).await {
            Ok(key) => key,
            Err(code) => return Some(code),
        };
        let providers = providers_taken(h.providers, |id, host| {
            self.provider_hosts.allows(url, id, host)
        });
        let kb = KnownBox {
            url: url.clone(),
            platform: h.platform,
            measurement: h.measurement,
            key: box_key,
            providers,
            runs_in_flight: h.runs_in_flight,
        };
        self.known
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(url.clone(), kb);
        self.health_answered(url);
        // The report counts what this node sent so far.
        self.claimed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(url);
        None
    }

    /// The identity `h` shows checked (see the module docs): its form, insecure-dev allowed,
    /// its pin or the platform and key the URL first showed (kept now if this is the first
    /// contact); the evidence key this node checks attestations of `url` against, or why the
    /// box is not used.
    async fn identity(
        &self,
        url: &String,
        h: &skillbox_jc::server::Health,
    ) -> Result<Option<String>, &'static str> {
        // Shown and compared (and advertised to peers): only the form a program allows.
        if !skillbox_peers::advert::is_box_identity(&h.platform, &h.measurement) {
            tracing::warn!(%url, "box shows a malformed platform or measurement; not used");
            return self.refused(url, "identity_malformed");
        }
        if h.platform == INSECURE_DEV && !self.allow_insecure_dev {
            return Err(dev_not_allowed(url));
        }
        let key = h.key.as_deref().map(str::to_ascii_lowercase);
        // An insecure-dev box's identity is its key: without one it cannot be told from another.
        if h.platform == INSECURE_DEV
            && key
                .as_deref()
                .is_none_or(|k| skillbox_jc::program::decode_hex32(k).is_none())
        {
            tracing::warn!(%url, "insecure-dev box shows no evidence key; not used");
            return self.refused(url, "key_missing");
        }
        let box_key = if let Some(pin) = self.pins.get(url) {
            let matches = h.platform == pin.platform
                && pin.measurements.contains(&h.measurement)
                && pin
                    .key
                    .as_ref()
                    .is_none_or(|k| key.as_ref().is_some_and(|hk| hk.eq_ignore_ascii_case(k)));
            if !matches {
                tracing::warn!(%url, "box does not show its pinned identity; not used");
                return self.refused(url, "pin_mismatch");
            }
            pin.key.clone()
        } else {
            let shown = FirstSeen {
                platform: h.platform.clone(),
                key: key.clone(),
            };
            let seen = match self.first_seen(url, shown).await {
                Ok(seen) => seen,
                Err(code) => return self.refused(url, code),
            };
            // Trusted on first contact: another platform or key on the same URL is another box.
            if seen.platform != h.platform {
                tracing::warn!(%url, "box shows another platform than it first did; not used");
                return self.refused(url, "platform_changed");
            }
            if seen.key != key {
                tracing::warn!(%url, "box shows another key than it first did; not used");
                return self.refused(url, "key_changed");
            }
            seen.key
        };
        Ok(box_key)
    }

    /// A box that answers with an identity this node cannot use is not used at all.
    fn refused(&self, url: &str, code: &'static str) -> Result<Option<String>, &'static str> {
        self.known
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(url);
        Err(code)
    }

    /// For an https box neither pinned nor seen before: its `/healthz` over any key, for the
    /// platform and key it is trusted on from now (kept before it counts); its figures are not
    /// taken (the attested `/healthz` that follows gives them). `None` when it is known now.
    async fn first_contact(&self, url: &String, client: &BoxClient) -> Option<&'static str> {
        if self.pins.contains_key(url) || self.first_seen_of(url).is_some() {
            return None;
        }
        match client.health().await {
            Ok(shown) => self.identity(url, &shown).await.err(),
            Err(e) => Some(self.health_failed(url, &e)),
        }
    }

    /// A health check of `url` failed with `e`: benched when that is the box not answering
    /// (what a call would have moved away from as `box_unreachable`); the code to record.
    fn health_failed(&self, url: &str, e: &JcError) -> &'static str {
        tracing::debug!(%url, code = e.code(), "box did not answer /healthz");
        if move_reason(e) == "box_unreachable" {
            self.unanswered_at(url, std::time::Instant::now());
        }
        e.code()
    }

    /// Every accepted box, answered or not, with its last check (the dashboard's health).
    pub fn status(&self) -> Vec<BoxStatus> {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        let checks = self.checks.read().unwrap_or_else(|p| p.into_inner());
        self.clients
            .keys()
            .map(|url| BoxStatus {
                url: url.clone(),
                known: known.get(url).cloned(),
                last_check: checks.get(url).cloned(),
            })
            .collect()
    }

    /// Whether call start should ask the boxes again first: an accepted box whose identity is
    /// unknown (a box started after this node), or nothing asked for a while.
    pub fn needs_refresh(&self) -> bool {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        let stale = self
            .refreshed_at
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none_or(|t| t.elapsed() > STALE_AFTER);
        stale || self.clients.keys().any(|u| !known.contains_key(u))
    }

    /// `candidates` in the order a call should try them: a box that just failed last (see
    /// [`Benched`]), else least loaded first (see the module docs), ties by URL.
    pub fn by_load(&self, candidates: Vec<KnownBox>) -> Vec<KnownBox> {
        self.by_load_at(candidates, std::time::Instant::now())
    }

    fn by_load_at(&self, candidates: Vec<KnownBox>, now: std::time::Instant) -> Vec<KnownBox> {
        self.ordered_at(candidates, &[], now)
    }

    /// `candidates` in the order a call should try them: those in `day` (the boxes its
    /// (peer, skill) used today) least loaded first, then the others least loaded first, a box
    /// that just failed after all of them (see [`Benched`]).
    fn ordered_at(
        &self,
        candidates: Vec<KnownBox>,
        day: &[String],
        now: std::time::Instant,
    ) -> Vec<KnownBox> {
        let claimed = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        let benched: std::collections::BTreeSet<String> = self
            .benched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, b)| b.until > now)
            .map(|(u, _)| u.clone())
            .collect();
        let (last, usable): (Vec<KnownBox>, Vec<KnownBox>) = order_by_load(candidates, &claimed)
            .into_iter()
            .partition(|k| benched.contains(&k.url));
        let (days, others): (Vec<KnownBox>, Vec<KnownBox>) =
            usable.into_iter().partition(|k| day.contains(&k.url));
        days.into_iter().chain(others).chain(last).collect()
    }

    /// The order a new call of `skill` from `peer` tries `candidates` in (see [`DayBoxes`]):
    /// the first is claimed ([`Boxes::claim`]) and becomes one of the (peer, skill)'s boxes of
    /// the day at once, so the calls of a burst that start before any run opened follow it.
    pub fn pick(&self, peer: &str, skill: &str, candidates: Vec<KnownBox>) -> Vec<KnownBox> {
        self.pick_at(
            peer,
            skill,
            candidates,
            super::coverage::today(),
            std::time::Instant::now(),
        )
    }

    fn pick_at(
        &self,
        peer: &str,
        skill: &str,
        candidates: Vec<KnownBox>,
        day: i64,
        now: std::time::Instant,
    ) -> Vec<KnownBox> {
        let key = (peer.to_owned(), skill.to_owned());
        // Held across the choice and the note: calls of one (peer, skill) starting together
        // would otherwise each see an empty day and spread by load.
        let mut days = self.day_boxes.lock().unwrap_or_else(|p| p.into_inner());
        let used = days.of(day, &key);
        let ordered = self.ordered_at(candidates, &used, now);
        if let Some(first) = ordered.first() {
            self.claim(&first.url);
            days.note(day, key, &first.url);
        }
        ordered
    }

    /// A run of `skill` from `peer` opened on the box at `url` (the one picked, or another it
    /// moved to): one of the (peer, skill)'s boxes of the day.
    pub fn used_today(&self, peer: &str, skill: &str, url: &str) {
        let url = normalize_url(url);
        if !self.clients.contains_key(&url) {
            return;
        }
        self.day_boxes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .note(
                super::coverage::today(),
                (peer.to_owned(), skill.to_owned()),
                &url,
            );
    }

    /// The box at `url` failed a call for `reason` (one of [`BoxMove::REASONS`]): a box that
    /// did not answer or refused the program is benched (see [`Benched`]); a full one is not
    /// (it has room the moment a run ends).
    pub fn failed(&self, url: &str, reason: &str) {
        if matches!(reason, "box_unreachable" | "box_refused") {
            self.failed_at(url, std::time::Instant::now());
        }
    }

    fn failed_at(&self, url: &str, now: std::time::Instant) {
        self.bench(url, now, false);
    }

    /// The box at `url` did not answer a health check (see [`Benched`]).
    fn unanswered_at(&self, url: &str, now: std::time::Instant) {
        self.bench(url, now, true);
    }

    /// The box at `url` answered a health check: a bench only such checks set ends.
    fn health_answered(&self, url: &str) {
        let mut benched = self.benched.lock().unwrap_or_else(|p| p.into_inner());
        let url = normalize_url(url);
        if benched.get(&url).is_some_and(|b| b.by_health) {
            benched.remove(&url);
        }
    }

    fn bench(&self, url: &str, now: std::time::Instant, by_health: bool) {
        let mut benched = self.benched.lock().unwrap_or_else(|p| p.into_inner());
        let b = benched.entry(normalize_url(url)).or_insert(Benched {
            until: now,
            wait: std::time::Duration::ZERO,
            by_health,
        });
        b.by_health &= by_health;
        // A failure while benched (calls already under way) does not lengthen the wait;
        // one after it ran out doubles it.
        if b.until <= now {
            b.wait = (b.wait * 2).clamp(BENCH_FIRST, BENCH_MOST);
            b.until = now + b.wait;
        }
    }

    /// The box at `url` opened a run: it is not benched any more.
    pub fn answered(&self, url: &str) {
        self.benched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&normalize_url(url));
    }

    /// Count a run this node is sending to the box at `url`, until the box next reports.
    pub fn claim(&self, url: &str) {
        *self
            .claimed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(normalize_url(url))
            .or_default() += 1;
    }

    /// The known boxes a run of `program` (a call of `skill` from `peer`) may be opened on
    /// instead of `current` (it answered `busy` or not at all): listed by identity in the
    /// program, offering its provider at the very host the program names (the attestation binds
    /// it), the (peer, skill)'s boxes of the day first, each group least loaded first.
    pub fn alternatives(
        &self,
        current: &str,
        program: &skillbox_jc::program::Program,
        (peer, skill): (&str, &str),
    ) -> Vec<KnownBox> {
        let current = normalize_url(current);
        let provider = program.provider.id.to_string();
        let host = program.provider.host.as_deref().map(normalize_url);
        let others = self
            .known()
            .into_iter()
            .filter(|k| k.url != current)
            .filter(|k| program.boxes.contains(&k.identity()))
            .filter(|k| {
                k.providers.iter().any(|p| {
                    p.id == provider && p.available && p.host.as_deref().map(normalize_url) == host
                })
            })
            .collect();
        let used = self.day_boxes.lock().unwrap_or_else(|p| p.into_inner()).of(
            super::coverage::today(),
            &(peer.to_owned(), skill.to_owned()),
        );
        self.ordered_at(others, &used, std::time::Instant::now())
    }

    pub fn known(&self) -> Vec<KnownBox> {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        known.values().cloned().collect()
    }

    /// The advert's `boxes`: identity and URL of each accepted box seen so far.
    pub fn advertised(&self) -> Vec<AcceptedBox> {
        self.known()
            .into_iter()
            .map(|k| AcceptedBox {
                platform: k.platform,
                measurement: k.measurement,
                url: Some(k.url),
            })
            .collect()
    }

    /// The client of an accepted box; `None` for a URL not in config.
    pub fn client(&self, url: &str) -> Option<&BoxClient> {
        self.clients.get(&normalize_url(url))
    }

    pub fn accepts_identity(&self, platform: &str, measurement: &str) -> bool {
        self.known()
            .iter()
            .any(|k| k.platform == platform && k.measurement == measurement)
    }

    /// Whether some accepted box may reach `provider` at `host` (the owner's program check;
    /// the attestation of the box actually used is checked against its own URL).
    pub fn accepts_provider_host(&self, provider: &ProviderId, host: Option<&str>) -> bool {
        self.clients
            .keys()
            .any(|url| self.provider_hosts.allows(url, provider, host))
    }

    /// How this node verifies the attestations of the box at `url`: only the platform of its
    /// pin (or the one it first showed), signed by its pinned (or first-seen) key, with this
    /// node's provider-host pins for that box. A URL with neither accepts nothing.
    pub fn verify_policy(&self, url: &str) -> VerifyPolicy {
        let url = normalize_url(url);
        let identity = match self.pins.get(&url) {
            Some(pin) => Some((pin.platform.clone(), pin.key.clone())),
            None => self.first_seen_of(&url).map(|s| (s.platform, s.key)),
        };
        let Some((platform, key)) = identity else {
            return VerifyPolicy::refusing();
        };
        // A software attestation is only ever checked against a key: no key, no box.
        if platform == INSECURE_DEV && key.is_none() {
            return VerifyPolicy::refusing();
        }
        let hosts = self.provider_hosts.clone();
        let mut policy = VerifyPolicy::new(self.allow_insecure_dev);
        if let Some(v) = self.hardware.get(&url) {
            policy = policy.with_verifier(Box::new(Shared(v.clone())));
        }
        match self.gpus.get(&url) {
            Some(Some(g)) => policy = policy.with_gpu_verifier(g.clone()),
            Some(None) => return VerifyPolicy::refusing(),
            None => {}
        }
        policy
            .only_platform(&platform)
            .with_box_keys(key.into_iter().collect())
            .with_provider_hosts(Arc::new(move |id: &ProviderId, host: Option<&str>| {
                hosts.allows(&url, id, host)
            }))
    }
}

/// `insecure_dev_not_allowed`, logged: the box at `url` attests with insecure-dev, which this
/// node does not allow.
fn dev_not_allowed(url: &str) -> &'static str {
    tracing::warn!(%url, "box attests with insecure-dev, which this node does not allow (boxes.allow_insecure_dev)");
    "insecure_dev_not_allowed"
}

/// Why a run left the box that answered an open with `e`, as the call's history says it (one
/// of [`BoxMove::REASONS`]): full (`busy`, its stake memory, its rate), refusing the program
/// (its allow-list, its expiry horizon), or not answering (refused, reset, timed out, a 5xx).
pub fn move_reason(e: &JcError) -> &'static str {
    match e {
        JcError::Busy(_) | JcError::OverBudget { .. } | JcError::RateLimited => "box_busy",
        JcError::Remote { status: 429, .. } => "box_busy",
        JcError::Remote { code, .. } => match code.as_str() {
            "busy" | "rate_limited" => "box_busy",
            "key_not_allowed" | "expires_too_far" => "box_refused",
            _ => "box_unreachable",
        },
        _ => "box_unreachable",
    }
}

/// The history entry of a run opened on `to` after `from` was left for `reason` (one of
/// [`BoxMove::REASONS`], from [`move_reason`]); `run`: the run left there, when the box was lost
/// after it opened one.
pub fn moved(from: &str, to: &str, reason: &'static str, run: Option<&String>) -> BoxMove {
    BoxMove {
        at_ms: super::now_ms(),
        from: normalize_url(from),
        to: normalize_url(to),
        reason: reason.to_owned(),
        run: run.cloned(),
    }
}

/// Least loaded first: reported runs plus runs claimed since the report; ties by URL.
fn order_by_load(mut boxes: Vec<KnownBox>, claimed: &BTreeMap<String, usize>) -> Vec<KnownBox> {
    boxes.sort_by_cached_key(|k| {
        let load = k
            .runs_in_flight
            .saturating_add(claimed.get(&k.url).copied().unwrap_or(0));
        (load, k.url.clone())
    });
    boxes
}

/// How long one box's `/healthz` may take within a refresh.
const HEALTH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Provider entries taken from a box's report, at most: a box names each provider it has once,
/// and there are a handful.
const MAX_BOX_PROVIDERS: usize = 32;

/// What this node keeps of the providers a box reports (its `/healthz`, the box's own words,
/// shown on the dashboard and read at call start): entries whose id is a provider id and whose
/// host, when it names one, is an http(s) URL of sane length — the rest dropped, not kept as
/// the box wrote them — at most [`MAX_BOX_PROVIDERS`], each with this node's own reason, never
/// the box's. `pinned` says whether this node pins the provider at that host.
fn providers_taken(
    reported: Vec<ProviderView>,
    pinned: impl Fn(&ProviderId, Option<&str>) -> bool,
) -> Vec<ProviderView> {
    let url_like = |h: &str| {
        h.len() <= 512
            && h.parse::<axum::http::Uri>().is_ok_and(|u| {
                matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some()
            })
    };
    reported
        .into_iter()
        .filter_map(|v| {
            let id = v.id.parse::<ProviderId>().ok()?;
            if v.host.as_deref().is_some_and(|h| !url_like(h)) {
                return None;
            }
            let reason = match (v.available, pinned(&id, v.host.as_deref())) {
                (true, true) => None,
                (true, false) => {
                    Some("this node does not pin that provider host (boxes.provider_hosts)")
                }
                (false, _) => Some("the box reports it unavailable"),
            };
            Some(ProviderView {
                id: id.to_string(),
                available: reason.is_none(),
                host: v.host,
                reason: reason.map(str::to_owned),
            })
        })
        .take(MAX_BOX_PROVIDERS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A box's report of its providers is the box's text: what the node keeps of it (and the
    /// dashboard shows) is entries of provider ids and http(s) hosts, this node's own reasons,
    /// and no more than a box could honestly name — not words written as an id, a reason that
    /// says anything, or thousands of entries.
    #[test]
    fn a_boxs_provider_report_is_kept_only_in_its_closed_form() {
        let view =
            |id: &str, available: bool, host: Option<&str>, reason: Option<&str>| ProviderView {
                id: id.into(),
                available,
                host: host.map(str::to_owned),
                reason: reason.map(str::to_owned),
            };
        let mut reported = vec![
            view(
                "Your node key leaked: reinstall from http://evil.example",
                true,
                None,
                None,
            ),
            view(
                "openai",
                false,
                None,
                Some("call 555-0100 to restore service"),
            ),
            view("openrouter", true, Some("javascript:alert(1)"), None),
            view("local", true, None, Some("trust me")),
            view(
                "openai-compatible:mine",
                true,
                Some("http://127.0.0.1:9/v1"),
                None,
            ),
        ];
        reported.extend((0..5000).map(|_| view("local", true, None, None)));
        let kept = providers_taken(reported, |id, _| id.to_string() != "openai-compatible:mine");
        assert_eq!(kept.len(), MAX_BOX_PROVIDERS);
        let first: Vec<(&str, bool, Option<&str>)> = kept
            .iter()
            .take(3)
            .map(|p| (p.id.as_str(), p.available, p.reason.as_deref()))
            .collect();
        assert_eq!(
            first,
            [
                ("openai", false, Some("the box reports it unavailable")),
                ("local", true, None),
                (
                    "openai-compatible:mine",
                    false,
                    Some("this node does not pin that provider host (boxes.provider_hosts)")
                ),
            ]
        );
        let text = format!("{kept:?}");
        for said in ["leaked", "555-0100", "javascript", "trust me"] {
            assert!(!text.contains(said), "{said} kept");
        }
    }

    fn known(url: &str, runs: usize) -> KnownBox {
        KnownBox {
            url: url.into(),
            platform: INSECURE_DEV.into(),
            measurement: "ab".repeat(48),
            key: None,
            providers: vec![],
            runs_in_flight: runs,
        }
    }

    fn urls(v: &[KnownBox]) -> Vec<&str> {
        v.iter().map(|k| k.url.as_str()).collect()
    }

    #[test]
    fn a_move_names_its_reason_by_a_closed_code() {
        let remote = |status: u16, code: &str| JcError::Remote {
            status,
            code: code.into(),
        };
        let cases = [
            (
                JcError::Transport("connection refused".into()),
                "box_unreachable",
            ),
            (remote(502, "http"), "box_unreachable"),
            (remote(503, "busy"), "box_busy"),
            (JcError::Busy(3), "box_busy"),
            (JcError::RateLimited, "box_busy"),
            (remote(403, "key_not_allowed"), "box_refused"),
            (remote(400, "expires_too_far"), "box_refused"),
        ];
        for (e, want) in cases {
            assert_eq!(move_reason(&e), want, "{e:?}");
            assert!(BoxMove::REASONS.contains(&want));
        }
        let m = moved("http://a/", "http://b", "box_unreachable", None);
        assert_eq!((m.from.as_str(), m.to.as_str()), ("http://a", "http://b"));
        assert_eq!(m.reason, "box_unreachable");
    }

    #[test]
    fn boxes_are_tried_least_loaded_first_counting_runs_sent_since_the_report() {
        let boxes = vec![
            known("http://a", 5),
            known("http://b", 2),
            known("http://c", 2),
        ];
        let none = BTreeMap::new();
        assert_eq!(
            urls(&order_by_load(boxes.clone(), &none)),
            ["http://b", "http://c", "http://a"]
        );
        // Four runs sent to b since it reported 2: it is now the busiest.
        let claimed = BTreeMap::from([("http://b".to_owned(), 4)]);
        assert_eq!(
            urls(&order_by_load(boxes, &claimed)),
            ["http://c", "http://a", "http://b"]
        );
    }

    #[test]
    fn a_box_that_failed_goes_last_for_a_while_growing_to_ten_minutes_until_it_answers() {
        let urls_in = ["http://a".to_owned(), "http://b".to_owned()];
        let boxes = Boxes::new(&urls_in, true, &[], &BTreeMap::new());
        // a is the least loaded: first, until it fails.
        let both = vec![known("http://a", 0), known("http://b", 3)];
        let t0 = std::time::Instant::now();
        let order =
            |at: std::time::Duration| urls(&boxes.by_load_at(both.clone(), t0 + at)).join(" ");
        assert_eq!(order(std::time::Duration::ZERO), "http://a http://b");
        boxes.failed_at("http://a/", t0);
        let s = std::time::Duration::from_secs;
        assert_eq!(order(s(0)), "http://b http://a");
        assert_eq!(order(s(29)), "http://b http://a");
        assert_eq!(
            order(s(30)),
            "http://a http://b",
            "30 s, then tried first again"
        );
        // Failing again while benched does not lengthen it; after, the wait doubles.
        boxes.failed_at("http://a", t0 + s(10));
        assert_eq!(order(s(30)), "http://a http://b");
        let mut at = s(30);
        for wait in [60, 120, 240, 480, 600, 600] {
            boxes.failed_at("http://a", t0 + at);
            assert_eq!(order(at + s(wait - 1)), "http://b http://a", "wait {wait}");
            at += s(wait);
            assert_eq!(order(at), "http://a http://b", "wait {wait}");
        }
        // An open it answers resets it: the next failure benches it for 30 s again.
        boxes.answered("http://a");
        boxes.failed_at("http://a", t0 + at);
        assert_eq!(order(at + s(29)), "http://b http://a");
        assert_eq!(order(at + s(30)), "http://a http://b");
        // A full box is not benched.
        boxes.failed("http://b", "box_busy");
        assert!(
            !boxes
                .benched
                .lock()
                .expect("benched")
                .contains_key("http://b")
        );
    }

    /// A box killed between calls was tried first by every new call until one failed on it:
    /// the health check it does not answer benches it; an answered one lifts only that.
    #[tokio::test]
    async fn a_box_that_does_not_answer_its_health_check_goes_last_until_it_does() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let dead = format!("http://{}", closed.local_addr().expect("its address"));
        drop(closed);
        let urls_in = [dead.clone(), "http://b".to_owned()];
        let boxes = Boxes::new(&urls_in, true, &[], &BTreeMap::new());
        let both = vec![known(&dead, 0), known("http://b", 3)];
        let first = |boxes: &Boxes| boxes.by_load(both.clone())[0].url.clone();
        assert_eq!(first(&boxes), dead, "the least loaded first");
        boxes.refresh().await;
        assert_eq!(
            first(&boxes),
            "http://b",
            "a box that did not answer was tried first"
        );
        // It answers again: first again.
        boxes.health_answered(&dead);
        assert_eq!(first(&boxes), dead);
        // A bench a call's failure set is not lifted by an answered check, nor made one.
        boxes.failed(&dead, "box_refused");
        boxes.unanswered_at(&dead, std::time::Instant::now());
        boxes.health_answered(&dead);
        assert_eq!(
            first(&boxes),
            "http://b",
            "an answered check lifted a call's bench"
        );
        boxes.answered(&dead);
        assert_eq!(first(&boxes), dead);
    }

    #[test]
    fn a_burst_between_reports_alternates_over_equal_boxes() {
        let urls_in = ["http://a".to_owned(), "http://b".to_owned()];
        let boxes = Boxes::new(&urls_in, true, &[], &BTreeMap::new());
        let both = vec![known("http://a", 0), known("http://b", 0)];
        let mut sent = BTreeMap::<String, usize>::new();
        for _ in 0..10 {
            let first = boxes.by_load(both.clone())[0].url.clone();
            boxes.claim(&first);
            *sent.entry(first).or_default() += 1;
        }
        assert_eq!(sent.get("http://a"), Some(&5));
        assert_eq!(sent.get("http://b"), Some(&5));
    }

    /// The owner's day pin counts the boxes a (peer, skill)'s runs went to: a burst of one
    /// skill stays on the box its first call picked though the others are less loaded, calls of
    /// other skills and peers still spread, a day's box that failed falls back to load order,
    /// and a new day starts by load.
    #[test]
    fn a_call_tries_the_boxes_its_peer_and_skill_used_today_first() {
        let urls_in = ["http://a", "http://b", "http://c"].map(str::to_owned);
        let boxes = Boxes::new(&urls_in, true, &[], &BTreeMap::new());
        let three = vec![
            known("http://a", 0),
            known("http://b", 0),
            known("http://c", 0),
        ];
        let t0 = std::time::Instant::now();
        let first = |peer: &str, skill: &str, day: i64| {
            boxes.pick_at(peer, skill, three.clone(), day, t0)[0]
                .url
                .clone()
        };
        for _ in 0..6 {
            assert_eq!(first("p", "s", 1), "http://a");
        }
        assert_eq!(first("p", "t", 1), "http://b", "another skill spreads");
        assert_eq!(first("q", "s", 1), "http://c", "another peer spreads");
        // The day's box failed: the next goes by load (b: 1 claim, c: 1), and is the day's too.
        boxes.failed_at("http://a", t0);
        assert_eq!(first("p", "s", 1), "http://b");
        assert_eq!(first("p", "s", 1), "http://b");
        // A new day: by load again (a benched, b: 3 claims, c: 1).
        assert_eq!(first("p", "s", 2), "http://c");
        // A run moved to a box not accepted is not noted.
        boxes.used_today("p", "s", "http://elsewhere");
        let kept = boxes.day_boxes.lock().expect("day boxes");
        assert!(
            kept.used
                .values()
                .all(|(u, _)| u.iter().all(|u| u != "http://elsewhere"))
        );
    }

    #[test]
    fn a_days_boxes_keep_a_bounded_number_of_peer_skill_pairs() {
        let mut days = DayBoxes::default();
        for i in 0..MAX_DAY_KEYS + 10 {
            days.note(1, (format!("p{i}"), "s".into()), "http://a");
        }
        assert_eq!(days.used.len(), MAX_DAY_KEYS);
        // The least recently used went first: the newest is kept, the first is gone.
        let newest = (format!("p{}", MAX_DAY_KEYS + 9), "s".to_owned());
        assert_eq!(days.of(1, &newest), ["http://a"]);
        assert!(days.of(1, &("p0".into(), "s".into())).is_empty());
        days.note(2, ("p".into(), "s".into()), "http://b");
        assert_eq!(days.used.len(), 1, "a new day forgets the last");
    }

    /// A pin of `url`; a hardware one names its TCB floor (a pin without one is refused).
    fn pin(url: &str, platform: &str, key: Option<&str>) -> BoxPin {
        let floor = "min_tcb = { bootloader = 3, tee = 0, snp = 8, microcode = 115 }";
        BoxPin {
            url: url.into(),
            platform: platform.into(),
            measurements: vec!["7a".repeat(48)],
            key: key.map(str::to_owned),
            policy: (platform != skillbox_jc::program::INSECURE_DEV)
                .then(|| toml::from_str(floor).expect("toml")),
            release_log: None,
            gpu: None,
        }
    }

    #[test]
    fn each_box_is_verified_by_its_own_pin() {
        let urls = [
            "https://snp.example".to_owned(),
            "https://dev.example".to_owned(),
        ];
        let key = "cd".repeat(32);
        let boxes = Boxes::new(
            &urls,
            true,
            &[
                pin("https://snp.example", "sev-snp", None),
                pin("https://dev.example/", "insecure-dev", Some(&key)),
            ],
            &BTreeMap::new(),
        );
        let snp = boxes.verify_policy("https://snp.example/");
        let platforms: Vec<&str> = snp.verifiers.iter().map(|v| v.platform()).collect();
        // No insecure-dev verifier beside the hardware one: the box cannot pick a software
        // attestation for a key of its own.
        assert_eq!(platforms, ["sev-snp"]);
        assert_eq!(snp.platform.as_deref(), Some("sev-snp"));
        assert!(snp.box_keys.is_empty());
        let dev = boxes.verify_policy("https://dev.example");
        let platforms: Vec<&str> = dev.verifiers.iter().map(|v| v.platform()).collect();
        assert_eq!(
            platforms,
            ["insecure-dev"],
            "no hardware verifier for the dev box"
        );
        assert_eq!(dev.box_keys, [key]);
    }

    /// `[[boxes.pins]] gpu`: the golden values reach that box's verification (and no other's);
    /// a table that cannot be used refuses the box instead of leaving its GPUs unpinned.
    #[test]
    fn a_pins_gpu_golden_values_verify_that_boxs_gpus() {
        let urls = [
            "https://gpu.example".to_owned(),
            "https://cpu.example".to_owned(),
            "https://bad.example".to_owned(),
        ];
        let golden: toml::Value = toml::from_str(&format!(
            "measurements = [{{ index = 2, values = [\"{}\"] }}]\ndevices = [\"01ab\"]",
            "5e".repeat(48)
        ))
        .expect("toml");
        let mut gpu = pin("https://gpu.example", "sev-snp", None);
        gpu.gpu = Some(golden);
        let mut bad = pin("https://bad.example", "sev-snp", None);
        bad.gpu = Some(toml::from_str("measurements = []").expect("toml"));
        let boxes = Boxes::new(
            &urls,
            false,
            &[gpu, pin("https://cpu.example", "sev-snp", None), bad],
            &BTreeMap::new(),
        );
        let pinned = boxes.verify_policy("https://gpu.example/");
        let policy = pinned.gpu.as_ref().expect("the pin's GPU values").policy();
        assert_eq!(policy.measurements.len(), 1);
        assert_eq!(policy.measurements[0].index, 2);
        assert_eq!(policy.devices, ["01ab"]);
        assert!(boxes.verify_policy("https://cpu.example").gpu.is_none());
        let refused = boxes.verify_policy("https://bad.example");
        assert!(
            refused.verifiers.is_empty(),
            "an unusable GPU pin accepts nothing"
        );
    }

    #[test]
    fn a_box_that_never_answered_is_verified_by_nothing() {
        let urls = ["http://127.0.0.1:9".to_owned()];
        let boxes = Boxes::new(&urls, true, &[], &BTreeMap::new());
        let p = boxes.verify_policy("http://127.0.0.1:9");
        assert!(p.verifiers.is_empty());
        assert_eq!(p.platform.as_deref(), Some(""));
    }

    #[test]
    fn provider_hosts_official_listed_or_loopback_beside_a_loopback_box() {
        let extra = BTreeMap::from([(
            "openai".to_owned(),
            vec!["https://llm.example/v1/".to_owned()],
        )]);
        let h = ProviderHosts::new(&extra);
        let openai: ProviderId = "openai".parse().expect("id");
        let remote = "https://box.example";
        let local = "http://127.0.0.1:7480";
        assert!(h.allows(remote, &openai, Some("https://api.openai.com/v1")));
        assert!(h.allows(remote, &openai, Some("https://llm.example/v1")));
        assert!(!h.allows(remote, &openai, Some("https://llm.attacker.example/v1")));
        assert!(!h.allows(remote, &openai, Some("http://127.0.0.1:9/v1")));
        assert!(h.allows(local, &openai, Some("http://127.0.0.1:9/v1")));
        assert!(
            !h.allows(local, &openai, None),
            "only the embedded model runs in the box"
        );
        assert!(h.allows(remote, &ProviderId::Local, None));
        // Ollama's default is loopback: the remote box's own machine, not this node's.
        let ollama: ProviderId = "ollama".parse().expect("id");
        assert!(!h.allows(remote, &ollama, Some("http://127.0.0.1:11434/v1")));
        assert!(h.allows(local, &ollama, Some("http://127.0.0.1:11434/v1")));
        let listed = ProviderHosts::new(&BTreeMap::from([(
            "ollama".to_owned(),
            vec!["http://127.0.0.1:11434/v1".to_owned()],
        )]));
        assert!(
            listed.allows(remote, &ollama, Some("http://127.0.0.1:11434/v1")),
            "the node's human may list it"
        );
        assert!(!is_loopback_url("http://127.0.0.1@evil.example/"));
        assert!(is_loopback_url("http://[::1]:80/x"));
        assert!(is_loopback_url("https://localhost"));
        assert!(!is_loopback_url("https://localhost.evil.example"));
    }
}
