//! Tenants: who is calling the API. The operator's `api.token` is the node operator (every
//! route, owner `{tenantId: tenants.operator}`); a tenant token from `config.toml` stands for an
//! owner `{tenantId, workspaceId?}` and reaches only the OpenWOP agent surfaces, scoped to it.
//!
//! Config keeps only `sha256:<hex>` of a tenant token (config.toml is readable; the token is
//! 32 random bytes, so an unsalted digest cannot be reversed by guessing).

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use sha2::{Digest, Sha256};
use skillbox_skill::agents::Owner;

use crate::config::{Config, TenantToken, TenantsConfig, owner_id_problem};
use crate::error::{NodeError, Result};

/// Who a request comes from, once its token checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The owner triple every agent surface is scoped to.
    pub owner: Owner,
    /// The operator's token (every route) rather than a tenant token (agent surfaces only).
    pub operator: bool,
    /// The agent token (`agent.token`): the operator's owner, but only on the agent surfaces
    /// (`/mcp`, `/a2a`, the card, the catalog), and the only token they take over TCP. Every
    /// other route refuses it, so one caught on a squatted port gives nothing the human does not
    /// approve.
    pub agent: bool,
}

/// `sha256:<hex>` of a token, as config keeps it.
pub fn token_digest(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

/// The tokens a node accepts, as digests.
#[derive(Debug, Clone)]
pub struct Tokens {
    /// `None`: no operator token is accepted (`api.token` changed and does not load).
    operator: (Option<[u8; 32]>, Owner),
    /// `None`: no agent token is accepted (`agent.token` missing or does not load).
    agent: Option<[u8; 32]>,
    tenants: Vec<([u8; 32], Owner)>,
}

impl Tokens {
    pub fn new(operator_token: &str, tenants: &TenantsConfig) -> Tokens {
        Tokens {
            operator: (
                Some(Sha256::digest(operator_token.as_bytes()).into()),
                Owner {
                    tenant_id: tenants.operator.clone(),
                    workspace_id: None,
                },
            ),
            agent: None,
            tenants: Self::tenant_digests(tenants),
        }
    }

    /// Replace the agent token (`agent.token` made or rotated); `None` accepts none.
    pub fn set_agent(&mut self, agent_token: Option<&str>) -> bool {
        let next: Option<[u8; 32]> = agent_token.map(|t| Sha256::digest(t.as_bytes()).into());
        let changed = next != self.agent;
        self.agent = next;
        changed
    }

    /// Replace the operator's token (`api.token` rotated); `None` accepts none. Whether the
    /// accepted token changed.
    pub fn set_operator(&mut self, operator_token: Option<&str>) -> bool {
        let next: Option<[u8; 32]> = operator_token.map(|t| Sha256::digest(t.as_bytes()).into());
        let changed = next != self.operator.0;
        self.operator.0 = next;
        changed
    }

    fn tenant_digests(tenants: &TenantsConfig) -> Vec<([u8; 32], Owner)> {
        tenants
            .tokens
            .iter()
            .filter_map(|t| {
                // Config::check already refused malformed digests; skip rather than panic.
                let raw = hex::decode(t.digest.strip_prefix("sha256:")?).ok()?;
                let d: [u8; 32] = raw.try_into().ok()?;
                Some((
                    d,
                    Owner {
                        tenant_id: t.tenant.clone(),
                        workspace_id: t.workspace.clone(),
                    },
                ))
            })
            .collect()
    }

    /// Replace the tenant tokens (the operator's stays: it lives in `api.token`).
    pub fn set_tenants(&mut self, tenants: &TenantsConfig) {
        self.tenants = Self::tenant_digests(tenants);
    }

    /// The principal a presented token stands for. Every stored digest is compared in constant
    /// time, with no early exit, so timing tells neither which token nor how much matched.
    pub fn principal(&self, presented: &str) -> Option<Principal> {
        let d: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let eq = |a: &[u8; 32]| {
            a.iter()
                .zip(d.iter())
                .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                == 0
        };
        let mut found = None;
        if self.operator.0.as_ref().is_some_and(eq) {
            found = Some(Principal {
                owner: self.operator.1.clone(),
                operator: true,
                agent: false,
            });
        }
        if self.agent.as_ref().is_some_and(eq) && found.is_none() {
            found = Some(Principal {
                owner: self.operator.1.clone(),
                operator: false,
                agent: true,
            });
        }
        for (digest, owner) in &self.tenants {
            if eq(digest) && found.is_none() {
                found = Some(Principal {
                    owner: owner.clone(),
                    operator: false,
                    agent: false,
                });
            }
        }
        found
    }
}

/// A fresh tenant token: `sbx_t_` and 64 hex digits (32 random bytes).
fn new_token() -> Result<String> {
    let raw = crate::crypto::random_bytes::<32>()
        .map_err(|e| NodeError::io("generating a tenant token", e))?;
    Ok(format!("sbx_t_{}", hex::encode(raw)))
}

/// Add a tenant token to `config.toml` at `path` and return the token (shown once; only its
/// digest is written). The file is appended to (comments and hand edits kept), the result is
/// parsed and checked before it replaces the old file in one rename; a running node picks the
/// token up at the next request that presents it.
pub fn add_token(path: &Path, tenant: &str, workspace: Option<&str>) -> Result<String> {
    if let Some(p) = owner_id_problem(tenant) {
        return Err(NodeError::invalid("tenant", format!("{tenant:?} {p}")));
    }
    if let Some(p) = workspace.and_then(owner_id_problem) {
        return Err(NodeError::invalid("workspace", p));
    }
    let text = crate::datadir::read_text(path, "config.toml")?;
    Config::parse(&text, path)?;
    let token = new_token()?;
    let entry = TenantToken {
        tenant: tenant.to_owned(),
        workspace: workspace.map(str::to_owned),
        digest: token_digest(&token),
    };
    let mut updated = text;
    if !updated.ends_with('\n') {
        updated.push('\n');
    }
    updated.push_str(&entry.render());
    let parsed = Config::parse(&updated, path)?;
    if !parsed.tenants.tokens.contains(&entry) {
        return Err(NodeError::Config {
            path: path.to_owned(),
            problem: "the new [[tenants.tokens]] block did not land in tenants.tokens (is `tokens` written inline in [tenants]?); add it by hand".into(),
        });
    }
    let tmp = path.with_extension("toml.tmp");
    let _ = fs::remove_file(&tmp);
    let write = || -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(updated.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        let _ = fs::remove_file(&tmp);
        return Err(NodeError::io(format!("writing {}", path.display()), e));
    }
    tracing::info!(tenant, workspace, "tenant token added");
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_map_to_their_owner() {
        let mut t = TenantsConfig::default();
        t.tokens.push(TenantToken {
            tenant: "acme".into(),
            workspace: Some("w".into()),
            digest: token_digest("sbx_t_acme"),
        });
        let tokens = Tokens::new("sbx_operator_token", &t);
        let op = tokens.principal("sbx_operator_token").expect("operator");
        assert!(op.operator);
        assert_eq!(op.owner.tenant_id, "local");
        let acme = tokens.principal("sbx_t_acme").expect("tenant");
        assert!(!acme.operator);
        assert_eq!(acme.owner.workspace_id.as_deref(), Some("w"));
        assert!(tokens.principal("sbx_t_acm").is_none());
        assert!(tokens.principal("").is_none());
    }

    /// The agent token stands for the operator's owner but is neither the operator nor a
    /// tenant; until one is set, none is accepted.
    #[test]
    fn the_agent_token_is_its_own_principal() {
        let mut tokens = Tokens::new("sbx_operator_token", &TenantsConfig::default());
        assert!(tokens.principal("sbx_a_agent_token_x").is_none());
        assert!(tokens.set_agent(Some("sbx_a_agent_token_x")));
        let agent = tokens.principal("sbx_a_agent_token_x").expect("agent");
        assert!(agent.agent && !agent.operator, "{agent:?}");
        assert_eq!(agent.owner.tenant_id, "local");
        let op = tokens.principal("sbx_operator_token").expect("operator");
        assert!(op.operator && !op.agent, "{op:?}");
        assert!(!tokens.set_agent(Some("sbx_a_agent_token_x")), "unchanged");
        tokens.set_agent(None);
        assert!(tokens.principal("sbx_a_agent_token_x").is_none());
    }
}
