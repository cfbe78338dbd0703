//! Order statistics of repeated measurements: median, p95 and ratios.
//!
//! Percentiles interpolate linearly between order statistics (the "type 7" estimator of R and
//! NumPy), so a median of an even count is the mean of the two middle values. Nothing here
//! measures anything.

/// The `p`-th percentile (0..=100) of `samples`; `None` when empty or when a sample is not finite.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() || samples.iter().any(|x| !x.is_finite()) || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = p / 100.0 * (v.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    Some(v[lo] + (v[hi] - v[lo]) * (rank - lo as f64))
}

/// Median of `samples`.
pub fn median(samples: &[f64]) -> Option<f64> {
    percentile(samples, 50.0)
}

/// 95th percentile of `samples`.
pub fn p95(samples: &[f64]) -> Option<f64> {
    percentile(samples, 95.0)
}

/// `a / b` when both are known and `b` is positive.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => Some(a / b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_p95() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        let v: Vec<f64> = (1..=21).map(f64::from).collect();
        assert_eq!(p95(&v), Some(20.0));
        let five = [100.0, 110.0, 120.0, 130.0, 200.0];
        assert!((p95(&five).unwrap() - 186.0).abs() < 1e-9);
    }

    #[test]
    fn empty_or_nan_gives_none() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
        assert_eq!(percentile(&[1.0], 101.0), None);
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
        assert_eq!(ratio(Some(1.0), None), None);
        assert_eq!(ratio(Some(1.0), Some(4.0)), Some(0.25));
    }
}
