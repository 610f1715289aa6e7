//! Times as the inbox stores them: RFC 3339 in UTC with milliseconds, always 24 characters, so
//! that text order is time order.

use std::time::{Duration, SystemTime};

/// The earliest and latest times RFC 3339 text can hold here: 1970-01-01T00:00:00.000Z and
/// 9999-12-31T23:59:59.999Z.
const LATEST: Duration = Duration::from_millis(253_402_300_799_999);

/// `t` as stored text. A time before 1970 (a clock that was never set) or after 9999 is
/// clamped rather than a panic: the formatter takes only times in between.
pub fn rfc3339(t: SystemTime) -> String {
    let since = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .min(LATEST);
    humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH + since).to_string()
}

/// Now, as stored text.
pub fn now() -> String {
    rfc3339(SystemTime::now())
}

/// True while the system clock reads a time before 1970.
pub fn before_1970() -> bool {
    SystemTime::now() < SystemTime::UNIX_EPOCH
}

/// `days` before now, as stored text; 1970 where that is earlier (nothing is older than that).
pub fn days_ago(days: u32) -> String {
    let back = Duration::from_secs(u64::from(days) * 86_400);
    rfc3339(
        SystemTime::now()
            .checked_sub(back)
            .unwrap_or(SystemTime::UNIX_EPOCH),
    )
}

/// `2026-11-01` (midnight UTC), or an RFC 3339 time with `Z`, a `+02:00`/`-05:00` offset, or
/// none (UTC), or a time relative to now (see [`relative`]), as stored text, so that it
/// compares as text with stored times.
pub fn parse_since(text: &str) -> Result<String, String> {
    parse_since_at(text, SystemTime::now())
}

/// [`parse_since`] with `now` given, so that relative times can be checked at a fixed time.
pub fn parse_since_at(text: &str, now: SystemTime) -> Result<String, String> {
    let hint = "(try 2h, 30m, 7d, today, yesterday, 2026-11-01, 2026-11-01T08:00:00Z or \
                2026-11-01T10:00:00+02:00)";
    let t = text.trim();
    if let Some(at) = relative(t, now) {
        return at
            .map(rfc3339)
            .ok_or_else(|| format!("{text:?} is out of range {hint}"));
    }
    let (base, offset) = match split_offset(t) {
        Some((base, offset)) => (format!("{base}Z"), offset),
        None if t.len() == 10 => (format!("{t}T00:00:00Z"), 0),
        None => (t.to_string(), 0),
    };
    let local = humantime::parse_rfc3339_weak(&base).map_err(|e| format!("{e} {hint}"))?;
    let utc = if offset >= 0 {
        local.checked_sub(Duration::from_secs(offset as u64))
    } else {
        local.checked_add(Duration::from_secs(offset.unsigned_abs()))
    }
    .ok_or_else(|| format!("{text:?} is out of range {hint}"))?;
    Ok(rfc3339(utc))
}

/// A time relative to `now`: `today` and `yesterday` (midnight UTC of that day), or a
/// duration before now (`2h`, `30m`, `7d`, `1h30m`: whatever `humantime` reads that ends in a
/// unit). `None` where the text is none of these (an absolute time, or a mistake); `Some(None)`
/// where it is one but reaches before 1970.
fn relative(t: &str, now: SystemTime) -> Option<Option<SystemTime>> {
    const DAY: u64 = 86_400;
    let midnight = || {
        let secs = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs - secs % DAY)
    };
    match t.to_ascii_lowercase().as_str() {
        "today" => return Some(Some(midnight())),
        "yesterday" => return Some(midnight().checked_sub(Duration::from_secs(DAY))),
        _ => {}
    }
    // A plain number is not taken for seconds here: `--since 2026` reads better as a mistake.
    if !t.ends_with(|c: char| c.is_ascii_alphabetic())
        || !t.starts_with(|c: char| c.is_ascii_digit())
    {
        return None;
    }
    let back = humantime::parse_duration(t).ok()?;
    Some(
        now.checked_sub(back)
            .filter(|at| *at >= SystemTime::UNIX_EPOCH),
    )
}

/// `("2026-11-01T10:00:00", 7200)` for `2026-11-01T10:00:00+02:00`.
fn split_offset(t: &str) -> Option<(&str, i64)> {
    let cut = t.len().checked_sub(6)?;
    let (base, tail) = (t.get(..cut)?, t.get(cut..)?.as_bytes());
    let sign = match tail[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digit = |b: u8| b.is_ascii_digit().then(|| i64::from(b - b'0'));
    if tail[3] != b':' || !base.contains('T') && !base.contains(' ') {
        return None;
    }
    let hours = digit(tail[1])? * 10 + digit(tail[2])?;
    let minutes = digit(tail[4])? * 10 + digit(tail[5])?;
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some((base, sign * (hours * 3600 + minutes * 60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_outside_what_the_text_can_hold_are_clamped() {
        let before = SystemTime::UNIX_EPOCH - Duration::from_secs(86_400 * 365 * 10);
        assert_eq!(rfc3339(before), "1970-01-01T00:00:00.000Z");
        let after = SystemTime::UNIX_EPOCH + Duration::from_secs(300_000_000_000);
        assert_eq!(rfc3339(after), "9999-12-31T23:59:59.999Z");
        assert_eq!(days_ago(u32::MAX), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn since_takes_dates_utc_times_and_offsets() {
        let ok = |t: &str| parse_since(t).unwrap();
        assert_eq!(ok("2026-11-01"), "2026-11-01T00:00:00.000Z");
        assert_eq!(ok("2026-11-01T08:30:00Z"), "2026-11-01T08:30:00.000Z");
        assert_eq!(ok("2026-11-01T10:30:00+02:00"), "2026-11-01T08:30:00.000Z");
        assert_eq!(ok("2026-11-01T03:30:00-05:00"), "2026-11-01T08:30:00.000Z");
        assert_eq!(ok("2026-11-01T00:30:00+01:00"), "2026-10-31T23:30:00.000Z");
        assert_eq!(
            ok("2026-11-01T08:30:00.250+00:00"),
            "2026-11-01T08:30:00.250Z"
        );
        assert!(parse_since("tuesday").is_err());
        assert!(parse_since("2026").is_err());
        assert!(parse_since("2026-11-01T08:30:00+25:00").is_err());
    }

    #[test]
    fn since_takes_times_relative_to_now_in_utc() {
        // 2026-11-02T09:15:30.000Z
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_793_610_930);
        let at = |t: &str| parse_since_at(t, now).unwrap();
        assert_eq!(rfc3339(now), "2026-11-02T09:15:30.000Z");
        assert_eq!(at("2h"), "2026-11-02T07:15:30.000Z");
        assert_eq!(at("30m"), "2026-11-02T08:45:30.000Z");
        assert_eq!(at("7d"), "2026-10-26T09:15:30.000Z");
        assert_eq!(at("1h30m"), "2026-11-02T07:45:30.000Z");
        assert_eq!(at("today"), "2026-11-02T00:00:00.000Z");
        assert_eq!(at("Yesterday"), "2026-11-01T00:00:00.000Z");
        assert!(parse_since_at("100000000d", now).is_err());
        assert!(parse_since_at("2x", now).is_err());
    }
}
