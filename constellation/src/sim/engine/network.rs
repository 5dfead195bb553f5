//! The modelled network: how long a message or an input transfer takes
//! between two sites.
//!
//! Messages take the link's latency plus their size over its bandwidth;
//! they do not queue behind input transfers (they are small, and a real
//! transport interleaves them). Input transfers share the link's
//! bandwidth first come, first served, and none runs faster than the
//! link's per-transfer limit.

use super::Time;
use crate::sim::model::{nanos, Link, Model};

/// A link with its latency in nanoseconds.
#[derive(Clone, Copy)]
struct LinkNs {
    latency: Time,
    bandwidth: Option<f64>,
    per_transfer: Option<f64>,
}

impl From<Link> for LinkNs {
    fn from(link: Link) -> Self {
        LinkNs {
            latency: nanos(link.latency),
            bandwidth: link.bandwidth,
            per_transfer: link.per_transfer,
        }
    }
}

/// `bytes` at `rate` bytes per second, in nanoseconds (saturating: a
/// transfer too long to count never ends).
fn at_rate(bytes: u64, rate: f64) -> Time {
    (bytes as f64 / rate * 1e9).round() as Time
}

/// The links between every pair of sites, and how busy each is.
pub(super) struct Network {
    sites: usize,
    /// By `from * sites + to`.
    links: Vec<LinkNs>,
    /// Until when each link's bandwidth is taken by transfers, by the
    /// smaller site index times `sites` plus the larger: both directions
    /// share one budget.
    busy: Vec<Time>,
}

impl Network {
    /// The links of a validated model.
    pub(super) fn new(model: &Model) -> Self {
        let sites = model.sites.len();
        let mut links = vec![LinkNs::from(model.wide_area); sites * sites];
        for (index, site) in model.sites.iter().enumerate() {
            links[index * sites + index] = site.within.into();
        }
        for link in &model.site_links {
            links[link.a * sites + link.b] = link.link.into();
            links[link.b * sites + link.a] = link.link.into();
        }
        Network {
            sites,
            links,
            busy: vec![0; sites * sites],
        }
    }

    fn link(&self, from: usize, to: usize) -> LinkNs {
        self.links[from * self.sites + to]
    }

    /// The one-way latency from site `from` to `to`: how long a refused
    /// connection takes to say so.
    pub(super) fn latency(&self, from: usize, to: usize) -> Time {
        self.link(from, to).latency
    }

    /// How long a message of `bytes` takes from site `from` to `to`.
    pub(super) fn message_delay(&self, from: usize, to: usize, bytes: u64) -> Time {
        let link = self.link(from, to);
        (link.latency).saturating_add(link.bandwidth.map_or(0, |rate| at_rate(bytes, rate)))
    }

    /// How long a transfer of `bytes` from site `from` to `to` would take
    /// on an idle link: for choosing the nearest replica.
    pub(super) fn estimate(&self, from: usize, to: usize, bytes: u64) -> Time {
        let link = self.link(from, to);
        let rate = match (link.bandwidth, link.per_transfer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        link.latency
            .saturating_add(rate.map_or(0, |rate| at_rate(bytes, rate)))
    }

    /// The time a transfer of `bytes` from site `from` to `to` takes if it
    /// starts at `now`, taking its share of the link.
    pub(super) fn transfer(&mut self, from: usize, to: usize, bytes: u64, now: Time) -> Time {
        let link = self.link(from, to);
        let capped = link.per_transfer.map_or(0, |rate| at_rate(bytes, rate));
        let queued = match link.bandwidth {
            Some(rate) => {
                let shared = from.min(to) * self.sites + from.max(to);
                let start = self.busy[shared].max(now);
                self.busy[shared] = start.saturating_add(at_rate(bytes, rate));
                self.busy[shared] - now
            }
            None => 0,
        };
        link.latency.saturating_add(capped.max(queued))
    }
}
