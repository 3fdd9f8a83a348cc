//! Go-style duration strings ("500ms", "45s", "1m30s"), the format Kubernetes APIs use
//! (`metav1.Duration`), so config files and EtcdMirror specs read the same.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;
use thiserror::Error;

/// Why a duration string was refused; the message names the string and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Nothing but whitespace.
    #[error("empty duration; use e.g. \"30s\"")]
    Empty,
    /// A leading `-`.
    #[error("negative duration {0:?} is not allowed")]
    Negative(String),
    /// A number with no unit after it.
    #[error("duration {0:?} is missing a unit (ns, us, ms, s, m, h)")]
    MissingUnit(String),
    /// A unit with no number before it.
    #[error("duration {0:?} is malformed; use e.g. \"1m30s\"")]
    Malformed(String),
    /// Digits and dots that are not a number.
    #[error("duration {0:?} has a malformed number")]
    MalformedNumber(String),
    /// A unit other than ns, us, µs, ms, s, m, h.
    #[error("duration {duration:?} has unknown unit {unit:?}")]
    UnknownUnit {
        /// The whole duration string.
        duration: String,
        /// The unit found.
        unit: String,
    },
    /// Longer than 10^12 seconds.
    #[error("duration {0:?} is out of range")]
    OutOfRange(String),
}

/// Parses a Go duration: a sequence of decimal numbers, each with a unit
/// (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`). A bare "0" is zero.
pub fn parse(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative(s.to_string()));
    }
    let mut total: f64 = 0.0;
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| DurationError::MissingUnit(s.to_string()))?;
        if num_len == 0 {
            return Err(DurationError::Malformed(s.to_string()));
        }
        let num: f64 = rest[..num_len]
            .parse()
            .map_err(|_| DurationError::MalformedNumber(s.to_string()))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => {
                return Err(DurationError::UnknownUnit {
                    duration: s.to_string(),
                    unit: unit.to_string(),
                })
            }
        };
        total += num * scale;
    }
    if !total.is_finite() || total > 1e12 {
        return Err(DurationError::OutOfRange(s.to_string()));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats like Go's `Duration.String` for whole units ("1m30s", "500ms", "0s").
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000_000_000 && nanos.is_multiple_of(1_000_000) {
        return format!("{}ms", nanos / 1_000_000);
    }
    if nanos < 1_000_000_000 {
        return format!("{nanos}ns");
    }
    let secs = d.as_secs();
    let frac = d.subsec_nanos();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if frac == 0 {
        out.push_str(&format!("{s}s"));
    } else {
        let f = format!("{:09}", frac);
        out.push_str(&format!("{s}.{}s", f.trim_end_matches('0')));
    }
    out
}

/// `#[serde(with = "crate::duration")]` for `Duration` fields.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
}

/// See [`serialize`].
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse(&s).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("45s").unwrap(), Duration::from_secs(45));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert!(parse("10").is_err());
        assert!(parse("-1s").is_err());
        assert!(parse("1x").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn messages_name_the_string_and_the_fix() {
        for (bad, want) in [
            ("", "empty duration; use e.g. \"30s\""),
            ("-1s", "negative duration \"-1s\" is not allowed"),
            (
                "10",
                "duration \"10\" is missing a unit (ns, us, ms, s, m, h)",
            ),
            ("s", "duration \"s\" is malformed; use e.g. \"1m30s\""),
            ("1.2.3s", "duration \"1.2.3s\" has a malformed number"),
            ("1x", "duration \"1x\" has unknown unit \"x\""),
            ("1e13h", "duration \"1e13h\" has unknown unit \"e\""),
            (
                "999999999999999h",
                "duration \"999999999999999h\" is out of range",
            ),
        ] {
            assert_eq!(parse(bad).unwrap_err().to_string(), want, "{bad:?}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for d in [
            Duration::ZERO,
            Duration::from_millis(250),
            Duration::from_secs(1),
            Duration::from_secs(90),
            Duration::from_secs(3601),
            Duration::from_millis(1500),
        ] {
            assert_eq!(parse(&format(d)).unwrap(), d, "{}", format(d));
        }
    }
}
