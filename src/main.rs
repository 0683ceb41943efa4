//! The `jobvisor` binary: parses the command line and exits with a documented code.

fn main() {
    std::process::exit(jobvisor::cli::main());
}
