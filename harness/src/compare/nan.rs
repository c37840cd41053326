//! Reading reports back (`harness merge`): JSON has no NaN or infinity,
//! and serde_json writes them as `null`; these read a `null` where a number
//! is due as NaN, so that a report read back writes the same JSON again.

use serde::{Deserialize, Deserializer};

/// A number, or NaN for `null`.
pub fn f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Numbers, each `null` read as NaN.
pub fn vec_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let v = Vec::<Option<f64>>::deserialize(d)?;
    Ok(v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
}
