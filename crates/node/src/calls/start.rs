//! A call's start as caller (`POST /calls`) and the `skill` intent (`POST /intents/skill`).
//!
//! What a remote advert says is input: a skill that asks for a reserved source is refused here
//! too (the board already refuses its advert), only sources this node's human marked shareable
//! are selectable, the owner's advertised ceilings are met before anything is signed, and only a
//! box both sides accept that can run the skill's provider is picked.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use skillbox_calls::machine::{self, NewCall, Role, State};
use skillbox_calls::select_sources;
use skillbox_jc::program::ProgramHash;
use skillbox_jc::seal::HpkeKeyPair;
use zeroize::Zeroizing;

use super::boxes::KnownBox;
use super::records::{self, CallRow};
use super::{CallError, CallView, Calls, Offered, StartCall, blocking, now_ms, program};
use crate::sources::{self, SourceKind, SourceMeta};

/// How long call start waits for an accepted box whose identity is unknown or stale.
const BOX_REFRESH_TIMEOUT: Duration = Duration::from_secs(3);

/// Who started a call, as its consent sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartedBy {
    /// This node's human: the CLI, the dashboard, the API.
    Human,
    /// An agent through this user's own channel: `skillbox mcp` (over `api.sock`), or an agent
    /// surface reached with the operator's token over the socket.
    Agent,
    /// An HTTP agent client holding the agent token (`agent.token`), sent to the node's TCP
    /// port, which another local user may have held while the node was down: a remembered
    /// answer to a local agent's call does not cover it (`Surface::AgentToken`).
    AgentToken,
}

impl Calls {
    /// Start a call as caller (`POST /calls`).
    pub async fn start(&self, req: StartCall) -> std::result::Result<CallView, CallError> {
        self.start_from(req, StartedBy::Human).await
    }

    /// [`Calls::start`] for an agent surface (MCP, A2A): the call is marked `from_agent`, so
    /// rules with `surface = "agent"` match it and its consent question shows the request;
    /// started with the agent token, it is marked `agent_token` too ([`StartedBy`]).
    pub async fn start_by(
        &self,
        req: StartCall,
        by: StartedBy,
    ) -> std::result::Result<CallView, CallError> {
        self.start_from(req, by).await
    }

    async fn start_from(
        &self,
        req: StartCall,
        by: StartedBy,
    ) -> std::result::Result<CallView, CallError> {
        if req.request.len() > self.0.settings.max_request_bytes {
            return Err(CallError::Invalid {
                field: "request".into(),
                message: format!(
                    "{} bytes exceeds calls.max_request_bytes ({})",
                    req.request.len(),
                    self.0.settings.max_request_bytes
                ),
            });
        }
        let offered = self
            .0
            .directory
            .offered(&req.peer, &req.skill)
            .ok_or_else(|| CallError::NotOnBoard {
                peer: req.peer.clone(),
                skill: req.skill.clone(),
            })?;
        if offered.skill.required_sources.iter().any(|s| {
            skillbox_skill::is_reserved_source_name(s) || !skillbox_skill::is_valid_source_name(s)
        }) {
            return Err(CallError::HostileAdvert {
                peer: req.peer.clone(),
                skill: req.skill.clone(),
            });
        }
        let limits = offered.skill.limits;
        if let Some(max) = limits.max_request_bytes
            && req.request.len() as u64 > max
        {
            return Err(CallError::OverOwnerLimit {
                field: "request",
                size: req.request.len() as u64,
                limit: max,
            });
        }
        let chosen = self.choose_sources(&offered, req.sources.clone()).await?;
        if let Some(max) = limits.max_source_bytes
            && let Some((_, size)) = chosen.iter().find(|(_, size)| *size > max)
        {
            return Err(CallError::OverOwnerLimit {
                field: "sources",
                size: *size,
                limit: max,
            });
        }
        let (common, chosen_box) = self.choose_box(&req.peer, &offered).await?;
        let provider: skillbox_skill::ProviderId =
            offered
                .skill
                .provider
                .parse()
                .map_err(|_| CallError::NotOnBoard {
                    peer: req.peer.clone(),
                    skill: req.skill.clone(),
                })?;
        let provider_host = chosen_box
            .providers
            .iter()
            .find(|p| p.id == provider.to_string())
            .and_then(|p| p.host.clone());
        let guard = offered
            .skill
            .guard
            .unwrap_or_else(|| program::guard_for(&provider));
        let id = skillbox_jc::client::new_nonce();
        let result_key = HpkeKeyPair::generate();
        let expires_at = now_ms() / 1000 + self.0.settings.expiry_secs;
        let output_max_bytes = limits
            .max_output_bytes
            .map_or(self.0.settings.output_max_bytes, |m| {
                m.clamp(1, self.0.settings.output_max_bytes)
            });
        let program = program::build(program::CallerFacts {
            call_id: id.clone(),
            caller_key: self.0.node_key_hex.clone(),
            result_key: result_key.public_hex(),
            owner_key: offered.public_key.clone(),
            boxes: common.iter().map(KnownBox::identity).collect(),
            skill: offered.skill.name.clone(),
            declaration_digest: offered.skill.declaration_digest.clone(),
            provider,
            provider_host,
            request_len: req.request.len() as u64,
            sources: chosen.clone(),
            output_max_bytes,
            limits,
            expires_at,
            // The owner's advertised guard (its settings are not secret), or the defaults.
            guard,
            // Likewise its body allowance and remote model context (absent: the defaults).
            body_max_tokens: offered.skill.body_max_tokens,
            model_context_tokens: offered.skill.model_context_tokens,
        })
        .map_err(CallError::Program)?;
        let env = skillbox_jc::dsse::sign_program(&program, &self.0.signing)
            .map_err(CallError::Program)?;
        let hash = ProgramHash::of(&env.payload_bytes().map_err(CallError::Program)?);
        let mut t = machine::start(
            Role::Caller,
            NewCall {
                id: id.clone(),
                peer: req.peer.clone(),
                skill: req.skill.clone(),
                program_hash: format!("sha256:{}", hash.to_hex()),
                expires_at_ms: expires_at * 1000,
            },
            now_ms(),
            &self.0.timing,
        );
        t.call.from_agent = by != StartedBy::Human;
        t.call.agent_token = by == StartedBy::AgentToken;
        let row = CallRow {
            call: t.call.clone(),
            program: Some(String::from_utf8_lossy(&env.to_json()).into_owned()),
            box_url: Some(chosen_box.url.clone()),
            verified: None,
            sources: chosen.into_iter().map(|(n, _)| n).collect(),
            receipt: None,
        };
        let data_key = self.0.sources.key().clone();
        let request = req.request.clone();
        let secret = result_key.secret_bytes();
        let r = row.clone();
        let key = (id.clone(), Role::Caller);
        let row = std::sync::Arc::new(row);
        self.insert_row(&key, row.clone(), move |tx| {
            records::insert(tx, &r)?;
            sources::put_in(
                tx,
                &data_key,
                &records::request_source(&r.call.id),
                SourceKind::Text,
                request.as_bytes(),
            )?;
            sources::put_in(
                tx,
                &data_key,
                &records::result_key_source(&r.call.id),
                SourceKind::Secret,
                &secret,
            )?;
            Ok(((), true))
        })
        .await?;
        tracing::info!(call = %id, peer = %req.peer, skill = %req.skill, "call requested");
        self.crash_point(Role::Caller, State::Requested);
        let view = CallView::of(&row);
        for action in t.actions {
            self.dispatch(key.clone(), action, row.clone());
        }
        Ok(view)
    }

    /// Design §7 selection over the sources this node may stake (shareable user data), with a
    /// named source that exists but is not stakeable refused by name. `(name, size)` each.
    async fn choose_sources(
        &self,
        offered: &Offered,
        requested: Option<Vec<String>>,
    ) -> std::result::Result<Vec<(String, u64)>, CallError> {
        let srcs = self.0.sources.clone();
        let required = offered.skill.required_sources.clone();
        let names = requested.clone().unwrap_or_default();
        // The shareable sources, and each one the request names that is held but may not be
        // staked (why, for the refusal): never a list of every source.
        let (shareable, held): (Vec<SourceMeta>, Vec<SourceMeta>) = blocking(move || {
            let held = names
                .iter()
                .map(|n| srcs.meta(n))
                .filter_map(Result::transpose)
                .collect::<crate::error::Result<Vec<_>>>()?;
            Ok((srcs.shareable()?, held))
        })
        .await?;
        let stakeable: HashMap<String, u64> =
            shareable.iter().map(|m| (m.name.clone(), m.size)).collect();
        for m in &held {
            if let Err(crate::NodeError::NotStakeable { why, .. }) =
                sources::stakeable(&m.name, m.kind, m.shareable)
            {
                return Err(CallError::NotShareable {
                    name: m.name.clone(),
                    why,
                });
            }
        }
        let chosen = select_sources(
            &required,
            |n| stakeable.contains_key(n),
            requested.as_deref(),
        )?;
        Ok(chosen
            .into_iter()
            .map(|n| {
                let size = stakeable.get(&n).copied().unwrap_or(0);
                (n, size)
            })
            .collect())
    }

    /// The boxes both sides accept (ours by URL, theirs by identity from their advert) that
    /// can run the skill's provider, those this node's calls of the skill used today first,
    /// each group least loaded first ([`super::boxes::Boxes::pick`]), and the one this call
    /// uses (the first, claimed). An accepted box whose identity
    /// this node has not learnt yet (it started after the node) is asked now, briefly.
    async fn choose_box(
        &self,
        peer: &str,
        offered: &Offered,
    ) -> std::result::Result<(Vec<KnownBox>, KnownBox), CallError> {
        let boxes = &self.0.boxes;
        if boxes.needs_refresh() {
            let _ = tokio::time::timeout(BOX_REFRESH_TIMEOUT, boxes.refresh()).await;
        }
        let provider = offered.skill.provider.as_str();
        let mut ours = boxes.known();
        let theirs = |k: &KnownBox| {
            offered
                .boxes
                .iter()
                .any(|b| b.platform == k.platform && b.measurement == k.measurement)
        };
        if !ours.iter().any(|k| theirs(k) && k.offers(provider)) {
            // Perhaps what we know is stale (a box restarted with its provider): ask again.
            let _ = tokio::time::timeout(BOX_REFRESH_TIMEOUT, boxes.refresh()).await;
            ours = boxes.known();
        }
        let common: Vec<KnownBox> = ours.iter().filter(|k| theirs(k)).cloned().collect();
        if common.is_empty() {
            // By characters, never bytes: a measurement is the box's (or a peer's) text.
            let show = |platform: &str, m: &str| {
                format!("{platform} {}", m.chars().take(12).collect::<String>())
            };
            let list = |v: Vec<String>| {
                if v.is_empty() {
                    "none".to_owned()
                } else {
                    v.join(", ")
                }
            };
            return Err(CallError::NoCommonBox {
                peer: peer.to_owned(),
                ours: list(
                    ours.iter()
                        .map(|k| show(&k.platform, &k.measurement))
                        .collect(),
                ),
                theirs: list(
                    offered
                        .boxes
                        .iter()
                        .map(|b| show(&b.platform, &b.measurement))
                        .collect(),
                ),
            });
        }
        // The boxes this node's calls of the skill used today first: the owner pins its day of
        // the skill to the box instances its runs go to (`coverage::pin_box`).
        let able: Vec<KnownBox> = boxes.pick(
            peer,
            &offered.skill.name,
            common
                .iter()
                .filter(|k| k.offers(provider))
                .cloned()
                .collect(),
        );
        let Some(first) = able.first().cloned() else {
            return Err(CallError::NoBoxForProvider {
                provider: provider.to_owned(),
                boxes: common
                    .iter()
                    .map(|k| k.url.clone())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        Ok((able, first))
    }

    /// Whether this node could call a board row, as the intent's candidate: not its own, asking
    /// for no reserved source, and with no required sources or one of them `held` as a
    /// shareable source.
    fn callable(&self, peer: &str, required: &[String], held: &HashSet<String>) -> bool {
        peer != self.0.node_id
            && !required
                .iter()
                .any(|s| skillbox_skill::is_reserved_source_name(s))
            && (required.is_empty() || required.iter().any(|s| held.contains(s)))
    }

    /// The `skill` intent (`POST /intents/skill`): rank the skills the board offers right now
    /// that this node could call (no required sources, or at least one of them held as a
    /// shareable source) against `text`, and start a call on the best with sources omitted.
    /// Below the score threshold nothing is picked and no call starts.
    pub async fn intent(
        &self,
        text: Zeroizing<String>,
    ) -> std::result::Result<(skillbox_calls::intent::Pick, CallView), CallError> {
        self.intent_from(text, StartedBy::Human).await
    }

    /// [`Calls::intent`] for an agent surface: the call it starts is marked as
    /// [`Calls::start_by`] marks it.
    pub async fn intent_by(
        &self,
        text: Zeroizing<String>,
        by: StartedBy,
    ) -> std::result::Result<(skillbox_calls::intent::Pick, CallView), CallError> {
        self.intent_from(text, by).await
    }

    async fn intent_from(
        &self,
        text: Zeroizing<String>,
        by: StartedBy,
    ) -> std::result::Result<(skillbox_calls::intent::Pick, CallView), CallError> {
        let srcs = self.0.sources.clone();
        let held: HashSet<String> =
            blocking(move || Ok(srcs.shareable()?.into_iter().map(|m| m.name).collect())).await?;
        let scope = self.0.directory.search_scope();
        // The board's callable rows, lent (the board is read under its lock, never copied).
        let each = |f: &mut dyn FnMut(&skillbox_calls::intent::Candidate<'_>)| {
            self.0.directory.each_row(&mut |c, required| {
                if self.callable(c.peer, required, &held) {
                    f(c);
                }
            })
        };
        // The index only as `index.search` allows: under `terms` first, as before; under
        // `category` only when the board has no candidate, and then with the category key
        // alone (the request's words never reach a DHT peer); under `board` never. The
        // providers it names join the board's cache, and the board is ranked again. Under
        // `category` the board's own pick, when it has one, is the answer as it was read.
        let pick = match super::before_the_index(scope, &text, each) {
            super::BeforeTheIndex::Picked(pick) => pick,
            how => {
                if matches!(how, super::BeforeTheIndex::Search) {
                    self.0.directory.search(&text).await;
                }
                skillbox_calls::intent::pick_over(&text, each)?
            }
        };
        let view = self
            .start_from(
                StartCall {
                    peer: pick.peer.clone(),
                    skill: pick.skill.clone(),
                    request: text,
                    sources: None,
                },
                by,
            )
            .await?;
        Ok((pick, view))
    }
}
