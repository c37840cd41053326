//! `strftime_now(format)`: the current time (UTC) formatted as C's strftime
//! formats it in the "C" locale, for templates that print today's date.

use std::fmt::Write;

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A broken-down UTC time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tm {
    year: i64,
    month: u32, // 1..=12
    day: u32,   // 1..=31
    hour: u32,
    minute: u32,
    second: u32,
    weekday: u32, // 0 = Monday
    yday: u32,    // 1..=366
}

fn tm_from_unix(secs: i64) -> Tm {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400) as u32;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = before[month as usize - 1] + day + u32::from(leap && month > 2);
    Tm {
        year,
        month,
        day,
        hour: rem / 3600,
        minute: rem % 3600 / 60,
        second: rem % 60,
        // 1970-01-01 was a Thursday.
        weekday: (days + 3).rem_euclid(7) as u32,
        yday,
    }
}

/// `format` with `%`-directives replaced for time `unix` (seconds since the
/// epoch, UTC). Supported: `%a %A %b %B %d %e %H %I %j %m %M %p %S %y %Y
/// %F %T %D %%`, with glibc's `-` flag (`%-d`: no padding); other
/// directives are kept as written.
pub(crate) fn strftime(format: &str, unix: i64) -> String {
    let tm = tm_from_unix(unix);
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let no_pad = chars.peek() == Some(&'-');
        if no_pad {
            chars.next();
        }
        let num = |out: &mut String, v: i64, width: usize| {
            if no_pad {
                let _ = write!(out, "{v}");
            } else {
                let _ = write!(out, "{v:0width$}");
            }
        };
        let hour12 = match tm.hour % 12 {
            0 => 12,
            h => h,
        };
        match chars.next() {
            Some('a') => out.push_str(&DAYS[tm.weekday as usize][..3]),
            Some('A') => out.push_str(DAYS[tm.weekday as usize]),
            Some('b') | Some('h') => out.push_str(&MONTHS[tm.month as usize - 1][..3]),
            Some('B') => out.push_str(MONTHS[tm.month as usize - 1]),
            Some('d') => num(&mut out, tm.day.into(), 2),
            Some('e') => {
                let _ = if no_pad {
                    write!(out, "{}", tm.day)
                } else {
                    write!(out, "{:2}", tm.day)
                };
            }
            Some('H') => num(&mut out, tm.hour.into(), 2),
            Some('I') => num(&mut out, hour12.into(), 2),
            Some('j') => num(&mut out, tm.yday.into(), 3),
            Some('m') => num(&mut out, tm.month.into(), 2),
            Some('M') => num(&mut out, tm.minute.into(), 2),
            Some('p') => out.push_str(if tm.hour < 12 { "AM" } else { "PM" }),
            Some('S') => num(&mut out, tm.second.into(), 2),
            Some('y') => num(&mut out, tm.year.rem_euclid(100), 2),
            Some('Y') => {
                let _ = write!(out, "{}", tm.year);
            }
            Some('F') => {
                let _ = write!(out, "{}-{:02}-{:02}", tm.year, tm.month, tm.day);
            }
            Some('T') => {
                let _ = write!(out, "{:02}:{:02}:{:02}", tm.hour, tm.minute, tm.second);
            }
            Some('D') => {
                let _ = write!(
                    out,
                    "{:02}/{:02}/{:02}",
                    tm.month,
                    tm.day,
                    tm.year.rem_euclid(100)
                );
            }
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if no_pad {
                    out.push('-');
                }
                out.push(other);
            }
            None => {
                out.push('%');
                if no_pad {
                    out.push('-');
                }
            }
        }
    }
    out
}

/// Seconds since the epoch now (0 if the clock is before 1970).
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        // 2024-07-23 14:05:09 UTC, a Tuesday, day 205 of a leap year.
        let t = 1_721_743_509;
        assert_eq!(strftime("%d %b %Y", t), "23 Jul 2024");
        assert_eq!(strftime("%A %B %-d, %Y", t), "Tuesday July 23, 2024");
        assert_eq!(
            strftime("%F %T %j %p %I %y", t),
            "2024-07-23 14:05:09 205 PM 02 24"
        );
        assert_eq!(strftime("100%% %Q %", t), "100% %Q %");
        assert_eq!(strftime("%e|%-m|%D", 0), " 1|1|01/01/70");
        assert_eq!(strftime("%a %Y-%m-%d", 951_782_400), "Tue 2000-02-29");
        assert_eq!(strftime("%Y-%m-%d %H", -1), "1969-12-31 23");
    }
}
