//! Reading reports back (`harness merge`): JSON has no NaN or infinity,
//! and serde_json writes them as `null`; these read a `null` where a number
//! is due as NaN, so that a report read back writes the same JSON again.

use serde::{Deserialize, Deserializer};

/// A number, or NaN for `null`.
pub fn f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}
