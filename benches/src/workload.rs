//! Page models and bulk transfers taken from the seeds, generated deterministically and stored as
//! TOML data files (`benches/workloads/*.toml`), and the page models built from published
//! statistics (`crate::pagemodel`), whose files are their own source.
//!
//! A [`Workload`] lists host names and objects; every object has a size in bytes and a discovery
//! level: level 0 is the HTML, level 1 what the HTML references (CSS and JS), level 2 what the CSS
//! references (images), and so on: a page model (`crate::pagemodel`) may go deeper (a script
//! that injects a script, fonts from a style sheet another style sheet imports).
//! [`Workload::body`] renders the exact bytes the origin serves for an object, so a real browser
//! discovers the objects level by level just as the replay client does.
//!
//! This module does not serve or fetch anything; see `origin` and `replay`.

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Seed 003 (Chu, Dukkipati), "KB per Get" quantiles: (cumulative fraction, KB).
/// The end points 0.0 and 1.0 are not in the seed; they close the tails (see [`kb_per_get`]).
pub const KB_PER_GET_QUANTILES: [(f64, f64); 7] = [
    (0.30, 0.59),
    (0.40, 0.92),
    (0.50, 1.41),
    (0.60, 2.28),
    (0.70, 3.72),
    (0.80, 7.1),
    (0.90, 18.68),
];
/// Smallest object the generator draws, in KB (a small script or a 1-pixel image).
pub const KB_PER_GET_MIN: f64 = 0.1;
/// Largest object the generator draws before a page is scaled to its total, in KB. With this
/// tail (linear from the 90% point) the curve's mean is the seed's 8.12 KB average.
pub const KB_PER_GET_MAX: f64 = 92.0;

/// Size of the bulk transfer (50 MB).
pub const BULK_BYTES: u64 = 50_000_000;

/// Inverse CDF of seed 003's KB-per-GET distribution, piecewise linear between the quantiles
/// (log-linear would bias nothing measurable here; linear keeps the mean near the seed's).
pub fn kb_per_get(u: f64) -> f64 {
    let u = u.clamp(0.0, 1.0);
    let mut points = Vec::with_capacity(KB_PER_GET_QUANTILES.len() + 2);
    points.push((0.0, KB_PER_GET_MIN));
    points.extend_from_slice(&KB_PER_GET_QUANTILES);
    points.push((1.0, KB_PER_GET_MAX));
    for w in points.windows(2) {
        let (u0, k0) = w[0];
        let (u1, k1) = w[1];
        if u <= u1 {
            return k0 + (k1 - k0) * (u - u0) / (u1 - u0);
        }
    }
    KB_PER_GET_MAX
}

/// What an object is; decides its level, its content type and what it references.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The page itself (level 0).
    Html,
    /// A style sheet (level 1); references the images of level 2.
    Css,
    /// A script (level 1).
    Js,
    /// An image (level 2).
    Image,
    /// A web font, declared by a style sheet's `@font-face` and used by the page's text.
    Font,
    /// A large download (level 0, no references).
    Bulk,
}

impl Kind {
    /// MIME type nginx is told to send.
    pub fn content_type(self) -> &'static str {
        match self {
            Kind::Html => "text/html",
            Kind::Css => "text/css",
            Kind::Js => "application/javascript",
            Kind::Image => "image/png",
            Kind::Font => "font/woff2",
            Kind::Bulk => "application/octet-stream",
        }
    }
}

/// One object of a workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Object {
    /// Host name serving it (one of [`Workload::hosts`]).
    pub host: String,
    /// Absolute path on that host, unique within the workload.
    pub path: String,
    /// What it is.
    pub kind: Kind,
    /// Exact size of the body in bytes.
    pub size: u64,
    /// Discovery level: 0 = HTML, 1 = referenced by the HTML, 2 = referenced by a level-1 object.
    pub level: u32,
    /// Index (into [`Workload::objects`]) of the object that references this one; none for the
    /// root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<usize>,
}

/// A page model, a bulk transfer, or a mixed load (a page loaded while a bulk transfer runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Identifier used in results (`yahoo`, `google`, ..., `bulk`, `mixed`).
    pub id: String,
    /// Where the numbers come from.
    pub source: String,
    /// Generator seed (reproduces the file byte for byte).
    pub seed: u64,
    /// Host names, each served from its own origin address.
    pub hosts: Vec<String>,
    /// For `mixed`: the page measured and the transfer running in the background.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed: Option<Mixed>,
    /// Objects; index 0 is the root (HTML or the bulk object). Empty for `mixed`.
    #[serde(default)]
    pub objects: Vec<Object>,
}

/// The two parts of a mixed load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mixed {
    /// Workload id of the page whose load time is measured.
    pub page: String,
    /// Workload id of the transfer started before the page.
    pub background: String,
    /// How long the background transfer runs before the page load starts, in ms.
    pub head_start_ms: u64,
}

/// The recipe of one page model.
#[derive(Debug, Clone)]
pub struct PageSpec {
    /// Workload id.
    pub id: &'static str,
    /// Where the numbers come from.
    pub source: &'static str,
    /// Objects including the HTML.
    pub objects: usize,
    /// Total size in KB (1 KB = 1000 bytes as in the seeds' tables); `None` keeps the sizes drawn.
    pub total_kb: Option<u64>,
    /// Host names; the HTML is on the first.
    pub hosts: &'static [&'static str],
    /// Per extra host: objects and total KB pinned on it (seed 000's largest domain).
    pub pinned: Option<(usize, u64)>,
    /// Generator seed.
    pub seed: u64,
}

/// The seeds' page models.
pub fn page_specs() -> Vec<PageSpec> {
    let t4 = "seed 004 Table IV (single origin server, as in the seed's replay)";
    let mk = |id, objects, total_kb, host, seed| PageSpec {
        id,
        source: t4,
        objects,
        total_kb: Some(total_kb),
        hosts: host,
        pinned: None,
        seed,
    };
    vec![
        PageSpec {
            id: "yahoo",
            source: "seed 000 §4.1.2: Yahoo! front page, 30 objects over 2 domains; the largest \
                     domain holds 14 objects, 445 KB; other sizes from seed 003 KB per GET",
            objects: 30,
            total_kb: None,
            hosts: &["www.yahoo.test", "l.yimg.test"],
            pinned: Some((14, 445)),
            seed: 0,
        },
        mk("google", 8, 74, &["www.google.test"], 41),
        mk("dmm", 21, 330, &["www.dmm.test"], 42),
        mk("siteadvisor", 40, 701, &["www.siteadvisor.test"], 43),
        mk("amazon", 53, 977, &["www.amazon.test"], 44),
        mk("pinterest", 6, 1548, &["www.pinterest.test"], 45),
        mk("mediafire", 75, 2474, &["www.mediafire.test"], 46),
    ]
}

/// Ids of every page: the seeds' pages, then the built-in page models
/// ([`crate::pagemodel::BUILT_IN`]).
pub fn page_ids() -> Vec<String> {
    let seeds = page_specs().into_iter().map(|s| s.id.to_string());
    seeds
        .chain(
            crate::pagemodel::BUILT_IN
                .iter()
                .map(|(id, _)| id.to_string()),
        )
        .collect()
}

/// Ids of every built-in workload, pages first.
pub fn all_ids() -> Vec<String> {
    let mut ids = page_ids();
    ids.push("bulk".into());
    ids.push("mixed".into());
    ids
}

/// Draws `n` sizes in bytes from seed 003's distribution, scaled so they sum to `total` when
/// given (the last object absorbs rounding).
pub(crate) fn draw_sizes(rng: &mut ChaCha8Rng, n: usize, total: Option<u64>) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    let kb: Vec<f64> = (0..n).map(|_| kb_per_get(rng.gen::<f64>())).collect();
    match total {
        None => kb
            .iter()
            .map(|k| (k * 1000.0).round().max(1.0) as u64)
            .collect(),
        Some(total) => {
            let sum: f64 = kb.iter().sum();
            let mut sizes: Vec<u64> = kb
                .iter()
                .map(|k| ((k / sum) * total as f64).floor().max(1.0) as u64)
                .collect();
            let assigned: u64 = sizes.iter().sum();
            // Put the rounding remainder on the largest object so no object goes below 1 byte.
            let largest = (0..n).max_by_key(|&i| sizes[i]).unwrap_or(0);
            sizes[largest] = (sizes[largest] + total).saturating_sub(assigned).max(1);
            sizes
        }
    }
}

/// Generates one page model.
pub fn generate_page(spec: &PageSpec) -> Workload {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let n = spec.objects.max(1);
    // Objects on pinned hosts (seed 000: one domain holds 14 objects, 445 KB), rest elsewhere.
    let (pinned_n, pinned_kb) = spec.pinned.unwrap_or((0, 0));
    let free_n = n - pinned_n;
    let free_total = spec.total_kb.map(|kb| kb * 1000 - pinned_kb * 1000);
    let mut free_sizes = draw_sizes(&mut rng, free_n, free_total);
    let pinned_sizes = draw_sizes(&mut rng, pinned_n, Some(pinned_kb * 1000));
    // The HTML is the first free object; the largest sizes of the rest go to style sheets so
    // their references fit.
    let html_size = free_sizes.remove(0);
    let mut sub: Vec<(u64, bool)> = free_sizes.into_iter().map(|s| (s, false)).collect();
    sub.extend(pinned_sizes.into_iter().map(|s| (s, true)));
    let rest = sub.len();
    // About a third of the subresources are CSS/JS (level 1), the rest images (level 2); at
    // least one style sheet whenever there are images.
    let level1 = if rest == 0 {
        0
    } else {
        (rest as f64 / 3.0).round().clamp(1.0, rest as f64) as usize
    };
    let css_count = level1.div_ceil(2).max(1).min(level1);

    let home = spec.hosts[0].to_string();
    let other = spec.hosts.get(1).map(|h| h.to_string());
    let mut objects = vec![Object {
        host: home.clone(),
        path: "/index.html".into(),
        kind: Kind::Html,
        size: html_size,
        level: 0,
        parent: None,
    }];
    // Level 1: the first `level1` free sizes (shuffled by the draw already); CSS first.
    let mut l1_idx = Vec::new();
    let mut order: Vec<usize> = (0..rest).collect();
    // Prefer unpinned objects at level 1 (the pinned domain is the image host of seed 000).
    order.sort_by_key(|&i| sub[i].1);
    let (l1, l2) = order.split_at(level1);
    let mut l1: Vec<usize> = l1.to_vec();
    l1.sort_by(|&a, &b| sub[b].0.cmp(&sub[a].0).then(a.cmp(&b)));
    for (k, &i) in l1.iter().enumerate() {
        let kind = if k < css_count { Kind::Css } else { Kind::Js };
        let ext = if kind == Kind::Css { "css" } else { "js" };
        let host = if sub[i].1 {
            other.clone().unwrap_or_else(|| home.clone())
        } else {
            home.clone()
        };
        l1_idx.push(objects.len());
        objects.push(Object {
            host,
            path: format!("/static/{k:02}.{ext}"),
            kind,
            size: sub[i].0,
            level: 1,
            parent: Some(0),
        });
    }
    let css: Vec<usize> = l1_idx[..css_count.min(l1_idx.len())].to_vec();
    for (k, &i) in l2.iter().enumerate() {
        let host = match (&other, sub[i].1) {
            (Some(o), true) => o.clone(),
            _ => home.clone(),
        };
        let parent = css.get(k % css.len().max(1)).copied().unwrap_or(0);
        objects.push(Object {
            host,
            path: format!("/img/{k:03}.png"),
            kind: Kind::Image,
            size: sub[i].0,
            level: if parent == 0 { 1 } else { 2 },
            parent: Some(parent),
        });
    }
    let mut w = Workload {
        id: spec.id.into(),
        source: spec.source.into(),
        seed: spec.seed,
        hosts: spec.hosts.iter().map(|h| h.to_string()).collect(),
        mixed: None,
        objects,
    };
    // Referencing objects must be large enough to hold their references: grow them and take the
    // bytes back from the largest image, so the page total stays as in the seed.
    for i in 0..w.objects.len() {
        let need = w.min_size(i);
        if w.objects[i].size < need {
            let extra = need - w.objects[i].size;
            w.objects[i].size = need;
            if let Some(j) = (0..w.objects.len())
                .filter(|&j| w.objects[j].kind == Kind::Image)
                .max_by_key(|&j| w.objects[j].size)
            {
                w.objects[j].size = w.objects[j].size.saturating_sub(extra).max(1);
            }
        }
    }
    w
}

/// The 50 MB bulk transfer.
pub fn generate_bulk() -> Workload {
    Workload {
        id: "bulk".into(),
        source: "50 MB bulk transfer (docs/ARCHITECTURE.md §5)".into(),
        seed: 0,
        hosts: vec!["bulk.test".into()],
        mixed: None,
        objects: vec![Object {
            host: "bulk.test".into(),
            path: "/bulk.bin".into(),
            kind: Kind::Bulk,
            size: BULK_BYTES,
            level: 0,
            parent: None,
        }],
    }
}

/// The mixed load: the Yahoo page loaded while the bulk transfer runs.
pub fn generate_mixed() -> Workload {
    Workload {
        id: "mixed".into(),
        source: "the yahoo page loaded 1 s after a 50 MB bulk transfer starts".into(),
        seed: 0,
        hosts: vec![],
        mixed: Some(Mixed {
            page: "yahoo".into(),
            background: "bulk".into(),
            head_start_ms: 1000,
        }),
        objects: vec![],
    }
}

/// Every workload, in [`all_ids`] order.
pub fn generate_all() -> Vec<Workload> {
    let mut v: Vec<Workload> = page_specs().iter().map(generate_page).collect();
    v.extend(crate::pagemodel::built_in());
    v.push(generate_bulk());
    v.push(generate_mixed());
    v
}

/// Timing script every HTML page carries: once the load event has finished, sets the document
/// title to `longhaul-plt[PLT]` (the Navigation Timing page load time) followed by ` URL BYTES`
/// for each sub-resource the page fetched (Resource Timing: body bytes received), comma
/// separated; the Chromium client reads it back from `--dump-dom`. The origin sends
/// `Timing-Allow-Origin: *`, so body sizes show for the other host names' objects too. The
/// script is exactly as long as the one the first results were measured with (243 bytes), so
/// that every page keeps its size.
pub const TIMING_SCRIPT: &str =
    "<script>onload=function(){setTimeout(function(){var p=performance,\
t=p.timing;document.title='longhaul-plt['+(t.loadEventEnd-t.navigationStart)+']'+p.getEntriesByType\
('resource').map(r=>' '+r.name+' '+r.encodedBodySize).join(',')},0)};</script>";

/// Size of the smallest image [`png`] makes (no padding).
pub const PNG_MIN_BYTES: u64 = 8 + 25 + 12 + 22 + 12;

/// An image body: a valid PNG, `head`, then `zeros` zero bytes, then `tail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PngBody {
    /// Signature, IHDR and the padding chunk's length and type.
    pub head: Vec<u8>,
    /// The padding chunk's data: zeros (the origin leaves them as a hole in a sparse file).
    pub zeros: u64,
    /// The padding chunk's CRC, IDAT and IEND.
    pub tail: Vec<u8>,
}

impl PngBody {
    /// The whole body.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = self.head.clone();
        v.resize(v.len() + self.zeros as usize, 0);
        v.extend_from_slice(&self.tail);
        v
    }
}

/// A PNG chunk: length, type, data, CRC-32 of type and data.
fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(12 + data.len());
    c.extend_from_slice(&(data.len() as u32).to_be_bytes());
    c.extend_from_slice(kind);
    c.extend_from_slice(data);
    c.extend_from_slice(&crc32fast::hash(&c[4..]).to_be_bytes());
    c
}

/// A valid 1×1 grey PNG of exactly `size` bytes (at least [`PNG_MIN_BYTES`]; smaller sizes get
/// the minimum): the signature, IHDR, a private ancillary chunk `lhPd` of zeros that pads the file
/// to its size, IDAT and IEND. Browsers skip the padding chunk and decode the pixel after it, so
/// they fetch the whole body as they would a real image's; Chromium cancels the transfer of a
/// body that fails to decode as an image at its first bytes.
pub fn png(size: u64) -> PngBody {
    const PAD: &[u8; 4] = b"lhPd";
    let mut head = b"\x89PNG\r\n\x1a\n".to_vec();
    // 1 × 1, 8-bit greyscale, deflate, adaptive filtering, not interlaced.
    head.extend(png_chunk(b"IHDR", &[0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0]));
    let zeros = size.saturating_sub(PNG_MIN_BYTES);
    let len = u32::try_from(zeros).expect("an image under 4 GiB");
    head.extend_from_slice(&len.to_be_bytes());
    head.extend_from_slice(PAD);
    let mut crc = crc32fast::Hasher::new();
    crc.update(PAD);
    let block = [0u8; 8192];
    let mut left = zeros;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        crc.update(&block[..n]);
        left -= n as u64;
    }
    let mut tail = crc.finalize().to_be_bytes().to_vec();
    // zlib stream of the one scan line: filter type 0, pixel 0.
    tail.extend(png_chunk(
        b"IDAT",
        &[0x78, 0x9c, 0x63, 0x60, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01],
    ));
    tail.extend(png_chunk(b"IEND", &[]));
    PngBody { head, zeros, tail }
}

/// Which kinds may reference which, as [`Workload::body`] renders the reference: the HTML links
/// style sheets, scripts and images; a style sheet imports style sheets, sets background images
/// and declares fonts; a script inserts scripts and starts images.
pub fn may_reference(parent: Kind, child: Kind) -> bool {
    matches!(
        (parent, child),
        (Kind::Html, Kind::Css | Kind::Js | Kind::Image)
            | (Kind::Css, Kind::Css | Kind::Image | Kind::Font)
            | (Kind::Js, Kind::Js | Kind::Image)
    )
}

/// Checks a workload id: non-empty ASCII letters, digits or `-` (it names results and files).
pub fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        bail!("workload id {id:?} must be non-empty ASCII letters, digits or '-'");
    }
    Ok(())
}

/// Checks a host name: ASCII letters, digits, `-` and `.` only, at most 253 characters.
pub fn check_host(h: &str) -> Result<()> {
    if h.is_empty()
        || h.len() > 253
        || h.starts_with('.')
        || h.ends_with('.')
        || !h
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    {
        bail!("host name {h:?} is not a plain DNS name");
    }
    Ok(())
}

/// Sub-resources a page may have for the Chromium client to account for every one: the Resource
/// Timing buffer's default size, which the page does not raise.
pub const MAX_BROWSER_SUBRESOURCES: usize = 250;

impl Workload {
    /// Parses a workload file and checks it: a page model (`[[group]]`s, expanded by
    /// [`crate::pagemodel`]) or an expanded workload (`[[objects]]`).
    pub fn from_toml(text: &str) -> Result<Workload> {
        if crate::pagemodel::is_model(text) {
            return crate::pagemodel::PageModel::from_toml(text)?.expand();
        }
        let w: Workload = toml::from_str(text).context("parsing workload TOML")?;
        w.validate()?;
        Ok(w)
    }

    /// Serialises as TOML.
    pub fn to_toml(&self) -> Result<String> {
        Ok(toml::to_string(self)?)
    }

    /// Loads `DIR/ID.toml`.
    pub fn load(dir: &Path, id: &str) -> Result<Workload> {
        let path = dir.join(format!("{id}.toml"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let w = Workload::from_toml(&text).with_context(|| format!("in {}", path.display()))?;
        if w.id != id {
            bail!("{} declares id {:?}", path.display(), w.id);
        }
        Ok(w)
    }

    /// Checks the invariants the clients and the origin rely on.
    pub fn validate(&self) -> Result<()> {
        check_id(&self.id)?;
        if let Some(m) = &self.mixed {
            if !self.objects.is_empty() {
                bail!("mixed workload {} must not list objects", self.id);
            }
            if m.page.is_empty() || m.background.is_empty() {
                bail!("mixed workload {} needs a page and a background", self.id);
            }
            return Ok(());
        }
        if self.objects.is_empty() {
            bail!("workload {} has no objects", self.id);
        }
        for h in &self.hosts {
            check_host(h)?;
        }
        let mut paths = std::collections::BTreeSet::new();
        for (i, o) in self.objects.iter().enumerate() {
            if !self.hosts.contains(&o.host) {
                bail!(
                    "object {} is on host {} which is not in hosts",
                    o.path,
                    o.host
                );
            }
            if !o.path.starts_with('/') || o.path.contains("..") || o.path.contains(' ') {
                bail!(
                    "object path {:?} must be absolute without '..' or spaces",
                    o.path
                );
            }
            if !paths.insert((o.host.clone(), o.path.clone())) {
                bail!("object {}{} listed twice", o.host, o.path);
            }
            if o.size == 0 {
                bail!("object {} has size 0", o.path);
            }
            match (i, o.parent) {
                (0, None) if o.level == 0 => {}
                (0, _) => bail!("object 0 must be the root (level 0, no parent)"),
                (_, Some(p)) if p < i && self.objects[p].level + 1 == o.level => {}
                _ => bail!(
                    "object {} must reference an earlier object one level up",
                    o.path
                ),
            }
            if let Some(p) = o.parent {
                let pk = self.objects[p].kind;
                if !may_reference(pk, o.kind) {
                    bail!(
                        "object {}: a {pk:?} cannot reference a {:?}",
                        o.path,
                        o.kind
                    );
                }
                // See `crate::pagemodel`: what an imported style sheet from another host than
                // the page loads is hidden from the Chromium client's check.
                let importer = self.objects[p].parent.map(|g| self.objects[g].kind);
                if pk == Kind::Css
                    && importer == Some(Kind::Css)
                    && self.objects[p].host != self.objects[0].host
                {
                    bail!(
                        "object {}: referenced by an imported style sheet on {}, not on the \
                         page's host {}",
                        o.path,
                        self.objects[p].host,
                        self.objects[0].host
                    );
                }
            }
        }
        Ok(())
    }

    /// Objects grouped by level, in order (level 0 first).
    pub fn levels(&self) -> Vec<Vec<usize>> {
        let mut by: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, o) in self.objects.iter().enumerate() {
            by.entry(o.level).or_default().push(i);
        }
        by.into_values().collect()
    }

    /// Total bytes of all bodies.
    pub fn total_bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.size).sum()
    }

    /// Indices of the objects `i` references.
    pub fn children(&self, i: usize) -> Vec<usize> {
        (0..self.objects.len())
            .filter(|&j| self.objects[j].parent == Some(i))
            .collect()
    }

    /// URL of object `i` under `scheme`.
    pub fn url(&self, scheme: &str, i: usize) -> String {
        let o = &self.objects[i];
        format!("{scheme}://{}{}", o.host, o.path)
    }

    fn reference(&self, i: usize) -> String {
        let o = &self.objects[i];
        match (o.kind, self.objects[o.parent.unwrap_or(0)].kind) {
            (Kind::Css, Kind::Css) => format!("@import url(//{}{});\n", o.host, o.path),
            // A style sheet from another host than the page is fetched with CORS, as a site
            // linking a CDN's style sheet with `crossorigin` does: Resource Timing (which the
            // Chromium client checks) leaves out whatever a style sheet fetched without CORS
            // from another host loads (it is not "origin-clean").
            (Kind::Css, _) if o.host != self.objects[0].host => format!(
                "<link rel=\"stylesheet\" crossorigin href=\"//{}{}\">\n",
                o.host, o.path
            ),
            (Kind::Css, _) => format!(
                "<link rel=\"stylesheet\" href=\"//{}{}\">\n",
                o.host, o.path
            ),
            (Kind::Js, Kind::Js) => format!(
                "(function(d){{var s=d.createElement('script');s.src='//{}{}';\
                 d.head.appendChild(s)}})(document);\n",
                o.host, o.path
            ),
            (Kind::Js, _) => format!("<script src=\"//{}{}\"></script>\n", o.host, o.path),
            (Kind::Image, Kind::Css) => {
                format!(".i{i}{{background-image:url(//{}{})}}\n", o.host, o.path)
            }
            (Kind::Image, Kind::Js) => format!(
                "(window.lhImg=window.lhImg||[]).push(new Image());\
                 lhImg[lhImg.length-1].src='//{}{}';\n",
                o.host, o.path
            ),
            (Kind::Image, _) => format!("<img src=\"//{}{}\">\n", o.host, o.path),
            (Kind::Font, _) => format!(
                "@font-face{{font-family:f{i};src:url(//{}{}) format(\"woff2\")}}\n\
                 .f{i}{{font-family:f{i}}}\n",
                o.host, o.path
            ),
            _ => String::new(),
        }
    }

    /// The content without padding: what object `i` must contain.
    fn skeleton(&self, i: usize) -> (String, String) {
        let o = &self.objects[i];
        let kids = self.children(i);
        match o.kind {
            Kind::Html => {
                let mut head =
                    String::from("<!doctype html>\n<html><head><meta charset=\"utf-8\">\n");
                let mut body = String::from("</head><body>\n");
                for &k in &kids {
                    let r = self.reference(k);
                    if self.objects[k].kind == Kind::Image {
                        body.push_str(&r);
                    } else {
                        head.push_str(&r);
                    }
                }
                // Elements that use the style sheets' background images and fonts, wherever
                // those style sheets are.
                for (j, x) in self.objects.iter().enumerate() {
                    let by_css = x.parent.is_some_and(|p| self.objects[p].kind == Kind::Css);
                    match x.kind {
                        Kind::Image if by_css => {
                            body.push_str(&format!("<div class=\"i{j}\"></div>\n"))
                        }
                        Kind::Font if by_css => {
                            body.push_str(&format!("<p class=\"f{j}\">longhaul</p>\n"))
                        }
                        _ => {}
                    }
                }
                body.push_str(TIMING_SCRIPT);
                body.push('\n');
                (format!("{head}{body}<!--"), "-->\n</body></html>\n".into())
            }
            Kind::Css | Kind::Js => {
                // A style sheet's `@import`s must come before its other rules.
                let mut kids = kids;
                kids.sort_by_key(|&k| self.objects[k].kind != Kind::Css);
                let mut s = String::new();
                for &k in &kids {
                    s.push_str(&self.reference(k));
                }
                (format!("{s}/*"), "*/\n".into())
            }
            Kind::Image | Kind::Font | Kind::Bulk => (String::new(), String::new()),
        }
    }

    /// Smallest size object `i` can have and still hold its references (or, for an image, be a
    /// valid PNG).
    pub fn min_size(&self, i: usize) -> u64 {
        if self.objects[i].kind == Kind::Image {
            return PNG_MIN_BYTES;
        }
        let (a, b) = self.skeleton(i);
        (a.len() + b.len()) as u64
    }

    /// The exact body served for object `i`: references, then deterministic padding up to the
    /// object's size; for an image, [`png`] of its size. Bulk bodies are not rendered here
    /// (`origin` writes them sparse).
    pub fn body(&self, i: usize) -> Vec<u8> {
        let o = &self.objects[i];
        if o.kind == Kind::Image {
            return png(o.size).to_vec();
        }
        let (a, b) = self.skeleton(i);
        let size = o.size as usize;
        let mut out = Vec::with_capacity(size.max(a.len() + b.len()));
        out.extend_from_slice(a.as_bytes());
        let pad = size.saturating_sub(a.len() + b.len());
        out.extend(std::iter::repeat_n(b'x', pad));
        out.extend_from_slice(b.as_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_curve_passes_through_the_seed_points() {
        for (u, kb) in KB_PER_GET_QUANTILES {
            assert!((kb_per_get(u) - kb).abs() < 1e-9, "u={u}");
        }
        assert_eq!(kb_per_get(0.0), KB_PER_GET_MIN);
        assert_eq!(kb_per_get(1.0), KB_PER_GET_MAX);
        // Mean of the curve is within 15% of the seed's 8.12 KB average.
        let n = 10_000;
        let mean: f64 = (0..n)
            .map(|i| kb_per_get((i as f64 + 0.5) / n as f64))
            .sum::<f64>()
            / n as f64;
        assert!((mean - 8.12).abs() / 8.12 < 0.15, "mean {mean}");
    }

    #[test]
    fn table_iv_pages_match_the_seed() {
        let want = [
            ("google", 8, 74),
            ("dmm", 21, 330),
            ("siteadvisor", 40, 701),
            ("amazon", 53, 977),
            ("pinterest", 6, 1548),
            ("mediafire", 75, 2474),
        ];
        for (id, n, kb) in want {
            let spec = page_specs().into_iter().find(|s| s.id == id).unwrap();
            let w = generate_page(&spec);
            w.validate().unwrap();
            assert_eq!(w.objects.len(), n, "{id}");
            assert_eq!(w.total_bytes(), kb * 1000, "{id}");
            assert_eq!(w.levels()[0], vec![0]);
            assert!(w.levels().len() >= 2, "{id} has subresources");
        }
    }

    #[test]
    fn yahoo_has_30_objects_over_two_domains_with_the_pinned_domain() {
        let spec = page_specs().into_iter().find(|s| s.id == "yahoo").unwrap();
        let w = generate_page(&spec);
        w.validate().unwrap();
        assert_eq!(w.objects.len(), 30);
        assert_eq!(w.hosts.len(), 2);
        let on_img: Vec<&Object> = w
            .objects
            .iter()
            .filter(|o| o.host == "l.yimg.test")
            .collect();
        assert_eq!(on_img.len(), 14);
        let kb: u64 = on_img.iter().map(|o| o.size).sum();
        // Growth of referencing objects may shave the image host a little, never much.
        assert!(kb <= 445_000 && kb > 440_000, "{kb}");
        assert_eq!(w.levels().len(), 3);
    }

    #[test]
    fn generation_is_deterministic_and_bodies_have_exact_sizes() {
        let a = generate_all();
        let b = generate_all();
        assert_eq!(a, b);
        for w in a.iter().filter(|w| w.mixed.is_none() && w.id != "bulk") {
            for (i, o) in w.objects.iter().enumerate() {
                if matches!(o.kind, Kind::Html | Kind::Css | Kind::Js) {
                    let body = w.body(i);
                    assert_eq!(body.len() as u64, o.size, "{} {}", w.id, o.path);
                    for k in w.children(i) {
                        let r = format!("//{}{}", w.objects[k].host, w.objects[k].path);
                        assert!(
                            String::from_utf8_lossy(&body).contains(&r),
                            "{} misses {r}",
                            o.path
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn images_are_valid_pngs_of_their_exact_size() {
        for size in [PNG_MIN_BYTES, 100, 758, 143_609] {
            let b = png(size).to_vec();
            assert_eq!(b.len() as u64, size);
            assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
            // Walk the chunks: each CRC-32 covers its type and data; IHDR first, IEND last.
            let mut at = 8;
            let mut kinds = Vec::new();
            while at < b.len() {
                let len = u32::from_be_bytes(b[at..at + 4].try_into().unwrap()) as usize;
                let body = &b[at + 4..at + 8 + len];
                let crc = u32::from_be_bytes(b[at + 8 + len..at + 12 + len].try_into().unwrap());
                assert_eq!(crc, crc32fast::hash(body), "chunk at {at}");
                kinds.push(String::from_utf8(body[..4].to_vec()).unwrap());
                at += 12 + len;
            }
            assert_eq!(at, b.len());
            assert_eq!(kinds, ["IHDR", "lhPd", "IDAT", "IEND"]);
        }
        // Too small asks get the smallest valid image; the generator never asks for one.
        assert_eq!(png(10).to_vec().len() as u64, PNG_MIN_BYTES);
        for w in generate_all() {
            for (i, o) in w.objects.iter().enumerate() {
                assert!(o.size >= w.min_size(i), "{} {}", w.id, o.path);
            }
        }
    }

    #[test]
    fn data_files_are_the_generator_output() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        for w in generate_all() {
            let on_disk = Workload::load(&dir, &w.id)
                .unwrap_or_else(|e| panic!("{e:#}: run `pageload workloads --write`"));
            assert_eq!(on_disk, w, "{} differs from the generator", w.id);
        }
    }

    #[test]
    fn bad_files_are_rejected_with_a_reason() {
        let mut w = generate_bulk();
        w.objects[0].path = "../etc/passwd".into();
        let e = Workload::from_toml(&w.to_toml().unwrap()).unwrap_err();
        assert!(format!("{e:#}").contains("absolute"), "{e:#}");
        let e = Workload::from_toml("id = 3").unwrap_err();
        assert!(format!("{e:#}").contains("TOML"));
        let mut w = generate_page(&page_specs()[1]);
        w.objects[3].host = "evil.test".into();
        assert!(w.validate().is_err());
        // A font must come from a style sheet, not the HTML.
        let mut w = generate_page(&page_specs()[1]);
        let leaf = (1..w.objects.len())
            .find(|&i| w.objects[i].parent == Some(0) && w.children(i).is_empty())
            .unwrap();
        w.objects[leaf].kind = Kind::Font;
        let e = format!("{:#}", w.validate().unwrap_err());
        assert!(e.contains("cannot reference a Font"), "{e}");
    }
}
