//! What the host keeps secret and how: the random ids and control keys it hands out, and URLs
//! with their credentials hidden before they reach a message or a log. The store and the sessions
//! both use these, so they live beside both rather than inside either.

/// 128 random bits as 32 hex digits: session ids, control keys, staging names.
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A URL without its credentials (the query's keys and a password), for messages and logs.
pub fn redact(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else { return url.to_string() };
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("***"));
    }
    let pairs: Vec<(String, String)> = parsed
        .query_pairs()
        .map(|(k, v)| {
            let secret = k.contains("secret") || k.contains("token") || k.contains("password");
            (k.into_owned(), if secret { "***".to_string() } else { v.into_owned() })
        })
        .collect();
    if pairs.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_hex_digits_and_differ() {
        let (a, b) = (random_id(), random_id());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn credentials_are_hidden_and_the_rest_kept() {
        let r = redact("postgres://recap:hunter2@db.example:5432/recap?sslmode=disable");
        assert!(!r.contains("hunter2") && r.contains("recap:***@db.example:5432"), "{r}");
        let r = redact("s3://bucket?endpoint=http://127.0.0.1:9000&secret_access_key=abc&session_token=xyz");
        assert!(!r.contains("abc") && !r.contains("xyz") && r.contains("endpoint="), "{r}");
        assert_eq!(redact("not a url"), "not a url");
    }
}
