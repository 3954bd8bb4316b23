//! `skillbox attestation verify`: a person checks hardware evidence offline, with the same
//! verifiers a node uses (`skillbox-attest`). No node, no network; `--at` sets the time.
//!
//! Exit codes: 0 verified, 1 refused or unreadable input, 2 usage (a flag that does not fit the
//! platform). No pins are given here, so measurements are shown, not compared — the output
//! says so. For SEV-SNP and TDX it prints the TCB floor the evidence meets, as a pin's policy
//! names it (`min_tcb = {…}`, `min_tcb_eval_data_number = N`): a hardware pin must name one.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;
use skillbox_attest::{Platform, Refusal, Verified, nitro, nvidia, snp, tdx};
use skillbox_node::store::rfc3339;

#[derive(clap::Subcommand, Debug)]
pub enum AttestationCommand {
    /// Verify SEV-SNP, TDX, Nitro or NVIDIA evidence: signature, chain to the pinned vendor
    /// root, validity at `--at`, debug/VMPL/TCB, and the report data or nonce you expect.
    Verify(VerifyArgs),
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// sev-snp | tdx | nitro | nvidia
    #[arg(long, value_parser = parse_platform)]
    pub platform: Platform,
    /// The evidence: SNP report (raw or hex), TDX quote (raw or hex), Nitro COSE document (raw
    /// or base64), NVIDIA SPDM transcript (hex).
    #[arg(long)]
    pub evidence: PathBuf,
    /// Certificates, PEM or DER, any number of files: SNP the VCEK/VLEK and ASK/ARK, NVIDIA the
    /// device chain (leaf first).
    #[arg(long)]
    pub chain: Vec<PathBuf>,
    /// TDX: the collateral JSON (TCB info, QE identity, CRLs, their chains).
    #[arg(long)]
    pub collateral: Option<PathBuf>,
    /// The time to verify at, Unix milliseconds (default: now). Nitro chains are checked at the
    /// document's own timestamp and the document must be recent at this time.
    #[arg(long)]
    pub at: Option<u64>,
    /// The report data you expect, hex: SNP/TDX REPORT_DATA (64 bytes), Nitro user_data.
    #[arg(long, conflicts_with = "nonce")]
    pub report_data: Option<String>,
    /// The nonce you expect, hex: Nitro nonce, NVIDIA requester nonce (32 bytes).
    #[arg(long)]
    pub nonce: Option<String>,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

fn parse_platform(s: &str) -> Result<Platform, String> {
    s.parse::<Platform>()
        .map_err(|_| "expected one of: sev-snp, tdx, nitro, nvidia".to_owned())
}

pub fn run(_global: &crate::Global, cmd: AttestationCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        AttestationCommand::Verify(args) => verify(args),
    }
}

/// A flag that does not fit the platform: a usage error (exit 2), said plainly.
struct Usage(String);

fn usage(msg: impl Into<String>) -> Result<Outcome, Usage> {
    Err(Usage(msg.into()))
}

/// What one run found.
struct Outcome {
    result: Result<Verified, Refusal>,
    notes: Vec<String>,
    /// SEV-SNP, TDX: the TCB floor the verified evidence meets, as a pin's policy line.
    floor: Option<String>,
}

/// `min_tcb = { … }`: the SEV-SNP floor as a pin's policy names it.
fn snp_floor_line(min: &snp::MinTcb) -> String {
    let fmc = min.fmc.map(|f| format!(", fmc = {f}")).unwrap_or_default();
    format!(
        "min_tcb = {{ bootloader = {}, tee = {}, snp = {}, microcode = {}{fmc} }}",
        min.bootloader, min.tee, min.snp, min.microcode
    )
}

/// An optional hex flag of exactly `N` bytes for `platform` (absent stays `None`).
fn hex_arg<const N: usize>(
    flag: &str,
    value: &Option<String>,
    platform: Platform,
) -> Result<Option<[u8; N]>, Usage> {
    hex_vec(flag, value)?
        .map(|bytes| {
            bytes.try_into().map_err(|_| {
                Usage(format!(
                    "{flag} must be {N} bytes ({} hex digits) for {platform}",
                    2 * N
                ))
            })
        })
        .transpose()
}

/// An optional hex flag of any length (absent stays `None`).
fn hex_vec(flag: &str, value: &Option<String>) -> Result<Option<Vec<u8>>, Usage> {
    value
        .as_deref()
        .map(|v| hex::decode(v.trim()).map_err(|_| Usage(format!("{flag} is not hex digits"))))
        .transpose()
}

fn read(path: &PathBuf) -> anyhow::Result<Vec<u8>> {
    let meta = std::fs::metadata(path).with_context(|| format!("read {}", path.display()))?;
    if meta.len() > skillbox_attest::input::MAX_INPUT as u64 {
        anyhow::bail!(
            "{} is larger than {} bytes: not evidence",
            path.display(),
            skillbox_attest::input::MAX_INPUT
        );
    }
    std::fs::read(path).with_context(|| format!("read {}", path.display()))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let at = args.at.unwrap_or_else(now_ms);
    let evidence = read(&args.evidence)?;
    let chain: Vec<Vec<u8>> = args.chain.iter().map(read).collect::<Result<_, _>>()?;
    let collateral = args.collateral.as_ref().map(read).transpose()?;
    let outcome = match check(&args, &evidence, &chain, collateral.as_deref(), at) {
        Ok(o) => o,
        Err(Usage(msg)) => {
            eprintln!("error: {msg}");
            return Ok(ExitCode::from(2));
        }
    };
    if args.json {
        print_json(&args, at, &outcome)?;
    } else {
        print_text(&args, at, &outcome);
    }
    Ok(match outcome.result {
        Ok(_) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(1),
    })
}

fn check(
    args: &VerifyArgs,
    evidence: &[u8],
    chain: &[Vec<u8>],
    collateral: Option<&[u8]>,
    at: u64,
) -> Result<Outcome, Usage> {
    let p = args.platform;
    let chain_refs: Vec<&[u8]> = chain.iter().map(Vec::as_slice).collect();
    let mut notes = Vec::new();
    let mut floor = None;
    if collateral.is_some() && p != Platform::Tdx {
        return usage(format!("--collateral is for tdx, not {p}"));
    }
    let result = match p {
        Platform::SevSnp => {
            unused(p, &args.nonce, "nonce", "--report-data")?;
            chain_needed(p, chain, "the VCEK or VLEK (and the ASK/ARK)")?;
            let expected = snp::Expected {
                report_data: hex_arg::<64>("--report-data", &args.report_data, p)?,
                host_data: None,
            };
            snp::Evidence::from_files(evidence, &chain_refs).and_then(|ev| {
                let verified = snp::verify(&ev, &expected, &snp::Policy::unpinned(), at)?;
                floor = ev.tcb_floor().ok().map(|min| snp_floor_line(&min));
                Ok(verified)
            })
        }
        Platform::Tdx => {
            unused(p, &args.nonce, "nonce", "--report-data")?;
            if !chain.is_empty() {
                return usage(
                    "tdx takes its certificates from the quote and --collateral, not --chain",
                );
            }
            let Some(collateral) = collateral else {
                return usage("tdx needs --collateral (the collateral JSON)");
            };
            let expected = tdx::Expected {
                report_data: hex_arg::<64>("--report-data", &args.report_data, p)?,
                mr_config_id: None,
            };
            let verified = tdx::Evidence::from_files(evidence, collateral)
                .and_then(|ev| tdx::verify(&ev, &expected, &tdx::Policy::unpinned(), at));
            // The evaluation data number the verifier compared (the lower of TCB info's and QE
            // identity's), from collateral whose signatures verified.
            floor = verified
                .as_ref()
                .ok()
                .and_then(|v| v.attribute("tcb_eval_data_number"))
                .map(|n| format!("min_tcb_eval_data_number = {n}"));
            verified
        }
        Platform::Nitro => {
            if !chain.is_empty() {
                return usage("nitro carries its chain in the document, not --chain");
            }
            let expected = nitro::Expected {
                user_data: hex_vec("--report-data", &args.report_data)?,
                nonce: hex_vec("--nonce", &args.nonce)?,
                public_key: None,
            };
            nitro::Evidence::from_file(evidence).and_then(|(ev, trailing)| {
                if trailing > 0 {
                    notes.push(format!(
                        "{trailing} bytes after the COSE document in the file were ignored (not signed)"
                    ));
                }
                nitro::verify(&ev, &expected, &nitro::Policy::unpinned(), at)
            })
        }
        Platform::Nvidia => {
            unused(p, &args.report_data, "report data", "--nonce")?;
            chain_needed(p, chain, "the device certificate chain")?;
            let expected = nvidia::Expected {
                nonce: hex_arg::<32>("--nonce", &args.nonce, p)?,
            };
            nvidia::Evidence::from_files(evidence, &chain_refs)
                .and_then(|ev| nvidia::verify(&ev, &expected, &nvidia::Policy::unpinned(), at))
        }
    };
    Ok(Outcome {
        result,
        notes,
        floor,
    })
}

/// A flag whose value the platform's evidence has no place for is refused, naming the flag it
/// takes instead (`sev-snp has no nonce: use --report-data`).
fn unused(p: Platform, given: &Option<String>, what: &str, instead: &str) -> Result<(), Usage> {
    match given {
        Some(_) => Err(Usage(format!("{p} has no {what}: use {instead}"))),
        None => Ok(()),
    }
}

/// A platform whose certificates come from files (SEV-SNP, NVIDIA) needs `--chain`; `what`
/// names the certificates.
fn chain_needed(p: Platform, chain: &[Vec<u8>], what: &str) -> Result<(), Usage> {
    if chain.is_empty() {
        Err(Usage(format!("{p} needs --chain with {what}")))
    } else {
        Ok(())
    }
}

fn platform_title(p: Platform) -> &'static str {
    match p {
        Platform::SevSnp => "AMD SEV-SNP",
        Platform::Tdx => "Intel TDX",
        Platform::Nitro => "AWS Nitro Enclaves",
        Platform::Nvidia => "NVIDIA Hopper GPU (SPDM 1.1)",
    }
}

const UNPINNED: &str = "measurements were NOT compared against expected values (this command pins none): \
compare them with the values you trust; a node compares them with its config's pins";

fn print_text(args: &VerifyArgs, at: u64, o: &Outcome) {
    let p = args.platform;
    match &o.result {
        Ok(v) => {
            say!(
                "verified: {} ({}) at {} ({})",
                p,
                platform_title(p),
                at,
                rfc3339(at)
            );
            say!("  measurement      {}", v.measurement);
            if v.measurements.len() > 1
                || v.measurements.first().map(|m| m.name) != Some("measurement")
            {
                for m in &v.measurements {
                    say!("    {:<15}{}", m.name, m.value);
                }
            }
            match &v.report_data {
                Some(rd) => say!(
                    "  report data      {} ({})",
                    rd,
                    if v.report_data_checked {
                        "matches --report-data"
                    } else {
                        "not compared: no --report-data"
                    }
                ),
                None => say!("  report data      (none in this evidence)"),
            }
            if let Some(n) = &v.nonce {
                say!(
                    "  nonce            {} ({})",
                    n,
                    if v.nonce_checked {
                        "matches --nonce"
                    } else {
                        "not compared: no --nonce"
                    }
                );
            }
            say!("  attributes");
            for a in &v.attributes {
                say!("    {:<22}{}", a.name, a.value);
            }
            say!(
                "  tcb              {}",
                v.tcb_status
                    .as_deref()
                    .unwrap_or("(not part of this platform's evidence)")
            );
            if let Some(floor) = &o.floor {
                say!(
                    "  tcb floor        {floor} (a pin's policy names it; compare it with the vendor's current TCB)"
                );
            }
            say!(
                "  chip/instance    {}",
                v.instance_id
                    .as_deref()
                    .unwrap_or("(none: masked or absent)")
            );
            say!(
                "  valid            {} .. {} (every certificate{} that vouched)",
                rfc3339(v.valid_from_ms),
                rfc3339(v.valid_until_ms),
                if p == Platform::Tdx {
                    " and the collateral"
                } else {
                    ""
                }
            );
            if p == Platform::Nitro {
                say!(
                    "  note             the chain is checked at the document's timestamp; the document must be recent at --at"
                );
            }
            for n in &o.notes {
                say!("  note             {n}");
            }
            if !v.measurements_pinned {
                say!("  note             {UNPINNED}");
            }
        }
        Err(r) => {
            say!(
                "refused: {} ({}) at {} ({}): {} — {}",
                p,
                platform_title(p),
                at,
                rfc3339(at),
                r.code(),
                r
            );
            for n in &o.notes {
                say!("  note             {n}");
            }
        }
    }
}

fn print_json(args: &VerifyArgs, at: u64, o: &Outcome) -> anyhow::Result<()> {
    let value = match &o.result {
        Ok(v) => json!({
            "verdict": "verified",
            "platform": args.platform.as_str(),
            "at_ms": at,
            "verified": v,
            "notes": o.notes,
            "pinned": v.measurements_pinned,
            "tcb_floor": o.floor,
        }),
        Err(r) => json!({
            "verdict": "refused",
            "platform": args.platform.as_str(),
            "at_ms": at,
            "code": r.code(),
            "message": r.to_string(),
            "notes": o.notes,
        }),
    };
    say!("{}", skillbox_node::terminal_json::to_string(&value)?);
    Ok(())
}
