//! Go-style duration strings ("500ms", "45s", "1m30s"), the format Kubernetes APIs use
//! (`metav1.Duration`), so config files and EtcdMirror specs read the same.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// Parses a Go duration: a sequence of decimal numbers, each with a unit
/// (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`). A bare "0" is zero.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration; use e.g. \"30s\"".into());
    }
    if s.starts_with('-') {
        return Err(format!("negative duration {s:?} is not allowed"));
    }
    let mut total: f64 = 0.0;
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("duration {s:?} is missing a unit (ns, us, ms, s, m, h)"))?;
        if num_len == 0 {
            return Err(format!("duration {s:?} is malformed; use e.g. \"1m30s\""));
        }
        let num: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("duration {s:?} has a malformed number"))?;
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
            _ => return Err(format!("duration {s:?} has unknown unit {unit:?}")),
        };
        total += num * scale;
    }
    if !total.is_finite() || total > 1e12 {
        return Err(format!("duration {s:?} is out of range"));
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
