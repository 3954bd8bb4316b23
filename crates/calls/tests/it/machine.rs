//! Every transition of the caller and owner machines, without sockets.

use skillbox_calls::*;

const T0: u64 = 1_000_000;
const EXPIRES: u64 = T0 + 600_000;

fn timing() -> Timing {
    Timing::default()
}

fn new_call(peer: &str) -> NewCall {
    NewCall {
        id: "c1".into(),
        peer: peer.into(),
        skill: "music-taste".into(),
        program_hash: "sha256:ab".into(),
        expires_at_ms: EXPIRES,
    }
}

/// The clock's tick reaching `call` at `now`: stalls, retries and expiry are decided on it.
fn tick(call: &Call, now: u64) -> Transition {
    step(call, Event::Tick, now, &timing())
}

/// Where `t` left the call: its state and the actions it owes.
fn owed(t: &Transition) -> (State, Vec<Action>) {
    (t.call.state, t.actions.clone())
}

/// The code the call failed with, if it failed.
fn failure_code(t: &Transition) -> Option<FailureCode> {
    t.call.failure.as_ref().map(|f| f.code)
}

fn caller() -> Transition {
    start(Role::Caller, new_call("peerO"), T0, &timing())
}

fn owner() -> Transition {
    start(Role::Owner, new_call("peerC"), T0, &timing())
}

/// Feed events in order, checking each applies; returns the last transition.
/// The run a side opened (caller) or verified (owner).
fn run_opened(id: &str) -> Event {
    Event::RunOpened { run_id: id.into() }
}

fn run(start: Transition, events: Vec<Event>) -> Transition {
    let mut t = start;
    let mut now = T0;
    for e in events {
        now += 10;
        let shown = format!("{e:?}");
        t = step(&t.call, e, now, &timing());
        assert!(t.changed, "{shown} did not apply in {:?}", t.call.state);
    }
    t
}

fn caller_at(state: State) -> Transition {
    // The happy path's events in order; a state is reached by a prefix of them (consent
    // parks on `ask` instead of going on).
    let opened = || vec![Event::PeerAccepted, run_opened("r1")];
    let allowed = |more: &[Event]| {
        let mut path = opened();
        path.extend([Event::Policy(Decision::Allow), Event::Staked]);
        path.extend_from_slice(more);
        path
    };
    let path = match state {
        State::Requested => vec![],
        State::Accepted => vec![Event::PeerAccepted],
        State::Opened => opened(),
        State::AwaitingConsent => {
            let mut path = opened();
            path.push(Event::Policy(Decision::Ask));
            path
        }
        State::Submitting => allowed(&[]),
        State::Submitted => allowed(&[Event::Submitted]),
        other => panic!("no caller path to {other:?}"),
    };
    let t = run(caller(), path);
    assert_eq!(t.call.state, state);
    t
}

/// `yes` (the policy's allow or the human's) reaching `call` at `now`, on either side: it owes
/// the stake alone, the call now consented; once staked, it owes the submit (at `now + 1`).
/// Returns the submitting transition.
fn yes_stakes_then_submits(call: &Call, yes: Event, now: u64) -> Transition {
    let t = step(call, yes, now, &timing());
    assert_eq!(owed(&t), (State::Opened, vec![Action::Stake]));
    assert!(t.call.consented, "a yes is recorded before the stake");
    let t = step(&t.call, Event::Staked, now + 1, &timing());
    assert_eq!(owed(&t), (State::Submitting, vec![Action::Submit]));
    t
}

/// The run is cancelled at the box first, then the peer is told the call failed with `code`.
fn cancels_then_fails(actions: &[Action], code: FailureCode) {
    assert_eq!(actions[0], Action::CancelRun, "{actions:?}");
    assert_eq!(actions[1], Action::SendFailed { code }, "{actions:?}");
}

#[test]
fn caller_happy_path_emits_each_owed_action() {
    let t = caller();
    assert_eq!(t.call.state, State::Requested);
    assert_eq!(t.actions, vec![Action::SendRequest]);
    let t = step(&t.call, Event::PeerAccepted, T0 + 1, &timing());
    assert_eq!(owed(&t), (State::Accepted, vec![Action::OpenRun]));
    let t = step(&t.call, run_opened("r1"), T0 + 2, &timing());
    assert_eq!(t.call.state, State::Opened);
    assert_eq!(t.call.run_id.as_deref(), Some("r1"));
    // Policy first, with the box verified; the stake only after it said yes.
    assert_eq!(t.actions, vec![Action::SendSession, Action::CheckPolicy]);
    assert!(!t.call.consented);
    let t = step(&t.call, Event::SessionDelivered, T0 + 3, &timing());
    assert!(t.call.session_delivered && t.actions.is_empty());
    let t = yes_stakes_then_submits(&t.call, Event::Policy(Decision::Allow), T0 + 4);
    let t = step(&t.call, Event::Submitted, T0 + 6, &timing());
    assert_eq!(owed(&t), (State::Submitted, vec![Action::FetchOutcome]));
    let t = step(&t.call, Event::Answered, T0 + 7, &timing());
    assert_eq!(t.call.state, State::Answered);
    assert!(t.actions.is_empty());
    assert_eq!(t.call.progressed_at_ms, T0 + 7);
}

#[test]
fn owner_happy_path() {
    let t = owner();
    assert_eq!(owed(&t), (State::Received, vec![Action::Admit]));
    let t = step(&t.call, Event::Admitted, T0 + 1, &timing());
    assert_eq!(owed(&t), (State::Accepted, vec![Action::SendAccepted]));
    // call.session: verify first, record the run after; the claim alone is kept meanwhile.
    let t = step(
        &t.call,
        Event::PeerSession {
            run_id: "r1".into(),
            box_url: "http://box".into(),
        },
        T0 + 2,
        &timing(),
    );
    assert!(t.changed);
    assert_eq!(t.call.run_id, None, "a claim is not the call's run");
    assert_eq!(t.call.state, State::Accepted);
    assert_eq!(
        t.actions,
        vec![Action::VerifyRun {
            run_id: "r1".into(),
            box_url: "http://box".into(),
        }]
    );
    let t = step(&t.call, run_opened("r1"), T0 + 3, &timing());
    // Policy first, with the box verified; the body, model and key only after it said yes.
    assert_eq!(owed(&t), (State::Opened, vec![Action::CheckPolicy]));
    assert_eq!(t.call.session_claim, None);
    let t = yes_stakes_then_submits(&t.call, Event::Policy(Decision::Allow), T0 + 4);
    let t = step(&t.call, Event::Submitted, T0 + 6, &timing());
    assert_eq!(t.actions, vec![Action::FetchOutcome]);
    let t = step(&t.call, Event::ReceiptStored, T0 + 7, &timing());
    assert_eq!(t.call.state, State::Ran);
    // The caller's terminal event does not apply to the owner.
    let o = run(
        owner(),
        vec![
            Event::Admitted,
            run_opened("r"),
            Event::Policy(Decision::Allow),
            Event::Staked,
            Event::Submitted,
        ],
    );
    assert!(!step(&o.call, Event::Answered, T0 + 100, &timing()).changed);
}

/// A verification of the caller's run that fails for a moment (its box restarting) is tried
/// again at the next retry: the caller sends its session once, and without the claim the owner
/// waited for another until the call stalled (found by the crash harness, box killed at
/// `staked`).
#[test]
fn the_owners_verification_of_a_session_is_retried_until_it_succeeds() {
    let t = run(owner(), vec![Event::Admitted]);
    let verify = Action::VerifyRun {
        run_id: "r1".into(),
        box_url: "http://box".into(),
    };
    let session = || Event::PeerSession {
        run_id: "r1".into(),
        box_url: "http://box".into(),
    };
    let t = step(&t.call, session(), T0 + 20, &timing());
    assert_eq!(t.actions, vec![verify.clone()]);
    // The verification failed (no event). At the retry the run is verified again, not
    // call.accepted sent again — and again at the next one.
    let due = tick(&t.call, t.call.retry_at_ms);
    assert_eq!(owed(&due), (State::Accepted, vec![verify.clone()]));
    let again = tick(&due.call, due.call.retry_at_ms);
    assert_eq!(again.actions, vec![verify.clone()]);
    // The same session again changes nothing to keep.
    let dup = step(&again.call, session(), T0 + 30, &timing());
    assert!(!dup.changed);
    assert_eq!(dup.actions, vec![verify]);
    // Resumed after a restart: the claim is still owed its verification.
    let resumed = step(&again.call, Event::Resume, T0 + 40, &timing());
    assert!(
        resumed
            .actions
            .iter()
            .any(|a| matches!(a, Action::VerifyRun { .. }))
    );
    // Verified at last: the call's run, and the claim goes.
    let t = step(&again.call, run_opened("r1"), T0 + 50, &timing());
    assert_eq!(owed(&t), (State::Opened, vec![Action::CheckPolicy]));
    assert_eq!(t.call.run_id.as_deref(), Some("r1"));
    assert_eq!(t.call.session_claim, None);
    // Before any session the owner still re-sends call.accepted.
    let plain = run(owner(), vec![Event::Admitted]);
    let due = tick(&plain.call, plain.call.retry_at_ms);
    assert_eq!(due.actions, vec![Action::SendAccepted]);
}

/// The same for a run the caller moved to: a check of the new run that failed for a moment is
/// owed again at each retry, ahead of what the state owes for the run it leaves.
#[test]
fn the_owners_verification_of_a_moved_run_is_retried_until_it_succeeds() {
    let opened = run(owner(), vec![Event::Admitted, run_opened("r1")]);
    assert_eq!(owed(&opened), (State::Opened, vec![Action::CheckPolicy]));
    let verify = Action::VerifyRun {
        run_id: "r2".into(),
        box_url: "http://box-2".into(),
    };
    let t = step(
        &opened.call,
        Event::PeerSession {
            run_id: "r2".into(),
            box_url: "http://box-2".into(),
        },
        T0 + 20,
        &timing(),
    );
    assert!(t.changed, "the claim is kept");
    assert_eq!(t.actions, vec![verify.clone()]);
    assert_eq!(
        t.call.run_id.as_deref(),
        Some("r1"),
        "a claim is not the call's run"
    );
    let due = tick(&t.call, t.call.retry_at_ms);
    assert_eq!(
        owed(&due),
        (State::Opened, vec![verify, Action::CheckPolicy])
    );
    let moved = step(&due.call, run_opened("r2"), T0 + 50, &timing());
    assert_eq!(owed(&moved), (State::Opened, vec![Action::CheckPolicy]));
    assert_eq!(moved.call.run_id.as_deref(), Some("r2"));
    assert_eq!(moved.call.left_runs, vec!["r1".to_owned()]);
    assert_eq!(moved.call.session_claim, None);
}

#[test]
fn owner_refusal_tells_the_caller() {
    let t = step(
        &owner().call,
        Event::NotAdmitted {
            code: FailureCode::NotOffered,
            message: "skill not offered".into(),
        },
        T0 + 1,
        &timing(),
    );
    assert_eq!(t.call.state, State::Failed);
    assert_eq!(failure_code(&t), Some(FailureCode::NotOffered));
    assert_eq!(
        t.actions,
        vec![Action::SendFailed {
            code: FailureCode::NotOffered,
        }],
        "no run yet, so nothing to cancel"
    );
}

#[test]
fn consent_ask_parks_then_allow_or_deny() {
    let t = caller_at(State::AwaitingConsent);
    assert_eq!(t.actions, vec![Action::RequestConsent]);
    // Parked before anything was staked: allowed, it goes back to stake.
    let allowed = step(&t.call, Event::Consent { allow: true }, T0 + 100, &timing());
    assert_eq!(
        (allowed.call.state, allowed.actions),
        (State::Opened, vec![Action::SendSession, Action::Stake])
    );
    assert!(allowed.call.consented);
    let staked = step(&allowed.call, Event::Staked, T0 + 101, &timing());
    assert_eq!(
        (staked.call.state, staked.actions),
        (State::Submitting, vec![Action::SendSession, Action::Submit]),
        "the session payload is still owed (never acknowledged here)"
    );
    let denied = step(
        &t.call,
        Event::Consent { allow: false },
        T0 + 100,
        &timing(),
    );
    assert_eq!(denied.call.state, State::Failed);
    assert_eq!(failure_code(&denied), Some(FailureCode::ConsentDenied));
    assert!(
        denied.actions.contains(&Action::CancelRun),
        "the run was opened: cancel it"
    );
    // The peer is told a refusal, not that a human read the question (`toward_peer`).
    assert!(matches!(
        denied.actions.last(),
        Some(Action::SendFailed {
            code: FailureCode::PolicyDenied,
        })
    ));
}

#[test]
fn policy_deny_fails_and_tells_the_peer() {
    let t = step(
        &caller_at(State::Opened).call,
        Event::Policy(Decision::Deny),
        T0 + 100,
        &timing(),
    );
    assert_eq!(failure_code(&t), Some(FailureCode::PolicyDenied));
    assert_eq!(t.actions[0], Action::CancelRun);
}

#[test]
fn peer_failed_is_terminal_and_not_echoed() {
    for state in [
        State::Requested,
        State::Accepted,
        State::Opened,
        State::Submitted,
    ] {
        let t = step(
            &caller_at(state).call,
            Event::PeerFailed {
                code: Some(FailureCode::NotOffered),
            },
            T0 + 100,
            &timing(),
        );
        assert_eq!(t.call.state, State::Failed, "{state:?}");
        assert!(
            !t.actions
                .iter()
                .any(|a| matches!(a, Action::SendFailed { .. })),
            "{state:?}: {:?}",
            t.actions
        );
        assert!(
            t.call
                .failure
                .as_ref()
                .is_some_and(|f| f.message.contains("not_offered"))
        );
    }
}

#[test]
fn cancel_fails_cancels_the_run_and_tells_the_peer() {
    // Once both submitted the run is the box's: a cancel stops waiting, and tells the peer.
    let t = step(
        &caller_at(State::Submitted).call,
        Event::Cancel,
        T0 + 100,
        &timing(),
    );
    assert_eq!(
        t.actions,
        vec![Action::SendFailed {
            code: FailureCode::PolicyDenied
        }]
    );
    let t = step(
        &caller_at(State::Submitting).call,
        Event::Cancel,
        T0 + 100,
        &timing(),
    );
    assert_eq!(failure_code(&t), Some(FailureCode::Cancelled));
    // The peer reads a refusal: a cancel is this side's decision too (`toward_peer`).
    cancels_then_fails(&t.actions, FailureCode::PolicyDenied);
}

#[test]
fn run_failed_and_box_failed() {
    let t = step(
        &caller_at(State::Submitted).call,
        Event::RunFailed {
            message: "provider 500".into(),
        },
        T0 + 100,
        &timing(),
    );
    assert_eq!(failure_code(&t), Some(FailureCode::RunFailed));
    let t = step(
        &caller_at(State::Accepted).call,
        Event::BoxFailed {
            code: FailureCode::AttestationRejected,
            message: "dev attestation not allowed".into(),
        },
        T0 + 100,
        &timing(),
    );
    assert_eq!(failure_code(&t), Some(FailureCode::AttestationRejected));
    assert!(
        !t.actions.contains(&Action::CancelRun),
        "no run id recorded yet"
    );
}

#[test]
fn terminal_calls_ignore_everything() {
    let answered = run(caller_at(State::Submitted), vec![Event::Answered]);
    for e in [
        Event::Tick,
        Event::Cancel,
        Event::PeerAccepted,
        Event::Answered,
        Event::Resume,
        Event::PeerFailed { code: None },
    ] {
        let t = step(&answered.call, e, EXPIRES + 1, &timing());
        assert!(!t.changed && t.actions.is_empty());
        assert_eq!(t.call, answered.call);
    }
}

#[test]
fn replays_and_out_of_order_events_change_nothing() {
    let t = caller_at(State::Opened);
    for e in [
        Event::PeerAccepted,
        run_opened("other"),
        Event::Submitted,
        Event::Answered,
        Event::Admitted,
    ] {
        let n = step(&t.call, e.clone(), T0 + 500, &timing());
        assert!(!n.changed, "{e:?}");
        assert_eq!(n.call, t.call, "{e:?}");
        assert!(n.actions.is_empty());
    }
    // A second session acknowledgement is a replay too.
    let acked = step(&t.call, Event::SessionDelivered, T0 + 500, &timing());
    assert!(!step(&acked.call, Event::SessionDelivered, T0 + 501, &timing()).changed);
}

#[test]
fn resume_re_emits_what_each_state_owes() {
    let cases = [
        (State::Requested, vec![Action::SendRequest]),
        (State::Accepted, vec![Action::OpenRun]),
        (
            State::Opened,
            vec![Action::SendSession, Action::CheckPolicy],
        ),
        (State::AwaitingConsent, vec![Action::RequestConsent]),
        (State::Submitting, vec![Action::Submit]),
        (State::Submitted, vec![Action::FetchOutcome]),
    ];
    for (state, want) in cases {
        let t = caller_at(state);
        let r = step(&t.call, Event::Resume, T0 + 1_000, &timing());
        assert!(!r.changed);
        assert_eq!(r.actions, want, "{state:?}");
    }
    let o = owner();
    assert_eq!(
        step(&o.call, Event::Resume, T0, &timing()).actions,
        vec![Action::Admit]
    );
}

#[test]
fn tick_retries_with_backoff_and_no_progress() {
    let t = caller_at(State::Accepted);
    let progressed = t.call.progressed_at_ms;
    let early = tick(&t.call, t.call.retry_at_ms - 1);
    assert!(!early.changed && early.actions.is_empty());
    let due = tick(&t.call, t.call.retry_at_ms);
    assert_eq!(due.actions, vec![Action::OpenRun]);
    assert_eq!(
        due.call.progressed_at_ms, progressed,
        "a retry is not progress"
    );
    assert_eq!(due.call.attempts, 2);
    let gap1 = due.call.retry_at_ms - t.call.retry_at_ms;
    let again = tick(&due.call, due.call.retry_at_ms);
    let gap2 = again.call.retry_at_ms - due.call.retry_at_ms;
    assert!(gap2 > gap1, "backoff grows: {gap1} then {gap2}");
    // and is capped
    let mut c = again.call;
    for _ in 0..8 {
        c.progressed_at_ms = c.retry_at_ms; // keep the stall clock away
        c = tick(&c, c.retry_at_ms).call;
    }
    let last_gap = tick(&c, c.retry_at_ms).call.retry_at_ms - c.retry_at_ms;
    assert_eq!(last_gap, timing().max_backoff_ms);
}

#[test]
fn a_run_at_the_box_is_not_stalled_and_a_finished_one_is_not_cancelled() {
    let t = caller_at(State::Submitted);
    let limit = timing().stall_limit_ms;
    let later = tick(&t.call, t.call.progressed_at_ms + limit * 3);
    assert_ne!(later.call.state, State::Failed, "a long run is not a stall");
    let expired = tick(&t.call, EXPIRES + 1);
    assert_eq!(failure_code(&expired), Some(FailureCode::Expired));
    // Both submitted: the run ran or runs; deleting it would take the peer's result away.
    let failed = step(
        &t.call,
        Event::RunFailed {
            message: "x".into(),
        },
        T0 + 10,
        &timing(),
    );
    assert!(
        !failed.actions.contains(&Action::CancelRun),
        "{:?}",
        failed.actions
    );
    assert!(!expired.actions.contains(&Action::CancelRun));
}

#[test]
fn tick_fails_a_stalled_call_and_cancels_its_run() {
    let t = caller_at(State::Submitting);
    let limit = timing().stall_limit_ms;
    let ok = tick(&t.call, t.call.progressed_at_ms + limit);
    assert_ne!(ok.call.state, State::Failed);
    let stalled = tick(&t.call, t.call.progressed_at_ms + limit + 1);
    assert_eq!(failure_code(&stalled), Some(FailureCode::Stalled));
    assert!(
        stalled
            .call
            .failure
            .as_ref()
            .is_some_and(|f| f.message.contains("submitting"))
    );
    cancels_then_fails(&stalled.actions, FailureCode::Stalled);
}

#[test]
fn awaiting_consent_does_not_stall_nor_renag_but_expires() {
    let t = caller_at(State::AwaitingConsent);
    let later = t.call.progressed_at_ms + timing().stall_limit_ms * 3;
    assert!(later < EXPIRES);
    let n = tick(&t.call, later);
    assert!(!n.changed && n.actions.is_empty());
    let expired = tick(&t.call, EXPIRES);
    assert_eq!(failure_code(&expired), Some(FailureCode::Expired));
}

#[test]
fn state_names_round_trip() {
    for s in [
        State::Requested,
        State::Received,
        State::Accepted,
        State::Opened,
        State::Staked,
        State::AwaitingConsent,
        State::Submitting,
        State::Submitted,
        State::Answered,
        State::Ran,
        State::Failed,
    ] {
        assert_eq!(State::parse(s.as_str()), Some(s));
        assert_eq!(
            serde_json::to_value(s).expect("ser"),
            serde_json::Value::String(s.as_str().into())
        );
    }
    assert_eq!(State::parse("bogus"), None);
}

#[test]
fn a_consented_caller_resumes_to_its_stake_and_is_not_asked_again() {
    let t = caller_at(State::Opened);
    let allowed = step(&t.call, Event::Policy(Decision::Allow), T0 + 100, &timing());
    let r = step(&allowed.call, Event::Resume, T0 + 200, &timing());
    assert_eq!(r.actions, vec![Action::SendSession, Action::Stake]);
    // A late policy answer for a consented call changes nothing.
    let late = step(
        &allowed.call,
        Event::Policy(Decision::Ask),
        T0 + 300,
        &timing(),
    );
    assert!(!late.changed && late.actions.is_empty());
}

#[test]
fn a_record_from_before_consent_moved_keeps_the_old_order() {
    // Written by an earlier version: parked for consent after staking, no `consented` field.
    let mut v = serde_json::to_value(&caller_at(State::AwaitingConsent).call).expect("ser");
    v.as_object_mut().expect("object").remove("consented");
    let old: Call = serde_json::from_value(v).expect("old record reads");
    assert!(!old.consented);
    // Allowed, it stakes again (the box answers already_staked: the stake is in) and submits.
    let allowed = step(&old, Event::Consent { allow: true }, T0 + 100, &timing());
    assert_eq!(
        (allowed.call.state, allowed.actions.clone()),
        (State::Opened, vec![Action::SendSession, Action::Stake])
    );
    let staked = step(&allowed.call, Event::Staked, T0 + 101, &timing());
    assert_eq!(staked.call.state, State::Submitting);
    // One parked at `staked` by the old order still asks its policy there.
    let mut old_staked = old.clone();
    old_staked.state = State::Staked;
    let r = step(&old_staked, Event::Resume, T0 + 200, &timing());
    assert_eq!(r.actions, vec![Action::CheckPolicy]);
    let on = step(
        &old_staked,
        Event::Policy(Decision::Allow),
        T0 + 201,
        &timing(),
    );
    assert_eq!(on.call.state, State::Submitting);
}

#[test]
fn a_caller_whose_submit_went_with_its_stake_passes_submitting_by() {
    let t = caller_at(State::Opened);
    // Not consented yet: its stake (and so its submit) is not owed, and the box's word that it
    // took one changes nothing.
    assert!(!submits_with_stake(&t.call));
    let early = step(&t.call, Event::Submitted, T0 + 50, &timing());
    assert!(!early.changed && early.actions.is_empty());
    let allowed = step(&t.call, Event::Policy(Decision::Allow), T0 + 100, &timing());
    assert!(submits_with_stake(&allowed.call));
    let t = step(&allowed.call, Event::Submitted, T0 + 101, &timing());
    // The session is still owed until the owner acknowledged it; then the answer.
    assert_eq!(
        owed(&t),
        (
            State::Submitted,
            vec![Action::SendSession, Action::FetchOutcome]
        )
    );
    assert!(!submits_with_stake(&t.call));
    let delivered = step(&allowed.call, Event::SessionDelivered, T0 + 101, &timing());
    let t = step(&delivered.call, Event::Submitted, T0 + 102, &timing());
    assert_eq!(owed(&t), (State::Submitted, vec![Action::FetchOutcome]));
}

#[test]
fn an_owner_never_submits_with_its_stake() {
    let t = owner_opened();
    assert!(!submits_with_stake(&t.call));
    let early = step(&t.call, Event::Submitted, T0 + 100, &timing());
    assert!(!early.changed && early.actions.is_empty());
    // Allowed, it stakes alone: its submit waits on its coverage turn, taken just before it.
    let allowed = step(&t.call, Event::Policy(Decision::Allow), T0 + 101, &timing());
    assert_eq!(owed(&allowed), (State::Opened, vec![Action::Stake]));
    assert!(!submits_with_stake(&allowed.call));
    let early = step(&allowed.call, Event::Submitted, T0 + 102, &timing());
    assert!(!early.changed && early.actions.is_empty());
}

/// The owner verified the caller's run: `opened`, its policy not asked yet.
fn owner_opened() -> Transition {
    let t = run(
        owner(),
        vec![
            Event::Admitted,
            Event::PeerSession {
                run_id: "r1".into(),
                box_url: "http://b".into(),
            },
            run_opened("r1"),
        ],
    );
    assert_eq!(t.call.state, State::Opened);
    t
}

/// Review 23 F4: the owner staked the skill's body, model and key into the box and only then
/// asked its policy (and human) — on a box without hardware isolation its operator held them
/// before a "no". Now the owner asks at `opened` and stakes only once allowed; a "no" (its
/// policy's or its human's) leaves nothing staked anywhere.
#[test]
fn an_owner_asks_its_policy_before_it_stakes_and_a_no_stakes_nothing() {
    let t = owner_opened();
    assert!(!t.call.consented);
    assert_eq!(t.actions, vec![Action::CheckPolicy]);
    assert!(!t.actions.contains(&Action::Stake), "staked before asked");
    let r = step(&t.call, Event::Resume, T0 + 50, &timing());
    assert_eq!(r.actions, vec![Action::CheckPolicy]);
    // A late or forged `Staked` before the yes moves nothing on to the submit.
    let early = step(&t.call, Event::Staked, T0 + 60, &timing());
    assert_ne!(early.call.state, State::Submitting);
    assert!(!early.actions.contains(&Action::Submit));
    // Policy deny: failed, nothing staked.
    let denied = step(&t.call, Event::Policy(Decision::Deny), T0 + 100, &timing());
    assert_eq!(failure_code(&denied), Some(FailureCode::PolicyDenied));
    assert!(!denied.actions.contains(&Action::Stake));
    // Ask: parked before staking; the human's no stakes nothing either.
    let parked = step(&t.call, Event::Policy(Decision::Ask), T0 + 100, &timing());
    assert_eq!(
        owed(&parked),
        (State::AwaitingConsent, vec![Action::RequestConsent])
    );
    let no = step(
        &parked.call,
        Event::Consent { allow: false },
        T0 + 200,
        &timing(),
    );
    assert_eq!(failure_code(&no), Some(FailureCode::ConsentDenied));
    assert!(!no.actions.contains(&Action::Stake));
    // The human's yes owes the stake, then the submit.
    yes_stakes_then_submits(&parked.call, Event::Consent { allow: true }, T0 + 200);
}

/// A caller moving the run to another box: the owner asks again (the question names the box
/// its stake goes to), and a yes for the first box is not carried over.
#[test]
fn an_owner_that_follows_a_moved_run_is_asked_again_before_it_stakes() {
    let t = owner_opened();
    let allowed = step(&t.call, Event::Policy(Decision::Allow), T0 + 100, &timing());
    let moved = step(&allowed.call, run_opened("r2"), T0 + 101, &timing());
    assert_eq!(owed(&moved), (State::Opened, vec![Action::CheckPolicy]));
    assert!(!moved.call.consented);
    assert_eq!(moved.call.left_runs, vec!["r1".to_owned()]);
}

/// Stored owner rows from before the owner's consent moved ahead of its stake still finish: one
/// in `staked` asks its policy there, one parked after its stake stakes "again" (the ledger's
/// answered entry makes that `Staked` without sending) and submits.
#[test]
fn an_owner_record_from_before_its_consent_moved_still_finishes() {
    let mut old = owner_opened().call;
    old.state = State::Staked;
    let r = step(&old, Event::Resume, T0 + 100, &timing());
    assert_eq!(r.actions, vec![Action::CheckPolicy]);
    let on = step(&old, Event::Policy(Decision::Allow), T0 + 101, &timing());
    assert_eq!(owed(&on), (State::Submitting, vec![Action::Submit]));
    assert!(on.call.consented, "submitting is never unconsented");
    let denied = step(&old, Event::Policy(Decision::Deny), T0 + 101, &timing());
    assert_eq!(failure_code(&denied), Some(FailureCode::PolicyDenied));
    let parked = step(&old, Event::Policy(Decision::Ask), T0 + 101, &timing());
    assert_eq!(parked.call.state, State::AwaitingConsent);
    yes_stakes_then_submits(&parked.call, Event::Consent { allow: true }, T0 + 102);
}

/// The refusals one side makes of its own accord, each with the code its record keeps: its
/// policy's no at `opened`, and its human's no or a cancel while `parked` on the question.
fn refusals_of_this_side<'a>(
    opened: &'a Transition,
    parked: &'a Transition,
) -> [(&'a Transition, Event, FailureCode); 3] {
    [
        (
            opened,
            Event::Policy(Decision::Deny),
            FailureCode::PolicyDenied,
        ),
        (
            parked,
            Event::Consent { allow: false },
            FailureCode::ConsentDenied,
        ),
        (parked, Event::Cancel, FailureCode::Cancelled),
    ]
}

/// Review 23 F6: the peer learned how this side decided — `consent_denied` (a person read the
/// question and said no), `policy_denied` (a rule) or `cancelled`. Every refusal of this side
/// now reaches the peer as `policy_denied`; this node's record keeps the precise code.
#[test]
fn every_refusal_of_this_side_reaches_the_peer_as_one_code() {
    let opened = caller_at(State::Opened);
    let parked = caller_at(State::AwaitingConsent);
    let owner_parked = step(
        &owner_opened().call,
        Event::Policy(Decision::Ask),
        T0 + 10,
        &timing(),
    );
    let owner_open = owner_opened();
    let submitted = caller_at(State::Submitted);
    let cases = refusals_of_this_side(&opened, &parked)
        .into_iter()
        .chain([
            (&opened, Event::Cancel, FailureCode::Cancelled),
            (&submitted, Event::Cancel, FailureCode::Cancelled),
        ])
        .chain(refusals_of_this_side(&owner_open, &owner_parked));
    for (at, event, local) in cases {
        let shown = format!("{:?} {:?} {event:?}", at.call.role, at.call.state);
        let t = step(&at.call, event, T0 + 500, &timing());
        assert_eq!(failure_code(&t), Some(local), "{shown}");
        let told: Vec<&Action> = t
            .actions
            .iter()
            .filter(|a| matches!(a, Action::SendFailed { .. }))
            .collect();
        assert_eq!(
            told,
            vec![&Action::SendFailed {
                code: FailureCode::PolicyDenied
            }],
            "{shown}"
        );
    }
    // Failures that are not this side's decision keep their code toward the peer.
    for code in FailureCode::ALL {
        let want = match code {
            FailureCode::ConsentDenied | FailureCode::Cancelled => FailureCode::PolicyDenied,
            c => c,
        };
        assert_eq!(code.toward_peer(), want);
    }
}
