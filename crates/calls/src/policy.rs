//! Consent policy (design §9): one question, asked at each side's `jc.submit`, answered by rules
//! that match side, peer, skill and sources; and the owner's admission (who may call, how often).
//! Pure: the rate limiter takes `now` as an argument.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::machine::{Decision, Role};

/// `*` matches anything; `prefix*` matches by prefix; anything else matches exactly.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pattern(pub String);

impl Pattern {
    pub fn any() -> Self {
        Pattern("*".into())
    }

    pub fn matches(&self, value: &str) -> bool {
        match self.0.strip_suffix('*') {
            Some(prefix) => value.starts_with(prefix),
            None => self.0 == value,
        }
    }
}

impl Default for Pattern {
    fn default() -> Self {
        Pattern::any()
    }
}

/// Which side a rule is about.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Caller,
    Owner,
    #[default]
    Any,
}

impl Side {
    fn matches(self, role: Role) -> bool {
        matches!(
            (self, role),
            (Side::Any, _) | (Side::Caller, Role::Caller) | (Side::Owner, Role::Owner)
        )
    }
}

/// Where a call was started: an agent surface (MCP, A2A: an agent wrote the request) or a
/// human one (CLI, dashboard, API).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    /// Any agent surface: what a rule written for agents names.
    Agent,
    /// An agent through this user's own channel: `skillbox mcp` (over `api.sock`), or the
    /// operator's token over the socket. What a remembered answer to such a call holds for.
    AgentLocal,
    /// An HTTP agent client holding the agent token (`agent.token`), which it sends to the
    /// node's TCP port — a port another local user may have held while the node was down, and
    /// so collected the token. What a remembered answer to such a call holds for: a yes given to
    /// `skillbox mcp` never lets a holder of the agent token stake the same sources unasked
    /// (audit 32 A32-1's follow-up).
    AgentToken,
    Human,
}

impl Surface {
    fn matches(self, from_agent: bool, agent_token: bool) -> bool {
        match self {
            Surface::Agent => from_agent,
            Surface::AgentLocal => from_agent && !agent_token,
            Surface::AgentToken => from_agent && agent_token,
            Surface::Human => !from_agent,
        }
    }
}

/// One rule. The first rule that matches decides. Unknown keys are refused: a misspelt
/// condition silently matching everything would be worse than an error.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default)]
    pub side: Side,
    #[serde(default)]
    pub peer: Pattern,
    #[serde(default)]
    pub skill: Pattern,
    /// Matches when the call applies any source matching one of these patterns (`*` is any
    /// source: "the call stakes sources"); absent matches every call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<String>>,
    /// Matches when every source the call applies is in this list and it applies at least one;
    /// an empty list matches only a call that applies none. What `approve --remember` records
    /// for a (peer, skill, source set): remembered over no sources, it never covers a call that
    /// stakes some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources_within: Option<Vec<String>>,
    /// Matches only calls started from this surface; absent matches every call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<Surface>,
    /// What the human was told when `approve --remember` recorded this rule: it matches only a
    /// call whose disclosure says the same, so a change nobody was told of (the owner switched
    /// the skill's provider, the call landed on a box without hardware isolation) is asked
    /// again. Absent (a rule written by hand): not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub told: Option<Told>,
    pub decision: Decision,
}

/// The facts of a consent question's disclosure that a remembered decision holds for: what
/// runs (the skill's declaration), who sees the plaintext (the provider and where), and what
/// keeps the box's operator out (its platform and whether it is hardware-isolated). The box's
/// URL and measurement are not among them: a box updated in place, or another box of the same
/// platform, does not change what the human agreed to.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Told {
    /// `sha256:<hex>` of the skill's declaration the program pins.
    pub declaration_digest: String,
    pub provider: String,
    /// Where the provider is reached; absent for one inside the box.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_host: Option<String>,
    /// The box platform this side verified (`insecure-dev`, `tdx`, ...).
    pub platform: String,
    pub hardware_isolation: bool,
}

impl Rule {
    fn matches(&self, q: &SubmitQuestion<'_>) -> bool {
        self.side.matches(q.role)
            && self.peer.matches(q.peer)
            && self.skill.matches(q.skill)
            && self.sources.as_ref().is_none_or(|list| {
                q.sources
                    .iter()
                    .any(|s| list.iter().any(|p| Pattern(p.clone()).matches(s)))
            })
            && self.sources_within.as_ref().is_none_or(|set| {
                q.sources.is_empty() == set.is_empty() && q.sources.iter().all(|s| set.contains(s))
            })
            && self
                .surface
                .is_none_or(|s| s.matches(q.from_agent, q.agent_token))
            && self.told.as_ref().is_none_or(|t| q.told == Some(t))
    }

    /// The rule `approve --remember` records: this caller-side decision for this exact peer,
    /// skill and (a subset of) these sources — none, if the call staked none — for calls
    /// started from the same surface, while the disclosure says what it said (`told`). So a
    /// yes to a call without sources never lets a later one stake any, and a yes given to a
    /// human's call never answers an agent's first call (nor the other way round).
    pub fn remembered(
        peer: &str,
        skill: &str,
        sources: &[String],
        surface: Surface,
        told: Told,
        decision: Decision,
    ) -> Rule {
        Rule {
            side: Side::Caller,
            peer: Pattern(peer.to_owned()),
            skill: Pattern(skill.to_owned()),
            sources: None,
            sources_within: Some(sources.to_vec()),
            surface: Some(surface),
            told: Some(told),
            decision,
        }
    }

    /// A remembered rule (one with `told`) of the form recorded before a remembered answer was
    /// held to its source set and its surface, made as narrow as the answer was: over no
    /// sources when it names none (it matched any set, so a yes given to a call that staked
    /// nothing covered calls that stake everything), and for a human's calls when it names no
    /// surface (an agent's call is asked again). A rule without `told` (written by hand) is
    /// left as written. Whether the rule changed.
    pub fn narrow_as_remembered(&mut self) -> bool {
        if self.told.is_none() {
            return false;
        }
        let mut changed = false;
        if self.sources.is_none() && self.sources_within.is_none() {
            self.sources_within = Some(Vec::new());
            changed = true;
        }
        if self.surface.is_none() {
            self.surface = Some(Surface::Human);
            changed = true;
        }
        // An agent's answer remembered before the agent token existed was given to an agent
        // over this user's own channel (HTTP clients then sent the operator's token, which the
        // agent surfaces now refuse over TCP): it holds for those, not for the agent token.
        if self.surface == Some(Surface::Agent) {
            self.surface = Some(Surface::AgentLocal);
            changed = true;
        }
        changed
    }

    /// Whether `other` is the same rule but for its decision (a newer answer replaces it).
    pub fn same_but_decision(&self, other: &Rule) -> bool {
        Rule {
            decision: other.decision,
            ..self.clone()
        } == *other
    }

    /// The shipped consent rule: a call that would disclose this node's sources asks its human
    /// first; a call with none needs no one.
    pub fn ask_before_disclosure() -> Rule {
        Rule {
            side: Side::Caller,
            peer: Pattern::any(),
            skill: Pattern::any(),
            sources: Some(vec!["*".into()]),
            sources_within: None,
            surface: None,
            told: None,
            decision: Decision::Ask,
        }
    }

    /// The shipped rule for agents: a call an agent started (MCP, A2A) asks this node's human,
    /// showing the request, since the agent may send whatever is in its context. Approving with
    /// `--remember` adds a rule for that peer and skill ahead of it, so only the first call to a
    /// (peer, skill) from an agent is asked.
    pub fn ask_from_agent() -> Rule {
        Rule {
            side: Side::Caller,
            peer: Pattern::any(),
            skill: Pattern::any(),
            sources: None,
            sources_within: None,
            surface: Some(Surface::Agent),
            told: None,
            decision: Decision::Ask,
        }
    }
}

/// The submit question's facts.
#[derive(Clone, Debug)]
pub struct SubmitQuestion<'a> {
    pub role: Role,
    pub peer: &'a str,
    pub skill: &'a str,
    /// The sources this side stakes (caller: the chosen sources; owner: none of the caller's).
    pub sources: &'a [String],
    /// The call was started from an agent surface (MCP, A2A).
    pub from_agent: bool,
    /// ... by a client holding the agent token ([`Surface::AgentToken`]).
    pub agent_token: bool,
    /// What this side's disclosure says (from the signed program and this side's verified
    /// attestation of the run); `None` when it cannot be told, which no remembered rule matches.
    pub told: Option<&'a Told>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// When no rule matches.
    #[serde(default = "allow")]
    pub default: Decision,
}

fn allow() -> Decision {
    Decision::Allow
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            rules: Vec::new(),
            default: Decision::Allow,
        }
    }
}

impl Policy {
    pub fn decide(&self, q: &SubmitQuestion<'_>) -> Decision {
        self.decide_with_rule(q).0
    }

    /// The decision and which rule made it (`None`: the default).
    pub fn decide_with_rule(&self, q: &SubmitQuestion<'_>) -> (Decision, Option<usize>) {
        match self.rules.iter().position(|r| r.matches(q)) {
            Some(i) => (self.rules[i].decision, Some(i)),
            None => (self.default, None),
        }
    }
}

/// Who may call this node's skills, and how often.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admission {
    /// When set, only these peers may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_peers: Option<Vec<String>>,
    #[serde(default)]
    pub deny_peers: Vec<String>,
    /// Calls a peer may start per minute (a token bucket of this size, refilled evenly).
    #[serde(default = "default_rate")]
    pub calls_per_minute: u32,
}

fn default_rate() -> u32 {
    30
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            allow_peers: None,
            deny_peers: Vec::new(),
            calls_per_minute: default_rate(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum Refusal {
    #[error("this node does not take calls from that peer")]
    PeerDenied,
    #[error("rate limit: at most {per_minute} calls a minute from one peer")]
    RateLimited { per_minute: u32 },
}

/// Per-peer token buckets. Keeps at most `capacity` peers; the stalest are forgotten first.
#[derive(Debug, Default)]
pub struct RateBuckets {
    buckets: HashMap<String, (f64, u64)>,
}

const MAX_TRACKED_PEERS: usize = 10_000;

impl Admission {
    /// Admit one call from `peer` at `now_ms`, spending a token when admitted.
    pub fn admit(&self, buckets: &mut RateBuckets, peer: &str, now_ms: u64) -> Result<(), Refusal> {
        if self.deny_peers.iter().any(|p| p == peer)
            || self
                .allow_peers
                .as_ref()
                .is_some_and(|allow| !allow.iter().any(|p| p == peer))
        {
            return Err(Refusal::PeerDenied);
        }
        let capacity = f64::from(self.calls_per_minute);
        if buckets.buckets.len() >= MAX_TRACKED_PEERS
            && !buckets.buckets.contains_key(peer)
            && let Some(oldest) = buckets
                .buckets
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone())
        {
            buckets.buckets.remove(&oldest);
        }
        let (tokens, last) = buckets
            .buckets
            .entry(peer.to_owned())
            .or_insert((capacity, now_ms));
        let elapsed_min = now_ms.saturating_sub(*last) as f64 / 60_000.0;
        *tokens = (*tokens + elapsed_min * capacity).min(capacity);
        *last = now_ms;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Refusal::RateLimited {
                per_minute: self.calls_per_minute,
            })
        }
    }
}
