//! Kubernetes label selectors in their string form (`?labelSelector=`).
//!
//! Supported: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, joined by
//! commas (AND). Whitespace around tokens is ignored, as the apiserver does.

use std::collections::BTreeMap;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `k=v` or `k==v`.
    Equals(String, String),
    /// `k!=v`: true when the label is absent too.
    NotEquals(String, String),
    /// `k`.
    Exists(String),
    /// `!k`.
    DoesNotExist(String),
    /// `k in (a,b)`.
    In(String, Vec<String>),
    /// `k notin (a,b)`: true when the label is absent too.
    NotIn(String, Vec<String>),
}

/// A parsed selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// The ANDed requirements.
    pub requirements: Vec<Requirement>,
}

/// Why a selector string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse requirement: {0}")]
pub struct SelectorError(pub String);

impl Selector {
    /// Parses the string form; the empty string selects everything.
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        let mut requirements = Vec::new();
        for part in split_top_level(s)? {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(Selector { requirements })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
        })
    }
}

/// Splits on commas that are not inside a parenthesised value set.
fn split_top_level(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(SelectorError(s.to_string()));
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError(s.to_string()));
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_set(k: &str, rest: &str, whole: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError(whole.to_string()))?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if !valid_key(k) || values.iter().any(|v| !valid_value(v)) {
        return Err(SelectorError(whole.to_string()));
    }
    Ok(values)
}

fn parse_requirement(part: &str) -> Result<Requirement, SelectorError> {
    let err = || SelectorError(part.to_string());
    if let Some(k) = part.strip_prefix('!') {
        let k = k.trim();
        return if valid_key(k) {
            Ok(Requirement::DoesNotExist(k.to_string()))
        } else {
            Err(err())
        };
    }
    if let Some((k, v)) = part.split_once("!=") {
        let (k, v) = (k.trim(), v.trim());
        return if valid_key(k) && valid_value(v) {
            Ok(Requirement::NotEquals(k.to_string(), v.to_string()))
        } else {
            Err(err())
        };
    }
    if let Some((k, v)) = part.split_once('=') {
        let k = k.trim();
        let v = v.strip_prefix('=').unwrap_or(v).trim();
        return if valid_key(k) && valid_value(v) {
            Ok(Requirement::Equals(k.to_string(), v.to_string()))
        } else {
            Err(err())
        };
    }
    let mut words = part.split_whitespace();
    let k = words.next().ok_or_else(err)?;
    match words.next() {
        None => {
            if valid_key(k) {
                Ok(Requirement::Exists(k.to_string()))
            } else {
                Err(err())
            }
        }
        Some(op @ ("in" | "notin")) => {
            let rest = part
                .trim_start()
                .strip_prefix(k)
                .and_then(|r| r.trim_start().strip_prefix(op))
                .ok_or_else(err)?;
            let values = parse_set(k, rest, part)?;
            if op == "in" {
                Ok(Requirement::In(k.to_string(), values))
            } else {
                Ok(Requirement::NotIn(k.to_string(), values))
            }
        }
        Some(_) => Err(err()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn all_forms() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app in (db, web)", true),
            ("app in (db)", false),
            ("app notin (db)", true),
            ("missing notin (db)", true),
            ("missing in (db)", false),
            ("app=web,tier=front", true),
            ("app=web, tier=back", false),
            ("app in (web,db),!missing,tier", true),
        ] {
            assert_eq!(Selector::parse(sel).unwrap().matches(&l), want, "{sel}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for sel in ["app in web", "app in (web", "a b c", "=x", "!", "k=v v"] {
            assert!(Selector::parse(sel).is_err(), "{sel}");
        }
    }
}
