//! Prints the DDL for a server version: `cargo run -p oomlens-schema --features clickhouse --example print_ddl -- 18.16.1`
fn main() {
    let v: oomlens_schema::ddl::ServerVersion =
        std::env::args().nth(1).unwrap_or_else(|| "26.9.1".into()).parse().unwrap_or_else(|e| panic!("{e}"));
    for t in oomlens_schema::ddl::tables() {
        println!("{};", t.create_sql("oomlens", v.caps(), Default::default()));
    }
}
