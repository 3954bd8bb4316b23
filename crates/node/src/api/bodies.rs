//! The bodies routes answer and accept that are not a domain type of their own: lists with their
//! totals, small acknowledgements, request bodies. Handlers serialize these very types, and the
//! OpenAPI document's schemas are derived from them, so the two cannot drift.
//!
//! The OpenWOP documents (inventory, roster, org chart) are JSON the `agents` module validates
//! against OpenWOP's own schemas; here they are named, with the fields every one carries.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::calls::CallView;
use crate::ledger::Line;
use crate::skills::{Imported, SkillSummary};
use crate::sources::SourceMeta;

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`: an unhealthy node answers an error instead.
    #[schema(value_type = String, pattern = "^ok$")]
    pub status: &'static str,
}

/// `GET /node`: who this node is.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    pub node_id: String,
    /// Hex Ed25519 public key (the key receipts, adverts and the ledger are signed with).
    pub public_key: String,
    pub version: String,
    /// The OpenWOP namespace of this node's skills (`<namespace>.<skill>`).
    pub namespace: String,
}

/// `GET /skills`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkillList {
    pub skills: Vec<SkillSummary>,
    pub total: usize,
}

/// `POST /skills` with a pack: every skill and pack agent it imported.
#[derive(Debug, Serialize, ToSchema)]
pub struct PackImported {
    pub skills: Vec<Imported>,
    pub agents: Vec<crate::agents::StoredAgent>,
}

/// `POST /skills`: a SKILL.md's import, or a pack's.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum SkillImported {
    Skill(Imported),
    Pack(PackImported),
}

/// `PATCH /skills/{name}`: what the owner stakes. A string sets a field, `null` clears it; a
/// missing field stays.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // the document's type; the handler reads the fields one by one to tell set from clear
pub struct SkillPatch {
    pub provider: Option<String>,
    pub model: Option<String>,
    /// A source name: the key the provider spends.
    pub key: Option<String>,
    /// Ceilings to set (a whole number) or clear (`null`); the others stay.
    pub limits: Option<skillbox_skill::Limits>,
    /// The body allowance in tokens (1 to 2^20), or `null` for the provider's default.
    #[serde(rename = "bodyMaxTokens")]
    pub body_max_tokens: Option<u64>,
    /// A remote provider's model context in tokens (1 to 2^24; never for `local`), or `null`
    /// for the provider's default.
    #[serde(rename = "modelContextTokens")]
    pub model_context_tokens: Option<u64>,
}

/// `GET /sources`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceList {
    pub sources: Vec<SourceMeta>,
    pub total: usize,
}

/// `PATCH /sources/{name}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceChange {
    /// A call may stake it (never a secret or a reserved name).
    pub shareable: bool,
}

/// A source's content: any bytes.
#[derive(Debug, ToSchema)]
#[schema(value_type = String, format = Binary)]
#[allow(dead_code)]
pub struct Content(Vec<u8>);

/// `GET /board`: a page of rows, one per offered skill of a peer's newest unexpired advert.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Board {
    pub board: Vec<skillbox_peers::BoardRow>,
    /// Peers with an unexpired advert on the board (all of them, not this page's).
    pub peer_count: usize,
    /// Where the next page starts (pass it as `after`); absent on the last page. A page
    /// searching with `q` may hold fewer rows than `limit`, even none, and still have a next.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// The node's words on the rows: which fields are the peers' own.
    pub notice: String,
}

/// `GET /peers`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeerList {
    pub peer_id: String,
    pub listen_addrs: Vec<String>,
    pub peers: Vec<skillbox_peers::PeerInfo>,
    pub total: usize,
}

/// `POST /peers`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Dial {
    /// A multiaddr, e.g. `/ip4/127.0.0.1/tcp/4001` (`/p2p/<peer id>` may be omitted).
    pub addr: String,
}

/// `POST /peers`: connected.
#[derive(Debug, Serialize, ToSchema)]
pub struct Dialled {
    pub peer: String,
    pub addr: String,
}

/// `POST /dashboard/codes`: a sign-in code for the dashboard.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SigninCode {
    /// Twenty letters and digits in groups of five (`abcde-fghij-kmnpq-rstuv`), typed on the
    /// sign-in page; good once. Dashes, spaces and capitals are ignored there.
    #[schema(pattern = "^[a-km-np-z2-9]{5}(-[a-km-np-z2-9]{5}){3}$")]
    pub code: String,
    /// Seconds from now the code is good for.
    pub expires_in_seconds: u64,
    /// Where it is typed: the dashboard's sign-in page on this node's address.
    #[schema(value_type = String)]
    pub path: &'static str,
}

/// `POST /calls`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    pub peer: String,
    pub skill: String,
    pub request: String,
    /// Omitted: the skill's requiredSources this node holds as shareable; `[]`: none.
    #[serde(default)]
    pub sources: Option<Vec<String>>,
    /// `agent`: an agent surface (`skillbox mcp`) starts the call for an agent, so rules with
    /// `surface = "agent"` match it and its consent question shows the request.
    #[serde(default)]
    #[schema(pattern = "^agent$")]
    pub surface: Option<String>,
}

/// `GET /calls`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CallList {
    pub calls: Vec<CallView>,
    pub total: usize,
}

/// `GET /approvals`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalList {
    pub approvals: Vec<CallView>,
    pub total: usize,
}

/// The lists' one rule: `total` is the length of the list it comes with, so each list body is
/// made by `of` and no handler counts.
macro_rules! counted {
    ($($list:ident { $field:ident: $item:ty }),* $(,)?) => {$(
        impl $list {
            pub fn of($field: Vec<$item>) -> $list {
                $list { total: $field.len(), $field }
            }
        }
    )*};
}

counted!(
    SkillList {
        skills: SkillSummary
    },
    SourceList {
        sources: SourceMeta
    },
    CallList { calls: CallView },
    ApprovalList {
        approvals: CallView
    },
);

/// One call. `sides` (caller first) would answer an id naming both sides, which
/// `inbound::on_request` does not let happen (it refuses a request under one of this node's own
/// call ids).
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum OneCall {
    One(Box<CallView>),
    Both { sides: Vec<CallView> },
}

impl OneCall {
    pub fn of(mut views: Vec<CallView>) -> OneCall {
        if views.len() == 1 {
            OneCall::One(Box::new(views.remove(0)))
        } else {
            OneCall::Both { sides: views }
        }
    }
}

/// `POST /approvals/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    /// `allow` or `deny`.
    #[schema(pattern = "^(allow|deny)$")]
    pub decision: String,
    /// Also record the decision as a policy rule for this peer, skill and source set.
    #[serde(default)]
    pub remember: bool,
    /// The surface the decision comes through, for the ledger's `decidedBy`: `cli`
    /// (`human:cli`), `elicitation` (`agent:elicitation`, refused when
    /// `calls.elicitation_consent` is off); absent: `human:api`.
    #[serde(default)]
    #[schema(pattern = "^(cli|elicitation)$")]
    pub via: Option<String>,
    /// Required: the digest of the question this decision answers — the call's `question`
    /// as `GET /approvals` (or `GET /calls/{id}`) showed it with the disclosure. A call that
    /// asks another question since (its box lost and the call parked again on another, say)
    /// is not decided: `question_changed`.
    #[serde(default)]
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub question: Option<String>,
}

/// `POST /intents/skill`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IntentBody {
    pub text: String,
    /// `agent`: as in `POST /calls`.
    #[serde(default)]
    #[schema(pattern = "^agent$")]
    pub surface: Option<String>,
}

/// `POST /intents/skill`: the pick and the call it started.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntentStarted {
    #[serde(flatten)]
    pub pick: skillbox_calls::intent::Pick,
    pub call_id: String,
    pub call: CallView,
}

/// `GET /ledger` as JSON: the entries, with the node key they verify under.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerPage {
    pub entries: Vec<Line>,
    pub total: usize,
    /// Hex Ed25519 public key of this node.
    pub node_key: String,
}

/// OpenWOP `AgentInventoryResponse` (agent-inventory-response.schema.json).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct AgentInventory {
    #[schema(value_type = Vec<Object>)]
    pub agents: Vec<()>,
    pub total: usize,
}

/// OpenWOP `AgentInventoryEntry`, with the caller's `roster[]` instances of the agent.
#[derive(Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct AgentInventoryEntry {
    pub agent_id: String,
    #[schema(value_type = Vec<Object>)]
    pub roster: Vec<()>,
}

/// OpenWOP `AgentRosterEntry` (agent-roster-entry.schema.json), closed.
#[derive(Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct AgentRosterEntry {
    pub roster_id: String,
    #[schema(value_type = Object)]
    pub persona: (),
    #[schema(value_type = Object)]
    pub agent_ref: (),
    #[schema(value_type = Object)]
    pub owner: (),
}

/// OpenWOP `AgentRosterResponse` (agent-roster-response.schema.json).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct AgentRoster {
    pub roster: Vec<AgentRosterEntry>,
    pub total: usize,
}

/// OpenWOP `AgentOrgChart` (agent-org-chart.schema.json), closed: no authority-bearing field.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct AgentOrgChart {
    #[schema(value_type = Object)]
    pub owner: (),
    #[schema(value_type = Vec<Object>)]
    pub departments: Vec<()>,
    #[schema(value_type = Vec<Object>)]
    pub members: Vec<()>,
}

/// OpenWOP `OrgChartResponsibilityView` (org-chart-responsibility-view.schema.json).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct OrgChartResponsibilityView {
    #[schema(value_type = Object)]
    pub department: (),
    #[schema(value_type = Vec<Object>)]
    pub members: Vec<()>,
    #[schema(value_type = Vec<Object>)]
    pub responsibilities: Vec<()>,
}

/// A JSON Schema 2020-12 document.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct JsonSchema {
    #[serde(rename = "$schema")]
    pub schema: String,
}

/// OpenWOP discovery: a Capabilities document (`agents` at the root and under `capabilities`).
#[derive(Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct Capabilities {
    pub protocol_version: String,
    #[schema(value_type = Vec<Object>)]
    pub supported_envelopes: Vec<()>,
    #[schema(value_type = Object)]
    pub schema_versions: (),
    #[schema(value_type = Object)]
    pub limits: (),
}

/// The error envelope every route answers with (OpenWOP's ErrorEnvelope).
#[derive(Debug, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // the document's type; `ApiError` writes it
pub struct ErrorEnvelope {
    /// Machine-readable code: validation_error, pack_validation_failed, unauthenticated,
    /// forbidden, not_found, method_not_allowed, conflict, payload_too_large,
    /// unsupported_media_type, bad_request, internal_error, peers_unavailable, dial_failed,
    /// calls_unavailable, and the calls' refusal codes.
    #[schema(min_length = 1)]
    pub error: String,
    #[schema(min_length = 1)]
    pub message: String,
    /// For validation errors: `errors: [{path|field, line?, message}]`; for `no_common_box`:
    /// `peer`, the peer id whose advert the call was tried on.
    #[schema(value_type = Option<Object>)]
    pub details: Option<()>,
}
