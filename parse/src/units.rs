//! Exact byte sizes as frameworks print them: `1.50 GiB`, `372.76MiB`, `33554432 bytes`,
//! `1,073,741,824 bytes`, `256.00MiB`, `0B`, and the XLA short forms `17.51G`.
//!
//! Parsing works on the parser's *compact* text (lower-case, whitespace removed, see
//! `text.rs`), so a number and its unit may be glued or split over a wrapped line. Values are
//! computed in integers: `1.50 GiB` is exactly `1.5 × 2^30` (rounded to the nearest byte), never via
//! floating point. Every binary unit is binary, also when printed as `KB`/`MB`/`GB`/`TB` (PyTorch and
//! TensorFlow print 2^20 and call it MB), and so are XLA's `K`/`M`/`G`/`T`.

/// 2^10.
pub const KIB: u64 = 1 << 10;
/// 2^20.
pub const MIB: u64 = 1 << 20;
/// 2^30.
pub const GIB: u64 = 1 << 30;
/// 2^40.
pub const TIB: u64 = 1 << 40;

/// Most digits read in one number (integer plus fraction); longer runs are not sizes.
const MAX_DIGITS: usize = 30;

/// Units in matching order (longest first where one is a prefix of another).
const UNITS: &[(&str, u64)] = &[
    ("bytes", 1),
    ("byte", 1),
    ("kib", KIB),
    ("mib", MIB),
    ("gib", GIB),
    ("tib", TIB),
    ("kb", KIB),
    ("mb", MIB),
    ("gb", GIB),
    ("tb", TIB),
    ("b", 1),
];

/// XLA's one-letter units (`17.51G`), accepted only where a caller asks for them.
const SHORT_UNITS: &[(&str, u64)] = &[("k", KIB), ("m", MIB), ("g", GIB), ("t", TIB)];

/// A number read from text: the digits as an integer and how many of them were after the point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Number {
    /// All digits, integer and fraction, as one integer.
    pub mantissa: u128,
    /// Digits after the decimal point.
    pub scale: u32,
}

impl Number {
    /// The value times `mult`, rounded to the nearest integer; `None` when it does not fit in u64.
    pub fn times(self, mult: u64) -> Option<u64> {
        let pow = 10u128.checked_pow(self.scale)?;
        let scaled = self.mantissa.checked_mul(u128::from(mult))?;
        let v = scaled.checked_add(pow / 2)? / pow;
        u64::try_from(v).ok()
    }

    /// The integer value when there is no fraction.
    pub fn integer(self) -> Option<u64> {
        if self.scale == 0 { u64::try_from(self.mantissa).ok() } else { None }
    }
}

/// Reads a number at `pos` of `s`: digits, optional thousands groups (`1,073,741,824`: every group
/// exactly three digits), optional `.fraction`. Returns the number and the index after it.
pub fn number_at(s: &str, pos: usize) -> Option<(Number, usize)> {
    let b = s.as_bytes();
    let mut i = pos;
    let mut mantissa: u128 = 0;
    let mut digits = 0usize;
    let push = |m: &mut u128, d: u8, n: &mut usize| -> Option<()> {
        *n += 1;
        if *n > MAX_DIGITS {
            return None;
        }
        *m = m.checked_mul(10)?.checked_add(u128::from(d - b'0'))?;
        Some(())
    };
    while i < b.len() && b[i].is_ascii_digit() {
        push(&mut mantissa, b[i], &mut digits)?;
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    // Thousands groups: ",ddd" not followed by another digit.
    while i + 3 < b.len() + 1
        && b.get(i) == Some(&b',')
        && b.get(i + 1..i + 4).is_some_and(|g| g.iter().all(u8::is_ascii_digit))
        && !b.get(i + 4).is_some_and(u8::is_ascii_digit)
    {
        for k in 1..4 {
            push(&mut mantissa, b[i + k], &mut digits)?;
        }
        i += 4;
    }
    let mut scale = 0u32;
    if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            push(&mut mantissa, b[i], &mut digits)?;
            scale += 1;
            i += 1;
        }
    }
    Some((Number { mantissa, scale }, i))
}

/// Reads a size (`number unit`) at `pos` of compact (lower-case, no whitespace) text. With
/// `short` the one-letter XLA units are accepted too. Returns bytes and the index after the unit.
pub fn size_at(s: &str, pos: usize, short: bool) -> Option<(u64, usize)> {
    let (n, end) = number_at(s, pos)?;
    let rest = s.get(end..)?;
    for (unit, mult) in UNITS.iter().chain(if short { SHORT_UNITS } else { &[] }) {
        if rest.starts_with(unit) {
            return Some((n.times(*mult)?, end + unit.len()));
        }
    }
    None
}

/// Reads an unsigned integer (no separators, no fraction) at `pos`.
pub fn uint_at(s: &str, pos: usize) -> Option<(u64, usize)> {
    let b = s.as_bytes();
    let mut i = pos;
    let mut v: u64 = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        v = v.checked_mul(10)?.checked_add(u64::from(b[i] - b'0'))?;
        i += 1;
        if i - pos > 20 {
            return None;
        }
    }
    (i > pos).then_some((v, i))
}

/// Reads a `u32` at `pos`.
pub fn u32_at(s: &str, pos: usize) -> Option<(u32, usize)> {
    let (v, end) = uint_at(s, pos)?;
    Some((u32::try_from(v).ok()?, end))
}

/// Formats bytes like `c10::format_size` (PyTorch): `N bytes` up to 1 KiB, else two decimals in
/// the largest of KiB, MiB, GiB that keeps the value ≤ 1024.
pub fn format_size(bytes: u64) -> String {
    if bytes <= KIB {
        format!("{bytes} bytes")
    } else if bytes <= MIB {
        format!("{:.2} KiB", bytes as f64 / KIB as f64)
    } else if bytes <= GIB {
        format!("{:.2} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{:.2} GiB", bytes as f64 / GIB as f64)
    }
}

/// Formats an integer with thousands separators (`1,073,741,824`), as CuPy prints byte counts.
pub fn format_grouped(v: u64) -> String {
    let digits = v.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn size(s: &str) -> Option<u64> {
        size_at(s, 0, false).map(|(v, _)| v)
    }

    #[test]
    fn units_and_decimals() {
        assert_eq!(size("1.50gib"), Some(3 * GIB / 2));
        assert_eq!(size("372.76mib"), Some((37_276 * MIB + 50) / 100));
        assert_eq!(size("33554432bytes"), Some(33_554_432));
        assert_eq!(size("0bytes"), Some(0));
        assert_eq!(size("1byte"), Some(1));
        assert_eq!(size("20.00mb"), Some(20 * MIB));
        assert_eq!(size("2gb"), Some(2 * GIB));
        assert_eq!(size("4kb"), Some(4096));
        assert_eq!(size("1.5kib"), Some(1536));
        assert_eq!(size("1tib"), Some(TIB));
        assert_eq!(size("268435456b"), Some(268_435_456));
        assert_eq!(size("1,073,741,824bytes"), Some(1 << 30));
        assert_eq!(size("17.51g"), None);
        assert_eq!(size_at("17.51gof", 0, true), Some(((1751 * GIB + 50) / 100, 6)));
        assert_eq!(size("gib"), None);
        assert_eq!(size("12"), None);
        assert_eq!(size("99999999999999999999999999999999gib"), None);
        assert_eq!(size("99999999999tib"), None);
    }

    #[test]
    fn thousands_groups_need_three_digits() {
        assert_eq!(number_at("1,5", 0).map(|(n, e)| (n.integer(), e)), Some((Some(1), 1)));
        assert_eq!(number_at("1,2345", 0).map(|(n, e)| (n.integer(), e)), Some((Some(1), 1)));
        assert_eq!(number_at("12,345,678.5x", 0).map(|(n, e)| (n.times(2), e)), Some((Some(24_691_357), 12)));
        assert_eq!(number_at("0,in", 0).map(|(n, e)| (n.integer(), e)), Some((Some(0), 1)));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(3 * GIB / 2), "1.50 GiB");
        assert_eq!(format_grouped(1_073_741_824), "1,073,741,824");
        assert_eq!(format_grouped(999), "999");
        assert_eq!(format_grouped(0), "0");
    }

    proptest! {
        #[test]
        fn c10_format_round_trips_within_rounding(bytes in 0u64..(1 << 52)) {
            let text = format_size(bytes).replace(' ', "").to_lowercase();
            let back = size(&text).unwrap();
            // Two decimals of the unit: error at most half a hundredth of the unit.
            let tol = if bytes <= KIB { 0 } else if bytes <= MIB { KIB / 200 + 1 }
                else if bytes <= GIB { MIB / 200 + 1 } else { GIB / 200 + 1 };
            prop_assert!(back.abs_diff(bytes) <= tol, "{bytes} -> {text} -> {back}");
        }

        #[test]
        fn exact_forms_round_trip(bytes in any::<u64>()) {
            prop_assert_eq!(size(&format!("{bytes}bytes")), Some(bytes));
            prop_assert_eq!(size(&format!("{}bytes", format_grouped(bytes))), Some(bytes));
            prop_assert_eq!(size(&format!("{bytes}b")), Some(bytes));
        }

        #[test]
        fn decimals_are_exact(int in 0u64..100_000, frac in 0u32..100) {
            let text = format!("{int}.{frac:02}mib");
            let expected = (u128::from(int * 100 + u64::from(frac)) * u128::from(MIB) + 50) / 100;
            prop_assert_eq!(size(&text).map(u128::from), Some(expected));
        }

        #[test]
        fn never_panics(s in "\\PC{0,40}", pos in 0usize..50) {
            let _ = size_at(&s, pos.min(s.len()), true);
            let _ = number_at(&s, pos.min(s.len()));
        }
    }
}
