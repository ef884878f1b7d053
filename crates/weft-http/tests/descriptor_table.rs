//! Binding the server sizes the process's descriptor table for its connections and cached
//! files, so accepting never grows it while fibers are being served (growing it in a threaded
//! process waits for an RCU grace period: `weft::net::reserve_descriptors`). Its own test
//! binary: the table belongs to the whole process.

mod common;

use weft_testkit::descriptor_table_size;

use common::{config, tree};

#[test]
fn binding_the_server_sizes_the_descriptor_table_for_its_connection_limit() {
    let limit = weft::net::raise_descriptor_limit().unwrap() as usize;
    let dir = tree();
    let mut c = config(dir.path());
    c.max_connections = 3000.min(limit / 4);
    c.open_file_cache_entries = 1000.min(limit / 4);
    let want = c.max_connections + c.open_file_cache_entries;
    let before = descriptor_table_size();
    assert!(before < want, "table already {before}: nothing to check");
    let server = common::TestServer::start(c);
    let after = descriptor_table_size();
    assert!(
        after >= want,
        "descriptor table {after} (was {before}) for {want} descriptors"
    );
    server.stop().unwrap();
}
