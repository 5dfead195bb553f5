//! Writing the dataset: every pair rendered on worker threads and written
//! to each site holding it, results collected in pair order.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use super::{draw_scene, pair_truth, render, GenerateConfig, GenerateError};
use crate::fits::{self, FitsHeader};
use crate::layout::{self, Epoch};
use crate::manifest::{Manifest, PairEntry};
use crate::truth::Transient;

/// Renders and writes every pair, on worker threads; returns each pair's
/// transients in pair order.
pub(super) fn write_all_pairs(
    config: &GenerateConfig,
    manifest: &Manifest,
    out_dir: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<Transient>>, GenerateError> {
    let total = manifest.pairs.len();
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .clamp(1, total.max(1));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || {
                // Work is handed out pair by pair, so a slow big pair does not
                // hold up a fixed share of the others.
                while !stop.load(Ordering::Relaxed) {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(entry) = manifest.pairs.get(index) else {
                        break;
                    };
                    let result = write_pair(config, entry, index, out_dir);
                    let failed = result.is_err();
                    if tx.send((index, result)).is_err() || failed {
                        break;
                    }
                }
            });
        }
        drop(tx);
        collect_results(rx, total, &stop, progress)
    })
}

/// Gathers the workers' results on the calling thread (the progress
/// callback need not be thread-safe); the first error stops the workers.
pub(super) fn collect_results(
    rx: mpsc::Receiver<(usize, Result<Vec<Transient>, GenerateError>)>,
    total: usize,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<Transient>>, GenerateError> {
    let mut results = vec![Vec::new(); total];
    let mut done = 0;
    let mut first_error = None;
    for (index, result) in rx {
        match result {
            Ok(transients) => {
                results[index] = transients;
                done += 1;
                progress(done, total);
            }
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(results),
    }
}

/// Draws, renders and writes one pair to all its sites.
pub(super) fn write_pair(
    config: &GenerateConfig,
    entry: &PairEntry,
    index: usize,
    out_dir: &Path,
) -> Result<Vec<Transient>, GenerateError> {
    let scene = draw_scene(config, index, entry.width, entry.height);
    for epoch in Epoch::BOTH {
        let image = render(&scene, epoch, config, index);
        let header = FitsHeader {
            gain: config.gain,
            read_noise: config.read_noise,
            saturate: config.saturate,
            pair: entry.id.clone(),
            epoch: epoch.as_str().to_string(),
        };
        let mut written: Option<PathBuf> = None;
        for site in &entry.sites {
            let path = layout::image_path(out_dir, &entry.id, site, epoch);
            let dir = path.parent().expect("image paths have a directory");
            std::fs::create_dir_all(dir).map_err(|source| GenerateError::Io {
                path: dir.to_path_buf(),
                what: "cannot create the pair directory",
                source,
            })?;
            match &written {
                // Copies, not re-renders, so replicas are identical by construction.
                Some(first) => crate::fsutil::copy_atomic(first, &path).map_err(|source| {
                    GenerateError::Io {
                        path: path.clone(),
                        what: "cannot copy the replica",
                        source,
                    }
                })?,
                None => fits::write_image(&path, &image, &header)?,
            }
            written.get_or_insert(path);
        }
    }
    Ok(pair_truth(&scene, &entry.id, config))
}
