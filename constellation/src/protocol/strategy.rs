//! Whom to ask for work, and when: victim choice for the three strategies,
//! and the throttle that keeps idle nodes from hammering their victims.
//!
//! No I/O and no clock: the driver passes `now` in, so the rules are tested
//! step by step.

use std::time::{Duration, Instant};

use rand::Rng;
use serde::{Deserialize, Serialize};

/// How an idle node finds work on other nodes. Work on its own node always
/// comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Ask the master, which holds the work. The master itself steals from nobody.
    MasterWorker,
    /// Ask a random member of the steal pool.
    #[default]
    Random,
    /// Ask a random member of the same site; when the site has run dry (a
    /// full round of empty replies), a random member anywhere.
    Hierarchical,
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "master-worker" | "master" => Ok(Strategy::MasterWorker),
            "random" => Ok(Strategy::Random),
            "hierarchical" | "site" => Ok(Strategy::Hierarchical),
            other => Err(format!(
                "unknown steal strategy {other:?}: use master-worker, random or hierarchical"
            )),
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Strategy::MasterWorker => "master-worker",
            Strategy::Random => "random",
            Strategy::Hierarchical => "hierarchical",
        })
    }
}

/// How many activities a hierarchical steal from another site asks for.
///
/// A steal within the site, and every steal under the other strategies,
/// asks for up to `max_steal`; this rule is only about work crossing
/// between sites, where taking too much carries a site's work away from
/// it and taking too little starves sites that stay dry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WideSteal {
    /// As many as the thief has idle executors for, doubled after each
    /// cross-site reply that came back full, and reset when work submitted
    /// on the own site is stolen again ([`Throttle::found_home_work`]): a
    /// site that is dry for a moment takes only what it can start, a site
    /// that stays dry soon takes batches. The default.
    #[default]
    Doubling,
    /// Always as many as the thief has idle executors for. Keeps work on
    /// its site, but with work at few sites of many it trickles out and
    /// the other sites starve.
    IdleExecutors,
    /// Up to `max_steal`, as within the site: sites that are dry only for
    /// a moment carry off half of another site's queue.
    MaxSteal,
}

impl std::str::FromStr for WideSteal {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "doubling" => Ok(WideSteal::Doubling),
            "idle-executors" | "idle" => Ok(WideSteal::IdleExecutors),
            "max-steal" | "max" => Ok(WideSteal::MaxSteal),
            other => Err(format!(
                "unknown wide-area steal size {other:?}: use doubling, idle-executors or max-steal"
            )),
        }
    }
}

impl std::fmt::Display for WideSteal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WideSteal::Doubling => "doubling",
            WideSteal::IdleExecutors => "idle-executors",
            WideSteal::MaxSteal => "max-steal",
        })
    }
}

/// A member that could be asked for work, as the victim choice sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<P> {
    /// How the driver names it.
    pub peer: P,
    /// Whether it is on this node's site.
    pub same_site: bool,
    /// Whether it is the pool's master.
    pub master: bool,
}

/// The members an idle node may ask, grouped the way victim choice needs
/// them: those on its own site, those elsewhere, and the master. Indexing
/// instead of a list lets a caller with many members choose in constant time.
pub trait Victims<P> {
    /// How many members share this node's site.
    fn on_site_count(&self) -> usize;
    /// The member on this node's site numbered `index` (below
    /// [`on_site_count`](Self::on_site_count)); its `same_site` is `true`.
    fn on_site(&self, index: usize) -> Candidate<P>;
    /// How many members are on other sites.
    fn away_count(&self) -> usize;
    /// The member elsewhere numbered `index` (below
    /// [`away_count`](Self::away_count)); its `same_site` is `false`.
    fn away(&self, index: usize) -> Candidate<P>;
    /// The master, if it may be asked.
    fn master(&self) -> Option<Candidate<P>>;
}

/// A list of candidates split by site, for [`Throttle::choose`].
struct Split<P> {
    site: Vec<Candidate<P>>,
    away: Vec<Candidate<P>>,
    master: Option<Candidate<P>>,
}

impl<P: Copy> Split<P> {
    fn of(candidates: &[Candidate<P>]) -> Self {
        Split {
            site: candidates.iter().filter(|c| c.same_site).copied().collect(),
            away: candidates
                .iter()
                .filter(|c| !c.same_site)
                .copied()
                .collect(),
            master: candidates.iter().find(|c| c.master).copied(),
        }
    }
}

impl<P: Copy> Victims<P> for Split<P> {
    fn on_site_count(&self) -> usize {
        self.site.len()
    }
    fn on_site(&self, index: usize) -> Candidate<P> {
        self.site[index]
    }
    fn away_count(&self) -> usize {
        self.away.len()
    }
    fn away(&self, index: usize) -> Candidate<P> {
        self.away[index]
    }
    fn master(&self) -> Option<Candidate<P>> {
        self.master
    }
}

/// The shortest wait after a round of empty replies.
pub const MIN_BACKOFF: Duration = Duration::from_millis(1);
/// The longest wait after rounds of empty replies.
pub const MAX_BACKOFF: Duration = Duration::from_millis(50);

/// The steal state of one executor context on this node: at most one
/// request in flight, and a growing pause after full rounds of empty replies.
#[derive(Debug, Clone)]
pub struct Throttle {
    in_flight: bool,
    /// Empty replies in a row since the last loot.
    misses: usize,
    /// Empty replies in a row from this node's site.
    site_misses: usize,
    backoff: Duration,
    not_before: Option<Instant>,
    min_backoff: Duration,
    max_backoff: Duration,
    /// How many activities the request in flight asked for, if it went to
    /// another site under hierarchical stealing.
    wide_ask: Option<usize>,
    /// Full cross-site replies since work of the own site was last found:
    /// the next cross-site request asks for 2^this times the idle executors.
    wide_doublings: u32,
}

/// The most doublings of a cross-site batch; `max_steal` caps it anyway.
const MAX_WIDE_DOUBLINGS: u32 = 20;

impl Default for Throttle {
    fn default() -> Self {
        Throttle::with_backoff(MIN_BACKOFF, MAX_BACKOFF)
    }
}

impl Throttle {
    /// A throttle whose pauses run from `min` to `max` instead of
    /// [`MIN_BACKOFF`] to [`MAX_BACKOFF`]: the simulator replaying an
    /// emulated run at a scaled clock stretches them by the scale, because
    /// the real runtime's pauses do not shrink with the emulated clock.
    pub fn with_backoff(min: Duration, max: Duration) -> Self {
        Throttle {
            in_flight: false,
            misses: 0,
            site_misses: 0,
            backoff: Duration::ZERO,
            not_before: None,
            min_backoff: min,
            max_backoff: max.max(min),
            wide_ask: None,
            wide_doublings: 0,
        }
    }

    /// Whether a request may go out now.
    pub fn may_steal(&self, now: Instant) -> bool {
        !self.in_flight && self.not_before.is_none_or(|at| now >= at)
    }

    /// When a request may go out again, if it is waiting out a backoff.
    pub fn retry_at(&self) -> Option<Instant> {
        (!self.in_flight).then_some(self.not_before).flatten()
    }

    /// Chooses whom to ask, or `None` if nobody may be asked; marks the
    /// request in flight if there is a victim.
    pub fn choose<P: Copy, R: Rng>(
        &mut self,
        strategy: Strategy,
        candidates: &[Candidate<P>],
        rng: &mut R,
    ) -> Option<Candidate<P>> {
        let split = Split::of(candidates);
        self.choose_from(strategy, &split, rng)
    }

    /// [`choose`](Self::choose) over members already grouped by site, so
    /// that choosing costs the same however many members there are; the
    /// simulator keeps thousands of nodes grouped this way.
    pub fn choose_from<P: Copy, V: Victims<P> + ?Sized, R: Rng>(
        &mut self,
        strategy: Strategy,
        victims: &V,
        rng: &mut R,
    ) -> Option<Candidate<P>> {
        let site = |index| victims.on_site(index);
        let away = |index| victims.away(index);
        let (on_site, off_site) = (victims.on_site_count(), victims.away_count());
        let victim = match strategy {
            Strategy::MasterWorker => victims.master(),
            Strategy::Random => {
                let all = on_site + off_site;
                (all > 0).then(|| {
                    let index = rng.gen_range(0..all);
                    if index < on_site {
                        site(index)
                    } else {
                        away(index - on_site)
                    }
                })
            }
            Strategy::Hierarchical => {
                if on_site > 0 && self.site_misses < on_site {
                    Some(site(rng.gen_range(0..on_site)))
                } else if off_site > 0 {
                    Some(away(rng.gen_range(0..off_site)))
                } else if on_site > 0 {
                    Some(site(rng.gen_range(0..on_site)))
                } else {
                    None
                }
            }
        }?;
        self.in_flight = true;
        Some(victim)
    }

    /// How many activities to ask `victim` (just chosen) for, on behalf of
    /// `idle` idle executors, when one reply may carry `max_steal`;
    /// remembered for [`replied`](Self::replied).
    pub fn ask<P>(
        &mut self,
        strategy: Strategy,
        wide: WideSteal,
        victim: &Candidate<P>,
        idle: usize,
        max_steal: usize,
    ) -> usize {
        let max_steal = max_steal.max(1);
        if strategy != Strategy::Hierarchical || victim.same_site {
            self.wide_ask = None;
            return max_steal;
        }
        let idle = idle.max(1);
        let size = match wide {
            WideSteal::IdleExecutors => idle.min(max_steal),
            WideSteal::MaxSteal => max_steal,
            WideSteal::Doubling => idle.saturating_mul(1 << self.wide_doublings).min(max_steal),
        };
        self.wide_ask = Some(size);
        size
    }

    /// The reply to the request in flight came from `victim` with `loot`
    /// activities (zero if the request failed). `round` is how many
    /// victims there are to try before backing off.
    pub fn replied<P>(&mut self, victim: &Candidate<P>, loot: usize, round: usize, now: Instant) {
        self.in_flight = false;
        if self.wide_ask.take().is_some_and(|asked| loot >= asked) {
            // The victim had at least twice as much (replies carry at most
            // half a queue) and this site is still dry: ask for more.
            self.wide_doublings = (self.wide_doublings + 1).min(MAX_WIDE_DOUBLINGS);
        }
        if loot > 0 {
            self.misses = 0;
            self.site_misses = 0;
            self.backoff = Duration::ZERO;
            self.not_before = None;
            return;
        }
        self.misses += 1;
        if victim.same_site {
            self.site_misses += 1;
        }
        if self.misses >= round.max(1) {
            // A full round came back empty: pause, longer each time, and
            // then start over with the own site.
            self.misses = 0;
            self.site_misses = 0;
            self.backoff = (self.backoff * 2).clamp(self.min_backoff, self.max_backoff);
            self.not_before = Some(now + self.backoff);
        }
    }

    /// Work that was submitted on this node's site reached it by a steal:
    /// the site has work of its own again, so the next time it runs dry may
    /// be a moment's gap, and crossing starts small again. Work that came
    /// from another site does not count: a site that lives on imports has
    /// stayed dry, however often its nodes share those imports.
    pub fn found_home_work(&mut self) {
        self.wide_doublings = 0;
    }

    /// Forgets the request in flight without counting it (its victim is gone).
    pub fn abandon(&mut self) {
        self.in_flight = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn member(peer: u32, same_site: bool, master: bool) -> Candidate<u32> {
        Candidate {
            peer,
            same_site,
            master,
        }
    }

    #[test]
    fn one_request_in_flight_per_context() {
        let mut throttle = Throttle::default();
        let mut rng = StdRng::seed_from_u64(1);
        let now = Instant::now();
        let candidates = [member(1, false, false), member(2, false, false)];
        assert!(throttle.may_steal(now));
        let victim = throttle
            .choose(Strategy::Random, &candidates, &mut rng)
            .unwrap();
        assert!(!throttle.may_steal(now));
        throttle.replied(&victim, 3, 2, now);
        assert!(throttle.may_steal(now));
    }

    #[test]
    fn backs_off_after_a_full_round_of_empty_replies_and_grows() {
        let mut throttle = Throttle::default();
        let mut rng = StdRng::seed_from_u64(2);
        let now = Instant::now();
        let candidates = [member(1, false, false), member(2, false, false)];
        let v = throttle
            .choose(Strategy::Random, &candidates, &mut rng)
            .unwrap();
        throttle.replied(&v, 0, 2, now);
        assert!(
            throttle.may_steal(now),
            "one empty reply of a round of two: try another"
        );
        let v = throttle
            .choose(Strategy::Random, &candidates, &mut rng)
            .unwrap();
        throttle.replied(&v, 0, 2, now);
        assert!(!throttle.may_steal(now));
        assert_eq!(throttle.retry_at(), Some(now + MIN_BACKOFF));
        let later = now + MIN_BACKOFF;
        for _ in 0..2 {
            let v = throttle
                .choose(Strategy::Random, &candidates, &mut rng)
                .unwrap();
            throttle.replied(&v, 0, 2, later);
        }
        assert_eq!(throttle.retry_at(), Some(later + 2 * MIN_BACKOFF));
        for _ in 0..40 {
            let at = throttle.retry_at().unwrap();
            let v = throttle
                .choose(Strategy::Random, &candidates, &mut rng)
                .unwrap();
            throttle.replied(&v, 0, 1, at);
        }
        let at = throttle.retry_at().unwrap();
        let v = throttle
            .choose(Strategy::Random, &candidates, &mut rng)
            .unwrap();
        throttle.replied(&v, 0, 1, at);
        assert_eq!(throttle.retry_at(), Some(at + MAX_BACKOFF), "capped");
        let v = throttle
            .choose(Strategy::Random, &candidates, &mut rng)
            .unwrap();
        throttle.replied(&v, 5, 1, at);
        assert!(throttle.may_steal(at), "loot resets the backoff");
    }

    #[test]
    fn master_worker_asks_only_the_master() {
        let mut rng = StdRng::seed_from_u64(3);
        let candidates = [
            member(1, false, false),
            member(2, false, true),
            member(3, false, false),
        ];
        for _ in 0..20 {
            let mut throttle = Throttle::default();
            let v = throttle
                .choose(Strategy::MasterWorker, &candidates, &mut rng)
                .unwrap();
            assert_eq!(v.peer, 2);
        }
        let mut throttle = Throttle::default();
        assert!(throttle
            .choose(Strategy::MasterWorker, &candidates[..1], &mut rng)
            .is_none());
        assert!(
            throttle.may_steal(Instant::now()),
            "no victim, nothing in flight"
        );
    }

    #[test]
    fn hierarchical_stays_on_the_site_until_a_round_there_comes_back_empty() {
        let mut rng = StdRng::seed_from_u64(4);
        let now = Instant::now();
        let candidates = [
            member(1, true, false),
            member(2, true, false),
            member(3, false, false),
            member(4, false, false),
        ];
        let mut throttle = Throttle::default();
        for _ in 0..50 {
            let v = throttle
                .choose(Strategy::Hierarchical, &candidates, &mut rng)
                .unwrap();
            assert!(v.same_site);
            throttle.replied(&v, 1, 4, now);
        }
        let v = throttle
            .choose(Strategy::Hierarchical, &candidates, &mut rng)
            .unwrap();
        throttle.replied(&v, 0, 4, now);
        let v = throttle
            .choose(Strategy::Hierarchical, &candidates, &mut rng)
            .unwrap();
        assert!(v.same_site, "one empty site reply of two");
        throttle.replied(&v, 0, 4, now);
        let v = throttle
            .choose(Strategy::Hierarchical, &candidates, &mut rng)
            .unwrap();
        assert!(!v.same_site, "the site ran dry: go wide");
        throttle.replied(&v, 2, 4, now);
        let v = throttle
            .choose(Strategy::Hierarchical, &candidates, &mut rng)
            .unwrap();
        assert!(v.same_site, "loot resets: back to the site first");
    }

    #[test]
    fn a_cross_site_batch_doubles_while_the_site_stays_dry_and_resets_on_home_work() {
        let now = Instant::now();
        let (near, far) = (member(1, true, false), member(2, false, false));
        let mut throttle = Throttle::default();
        let ask = |throttle: &mut Throttle, victim: &Candidate<u32>| {
            throttle.ask(Strategy::Hierarchical, WideSteal::Doubling, victim, 4, 64)
        };
        assert_eq!(
            ask(&mut throttle, &near),
            64,
            "within the site: a full batch"
        );
        throttle.replied(&near, 0, 2, now);
        assert_eq!(
            ask(&mut throttle, &far),
            4,
            "first crossing: what 4 idle executors start"
        );
        throttle.replied(&far, 4, 2, now);
        assert_eq!(
            ask(&mut throttle, &far),
            8,
            "a full reply: the site is still dry"
        );
        throttle.replied(&far, 8, 2, now);
        assert_eq!(ask(&mut throttle, &far), 16);
        throttle.replied(&far, 5, 2, now);
        assert_eq!(
            ask(&mut throttle, &far),
            16,
            "a partial reply keeps the size"
        );
        throttle.replied(&far, 0, 2, now);
        assert_eq!(ask(&mut throttle, &far), 16, "so does an empty one");
        for _ in 0..5 {
            throttle.replied(&far, 64, 2, now);
            ask(&mut throttle, &far);
        }
        assert_eq!(ask(&mut throttle, &far), 64, "capped at max_steal");
        throttle.replied(&far, 64, 2, now);
        ask(&mut throttle, &near);
        throttle.replied(&near, 9, 2, now);
        assert_eq!(
            ask(&mut throttle, &far),
            64,
            "imports shared within the site: it is still dry"
        );
        throttle.replied(&far, 0, 2, now);
        throttle.found_home_work();
        assert_eq!(
            ask(&mut throttle, &far),
            4,
            "work of the own site starts over"
        );
    }

    #[test]
    fn only_hierarchical_cross_site_steals_are_sized_by_the_rule() {
        let (near, far) = (member(1, true, false), member(2, false, true));
        let mut throttle = Throttle::default();
        for strategy in [Strategy::Random, Strategy::MasterWorker] {
            assert_eq!(
                throttle.ask(strategy, WideSteal::Doubling, &far, 3, 256),
                256
            );
        }
        assert_eq!(
            throttle.ask(
                Strategy::Hierarchical,
                WideSteal::IdleExecutors,
                &far,
                3,
                256
            ),
            3
        );
        assert_eq!(
            throttle.ask(Strategy::Hierarchical, WideSteal::MaxSteal, &far, 3, 256),
            256
        );
        assert_eq!(
            throttle.ask(
                Strategy::Hierarchical,
                WideSteal::IdleExecutors,
                &near,
                3,
                256
            ),
            256
        );
        assert_eq!(
            throttle.ask(Strategy::Hierarchical, WideSteal::IdleExecutors, &far, 0, 0),
            1,
            "never a request for nothing"
        );
    }

    #[test]
    fn wide_steal_names_parse_and_print() {
        for wide in [
            WideSteal::Doubling,
            WideSteal::IdleExecutors,
            WideSteal::MaxSteal,
        ] {
            assert_eq!(wide.to_string().parse::<WideSteal>().unwrap(), wide);
        }
        assert!("lots"
            .parse::<WideSteal>()
            .unwrap_err()
            .contains("doubling"));
    }

    #[test]
    fn strategy_names_parse_and_print() {
        for strategy in [
            Strategy::MasterWorker,
            Strategy::Random,
            Strategy::Hierarchical,
        ] {
            assert_eq!(strategy.to_string().parse::<Strategy>().unwrap(), strategy);
        }
        assert!("fastest"
            .parse::<Strategy>()
            .unwrap_err()
            .contains("master-worker"));
    }
}
