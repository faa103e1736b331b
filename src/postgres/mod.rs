//! PLACEHOLDER (postgres helper replaces this)
pub mod cli;
