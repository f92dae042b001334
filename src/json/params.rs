//! Integer params bounded to SQLite's signed 64-bit integers, and `expected_version`,
//! which refuses an explicit null.

use serde::Deserialize;

/// The largest integer param (`since_seq`, `expected_version`, ...): 2^63 - 1.
pub const MAX_INT_PARAM: u64 = i64::MAX as u64;

/// Deserializes an integer param that must fit SQLite's signed 64-bit integers
/// (0 to 2^63 - 1); anything larger is -32602 naming the field.
pub fn int_param<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    in_range(u64::deserialize(d)?)
}

fn in_range<E: serde::de::Error>(n: u64) -> std::result::Result<u64, E> {
    if n > MAX_INT_PARAM {
        return Err(E::custom(format!(
            "{n} is out of range: integer params are 0 to {MAX_INT_PARAM} (2^63 - 1); send a smaller number"
        )));
    }
    Ok(n)
}

/// [`int_param`] for an optional param (absent or null is None). Use with
/// `#[serde(default, deserialize_with = "crate::json::opt_int_param")]` and
/// `#[schemars(skip_serializing_if = "Option::is_none")]` (which keeps `"default": null`
/// out of the DescribeInterface schema).
pub fn opt_int_param<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<u64>, D::Error> {
    Option::<u64>::deserialize(d)?.map(in_range).transpose()
}

/// `expected_version` of Set and Delete: like [`opt_int_param`], but an explicit `null` is
/// refused rather than read as absent, so a client that meant to compare can never make
/// an unconditional write by sending null.
pub fn expected_version<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<u64>, D::Error> {
    match opt_int_param(d)? {
        None => Err(serde::de::Error::custom(
            "null is not a version; leave expected_version out for an unconditional write, send 0 to create only, or the version you read",
        )),
        some => Ok(some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Ints {
        #[serde(default, deserialize_with = "opt_int_param")]
        since_seq: Option<u64>,
        #[serde(default, deserialize_with = "int_param")]
        before_seq: u64,
    }

    #[test]
    fn integer_params_fit_a_signed_64_bit_integer() {
        let ok: Ints = serde_json::from_str(
            r#"{"since_seq":9223372036854775807,"before_seq":9223372036854775807}"#,
        )
        .unwrap();
        assert_eq!(ok.since_seq, Some(i64::MAX as u64));
        assert_eq!(ok.before_seq, i64::MAX as u64);
        let none: Ints = serde_json::from_str(r#"{"since_seq":null}"#).unwrap();
        assert_eq!(none.since_seq, None);
        for raw in [
            r#"{"since_seq":9223372036854775808}"#,
            r#"{"before_seq":18446744073709551615}"#,
        ] {
            let err = serde_json::from_str::<Ints>(raw).unwrap_err().to_string();
            assert!(
                err.contains("is out of range: integer params are 0 to 9223372036854775807"),
                "{err}"
            );
        }
    }
}
