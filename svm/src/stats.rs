//! Statistics of a node and of a run (the experiments' Tables 2-4 read them).

use serde::{Deserialize, Serialize};

macro_rules! stats {
    ($($(#[doc = $d:literal])* $f:ident),* $(,)?) => {
        /// What one node's shared-memory protocol did.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct Stats {
            $($(#[doc = $d])* pub $f: u64,)*
        }

        impl Stats {
            /// Number of counters (the wire form is this many u64s).
            pub const FIELDS: usize = [$(stringify!($f)),*].len();

            /// Adds `o` to these counters.
            pub fn add(&mut self, o: &Stats) {
                $(self.$f += o.$f;)*
            }

            /// The counters in declaration order.
            pub fn to_words(&self) -> Vec<u64> {
                vec![$(self.$f),*]
            }

            /// The inverse of [`Stats::to_words`].
            pub fn from_words(w: &[u64]) -> Stats {
                let mut it = w.iter().copied();
                Stats { $($f: it.next().unwrap_or(0),)* }
            }
        }
    };
}

stats! {
    /// Reads of an invalid page (each fetches it).
    read_faults,
    /// First writes to a page in an interval (a twin under HLRC, a write notice always).
    write_faults,
    /// Whole pages fetched from their homes.
    page_fetches,
    /// Bytes of those pages.
    fetch_bytes,
    /// Twins made (HLRC, HLRC-AU).
    twins,
    /// Diffs computed at releases (HLRC, HLRC-AU).
    diffs_created,
    /// Bytes of changed words in those diffs.
    diff_bytes_created,
    /// Diffs applied to home pages here (HLRC).
    diffs_applied,
    /// Bytes of changed words applied.
    diff_bytes_applied,
    /// Write notices (page, interval) this node produced.
    write_notices_sent,
    /// Write notices this node received with grants and barriers.
    write_notices_received,
    /// Lock acquires served by a token already here.
    local_acquires,
    /// Lock acquires that needed messages.
    remote_acquires,
    /// Flag waits.
    flag_waits,
    /// Barriers.
    barriers,
    /// Time spent waiting in barriers (ns, virtual on sim).
    barrier_wait_ns,
    /// Messages sent that raise a notification at the receiver.
    notifications_sent,
    /// Deliberate-update messages sent (page replies, requests, grants, diffs, credits).
    messages,
    /// Bytes of those messages.
    message_bytes,
    /// Stores propagated through automatic-update bindings (AURC, HLRC-AU).
    au_stores,
    /// Bytes of those stores.
    au_bytes,
    /// Requests served here (page, lock and flag requests and forwards).
    requests_served,
    /// Time inside the protocol: faults, fetches, acquires, releases, barriers (ns). Off
    /// the simulator, a write fault that needs no fetch (a first write to a valid page) is
    /// counted in `write_faults` but not timed.
    protocol_ns,
}

impl Stats {
    /// One JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plain counters serialize")
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "faults r/w {}/{}, fetches {} ({} B), twins {}, diffs {} ({} B) applied {} ({} B), \
             notices out/in {}/{}, acquires local/remote {}/{}, barriers {} (wait {:.3} ms), \
             messages {} ({} B), notifications {}, AU stores {} ({} B), protocol {:.3} ms",
            self.read_faults,
            self.write_faults,
            self.page_fetches,
            self.fetch_bytes,
            self.twins,
            self.diffs_created,
            self.diff_bytes_created,
            self.diffs_applied,
            self.diff_bytes_applied,
            self.write_notices_sent,
            self.write_notices_received,
            self.local_acquires,
            self.remote_acquires,
            self.barriers,
            self.barrier_wait_ns as f64 / 1e6,
            self.messages,
            self.message_bytes,
            self.notifications_sent,
            self.au_stores,
            self.au_bytes,
            self.protocol_ns as f64 / 1e6,
        )
    }
}

/// The statistics of every node of a run, and their sum.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStats {
    /// Per node, by rank.
    pub nodes: Vec<Stats>,
    /// The sum over the nodes.
    pub total: Stats,
}

impl RunStats {
    /// Sums `nodes`.
    pub fn from_nodes(nodes: Vec<Stats>) -> RunStats {
        let mut total = Stats::default();
        for n in &nodes {
            total.add(n);
        }
        RunStats { nodes, total }
    }

    /// One JSON object.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plain counters serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_sum() {
        let a = Stats {
            read_faults: 3,
            protocol_ns: 9,
            ..Stats::default()
        };
        assert_eq!(Stats::from_words(&a.to_words()), a);
        assert_eq!(a.to_words().len(), Stats::FIELDS);
        let r = RunStats::from_nodes(vec![a, a]);
        assert_eq!(r.total.read_faults, 6);
        assert!(r.to_json().contains("\"read_faults\":6"));
    }
}
