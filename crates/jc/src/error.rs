//! One error type for the crate. Every variant names what is wrong; none carries material (request,
//! sources, body, model, key, answer): messages may end up in logs and in the other party's view.

/// Everything the box, the program layer and the client can refuse.
#[derive(Debug, thiserror::Error)]
pub enum JcError {
    // --- the program (canonical JSON) ---
    #[error("program is not valid JSON: {0}")]
    ProgramJson(String),
    #[error("program has a duplicate key {key:?}")]
    DuplicateKey { key: String },
    #[error("program is not canonical (RFC 8785): first difference at byte {offset}")]
    NonCanonical { offset: usize },
    #[error("program field {field}: {reason}")]
    ProgramInvalid { field: String, reason: String },
    #[error("program expired at {expires_at} (now {now})")]
    ProgramExpired { expires_at: u64, now: u64 },

    // --- DSSE envelopes and signatures ---
    #[error("envelope invalid: {0}")]
    Envelope(String),
    #[error("envelope payload type is {found:?}, expected {expected:?}")]
    PayloadType { expected: String, found: String },
    #[error("program is missing the {role} signature")]
    SignatureMissing { role: &'static str },
    #[error("signature by key {keyid} is not from a party named in the program")]
    SignerNotInProgram { keyid: String },
    #[error("signature by the {role} key does not verify")]
    BadSignature { role: String },

    // --- attestation ---
    #[error("attestation platform {0:?} is not accepted by this verifier")]
    PlatformNotAllowed(String),
    #[error("insecure-dev attestation refused: this node's config does not allow it")]
    DevAttestationNotAllowed,
    #[error("the box's evidence is signed by a key this node has not pinned for it")]
    BoxKeyNotPinned,
    /// The TLS key the box's connection showed is not the one its attestation binds (a TLS
    /// front or proxy between the node and the box), or an https box attests no TLS key.
    #[error("the box's TLS key is not the one its attestation binds")]
    TlsKeyNotAttested,
    /// A hardware verifier refused the evidence: its closed code (`bad_signature`,
    /// `foreign_root`, `debug_enabled`, `report_data_mismatch`, ...).
    #[error("hardware evidence refused: {0}")]
    HardwareRefused(&'static str),
    #[error("the box does not attest the provider host the program grants")]
    ProviderHostNotAttested,
    #[error("the provider host the program grants is not one this node pins")]
    ProviderHostNotPinned,
    #[error("box {platform}:{measurement} is not listed in the program")]
    BoxNotListed {
        platform: String,
        measurement: String,
    },
    #[error("attestation nonce does not match the nonce asked with")]
    NonceMismatch,
    #[error("attestation statement is for another program (hash {found})")]
    StatementProgramMismatch { found: String },
    #[error("attestation statement is for another run ({found})")]
    StatementRunMismatch { found: String },
    #[error("attestation expired at {expires_at} (now {now})")]
    AttestationExpired { expires_at: u64, now: u64 },
    #[error("attestation report data does not match its statement")]
    ReportDataMismatch,
    #[error("attestation evidence invalid: {0}")]
    Evidence(String),

    // --- sealing ---
    #[error("sealed data invalid: {0}")]
    Sealed(String),
    #[error(
        "stake for role {role} does not open with this run's info (wrong run, program or role)"
    )]
    StakeWrongInfo { role: String },
    #[error("stake is {size} bytes, more than the {limit} the program allows for the {role}")]
    StakeTooLarge { role: String, size: u64, limit: u64 },
    #[error("stake entry {name:?} is {size} bytes, more than its limit of {limit}")]
    EntryTooLarge { name: String, size: u64, limit: u64 },
    #[error("stake entry {name:?} is not named by the program for the {role}")]
    EntryNotInProgram { name: String, role: String },
    #[error("stake for the {role} lacks the required entry {name:?}")]
    EntryMissing { name: String, role: String },
    /// The owner's `day_limits` entry is not two big-endian u32 (`day::DayLimits`).
    #[error(
        "stake entry \"day_limits\" is {size} bytes; it must be exactly 8 (two big-endian u32 per mille limits)"
    )]
    DayLimitsInvalid { size: usize },
    #[error("result cannot be opened with this key")]
    ResultNotForThisKey,
    #[error("reading the material to stake failed: {0}")]
    Read(String),

    // --- runs ---
    #[error("run {0} not found")]
    RunNotFound(String),
    #[error("run {0} is spent: run ids are single-use")]
    RunSpent(String),
    #[error("program {0} was already run at this box: a program runs once")]
    ProgramSpent(String),
    #[error("run expired at {0}")]
    RunExpired(u64),
    #[error("the {role} has already staked in this run")]
    AlreadyStaked { role: String },
    #[error("submit refused: waiting for the stake of {missing}")]
    StakesMissing { missing: String },
    #[error("run is {state}; {action} is not possible now")]
    WrongState { state: String, action: String },
    #[error("result not ready: run is {0}")]
    NotReady(String),
    #[error("provider {0} is not available at this box")]
    ProviderUnavailable(String),
    /// The provider failed the run: only its closed code, never its words.
    #[error("provider failed: {0}")]
    ProviderFailed(skillbox_providers::ProviderFailure),
    /// The skill body's secret markers are malformed: the box will not run it unguarded.
    #[error("the skill body cannot be guarded")]
    GuardBody,
    #[error("provider host {found:?} differs from this box's configured host {expected:?}")]
    ProviderHost { expected: String, found: String },
    #[error("box is at its limit of {0} runs in flight")]
    Busy(usize),
    #[error("box is at its memory budget for opened stakes ({budget} bytes)")]
    OverBudget { budget: u64 },
    /// The caller's answers of this skill today already reached the owner's day limits (the
    /// box's day book, `day::DayBook`): the run is refused before the provider is asked.
    #[error("the caller's answers of this skill today reached the owner's day limits")]
    CoverageExceeded,
    /// The program names a prompt template other than `program::PROMPT_TEMPLATE_V2` (an older
    /// node's `skillbox.prompt/v1`): the box would build a prompt its parties did not agree to.
    #[error("the program's prompt_template is not skillbox.prompt/v2, the one this box runs")]
    PromptTemplateUnknown,
    /// Another run of the same (owner, caller, skill) was in flight at the box for as long as
    /// this one could wait (`day::InFlight`): it ends without asking the provider.
    #[error(
        "another run of this caller and skill was in flight for as long as this run could wait"
    )]
    DayTurnTimedOut,
    /// Too many requests from this client address, or opens by this program key.
    #[error("rate limited")]
    RateLimited,
    #[error("program expires later than this box allows (latest {latest})")]
    ExpiresTooFar { latest: u64 },
    #[error("no party of the program is on this box's allow-list")]
    KeyNotAllowed,
    #[error("a stake for the {role} is being uploaded")]
    UploadInProgress { role: String },
    #[error("the stake upload took too long")]
    UploadTimedOut,
    #[error("run id is not 32 lowercase hex digits")]
    BadRunId,
    #[error("the Host header names no address this box answers on")]
    HostNotAllowed,
    #[error("cross-site request refused (Origin)")]
    OriginNotAllowed,
    #[error("the request body must be {expected}")]
    MediaType { expected: &'static str },
    #[error("role {0:?} is not caller or owner")]
    UnknownRole(String),
    #[error("request body invalid: {0}")]
    BadRequest(String),
    #[error("request body is larger than {limit} bytes")]
    BodyTooLarge { limit: usize },

    // --- the client side of HTTP ---
    /// The box refused. Only its status and code cross (a code of `[a-z0-9_]`, at most 64
    /// characters): the box's words are never carried into a node's records or logs.
    #[error("box answered {status} {code}")]
    Remote { status: u16, code: String },
    #[error("box unreachable: {0}")]
    Transport(String),
    /// The box's answer is longer than the client reads (see `client::MAX_RESPONSE_BYTES`).
    #[error("box answer is larger than {limit} bytes")]
    ResponseTooLarge { limit: usize },
    /// A persisted run did not open under the box's storage key (flipped, cut, moved to
    /// another run or role, or sealed under another key): that run is refused, never used.
    #[error("a persisted run does not open under the box's storage key")]
    StoreTampered,
    /// The box died while the run was at the provider more often than it retries.
    #[error("the box restarted during the run too often")]
    RunInterrupted,
    /// The box's own storage (its spent-program list) failed or cannot be read.
    #[error("box storage: {0}")]
    Storage(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl JcError {
    /// What the box's HTTP API answers with this error, in one row per variant: the stable
    /// machine code for the `{error, message}` envelope, the HTTP status, and the words sent
    /// with the code — fixed per code, so nothing a party sent (nor anything of the run) is
    /// echoed across the boundary.
    #[rustfmt::skip] // a table: one variant a line
    fn answer(&self) -> (&'static str, u16, &'static str) {
        use JcError::*;
        match self {
            ProgramJson(_) => ("program_json", 400, "the program is not canonical JSON (RFC 8785)"),
            DuplicateKey { .. } => ("program_duplicate_key", 400, "the program is not canonical JSON (RFC 8785)"),
            NonCanonical { .. } => ("program_not_canonical", 400, "the program is not canonical JSON (RFC 8785)"),
            ProgramInvalid { .. } => ("program_invalid", 400, "the program breaks a field rule"),
            PromptTemplateUnknown => ("prompt_template_unknown", 400, "the program names a prompt template this box does not run"),
            ProgramExpired { .. } => ("program_expired", 410, "the program expired"),
            Envelope(_) => ("envelope_invalid", 400, "the signed envelope is invalid"),
            PayloadType { .. } => ("payload_type", 400, "the signed envelope is invalid"),
            SignatureMissing { .. } => ("signature_missing", 403, "a party's signature is missing"),
            SignerNotInProgram { .. } => ("signer_not_in_program", 403, "a signature is not from a party of the program"),
            BadSignature { .. } => ("bad_signature", 403, "a signature does not verify"),
            PlatformNotAllowed(_) => ("platform_not_allowed", 400, "attestation platform refused"),
            DevAttestationNotAllowed => ("dev_attestation_not_allowed", 400, "attestation platform refused"),
            BoxKeyNotPinned => ("box_key_not_pinned", 400, "the box is not the one pinned"),
            TlsKeyNotAttested => ("tls_key_not_attested", 400, "the box's TLS key is not the one it attests"),
            HardwareRefused(_) => ("hardware_evidence_refused", 400, "the box's hardware evidence is refused"),
            ProviderHostNotAttested => ("provider_host_not_attested", 400, "the box does not attest the provider host"),
            ProviderHostNotPinned => ("provider_host_not_pinned", 400, "the provider host is not pinned"),
            BoxNotListed { .. } => ("box_not_listed", 400, "this box is not listed in the program"),
            NonceMismatch => ("nonce_mismatch", 400, "attestation refused"),
            StatementProgramMismatch { .. } => ("statement_program_mismatch", 400, "attestation refused"),
            StatementRunMismatch { .. } => ("statement_run_mismatch", 400, "attestation refused"),
            AttestationExpired { .. } => ("attestation_expired", 400, "attestation refused"),
            ReportDataMismatch => ("report_data_mismatch", 400, "attestation refused"),
            Evidence(_) => ("evidence_invalid", 400, "attestation refused"),
            Sealed(_) => ("sealed_invalid", 400, "the sealed stake does not open for this run"),
            StakeWrongInfo { .. } => ("stake_wrong_info", 400, "the sealed stake does not open for this run"),
            StakeTooLarge { .. } => ("stake_too_large", 413, "the stake is over the program's limits"),
            EntryTooLarge { .. } => ("stake_entry_too_large", 400, "the stake is over the program's limits"),
            EntryNotInProgram { .. } => ("stake_entry_not_in_program", 400, "the stake's entries are not the program's"),
            EntryMissing { .. } => ("stake_entry_missing", 400, "the stake's entries are not the program's"),
            DayLimitsInvalid { .. } => ("stake_day_limits_invalid", 400, "the owner's day limits entry is not 8 bytes"),
            ResultNotForThisKey => ("result_not_for_this_key", 400, "the result is not sealed to this key"),
            Read(_) => ("read_failed", 400, "reading the material failed"),
            RunNotFound(_) => ("run_not_found", 404, "no such run"),
            RunSpent(_) => ("run_spent", 409, "the run id is spent"),
            ProgramSpent(_) => ("program_spent", 409, "the program already ran at this box"),
            RunExpired(_) => ("run_expired", 410, "the run expired"),
            AlreadyStaked { .. } => ("already_staked", 409, "this party has already staked"),
            StakesMissing { .. } => ("stakes_missing", 409, "waiting for both parties' stakes"),
            WrongState { .. } => ("wrong_state", 409, "not possible in the run's state"),
            NotReady(_) => ("not_ready", 409, "the run has not finished"),
            ProviderUnavailable(_) => ("provider_unavailable", 503, "the program's provider is not available at this box"),
            ProviderFailed(f) => ("provider_failed", 502, f.message()),
            GuardBody => ("guard_body", 422, "the skill body cannot be guarded"),
            ProviderHost { .. } => ("provider_host_mismatch", 400, "the program's provider host is not this box's"),
            CoverageExceeded => ("coverage_exceeded", 403, "the skill's owner allows this caller no more of this skill today"),
            Busy(_) | OverBudget { .. } | DayTurnTimedOut => ("busy", 503, "the box is busy; try again later"),
            RateLimited => ("rate_limited", 429, "too many requests; try again later"),
            ExpiresTooFar { .. } => ("expires_too_far", 400, "the program expires later than this box allows"),
            KeyNotAllowed => ("key_not_allowed", 403, "no party of the program may use this box"),
            UploadInProgress { .. } => ("upload_in_progress", 409, "a stake for this role is being uploaded"),
            UploadTimedOut => ("upload_timed_out", 408, "the stake upload took too long"),
            BadRunId => ("bad_run_id", 400, "run ids are 32 lowercase hex digits"),
            HostNotAllowed => ("host_not_allowed", 421, "the Host header names no address this box answers on"),
            OriginNotAllowed => ("origin_not_allowed", 403, "cross-site requests are refused"),
            MediaType { .. } => ("unsupported_media_type", 415, "unsupported media type"),
            UnknownRole(_) => ("unknown_role", 400, "unknown role"),
            BadRequest(_) => ("bad_request", 400, "the request is invalid"),
            BodyTooLarge { .. } => ("body_too_large", 413, "the request body is too large"),
            Remote { status, .. } => ("remote", *status, "the box refused"),
            Transport(_) => ("transport", 500, "the box is unreachable"),
            ResponseTooLarge { .. } => ("box_response_too_large", 502, "the box's answer is too large"),
            StoreTampered => ("store_tampered", 500, "the box's persisted run is refused"),
            RunInterrupted => ("run_interrupted", 500, "the box restarted during the run too often"),
            Storage(_) => ("storage_failed", 500, "the box's storage failed"),
            Internal(_) => ("internal", 500, "internal error"),
        }
    }

    /// Stable machine code for the `{error, message}` envelope.
    pub fn code(&self) -> &'static str {
        self.answer().0
    }

    /// The HTTP status the box answers this error with.
    pub fn http_status(&self) -> u16 {
        self.answer().1
    }

    /// The words the box's HTTP API sends with [`Self::code`] (see [`Self::answer`]).
    pub fn fixed_message(&self) -> &'static str {
        self.answer().2
    }
}

/// Whether `id` has the form of a run id (128 random bits, lowercase hex): checked before an id
/// from anywhere (a URL path, a peer's `call.session`) is used in a URL or a lookup.
pub fn is_run_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub type Result<T> = std::result::Result<T, JcError>;
