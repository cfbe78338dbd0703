//! The SOCKS5 users (`[[socks.users]]`) and the RFC 1929 password check.
//!
//! What it does: holds the configured user names and passwords, and checks a client's
//! credentials in time that does not depend on the password's bytes or length (the stored
//! password and the offered one are compared as fixed-size records with `subtle`); an unknown
//! user name costs the same comparison against a dummy record, so the time taken does not tell
//! which names exist beyond the hash-map lookup.
//!
//! What it does NOT do: hash or store passwords anywhere else (RFC 1929 sends them in clear
//! text; the configuration file must be readable by the service only), rate-limit guesses, or
//! support GSSAPI.

use std::collections::HashMap;

use subtle::ConstantTimeEq;

use super::codec::Credentials;
use crate::config::SocksUser;

/// A password as a fixed-size record: its length, then its bytes, then zeros.
type Record = [u8; 256];

fn record(password: &[u8]) -> Record {
    let mut r = [0u8; 256];
    let n = password.len().min(255);
    r[0] = n as u8;
    r[1..=n].copy_from_slice(&password[..n]);
    r
}

/// The users allowed to authenticate.
#[derive(Clone, Default)]
pub struct Users {
    by_name: HashMap<Vec<u8>, Record>,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Users({} configured)", self.by_name.len())
    }
}

impl Users {
    /// The users of a validated `[[socks.users]]` list.
    pub fn new(list: &[SocksUser]) -> Users {
        Users {
            by_name: list
                .iter()
                .map(|u| (u.name.as_bytes().to_vec(), record(u.password.0.as_bytes())))
                .collect(),
        }
    }

    /// Whether no user is configured (then no authentication is asked for).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Whether `c` names a configured user with its password.
    pub fn check(&self, c: &Credentials) -> bool {
        let offered = record(&c.password);
        // An unknown user's offer is compared against a dummy record, and the result masked
        // by `known`: both paths do the same work.
        let (known, stored) = match self.by_name.get(&c.user) {
            Some(r) => (1u8, *r),
            None => (0u8, [0xffu8; 256]),
        };
        let same: bool = (stored.ct_eq(&offered) & known.ct_eq(&1u8)).into();
        same
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn users() -> Users {
        Users::new(&[
            SocksUser {
                name: "alice".into(),
                password: Secret("correct horse".into()),
            },
            SocksUser {
                name: "bob".into(),
                password: Secret("b".into()),
            },
        ])
    }

    fn creds(u: &str, p: &[u8]) -> Credentials {
        Credentials {
            user: u.as_bytes().to_vec(),
            password: p.to_vec(),
        }
    }

    #[test]
    fn only_the_right_pair_passes() {
        let u = users();
        assert!(u.check(&creds("alice", b"correct horse")));
        assert!(u.check(&creds("bob", b"b")));
        assert!(!u.check(&creds("alice", b"b")));
        assert!(!u.check(&creds("bob", b"correct horse")));
        // Prefixes, extensions and padding never match.
        assert!(!u.check(&creds("alice", b"correct hors")));
        assert!(!u.check(&creds("alice", b"correct horse!")));
        assert!(!u.check(&creds("alice", b"correct horse\0")));
        assert!(!u.check(&creds("Alice", b"correct horse")));
        assert!(!u.check(&creds("carol", b"correct horse")));
        // An unknown user never passes, even with the dummy record's bytes (255 x 0xff).
        assert!(!u.check(&creds("carol", &[0xff; 255])));
        assert!(!Users::default().check(&creds("alice", b"correct horse")));
        assert!(Users::default().is_empty());
        assert_eq!(format!("{u:?}"), "Users(2 configured)");
    }
}
