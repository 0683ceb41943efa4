//! Integration tests: one binary, driving the real `jobvisor` executable and real databases.

mod catalog_files;
mod cli;
mod engine;
mod operator;
mod runtime;
mod support;
