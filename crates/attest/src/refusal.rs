//! Why evidence was refused: a closed set of reasons, each with a stable code and a fixed
//! message. Nothing from the evidence travels in a refusal (a hostile box chooses those bytes):
//! the `&'static str` details are ours, naming the field or step that failed.

/// A refusal. `code()` is stable (other nodes and receipts may carry it); the `Display` text is
/// fixed per variant and detail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The input does not parse as the evidence it claims to be.
    #[error("malformed evidence: {0}")]
    Malformed(&'static str),
    /// Well-formed, but a version or algorithm this verifier does not handle.
    #[error("unsupported evidence: {0}")]
    Unsupported(&'static str),
    /// A field is larger than its limit.
    #[error("a field is larger than its limit: {0}")]
    TooLarge(&'static str),
    /// The evidence's own signature does not verify with its endorsement key.
    #[error("the signature does not verify: {0}")]
    BadSignature(&'static str),
    /// A certificate in the chain is not signed by its issuer, or the chain cannot be built.
    #[error("the certificate chain does not verify: {0}")]
    BadChain(&'static str),
    /// The chain ends at a root that is not one of the pinned vendor roots.
    #[error("the chain does not end at a pinned vendor root")]
    ForeignRoot,
    /// A certificate's validity ended before `now`.
    #[error("a certificate in the chain has expired")]
    CertificateExpired,
    /// A certificate's validity starts after `now`.
    #[error("a certificate in the chain is not valid yet")]
    CertificateNotYetValid,
    /// A certificate is listed in the vendor's revocation list.
    #[error("a certificate in the chain is revoked")]
    CertificateRevoked,
    /// The supplied collateral (TCB info, QE identity, CRLs) is outside its validity at `now`.
    #[error("the collateral has expired or is not valid yet")]
    CollateralExpired,
    /// The collateral does not verify or does not belong to this evidence.
    #[error("the collateral does not verify: {0}")]
    CollateralInvalid(&'static str),
    /// The evidence is older than the policy's freshness bound.
    #[error("the evidence is older than the freshness bound")]
    Stale,
    /// The evidence is dated after `now` (beyond the allowed clock skew).
    #[error("the evidence is dated in the future")]
    FromFuture,
    /// The guest/enclave/TD runs with debugging allowed: its memory is readable by the host.
    #[error("debugging is enabled: {0}")]
    DebugEnabled(&'static str),
    /// SEV-SNP: the report was not produced at VMPL 0 (a lower-privileged layer asked for it).
    #[error("the report was not produced at VMPL 0")]
    VmplNotZero,
    /// SEV-SNP: the guest policy allows a migration agent (which can read guest memory).
    #[error("the guest policy allows a migration agent")]
    MigrationAgentAllowed,
    /// Attributes or flags the policy refuses.
    #[error("attributes not allowed: {0}")]
    AttributesNotAllowed(&'static str),
    /// SEV-SNP: the VCEK's hwID is not the report's CHIP_ID.
    #[error("the VCEK hwID does not match the report's CHIP_ID")]
    ChipIdMismatch,
    /// SEV-SNP: the endorsement key's TCB extensions differ from the report's reported TCB.
    #[error("the endorsement key's TCB differs from the reported TCB")]
    TcbMismatch,
    /// The TCB is below the policy's minimum.
    #[error("the TCB is below the policy minimum")]
    TcbTooLow,
    /// The platform's TCB status is not in the policy's allow-list.
    #[error("TCB status not allowed: {0}")]
    TcbNotAllowed(&'static str),
    /// The report data / user data is not what the verifier expected.
    #[error("the report data is not the expected value")]
    ReportDataMismatch,
    /// SEV-SNP: HOST_DATA is not the expected value.
    #[error("HOST_DATA is not the expected value")]
    HostDataMismatch,
    /// TDX: MRCONFIGID is not the expected value.
    #[error("MRCONFIGID is not the expected value")]
    ConfigIdMismatch,
    /// The nonce is not the expected value.
    #[error("the nonce is not the expected value")]
    NonceMismatch,
    /// Nitro: the public key is not the expected value.
    #[error("the public key is not the expected value")]
    PublicKeyMismatch,
    /// A measurement is not among the pinned values.
    #[error("measurement not allowed: {0}")]
    MeasurementNotAllowed(&'static str),
    /// The chip / instance / device id is not in the policy's allow-list.
    #[error("the chip or instance id is not in the allow-list")]
    InstanceNotAllowed,
    /// The vendor product (e.g. the SNP processor family) is not allowed by policy.
    #[error("the product is not allowed by policy")]
    ProductNotAllowed,
}

impl Refusal {
    /// The stable code: lowercase snake case, never changes meaning.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Malformed(_) => "malformed",
            Refusal::Unsupported(_) => "unsupported",
            Refusal::TooLarge(_) => "too_large",
            Refusal::BadSignature(_) => "bad_signature",
            Refusal::BadChain(_) => "bad_chain",
            Refusal::ForeignRoot => "foreign_root",
            Refusal::CertificateExpired => "certificate_expired",
            Refusal::CertificateNotYetValid => "certificate_not_yet_valid",
            Refusal::CertificateRevoked => "certificate_revoked",
            Refusal::CollateralExpired => "collateral_expired",
            Refusal::CollateralInvalid(_) => "collateral_invalid",
            Refusal::Stale => "evidence_stale",
            Refusal::FromFuture => "evidence_from_future",
            Refusal::DebugEnabled(_) => "debug_enabled",
            Refusal::VmplNotZero => "vmpl_not_zero",
            Refusal::MigrationAgentAllowed => "migration_agent_allowed",
            Refusal::AttributesNotAllowed(_) => "attributes_not_allowed",
            Refusal::ChipIdMismatch => "chip_id_mismatch",
            Refusal::TcbMismatch => "tcb_mismatch",
            Refusal::TcbTooLow => "tcb_too_low",
            Refusal::TcbNotAllowed(_) => "tcb_not_allowed",
            Refusal::ReportDataMismatch => "report_data_mismatch",
            Refusal::HostDataMismatch => "host_data_mismatch",
            Refusal::ConfigIdMismatch => "config_id_mismatch",
            Refusal::NonceMismatch => "nonce_mismatch",
            Refusal::PublicKeyMismatch => "public_key_mismatch",
            Refusal::MeasurementNotAllowed(_) => "measurement_not_allowed",
            Refusal::InstanceNotAllowed => "instance_not_allowed",
            Refusal::ProductNotAllowed => "product_not_allowed",
        }
    }

    /// Every code, for documentation and for tests that check codes stay distinct.
    pub const CODES: &'static [&'static str] = &[
        "malformed",
        "unsupported",
        "too_large",
        "bad_signature",
        "bad_chain",
        "foreign_root",
        "certificate_expired",
        "certificate_not_yet_valid",
        "certificate_revoked",
        "collateral_expired",
        "collateral_invalid",
        "evidence_stale",
        "evidence_from_future",
        "debug_enabled",
        "vmpl_not_zero",
        "migration_agent_allowed",
        "attributes_not_allowed",
        "chip_id_mismatch",
        "tcb_mismatch",
        "tcb_too_low",
        "tcb_not_allowed",
        "report_data_mismatch",
        "host_data_mismatch",
        "config_id_mismatch",
        "nonce_mismatch",
        "public_key_mismatch",
        "measurement_not_allowed",
        "instance_not_allowed",
        "product_not_allowed",
    ];
}
