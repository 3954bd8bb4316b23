//! How many threads the embedded model computes with: the machine's physical cores (hyper-threads
//! share a core's vector units, so a second thread per core only adds contention), never more than
//! the CPUs this process may run on.

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

/// Threads for this machine: physical cores (Linux sysfs), capped by the CPUs available to the
/// process (affinity, cgroup quota); at least 1.
pub fn default_threads() -> usize {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    physical_cores()
        .map_or(available, |cores| cores.min(available))
        .max(1)
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
    fn default_is_at_least_one_and_within_the_machine() {
        let n = default_threads();
        assert!(n >= 1);
        assert!(n <= std::thread::available_parallelism().map_or(1, |n| n.get()));
    }
}
