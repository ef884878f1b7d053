//! Starting the server sizes the process's descriptor table for its connection limit (`-c`),
//! so accepting connections never grows it while fibers are being served (growing it in a
//! threaded process waits for an RCU grace period: `weft::net::reserve_descriptors`). Its own
//! test binary: the table belongs to the whole process.

mod common;

use common::{test_settings, WeftServer};
use weft_cache::Settings;
use weft_testkit::descriptor_table_size;

#[test]
fn starting_the_server_sizes_the_descriptor_table_for_its_connection_limit() {
    let limit = weft::net::raise_descriptor_limit().unwrap() as usize;
    let max_connections = 5000.min(limit - 100);
    let before = descriptor_table_size();
    assert!(
        before < max_connections,
        "table already {before}: nothing to check"
    );
    let server = WeftServer::start(Settings {
        max_connections,
        ..test_settings()
    });
    let after = descriptor_table_size();
    assert!(
        after >= max_connections,
        "descriptor table {after} (was {before}) for -c {max_connections}"
    );
    drop(server);
}
