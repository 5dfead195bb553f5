//! The plot's colours: a kind's colour, the same in every run, the
//! lanes', and the fixed ones for failures, executors and cores.

use plotters::prelude::*;

use crate::model::Report;

/// Colours for activity kinds: pairwise at least 16 apart in CIEDE2000
/// (ΔE00; 2 is a just-noticeable difference) and as far from the failure
/// red, the grey of "other kinds", black and white. Picked greedily from
/// Okabe-Ito, Tableau 10 and 20 and Kelly's colours of maximum contrast,
/// keeping a lightness (L*) of 30 to 92 so that bars show on white and
/// black text reads beside them. See [`kind_colors`] for which kind gets
/// which.
pub(super) const KIND_PALETTE: [RGBColor; 18] = [
    RGBColor(0xe6, 0x9f, 0x00),
    RGBColor(0x56, 0xb4, 0xe9),
    RGBColor(0x00, 0x9e, 0x73),
    RGBColor(0xf0, 0xe4, 0x42),
    RGBColor(0x00, 0x72, 0xb2),
    RGBColor(0xd5, 0x5e, 0x00),
    RGBColor(0xcc, 0x79, 0xa7),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x98, 0xdf, 0x8a),
    RGBColor(0xc5, 0xb0, 0xd5),
    RGBColor(0xc2, 0xb2, 0x80),
    RGBColor(0xb3, 0x44, 0x6c),
    RGBColor(0x8d, 0xb6, 0x00),
    RGBColor(0x65, 0x45, 0x22),
    RGBColor(0x7f, 0x7f, 0x00),
];
pub(super) const OTHER_KIND: RGBColor = RGBColor(0xba, 0xb0, 0xac);
pub(super) const FAILED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
pub(super) const EXECUTORS: RGBColor = RGBColor(0x4e, 0x79, 0xa7);
pub(super) const CORES: RGBColor = RGBColor(0xf2, 0x8e, 0x2b);

/// Each kind's colour in plots of `report`, in [`Report::kinds`] order, as
/// RGB; `None` for a kind drawn in the grey shared by "other kinds".
///
/// The rule: every kind ranks the palette's colours by a stable hash (FNV-1a,
/// the same in every build and on every machine) of its name and the
/// colour's index, so each kind has its own order of preference
/// (rendezvous hashing). In graph order, each kind takes the first colour of
/// its ranking that no kind before it took. A kind thus has the same colour
/// in every run unless a kind earlier in the graph took that colour first,
/// and no two kinds of one plot share a colour. When there are more kinds
/// than colours, the kinds with the most total time get the colours and the
/// rest share the grey.
pub fn kind_colors(report: &Report) -> Vec<Option<[u8; 3]>> {
    kind_palette_slots(report)
        .into_iter()
        .map(|slot| {
            slot.map(|s| {
                let RGBColor(r, g, b) = KIND_PALETTE[s];
                [r, g, b]
            })
        })
        .collect()
}

/// [`kind_colors`] as indices into [`KIND_PALETTE`].
pub(super) fn kind_palette_slots(report: &Report) -> Vec<Option<usize>> {
    // `report.kinds` comes most total time first: the first ones get colours.
    let coloured = report.kinds.len().min(KIND_PALETTE.len());
    let mut taken = [false; KIND_PALETTE.len()];
    let mut slots = vec![None; report.kinds.len()];
    for kind in report.kinds_in_graph_order() {
        if kind >= coloured {
            continue;
        }
        let name = report.kinds[kind].kind.as_bytes();
        let slot = (0..KIND_PALETTE.len())
            .filter(|&s| !taken[s])
            .max_by_key(|&s| fnv1a(name, s as u64));
        if let Some(slot) = slot {
            taken[slot] = true;
            slots[kind] = Some(slot);
        }
    }
    slots
}

/// FNV-1a over `bytes` and then `salt`: a hash that, unlike std's hashers,
/// is fixed by its definition, so colours stay the same across builds.
fn fnv1a(bytes: &[u8], salt: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes.iter().copied().chain(salt.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Lane colours: darker hues than the kinds' palette, so that a lane is not
/// mistaken for a kind of the Gantt chart below.
pub(super) fn lane_color(i: usize) -> RGBColor {
    const LANES: [RGBColor; 6] = [
        RGBColor(0x2f, 0x4b, 0x7c),
        RGBColor(0xa0, 0x51, 0x95),
        RGBColor(0x3c, 0x8d, 0x7e),
        RGBColor(0xa0, 0x6a, 0x2c),
        RGBColor(0x6b, 0x6b, 0x6b),
        RGBColor(0x5b, 0x8c, 0x2a),
    ];
    LANES[i % LANES.len()]
}

/// `color` moved `amount` (0 to 1) of the way to white, opaque, so that
/// grid lines do not show through it as they would through transparency.
pub(super) fn lighten(color: RGBColor, amount: f64) -> RGBColor {
    let mix = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * amount).round() as u8;
    RGBColor(mix(color.0), mix(color.1), mix(color.2))
}
