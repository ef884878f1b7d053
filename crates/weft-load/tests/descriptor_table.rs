//! A generator grows its descriptor table before it connects (`weft_load::limits`): its
//! process is threaded, and each doubling of the table while it connects would stall a
//! processor (docs/notes/scale.md).

use weft_load::limits::{reserve_descriptors, RESERVE_MAX};
use weft_testkit::descriptor_table_size;

#[test]
fn reserving_grows_the_table_before_any_connection() {
    let hard = weft::net::raise_descriptor_limit().unwrap();
    let want = hard.min(5000);
    let before = descriptor_table_size();
    reserve_descriptors(want).unwrap();
    let after = descriptor_table_size();
    assert!(
        after as u64 >= want && after <= RESERVE_MAX.max(want as usize) * 2,
        "table {after} (was {before}) after reserving {want}"
    );
}

#[test]
fn a_hard_limit_below_the_need_is_a_clear_error() {
    let err = reserve_descriptors(u64::MAX).unwrap_err().to_string();
    assert!(
        err.contains("hard limit") && err.contains("ulimit -Hn"),
        "{err}"
    );
}
