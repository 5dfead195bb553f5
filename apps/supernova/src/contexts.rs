//! The context strategies of the Constellation paper's Table 1: which labels
//! a pair's activities carry and which its executors offer. Choosing one is
//! a command-line flag; the pipeline's code does not change.

use std::fmt;
use std::str::FromStr;

use constellation::{Context, ContextList, ExecutorContext, Preference};
use serde::{Deserialize, Serialize};

use crate::manifest::PairEntry;

/// How pairs are matched to executors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// Every activity `anywhere`: random order on any executor; data
    /// that is not local is copied over the wide-area link.
    Anywhere,
    /// `anywhere` ranked by size; executors take the largest first.
    AnywhereSorted,
    /// The first site holding the pair: it runs only there.
    Location,
    /// The first site holding the pair, ranked by size, largest first.
    LocationSorted,
    /// Any site holding the pair (the data is partly replicated), ranked
    /// by size.
    Locations,
    /// Any site holding the pair, ranked by size; executors take local
    /// pairs first and any other pair when none is left.
    LocationsAnywhere,
}

impl Placement {
    /// Every strategy, in the order of the paper's table.
    pub const ALL: [Placement; 6] = [
        Placement::Anywhere,
        Placement::AnywhereSorted,
        Placement::Location,
        Placement::LocationSorted,
        Placement::Locations,
        Placement::LocationsAnywhere,
    ];

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Anywhere => "anywhere",
            Placement::AnywhereSorted => "anywhere-sorted",
            Placement::Location => "location",
            Placement::LocationSorted => "location-sorted",
            Placement::Locations => "locations",
            Placement::LocationsAnywhere => "locations-anywhere",
        }
    }

    /// Whether executors belong to sites under this strategy.
    pub fn uses_sites(self) -> bool {
        !matches!(self, Placement::Anywhere | Placement::AnywhereSorted)
    }

    fn sorted(self) -> bool {
        !matches!(self, Placement::Anywhere | Placement::Location)
    }

    /// The context of every activity working on `pair`.
    pub fn activity_context(self, pair: &PairEntry) -> ContextList {
        let ranked = |context: Context| {
            if self.sorted() {
                context.with_rank(size_rank(pair))
            } else {
                context
            }
        };
        let site = |name: &String| ranked(Context::new(&site_label(name)));
        match self {
            Placement::Anywhere | Placement::AnywhereSorted => {
                ContextList::single(ranked(Context::anywhere()))
            }
            Placement::Location | Placement::LocationSorted => match pair.sites.first() {
                Some(first) => ContextList::single(site(first)),
                None => ContextList::single(ranked(Context::anywhere())),
            },
            Placement::Locations => ContextList::any_of(pair.sites.iter().map(site)),
            Placement::LocationsAnywhere => ContextList::any_of(
                pair.sites
                    .iter()
                    .map(site)
                    .chain([ranked(Context::anywhere())]),
            ),
        }
    }

    /// The context of an executor at `site` (`None`: it has no site).
    pub fn executor_context(self, site: Option<&str>) -> ExecutorContext {
        let mut contexts = Vec::new();
        if let (true, Some(site)) = (self.uses_sites(), site) {
            contexts.push(Context::new(&site_label(site)));
        }
        if matches!(
            self,
            Placement::Anywhere | Placement::AnywhereSorted | Placement::LocationsAnywhere
        ) {
            contexts.push(Context::anywhere());
        }
        let context = ExecutorContext::new(contexts);
        if self.sorted() {
            context.with_preference(Preference::Biggest)
        } else {
            context
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Placement {
    type Err = String;

    fn from_str(text: &str) -> Result<Placement, String> {
        Placement::ALL
            .into_iter()
            .find(|p| p.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Placement::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "unknown placement `{text}`; choose one of {}",
                    names.join(", ")
                )
            })
    }
}

/// The label of a site: `site:<name>`.
pub fn site_label(site: &str) -> String {
    format!("site:{site}")
}

/// The site in an executor's labels (`site:<name>`), if any.
pub fn site_of(executor: &ExecutorContext) -> Option<String> {
    executor.contexts.iter().find_map(|c| {
        let name = c.label.name();
        name.strip_prefix("site:").map(str::to_string)
    })
}

/// A pair's size rank: its pixel count in kilopixels, so larger pairs rank
/// higher.
pub fn size_rank(pair: &PairEntry) -> i64 {
    ((pair.width * pair.height) / 1000) as i64
}

/// Where step 7.2's numeric work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Engine {
    /// On the CPU, inside the compare activity.
    Cpu,
    /// On a GPU executor, as an activity labelled `gpu`.
    Gpu,
}

impl FromStr for Engine {
    type Err = String;

    fn from_str(text: &str) -> Result<Engine, String> {
        match text.to_ascii_lowercase().as_str() {
            "cpu" => Ok(Engine::Cpu),
            "gpu" => Ok(Engine::Gpu),
            _ => Err(format!(
                "unknown device `{text}` for step 7.2: say cpu or gpu"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(sites: &[&str]) -> PairEntry {
        PairEntry {
            id: "pair-0001".into(),
            width: 1000,
            height: 812,
            bytes: 0,
            sites: sites.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn table_one_contexts_read_as_the_paper_writes_them() {
        let p = pair(&["vu3", "vu4"]);
        let text = |placement: Placement| placement.activity_context(&p).to_string();
        assert_eq!(text(Placement::Anywhere), "anywhere");
        assert_eq!(text(Placement::AnywhereSorted), "anywhere=812");
        assert_eq!(text(Placement::Location), "site:vu3");
        assert_eq!(text(Placement::LocationSorted), "site:vu3=812");
        assert_eq!(text(Placement::Locations), "site:vu3=812 | site:vu4=812");
        assert_eq!(
            text(Placement::LocationsAnywhere),
            "site:vu3=812 | site:vu4=812 | anywhere=812"
        );
    }

    #[test]
    fn executors_serve_their_site_first_and_elsewhere_only_when_told() {
        let p = pair(&["lu", "uva"]);
        let at = |placement: Placement, site: &str| {
            placement
                .executor_context(Some(site))
                .priority_of(&placement.activity_context(&p))
        };
        assert_eq!(at(Placement::Location, "lu"), Some(0));
        assert_eq!(at(Placement::Location, "uva"), None);
        assert_eq!(at(Placement::Locations, "uva"), Some(0));
        assert_eq!(at(Placement::Locations, "vu4"), None);
        assert_eq!(at(Placement::LocationsAnywhere, "uva"), Some(0));
        assert_eq!(at(Placement::LocationsAnywhere, "vu4"), Some(1));
        assert_eq!(at(Placement::Anywhere, "vu4"), Some(0));
    }

    #[test]
    fn unknown_names_list_the_choices() {
        let error = "nearby".parse::<Placement>().unwrap_err();
        assert!(error.contains("locations-anywhere"), "{error}");
        assert!("GPU".parse::<Engine>().is_ok());
        assert!("tpu".parse::<Engine>().is_err());
    }
}
