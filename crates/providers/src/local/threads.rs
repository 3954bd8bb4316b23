//! How many threads the embedded model computes with: the machine's physical cores (hyper-threads
//! share a core's vector units, so a second thread per core only adds contention), never more than
//! the CPUs this process may run on — or what `SKILLBOX_LOCAL_THREADS` says.
//!
//! Why the override: llama.cpp's threads meet at a barrier after every operation of a step, a few
//! hundred times a token. On cores other work also wants, a thread that misses its turn holds the
//! others at each barrier: on the 2-core machine beside a build, the demo's call took 344 s with 2
//! threads and 12.6 s with 1 (10.8 CPU-s against 33; issue 29's note). A box that shares its cores
//! (a test suite running several, a node beside it) runs faster with fewer threads than cores.

use std::collections::BTreeSet;

/// Physical cores from the `thread_siblings_list` files of the CPUs (one entry per logical CPU,
/// e.g. `"0,8"` or `"0-1"`): logical CPUs listing the same siblings share one core.
pub fn count_cores<'a>(sibling_lists: impl IntoIterator<Item = &'a str>) -> usize {
    sibling_lists
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<BTreeSet<_>>()
        .len()
}

/// The environment variable that sets the default thread count (a whole number from 1).
pub const THREADS_ENV: &str = "SKILLBOX_LOCAL_THREADS";

/// Threads for this machine: `SKILLBOX_LOCAL_THREADS` when it is a whole number from 1, else
/// physical cores (Linux sysfs); capped by the CPUs available to the process (affinity, cgroup
/// quota); at least 1.
pub fn default_threads() -> usize {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    let set = std::env::var(THREADS_ENV).ok();
    threads_for(set.as_deref(), physical_cores(), available)
}

/// [`default_threads`] from what it reads: the variable's value (ignored unless a whole number
/// from 1: the box's `--local-threads` reads the same variable and refuses a bad one by name),
/// the physical cores if known, and the CPUs available.
pub fn threads_for(set: Option<&str>, cores: Option<usize>, available: usize) -> usize {
    let set = set
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n >= 1);
    set.or(cores).map_or(available, |n| n.min(available)).max(1)
}

/// The threads a model computes with (review 32 R32-11): an explicit count — the box's
/// `--local-threads`, which reads [`THREADS_ENV`] itself — or else [`default_threads`], either
/// way never more than the CPUs the process may run on, at least 1. One rule for the box and
/// the library: before, an explicit count was taken as is, so `SKILLBOX_LOCAL_THREADS=64` gave
/// a box 64 threads on 2 cores (llama.cpp's barriers, hundreds a token, then wait on threads
/// the cores cannot run) while the library's default capped the same value at 2.
pub fn resolve_threads(explicit: Option<usize>) -> usize {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    threads_within(explicit, available).unwrap_or_else(default_threads)
}

/// [`resolve_threads`] from what it reads: an explicit count capped at `available`.
fn threads_within(explicit: Option<usize>, available: usize) -> Option<usize> {
    explicit.map(|n| n.min(available).max(1))
}

fn physical_cores() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu").ok()?;
    let lists: Vec<String> = dir
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("cpu")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|entry| {
            std::fs::read_to_string(entry.path().join("topology/thread_siblings_list")).ok()
        })
        .collect();
    match count_cores(lists.iter().map(String::as_str)) {
        0 => None,
        n => Some(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_collapse_to_cores() {
        assert_eq!(count_cores(["0\n", "1\n"]), 2);
        assert_eq!(count_cores(["0,2", "1,3", "0,2", "1,3"]), 2);
        assert_eq!(count_cores(["0-1", "0-1"]), 1);
        assert_eq!(count_cores([""; 0]), 0);
        assert_eq!(count_cores(["", "  "]), 0);
    }

    #[test]
    fn the_variable_sets_the_threads_within_the_machine_and_a_bad_value_is_ignored() {
        assert_eq!(threads_for(Some("1"), Some(2), 2), 1);
        assert_eq!(threads_for(Some(" 3 "), Some(2), 4), 3);
        // Never more than the CPUs the process may run on.
        assert_eq!(threads_for(Some("64"), Some(2), 2), 2);
        // Not a whole number from 1: the machine's cores.
        for bad in ["0", "-1", "two", "", "1.5", "99999999999999999999999"] {
            assert_eq!(threads_for(Some(bad), Some(2), 4), 2, "{bad:?}");
        }
        assert_eq!(threads_for(None, Some(2), 4), 2);
        assert_eq!(threads_for(None, None, 3), 3);
        assert_eq!(threads_for(None, Some(8), 0), 1);
    }

    /// Review 32 R32-11: the box passes `--local-threads` / `SKILLBOX_LOCAL_THREADS` as an
    /// explicit count, which was taken as is (64 threads on 2 cores); now it is capped by the
    /// same rule as the variable read by the library.
    #[test]
    fn an_explicit_thread_count_is_capped_by_the_machine_too() {
        assert_eq!(threads_within(Some(64), 2), Some(2));
        assert_eq!(threads_within(Some(1), 2), Some(1));
        assert_eq!(threads_within(Some(0), 2), Some(1));
        assert_eq!(threads_within(None, 2), None);
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(resolve_threads(Some(64)), 64.min(available));
        assert_eq!(resolve_threads(Some(usize::MAX)), available);
        assert_eq!(resolve_threads(None), default_threads());
    }

    #[test]
    fn default_is_at_least_one_and_within_the_machine() {
        let n = default_threads();
        assert!(n >= 1);
        assert!(n <= std::thread::available_parallelism().map_or(1, |n| n.get()));
    }
}
