//! What a SIGHUP reload can change, for both binaries.
//!
//! What it does: compares the running configuration with the one just re-read from disk and
//! names the keys that differ ([`changed_keys`]), so the reload log says exactly what needs a
//! restart. `log_level` is applied by the binaries through [`crate::logging::LogControl`]. The
//! key files behind `[pool.tls]` / `[tls]` are re-read by the TLS carrier itself
//! (new pool connections use them; established ones continue), so changing their contents
//! needs no restart.
//!
//! What it does NOT do: apply other changes to a running process: listeners, pool shape,
//! limits and access lists keep the values the process started with until it is restarted
//! (`systemctl restart` drains first).

use serde::Serialize;

/// Dotted names of the configuration keys whose values differ between `old` and `new`
/// (nested tables are compared key by key; an added or removed key counts as changed).
pub fn changed_keys<T: Serialize>(old: &T, new: &T) -> Vec<String> {
    let (Ok(a), Ok(b)) = (toml::Value::try_from(old), toml::Value::try_from(new)) else {
        return vec!["<configuration>".into()];
    };
    let mut out = Vec::new();
    diff("", &a, &b, &mut out);
    out
}

fn diff(prefix: &str, a: &toml::Value, b: &toml::Value, out: &mut Vec<String>) {
    match (a, b) {
        (toml::Value::Table(x), toml::Value::Table(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(v), Some(w)) => diff(&name, v, w, out),
                    _ => out.push(name),
                }
            }
        }
        _ if a != b => out.push(prefix.to_string()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Serialize)]
    struct Pool {
        connections: usize,
        remote: String,
    }

    #[derive(Clone, Serialize)]
    struct Config {
        drain_grace_ms: u64,
        log_level: String,
        pool: Pool,
    }

    #[test]
    fn names_the_changed_keys() {
        let a = Config {
            drain_grace_ms: 10_000,
            log_level: "info".into(),
            pool: Pool {
                connections: 4,
                remote: "127.0.0.1:4443".into(),
            },
        };
        assert!(changed_keys(&a, &a.clone()).is_empty());
        let mut b = a.clone();
        b.pool.connections += 1;
        b.drain_grace_ms += 1;
        assert_eq!(
            changed_keys(&a, &b),
            vec!["drain_grace_ms".to_string(), "pool.connections".to_string()]
        );
    }
}
