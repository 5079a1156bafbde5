//! Statistics per node and per run.

use serde::Serialize;

/// What one node's network interface and CPU did.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct NodeStats {
    /// Packets that left the outgoing FIFO.
    pub packets_out: u64,
    /// Bytes of data in them (headers excluded).
    pub bytes_out: u64,
    /// Packets written to memory by the incoming DMA engine.
    pub packets_in: u64,
    /// Bytes of data in them.
    pub bytes_in: u64,
    /// Deliberate updates (messages) sent.
    pub du_messages: u64,
    /// Deliberate-update engine initiations (a message is split at page boundaries).
    pub du_initiations: u64,
    /// Words stored into automatic-update memory.
    pub au_stores: u64,
    /// Automatic-update packets sent.
    pub au_packets: u64,
    /// Notifications delivered to this node.
    pub notifications: u64,
    /// Interrupts taken by this node (notifications, threshold, per-message switch).
    pub interrupts: u64,
    /// Outgoing-FIFO threshold interrupts (automatic-update writers de-scheduled).
    pub fifo_threshold_events: u64,
    /// Largest outgoing-FIFO occupancy seen, in bytes.
    pub fifo_max_bytes: u64,
    /// System calls made for sends (the syscall-per-send switch).
    pub syscalls: u64,
    /// Packets refused by the incoming page table (receive path frozen).
    pub ipt_violations: u64,
    /// Access faults of shared virtual memory charged ([`vmmc::pace::Cost::AccessFault`]).
    pub access_faults: u64,
    /// Virtual time spent blocked: polling, waiting for the DMA engine, FIFO stalls.
    pub blocked_ns: u64,
    /// Virtual time charged for computation between library calls.
    pub compute_ns: u64,
    /// The node's clock when it finished.
    pub end_ns: u64,
}

impl NodeStats {
    /// Stores per automatic-update packet (1.0 without combining).
    pub fn combining_ratio(&self) -> f64 {
        if self.au_packets == 0 {
            0.0
        } else {
            self.au_stores as f64 / self.au_packets as f64
        }
    }

    pub(crate) fn add(&mut self, o: &NodeStats) {
        self.packets_out += o.packets_out;
        self.bytes_out += o.bytes_out;
        self.packets_in += o.packets_in;
        self.bytes_in += o.bytes_in;
        self.du_messages += o.du_messages;
        self.du_initiations += o.du_initiations;
        self.au_stores += o.au_stores;
        self.au_packets += o.au_packets;
        self.notifications += o.notifications;
        self.interrupts += o.interrupts;
        self.fifo_threshold_events += o.fifo_threshold_events;
        self.fifo_max_bytes = self.fifo_max_bytes.max(o.fifo_max_bytes);
        self.syscalls += o.syscalls;
        self.ipt_violations += o.ipt_violations;
        self.access_faults += o.access_faults;
        self.blocked_ns += o.blocked_ns;
        self.compute_ns += o.compute_ns;
        self.end_ns = self.end_ns.max(o.end_ns);
    }
}

/// Statistics of a whole run.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RunStats {
    /// Per node, by rank.
    pub nodes: Vec<NodeStats>,
    /// Sums over the nodes (`fifo_max_bytes` and `end_ns`: the maximum).
    pub total: NodeStats,
    /// `total.au_stores / total.au_packets`.
    pub combining_ratio: f64,
}

impl RunStats {
    pub(crate) fn from_nodes(nodes: Vec<NodeStats>) -> RunStats {
        let mut total = NodeStats::default();
        for n in &nodes {
            total.add(n);
        }
        let combining_ratio = total.combining_ratio();
        RunStats {
            nodes,
            total,
            combining_ratio,
        }
    }
}
