//! Master-worker, random and hierarchical stealing side by side on the
//! same pool and the same bag of work.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::model::{AnswerCost, Link, Model, NodeSpec, Site};
use super::report::SimReport;
use super::workload::{ActivitySpec, Kind, Workload};
use super::{simulate, SimError};
use crate::context::{Context, ContextList, ExecutorContext};
use crate::protocol::strategy::{Strategy, WideSteal};

/// A pool and a bag of work to compare the strategies on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonSetup {
    /// Executors in all; nodes get `executors_per_node` each (the last fewer).
    pub executors: usize,
    /// Executors per node.
    pub executors_per_node: usize,
    /// Sites; nodes are dealt to them in turn.
    pub sites: usize,
    /// Activities in the bag, all submitted at the master (node 0, site 0)
    /// unless [`every_site`](Self::every_site) says otherwise.
    pub activities: usize,
    /// Whether every site starts with an equal share of the bag, as when
    /// each site holds its own data, instead of all of it at the master. A
    /// seeding activity per site, which only that site's executors run
    /// (they offer `site:N` before `anywhere`), submits the site's share
    /// there; the shares are stealable like the rest.
    #[serde(default)]
    pub every_site: bool,
    /// Mean seconds per activity; each takes 0.5 to 1.5 times the mean.
    pub mean_seconds: f64,
    /// The link within each site.
    pub within: Link,
    /// The link between sites.
    pub wide_area: Link,
    /// The most activities one steal reply carries.
    pub max_steal: usize,
    /// How much a hierarchical steal from another site asks for.
    #[serde(default)]
    pub wide_steal: WideSteal,
    /// What answering a steal request costs a victim.
    #[serde(default)]
    pub answer_cost: AnswerCost,
    /// Seed for the durations and the runs.
    pub seed: u64,
}

impl ComparisonSetup {
    /// `executors` in nodes of 8 over `sites` sites, with 100 activities
    /// of 1 s (on average) per executor, cluster links within sites and
    /// wide-area links between them.
    pub fn new(executors: usize, sites: usize) -> Self {
        ComparisonSetup {
            executors,
            executors_per_node: 8,
            sites,
            activities: executors * 100,
            every_site: false,
            mean_seconds: 1.0,
            within: Link::cluster(),
            wide_area: Link::wide_area(),
            max_steal: 256,
            wide_steal: WideSteal::default(),
            answer_cost: AnswerCost::default(),
            seed: 1,
        }
    }

    /// The model of the pool under `strategy`.
    pub fn model(&self, strategy: Strategy) -> Model {
        let per_node = self.executors_per_node.max(1);
        let sites: Vec<Site> = (0..self.sites.max(1))
            .map(|index| Site {
                name: format!("site{index}"),
                within: self.within,
            })
            .collect();
        let mut nodes = Vec::new();
        let mut left = self.executors;
        while left > 0 {
            let count = left.min(per_node);
            left -= count;
            let index = nodes.len();
            let site = index % sites.len();
            let context = if self.every_site {
                ExecutorContext::new([site_context(site), Context::anywhere()])
            } else {
                ExecutorContext::anywhere()
            };
            nodes.push(NodeSpec::uniform(
                format!("node{index}"),
                site,
                count,
                context,
            ));
        }
        let mut model = Model::new(sites, nodes)
            .with_strategy(strategy)
            .with_seed(self.seed);
        model.wide_area = self.wide_area;
        model.max_steal = self.max_steal;
        model.wide_steal = self.wide_steal;
        model.answer_cost = self.answer_cost;
        model
    }

    /// The bag of work: durations drawn from the seed, so every strategy
    /// gets the same bag.
    pub fn workload(&self) -> Workload {
        let mut workload = Workload::new();
        let kind = workload.add_kind(Kind::new("task"));
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut tasks = (0..self.activities).map(|_| {
            let seconds = self.mean_seconds * rng.gen_range(0.5..1.5);
            ActivitySpec::new(kind, seconds).with_contexts(ContextList::anywhere())
        });
        if !self.every_site {
            for task in tasks {
                workload.add_root(task);
            }
            return workload;
        }
        let seed_kind = workload.add_kind(Kind::new("seed"));
        let sites = self.sites.max(1);
        for site in 0..sites {
            // Shares differ by at most one activity.
            let share = self.activities / sites + usize::from(site < self.activities % sites);
            let children: Vec<u32> = (tasks.by_ref().take(share))
                .map(|task| workload.add(task))
                .collect();
            let contexts = ContextList::any_of([site_context(site)]);
            workload.add_root(
                ActivitySpec::new(seed_kind, 0.0)
                    .with_contexts(contexts)
                    .with_stage(children),
            );
        }
        workload
    }
}

/// The context only the executors of `site` offer in an
/// [`every_site`](ComparisonSetup::every_site) setup.
fn site_context(site: usize) -> Context {
    Context::new(&format!("site:{site}"))
}

/// One strategy's figures on one setup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRow {
    /// What the table calls the row: the strategy's name unless a caller
    /// says otherwise (for a what-if run).
    pub label: String,
    /// The strategy.
    pub strategy: Strategy,
    /// Executors in all.
    pub executors: usize,
    /// Nodes.
    pub nodes: usize,
    /// Sites.
    pub sites: usize,
    /// Activities.
    pub activities: usize,
    /// Seconds until the last activity finished.
    pub makespan: f64,
    /// Total work over executors: the makespan of a perfect spread.
    pub ideal: f64,
    /// `ideal / makespan`.
    pub efficiency: f64,
    /// Steal requests per activity.
    pub steals_per_activity: f64,
    /// Steal requests the master answered.
    pub master_load: u64,
    /// The most steal requests one node answered.
    pub busiest_victim: u64,
    /// The share of the makespan the master spent answering steal requests
    /// (zero unless the model gives answering a cost); near 1, it saturates.
    #[serde(default)]
    pub master_busy: f64,
    /// Messages of the work between sites per activity: steal requests,
    /// their replies and notices. Membership (SWIM and hellos) is not
    /// counted: it grows with nodes and time, not with the work.
    pub wide_area_per_activity: f64,
    /// Activities handed from one site to another, per activity: work
    /// that crossed the wide area, some of it more than once.
    #[serde(default)]
    pub wide_area_moved_per_activity: f64,
    /// Simulator events processed.
    pub events: u64,
}

impl ComparisonRow {
    /// The row for a run of `setup`'s workload on `model`.
    pub fn from_report(setup: &ComparisonSetup, model: &Model, report: &SimReport) -> Self {
        let executors = model.executor_count();
        let ideal = report.work / executors.max(1) as f64;
        let activities = report.completed.max(1) as f64;
        ComparisonRow {
            label: report.strategy.to_string(),
            strategy: report.strategy,
            executors,
            nodes: model.nodes.len(),
            sites: model.sites.len(),
            activities: setup.activities,
            makespan: report.makespan,
            ideal,
            efficiency: if report.makespan > 0.0 {
                ideal / report.makespan
            } else {
                0.0
            },
            steals_per_activity: report.messages.steal_requests as f64 / activities,
            master_load: report.master_load,
            busiest_victim: report.busiest_victim,
            master_busy: match report.nodes.get(report.master as usize) {
                Some(master) if report.makespan > 0.0 => master.answering / report.makespan,
                _ => 0.0,
            },
            wide_area_per_activity: (report.messages.wide_area
                - report.messages.wide_area_membership) as f64
                / activities,
            wide_area_moved_per_activity: report.messages.wide_area_moved as f64 / activities,
            events: report.events,
        }
    }

    /// The rows as a plain-text table with a header line.
    pub fn table(rows: &[ComparisonRow]) -> String {
        let mut out = format!(
            "{:<18} {:>9} {:>6} {:>5} {:>10} {:>10} {:>10} {:>6} {:>12} {:>11} {:>11} {:>11} {:>11} {:>12}\n",
            "strategy",
            "executors",
            "nodes",
            "sites",
            "activities",
            "makespan_s",
            "ideal_s",
            "eff",
            "steals/act",
            "master_load",
            "busiest",
            "master_busy",
            "wan_msg/act",
            "wan_moved/act"
        );
        for row in rows {
            out.push_str(&format!(
                "{:<18} {:>9} {:>6} {:>5} {:>10} {:>10.2} {:>10.2} {:>6.3} {:>12.4} {:>11} {:>11} {:>11.3} {:>11.4} {:>12.4}\n",
                row.label,
                row.executors,
                row.nodes,
                row.sites,
                row.activities,
                row.makespan,
                row.ideal,
                row.efficiency,
                row.steals_per_activity,
                row.master_load,
                row.busiest_victim,
                row.master_busy,
                row.wide_area_per_activity,
                row.wide_area_moved_per_activity,
            ));
        }
        out
    }
}

/// Runs the setup's bag under one strategy.
pub fn compare_one(setup: &ComparisonSetup, strategy: Strategy) -> Result<ComparisonRow, SimError> {
    let model = setup.model(strategy);
    let report = simulate(&model, &setup.workload())?;
    Ok(ComparisonRow::from_report(setup, &model, &report))
}

/// Runs the setup's bag under master-worker, random and hierarchical
/// stealing, in that order.
pub fn compare_strategies(setup: &ComparisonSetup) -> Result<Vec<ComparisonRow>, SimError> {
    [
        Strategy::MasterWorker,
        Strategy::Random,
        Strategy::Hierarchical,
    ]
    .into_iter()
    .map(|strategy| compare_one(setup, strategy))
    .collect()
}

/// Runs the setup's bag under hierarchical stealing with another rule for
/// steals between sites, as a row labelled `hier-RULE`.
pub fn compare_wide_steal(
    setup: &ComparisonSetup,
    wide_steal: WideSteal,
) -> Result<ComparisonRow, SimError> {
    let setup = ComparisonSetup {
        wide_steal,
        ..setup.clone()
    };
    let mut row = compare_one(&setup, Strategy::Hierarchical)?;
    row.label = format!("hier-{wide_steal}");
    Ok(row)
}
