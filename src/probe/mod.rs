//! PLACEHOLDER (probe helper replaces this)
pub mod scan_cmd;
