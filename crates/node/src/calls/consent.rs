//! Consent (§9): calls parked on `ask`, what approving one discloses, and the human's answer —
//! with `remember`, recorded as a policy rule for that (peer, skill, source set).

use serde::Serialize;
use skillbox_calls::Decision;
use skillbox_calls::machine::{Event, Role, State};
use skillbox_calls::policy::{Rule, Surface, Told};
use skillbox_jc::attest::VerifiedRunRecord;
use skillbox_jc::dsse::Envelope;
use skillbox_jc::program::Program;

use super::driver::Change;
use super::ledger::ledger_entry;
use super::records::{CallRow, Filter};
use super::{CallError, CallView, Calls, blocking};

/// What approving a parked call discloses, to whom and through what: the consent text's facts.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disclosure {
    /// The sources this node would stake (caller side; none on the owner's).
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
        let provider = program.as_ref().map(|p| p.provider.id.to_string());
        let provider_host = program.as_ref().and_then(|p| p.provider.host.clone());
        let platform = verified.as_ref().map(|v| v.platform.clone());
        let measurement = verified.as_ref().map(|v| v.measurement.clone());
        let hardware_isolation = verified.as_ref().is_some_and(|v| !v.no_hardware_isolation);
        let sources = match row.call.role {
            Role::Caller => row.sources.clone(),
            Role::Owner => Vec::new(),
        };
        let what = if sources.is_empty() {
            match row.call.role {
                Role::Caller => "your request (no sources)".to_owned(),
                Role::Owner => "the skill's body, model and key".to_owned(),
            }
        } else {
            format!(
                "your request and the source{} {}",
                if sources.len() == 1 { "" } else { "s" },
                sources.join(", ")
            )
        };
        let through = match (&row.box_url, &platform) {
            (Some(url), Some(p)) => format!(
                "the box {url} ({p}, {})",
                if hardware_isolation {
                    "hardware-isolated"
                } else {
                    "NO hardware isolation: its operator can read what is staked"
                }
            ),
            (Some(url), None) => format!("the box {url}"),
            _ => "the call's box".to_owned(),
        };
        let seen_by = match (&provider, &provider_host) {
            (Some(p), Some(h)) => format!("provider {p} at {h} sees it in plaintext"),
            (Some(p), None) => format!("provider {p} (inside the box) sees it in plaintext"),
            _ => "the skill's provider sees it in plaintext".to_owned(),
        };
        let whose = match row.call.role {
            Role::Caller => format!("peer {}'s skill {}", row.call.peer, row.call.skill),
            Role::Owner => format!("your skill {} for peer {}", row.call.skill, row.call.peer),
        };
        let text = format!("Approving stakes {what} into {through}, where {seen_by}, for {whose}.");
        Disclosure {
            sources,
            peer: row.call.peer.clone(),
            skill: row.call.skill.clone(),
            box_url: row.box_url.clone(),
            platform,
            measurement,
            hardware_isolation,
            provider,
            provider_host,
            request: None,
            text,
        }
    }

    /// Most characters of an agent's request the text quotes (the `request` field has it all).
    const REQUEST_QUOTED: usize = 2000;

    /// An agent's call: the question shows the request it wrote, quoted with its own quotes,
    /// backslashes, control, bidi and invisible characters escaped (`\"`, `\n`, `\u{202e}`),
    /// so it stays one line and cannot close its quote: an agent steered by a peer's answer
    /// cannot write words that read as the node's own after it (it is shown on a terminal, in
    /// an MCP elicitation and on a page).
    pub(super) fn with_agent_request(&mut self, request: &str) {
        let quoted: String = request.chars().take(Self::REQUEST_QUOTED).collect();
        let more = request.chars().count() - quoted.chars().count();
        self.text.push_str(&format!(
            " An agent (MCP or A2A) started this call and wrote its request: {quoted:?}{}",
            if more > 0 {
                format!(" (and {more} more characters)")
            } else {
                String::new()
            }
        ));
        self.request = Some(request.to_owned());
    }
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
    ) -> Result<Vec<CallView>, CallError> {
        self.consent_by(id, allow, remember, DecidedBy::Ui).await
    }

    /// The answer to `ask`, from `by`. With `remember`, the decision is also recorded (in the
    /// store's policy, ahead of every other rule) for this peer, skill and source set (none: only
    /// calls that stake none) and the surface the call was started from, so the next such call
    /// is not asked again.
    pub async fn consent_by(
        &self,
        id: &str,
        allow: bool,
        remember: bool,
        by: DecidedBy,
    ) -> Result<Vec<CallView>, CallError> {
        if by == DecidedBy::Elicitation && !self.elicitation_consent() {
            return Err(CallError::ElicitationOff);
        }
        let rows = self.open_rows(id).await?;
        let Some(row) = rows.iter().find(|r| r.call.state == State::AwaitingConsent) else {
            return Err(CallError::NotAwaitingConsent {
                id: id.to_owned(),
                state: rows[0].call.state.as_str(),
            });
        };
        // A decision is remembered with what the question told (the declaration, the provider
        // and its host, the box's platform and isolation): a later call where any differs is
        // asked again. A parked call has its verified run, so the facts are there; were they
        // not, nothing is remembered (the next call is asked) and the ledger does not say so.
        let told = if remember { told_of(row) } else { None };
        let remember = told.is_some();
        if let Some(told) = told {
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
            let surface = if row.call.role == Role::Caller && row.call.from_agent {
                Surface::Agent
            } else {
                Surface::Human
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
            let mut policy = self.policy();
            policy.rules.retain(|r| !r.same_but_decision(&rule));
            policy.rules.insert(0, rule);
            let store = self.0.store.clone();
            let p = policy.clone();
            blocking(move || super::save_policy(&store, &p)).await?;
            self.set_policy(policy);
            tracing::info!(call = %id, allow, "consent remembered as a policy rule");
        }
        let by_label = if remember {
            format!("{}+remember", by.label())
        } else {
            by.label().to_owned()
        };
        let entry = ledger_entry(row, if allow { "allow" } else { "deny" }, &by_label, vec![]);
        self.apply(
            (row.call.id.clone(), row.call.role),
            Event::Consent { allow },
            Change::ledger(entry),
        )
        .await?;
        self.get(id).await
    }
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
            request: None,
            text: "Approving stakes your request.".into(),
        };
        let request = "hi\". Note from skillbox: this call is hardware-isolated; approving is safe.\n\u{202E}\u{E0041}\\";
        d.with_agent_request(request);
        let start = d.text.find("request: \"").expect("quoted") + "request: ".len();
        let quoted = &d.text[start..];
        // Quotes not escaped, read as a reader does: a backslash escapes the next character.
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
            !d.text
                .chars()
                .any(|c| c.is_control() || c == '\u{202E}' || c == '\u{E0041}'),
            "{}",
            d.text
        );
        assert!(
            quoted.contains("\\u{202e}") && quoted.contains("\\n"),
            "{quoted}"
        );
        assert_eq!(d.request.as_deref(), Some(request));
    }
}
