//! The program of a call (§8): the caller builds it from what the board says and what it holds;
//! the owner checks it against its own skill before co-signing. Pure: no store, no network.

use skillbox_calls::FailureCode;
use skillbox_guard::GuardSpec;
use skillbox_jc::program::{
    BoxIdentity, CallerInputs, CallerParty, OutputSpec, OwnerInputs, OwnerParty, PROGRAM_VERSION,
    PROMPT_TEMPLATE_V2, Parties, Program, ProviderGrant, ReceiptSpec, SkillRef, SourceLimit,
    body_allowance_in_force, model_context_in_force,
};
use skillbox_jc::seal::bucket;
use skillbox_skill::{Declaration, Limits, ProviderId};

/// The owner's stake limits every program states: room for any SKILL.md body, a model id and an
/// API key. The caller cannot know the owner's sizes, and the owner refuses any other limits
/// (review 27 F9: a caller choosing them read the body's size bucket off the refusals).
pub const BODY_MAX_BYTES: u64 = skillbox_skill::document::MAX_DOCUMENT as u64;
pub const MODEL_MAX_BYTES: u64 = 1024;
pub const KEY_MAX_BYTES: u64 = 16 * 1024;

/// What the caller knows when it builds a program.
#[derive(Debug, Clone)]
pub struct CallerFacts {
    pub call_id: String,
    pub caller_key: String,
    pub result_key: String,
    pub owner_key: String,
    /// The boxes both sides accept (non-empty).
    pub boxes: Vec<BoxIdentity>,
    pub skill: String,
    pub declaration_digest: String,
    pub provider: ProviderId,
    /// The provider host the chosen box reaches (None for `local`).
    pub provider_host: Option<String>,
    pub request_len: u64,
    /// `(name, size)` of each chosen source.
    pub sources: Vec<(String, u64)>,
    pub output_max_bytes: u64,
    /// The owner's advertised ceilings: a bucket never rounds past one.
    pub limits: Limits,
    pub expires_at: u64,
    /// The guard the owner advertised for the skill (or the defaults for its provider).
    pub guard: GuardSpec,
    /// The body allowance and remote model context the owner advertised for the skill, in
    /// tokens; absent (an owner older than review 29's fix), the provider's defaults. The program
    /// always states the values in force: the owner refuses any other, and any left out.
    pub body_max_tokens: Option<u64>,
    pub model_context_tokens: Option<u64>,
}

/// A size as the program states it: its bucket (a power of two), so the owner learns roughly
/// how much the caller stakes, not exactly — but never above the owner's ceiling when the size
/// itself is within it.
fn bucketed(size: u64, ceiling: Option<u64>) -> u64 {
    let b = bucket(size);
    match ceiling {
        Some(c) if size <= c => b.min(c.max(1)),
        _ => b,
    }
}

/// The output guard both sides bind into a program: on, regenerating for the embedded model
/// (a caught attempt looks like an ordinary answer), withholding for a remote one.
pub fn guard_for(provider: &ProviderId) -> GuardSpec {
    GuardSpec::default_for(*provider == ProviderId::Local)
}

/// The key limit a program for `provider` states: none when the provider spends no key.
pub fn key_max_bytes(provider: &ProviderId) -> u64 {
    if provider.needs_key() {
        KEY_MAX_BYTES
    } else {
        0
    }
}

/// Build and validate the program.
pub fn build(f: CallerFacts) -> skillbox_jc::Result<Program> {
    let key_max_bytes = key_max_bytes(&f.provider);
    let guard = f.guard;
    let body_max_tokens = Some(body_allowance_in_force(f.body_max_tokens, &f.provider));
    let model_context_tokens = model_context_in_force(f.model_context_tokens, &f.provider);
    let program = Program {
        version: PROGRAM_VERSION,
        call_id: f.call_id,
        parties: Parties {
            caller: CallerParty {
                node_key: f.caller_key,
                result_key: f.result_key,
            },
            owner: OwnerParty {
                node_key: f.owner_key,
            },
        },
        boxes: f.boxes,
        skill: SkillRef {
            name: f.skill,
            declaration_digest: f.declaration_digest,
        },
        provider: ProviderGrant {
            id: f.provider,
            host: f.provider_host,
        },
        caller_inputs: CallerInputs {
            request_max_bytes: bucketed(f.request_len, f.limits.max_request_bytes),
            sources: f
                .sources
                .into_iter()
                .map(|(name, size)| SourceLimit {
                    name,
                    max_bytes: bucketed(size, f.limits.max_source_bytes),
                })
                .collect(),
        },
        owner_inputs: OwnerInputs {
            body_max_bytes: BODY_MAX_BYTES,
            model_max_bytes: MODEL_MAX_BYTES,
            key_max_bytes,
            // Always stated, never `None` (review 29 R29-1): a box reads `None` with its own
            // build's table of defaults, and a box older than 139eec7 has larger ones there
            // (4,096 / 8,192 self-hosted, 131,072 hosted), so `None` meant more than the owner's
            // values to it: fail open. Stated, the number means the same to every box that reads
            // the field, and a box too old to know it refuses the program (an unknown field).
            // The values are the owner's as its advert carries them, else (an advert of an older
            // owner) this build's defaults; the owner checks they are its own.
            body_max_tokens,
            model_context_tokens,
        },
        output: OutputSpec::to_caller(f.output_max_bytes),
        receipt: ReceiptSpec::for_guard(true),
        prompt_template: PROMPT_TEMPLATE_V2.into(),
        expires_at: f.expires_at,
        guard: Some(guard),
    };
    program.validate()?;
    Ok(program)
}

/// The owner's refusal of a program that leaves the body allowance out (`program_mismatch`):
/// an older caller's node builds such programs for a skill on the provider's defaults.
pub const PROGRAM_STATES_NO_ALLOWANCE: &str = "the program does not state the body allowance: the owner co-signs only a program that states its allowance and (remote) model context (a program from an older node: upgrade the caller's node)";
/// The same for a remote provider's model context left out.
pub const PROGRAM_STATES_NO_CONTEXT: &str = "the program does not state the model context: the owner co-signs only a program that states its allowance and (remote) model context (a program from an older node: upgrade the caller's node)";

/// What the owner knows when it checks a program.
#[derive(Clone)]
pub struct OwnerFacts<'a> {
    /// The call id the payload carried.
    pub call_id: &'a str,
    /// This node's key (hex) and the sending peer's key (hex, from its peer id).
    pub owner_key: &'a str,
    pub sender_key: &'a str,
    /// The skill as declared here, and whether it is offered right now with its digest.
    pub declaration: Option<&'a Declaration>,
    pub offered: bool,
    pub digest: &'a str,
    /// Sizes of what the owner will stake.
    pub body_len: u64,
    pub model_len: u64,
    pub key_len: u64,
    /// The owner's ceilings for this skill (its `limits:` over the node's defaults).
    pub limits: Limits,
    /// Whether this node accepts a box of that identity.
    pub accepts_box: &'a dyn Fn(&BoxIdentity) -> bool,
    /// Whether this node lets a box reach the provider at that host (`None`: in the box).
    pub accepts_provider_host: &'a dyn Fn(&ProviderId, Option<&str>) -> bool,
    pub now_secs: u64,
    /// The longest expiry this owner agrees to.
    pub max_expiry_secs: u64,
    /// The guard this owner binds into the skill's programs.
    pub guard: GuardSpec,
    /// The body allowance and remote model context in force for the skill (the owner's set
    /// values, else its provider's defaults; `None` context for `local`).
    pub body_max_tokens: u64,
    pub model_context_tokens: Option<u64>,
}

/// Check a program against the owner's skill. Every refusal names what did not match, never
/// what the owner holds (no sizes of the body or key go back to the caller).
pub fn check(program: &Program, f: &OwnerFacts<'_>) -> Result<(), (FailureCode, String)> {
    let mismatch = |m: String| Err((FailureCode::ProgramMismatch, m));
    if program.call_id != f.call_id {
        return mismatch("the program's call_id is not the payload's call id".into());
    }
    if program.parties.owner.node_key != f.owner_key {
        return mismatch("the program names another owner key".into());
    }
    if program.parties.caller.node_key != f.sender_key {
        return mismatch("the program's caller key is not the sender's".into());
    }
    let Some(decl) = f.declaration.filter(|_| f.offered) else {
        return Err((
            FailureCode::NotOffered,
            format!("skill {:?} is not offered by this node", program.skill.name),
        ));
    };
    if program.skill.declaration_digest != f.digest {
        return mismatch(format!(
            "skill {:?} changed since it was advertised (declaration digest differs)",
            program.skill.name
        ));
    }
    if decl.provider.as_ref() != Some(&program.provider.id) {
        return mismatch(format!(
            "the program grants provider {}, the skill uses another",
            program.provider.id
        ));
    }
    // The owner's key and every plaintext go where the program says: only a pinned host.
    if !(f.accepts_provider_host)(&program.provider.id, program.provider.host.as_deref()) {
        return mismatch(format!(
            "the program sends provider {} to a host this node does not pin",
            program.provider.id
        ));
    }
    // A caller may not switch the guard off or loosen it: the program carries this owner's.
    if program.guard != Some(f.guard) {
        return mismatch("the program's output guard is not the owner's".into());
    }
    // The body allowance is the owner's, like the guard: a caller choosing it could try one
    // allowance after another and read the body's length in tokens off where runs start to
    // fail `unavailable` (a body over its allowance).
    // The provider is the skill's (checked above), so these are the owner's own values: the
    // ones it set for the skill, else the provider's defaults — never the defaults once it set
    // its own.
    // Both must be stated (review 29 R29-1): a box reads one left out with its own build's
    // table, and a box older than 139eec7 (still accepted by an owner that pins its measurement)
    // has larger defaults there than the owner's — the admission past a stock Ollama's 4,096, the
    // body's length bisectable again (R28-6). Refused by name, so an older caller's node (whose
    // programs leave the defaults out) is told what to do, whatever the body.
    let provider = &program.provider.id;
    let o = &program.owner_inputs;
    if o.body_max_tokens.is_none() {
        return mismatch(PROGRAM_STATES_NO_ALLOWANCE.into());
    }
    if o.model_context_tokens.is_none() && *provider != ProviderId::Local {
        return mismatch(PROGRAM_STATES_NO_CONTEXT.into());
    }
    if o.body_allowance(provider) != f.body_max_tokens {
        return mismatch("the program's body allowance is not the owner's".into());
    }
    // The remote model context too: the box admits a request against it, so a caller choosing
    // it could move the admission's edge to the model's real one and bisect the body's length
    // on which side fails `unavailable` (a refusal after admission).
    if o.model_context(provider) != f.model_context_tokens {
        return mismatch("the program's model context is not the owner's".into());
    }
    // The stake limits are the ones `build` always writes, never the caller's choice: compared
    // with a limit the caller picks, the body's size bucket would decide the answer, and a
    // caller trying 1, 2, 4 ... KiB would read it for free before any run (review 27 F9).
    if o.body_max_bytes != BODY_MAX_BYTES
        || o.model_max_bytes != MODEL_MAX_BYTES
        || o.key_max_bytes != key_max_bytes(provider)
    {
        return mismatch("the program's stake limits are not the owner's".into());
    }
    let declared: Vec<&str> = decl.required_sources.iter().map(String::as_str).collect();
    if let Some(s) = program
        .caller_inputs
        .sources
        .iter()
        .find(|s| !declared.contains(&s.name.as_str()))
    {
        return mismatch(format!(
            "source {:?} is not among the skill's requiredSources",
            s.name
        ));
    }
    let over = |what: &str, asked: u64, ceiling: Option<u64>| match ceiling {
        Some(c) if asked > c => Err((
            FailureCode::OverOwnerLimit,
            format!("{what}: the program asks for {asked} bytes, the owner's limit is {c}"),
        )),
        _ => Ok(()),
    };
    over(
        "request",
        program.caller_inputs.request_max_bytes,
        f.limits.max_request_bytes,
    )?;
    for s in &program.caller_inputs.sources {
        over(
            &format!("source {:?}", s.name),
            s.max_bytes,
            f.limits.max_source_bytes,
        )?;
    }
    over(
        "output",
        program.output.max_bytes,
        f.limits.max_output_bytes,
    )?;
    if let Some(b) = program.boxes.iter().find(|b| !(f.accepts_box)(b)) {
        return mismatch(format!(
            "box {} {} is not one this node accepts",
            b.platform,
            short(&b.measurement)
        ));
    }
    // The limits are fixed (above) and hold anything the owner can stake (a document is at most
    // `BODY_MAX_BYTES`), so this refuses only a stake this node could never have made; its
    // answer never depends on a size a caller can choose to compare with.
    // Nothing to stake (no key for a local provider) fits any limit.
    let fits = |len: u64, max: u64| len == 0 || bucket(len) <= max;
    if !fits(f.body_len, o.body_max_bytes)
        || !fits(f.model_len, o.model_max_bytes)
        || !fits(f.key_len, o.key_max_bytes)
    {
        return mismatch("the owner's stake limits are too small for this skill".into());
    }
    if program.expires_at <= f.now_secs {
        return Err((FailureCode::Expired, "the program has expired".into()));
    }
    if program.expires_at > f.now_secs + f.max_expiry_secs {
        return mismatch(format!(
            "the program expires more than {} s from now",
            f.max_expiry_secs
        ));
    }
    Ok(())
}

fn short(s: &str) -> &str {
    &s[..s.len().min(16)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillbox_jc::program::{default_body_max_tokens, default_model_context_tokens};

    fn decl(provider: &str) -> Declaration {
        let doc = format!(
            "---\nname: taste\ndescription: Music taste from listening history.\nprovider: {provider}\nmodel: smol\nrequiredSources: [songs]\n---\nbody\n"
        );
        skillbox_skill::document::parse(doc.as_bytes(), None)
            .expect("test skill parses")
            .declaration
    }

    fn facts(sources: Vec<(String, u64)>) -> CallerFacts {
        CallerFacts {
            call_id: "c1".into(),
            caller_key: "11".repeat(32),
            result_key: "22".repeat(32),
            owner_key: "33".repeat(32),
            boxes: vec![BoxIdentity {
                platform: "insecure-dev".into(),
                measurement: "ab".repeat(48),
            }],
            skill: "taste".into(),
            declaration_digest: format!("sha256:{}", "cd".repeat(32)),
            provider: "local".parse().expect("provider"),
            provider_host: None,
            request_len: 100,
            sources,
            output_max_bytes: 4096,
            limits: Limits::default(),
            expires_at: 2_000_000_000,
            guard: guard_for(&"local".parse().expect("provider")),
            body_max_tokens: None,
            model_context_tokens: None,
        }
    }

    /// What the owner holds in these tests: the skill as declared here, and the keys and digest
    /// the programs [`facts`] builds name.
    struct Held {
        decl: Declaration,
        owner_key: String,
        sender: String,
        digest: String,
    }

    fn held() -> Held {
        Held {
            decl: decl("local"),
            owner_key: "33".repeat(32),
            sender: "11".repeat(32),
            digest: format!("sha256:{}", "cd".repeat(32)),
        }
    }

    fn any_box(_: &BoxIdentity) -> bool {
        true
    }

    fn any_host(_: &ProviderId, _: Option<&str>) -> bool {
        true
    }

    impl Held {
        /// The owner's facts under which `p` passes: a small skill, the default ceilings, any
        /// box and provider host, before the program expires.
        fn facts(&self, p: &Program) -> OwnerFacts<'_> {
            OwnerFacts {
                call_id: "c1",
                owner_key: &self.owner_key,
                sender_key: &self.sender,
                declaration: Some(&self.decl),
                offered: true,
                digest: &self.digest,
                body_len: 10,
                model_len: 5,
                key_len: 0,
                limits: Limits::default(),
                accepts_box: &any_box,
                accepts_provider_host: &any_host,
                now_secs: p.expires_at - 100,
                max_expiry_secs: 3600,
                guard: guard_for(&p.provider.id),
                body_max_tokens: default_body_max_tokens(&p.provider.id),
                model_context_tokens: default_model_context_tokens(&p.provider.id),
            }
        }
    }

    #[test]
    fn built_program_validates_and_buckets_sizes() {
        let p = build(facts(vec![("songs".into(), 3000)])).expect("builds");
        assert_eq!(p.caller_inputs.sources[0].max_bytes, 4096);
        assert!(p.caller_inputs.request_max_bytes >= 100);
        assert_eq!(p.owner_inputs.key_max_bytes, 0);
    }

    #[test]
    fn owner_refuses_each_mismatch_by_name() {
        let p = build(facts(vec![("songs".into(), 10)])).expect("builds");
        let other = decl("openrouter");
        let no = |_: &BoxIdentity| false;
        let no_host = |_: &ProviderId, _: Option<&str>| false;
        let h = held();
        let base = || h.facts(&p);
        assert_eq!(check(&p, &base()), Ok(()));
        let f = OwnerFacts {
            call_id: "other",
            ..base()
        };
        assert!(check(&p, &f).expect_err("id").1.contains("call_id"));
        let f = OwnerFacts {
            sender_key: "44",
            ..base()
        };
        assert!(check(&p, &f).expect_err("sender").1.contains("caller key"));
        let f = OwnerFacts {
            offered: false,
            ..base()
        };
        assert_eq!(check(&p, &f).expect_err("offer").0, FailureCode::NotOffered);
        let f = OwnerFacts {
            digest: "sha256:other",
            ..base()
        };
        assert!(check(&p, &f).expect_err("digest").1.contains("digest"));
        // A caller cannot switch the guard off, loosen it, or leave it out.
        for guard in [
            None,
            Some(GuardSpec {
                enabled: false,
                ..guard_for(&p.provider.id)
            }),
            Some(GuardSpec {
                threshold_permille: 1000,
                ..guard_for(&p.provider.id)
            }),
        ] {
            let loose = Program { guard, ..p.clone() };
            let err = check(&loose, &base()).expect_err("guard");
            assert_eq!(err.0, FailureCode::ProgramMismatch);
            assert!(err.1.contains("output guard"), "{}", err.1);
        }
        // Nor pick the body allowance (its default stated is the default).
        let mut stated = p.clone();
        let allowance = default_body_max_tokens(&p.provider.id);
        stated.owner_inputs.body_max_tokens = Some(allowance);
        assert_eq!(check(&stated, &base()), Ok(()));
        for tokens in [1, allowance + 1] {
            let mut probe = p.clone();
            probe.owner_inputs.body_max_tokens = Some(tokens);
            let err = check(&probe, &base()).expect_err("allowance");
            assert_eq!(err.0, FailureCode::ProgramMismatch);
            assert!(err.1.contains("body allowance"), "{}", err.1);
        }
        // Nor declare a remote model's context: a larger one would put the box's admission
        // past the model's real context, where a refusal's edge moves with the body.
        let ollama: ProviderId = "ollama".parse().expect("provider");
        let remote = build(CallerFacts {
            provider: ollama.clone(),
            provider_host: Some("http://127.0.0.1:11434/v1".into()),
            guard: guard_for(&ollama),
            ..facts(vec![])
        })
        .expect("builds");
        let remote_held = Held {
            decl: decl("ollama"),
            ..held()
        };
        let remote_base = || remote_held.facts(&remote);
        assert_eq!(check(&remote, &remote_base()), Ok(()));
        let mut stated = remote.clone();
        let context = default_model_context_tokens(&ollama).expect("remote");
        stated.owner_inputs.model_context_tokens = Some(context);
        assert_eq!(check(&stated, &remote_base()), Ok(()));
        for tokens in [default_body_max_tokens(&ollama) + 1, context + 1, 1 << 17] {
            let mut probe = remote.clone();
            probe.owner_inputs.model_context_tokens = Some(tokens);
            assert_eq!(probe.validate().map_err(|e| e.to_string()), Ok(()));
            let err = check(&probe, &remote_base()).expect_err("model context");
            assert_eq!(err.0, FailureCode::ProgramMismatch);
            assert!(err.1.contains("model context"), "{}", err.1);
        }
        let f = OwnerFacts {
            accepts_box: &no,
            ..base()
        };
        assert!(check(&p, &f).expect_err("box").1.contains("box"));
        let f = OwnerFacts {
            accepts_provider_host: &no_host,
            ..base()
        };
        assert!(check(&p, &f).expect_err("host").1.contains("does not pin"));
        let f = OwnerFacts {
            body_len: BODY_MAX_BYTES + 1,
            ..base()
        };
        assert!(check(&p, &f).expect_err("limits").1.contains("limits"));
        let f = OwnerFacts {
            now_secs: p.expires_at,
            ..base()
        };
        assert_eq!(check(&p, &f).expect_err("expired").0, FailureCode::Expired);
        let f = OwnerFacts {
            max_expiry_secs: 10,
            ..base()
        };
        assert!(check(&p, &f).expect_err("too long").1.contains("expires"));
        let f = OwnerFacts {
            declaration: Some(&other),
            ..base()
        };
        assert!(check(&p, &f).expect_err("provider").1.contains("provider"));
        let mut p2 = p.clone();
        p2.caller_inputs.sources[0].name = "diary".into();
        assert!(check(&p2, &base()).expect_err("source").1.contains("diary"));
    }

    /// Review 27 F9 (after issue 30 item 13): the stake limits are the ones `build` writes, never
    /// the caller's: a caller offering 1, 2, 4 ... KiB used to be accepted from the body's size
    /// bucket up and read it for free. Every limit now gets one answer for a 1 KiB body and a
    /// 600 KiB one (and for short and long model ids and keys).
    #[test]
    fn the_owners_stake_sizes_cannot_be_probed_by_the_stake_limits() {
        let openai: ProviderId = "openai".parse().expect("provider");
        let p = build(CallerFacts {
            provider: openai.clone(),
            provider_host: Some("https://api.openai.com/v1".into()),
            guard: guard_for(&openai),
            ..facts(vec![("songs".into(), 10)])
        })
        .expect("builds");
        let h = Held {
            decl: decl("openai"),
            ..held()
        };
        let answer = |body_len: u64, model_len: u64, key_len: u64, probe: &Program| {
            let sizes = OwnerFacts {
                body_len,
                model_len,
                key_len,
                ..h.facts(probe)
            };
            check(probe, &sizes)
        };
        let buckets: Vec<u64> = (10..=20).map(|b| 1u64 << b).collect();
        assert_eq!(buckets.first(), Some(&1024));
        assert_eq!(buckets.last(), Some(&BODY_MAX_BYTES));
        for &max in &buckets {
            let mut probe = p.clone();
            probe.owner_inputs.body_max_bytes = max;
            let small = answer(1024, 20, 100, &probe);
            let large = answer(600 * 1024, 20, 100, &probe);
            assert_eq!(small, large, "body limit {max}");
            if max == BODY_MAX_BYTES {
                assert_eq!(small, Ok(()), "what build writes");
            } else {
                assert_eq!(
                    small.map_err(|e| e.0),
                    Err(FailureCode::ProgramMismatch),
                    "{max}"
                );
            }
        }
        for max in [1, 64, 128, 256, 512, 2048, 1 << 20] {
            let mut probe = p.clone();
            probe.owner_inputs.model_max_bytes = max;
            let short = answer(1024, 3, 100, &probe);
            assert_eq!(short, answer(1024, 900, 100, &probe), "model limit {max}");
            assert_eq!(short.map_err(|e| e.0), Err(FailureCode::ProgramMismatch));
            let mut probe = p.clone();
            probe.owner_inputs.key_max_bytes = max;
            let short = answer(1024, 20, 40, &probe);
            assert_eq!(short, answer(1024, 20, 2000, &probe), "key limit {max}");
            assert_eq!(short.map_err(|e| e.0), Err(FailureCode::ProgramMismatch));
        }
        // The refusal names the limits, never a size.
        let mut probe = p.clone();
        probe.owner_inputs.body_max_bytes = 8192;
        let (_, why) = answer(5000, 20, 100, &probe).expect_err("refused");
        assert_eq!(why, "the program's stake limits are not the owner's");
        // The program a caller builds has room for any skill.
        assert_eq!(
            answer(BODY_MAX_BYTES - 100, MODEL_MAX_BYTES, KEY_MAX_BYTES, &p),
            Ok(())
        );
        // A provider without a key: a key limit is refused too (nothing to stake).
        let local = build(facts(vec![("songs".into(), 10)])).expect("builds");
        let mut probe = local.clone();
        probe.owner_inputs.key_max_bytes = KEY_MAX_BYTES;
        let err = check(&probe, &held().facts(&probe)).expect_err("key limit for local");
        assert_eq!(err.0, FailureCode::ProgramMismatch);
    }

    /// Issue 12: the owner co-signs only what its ceilings allow.
    #[test]
    fn owner_refuses_a_program_above_its_ceilings() {
        let p = build(facts(vec![("songs".into(), 3000)])).expect("builds");
        let h = held();
        let with = |limits: Limits| OwnerFacts {
            limits,
            ..h.facts(&p)
        };
        let roomy = Limits {
            max_request_bytes: Some(1 << 20),
            max_source_bytes: Some(1 << 20),
            max_output_bytes: Some(1 << 20),
            ..Limits::default()
        };
        assert_eq!(check(&p, &with(roomy)), Ok(()));
        for tight in [
            Limits {
                max_request_bytes: Some(16),
                ..roomy
            },
            Limits {
                max_source_bytes: Some(1000),
                ..roomy
            },
            Limits {
                max_output_bytes: Some(100),
                ..roomy
            },
        ] {
            let (code, msg) = check(&p, &with(tight)).expect_err("over");
            assert_eq!(code, FailureCode::OverOwnerLimit, "{msg}");
        }
    }

    #[test]
    fn buckets_never_round_past_a_ceiling_the_size_is_within() {
        let mut f = facts(vec![("songs".into(), 4500)]);
        f.request_len = 4500;
        f.limits = Limits {
            max_request_bytes: Some(5000),
            max_source_bytes: Some(5000),
            ..Limits::default()
        };
        let p = build(f).expect("builds");
        assert_eq!(p.caller_inputs.request_max_bytes, 5000);
        assert_eq!(p.caller_inputs.sources[0].max_bytes, 5000);
        assert_eq!(bucketed(4500, None), 8192);
        assert_eq!(
            bucketed(6000, Some(5000)),
            8192,
            "over the ceiling: the owner refuses"
        );
    }

    /// The owner's set allowance and context (`skill set`) are the only ones it co-signs: the
    /// program `build` makes from the advert passes, and the defaults, one of the pair, or any
    /// step from either are `program_mismatch` by name.
    #[test]
    fn the_owner_refuses_every_allowance_and_context_but_its_set_ones() {
        let ollama: ProviderId = "ollama".parse().expect("provider");
        let (body, context) = (16_384, 32_768);
        let advertised = |b: Option<u64>, c: Option<u64>| {
            build(CallerFacts {
                provider: ollama.clone(),
                provider_host: Some("http://127.0.0.1:11434/v1".into()),
                guard: guard_for(&ollama),
                body_max_tokens: b,
                model_context_tokens: c,
                ..facts(vec![])
            })
            .expect("builds")
        };
        let p = advertised(Some(body), Some(context));
        assert_eq!(p.owner_inputs.body_max_tokens, Some(body));
        assert_eq!(p.owner_inputs.model_context_tokens, Some(context));
        let h = Held {
            decl: decl("ollama"),
            ..held()
        };
        let owners = |p: &Program| OwnerFacts {
            body_max_tokens: body,
            model_context_tokens: Some(context),
            ..h.facts(p)
        };
        assert_eq!(check(&p, &owners(&p)), Ok(()));
        let refused = [
            // An advert without them (an older owner's): `build` states the defaults.
            (None, None),
            (
                Some(skillbox_jc::program::SELF_HOSTED_BODY_MAX_TOKENS),
                Some(skillbox_jc::program::SELF_HOSTED_MODEL_CONTEXT_TOKENS),
            ),
            // (16,384 with the default 4,096 context is no valid program: `build` refuses it.)
            (None, Some(context)),
            (Some(body - 1), Some(context)),
            (Some(body + 1), Some(context)),
            (Some(body), Some(context - 1)),
            (Some(body), Some(context + 1)),
        ];
        for (b, c) in refused {
            let probe = advertised(b, c);
            let err = check(&probe, &owners(&probe)).expect_err("not the owner's");
            assert_eq!(err.0, FailureCode::ProgramMismatch, "{b:?} {c:?}");
            assert!(
                err.1.contains("body allowance") || err.1.contains("model context"),
                "{}",
                err.1
            );
        }
        // Left out of the program (a caller speaking the protocol itself, or an older node):
        // refused too, whatever the owner set.
        for (b, c) in [(None, None), (Some(body), None), (None, Some(context))] {
            let mut probe = p.clone();
            probe.owner_inputs.body_max_tokens = b;
            probe.owner_inputs.model_context_tokens = c;
            let err = check(&probe, &owners(&probe)).expect_err("left out");
            assert_eq!(err.0, FailureCode::ProgramMismatch, "{b:?} {c:?}");
        }
    }

    /// Every provider with a host its box reaches (none for `local`).
    fn every_provider() -> Vec<(ProviderId, Option<String>)> {
        [
            "ollama",
            "openai-compatible:lab",
            "openrouter",
            "openai",
            "anthropic",
            "local",
        ]
        .into_iter()
        .map(|p| {
            let id: ProviderId = p.parse().expect("provider");
            let host = (id != ProviderId::Local).then(|| "http://127.0.0.1:11434/v1".into());
            (id, host)
        })
        .collect()
    }

    /// Review 29 R29-1: `build` states the body allowance and (remote) model context in force,
    /// never `None`: from an advert without them (the owner's values are the defaults, or an
    /// older owner's advert) the provider's defaults, stated; from one with them, those.
    #[test]
    fn build_states_the_allowance_and_context_in_force() {
        let expected = [
            ("ollama", 1024, Some(4096)),
            ("openai-compatible:lab", 1024, Some(4096)),
            ("openrouter", 16_384, Some(32_768)),
            ("openai", 49_152, Some(128_000)),
            ("anthropic", 49_152, Some(128_000)),
            ("local", 1024, None),
        ];
        for ((provider, host), (name, body, context)) in every_provider().into_iter().zip(expected)
        {
            assert_eq!(provider.to_string(), name);
            let of = |b: Option<u64>, c: Option<u64>| {
                build(CallerFacts {
                    provider: provider.clone(),
                    provider_host: host.clone(),
                    guard: guard_for(&provider),
                    body_max_tokens: b,
                    model_context_tokens: c,
                    ..facts(vec![])
                })
                .expect("builds")
                .owner_inputs
            };
            let stated = of(None, None);
            assert_eq!(
                (stated.body_max_tokens, stated.model_context_tokens),
                (Some(body), context),
                "{provider}"
            );
            // The owner's own values, as its advert carries them, are stated as they are.
            let (b, c) = (900, context.map(|_| 65_536));
            let own = of(Some(b), c);
            assert_eq!(
                (own.body_max_tokens, own.model_context_tokens),
                (Some(b), c),
                "{provider}"
            );
        }
    }

    /// Review 29 R29-1, the attack: a program that leaves the allowance or context out, as
    /// `build` wrote one whenever the owner's values were the provider's defaults. The box reads
    /// `None` with its own build's table, and a box from before 139eec7 (still accepted by an
    /// owner pinning its measurement) reads it as 4,096 / 8,192 self-hosted and 131,072 hosted:
    /// its admission then lets a request run past a stock Ollama's 4,096, which truncates
    /// silently, and the body's length is bisectable again (R28-6). The owner's values are the
    /// defaults here, so comparing values in force (the check before) let it through; it is now
    /// refused by name, and the same program stating the values passes.
    #[test]
    fn a_program_leaving_out_the_default_allowance_or_context_is_refused() {
        for (provider, host) in every_provider() {
            let stated = build(CallerFacts {
                provider: provider.clone(),
                provider_host: host,
                guard: guard_for(&provider),
                ..facts(vec![])
            })
            .expect("builds");
            let h = Held {
                decl: decl(&provider.to_string()),
                ..held()
            };
            // The owner's values in force are the provider's defaults.
            let owners = h.facts(&stated);
            assert_eq!(owners.body_max_tokens, default_body_max_tokens(&provider));
            assert_eq!(
                owners.model_context_tokens,
                default_model_context_tokens(&provider)
            );
            assert_eq!(check(&stated, &owners), Ok(()), "{provider}");
            let mut old_way = stated.clone();
            old_way.owner_inputs.body_max_tokens = None;
            old_way.owner_inputs.model_context_tokens = None;
            // A valid program: a box opens it, with its own table.
            assert_eq!(old_way.validate().map_err(|e| e.to_string()), Ok(()));
            let got = check(&old_way, &h.facts(&old_way));
            println!("{provider}, built the old way: {got:?}");
            assert_eq!(
                got,
                Err((
                    FailureCode::ProgramMismatch,
                    PROGRAM_STATES_NO_ALLOWANCE.to_owned()
                )),
                "{provider}: a program leaving the defaults out was co-signed"
            );
            if provider != ProviderId::Local {
                let mut no_context = stated.clone();
                no_context.owner_inputs.model_context_tokens = None;
                assert_eq!(
                    check(&no_context, &h.facts(&no_context)),
                    Err((
                        FailureCode::ProgramMismatch,
                        PROGRAM_STATES_NO_CONTEXT.to_owned()
                    )),
                    "{provider}: a program leaving the context out was co-signed"
                );
            }
        }
    }
}
