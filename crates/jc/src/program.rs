//! The program: the box's canonical manifest for one run (design §8).
//!
//! Its bytes are RFC 8785 (JCS) and its identity is `sha256` over exactly those bytes, so both
//! parties sign, and the box runs, the same bytes. [`Program::from_canonical`] is
//! canonical-or-reject: duplicate keys, unknown fields, any byte that differs from the program's
//! own canonical form, and any field outside its rules are refused with the field named.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use skillbox_guard::GuardSpec;
use skillbox_providers::ProviderId;

use crate::error::{JcError, Result};
use crate::jcs;

/// The only program version this box understands.
pub const PROGRAM_VERSION: u32 = 1;
/// DSSE payload type of a program envelope.
pub const PROGRAM_PAYLOAD_TYPE: &str = "application/vnd.skillbox.program+json";
/// The prompt template a program names, and the only one this box runs (see
/// [`crate::prompt`]). v2 since the blocks' tags carry a suffix the box draws for each prompt
/// (the text of v1 changed under its name): a program naming `skillbox.prompt/v1` (an older
/// node's) is refused `prompt_template_unknown` rather than run under a template its parties
/// did not agree to.
pub const PROMPT_TEMPLATE_V2: &str = "skillbox.prompt/v2";
/// The fixed fields of a receipt, in the order the program lists them.
pub const RECEIPT_FIELDS: [&str; 5] = [
    "run_id",
    "program_hash",
    "status",
    "finished_at",
    "output_bucket",
];
/// The receipt field a guarded program adds: the digest of a note sealed to the owner alone that
/// says whether the output guard acted (`receipt::OwnerNote`); the receipt says nothing of it.
pub const GUARD_RECEIPT_FIELD: &str = "owner_note_sha256";
/// The platform name of the software attester (no hardware isolation).
pub const INSECURE_DEV: &str = "insecure-dev";

/// JSON numbers above this lose precision in other JSON implementations (I-JSON, RFC 7493).
const MAX_SAFE_INT: u64 = (1 << 53) - 1;
/// Upper bounds a program may ask for; the box cannot hold more per run.
pub const MAX_OUTPUT_BYTES: u64 = 1 << 20;
pub const MAX_STAKE_BYTES: u64 = 64 << 20;
pub const MAX_PROGRAM_BYTES: usize = 64 << 10;

/// sha256 of a program's canonical bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProgramHash(pub [u8; 32]);

impl ProgramHash {
    pub fn of(bytes: &[u8]) -> Self {
        ProgramHash(Sha256::digest(bytes).into())
    }
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn from_hex(s: &str) -> Result<Self> {
        let bytes = decode_hex32(s).ok_or_else(|| {
            JcError::BadRequest(format!("program hash {s:?} is not 64 hex digits"))
        })?;
        Ok(ProgramHash(bytes))
    }
}

impl std::fmt::Display for ProgramHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    pub version: u32,
    /// The call this run belongs to (the caller's call id); lets both nodes match the run.
    pub call_id: String,
    pub parties: Parties,
    /// The boxes both parties accept: a box runs the program only if it is one of them.
    pub boxes: Vec<BoxIdentity>,
    pub skill: SkillRef,
    /// The one provider that may see plaintext.
    pub provider: ProviderGrant,
    pub caller_inputs: CallerInputs,
    pub owner_inputs: OwnerInputs,
    pub output: OutputSpec,
    pub receipt: ReceiptSpec,
    pub prompt_template: String,
    /// Unix seconds after which the program may not be opened or run.
    pub expires_at: u64,
    /// The output guard the box applies to the answer before sealing it. Bound here so both
    /// parties approve it byte for byte; an owner refuses a program whose guard is not its own.
    /// Absent: both parties signed a program without one, and the box checks nothing (an owner
    /// node never signs such a program; see the node's program check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<GuardSpec>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parties {
    pub caller: CallerParty,
    pub owner: OwnerParty,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerParty {
    /// Ed25519 node key, lowercase hex.
    pub node_key: String,
    /// X25519 HPKE key the answer is sealed to, lowercase hex. Only the caller holds its secret.
    pub result_key: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerParty {
    pub node_key: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxIdentity {
    pub platform: String,
    /// Lowercase hex of the platform's measurement (SHA-384 for insecure-dev).
    pub measurement: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillRef {
    pub name: String,
    /// `sha256:<hex>` of the skill's declaration.
    pub declaration_digest: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderGrant {
    pub id: ProviderId,
    /// Base URL of the provider's API: the only egress the box may use. Absent for `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerInputs {
    pub request_max_bytes: u64,
    pub sources: Vec<SourceLimit>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceLimit {
    pub name: String,
    pub max_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerInputs {
    pub body_max_bytes: u64,
    pub model_max_bytes: u64,
    /// 0 when the provider needs no key (`local`, `ollama`).
    pub key_max_bytes: u64,
    /// The body allowance in tokens: how much of the model's context the owner's body may take,
    /// fixed by the owner and never by the body. The embedded model judges the prompt against
    /// it, not against the body's real length, so neither a `context_too_long` nor the
    /// answer's length tells the caller how long the body is (review 26 V1); a body over it
    /// fails `unavailable` on every request. Absent: the provider's default in *this* build's
    /// table (see [`OwnerInputs::body_allowance`]) — which a box of another release may have
    /// larger, so the nodes always state it and an owner refuses a program without it (review
    /// 29 R29-1); the box still reads one without it. The caller may read it: it is the owner's
    /// bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_max_tokens: Option<u64>,
    /// The remote model's context in tokens, as the owner declares it: a remote provider's
    /// request is judged against it in the box before it is sent (bytes bound tokens: the
    /// caller's text in bytes + the frame + the body allowance + the answer's `max_tokens`), so
    /// a `context_too_long` depends only on what the caller can compute, never on how long the
    /// body is (N5 for remote providers); a context refusal the provider still sends back then
    /// fails `unavailable`. Absent: the provider's default (see
    /// [`OwnerInputs::model_context`]); stated always by the nodes for a remote provider, as
    /// `body_max_tokens`. Only for a remote provider: the embedded model's context is the box's
    /// own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_context_tokens: Option<u64>,
}

/// The body allowance a `local` program that names none runs with. Fixed, not derived from the
/// box's context or the program's output bound, so an owner (and its caller) know it without
/// asking the box. 1,024 tokens hold any body a 4,096-token embedded model can serve with room
/// left: with the default output bound (4 KiB, 1,366 answer tokens) a caller keeps about 1,650
/// tokens for its request and sources.
pub const DEFAULT_BODY_MAX_TOKENS: u64 = 1024;
/// The largest body allowance a program may name (no model's context is near it).
pub const MAX_BODY_MAX_TOKENS: u64 = 1 << 20;

/// The model context a program for OpenAI or Anthropic that declares none is judged against:
/// 128,000 tokens, the context of OpenAI's gpt-4o family (Anthropic's models take 200k). A
/// default above a model's real context reopens the body's length (review 28 R28-6: the edge
/// between admitted and refused moves with the body), so this is the smallest of the mainstream
/// models; an owner of a skill on a smaller one (gpt-4 at 8k, gpt-3.5 at 16k) sets its own
/// (`skill set NAME modelContextTokens=N`).
pub const HOSTED_MODEL_CONTEXT_TOKENS: u64 = 128_000;
/// OpenAI's and Anthropic's default body allowance: bodies of up to 48 KiB of bytes (a token covers
/// at least one byte), past the 34 KB of the 99th percentile of real SKILL.md bodies. With the
/// default 64 KiB request bound, the box's notice, the frame and a 4 KiB output bound
/// (65,536 + 293 + 128 + 49,152 + 1,366 < 128,000) no honest request is refused.
pub const HOSTED_BODY_MAX_TOKENS: u64 = 49_152;
/// The model context a program for OpenRouter that declares none is judged against. OpenRouter
/// routes to hundreds of models, many of them below 128k (R28-6); 32k is true of nearly all the
/// chat models it lists, and an owner on a smaller one sets its own.
pub const ROUTED_MODEL_CONTEXT_TOKENS: u64 = 32_768;
/// OpenRouter's default body allowance: bodies of up to 16 KiB (the 90th percentile of real
/// SKILL.md bodies), leaving a caller about 14,500 bytes of request and sources with a 4 KiB
/// output bound.
pub const ROUTED_BODY_MAX_TOKENS: u64 = 16_384;
/// The model context a program for a self-hosted server (Ollama, `openai-compatible:*`) that
/// declares none is judged against. Small on purpose: Ollama runs a model at 4,096 tokens unless
/// told otherwise (2,048 before 0.6) and truncates a longer prompt silently instead of refusing
/// it, llama.cpp's server and LM Studio default to 4,096 too, so a default above the server's real
/// context would reopen the body's length to the caller (review 28 R28-6: the default was 8,192).
/// An owner who runs its server with a larger context declares it
/// (`skill set NAME modelContextTokens=N bodyMaxTokens=N`).
pub const SELF_HOSTED_MODEL_CONTEXT_TOKENS: u64 = 4096;
/// A self-hosted server's default body allowance: bodies of up to 1 KiB, leaving a caller about
/// 1,280 bytes of request and sources with a 4 KiB output bound. Real skill bodies are larger
/// (median 6.4 KB): such a skill needs its owner's declared context and allowance.
pub const SELF_HOSTED_BODY_MAX_TOKENS: u64 = 1024;
/// The largest model context a program may declare (no model's context is near it).
pub const MAX_MODEL_CONTEXT_TOKENS: u64 = 1 << 24;

/// The body allowance in tokens a program naming `provider` runs with when it names none. The one
/// table of these defaults: the box, the owner's check and the caller's program builder all read
/// it. Public, because a program names its provider.
pub fn default_body_max_tokens(provider: &ProviderId) -> u64 {
    match provider {
        ProviderId::Local => DEFAULT_BODY_MAX_TOKENS,
        ProviderId::OpenAi | ProviderId::Anthropic => HOSTED_BODY_MAX_TOKENS,
        ProviderId::OpenRouter => ROUTED_BODY_MAX_TOKENS,
        ProviderId::Ollama | ProviderId::OpenAiCompatible(_) => SELF_HOSTED_BODY_MAX_TOKENS,
    }
}

/// The model context in tokens a program naming a remote `provider` is judged against when it
/// declares none; `None` for `local`, whose context is the box's own model's.
pub fn default_model_context_tokens(provider: &ProviderId) -> Option<u64> {
    match provider {
        ProviderId::Local => None,
        ProviderId::OpenAi | ProviderId::Anthropic => Some(HOSTED_MODEL_CONTEXT_TOKENS),
        ProviderId::OpenRouter => Some(ROUTED_MODEL_CONTEXT_TOKENS),
        ProviderId::Ollama | ProviderId::OpenAiCompatible(_) => {
            Some(SELF_HOSTED_MODEL_CONTEXT_TOKENS)
        }
    }
}

/// The body allowance in force for `provider` when `declared` is what a program (or the owner's
/// setting) names: that, else the provider's default ([`default_body_max_tokens`]). The one rule
/// the box, the owner's check and the owner's skill settings read.
pub fn body_allowance_in_force(declared: Option<u64>, provider: &ProviderId) -> u64 {
    declared.unwrap_or_else(|| default_body_max_tokens(provider))
}

/// The remote model context in force for `provider` when `declared` is what a program (or the
/// owner's setting) names: that, else the provider's default
/// ([`default_model_context_tokens`]); `None` for `local`, whose context is the box's own model's.
pub fn model_context_in_force(declared: Option<u64>, provider: &ProviderId) -> Option<u64> {
    if *provider == ProviderId::Local {
        return None;
    }
    declared.or_else(|| default_model_context_tokens(provider))
}

impl OwnerInputs {
    /// The body allowance in force for a program naming `provider` ([`body_allowance_in_force`]).
    pub fn body_allowance(&self, provider: &ProviderId) -> u64 {
        body_allowance_in_force(self.body_max_tokens, provider)
    }

    /// The remote model context in force for a program naming `provider`
    /// ([`model_context_in_force`]; a valid program declares none for `local`).
    pub fn model_context(&self, provider: &ProviderId) -> Option<u64> {
        model_context_in_force(self.model_context_tokens, provider)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    pub max_bytes: u64,
    /// Always true: the sealed answer is padded to one size, this bound's (`seal::answer_padded_len`).
    pub padded: bool,
    /// Always `caller`: the answer is sealed to the caller's result key only.
    pub to: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptSpec {
    /// Always [`RECEIPT_FIELDS`]: a receipt carries nothing else.
    pub fields: Vec<String>,
    /// Always `["caller", "owner"]`.
    pub to: Vec<String>,
}

impl Program {
    /// Parse canonical program bytes, refusing anything that is not exactly canonical and valid.
    ///
    /// A node reads the same signed program on several steps of a call (consent, the ledger's
    /// entry, each stake); a program these exact bytes already gave is taken from a small
    /// bounded cache keyed by the bytes themselves (issue 33: the parse was ~9 % of the owner's
    /// CPU per call). Different bytes never hit: the whole key is compared.
    pub fn from_canonical(bytes: &[u8]) -> Result<Program> {
        if let Some(program) = parsed::get(bytes) {
            return Ok(program);
        }
        let program = Program::parse_canonical(bytes)?;
        parsed::keep(bytes, &program);
        Ok(program)
    }

    /// Keep `self` as what [`Self::from_canonical`] of `bytes` — its own canonical form, which
    /// the signer just made — gives, when those bytes would parse at all (within the size
    /// limit, valid): parsing them back checks exactly that and yields an equal program (the
    /// typed form gives back the same bytes; `round_trip_is_exact`). Anything else is left to
    /// a full parse, which refuses it.
    pub(crate) fn keep_as_parsed(&self, bytes: &[u8]) {
        if bytes.len() <= MAX_PROGRAM_BYTES && self.validate().is_ok() {
            parsed::keep(bytes, self);
        }
    }

    /// [`Self::from_canonical`] for a program read back from the box's own run store: a
    /// template this build does not run is let through ([`Self::check_template`] tells), so the
    /// restarted box can fail that run with a signed receipt rather than refuse it as tampered.
    /// Never kept in the parse cache: a later [`Self::from_canonical`] of the same bytes still
    /// refuses the template.
    pub(crate) fn from_stored_canonical(bytes: &[u8]) -> Result<Program> {
        if let Some(program) = parsed::get(bytes) {
            return Ok(program);
        }
        Program::parse_canonical_with(bytes, Program::validate_but_template)
    }

    fn parse_canonical(bytes: &[u8]) -> Result<Program> {
        Program::parse_canonical_with(bytes, Program::validate)
    }

    fn parse_canonical_with(bytes: &[u8], validate: fn(&Program) -> Result<()>) -> Result<Program> {
        if bytes.len() > MAX_PROGRAM_BYTES {
            return Err(invalid(
                "(document)",
                format!("{} bytes, more than {MAX_PROGRAM_BYTES}", bytes.len()),
            ));
        }
        let value = jcs::parse_canonical(bytes)?;
        let program: Program =
            serde_json::from_value(value).map_err(|e| invalid("(document)", e.to_string()))?;
        validate(&program)?;
        // The typed form must give back the very same bytes (e.g. `"host": null` is not our form).
        jcs::check_same(bytes, &program.to_canonical()?)?;
        Ok(program)
    }

    /// The program's canonical bytes (what both parties sign).
    pub fn to_canonical(&self) -> Result<Vec<u8>> {
        jcs::to_canonical(self)
    }

    pub fn hash(&self) -> Result<ProgramHash> {
        Ok(ProgramHash::of(&self.to_canonical()?))
    }

    /// Refuse the program if it expired at `now` (unix seconds).
    pub fn check_expiry(&self, now: u64) -> Result<()> {
        if now >= self.expires_at {
            return Err(JcError::ProgramExpired {
                expires_at: self.expires_at,
                now,
            });
        }
        Ok(())
    }

    pub fn caller_node_key(&self) -> Result<[u8; 32]> {
        decode_hex32(&self.parties.caller.node_key)
            .ok_or_else(|| invalid("parties.caller.node_key", "not 64 hex digits"))
    }
    pub fn owner_node_key(&self) -> Result<[u8; 32]> {
        decode_hex32(&self.parties.owner.node_key)
            .ok_or_else(|| invalid("parties.owner.node_key", "not 64 hex digits"))
    }
    pub fn result_key(&self) -> Result<[u8; 32]> {
        decode_hex32(&self.parties.caller.result_key)
            .ok_or_else(|| invalid("parties.caller.result_key", "not 64 hex digits"))
    }

    /// Whether the program accepts this box.
    pub fn lists_box(&self, platform: &str, measurement: &str) -> bool {
        self.boxes
            .iter()
            .any(|b| b.platform == platform && b.measurement == measurement)
    }

    /// Largest plaintext a stake of this role may carry (entries plus framing).
    pub fn stake_limit(&self, role: Role) -> u64 {
        match role {
            Role::Caller => {
                let named = std::iter::once(("request", self.caller_inputs.request_max_bytes))
                    .chain(
                        self.caller_inputs
                            .sources
                            .iter()
                            .map(|s| (s.name.as_str(), s.max_bytes)),
                    );
                named
                    .map(|(n, max)| max + crate::seal::ENTRY_OVERHEAD + n.len() as u64)
                    .sum::<u64>()
                    + 1
            }
            Role::Owner => {
                let o = &self.owner_inputs;
                [
                    ("body", o.body_max_bytes),
                    ("model", o.model_max_bytes),
                    ("key", o.key_max_bytes),
                ]
                .iter()
                .map(|(n, max)| max + crate::seal::ENTRY_OVERHEAD + n.len() as u64)
                .sum::<u64>()
                    // Every owner stake may carry its day limits (not named by the program).
                    + crate::day::DayLimits::FRAMED
                    + 1
            }
        }
    }

    /// The field rules. Every refusal names the field.
    pub fn validate(&self) -> Result<()> {
        self.validate_but_template()?;
        self.check_template()
    }

    /// Whether this box runs the program's prompt template (the one [`PROMPT_TEMPLATE_V2`]).
    pub fn check_template(&self) -> Result<()> {
        match self.prompt_template == PROMPT_TEMPLATE_V2 {
            true => Ok(()),
            false => Err(JcError::PromptTemplateUnknown),
        }
    }

    /// Every field rule but the template's: what a program the box opened before an upgrade
    /// still has to pass to be read back from the run store (its template may be one the
    /// upgraded build no longer runs; that run then fails, see [`Self::from_stored_canonical`]).
    fn validate_but_template(&self) -> Result<()> {
        if let Some(g) = &self.guard {
            g.validate().map_err(|e| invalid("guard", e.to_string()))?;
        }
        if self.version != PROGRAM_VERSION {
            return Err(invalid(
                "version",
                format!(
                    "{} is not the supported version {PROGRAM_VERSION}",
                    self.version
                ),
            ));
        }
        if self.call_id.is_empty()
            || self.call_id.len() > 128
            || !self
                .call_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        {
            return Err(invalid("call_id", "1-128 characters of [A-Za-z0-9-_.:]"));
        }
        check_ed25519("parties.caller.node_key", &self.parties.caller.node_key)?;
        check_ed25519("parties.owner.node_key", &self.parties.owner.node_key)?;
        // Two parties, two keys: one key as both would approve alone and read both stakes' fate.
        if self.parties.caller.node_key == self.parties.owner.node_key {
            return Err(invalid(
                "parties.owner.node_key",
                "the same key as the caller's: a program has two distinct parties",
            ));
        }
        if decode_hex32(&self.parties.caller.result_key).is_none()
            || !is_lower_hex(&self.parties.caller.result_key)
        {
            return Err(invalid(
                "parties.caller.result_key",
                "not 64 lowercase hex digits (X25519 public key)",
            ));
        }
        if self.boxes.is_empty() || self.boxes.len() > 32 {
            return Err(invalid("boxes", "1 to 32 accepted boxes"));
        }
        for (i, b) in self.boxes.iter().enumerate() {
            if b.platform.is_empty()
                || b.platform.len() > 32
                || !b
                    .platform
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            {
                return Err(invalid(
                    &format!("boxes[{i}].platform"),
                    "1-32 characters of [a-z0-9-]",
                ));
            }
            if b.measurement.is_empty()
                || b.measurement.len() > 256
                || !is_lower_hex(&b.measurement)
                || b.measurement.len() % 2 != 0
            {
                return Err(invalid(
                    &format!("boxes[{i}].measurement"),
                    "lowercase hex, at most 128 bytes",
                ));
            }
        }
        check_skill_name(&self.skill.name)?;
        match self.skill.declaration_digest.strip_prefix("sha256:") {
            Some(h) if h.len() == 64 && is_lower_hex(h) => {}
            _ => {
                return Err(invalid(
                    "skill.declaration_digest",
                    "expected sha256:<64 lowercase hex>",
                ));
            }
        }
        match (&self.provider.id, &self.provider.host) {
            (ProviderId::Local, None) => {}
            (ProviderId::Local, Some(_)) => {
                return Err(invalid(
                    "provider.host",
                    "the local provider reaches no host",
                ));
            }
            (_, None) => return Err(invalid("provider.host", "required for a remote provider")),
            (_, Some(h)) => check_host(h)?,
        }
        let ci = &self.caller_inputs;
        check_limit(
            "caller_inputs.request_max_bytes",
            ci.request_max_bytes,
            true,
        )?;
        if ci.sources.len() > 64 {
            return Err(invalid("caller_inputs.sources", "at most 64 sources"));
        }
        for (i, s) in ci.sources.iter().enumerate() {
            check_source_name(&format!("caller_inputs.sources[{i}].name"), &s.name)?;
            if ci.sources[..i].iter().any(|o| o.name == s.name) {
                return Err(invalid(
                    &format!("caller_inputs.sources[{i}].name"),
                    format!("{:?} is listed twice", s.name),
                ));
            }
            check_limit(
                &format!("caller_inputs.sources[{i}].max_bytes"),
                s.max_bytes,
                true,
            )?;
        }
        let oi = &self.owner_inputs;
        check_limit("owner_inputs.body_max_bytes", oi.body_max_bytes, true)?;
        check_limit("owner_inputs.model_max_bytes", oi.model_max_bytes, false)?;
        check_limit("owner_inputs.key_max_bytes", oi.key_max_bytes, false)?;
        if let Some(tokens) = oi.body_max_tokens
            && !(1..=MAX_BODY_MAX_TOKENS).contains(&tokens)
        {
            return Err(invalid(
                "owner_inputs.body_max_tokens",
                format!("1 to {MAX_BODY_MAX_TOKENS}"),
            ));
        }
        if let Some(tokens) = oi.model_context_tokens {
            if self.provider.id == ProviderId::Local {
                return Err(invalid(
                    "owner_inputs.model_context_tokens",
                    "absent for the local provider (the box's model has its own context)",
                ));
            }
            if !(1..=MAX_MODEL_CONTEXT_TOKENS).contains(&tokens) {
                return Err(invalid(
                    "owner_inputs.model_context_tokens",
                    format!("1 to {MAX_MODEL_CONTEXT_TOKENS}"),
                ));
            }
        }
        // A remote context no larger than the body's allowance admits no request at all.
        let allowance = oi.body_allowance(&self.provider.id);
        if let Some(context) = oi.model_context(&self.provider.id)
            && context <= allowance
        {
            return Err(invalid(
                "owner_inputs.model_context_tokens",
                format!(
                    "more than the body allowance ({allowance} tokens; absent: {} for {})",
                    default_model_context_tokens(&self.provider.id).unwrap_or(0),
                    self.provider.id
                ),
            ));
        }
        if self.provider.id.needs_key() && oi.key_max_bytes == 0 {
            return Err(invalid(
                "owner_inputs.key_max_bytes",
                format!("provider {} needs a key", self.provider.id),
            ));
        }
        for role in [Role::Caller, Role::Owner] {
            if self.stake_limit(role) > MAX_STAKE_BYTES {
                return Err(invalid(
                    &format!("{}_inputs", role.as_str()),
                    format!("total limits exceed {MAX_STAKE_BYTES} bytes"),
                ));
            }
        }
        if self.output.max_bytes == 0 || self.output.max_bytes > MAX_OUTPUT_BYTES {
            return Err(invalid(
                "output.max_bytes",
                format!("1 to {MAX_OUTPUT_BYTES}"),
            ));
        }
        if !self.output.padded {
            return Err(invalid("output.padded", "the answer is always padded"));
        }
        if self.output.to != "caller" {
            return Err(invalid("output.to", "the answer goes to the caller only"));
        }
        if self.receipt != ReceiptSpec::for_guard(self.guard.is_some()) {
            return Err(invalid(
                "receipt.fields",
                format!(
                    "must be exactly {RECEIPT_FIELDS:?}, with {GUARD_RECEIPT_FIELD:?} after them when the program names a guard"
                ),
            ));
        }
        if self.receipt.to != ["caller", "owner"] {
            return Err(invalid("receipt.to", "must be [\"caller\", \"owner\"]"));
        }
        if self.expires_at == 0 || self.expires_at > MAX_SAFE_INT {
            return Err(invalid("expires_at", "unix seconds, > 0"));
        }
        Ok(())
    }
}

impl OutputSpec {
    /// The only output a program may name: padded, to the caller, at most `max_bytes`.
    pub fn to_caller(max_bytes: u64) -> OutputSpec {
        OutputSpec {
            max_bytes,
            padded: true,
            to: "caller".into(),
        }
    }
}

impl ReceiptSpec {
    /// The only receipt a program may name: the fixed fields, to both parties.
    pub fn to_both() -> ReceiptSpec {
        ReceiptSpec {
            fields: RECEIPT_FIELDS.iter().map(|s| s.to_string()).collect(),
            to: vec!["caller".into(), "owner".into()],
        }
    }

    /// The receipt of a program with (`true`) or without an output guard: a guarded one also
    /// names the owner's sealed note (whether the guard acted; never in the shared receipt).
    pub fn for_guard(guarded: bool) -> ReceiptSpec {
        let mut spec = ReceiptSpec::to_both();
        if guarded {
            spec.fields.push(GUARD_RECEIPT_FIELD.into());
        }
        spec
    }
}

/// Which party a stake, a submit or a seal belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Caller,
    Owner,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Caller => "caller",
            Role::Owner => "owner",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = JcError;
    fn from_str(s: &str) -> Result<Role> {
        match s {
            "caller" => Ok(Role::Caller),
            "owner" => Ok(Role::Owner),
            other => Err(JcError::UnknownRole(other.chars().take(32).collect())),
        }
    }
}

fn invalid(field: &str, reason: impl Into<String>) -> JcError {
    JcError::ProgramInvalid {
        field: field.to_owned(),
        reason: reason.into(),
    }
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// 32 bytes from 64 lowercase hex digits.
pub fn decode_hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !is_lower_hex(s) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

fn check_ed25519(field: &str, s: &str) -> Result<()> {
    let bytes = decode_hex32(s)
        .ok_or_else(|| invalid(field, "not 64 lowercase hex digits (Ed25519 public key)"))?;
    ed25519_key(&bytes).ok_or_else(|| invalid(field, "not a valid Ed25519 public key"))?;
    Ok(())
}

/// The Ed25519 public key these 32 bytes encode, or `None` when they encode none.
/// Decompressing a point costs a field inversion (~10 µs), and the box and the nodes meet the
/// same few keys (the parties', the box's) on every program, action and envelope they check: a
/// key decoded once is kept (issue 33). Only keys that decoded are kept, under their exact
/// bytes, so the answer is the one `VerifyingKey::from_bytes` gives.
pub fn ed25519_key(bytes: &[u8; 32]) -> Option<ed25519_dalek::VerifyingKey> {
    use std::sync::{LazyLock, Mutex};
    /// Far more than the parties a node or a box deals with at once; 32 bytes a key.
    const KEYS: usize = 4_096;
    static KEYS_SEEN: LazyLock<Mutex<crate::kept::Kept<[u8; 32], ed25519_dalek::VerifyingKey>>> =
        LazyLock::new(|| Mutex::new(crate::kept::Kept::new(KEYS, |_| 1)));
    if let Some(k) = KEYS_SEEN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(bytes)
    {
        return Some(*k);
    }
    let key = ed25519_dalek::VerifyingKey::from_bytes(bytes).ok()?;
    KEYS_SEEN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keep(*bytes, key);
    Some(key)
}

fn check_limit(field: &str, v: u64, nonzero: bool) -> Result<()> {
    if (nonzero && v == 0) || v > MAX_STAKE_BYTES {
        let low = if nonzero { 1 } else { 0 };
        return Err(invalid(field, format!("{low} to {MAX_STAKE_BYTES}")));
    }
    Ok(())
}

/// Agent Skills name rule: 1-64 chars of [a-z0-9-], no leading, trailing or double `-`.
fn check_skill_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "skill.name",
            "1-64 chars of [a-z0-9-], no leading, trailing or double '-'",
        ))
    }
}

/// Caller source names: the node's own source-name rule, never a stake entry's name
/// (`request`, `body`, `model`, `key`), and never owner or node material (`skill/`, `agent/`,
/// `call/`): a program naming one is refused by both parties and by the box.
fn check_source_name(field: &str, name: &str) -> Result<()> {
    if skillbox_skill::is_reserved_source_name(name) {
        return Err(invalid(
            field,
            format!(
                "under a reserved prefix ({}): only a caller's shareable data can be staked",
                skillbox_skill::RESERVED_SOURCE_PREFIXES.join(", ")
            ),
        ));
    }
    let ok = skillbox_skill::is_valid_source_name(name)
        && !matches!(name, "request" | "body" | "model" | "key");
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            "1-128 chars of [A-Za-z0-9-_./], not a reserved name",
        ))
    }
}

fn check_host(h: &str) -> Result<()> {
    let rest = h
        .strip_prefix("https://")
        .or_else(|| h.strip_prefix("http://"));
    match rest {
        Some(r)
            if !r.is_empty()
                && h.len() <= 512
                && !r.starts_with('/')
                && h.bytes().all(|b| b.is_ascii_graphic())
                && !r.contains('@') =>
        {
            Ok(())
        }
        _ => Err(invalid(
            "provider.host",
            "an http(s) base URL without credentials",
        )),
    }
}

/// The programs parsed last, by their canonical bytes: at most [`parsed::BUDGET`] bytes of keys
/// (a parsed program takes about as much again), the oldest let go first. Only a program that
/// passed every check is kept, so a hit returns what parsing the same bytes would.
mod parsed {
    use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

    use super::Program;
    use crate::kept::Kept;

    /// Enough for the programs of a few thousand calls in flight (~3 KiB each).
    pub(super) const BUDGET: usize = 8 << 20;

    fn cache() -> MutexGuard<'static, Kept<Arc<[u8]>, Program>> {
        static CACHE: LazyLock<Mutex<Kept<Arc<[u8]>, Program>>> =
            LazyLock::new(|| Mutex::new(Kept::new(BUDGET, |key| key.len())));
        CACHE.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn get(bytes: &[u8]) -> Option<Program> {
        cache().get(bytes).cloned()
    }

    pub(super) fn keep(bytes: &[u8], program: &Program) {
        let mut c = cache();
        if c.get(bytes).is_none() {
            c.keep(Arc::from(bytes), program.clone());
        }
    }

    #[cfg(test)]
    pub(super) fn held(bytes: &[u8]) -> bool {
        cache().get(bytes).is_some()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The kept keys answer as `VerifyingKey::from_bytes` does, the second time as the first,
    /// and bytes that encode no key are refused every time (never kept).
    #[test]
    fn a_kept_key_decodes_as_from_bytes_does() {
        let key = ed25519_dalek::SigningKey::from_bytes(&[5u8; 32]).verifying_key();
        for _ in 0..2 {
            assert_eq!(ed25519_key(key.as_bytes()), Some(key));
        }
        let not_a_key = (0u8..=255)
            .map(|b| [b; 32])
            .find(|b| ed25519_dalek::VerifyingKey::from_bytes(b).is_err())
            .expect("some 32 equal bytes encode no point");
        for _ in 0..2 {
            assert_eq!(ed25519_key(&not_a_key), None);
        }
    }

    pub(crate) fn sample(caller_key: &str, owner_key: &str, result_key: &str) -> Program {
        Program {
            version: PROGRAM_VERSION,
            call_id: "call-1".into(),
            parties: Parties {
                caller: CallerParty {
                    node_key: caller_key.into(),
                    result_key: result_key.into(),
                },
                owner: OwnerParty {
                    node_key: owner_key.into(),
                },
            },
            boxes: vec![BoxIdentity {
                platform: INSECURE_DEV.into(),
                measurement: "ab".repeat(48),
            }],
            skill: SkillRef {
                name: "summarize".into(),
                declaration_digest: format!("sha256:{}", "0".repeat(64)),
            },
            provider: ProviderGrant {
                id: ProviderId::Local,
                host: None,
            },
            caller_inputs: CallerInputs {
                request_max_bytes: 4096,
                sources: vec![SourceLimit {
                    name: "spotify_songs".into(),
                    max_bytes: 65536,
                }],
            },
            owner_inputs: OwnerInputs {
                body_max_bytes: 65536,
                model_max_bytes: 256,
                key_max_bytes: 0,
                body_max_tokens: None,
                model_context_tokens: None,
            },
            output: OutputSpec::to_caller(2048),
            receipt: ReceiptSpec::to_both(),
            prompt_template: PROMPT_TEMPLATE_V2.into(),
            expires_at: 4_000_000_000,
            guard: None,
        }
    }

    fn key_hex(seed: u8) -> String {
        hex::encode(
            ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
                .verifying_key()
                .to_bytes(),
        )
    }

    pub(crate) fn sample_default() -> Program {
        sample(&key_hex(1), &key_hex(2), &"11".repeat(32))
    }

    /// A program parsed once is kept by its exact bytes; bytes that differ anywhere, even by
    /// whitespace only, are parsed (and refused) on their own.
    #[test]
    fn a_parsed_program_is_kept_by_its_exact_bytes() {
        let mut p = sample_default();
        p.expires_at = 4_000_000_001;
        let bytes = p.to_canonical().expect("canonical");
        assert_eq!(Program::from_canonical(&bytes).expect("parses"), p);
        assert!(parsed::held(&bytes), "kept after the first parse");
        assert_eq!(Program::from_canonical(&bytes).expect("again"), p);

        let mut later = p.clone();
        later.expires_at = 4_000_000_002;
        let later_bytes = later.to_canonical().expect("canonical");
        assert_eq!(bytes.len(), later_bytes.len());
        assert_eq!(
            Program::from_canonical(&later_bytes).expect("parses"),
            later
        );

        let text = String::from_utf8(bytes).expect("utf-8");
        let spaced = text.replacen("{\"boxes\"", "{ \"boxes\"", 1);
        assert!(matches!(
            Program::from_canonical(spaced.as_bytes()),
            Err(JcError::NonCanonical { offset: 1 })
        ));
        assert!(
            !parsed::held(spaced.as_bytes()),
            "a refused program is not kept"
        );
    }

    /// A program signed here is kept as its parse (the caller's cosign does not parse its own
    /// program again), equal to what a full parse of its bytes gives; an invalid one signed
    /// is not kept, and its bytes are still refused.
    #[test]
    fn a_signed_program_is_kept_as_its_parse_and_an_invalid_one_is_not() {
        let key = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
        let mut p = sample_default();
        p.expires_at = 4_000_000_011;
        let env = crate::dsse::sign_program(&p, &key).expect("signed");
        let bytes = env.payload_bytes().expect("payload");
        assert!(parsed::held(&bytes), "kept as it was signed");
        assert_eq!(Program::parse_canonical(&bytes).expect("parses"), p);

        let mut bad = p.clone();
        bad.expires_at = 4_000_000_012;
        bad.skill.name = String::new();
        assert!(bad.validate().is_err());
        let env = crate::dsse::sign_program(&bad, &key).expect("signing does not check");
        let bytes = env.payload_bytes().expect("payload");
        assert!(!parsed::held(&bytes), "an invalid program is not kept");
        assert!(Program::from_canonical(&bytes).is_err());
    }

    #[test]
    fn round_trip_is_exact() {
        let p = sample_default();
        let bytes = p.to_canonical().expect("canonical");
        let back = Program::from_canonical(&bytes).expect("parses");
        assert_eq!(back, p);
        assert_eq!(back.hash().expect("hash"), ProgramHash::of(&bytes));
    }

    #[test]
    fn a_declared_model_context_is_for_a_remote_provider_within_bounds_and_above_the_allowance() {
        let field_of = |p: &Program| match p.validate() {
            Err(JcError::ProgramInvalid { field, reason }) => Some((field, reason)),
            Err(other) => panic!("not a program refusal: {other}"),
            Ok(()) => None,
        };
        let local = sample_default();
        let remote = Program {
            provider: ProviderGrant {
                id: ProviderId::Ollama,
                host: Some("http://127.0.0.1:11434/v1".into()),
            },
            ..local.clone()
        };
        // Absent: the default, for either provider.
        assert_eq!(field_of(&local), None);
        assert_eq!(field_of(&remote), None);
        assert_eq!(
            remote.owner_inputs.model_context(&ProviderId::Ollama),
            Some(SELF_HOSTED_MODEL_CONTEXT_TOKENS)
        );
        assert_eq!(local.owner_inputs.model_context(&ProviderId::Local), None);
        let with = |p: &Program, context: Option<u64>, allowance: Option<u64>| {
            let mut p = p.clone();
            p.owner_inputs.model_context_tokens = context;
            p.owner_inputs.body_max_tokens = allowance;
            p
        };
        // The local model's context is the box's own: a program may not declare one.
        let (field, reason) = field_of(&with(&local, Some(4096), None)).expect("local");
        assert_eq!(field, "owner_inputs.model_context_tokens");
        assert!(reason.contains("local provider"), "{reason}");
        // Out of bounds.
        for context in [0, MAX_MODEL_CONTEXT_TOKENS + 1, u64::MAX] {
            let (field, reason) = field_of(&with(&remote, Some(context), None)).expect("bounds");
            assert_eq!(field, "owner_inputs.model_context_tokens");
            assert!(reason.contains("1 to"), "{context}: {reason}");
        }
        // No larger than the allowance it must hold: no request could ever run.
        for (context, allowance) in [
            (Some(SELF_HOSTED_BODY_MAX_TOKENS), None),
            (Some(2000), Some(2000)),
            (None, Some(SELF_HOSTED_MODEL_CONTEXT_TOKENS)),
        ] {
            let (field, reason) =
                field_of(&with(&remote, context, allowance)).expect("above the allowance");
            assert_eq!(field, "owner_inputs.model_context_tokens");
            assert!(reason.contains("more than the body allowance"), "{reason}");
        }
        // Within bounds and above the allowance, it is the one in force.
        for context in [
            SELF_HOSTED_BODY_MAX_TOKENS + 1,
            128_000,
            MAX_MODEL_CONTEXT_TOKENS,
        ] {
            let p = with(&remote, Some(context), None);
            assert_eq!(field_of(&p), None, "{context}");
            assert_eq!(
                p.owner_inputs.model_context(&ProviderId::Ollama),
                Some(context)
            );
        }
        // Signed in: it is part of the canonical bytes (the program's hash changes with it).
        let declared = with(&remote, Some(32_768), None);
        let bytes = String::from_utf8(declared.to_canonical().expect("canonical")).expect("utf-8");
        assert!(bytes.contains("\"model_context_tokens\":32768"), "{bytes}");
        assert_eq!(
            Program::from_canonical(bytes.as_bytes()).expect("parses"),
            declared
        );
    }

    #[test]
    fn each_provider_has_its_default_allowance_and_context_and_the_pair_is_valid() {
        let hosted = [ProviderId::OpenAi, ProviderId::Anthropic];
        let routed = [ProviderId::OpenRouter];
        let self_hosted = [
            ProviderId::Ollama,
            ProviderId::OpenAiCompatible("vllm".into()),
        ];
        // No default above the smallest context of the models a provider commonly serves
        // (review 28 R28-6): gpt-4o's 128,000, 32k on OpenRouter, a stock Ollama's 4,096.
        for p in &hosted {
            assert_eq!(default_body_max_tokens(p), 49_152, "{p}");
            assert_eq!(default_model_context_tokens(p), Some(128_000), "{p}");
        }
        for p in &routed {
            assert_eq!(default_body_max_tokens(p), 16_384, "{p}");
            assert_eq!(default_model_context_tokens(p), Some(32_768), "{p}");
        }
        for p in &self_hosted {
            assert_eq!(default_body_max_tokens(p), 1024, "{p}");
            assert_eq!(default_model_context_tokens(p), Some(4096), "{p}");
        }
        assert_eq!(default_body_max_tokens(&ProviderId::Local), 1024);
        assert_eq!(default_model_context_tokens(&ProviderId::Local), None);
        // OpenAI's and Anthropic's defaults refuse no honest request: the largest default request
        // (64 KiB), the box's notice, the frame, the allowance and a 4 KiB output bound's answer
        // tokens fit its context with room.
        let notice = crate::prompt::notice_bytes() as u64;
        assert!(
            65_536 + notice + 128 + HOSTED_BODY_MAX_TOKENS + 4096u64.div_ceil(3)
                < HOSTED_MODEL_CONTEXT_TOKENS
        );
        // OpenRouter's and a self-hosted server's leave a caller room for a request (about
        // 14,500 and 1,280 bytes).
        let room = |context: u64, allowance: u64| {
            context - (notice + 128 + allowance + 4096u64.div_ceil(3))
        };
        assert!(
            room(ROUTED_MODEL_CONTEXT_TOKENS, ROUTED_BODY_MAX_TOKENS) >= 14_000,
            "{}",
            room(ROUTED_MODEL_CONTEXT_TOKENS, ROUTED_BODY_MAX_TOKENS)
        );
        assert!(
            room(
                SELF_HOSTED_MODEL_CONTEXT_TOKENS,
                SELF_HOSTED_BODY_MAX_TOKENS
            ) >= 1024,
            "{}",
            room(
                SELF_HOSTED_MODEL_CONTEXT_TOKENS,
                SELF_HOSTED_BODY_MAX_TOKENS
            )
        );
        // Each provider's program without declarations validates, and what is in force is the
        // table's; a program's own values win over it.
        let base = sample_default();
        for p in hosted.iter().chain(&routed).chain(&self_hosted) {
            let mut program = base.clone();
            program.provider = ProviderGrant {
                id: p.clone(),
                host: Some("https://api.example/v1".into()),
            };
            if p.needs_key() {
                program.owner_inputs.key_max_bytes = 16 * 1024;
            }
            assert_eq!(program.validate().map_err(|e| e.to_string()), Ok(()), "{p}");
            let oi = &program.owner_inputs;
            assert_eq!(oi.body_allowance(p), default_body_max_tokens(p));
            assert_eq!(oi.model_context(p), default_model_context_tokens(p));
            let declared = OwnerInputs {
                body_max_tokens: Some(2000),
                model_context_tokens: Some(32_768),
                ..oi.clone()
            };
            assert_eq!(declared.body_allowance(p), 2000);
            assert_eq!(declared.model_context(p), Some(32_768));
        }
        assert_eq!(
            base.owner_inputs.body_allowance(&ProviderId::Local),
            DEFAULT_BODY_MAX_TOKENS
        );
    }

    #[test]
    fn refusals_name_the_problem() {
        let p = sample_default();
        let bytes = String::from_utf8(p.to_canonical().expect("canonical")).expect("utf-8");
        // Whitespace: not canonical.
        let spaced = bytes.replacen("{\"boxes\"", "{ \"boxes\"", 1);
        assert!(matches!(
            Program::from_canonical(spaced.as_bytes()),
            Err(JcError::NonCanonical { offset: 1 })
        ));
        // A duplicate key, even one whose values agree.
        let dup = bytes.replacen("\"version\":1", "\"version\":1,\"version\":1", 1);
        assert!(
            matches!(Program::from_canonical(dup.as_bytes()), Err(JcError::DuplicateKey { ref key }) if key == "version")
        );
        // `host: null` is not the program's own form.
        let null_host = bytes.replacen("{\"id\":\"local\"}", "{\"host\":null,\"id\":\"local\"}", 1);
        assert_ne!(null_host, bytes);
        assert!(matches!(
            Program::from_canonical(null_host.as_bytes()),
            Err(JcError::NonCanonical { .. })
        ));
        // Unknown field.
        let extra = bytes.replacen("\"version\":1", "\"version\":1,\"zzz\":1", 1);
        assert!(matches!(
            Program::from_canonical(extra.as_bytes()),
            Err(JcError::ProgramInvalid { .. })
        ));

        let mut bad = p.clone();
        bad.output.to = "owner".into();
        assert!(
            matches!(bad.validate(), Err(JcError::ProgramInvalid { ref field, .. }) if field == "output.to")
        );
        let mut bad = p.clone();
        bad.provider = ProviderGrant {
            id: ProviderId::OpenRouter,
            host: None,
        };
        assert!(
            matches!(bad.validate(), Err(JcError::ProgramInvalid { ref field, .. }) if field == "provider.host")
        );
        let mut bad = p.clone();
        bad.caller_inputs
            .sources
            .push(bad.caller_inputs.sources[0].clone());
        assert!(
            matches!(bad.validate(), Err(JcError::ProgramInvalid { ref field, .. }) if field == "caller_inputs.sources[1].name")
        );
        for reserved in [
            "skill/code-reviewer/body",
            "call/abc/answer",
            "agent/a.b/prompt",
        ] {
            let mut bad = p.clone();
            bad.caller_inputs.sources[0].name = reserved.into();
            assert!(
                matches!(bad.validate(), Err(JcError::ProgramInvalid { ref field, ref reason }) if field == "caller_inputs.sources[0].name" && reason.contains("reserved prefix")),
                "{reserved} accepted"
            );
        }
        let mut bad = p.clone();
        bad.parties.owner.node_key = bad.parties.caller.node_key.clone();
        assert!(
            matches!(bad.validate(), Err(JcError::ProgramInvalid { ref field, .. }) if field == "parties.owner.node_key")
        );
        let mut bad = p.clone();
        bad.parties.owner.node_key = "zz".into();
        assert!(
            matches!(bad.validate(), Err(JcError::ProgramInvalid { ref field, .. }) if field == "parties.owner.node_key")
        );
        let mut bad = p;
        bad.expires_at = 10;
        assert!(matches!(
            bad.check_expiry(11),
            Err(JcError::ProgramExpired {
                expires_at: 10,
                now: 11
            })
        ));
    }

    #[test]
    fn typed_program_validates_against_its_schema() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../schemas/program.schema.json"))
                .expect("schema is JSON");
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        let good = serde_json::to_value(sample_default()).expect("to value");
        let errors: Vec<String> = validator
            .iter_errors(&good)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:?}");
        let mut remote = sample_default();
        remote.provider = ProviderGrant {
            id: ProviderId::OpenRouter,
            host: Some("https://openrouter.ai/api/v1".into()),
        };
        remote.owner_inputs.key_max_bytes = 512;
        assert!(validator.is_valid(&serde_json::to_value(remote).expect("to value")));
        let mut wrong = good.clone();
        wrong["output"]["to"] = "owner".into();
        assert!(
            !validator.is_valid(&wrong),
            "schema must refuse output to the owner"
        );
        let mut wrong = good;
        wrong["extra"] = 1.into();
        assert!(
            !validator.is_valid(&wrong),
            "schema must refuse unknown fields"
        );
    }
}
