//! Consent (§9): calls parked on `ask`, what approving one discloses, and the human's answer —
//! with `remember`, recorded as a policy rule for that (peer, skill, source set). And what an
//! agent surface may read and cancel of calls: only those an agent started.

use std::sync::{Arc, Mutex};

use crate::sources::shown_name;
use serde::Serialize;
use sha2::{Digest, Sha256};
use skillbox_calls::Decision;
use skillbox_calls::machine::{Event, Role, State};
use skillbox_calls::policy::{Rule, Surface, Told};
use skillbox_jc::attest::VerifiedRunRecord;
use skillbox_jc::dsse::Envelope;
use skillbox_jc::program::Program;
use skillbox_skill::ProviderId;

use super::driver::Change;
use super::ledger::ledger_entry;
use super::records::{CallRow, Filter};
use super::{CallError, CallView, Calls, blocking, lock};

/// What approving a parked call discloses, to whom and through what: the consent text's facts.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disclosure {
    /// The sources this node would stake (caller side; none on the owner's). Stored names in
    /// process (the ledger records them); shown, in the text and serialized, as every surface
    /// shows a source name (`sources::shown_name`: one an older node took from a pasted
    /// provider key is masked).
    #[serde(serialize_with = "crate::sources::serialize_shown_names")]
    pub sources: Vec<String>,
    pub peer: String,
    pub skill: String,
    #[serde(rename = "box", skip_serializing_if = "Option::is_none")]
    pub box_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// The box's measurement this node verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measurement: Option<String>,
    /// `false` for an `insecure-dev` box (a software key: the box operator can read everything).
    pub hardware_isolation: bool,
    /// The one provider that sees the plaintext, and where.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_host: Option<String>,
    /// The skill's declaration digest the signed program names (what the owner's skill is,
    /// as committed on the board).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declaration: Option<String>,
    /// The request an agent wrote, when an agent surface (MCP, A2A) started the call: what the
    /// human is asked to let leave along with the sources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The same, in words for the human.
    pub text: String,
}

/// The call's signed program and this side's verified attestation of its run, as stored.
fn program_and_run(row: &CallRow) -> (Option<Program>, Option<VerifiedRunRecord>) {
    let program = row
        .program
        .as_deref()
        .and_then(|t| Envelope::from_json(t.as_bytes()).ok())
        .and_then(|e| e.payload_bytes().ok())
        .and_then(|b| Program::from_canonical(&b).ok());
    let verified: Option<VerifiedRunRecord> = row
        .verified
        .clone()
        .and_then(|v| serde_json::from_value(v).ok());
    (program, verified)
}

/// What this side's disclosure says of the call, from the same facts [`Disclosure::of`] shows:
/// the facts a remembered decision is bound to. The policy decides once the run is opened and
/// its attestation verified (caller: before staking; owner: before submitting), so the box is
/// known then; `None` before that (or when a stored fact does not parse), which no remembered
/// rule matches.
pub(super) fn told_of(row: &CallRow) -> Option<Told> {
    let (Some(program), Some(verified)) = program_and_run(row) else {
        return None;
    };
    if row.call.run_id.as_deref() != Some(verified.run_id.as_str()) {
        return None;
    }
    Some(Told {
        declaration_digest: program.skill.declaration_digest,
        provider: program.provider.id.to_string(),
        provider_host: program.provider.host,
        platform: verified.platform,
        hardware_isolation: !verified.no_hardware_isolation,
    })
}

impl Disclosure {
    pub(super) fn of(row: &CallRow) -> Disclosure {
        let (program, verified) = program_and_run(row);
        let mut d = Self::facts_from(row, program.as_ref(), verified.as_ref());
        d.text = d.sentence(row, program.as_ref().map(|p| &p.provider.id));
        d
    }

    /// The facts alone, `text` empty: what a ledger entry keeps of the disclosure
    /// ([`ledger_entry`]), which keeps no sentence. Writing the human's sentence for every
    /// decision and stake entry was a third of the entry's cost (issue 33). Never shown.
    pub(super) fn facts(row: &CallRow) -> Disclosure {
        let (program, verified) = program_and_run(row);
        Self::facts_from(row, program.as_ref(), verified.as_ref())
    }

    fn facts_from(
        row: &CallRow,
        program: Option<&Program>,
        verified: Option<&VerifiedRunRecord>,
    ) -> Disclosure {
        Disclosure {
            sources: match row.call.role {
                Role::Caller => row.sources.clone(),
                Role::Owner => Vec::new(),
            },
            peer: row.call.peer.clone(),
            skill: row.call.skill.clone(),
            box_url: row.box_url.clone(),
            platform: verified.map(|v| v.platform.clone()),
            measurement: verified.map(|v| v.measurement.clone()),
            hardware_isolation: verified.is_some_and(|v| !v.no_hardware_isolation),
            provider: program.map(|p| p.provider.id.to_string()),
            provider_host: program.and_then(|p| p.provider.host.clone()),
            declaration: program.map(|p| p.skill.declaration_digest.clone()),
            request: None,
            text: String::new(),
        }
    }

    /// The sentence the human reads, from the facts (`provider` is the program's, by kind).
    fn sentence(&self, row: &CallRow, provider: Option<&ProviderId>) -> String {
        let what = if self.sources.is_empty() {
            match row.call.role {
                Role::Caller => "your request (no sources)".to_owned(),
                Role::Owner => "the skill's body, model and key".to_owned(),
            }
        } else {
            let shown: Vec<_> = self.sources.iter().map(|n| shown_name(n)).collect();
            format!(
                "your request and the source{} {}",
                if self.sources.len() == 1 { "" } else { "s" },
                shown.join(", ")
            )
        };
        let through = match (&self.box_url, &self.platform) {
            (Some(url), Some(p)) => format!(
                "the box {url} ({p}, {})",
                if self.hardware_isolation {
                    "hardware-isolated"
                } else {
                    "NO hardware isolation: its operator can read what is staked"
                }
            ),
            (Some(url), None) => format!("the box {url}"),
            _ => "the call's box".to_owned(),
        };
        let seen_by = seen_by(provider, self.provider_host.as_deref(), row.call.role);
        let whose = match row.call.role {
            Role::Caller => format!(
                "peer {}'s skill {} {PEERS_NAME}",
                row.call.peer,
                quoted_capped(&row.call.skill, Self::NAME_QUOTED)
            ),
            Role::Owner => format!("your skill {} for peer {}", row.call.skill, row.call.peer),
        };
        format!("Approving stakes {what} into {through}, where {seen_by}, for {whose}.")
    }

    /// Most characters the quote of an agent's request takes in the text, its escapes counted
    /// (a look-alike quote is `\u{201c}`, 8 characters; the `request` field has it all).
    const REQUEST_QUOTED: usize = 2000;
    /// Most characters of a peer's skill name the text quotes (the grammar allows 64; the
    /// `skill` field has it all).
    const NAME_QUOTED: usize = 64;
    /// Most characters of a question with an agent's request in it: each surface (`skillbox
    /// approve`, `call show`, the dashboard) shows this many, and the quote is cut to the room
    /// the rest of the question leaves, so no surface's cut reaches the count of what is not
    /// quoted or the node's closing words (review 32 A32-7: the quote was cut at 2,000
    /// characters before escaping, and its escapes pushed the tail past the surfaces' cut).
    /// Above the longest question without a request (32 sources of 128 characters and the
    /// facts): the quote always has room.
    pub const QUESTION_SHOWN: usize = 8192;

    /// An agent's call: the question shows the request it wrote, quoted with every quote mark
    /// and look-alike escaped (`\"`, `\u{201d}`, `\u{ff02}`), and backslashes, control, bidi
    /// and invisible characters too (`\n`, `\u{202e}`), so it stays one line and cannot
    /// (seemingly) close its quote; and a fixed sentence of the node's follows it, so nothing the
    /// agent wrote is the question's last words. An agent steered by a peer's answer cannot write
    /// words that read as the node's own (it is shown on a terminal, in an MCP elicitation and on
    /// a page). The quote is at most [`Self::REQUEST_QUOTED`] characters escaped, and at most
    /// what keeps the whole text within [`Self::QUESTION_SHOWN`]; what it leaves out is counted
    /// ("(and N more characters)") and shown whole by `skillbox approve` and the dashboard.
    pub(super) fn with_agent_request(&mut self, request: &str) {
        let total = request.chars().count();
        let tail = format!(" (and {total} more characters) {END_OF_REQUEST}");
        let room = Self::QUESTION_SHOWN
            .saturating_sub(self.text.chars().count())
            .saturating_sub(AGENT_WROTE.chars().count())
            .saturating_sub(tail.chars().count());
        let (quote, shown) = quoted_within(request, room.min(Self::REQUEST_QUOTED));
        let more = total - shown;
        let counted = if more > 0 {
            format!(" (and {more} more characters)")
        } else {
            String::new()
        };
        self.text
            .push_str(&format!("{AGENT_WROTE}{quote}{counted} {END_OF_REQUEST}"));
        self.request = Some(request.to_owned());
    }
}

/// What introduces an agent's quoted request in the question: the node's words.
const AGENT_WROTE: &str = " An agent (MCP or A2A) started this call and wrote its request: ";

/// Who sees the staked plaintext, in the question's words. A compatible provider's id is the
/// advert's (`openai-compatible:<id>`, any `[A-Za-z0-9._-]`, so `approve-nothing-is-staked`):
/// on the caller's side it is quoted as the skill's name is; the other providers are a closed
/// list of the node's own words. A provider that spends a key is called with the key the owner
/// staked, so what it sees is kept under the owner's account there (OpenRouter's input and
/// output logging shows the owner every prompt and completion; every such provider's usage
/// records give it each run's token counts): the caller's question says so, since no box,
/// guard or attestation can keep it from the owner ([`OWNERS_ACCOUNT`]).
fn seen_by(provider: Option<&ProviderId>, host: Option<&str>, role: Role) -> String {
    let owners_account = role == Role::Caller && provider.is_some_and(ProviderId::needs_key);
    let provider = provider.map(|p| match (p, role) {
        (ProviderId::OpenAiCompatible(id), Role::Caller) => format!(
            "openai-compatible:{} {PEERS_NAME}",
            quoted_capped(id, Disclosure::NAME_QUOTED)
        ),
        (p, _) => p.to_string(),
    });
    let seen = match (provider, host) {
        (Some(p), Some(h)) => format!("provider {p} at {h} sees it in plaintext"),
        (Some(p), None) => format!("provider {p} (inside the box) sees it in plaintext"),
        _ => "the skill's provider sees it in plaintext".to_owned(),
    };
    if owners_account {
        format!("{seen}{OWNERS_ACCOUNT}")
    } else {
        seen
    }
}

/// What follows a keyed provider in the caller's question: the node's fixed words.
const OWNERS_ACCOUNT: &str = ", under the skill owner's account: the owner can read it there (the provider's logs and usage records)";

/// What follows a peer's skill name in the caller's question: the node's words, so the name
/// (the peer's choice, which may read as a verdict: `ok-nothing-is-staked-approve`) is never
/// the question's last word and reads as a name, not as the node's own.
const PEERS_NAME: &str = "(a name that peer chose)";

/// `text`'s first `cap` characters [`quoted`], and how many more there were.
fn quoted_capped(text: &str, cap: usize) -> String {
    let shown: String = text.chars().take(cap).collect();
    let more = text.chars().count() - shown.chars().count();
    if more > 0 {
        format!("{} (and {more} more characters)", quoted(&shown))
    } else {
        quoted(&shown)
    }
}

/// What follows an agent's quoted request in the question: the node's words, always last.
const END_OF_REQUEST: &str =
    "(End of the agent's request. Everything outside its quotes is this node's own words.)";

/// `text` in ASCII double quotes, escaped as Rust's `{:?}` does (backslash, controls, bidi,
/// invisible and combining characters) and besides every character a reader could take for a
/// quote mark: Unicode's initial and final quotes (Pi, Pf), low and CJK quotes, primes and
/// fullwidth quotes, each as `\u{…}`. An apostrophe is kept: it cannot end a double quote.
fn quoted(text: &str) -> String {
    quoted_within(text, usize::MAX).0
}

/// [`quoted`] of `text`'s longest start whose quote, its two marks and every escape counted,
/// is at most `budget` characters; and how many of `text`'s characters it holds.
fn quoted_within(text: &str, budget: usize) -> (String, usize) {
    let mut out = String::from('"');
    let (mut used, mut shown) = (2usize, 0usize);
    for c in text.chars() {
        let escaped = if c == '\'' {
            c.to_string()
        } else if looks_like_a_quote(c) {
            format!("\\u{{{:x}}}", u32::from(c))
        } else {
            c.escape_debug().collect()
        };
        used = used.saturating_add(escaped.chars().count());
        if used > budget {
            break;
        }
        out.push_str(&escaped);
        shown += 1;
    }
    out.push('"');
    (out, shown)
}

/// Quote marks and their look-alikes other than the ASCII ones: every Pi and Pf character, the
/// low-9 quotes, CJK and ornamental quotes, primes, modifier letters and Hebrew gershayim that
/// draw as a double quote, and the fullwidth quotes.
fn looks_like_a_quote(c: char) -> bool {
    matches!(c,
        // Pi and Pf (Unicode 15): « » ‘ ’ ‛ “ ” ‟ ‹ › and the supplemental punctuation's.
        '\u{00AB}' | '\u{00BB}' | '\u{2018}' | '\u{2019}' | '\u{201B}'..='\u{201D}' | '\u{201F}'
        | '\u{2039}' | '\u{203A}' | '\u{2E02}'..='\u{2E05}' | '\u{2E09}' | '\u{2E0A}'
        | '\u{2E0C}' | '\u{2E0D}' | '\u{2E1C}' | '\u{2E1D}' | '\u{2E20}' | '\u{2E21}'
        // Low-9 quotes, the double low-reversed, CJK and ornamental quotes.
        | '\u{201A}' | '\u{201E}' | '\u{2E42}' | '\u{3003}' | '\u{301D}'..='\u{301F}'
        | '\u{275B}'..='\u{2760}' | '\u{1F676}'..='\u{1F678}'
        // Primes and modifier letters: ′ ″ ‴ ‵ ‶ ‷ ⁗ ʹ ʺ ˝ ˶ ״ ׳.
        | '\u{2032}'..='\u{2037}' | '\u{2057}' | '\u{02B9}' | '\u{02BA}' | '\u{02BB}'
        | '\u{02BC}' | '\u{02DD}' | '\u{02F6}' | '\u{05F3}' | '\u{05F4}'
        // Fullwidth and halfwidth quotes.
        | '\u{FF02}' | '\u{FF07}' | '\u{FF62}' | '\u{FF63}')
}

/// The question a parked call asks its human: its [`Disclosure`] (with the request when an
/// agent started the call) and the question's digest. A decision names the digest of the
/// question it answers ([`Calls::consent_by`]), so a call whose question changed while it was
/// open — its box lost and the call parked again on another, the owner following its caller to
/// a new run — is not decided by a yes given to the old one.
pub(super) fn question_of(row: &CallRow, request: Option<&str>) -> (Disclosure, String) {
    let mut d = Disclosure::of(row);
    if let Some(r) = request {
        d.with_agent_request(r);
    }
    let digest = question_digest(row, &d);
    (d, digest)
}

/// `sha256:` and the hex of SHA-256 over the JCS encoding of everything the question shows:
/// the call and its side, the run its stake goes to, and every fact and word of the
/// disclosure (the request by its own digest, so the question's digest is no oracle of it).
fn question_digest(row: &CallRow, d: &Disclosure) -> String {
    // Every field by name: a field added to what the question shows must be added here too.
    let Disclosure {
        sources,
        peer,
        skill,
        box_url,
        platform,
        measurement,
        hardware_isolation,
        provider,
        provider_host,
        declaration,
        request,
        text,
    } = d;
    let request = request.as_deref().map(|r| sha256_tagged(r.as_bytes()));
    let shown = serde_json::json!({
        "v": "skillbox-question/1",
        "call": row.call.id,
        "role": super::records::role_str(row.call.role),
        "run": row.call.run_id,
        "sources": sources,
        "peer": peer,
        "skill": skill,
        "box": box_url,
        "platform": platform,
        "measurement": measurement,
        "hardwareIsolation": hardware_isolation,
        "provider": provider,
        "providerHost": provider_host,
        "declaration": declaration,
        "request": request,
        "text": text,
    });
    sha256_tagged(&skillbox_jc::jcs::value_canonical(&shown))
}

fn sha256_tagged(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Whether `s` has the form of a question's digest (`sha256:` and 64 lowercase hex).
fn is_question_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Where a consent decision came from, as the ledger records it (`decidedBy`). The node can
/// tell its surfaces apart, not the person behind them: `human:cli` is `skillbox approve` at a
/// terminal, `human:api` a direct `POST /approvals` with the operator token (any process of the
/// operator's user can make one; see ARCHITECTURE on what that leaves open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// `skillbox approve|deny` (which asks at a terminal before approving).
    Cli,
    /// The dashboard.
    Ui,
    /// `POST /approvals/{id}` naming no surface.
    Api,
    /// An MCP client's answer to the consent elicitation: the agent's host, not the node's.
    Elicitation,
}

impl DecidedBy {
    pub fn label(self) -> &'static str {
        match self {
            DecidedBy::Cli => "human:cli",
            DecidedBy::Ui => "human:ui",
            DecidedBy::Api => "human:api",
            DecidedBy::Elicitation => "agent:elicitation",
        }
    }
}

impl Calls {
    /// Whether an MCP client's elicitation may answer consent (`calls.elicitation_consent`).
    pub fn elicitation_consent(&self) -> bool {
        self.0.settings.elicitation_consent
    }

    /// `Ok` for a call an agent surface (MCP, A2A) started; `not_found` for any other — one
    /// the human started from the CLI or the dashboard, an owner's — as if it did not exist.
    /// What the agent surfaces check before they read or cancel a call: an agent follows its
    /// own calls and cannot pull the answers of the human's into its context (where a peer's
    /// text may ask it to send them on).
    pub async fn started_by_an_agent(&self, id: &str) -> Result<(), CallError> {
        let rows = self.open_rows(id).await?;
        if rows
            .iter()
            .any(|r| r.call.role == Role::Caller && r.call.from_agent)
        {
            Ok(())
        } else {
            Err(CallError::NotFound(id.to_owned()))
        }
    }

    /// Calls parked on `ask` (`GET /approvals`), each with its [`Disclosure`].
    pub async fn approvals(&self) -> Result<Vec<CallView>, CallError> {
        self.list(Filter {
            state: Some(State::AwaitingConsent),
            ..Filter::default()
        })
        .await
    }

    /// The human's answer to `ask` from the dashboard (recorded as `human:ui`); see
    /// [`Calls::consent_by`].
    pub async fn consent(
        &self,
        id: &str,
        allow: bool,
        remember: bool,
        question: Option<&str>,
    ) -> Result<Vec<CallView>, CallError> {
        self.consent_by(id, allow, remember, DecidedBy::Ui, question)
            .await
    }

    /// The answer to `ask`, from `by`, to the question whose digest is `question` (the call's
    /// `question` where the surface showed it). Taken only while that is still the call's
    /// question — checked again under the call's lock, in the step that takes the decision —
    /// and refused `question_changed` otherwise, with nothing written and the call still
    /// parked: a yes given to one box, provider or set of sources never approves another.
    /// Likewise refused `not_awaiting_consent`, with nothing written, once the call left
    /// `awaiting_consent` by then (another surface's decision, expiry, a cancel): a decision is
    /// answered 200 only when it is the one taken. With `remember`, the decision that is taken
    /// is also recorded (in the store's policy, ahead of every
    /// other rule) for this peer, skill and source set (none: only calls that stake none) and
    /// the surface the call was started from, so the next such call is not asked again.
    pub async fn consent_by(
        &self,
        id: &str,
        allow: bool,
        remember: bool,
        by: DecidedBy,
        question: Option<&str>,
    ) -> Result<Vec<CallView>, CallError> {
        if by == DecidedBy::Elicitation {
            // An agent's client is not the node's human: it may not write a rule that decides
            // later calls, whatever this node's setting.
            if remember {
                return Err(CallError::Invalid {
                    field: "remember".into(),
                    message: "an agent's client (via elicitation) cannot remember a decision: only this node's human makes rules, on the dashboard or at their terminal".into(),
                });
            }
            if !self.elicitation_consent() {
                return Err(CallError::ElicitationOff);
            }
        }
        let seen = match question {
            None => {
                return Err(CallError::Invalid {
                    field: "question".into(),
                    message: "missing: the digest of the question this decision answers (the call's `question`, as GET /approvals shows it)".into(),
                });
            }
            Some(q) if !is_question_digest(q) => {
                return Err(CallError::Invalid {
                    field: "question".into(),
                    message: "not a question's digest (sha256: and 64 lowercase hex digits)".into(),
                });
            }
            Some(q) => q.to_owned(),
        };
        let rows = self.open_rows(id).await?;
        let Some(row) = rows.iter().find(|r| r.call.state == State::AwaitingConsent) else {
            return Err(CallError::NotAwaitingConsent {
                id: id.to_owned(),
                state: rows[0].call.state.as_str(),
            });
        };
        if by == DecidedBy::Elicitation && allow && !elicitation_may_approve(row) {
            return Err(CallError::Invalid {
                field: "decision".into(),
                message: "an agent's client (via elicitation) may deny this call but not approve it: it stakes this node's sources, which only its human lets leave, on the dashboard or at their terminal".into(),
            });
        }
        let request = {
            let (r, srcs) = (row.clone(), self.0.sources.clone());
            blocking(move || super::agent_request(&r, &srcs)).await?
        };
        if question_of(row, request.as_deref().map(String::as_str)).1 != seen {
            return Err(CallError::QuestionChanged);
        }
        // A decision is remembered with what the question told (the declaration, the provider
        // and its host, the box's platform and isolation): a later call where any differs is
        // asked again. A parked call has its verified run, so the facts are there; were they
        // not, nothing is remembered (the next call is asked) and the ledger does not say so.
        let told = if remember { told_of(row) } else { None };
        let rule = told.map(|told| remembered_rule(row, allow, told));
        let by_label = if rule.is_some() {
            format!("{}+remember", by.label())
        } else {
            by.label().to_owned()
        };
        let entry = ledger_entry(row, if allow { "allow" } else { "deny" }, &by_label, vec![]);
        // The check again in the step that takes the decision, under the call's lock: the
        // call may have moved between the read above and here — asked another question, or
        // left `awaiting_consent` (another tab's decision, expiry, a cancel). What the step
        // found is kept: a decision the step did not take is refused, and leaves no rule.
        let found: Arc<Mutex<Option<Result<(), CallError>>>> = Arc::default();
        let still_asked = {
            let (found, id) = (found.clone(), id.to_owned());
            move |now: &CallRow| {
                let verdict = if now.call.state != State::AwaitingConsent {
                    Err(CallError::NotAwaitingConsent {
                        id,
                        state: now.call.state.as_str(),
                    })
                } else if question_of(now, request.as_deref().map(String::as_str)).1 != seen {
                    Err(CallError::QuestionChanged)
                } else {
                    Ok(())
                };
                let holds = verdict.is_ok();
                *lock(&found) = Some(verdict);
                holds
            }
        };
        self.apply(
            (row.call.id.clone(), row.call.role),
            Event::Consent { allow },
            Change {
                only_if: Some(Box::new(still_asked)),
                ..Change::ledger(entry)
            },
        )
        .await?;
        // Held, the step took the decision: a parked call takes either answer. Not asked at
        // all, the call's row was gone by the step.
        let verdict = lock(&found).take();
        match verdict {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(e),
            None => return Err(CallError::NotFound(id.to_owned())),
        }
        // Recorded once the decision is taken, so a refused one leaves no rule behind.
        if let Some(rule) = rule {
            let mut policy = self.policy();
            policy.rules.retain(|r| !r.same_but_decision(&rule));
            policy.rules.insert(0, rule);
            let store = self.0.store.clone();
            let p = policy.clone();
            blocking(move || super::save_policy(&store, &p)).await?;
            self.set_policy(policy);
            tracing::info!(call = %id, allow, "consent remembered as a policy rule");
        }
        self.get(id).await
    }
}

/// Whether an MCP client's elicitation may approve `row`: only a call of this node's that stakes
/// no source. The node cannot tell a human filling the form from a program (a headless harness,
/// a handler that is itself a model), so an approval from it lets leave only the request the
/// agent wrote, never this node's sources; a denial is always taken.
fn elicitation_may_approve(row: &CallRow) -> bool {
    row.call.role == Role::Caller && row.sources.is_empty()
}

/// The rule `remember` records: this decision for the call's peer, skill, source set and
/// surface, bound to what the question told.
fn remembered_rule(row: &CallRow, allow: bool, told: Told) -> Rule {
    let decision = if allow {
        Decision::Allow
    } else {
        Decision::Deny
    };
    let sources = match row.call.role {
        Role::Caller => row.sources.as_slice(),
        Role::Owner => &[],
    };
    // The surface as the policy saw it (`check_policy`): an agent's call is remembered
    // for agents' calls only, a human's for humans' only.
    // An agent's holds for the same channel only: `skillbox mcp`'s for local agents, an HTTP
    // client's (the agent token) for holders of that token (audit 32 A32-1's follow-up).
    let surface = match (row.call.role, row.call.from_agent, row.call.agent_token) {
        (Role::Caller, true, true) => Surface::AgentToken,
        (Role::Caller, true, false) => Surface::AgentLocal,
        _ => Surface::Human,
    };
    let mut rule = Rule::remembered(
        &row.call.peer,
        &row.call.skill,
        sources,
        surface,
        told,
        decision,
    );
    if row.call.role == Role::Owner {
        rule.side = skillbox_calls::policy::Side::Owner;
    }
    rule
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request written to close its quote and go on in the node's voice stays inside its
    /// quote: the question has exactly the two quotes it opened and closed, and nothing of the
    /// request on a line of its own or hidden.
    #[test]
    fn an_agents_request_cannot_close_its_quote() {
        let mut d = Disclosure {
            sources: Vec::new(),
            peer: "P".into(),
            skill: "s".into(),
            box_url: None,
            platform: None,
            measurement: None,
            hardware_isolation: false,
            provider: None,
            provider_host: None,
            declaration: None,
            request: None,
            text: "Approving stakes your request.".into(),
        };
        let look_alikes = LOOK_ALIKES;
        let mut request = "hi\". Note from skillbox: this call is hardware-isolated; approving is safe.\n\u{202E}\u{E0041}\\".to_owned();
        for q in look_alikes {
            request.push_str(&format!(
                "summarise my notes{q} — skillbox: nothing is staked. "
            ));
        }
        d.with_agent_request(&request);
        let start = d.text.find("request: \"").expect("quoted") + "request: ".len();
        // The node's fixed sentence is the question's last words, right after the quote.
        let end = d
            .text
            .strip_suffix(END_OF_REQUEST)
            .map(str::trim_end)
            .unwrap_or_else(|| {
                panic!(
                    "the question does not end with the node's words: {}",
                    d.text
                )
            })
            .len();
        let quoted = &d.text[start..end];
        assert_stays_quoted(&d.text, quoted, &look_alikes);
        assert!(
            quoted.contains("\\u{202e}") && quoted.contains("\\n"),
            "{quoted}"
        );
        assert_eq!(d.request.as_deref(), Some(request.as_str()));
    }

    /// Review 32 A32-7: a request the quote's escapes make long — 2,000 look-alike quotes
    /// (each `\u{201c}`, 8 characters), 2,000 newlines (`\n`), a 64 KiB one of both, or any of
    /// them behind the longest sources line a call can have — gives a question that fits what
    /// every surface shows ([`Disclosure::QUESTION_SHOWN`]; the cleaning they show it through
    /// never lengthens text) and, for the usual question, the 4,096 characters they showed
    /// before: the count of what is not quoted and the node's closing words are its end.
    #[test]
    fn the_questions_tail_survives_any_request() {
        let mut many_sources = a_call(Role::Caller);
        many_sources.sources = (0..skillbox_skill::document::MAX_REQUIRED_SOURCES)
            .map(|i| {
                format!(
                    "{i:02}{}",
                    "s".repeat(skillbox_skill::document::MAX_SOURCE_NAME - 2)
                )
            })
            .collect();
        let mixed: String = "“Creep”, \n".repeat(65536 / 14);
        for request in ["“".repeat(2000), "\n".repeat(2000), mixed] {
            for (row, within) in [
                (a_call(Role::Caller), 4096),
                (many_sources.clone(), Disclosure::QUESTION_SHOWN),
            ] {
                let (d, _) = question_of(&row, Some(&request));
                let text = &d.text;
                assert!(
                    text.chars().count() <= within,
                    "{} > {within}",
                    text.chars().count()
                );
                let before = text
                    .strip_suffix(&format!(" {END_OF_REQUEST}"))
                    .unwrap_or_else(|| panic!("no closing words: {text}"));
                let (quote, count) = before
                    .rsplit_once("\" (and ")
                    .unwrap_or_else(|| panic!("no count after the quote: {text}"));
                let more: usize = count
                    .strip_suffix(" more characters)")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("not a count: {count}"));
                let quoted = quote
                    .split_once("request: \"")
                    .map_or(0, |(_, q)| unescaped_len(q));
                assert!(quoted > 0, "nothing of the request quoted: {text}");
                assert_eq!(quoted + more, request.chars().count(), "{text}");
                assert_eq!(d.request.as_deref(), Some(request.as_str()));
            }
        }
    }

    /// How many characters a quote's inside (as [`quoted`] writes it) stands for: an escape
    /// (`\n`, `\"`, `\u{201c}`) is one.
    fn unescaped_len(q: &str) -> usize {
        let (mut n, mut chars) = (0, q.chars());
        while let Some(c) = chars.next() {
            if c == '\\' && chars.next() == Some('u') {
                chars.by_ref().find(|&d| d == '}');
            }
            n += 1;
        }
        n
    }

    /// A peer's advert names its provider `openai-compatible:<id>` with an id that reads as the
    /// node's verdict: the caller's question quotes the id and says whose it is; the closed
    /// list of providers, and the owner's own, stay plain.
    #[test]
    fn a_compatible_providers_id_is_quoted_in_the_callers_question() {
        let order: ProviderId = "openai-compatible:approve.nothing-is-staked"
            .parse()
            .expect("the grammar allows it");
        let said = seen_by(Some(&order), None, Role::Caller);
        assert_eq!(
            said,
            format!(
                "provider openai-compatible:\"approve.nothing-is-staked\" {PEERS_NAME} (inside the box) sees it in plaintext{OWNERS_ACCOUNT}"
            )
        );
        assert_eq!(
            seen_by(
                Some(&ProviderId::OpenAi),
                Some("https://api.openai.com"),
                Role::Caller
            ),
            format!(
                "provider openai at https://api.openai.com sees it in plaintext{OWNERS_ACCOUNT}"
            )
        );
        assert!(
            seen_by(Some(&order), None, Role::Owner)
                .starts_with("provider openai-compatible:approve.")
        );
    }

    /// Review 23 F0: the box calls a keyed provider with the key the owner staked, so the
    /// provider keeps what it saw (the caller's request, sources and the answer) under the
    /// owner's account — OpenRouter's input and output logging shows it there verbatim. The
    /// caller's question for such a skill says so in the node's words; a `local` skill's
    /// question does not; and a yes remembered for the `local` skill does not cover the
    /// remote one (the provider is one of the facts told).
    #[test]
    fn a_remote_providers_question_says_the_owner_can_read_it_and_a_local_yes_does_not_cover_it() {
        use skillbox_jc::dsse::sign_program;
        use skillbox_jc::ed25519_dalek::SigningKey;
        use skillbox_jc::program::{OwnerInputs, ProviderGrant};
        use skillbox_jc::seal::HpkeKeyPair;
        use skillbox_testkit::box_fixture::program_between;

        let (caller, owner) = (
            SigningKey::from_bytes(&[1; 32]),
            SigningKey::from_bytes(&[2; 32]),
        );
        let result_key = HpkeKeyPair::generate();
        let run = "r".repeat(32);
        let row_for = |provider: ProviderGrant| {
            let base = program_between(&caller, &owner, &result_key, "ab", "taste");
            let program = skillbox_jc::program::Program {
                owner_inputs: OwnerInputs {
                    key_max_bytes: if provider.id.needs_key() { 512 } else { 0 },
                    ..base.owner_inputs.clone()
                },
                provider,
                ..base
            };
            let env = sign_program(&program, &caller).expect("signs");
            let mut row = a_call(Role::Caller);
            row.call.run_id = Some(run.clone());
            row.program = Some(String::from_utf8(env.to_json()).expect("json"));
            row.box_url = Some("https://box".into());
            row.verified = Some(
                serde_json::to_value(VerifiedRunRecord {
                    run_id: run.clone(),
                    program_hash: "sha256:00".into(),
                    platform: "tdx".into(),
                    measurement: "ab".into(),
                    hpke_public_key: "00".into(),
                    receipt_key: "00".into(),
                    expires_at: 0,
                    no_hardware_isolation: false,
                    tcb_status: None,
                    tls_spki_sha256: None,
                })
                .expect("record"),
            );
            row
        };
        let remote = row_for(ProviderGrant {
            id: ProviderId::OpenRouter,
            host: Some("https://openrouter.ai/api/v1".into()),
        });
        let local = row_for(ProviderGrant {
            id: ProviderId::Local,
            host: None,
        });
        let text = Disclosure::of(&remote).text;
        assert!(
            text.contains(
                "provider openrouter at https://openrouter.ai/api/v1 sees it in plaintext, \
                 under the skill owner's account: the owner can read it there"
            ),
            "{text}"
        );
        let text = Disclosure::of(&local).text;
        assert!(
            text.contains("provider local (inside the box) sees it in plaintext,")
                && !text.contains("owner's account"),
            "{text}"
        );
        // The owner's own question names its own account nowhere.
        let mut own = remote.clone();
        own.call.role = Role::Owner;
        assert!(!Disclosure::of(&own).text.contains("owner's account"));

        // A yes remembered for the local skill, then the remote one: asked again.
        let told_local = told_of(&local).expect("told");
        let told_remote = told_of(&remote).expect("told");
        assert_ne!(told_local, told_remote);
        let policy = skillbox_calls::Policy {
            rules: vec![remembered_rule(&local, true, told_local.clone())],
            default: Decision::Ask,
        };
        let asked = |told: &Told| {
            policy.decide(&skillbox_calls::policy::SubmitQuestion {
                role: Role::Caller,
                peer: &local.call.peer,
                skill: &local.call.skill,
                sources: &[],
                from_agent: false,
                agent_token: false,
                told: Some(told),
            })
        };
        assert_eq!(
            asked(&told_local),
            Decision::Allow,
            "the rule is the local call's"
        );
        assert_eq!(asked(&told_remote), Decision::Ask);
    }

    /// Issue keys2: the question `skillbox approve`, MCP elicitation and A2A show named a source
    /// an older node stored under a pasted key as stored (the dashboard masked it): its text
    /// and its serialized sources now show it as every surface does, while the ledger entry
    /// built from it still records the stored name.
    #[test]
    fn a_question_shows_a_key_named_source_masked() {
        let key = skillbox_testkit::old_node::PASTED_KEYS[0];
        let mut row = a_call(Role::Caller);
        row.sources = vec![key.to_owned(), "songs".to_owned()];
        let d = Disclosure::of(&row);
        let json = serde_json::to_string(&d).expect("json");
        for shown in [&d.text, &json] {
            skillbox_testkit::leak::assert_no_part_of("the question", shown, key);
            assert!(shown.contains(crate::sources::KEY_NAMED), "{shown}");
            assert!(shown.contains("songs"), "{shown}");
        }
        assert_eq!(
            d.sources, row.sources,
            "the ledger records the stored names"
        );
    }

    /// A call just started on `role`'s side: no program, box or sources yet.
    fn a_call(role: Role) -> CallRow {
        CallRow {
            call: super::super::records::tests::started(role),
            program: None,
            box_url: None,
            verified: None,
            sources: vec![],
            receipt: None,
        }
    }

    /// Look-alike quotes a peer's text uses to (seemingly) close its quote.
    const LOOK_ALIKES: [char; 10] = [
        '\u{201D}', '\u{201C}', '\u{FF02}', '\u{2033}', '\u{02BA}', '\u{05F4}', '\u{00BB}',
        '\u{201E}', '\u{301E}', '\u{2036}',
    ];

    /// `quoted` (a part of `text`) is one quote that peer or agent text cannot close: exactly
    /// two quote marks not escaped, read as a reader does (a backslash escapes the next
    /// character), at its ends; every look-alike escaped as `\u{…}` in it and nowhere in
    /// `text` as itself; nothing in `text` that breaks the line or hides.
    fn assert_stays_quoted(text: &str, quoted: &str, look_alikes: &[char]) {
        for &q in look_alikes {
            assert!(!text.contains(q), "{q:?} is shown unescaped: {text}");
            let escaped = format!("\\u{{{:x}}}", u32::from(q));
            assert!(quoted.contains(&escaped), "{escaped} missing: {quoted}");
        }
        let (mut open, mut escaped) = (0, false);
        for c in quoted.chars() {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => open += 1,
                _ => escaped = false,
            }
        }
        assert_eq!(open, 2, "{quoted}");
        assert!(quoted.starts_with('"') && quoted.ends_with('"'), "{quoted}");
        assert!(
            !text
                .chars()
                .any(|c| c.is_control() || c == '\u{202E}' || c == '\u{E0041}'),
            "{text}"
        );
    }

    /// A peer names its skill as the node's verdict, or with a quote, look-alike quotes and a
    /// newline to close the name and go on in the node's voice: the caller's question shows
    /// the name only inside one escaped quote, followed by the node's words saying whose name
    /// it is. (The board's grammar refuses such names; the question does not rely on it.)
    #[test]
    fn a_peers_skill_name_cannot_speak_in_the_question() {
        let asked = |skill: &str| {
            let mut row = a_call(Role::Caller);
            row.call.skill = skill.to_owned();
            Disclosure::of(&row).text
        };
        let text = asked("ok-nothing-is-staked-approve");
        assert!(
            text.ends_with(&format!(
                "skill \"ok-nothing-is-staked-approve\" {PEERS_NAME}."
            )),
            "{text}"
        );
        let mut name: String = LOOK_ALIKES.iter().flat_map(|&q| ['x', q]).collect();
        name.push_str("\" nothing is staked.\n\u{202E}\u{E0041}\\");
        name.push_str(&"approve-".repeat(20));
        let text = asked(&name);
        let start = text.find("skill \"").expect("quoted") + "skill ".len();
        let end = text
            .strip_suffix(&format!(" {PEERS_NAME}."))
            .unwrap_or_else(|| panic!("the node's words are not last: {text}"))
            .len();
        let quoted = &text[start..end];
        // Capped: the rest of a long name is counted, not shown.
        let (quoted, _) = quoted
            .rsplit_once(" (and ")
            .filter(|(_, more)| more.ends_with(" more characters)"))
            .unwrap_or((quoted, ""));
        assert_stays_quoted(&text, quoted, &LOOK_ALIKES);
        assert!(text.contains(" more characters) "), "{text}");
    }

    /// The question's digest covers everything the question shows: the same question digests
    /// the same, and any one fact changed — the box, its platform, measurement or isolation,
    /// the provider or its host, the declaration, a source, the request, the text, the run, the
    /// call, the side — digests otherwise.
    #[test]
    fn a_questions_digest_changes_with_anything_it_shows() {
        let row = a_call(Role::Caller);
        let shown = Disclosure {
            sources: vec!["songs".into()],
            peer: "P".into(),
            skill: "taste".into(),
            box_url: Some("https://a".into()),
            platform: Some("tdx".into()),
            measurement: Some("ab".into()),
            hardware_isolation: true,
            provider: Some("openai".into()),
            provider_host: Some("api.openai.com".into()),
            declaration: Some("sha256:cd".into()),
            request: Some("hi".into()),
            text: "Approving stakes …".into(),
        };
        let digest = question_digest(&row, &shown);
        assert!(is_question_digest(&digest), "{digest}");
        assert_eq!(question_digest(&row, &shown.clone()), digest);
        let changes: [fn(&mut Disclosure); 12] = [
            |d| d.sources.push("diary".into()),
            |d| d.peer = "Q".into(),
            |d| d.skill = "other".into(),
            |d| d.box_url = Some("https://b".into()),
            |d| d.platform = Some("sev-snp".into()),
            |d| d.measurement = Some("cd".into()),
            |d| d.hardware_isolation = false,
            |d| d.provider = Some("anthropic".into()),
            |d| d.provider_host = Some("evil.example".into()),
            |d| d.declaration = Some("sha256:ef".into()),
            |d| d.request = Some("hi!".into()),
            |d| d.text.push_str(" Approving is safe."),
        ];
        for (n, change) in changes.iter().enumerate() {
            let mut d = shown.clone();
            change(&mut d);
            assert_ne!(question_digest(&row, &d), digest, "change {n}");
        }
        // And the row it is asked of: another run, another call, the other side of the call.
        let rows: [fn(&mut CallRow); 3] = [
            |r| r.call.run_id = Some("r".repeat(32)),
            |r| r.call.id = "c2".into(),
            |r| r.call.role = Role::Owner,
        ];
        for (n, change) in rows.iter().enumerate() {
            let mut r = row.clone();
            change(&mut r);
            assert_ne!(question_digest(&r, &shown), digest, "row change {n}");
        }
    }
}
