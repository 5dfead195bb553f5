//! Supernova detection on pairs of sky images taken a month apart, the
//! application of the Constellation paper (the DACH 2008 challenge), built
//! on synthetic images whose truth is known so every run is scored.
//!
//! - Data: [`generate`] writes FITS pairs ([`fits`]) with stars, galaxies,
//!   noise, cosmic rays, a pointing offset and injected supernovae and
//!   variable stars, a [`manifest`] of which sites hold which pairs, and the
//!   [`truth`] catalogue; [`score`] compares candidates with it. Reading
//!   an image first checks its pixels against what [`memory`] says the
//!   process may allocate.
//! - The steps (the paper's Figure 3): [`background`] and [`detect`] (2, 3),
//!   [`align`] (4), [`equalize`] (5, 6), [`tiles`] (7.1), [`compare`] (7.2,
//!   with a CUDA version in [`gpu`]), [`recombine`] (7.3), [`classify`] (8);
//!   [`steps`] runs each on a pair's work directory.
//! - The versions: [`pipeline`] (sequential reference and the monolithic
//!   activity's body), [`activities`] (monolithic and many-task
//!   activities), [`run`] (over a dataset, on the embedded pool),
//!   [`contexts`] (the paper's Table 1 strategies), [`graphfile`] (the
//!   many-task version as a graph of step scripts), [`record`] (journal and
//!   time per step).

#![warn(unreachable_pub)]

pub mod activities;
pub mod align;
pub mod background;
pub mod catalog;
pub mod classify;
pub mod compare;
mod components;
pub mod contexts;
mod deblend;
pub mod detect;
pub mod equalize;
pub mod eval;
pub mod filter;
pub mod fits;
mod fsutil;
pub mod generate;
pub mod gpu;
pub mod graphfile;
pub mod image;
pub mod layout;
pub mod manifest;
pub mod memory;
mod noise;
pub mod pipeline;
mod psf;
pub mod recombine;
pub mod record;
pub mod run;
pub mod score;
pub mod steps;
pub mod tiles;
pub mod truth;

#[cfg(test)]
mod testutil;

#[cfg(test)]
mod pipeline_tests;
