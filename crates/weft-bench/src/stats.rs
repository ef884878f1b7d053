//! The one median of the crate: every table and plot of repeated runs shows the median with
//! the min and max beside it, computed here.

/// (median, min, max) of `values` (not empty); sorts them. The median of an even count is the
/// mean of the middle two.
pub fn median_min_max(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    (median, values[0], values[n - 1])
}

/// The median of `values` (not empty), leaving them as they are.
pub fn median(values: &[f64]) -> f64 {
    median_min_max(&mut values.to_vec()).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max_of_odd_and_even_counts() {
        assert_eq!(median_min_max(&mut [3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(median_min_max(&mut [4.0, 1.0]), (2.5, 1.0, 4.0));
        assert_eq!(median(&[5.0, 1.0, 9.0, 7.0]), 6.0);
    }
}
