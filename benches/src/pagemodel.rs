//! Page models described by counts and sizes per group of objects (`pageload --workload-file`,
//! and the built-in models such as `benches/workloads/almanac-2024-median.toml`), expanded
//! deterministically into a [`Workload`] that the origin serves and the clients load.
//!
//! A model file names its hosts and lists groups of objects: each group has a kind (`html`,
//! `css`, `js`, `image`, `font`), a number of objects, their total size, the hosts they are
//! spread over (round robin) and the group whose objects reference them (`parent`). An object's
//! discovery level is one more than its parent's, so a script that injects a script that
//! injects a script makes levels 1, 2 and 3 below the HTML, with no limit on the depth. The
//! file is checked once, with an error naming the group and field at fault.
//!
//! What references what, as a real page does (see [`Workload::body`]): the HTML links style
//! sheets, scripts and images; a style sheet `@import`s style sheets, sets background images and
//! declares `@font-face` fonts (which the HTML's text then uses); a script inserts scripts and
//! starts images (a tracking pixel). All of these delay the browser's load event. Requests a
//! page makes with `fetch` or `XMLHttpRequest` do not (Chromium does not hold the load event for
//! them), so a model has no such kind: their bytes would not be part of a load time.
//!
//! This module only parses and expands; it serves and fetches nothing.

use crate::workload::{self, may_reference, Kind, Object, Workload};
use anyhow::{bail, Context, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Most objects one model may expand to (the Chromium client accounts for at most
/// [`workload::MAX_BROWSER_SUBRESOURCES`] sub-resources; the origin serves at most
/// [`crate::origin::MAX_HOSTS`] host names across all workloads).
pub const MAX_OBJECTS: usize = workload::MAX_BROWSER_SUBRESOURCES + 1;

/// Largest group total accepted, in KB (1 GB): a page model, not a bulk transfer.
pub const MAX_GROUP_KB: f64 = 1_000_000.0;

/// A page model as written in its file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageModel {
    /// Workload id (letters, digits, `-`): names the results.
    pub id: String,
    /// Where the numbers come from (one line; the file's comments hold the details).
    pub source: String,
    /// Seed of the size draw within each group.
    #[serde(default)]
    pub seed: u64,
    /// Host names; each is served from its own origin address.
    pub hosts: Vec<String>,
    /// Groups of objects, parents before the groups they reference.
    #[serde(rename = "group")]
    pub groups: Vec<Group>,
}

/// One group of objects of the same kind.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// Unique name; other groups name it as their `parent`; the objects' paths start with it.
    pub name: String,
    /// What the objects are.
    pub kind: Kind,
    /// How many objects (the `html` group: exactly one).
    pub count: i64,
    /// Their total size in KB (1 KB = 1000 bytes), split unevenly over the objects with the
    /// seeds' KB-per-GET shape, or, with `each_kb`, every object's size.
    #[serde(default)]
    pub kb: Option<f64>,
    /// Every object's size in KB (instead of `kb`).
    #[serde(default)]
    pub each_kb: Option<f64>,
    /// Hosts serving them, in turn (object k on `hosts[k % len]`).
    pub hosts: Vec<String>,
    /// The group whose objects reference these (object k by the parent group's object
    /// `k % parent count`); absent for the `html` group only.
    #[serde(default)]
    pub parent: Option<String>,
}

fn extension(kind: Kind) -> &'static str {
    match kind {
        Kind::Html => "html",
        Kind::Css => "css",
        Kind::Js => "js",
        Kind::Image => "png",
        Kind::Font => "woff2",
        Kind::Bulk => "bin",
    }
}

/// Whether a TOML text is a page model (it has `[[group]]` tables) rather than an expanded
/// workload (`[[objects]]`).
pub fn is_model(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("group"))
}

impl PageModel {
    /// Parses and checks a model file.
    pub fn from_toml(text: &str) -> Result<PageModel> {
        let m: PageModel = toml::from_str(text).context("parsing page model TOML")?;
        m.validate()?;
        Ok(m)
    }

    fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// Checks everything [`PageModel::expand`] relies on, naming the group and field at fault.
    pub fn validate(&self) -> Result<()> {
        workload::check_id(&self.id)?;
        if self.hosts.is_empty() {
            bail!("page model {}: `hosts` is empty", self.id);
        }
        let mut seen_hosts = Vec::new();
        for h in &self.hosts {
            workload::check_host(h)?;
            if seen_hosts.contains(&h) {
                bail!(
                    "page model {}: host {h:?} is listed twice in `hosts`",
                    self.id
                );
            }
            seen_hosts.push(h);
        }
        let mut kinds: BTreeMap<&str, (Kind, i64)> = BTreeMap::new();
        // Groups of style sheets imported by style sheets.
        let mut imported: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        let mut total: i64 = 0;
        for (n, g) in self.groups.iter().enumerate() {
            let at = format!("page model {}, group {:?}", self.id, g.name);
            if g.name.is_empty()
                || !g
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                bail!("{at}: `name` must be non-empty ASCII letters, digits, '-' or '_'");
            }
            if kinds.contains_key(g.name.as_str()) {
                bail!("{at}: the name is used by an earlier group too");
            }
            if g.count <= 0 {
                bail!("{at}: `count` is {}; it must be at least 1", g.count);
            }
            match (g.kb, g.each_kb) {
                (Some(_), Some(_)) => bail!("{at}: give `kb` (the total) or `each_kb`, not both"),
                (None, None) => bail!("{at}: give `kb` (the group's total) or `each_kb`"),
                (Some(v), None) | (None, Some(v)) if !(v > 0.0 && v.is_finite()) => {
                    bail!("{at}: size {v} KB must be a positive number")
                }
                (Some(v), None) if v * 1000.0 < g.count as f64 => bail!(
                    "{at}: {v} KB is less than one byte for each of its {} objects",
                    g.count
                ),
                (Some(v), None) | (None, Some(v)) => {
                    let group_kb = g.each_kb.map_or(v, |e| e * g.count as f64);
                    if group_kb > MAX_GROUP_KB {
                        bail!("{at}: {group_kb} KB in one group is more than the {MAX_GROUP_KB} KB a page model may have");
                    }
                }
            }
            if g.kind == Kind::Bulk {
                bail!("{at}: kind `bulk` is not part of a page (bulk transfers are built in)");
            }
            if g.hosts.is_empty() {
                bail!("{at}: `hosts` is empty");
            }
            for h in &g.hosts {
                if !self.hosts.contains(h) {
                    bail!("{at}: host {h:?} is not in the model's `hosts`");
                }
            }
            match (n, g.kind, &g.parent) {
                (0, Kind::Html, None) if g.count == 1 => {}
                (0, Kind::Html, None) => bail!("{at}: the html group is one page: `count` must be 1"),
                (0, _, _) => bail!("{at}: the first group must be the page itself: kind `html`, one object, no `parent`"),
                (_, Kind::Html, _) => bail!("{at}: only the first group may be `html`"),
                (_, _, None) => bail!("{at}: `parent` is missing (which group's objects reference these?)"),
                (_, kind, Some(p)) => match kinds.get(p.as_str()) {
                    None if self.groups.iter().any(|o| &o.name == p) => {
                        bail!("{at}: parent {p:?} must be listed before the groups it references")
                    }
                    None => bail!("{at}: parent {p:?} is not a group of this model"),
                    Some((Kind::Css, _))
                        if imported.contains(p.as_str())
                            && self.group(p).is_some_and(|pg| {
                                pg.hosts.iter().any(|h| h != &self.groups[0].hosts[0])
                            }) =>
                    {
                        bail!(
                            "{at}: the style sheets of {p:?} are imported by a style sheet and \
                             reference objects, so they must be on the page's host {:?}: a \
                             browser fetches an imported style sheet without CORS, and Resource \
                             Timing (the Chromium client's check) leaves out what such a sheet \
                             from another host loads",
                            self.groups[0].hosts[0]
                        )
                    }
                    Some((pk, _)) if !may_reference(*pk, kind) => bail!(
                        "{at}: a {pk:?} cannot reference a {kind:?} (html: css, js, image; \
                         css: css, image, font; js: js, image)"
                    ),
                    Some(_) => {}
                },
            }
            total = total.saturating_add(g.count);
            kinds.insert(&g.name, (g.kind, g.count));
            let parent_kind = g.parent.as_deref().and_then(|p| kinds.get(p)).map(|k| k.0);
            if g.kind == Kind::Css && parent_kind == Some(Kind::Css) {
                imported.insert(g.name.as_str());
            }
        }
        if self.groups.is_empty() {
            bail!("page model {}: no `[[group]]`", self.id);
        }
        if total as usize > MAX_OBJECTS {
            bail!(
                "page model {}: {total} objects, more than the {MAX_OBJECTS} the Chromium client \
                 can account for",
                self.id
            );
        }
        Ok(())
    }

    /// The workload: objects group by group, each group's sizes drawn from the seeds' KB-per-GET
    /// shape with the model's seed and scaled to the group's total; then every referencing
    /// object grown to hold its references, the bytes taken back from the largest image (or
    /// the largest object that can spare them), so the page total stays as written.
    pub fn expand(&self) -> Result<Workload> {
        self.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut objects: Vec<Object> = Vec::new();
        let mut first: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for g in &self.groups {
            let n = g.count as usize;
            let sizes = match (g.kb, g.each_kb) {
                (Some(kb), _) => {
                    workload::draw_sizes(&mut rng, n, Some((kb * 1000.0).round() as u64))
                }
                (_, Some(each)) => vec![((each * 1000.0).round() as u64).max(1); n],
                _ => unreachable!("validated"),
            };
            let start = objects.len();
            let parent = g.parent.as_deref().map(|p| first[p]);
            for (k, size) in sizes.into_iter().enumerate() {
                let (par, level) = match parent {
                    Some((p0, pn)) => {
                        let p = p0 + k % pn;
                        (Some(p), objects[p].level + 1)
                    }
                    None => (None, 0),
                };
                let path = if g.kind == Kind::Html {
                    "/index.html".to_string()
                } else {
                    format!("/{}/{k:03}.{}", g.name, extension(g.kind))
                };
                objects.push(Object {
                    host: g.hosts[k % g.hosts.len()].clone(),
                    path,
                    kind: g.kind,
                    size,
                    level,
                    parent: par,
                });
            }
            first.insert(&g.name, (start, n));
        }
        let mut w = Workload {
            id: self.id.clone(),
            source: self.source.clone(),
            seed: self.seed,
            hosts: self.hosts.clone(),
            mixed: None,
            objects,
        };
        for i in 0..w.objects.len() {
            let need = w.min_size(i);
            if w.objects[i].size >= need {
                continue;
            }
            let extra = need - w.objects[i].size;
            w.objects[i].size = need;
            let spare = |w: &Workload, j: usize| w.objects[j].size.saturating_sub(w.min_size(j));
            let donor = (0..w.objects.len())
                .filter(|&j| j != i && spare(&w, j) >= extra)
                .max_by_key(|&j| (w.objects[j].kind == Kind::Image, w.objects[j].size))
                .with_context(|| {
                    format!(
                        "page model {}: {} needs {need} bytes to hold its references and no \
                         other object can spare {extra}: give its group more KB",
                        self.id, w.objects[i].path
                    )
                })?;
            w.objects[donor].size -= extra;
        }
        w.validate()?;
        Ok(w)
    }
}

/// Built-in page models: (id, file text). Their files in `benches/workloads/` are the source;
/// a unit test checks the copies compiled in equal them.
pub const BUILT_IN: [(&str, &str); 1] = [(
    "almanac-2024-median",
    include_str!("../workloads/almanac-2024-median.toml"),
)];

/// The built-in page models, expanded.
pub fn built_in() -> Vec<Workload> {
    BUILT_IN
        .iter()
        .map(|(id, text)| {
            PageModel::from_toml(text)
                .and_then(|m| m.expand())
                .unwrap_or_else(|e| panic!("built-in page model {id}: {e:#}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
id = "small"
source = "test"
seed = 3
hosts = ["www.a.test", "cdn.b.test", "fonts.c.test"]

[[group]]
name = "page"
kind = "html"
count = 1
kb = 10
hosts = ["www.a.test"]

[[group]]
name = "css"
kind = "css"
count = 2
kb = 20
hosts = ["cdn.b.test"]
parent = "page"

[[group]]
name = "font"
kind = "font"
count = 2
each_kb = 15
hosts = ["fonts.c.test"]
parent = "css"

[[group]]
name = "tag"
kind = "js"
count = 1
kb = 5
hosts = ["www.a.test"]
parent = "page"

[[group]]
name = "tag2"
kind = "js"
count = 1
kb = 5
hosts = ["cdn.b.test"]
parent = "tag"

[[group]]
name = "tag3"
kind = "js"
count = 1
kb = 5
hosts = ["fonts.c.test"]
parent = "tag2"

[[group]]
name = "pixel"
kind = "image"
count = 2
kb = 1
hosts = ["www.a.test", "cdn.b.test"]
parent = "tag3"

[[group]]
name = "bg"
kind = "image"
count = 3
kb = 60
hosts = ["cdn.b.test"]
parent = "css"
"#;

    fn err(text: &str) -> String {
        format!("{:#}", PageModel::from_toml(text).unwrap_err())
    }

    #[test]
    fn a_model_expands_to_its_groups_with_levels_beyond_three() {
        let w = PageModel::from_toml(SMALL).unwrap().expand().unwrap();
        assert_eq!(w.objects.len(), 13);
        assert_eq!(
            w.total_bytes(),
            10_000 + 20_000 + 30_000 + 15_000 + 1_000 + 60_000
        );
        // html 0; css, tag 1; fonts, bg, tag2 2; tag3 3; pixels 4.
        assert_eq!(w.levels().len(), 5);
        let pixel = w
            .objects
            .iter()
            .find(|o| o.path == "/pixel/001.png")
            .unwrap();
        assert_eq!((pixel.level, pixel.host.as_str()), (4, "cdn.b.test"));
        // Each font on the font host, referenced by one style sheet in turn.
        let fonts: Vec<&Object> = w.objects.iter().filter(|o| o.kind == Kind::Font).collect();
        assert_eq!(fonts.len(), 2);
        assert!(fonts
            .iter()
            .all(|f| f.host == "fonts.c.test" && f.size == 15_000));
        assert_ne!(fonts[0].parent, fonts[1].parent);
        // Deterministic.
        assert_eq!(w, PageModel::from_toml(SMALL).unwrap().expand().unwrap());
    }

    #[test]
    fn bad_models_are_refused_with_the_group_and_field() {
        let e = err(&SMALL.replace("parent = \"tag2\"", "parent = \"tagg\""));
        assert!(
            e.contains("group \"tag3\"") && e.contains("\"tagg\" is not a group"),
            "{e}"
        );
        let e = err(&SMALL.replace("parent = \"tag3\"", "parent = \"bg\""));
        assert!(e.contains("listed before"), "{e}");
        let e = err(&SMALL.replace("each_kb = 15", "each_kb = 0"));
        assert!(
            e.contains("group \"font\"") && e.contains("positive"),
            "{e}"
        );
        let e = err(&SMALL.replace("kb = 60", "kb = -60"));
        assert!(e.contains("group \"bg\"") && e.contains("positive"), "{e}");
        let e = err(&SMALL.replace("count = 3", "count = 0"));
        assert!(e.contains("`count` is 0"), "{e}");
        let e = err(&SMALL.replace("count = 3", "count = -2"));
        assert!(e.contains("`count` is -2"), "{e}");
        let e = err(&SMALL.replace("name = \"tag3\"", "name = \"tag2\""));
        assert!(e.contains("used by an earlier group"), "{e}");
        let e = err(&SMALL.replace(
            "hosts = [\"fonts.c.test\"]\nparent = \"tag2\"",
            "hosts = [\"evil.test\"]\nparent = \"tag2\"",
        ));
        assert!(
            e.contains("\"evil.test\" is not in the model's `hosts`"),
            "{e}"
        );
        let e = err(&SMALL.replace(
            "hosts = [\"www.a.test\", \"cdn.b.test\", \"fonts.c.test\"]",
            "hosts = [\"www.a.test\", \"cdn.b.test\", \"www.a.test\"]",
        ));
        assert!(e.contains("listed twice"), "{e}");
        let e = err(&SMALL.replace(
            "hosts = [\"www.a.test\", \"cdn.b.test\", \"fonts.c.test\"]",
            "hosts = [\"a b\"]",
        ));
        assert!(e.contains("not a plain DNS name"), "{e}");
        // A font referenced by a script, not a style sheet.
        let e = err(&SMALL.replace(
            "name = \"pixel\"\nkind = \"image\"",
            "name = \"pixel\"\nkind = \"font\"",
        ));
        assert!(
            e.contains("group \"pixel\"") && e.contains("a Js cannot reference a Font"),
            "{e}"
        );
        let e = err(&SMALL.replace("each_kb = 15", "each_kb = 15\nkb = 3"));
        assert!(e.contains("not both"), "{e}");
        let e = err(&SMALL.replace("kb = 20", "size = 20"));
        assert!(e.contains("unknown field `size`"), "{e}");
        let e = err(&SMALL.replacen("kind = \"html\"", "kind = \"css\"", 1));
        assert!(e.contains("first group must be the page"), "{e}");
        let e = err(&SMALL.replace("id = \"small\"", "id = \"../x\""));
        assert!(e.contains("letters, digits"), "{e}");
    }

    fn almanac() -> Workload {
        built_in()
            .into_iter()
            .find(|w| w.id == "almanac-2024-median")
            .unwrap()
    }

    /// The Web Almanac 2024 figures the model's file cites: 66 (mobile) to 71 (desktop)
    /// requests, 2,311 to 2,652 KB; 24 scripts and 18 content images; 12 (2019) to 27 (2024)
    /// third parties. The model takes the desktop figures; the test holds it to the range.
    #[test]
    fn the_almanac_model_matches_its_cited_figures() {
        let w = almanac();
        let n = w.objects.len();
        assert!((66..=71).contains(&n), "{n} requests");
        assert_eq!(n, 71);
        let kb = w.total_bytes() as f64 / 1000.0;
        assert!((2311.0..=2652.0 * 1.005).contains(&kb), "{kb} KB");
        assert!((kb - 2652.0).abs() / 2652.0 < 0.005, "{kb} KB");
        let count = |k: Kind| w.objects.iter().filter(|o| o.kind == k).count();
        let bytes = |k: Kind| -> u64 {
            w.objects
                .iter()
                .filter(|o| o.kind == k)
                .map(|o| o.size)
                .sum()
        };
        assert_eq!(count(Kind::Js), 24);
        // Content images: all but the 100-byte beacons standing in for other requests.
        let content = w
            .objects
            .iter()
            .filter(|o| o.kind == Kind::Image && o.size > 100)
            .count();
        assert_eq!(content, 18);
        // HTML, CSS and fonts at their medians (18, 78, 131 KB; within 2 % as referencing
        // objects grow to hold their references); images and scripts most of the bytes.
        for (k, want) in [
            (Kind::Html, 18_000.0),
            (Kind::Css, 78_000.0),
            (Kind::Font, 131_000.0),
        ] {
            let got = bytes(k) as f64;
            assert!((got - want).abs() / want < 0.02, "{k:?}: {got}");
        }
        let share = (bytes(Kind::Image) + bytes(Kind::Js)) as f64 / w.total_bytes() as f64;
        assert!(share > 0.85, "images and scripts hold {share}");
        assert!(bytes(Kind::Image) > bytes(Kind::Js));
        // 18 hosts, 15 of them third parties (not *.news.test), between 12 and 27.
        assert_eq!(w.hosts.len(), 18);
        let third = w
            .hosts
            .iter()
            .filter(|h| !h.ends_with(".news.test"))
            .count();
        assert!((12..=27).contains(&third), "{third}");
        for h in &w.hosts {
            assert!(w.objects.iter().any(|o| &o.host == h), "{h} serves nothing");
        }
        // Six discovery levels; fonts come from style sheets on other hosts than the page.
        assert_eq!(w.levels().len(), 6);
        for o in w.objects.iter().filter(|o| o.kind == Kind::Font) {
            let css = &w.objects[o.parent.unwrap()];
            assert_eq!(css.kind, Kind::Css);
            assert_ne!(css.host, w.objects[0].host);
        }
    }

    /// Every object is referenced in the body of its parent, and of no other object: what a
    /// browser discovers is what the model says, level by level.
    #[test]
    fn every_object_is_referenced_by_exactly_its_parent() {
        let mut pages: Vec<Workload> = workload::generate_all()
            .into_iter()
            .filter(|w| w.mixed.is_none() && w.id != "bulk")
            .collect();
        pages.push(PageModel::from_toml(SMALL).unwrap().expand().unwrap());
        for w in &pages {
            let bodies: Vec<String> = (0..w.objects.len())
                .map(|i| match w.objects[i].kind {
                    Kind::Image | Kind::Font => String::new(),
                    _ => String::from_utf8(w.body(i)).unwrap(),
                })
                .collect();
            for (i, o) in w.objects.iter().enumerate().skip(1) {
                let r = format!("//{}{}", o.host, o.path);
                let quoted: Vec<usize> = (0..bodies.len())
                    .filter(|&j| {
                        bodies[j].match_indices(&r).any(|(at, _)| {
                            // Not a prefix of a longer path.
                            !bodies[j][at + r.len()..].starts_with(|c: char| c.is_alphanumeric())
                        })
                    })
                    .collect();
                assert_eq!(quoted, vec![o.parent.unwrap()], "{} {}", w.id, o.path);
                assert_eq!(o.level, w.objects[o.parent.unwrap()].level + 1);
                assert_eq!(w.body(i).len() as u64, o.size, "{} {}", w.id, o.path);
            }
        }
        // How each kind is referenced in the almanac model.
        let w = almanac();
        let body = |i: usize| String::from_utf8(w.body(i)).unwrap();
        let html = body(0);
        for (i, o) in w.objects.iter().enumerate() {
            let Some(p) = o.parent else { continue };
            let (pk, url) = (w.objects[p].kind, format!("//{}{}", o.host, o.path));
            let text = body(p);
            match (pk, o.kind) {
                (Kind::Css, Kind::Font) => {
                    assert!(text.contains(&format!("src:url({url}) format(\"woff2\")")));
                    assert!(
                        html.contains(&format!("<p class=\"f{i}\">")),
                        "font {i} used"
                    );
                }
                (Kind::Css, Kind::Image) => {
                    assert!(text.contains(&format!("background-image:url({url})")));
                    assert!(
                        html.contains(&format!("<div class=\"i{i}\">")),
                        "image {i} shown"
                    );
                }
                (Kind::Css, Kind::Css) => {
                    assert!(
                        text.starts_with("@import")
                            && text.contains(&format!("@import url({url});"))
                    )
                }
                (Kind::Js, Kind::Js) => assert!(text.contains(&format!("s.src='{url}'"))),
                (Kind::Js, Kind::Image) => assert!(text.contains(&format!(".src='{url}'"))),
                // Style sheets from other hosts are fetched with CORS (see `Workload::body`).
                (Kind::Html, Kind::Css) if o.host != w.objects[0].host => {
                    assert!(text.contains(&format!(
                        "<link rel=\"stylesheet\" crossorigin href=\"{url}\">"
                    )))
                }
                (Kind::Html, Kind::Css) => {
                    assert!(text.contains(&format!("<link rel=\"stylesheet\" href=\"{url}\">")))
                }
                (Kind::Html, Kind::Js) => {
                    assert!(text.contains(&format!("<script src=\"{url}\">")))
                }
                (Kind::Html, Kind::Image) => {
                    assert!(text.contains(&format!("<img src=\"{url}\">")))
                }
                other => panic!("unexpected reference {other:?}"),
            }
        }
    }

    #[test]
    fn an_imported_style_sheet_with_sub_resources_must_be_on_the_page_host() {
        let import = "[[group]]\nname = \"imp\"\nkind = \"css\"\ncount = 1\nkb = 2\n\
                      hosts = [\"HOST\"]\nparent = \"css\"\n\n[[group]]\nname = \"impbg\"\n\
                      kind = \"image\"\ncount = 1\nkb = 2\nhosts = [\"cdn.b.test\"]\nparent = \"imp\"\n";
        let on = |h: &str| format!("{SMALL}\n{}", import.replace("HOST", h));
        let e = err(&on("cdn.b.test"));
        assert!(
            e.contains("group \"impbg\"") && e.contains("page's host \"www.a.test\""),
            "{e}"
        );
        let w = PageModel::from_toml(&on("www.a.test"))
            .unwrap()
            .expand()
            .unwrap();
        assert_eq!(w.levels().len(), 5);
        let imp = w
            .objects
            .iter()
            .position(|o| o.path == "/imp/000.css")
            .unwrap();
        let parent = w.objects[imp].parent.unwrap();
        assert!(String::from_utf8(w.body(parent))
            .unwrap()
            .starts_with("@import url(//www.a.test/imp/000.css);"));
        // An expanded workload is held to the same rule.
        let mut moved = w.clone();
        moved.objects[imp].host = "cdn.b.test".into();
        let e = format!("{:#}", moved.validate().unwrap_err());
        assert!(e.contains("imported style sheet on cdn.b.test"), "{e}");
    }

    #[test]
    fn too_many_objects_are_refused() {
        let e = err(&SMALL.replace("count = 3", "count = 300"));
        assert!(e.contains("more than the 251"), "{e}");
    }

    #[test]
    fn a_file_is_told_apart_from_an_expanded_workload() {
        assert!(is_model(SMALL));
        let w = PageModel::from_toml(SMALL).unwrap().expand().unwrap();
        assert!(!is_model(&w.to_toml().unwrap()));
    }
}
