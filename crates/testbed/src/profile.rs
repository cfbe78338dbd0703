//! Link profiles: the named ones of the design notes and custom ones from a TOML file
//! or command-line values, validated into a typed [`Profile`].

use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde::Deserialize;

/// Default one-way delay of the access link (client ↔ edge): a 10 ms RTT.
pub const DEFAULT_ACCESS_DELAY: Duration = Duration::from_millis(5);
/// Default one-way delay of the origin link (remote ↔ origin): a 10 ms RTT.
pub const DEFAULT_ORIGIN_DELAY: Duration = Duration::from_millis(5);
/// Default seed of the loss and jitter generators.
pub const DEFAULT_SEED: u64 = 0x6c6f_6e67_6861_756c;
/// Smallest drop-tail queue a profile may configure: a few full-size packets, so that
/// a queue sized from a tiny bandwidth-delay product still holds one burst of ACKs.
pub const MIN_QUEUE_BYTES: u64 = 4 * 1500;
/// Largest drop-tail queue a profile may configure (bounds the emulator's memory).
pub const MAX_QUEUE_BYTES: u64 = 64 * 1024 * 1024;
/// Highest rate a profile may configure, bit/s (far above what the emulator sustains;
/// see the README for the measured ceiling).
pub const MAX_RATE_BPS: u64 = 10_000_000_000;
/// Largest one-way delay a profile may configure.
pub const MAX_DELAY: Duration = Duration::from_secs(5);

/// How packets are lost on one direction of a link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossModel {
    /// No random loss (drop-tail overflow still drops).
    None,
    /// Each packet is lost independently with probability `p`.
    Bernoulli {
        /// Loss probability, 0 ≤ p < 1.
        p: f64,
    },
    /// Gilbert–Elliott two-state bursty loss. Before each packet the chain moves
    /// Good→Bad with probability `p` and Bad→Good with probability `r`; the packet is
    /// then lost with probability `loss_good` or `loss_bad` depending on the state.
    GilbertElliott {
        /// P(Good → Bad) per packet.
        p: f64,
        /// P(Bad → Good) per packet.
        r: f64,
        /// Loss probability in the Good state (1 − k in the usual notation).
        loss_good: f64,
        /// Loss probability in the Bad state (1 − h in the usual notation).
        loss_bad: f64,
    },
}

impl LossModel {
    /// The long-run mean loss probability of the model.
    pub fn mean_loss(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Bernoulli { p } => p,
            LossModel::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => {
                if p + r == 0.0 {
                    loss_good
                } else {
                    let bad = p / (p + r);
                    (1.0 - bad) * loss_good + bad * loss_bad
                }
            }
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        let prob = |name: &str, v: f64| -> anyhow::Result<()> {
            ensure!(
                v.is_finite() && (0.0..1.0).contains(&v),
                "{name} must be a probability in [0, 1), got {v}"
            );
            Ok(())
        };
        match *self {
            LossModel::None => Ok(()),
            LossModel::Bernoulli { p } => prob("loss probability", p),
            LossModel::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => {
                prob("Gilbert-Elliott p", p)?;
                ensure!(
                    r.is_finite() && r > 0.0 && r <= 1.0,
                    "Gilbert-Elliott r must be in (0, 1], got {r}"
                );
                prob("Gilbert-Elliott loss_good", loss_good)?;
                ensure!(
                    loss_bad.is_finite() && (0.0..=1.0).contains(&loss_bad),
                    "Gilbert-Elliott loss_bad must be in [0, 1], got {loss_bad}"
                );
                Ok(())
            }
        }
    }
}

/// One direction of an emulated link.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectionSpec {
    /// Propagation (one-way) delay.
    pub delay: Duration,
    /// Serialization rate in bit/s counted on whole IP packets; `None` = no rate limit.
    pub rate_bps: Option<u64>,
    /// Drop-tail queue limit in bytes (bytes waiting for the transmitter, including the
    /// unsent part of the packet being serialized). Ignored without a rate.
    pub queue_bytes: u64,
    /// Random loss, applied on the wire after serialization.
    pub loss: LossModel,
    /// Extra delay drawn uniformly from `[0, jitter]` per packet; packets never reorder.
    pub jitter: Duration,
}

impl DirectionSpec {
    /// A direction with only a propagation delay: no rate limit, loss or jitter.
    pub fn delay_only(delay: Duration) -> DirectionSpec {
        DirectionSpec {
            delay,
            rate_bps: None,
            queue_bytes: MAX_QUEUE_BYTES,
            loss: LossModel::None,
            jitter: Duration::ZERO,
        }
    }

    fn validate(&self, what: &str) -> anyhow::Result<()> {
        ensure!(
            self.delay <= MAX_DELAY,
            "{what}: delay {:?} exceeds {:?}",
            self.delay,
            MAX_DELAY
        );
        ensure!(
            self.jitter <= MAX_DELAY,
            "{what}: jitter {:?} exceeds {:?}",
            self.jitter,
            MAX_DELAY
        );
        if let Some(r) = self.rate_bps {
            ensure!(
                (1000..=MAX_RATE_BPS).contains(&r),
                "{what}: rate {r} bit/s outside 1 kbit/s ..= {MAX_RATE_BPS} bit/s"
            );
            ensure!(
                (MIN_QUEUE_BYTES..=MAX_QUEUE_BYTES).contains(&self.queue_bytes),
                "{what}: queue {} bytes outside {MIN_QUEUE_BYTES} ..= {MAX_QUEUE_BYTES}",
                self.queue_bytes
            );
        }
        self.loss.validate().with_context(|| what.to_string())
    }
}

/// A link profile: the long link's two directions, the short access and origin links,
/// and the TCP settings of every namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Profile name (a named profile's name, or `custom`).
    pub name: String,
    /// Long link, remote → edge (towards the clients: downloads).
    pub down: DirectionSpec,
    /// Long link, edge → remote (towards the origins: requests, uploads).
    pub up: DirectionSpec,
    /// One-way delay of the access link (client ↔ edge), both directions.
    pub access_delay: Duration,
    /// One-way delay of the origin link (remote ↔ origin), both directions.
    pub origin_delay: Duration,
    /// `net.ipv4.tcp_congestion_control` in every namespace.
    pub congestion_control: String,
    /// `net.ipv4.tcp_rmem` (min, default, max) in every namespace.
    pub tcp_rmem: [u32; 3],
    /// `net.ipv4.tcp_wmem` (min, default, max) in every namespace.
    pub tcp_wmem: [u32; 3],
    /// `net.ipv4.tcp_slow_start_after_idle` in every namespace.
    pub slow_start_after_idle: bool,
    /// Seed of the loss and jitter generators (each direction derives its own stream).
    pub seed: u64,
}

/// Names of the built-in profiles.
const NAMES: &[&str] = &["us-nz-1999", "pacific", "satellite", "lossy", "lossy-3"];

/// Bytes in one bandwidth-delay product of `rate_bps` over `rtt`.
pub fn bdp_bytes(rate_bps: u64, rtt: Duration) -> u64 {
    (u128::from(rate_bps) * rtt.as_nanos() / 8 / 1_000_000_000) as u64
}

/// `tcp_rmem`/`tcp_wmem` maximum for a path: four bandwidth-delay products (room for a
/// full queue plus the receiver's autotuning overhead), at least the kernel's 4 MiB/6 MiB.
fn buffer_max(rate_bps: u64, rtt: Duration) -> u32 {
    let four_bdp = bdp_bytes(rate_bps, rtt).saturating_mul(4);
    u32::try_from(four_bdp.clamp(6 << 20, 256 << 20)).unwrap_or(u32::MAX)
}

impl Profile {
    /// A symmetric long link of `rtt` and `rate_bps` with a one-BDP drop-tail queue,
    /// Bernoulli loss `loss` per direction, default access/origin links, BBR.
    pub fn symmetric(name: &str, rtt: Duration, rate_bps: u64, loss: f64) -> Profile {
        Profile::asymmetric(name, rtt, rate_bps, rate_bps, loss)
    }

    /// Like [`Profile::symmetric`] with distinct rates down (remote → edge) and up.
    pub fn asymmetric(name: &str, rtt: Duration, down_bps: u64, up_bps: u64, loss: f64) -> Profile {
        let one_way = rtt / 2;
        let dir = |rate: u64| DirectionSpec {
            delay: one_way,
            rate_bps: Some(rate),
            queue_bytes: bdp_bytes(rate, rtt).clamp(MIN_QUEUE_BYTES, MAX_QUEUE_BYTES),
            loss: if loss > 0.0 {
                LossModel::Bernoulli { p: loss }
            } else {
                LossModel::None
            },
            jitter: Duration::ZERO,
        };
        let max = buffer_max(down_bps.max(up_bps), rtt);
        Profile {
            name: name.to_string(),
            down: dir(down_bps),
            up: dir(up_bps),
            access_delay: DEFAULT_ACCESS_DELAY,
            origin_delay: DEFAULT_ORIGIN_DELAY,
            congestion_control: "bbr".to_string(),
            tcp_rmem: [4096, 131_072, max],
            tcp_wmem: [4096, 16_384, max],
            slow_start_after_idle: false,
            seed: DEFAULT_SEED,
        }
    }

    /// A built-in profile by name (see [`Profile::names`]), `None` if unknown.
    pub fn named(name: &str) -> Option<Profile> {
        let ms = Duration::from_millis;
        Some(match name {
            // Seed 001: the 1999 NZ–US link, a T3 fraction of 34.368 Mbit/s, 120 ms.
            "us-nz-1999" => Profile::symmetric(name, ms(120), 34_368_000, 0.0),
            // Auckland – Los Angeles today.
            "pacific" => Profile::symmetric(name, ms(130), 100_000_000, 0.0),
            // Geostationary: 50 Mbit/s down, 10 up, 0.1 % loss.
            "satellite" => Profile::asymmetric(name, ms(600), 50_000_000, 10_000_000, 0.001),
            // Seed 004's loss cases.
            "lossy" => Profile::symmetric(name, ms(200), 10_000_000, 0.015),
            "lossy-3" => Profile::symmetric(name, ms(200), 10_000_000, 0.03),
            _ => return None,
        })
    }

    /// Names of the built-in profiles.
    pub fn names() -> &'static [&'static str] {
        NAMES
    }

    /// Round-trip propagation time of the long link (down + up delay).
    pub fn rtt(&self) -> Duration {
        self.down.delay + self.up.delay
    }

    /// Round trip of the access link (client to edge and back).
    pub fn access_rtt(&self) -> Duration {
        2 * self.access_delay
    }

    /// Round trip of the origin link (remote to origin and back).
    pub fn origin_rtt(&self) -> Duration {
        2 * self.origin_delay
    }

    /// Round-trip propagation time from client to origin: access, long and origin links.
    pub fn path_rtt(&self) -> Duration {
        self.access_rtt() + self.rtt() + self.origin_rtt()
    }

    /// Checks every value; a profile that passes can be brought up.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            !self.name.is_empty() && self.name.len() <= 64,
            "profile name must be 1..=64 bytes"
        );
        self.down.validate("down direction")?;
        self.up.validate("up direction")?;
        ensure!(
            self.access_delay <= MAX_DELAY && self.origin_delay <= MAX_DELAY,
            "access/origin delay exceeds {MAX_DELAY:?}"
        );
        ensure!(
            !self.congestion_control.is_empty()
                && self
                    .congestion_control
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "congestion control {:?} is not a valid algorithm name",
            self.congestion_control
        );
        for (what, m) in [("tcp_rmem", self.tcp_rmem), ("tcp_wmem", self.tcp_wmem)] {
            ensure!(
                m[0] >= 1024 && m[0] <= m[1] && m[1] <= m[2],
                "{what} must be min <= default <= max with min >= 1024, got {m:?}"
            );
        }
        Ok(())
    }

    /// Applies a [`ProfileSpec`] (from TOML or flags) on top of this profile; a changed
    /// rate or RTT re-derives the queue (one BDP) unless the spec sets it.
    pub fn apply(mut self, spec: &ProfileSpec) -> anyhow::Result<Profile> {
        let ms = |v: f64, what: &str| -> anyhow::Result<Duration> {
            ensure!(
                v.is_finite() && v >= 0.0,
                "{what} must be a non-negative number of milliseconds, got {v}"
            );
            Duration::try_from_secs_f64(v / 1000.0).with_context(|| format!("{what} {v} ms"))
        };
        let mbit = |v: f64, what: &str| -> anyhow::Result<u64> {
            ensure!(
                v.is_finite() && v > 0.0,
                "{what} must be a positive number of Mbit/s, got {v}"
            );
            Ok((v * 1e6).round() as u64)
        };
        if let Some(name) = &spec.name {
            self.name = name.clone();
        }
        if let Some(rtt) = spec.rtt_ms {
            let d = ms(rtt, "rtt_ms")? / 2;
            self.down.delay = d;
            self.up.delay = d;
        }
        if let Some(r) = spec.rate_mbit {
            let r = mbit(r, "rate_mbit")?;
            self.down.rate_bps = Some(r);
            self.up.rate_bps = Some(r);
        }
        if let Some(r) = spec.down_rate_mbit {
            self.down.rate_bps = Some(mbit(r, "down_rate_mbit")?);
        }
        if let Some(r) = spec.up_rate_mbit {
            self.up.rate_bps = Some(mbit(r, "up_rate_mbit")?);
        }
        let rtt = self.rtt();
        for dir in [&mut self.down, &mut self.up] {
            if let Some(rate) = dir.rate_bps {
                dir.queue_bytes = bdp_bytes(rate, rtt).clamp(MIN_QUEUE_BYTES, MAX_QUEUE_BYTES);
            }
        }
        if let Some(q) = spec.queue_bytes {
            self.down.queue_bytes = q;
            self.up.queue_bytes = q;
        }
        if let Some(loss) = &spec.loss {
            let model = parse_loss(loss)?;
            self.down.loss = model;
            self.up.loss = model;
        }
        if let Some(j) = spec.jitter_ms {
            let j = ms(j, "jitter_ms")?;
            self.down.jitter = j;
            self.up.jitter = j;
        }
        if let Some(d) = spec.access_delay_ms {
            self.access_delay = ms(d, "access_delay_ms")?;
        }
        if let Some(d) = spec.origin_delay_ms {
            self.origin_delay = ms(d, "origin_delay_ms")?;
        }
        if let Some(cc) = &spec.congestion_control {
            self.congestion_control = cc.clone();
        }
        if let Some(m) = spec.tcp_rmem {
            self.tcp_rmem = m;
        }
        if let Some(m) = spec.tcp_wmem {
            self.tcp_wmem = m;
        }
        if let Some(s) = spec.slow_start_after_idle {
            self.slow_start_after_idle = s;
        }
        if let Some(s) = spec.seed {
            self.seed = s;
        }
        self.validate()?;
        Ok(self)
    }

    /// Reads a TOML profile file: a [`ProfileSpec`] whose `base` names the built-in
    /// profile it starts from (default `pacific`).
    pub fn from_toml(text: &str) -> anyhow::Result<Profile> {
        let spec: ProfileSpec = toml::from_str(text).context("invalid profile TOML")?;
        let base_name = spec.base.as_deref().unwrap_or("pacific");
        let Some(base) = Profile::named(base_name) else {
            bail!(
                "unknown base profile {base_name:?}; known: {}",
                NAMES.join(", ")
            );
        };
        let mut p = base.apply(&spec)?;
        if spec.name.is_none() {
            p.name = "custom".to_string();
        }
        Ok(p)
    }
}

/// Custom values over a base profile, as read from TOML (unknown keys rejected) or
/// assembled from command-line flags. Every field is optional.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    /// Built-in profile to start from (TOML only; default `pacific`).
    pub base: Option<String>,
    /// Profile name reported by `calibrate`.
    pub name: Option<String>,
    /// Long-link round-trip propagation time, ms (split equally per direction).
    pub rtt_ms: Option<f64>,
    /// Long-link rate both directions, Mbit/s.
    pub rate_mbit: Option<f64>,
    /// Long-link rate remote → edge, Mbit/s.
    pub down_rate_mbit: Option<f64>,
    /// Long-link rate edge → remote, Mbit/s.
    pub up_rate_mbit: Option<f64>,
    /// Drop-tail queue per direction, bytes (default one BDP).
    pub queue_bytes: Option<u64>,
    /// Loss model: `0.015` (Bernoulli) or `ge:p,r,loss_good,loss_bad` (Gilbert–Elliott).
    pub loss: Option<String>,
    /// Uniform jitter bound per direction, ms.
    pub jitter_ms: Option<f64>,
    /// Access link one-way delay, ms.
    pub access_delay_ms: Option<f64>,
    /// Origin link one-way delay, ms.
    pub origin_delay_ms: Option<f64>,
    /// Congestion control of every namespace.
    pub congestion_control: Option<String>,
    /// `tcp_rmem` triple.
    pub tcp_rmem: Option<[u32; 3]>,
    /// `tcp_wmem` triple.
    pub tcp_wmem: Option<[u32; 3]>,
    /// `tcp_slow_start_after_idle`.
    pub slow_start_after_idle: Option<bool>,
    /// Generator seed.
    pub seed: Option<u64>,
}

/// Parses a loss model: a plain probability (`0.015`), `none`, or
/// `ge:p,r,loss_good,loss_bad`.
pub fn parse_loss(text: &str) -> anyhow::Result<LossModel> {
    let t = text.trim();
    let model = if t == "none" {
        LossModel::None
    } else if let Some(rest) = t.strip_prefix("ge:") {
        let v: Vec<f64> = rest
            .split(',')
            .map(|x| x.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .with_context(|| format!("invalid Gilbert-Elliott parameters {rest:?}"))?;
        ensure!(
            v.len() == 4,
            "Gilbert-Elliott needs 4 values p,r,loss_good,loss_bad, got {}",
            v.len()
        );
        LossModel::GilbertElliott {
            p: v[0],
            r: v[1],
            loss_good: v[2],
            loss_bad: v[3],
        }
    } else {
        let p: f64 = t.parse().with_context(|| {
            format!("invalid loss {t:?}: expected a probability, `none` or `ge:p,r,g,b`")
        })?;
        if p == 0.0 {
            LossModel::None
        } else {
            LossModel::Bernoulli { p }
        }
    };
    model.validate()?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_profiles_match_the_design_table() {
        for n in Profile::names() {
            let p = Profile::named(n).unwrap();
            p.validate().unwrap();
            assert_eq!(&p.name, n);
        }
        let p = Profile::named("us-nz-1999").unwrap();
        assert_eq!(p.rtt(), Duration::from_millis(120));
        assert_eq!(p.down.rate_bps, Some(34_368_000));
        assert_eq!(p.down.queue_bytes, 515_520);
        let s = Profile::named("satellite").unwrap();
        assert_eq!(s.rtt(), Duration::from_millis(600));
        assert_eq!(s.down.rate_bps, Some(50_000_000));
        assert_eq!(s.up.rate_bps, Some(10_000_000));
        assert_eq!(s.down.loss, LossModel::Bernoulli { p: 0.001 });
        assert_eq!(Profile::named("lossy-3").unwrap().up.loss.mean_loss(), 0.03);
        assert!(Profile::named("nope").is_none());
    }

    #[test]
    fn path_rtt_adds_the_short_links_to_the_long_one() {
        let p =
            Profile::from_toml("rtt_ms = 200\naccess_delay_ms = 2\norigin_delay_ms = 3\n").unwrap();
        assert_eq!(p.access_rtt(), Duration::from_millis(4));
        assert_eq!(p.origin_rtt(), Duration::from_millis(6));
        assert_eq!(p.path_rtt(), Duration::from_millis(210));
    }

    #[test]
    fn toml_overrides_and_rejects_unknown_keys() {
        let p = Profile::from_toml(
            "base = \"lossy\"\nrtt_ms = 300\nrate_mbit = 20\nloss = \"ge:0.01,0.3,0,0.5\"\n",
        )
        .unwrap();
        assert_eq!(p.name, "custom");
        assert_eq!(p.rtt(), Duration::from_millis(300));
        assert_eq!(p.up.rate_bps, Some(20_000_000));
        assert_eq!(p.up.queue_bytes, 750_000);
        assert!(matches!(p.down.loss, LossModel::GilbertElliott { .. }));
        let err = Profile::from_toml("rtt_ms = 10\nbogus = 1\n").unwrap_err();
        assert!(format!("{err:#}").contains("bogus"), "{err:#}");
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        assert!(parse_loss("1.5").is_err());
        assert!(parse_loss("ge:0.1,0.2").is_err());
        assert!(parse_loss("lots").is_err());
        assert_eq!(parse_loss("0").unwrap(), LossModel::None);
        let base = Profile::named("pacific").unwrap();
        let bad = ProfileSpec {
            rate_mbit: Some(-1.0),
            ..Default::default()
        };
        assert!(base.clone().apply(&bad).is_err());
        let bad = ProfileSpec {
            congestion_control: Some("bbr; rm".into()),
            ..Default::default()
        };
        assert!(base.apply(&bad).is_err());
    }

    #[test]
    fn gilbert_elliott_mean_loss_is_the_stationary_mix() {
        let m = LossModel::GilbertElliott {
            p: 0.01,
            r: 0.09,
            loss_good: 0.0,
            loss_bad: 0.5,
        };
        assert!((m.mean_loss() - 0.05).abs() < 1e-12);
    }
}
