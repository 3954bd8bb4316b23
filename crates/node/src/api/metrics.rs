//! Prometheus text exposition for `GET /metrics`: request counts by route template, method and
//! status (never the raw path: it may name a source and would explode cardinality), plus gauges
//! read from the store at scrape time.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug)]
pub struct Metrics {
    started: Instant,
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            requests: Mutex::new(BTreeMap::new()),
        }
    }
}

/// Gauges the scrape reads from the store.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    pub skills: u64,
    pub skills_offered: u64,
    pub sources: u64,
}

impl Metrics {
    pub fn record(&self, route: &str, method: &str, status: u16) {
        let mut m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry((route.to_owned(), method.to_owned(), status))
            .or_insert(0) += 1;
    }

    pub fn render(&self, gauges: Gauges) -> String {
        let mut out = String::new();
        out.push_str("# HELP skillbox_http_requests_total HTTP requests served, by route template, method and status.\n");
        out.push_str("# TYPE skillbox_http_requests_total counter\n");
        {
            let m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
            for ((route, method, status), n) in m.iter() {
                let _ = writeln!(
                    out,
                    "skillbox_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                    escape(route),
                    escape(method)
                );
            }
        }
        let gauge = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        gauge(
            &mut out,
            "skillbox_skills",
            "Declared skills.",
            gauges.skills,
        );
        gauge(
            &mut out,
            "skillbox_skills_offered",
            "Declared skills that are offered.",
            gauges.skills_offered,
        );
        gauge(
            &mut out,
            "skillbox_sources",
            "Sources in the store (skill bodies included).",
            gauges.sources,
        );
        let _ = writeln!(
            out,
            "# HELP skillbox_uptime_seconds Seconds since the API started.\n# TYPE skillbox_uptime_seconds gauge\nskillbox_uptime_seconds {}",
            self.started.elapsed().as_secs()
        );
        out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_gauges() {
        let m = Metrics::default();
        m.record("/skills", "GET", 200);
        m.record("/skills", "GET", 200);
        m.record("unmatched", "GET", 404);
        let text = m.render(Gauges {
            skills: 2,
            skills_offered: 1,
            sources: 3,
        });
        assert!(text.contains(
            "skillbox_http_requests_total{route=\"/skills\",method=\"GET\",status=\"200\"} 2"
        ));
        assert!(text.contains("status=\"404\"} 1"));
        assert!(text.contains("\nskillbox_skills 2\n"));
        assert!(text.contains("\nskillbox_sources 3\n"));
    }
}
