//! `weft`: the command-line front end. Each subcommand lives in its own file under `cmd/`;
//! this file only parses the command line and dispatches.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

/// weft: Go-style user-level threads for Rust servers, and the tools to measure them.
#[derive(Debug, Parser)]
#[command(name = "weft", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cmd::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
