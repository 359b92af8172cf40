//! SASL PLAIN (RFC 4616): `authzid NUL authcid NUL password`, checked against the user's
//! stored SCRAM credential (the password is salted and hashed with the stored salt and
//! iterations, then compared with StoredKey), so no password is ever kept.

use super::scram::{Credential, Mechanism};
use super::AuthError;

const MALFORMED: fn(&'static str) -> AuthError = |why| AuthError::Malformed {
    mechanism: "PLAIN",
    why,
};

/// Checks one PLAIN message; `lookup` finds the user's credentials (either mechanism).
/// Returns the authenticated user.
pub fn authenticate(
    message: &[u8],
    lookup: impl FnOnce(&str) -> Option<(Mechanism, Credential)>,
) -> Result<String, AuthError> {
    let mut parts = message.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(MALFORMED("expected authzid NUL user NUL password"));
    };
    let user = std::str::from_utf8(user).map_err(|_| MALFORMED("user is not UTF-8"))?;
    if user.is_empty() || password.is_empty() {
        return Err(MALFORMED("empty user or password"));
    }
    // Kafka refuses to act for another user.
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err(MALFORMED("authorization id differs from the user"));
    }
    let (mechanism, credential) =
        lookup(user).ok_or_else(|| AuthError::UnknownUser(user.to_string()))?;
    match credential.verifies(mechanism, password) {
        true => Ok(user.to_string()),
        false => Err(AuthError::WrongPassword(user.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_checks_the_password_against_the_salted_credential() {
        let m = Mechanism::ScramSha256;
        let cred = Credential::from_password(m, b"pw", b"salt".to_vec(), 4096);
        let lookup = |u: &str| (u == "alice").then(|| (m, cred.clone()));
        assert_eq!(authenticate(b"\0alice\0pw", lookup).unwrap(), "alice");
        assert_eq!(authenticate(b"alice\0alice\0pw", lookup).unwrap(), "alice");
        assert_eq!(
            authenticate(b"\0alice\0nope", lookup).unwrap_err(),
            AuthError::WrongPassword("alice".into())
        );
        assert_eq!(
            authenticate(b"\0bob\0pw", lookup).unwrap_err(),
            AuthError::UnknownUser("bob".into())
        );
        for bad in [
            &b""[..],
            b"alice",
            b"\0alice",
            b"\0\0pw",
            b"\0alice\0",
            b"\0alice\0pw\0x",
            b"bob\0alice\0pw",
            b"\0\xff\0pw",
        ] {
            assert!(
                matches!(authenticate(bad, lookup), Err(AuthError::Malformed { .. })),
                "{bad:?}"
            );
        }
    }
}
