//! clickhouse (in progress)
