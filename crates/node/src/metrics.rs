//! The node's metrics, exposed at `GET /metrics` in the OpenMetrics text format by
//! `prometheus-client`: HTTP requests by route template, method and status (never the raw path:
//! it may name a source, and would explode cardinality); calls by side and state, how long each
//! took to finish and how it ended; the latency of each box operation and of the run (submit to
//! result: the provider's time and the box's); and gauges read at scrape time (skills, sources,
//! the board, peers, uptime). Labels are closed sets (route templates, states, operations, codes).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

/// The OpenMetrics content type `GET /metrics` answers with.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    method: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    role: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    role: String,
    state: String,
    /// The failure code (empty when the call did not fail).
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoxLabels {
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabels {
    role: String,
}

/// What the scrape reads from the store and the network.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub skills: u64,
    pub skills_offered: u64,
    pub sources: u64,
    /// Offered skills on the board (peers').
    pub board: u64,
    pub peers: u64,
    /// Calls in the store, by (role, state).
    pub calls: Vec<(String, String, u64)>,
    /// Writes the store acknowledged since start, and the commits (fsyncs) they took.
    pub store_writes: u64,
    pub store_commits: u64,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    started: Instant,
    http: Family<HttpLabels, Counter>,
    finished: Family<EndLabels, Counter>,
    call_seconds: Family<RoleLabels, Histogram>,
    box_seconds: Family<BoxLabels, Histogram>,
    run_seconds: Family<RoleLabels, Histogram>,
    calls: Family<CallLabels, Gauge>,
    skills: Gauge,
    skills_offered: Gauge,
    sources: Gauge,
    board: Gauge,
    peers: Gauge,
    uptime: Gauge,
    inbound: Gauge,
    /// Monotonic in the store; brought up to its count at each scrape.
    store_writes: Counter,
    store_commits: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics(..)")
    }
}

fn seconds_histogram() -> Histogram {
    // 5 ms … ~10 min.
    Histogram::new(exponential_buckets(0.005, 2.0, 18))
}

/// Durations in seconds, one histogram a label set.
fn seconds_family<L: Clone + std::hash::Hash + Eq>() -> Family<L, Histogram> {
    Family::new_with_constructor(seconds_histogram as fn() -> _)
}

/// `metric`, registered under `name`: the registry encodes its own handle, the node updates this
/// one (they share the value).
fn registered<M: Metric + Clone>(r: &mut Registry, name: &str, help: &str, metric: M) -> M {
    r.register(name, help, metric.clone());
    metric
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::with_prefix("skillbox");
        let http = registered(
            &mut r,
            "http_requests",
            "HTTP requests served, by route template, method and status",
            Family::default(),
        );
        let finished = registered(
            &mut r,
            "calls_finished",
            "Calls that reached a final state, by side, state and failure code",
            Family::default(),
        );
        let call_seconds = registered(
            &mut r,
            "call_duration_seconds",
            "From a call's start to its final state, by side",
            seconds_family(),
        );
        let box_seconds = registered(
            &mut r,
            "box_request_duration_seconds",
            "Latency of each request to a box, by operation (open, attest, stake, submit)",
            seconds_family(),
        );
        let run_seconds = registered(
            &mut r,
            "run_duration_seconds",
            "From submitting to a box to its result: the provider's time plus the box's, by side",
            seconds_family(),
        );
        let calls = registered(
            &mut r,
            "calls",
            "Calls in the store, by side and state",
            Family::default(),
        );
        let mut gauge = |name: &str, help: &str| registered(&mut r, name, help, Gauge::default());
        let skills = gauge("skills", "Declared skills");
        let skills_offered = gauge("skills_offered", "Declared skills that are offered");
        let sources = gauge("sources", "Sources in the store (skill bodies included)");
        let board = gauge("board_skills", "Peers' offered skills on the board");
        let peers = gauge("peers", "Connected peers");
        let uptime = gauge("uptime_seconds", "Seconds since the node started");
        let inbound = gauge(
            "inbound_payloads",
            "Peers' payloads being handled now (a refusal's delivery included)",
        );
        let store_writes = registered(
            &mut r,
            "store_writes",
            "Writes the store acknowledged since the node started",
            Counter::default(),
        );
        let store_commits = registered(
            &mut r,
            "store_commits",
            "Commits (fsyncs) those writes took: group commit batches concurrent writes",
            Counter::default(),
        );
        Metrics {
            registry: Mutex::new(r),
            started: Instant::now(),
            http,
            finished,
            call_seconds,
            box_seconds,
            run_seconds,
            calls,
            skills,
            skills_offered,
            sources,
            board,
            peers,
            uptime,
            inbound,
            store_writes,
            store_commits,
        }
    }
}

fn set(g: &Gauge, v: u64) {
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
}

/// Bring a counter up to `v`, a count kept elsewhere that only grows.
fn raise(c: &Counter, v: u64) {
    c.inc_by(v.saturating_sub(c.get()));
}

impl Metrics {
    /// A peer's payload taken up (`true`) or done with (`false`).
    pub fn inbound(&self, taken: bool) {
        if taken {
            self.inbound.inc();
        } else {
            self.inbound.dec();
        }
    }

    /// One HTTP request served (`route` is the matched template, or `unmatched`).
    pub fn record(&self, route: &str, method: &str, status: u16) {
        self.http
            .get_or_create(&HttpLabels {
                route: route.to_owned(),
                method: method.to_owned(),
                status: status.to_string(),
            })
            .inc();
    }

    /// A call side reached its final `state` (`code`: its failure code, if it failed) after
    /// `took` since it started.
    pub fn call_finished(&self, role: &str, state: &str, code: Option<&str>, took: Duration) {
        self.finished
            .get_or_create(&EndLabels {
                role: role.to_owned(),
                state: state.to_owned(),
                code: code.unwrap_or_default().to_owned(),
            })
            .inc();
        self.call_seconds
            .get_or_create(&RoleLabels {
                role: role.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// One request to a box (`op`: open, attest, stake, submit) took `took`.
    pub fn box_request(&self, op: &'static str, took: Duration) {
        self.box_seconds
            .get_or_create(&BoxLabels { op: op.to_owned() })
            .observe(took.as_secs_f64());
    }

    /// A run's result came `took` after this side asked for it.
    pub fn run(&self, role: &str, took: Duration) {
        self.run_seconds
            .get_or_create(&RoleLabels {
                role: role.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// The exposition, with the scrape-time gauges set from `gauges`.
    pub fn render(&self, gauges: &Gauges) -> String {
        set(&self.skills, gauges.skills);
        set(&self.skills_offered, gauges.skills_offered);
        set(&self.sources, gauges.sources);
        set(&self.board, gauges.board);
        set(&self.peers, gauges.peers);
        raise(&self.store_writes, gauges.store_writes);
        raise(&self.store_commits, gauges.store_commits);
        set(&self.uptime, self.started.elapsed().as_secs());
        // States no call is in any more must not linger at their last count.
        self.calls.clear();
        for (role, state, n) in &gauges.calls {
            set(
                &self.calls.get_or_create(&CallLabels {
                    role: role.clone(),
                    state: state.clone(),
                }),
                *n,
            );
        }
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_counters_follow_the_store_across_scrapes() {
        let m = Metrics::default();
        let at = |writes| Gauges {
            store_writes: writes,
            ..Gauges::default()
        };
        // Never down (the last scrape): a counter that went back would read as a reset to a
        // scraper.
        for (writes, shown) in [(3, 3), (10, 10), (4, 10)] {
            let text = m.render(&at(writes));
            let want = format!("\nskillbox_store_writes_total {shown}\n");
            assert!(text.contains(&want), "{want:?} not in {text}");
        }
    }

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let m = Metrics::default();
        m.record("/skills", "GET", 200);
        m.record("/skills", "GET", 200);
        m.record("unmatched", "GET", 404);
        m.call_finished(
            "caller",
            "failed",
            Some("box_failed"),
            Duration::from_millis(40),
        );
        m.box_request("stake", Duration::from_millis(3));
        m.run("owner", Duration::from_secs(2));
        let text = m.render(&Gauges {
            skills: 2,
            skills_offered: 1,
            sources: 3,
            board: 7,
            peers: 1,
            calls: vec![("caller".into(), "answered".into(), 4)],
            store_writes: 9,
            store_commits: 5,
        });
        for want in [
            "\nskillbox_store_writes_total 9\n",
            "\nskillbox_store_commits_total 5\n",
            "# TYPE skillbox_store_writes counter",
            "skillbox_http_requests_total{route=\"/skills\",method=\"GET\",status=\"200\"} 2",
            "status=\"404\"} 1",
            "\nskillbox_skills 2\n",
            "\nskillbox_sources 3\n",
            "\nskillbox_board_skills 7\n",
            "skillbox_calls{role=\"caller\",state=\"answered\"} 4",
            "skillbox_calls_finished_total{role=\"caller\",state=\"failed\",code=\"box_failed\"} 1",
            "skillbox_call_duration_seconds_count{role=\"caller\"} 1",
            "skillbox_box_request_duration_seconds_bucket{le=\"0.005\",op=\"stake\"} 1",
            "skillbox_run_duration_seconds_sum{role=\"owner\"} 2.0",
        ] {
            assert!(text.contains(want), "{want:?} not in {text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
        // A state no call is in any more is gone at the next scrape.
        let text = m.render(&Gauges::default());
        assert!(!text.contains("state=\"answered\"} 4"), "{text}");
    }
}
