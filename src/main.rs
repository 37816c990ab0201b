//! The `uwf` binary: one call into the CLI layer.

fn main() -> std::process::ExitCode {
    uwf::cli::main()
}
