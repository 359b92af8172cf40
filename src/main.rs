fn main() {
    std::process::exit(rill::cli::main());
}
