//! Wall-clock timestamps as they appear in annotations, with a small RFC 3339 codec.
//!
//! Core never reads a clock: a [`Timestamp`] only comes from parsing an annotation or from a
//! value the driver passes in. We write nanosecond precision (second precision made ties
//! between two syntheses likely) and read both precisions, so Secrets written by Eno itself
//! (Go's `time.RFC3339`, whole seconds) still order correctly against ours.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use thiserror::Error;

const NANOS_PER_SEC: i128 = 1_000_000_000;
const SECS_PER_DAY: i128 = 86_400;

/// A UTC instant in nanoseconds since the Unix epoch (negative before 1970).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp {
    /// Nanoseconds since 1970-01-01T00:00:00Z.
    pub unix_nanos: i128,
}

/// Why a string is not an RFC 3339 timestamp we accept.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid RFC 3339 timestamp {input:?}: {why}")]
pub struct TimestampError {
    /// The rejected text.
    pub input: String,
    /// What was wrong with it.
    pub why: &'static str,
}

impl Timestamp {
    /// Builds a timestamp from nanoseconds since the Unix epoch.
    pub const fn from_unix_nanos(unix_nanos: i128) -> Self {
        Timestamp { unix_nanos }
    }

    /// Builds a timestamp from whole seconds since the Unix epoch.
    pub const fn from_unix_secs(secs: i64) -> Self {
        Timestamp {
            unix_nanos: secs as i128 * NANOS_PER_SEC,
        }
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|±HH:MM)`; `t`/`z` are accepted in lower case too.
    ///
    /// Strict on purpose: an annotation we cannot order must make selection invalid rather
    /// than be guessed at.
    pub fn parse_rfc3339(s: &str) -> Result<Timestamp, TimestampError> {
        let err = |why| TimestampError {
            input: s.to_string(),
            why,
        };
        let b = s.as_bytes();
        if b.len() < 20 {
            return Err(err("too short"));
        }
        let num = |from: usize, len: usize| -> Result<i128, TimestampError> {
            let part = b.get(from..from + len).ok_or_else(|| err("truncated"))?;
            let mut v: i128 = 0;
            for &c in part {
                if !c.is_ascii_digit() {
                    return Err(err("expected a digit"));
                }
                v = v * 10 + i128::from(c - b'0');
            }
            Ok(v)
        };
        let year = num(0, 4)?;
        if b[4] != b'-' || b[7] != b'-' {
            return Err(err("expected '-' in the date"));
        }
        let month = num(5, 2)?;
        let day = num(8, 2)?;
        if b[10] != b'T' && b[10] != b't' {
            return Err(err("expected 'T' between date and time"));
        }
        let hour = num(11, 2)?;
        if b[13] != b':' || b[16] != b':' {
            return Err(err("expected ':' in the time"));
        }
        let minute = num(14, 2)?;
        let second = num(17, 2)?;
        if !(1..=12).contains(&month) {
            return Err(err("month out of range"));
        }
        if day < 1 || day > days_in_month(year, month) {
            return Err(err("day out of range"));
        }
        if hour > 23 || minute > 59 || second > 59 {
            return Err(err("time of day out of range"));
        }
        let mut pos = 19;
        let mut frac: i128 = 0;
        if b.get(pos) == Some(&b'.') {
            pos += 1;
            let start = pos;
            while pos < b.len() && b[pos].is_ascii_digit() {
                pos += 1;
            }
            let digits = pos - start;
            if digits == 0 || digits > 9 {
                return Err(err("fraction must have 1 to 9 digits"));
            }
            frac = num(start, digits)? * 10i128.pow((9 - digits) as u32);
        }
        let offset_secs: i128 = match b.get(pos) {
            Some(b'Z') | Some(b'z') if pos + 1 == b.len() => 0,
            Some(&sign @ (b'+' | b'-')) if pos + 6 == b.len() => {
                if b[pos + 3] != b':' {
                    return Err(err("expected ':' in the offset"));
                }
                let oh = num(pos + 1, 2)?;
                let om = num(pos + 4, 2)?;
                if oh > 23 || om > 59 {
                    return Err(err("offset out of range"));
                }
                let o = oh * 3600 + om * 60;
                if sign == b'+' {
                    o
                } else {
                    -o
                }
            }
            _ => return Err(err("expected 'Z' or an offset at the end")),
        };
        let days = days_from_civil(year, month, day);
        let secs = days * SECS_PER_DAY + hour * 3600 + minute * 60 + second - offset_secs;
        Ok(Timestamp {
            unix_nanos: secs * NANOS_PER_SEC + frac,
        })
    }

    /// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`, always nine fraction digits, always UTC.
    pub fn format_rfc3339_nanos(&self) -> String {
        let (secs, nanos) = self.split();
        let (date, time) = civil(secs);
        format!("{date}T{time}.{nanos:09}Z")
    }

    /// `YYYY-MM-DDTHH:MM:SSZ` (fraction dropped), the form Go's `time.RFC3339` writes.
    pub fn format_rfc3339_secs(&self) -> String {
        let (secs, _) = self.split();
        let (date, time) = civil(secs);
        format!("{date}T{time}Z")
    }

    fn split(&self) -> (i128, i128) {
        (
            self.unix_nanos.div_euclid(NANOS_PER_SEC),
            self.unix_nanos.rem_euclid(NANOS_PER_SEC),
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.format_rfc3339_nanos())
    }
}

impl std::str::FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Timestamp::parse_rfc3339(s)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.format_rfc3339_nanos())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

fn is_leap(y: i128) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i128, m: i128) -> i128 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i128, m: i128, d: i128) -> i128 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// ("YYYY-MM-DD", "HH:MM:SS") of seconds since the epoch.
fn civil(secs: i128) -> (String, String) {
    let days = secs.div_euclid(SECS_PER_DAY);
    let sod = secs.rem_euclid(SECS_PER_DAY);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i128::from(m <= 2);
    (
        format!("{y:04}-{m:02}-{d:02}"),
        format!("{:02}:{:02}:{:02}", sod / 3600, sod % 3600 / 60, sod % 60),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_both_precisions() {
        let a = Timestamp::parse_rfc3339("2026-12-02T14:03:04Z").unwrap();
        let b = Timestamp::parse_rfc3339("2026-12-02T14:03:04.123456789Z").unwrap();
        assert_eq!(b.unix_nanos - a.unix_nanos, 123_456_789);
        assert_eq!(a.format_rfc3339_secs(), "2026-12-02T14:03:04Z");
        assert_eq!(b.to_string(), "2026-12-02T14:03:04.123456789Z");
        assert_eq!(a.unix_nanos, 1_796_220_184 * NANOS_PER_SEC);
    }

    #[test]
    fn offsets_and_short_fractions() {
        let z = Timestamp::parse_rfc3339("2026-12-02T14:03:04.5Z").unwrap();
        let o = Timestamp::parse_rfc3339("2026-12-02T16:03:04.500+02:00").unwrap();
        assert_eq!(z, o);
        assert_eq!(z.to_string(), "2026-12-02T14:03:04.500000000Z");
        let e = Timestamp::parse_rfc3339("1969-12-31T23:59:59.999999999Z").unwrap();
        assert_eq!(e.unix_nanos, -1);
        assert_eq!(e.to_string(), "1969-12-31T23:59:59.999999999Z");
    }

    #[test]
    fn rejects_bad_input() {
        for s in [
            "",
            "2026-12-02",
            "2026-12-02 14:03:04Z",
            "2026-13-02T14:03:04Z",
            "2026-02-29T14:03:04Z",
            "2026-12-02T24:03:04Z",
            "2026-12-02T14:03:04",
            "2026-12-02T14:03:04.Z",
            "2026-12-02T14:03:04.1234567890Z",
            "2026-12-02T14:03:04+0200",
            "2026-12-02T14:03:04Zjunk",
            "yesterday-ish",
        ] {
            assert!(Timestamp::parse_rfc3339(s).is_err(), "{s}");
        }
        assert!(Timestamp::parse_rfc3339("2024-02-29T00:00:00Z").is_ok());
    }

    proptest! {
        #[test]
        fn round_trips(n in -62_135_596_800_000_000_000i128..253_402_300_799_999_999_999i128) {
            let t = Timestamp::from_unix_nanos(n);
            prop_assert_eq!(Timestamp::parse_rfc3339(&t.format_rfc3339_nanos()).unwrap(), t);
        }
    }
}
