//! The `skill` intent over a board of 32 real skills (descriptions from the SKILL.md corpus in
//! `crates/skill/tests/data`) and 32 phrased requests: prints the hit rate, which must be ≥ 90%.

use std::path::Path;

use skillbox_calls::intent::{Candidate, NoPick, pick};

/// (corpus folder, a request a person would phrase for it)
const CASES: &[(&str, &str)] = &[
    (
        "sql-code-review",
        "check my SQL queries for injection risks and maintainability problems",
    ),
    ("create-readme", "write a README file for this project"),
    (
        "refactor",
        "clean up this function without changing its behavior, extract smaller functions and rename variables",
    ),
    (
        "commit-message-storyteller",
        "write a commit message for my staged changes that explains why",
    ),
    (
        "centos-linux-triage",
        "firewalld on my CentOS server is blocking traffic and SELinux denies access",
    ),
    (
        "azure-pricing",
        "how much would this cost on Azure at retail prices",
    ),
    (
        "convert-excel-to-md",
        "turn this xlsx workbook into markdown so I can summarize it",
    ),
    (
        "adobe-illustrator-scripting",
        "write an ExtendScript to export every artboard in Illustrator",
    ),
    (
        "performance-review-writer",
        "draft my self-assessment for this year's performance review",
    ),
    (
        "technical-job-search",
        "tailor my resume to this software engineer job description",
    ),
    (
        "sponsor-finder",
        "which dependencies of my GitHub repository can I sponsor",
    ),
    (
        "playwright-automation-fill-in-form",
        "automatically fill in the signup form with Playwright",
    ),
    (
        "screen-recording",
        "record an animated GIF demo of my app for the pull request",
    ),
    (
        "nuget-manager",
        "update the NuGet package versions in my .NET solution",
    ),
    (
        "aws-cost-optimize",
        "our AWS bill is too high, find resources to optimize costs",
    ),
    (
        "qdrant-version-upgrade",
        "upgrade Qdrant to a newer version without downtime",
    ),
    (
        "datanalysis-credit-risk",
        "clean raw loan data and screen variables for a credit risk model",
    ),
    (
        "salesforce-flow-design",
        "which Salesforce flow type fits this automation and how to handle faults",
    ),
    (
        "csharp-nunit",
        "write data-driven NUnit unit tests for my C# class",
    ),
    (
        "containerize-aspnetcore",
        "create a Dockerfile to containerize my ASP.NET Core app",
    ),
    (
        "ad-campaign-analyzer",
        "here is our campaign performance data, what should we cut, scale or test",
    ),
    (
        "bug-reproduction-brief",
        "this intermittent bug only shows up in production, get me a minimal reproduction first",
    ),
    ("create-llms", "generate an llms.txt for my repository"),
    (
        "power-bi-model-design-review",
        "review the relationships in my Power BI data model",
    ),
    (
        "bigquery-pipeline-audit",
        "audit our BigQuery pipeline for cost safety and idempotency",
    ),
    (
        "azure-resource-visualizer",
        "draw a Mermaid diagram of the resources in my Azure resource group",
    ),
    (
        "breakdown-epic-pm",
        "write a product requirements document for this epic",
    ),
    (
        "documentation-writer",
        "write Diátaxis style software documentation: a tutorial and a how-to guide",
    ),
    (
        "ui-screenshots",
        "capture full-page screenshots of my web app in different states",
    ),
    (
        "cloud-design-patterns",
        "which cloud design pattern should my distributed system use for reliability",
    ),
    (
        "competitor-ad-intelligence",
        "tear down a competitor's paid ads and reverse-engineer their strategy",
    ),
    ("csharp-docs", "add XML doc comments to my C# types"),
];

fn board() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../skill/tests/data/skills-corpus/awesome-copilot");
    CASES
        .iter()
        .map(|(folder, _)| {
            let bytes = std::fs::read(root.join(folder).join("SKILL.md")).expect("corpus skill");
            let parsed =
                skillbox_skill::document::parse(&bytes, Some(folder)).expect("corpus skill parses");
            (parsed.declaration.name, parsed.declaration.description)
        })
        .collect()
}

fn candidates(board: &[(String, String)]) -> Vec<Candidate<'_>> {
    board
        .iter()
        .enumerate()
        .map(|(i, (name, d))| Candidate {
            peer: if i % 2 == 0 { "peerA" } else { "peerB" },
            skill: name,
            description: d,
        })
        .collect()
}

#[test]
fn hit_rate_over_phrased_requests_is_at_least_90_percent() {
    let board = board();
    assert!(board.len() >= 30);
    let cands = candidates(&board);
    let mut hits = 0;
    for (want, request) in CASES {
        match pick(request, &cands) {
            Ok(p) if p.skill == *want => {
                hits += 1;
                println!(
                    "hit {want}: {:.2} (runner-up {:.2})",
                    p.score,
                    p.runner_up.map_or(0.0, |r| r.score)
                );
            }
            Ok(p) => println!(
                "MISS {request:?}: picked {} ({:.2}), wanted {want}",
                p.skill, p.score
            ),
            Err(e) => println!("MISS {request:?}: {e}"),
        }
    }
    let rate = hits as f64 / CASES.len() as f64;
    println!(
        "intent hit rate: {hits}/{} = {:.1}%",
        CASES.len(),
        rate * 100.0
    );
    assert!(rate >= 0.9, "hit rate {rate:.3} below 0.9");
}

#[test]
fn an_unrelated_request_picks_nothing() {
    let board = board();
    let cands = candidates(&board);
    for request in [
        "what's the weather in Paris tomorrow",
        "give me a recipe for chocolate cake",
        "write a poem about my cat",
        "review my holiday photos",
        "hello",
        "",
    ] {
        match pick(request, &cands) {
            Err(NoPick::NoMatch {
                best_score,
                threshold,
                ..
            }) => {
                println!("unrelated {request:?}: best {best_score:.2}");
                assert!(best_score < threshold)
            }
            other => panic!("{request:?} picked {other:?}"),
        }
    }
}

#[test]
fn a_skill_that_left_the_board_is_not_picked() {
    let board = board();
    let mut cands = candidates(&board);
    let request = "create a Dockerfile to containerize my ASP.NET Core app";
    assert_eq!(
        pick(request, &cands).expect("pick").skill,
        "containerize-aspnetcore"
    );
    cands.retain(|c| c.skill != "containerize-aspnetcore");
    if let Ok(p) = pick(request, &cands) {
        assert_ne!(p.skill, "containerize-aspnetcore");
    }
    assert_eq!(pick(request, &[]), Err(NoPick::NoCandidates));
}

#[test]
fn the_pick_names_its_runner_up() {
    let board = board();
    let cands = candidates(&board);
    let p = pick("tear down a competitor's paid ads campaign", &cands).expect("pick");
    let r = p.runner_up.expect("a runner-up");
    assert!(r.score <= p.score);
    assert_ne!(r.skill, p.skill);
}
